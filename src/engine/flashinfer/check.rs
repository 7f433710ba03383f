//! The check of a managed store read back from disk, without a GPU: each
//! file of `<root>/v2/` that cannot be trusted, named with why. No symlink
//! is followed below the root, nothing is written.
//!
//! An environment's directory is trusted when its name is the hash of its
//! `manifest.json` ([`super::env16`]); an entry file when it is a regular
//! file holding a JSON object whose `key` hashes to its stem
//! ([`super::entry_stem`]) and which has the `runner` and `tactic`
//! FlashInfer's lookup reads. A finding on a directory or on its
//! `manifest.json` leaves none of its entries trusted. Anything else in the
//! tree is named too; keepwrap's own sidecars and temp files are not (the
//! cache's checks judge those). What a name and a hash cannot tell (a
//! tactic edited in place) is the signature's to catch.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{
    entry_key, entry_stem, env16, is_hex_name, is_tmp, layout, Why, ENTRIES, ENV_DIGITS, MANIFEST,
    SCHEMA_DIR,
};
use crate::cache::fsx::{self, Kind};
use crate::cache::{Role, CACHE_EXT};

/// The largest manifest or entry file read: FlashInfer writes a few
/// hundred bytes.
pub const MAX_FILE: u64 = 1 << 20;

/// A file of the store that cannot be trusted: its path below the store's
/// root (a directory's ends in `/`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub path: String,
    pub why: Why,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.why)
    }
}

/// Each file of the managed store below `root` (its `v2/` tree) that
/// cannot be trusted, in path order; none when there is no `v2/`. Err:
/// `root` cannot be opened.
pub fn check(root: &Path) -> io::Result<Vec<Finding>> {
    check_with(root, true)
}

/// [`check`] of the environments' directories and manifests only, no
/// entry read: for a store whose entries were checked when they were
/// signed (each entry's signature holds its bytes since).
pub fn check_dirs(root: &Path) -> io::Result<Vec<Finding>> {
    check_with(root, false)
}

fn check_with(root: &Path, entries: bool) -> io::Result<Vec<Finding>> {
    let root = fsx::open_root(root)?;
    let mut cx = Cx {
        out: Vec::new(),
        buf: Vec::new(),
        names: crate::cache::dirents::large_buf(),
        entries,
    };
    let v2 = show(b"", SCHEMA_DIR);
    match fsx::lstat_at(root.as_fd(), SCHEMA_DIR) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(cx.out),
        Err(e) => cx.push(v2, Why::Unreadable(e.to_string())),
        Ok(st) => match Kind::from_mode(st.st_mode) {
            Kind::Dir => cx.dir(root.as_fd(), SCHEMA_DIR, &v2, Cx::schema),
            kind => cx.push(v2, Why::NotDir(kind.name())),
        },
    }
    cx.out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(cx.out)
}

struct Cx {
    out: Vec<Finding>,
    /// A file's bytes.
    buf: Vec<u8>,
    /// The records of one directory listing.
    names: Vec<u8>,
    /// Whether entry files are read and checked.
    entries: bool,
}

/// A directory's entries: its name and kind, sorted by name.
type Listing = Vec<(Vec<u8>, Kind)>;

impl Cx {
    fn push(&mut self, path: String, why: Why) {
        self.out.push(Finding { path, why });
    }

    /// Open the directory `name` of `parent` (shown as `path`, ending in
    /// `/`), list it and `visit` it; a failure is a finding.
    fn dir(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &[u8],
        path: &str,
        visit: fn(&mut Cx, BorrowedFd<'_>, &str, Listing),
    ) {
        let path = format!("{path}/");
        let listed = fsx::open_dir_at(parent, name)
            .and_then(|fd| list(fd.as_fd(), &mut self.names).map(|l| (fd, l)));
        match listed {
            Ok((fd, listing)) => visit(self, fd.as_fd(), &path, listing),
            Err(e) => self.push(path, Why::Unreadable(e.to_string())),
        }
    }

    /// `v2/`: environment directories only.
    fn schema(&mut self, fd: BorrowedFd<'_>, path: &str, listing: Listing) {
        for (name, kind) in listing {
            let at = show(path.as_bytes(), &name);
            match kind {
                Kind::Dir if is_hex_name(&name, ENV_DIGITS) => self.dir(fd, &name, &at, Cx::env),
                Kind::Dir => self.push(format!("{at}/"), Why::Stray),
                kind => self.push(at, stray(kind)),
            }
        }
    }

    /// `v2/<env16>/`: its manifest, its entries, FlashInfer's temp files.
    fn env(&mut self, fd: BorrowedFd<'_>, path: &str, listing: Listing) {
        let name = path
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        if !listing.iter().any(|(n, _)| n == MANIFEST) {
            self.push(path.to_string(), Why::NoManifest);
        }
        for (entry, kind) in listing {
            let at = show(path.as_bytes(), &entry);
            match (entry.as_slice(), kind) {
                (MANIFEST, Kind::File) => match self.read(fd, &entry).and_then(|b| env16(&b)) {
                    Ok(want) if want == name => {}
                    Ok(want) => self.push(
                        path.to_string(),
                        Why::DirNotManifestHash {
                            name: name.clone(),
                            want,
                        },
                    ),
                    Err(why) => self.push(at, why),
                },
                (MANIFEST, kind) => self.push(at, Why::NotRegular(kind.name())),
                (ENTRIES, Kind::Dir) if self.entries => self.dir(fd, &entry, &at, Cx::entries),
                (ENTRIES, Kind::Dir) => {}
                (ENTRIES, kind) => self.push(at, Why::NotDir(kind.name())),
                (n, Kind::File) if is_tmp(n) => self.push(at, Why::Temp),
                (_, kind) => self.push(at, stray(kind)),
            }
        }
    }

    /// `v2/<env16>/entries/`: entry files.
    fn entries(&mut self, fd: BorrowedFd<'_>, path: &str, listing: Listing) {
        for (name, kind) in listing {
            let at = show(path.as_bytes(), &name);
            match (layout::role(&name), kind) {
                (Role::Cache, Kind::File) => {
                    let stem = &name[..name.len() - CACHE_EXT.len()];
                    match self.read(fd, &name).and_then(|b| entry_key(&b)) {
                        Ok(key) => {
                            let want = entry_stem(&key);
                            if want.as_bytes() != stem {
                                let name = String::from_utf8_lossy(stem).into_owned();
                                self.push(at, Why::StemNotKeyHash { name, want });
                            }
                        }
                        Err(why) => self.push(at, why),
                    }
                }
                (Role::AutotunerTmp, Kind::File) => self.push(at, Why::Temp),
                (Role::Sidecar | Role::KeepwrapTmp, Kind::File) => {}
                (_, kind) => self.push(at, stray(kind)),
            }
        }
    }

    /// The regular file `name` of `dir`, no symlink followed.
    fn read(&mut self, dir: BorrowedFd<'_>, name: &[u8]) -> Result<Vec<u8>, Why> {
        match fsx::read_at(dir, name, &mut self.buf, MAX_FILE) {
            Ok(_) => Ok(std::mem::take(&mut self.buf)),
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                Err(Why::Unreadable(format!("{e}, not a regular file")))
            }
            Err(e) => Err(Why::Unreadable(e.to_string())),
        }
    }
}

/// The entries of the open directory `dir`, sorted by name; an entry the
/// file system gives no type is looked at (`lstat`), and one gone meanwhile
/// left out.
fn list(dir: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Listing> {
    let mut out = Vec::new();
    crate::cache::dirents::for_each(dir, buf, &mut |e| {
        out.push((e.name.to_vec(), e.kind));
        true
    })?;
    let mut listing: Listing = out
        .into_iter()
        .filter_map(|(name, kind)| {
            let kind = match kind {
                Some(k) => k,
                None => Kind::from_mode(fsx::lstat_at(dir, name.as_slice()).ok()?.st_mode),
            };
            Some((name, kind))
        })
        .collect();
    listing.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(listing)
}

/// Why an entry that is not a file of the store is named: what it is when
/// not a regular file, else that it is not the store's.
fn stray(kind: Kind) -> Why {
    match kind {
        Kind::File | Kind::Dir => Why::Stray,
        kind => Why::NotRegular(kind.name()),
    }
}

/// `prefix` then `name`, a name not UTF-8 shown with U+FFFD.
fn show(prefix: &[u8], name: &[u8]) -> String {
    let mut s = String::from_utf8_lossy(prefix).into_owned();
    s.push_str(&std::ffi::OsStr::from_bytes(name).to_string_lossy());
    s
}

//! The store: whole sets of cache files signed for other launches, kept
//! apart inside the cache root and brought back when their launch returns.
//!
//! Everything lives in `<root>/.keepwrap/` (hidden: neither the engine nor
//! keepwrap's cache walk reads it), on the cache's own file system, so every
//! move is a `rename`:
//!
//! ```text
//! .keepwrap/lock                  the lock (src/lock.rs)
//! .keepwrap/stats.json            statistics (src/stats.rs)
//! .keepwrap/launches/<fp>.json    a signed launch: redacted inputs, times
//! .keepwrap/store/<fp>/.set.json  a stored set's manifest
//! .keepwrap/store/<fp>/<name>     a flat entry: the set's one directory,
//!                                 its files and sidecars
//! .keepwrap/store/<fp>/<path>     a tree entry: its files and sidecars at
//!                                 their paths
//! .keepwrap/store/<fp>.in-<id>/   a set being stored (staging)
//! .keepwrap/restoring-<fp>/       a set being restored
//! .keepwrap/trash-<id>/           an entry being deleted
//! ```
//!
//! A set that is the whole content of one directory (the usual case: one
//! `<key16>` directory of rank files) is stored flat: the directory itself
//! moves into the store with one rename, and the launch's set manifest
//! (`.keepwrap/sets/<fp>.json`, format 2) moves into it as its `.set.json`;
//! nothing is created, so storing costs two renames whatever the file
//! system's inode allocator does. Any other set is stored as a tree, file
//! by file, with a manifest of its own (format 1: the layout of earlier
//! versions, still read and restored as it always was). Which one an entry
//! is, its manifest says: a format-2 set manifest is flat, a format-1
//! store manifest a tree; anything else is not trusted.
//!
//! Crash safety: a set enters the store through a staging directory that
//! is renamed to `store/<fp>` only once every member is inside; a restore
//! first renames `store/<fp>` to `restoring-<fp>`, then moves the members
//! out. [`Store::recover`] runs first on every launch, under the lock:
//! staging rolls BACK (every member returns to its path, and prune judges
//! the set again), restoring rolls FORWARD, trash is deleted. A move never
//! replaces an existing entry (`RENAME_NOREPLACE`); when a path is taken by
//! a file that is not the set's, the set is not put together from parts.
//! A flat staging or restoring directory without its `.set.json` (the
//! directory moved, the manifest not yet) is put back or in place by the
//! launch's set manifest in `.keepwrap/sets/`.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cache::fsx::split;
use crate::cache::{self, fsx, ForeignSet, Member, SetManifest};
use crate::launch::canonical::{self, Style};
use crate::STATE_DIR;

/// The manifest inside a stored set's directory.
const MANIFEST: &str = ".set.json";
const FORMAT: u32 = 1;
/// The format of a flat entry's manifest: the launch's set manifest.
const FLAT_FORMAT: u32 = crate::SIDECAR_FORMAT;
const DIR_MODE: u32 = 0o755;

/// How much the store may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_size: u64,
    pub max_age: Duration,
}

/// A stored set's manifest (`.set.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub fingerprint: String,
    pub set_id: String,
    pub signed_at: u64,
    pub stored_at: u64,
    pub members: Vec<Member>,
    /// A flat entry: the members are directly in the entry's directory
    /// (they share one directory in the tree). Not written: a flat entry's
    /// manifest is the launch's set manifest.
    #[serde(skip)]
    pub flat: bool,
}

impl Manifest {
    /// The one directory (relative to the root) every member is in, for a
    /// flat entry.
    fn origin(&self) -> Option<&str> {
        let first = split(&self.members.first()?.path).0;
        (!first.is_empty() && self.members.iter().all(|m| split(&m.path).0 == first))
            .then_some(first)
    }
}

/// A directory holding members: at their paths below it (the cache tree,
/// a tree entry), or all of them directly in it (a flat entry).
#[derive(Clone, Copy)]
struct Side<'a> {
    fd: BorrowedFd<'a>,
    flat: bool,
}

/// The directory a member's files are in: the side's own, or one below it.
enum Held<'a> {
    Here(BorrowedFd<'a>),
    Below(OwnedFd),
}

impl Held<'_> {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Held::Here(fd) => *fd,
            Held::Below(fd) => fd.as_fd(),
        }
    }
}

impl<'a> Side<'a> {
    fn tree(fd: BorrowedFd<'a>) -> Side<'a> {
        Side { fd, flat: false }
    }

    fn of(fd: BorrowedFd<'a>, man: &Manifest) -> Side<'a> {
        Side { fd, flat: man.flat }
    }

    /// Where the files of the member at `path` are: only for a path shaped
    /// like the engine's cache, so that the store never moves anything else.
    fn dir(&self, path: &str) -> Option<Held<'a>> {
        if self.flat {
            return cache::is_cache_file(Path::new(path)).then_some(Held::Here(self.fd));
        }
        member_dir(self.fd, path).map(Held::Below)
    }

    /// [`Side::dir`], creating the missing directories of a tree.
    fn ensure(&self, path: &str) -> io::Result<Held<'a>> {
        if self.flat {
            return Ok(Held::Here(self.fd));
        }
        fsx::ensure_dir_path(self.fd, Path::new(split(path).0), DIR_MODE).map(Held::Below)
    }
}

/// A signed launch (`launches/<fp>.json`): what went into its fingerprint
/// (env values and secret-named values as hashes only, as `fingerprint
/// --explain` shows them) and when it was signed and used.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchRecord {
    pub format: u32,
    pub fingerprint: String,
    pub profile: String,
    /// `Launch::redacted_inputs()`.
    pub inputs: Value,
    pub first_signed: u64,
    pub last_signed: u64,
    pub last_used: u64,
    pub files: usize,
}

/// One entry of the store.
#[derive(Debug, Clone)]
pub struct Entry {
    pub manifest: Manifest,
    /// Bytes of its files and sidecars.
    pub bytes: u64,
}

/// What a restore brought back.
#[derive(Debug, Clone)]
pub struct Restored {
    pub paths: Vec<PathBuf>,
    pub signed_at: u64,
}

use crate::clock::now_secs;

fn is_fp(name: &str) -> bool {
    cache::is_sha256_hex(name)
}

/// The two names of a member in its directory: the cache file and its
/// sidecar.
fn names(name: &str) -> [CString; 2] {
    let stem = name.strip_suffix(".json").unwrap_or(name);
    [
        CString::new(name).unwrap_or_default(),
        CString::new(format!("{stem}.launch")).unwrap_or_default(),
    ]
}

/// "5 minutes ago", "2 days ago".
pub fn ago(then: u64, now: u64) -> String {
    let s = now.saturating_sub(then);
    let (n, unit) = if s < 60 {
        (s, "second")
    } else if s < 3600 {
        (s / 60, "minute")
    } else if s < 86400 {
        (s / 3600, "hour")
    } else {
        (s / 86400, "day")
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

pub struct Store {
    root: PathBuf,
    root_fd: OwnedFd,
    state: OwnedFd,
    store: OwnedFd,
    launches: OwnedFd,
    /// `.keepwrap/sets`, opened (created) when first needed.
    sets: std::cell::OnceCell<Option<OwnedFd>>,
    /// The directory above the last set stored flat (relative path): sets
    /// of one such directory follow each other.
    updir: std::cell::RefCell<Option<(String, std::sync::Arc<OwnedFd>)>>,
    /// Something moved into the store and is not fsynced yet.
    unsynced: std::cell::Cell<bool>,
}

/// Where a member's two files are, relative to a base directory: only
/// for a path shaped like the engine's cache (`<version>/sm<arch>/<key16>/
/// rank_*.json`), so that the store never moves anything else.
fn member_dir(base: BorrowedFd<'_>, path: &str) -> Option<OwnedFd> {
    if !cache::is_cache_file(Path::new(path)) {
        return None;
    }
    fsx::open_dir_path(base, Path::new(split(path).0)).ok()
}

/// Move the files of `members` found under `from` to the same paths under
/// `to`. Returns the number of files moved, or the first error (files moved
/// before it stay moved). Directories fsynced once each.
fn move_members(from: Side<'_>, to: Side<'_>, members: &[Member]) -> io::Result<usize> {
    let mut moved = 0;
    let mut touched: BTreeMap<String, Held<'_>> = BTreeMap::new();
    for m in members {
        let (parent, name) = split(&m.path);
        let Some(src) = from.dir(&m.path) else {
            continue;
        };
        let [json, launch] = names(name);
        let any = fsx::exists_at(src.fd(), json.as_c_str())
            || fsx::exists_at(src.fd(), launch.as_c_str());
        if !any {
            continue;
        }
        let dst = to.ensure(&m.path)?;
        for n in [&json, &launch] {
            if fsx::exists_at(src.fd(), n.as_c_str()) {
                fsx::rename_noreplace(src.fd(), n.as_c_str(), dst.fd(), n.as_c_str())?;
                moved += 1;
                crate::failpoint::hit("store");
            }
        }
        touched.entry(parent.to_string()).or_insert(dst);
    }
    // Each rename is atomic in the file system's journal: a file is in one
    // directory or the other even after a power loss. fsync only for
    // durability, once per destination directory.
    for dst in touched.values() {
        let _ = fsx::fsync_dir(dst.fd());
    }
    Ok(moved)
}

/// The directories (relative to the entry) that hold the members of a
/// stored set, once each.
fn entry_parents(man: &Manifest) -> Vec<&str> {
    if man.flat {
        return vec![""];
    }
    member_parents(man)
}

/// The directories (relative to the root) that hold the members of a set,
/// once each.
fn member_parents(man: &Manifest) -> Vec<&str> {
    let mut parents: Vec<&str> = man.members.iter().map(|m| split(&m.path).0).collect();
    parents.sort_unstable();
    parents.dedup();
    parents
}

/// Files of `members` under `from` whose path under `to` is taken.
fn conflicts(from: Side<'_>, to: Side<'_>, members: &[Member]) -> Vec<String> {
    let mut out = Vec::new();
    for m in members {
        let Some(src) = from.dir(&m.path) else {
            continue;
        };
        let dst = to.dir(&m.path);
        for n in names(split(&m.path).1) {
            if fsx::exists_at(src.fd(), n.as_c_str())
                && dst
                    .as_ref()
                    .is_some_and(|d| fsx::exists_at(d.fd(), n.as_c_str()))
            {
                out.push(m.path.clone());
            }
        }
    }
    out
}

/// Read the record `name` of `dir` (`shown`: the directory for the log,
/// `.keepwrap/launches` say). None when there is none; a record that is not
/// a regular file, too large or not valid JSON is ignored with one warning.
fn read_json<T: for<'de> Deserialize<'de>>(
    dir: BorrowedFd<'_>,
    shown: &str,
    name: &str,
) -> Option<T> {
    let warn =
        |e: &io::Error| fsx::warn_state_file(&format!("{shown}/{name}"), e, "it is not used");
    let buf = match fsx::read_state_file(dir, name, fsx::STATE_FILE_MAX) {
        Ok(buf) => buf?,
        Err(e) => {
            warn(&e);
            return None;
        }
    };
    match serde_json::from_slice(&buf) {
        Ok(v) => Some(v),
        Err(e) => {
            warn(&io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not valid: {e}"),
            ));
            None
        }
    }
}

fn write_json<T: Serialize>(dir: BorrowedFd<'_>, name: &str, value: &T) -> io::Result<()> {
    write_json_with(dir, name, value, true)
}

/// [`write_json`]; with `sync` false, nothing is fsynced (the caller
/// orders durability itself).
fn write_json_with<T: Serialize>(
    dir: BorrowedFd<'_>,
    name: &str,
    value: &T,
    sync: bool,
) -> io::Result<()> {
    let mut bytes = canonical::to_python_json(value, Style::INDENT2)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    bytes.push(b'\n');
    let name = CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    fsx::write_atomic_at_with(dir, &name, &bytes, 0o644, sync)?;
    if sync {
        fsx::fsync_dir(dir)?;
    }
    Ok(())
}

/// The manifest of a flat entry, from the launch's set manifest `m` (checked
/// whole: its id is the hash of its members): None unless every member is
/// in one directory.
fn flat_manifest(m: SetManifest, stored_at: u64) -> Option<Manifest> {
    let man = Manifest {
        format: FLAT_FORMAT,
        fingerprint: m.fingerprint,
        set_id: m.id,
        signed_at: m.signed_at,
        stored_at,
        members: m.members,
        flat: true,
    };
    man.origin().is_some().then_some(man)
}

/// The manifest of the entry (or staging, or restoring directory) `dir`
/// (`shown` for the log): a format-1 store manifest (a tree entry) or a
/// format-2 set manifest whose members share one directory (a flat entry).
/// None when there is none; any other is not used, with one warning.
fn read_manifest_at(dir: BorrowedFd<'_>, shown: &str) -> Option<Manifest> {
    let v: Value = read_json(dir, shown, MANIFEST)?;
    let bad = |why: String| {
        fsx::warn_state_file(
            &format!("{shown}/{MANIFEST}"),
            &io::Error::new(io::ErrorKind::InvalidData, why),
            "it is not used",
        );
        None
    };
    match v.get("format").and_then(Value::as_u64) {
        Some(f) if f == u64::from(FORMAT) => match serde_json::from_value::<Manifest>(v) {
            Ok(m) => Some(m),
            Err(e) => bad(format!("not valid: {e}")),
        },
        Some(f) if f == u64::from(FLAT_FORMAT) => {
            let m = match serde_json::from_value::<SetManifest>(v) {
                Ok(m) => m,
                Err(e) => return bad(format!("not valid: {e}")),
            };
            if let Err(e) = cache::validate_manifest(&m, &m.fingerprint.clone()) {
                return bad(format!("not valid: {e}"));
            }
            // Stored when its manifest moved in (nothing changes it since).
            let stored_at = fsx::stat_fd(dir).map_or(0, |st| st.st_mtime.max(0) as u64);
            flat_manifest(m, stored_at)
                .or_else(|| bad("its members are not in one directory".into()))
        }
        f => bad(format!("format {f:?}, which this version does not read")),
    }
}

/// Does `dir` hold a cache file or sidecar directly (a flat set's
/// directory, not a tree)?
fn holds_rank_files(dir: BorrowedFd<'_>) -> bool {
    fsx::list_dir(dir).is_ok_and(|list| {
        list.iter().any(|(n, _)| {
            let n = String::from_utf8_lossy(n);
            n.starts_with("rank_") && (n.ends_with(".json") || n.ends_with(".launch"))
        })
    })
}

impl Store {
    /// Open (creating) `<root>/.keepwrap/` and its directories. The root
    /// must exist.
    pub fn open(root: &Path) -> io::Result<Store> {
        let root_fd = fsx::open_root(root)?;
        let state = fsx::open_state_dir_at(root_fd.as_fd(), STATE_DIR, Some(DIR_MODE))?;
        let store = fsx::open_state_dir_at(state.as_fd(), "store", Some(DIR_MODE))?;
        let launches = fsx::open_state_dir_at(state.as_fd(), "launches", Some(DIR_MODE))?;
        Ok(Store {
            root: root.to_path_buf(),
            root_fd,
            state,
            store,
            launches,
            sets: std::cell::OnceCell::new(),
            updir: std::cell::RefCell::new(None),
            unsynced: std::cell::Cell::new(false),
        })
    }

    /// Open an existing store read-only; None when there is none.
    pub fn open_existing(root: &Path) -> Option<Store> {
        let root_fd = fsx::open_root(root).ok()?;
        let state = fsx::open_state_dir_at(root_fd.as_fd(), STATE_DIR, None).ok()?;
        let store = fsx::open_state_dir_at(state.as_fd(), "store", None).ok()?;
        let launches = fsx::open_state_dir_at(state.as_fd(), "launches", None).ok()?;
        Some(Store {
            root: root.to_path_buf(),
            root_fd,
            state,
            store,
            launches,
            sets: std::cell::OnceCell::new(),
            updir: std::cell::RefCell::new(None),
            unsynced: std::cell::Cell::new(false),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn state_fd(&self) -> BorrowedFd<'_> {
        self.state.as_fd()
    }

    // ---- recovery --------------------------------------------------------

    /// Finish or undo what a killed keepwrap left halfway. Run under the
    /// lock, before prune. Returns the number of sets recovered.
    pub fn recover(&self) -> usize {
        let mut n = 0;
        if let Ok(list) = fsx::list_dir(self.store.as_fd()) {
            for (name, _) in list {
                let Ok(name) = String::from_utf8(name) else {
                    continue;
                };
                if let Some((fp, _)) = name.split_once(".in-") {
                    self.recover_staging(&name, fp);
                    n += 1;
                }
            }
        }
        if let Ok(list) = fsx::list_dir(self.state.as_fd()) {
            for (name, _) in list {
                let Ok(name) = String::from_utf8(name) else {
                    continue;
                };
                if let Some(fp) = name.strip_prefix("restoring-") {
                    self.recover_restoring(&name, fp);
                    n += 1;
                } else if name.starts_with("trash-") {
                    let _ = fsx::remove_tree_at(self.state.as_fd(), name.as_bytes());
                } else if fsx::is_keepwrap_tmp(name.as_bytes()) {
                    let _ = fsx::unlink_at(self.state.as_fd(), name.as_bytes());
                }
            }
        }
        n
    }

    /// The directory `up` below `root`, kept open for the next set.
    fn up_dir(&self, root: BorrowedFd<'_>, up: &str) -> io::Result<std::sync::Arc<OwnedFd>> {
        let mut cached = self.updir.borrow_mut();
        if let Some((p, fd)) = cached.as_ref() {
            if p == up {
                return Ok(fd.clone());
            }
        }
        let fd = std::sync::Arc::new(fsx::open_dir_path(root, Path::new(up))?);
        *cached = Some((up.to_string(), fd.clone()));
        Ok(fd)
    }

    /// `.keepwrap/sets`, opened (and created) once.
    fn sets(&self) -> io::Result<BorrowedFd<'_>> {
        self.sets
            .get_or_init(|| cache::open_sets(self.root_fd.as_fd(), true).ok())
            .as_ref()
            .map(AsFd::as_fd)
            .ok_or_else(|| io::Error::other(format!("cannot open {STATE_DIR}/sets")))
    }

    /// The manifest of a flat staging or restoring directory `dir` of
    /// launch `fp`: its own `.set.json`, or, when the directory moved and
    /// its manifest not yet, the launch's set manifest. The bool: it is
    /// inside.
    fn flat_or_tree_manifest(
        &self,
        dir: BorrowedFd<'_>,
        shown: &str,
        fp: &str,
    ) -> Option<(Manifest, bool)> {
        if let Some(man) = read_manifest_at(dir, shown) {
            return Some((man, true));
        }
        if !holds_rank_files(dir) {
            return None;
        }
        let sets = self.sets().ok();
        let m = cache::read_manifest(sets, fp).ok()?;
        flat_manifest(m, now_secs()).map(|man| (man, false))
    }

    /// A set was being stored: put every member back at its path.
    fn recover_staging(&self, name: &str, fp: &str) {
        let Ok(dir) = fsx::open_dir_at(self.store.as_fd(), name) else {
            return;
        };
        let shown = format!("{STATE_DIR}/store/{name}");
        let Some((man, inside)) = self.flat_or_tree_manifest(dir.as_fd(), &shown, fp) else {
            // A tree's manifest is written before any member moves; a flat
            // directory without one is put back by its launch's manifest.
            if holds_rank_files(dir.as_fd()) {
                crate::events::store::recovery_store_failed(
                    fp,
                    "it has no manifest to put it back by",
                );
            }
            let _ = fsx::remove_tree_at(self.store.as_fd(), name.as_bytes());
            return;
        };
        if man.flat {
            drop(dir);
            match self.unstage_flat(self.store.as_fd(), name, &man, inside) {
                Ok(k) => crate::events::store::recovery_store_undone(fp, k),
                Err(e) => crate::events::store::recovery_store_failed(fp, e),
            }
            let _ = fsx::remove_tree_at(self.store.as_fd(), name.as_bytes());
            let _ = fsx::fsync_dir(self.store.as_fd());
            return;
        }
        let root = Side::tree(self.root_fd.as_fd());
        let taken = conflicts(Side::tree(dir.as_fd()), root, &man.members);
        if !taken.is_empty() {
            crate::events::store::recovery_store_taken(fp, &taken[0]);
        } else {
            match move_members(Side::tree(dir.as_fd()), root, &man.members) {
                Ok(k) => crate::events::store::recovery_store_undone(fp, k),
                Err(e) => crate::events::store::recovery_store_failed(fp, e),
            }
        }
        let _ = fsx::remove_tree_at(self.store.as_fd(), name.as_bytes());
        let _ = fsx::fsync_dir(self.store.as_fd());
    }

    /// Put the flat directory `name` of `parent` (staging, restoring) back
    /// at its place in the tree, its manifest (`inside` it) back among the
    /// set manifests: the directory with one rename, or, when its place is
    /// taken by a directory, file by file unless a file is in the way.
    /// Returns the number of files moved.
    fn unstage_flat(
        &self,
        parent: BorrowedFd<'_>,
        name: &str,
        man: &Manifest,
        inside: bool,
    ) -> io::Result<usize> {
        let origin = man
            .origin()
            .ok_or_else(|| io::Error::other("the set is not in one directory"))?;
        let dir = fsx::open_dir_at(parent, name)?;
        if inside {
            let to = cache::manifest_name(&man.fingerprint);
            let sets = self.sets()?;
            if fsx::rename_between(dir.as_fd(), MANIFEST, sets, to.as_str()).is_err() {
                let _ = fsx::unlink_at(dir.as_fd(), MANIFEST);
            }
            crate::failpoint::hit("store");
        }
        let (up, base) = split(origin);
        let dst = fsx::ensure_dir_path(self.root_fd.as_fd(), Path::new(up), DIR_MODE)?;
        // An empty directory left at its place (its files removed one by
        // one) does not stand in the way.
        let _ = nix::unistd::unlinkat(dst.as_fd(), base, nix::unistd::UnlinkatFlags::RemoveDir);
        match fsx::rename_noreplace(parent, name, dst.as_fd(), base) {
            Ok(()) => {
                let _ = fsx::fsync_dir(dst.as_fd());
                Ok(man.members.len() * 2)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let from = Side {
                    fd: dir.as_fd(),
                    flat: true,
                };
                let root = Side::tree(self.root_fd.as_fd());
                if let Some(t) = conflicts(from, root, &man.members).first() {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("{t} is taken"),
                    ));
                }
                move_members(from, root, &man.members)
            }
            Err(e) => Err(e),
        }
    }

    /// A set was being restored: finish moving it in place; if a path is
    /// taken, put it back in the store.
    fn recover_restoring(&self, name: &str, fp: &str) {
        let Ok(dir) = fsx::open_dir_at(self.state.as_fd(), name) else {
            return;
        };
        let shown = format!("{STATE_DIR}/{name}");
        let Some((man, inside)) = self.flat_or_tree_manifest(dir.as_fd(), &shown, fp) else {
            // Every member moved out: only the empty directories are left.
            let _ = fsx::remove_tree_at(self.state.as_fd(), name.as_bytes());
            return;
        };
        if man.flat {
            drop(dir);
            match self.unstage_flat(self.state.as_fd(), name, &man, inside) {
                Ok(k) => {
                    crate::events::store::recovery_restore_finished(fp, k);
                    let _ = fsx::remove_tree_at(self.state.as_fd(), name.as_bytes());
                    let _ = fsx::fsync_dir(self.state.as_fd());
                    return;
                }
                Err(e) => crate::events::store::recovery_restore_failed(fp, e),
            }
            self.unrestore(name, &man);
            return;
        }
        let root = Side::tree(self.root_fd.as_fd());
        let taken = conflicts(Side::tree(dir.as_fd()), root, &man.members);
        if taken.is_empty() {
            match move_members(Side::tree(dir.as_fd()), root, &man.members) {
                Ok(k) => {
                    crate::events::store::recovery_restore_finished(fp, k);
                    let _ = fsx::remove_tree_at(self.state.as_fd(), name.as_bytes());
                    let _ = fsx::fsync_dir(self.state.as_fd());
                    return;
                }
                Err(e) => crate::events::store::recovery_restore_failed(fp, e),
            }
        } else {
            crate::events::store::recovery_restore_taken(fp, &taken[0]);
        }
        self.unrestore(name, &man);
    }

    /// Move the members already in place back into `restoring-<fp>` (and a
    /// flat set's manifest) and return it to `store/<fp>`.
    fn unrestore(&self, name: &str, man: &Manifest) {
        let Ok(dir) = fsx::open_dir_at(self.state.as_fd(), name) else {
            return;
        };
        let side = Side::of(dir.as_fd(), man);
        // Only files the set does not hold any more, and only when they are
        // its bytes (the cache file) or its sidecar.
        let placed: Vec<Member> = man
            .members
            .iter()
            .filter(|m| {
                let [json, _] = names(split(&m.path).1);
                let held = side
                    .dir(&m.path)
                    .is_some_and(|d| fsx::exists_at(d.fd(), json.as_c_str()));
                !held && self.in_place_matches(m)
            })
            .cloned()
            .collect();
        let _ = move_members(Side::tree(self.root_fd.as_fd()), side, &placed);
        if man.flat && !fsx::exists_at(dir.as_fd(), MANIFEST) {
            if let Ok(sets) = self.sets() {
                let from = cache::manifest_name(&man.fingerprint);
                let _ = fsx::rename_noreplace(sets, from.as_str(), dir.as_fd(), MANIFEST);
            }
        }
        drop(dir);
        match fsx::rename_noreplace(
            self.state.as_fd(),
            name,
            self.store.as_fd(),
            man.fingerprint.as_str(),
        ) {
            Ok(()) => {
                let _ = fsx::fsync_dir(self.store.as_fd());
            }
            Err(_) => {
                let _ = fsx::remove_tree_at(self.state.as_fd(), name.as_bytes());
            }
        }
        let _ = fsx::fsync_dir(self.state.as_fd());
    }

    fn in_place_matches(&self, m: &Member) -> bool {
        let Some(d) = member_dir(self.root_fd.as_fd(), &m.path) else {
            return false;
        };
        let [json, _] = names(split(&m.path).1);
        let mut buf = Vec::new();
        fsx::read_at(d.as_fd(), json.as_c_str(), &mut buf, cache::MAX_CACHE_FILE).is_ok()
            && buf.len() as u64 == m.size
            && cache::sha256_hex(&buf) == m.sha256
    }

    // ---- store -----------------------------------------------------------

    /// Move a whole set signed for another launch into the store (for
    /// [`cache::prune_stashing`]). On error every member is back in place.
    pub fn stash(&self, root: BorrowedFd<'_>, set: &ForeignSet) -> io::Result<()> {
        if !is_fp(&set.fingerprint) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the fingerprint is not 64 hex digits",
            ));
        }
        if let Some(dir) = &set.dir {
            // A directory right below the root (vLLM's `<sha256>/` under
            // VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR) moves file by file.
            if set.checked.len() == set.set.members.len() && dir.contains('/') {
                return self.stash_dir(root, set, dir);
            }
        }
        let staging = format!("{}.in-{}", set.fingerprint, fsx::unique_name());
        let dir = fsx::mkdir_open_at(self.store.as_fd(), staging.as_str(), 0o700)?;
        let man = Manifest {
            format: FORMAT,
            fingerprint: set.fingerprint.clone(),
            set_id: set.set.id.clone(),
            signed_at: set.signed_at,
            stored_at: now_secs(),
            members: set.set.members.clone(),
            flat: false,
        };
        let (from, to) = (Side::tree(root), Side::tree(dir.as_fd()));
        let res = write_json(dir.as_fd(), MANIFEST, &man)
            .and_then(|()| fsx::fsync_dir(self.store.as_fd()))
            .and_then(|()| move_members(from, to, &man.members).map(|_| ()))
            .and_then(|()| {
                // What enters the store is what was signed: a file the
                // engine replaced meanwhile does not.
                self.verify(dir.as_fd(), &man)
                    .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))
            })
            .and_then(|()| self.install(&staging, &set.fingerprint));
        if let Err(e) = res {
            // Back in place, whatever was moved.
            let _ = move_members(to, from, &man.members);
            let _ = fsx::remove_tree_at(self.store.as_fd(), staging.as_bytes());
            return Err(e);
        }
        Ok(())
    }

    /// [`Store::stash`] of a set that is the whole content of directory
    /// `dir` (its members and their sidecars), its bytes just checked by
    /// prune, as a flat entry: the directory moves into the store as the
    /// staging directory, then the launch's set manifest moves into it as
    /// its `.set.json`, then the staging directory becomes `store/<fp>`:
    /// three renames, nothing created. A crash after the first rename
    /// leaves a staging directory without `.set.json`, which recovery puts
    /// back by the set manifest still in `.keepwrap/sets`. Nothing is
    /// fsynced here: [`Store::sync`] once after prune.
    fn stash_dir(&self, root: BorrowedFd<'_>, set: &ForeignSet, dir: &str) -> io::Result<()> {
        let (parent, name) = split(dir);
        if name.is_empty() || parent.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a directory below the root",
            ));
        }
        let fp = set.fingerprint.as_str();
        let man = Manifest {
            format: FLAT_FORMAT,
            fingerprint: fp.to_string(),
            set_id: set.set.id.clone(),
            signed_at: set.signed_at,
            stored_at: now_secs(),
            members: set.set.members.clone(),
            flat: true,
        };
        if man.origin() != Some(dir) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the set is not the content of one directory",
            ));
        }
        let sets = self.sets()?;
        let staging = format!("{fp}.in-{}", fsx::unique_name());
        let src = self.up_dir(root, parent)?;
        fsx::rename_noreplace(src.as_fd(), name, self.store.as_fd(), staging.as_str())?;
        self.unsynced.set(true);
        crate::failpoint::hit("store");
        let res = fsx::open_dir_at(self.store.as_fd(), staging.as_str()).and_then(|moved| {
            // What moved is what prune checked, and nothing else.
            self.same_as_checked(moved.as_fd(), set)
                .map_err(|why| io::Error::new(io::ErrorKind::InvalidData, why))?;
            let from = cache::manifest_name(fp);
            fsx::rename_noreplace(sets, from.as_str(), moved.as_fd(), MANIFEST)?;
            crate::failpoint::hit("store");
            self.install_with(&staging, fp, false)
        });
        if let Err(e) = res {
            // Back in place: the directory whole, else file by file.
            let inside = fsx::open_dir_at(self.store.as_fd(), staging.as_str())
                .is_ok_and(|d| fsx::exists_at(d.as_fd(), MANIFEST));
            let _ = self.unstage_flat(self.store.as_fd(), &staging, &man, inside);
            let _ = fsx::remove_tree_at(self.store.as_fd(), staging.as_bytes());
            return Err(e);
        }
        Ok(())
    }

    /// Does the moved directory hold exactly the set's members and their
    /// sidecars, each the very file prune checked?
    fn same_as_checked(&self, moved: BorrowedFd<'_>, set: &ForeignSet) -> Result<(), String> {
        let list = fsx::list_dir(moved).map_err(|e| e.to_string())?;
        if list.len() != 2 * set.checked.len() {
            return Err(format!(
                "{} entries in the directory, not the {} of the set",
                list.len(),
                2 * set.checked.len()
            ));
        }
        for (path, ids) in &set.checked {
            for (n, want) in names(split(path).1).iter().zip(ids) {
                let st = fsx::lstat_at(moved, n.as_c_str()).map_err(|e| format!("{path}: {e}"))?;
                if fsx::Kind::from_mode(st.st_mode) != fsx::Kind::File
                    || cache::FileId::of(&st) != *want
                {
                    return Err(format!("{path}: changed after signing"));
                }
            }
        }
        Ok(())
    }

    /// Make what [`Store::stash`] did durable (one fsync of the store and
    /// of the state directory; on ext4 and the like one journal commit).
    /// Nothing to do when nothing moved.
    pub fn sync(&self) {
        if self.unsynced.replace(false) {
            let _ = fsx::fsync_dir(self.store.as_fd());
            let _ = fsx::fsync_dir(self.state.as_fd());
            if let Some(Some(sets)) = self.sets.get() {
                let _ = fsx::fsync_dir(sets.as_fd());
            }
        }
    }

    /// Rename a complete staging directory to `store/<fp>`, replacing an
    /// older entry.
    fn install(&self, staging: &str, fp: &str) -> io::Result<()> {
        self.install_with(staging, fp, true)
    }

    /// [`Store::install`]; the store directory fsynced only with `sync`.
    fn install_with(&self, staging: &str, fp: &str, sync: bool) -> io::Result<()> {
        match fsx::rename_noreplace(self.store.as_fd(), staging, self.store.as_fd(), fp) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let trash = format!("trash-{}", fsx::unique_name());
                fsx::rename_between(self.store.as_fd(), fp, self.state.as_fd(), trash.as_str())?;
                crate::events::store::store_replaced(fp);
                crate::failpoint::hit("store");
                let _ = fsx::remove_tree_at(self.state.as_fd(), trash.as_bytes());
                fsx::rename_noreplace(self.store.as_fd(), staging, self.store.as_fd(), fp)?;
            }
            res => res?,
        }
        crate::failpoint::hit("store");
        if sync {
            fsx::fsync_dir(self.store.as_fd())?;
        }
        Ok(())
    }

    /// The stored set of `fp`, if there is one.
    pub fn manifest(&self, fp: &str) -> Option<Manifest> {
        if !is_fp(fp) {
            return None;
        }
        let dir = fsx::open_dir_at(self.store.as_fd(), fp).ok()?;
        read_manifest_at(dir.as_fd(), &format!("{STATE_DIR}/store/{fp}"))
    }

    /// Is the set under `dir` whole and intact: every member's bytes as
    /// signed and a JSON object, every sidecar signed for its launch in
    /// this set? Stash checks before a set enters the store, restore before
    /// it leaves (a same-size edit included).
    fn verify(&self, dir: BorrowedFd<'_>, man: &Manifest) -> Result<(), String> {
        // The manifest lists the very set its id names (the sidecars are
        // checked against the id below): never a part of it.
        if cache::set_id(&man.fingerprint, &man.members) != man.set_id {
            return Err("the manifest does not list the members of its set".into());
        }
        if man.flat {
            // The directory moves back whole: nothing in it but the set.
            let list = fsx::list_dir(dir).map_err(|e| e.to_string())?;
            let ours = |n: &[u8]| {
                n == MANIFEST.as_bytes()
                    || man
                        .members
                        .iter()
                        .any(|m| names(split(&m.path).1).iter().any(|x| x.as_bytes() == n))
            };
            if let Some((n, _)) = list.iter().find(|(n, _)| !ours(n)) {
                return Err(format!("{} is not the set's", String::from_utf8_lossy(n)));
            }
        }
        let side = Side::of(dir, man);
        let mut buf = Vec::new();
        for m in &man.members {
            let d = side
                .dir(&m.path)
                .ok_or_else(|| format!("{}: missing", m.path))?;
            let d = d.fd();
            let [json, launch] = names(split(&m.path).1);
            fsx::read_at(d, json.as_c_str(), &mut buf, cache::MAX_CACHE_FILE)
                .map_err(|e| format!("{}: {e}", m.path))?;
            if buf.len() as u64 != m.size || cache::sha256_hex(&buf) != m.sha256 {
                return Err(format!("{}: changed after signing", m.path));
            }
            cache::json_object_entries(&buf)
                .map_err(|_| format!("{}: not a JSON object", m.path))?;
            fsx::read_at(d, launch.as_c_str(), &mut buf, cache::MAX_SIDECAR)
                .map_err(|e| format!("{}: sidecar: {e}", m.path))?;
            let sc = cache::judge_sidecar(&buf, &man.fingerprint, |p| p == m.path)
                .map_err(|r| format!("{}: {r}", m.path))?;
            if !sc.in_set(&man.set_id) {
                return Err(format!("{}: signed in another set", m.path));
            }
        }
        Ok(())
    }

    /// Check the stored set of `fp` whole, every member's bytes included (for
    /// `keepwrap status --verify`): why it is not intact, if it is not.
    pub fn verify_entry(&self, fp: &str) -> Result<(), String> {
        let man = self.manifest(fp).ok_or("no readable manifest")?;
        if man.fingerprint != fp {
            return Err("its manifest names another launch".into());
        }
        if let Some(why) = self.untrusted_in_entry(fp, &man) {
            return Err(why);
        }
        let dir = fsx::open_dir_at(self.store.as_fd(), fp).map_err(|e| e.to_string())?;
        self.verify(dir.as_fd(), &man)
    }

    /// Bring the stored set of `fp` back to its paths. None when there is
    /// none, or it cannot be (logged; a corrupt entry is deleted).
    pub fn restore(&self, fp: &str) -> Option<Restored> {
        let man = self.manifest(fp)?;
        let dir = fsx::open_dir_at(self.store.as_fd(), fp).ok()?;
        if man.fingerprint != fp {
            crate::events::store::entry_misnamed(fp);
            self.delete_entry(fp);
            return None;
        }
        // From: a set another user could have planted or edited is not
        // trusted, whatever its sidecars say.
        if let Some(why) = self.untrusted_in_entry(fp, &man) {
            crate::events::store::entry_untrusted(fp, why);
            self.delete_entry(fp);
            return None;
        }
        // Every byte as signed: a rank file edited in the store (its size
        // unchanged) is never loaded by the engine.
        if let Err(why) = self.verify(dir.as_fd(), &man) {
            crate::events::store::entry_not_intact(fp, why);
            self.delete_entry(fp);
            return None;
        }
        // Into: never a directory another user can write.
        if let Some((parent, why)) = self.untrusted_destination(&man) {
            crate::events::store::restore_destination_untrusted(fp, parent, why);
            return None;
        }
        let root = Side::tree(self.root_fd.as_fd());
        let taken = conflicts(Side::of(dir.as_fd(), &man), root, &man.members);
        if let Some(t) = taken.first() {
            crate::events::store::restore_in_the_way(fp, t);
            return None;
        }
        drop(dir);
        let restoring = format!("restoring-{fp}");
        if let Err(e) = fsx::rename_noreplace(
            self.store.as_fd(),
            fp,
            self.state.as_fd(),
            restoring.as_str(),
        ) {
            crate::events::store::cannot_restore(fp, e);
            return None;
        }
        crate::failpoint::hit("store");
        if man.flat {
            // Its manifest back among the set manifests (the one there, if
            // any, is of a set of this launch prune did not keep), then the
            // directory in place.
            if let Err(e) = self.unstage_flat(self.state.as_fd(), &restoring, &man, true) {
                crate::events::store::restore_move_failed(fp, e);
                self.unrestore(&restoring, &man);
                return None;
            }
            let _ = fsx::remove_tree_at(self.state.as_fd(), restoring.as_bytes());
            self.unsynced.set(true);
            self.sync();
            return Some(Restored {
                paths: man.members.iter().map(|m| PathBuf::from(&m.path)).collect(),
                signed_at: man.signed_at,
            });
        }
        let dir = fsx::open_dir_at(self.state.as_fd(), restoring.as_str()).ok()?;
        if let Err(e) = move_members(Side::tree(dir.as_fd()), root, &man.members) {
            crate::events::store::restore_move_failed(fp, e);
            drop(dir);
            self.unrestore(&restoring, &man);
            return None;
        }
        drop(dir);
        let _ = fsx::remove_tree_at(self.state.as_fd(), restoring.as_bytes());
        Some(Restored {
            paths: man.members.iter().map(|m| PathBuf::from(&m.path)).collect(),
            signed_at: man.signed_at,
        })
    }

    /// Why the entry of `fp` is not to be trusted: a directory of it (or
    /// above it, up to `.keepwrap`) another user can write, by the rule the
    /// cache tree is judged by ([`cache::untrusted_dir`]).
    fn untrusted_in_entry(&self, fp: &str, man: &Manifest) -> Option<String> {
        entry_parents(man).into_iter().find_map(|parent| {
            let rel = Path::new("store").join(fp).join(parent);
            match cache::untrusted_dir(self.state.as_fd(), &rel) {
                Ok(why) => why,
                Err(e) => Some(format!("cannot check {STATE_DIR}/{}: {e}", rel.display())),
            }
        })
    }

    /// The first directory a member would be restored into (its nearest
    /// existing ancestor: what is missing is created by keepwrap) that
    /// another user can write, with why.
    fn untrusted_destination(&self, man: &Manifest) -> Option<(String, String)> {
        member_parents(man).into_iter().find_map(|parent| {
            let mut at = Path::new(parent);
            loop {
                match cache::untrusted_dir(self.root_fd.as_fd(), at) {
                    Ok(None) => return None,
                    Ok(Some(why)) => return Some((parent.to_string(), why)),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => at = at.parent()?,
                    Err(e) => {
                        return Some((
                            parent.to_string(),
                            format!("cannot check {}: {e}", at.display()),
                        ))
                    }
                }
            }
        })
    }

    /// Delete the entry of `fp` (atomically gone: renamed to trash first).
    fn delete_entry(&self, fp: &str) {
        let trash = format!("trash-{}", fsx::unique_name());
        if fsx::rename_between(self.store.as_fd(), fp, self.state.as_fd(), trash.as_str()).is_ok() {
            let _ = fsx::fsync_dir(self.store.as_fd());
            let _ = fsx::remove_tree_at(self.state.as_fd(), trash.as_bytes());
        }
    }

    /// Every entry of the store, with its size on disk.
    pub fn entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        let Ok(list) = fsx::list_dir(self.store.as_fd()) else {
            return out;
        };
        for (name, kind) in list {
            let Ok(name) = String::from_utf8(name) else {
                continue;
            };
            if kind != fsx::Kind::Dir || !is_fp(&name) {
                continue;
            }
            let Ok(dir) = fsx::open_dir_at(self.store.as_fd(), name.as_str()) else {
                continue;
            };
            let shown = format!("{STATE_DIR}/store/{name}");
            let Some(manifest) = read_manifest_at(dir.as_fd(), &shown) else {
                continue;
            };
            let side = Side::of(dir.as_fd(), &manifest);
            let mut bytes = 0;
            for m in &manifest.members {
                bytes += m.size;
                if let Some(d) = side.dir(&m.path) {
                    let [_, launch] = names(split(&m.path).1);
                    if let Ok(st) = fsx::lstat_at(d.fd(), launch.as_c_str()) {
                        bytes += st.st_size.max(0) as u64;
                    }
                }
            }
            out.push(Entry { manifest, bytes });
        }
        out
    }

    /// When the launch of a stored set was last used (a restore counts).
    pub fn last_used(&self, e: &Entry) -> u64 {
        self.record(&e.manifest.fingerprint)
            .map(|r| r.last_used)
            .unwrap_or(e.manifest.stored_at)
    }

    /// Evict entries unused for longer than `max_age`, then the least
    /// recently used until the store fits `max_size`. Returns the number of
    /// entries evicted.
    pub fn evict(&self, limits: Limits, now: u64) -> usize {
        let mut entries: Vec<(u64, Entry)> = self
            .entries()
            .into_iter()
            .map(|e| (self.last_used(&e), e))
            .collect();
        entries.sort_by_key(|(used, e)| (*used, e.manifest.fingerprint.clone()));
        let mut total: u64 = entries.iter().map(|(_, e)| e.bytes).sum();
        let mut n = 0;
        for (used, e) in &entries {
            let old = now.saturating_sub(*used) > limits.max_age.as_secs();
            let over = total > limits.max_size;
            if !old && !over {
                continue;
            }
            let why = if old {
                format!(
                    "unused for longer than --store-max-age {}",
                    humantime::format_duration(limits.max_age)
                )
            } else {
                format!(
                    "the store is over --store-max-size {}",
                    size_text(limits.max_size)
                )
            };
            self.evict_entry(e, *used, now, &why);
            total -= e.bytes;
            n += 1;
        }
        n
    }

    /// Remove one stored set and its launch record, and say why.
    fn evict_entry(&self, e: &Entry, used: u64, now: u64, why: &str) {
        let fp = &e.manifest.fingerprint;
        self.delete_entry(fp);
        let _ = fsx::unlink_at(self.launches.as_fd(), format!("{fp}.json").as_str());
        cache::remove_manifest(self.root_fd.as_fd(), fp);
        crate::events::store::evicted(
            fp,
            e.manifest.members.len(),
            e.bytes,
            size_text(e.bytes),
            ago(used, now),
            why,
        );
    }

    /// Evict every stored set `pick(entry, last used)` selects, least
    /// recently used first (call under the lock); the evicted entries.
    pub fn evict_where(
        &self,
        now: u64,
        why: &str,
        pick: impl Fn(&Entry, u64) -> bool,
    ) -> Vec<Entry> {
        let mut entries: Vec<(u64, Entry)> = self
            .entries()
            .into_iter()
            .map(|e| (self.last_used(&e), e))
            .filter(|(used, e)| pick(e, *used))
            .collect();
        entries.sort_by_key(|(used, e)| (*used, e.manifest.fingerprint.clone()));
        for (used, e) in &entries {
            self.evict_entry(e, *used, now, why);
        }
        entries.into_iter().map(|(_, e)| e).collect()
    }

    // ---- launch records --------------------------------------------------

    pub fn record(&self, fp: &str) -> Option<LaunchRecord> {
        if !is_fp(fp) {
            return None;
        }
        read_json(
            self.launches.as_fd(),
            &format!("{STATE_DIR}/launches"),
            &format!("{fp}.json"),
        )
    }

    /// Is there any launch record (did a launch ever sign on this root)?
    pub fn has_records(&self) -> bool {
        fsx::list_dir(self.launches.as_fd())
            .is_ok_and(|list| list.iter().any(|(name, _)| name.ends_with(b".json")))
    }

    /// Every launch record.
    pub fn records(&self) -> Vec<LaunchRecord> {
        let Ok(list) = fsx::list_dir(self.launches.as_fd()) else {
            return Vec::new();
        };
        list.into_iter()
            .filter_map(|(name, _)| {
                let name = String::from_utf8(name).ok()?;
                let fp = name.strip_suffix(".json")?;
                self.record(fp)
            })
            .collect()
    }

    /// Record that `fp` signed `files` cache files now, with its inputs.
    pub fn record_signed(&self, fp: &str, profile: &str, inputs: Value, files: usize) {
        let now = now_secs();
        let first = self.record(fp).map_or(now, |r| r.first_signed);
        let rec = LaunchRecord {
            format: FORMAT,
            fingerprint: fp.to_string(),
            profile: profile.to_string(),
            inputs,
            first_signed: first,
            last_signed: now,
            last_used: now,
            files,
        };
        if let Err(e) = write_json(self.launches.as_fd(), &format!("{fp}.json"), &rec) {
            crate::events::store::cannot_write_record(fp, e);
        }
    }

    /// Record that `fp` was used now (its cache reused or restored).
    pub fn touch(&self, fp: &str) {
        if let Some(mut rec) = self.record(fp) {
            rec.last_used = now_secs();
            let _ = write_json(self.launches.as_fd(), &format!("{fp}.json"), &rec);
        }
    }
}

/// `1.0 GiB`, `3.2 MiB`, `512 B`.
pub fn size_text(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// `1GiB`, `500MiB`, `10k`, `1048576`: a size in bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size; try 1GiB, 500MiB or 1048576"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("'{s}' is not a size; try 1GiB, 500MiB or 1048576")),
    };
    Ok((num * mult as f64) as u64)
}

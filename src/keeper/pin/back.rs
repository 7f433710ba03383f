//! Putting a pinned set back: each file of keepwrap's copy that is not
//! the tree's file any more is linked back, once checked to be the file
//! signed for its path.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::cache::{self, fsx, Shape};

use super::FILES;

/// What putting a pin's set back found.
#[derive(Default)]
pub(super) struct PutBack {
    /// The pinned files (relative paths).
    pub(super) members: Vec<PathBuf>,
    /// How many were linked back.
    pub(super) restored: usize,
    /// The files of the copy that are not the ones signed, and why: never
    /// put back.
    pub(super) untrusted: Vec<(PathBuf, String)>,
}

/// The bytes signed for each member of the set of a launch, read from its
/// set manifest when first asked: what a file of the copy must hold to be
/// put back.
pub(super) struct Signed<'a> {
    root: &'a Path,
    fp: &'a str,
    shape: Shape,
    members: Option<HashMap<String, (String, u64)>>,
}

impl<'a> Signed<'a> {
    pub(super) fn new(root: &'a Path, fp: &'a str, shape: Shape) -> Signed<'a> {
        Signed {
            root,
            fp,
            shape,
            members: None,
        }
    }

    /// Why the file `copy` of the pin, for member `rel`, is not the file
    /// signed (never followed if a symlink); None when it is.
    fn why_not(&mut self, rel: &Path, copy: &Path, kind: std::fs::FileType) -> Option<String> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        if kind.is_symlink() {
            return Some("a symbolic link".into());
        }
        if !kind.is_file() {
            return Some("not a regular file".into());
        }
        let Some((sha256, size)) = self.signed(rel) else {
            return Some("not a file of the set signed for the launch".into());
        };
        let mut bytes = Vec::new();
        let read = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(copy)
            .and_then(|f| f.take(size.saturating_add(1)).read_to_end(&mut bytes));
        match read {
            Err(e) => Some(format!("unreadable ({e})")),
            Ok(_) if bytes.len() as u64 != size || cache::sha256_hex(&bytes) != sha256 => {
                Some("its bytes are not the ones signed".into())
            }
            Ok(_) => None,
        }
    }

    /// The hash and size signed for member `rel`; None when it is none.
    fn signed(&mut self, rel: &Path) -> Option<(String, u64)> {
        let (root, fp, shape) = (self.root, self.fp, self.shape);
        let members = self.members.get_or_insert_with(|| {
            let Ok(root_fd) = fsx::open_root(root) else {
                return HashMap::new();
            };
            let sets = cache::open_sets(root_fd.as_fd(), false).ok();
            cache::read_manifest(sets.as_ref().map(|f| f.as_fd()), fp, shape)
                .map(|m| {
                    m.members
                        .into_iter()
                        .map(|m| (m.path, (m.sha256, m.size)))
                        .collect()
                })
                .unwrap_or_default()
        });
        rel.to_str().and_then(|p| members.get(p)).cloned()
    }
}

/// Link back each file of the pin `pin` whose file in `root` is not the
/// pinned one (replaced or removed), directory by directory from their
/// listings (the inode numbers they give, each difference confirmed by
/// `stat`), once it is checked to be the file `signed` for its path. Never
/// through a symlink in the tree.
pub(super) fn put_back(root: &Path, pin: &Path, signed: &mut Signed<'_>) -> PutBack {
    let files = pin.join(FILES);
    let mut out = PutBack::default();
    let mut dirs = vec![PathBuf::new()];
    while let Some(rel) = dirs.pop() {
        let Ok(list) = std::fs::read_dir(files.join(&rel)) else {
            continue;
        };
        let inos: HashMap<std::ffi::OsString, u64> = std::fs::read_dir(root.join(&rel))
            .map(|l| l.flatten().map(|e| (e.file_name(), e.ino())).collect())
            .unwrap_or_default();
        let mut in_tree: Option<bool> = None;
        for e in list.flatten() {
            let name = e.file_name();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                dirs.push(rel.join(&name));
                continue;
            }
            let member = rel.join(&name);
            if inos.get(&name) == Some(&e.ino()) || same_file(&e.path(), &root.join(&member)) {
                out.members.push(member);
                continue;
            }
            if let Some(why) = signed.why_not(&member, &e.path(), kind) {
                // a member stays one (the tree's file is checked as always)
                if signed.signed(&member).is_some() {
                    out.members.push(member.clone());
                }
                out.untrusted.push((member, why));
                continue;
            }
            if *in_tree.get_or_insert_with(|| tree_dir(root, &rel))
                && link_onto(&e.path(), &root.join(&member)).is_ok()
            {
                out.restored += 1;
            }
            out.members.push(member);
        }
    }
    out
}

/// Whether `rel` is a directory of the tree below `root` (made when it is
/// gone), no part of it a symlink: the put back writes nowhere else.
fn tree_dir(root: &Path, rel: &Path) -> bool {
    let mut at = root.to_path_buf();
    for c in rel.components() {
        let std::path::Component::Normal(name) = c else {
            return false;
        };
        at.push(name);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if std::fs::create_dir(&at).is_err() {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// Whether `a` and `b` are one file (neither followed if a symlink).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    }
}

/// Make `to` one more hard link of `from`, atomically (a temp name beside
/// it renamed over it).
fn link_onto(from: &Path, to: &Path) -> io::Result<()> {
    let parent = to
        .parent()
        .ok_or_else(|| io::Error::other("no directory"))?;
    let tmp = parent.join(format!(".keepwrap-{}.tmp", fsx::unique_name()));
    std::fs::hard_link(from, &tmp)?;
    std::fs::rename(&tmp, to).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

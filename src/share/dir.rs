//! The share's directory, opened without following a link: names checked
//! before they are used, directories made one component at a time.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use crate::cache::{self, fsx, Shape};

/// `(dir, name)` of a published path that is safe to use: plain relative
/// components (no `.`, `..`, hidden or empty ones), a cache file, and a rank
/// file name (vLLM's file names are judged by the tree's `shape`).
pub(crate) fn checked_path(path: &str, shape: Shape) -> Option<(&str, &str)> {
    let (dir, name) = match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    };
    let plain = |c: &str| !c.is_empty() && !c.starts_with('.');
    let ranked = shape.names_ranks();
    if !path.split('/').all(plain)
        || !cache::is_cache_file(Path::new(path), shape)
        || (ranked && shape.rank_of(name).is_none())
    {
        return None;
    }
    Some((dir, name))
}

/// Open (creating as needed) the directory `rel` below `base`, one component
/// at a time, never following a symlink.
pub(crate) fn mkdirs(base: BorrowedFd<'_>, rel: &str) -> io::Result<OwnedFd> {
    fsx::ensure_dir_path(base, Path::new(rel), 0o755)
        .map_err(|e| io::Error::new(e.kind(), format!("mkdir {rel}: {e}")))
}

//! `keepwrap forget`: one launch's signed set taken out of the cache tree,
//! so that its next boot tunes fresh.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;

use super::fsx;
use super::{survey, FileState, Shape, CACHE_EXT, SIDECAR_EXT};

/// The cache files under `root` signed for `fingerprint` in a whole set
/// (relative to the root, sorted), with their sizes: what
/// [`forget_set`] removes.
pub fn signed_for(root: &Path, shape: Shape, fingerprint: &str) -> Vec<(String, u64)> {
    survey(root, shape, false)
        .into_iter()
        .filter(
            |f| matches!(&f.state, FileState::Signed { fingerprint: fp, .. } if fp == fingerprint),
        )
        .map(|f| (f.path, f.size))
        .collect()
}

/// Whether the tree has a set manifest of `fingerprint`.
pub fn has_manifest(root: &Path, fingerprint: &str) -> bool {
    fsx::open_root(root)
        .and_then(|r| super::sidecar::open_sets(r.as_fd(), false))
        .is_ok_and(|sets| {
            fsx::lstat_at(
                sets.as_fd(),
                super::sidecar::manifest_name(fingerprint).as_str(),
            )
            .is_ok()
        })
}

/// Remove `files` (each a cache file signed for `fingerprint`, relative to
/// the root) with their sidecars, then the launch's set manifest, never
/// through a symlink. A file already gone is no error.
pub fn forget_set(root: &Path, fingerprint: &str, files: &[String]) -> io::Result<()> {
    let root_fd = fsx::open_root(root)?;
    for rel in files {
        let rel = Path::new(rel);
        let (Some(name), Some(parent)) = (rel.file_name(), rel.parent()) else {
            continue;
        };
        use std::os::unix::ffi::OsStrExt;
        let name = name.as_bytes();
        let Some(stem) = name.strip_suffix(CACHE_EXT) else {
            continue;
        };
        let sidecar = [stem, SIDECAR_EXT].concat();
        let dir = if parent.as_os_str().is_empty() {
            fsx::open_root(root)?
        } else {
            fsx::open_dir_path(root_fd.as_fd(), parent)?
        };
        for n in [name, sidecar.as_slice()] {
            match fsx::unlink_at(dir.as_fd(), n) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    if let Ok(sets) = super::sidecar::open_sets(root_fd.as_fd(), false) {
        match fsx::unlink_at(
            sets.as_fd(),
            super::sidecar::manifest_name(fingerprint).as_str(),
        ) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

//! A set taken from other machines, into the cache root: its files,
//! verified when they were read, staged beside the store, linked into
//! place (never over an existing file) and signed for this launch, all or
//! nothing. The local sign stays the only source of trust.

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::cache::{self, fsx, Shape};
use crate::digest::Fingerprint;

/// `(dir, name)` of a published path that is safe to use: plain relative
/// components (no `.`, `..`, hidden or empty ones), a cache file, and a rank
/// file name (vLLM's file names are judged by the tree's `shape`).
pub fn checked_path(path: &str, shape: Shape) -> Option<(&str, &str)> {
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

/// Why a set was not placed (nothing of it is left in the root).
#[derive(Debug)]
pub enum NotPlaced {
    /// Its files could not be written into place.
    Write(io::Error),
    /// They were written, but the tree could not be signed with all of
    /// them.
    Sign(io::Error),
}

impl fmt::Display for NotPlaced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotPlaced::Write(e) | NotPlaced::Sign(e) => write!(f, "{e}"),
        }
    }
}

fn mkdirs(base: std::os::fd::BorrowedFd<'_>, rel: &str) -> io::Result<std::os::fd::OwnedFd> {
    fsx::ensure_dir_path(base, Path::new(rel), 0o755)
        .map_err(|e| io::Error::new(e.kind(), format!("mkdir {rel}: {e}")))
}

/// Write `files` (path relative to the root, verified bytes) into staging
/// (`<root>/.keepwrap/fleet-staging.<pid>`), link each into place (never
/// over an existing file) and sign the tree for `fingerprint`: all or
/// nothing. The files signed.
pub fn place(
    root: &Path,
    shape: Shape,
    fingerprint: &Fingerprint,
    files: &[(String, Vec<u8>)],
) -> Result<Vec<PathBuf>, NotPlaced> {
    let mut linked: Vec<PathBuf> = Vec::new();
    let undo = |linked: &[PathBuf]| {
        for p in linked {
            let _ = std::fs::remove_file(root.join(p));
        }
    };
    if let Err(e) = link_all(root, shape, files, &mut linked) {
        undo(&linked);
        return Err(NotPlaced::Write(e));
    }
    match cache::sign(root, shape, fingerprint) {
        Ok(r) => {
            let want: BTreeSet<&PathBuf> = linked.iter().collect();
            if want.iter().all(|p| r.signed.contains(p)) {
                return Ok(r.signed);
            }
            undo(&linked);
            Err(NotPlaced::Sign(io::Error::other(
                "not every restored file was signed",
            )))
        }
        Err(e) => {
            undo(&linked);
            Err(NotPlaced::Sign(e))
        }
    }
}

/// Stage `files` and link each into place; `linked`: what was linked.
fn link_all(
    root: &Path,
    shape: Shape,
    files: &[(String, Vec<u8>)],
    linked: &mut Vec<PathBuf>,
) -> io::Result<()> {
    let root_fd = fsx::open_root(root)?;
    let state = mkdirs(root_fd.as_fd(), crate::STATE_DIR)?;
    let staging_name = format!("{}{}", crate::store::FLEET_STAGING, std::process::id());
    let staging_path = root.join(crate::STATE_DIR).join(&staging_name);
    let _ = std::fs::remove_dir_all(&staging_path);
    let staging = mkdirs(state.as_fd(), &staging_name)?;
    let res = (|| -> io::Result<()> {
        let mut staged = Vec::new();
        for (i, (_, bytes)) in files.iter().enumerate() {
            let tmp = fsx::write_temp_at(staging.as_fd(), bytes, 0o644, true)?;
            let name = format!("{i}");
            nix::fcntl::renameat(
                staging.as_fd(),
                tmp.as_slice(),
                staging.as_fd(),
                name.as_str(),
            )
            .map_err(io::Error::from)?;
            staged.push(name);
        }
        for ((path, _), name) in files.iter().zip(&staged) {
            let (dir, file) = checked_path(path, shape).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a path that is not a cache file",
                )
            })?;
            let dfd = mkdirs(root_fd.as_fd(), dir)?;
            nix::unistd::linkat(
                staging.as_fd(),
                name.as_str(),
                dfd.as_fd(),
                file,
                nix::fcntl::AtFlags::empty(),
            )
            .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("{path}: {e}")))?;
            linked.push(PathBuf::from(path));
            crate::failpoint::hit("fleet-place");
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&staging_path);
    res
}

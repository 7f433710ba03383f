//! The share's directory, opened without following a link: names checked
//! before they are used ([`checked_path`]), directories made one component
//! at a time.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use crate::cache::fsx;

pub(crate) use crate::publish::checked_path;

/// Open (creating as needed) the directory `rel` below `base`, one component
/// at a time, never following a symlink.
pub(crate) fn mkdirs(base: BorrowedFd<'_>, rel: &str) -> io::Result<OwnedFd> {
    fsx::ensure_dir_path(base, Path::new(rel), 0o755)
        .map_err(|e| io::Error::new(e.kind(), format!("mkdir {rel}: {e}")))
}

//! `<root>/.keepwrap/trash/`: where prune moves what it removes, so that a
//! rank file is out of the engine's way with one rename, and the slow part
//! (freeing the blocks of thousands of files) happens in the background
//! while the engine boots.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use super::fsx;

use crate::STATE_DIR;
pub const TRASH_DIR: &str = "trash";

pub struct Trash {
    fd: OwnedFd,
}

impl Trash {
    /// Create (if needed) and open `<root>/.keepwrap/trash`, only if no
    /// other user can write either.
    pub fn open(root: BorrowedFd<'_>) -> io::Result<Trash> {
        let state = fsx::open_state_dir_at(root, STATE_DIR, Some(0o700))?;
        let fd = fsx::open_state_dir_at(state.as_fd(), TRASH_DIR, Some(0o700))?;
        Ok(Trash { fd })
    }

    /// Move the entry `name` of `dir` (file or directory) into the trash.
    pub fn take(&self, dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<()> {
        fsx::rename_between(dir, name, self.fd.as_fd(), fsx::unique_name().as_str())
    }
}

/// Remove everything in the trash below the open root. Returns how many
/// entries went.
pub fn empty_at(root: BorrowedFd<'_>) -> usize {
    match open_existing(root) {
        Some(trash) => empty_trash_dir(trash.as_fd()),
        None => 0,
    }
}

/// The trash below the open root, if there is one.
fn open_existing(root: BorrowedFd<'_>) -> Option<OwnedFd> {
    let state = fsx::open_state_dir_at(root, STATE_DIR, None).ok()?;
    fsx::open_state_dir_at(state.as_fd(), TRASH_DIR, None).ok()
}

/// Remove everything in the open trash directory.
fn empty_trash_dir(trash: BorrowedFd<'_>) -> usize {
    let n = fsx::remove_contents(trash, &mut |name, e| {
        crate::events::Event::TrashRemoveFailed {
            name: (super::layout::Rel(b"", name)).to_string(),
            error: e.to_string(),
        }
        .emit();
    });
    crate::events::Event::TrashEmptied { entries: n }.emit();
    n
}

/// Empty the trash of the cache at `root` now. A missing root or trash is
/// not an error.
pub fn empty_trash(root: &Path) -> io::Result<usize> {
    match fsx::open_root(root) {
        Ok(fd) => Ok(empty_at(fd.as_fd())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("open cache root {}: {e}", crate::logging::Shown(root)),
        )),
    }
}

/// The trash of a cache root, to be emptied once the engine has started:
/// [`TrashJob::run`] empties it; dropped without running, a background
/// thread does. No job when there is nothing in the trash.
pub struct TrashJob(Option<OwnedFd>);

impl TrashJob {
    pub fn none() -> TrashJob {
        TrashJob(None)
    }

    /// The job of emptying the trash below the open root: none when there
    /// is no trash or nothing in it (so that no thread starts for it).
    pub(super) fn of(root: OwnedFd) -> TrashJob {
        let trash = open_existing(root.as_fd())
            .filter(|t| fsx::list_dir(t.as_fd()).map_or(true, |e| !e.is_empty()));
        TrashJob(trash)
    }

    /// Is there anything to empty?
    pub fn has_work(&self) -> bool {
        self.0.is_some()
    }

    /// Empty the trash now, on this thread.
    pub fn run(mut self) {
        if let Some(trash) = self.0.take() {
            empty_trash_dir(trash.as_fd());
        }
    }
}

impl Drop for TrashJob {
    fn drop(&mut self) {
        if let Some(trash) = self.0.take() {
            spawn_empty_dir(trash);
        }
    }
}

/// Empty the trash in a background thread that blocks every signal (so a
/// signal meant for the supervisor is never delivered to it).
pub fn spawn_empty(root: OwnedFd) {
    // No trash, no thread.
    let Some(trash) = open_existing(root.as_fd()) else {
        return;
    };
    drop(root);
    spawn_empty_dir(trash);
}

/// Empty the open trash directory in a background thread (see
/// [`spawn_empty`]).
fn spawn_empty_dir(trash: OwnedFd) {
    let spawned = std::thread::Builder::new()
        .name("keepwrap-trash".into())
        .spawn(move || {
            empty_trash_dir(trash.as_fd());
        });
    if let Err(e) = spawned {
        crate::events::Event::TrashThreadFailed {
            error: e.to_string(),
        }
        .emit();
    }
}

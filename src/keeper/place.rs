//! Where the cache of a launch is, and this launch's turn on it: the root
//! (created on a first boot, checked writable and trusted) with the done
//! rule, `.keepwrap/running` opened, the turn taken and the marker left.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::cache::{self, Shape};
use crate::done::Done;
use crate::engine::fingerprint::Launch;
use crate::engine::{Engine, NoRoot};
use crate::root::lock::CacheLock;
use crate::root::running::{self, Identity, Marker, Runs, State};
use crate::stops::Stopped;
use crate::store::Store;
use crate::STATE_DIR;

use super::turn::{wait_turn, Turn};
use super::{Prepared, Settings};

/// Where the cache of a launch is, and when its tuning is done.
pub(super) struct Place {
    pub(super) root: PathBuf,
    /// The shape of the cache tree.
    pub(super) shape: Shape,
    pub(super) done: Done,
}

/// The cache root (created on a first boot) and the done rule of this
/// launch, with the launch's line and its warnings logged; None (logged)
/// when the cache cannot be kept.
pub(super) fn locate(
    args: &Settings,
    engine: &dyn Engine,
    launch: &Launch,
    unread: bool,
) -> Option<Place> {
    if engine.left_alone(launch, args.cache_dir.as_deref()) {
        return None;
    }
    // where the engine writes: its own environment (after `env -i`, `env -u`,
    // a shell's `export`), not keepwrap's
    let engine_env = &launch.command().env[..];
    let root = engine
        .root_of_launch(args.cache_dir.as_deref(), launch)
        .map_err(NoRoot::log)
        .ok()?;
    let shape = engine.shape_of_launch(args.cache_dir.as_deref(), launch);
    crate::engine::warn_cache_dir(engine, args.cache_dir.as_deref(), launch.argv(), engine_env);
    // An unreadable launch under `--keep auto` has its own line.
    let warnings = launch.warnings();
    let shown = if unread {
        warnings.len().saturating_sub(1)
    } else {
        warnings.len()
    };
    for line in warnings.into_iter().take(shown) {
        crate::events::Event::LaunchWarning {
            line: line.to_string(),
        }
        .emit();
    }
    let done = match engine.done(&args.done, launch) {
        Ok(done) => done.headless_quiet(args.headless_quiet),
        // Nothing is signed for it: pruned all the same.
        Err(_) if unread => Done::Exit,
        Err(e) => {
            crate::events::Event::DoneRuleUnusable {
                error: e.to_string(),
            }
            .emit();
            return None;
        }
    };
    crate::events::set_root(&root);
    crate::events::Event::Launch {
        fingerprint: launch.fingerprint().to_string(),
        profile: launch.profile().as_str().to_string(),
        root: root.to_path_buf(),
        done: done.to_string(),
    }
    .emit();
    engine.note_launch(launch, args.cache_dir.as_deref());
    ensure_root(&root).then_some(Place { root, shape, done })
}

/// Open (creating) `<root>/.keepwrap/running`, never through a symlink:
/// the markers' directory, with the root and `.keepwrap` as opened; None
/// (logged) when it cannot be.
pub(super) fn open_state(root: &Path) -> Option<(Runs, (OwnedFd, OwnedFd))> {
    let opened = || -> std::io::Result<(Runs, (OwnedFd, OwnedFd))> {
        let root_fd = crate::cache::fsx::open_root(root)?;
        let state = crate::cache::fsx::open_state_dir_at(root_fd.as_fd(), STATE_DIR, Some(0o755))?;
        let runs = Runs::open_in(state.as_fd())?;
        Ok((runs, (root_fd, state)))
    };
    match opened() {
        Ok(r) => Some(r),
        Err(e) => {
            crate::events::Event::CannotOpenRunning {
                dir: running_dir(root).to_path_buf(),
                error: e.to_string(),
            }
            .emit();
            None
        }
    }
}

/// `<root>/.keepwrap/running`: the launches' markers.
fn running_dir(root: &Path) -> PathBuf {
    root.join(STATE_DIR).join(running::RUNNING_DIR)
}

/// The lock (held while the engine is prepared) and this launch's marker.
pub(super) type Turned = (Option<CacheLock>, Marker);

/// Wait for this launch's turn on the root and leave its marker: the lock
/// (held while the engine is prepared) and the marker when this launch
/// keeps the cache, else what it goes on with (hands-off, or no marker).
/// Err: a stop signal ended the wait.
pub(super) fn take_turn(
    args: &Settings,
    runs: Runs,
    store: Option<&Store>,
    id: &Identity,
    root: &Path,
) -> Result<Result<Turned, Prepared>, Stopped> {
    let (lock, turn) = wait_turn(args, &runs, store, id)?;
    let state = match turn {
        Turn::Go(_) => State::Tuning,
        Turn::HandsOff => State::HandsOff,
    };
    let mut marker = match runs.register(id, state) {
        Ok(m) => m,
        Err(e) => {
            crate::events::Event::CannotLeaveMarker {
                dir: running_dir(root).to_path_buf(),
                error: e.to_string(),
            }
            .emit();
            return Ok(Err(Prepared::Supervised));
        }
    };
    Ok(match turn {
        Turn::HandsOff => Err(Prepared::hands_off(marker)),
        Turn::Go(beside) => {
            marker.ran_beside(beside);
            Ok((lock, marker))
        }
    })
}

/// A missing root is the normal first boot: create it. Anything else that
/// makes it unusable is a warning, and the launch goes on.
fn ensure_root(root: &Path) -> bool {
    match std::fs::symlink_metadata(root) {
        Ok(m) if m.is_dir() || (m.file_type().is_symlink() && root.is_dir()) => writable(root),
        Ok(_) => {
            crate::events::Event::RootNotADirectory {
                root: root.to_path_buf(),
            }
            .emit();
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::create_dir_all(root) {
            Ok(()) => {
                crate::events::Event::RootCreated {
                    root: root.to_path_buf(),
                }
                .emit();
                true
            }
            Err(e) => {
                crate::events::Event::CannotCreateRoot {
                    root: root.to_path_buf(),
                    error: e.to_string(),
                }
                .emit();
                false
            }
        },
        Err(e) => {
            crate::events::Event::CannotUseRoot {
                root: root.to_path_buf(),
                error: e.to_string(),
            }
            .emit();
            false
        }
    }
}

/// A root on a read-only file system can be neither pruned nor signed. One
/// another user can write is said once: nothing in it is ever signed, and
/// prune removes every cache file in it.
fn writable(root: &Path) -> bool {
    use nix::sys::statvfs::{statvfs, FsFlags};
    match statvfs(root) {
        Ok(st) if st.flags().contains(FsFlags::ST_RDONLY) => {
            crate::events::Event::RootReadOnly {
                root: root.to_path_buf(),
            }
            .emit();
            false
        }
        _ => match cache::root_untrusted(root) {
            Some(why) => {
                crate::events::Event::RootUntrusted {
                    root: root.to_path_buf(),
                    reason: why.to_string(),
                }
                .emit();
                true
            }
            None => true,
        },
    }
}

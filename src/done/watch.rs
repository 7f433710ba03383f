//! inotify over the cache tree: a watch on the root and on every directory
//! below it (the engine creates `<version>/<arch>/<key16>/` while it boots),
//! reporting each cache file that lands. FlashInfer saves by rename, so a
//! rank file arrives as `IN_MOVED_TO`; a plain write shows as
//! `IN_CLOSE_WRITE`. A queue overflow triggers a rescan. No polling.
//!
//! The watches are added [`ARM_AFTER`] after the watcher is made, not at
//! once: the kernel makes the process that closes an inotify instance which
//! ever held a watch wait for a grace period (7 to 20 ms), which would
//! dominate the cost of wrapping a short command. Until then every file is
//! found by comparing the tree with what was seen before (the same rescan
//! as after a queue overflow), so nothing that lands early is missed: when
//! the watches are added, and whenever [`Watcher::read`] is called before.
//! The descriptor to poll is an epoll instance that holds the arming timer,
//! then the inotify descriptor; it never changes.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

use crate::cache::{self, Shape};

/// Identity of a file's contents as far as a watcher can tell cheaply.
pub type Stamp = (u64, u64, i64, i64);

/// How long after the watcher is made the inotify watches are added.
pub const ARM_AFTER: Duration = Duration::from_millis(100);

pub struct Watcher {
    /// What the supervisor polls: the arming timer, then inotify.
    epoll: Epoll,
    /// Until the watches are added (`None` after).
    timer: Option<TimerFd>,
    inotify: Inotify,
    root: PathBuf,
    /// The shape of the tree: which files are cache files.
    shape: Shape,
    /// Directory watched, relative to the root.
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// Cache files seen, relative to the root, with what they looked like.
    files: HashMap<PathBuf, Stamp>,
    /// During the first walk: files looked at just before it (see
    /// [`Watcher::seeded`]), taken as seen when the walk finds them.
    seed: HashMap<PathBuf, Stamp>,
}

fn dir_flags() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

/// The stamp of a file as its metadata gives it.
pub fn stamp(meta: &std::fs::Metadata) -> Stamp {
    (meta.ino(), meta.len(), meta.mtime(), meta.mtime_nsec())
}

/// Directories the engine never reads and keepwrap does not watch:
/// `runs/` (write-only history) and hidden ones (keepwrap's own state).
fn skipped_dir(name: &OsStr) -> bool {
    name == "runs" || name.as_encoded_bytes().starts_with(b".")
}

impl Watcher {
    /// Watch `root` (which must exist) and every directory below it: record
    /// what is there now, and add the watches [`ARM_AFTER`] from now.
    pub fn new(root: &Path, shape: Shape) -> io::Result<Watcher> {
        Watcher::seeded(root, shape, std::iter::empty())
    }

    /// [`Watcher::new`], with files already looked at just before (`seen`:
    /// path relative to the root, how it looked): the first walk takes
    /// them as seen, without looking at them again. Only for what was
    /// looked at with nothing started since that could change it.
    pub fn seeded(
        root: &Path,
        shape: Shape,
        seen: impl IntoIterator<Item = (PathBuf, Stamp)>,
    ) -> io::Result<Watcher> {
        let mut w = Watcher::unwalked(root, shape, seen)?;
        let mut landed = Vec::new();
        w.add_tree(PathBuf::new(), &mut landed)?;
        w.seed = HashMap::new();
        Ok(w)
    }

    /// [`Watcher::seeded`] where `seen` is every cache file in the tree
    /// (prune just listed every directory and removed every other one,
    /// with nothing started since): no walk now. The first
    /// [`Watcher::read`] walks the tree, finding what landed since.
    pub fn seeded_whole(
        root: &Path,
        shape: Shape,
        seen: impl IntoIterator<Item = (PathBuf, Stamp)>,
    ) -> io::Result<Watcher> {
        let mut w = Watcher::unwalked(root, shape, seen)?;
        // `root/`: a root that is a symlink to a directory is watched
        // through it, as the walk would.
        if !std::fs::symlink_metadata(root.join(""))?.is_dir() {
            // What the watch would refuse (IN_ONLYDIR | IN_DONT_FOLLOW).
            return Err(io::Error::other(format!(
                "cannot watch {}: {}",
                root.display(),
                Errno::ENOTDIR
            )));
        }
        w.files = std::mem::take(&mut w.seed);
        Ok(w)
    }

    /// The watcher, before any walk: `seen` as its seed.
    fn unwalked(
        root: &Path,
        shape: Shape,
        seen: impl IntoIterator<Item = (PathBuf, Stamp)>,
    ) -> io::Result<Watcher> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        timer.set(
            Expiration::OneShot(TimeSpec::from_duration(ARM_AFTER)),
            TimerSetTimeFlags::empty(),
        )?;
        epoll.add(&timer, EpollEvent::new(EpollFlags::EPOLLIN, 0))?;
        let w = Watcher {
            epoll,
            timer: Some(timer),
            inotify,
            root: root.to_path_buf(),
            shape,
            dirs: HashMap::new(),
            files: HashMap::new(),
            seed: seen.into_iter().collect(),
        };
        Ok(w)
    }

    /// Readable when [`Watcher::read`] has something to do.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.0.as_fd()
    }

    /// Are the inotify watches in place?
    fn armed(&self) -> bool {
        self.timer.is_none()
    }

    /// Add the watches: swap the timer for inotify in the epoll set, then
    /// walk the tree adding them (what landed meanwhile goes to `landed`).
    fn arm(&mut self, landed: &mut Vec<PathBuf>) -> io::Result<()> {
        if let Some(timer) = self.timer.take() {
            let _ = self.epoll.delete(&timer);
        }
        self.epoll
            .add(&self.inotify, EpollEvent::new(EpollFlags::EPOLLIN, 0))?;
        self.add_tree(PathBuf::new(), landed)
    }

    /// Cache files present (relative to the root), as last seen.
    pub fn known_files(&self) -> impl Iterator<Item = &Path> {
        self.files.keys().map(PathBuf::as_path)
    }

    /// How `rel` looked when last seen.
    pub fn stamp(&self, rel: &Path) -> Option<Stamp> {
        self.files.get(rel).copied()
    }

    /// Add watches for `rel` and every directory below it, recording the
    /// cache files found; files new or changed since last seen go to
    /// `landed`. A directory that vanished meanwhile is not an error.
    fn add_tree(&mut self, rel: PathBuf, landed: &mut Vec<PathBuf>) -> io::Result<()> {
        let abs = self.root.join(&rel);
        let watched = if self.armed() {
            self.inotify.add_watch(&abs, dir_flags()).map(Some)
        } else if rel.as_os_str().is_empty() && !std::fs::symlink_metadata(&abs)?.is_dir() {
            // What the watch would refuse (IN_ONLYDIR | IN_DONT_FOLLOW).
            Err(Errno::ENOTDIR)
        } else {
            // Not watching yet: the walk alone finds what landed.
            Ok(None)
        };
        match watched {
            Ok(None) => {}
            Ok(Some(wd)) => {
                self.dirs.insert(wd, rel.clone());
            }
            Err(Errno::ENOENT) | Err(Errno::ENOTDIR) if !rel.as_os_str().is_empty() => {
                return Ok(())
            }
            // A subdirectory keepwrap cannot read (another user's, mode
            // 0700): prune and sign cannot read it either, so nothing in it
            // is signed. Watch the rest rather than give up on the launch.
            Err(e) if !rel.as_os_str().is_empty() => {
                crate::events::Event::CannotWatchDir {
                    path: rel.clone(),
                    error: e.to_string(),
                }
                .emit();
                return Ok(());
            }
            Err(e) => {
                return Err(io::Error::other(format!(
                    "cannot watch {}: {e}",
                    abs.display()
                )))
            }
        }
        let entries = match std::fs::read_dir(&abs) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !rel.as_os_str().is_empty() => {
                return Ok(())
            }
            Err(e) if !rel.as_os_str().is_empty() => {
                crate::events::Event::CannotListDir {
                    path: rel.clone(),
                    error: e.to_string(),
                }
                .emit();
                return Ok(());
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot list {}: {e}", abs.display()),
                ))
            }
        };
        for entry in entries.flatten() {
            let Ok(ft) = entry.file_type() else { continue };
            let name = entry.file_name();
            let child = rel.join(&name);
            if ft.is_dir() {
                if !skipped_dir(&name) {
                    self.add_tree(child, landed)?;
                }
            } else {
                self.note_file(child, landed);
            }
        }
        Ok(())
    }

    /// Record a file; if it is a cache file that is new or changed, it landed.
    fn note_file(&mut self, rel: PathBuf, landed: &mut Vec<PathBuf>) {
        if !cache::is_cache_file(&rel, self.shape) {
            return;
        }
        if let Some(seen) = self.seed.remove(&rel) {
            self.files.insert(rel, seen);
            return;
        }
        let Ok(meta) = std::fs::symlink_metadata(self.root.join(&rel)) else {
            return;
        };
        if !meta.is_file() {
            return;
        }
        let now = stamp(&meta);
        if self.files.insert(rel.clone(), now) != Some(now) {
            landed.push(rel);
        }
    }

    /// Read what inotify queued (before the watches are added: compare the
    /// tree with what was seen, and add them when it is time). Returns the
    /// cache files that landed since the last call, each once, relative to
    /// the root.
    pub fn read(&mut self) -> Vec<PathBuf> {
        let mut landed = Vec::new();
        let mut rescan = false;
        if let Some(timer) = &self.timer {
            // Expired (or unreadable: never leave a readable timer behind).
            let due = !matches!(timer.get(), Ok(Some(_)));
            let walked = if due {
                self.arm(&mut landed)
            } else {
                self.add_tree(PathBuf::new(), &mut landed)
            };
            if let Err(e) = walked {
                crate::events::Event::WatchError {
                    error: e.to_string(),
                }
                .emit();
            }
        }
        while self.armed() {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    crate::events::Event::InotifyReadFailed {
                        dir: self.root.clone(),
                        error: e.to_string(),
                    }
                    .emit();
                    rescan = true;
                    break;
                }
            };
            for ev in events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    rescan = true;
                    continue;
                }
                if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                    self.dirs.remove(&ev.wd);
                    continue;
                }
                let (Some(dir), Some(name)) = (self.dirs.get(&ev.wd), ev.name.as_ref()) else {
                    continue;
                };
                let rel = dir.join(name);
                if ev.mask.contains(AddWatchFlags::IN_ISDIR) {
                    if !skipped_dir(name) {
                        if let Err(e) = self.add_tree(rel, &mut landed) {
                            crate::events::Event::WatchError {
                                error: e.to_string(),
                            }
                            .emit();
                        }
                    }
                } else if ev
                    .mask
                    .intersects(AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CLOSE_WRITE)
                {
                    self.note_file(rel, &mut landed);
                }
            }
        }
        if rescan {
            crate::events::Event::InotifyOverflow {
                dir: self.root.clone(),
            }
            .emit();
            if let Err(e) = self.add_tree(PathBuf::new(), &mut landed) {
                crate::events::Event::WatchError {
                    error: e.to_string(),
                }
                .emit();
            }
        }
        let mut seen = HashSet::new();
        landed.retain(|p| seen.insert(p.clone()));
        landed
    }
}

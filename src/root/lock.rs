//! The lock of a cache root: `<root>/.keepwrap/lock`, an exclusive
//! `flock` (`std::fs::File::lock`) held around prune + restore and around
//! commit, never while the engine runs. The holder writes who it is into
//! the file, so a waiter can say whom it waits for, and blanks it out when
//! it lets go.
//!
//! The file is never truncated (on ext4 a truncation and the write after it
//! free and allocate the file's block again: ten times the cost of the
//! writes): the holder's line is padded with spaces to the file's size,
//! at least [`LINE_WIDTH`] bytes, and the release overwrites it with
//! spaces. A reader trims the spaces: a blank file is a holder that has not
//! said who it is yet.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use crate::digest::Fingerprint;
use crate::stops::Stopped;

/// The holder's line is padded to at least this many bytes, so that the
/// file keeps one size whatever the host and launch names.
const LINE_WIDTH: usize = 128;
/// A larger lock file (not keepwrap's) is cut to the holder's line.
const MAX_LOCK_FILE: u64 = 4096;

/// Held until dropped.
pub struct CacheLock {
    file: File,
    /// Bytes of the holder's line written at offset 0 (blanked at release).
    written: usize,
}

impl Drop for CacheLock {
    fn drop(&mut self) {
        // Blank the holder's line (one write when it is LINE_WIDTH long).
        const SPACES: [u8; LINE_WIDTH] = [b' '; LINE_WIDTH];
        let mut at = 0;
        while at < self.written {
            let n = (self.written - at).min(LINE_WIDTH);
            if self.file.write_all_at(&SPACES[..n], at as u64).is_err() {
                break;
            }
            at += n;
        }
        let _ = self.file.unlock();
    }
}

/// Why the lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Still held by someone else at the deadline (who, as they wrote it).
    TimedOut(String),
    Io(std::io::Error),
    /// A stop signal ended the wait before the engine started.
    Stopped(Stopped),
}

/// The host name (in a pod: the pod's name), `?` when unknown. Read once.
pub fn hostname() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        crate::sys::nodename()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "?".to_string())
    })
    .clone()
}

fn holder(file: &mut File) -> String {
    let mut s = String::new();
    let _ = file.seek(SeekFrom::Start(0));
    let _ = file.take(512).read_to_string(&mut s);
    let s = s.trim();
    if s.is_empty() {
        "another process (it has not said who yet)".to_string()
    } else {
        // What another process wrote: never a control character in a log line.
        s.chars()
            .flat_map(|c| {
                let escaped: Vec<char> = if c.is_control() {
                    c.escape_default().collect()
                } else {
                    vec![c]
                };
                escaped
            })
            .collect()
    }
}

/// What a launch takes the lock for, and so what it does without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockFor {
    /// Prune and restore before the engine starts.
    Launch,
    /// Sign at done.
    Commit,
}

impl LockFor {
    fn what(self) -> &'static str {
        match self {
            LockFor::Launch => "launch",
            LockFor::Commit => "commit",
        }
    }

    /// What the launch does when the lock cannot be had.
    fn without(self) -> &'static str {
        match self {
            LockFor::Launch => "the launch goes on without keeping the cache",
            LockFor::Commit => "nothing is signed, the next launch tunes again",
        }
    }
}

/// Take the lock of `state` for the launch `fingerprint`; None when it
/// timed out or failed (logged, with what the launch does without it); Err
/// when a stop signal ended the wait before the start.
pub fn take(
    state: BorrowedFd<'_>,
    timeout: Duration,
    fingerprint: &Fingerprint,
    purpose: LockFor,
) -> Result<Option<CacheLock>, Stopped> {
    let holder = format!("launch {}", fingerprint.short());
    Ok(match acquire(state, timeout, &holder) {
        Ok(l) => Some(l),
        Err(LockError::Stopped(stopped)) => return Err(stopped),
        Err(LockError::TimedOut(who)) => {
            crate::events::Event::LockGaveUp {
                timeout,
                what: purpose.what().to_string(),
                holder: who.to_string(),
                then: purpose.without().to_string(),
            }
            .emit();
            None
        }
        Err(LockError::Io(e)) => {
            crate::events::Event::LockFailed {
                what: purpose.what().to_string(),
                error: e.to_string(),
                then: purpose.without().to_string(),
            }
            .emit();
            None
        }
    })
}

/// Take the lock of the state directory `state` (`<root>/.keepwrap`),
/// waiting up to `timeout`. `what` names this launch in the holder line
/// (e.g. `launch 8c01d2e4...`). One log line when it has to wait.
pub fn acquire(
    state: BorrowedFd<'_>,
    timeout: Duration,
    what: &str,
) -> Result<CacheLock, LockError> {
    // Never through a symlink, never blocking on a FIFO planted there.
    let mut file =
        crate::cache::fsx::open_state_file_rw(state, "lock", false).map_err(LockError::Io)?;
    let start = Instant::now();
    let mut logged = false;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) => {
                let who = holder(&mut file);
                if start.elapsed() >= timeout {
                    return Err(LockError::TimedOut(who));
                }
                if !logged {
                    crate::events::Event::LockWaiting {
                        timeout,
                        holder: who.to_string(),
                    }
                    .emit();
                    logged = true;
                }
                crate::stops::pause(Duration::from_millis(10)).map_err(LockError::Stopped)?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
        }
    }
    let since = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
    let line = format!(
        "pid {} on host {} ({what}, since {since})\n",
        std::process::id(),
        hostname()
    );
    let written = write_holder(&file, line.into_bytes());
    if logged {
        crate::events::Event::LockTaken {
            waited: start.elapsed(),
        }
        .emit();
    }
    Ok(CacheLock { file, written })
}

/// Write the holder's `line` over whatever the file holds (blanks, or the
/// line of a holder that died holding the lock), padded with spaces to the
/// file's size: one write, no truncation. Returns the bytes written (0 when
/// the write failed: the line is only informative).
fn write_holder(file: &File, mut line: Vec<u8>) -> usize {
    let size = nix::sys::stat::fstat(file).map_or(0, |st| st.st_size.max(0) as u64);
    if size > MAX_LOCK_FILE {
        return match file
            .write_all_at(&line, 0)
            .and_then(|()| file.set_len(line.len() as u64))
        {
            Ok(()) => line.len(),
            Err(_) => 0,
        };
    }
    let width = (size as usize).max(LINE_WIDTH);
    if line.len() < width {
        line.resize(width, b' ');
    }
    match file.write_all_at(&line, 0) {
        Ok(()) => line.len(),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// The lock file as a waiter reads it.
    fn text(state: &std::path::Path) -> String {
        std::fs::read_to_string(state.join("lock")).unwrap()
    }

    #[test]
    fn the_holder_says_who_it_is_and_blanks_it_out_at_release_without_truncating() {
        let t = tempfile::tempdir().unwrap();
        let state_path = t.path().join(".keepwrap");
        std::fs::create_dir(&state_path).unwrap();
        let state = crate::cache::fsx::open_root(&state_path).unwrap();
        let long = format!("launch {}", "a".repeat(300));
        let l = acquire(state.as_fd(), Duration::from_secs(1), &long).unwrap();
        let held = text(&state_path);
        assert!(held.starts_with(&format!("pid {} on host ", std::process::id())));
        assert!(held.contains(&format!("({long}, since ")), "{held:?}");
        drop(l);
        let blank = text(&state_path);
        assert_eq!(blank.len(), held.len(), "not truncated");
        assert!(blank.trim().is_empty(), "{blank:?}");
        // A shorter line over the longer one: nothing of the old one left.
        let l = acquire(state.as_fd(), Duration::from_secs(1), "launch b").unwrap();
        let held = text(&state_path);
        let line = held.trim_end();
        assert!(
            line.ends_with("Z)") && line.contains("(launch b, since "),
            "{held:?}"
        );
        assert_eq!(held.len(), blank.len());
        drop(l);
        // A fresh file: one line padded to LINE_WIDTH.
        std::fs::remove_file(state_path.join("lock")).unwrap();
        let l = acquire(state.as_fd(), Duration::from_secs(1), "launch c").unwrap();
        assert_eq!(text(&state_path).len(), LINE_WIDTH);
        drop(l);
    }
}

//! The lock of a cache root: `<root>/.keepwrap/lock`, an exclusive
//! `flock` (`std::fs::File::lock`) held around prune + restore and around
//! commit, never while the engine runs. The holder writes who it is into
//! the file, so a waiter can say whom it waits for.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// Held until dropped.
pub struct CacheLock {
    file: File,
}

impl Drop for CacheLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

/// Why the lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Still held by someone else at the deadline (who, as they wrote it).
    TimedOut(String),
    Io(std::io::Error),
}

/// The host name (in a pod: the pod's name), `?` when unknown. Read once.
pub fn hostname() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .ok()
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
                    crate::events::root::lock_waiting(timeout, &who);
                    logged = true;
                }
                crate::stops::pause(Duration::from_millis(10));
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
    // The file is empty unless its last holder died holding it: write,
    // then cut what is left of a longer line.
    let _ = file
        .write_all_at(line.as_bytes(), 0)
        .and_then(|()| file.set_len(line.len() as u64));
    if logged {
        crate::events::root::lock_taken(start.elapsed());
    }
    Ok(CacheLock { file })
}

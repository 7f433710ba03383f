//! The subcommands that report and do not launch: `keepwrap status`,
//! `keepwrap explain`, `keepwrap config`, `keepwrap evict` and `clean`,
//! `keepwrap forget`, `keepwrap share-status --json`, `keepwrap fleet ls`
//! and `gc`.

use std::io::Write;
use std::process::ExitCode;

use crate::root::lock::{CacheLock, LockError};
use crate::store::Store;

pub mod config;
pub mod evict;
pub mod explain;
pub mod fleet;
pub mod forget;
pub mod share_status;
pub mod status;

/// Exit status for keepwrap's own usage errors (as clap uses).
pub const EXIT_USAGE: u8 = 2;

/// The lock of the store's root, or why not.
fn lock(store: &Store, timeout: std::time::Duration, what: &str) -> std::io::Result<CacheLock> {
    crate::root::lock::acquire(store.state_fd(), timeout, what).map_err(|e| match e {
        LockError::Io(e) => e,
        // No stop watch in a subcommand: a signal ends it as it comes.
        LockError::Stopped(_) => std::io::Error::from(std::io::ErrorKind::Interrupted),
        LockError::TimedOut(who) => std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!("the lock is held by {who}"),
        ),
    })
}

/// Write `text` to stdout; false when it cannot (a closed pipe).
fn print(text: &[u8]) -> bool {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text).and_then(|()| stdout.flush()).is_ok()
}

/// A subcommand without a cache root: say so, and fail.
fn no_root() -> ExitCode {
    failed(format!(
        "no cache root: {}, and this user has no password-database entry",
        crate::engine::NO_DEFAULT_ROOT
    ));
    ExitCode::FAILURE
}

/// Say why a subcommand failed, in the launch's log format.
fn failed(what: String) {
    crate::events::Event::CommandFailed { what }.emit();
}

//! Events of the supervisor: starting the engine, signals, the end of its
//! process group; and of the log setup itself.

use std::fmt::Display;
use std::time::Duration;

use super::secs;

const TARGET: &str = "keepwrap::supervisor";

/// `KEEPWRAP_LOG` is neither a level nor a filter.
pub fn unknown_log_level(value: &str) {
    tracing::warn!(
        target: TARGET,
        event = "unknown_log_level",
        value,
        "KEEPWRAP_LOG={value:?} is not a log level (off, error, warn, info, debug, trace) nor a filter such as keepwrap=debug: logging at info"
    );
}

pub fn cannot_block_signals(error: impl Display) {
    tracing::error!(target: TARGET, event = "cannot_block_signals", error = %error, "cannot block signals: {error}");
}

pub fn cannot_open_signalfd(error: impl Display) {
    tracing::error!(target: TARGET, event = "cannot_open_signalfd", error = %error, "cannot open a signalfd: {error}");
}

pub fn poll_failed(error: impl Display) {
    tracing::error!(target: TARGET, event = "poll_failed", error = %error, "poll failed: {error}");
}

/// The cache is not kept for this command: `--disable` (`reason`
/// `disabled`), `--keep never` (`keep_never`), no engine launch under
/// `--keep auto` (`not_an_engine`), or an engine launch keepwrap cannot read
/// whole under `--keep auto` (`unreadable_launch`); `why` says it to the
/// operator.
pub fn supervising_only(reason: &str, why: impl Display) {
    tracing::info!(target: TARGET, event = "supervising_only", reason, "{why}");
}

/// The command could not be started.
pub fn cannot_run(program: impl Display, reason: impl Display, status: u8) {
    tracing::error!(
        target: TARGET,
        event = "cannot_run",
        program = %program,
        reason = %reason,
        status,
        "cannot run '{program}': {reason}"
    );
}

/// A stop signal came before the engine was started.
pub fn stopped_before_start(signal: impl Display, status: i32) {
    tracing::info!(
        target: TARGET,
        event = "stopped_before_start",
        signal = %signal,
        status,
        "received {signal} before the engine started: exiting with {status} without starting it"
    );
}

pub fn explain_thread_failed(error: impl Display) {
    tracing::debug!(
        target: TARGET,
        event = "explain_thread_failed",
        error = %error,
        "cannot start a thread for the explanation: {error}"
    );
}

/// `--kill-after` fired.
pub fn kill_after(after: Duration) {
    tracing::warn!(
        target: TARGET,
        event = "kill_after",
        after_s = secs(after),
        "the engine is still running {} after TERM/INT: killing its process group",
        humantime::format_duration(after)
    );
}

/// The engine exited and processes of its group are left.
pub fn drain_term(grace: Duration) {
    tracing::info!(
        target: TARGET,
        event = "drain_term",
        grace_s = secs(grace),
        "the engine exited; sending TERM to what is left of its process group ({} grace)",
        humantime::format_duration(grace)
    );
}

/// What was left of the group outlived `--grace`.
pub fn drain_kill(grace: Duration) {
    tracing::warn!(
        target: TARGET,
        event = "drain_kill",
        grace_s = secs(grace),
        "processes of the engine outlived the {} grace: sending KILL",
        humantime::format_duration(grace)
    );
}

pub fn cannot_become_subreaper(error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_become_subreaper",
        error = %error,
        "cannot become a child subreaper ({error}): orphans of the engine will not be reaped by keepwrap"
    );
}

pub fn cannot_forward(signal: impl Display, pid: i32, error: impl Display) {
    tracing::warn!(
        target: TARGET,
        event = "cannot_forward",
        signal = %signal,
        pid,
        error = %error,
        "cannot forward {signal} to {pid}: {error}"
    );
}

pub fn waitpid_failed(error: impl Display) {
    tracing::warn!(target: TARGET, event = "waitpid_failed", error = %error, "waitpid failed: {error}");
}

/// The last line of every launch: how the engine ended and after how long,
/// once everything keepwrap did at the end is logged.
pub fn engine_ended(status: u8, signal: Option<&str>, uptime: Duration) {
    match signal {
        None => tracing::info!(
            target: TARGET,
            event = "engine_ended",
            status,
            uptime_s = secs(uptime),
            "the engine exited with status {status} after {:.1} s",
            secs(uptime)
        ),
        Some(signal) => tracing::info!(
            target: TARGET,
            event = "engine_ended",
            status,
            signal,
            uptime_s = secs(uptime),
            "the engine was killed by {signal} (status {status}) after {:.1} s",
            secs(uptime)
        ),
    }
}

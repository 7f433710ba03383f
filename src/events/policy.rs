//! Events of the done rule's decisions ([`crate::keeper::policy`]): when
//! tuning is done, and why a set is not signed.

use std::fmt::{self, Display};
use std::time::Duration;

use super::cache_files;
use super::secs;

const TARGET: &str = "keepwrap::keeper";

/// A decision of the done rule ([`crate::keeper::policy`]), logged when its
/// turn comes; the policy itself does no I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The health endpoint answered 200 from the engine.
    DoneHealth { url: String, after: Duration },
    /// No cache file landed for the quiet period.
    DoneQuiet { quiet: Duration, after: Duration },
    /// The command exited 0 (`--done exit`, or `quiet=` before it fired).
    DoneExit { after: Duration },
    /// The probed port is served by another process than the engine.
    NotDoneForeign { url: String, owner: String },
    /// Another launch used the root while this one ran.
    OtherLaunch { other: String },
    /// The first file that landed after done.
    LateLanding,
    /// The engine was stopped before done.
    NotSigningStopped { status: String, signal: String },
    /// The engine exited before done.
    NotSigningEarly { status: String },
    /// A headless node exited 0 before done: its exit says nothing about
    /// tuning.
    NotSigningHeadless,
    /// Files that landed after done, not signed: the engine was stopped.
    LateNotSignedStopped {
        late: usize,
        status: String,
        signal: String,
    },
    /// Files that landed after done, not signed: the engine failed.
    LateNotSignedAbnormal { late: usize, status: String },
    /// Files that landed after done, not signed: a headless node's exit 0
    /// says nothing about tuning.
    LateNotSignedHeadless { late: usize },
    /// The command exited 0 before done, but its exit status may not be
    /// the engine's (a launch not read whole, `timeout --preserve-status`).
    NotSigningExitUnproven,
    /// Files that landed after done, not signed: the command's exit 0 may
    /// not be the engine's.
    LateNotSignedExitUnproven { late: usize },
}

const LATE_KEEP: &str = "the next launch keeps the set signed at done if its files did not change, and tunes again otherwise";

fn tenths(d: &Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

impl Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::DoneHealth { url, after } => write!(
                f,
                "tuning is done: GET {url} answered 200 {} after the launch",
                tenths(after)
            ),
            Note::DoneQuiet { quiet, after } => write!(
                f,
                "tuning is done: no cache file landed for {} ({} after the launch)",
                humantime::format_duration(*quiet),
                tenths(after)
            ),
            Note::DoneExit { after } => write!(
                f,
                "tuning is done: the command exited 0 ({} after the launch)",
                tenths(after)
            ),
            Note::NotDoneForeign { url, owner } => write!(
                f,
                "not done yet: GET {url} answered 200, but the port is served by {owner}, not by the engine; waiting for the engine's own server"
            ),
            Note::OtherLaunch { other } => write!(
                f,
                "not signing: {other} used this cache root while this launch ran; their rank files may be mixed"
            ),
            Note::LateLanding => f.write_str(
                "a cache file landed after tuning was done: what lands now is provisional, signed only if the engine exits 0 on its own",
            ),
            Note::NotSigningStopped { status, signal } => write!(
                f,
                "not signing: the engine ended with status {status} after keepwrap forwarded {signal}: a stop is never tuning done"
            ),
            Note::NotSigningEarly { status } => write!(
                f,
                "not signing: the engine exited with status {status} before tuning was done"
            ),
            Note::NotSigningHeadless => f.write_str(
                "not signing: a headless node exited 0 before tuning was done: its exit says nothing about tuning",
            ),
            Note::NotSigningExitUnproven => f.write_str(
                "not signing: the command exited 0 before tuning was done, and its exit status may not be the engine's",
            ),
            Note::LateNotSignedExitUnproven { late } => write!(
                f,
                "not signing the {late} {} that landed after tuning was done: the command's exit 0 may not be the engine's; {LATE_KEEP}",
                cache_files(*late)
            ),
            Note::LateNotSignedHeadless { late } => write!(
                f,
                "not signing the {late} {} that landed after tuning was done: a headless node's exit 0 says nothing about tuning; {LATE_KEEP}",
                cache_files(*late)
            ),
            Note::LateNotSignedStopped {
                late,
                status,
                signal,
            } => write!(
                f,
                "not signing the {late} {} that landed after tuning was done: the engine ended with status {status} after keepwrap forwarded {signal}; {LATE_KEEP}",
                cache_files(*late)
            ),
            Note::LateNotSignedAbnormal { late, status } => write!(
                f,
                "not signing the {late} {} that landed after tuning was done: the engine ended abnormally with status {status}; {LATE_KEEP}",
                cache_files(*late)
            ),
        }
    }
}

impl Note {
    /// Log this decision as its event.
    pub fn log(&self) {
        match self {
            Note::DoneHealth { url, after } => tracing::info!(
                target: TARGET,
                event = "tuning_done",
                rule = "health",
                url = url.as_str(),
                after_s = secs(*after),
                "{self}"
            ),
            Note::DoneQuiet { quiet, after } => tracing::info!(
                target: TARGET,
                event = "tuning_done",
                rule = "quiet",
                quiet_s = secs(*quiet),
                after_s = secs(*after),
                "{self}"
            ),
            Note::DoneExit { after } => tracing::info!(
                target: TARGET,
                event = "tuning_done",
                rule = "exit",
                after_s = secs(*after),
                "{self}"
            ),
            Note::NotDoneForeign { url, owner } => tracing::info!(
                target: TARGET,
                event = "port_not_engines",
                url = url.as_str(),
                owner = owner.as_str(),
                "{self}"
            ),
            Note::OtherLaunch { other } => tracing::info!(
                target: TARGET,
                event = "not_signing_other_launch",
                other = other.as_str(),
                "{self}"
            ),
            Note::LateLanding => {
                tracing::info!(target: TARGET, event = "late_landing", "{self}")
            }
            Note::NotSigningStopped { status, signal } => tracing::info!(
                target: TARGET,
                event = "not_signing_stopped",
                status = status.as_str(),
                signal = signal.as_str(),
                "{self}"
            ),
            Note::NotSigningEarly { status } => tracing::info!(
                target: TARGET,
                event = "not_signing_early_exit",
                status = status.as_str(),
                "{self}"
            ),
            Note::NotSigningHeadless => {
                tracing::info!(target: TARGET, event = "not_signing_headless", "{self}")
            }
            Note::NotSigningExitUnproven => {
                tracing::info!(target: TARGET, event = "not_signing_exit_unproven", "{self}")
            }
            Note::LateNotSignedExitUnproven { late } => tracing::info!(
                target: TARGET,
                event = "late_not_signed_exit_unproven",
                late,
                "{self}"
            ),
            Note::LateNotSignedHeadless { late } => tracing::info!(
                target: TARGET,
                event = "late_not_signed_headless",
                late,
                "{self}"
            ),
            Note::LateNotSignedStopped {
                late,
                status,
                signal,
            } => tracing::info!(
                target: TARGET,
                event = "late_not_signed_stopped",
                late,
                status = status.as_str(),
                signal = signal.as_str(),
                "{self}"
            ),
            Note::LateNotSignedAbnormal { late, status } => tracing::info!(
                target: TARGET,
                event = "late_not_signed_abnormal",
                late,
                status = status.as_str(),
                "{self}"
            ),
        }
    }
}

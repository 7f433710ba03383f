//! Events of the done rule's decisions ([`crate::keeper::policy`]): when
//! tuning is done, and why a set is not signed.

use std::fmt::{self, Display};
use std::path::PathBuf;
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
    /// Another launch used the root after the sign at done.
    OtherAfterSign { other: String },
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
        late: Late,
        status: String,
        signal: String,
    },
    /// Files that landed after done, not signed: the engine failed.
    LateNotSignedAbnormal { late: Late, status: String },
    /// Files that landed after done, not signed: a headless node's exit 0
    /// says nothing about tuning.
    LateNotSignedHeadless { late: Late },
    /// Files that landed after done, not signed: another launch used the
    /// root after the sign at done.
    LateNotSignedOther { late: Late, other: String },
    /// The command exited 0 before done, but its exit status may not be
    /// the engine's (a launch not read whole, `timeout --preserve-status`).
    NotSigningExitUnproven,
    /// Files that landed after done, not signed: the command's exit 0 may
    /// not be the engine's.
    LateNotSignedExitUnproven { late: Late },
}

/// The cache files that landed after done and are not signed, and what
/// became of the set signed at done: the policy knows the files, the
/// commit worker (which signed the set) judges the rest before the line is
/// logged, so that the launch's last verdict is true.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Late {
    /// Relative to the cache root.
    pub files: Vec<PathBuf>,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Outcome {
    /// Not judged against the set signed at done.
    #[default]
    Unjudged,
    /// Nothing was signed at done.
    NothingSigned,
    /// These members of the set signed at done changed (or are gone) since:
    /// the set no longer holds.
    Broken { changed: Vec<PathBuf> },
    /// The set signed at done (`signed` files) is as it was signed; the
    /// late files are new ones beside it.
    Holds { signed: usize },
    /// The set signed at done (`signed` files) is in the store, whole
    /// (another launch's prune moved it there).
    Stored { signed: usize },
}

impl Late {
    pub fn new(files: Vec<PathBuf>) -> Late {
        Late {
            files,
            outcome: Outcome::Unjudged,
        }
    }

    /// Whether the set signed at done is known to hold.
    fn holds(&self) -> bool {
        matches!(self.outcome, Outcome::Holds { .. } | Outcome::Stored { .. })
    }
}

/// The files that landed after done are all as the sign at done left them
/// (the engine saved again what it had): the set signed at done holds.
pub fn late_as_signed(files: usize) {
    tracing::debug!(
        target: TARGET,
        event = "late_as_signed",
        files,
        "the {files} {} that landed after tuning was done {} as signed at done: the set signed at done holds",
        cache_files(files),
        if files == 1 { "is" } else { "are" }
    );
}

/// At most four paths, then how many more.
fn some_paths(paths: &[PathBuf]) -> String {
    const SHOWN: usize = 4;
    let mut text = super::listed(paths.iter().take(SHOWN).map(|p| super::Shown(p)));
    if paths.len() > SHOWN {
        text.push_str(&format!(" and {} more", paths.len() - SHOWN));
    }
    text
}

impl Late {
    /// `not signing the N cache files that landed after tuning was done
    /// (PATHS): WHY; OUTCOME`.
    fn say(&self, f: &mut fmt::Formatter<'_>, why: impl Display) -> fmt::Result {
        let n = self.files.len();
        write!(
            f,
            "not signing the {n} {} that landed after tuning was done ({}): {why}; ",
            cache_files(n),
            some_paths(&self.files)
        )?;
        match &self.outcome {
            Outcome::Unjudged => f.write_str(
                "the next launch keeps the set signed at done if its files did not change, and tunes again otherwise",
            ),
            Outcome::NothingSigned => {
                f.write_str("nothing was signed at done: the next launch tunes again")
            }
            Outcome::Broken { changed } => write!(
                f,
                "the set signed at done no longer holds ({} changed or gone since it was signed): the next launch tunes again",
                some_paths(changed)
            ),
            Outcome::Stored { signed } => write!(
                f,
                "the {signed} {} signed at done went into the store whole: the next launch of this one brings them back",
                cache_files(*signed)
            ),
            Outcome::Holds { signed } => write!(
                f,
                "the {signed} {} signed at done stay signed as they were: the next launch keeps them and removes the {}",
                cache_files(*signed),
                if n == 1 { "late one" } else { "late ones" }
            ),
        }
    }
}

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
            Note::OtherAfterSign { other } => write!(
                f,
                "{other} used this cache root after tuning was done: what lands now is not signed, even at an exit 0 (the last line of this launch about the cache says what became of the set signed at done)"
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
            Note::LateNotSignedExitUnproven { late } => {
                late.say(f, "the command's exit 0 may not be the engine's")
            }
            Note::LateNotSignedHeadless { late } => {
                late.say(f, "a headless node's exit 0 says nothing about tuning")
            }
            Note::LateNotSignedStopped {
                late,
                status,
                signal,
            } => late.say(
                f,
                format_args!(
                    "the engine ended with status {status} after keepwrap forwarded {signal}"
                ),
            ),
            Note::LateNotSignedAbnormal { late, status } => late.say(
                f,
                format_args!("the engine ended abnormally with status {status}"),
            ),
            Note::LateNotSignedOther { late, other } => late.say(
                f,
                format_args!("{other} used this cache root while this launch ran, and its files may be mixed in"),
            ),
        }
    }
}

impl Note {
    /// The files that landed after done, for a verdict about them.
    pub fn late_mut(&mut self) -> Option<&mut Late> {
        match self {
            Note::LateNotSignedStopped { late, .. }
            | Note::LateNotSignedAbnormal { late, .. }
            | Note::LateNotSignedHeadless { late }
            | Note::LateNotSignedOther { late, .. }
            | Note::LateNotSignedExitUnproven { late } => Some(late),
            _ => None,
        }
    }

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
            Note::OtherAfterSign { other } => tracing::info!(
                target: TARGET,
                event = "other_launch_after_done",
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
                late = late.files.len(),
                set_holds = late.holds(),
                "{self}"
            ),
            Note::LateNotSignedHeadless { late } => tracing::info!(
                target: TARGET,
                event = "late_not_signed_headless",
                late = late.files.len(),
                set_holds = late.holds(),
                "{self}"
            ),
            Note::LateNotSignedStopped {
                late,
                status,
                signal,
            } => tracing::info!(
                target: TARGET,
                event = "late_not_signed_stopped",
                late = late.files.len(),
                set_holds = late.holds(),
                status = status.as_str(),
                signal = signal.as_str(),
                "{self}"
            ),
            Note::LateNotSignedAbnormal { late, status } => tracing::info!(
                target: TARGET,
                event = "late_not_signed_abnormal",
                late = late.files.len(),
                set_holds = late.holds(),
                status = status.as_str(),
                "{self}"
            ),
            Note::LateNotSignedOther { late, other } => tracing::info!(
                target: TARGET,
                event = "late_not_signed_other_launch",
                late = late.files.len(),
                set_holds = late.holds(),
                other = other.as_str(),
                "{self}"
            ),
        }
    }
}

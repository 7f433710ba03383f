//! A launch's turn on a shared root: under the cache lock, look at the
//! other launches (the verdict is [`running::verdict`]'s), go on, go on
//! hands-off, or wait for one that is still tuning.

use crate::events::OtherLaunch as _;
use std::time::{Duration, Instant};

use crate::root::lock::{self, CacheLock, LockFor};
use crate::root::running::{self, Identity, Runs, Seen, Verdict, Why};
use crate::stops::Stopped;
use crate::store::Store;

use super::Settings;

/// Whether this launch may keep the cache, once the other launches on the
/// root have been looked at.
pub(super) enum Turn {
    /// Keep the cache. The launches done tuning whose engines run beside
    /// this one's ([`Verdict::Beside`]): while any of them lived when this
    /// one started, it signs nothing.
    Go(Vec<Seen>),
    HandsOff,
}

/// How often a waiting launch looks at the other launches again.
const WAIT_POLL: Duration = Duration::from_millis(200);
/// How often a waiting launch says it still waits.
const WAIT_PROGRESS: Duration = Duration::from_secs(60);

/// Look at the other launches on the root under the cache lock: go on, go
/// on hands-off, or wait (bounded by `--wait-for-tuning`) for one that is
/// still tuning, then look again. Returns the lock (held, when there is a
/// store and it was taken) and the turn. Runs before the engine starts: a
/// TERM ends the wait at once ([`crate::stops`]: Err).
pub(super) fn wait_turn(
    args: &Settings,
    runs: &Runs,
    store: Option<&Store>,
    me: &Identity,
) -> Result<(Option<CacheLock>, Turn), Stopped> {
    let started = Instant::now();
    let deadline = started.checked_add(args.wait_for_tuning);
    let mut waited_for: Option<String> = None;
    loop {
        let lock = match store {
            Some(s) => match lock::take(
                s.state_fd(),
                args.lock_timeout,
                &me.fingerprint,
                LockFor::Launch,
            )? {
                Some(l) => Some(l),
                None => return Ok((None, Turn::HandsOff)),
            },
            None => None,
        };
        let seen = runs.scan_and_tidy();
        let other = match running::verdict(me, &seen) {
            Verdict::Go => return Ok((lock, go(waited_for, started, Vec::new()))),
            Verdict::Beside(others) => return Ok((lock, go(waited_for, started, others))),
            Verdict::HandsOff(why, other) => {
                hands_off_line(why, other);
                return Ok((lock, Turn::HandsOff));
            }
            Verdict::Wait(other) => other.clone(),
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            crate::events::Event::GaveUpWaiting {
                other: other.to_string(),
                other_fingerprint: other.fingerprint().to_string(),
                other_pid: other.pid(),
                limit: args.wait_for_tuning,
            }
            .emit();
            return Ok((lock, Turn::HandsOff));
        }
        drop(lock);
        if waited_for.is_none() {
            crate::events::Event::WaitingForOther {
                other: other.to_string(),
                other_fingerprint: other.fingerprint().to_string(),
                other_pid: other.pid(),
                limit: args.wait_for_tuning,
            }
            .emit();
        }
        waited_for = Some(other.who());
        wait_for_other(args, runs, me, started, deadline)?;
    }
}

/// Keep the cache, beside `others` (launches done tuning whose engines
/// run), with the lines that say so: the launch waited for (`waited_for`,
/// since `started`) is done, and this one starts beside another.
fn go(waited_for: Option<String>, started: Instant, others: Vec<&Seen>) -> Turn {
    if let Some(other) = waited_for {
        crate::events::Event::OtherDoneTuning {
            other: other.to_string(),
            waited: started.elapsed(),
        }
        .emit();
    }
    if let Some(first) = others.first() {
        crate::events::Event::BesideOtherLaunch {
            other: first.to_string(),
            other_fingerprint: first.fingerprint().to_string(),
            other_pid: first.pid(),
            more: others.len() - 1,
        }
        .emit();
    }
    Turn::Go(others.into_iter().cloned().collect())
}

/// Look again, without the lock, until the launch waited for is done or
/// gone, or the wait's deadline passes; say every [`WAIT_PROGRESS`] that
/// it still waits. Err: a stop signal ended the wait.
fn wait_for_other(
    args: &Settings,
    runs: &Runs,
    me: &Identity,
    started: Instant,
    deadline: Option<Instant>,
) -> Result<(), Stopped> {
    let mut next_progress = Instant::now() + WAIT_PROGRESS;
    loop {
        crate::stops::pause(WAIT_POLL)?;
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Ok(());
        }
        let seen = runs.scan();
        let Verdict::Wait(o) = running::verdict(me, &seen) else {
            return Ok(());
        };
        if now >= next_progress {
            crate::events::Event::StillWaiting {
                other: o.to_string(),
                other_fingerprint: o.fingerprint().to_string(),
                other_pid: o.pid(),
                waited: started.elapsed(),
                limit: args.wait_for_tuning,
            }
            .emit();
            next_progress = now + WAIT_PROGRESS;
        }
    }
}

/// The one line a launch that goes on hands-off logs, naming the launch in
/// its way and the topology that works.
fn hands_off_line(why: Why, other: &Seen) {
    use crate::events::{Event, OtherLaunch};
    let (other, other_fingerprint, other_pid) = (
        other.to_string(),
        other.fingerprint().to_string(),
        other.pid(),
    );
    match why {
        Why::Peer => Event::PeerOnRoot {
            other,
            other_fingerprint,
            other_pid,
        },
        Why::Orphan => Event::OrphanOnRoot {
            other,
            other_fingerprint,
            other_pid,
        },
        Why::HandsOff => Event::OtherOnRoot {
            other,
            other_fingerprint,
            other_pid,
        },
    }
    .emit();
}

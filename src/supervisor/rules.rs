//! The supervisor's rules over signals and time, apart from the processes
//! they act on: where each signal keepwrap receives goes, when
//! `--kill-after` fires, and how what is left of the child's process group
//! is drained once the child ended. They see the world only through
//! [`Child`]: [`super::child::Process`] is the real one (kill(2), waitpid,
//! the signalfd, the monotonic clock); the tests below drive the rules with
//! a simulated one, as a table of cases, with no process.

use std::time::{Duration, Instant};

use super::settings::Stopping;
use crate::clock;
use crate::signals::{is_forwarded, Ended};

/// While waiting for the rest of a process group to go, how often to look.
pub const GROUP_RECHECK: Duration = Duration::from_millis(20);

/// After the KILL of the drain, how long the kernel gets to finish what is
/// left (KILL cannot be caught, but a process in an uninterruptible sleep
/// goes only when it wakes).
pub const KILL_WAIT: Duration = Duration::from_secs(2);

/// A signal keepwrap received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Its number, 1 to 64.
    pub signo: i32,
    /// Raised by keepwrap itself (a SIGPIPE or SIGXFSZ from one of its own
    /// writes): it says nothing to the child.
    pub by_keepwrap: bool,
}

/// What the rules act on and wait for: the main child and its process
/// group, keepwrap's other children (orphans reparented to it), the signals
/// keepwrap receives, and the time.
pub trait Child {
    /// Send signal `signo` to the main child, or to its whole process group.
    fn signal(&mut self, signo: i32, group: bool);
    /// Send signal `signo` to each child of keepwrap's still around, one by
    /// one (orphans reparented to keepwrap included).
    fn signal_children(&mut self, signo: i32);
    /// Reap every child that ended, without waiting; how the main child
    /// ended, if it was among them.
    fn reap(&mut self) -> Option<Ended>;
    /// Is anything left: a process of the main child's group, or a child of
    /// keepwrap's not yet reaped?
    fn leftovers(&mut self) -> bool;
    /// The time, on a clock that never goes back.
    fn now(&self) -> Instant;
    /// Wait until a signal comes or `until`, whichever is first.
    fn wait(&mut self, until: Instant);
    /// The next signal received and not yet read, without waiting.
    fn received(&mut self) -> Option<Received>;
    /// Say what the rules do: log the event.
    fn say(&mut self, event: crate::events::Event) {
        event.emit();
    }
}

/// The rules while the main child runs: every signal keepwrap receives is
/// forwarded to the child (or its group with `--kill-group`) but CHLD,
/// which reaps, and those that never reach a child ([`is_forwarded`]) or
/// that keepwrap raised itself; the first forwarded TERM or INT arms
/// `--kill-after`, which KILLs the whole group when it fires.
#[derive(Debug)]
pub struct Running {
    stopping: Stopping,
    kill_at: Option<Instant>,
}

impl Running {
    pub fn new(stopping: Stopping) -> Self {
        Running {
            stopping,
            kill_at: None,
        }
    }

    /// When the rules next act on their own: `--kill-after`, once armed.
    pub fn deadline(&self) -> Option<Instant> {
        self.kill_at
    }

    /// At `now`: KILL the child's whole group if `--kill-after` is due.
    pub fn tick(&mut self, now: Instant, child: &mut impl Child) {
        if self.kill_at.is_some_and(|at| now >= at) {
            child.say(crate::events::Event::KillAfter {
                after: self.stopping.kill_after.unwrap_or_default(),
            });
            child.signal(libc::SIGKILL, true);
            self.kill_at = None;
        }
    }

    /// Read every signal received: reap on CHLD, forward the others, and
    /// call `forwarded` with each one forwarded. How the main child ended,
    /// if it did.
    pub fn dispatch(
        &mut self,
        child: &mut impl Child,
        mut forwarded: impl FnMut(i32),
    ) -> Option<Ended> {
        let mut ended = None;
        while let Some(Received { signo, by_keepwrap }) = child.received() {
            if signo == libc::SIGCHLD {
                if let Some(e) = child.reap() {
                    ended = Some(e);
                }
            } else if is_forwarded(signo) && !by_keepwrap {
                child.signal(signo, self.stopping.kill_group);
                forwarded(signo);
                if matches!(signo, libc::SIGTERM | libc::SIGINT) && self.kill_at.is_none() {
                    self.kill_at = self
                        .stopping
                        .kill_after
                        .map(|d| clock::after(child.now(), d));
                }
            }
        }
        // A SIGCHLD can coalesce with an earlier one: reap once more.
        ended.or_else(|| child.reap())
    }
}

/// After the main child ended: TERM what is left of its process group (and
/// every other child of keepwrap's), give it `--grace`, then KILL, and reap
/// everything. Signals that arrive meanwhile still reach the group.
pub fn drain(child: &mut impl Child, stopping: Stopping) {
    child.reap();
    if !child.leftovers() {
        return;
    }
    child.say(crate::events::Event::DrainTerm {
        grace: stopping.grace,
    });
    terminate_all(child, libc::SIGTERM);
    let deadline = clock::after(child.now(), stopping.grace);
    loop {
        child.reap();
        if !child.leftovers() {
            return;
        }
        let now = child.now();
        if now >= deadline {
            break;
        }
        child.wait(clock::after(now, GROUP_RECHECK).min(deadline));
        while let Some(Received { signo, by_keepwrap }) = child.received() {
            if is_forwarded(signo) && !by_keepwrap {
                terminate_all(child, signo);
            }
        }
    }
    child.say(crate::events::Event::DrainKill {
        grace: stopping.grace,
    });
    terminate_all(child, libc::SIGKILL);
    // KILL cannot be caught: wait for the kernel to finish them, boundedly.
    let deadline = clock::after(child.now(), KILL_WAIT);
    while child.leftovers() && child.now() < deadline {
        child.reap();
        child.wait(clock::after(child.now(), GROUP_RECHECK));
        while child.received().is_some() {}
    }
    child.reap();
}

/// Signal the main child's process group and every remaining child of
/// keepwrap's.
fn terminate_all(child: &mut impl Child, signo: i32) {
    child.signal(signo, true);
    child.signal_children(signo);
}

#[cfg(test)]
mod tests;

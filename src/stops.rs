//! Stop signals before the engine starts. Everything before the spawn (the
//! cache lock, prune and restore, the share, waiting for another launch to
//! finish tuning) runs on the supervisor's own thread; while it runs, TERM,
//! INT, HUP and QUIT are watched through a signalfd of their own. Every
//! wait before the start sleeps in [`pause`], which is a `poll` on that
//! signalfd: a stop signal ends the wait at once with [`Stopped`], which
//! each wait returns to its caller up to the supervisor, and the supervisor
//! exits with 128+N without starting the engine. A stop signal that comes
//! while no wait runs is seen at the next wait, or by [`unwatch`] when the
//! preparation ends. Other signals are not read here: they stay queued for
//! the supervisor's signalfd and reach the engine once it runs.
//!
//! Outside a watch (after the engine started, or in a command that starts
//! no engine) [`pause`] is a plain sleep.

use std::os::fd::AsFd;
use std::sync::Mutex;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// The signals that end keepwrap before the engine has started.
pub const STOPS: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// A stop signal came before the start: the wait ended, and so does the
/// preparation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped(pub Signal);

struct Watch {
    fd: SignalFd,
    /// The stop signal seen, once one came: every later wait ends at once.
    stopped: Option<Signal>,
}

static WATCH: Mutex<Option<Watch>> = Mutex::new(None);

/// Watch for stop signals until [`unwatch`]. The stop signals must already
/// be blocked in the calling thread (they are: keepwrap blocks every
/// handled signal first). False when the signalfd cannot be opened: the
/// waits are then plain sleeps and a stop signal waits for the engine.
pub fn watch() -> bool {
    let mut set = SigSet::empty();
    for s in STOPS {
        set.add(s);
    }
    let Ok(fd) = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) else {
        return false;
    };
    *lock() = Some(Watch { fd, stopped: None });
    true
}

/// End the watch: a stop signal that came since the last wait is returned
/// now (before the engine starts); later ones reach the engine.
pub fn unwatch() -> Result<(), Stopped> {
    match lock().take() {
        Some(mut w) => w.look(),
        None => Ok(()),
    }
}

/// Sleep `d`; while a watch is on, wake for a stop signal and return it.
pub fn pause(d: Duration) -> Result<(), Stopped> {
    let mut guard = lock();
    let Some(w) = guard.as_mut() else {
        drop(guard);
        std::thread::sleep(d);
        return Ok(());
    };
    w.look()?;
    let timeout = PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(w.fd.as_fd(), PollFlags::POLLIN)];
    if poll(&mut fds, timeout).is_err() {
        // EINTR, or no poll at all: never spin.
        std::thread::sleep(d.min(Duration::from_millis(10)));
    }
    w.look()
}

/// While a watch is on, the stop signal that has come, if any; for a wait
/// that does not sleep in [`pause`] (a channel's, with a timeout), between
/// its slices.
pub fn check() -> Result<(), Stopped> {
    pause(Duration::ZERO)
}

impl Watch {
    fn look(&mut self) -> Result<(), Stopped> {
        if self.stopped.is_none() {
            self.stopped = match self.fd.read_signal() {
                Ok(Some(info)) => Signal::try_from(info.ssi_signo as i32).ok(),
                _ => None,
            };
        }
        match self.stopped {
            Some(sig) => Err(Stopped(sig)),
            None => Ok(()),
        }
    }
}

fn lock() -> std::sync::MutexGuard<'static, Option<Watch>> {
    WATCH
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A stop signal (TERM, INT, HUP, QUIT) was forwarded to the running
/// engine: keepwrap is being stopped, and what it does after the engine
/// ends must fit in the stop's grace period (`docker stop`'s 10 s).
static FORWARDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Note that a stop signal was forwarded to the engine.
pub fn forwarded(signo: i32) {
    if STOPS.iter().any(|s| *s as i32 == signo) {
        FORWARDED.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Is keepwrap being stopped: a stop signal was forwarded to the engine,
/// or one is pending now (it came after the engine ended, when nothing
/// reads signals any more)?
pub fn stopping() -> bool {
    if FORWARDED.load(std::sync::atomic::Ordering::SeqCst) {
        return true;
    }
    let Some(pending) = crate::sys::pending_signals() else {
        return false;
    };
    STOPS.iter().any(|s| pending.contains(*s))
}

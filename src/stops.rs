//! Stop signals before the engine starts. Everything before the spawn (the
//! cache lock, prune and restore, the share, waiting for another launch to
//! finish tuning) runs on the supervisor's own thread; while it runs, TERM,
//! INT, HUP and QUIT are watched through a signalfd of their own. Every
//! wait before the start sleeps in [`pause`], which is a `poll` on that
//! signalfd: a stop signal ends the wait at once, and the supervisor's
//! handler (given to [`watch`]) exits with 128+N without starting the
//! engine. A stop signal that comes while no wait runs is seen at the next
//! wait, or by [`unwatch`] when the preparation ends. Other signals are not
//! read here: they stay queued for the supervisor's signalfd and reach the
//! engine once it runs.
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

/// What a stop signal before the start does: log and exit; never returns.
pub type OnStop = fn(Signal) -> !;

struct Watch {
    fd: SignalFd,
    on_stop: OnStop,
}

static WATCH: Mutex<Option<Watch>> = Mutex::new(None);

/// Watch for stop signals until [`unwatch`]; `on_stop` is called with the
/// first one a wait sees. The stop signals must already be blocked in the
/// calling thread (they are: keepwrap blocks every handled signal first).
/// False when the signalfd cannot be opened: the waits are then plain
/// sleeps and a stop signal waits for the engine.
pub fn watch(on_stop: OnStop) -> bool {
    let mut set = SigSet::empty();
    for s in STOPS {
        set.add(s);
    }
    let Ok(fd) = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) else {
        return false;
    };
    *lock() = Some(Watch { fd, on_stop });
    true
}

/// End the watch: a stop signal that came since the last wait is handled
/// now (before the engine starts); later ones reach the engine.
pub fn unwatch() {
    let watch = lock().take();
    if let Some(w) = watch {
        if let Some(sig) = pending(&w.fd) {
            (w.on_stop)(sig);
        }
    }
}

/// Sleep `d`; while a watch is on, wake for a stop signal and hand it to
/// the watch's handler (which exits).
pub fn pause(d: Duration) {
    let guard = lock();
    let Some(w) = guard.as_ref() else {
        drop(guard);
        std::thread::sleep(d);
        return;
    };
    let timeout = PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(w.fd.as_fd(), PollFlags::POLLIN)];
    if poll(&mut fds, timeout).is_err() {
        // EINTR, or no poll at all: never spin.
        std::thread::sleep(d.min(Duration::from_millis(10)));
    }
    if let Some(sig) = pending(&w.fd) {
        let on_stop = w.on_stop;
        drop(guard);
        on_stop(sig);
    }
}

/// While a watch is on, hand a stop signal that has come to the watch's
/// handler (which exits); for a wait that does not sleep in [`pause`] (a
/// channel's, with a timeout), between its slices.
pub fn check() {
    pause(Duration::ZERO);
}

fn pending(fd: &SignalFd) -> Option<Signal> {
    match fd.read_signal() {
        Ok(Some(info)) => Signal::try_from(info.ssi_signo as i32).ok(),
        _ => None,
    }
}

fn lock() -> std::sync::MutexGuard<'static, Option<Watch>> {
    WATCH
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

//! Signals: which ones keepwrap handles and forwards, the mask every
//! thread of keepwrap blocks (so that they queue for the supervisor's
//! signalfd), their names, and how a process ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use nix::sys::signal::{SigSet, Signal};

/// Signals that report a fault of the thread that raised it. They are never
/// blocked (a blocked fault kills anyway) and never forwarded.
const SYNCHRONOUS: [i32; 7] = [
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGABRT,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// Signals that keepwrap itself must not be stopped by while the child owns
/// the terminal; they are read and dropped.
const SWALLOWED: [i32; 3] = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU];

/// The highest signal number (the last realtime signal).
pub const SIGNAL_MAX: i32 = 64;

/// Does keepwrap pass signal `signo` on to the child? Every asynchronous
/// signal, 1 to 64, realtime ones included, as tini does: all but KILL and
/// STOP (they never reach a process), the synchronous ones, CHLD (keepwrap's
/// own) and the terminal stop signals TSTP, TTIN and TTOU (dropped).
pub fn is_forwarded(signo: i32) -> bool {
    (1..=SIGNAL_MAX).contains(&signo)
        && !matches!(signo, libc::SIGKILL | libc::SIGSTOP | libc::SIGCHLD)
        && !SYNCHRONOUS.contains(&signo)
        && !SWALLOWED.contains(&signo)
}

/// Every signal keepwrap reads from its signalfd, as a kernel mask (bit N-1
/// is signal N): all but the synchronous ones.
fn handled_mask() -> u64 {
    (1..=SIGNAL_MAX)
        .filter(|n| !SYNCHRONOUS.contains(n) && !matches!(*n, libc::SIGKILL | libc::SIGSTOP))
        .fold(0, |mask, n| mask | 1 << (n - 1))
}

/// Every signal keepwrap reads from its signalfd: the forwarded ones, CHLD,
/// and the terminal stop signals.
pub fn handled_signals() -> SigSet {
    crate::sys::sigset_of_mask(handled_mask())
}

/// Block the handled signals in the calling thread. Call before any thread
/// starts, so that every thread inherits the mask and the signals queue for
/// the signalfd.
///
/// The C library keeps signals 32 and 33 for itself: its sigprocmask never
/// blocks them, and drops them from any mask it sets (so code that saves
/// and restores the mask through it unblocks them again). With their default
/// action they would kill keepwrap. So they are blocked with the raw system
/// call, and also ignored: while blocked they still queue for the signalfd
/// (the kernel never discards a blocked signal), and if some library call
/// unblocks them they are dropped instead of killing the supervisor.
/// keepwrap uses neither of the C library's reasons for them
/// (`pthread_cancel`, `setuid` across threads). The child spawn blocks
/// them again.
pub fn block_signals() -> nix::Result<SigSet> {
    for signo in 32..libc::SIGRTMIN() {
        crate::sys::set_disposition(signo, libc::SIG_IGN);
    }
    block_handled()
}

/// Block the handled signals in a thread keepwrap starts, first thing in
/// its body. The C library starts every thread with signals 32 and 33
/// unblocked, and as they are ignored, a thread that leaves them unblocked
/// would take them and drop them instead of leaving them queued for the
/// signalfd.
pub fn block_signals_in_thread() {
    let _ = block_handled();
}

/// Start a thread named `name` that runs `f` with the handled signals
/// blocked, and block them again in the calling thread: the C library's
/// first thread start unblocks its own signals (32 and 33 with glibc, 33
/// and 34 with musl) in the thread that starts it, where they would be
/// taken and dropped instead of queued for the supervisor's signalfd. Every
/// thread keepwrap starts, starts here or in [`spawn_scoped`].
pub fn spawn<F, T>(name: &str, f: F) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    starting_a_thread(|| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                block_signals_in_thread();
                f()
            })
    })
}

/// [`spawn`] for a thread of `scope`.
pub fn spawn_scoped<'scope, 'env, F, T>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: &str,
    f: F,
) -> std::io::Result<std::thread::ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    starting_a_thread(|| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(scope, move || {
                block_signals_in_thread();
                f()
            })
    })
}

/// `f` over `items` cut into as many parts as the machine has cores (at
/// most 4): the first part on this thread, the others on threads named
/// `name`, or here too when a thread cannot be started. The results, one
/// per part, in order.
pub fn in_parts<T: Sync, R: Send>(items: &[T], name: &str, f: impl Fn(&[T]) -> R + Sync) -> Vec<R> {
    let parts = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4);
    let mut chunks = items.chunks(items.len().div_ceil(parts).max(1));
    let first = chunks.next().unwrap_or_default();
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .map(|part| (part, spawn_scoped(scope, name, move || f(part))))
            .collect();
        let mut out = Vec::with_capacity(handles.len() + 1);
        out.push(f(first));
        for (part, handle) in handles {
            // A part's panic is this thread's (the release build aborts
            // on panic before it gets here).
            out.push(match handle {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(_) => f(part),
            });
        }
        out
    })
}

/// Has keepwrap started a thread yet?
static STARTED_A_THREAD: AtomicBool = AtomicBool::new(false);
/// The C library's own signals taken out of the queue before keepwrap's
/// first thread start, for the supervisor to forward ([`take_held`]).
static HELD: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Run `start` (which starts a thread that blocks the handled signals
/// first thing), then block them again in this thread. The C library
/// unblocks its own signals in the thread that starts its first thread,
/// and starts that thread with them unblocked: those pending then would be
/// taken by it (glibc's handlers, or dropped as ignored) instead of read
/// from the signalfd and forwarded. So the first time, the pending ones
/// are taken out of the queue first and held for the supervisor, which
/// forwards them as it forwards every signal ([`take_held`]). The first
/// thread is always started by the supervisor's thread, the only one there
/// is then.
fn starting_a_thread<H>(start: impl FnOnce() -> H) -> H {
    let first = !STARTED_A_THREAD.swap(true, Ordering::SeqCst);
    if first {
        let held = take_pending(library_signals_mask());
        if !held.is_empty() {
            held_signals().extend(held);
        }
    }
    let started = start();
    block_signals_in_thread();
    started
}

/// The signals held at keepwrap's first thread start, once: each is to be
/// forwarded as if just read from the signalfd.
pub fn take_held() -> Vec<i32> {
    if !STARTED_A_THREAD.load(Ordering::Relaxed) {
        return Vec::new();
    }
    std::mem::take(&mut *held_signals())
}

fn held_signals() -> std::sync::MutexGuard<'static, Vec<i32>> {
    HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The C library's own signals, as a kernel mask: 32 up to `SIGRTMIN`
/// (32 and 33 with glibc, 32 to 34 with musl).
fn library_signals_mask() -> u64 {
    (32..libc::SIGRTMIN()).fold(0, |mask, n| mask | 1 << (n - 1))
}

/// Take every pending instance of the signals in `mask` (blocked, so
/// queued) out of the queue, in order.
fn take_pending(mask: u64) -> Vec<i32> {
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let set = crate::sys::sigset_of_mask(mask);
    let Ok(fd) = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) else {
        return Vec::new();
    };
    let mut held = Vec::new();
    while let Ok(Some(info)) = fd.read_signal() {
        held.push(info.ssi_signo as i32);
    }
    held
}

/// Block the handled signals (again) with the raw system call.
fn block_handled() -> nix::Result<SigSet> {
    let set = handled_signals();
    crate::sys::block_raw(&set).map(|()| set)
}

/// A signal's name: `SIGTERM`, `SIGRTMIN+3`, or `signal 32`.
pub fn signal_name(signo: i32) -> String {
    match Signal::try_from(signo) {
        Ok(sig) => sig.as_str().to_string(),
        Err(_) if signo >= libc::SIGRTMIN() && signo <= libc::SIGRTMAX() => {
            match signo - libc::SIGRTMIN() {
                0 => "SIGRTMIN".to_string(),
                k => format!("SIGRTMIN+{k}"),
            }
        }
        Err(_) => format!("signal {signo}"),
    }
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    /// Killed by this signal number (1 to 64).
    Signaled(i32),
}

impl Ended {
    /// The exit status keepwrap reports: the child's code, or 128+N.
    pub fn exit_code(self) -> u8 {
        match self {
            Ended::Exited(code) => (code & 0xff) as u8,
            Ended::Signaled(signo) => (128 + (signo & 0x7f)) as u8,
        }
    }

    pub fn succeeded(self) -> bool {
        self == Ended::Exited(0)
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Exited(code) => write!(f, "{code}"),
            Ended::Signaled(signo) => write!(
                f,
                "{} (killed by {})",
                self.exit_code(),
                signal_name(*signo)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asynchronous_signal_is_forwarded_and_only_those() {
        let not: Vec<i32> = (0..=66).filter(|&n| !is_forwarded(n)).collect();
        assert_eq!(
            not,
            [0, 4, 5, 6, 7, 8, 9, 11, 17, 19, 20, 21, 22, 31, 65, 66],
            "ILL TRAP ABRT BUS FPE KILL SEGV CHLD STOP TSTP TTIN TTOU SYS, and no signal"
        );
        // Every handled signal is blocked; the synchronous ones are not.
        let mask = handled_mask();
        for n in 1..=64 {
            let fault = SYNCHRONOUS.contains(&n) || n == libc::SIGKILL || n == libc::SIGSTOP;
            assert_eq!(mask & 1 << (n - 1) == 0, fault, "signal {n}");
        }
    }

    #[test]
    fn exit_codes_and_names_of_any_signal() {
        assert_eq!(Ended::Signaled(9).exit_code(), 137);
        assert_eq!(Ended::Signaled(64).exit_code(), 192);
        assert_eq!(Ended::Signaled(15).to_string(), "143 (killed by SIGTERM)");
        assert_eq!(
            Ended::Signaled(libc::SIGRTMIN() + 3).exit_code() as i32,
            128 + libc::SIGRTMIN() + 3
        );
        assert_eq!(signal_name(libc::SIGRTMIN() + 3), "SIGRTMIN+3");
        assert_eq!(signal_name(32), "signal 32");
    }
}

//! Signals: which ones keepwrap handles and forwards, the mask every
//! thread of keepwrap blocks (so that they queue for the supervisor's
//! signalfd), their names, and how a process ended.

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

/// Is `signo` one the C library keeps for itself (32 and 33 with glibc,
/// 32 to 34 with musl: from 32 up to `SIGRTMIN`)? It refuses to block
/// them or set their action; no program sends them to another process.
pub fn is_reserved(signo: i32) -> bool {
    (32..libc::SIGRTMIN()).contains(&signo)
}

/// Does keepwrap pass signal `signo` on to the child? Every asynchronous
/// signal, 1 to 64, realtime ones included, as tini does: all but KILL and
/// STOP (they never reach a process), the synchronous ones, CHLD (keepwrap's
/// own), the terminal stop signals TSTP, TTIN and TTOU (dropped) and the C
/// library's reserved ones ([`is_reserved`]).
pub fn is_forwarded(signo: i32) -> bool {
    (1..=SIGNAL_MAX).contains(&signo)
        && !matches!(signo, libc::SIGKILL | libc::SIGSTOP | libc::SIGCHLD)
        && !SYNCHRONOUS.contains(&signo)
        && !SWALLOWED.contains(&signo)
        && !is_reserved(signo)
}

/// Every signal keepwrap reads from its signalfd, as a kernel mask (bit N-1
/// is signal N): all but the synchronous and the reserved ones.
fn handled_mask() -> u64 {
    (1..=SIGNAL_MAX)
        .filter(|&n| {
            !SYNCHRONOUS.contains(&n)
                && !matches!(n, libc::SIGKILL | libc::SIGSTOP)
                && !is_reserved(n)
        })
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
pub fn block_signals() -> nix::Result<SigSet> {
    let set = handled_signals();
    set.thread_block().map(|()| set)
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
            .map(|part| {
                let thread = std::thread::Builder::new().name(name.into());
                (part, thread.spawn_scoped(scope, move || f(part)))
            })
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
            [0, 4, 5, 6, 7, 8, 9, 11, 17, 19, 20, 21, 22, 31]
                .into_iter()
                .chain(32..libc::SIGRTMIN())
                .chain([65, 66])
                .collect::<Vec<_>>(),
            "ILL TRAP ABRT BUS FPE KILL SEGV CHLD STOP TSTP TTIN TTOU SYS, the C library's, and no signal"
        );
        assert!([32, 33].iter().all(|&n| is_reserved(n)));
        assert!(!is_reserved(31) && !is_reserved(libc::SIGRTMIN()));
        // Every handled signal is blocked; the synchronous and reserved
        // ones are not.
        let mask = handled_mask();
        for n in 1..=64 {
            let not = SYNCHRONOUS.contains(&n)
                || n == libc::SIGKILL
                || n == libc::SIGSTOP
                || is_reserved(n);
            assert_eq!(mask & 1 << (n - 1) == 0, not, "signal {n}");
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

//! The child: spawn it with a clean signal state, forward signals to it,
//! reap every zombie in one place, and turn its end into an exit status.

use std::ffi::CString;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::sys::signal::{self, SigSet, Signal};
use nix::unistd::{self, Pid};

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
const SIGNAL_MAX: i32 = 64;

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
/// (`pthread_cancel`, `setuid` across threads). [`spawn`] blocks them
/// again.
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

/// Block the handled signals (again) with the raw system call.
fn block_handled() -> nix::Result<SigSet> {
    let set = handled_signals();
    crate::sys::block_raw(&set).map(|()| set)
}

/// Was this signal raised by keepwrap itself (a SIGPIPE or SIGXFSZ from one
/// of its own writes)? Such a signal says nothing to the child.
pub fn raised_by_keepwrap(info: &libc::signalfd_siginfo) -> bool {
    info.ssi_pid == std::process::id()
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

/// As PID 1 the kernel already hands us every orphan; otherwise become a
/// child subreaper so orphaned engine processes are reaped here too.
pub fn become_subreaper() {
    if unistd::getpid().as_raw() == 1 {
        return;
    }
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!("cannot become a child subreaper ({e}): orphans of the engine will not be reaped by keepwrap");
    }
}

/// Why the command could not be started, and the exit status that says so.
#[derive(Debug)]
pub struct SpawnError {
    pub program: OsString,
    pub error: io::Error,
}

impl SpawnError {
    /// 127 when the command is not found, 126 when it cannot be executed.
    pub fn exit_code(&self) -> u8 {
        match self.error.kind() {
            io::ErrorKind::NotFound => 127,
            _ => 126,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self.error.raw_os_error().map(Errno::from_raw) {
            Some(Errno::ENOENT) => "not found",
            Some(Errno::EACCES) | Some(Errno::EPERM) => "not executable (permission denied)",
            Some(Errno::EISDIR) => "not executable (is a directory)",
            Some(Errno::ENOEXEC) => "not executable (unknown format)",
            _ => "cannot be executed",
        }
    }
}

/// Spawn `argv` in its own process group, with the caller's working
/// directory, environment and stdio, default signal dispositions and an
/// empty signal mask. Under a terminal the child's group gets the
/// foreground, so Ctrl-C reaches it. The program is looked up in `PATH`
/// as `execvp` does (it is what runs it).
///
/// The child shares keepwrap's memory until it calls exec
/// ([`crate::sys::spawn_shared`]: `clone` with `CLONE_VM | CLONE_VFORK`, as
/// `posix_spawn` does): no copy of keepwrap's page tables, no copy-on-write
/// faults after it, no pipe to learn whether the exec worked, and this
/// thread resumes once the exec has succeeded or failed.
pub fn spawn(argv: &[OsString]) -> Result<Pid, SpawnError> {
    // What ran before (threads started through the C library) may have
    // unblocked 32 and 33: block them again for the rest of the launch.
    let _ = block_handled();
    let fail = |error: io::Error| SpawnError {
        program: argv[0].clone(),
        error,
    };
    let args: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|e| fail(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
    crate::sys::spawn_shared(&args, SIGNAL_MAX)
        .map(Pid::from_raw)
        .map_err(fail)
}

/// Send `sig` to the child, or to its whole process group.
pub fn forward(child: Pid, sig: Signal, group: bool) {
    forward_signo(child, sig as i32, group);
}

/// Send signal number `signo` (1 to 64, realtime ones included) to the
/// child, or to its whole process group.
pub fn forward_signo(child: Pid, signo: i32, group: bool) {
    let target = if group {
        -child.as_raw()
    } else {
        child.as_raw()
    };
    match crate::sys::kill(target, signo) {
        Ok(_) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!("cannot forward {} to {target}: {e}", signal_name(signo)),
    }
}

/// Is any process left in process group `pgid`?
pub fn group_alive(pgid: Pid) -> bool {
    !matches!(
        signal::kill(Pid::from_raw(-pgid.as_raw()), None),
        Err(Errno::ESRCH)
    )
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

/// Reap every exited child without blocking. Returns how `main` ended if it
/// was among them. This is the only place keepwrap waits for children. The
/// status is decoded here, not by nix, which cannot name realtime signals
/// and would lose the status of a child they killed.
pub fn reap(main: Pid) -> Option<Ended> {
    let mut ended = None;
    loop {
        let mut status = 0;
        let pid = crate::sys::waitpid_any_nohang(&mut status);
        match pid {
            0 => return ended,
            p if p > 0 => {
                if p == main.as_raw() {
                    if libc::WIFEXITED(status) {
                        ended = Some(Ended::Exited(libc::WEXITSTATUS(status)));
                    } else if libc::WIFSIGNALED(status) {
                        ended = Some(Ended::Signaled(libc::WTERMSIG(status)));
                    }
                }
            }
            _ => match Errno::last() {
                Errno::EINTR => {}
                Errno::ECHILD => return ended,
                e => {
                    tracing::warn!("waitpid failed: {e}");
                    return ended;
                }
            },
        }
    }
}

/// Has keepwrap any child left, running or not yet reaped (reparented
/// orphans included)? One `waitid` that reaps nothing.
pub fn any_children() -> bool {
    match crate::sys::any_child_nowait() {
        Ok(any) => any,
        // Unknown: look at /proc instead.
        Err(_) => !children().is_empty(),
    }
}

/// Pids of keepwrap's own children still around (reparented orphans
/// included), from `/proc/self/task/*/children`.
pub fn children() -> Vec<Pid> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .map(Pid::from_raw),
            );
        }
    }
    out
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

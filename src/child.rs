//! The child: spawn it with a clean signal state, forward signals to it,
//! reap every zombie in one place, and turn its end into an exit status.

use std::ffi::OsString;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::errno::Errno;
use nix::sys::signal::{self, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{self, Pid};

/// Signals keepwrap passes on to the child (or its process group).
pub const FORWARDED: [Signal; 8] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGCONT,
];

/// Signals that keepwrap itself must not be stopped by while the child owns
/// the terminal; they are read and dropped.
const SWALLOWED: [Signal; 3] = [Signal::SIGTSTP, Signal::SIGTTIN, Signal::SIGTTOU];

/// Every signal keepwrap reads from its signalfd: the forwarded ones, CHLD,
/// and the terminal stop signals.
pub fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED.iter().chain(SWALLOWED.iter()) {
        set.add(*s);
    }
    set.add(Signal::SIGCHLD);
    set
}

/// Block the handled signals in the calling thread. Call before any thread
/// starts, so that every thread inherits the mask and the signals queue for
/// the signalfd.
pub fn block_signals() -> nix::Result<SigSet> {
    let set = handled_signals();
    set.thread_block()?;
    Ok(set)
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
/// foreground, so Ctrl-C reaches it.
pub fn spawn(argv: &[OsString]) -> Result<Pid, SpawnError> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions (setpgid, tcsetpgrp, sigaction,
    // sigprocmask); it allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            // SAFETY: fd 0 stays open for the duration of these calls.
            let stdin = BorrowedFd::borrow_raw(0);
            // Hand the terminal over only when keepwrap holds its foreground
            // (not when it was started in the background of a shell).
            let foreground = unistd::tcgetpgrp(stdin) == Ok(unistd::getpgrp());
            unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)).map_err(io::Error::from)?;
            if foreground {
                // TTOU is still blocked here, so the new group may do this.
                let _ = unistd::tcsetpgrp(stdin, unistd::getpid());
            }
            reset_dispositions();
            signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
                .map_err(io::Error::from)?;
            Ok(())
        });
    }
    match cmd.spawn() {
        Ok(child) => Ok(Pid::from_raw(child.id() as i32)),
        Err(error) => Err(SpawnError {
            program: argv[0].clone(),
            error,
        }),
    }
}

/// Every signal to its default action, realtime ones included (what the
/// caller ignored must not reach the engine). Uses the raw system call, as
/// the C library refuses the signals it reserves for itself; between fork
/// and exec nothing uses them. Async-signal-safe.
fn reset_dispositions() {
    // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask and no flags.
    let act: libc::sigaction = unsafe { std::mem::zeroed() };
    for sig in 1..=libc::SIGRTMAX() {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            // SAFETY: rt_sigaction with a valid sigaction and the kernel's
            // sigset size (8 bytes); the old action is not asked for.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &act as *const libc::sigaction,
                    std::ptr::null::<libc::sigaction>(),
                    8usize,
                );
            }
        }
    }
}

/// Send `sig` to the child, or to its whole process group.
pub fn forward(child: Pid, sig: Signal, group: bool) {
    let target = if group {
        Pid::from_raw(-child.as_raw())
    } else {
        child
    };
    match signal::kill(target, sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!("cannot forward {sig} to {}: {e}", target.as_raw()),
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
    Signaled(Signal),
}

impl Ended {
    /// The exit status keepwrap reports: the child's code, or 128+N.
    pub fn exit_code(self) -> u8 {
        match self {
            Ended::Exited(code) => (code & 0xff) as u8,
            Ended::Signaled(sig) => (128 + sig as i32) as u8,
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
            Ended::Signaled(sig) => write!(f, "{} (killed by {sig})", self.exit_code()),
        }
    }
}

/// Reap every exited child without blocking. Returns how `main` ended if it
/// was among them. This is the only place keepwrap waits for children.
pub fn reap(main: Pid) -> Option<Ended> {
    let mut ended = None;
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == main => ended = Some(Ended::Exited(code)),
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == main => {
                ended = Some(Ended::Signaled(sig))
            }
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return ended,
            Ok(_) => {}
            Err(Errno::EINTR) => {}
            Err(e) => {
                tracing::warn!("waitpid failed: {e}");
                return ended;
            }
        }
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

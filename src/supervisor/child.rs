//! The child: spawn it with a clean signal state, forward signals to it,
//! reap every zombie in one place, and turn its end into an exit status.
//! [`Process`] is the real child the supervisor's rules act on.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::signal;
use nix::sys::signalfd::SignalFd;
use nix::unistd::{self, Pid};

use super::rules::{Child, Received};
pub use crate::signals::{block_signals, Ended};
use crate::signals::{signal_name, SIGNAL_MAX};

/// The running child as the supervisor's rules see it: the process `pid`
/// and its process group, keepwrap's other children, the signals keepwrap
/// reads from `signals`, and the monotonic clock.
pub struct Process<'a> {
    pub pid: Pid,
    pub signals: &'a SignalFd,
}

impl Child for Process<'_> {
    fn signal(&mut self, signo: i32, group: bool) {
        forward_signo(self.pid, signo, group);
    }

    fn signal_children(&mut self, signo: i32) {
        for orphan in children() {
            forward_signo(orphan, signo, false);
        }
    }

    fn reap(&mut self) -> Option<Ended> {
        reap(self.pid)
    }

    fn leftovers(&mut self) -> bool {
        group_alive(self.pid) || any_children()
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wait(&mut self, until: Instant) {
        let mut fds = [PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, super::timeout_until(Some(until), Instant::now()));
    }

    fn received(&mut self) -> Option<Received> {
        let info = self.signals.read_signal().ok().flatten()?;
        Some(Received {
            signo: info.ssi_signo as i32,
            by_keepwrap: info.ssi_pid == std::process::id(),
        })
    }
}

/// As PID 1 the kernel already hands us every orphan; otherwise become a
/// child subreaper so orphaned engine processes are reaped here too.
pub fn become_subreaper() {
    if unistd::getpid().as_raw() == 1 {
        return;
    }
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        crate::events::Event::CannotBecomeSubreaper {
            error: e.to_string(),
        }
        .emit();
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

    /// Why, in the operator's words: a directory says so, and a script
    /// whose `#!` interpreter is missing names it (the kernel says only
    /// "not found" or "permission denied").
    pub fn reason(&self) -> String {
        let found = found_in_path(&self.program);
        let is_dir = found.as_deref().is_some_and(std::path::Path::is_dir);
        match self.error.raw_os_error().map(Errno::from_raw) {
            Some(Errno::EACCES) | Some(Errno::EISDIR) if is_dir => {
                "not executable: it is a directory".into()
            }
            Some(Errno::ENOENT) => match found.as_deref().and_then(interpreter) {
                Some(int) => format!(
                    "its interpreter {} (its #! line) is not found",
                    String::from_utf8_lossy(&int)
                ),
                None => "not found".into(),
            },
            Some(Errno::EACCES) | Some(Errno::EPERM) => "not executable (permission denied)".into(),
            Some(Errno::ENOEXEC) => "not executable (unknown format)".into(),
            _ => "cannot be executed".into(),
        }
    }
}

/// Where `execvp` finds `program`: itself when it has a `/`, else the first
/// entry of `PATH` that has it.
fn found_in_path(program: &std::ffi::OsStr) -> Option<std::path::PathBuf> {
    use std::path::{Path, PathBuf};
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                Path::new(".").join(program)
            } else {
                dir.join(program)
            }
        })
        .find(|p| p.symlink_metadata().is_ok())
}

/// The interpreter a `#!` line names, when it is not there.
fn interpreter(script: &std::path::Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let mut file = std::fs::File::open(script).ok()?;
    let n = file.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let int: Vec<u8> = line
        .split(|b| *b == b' ' || *b == b'\t')
        .find(|w| !w.is_empty())?
        .to_vec();
    let missing = std::path::Path::new(std::ffi::OsStr::from_bytes(&int))
        .metadata()
        .is_err();
    missing.then_some(int)
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
///
/// `set` are variables the engine gets on top of keepwrap's environment
/// (each replacing one of the same name); none leaves it as it is.
pub fn spawn(argv: &[OsString], set: &[(OsString, OsString)]) -> Result<Pid, SpawnError> {
    let fail = |error: io::Error| SpawnError {
        program: argv[0].clone(),
        error,
    };
    let invalid = |e| fail(io::Error::new(io::ErrorKind::InvalidInput, e));
    let args: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(invalid)?;
    let envp: Option<Vec<CString>> = if set.is_empty() {
        None
    } else {
        let kept = std::env::vars_os().filter(|(k, _)| set.iter().all(|(s, _)| s != k));
        let pairs: Vec<(OsString, OsString)> = kept.chain(set.iter().cloned()).collect();
        Some(
            pairs
                .iter()
                .map(|(k, v)| {
                    let mut kv = k.as_bytes().to_vec();
                    kv.push(b'=');
                    kv.extend_from_slice(v.as_bytes());
                    CString::new(kv)
                })
                .collect::<Result<_, _>>()
                .map_err(invalid)?,
        )
    };
    crate::sys::spawn_shared(&args, envp.as_deref(), SIGNAL_MAX)
        .map(Pid::from_raw)
        .map_err(fail)
}

/// Send signal number `signo` (1 to 64, realtime ones included) to the
/// child, or to its whole process group.
fn forward_signo(child: Pid, signo: i32, group: bool) {
    let target = if group {
        -child.as_raw()
    } else {
        child.as_raw()
    };
    match crate::sys::kill(target, signo) {
        Ok(_) | Err(Errno::ESRCH) => {}
        Err(e) => crate::events::Event::CannotForward {
            signal: signal_name(signo).to_string(),
            pid: target,
            error: e.to_string(),
        }
        .emit(),
    }
}

/// Is any process left in process group `pgid`?
fn group_alive(pgid: Pid) -> bool {
    !matches!(
        signal::kill(Pid::from_raw(-pgid.as_raw()), None),
        Err(Errno::ESRCH)
    )
}

/// Reap every exited child without blocking. Returns how `main` ended if it
/// was among them. This is the only place keepwrap waits for children. The
/// status is decoded here, not by nix, which cannot name realtime signals
/// and would lose the status of a child they killed.
fn reap(main: Pid) -> Option<Ended> {
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
                    crate::events::Event::WaitpidFailed {
                        error: e.to_string(),
                    }
                    .emit();
                    return ended;
                }
            },
        }
    }
}

/// Has keepwrap any child left, running or not yet reaped (reparented
/// orphans included)? One `waitid` that reaps nothing.
fn any_children() -> bool {
    match crate::sys::any_child_nowait() {
        Ok(any) => any,
        // Unknown: look at /proc instead.
        Err(_) => !children().is_empty(),
    }
}

/// Pids of keepwrap's own children still around (reparented orphans
/// included), from `/proc/self/task/*/children`.
fn children() -> Vec<Pid> {
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

//! Every `unsafe` block of keepwrap, each behind a safe function (the crate
//! root denies `unsafe_code` everywhere else). What needs it: calls nix
//! does not offer for any signal number (nix's `Signal` cannot name the
//! realtime ones), `renameat2` in the static musl build, starting the child
//! in keepwrap's memory until it calls `exec`, and plain C structs built
//! from zeroes.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::errno::Errno;
use nix::sys::signal::SigSet;

/// The set of exactly the signals in `mask` (bit N-1 is signal N), the
/// realtime ones included, which nix's `Signal` cannot name.
pub fn sigset_of_mask(mask: u64) -> SigSet {
    // SAFETY: `sigset_t` is plain data (128 bytes) and all zeroes is the
    // empty set, so `zeroed` makes a valid value; the unaligned write of 8
    // bytes stays inside it. Those 8 bytes are the mask of signals 1..64 as
    // the kernel reads it (unsigned longs, bit N-1 for signal N): a native
    // u64 is that layout where an unsigned long has 64 bits, and on
    // little-endian targets where it has 32 (x86_64, aarch64, i686, armv7).
    // A wrong layout would only mark other signals, never touch memory.
    unsafe {
        let mut raw: libc::sigset_t = std::mem::zeroed();
        std::ptr::write_unaligned((&mut raw as *mut libc::sigset_t).cast::<u64>(), mask);
        SigSet::from_sigset_t_unchecked(raw)
    }
}

/// The signals pending for this thread or the process (`sigpending`): a
/// blocked signal that came and was not read yet. None when the call fails.
pub fn pending_signals() -> Option<SigSet> {
    // SAFETY: an all-zero `sigset_t` is the empty set; sigpending fills the
    // set it is given through a valid pointer, and it is used only when the
    // call succeeded.
    unsafe {
        let mut raw: libc::sigset_t = std::mem::zeroed();
        (libc::sigpending(&mut raw) == 0).then(|| SigSet::from_sigset_t_unchecked(raw))
    }
}

/// `kill(target, signo)` for any signal number (nix's `Signal` cannot name
/// the realtime ones).
pub fn kill(target: libc::pid_t, signo: i32) -> nix::Result<()> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    Errno::result(unsafe { libc::kill(target, signo) }).map(drop)
}

/// `waitpid(-1, &status, WNOHANG)`: a pid, 0, or -1 with `errno` set, as
/// the system call returns them.
pub fn waitpid_any_nohang(status: &mut libc::c_int) -> libc::pid_t {
    // SAFETY: `status` is a valid, writable int for the duration of the call.
    unsafe { libc::waitpid(-1, status, libc::WNOHANG) }
}

/// `fcntl(fd, F_SETLEASE, F_RDLCK)` (`on`) or `F_UNLCK`: take or give back
/// a read lease on the open file. The kernel refuses a read lease
/// (`EAGAIN`) while any process, in any PID namespace, holds the file open
/// for writing, and a writable shared mapping holds it so until it is
/// unmapped; while the lease is held, an open for writing waits for it to
/// be given back. nix has no wrapper for `F_SETLEASE`.
pub fn read_lease(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let arg = if on { libc::F_RDLCK } else { libc::F_UNLCK };
    // SAFETY: F_SETLEASE takes one int argument and touches no memory of
    // ours; the descriptor is borrowed for the call.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETLEASE, arg as libc::c_int) };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)` with the raw
/// system call: nix wraps `renameat2` for glibc only, and the static (musl)
/// build needs it too.
pub fn renameat2_noreplace(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> io::Result<()> {
    renameat2(from_dir, from, to_dir, to, libc::RENAME_NOREPLACE)
}

/// `renameat2(dir, a, dir, b, RENAME_EXCHANGE)`: `a` and `b` swap places
/// atomically (both must exist).
pub fn renameat2_exchange(dir: BorrowedFd<'_>, a: &CStr, b: &CStr) -> io::Result<()> {
    renameat2(dir, a, dir, b, libc::RENAME_EXCHANGE)
}

fn renameat2(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
    flags: libc::c_uint,
) -> io::Result<()> {
    // SAFETY: both paths are NUL-terminated C strings that outlive the call;
    // the descriptors are borrowed for its duration.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            flags,
        )
    };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Give the calling thread (only it) the nice value `nice`.
pub fn set_thread_nice(nice: i32) {
    // SAFETY: two system calls on integers: this thread's own id, and the
    // priority of that thread.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}

/// The host name of this UTS namespace (in a pod: the pod's name), as
/// `uname` gives it: one system call, where `/proc/sys/kernel/hostname`
/// costs an open, a read and a close. None when `uname` fails.
pub fn nodename() -> Option<String> {
    // SAFETY: `utsname` is plain data (arrays of C chars); all zeroes is a
    // valid value, and `uname` writes into it through a pointer valid for
    // the call.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    // The kernel ends the name with a NUL inside the array; without one
    // (never seen) the whole array is the name.
    let bytes: Vec<u8> = u
        .nodename
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Read entries of the open directory `fd` into `buf` with one
/// `getdents64` (`struct linux_dirent64` records, back to back): the bytes
/// filled, 0 at the end of the directory.
pub fn getdents64(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: the pointer and length describe `buf`, writable for the
        // whole call; the kernel writes at most that many bytes into it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        match Errno::result(rc) {
            Ok(n) => return Ok(n as usize),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

/// An `F_OFD_SETLK` request for the `len` bytes at `start`.
pub fn flock_range(kind: libc::c_short, start: i64, len: i64) -> libc::flock {
    // SAFETY: `flock` is plain data; zero is a valid value of every field
    // (and of the padding some targets add).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    fl
}

/// Start `argv` (`argv[0]` looked up in `PATH` by `execvp`) as a child
/// that shares keepwrap's memory until it calls exec: `clone` with
/// `CLONE_VM | CLONE_VFORK`, as `posix_spawn` does, so that no page table
/// is copied and nothing is copied on write afterwards. Before exec the
/// child becomes the leader of a process group of its own, takes the
/// terminal's foreground if keepwrap holds it, sets every signal
/// `1..=signal_max` but KILL and STOP to its default action (what the
/// caller ignored must not reach the engine) and blocks none. The calling
/// thread resumes once the child has exec'd (its pid) or failed (the errno
/// of the failed step; the child is reaped). With `envp` (`NAME=VALUE`
/// strings) the program runs with that environment instead of keepwrap's.
pub fn spawn_shared(
    argv: &[CString],
    envp: Option<&[CString]>,
    signal_max: i32,
) -> io::Result<libc::pid_t> {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let env_ptrs: Option<Vec<*const libc::c_char>> = envp.map(|e| {
        e.iter()
            .map(|v| v.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    });
    let shared = ChildArgs {
        argv: ptrs.as_ptr(),
        envp: env_ptrs.as_ref().map_or(std::ptr::null(), |e| e.as_ptr()),
        signal_max,
        error: AtomicI32::new(0),
    };
    // The child's stack: execvp keeps its path buffer there, and, for a
    // script without `#!`, the shell's argv (a pointer per argument). Not
    // zeroed: the child touches only the pages it uses.
    let mut stack: Vec<u128> = Vec::with_capacity((CHILD_STACK + 8 * ptrs.len()) / 16);
    // SAFETY: `top` is the 16-byte aligned end of an allocation that
    // outlives the child's use of it: with CLONE_VFORK this thread is
    // suspended until the child has called exec (which replaces its memory)
    // or exited. The child runs `child_main` on that stack with `shared`,
    // which also outlives it; `child_main` makes only async-signal-safe
    // system calls, allocates nothing and never returns into keepwrap's
    // code (it execs or `_exit`s). Only this thread is suspended; the
    // others never touch `stack` or `shared`.
    let pid = unsafe {
        let top = stack
            .as_mut_ptr()
            .add(stack.capacity())
            .cast::<libc::c_void>();
        libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&shared as *const ChildArgs)
                .cast_mut()
                .cast::<libc::c_void>(),
        )
    };
    drop(stack);
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    match shared.error.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            // It exited without exec: reap it here.
            let mut status = 0;
            // SAFETY: `status` is a valid, writable int for the call.
            while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && Errno::last() == Errno::EINTR
            {
            }
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// Stack for the child of [`spawn_shared`] between `clone` and exec,
/// beside 8 bytes per argument.
const CHILD_STACK: usize = 64 * 1024;

/// What the child of [`spawn_shared`] reads, and where it leaves an error.
struct ChildArgs {
    /// NUL-terminated, with the program first.
    argv: *const *const libc::c_char,
    /// NUL-terminated `NAME=VALUE` strings, or null: keepwrap's own.
    envp: *const *const libc::c_char,
    signal_max: i32,
    /// The errno of the step that failed; 0 while nothing failed.
    error: AtomicI32,
}

/// The child of [`spawn_shared`], on its own stack in keepwrap's memory.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` that `spawn_shared` keeps alive
    // until this child has exec'd or exited.
    let shared = unsafe { &*arg.cast::<ChildArgs>() };
    let failed = |errno: i32| -> libc::c_int {
        shared.error.store(errno.max(1), Ordering::SeqCst);
        // SAFETY: _exit ends this child only (no CLONE_THREAD), running
        // nothing of keepwrap's.
        unsafe { libc::_exit(127) }
    };
    // SAFETY: system calls on integers: fd 0 (tcgetpgrp and tcsetpgrp fail
    // cleanly, EBADF or ENOTTY, when it is closed or not a terminal) and
    // this process.
    unsafe {
        // Hand the terminal over only when keepwrap holds its foreground
        // (not when it was started in the background of a shell).
        let foreground = libc::tcgetpgrp(0) == libc::getpgrp();
        if libc::setpgid(0, 0) != 0 {
            return failed(Errno::last_raw());
        }
        if foreground {
            // TTOU is still blocked here, so the new group may do this.
            libc::tcsetpgrp(0, libc::getpid());
        }
    }
    // The C library refuses its reserved signals (32 up to SIGRTMIN): it
    // never blocked them and keepwrap never set their action.
    for sig in (1..=shared.signal_max).filter(|&s| !(32..libc::SIGRTMIN()).contains(&s)) {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            // SAFETY: signal(2) with a valid number and SIG_DFL, which runs
            // no code of ours; one system call, async-signal-safe.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }
    // SAFETY: `empty` is a valid sigset_t (all zeroes is the empty set)
    // that lives across the call; no old mask is asked for.
    let rc = unsafe {
        let empty: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut())
    };
    if rc != 0 {
        return failed(Errno::last_raw());
    }
    // SAFETY: argv (and envp when not null) is NUL-terminated, its strings
    // too, and `spawn_shared` keeps them alive; exec returns only on
    // failure.
    unsafe {
        if shared.envp.is_null() {
            libc::execvp(*shared.argv, shared.argv);
        } else {
            libc::execvpe(*shared.argv, shared.argv, shared.envp);
        }
    };
    failed(Errno::last_raw())
}

/// Is any child of this process left, running or a zombie not yet reaped
/// (`waitid` with `WNOWAIT`: nothing is reaped)? Children of every thread
/// count, whatever signal they report their end with.
pub fn any_child_nowait() -> nix::Result<bool> {
    // SAFETY: `siginfo_t` is plain data; all zeroes is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `info` is a valid, writable siginfo_t for the call.
        let rc = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WALL,
            )
        };
        if rc == 0 {
            return Ok(true);
        }
        match Errno::last() {
            Errno::EINTR => continue,
            Errno::ECHILD => return Ok(false),
            e => return Err(e),
        }
    }
}

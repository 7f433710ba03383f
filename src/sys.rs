//! Every `unsafe` block of keepwrap, each behind a safe function (the crate
//! root denies `unsafe_code` everywhere else). What needs it: raw system
//! calls the C library or nix do not offer as keepwrap needs them (signals
//! 32 and 33, which the C library reserves and refuses; `renameat2` in the
//! static musl build), the setup of the child between `fork` and `exec`,
//! and plain C structs built from zeroes.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::errno::Errno;
use nix::sys::signal::{self, SigSet, SigmaskHow};
use nix::unistd::{self, Pid};

/// The size of the kernel's signal mask, which `rt_sigprocmask` and
/// `rt_sigaction` take: 64 signals, one bit each.
const KERNEL_SIGSET_SIZE: usize = 8;

/// The set of exactly the signals in `mask` (bit N-1 is signal N), 32 and
/// 33 included, which the C library's `sigaddset` refuses.
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

/// Add `set` to the calling thread's blocked signals with the raw
/// `rt_sigprocmask`, which, unlike the C library's, also blocks 32 and 33.
pub fn block_raw(set: &SigSet) -> nix::Result<()> {
    // SAFETY: the set pointer is valid for the call and points to at least
    // KERNEL_SIGSET_SIZE readable bytes (a `sigset_t` is 128); the old mask
    // pointer is null, which the kernel takes as "not asked for".
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK,
            set.as_ref() as *const libc::sigset_t,
            std::ptr::null::<libc::sigset_t>(),
            KERNEL_SIGSET_SIZE,
        )
    };
    Errno::result(rc).map(drop)
}

/// The kernel's `struct sigaction` as `rt_sigaction` reads it. It is not the
/// C library's `struct sigaction` (there the 128-byte mask comes before the
/// flags): handler, flags, restorer (on the architectures that have
/// `SA_RESTORER`), then the mask of 64 bits as unsigned longs.
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    #[cfg(not(any(target_arch = "riscv64", target_arch = "loongarch64")))]
    restorer: usize,
    mask: [libc::c_ulong; KERNEL_SIGSET_SIZE / std::mem::size_of::<libc::c_ulong>()],
}

#[cfg(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "mips32r6",
    target_arch = "mips64r6",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
compile_error!("the kernel's struct sigaction has another layout on this architecture");

/// Set `signo`'s action to `handler` (`SIG_DFL` or `SIG_IGN`) with the raw
/// `rt_sigaction`, which, unlike the C library's, also takes 32 and 33. No
/// flags, an empty mask and no restorer (neither default nor ignore runs a
/// handler that would return through one). Async-signal-safe: one system
/// call on a stack value. An invalid `signo` is refused by the kernel and
/// ignored here.
pub fn set_disposition(signo: i32, handler: libc::sighandler_t) {
    let act = KernelSigaction {
        handler,
        flags: 0,
        #[cfg(not(any(target_arch = "riscv64", target_arch = "loongarch64")))]
        restorer: 0,
        mask: [0; KERNEL_SIGSET_SIZE / std::mem::size_of::<libc::c_ulong>()],
    };
    // SAFETY: `act` is a valid kernel `struct sigaction` (the layout above)
    // that lives across the call, with the mask size the kernel expects;
    // the old action pointer is null, which the kernel takes as "not asked
    // for". The handler is SIG_DFL or SIG_IGN, never code.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            signo,
            &act as *const KernelSigaction,
            std::ptr::null::<KernelSigaction>(),
            KERNEL_SIGSET_SIZE,
        );
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

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)` with the raw
/// system call: nix wraps `renameat2` for glibc only, and the static (musl)
/// build needs it too.
pub fn renameat2_noreplace(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
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
            libc::RENAME_NOREPLACE,
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

/// Make `cmd`'s child, between `fork` and `exec`: the leader of a process
/// group of its own, the terminal's foreground group if keepwrap holds the
/// foreground, every signal `1..=signal_max` but KILL and STOP at its
/// default action (what the caller ignored must not reach the engine), and
/// no signal blocked.
pub fn child_setup(cmd: &mut Command, signal_max: i32) {
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe functions may run: it calls tcgetpgrp,
    // getpgrp, setpgid, tcsetpgrp, getpid, the raw rt_sigaction (through
    // `set_disposition`) and the C library's sigprocmask (through nix), all of
    // them async-signal-safe, and allocates nothing (an `io::Error` made
    // from an errno holds no heap memory; the closure captures one i32).
    unsafe {
        cmd.pre_exec(move || {
            // SAFETY: nothing in the child closes fd 0 before exec; it is
            // only passed to tcgetpgrp and tcsetpgrp, which fail cleanly
            // (EBADF, ENOTTY) when keepwrap was started with it closed or
            // not a terminal.
            let stdin = BorrowedFd::borrow_raw(0);
            // Hand the terminal over only when keepwrap holds its foreground
            // (not when it was started in the background of a shell).
            let foreground = unistd::tcgetpgrp(stdin) == Ok(unistd::getpgrp());
            unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0)).map_err(io::Error::from)?;
            if foreground {
                // TTOU is still blocked here, so the new group may do this.
                let _ = unistd::tcsetpgrp(stdin, unistd::getpid());
            }
            for sig in 1..=signal_max {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    set_disposition(sig, libc::SIG_DFL);
                }
            }
            signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
                .map_err(io::Error::from)?;
            Ok(())
        });
    }
}

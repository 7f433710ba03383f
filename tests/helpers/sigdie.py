"""A child that ends by signal N (argv[1]) as a real program would: core
dumps off, N back to its default action (with the raw system call: the C
library refuses its own 32 and 33, which a caller may have left ignored) and
unblocked, then N sent to itself. When N does not kill by default it exits 0
once the signal has been taken: a stop signal (STOP, TSTP, TTIN, TTOU) stops
it until a process it forked first sends CONT; CONT, CHLD, URG and WINCH are
ignored."""
import ctypes
import os
import platform
import resource
import signal
import sys
import time

NR = {"x86_64": (13, 14), "aarch64": (134, 135)}[platform.machine()]
NR_RT_SIGACTION, NR_RT_SIGPROCMASK = NR
SIG_UNBLOCK = 1

n = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
libc = ctypes.CDLL(None, use_errno=True)
if n not in (signal.SIGKILL, signal.SIGSTOP):
    default = ctypes.create_string_buffer(64)  # zeroed: SIG_DFL, no flags
    if libc.syscall(NR_RT_SIGACTION, n, default, None, 8) != 0:
        sys.exit(f"rt_sigaction {n}: errno {ctypes.get_errno()}")
bit = ctypes.c_uint64(1 << (n - 1))
if libc.syscall(NR_RT_SIGPROCMASK, SIG_UNBLOCK, ctypes.byref(bit), None, 8) != 0:
    sys.exit(f"rt_sigprocmask: errno {ctypes.get_errno()}")
if n in (signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
    parent = os.getpid()
    if os.fork() == 0:
        # Resume the parent until it is gone (it exits right after).
        while os.getppid() == parent:
            os.kill(parent, signal.SIGCONT)
            time.sleep(0.01)
        os._exit(0)
os.kill(os.getpid(), n)
time.sleep(0.05)
sys.exit(0)

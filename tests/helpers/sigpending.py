"""A child that blocks every signal it can (1..64, with the raw system call:
the C library refuses its own 32 and 33) and reports the set of signals
pending for it, so each signal that reaches it is seen exactly, realtime
ones included. Appends `ready` to $SIGCHILD_REPORT once blocked, then
`pending <hex mask>` each time the set changes (bit N-1 is signal N).
Exits 0 when its stdin closes or after 60 s."""
import ctypes
import os
import platform
import select
import sys
import time

REPORT = os.environ["SIGCHILD_REPORT"]
NR_RT_SIGPROCMASK = {"x86_64": 14, "aarch64": 135}[platform.machine()]
SIG_BLOCK = 0

libc = ctypes.CDLL(None, use_errno=True)
mask = ctypes.c_uint64(0xFFFFFFFFFFFFFFFF)
if libc.syscall(NR_RT_SIGPROCMASK, SIG_BLOCK, ctypes.byref(mask), None, 8) != 0:
    sys.exit(f"rt_sigprocmask: errno {ctypes.get_errno()}")


def report(line):
    with open(REPORT, "a") as f:
        f.write(line + "\n")


def pending():
    bits = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("SigPnd:", "ShdPnd:")):
                bits |= int(line.split()[1], 16)
    return bits


report("ready")
last = 0
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    now = pending()
    if now != last:
        report(f"pending {now:016x}")
        last = now
    if select.select([sys.stdin], [], [], 0.005)[0] and not sys.stdin.read(1):
        break
sys.exit(0)

"""A child that reports what it received: one line per signal, appended to
the file named by $SIGCHILD_REPORT as `<pid> <SIGNAME>`. It writes `<pid>
ready` once its handlers are installed. With `--spawn`, it first starts a
grandchild (itself, without --spawn) in the same process group. It exits 0
on TERM unless started with `--stay`."""
import os
import signal
import subprocess
import sys
import time

REPORT = os.environ["SIGCHILD_REPORT"]
STAY = "--stay" in sys.argv


def report(what):
    with open(REPORT, "a") as f:
        f.write(f"{os.getpid()} {what}\n")


def on_signal(num, _frame):
    report(signal.Signals(num).name)
    if num == signal.SIGTERM and not STAY:
        sys.exit(0)


for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
            signal.SIGUSR2, signal.SIGWINCH, signal.SIGCONT):
    signal.signal(sig, on_signal)

grandchild = None
if "--spawn" in sys.argv:
    args = [sys.executable, __file__] + (["--stay"] if STAY else [])
    grandchild = subprocess.Popen(args)
report("ready")
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(3)

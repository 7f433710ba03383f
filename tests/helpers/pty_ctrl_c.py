"""Run a wrapper command under a fresh pseudo-terminal (as its session
leader, like a shell would), wait for the child to print `ready`, type
Ctrl-C, and print the wrapper's exit status (128+N when killed by signal N)."""
import os
import pty
import select
import sys
import time

argv = sys.argv[1:]
pid, master = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)

seen = b""
deadline = time.monotonic() + 20
while b"ready" not in seen and time.monotonic() < deadline:
    r, _, _ = select.select([master], [], [], 0.2)
    if r:
        try:
            seen += os.read(master, 1024)
        except OSError:
            break
os.write(master, b"\x03")
status = None
while status is None:
    # Keep draining the terminal so the child never blocks writing to it.
    r, _, _ = select.select([master], [], [], 0.05)
    if r:
        try:
            os.read(master, 1024)
        except OSError:
            pass
    done, st = os.waitpid(pid, os.WNOHANG)
    if done:
        status = st
    elif time.monotonic() > deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print("timeout")
        sys.exit(1)
print(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))

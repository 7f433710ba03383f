"""A scripted "engine" for the trust-rule tests: it runs its steps in order.

    staged_engine.py STEP...

Rank files go to $KEEPWRAP_CACHE_DIR/0.7.2/sm121/0123456789abcdef/, written
by temp file + rename as FlashInfer saves them. Steps:

  write:R[:E]      write rank file R with E entries (default 4): 25% shared
                   by every rank, the rest its own, one fresh random version
  resave:R         save rank file R again as it is (the same bytes, by temp
                   file + rename): an engine that tuned nothing new
  onterm:C         on SIGTERM or SIGINT, exit with status C
  signals:FILE     on SIGUSR1, append the CLOCK_MONOTONIC time (ns) to FILE
  sleep:MS         sleep
  serve:[HOST:]PORT  bind HOST:PORT (127.0.0.1; retrying for up to 30 s while
                   it is taken), then answer every HTTP request 200 in a thread
  report           print {"present": [rank file names]} on stdout; with
                   STAGED_REPORT_ONLY=1 in the environment, then exit 0
  mark:NAME        print "mark NAME" on stdout
  waitfor:NAME     wait (at most 30 s, else exit 97) until the file NAME is
                   in the rank files' directory
  wait             sleep until a signal ends the process
  exit:C           exit with status C
  kill:SIG         kill itself with signal number SIG (its default action)
"""

import json
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time

DIR = os.path.join(os.environ["KEEPWRAP_CACHE_DIR"], "0.7.2", "sm121", "0123456789abcdef")
META = {"flashinfer_version": "0.7.2", "cuda_version": "13.0", "gpu": "NVIDIA GB10"}


def out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def save(rank, data):
    os.makedirs(DIR, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".autotuner_", suffix=".tmp", dir=DIR)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(DIR, f"rank_tp{rank}_pp0_dp0.json"))


def write(rank, entries):
    version = random.randrange(1 << 30)
    shared = entries // 4
    obj = {"_metadata": META}
    for i in range(entries):
        owner = "all" if i < shared else f"r{rank}"
        key = f"('flashinfer::op', 'Runner', (({i + 1}, 7168), ({owner}, 256)), ())"
        tactic = [i % 5, i % 24] if i < shared else [version % 97, i % 24]
        obj[key] = ["Runner", tactic, "median", {"time_ms": 0.5}]
    obj["_generation"] = "%064x" % version
    save(rank, json.dumps(obj, indent=2).encode())


def serve(host, port):
    deadline = time.monotonic() + 30
    while True:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            break
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                sys.exit(98)
            time.sleep(0.02)
    s.listen(16)

    def loop():
        while True:
            c, _ = s.accept()
            try:
                c.settimeout(2)
                c.recv(4096)
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            except OSError:
                pass
            c.close()

    threading.Thread(target=loop, daemon=True).start()


def main():
    for step in sys.argv[1:]:
        name, _, arg = step.partition(":")
        if name == "write":
            r, _, e = arg.partition(":")
            write(int(r), int(e or 4))
        elif name == "resave":
            with open(os.path.join(DIR, f"rank_tp{arg}_pp0_dp0.json"), "rb") as f:
                save(int(arg), f.read())
        elif name == "onterm":
            code = int(arg)
            for s in (signal.SIGTERM, signal.SIGINT):
                signal.signal(s, lambda *_: os._exit(code))
        elif name == "signals":
            fd = os.open(arg, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

            def got(*_):
                os.write(fd, b"%d\n" % time.clock_gettime_ns(time.CLOCK_MONOTONIC))

            signal.signal(signal.SIGUSR1, got)
        elif name == "sleep":
            time.sleep(int(arg) / 1000)
        elif name == "serve":
            host, _, port = arg.rpartition(":")
            serve(host or "127.0.0.1", int(port))
        elif name == "report":
            names = sorted(os.listdir(DIR)) if os.path.isdir(DIR) else []
            out(json.dumps({"present": [n for n in names if n.endswith(".json")]}))
            if os.environ.get("STAGED_REPORT_ONLY") == "1":
                sys.exit(0)
        elif name == "mark":
            out(f"mark {arg}")
        elif name == "waitfor":
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(DIR, arg)):
                if time.monotonic() > deadline:
                    sys.exit(97)
                time.sleep(0.005)
        elif name == "wait":
            while True:
                time.sleep(3600)
        elif name == "exit":
            sys.exit(int(arg))
        elif name == "kill":
            if int(arg) not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(int(arg), signal.SIG_DFL)
            os.kill(os.getpid(), int(arg))
            time.sleep(10)
        else:
            sys.exit(f"staged_engine: unknown step {step}")


if __name__ == "__main__":
    main()

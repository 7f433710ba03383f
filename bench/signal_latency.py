"""Signal latency while a set is signed: keepwrap in front of a scripted
engine (tests/helpers/staged_engine.py) that writes 8 rank files of 2,000
entries each; `--done quiet=300ms --unify on`, so at done keepwrap unifies
and signs them. Meanwhile SIGUSR1 goes to keepwrap, one at a time, each sent
2 ms after the engine got the previous one; the engine notes when each
arrives (CLOCK_MONOTONIC, as the sender). Reports, over all trials, the
signals whose sending fell between the "tuning is done" and the "tuned and
signed" lines, and as the anchor the same measure while the engine tunes
(nothing to sign yet).

    python3 bench/signal_latency.py [KEEPWRAP] [TRIALS]
"""
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KW = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/keepwrap")
TRIALS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
ENGINE = os.path.join(ROOT, "tests/helpers/staged_engine.py")


def now():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def trial():
    with tempfile.TemporaryDirectory() as tmp:
        got = os.path.join(tmp, "signals")
        steps = ["onterm:0", f"signals:{got}", "sleep:1000"]
        steps += [f"write:{r}:2000" for r in range(8)] + ["wait"]
        env = dict(os.environ, KEEPWRAP_CACHE_DIR=os.path.join(tmp, "cache"))
        env.pop("KEEPWRAP_LOG", None)
        p = subprocess.Popen([KW, "--done", "quiet=300ms", "--unify", "on", "--", "python3", ENGINE] + steps,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seen = {}

        def read():
            for line in p.stderr:
                for key, text in (("done", "tuning is done:"), ("signed", "tuned and signed")):
                    if text in line and key not in seen:
                        seen[key] = now()

        t = threading.Thread(target=read)
        t.start()
        samples = []  # (sent, latency ns)
        deadline = time.monotonic() + 60
        time.sleep(0.2)  # the engine installs its handler first
        while "signed" not in seen and time.monotonic() < deadline:
            before = len(open(got).read().split()) if os.path.exists(got) else 0
            sent = now()
            os.kill(p.pid, signal.SIGUSR1)
            while True:
                lines = open(got).read().split() if os.path.exists(got) else []
                if len(lines) > before:
                    samples.append((sent, int(lines[before]) - sent))
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("the engine never got a signal")
            time.sleep(0.002)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        t.join()
        if "done" not in seen or "signed" not in seen:
            raise SystemExit(f"trial failed: {seen}, rc={p.returncode}")
        during = [lat for sent, lat in samples if seen["done"] <= sent <= seen["signed"]]
        before = [lat for sent, lat in samples if sent < seen["done"]]
        return during, before, (seen["signed"] - seen["done"]) / 1e6


during, before, spans = [], [], []
for _ in range(TRIALS):
    d, b, span = trial()
    during += d
    before += b
    spans.append(span)


def summary(xs):
    if not xs:
        return "no sample"
    xs = sorted(x / 1e6 for x in xs)
    return (f"{len(xs)} signals, median {statistics.median(xs):.2f} ms, "
            f"p99 {xs[min(len(xs) - 1, len(xs) * 99 // 100)]:.2f} ms, worst {xs[-1]:.2f} ms")


print(f"signal latency over {TRIALS} boots (8 rank files x 2,000 entries, unify + sign, "
      f"done -> signed median {statistics.median(spans):.0f} ms):")
print(f"  while signing: {summary(during)}")
print(f"  anchor, while the engine tunes: {summary(before)}")

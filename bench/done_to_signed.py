"""Done-to-signed latency: from the engine turning ready to the set being
signed, with keepwrap around the fake engine in server mode (4 ranks, EP,
stock gate, so unify runs too). Reports, per cold boot, the time from the
first 200 keepwrap's probe got to the "tuned and signed" line (keepwrap's own
unify + sign work), and from the engine's ready line to it (adds up to one
probe interval).

    python3 bench/done_to_signed.py [KEEPWRAP] [TRIALS]
"""
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KW = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/keepwrap")
TRIALS = int(sys.argv[2]) if len(sys.argv) > 2 else 5


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ts(line):
    stamp = line["timestamp"].rstrip("Z")
    return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp()


def trial():
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, SGLANG_CACHE_DIR=os.path.join(home, "sglang"), KEEPWRAP_LOG_FORMAT="json",
                   PYTHONPATH=os.path.join(ROOT, "tests", "fixtures", "engines"))
        env.pop("KEEPWRAP_CACHE_DIR", None)
        cmd = [KW, "--probe-interval", "50ms", "--", "python3", "-m", "sglang.launch_server",
               "--model-path", "/models/fake-moe", "--tp", "4", "--ep", "4", "--gate", "stock",
               "--tune-ms", "5", "--port", str(free_port()), "--exit-after-ms", "1000"]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = []

        def read_stdout():
            for line in p.stdout:
                if '"event"' in line and '"ready"' in line and not ready:
                    ready.append(time.time())

        t = threading.Thread(target=read_stdout)
        t.start()
        probe = signed = None
        for raw in p.stderr:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            event = line.get("event")
            if event == "tuning_done" and probe is None:
                probe = ts(line)
            elif event == "signed":
                signed = ts(line)
        p.wait(timeout=60)
        t.join()
        if probe is None or signed is None or not ready:
            raise SystemExit(f"trial failed: probe={probe} signed={signed} ready={ready} rc={p.returncode}")
        return (signed - probe) * 1e3, (signed - ready[0]) * 1e3


results = [trial() for _ in range(TRIALS)]
own = [r[0] for r in results]
total = [r[1] for r in results]
print(f"done-to-signed over {TRIALS} cold boots (4 rank files, unify + sign): "
      f"first 200 -> signed median {statistics.median(own):.1f} ms (max {max(own):.1f}); "
      f"engine ready -> signed median {statistics.median(total):.1f} ms (max {max(total):.1f}, probe interval 50 ms)")

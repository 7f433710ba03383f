"""A tiny "engine" for the share's concurrency test: one rank file per node.

    rank_writer.py --nnodes N --node-rank R --entries E

At start it checks the rank file keepwrap left (the union of every node's
publication, when keepwrap took one): each other node's entries are either
all absent or all present, complete, from one single publication (one
version). It prints {"checked": bool, "ok": bool, "why": str} and exits 1 if
not ok. Then it writes a fresh file of its own E entries, all with one new
random version, by temp file + rename (as FlashInfer saves).
"""

import json
import os
import random
import sys
import tempfile


def main():
    args = sys.argv[1:]
    nnodes = int(args[args.index("--nnodes") + 1])
    rank = int(args[args.index("--node-rank") + 1])
    entries = int(args[args.index("--entries") + 1])
    root = os.environ["KEEPWRAP_CACHE_DIR"]
    d = os.path.join(root, "0.7.2", "sm121", "0123456789abcdef")
    path = os.path.join(d, f"rank_tp{rank}_pp0_dp0.json")

    checked, ok, why = False, True, ""
    try:
        with open(path) as f:
            obj = json.load(f)
    except FileNotFoundError:
        obj = {}
    except ValueError as e:
        obj, ok, why = {}, False, f"not JSON: {e}"
    for r in range(nnodes):
        if r == rank:
            continue
        versions = {v[1] for k, v in obj.items() if k.startswith(f"('op', 'node{r}',")}
        n = sum(1 for k in obj if k.startswith(f"('op', 'node{r}',"))
        if n == 0:
            continue
        checked = True
        if n != entries or len(versions) != 1:
            ok, why = False, f"node {r}: {n} entries, versions {sorted(versions)[:5]}"
    print(json.dumps({"checked": checked, "ok": ok, "why": why}), flush=True)

    version = random.randrange(1 << 30)
    obj = {"_metadata": {"flashinfer_version": "0.7.2", "gpu": "NVIDIA GB10"}}
    for i in range(entries):
        obj[f"('op', 'node{rank}', (({i}, 7168),), ())"] = [f"node{rank}", version, "median", {"time_ms": 0.5}]
    obj["_generation"] = "%064x" % version
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".autotuner_", suffix=".tmp", dir=d)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

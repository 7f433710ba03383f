"""Before the engine starts, measured as a user sees it: the release
keepwrap with its defaults (unify on, the store, `--keep auto`, `--done
auto`) around bench/prestart_engine.py, on a root of N rank files in
directories of 8 signed by a default launch of that engine.

    python3 bench/prestart.py [--runs R] [--strace] [--reuse-only | --no-remove] [--store [--pin]] [KEEPWRAP] [N...]

With `--store`, the set is N entries of FlashInfer's managed store of a
one-rank `vllm serve` launch (vLLM 0.33.0, `--done exit`), kept in
keepwrap's own store root, instead of N rank files; `--pin` runs every
launch with `--pin`.

For each N (default 10000), each figure is the time from keepwrap's start
(just before the harness spawns it) to the engine's first instruction,
minus the same on an empty root (the anchor, measured in the same run):

- reuse: the set is this launch's, kept;
- stash: a launch of another fingerprint (`--variant b`) moves the set into
  the store (the next reuse run brings it back: restore, also shown);
- remove: every rank file was replaced after signing (same size, other
  bytes): the whole set goes.
- grow: the engine of a reuse adds a directory of 8 rank files; after its
  exit the set is signed again (the sidecars of the 8 and the manifest).

And after the engine exits: from its last instruction to keepwrap's exit,
minus the same on the empty root. Beside each, keepwrap's own reads at the
engine's start (/proc/<keepwrap>/io: read system calls and bytes read), per
rank file. `--strace` adds one run of each under `strace -f`, counting every
system call keepwrap made before the engine's execve. Medians of R runs (5).

With several N (`1000 10000 100000`), a last table gives each case's time
per rank file at each N, before the start and after the exit, and the slope
between consecutive N (the added time per added file): linear growth is
the same slope throughout.
"""
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ENGINE = os.path.join(HERE, "prestart_engine.py")

args = sys.argv[1:]
if "-h" in args or "--help" in args:
    print(__doc__.strip())
    sys.exit(0)
runs = 5
use_strace = False
if "--runs" in args:
    i = args.index("--runs")
    runs = int(args[i + 1])
    del args[i:i + 2]
if "--strace" in args:
    args.remove("--strace")
    use_strace = True
reuse_only = "--reuse-only" in args
if reuse_only:
    args.remove("--reuse-only")
no_remove = "--no-remove" in args
if no_remove:
    args.remove("--no-remove")
store = "--store" in args
if store:
    args.remove("--store")
pin = "--pin" in args
if pin:
    args.remove("--pin")
unknown = [a for a in args if a.startswith("-")]
if unknown:
    sys.exit(f"bench/prestart.py: unknown option {unknown[0]} (--help lists the options)")
KW = os.environ.get("KW") or os.path.join(ROOT, "target/release/keepwrap")
if args and not args[0].isdigit():
    KW = os.path.abspath(args.pop(0))
SIZES = [int(a) for a in args] or [10000]


class Bench:
    def __init__(self, base):
        self.base = base
        self.ctl = os.path.join(base, "ctl")
        os.makedirs(self.ctl, exist_ok=True)

    def env(self, cache):
        drop = ("KEEPWRAP_", "SGLANG_", "VLLM_", "FLASHINFER_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        env.update(SGLANG_CACHE_DIR=cache, PRESTART_CTL=self.ctl, HOME=self.base)
        if store:
            # a `vllm` command and package of vLLM 0.33.0 that run the engine
            site, bin_dir = os.path.join(self.base, "site"), os.path.join(self.base, "bin")
            if not os.path.isdir(site):
                info = os.path.join(site, "vllm-0.33.0.dist-info")
                os.makedirs(os.path.join(site, "vllm"))
                os.makedirs(info)
                os.makedirs(bin_dir)
                open(os.path.join(site, "vllm", "__init__.py"), "w").close()
                with open(os.path.join(info, "METADATA"), "w") as f:
                    f.write("Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0\n")
                script = os.path.join(bin_dir, "vllm")
                with open(script, "w") as f:
                    f.write(f"#!{sys.executable} -S\nimport sys\nsys.argv = [sys.argv[0], '--store']\n"
                            f"exec(open({ENGINE!r}).read())\n")
                os.chmod(script, 0o755)
            env.update(VLLM_CACHE_ROOT=cache, PYTHONPATH=site,
                       PATH=bin_dir + os.pathsep + env.get("PATH", ""))
        return env

    def cmd(self, variant):
        if store:
            cmd = ["vllm", "serve", "/models/m"]
            return cmd + (["--max-model-len", "4096"] if variant else [])
        cmd = [sys.executable, "-S", ENGINE]
        if variant:
            cmd += ["--variant", variant]
        return cmd

    def launch(self, cache, mode="noop", variant=None, wrap=None):
        """One launch: (start to the engine's first instruction, its last
        instruction to keepwrap's exit, keepwrap's /proc io at the start)."""
        with open(os.path.join(self.ctl, "mode"), "w") as f:
            f.write(mode)
        for name in ("start", "end", "io"):
            try:
                os.unlink(os.path.join(self.ctl, name))
            except FileNotFoundError:
                pass
        cmd = ((wrap or []) + [KW] + (["--done", "exit"] if store else []) + (["--pin"] if pin else [])
               + ["--"] + self.cmd(variant))
        t0 = time.monotonic_ns()
        p = subprocess.run(cmd, env=self.env(cache), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        t1 = time.monotonic_ns()
        if p.returncode != 0:
            sys.exit(f"keepwrap exited {p.returncode}: {p.stderr[-2000:]}")
        self.log = p.stderr
        start = int(self.read("start"))
        end = int(self.read("end"))
        io = dict(re.findall(r"(\w+): (\d+)", self.read("io")))
        return (start - t0) / 1e6, (t1 - end) / 1e6, {k: int(v) for k, v in io.items()}

    def read(self, name):
        with open(os.path.join(self.ctl, name)) as f:
            return f.read()

    def expect(self, text):
        if text not in self.log:
            sys.exit(f"expected {text!r} in keepwrap's log:\n{self.log[-3000:]}")


def fresh(b, name):
    path = os.path.join(b.base, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def sign(b, n):
    cache = fresh(b, "cache")
    b.launch(cache, f"write {n}")
    b.expect(f"tuned and signed {n} cache files")
    return cache


def replace_all(cache):
    """Every rank file (store entry) replaced by other bytes of the same size."""
    for d, _, names in os.walk(os.path.join(cache, "flashinfer", "autotune")
                               if not store else cache):
        for name in names:
            if name.endswith(".json") and (name.startswith("rank_") or "/entries" in d):
                p = os.path.join(d, name)
                with open(p, "rb") as f:
                    data = f.read()
                with open(p + ".new", "wb") as f:
                    f.write(data.replace(b'Runner', b'Runnex', 1))
                os.replace(p + ".new", p)


def strace_count(b, cache, variant=None):
    """System calls keepwrap made before the engine's execve, by name."""
    out = os.path.join(b.base, "strace.txt")
    b.launch(cache, "noop", variant, wrap=["strace", "-f", "-qq", "-o", out])
    counts = collections.Counter()
    engine = re.compile(r'execve\("' + re.escape(sys.executable) + '"')
    with open(out) as f:
        for line in f:
            parts = line.split(None, 1)
            if len(parts) < 2:
                continue
            call = re.match(r"(\w+)\(", parts[1])
            if parts[1].startswith(("<...", "+++", "---")) or not call:
                continue
            if engine.match(parts[1]):
                break
            counts[call.group(1)] += 1
    return counts


def med(xs):
    return statistics.median(xs)


# (case, n) -> (before the start, after the exit), medians minus the anchor, ms.
FIGURES = {}


def row(name, n, pre, post, io, anchor):
    a_pre, a_post, a_io = anchor
    FIGURES[(name.split(" (")[0], n)] = (med(pre) - a_pre, med(post) - a_post)
    syscr = (med([x["syscr"] for x in io]) - a_io["syscr"]) / max(n, 1)
    rchar = (med([x["rchar"] for x in io]) - a_io["rchar"]) / max(n, 1)
    print(f"| {name} | {n:,} | {med(pre) - a_pre:.0f} ms (min {min(pre) - a_pre:.0f}) "
          f"| {syscr:.2f} reads, {rchar / 1024:.1f} KiB read a file "
          f"| {med(post) - a_post:.0f} ms (min {min(post) - a_post:.0f}) |", flush=True)


def slopes():
    """Per rank file at each N, and the slope between consecutive N."""
    print("\n| case | rank files | before the start, per file | slope from the N before "
          "| after the exit, per file | slope from the N before |")
    print("|---|---|---|---|---|---|")
    for case in dict.fromkeys(c for c, _ in FIGURES):
        prev = None
        for n in sorted(n for c, n in FIGURES if c == case):
            pre, post = FIGURES[(case, n)]
            if prev:
                pn, ppre, ppost = prev
                s_pre = f"{(pre - ppre) * 1000 / (n - pn):.1f} us a file"
                s_post = f"{(post - ppost) * 1000 / (n - pn):.1f} us a file"
            else:
                s_pre = s_post = ""
            print(f"| {case} | {n:,} | {pre * 1000 / n:.1f} us | {s_pre} "
                  f"| {post * 1000 / n:.1f} us | {s_post} |")
            prev = (n, pre, post)


def main():
    base = tempfile.mkdtemp(prefix="keepwrap-prestart-")
    b = Bench(base)
    try:
        load = os.getloadavg()
        print(f"keepwrap {KW}; {runs} runs each; load average {load[0]:.2f} before\n")
        print("| before the engine starts, defaults | rank files | start to the engine's first "
              "instruction, minus the empty root | keepwrap's reads before the start, per file "
              "| engine's exit to keepwrap's, minus the empty root |")
        print("|---|---|---|---|---|")
        empty = fresh(b, "empty")
        b.launch(empty)  # the root and its state created once
        pre, post, io = zip(*[b.launch(empty) for _ in range(runs)])
        anchor = (med(pre), med(post), {k: med([x[k] for x in io]) for k in ("syscr", "rchar")})
        print(f"| empty root (the anchor) | 0 | {anchor[0]:.1f} ms absolute | "
              f"{anchor[2]['syscr']:.0f} reads, {anchor[2]['rchar'] / 1024:.1f} KiB in all "
              f"| {anchor[1]:.1f} ms absolute |", flush=True)
        calls = {}
        for n in SIZES:
            cache = sign(b, n)
            b.launch(cache)  # the first reuse (settles what the sign left)
            results = [b.launch(cache) for _ in range(runs)]
            b.expect(f"reused {n} cache files")
            row("reuse", n, *zip(*results), anchor)
            if use_strace:
                calls[("reuse", n)] = strace_count(b, cache)
            if reuse_only:
                continue
            grow = []
            for i in range(runs):
                grow.append(b.launch(cache, f"write {n + 8 * (i + 1)} {n + 8 * i}"))
                b.expect(f"signed {n + 8 * (i + 1)} cache files")
            row("grow (the engine adds 8 rank files)", n, *zip(*grow), anchor)
            cache = sign(b, n)
            b.launch(cache)
            stash, restore = [], []
            for _ in range(runs):
                stash.append(b.launch(cache, variant="b"))
                b.expect(f"stored {n}")
                restore.append(b.launch(cache))
                b.expect(f"restored {n} cache files")
            row("stash (a launch of another fingerprint)", n, *zip(*stash), anchor)
            row("restore (the set back from the store)", n, *zip(*restore), anchor)
            if use_strace:
                calls[("stash", n)] = strace_count(b, cache, "b")
                b.launch(cache)
            if no_remove:
                continue
            remove = []
            for _ in range(runs):
                cache = sign(b, n)
                replace_all(cache)
                os.sync()
                remove.append(b.launch(cache))
                b.expect(f"removed {n} cache files")
            row("remove (every file replaced after signing)", n, *zip(*remove), anchor)
        if use_strace:
            calls[("empty", 0)] = strace_count(b, empty)
            print("\n| `strace -f`, before the engine's execve | rank files | system calls | per file | most |")
            print("|---|---|---|---|---|")
            e = sum(calls[("empty", 0)].values())
            for (what, n), c in calls.items():
                total = sum(c.values())
                per = (total - e) / n if n else 0
                top = ", ".join(f"{k} {v:,}" for k, v in c.most_common(5))
                print(f"| {what} | {n:,} | {total:,} | {per:.2f} | {top} |")
        if len(SIZES) > 1:
            slopes()
        load = os.getloadavg()
        print(f"\n(load average {load[0]:.2f} after)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


main()

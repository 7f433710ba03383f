#!/usr/bin/env python3
"""Regenerate .cargo/hot-text.ld: the functions the static build runs at
start and while it supervises, placed together at the front of its code.

    python3 bench/hot_text.py            # needs valgrind and the x86_64 musl target

The kernel maps a binary's file pages a whole page-cache folio (or
fault-around window, 64 KiB) at a time around each page touched, so the
resident memory of keepwrap supervising an idle child follows how far
apart the functions it ran lie, not how many there are. This script builds
the static binary (as Dockerfile.snippet does, unstripped, with a linker
map), runs the launches below under valgrind's lackey (every instruction's
address), maps each address to the linker's input section (one function
each), and writes those sections, in the order they first ran, as patterns
of a linker script the static builds add (.cargo/config.toml). A pattern
drops the symbol's hash (legacy mangling) or crate disambiguators (v0), so
the list outlives a compiler upgrade and a change of a function's body; a
name that no longer matches is laid out as before, so a stale list costs
memory, never a build. Run it again after a large change of what runs at
start (bench/entrypoint.sh's resident memory tells).
"""
import bisect
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = "x86_64-unknown-linux-musl"
SCRIPT = os.path.join(ROOT, ".cargo", "hot-text.ld")


def build(work):
    map_path = os.path.join(work, "keepwrap.map")
    env = dict(os.environ, CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER="rust-lld")
    subprocess.run(
        ["cargo", "rustc", "--release", "--locked", "--quiet", "--target", TARGET, "--bin", "keepwrap",
         "--", "-C", "strip=none", "-C", f"link-arg=-Map={map_path}"],
        cwd=ROOT, env=env, check=True)
    binary = os.path.join(work, "keepwrap")
    shutil.copy(os.path.join(ROOT, "target", TARGET, "release", "keepwrap"), binary)
    return binary, map_path


def text_sections(map_path):
    """(address, size, input section name) of every function in the code."""
    out, secs = None, []
    line_re = re.compile(r"\s*([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+(\d+)\s(.*)$")
    for line in open(map_path):
        m = line_re.match(line.rstrip("\n"))
        if not m:
            continue
        rest = m.group(5).strip()
        if rest.startswith("."):
            out = rest.split()[0]
        elif ":(" in rest and out is not None and out.startswith(".text"):
            secs.append((int(m.group(1), 16), int(m.group(3), 16), rest[rest.index(":(") + 2:-1]))
    secs.sort()
    return secs


def traces(binary, work):
    """Run the launches under lackey; yield the trace files."""
    root = os.path.join(work, "root")
    engines = os.path.join(ROOT, "tests", "fixtures", "engines")
    env = dict(os.environ, KEEPWRAP_CACHE_DIR=root, SGLANG_CACHE_DIR=os.path.join(work, "sglang"),
               PYTHONPATH=engines)
    env.pop("KEEPWRAP_LOG", None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    sglang = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/fake-moe", "--tp", "2",
              "--port", port, "--tune-ms", "5", "--exit-after-ms", "300"]
    runs = [
        ("empty", ["--keep", "always", "--", "sleep", "1"], True),
        ("repeat", ["--keep", "always", "--", "sleep", "1"], False),
        ("first", ["--keep", "always", "--", "true", "other"], False),
        ("disable", ["--disable", "--", "true"], False),
        ("plain", ["--", "true"], False),
        ("tune", ["--"] + sglang, False),
        ("reuse", ["--"] + sglang, False),
    ]
    for name, args, fresh in runs:
        if fresh:
            shutil.rmtree(root, ignore_errors=True)
        log = os.path.join(work, f"lackey.{name}.%p")
        subprocess.run(["valgrind", "--tool=lackey", "--trace-mem=yes", f"--log-file={log}", binary] + args,
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    return sorted(os.path.join(work, f) for f in os.listdir(work) if f.startswith("lackey."))


def pattern(name):
    name = re.sub(r"17h[0-9a-f]{16}E$", "17h*E", name)
    if "._R" in name:
        name = re.sub(r"Cs[0-9a-zA-Z]+_", "Cs*_", name)
        name = re.sub(r"B[0-9a-zA-Z]*_", "B*_", name)
    return name


def main():
    for tool in ("valgrind", "cargo"):
        if shutil.which(tool) is None:
            sys.exit(f"bench/hot_text.py: {tool} is missing")
    with tempfile.TemporaryDirectory() as work:
        binary, map_path = build(work)
        secs = text_sections(map_path)
        starts = [s[0] for s in secs]
        first = {}
        for trace in traces(binary, work):
            with open(trace) as f:
                for line in f:
                    if not line.startswith("I "):
                        continue
                    a = int(line[3:].split(",", 1)[0], 16)
                    i = bisect.bisect_right(starts, a) - 1
                    if i >= 0 and a < secs[i][0] + secs[i][1] and i not in first:
                        first[i] = len(first)
        patterns, seen, size = [], set(), 0
        for i in sorted(first, key=first.get):
            name = secs[i][2]
            if not name.startswith(".text."):
                continue  # a whole object's .text (the C runtime's assembly)
            size += secs[i][1]
            p = pattern(name)
            if p not in seen:
                seen.add(p)
                patterns.append(p)
    with open(SCRIPT, "w") as f:
        f.write("/* The functions keepwrap runs at start and while it supervises, first\n"
                "   run first: placed together before the rest of the code, so the few\n"
                "   pages they span are all the kernel maps of it (resident memory).\n"
                "   Generated by bench/hot_text.py; added to the static builds by\n"
                "   .cargo/config.toml. A pattern that matches nothing is harmless. */\n"
                "SECTIONS {\n  .text.hot : {\n")
        for p in patterns:
            f.write(f"    *({p})\n")
        f.write("  }\n} INSERT BEFORE .text;\n")
    print(f"bench/hot_text.py: {len(first)} functions ran ({size} bytes), {len(patterns)} patterns in {SCRIPT}")


if __name__ == "__main__":
    main()

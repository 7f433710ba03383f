"""The engine of bench/prestart.py: records when its first instruction ran,
then does what $PRESTART_CTL/mode says, then records when it is about to
exit. Nothing in its argv or its environment changes between the launches
of one run but `--variant` (another fingerprint), so a launch that writes
the set and the ones that reuse it are the same launch.

    $PRESTART_CTL/mode: "write N [FROM]" (rank files FROM (0) to N, 8 a
    directory, as FlashInfer saves them: temp file then rename; with
    `--store`, entries FROM to N of FlashInfer's managed store in
    $VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR, as FlashInfer 0.7.4 publishes
    them) or "noop"
    writes $PRESTART_CTL/start, /io (keepwrap's /proc/<ppid>/io at that
    moment) and /end (CLOCK_MONOTONIC ns)
"""
import time

T0 = time.monotonic_ns()

import os  # noqa: E402
import sys  # noqa: E402

CTL = os.environ["PRESTART_CTL"]


def put(name, text):
    with open(os.path.join(CTL, name), "w") as f:
        f.write(text)


try:
    with open(f"/proc/{os.getppid()}/io") as f:
        put("io", f.read())
except OSError as e:
    put("io", f"error {e}")
put("start", str(T0))

with open(os.path.join(CTL, "mode")) as f:
    mode = f.read().split()

if mode[0] == "write" and "--store" in sys.argv:
    import hashlib  # noqa: E402
    import json  # noqa: E402

    files = int(mode[1])
    first = int(mode[2]) if len(mode) > 2 else 0
    manifest = {"cache_schema": "v2", "flashinfer_version": "0.7.4", "gpu": "NVIDIA GB10"}
    canon = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    env = os.path.join(os.environ["VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"], "v2",
                       hashlib.sha256(canon.encode()).hexdigest()[:16])
    entries = os.path.join(env, "entries")
    os.makedirs(entries, exist_ok=True)

    def publish(path, obj):
        tmp = os.path.join(os.path.dirname(path), ".autotune_%s.tmp" % os.path.basename(path)[:8])
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True)
        os.replace(tmp, path)

    if not os.path.exists(os.path.join(env, "manifest.json")):
        publish(os.path.join(env, "manifest.json"), manifest)
    for i in range(first, files):
        key = str(("flashinfer::mm_fp4", "CutlassFp4GemmRunner", ((1000 + i, 7168),), ()))
        stem = hashlib.sha256(key.encode()).hexdigest()[:24]
        publish(os.path.join(entries, stem + ".json"),
                {"key": key, "runner": "CutlassFp4GemmRunner", "tactic": [i % 7, 0]})
elif mode[0] == "write":
    files = int(mode[1])
    first = int(mode[2]) if len(mode) > 2 else 0
    root = os.path.join(os.environ["SGLANG_CACHE_DIR"], "flashinfer", "autotune", "0.7.2", "sm121")
    head = '{\n  "_metadata": {\n    "flashinfer_version": "0.7.2",\n    "gpu": "NVIDIA GB10"\n  },\n'
    for d in range(first // 8, (files + 7) // 8):
        key = os.path.join(root, "%016x" % (d + 1))
        os.makedirs(key, exist_ok=True)
        for r in range(min(8, files - d * 8)):
            # Each rank tunes shapes of its own (expert parallelism): 2.5 KB
            # a rank file, 20 KB the union of 8 that unify leaves in each,
            # entries sorted as FlashInfer writes them.
            body = [head]
            for i in range(31):
                body.append('  "(\'op\', \'Runner\', ((%d, 7168), (%d, 256)), ())": [\n'
                            '    "Runner",\n    %d\n  ],\n' % (1000 + i, r, i % 7))
            body.append('  "_generation": "%064x"\n}' % (d * 8 + r))
            tmp = os.path.join(key, ".autotuner_%d.tmp" % r)
            with open(tmp, "w") as f:
                f.write("".join(body))
            os.replace(tmp, os.path.join(key, "rank_tp%d_pp0_dp0.json" % r))

put("end", str(time.monotonic_ns()))
sys.exit(0)

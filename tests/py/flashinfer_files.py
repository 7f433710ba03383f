"""Reference oracle for keepwrap::unify: rank files written with FlashInfer's
own recipe (AutoTuner.save_configs: json.dump(indent=2) of _metadata, the
entries sorted by key, then _generation), and their union.

Usage:
  python3 flashinfer_files.py gen DIR SPEC.json   write rank files into DIR
  python3 flashinfer_files.py union OUT FILE...   write the union of FILEs to OUT
  python3 flashinfer_files.py check FILE...       print, per FILE, whether its
                                                  _generation and bytes are the recipe's

SPEC: {"seed": int, "ranks": [[tp, pp, dp], ...], "per_rank": int (entries only
that rank has: EP shapes), "shared": int (same key and value on every rank),
"conflicts": int (same key on every rank, a different value on each),
"tricky": bool (awkward keys and values), "fi07": bool (0.7 value shape),
"metadata": {...} or null (no _metadata)}.

The union keeps, for a key on several ranks, the value of the lowest rank
(tp, pp, dp); _metadata is the lowest rank's; any _generation is recomputed.
"""
import hashlib
import json
import os
import random
import re
import sys

RANK = re.compile(r"rank_tp(\d+)_pp(\d+)_dp(\d+)\.json\Z")


def generation(obj):
    obj = {k: v for k, v in obj.items() if k != "_generation"}
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def save(path, metadata, entries):
    """FlashInfer 0.7 save_configs, minus the disk merge and _records."""
    ordered = {}
    if metadata is not None:
        ordered["_metadata"] = metadata
    for k in sorted(entries):
        ordered[k] = entries[k]
    ordered["_generation"] = generation(ordered)
    with open(path, "w") as f:
        json.dump(ordered, f, indent=2)


def value(rng, runner, moe, fi07):
    tactic = [rng.choice([8, 16, 32, 64, 128]), rng.randrange(24)] if moe else rng.randrange(48)
    v = [runner, tactic]
    if fi07:
        v += ["median", {"time_ms": round(rng.uniform(0.005, 2.0), 4)}]
    return v


def key(op, runner, m, extras=()):
    return str((op, runner, ((m, 7168), (m, 256), (256, 7168)), extras))


TRICKY_KEYS = [
    "('flashinfer::caf\u00e9', 'R\u00fcnner', ((8, 7168),), ())",
    "('\u4e2d\u6587', '\U0001f600', ((1,),), ())",
    "('it\\'s', \"dq\", 'back\\\\slash', ())",
    'a "quoted" key with \\ backslash',
    "control \n\t\r\x00\x1f\x7f chars",
    "max \U0010ffff\u00e9 then \U0010ffff\U0010ffff\U0010ffff end",
    "\U0010ffff\x80",
    "\ud7ff\ue000\uffff\U00010000",
    "Zebra",
    "zebra",
    "_underscore_key",
    "~tilde",
    "",
]

TRICKY_VALUES = [
    ["R", 1e-05],
    ["R", 0.1],
    ["R", 12345678901234567890],
    ["R", -12345678901234567890123],
    ["R", [[1, [2, [3, []]]], []]],
    ["R", -0.0, 1e16, 1.5e-300, 123456789.125, 2.5e+20],
    ["R", {"z": 1, "a": [1.0, {"y": None, "b": True}], "\u00e9": "\U0010ffff\u00e9"}],
    ["R \u00e9 \U0010ffff\x80", False, None, {}],
    [],
    {"dict": "value", "a": 0},
    "a bare string \\ \" \U0001f600",
    3,
    ["R", 0.30000000000000004, 5e-324, 1.7976931348623157e308],
]


def gen(directory, spec):
    rng = random.Random(spec.get("seed", 0))
    fi07 = spec.get("fi07", True)
    metadata = spec.get("metadata", {"flashinfer_version": "0.7.2", "cuda_version": "13.0",
                                     "cublas_version": "13.1.0", "cudnn_version": "92000",
                                     "cudnn_frontend_version": "1.19.0", "gpu": "NVIDIA GB10",
                                     "cutlass_dsl_version": "4.3.0"})
    ranks = [tuple(r) for r in spec["ranks"]]
    shared = {}
    for i in range(spec.get("shared", 0)):
        shared[key("flashinfer::fp8_blockscale_gemm", "CutlassFp8BlockScaleGemmRunner", i + 1)] = \
            value(rng, "CutlassFp8BlockScaleGemmRunner", False, fi07)
    conflict_keys = [key("flashinfer::mm_fp4", "CutlassFp4GemmRunner", 10_000 + i) for i in range(spec.get("conflicts", 0))]
    os.makedirs(directory, exist_ok=True)
    for n, (tp, pp, dp) in enumerate(ranks):
        entries = dict(shared)
        for i in range(spec.get("per_rank", 0)):
            k = key("flashinfer::trtllm_fp8_block_scale_moe", "TrtllmFp8BlockScaleMoERunner", i + 1,
                    (n, tp, pp, dp))
            entries[k] = value(rng, "TrtllmFp8BlockScaleMoERunner", True, fi07)
        for k in conflict_keys:
            entries[k] = ["CutlassFp4GemmRunner", [tp, pp, dp], n]
        if spec.get("tricky"):
            for i, k in enumerate(TRICKY_KEYS):
                # Every rank holds every tricky key: the same value on all ranks
                # for half of them, a rank's own value for the rest.
                if i % 2 == 0:
                    entries[k] = TRICKY_VALUES[i % len(TRICKY_VALUES)]
                else:
                    entries[k] = [TRICKY_VALUES[(i + n) % len(TRICKY_VALUES)], n]
            for i, v in enumerate(TRICKY_VALUES):
                entries[f"own \u00e9 {n} {i}"] = v
        save(os.path.join(directory, f"rank_tp{tp}_pp{pp}_dp{dp}.json"), metadata, entries)


def union(out, files):
    def rank(path):
        m = RANK.search(os.path.basename(path))
        return tuple(int(g) for g in m.groups())

    merged, metadata = {}, None
    for i, path in enumerate(sorted(files, key=rank)):
        with open(path) as f:
            obj = json.load(f)
        obj.pop("_generation", None)
        meta = obj.pop("_metadata", None)
        if i == 0:
            metadata = meta
        for k, v in obj.items():
            merged.setdefault(k, v)
    save(out, metadata, merged)


def check(files):
    result = []
    for path in files:
        with open(path, "rb") as f:
            raw = f.read()
        obj = json.loads(raw)
        stored = obj.get("_generation")
        ok_generation = stored == generation(obj)
        ordered = {k: v for k, v in obj.items() if k != "_generation"}
        keys = [k for k in ordered if k not in ("_metadata", "_records")]
        ok_order = keys == sorted(keys) and list(obj)[-1] == "_generation" and \
            ("_metadata" not in obj or list(obj)[0] == "_metadata")
        ok_bytes = json.dumps(obj, indent=2).encode() == raw
        result.append({"generation": ok_generation, "order": ok_order, "bytes": ok_bytes})
    json.dump(result, sys.stdout)


def main():
    cmd = sys.argv[1]
    if cmd == "gen":
        with open(sys.argv[3]) as f:
            gen(sys.argv[2], json.load(f))
    elif cmd == "union":
        union(sys.argv[2], sys.argv[3:])
    elif cmd == "check":
        check(sys.argv[2:])
    else:
        raise SystemExit(f"unknown command {cmd}")


main()

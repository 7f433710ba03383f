"""FlashInfer's own managed store (flashinfer/autotune_cache.py of the
flashinfer-python wheel, 0.7.4) run on CPU, for the cross-check of
keepwrap::engine::flashinfer (tests/it/managed_store.rs).

Usage:
  python3 flashinfer_store.py WHEEL ROOT        write a store into ROOT
  python3 flashinfer_store.py WHEEL ROOT ro     then, with ROOT's tree made
                                                read-only, what publish,
                                                discard and lookup do

WHEEL: the unpacked wheel (the directory holding flashinfer/). The module
imports only the standard library and `from .jit.core import logger`, which
is stubbed here (its warnings are collected); no torch, no CUDA.

Prints one JSON object: the environment hash, each published key with its
entry file's path below ROOT, and (ro) what the read-only store did.
"""
import importlib.util
import json
import os
import stat
import sys
import types

WARNINGS = []


class Logger:
    def warning(self, msg):
        WARNINGS.append(str(msg))

    def info(self, msg):
        pass

    debug = info


def load(wheel):
    pkg = types.ModuleType("flashinfer")
    pkg.__path__ = [os.path.join(wheel, "flashinfer")]
    jit = types.ModuleType("flashinfer.jit")
    jit.__path__ = []
    core = types.ModuleType("flashinfer.jit.core")
    core.logger = Logger()
    sys.modules.update({"flashinfer": pkg, "flashinfer.jit": jit, "flashinfer.jit.core": core})
    path = os.path.join(wheel, "flashinfer", "autotune_cache.py")
    spec = importlib.util.spec_from_file_location("flashinfer.autotune_cache", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["flashinfer.autotune_cache"] = mod
    spec.loader.exec_module(mod)
    return mod


# What _collect_metadata() gives on an H100 (flashinfer/autotuner/autotuner.py),
# one value beyond ASCII, and a measurement policy's field.
MANIFEST = {
    "flashinfer_version": "0.7.4",
    "cuda_version": "13.0",
    "cublas_version": "13.1.0",
    "cudnn_version": "91200",
    "cudnn_frontend_version": "1.16.0",
    "cutlass_dsl_version": "4.3.1",
    "gpu": "NVIDIA H100 80GB HBM3 \u00e9\U0001f600",
}

# (key_fields, runner, tactic, profiling_policy): file_key is str(key_fields)
# (ProfilingCacheKey.file_key).
ENTRIES = [
    (("flashinfer::trtllm_fp8_block_scale_moe", "TrtllmFp8BlockScaleMoERunner",
      ((8, 7168), (8, 256)), (True, 3)), "TrtllmFp8BlockScaleMoERunner", [16, 5], ("median", 3)),
    (("flashinfer::mm_fp4", "CutlassFp4GemmRunner", ((128, 4096),), ()),
     "CutlassFp4GemmRunner", 7, None),
    (("flashinfer::caf\u00e9", "R\u00fcnner", ((1, 2),), (None, "x\"y\\z")),
     "R\u00fcnner", [[1, 2], 3.5, True, None], ("mean",)),
    # a protocol record (flashinfer/autotuner/protocol.py)
    (("__protocol__", "ns", "k\u2603"), "ns", {"b": 1, "a": [2]}, None),
]


def main():
    wheel, root = sys.argv[1], sys.argv[2]
    mod = load(wheel)
    store = mod.ManagedAutotuneCache(
        dict(MANIFEST, measure_execution_mode="cuda_graph"), root=root
    )
    out = {"env": store.env_hash, "entries": {}}
    for fields, runner, tactic, policy in ENTRIES:
        key = str(fields)
        store.publish(key, runner, tactic, key_fields=fields, profiling_policy=policy)
        out["entries"][key] = os.path.relpath(store._entry_path(key), root)
    if len(sys.argv) > 3 and sys.argv[3] == "ro":
        out["ro"] = read_only(mod, root)
    out["warnings"] = WARNINGS
    json.dump(out, sys.stdout)


def read_only(mod, root):
    """A fresh process's store on a tree it may not write: every directory
    r-x, every file r--; run as nobody when this is root, whom modes do not
    stop (the store is loaded already, the wheel need not be readable)."""
    os.chmod(root, 0o755)
    for d, dirs, files in os.walk(root):
        for f in files:
            os.chmod(os.path.join(d, f), 0o444)
        os.chmod(d, 0o555)
    try:
        if os.geteuid() != 0:
            return read_only_store(mod, root)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                got = read_only_store(mod, root)
            except BaseException as e:
                got = {"error": repr(e)}
            os.write(w, json.dumps(got).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            text = f.read()
        os.waitpid(pid, 0)
        return json.loads(text)
    finally:
        for d, dirs, files in os.walk(root):
            os.chmod(d, 0o755)
            for f in files:
                os.chmod(os.path.join(d, f), 0o644)


def read_only_store(mod, root):
    store = mod.ManagedAutotuneCache(dict(MANIFEST, measure_execution_mode="cuda_graph"), root=root)
    hit, other = str(ENTRIES[0][0]), str(ENTRIES[1][0])
    new = "('new', 'R', (), ())"
    got = {"hit": store.lookup(hit) is not None}
    before = len(WARNINGS)
    store.publish(new, "R", 1)
    got["publish_warning"] = WARNINGS[before:]
    before = len(WARNINGS)
    store.discard(other)
    got["discard_warning"] = WARNINGS[before:]
    got["discarded_file_kept"] = os.path.exists(store._entry_path(other))
    got["discarded_key_hits"] = store.lookup(other) is not None
    got["new_key_hits"] = store.lookup(new) is not None
    got["hit_after"] = store.lookup(hit) is not None
    return got


if __name__ == "__main__":
    main()

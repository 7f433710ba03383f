#!/usr/bin/env python3
"""A fake vLLM launch that reproduces what vLLM does with FlashInfer's autotune cache, without a GPU.

Stdlib only (Python 3.11). It follows the facts read from vLLM 0.27.1-0.33.0
(`vllm/model_executor/warmup/{kernel_warmup,flashinfer_autotune_cache}.py`, `vllm/envs.py`,
`vllm/engine/arg_utils.py`) and FlashInfer 0.6.18 / 0.7.2.post1. The FlashInfer file format
(load_configs, save_configs, `_metadata`, `_generation`), the rendezvous store with its all-gather
and the output helpers are the SGLang fake's (`tests/fixtures/engines/fake_engine.py`), imported as they are.

Launch shapes (all run the same engine):

    python3 examples/fake_vllm.py serve MODEL -tp 4 -ep            # `vllm serve MODEL ...`
    python3 examples/fake_vllm.py --model MODEL -tp 2              # the api_server module's argv
    PATH=examples/bin:$PATH vllm serve MODEL -tp 2
    PYTHONPATH=examples python3 -m vllm.entrypoints.openai.api_server --model MODEL
    PYTHONPATH=examples python3 -m vllm.entrypoints.cli.main serve MODEL

The command line is preprocessed as vLLM's parser does: `--long_names` with underscores, `-O3`,
`--model M` moved in front with `serve`, `--config FILE.yaml` (flat `key: value` YAML only) inserted
right after `serve [MODEL]`. Unknown flags are accepted and ignored.

Engine flags read: `--tensor-parallel-size/-tp`, `--pipeline-parallel-size/-pp`,
`--data-parallel-size/-dp`, `--enable-expert-parallel/-ep` (and `--disable-`/`--no-enable-`),
`--dtype`, `--quantization/-q` (fp8/fp4 change the dense runner), `--max-model-len`,
`--kv-cache-dtype`, `--max-num-batched-tokens` (2048: token buckets 16, 32, ... up to it),
`--max-num-seqs`, `--enforce-eager`, `--optimization-level/-O` (0: no autotune),
`--disable-flashinfer-autotune` (also `--no-enable-flashinfer-autotune`), `--host` (all interfaces),
`--port` (8000), `--headless`, `--api-server-count`, `--nnodes/-n`, `--node-rank/-r`,
`--master-addr` / `--master-port` (127.0.0.1:29501), `--data-parallel-rank/-dpn`,
`--data-parallel-start-rank/-dpr`, `--data-parallel-size-local/-dpl`,
`--data-parallel-address/-dpa` / `--data-parallel-rpc-port/-dpp` (127.0.0.1:29550),
`--data-parallel-hybrid-lb/-dph`, `--data-parallel-external-lb/-dpe`. `--uds` is refused.

Fake-only flags: `--tune-ms MS` (30: profiling time per missed shape), `--offline` (no HTTP: tune and
exit 0, like `vllm.LLM` or `vllm run-batch`), `--load-ms MS` (each rank sleeps before tuning),
`--ready-delay-ms MS`, `--exit-after-ms MS` with `--exit-code N` (server mode: exit this long after
ready), `--crash RANK[:tune|:save]` (also `FAKE_VLLM_CRASH`, which keeps the argv of the launch
unchanged): world rank RANK SIGKILLs itself halfway through the shapes it tunes (`tune`; nothing is
saved by anyone), or when it saves (`save`, the default: it leaves a partial `.autotuner_*.tmp`; in
layout A a rank other than 0 dies at that point without writing).

Processes: the launcher (one per node) binds the API port at start, starts one process per local
world rank (this file with a hidden first argument), and listens only once ready. World ranks fold
DP in as vLLM does: rank = dp_rank * TP * PP + pp_rank * TP + tp_rank; EP size = TP x DP. Nodes:
`--nnodes N --node-rank R` hosts ranks R*W/N .. (R+1)*W/N-1 and meets at --master-addr:--master-port;
`-dpl L [-dpr S | -dpn S]` hosts DP ranks S .. S+L-1 and meets at -dpa:-dpp. The node hosting world
rank 0 runs the store; collectives are real all-gathers over it. Nodes with `--node-rank > 0` need
`--headless` (or a load-balancer flag). Ranks die with their launcher.

Cache (per rank, every boot):
  root = $VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR (if set and not empty, "~" expanded), else
         ${VLLM_CACHE_ROOT:-${XDG_CACHE_HOME:-~/.cache}/vllm}/flashinfer_autotune_cache/<fi version>/<arch>
  <arch> = FLASHINFER_CUDA_ARCH_LIST ("10.0a 9.0a" -> 90a_100a), else FAKE_CUDA_ARCHS (90a)
  folder = <root>/<sha256 of the config hash>: model (and its config.json), dtype, quantization,
           lengths, TP/PP/DP, EP, batched tokens, max seqs, -O; before 0.30.0 also every VLLM_*
           variable not on vLLM's ignore list and the vLLM version.
- Layout C (0.32.0 on): `autotune_configs_dp<D>_rank<R>.json`. The gate: each rank's
  (metadata JSON, number of other top-level keys), or None; all-gathered over the tuning group (the
  world, or the stage's TP group with PP > 1); kept when all equal and not None; a JSON array fails
  the boot (TypeError). Kept files are loaded; if any rank did not load, every rank clears. 0.33.0
  skips the dummy runs when kept: shapes missing from the files run untuned (`fallback`). 0.32.0
  profiles the misses. A rank saves (FlashInfer save_configs) only if it tuned something.
- Layout A (0.27.1 - 0.31.x): `autotune_configs.json`. Rank 0 broadcasts its bytes; every rank
  rewrites them (`.autotune_configs.json.<random>.tmp` + os.replace), barrier, loads; all ranks tune
  their misses over the world group; barrier; rank 0 alone saves, on every boot.
- One rank on 0.33.0 (world 1, PP 1, one node): FlashInfer's managed store,
  <store>/v2/<env hash>/manifest.json and entries/<sha256(key)[:24]>.json, store =
  $VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR, else $FLASHINFER_AUTOTUNE_CACHE_DIR, else
  ${FLASHINFER_WORKSPACE_BASE:-~}/.cache/flashinfer/autotune. Hits are not profiled; each tuned
  shape is published at once.
Shapes per rank and bucket: two dense GEMMs (shared by all ranks) and, for a MoE model, one MoE
shape: per rank under EP (local expert offset), and per rank under plain TP with FlashInfer < 0.7
(tp_rank in the key). Ranks whose numbers of shapes to profile differ: the hang (exit 89).

Environment:
  FAKE_VLLM_VERSION (0.33.0; 0.27.1 and later), FAKE_VLLM_LAYOUT (A = 0.31.0, C = 0.33.0)
  FAKE_FLASHINFER_VERSION (the pin: 0.6.16.post3 / 0.6.18 / 0.6.18.post1 / 0.7.0.post1 / 0.7.2.post1)
  FAKE_CUDA_VERSION, FAKE_GPU, ... and FAKE_METADATA_RANK<r>_<X>: running `_metadata`, as in fake_engine.py
  FAKE_NUM_EXPERTS: experts (default: MODEL/config.json's n_routed_experts, num_experts,
      num_local_experts or moe_num_experts, top level or text_config; 0 when it names none;
      256 without a config.json)
  VLLM_FLASHINFER_MOE_BACKEND (throughput): another value selects another MoE runner (new keys)
  VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS: comma list of ops (`flashinfer::bf16_gemm` or `bf16_gemm`) not tuned
  FAKE_DIST_TIMEOUT_S (300): collective and store-connect timeout

Output (stdout, one JSON object per line):
  {"event": "start", "node", "nnodes", "world", "pid", "version", "flashinfer_version",
   "layout": "A"|"C"|"managed", "headless", "offline", "experts", "cache_root", "cache_dir",
   "store", "ranks": [{"rank", "dp_rank", "pp_rank", "tp_rank", "ep_rank", "file"}]}
  {"event": "pass", "pass": "autotune", "node", "rank", "dp_rank", "tp_rank", "layout",
   "gate": "kept"|"differs"|"cleared"|"broadcast"|"none"|"n/a"|"off",
   "load": "ok"|"unchecked"|"rejected"|"missing"|"skipped"|"managed"|"off",
   "loaded", "hit", "tuned", "fallback", "saved": "created"|"merged"|"replaced"|"skipped"|"published"|"none",
   "file"}                                                    one per rank: "tuned" 0 on a reuse
  {"event": "tactics", "node", "rank", "sha256", "shapes", "shared_sha256", "shared_shapes"}
  {"event": "hang", "node", "rank", "counts": [shapes to profile, per rank of the tuning group]}
  {"event": "ready", "node", "mode": "server"|"headless"|"offline", "host"?, "port"?}
  {"event": "exit", "node", "code", "reason"}
  plain text: `Starting vLLM server on http://HOST:PORT` (stdout), uvicorn's
  `INFO:     Application startup complete.` (stderr)
HTTP (API nodes): connections refused until ready, then GET /health 200 (503 once a rank died).
The head waits for every rank of the launch (remote ones included) unless a load-balancer mode
(-dpn, -dpr, -dph, -dpe) makes it wait for its local ranks only. Headless nodes serve nothing.

Exit codes: 0 done offline, or SIGTERM/SIGINT once serving, or a headless node's SIGTERM at any
time; 130 (death by SIGINT) on SIGTERM during startup; 1 a rank raised (corrupt file...), bind
failure; 2 bad command line; 87 a peer / the store went away; 88 a collective timed out;
89 the hang (the real engine waits --cpu-distributed-timeout-seconds, 1800 s, then fails);
128+N a rank died of signal N (137 with a crash).
"""
import argparse
import base64
import hashlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures", "engines"))

import fake_engine as fi  # noqa: E402  (FlashInfer file logic, store, collectives, output helpers)

ENGINE_PATH = os.path.abspath(__file__)
WORKER_FLAG = "--fake-vllm-worker"

EXIT_USAGE = 2
EXIT_PEER_LOST = fi.EXIT_PEER_LOST  # 87: a peer rank / node / the store went away
EXIT_TIMEOUT = fi.EXIT_TIMEOUT  # 88: a collective did not complete within FAKE_DIST_TIMEOUT_S
EXIT_HANG = 89  # ranks would wait in different collectives: the real engine hangs until the CPU-group timeout

# vLLM release -> the FlashInfer version it pins (the default of FAKE_FLASHINFER_VERSION)
FLASHINFER_PIN = [
    ((0, 27, 1), "0.6.16.post3"),
    ((0, 28, 0), "0.6.18"),
    ((0, 30, 0), "0.6.18.post1"),
    ((0, 31, 0), "0.7.0.post1"),
    ((0, 33, 0), "0.7.2.post1"),
]
LAYOUT_VERSIONS = {"A": "0.31.0", "C": "0.33.0"}  # FAKE_VLLM_LAYOUT -> the newest release of that layout

# vLLM's compile_factors() ignore list, as far as the fake needs it: these never enter the
# 0.27.1-0.29.x cache key (every other VLLM_* variable does)
KEY_IGNORED_ENV = {
    "VLLM_PORT", "VLLM_HOST_IP", "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT", "VLLM_RPC_BASE_PATH",
    "VLLM_DP_MASTER_IP", "VLLM_DP_MASTER_PORT", "VLLM_API_KEY", "VLLM_LOGGING_LEVEL",
    "VLLM_LOGGING_PREFIX", "VLLM_LOGGING_CONFIG_PATH", "VLLM_NO_USAGE_STATS", "VLLM_DO_NOT_TRACK",
    "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS",
}

EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")

emit, say, warn = fi.emit, fi.say, fi.warn


class UsageError(Exception):
    pass


def version_tuple(v):
    return fi._version_tuple(v)


# ----------------------------------------------------------------------------------------------
# command line: vLLM's FlexibleArgumentParser preprocessing, then argparse


def normalise(args):
    """Underscores to dashes in `--long_names` (up to `=` or `.`), `-O3`/`-O=3`/`-O 3` to
    `--optimization-level 3`, as vLLM's FlexibleArgumentParser does."""
    out = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            head, dot, tail = name[2:].partition(".")
            out.append("--" + head.replace("_", "-") + dot + tail + eq + value)
        elif a.startswith("-O") and a != "-O":
            out += ["--optimization-level", a[3:] if a[2:3] == "=" else a[2:]]
        elif a == "-O" and i + 1 < len(args) and args[i + 1] in ("0", "1", "2", "3"):
            out.append("--optimization-level")
        else:
            out.append(a)
        i += 1
    return out


def parse_yaml_flat(path):
    """The flat `key: value` YAML subset (scalars, booleans, `[a, b]` lists) the fake reads."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            text = line.split(" #", 1)[0].rstrip()
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            if text[0] in " \t" or ":" not in text:
                raise UsageError(f"{path}:{n}: the fake reads flat `key: value` YAML only")
            key, _, value = text.partition(":")
            key, value = key.strip(), value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                out += ["--" + key, value[1:-1]]
            elif value.lower() in ("true", "yes", "on"):
                out.append("--" + key)
            elif value.lower() in ("false", "no", "off"):
                continue
            elif value.startswith("[") and value.endswith("]"):
                items = [v.strip().strip("'\"") for v in value[1:-1].split(",") if v.strip()]
                if items:
                    out += ["--" + key] + items
            elif value:
                out += ["--" + key, value]
            else:
                raise UsageError(f"{path}:{n}: nested YAML is not supported by the fake")
    return out


def pull_config(args, serve):
    """`--config FILE.yaml`: its keys become arguments right after `serve [MODEL]`."""
    if "--config" not in args:
        return args
    if args.count("--config") > 1:
        raise UsageError("More than one config file specified!")
    i = args.index("--config")
    if i == len(args) - 1:
        raise UsageError("No config file specified!")
    path = args[i + 1]
    if path.split(".")[-1] not in ("yaml", "yml"):
        raise UsageError(f"Config file must be of a yaml/yml type. {path.split('.')[-1]} supplied")
    try:
        conf = parse_yaml_flat(path)
    except OSError as e:
        raise UsageError(f"Unable to read the config file at {path}: {e}")
    rest = args[:i] + args[i + 2:]
    if not serve:
        return conf + rest
    if rest and not rest[0].startswith("-"):
        return rest[:1] + conf + rest[1:]
    return conf + rest


def move_model_first(args):
    """`vllm serve ... --model M ...` -> `vllm serve M ...` (vLLM warns and does the same)."""
    for i, a in enumerate(args):
        if a == "--model" and i + 1 < len(args):
            warn("WARNING: With `vllm serve`, you should provide the model as a positional argument")
            return [args[i + 1]] + args[:i] + args[i + 2:]
        if a.startswith("--model="):
            return [a[len("--model="):]] + args[:i] + args[i + 1:]
    return args


def build_parser(prog):
    p = argparse.ArgumentParser(prog=prog, allow_abbrev=False,
                                description="Fake vLLM launch (FlashInfer autotune cache only)")
    p.add_argument("model_tag", nargs="?", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--headless", action="store_true")
    p.add_argument("--api-server-count", "-asc", type=int, default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uds", default=None)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--quantization", "-q", default=None)
    p.add_argument("--max-model-len", default=None)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--max-num-batched-tokens", type=int, default=2048)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--optimization-level", default="2")
    p.add_argument("--tensor-parallel-size", "-tp", dest="tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", dest="pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", dest="dp", type=int, default=1)
    p.add_argument("--data-parallel-rank", "-dpn", dest="dp_rank", type=int, default=None)
    p.add_argument("--data-parallel-start-rank", "-dpr", dest="dp_start", type=int, default=None)
    p.add_argument("--data-parallel-size-local", "-dpl", dest="dp_local", type=int, default=None)
    p.add_argument("--data-parallel-address", "-dpa", dest="dp_address", default="127.0.0.1")
    p.add_argument("--data-parallel-rpc-port", "-dpp", dest="dp_port", type=int, default=29550)
    p.add_argument("--data-parallel-hybrid-lb", "-dph", dest="hybrid_lb", action="store_true")
    p.add_argument("--data-parallel-external-lb", "-dpe", dest="external_lb", action="store_true")
    p.add_argument("--nnodes", "-n", type=int, default=1)
    p.add_argument("--node-rank", "-r", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29501)
    p.add_argument("--enable-expert-parallel", "-ep", dest="ep", action="store_true", default=False)
    p.add_argument("--disable-expert-parallel", "--no-enable-expert-parallel", dest="ep", action="store_false")
    p.add_argument("--enable-flashinfer-autotune", dest="autotune", action="store_true", default=None)
    p.add_argument("--disable-flashinfer-autotune", "--no-enable-flashinfer-autotune", dest="autotune",
                   action="store_false")
    # fake-only knobs
    p.add_argument("--tune-ms", type=float, default=30.0, help="profiling time per missed shape")
    p.add_argument("--offline", action="store_true",
                   help="no HTTP: tune and exit, like vllm.LLM or `vllm run-batch` (done at exit 0)")
    p.add_argument("--load-ms", type=float, default=0.0, help="sleep before autotuning (weight loading)")
    p.add_argument("--ready-delay-ms", type=float, default=0.0,
                   help="after every rank this API node waits for is done, before the port listens")
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--exit-after-ms", type=float, default=None,
                   help="server mode: stop the ranks and exit with --exit-code this long after ready")
    p.add_argument("--crash", default=None, metavar="RANK[:tune|save]",
                   help="world rank RANK SIGKILLs itself mid-tune or mid-save (also FAKE_VLLM_CRASH)")
    return p


def parse_command_line(argv, serve):
    """Returns the parsed namespace. Raises UsageError."""
    args = normalise(list(argv))
    args = pull_config(args, serve)
    if serve:
        args = move_model_first(args)
    p = build_parser("vllm serve" if serve else "api_server")
    a, _unknown = p.parse_known_args(args)
    # `serve` takes the positional model; the api_server module reads --model (an unknown flag's
    # value may land in the positional)
    a.model = (a.model_tag or a.model) if serve else a.model
    if not a.model:
        raise UsageError("No model specified! Give it as `vllm serve MODEL`, with --model, or in --config")
    return a


# ----------------------------------------------------------------------------------------------
# the launch plan: everything the ranks need, computed once by the launcher


def engine_version():
    v = os.environ.get("FAKE_VLLM_VERSION")
    layout = os.environ.get("FAKE_VLLM_LAYOUT")
    if layout is not None:
        want = LAYOUT_VERSIONS.get(layout.strip().upper())
        if want is None:
            raise UsageError(f"FAKE_VLLM_LAYOUT={layout!r}: expected A or C")
        if v is not None and fake_layout(v) != layout.strip().upper():
            raise UsageError(f"FAKE_VLLM_LAYOUT={layout} contradicts FAKE_VLLM_VERSION={v}")
        v = v or want
    v = v or "0.33.0"
    if version_tuple(v) < (0, 27, 1):
        raise UsageError(f"FAKE_VLLM_VERSION={v}: the fake models vLLM 0.27.1 and later")
    return v


def fake_layout(v):
    return "A" if version_tuple(v) < (0, 32, 0) else "C"


def pinned_flashinfer(v):
    pin = FLASHINFER_PIN[0][1]
    for since, fiv in FLASHINFER_PIN:
        if version_tuple(v) >= since:
            pin = fiv
    return pin


def arch_component():
    """`<arch>` of FLASHINFER_WORKSPACE_DIR: FLASHINFER_CUDA_ARCH_LIST when set, else FAKE_CUDA_ARCHS."""
    raw = os.environ.get("FLASHINFER_CUDA_ARCH_LIST", "").replace(",", " ").split()
    if not raw:
        return os.environ.get("FAKE_CUDA_ARCHS", "90a")

    def key(s):
        major, _, minor = s.partition(".")
        digits = "".join(c for c in minor if c.isdigit())
        return (int(major) if major.isdigit() else 0, int(digits) if digits else 0)

    return "_".join(s.replace(".", "") for s in sorted(raw, key=key))


def vllm_cache_root():
    """VLLM_CACHE_ROOT as vllm/envs.py computes it (os.getenv: set-but-empty counts as set)."""
    base = os.getenv("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    return os.path.expanduser(os.getenv("VLLM_CACHE_ROOT", os.path.join(base, "vllm")))


def autotune_root(fi_version):
    override = os.environ.get("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR")
    if override:
        return os.path.expanduser(override)
    return os.path.join(vllm_cache_root(), "flashinfer_autotune_cache", fi_version, arch_component())


def managed_store_root():
    override = os.environ.get("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR")
    if override:
        return os.path.expanduser(override)
    fi_override = os.environ.get("FLASHINFER_AUTOTUNE_CACHE_DIR")
    if fi_override:
        return fi_override
    base = os.getenv("FLASHINFER_WORKSPACE_BASE", os.path.expanduser("~"))
    return os.path.join(base, ".cache", "flashinfer", "autotune")


def model_config(model):
    path = os.path.join(model, "config.json")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return None, None
    try:
        obj = json.loads(raw)
    except ValueError:
        raise UsageError(f"{path}: not valid JSON")
    return obj, hashlib.sha256(raw).hexdigest()


def num_experts(conf):
    env = os.environ.get("FAKE_NUM_EXPERTS")
    if env is not None:
        if not env.strip().isdigit():
            raise UsageError(f"FAKE_NUM_EXPERTS={env!r}: expected a number")
        return int(env)
    if conf is None:
        return 256
    if not isinstance(conf, dict):
        raise UsageError("the model's config.json is not a JSON object")
    for section in (conf, conf.get("text_config") if isinstance(conf.get("text_config"), dict) else {}):
        for k in EXPERT_KEYS:
            v = section.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return 0


def skip_ops():
    raw = os.environ.get("VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS", "")
    return sorted(s.strip() for s in raw.split(",") if s.strip())


def moe_backend():
    return os.environ.get("VLLM_FLASHINFER_MOE_BACKEND", "throughput").strip().lower() or "throughput"


def cache_hash(a, version, conf_sha, experts):
    """`<sha256 hex>`: sha256 of the config-hash string (0.30.0 on), or of the AOT hash factors
    (0.27.1 - 0.29.x: with every VLLM_* variable not on the ignore list, and the version)."""
    factors = {
        "model": a.model, "hf_config_sha256": conf_sha, "num_experts": experts, "dtype": a.dtype,
        "quantization": a.quantization, "max_model_len": a.max_model_len, "kv_cache_dtype": a.kv_cache_dtype,
        "tensor_parallel_size": a.tp, "pipeline_parallel_size": a.pp, "data_parallel_size": a.dp,
        "enable_expert_parallel": a.ep, "max_num_batched_tokens": a.max_num_batched_tokens,
        "max_num_seqs": a.max_num_seqs, "enforce_eager": a.enforce_eager,
        "optimization_level": a.optimization_level,
    }
    if version_tuple(version) >= (0, 30, 0):
        text = hashlib.md5(json.dumps(factors, sort_keys=True).encode()).hexdigest()[:10]
    else:
        env = {k: v for k, v in os.environ.items() if k.startswith("VLLM_") and k not in KEY_IGNORED_ENV}
        text = str({"config": factors, "env": dict(sorted(env.items())), "vllm_version": version})
    return hashlib.sha256(text.encode()).hexdigest()


def local_ranks(a, world, within_dp):
    """(world ranks this node hosts, address of the rendezvous store, API waits for remote ranks)."""
    if a.nnodes > 1:
        if world % a.nnodes:
            raise UsageError(f"`--nnodes {a.nnodes}` must evenly divide the total world size ({world})")
        if not 0 <= a.node_rank < a.nnodes:
            raise UsageError(f"`--node-rank` must be between 0 and {a.nnodes - 1}; got `--node-rank {a.node_rank}`")
        per = world // a.nnodes
        ranks = list(range(a.node_rank * per, (a.node_rank + 1) * per))
        return ranks, (a.master_addr, a.master_port), not (a.external_lb or a.hybrid_lb)
    dp_local = a.dp_local
    if a.dp_rank is not None:  # external LB: one DP rank per instance
        if not 0 <= a.dp_rank < a.dp:
            raise UsageError(f"--data-parallel-rank {a.dp_rank} out of range for -dp {a.dp}")
        start, dp_local = a.dp_rank, 1
    else:
        start = a.dp_start or 0
        if a.dp_start is not None and dp_local is None:
            raise UsageError("--data-parallel-start-rank needs --data-parallel-size-local")
    if dp_local is None or (dp_local == a.dp and start == 0):
        return list(range(world)), None, True
    if dp_local < 1 or start + dp_local > a.dp:
        raise UsageError(f"DP ranks {start}..{start + dp_local - 1} out of range for -dp {a.dp}")
    ranks = list(range(start * within_dp, (start + dp_local) * within_dp))
    remote_wait = not (a.external_lb or a.hybrid_lb or a.dp_rank is not None or a.dp_start is not None)
    return ranks, (a.dp_address, a.dp_port), remote_wait


def make_plan(a):
    version = engine_version()
    fi_version = os.environ.get("FAKE_FLASHINFER_VERSION") or pinned_flashinfer(version)
    if min(a.tp, a.pp, a.dp, a.nnodes) < 1:
        raise UsageError("parallel sizes must be >= 1")
    if a.uds:
        raise UsageError("--uds is not supported by the fake")
    if a.headless and a.api_server_count:
        raise UsageError(f"--api-server-count={a.api_server_count} cannot be used with --headless")
    within_dp = a.tp * a.pp
    world = a.dp * within_dp
    ranks, store, remote_wait = local_ranks(a, world, within_dp)
    if a.nnodes > 1 and a.node_rank > 0 and not a.headless and not (a.hybrid_lb or a.external_lb):
        raise UsageError("nodes with --node-rank > 0 run with --headless (the fake serves HTTP on node 0 only)")
    crash = a.crash or os.environ.get("FAKE_VLLM_CRASH") or None
    if crash:
        r, _, point = crash.partition(":")
        if not r.isdigit() or point not in ("", "tune", "save"):
            raise UsageError(f"crash {crash!r}: expected RANK, RANK:tune or RANK:save")
        crash = [int(r), point or "save"]
    conf, conf_sha = model_config(a.model)
    experts = num_experts(conf)
    autotune = a.autotune if a.autotune is not None else a.optimization_level != "0"
    layout = fake_layout(version)
    managed = (version_tuple(version) >= (0, 33, 0) and world == 1 and a.pp == 1 and a.nnodes == 1
               and version_tuple(fi_version) >= (0, 7))
    root = autotune_root(fi_version)
    key_dir = os.path.join(root, cache_hash(a, version, conf_sha, experts))
    return {
        "version": version, "fi_version": fi_version, "layout": layout, "managed": managed,
        "skip_on_hit": version_tuple(version) >= (0, 33, 0),
        "root": root, "key_dir": key_dir, "store_root": managed_store_root() if managed else None,
        "tp": a.tp, "pp": a.pp, "dp": a.dp, "ep": a.ep, "world": world, "ranks": ranks,
        "store": list(store) if store else None, "remote_wait": remote_wait,
        "node_rank": a.node_rank if a.nnodes > 1 else (ranks[0] // within_dp if store else 0),
        "nnodes": a.nnodes, "headless": a.headless, "offline": a.offline,
        "autotune": autotune, "experts": experts, "quantization": a.quantization or "",
        "max_tokens": a.max_num_batched_tokens, "tune_ms": a.tune_ms, "load_ms": a.load_ms,
        "crash": crash, "skip_ops": skip_ops(), "moe_backend": moe_backend(),
    }


def ident(plan, g):
    within = plan["tp"] * plan["pp"]
    dp_rank, r = divmod(g, within)
    pp_rank, tp_rank = divmod(r, plan["tp"])
    ep_rank = dp_rank * plan["tp"] + tp_rank if plan["ep"] else 0
    return {"rank": g, "dp_rank": dp_rank, "pp_rank": pp_rank, "tp_rank": tp_rank, "ep_rank": ep_rank}


def rank_file(plan, g):
    if plan["managed"]:
        return None
    if plan["layout"] == "A":
        return os.path.join(plan["key_dir"], "autotune_configs.json")
    return os.path.join(plan["key_dir"], f"autotune_configs_dp{ident(plan, g)['dp_rank']}_rank{g}.json")


# ----------------------------------------------------------------------------------------------
# shapes


def buckets(limit):
    out, m = [], 16
    while m < limit:
        out.append(m)
        m *= 2
    out.append(max(1, limit))
    return sorted(set(out))


def rank_shapes(plan, meta, g):
    """The shapes rank g uses: (shape, tunable). Dense GEMMs are the same on every rank; MoE shapes
    are per rank under EP (local expert offset), and under plain TP with FlashInfer 0.6 (whose
    CUTLASS MoE key carries tp_rank / ep_rank)."""
    i = ident(plan, g)
    tp = plan["tp"]
    q = plan["quantization"].lower()
    if "fp4" in q:
        dense = ("flashinfer::mm_fp4", "CutlassFp4GemmRunner")
    elif "fp8" in q:
        dense = ("flashinfer::fp8_blockscale_gemm", "CutlassFp8BlockScaleGemmRunner")
    else:
        dense = ("flashinfer::bf16_gemm", "CublasBf16GemmRunner")
    backend = plan["moe_backend"]
    if backend == "throughput":
        moe = ("flashinfer::cutlass_fused_moe", "CutlassFusedMoERunner")
    elif backend == "latency":
        moe = ("flashinfer::trtllm_fp8_block_scale_moe", "TrtllmFp8BlockScaleMoERunner")
    else:
        moe = (f"flashinfer::{backend}_moe", f"{backend.title().replace('_', '')}MoERunner")
    experts = plan["experts"]
    ep_size = tp * plan["dp"] if plan["ep"] else 1
    moe_tp = 1 if plan["ep"] else tp
    local = max(1, experts // ep_size) if experts else 0
    if fi.is_fi07(meta):
        extras = (("local_expert_offset", i["ep_rank"] * local), ("local_num_experts", local))
        shared = ep_size == 1
    else:
        extras = (("tp_rank", i["tp_rank"]), ("ep_rank", i["ep_rank"]), ("cluster_rank", 0))
        shared = ep_size == 1 and tp == 1
    skips = set(plan["skip_ops"])

    def tunable(op):
        return op not in skips and op.split("::")[-1] not in skips

    out = []
    for m in buckets(plan["max_tokens"]):
        for shp in (((m, fi.HIDDEN), (fi.QKV_OUT // tp, fi.HIDDEN)), ((m, fi.O_IN // tp), (fi.HIDDEN, fi.O_IN // tp))):
            out.append((fi.Shape(dense[0], dense[1], shp, (), shared=True, moe=False), tunable(dense[0])))
        if experts:
            shp = ((m, fi.HIDDEN), (m, fi.TOP_K), (local, 2 * fi.MOE_INTER // moe_tp, fi.HIDDEN))
            out.append((fi.Shape(moe[0], moe[1], shp, extras, shared=shared, moe=True), tunable(moe[0])))
    return out


# ----------------------------------------------------------------------------------------------
# vLLM's file logic


def gate_fingerprint(path):
    """kernel_warmup._autotune_cache_fingerprint: (metadata JSON, number of other top-level keys),
    None when missing / unreadable / not JSON / a JSON scalar. A JSON array raises TypeError
    (`list.pop` with two arguments), which fails the boot as in vLLM."""
    try:
        with open(path) as f:
            configs = json.loads(f.read())
        metadata = configs.pop("_metadata", None)
    except (OSError, ValueError, AttributeError):
        return None
    return [json.dumps(metadata, sort_keys=True), len(configs)]


def load_entries(path, env):
    """FlashInfer load_configs: (status, entries). Invalid JSON raises; an entry value that is not a
    list of at least runner and tactic raises, as in FlashInfer 0.7."""
    status, entries = fi.load_configs(path, env)
    for k, v in entries.items():
        v[0], v[1]  # noqa: B018  (TypeError / IndexError / KeyError on a malformed entry)
    return status, entries


def write_vllm_file(path, data):
    """flashinfer_autotune_cache.write_flashinfer_autotune_cache: mkstemp + os.replace."""
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    name = os.path.basename(path)
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp", prefix=f".{name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class ManagedStore:
    """FlashInfer's managed autotune store (autotune_v2): <root>/v2/<env hash>/entries/<op hash>.json."""

    def __init__(self, root, meta):
        self.manifest = dict(meta)
        self.manifest["cache_schema"] = "v2"
        canon = json.dumps(self.manifest, sort_keys=True, separators=(",", ":"))
        self.env_dir = os.path.join(root, "v2", hashlib.sha256(canon.encode()).hexdigest()[:16])
        self.entries = os.path.join(self.env_dir, "entries")

    def entry_path(self, key):
        return os.path.join(self.entries, hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")

    def lookup(self, key):
        try:
            with open(self.entry_path(key)) as f:
                entry = json.load(f)
            if entry["key"] != key:
                raise ValueError("embedded key mismatch")
            return [entry["runner"], entry["tactic"]]
        except FileNotFoundError:
            return None
        except Exception as e:
            warn(f"[Autotuner]: Ignoring invalid managed cache entry {self.entry_path(key)}: {e}. "
                 "Treating as a cache miss.")
            return None

    def publish(self, key, runner, tactic):
        os.makedirs(self.entries, exist_ok=True)
        manifest = os.path.join(self.env_dir, "manifest.json")
        if not os.path.exists(manifest):
            self._write(manifest, self.manifest)
        self._write(self.entry_path(key), {"key": key, "runner": runner, "tactic": tactic})

    @staticmethod
    def _write(path, obj):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".autotune_", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True)
        os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# rank process


class Rank:
    def __init__(self, plan, g, store_addr):
        self.plan = plan
        self.g = g
        self.id = ident(plan, g)
        self.node = plan["node_rank"]
        self.meta = self.metadata()
        self.store_addr = store_addr
        self.client = None
        self.rng = random.Random(os.urandom(16))
        self.used = {}
        self.crash = plan["crash"] if plan["crash"] and plan["crash"][0] == g else None
        world, pp = plan["world"], plan["pp"]
        self.world = ("world", world, g)
        if pp > 1 and plan["layout"] == "C":  # each PP stage's TP group tunes on its own
            self.tune = (f"tp/dp{self.id['dp_rank']}/pp{self.id['pp_rank']}", plan["tp"], self.id["tp_rank"])
        else:
            self.tune = self.world

    def metadata(self):
        meta = {}
        fiv = fi.rank_env(self.g, "FLASHINFER_VERSION", self.plan["fi_version"])
        for field, suffix, default in fi.META_FIELDS:
            if field == "cutlass_dsl_version" and version_tuple(fiv) < (0, 7):
                continue
            meta[field] = fiv if field == "flashinfer_version" else fi.rank_env(self.g, suffix, default)
        return meta

    def gather(self, group, tag, value):
        name, size, index = group
        if size == 1:
            return [value]
        try:
            return self.client.allgather(name, size, index, tag, value)
        except fi.CollectiveError as e:
            if e.code == fi.EXIT_DESYNC:  # two ranks in different collectives: the real engine hangs
                raise fi.CollectiveError(f"{e}", EXIT_HANG)
            raise

    def run(self):
        plan = self.plan
        if plan["world"] > 1:
            self.client = fi.Client(fi.parse_addr(self.store_addr), self.g, plan["world"], fi.dist_timeout())
        if plan["load_ms"]:
            time.sleep(plan["load_ms"] / 1000.0)
        if not plan["autotune"]:
            self.report("off", "off", 0, 0, 0, 0, "none", None)
        elif plan["managed"]:
            self.run_managed()
        elif plan["layout"] == "A":
            self.run_layout_a()
        else:
            self.run_layout_c()
        self.emit_tactics()

    # -- layout C (0.32.0 on): per-rank files behind the gate
    def run_layout_c(self):
        plan = self.plan
        path = rank_file(plan, self.g)
        os.makedirs(plan["key_dir"], exist_ok=True)
        fp = gate_fingerprint(path)
        fps = self.gather(self.tune, "gate", fp)
        kept = fp is not None and all(f == fp for f in fps)
        memory, load, loaded = {}, "missing" if not os.path.exists(path) else "skipped", False
        if kept:
            load, entries = load_entries(path, self.meta)
            ok = load in ("ok", "unchecked")
            loaded = all(self.gather(self.tune, "loaded", ok))
            if loaded:  # else every rank clears its tuner
                memory.update(entries)
        n_loaded = len(memory)
        gate = "kept" if kept else "differs"
        if kept and not loaded:
            gate = "cleared"
        skip = plan["skip_on_hit"] and loaded
        tuned, hit, fallback = self.tune_shapes(memory, skip)
        if self.plan["world"] > 1:
            self.gather(self.world, "barrier", None)
        saved = "none"
        if tuned:
            saved = self.save(path, memory)
        self.report(gate, load, n_loaded, hit, tuned, fallback, saved, path)

    # -- layout A (0.27.1 - 0.31.0): one shared file, rank 0's bytes broadcast, rank 0 saves
    def run_layout_a(self):
        plan = self.plan
        path = rank_file(plan, self.g)
        os.makedirs(plan["key_dir"], exist_ok=True)
        data = None
        if self.g == 0:
            try:
                with open(path, "rb") as f:
                    data = base64.b64encode(f.read()).decode()
            except OSError:
                data = None
        data = self.gather(self.world, "broadcast", data)[0]
        memory, load, gate = {}, "missing", "none"
        if data is not None:
            gate = "broadcast"
            write_vllm_file(path, base64.b64decode(data))
            if plan["world"] > 1:
                self.gather(self.world, "barrier", None)
            load, entries = load_entries(path, self.meta)
            memory.update(entries)
        loaded = len(memory)
        tuned, hit, fallback = self.tune_shapes(memory, False)
        if plan["world"] > 1:
            self.gather(self.world, "barrier", None)
        saved = "none"
        if self.g == 0:  # rank 0 alone saves, on every boot
            saved = self.save(path, memory)
        elif self.crash and self.crash[1] == "save":
            self.die("save")
        self.report(gate, load, loaded, hit, tuned, fallback, saved, path)

    # -- one-rank launches on 0.33.0: FlashInfer's managed store, no vLLM file
    def run_managed(self):
        store = ManagedStore(self.plan["store_root"], self.meta)
        memory = {}
        hit = 0
        for s, tunable in rank_shapes(self.plan, self.meta, self.g):
            v = store.lookup(s.key) if tunable else None
            if v is not None:
                memory[s.key] = v
                hit += 1
        tuned, _, fallback = self.tune_shapes(memory, False, publish=store)
        self.report("n/a", "managed", hit, hit, tuned, fallback, "published" if tuned else "none", store.env_dir)

    def tune_shapes(self, memory, skip, publish=None):
        """Profile the misses in lock step over the tuning group (each tactic's timing is reduced
        across it). Returns (tuned, hit, fallback)."""
        shapes = rank_shapes(self.plan, self.meta, self.g)
        hit = sum(1 for s, _ in shapes if s.key in memory)
        misses = [] if skip else [s for s, t in shapes if t and s.key not in memory]
        counts = self.gather(self.tune, "profile_count", len(misses))
        if len(set(counts)) != 1:
            emit({"event": "hang", "node": self.node, "rank": self.g, "counts": counts})
            raise fi.CollectiveError(
                f"ranks would profile different numbers of shapes ({counts}): ranks with fewer misses "
                "leave the per-tactic all-reduce the others wait in; the real engine hangs until the "
                "CPU-group timeout (--cpu-distributed-timeout-seconds, 1800 s) and fails to start", EXIT_HANG)
        fi07 = fi.is_fi07(self.meta)
        for n, s in enumerate(misses):
            if self.crash and self.crash[1] == "tune" and n == len(misses) // 2:
                self.die("tune")
            time.sleep(self.plan["tune_ms"] / 1000.0)
            chosen = self.gather(self.tune, f"profile:{n}", self.draw(s))[0]
            value = [s.runner, chosen["tactic"]]
            if fi07:
                value += ["median", {"time_ms": chosen["time_ms"]}]
            memory[s.key] = value
            if publish is not None:
                publish.publish(s.key, s.runner, chosen["tactic"])
        fallback = 0
        for s, _ in shapes:
            if s.key in memory:
                self.used[s.key] = (memory[s.key][1], s.shared)
            else:
                self.used[s.key] = ("fallback", s.shared)
                fallback += 1
        return len(misses), hit, fallback

    def save(self, path, memory):
        if self.crash and self.crash[1] == "save":
            fd, _ = tempfile.mkstemp(prefix=".autotuner_", suffix=".tmp", dir=os.path.dirname(path))
            os.write(fd, b'{\n  "_metadata": {')
            os.close(fd)
            self.die("save")
        return fi.save_configs(path, memory, self.meta)

    def die(self, point):
        warn(f"[fake_vllm] rank {self.g}: crash {self.crash[0]}:{point}: killing myself")
        os.kill(os.getpid(), signal.SIGKILL)

    def draw(self, s):
        if s.moe:
            tactic = [self.rng.choice([8, 16, 32, 64, 128]), self.rng.randrange(24)]
        else:
            tactic = self.rng.randrange(48)
        return {"tactic": tactic, "time_ms": round(self.rng.uniform(0.005, 2.0), 4)}

    def report(self, gate, load, loaded, hit, tuned, fallback, saved, path):
        emit({"event": "pass", "pass": "autotune", "node": self.node, "rank": self.g,
              "dp_rank": self.id["dp_rank"], "tp_rank": self.id["tp_rank"], "layout": self.plan["layout"],
              "gate": gate, "load": load, "loaded": loaded, "hit": hit, "tuned": tuned, "fallback": fallback,
              "saved": saved, "file": path})

    def emit_tactics(self):
        def digest(items):
            return hashlib.sha256(json.dumps(sorted(items), sort_keys=True).encode()).hexdigest()

        every = [[k, t] for k, (t, _) in self.used.items()]
        shared = [[k, t] for k, (t, sh) in self.used.items() if sh]
        emit({"event": "tactics", "node": self.node, "rank": self.g, "sha256": digest(every),
              "shapes": len(every), "shared_sha256": digest(shared), "shared_shapes": len(shared)})


def worker_main(plan_json, g, store_addr, status_fd):
    plan = json.loads(plan_json)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: os._exit(0))
    fi.watch_parent()
    rank = Rank(plan, g, store_addr)
    try:
        rank.run()
    except fi.CollectiveError as e:
        warn(f"[fake_vllm] rank {g}: FATAL: {e}")
        if rank.client is not None and e.code == EXIT_HANG:
            rank.client.abort(str(e))
        os._exit(e.code)
    except Exception:
        warn(f"[fake_vllm] rank {g}: EngineCore failed to start:\n" + traceback.format_exc().rstrip())
        if rank.client is not None:
            rank.client.abort("exception during autotune")
        os._exit(1)
    if rank.client is not None:
        rank.client.bye()
    os.write(status_fd, b"R")
    os.close(status_fd)
    if plan["offline"]:
        os._exit(0)
    while True:  # serving: idle until SIGTERM or the launcher goes away
        time.sleep(3600)


# ----------------------------------------------------------------------------------------------
# launcher (one per node)


class Api:
    """The API port: bound at start, listening only once ready (connections are refused before)."""

    def __init__(self, host, port):
        import http.server

        api = self
        self.dead = False

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path.split("?")[0]
                if path == "/health":
                    code, body = (503, b"engine dead\n") if api.dead else (200, b"")
                elif path == "/v1/models":
                    code, body = 200, b'{"object": "list", "data": []}'
                else:
                    code, body = 404, b'{"detail": "Not Found"}'
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer((host or "", port), H, bind_and_activate=False)
        self.server.daemon_threads = True
        self.server.server_bind()

    def listen(self):
        self.server.server_activate()
        threading.Thread(target=self.server.serve_forever, name="http", daemon=True).start()
        return self.server.server_address[1]

    def close(self, listening):
        if listening:
            self.server.shutdown()
        self.server.server_close()


def launcher_main(a):
    try:
        plan = make_plan(a)
    except UsageError as e:
        warn(f"fake_vllm: error: {e}")
        return EXIT_USAGE
    api_node = not plan["headless"] and not plan["offline"]
    stop = {"sig": None}

    def on_signal(signum, _frame):
        stop["sig"] = signum

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    api = None
    if api_node:
        try:
            api = Api(a.host, a.port)
        except OSError as e:
            warn(f"fake_vllm: error: cannot bind {a.host or '0.0.0.0'}:{a.port}: {e}")
            return 1

    store = None
    hosts_rank0 = plan["ranks"][0] == 0
    if plan["world"] == 1:
        store_addr = ""
    elif plan["store"] is None or hosts_rank0:
        addr = tuple(plan["store"]) if plan["store"] else ("127.0.0.1", 0)
        try:
            store = fi.start_store(addr, plan["world"], fi.dist_timeout())
        except OSError as e:
            warn(f"fake_vllm: error: cannot bind the rendezvous store at {addr[0]}:{addr[1]}: {e}")
            return 1
        store_addr = f"{addr[0]}:{store.server_address[1]}"
    else:
        store_addr = f"{plan['store'][0]}:{plan['store'][1]}"

    emit({"event": "start", "node": plan["node_rank"], "nnodes": plan["nnodes"], "world": plan["world"],
          "pid": os.getpid(), "version": plan["version"], "flashinfer_version": plan["fi_version"],
          "layout": "managed" if plan["managed"] else plan["layout"], "headless": plan["headless"],
          "offline": plan["offline"], "experts": plan["experts"], "cache_root": plan["root"],
          "cache_dir": plan["store_root"] if plan["managed"] else plan["key_dir"], "store": store_addr,
          "ranks": [dict(ident(plan, g), file=rank_file(plan, g)) for g in plan["ranks"]]})

    plan_json = json.dumps(plan)
    procs, status = [], {}
    for g in plan["ranks"]:
        r, w = os.pipe()
        cmd = [sys.executable, ENGINE_PATH, WORKER_FLAG, plan_json, str(g), store_addr, str(w)]
        procs.append((g, subprocess.Popen(cmd, stdin=subprocess.PIPE, pass_fds=(w,))))
        os.close(w)
        status[r] = g
    fd_of = {g: fd for fd, g in status.items()}

    listening = {"on": False}

    def stop_ranks():
        for _, p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + 5
        for _, p in procs:
            try:
                p.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def finish(code, reason):
        stop_ranks()
        if api is not None:
            api.close(listening["on"])
        emit({"event": "exit", "node": plan["node_rank"], "code": code, "reason": reason})
        return code

    done = set()
    ready_at = None
    while True:
        sig = stop["sig"]
        if sig is not None:
            code = finish(0, f"signal {signal.Signals(sig).name}")
            if plan["headless"] or listening["on"]:
                return code
            # during startup vLLM's SIGTERM handler raises KeyboardInterrupt, which nothing catches
            sys.stdout.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
            return 130
        if status:
            rl, _, _ = select.select(list(status), [], [], 0.05)
        else:
            rl = []
            time.sleep(0.05)
        # One look at the ranks per round, taken before their status pipes
        # are read: a rank that exits after this look is judged next round,
        # once its "done" byte has been read.
        codes = {g: p.poll() for g, p in procs}
        # a rank that exited has closed its end: reading cannot block
        rl += [fd_of[g] for g, _ in procs if codes[g] is not None and fd_of[g] in status and fd_of[g] not in rl]
        for fd in rl:
            if os.read(fd, 16):
                done.add(status[fd])
            os.close(fd)
            del status[fd]
        if stop["sig"] is not None:
            continue
        failed = [(g, codes[g]) for g, _ in procs if codes[g] is not None and (codes[g] != 0 or g not in done)]
        if failed or (not plan["offline"] and any(c is not None for c in codes.values())):
            if api is not None:
                api.dead = True
            return finish(*collect_failure(procs))
        if len(done) < len(procs):
            continue
        if plan["offline"]:
            if all(p.poll() is not None for _, p in procs):
                if store is not None:
                    fi.wait_byes(store, plan["world"])
                emit({"event": "ready", "node": plan["node_rank"], "mode": "offline"})
                return finish(a.exit_code, "offline run complete")
            continue
        if ready_at is None:
            if store is not None and plan["remote_wait"]:
                st = store.state
                with st.cond:
                    if len(st.bye) < plan["world"]:
                        continue
            ready_at = time.monotonic() + a.ready_delay_ms / 1000.0
            if plan["headless"]:
                emit({"event": "ready", "node": plan["node_rank"], "mode": "headless"})
        if api is not None and not listening["on"] and time.monotonic() >= ready_at:
            host = a.host or "0.0.0.0"
            say(f"Starting vLLM server on http://{host}:{a.port}")
            port = api.listen()
            listening["on"] = True
            warn("INFO:     Application startup complete.")
            emit({"event": "ready", "node": plan["node_rank"], "mode": "server", "host": host, "port": port})
        if a.exit_after_ms is not None and ready_at is not None and \
                time.monotonic() >= ready_at + a.exit_after_ms / 1000.0:
            return finish(a.exit_code, "--exit-after-ms")


def collect_failure(procs):
    """A rank failed: give the others a moment to fail on their own, then pick the most telling code."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and any(p.poll() is None for _, p in procs):
        time.sleep(0.02)
    codes = []
    for g, p in procs:
        rc = p.poll()
        if rc is not None:
            codes.append((g, 128 - rc if rc < 0 else rc))
    bad = [c for c in codes if c[1] != 0]
    primary = [c for c in bad if c[1] not in (EXIT_PEER_LOST, EXIT_TIMEOUT)] or bad or [(None, 1)]
    rank, code = primary[0]
    detail = ", ".join(f"rank {r}: {c}" for r, c in codes)
    warn(f"fake_vllm: rank {rank} failed with exit code {code} ({detail})")
    return code, f"rank {rank} failed"


def main(argv=None, serve=None):
    """`serve MODEL ...` (the `vllm` CLI) or `--model MODEL ...` (the api_server module)."""
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == [WORKER_FLAG]:
        plan_json, g, store_addr, fd = argv[1:5]
        worker_main(plan_json, int(g), store_addr, int(fd))
        return 0
    if serve is None:
        serve = argv[:1] == ["serve"]
    if serve:
        if argv[:1] != ["serve"]:
            warn("fake_vllm: error: the fake `vllm` knows only the `serve` subcommand")
            return EXIT_USAGE
        argv = argv[1:]
    try:
        a = parse_command_line(argv, serve)
    except UsageError as e:
        warn(f"fake_vllm: error: {e}")
        return EXIT_USAGE
    return launcher_main(a)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A fake SGLang launch that reproduces FlashInfer's autotune-cache behaviour without a GPU.

Stdlib only (Python 3.11). See examples/README.md for flags, env knobs, output lines and exit codes.

Process model: the launch process (one per node) starts its local ranks as child processes
(this same file with hidden --_worker flags). All ranks of all nodes rendezvous over loopback TCP
at --dist-init-addr, where node 0's launcher hosts a tiny store with a real all-gather.
"""
import argparse
import hashlib
import json
import os
import random
import select
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from datetime import datetime

ENGINE_PATH = os.path.abspath(__file__)

EXIT_DESYNC = 86  # ranks profiled different numbers of shapes (the real engine hangs or mixes tactics)
EXIT_PEER_LOST = 87  # a peer rank / the store went away, or the store was aborted
EXIT_TIMEOUT = 88  # a collective did not complete within FAKE_DIST_TIMEOUT_S

READY_LINE = "The server is fired up and ready to roll!"

HIDDEN = 7168
QKV_OUT = 24576
O_IN = 16384
MOE_INTER = 2048
TOP_K = 8

# _metadata field -> env suffix (FAKE_<SUFFIX>, per-rank FAKE_METADATA_RANK<r>_<SUFFIX>) and default
META_FIELDS = [
    ("flashinfer_version", "FLASHINFER_VERSION", "0.7.2"),
    ("cuda_version", "CUDA_VERSION", "13.0"),
    ("cublas_version", "CUBLAS_VERSION", "13.1.0"),
    ("cudnn_version", "CUDNN_VERSION", "92000"),
    ("cudnn_frontend_version", "CUDNN_FRONTEND_VERSION", "1.19.0"),
    ("gpu", "GPU", "NVIDIA GB10"),
    ("cutlass_dsl_version", "CUTLASS_DSL_VERSION", "4.3.0"),  # only from FlashInfer 0.7
]


# ----------------------------------------------------------------------------------------------
# output helpers


def emit(obj):
    """One JSON line on stdout, written with a single write so lines of ranks never interleave."""
    _write(1, json.dumps(obj) + "\n")


def say(text):
    _write(1, text + "\n")


def warn(text):
    _write(2, text + "\n")


def _write(fd, text):
    data = text.encode()
    try:
        while data:
            n = os.write(fd, data)
            data = data[n:]
    except OSError:
        pass


# ----------------------------------------------------------------------------------------------
# command line


def build_parser():
    p = argparse.ArgumentParser(prog="fake_engine", description="Fake SGLang launch (autotune cache only)")
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--quantization", default=None)
    p.add_argument("--moe-runner-backend", default="auto")
    p.add_argument("--tp", "--tp-size", "--tensor-parallel-size", dest="tp", type=int, default=1)
    p.add_argument("--pp", "--pp-size", "--pipeline-parallel-size", dest="pp", type=int, default=1)
    p.add_argument("--dp", "--dp-size", "--data-parallel-size", dest="dp", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--ep", "--ep-size", "--expert-parallel-size", dest="ep", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--cuda-graph-max-bs", type=int, default=8)
    p.add_argument("--chunked-prefill-size", type=int, default=2048)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative-draft-model-path", default=None)
    p.add_argument("--speculative-draft-model-quantization", default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=4)
    p.add_argument("--disable-flashinfer-autotune", action="store_true")
    # fake-only knobs
    p.add_argument("--gate", choices=["stock", "fixed"], default="stock",
                   help="entry gate: stock SGLang (whole-file digest) or PR 40420 (load decision only)")
    p.add_argument("--tune-ms", type=float, default=30.0, help="profiling time per missed shape")
    p.add_argument("--megamoe", action="store_true", help="MegaMoE: _gpu<uuid> file names and a _records object")
    p.add_argument("--offline", action="store_true", help="no HTTP server: run the passes and exit")
    p.add_argument("--load-ms", type=float, default=0.0, help="sleep before autotuning (weight loading)")
    p.add_argument("--ready-delay-ms", type=float, default=0.0,
                   help="sleep after all local ranks tuned, before /health turns 200")
    p.add_argument("--bind-late", action="store_true",
                   help="bind the HTTP port only once ready (what real SGLang does); default binds at start")
    p.add_argument("--exit-code", type=int, default=0,
                   help="exit status after finishing (offline) or after --exit-after-ms (server)")
    p.add_argument("--exit-after-ms", type=float, default=None,
                   help="server mode: stop ranks and exit with --exit-code this long after ready")
    p.add_argument("--crash", default=None, metavar="RANK:PASS",
                   help="global rank RANK SIGKILLs itself in pass PASS after writing a partial temp file")
    # internal (launcher -> rank)
    p.add_argument("--_worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_store", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_status-fd", dest="_status_fd", type=int, default=None, help=argparse.SUPPRESS)
    return p


class Layout:
    """Parallel layout shared by launcher and ranks."""

    def __init__(self, a):
        self.a = a
        self.tp, self.pp, self.ep = a.tp, a.pp, a.ep
        self.attn_dp = a.dp if a.enable_dp_attention else 1
        self.world = a.tp * a.pp
        self.nnodes = a.nnodes
        self.node_rank = a.node_rank

    def validate(self):
        a = self.a
        if min(a.tp, a.pp, a.dp, a.ep, a.nnodes) < 1:
            return "sizes must be >= 1"
        if self.world % a.nnodes:
            return f"tp*pp={self.world} is not divisible by --nnodes {a.nnodes}"
        if not 0 <= a.node_rank < a.nnodes:
            return f"--node-rank {a.node_rank} out of range for --nnodes {a.nnodes}"
        if a.tp % a.ep:
            return f"--ep {a.ep} must divide --tp {a.tp}"
        if a.tp % self.attn_dp:
            return f"--dp {a.dp} must divide --tp {a.tp} with --enable-dp-attention"
        if a.nnodes > 1 and not a.dist_init_addr:
            return "--dist-init-addr is required with --nnodes > 1"
        if a.crash:
            try:
                r, _ = a.crash.split(":", 1)
                int(r)
            except ValueError:
                return "--crash wants RANK:PASS"
        return None

    @property
    def local(self):
        return self.world // self.nnodes

    def global_rank(self, i):
        return self.node_rank * self.local + i

    def ident(self, g):
        tp_rank = g % self.tp
        pp_rank = g // self.tp
        attn_tp = self.tp // self.attn_dp
        dp_rank = tp_rank // attn_tp if self.attn_dp > 1 else 0
        moe_tp = self.tp // self.ep
        ep_rank = tp_rank // moe_tp
        return {"rank": g, "tp_rank": tp_rank, "pp_rank": pp_rank, "dp_rank": dp_rank, "ep_rank": ep_rank}


# ----------------------------------------------------------------------------------------------
# metadata, paths, keys


def _version_tuple(v):
    out = []
    for part in v.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def rank_env(g, suffix, default):
    v = os.environ.get(f"FAKE_METADATA_RANK{g}_{suffix}")
    if v is None:
        v = os.environ.get(f"FAKE_{suffix}", default)
    return v


def running_metadata(g):
    meta = {}
    fi = rank_env(g, "FLASHINFER_VERSION", "0.7.2")
    for field, suffix, default in META_FIELDS:
        if field == "cutlass_dsl_version" and _version_tuple(fi) < (0, 7):
            continue
        meta[field] = rank_env(g, suffix, default)
    return meta


def is_fi07(meta):
    return _version_tuple(meta["flashinfer_version"]) >= (0, 7)


def cache_root():
    return os.path.expanduser(os.environ.get("SGLANG_CACHE_DIR") or "~/.cache/sglang")


def cache_enabled():
    return os.environ.get("SGLANG_FLASHINFER_AUTOTUNE_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def skip_ops():
    raw = os.environ.get("SGLANG_FLASHINFER_AUTOTUNE_SKIP_OPS", "")
    return sorted(s.strip() for s in raw.split(",") if s.strip())


def key16(a, layout, draft):
    payload = {
        "model_path": a.speculative_draft_model_path or a.model_path if draft else a.model_path,
        "dtype": a.dtype,
        "quantization": a.quantization,
        "moe_runner_backend": a.moe_runner_backend,
        "tp_size": layout.tp,
        "pp_size": layout.pp,
        "attn_dp_size": layout.attn_dp,
        "ep_size": layout.ep,
        "hf_config_class": os.environ.get("FAKE_HF_CONFIG_CLASS", "DeepseekV3Config"),
        "skip_ops": skip_ops(),
    }
    if draft:
        payload["draft_quantization"] = a.speculative_draft_model_quantization or a.quantization
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def gpu_uuid(layout, g):
    local = g - layout.node_rank * layout.local
    v = os.environ.get(f"FAKE_GPU_UUID_RANK{g}")
    if v:
        return v
    seed = os.environ.get("FAKE_GPU_UUID_SEED", "fake")
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"{seed}/node{layout.node_rank}/gpu{local}"))


def rank_key_dir(a, layout, g, draft):
    meta = running_metadata(g)
    arch = rank_env(g, "GPU_ARCH", "121")
    return os.path.join(cache_root(), "flashinfer", "autotune", meta["flashinfer_version"], f"sm{arch}",
                        key16(a, layout, draft))


def rank_stem(a, layout, g, draft):
    i = layout.ident(g)
    stem = f"rank_tp{i['tp_rank']}_pp{i['pp_rank']}_dp{i['dp_rank']}"
    if a.megamoe and not draft:
        stem += f"_gpu{gpu_uuid(layout, g)}"
    return stem


def rank_file(a, layout, g, draft):
    return os.path.join(rank_key_dir(a, layout, g, draft), rank_stem(a, layout, g, draft) + ".json")


# ----------------------------------------------------------------------------------------------
# shapes


class Shape:
    __slots__ = ("key", "runner", "shared", "moe")

    def __init__(self, op, runner, shapes, extras, shared, moe):
        self.key = str((op, runner, shapes, extras))
        self.runner = runner
        self.shared = shared
        self.moe = moe


def runner_names(a):
    q = (a.quantization or "").lower()
    if "fp4" in q:
        dense = ("flashinfer::mm_fp4", "CutlassFp4GemmRunner")
    elif "fp8" in q:
        dense = ("flashinfer::fp8_blockscale_gemm", "CutlassFp8BlockScaleGemmRunner")
    else:
        dense = ("flashinfer::bf16_gemm", "CublasBf16GemmRunner")
    backend = (a.moe_runner_backend or "auto").lower()
    if "trtllm" in backend:
        moe = ("flashinfer::trtllm_fp8_block_scale_moe", "TrtllmFp8BlockScaleMoERunner")
    else:
        moe = ("flashinfer::cutlass_fused_moe", "CutlassFusedMoERunner")
    if a.megamoe:
        moe = ("flashinfer::mega_moe", "MegaMoERunner")
    return dense, moe


def pass_shapes(a, layout, g, pass_name, draft):
    ident = layout.ident(g)
    tp, ep = layout.tp, layout.ep
    attn_tp = tp // layout.attn_dp
    experts = int(os.environ.get("FAKE_NUM_EXPERTS", "256"))
    moe_tp = tp // ep
    local_experts = experts // ep if experts % ep == 0 else max(1, experts // ep)
    offset = ident["ep_rank"] * local_experts if ep > 1 else 0
    (dop, drunner), (mop, mrunner) = runner_names(a)
    skips = set(skip_ops())

    if pass_name == "decode":
        max_bs = a.cuda_graph_max_bs
        if a.max_running_requests:
            max_bs = min(max_bs, a.max_running_requests)
        ms = _pow2_upto(1, max_bs)
        if draft:
            ms = [m * a.speculative_num_draft_tokens for m in ms]
    else:
        ms = _pow2_upto(128, a.chunked_prefill_size)

    out = []
    for m in ms:
        if draft:
            ops = [(dop, drunner, ((m, HIDDEN), (2 * HIDDEN // attn_tp, 2 * HIDDEN)), ("draft_fc",))]
        else:
            ops = [
                (dop, drunner, ((m, HIDDEN), (QKV_OUT // attn_tp, HIDDEN)), ()),
                (dop, drunner, ((m, O_IN // attn_tp), (HIDDEN, O_IN // attn_tp)), ()),
            ]
        for op, runner, shp, extras in ops:
            if op not in skips:
                out.append(Shape(op, runner, shp, extras, shared=True, moe=False))
        if mop not in skips:
            shp = ((m, HIDDEN), (m, TOP_K), (local_experts, 2 * MOE_INTER // moe_tp, HIDDEN))
            extras = (("local_expert_offset", offset), ("local_num_experts", local_experts))
            out.append(Shape(mop, mrunner, shp, extras, shared=(ep == 1), moe=True))
    return out


def _pow2_upto(start, limit):
    limit = max(1, limit)
    out, v = [], start
    while v < limit:
        out.append(v)
        v *= 2
    out.append(limit)
    return sorted(set(out))


# ----------------------------------------------------------------------------------------------
# file logic (FlashInfer AutoTuner load / save_configs, SGLang entry gate)


def metadata_loadable(stamp, env):
    for k, v in stamp.items():
        if v == "*":
            continue
        if env.get(k) != v:
            return False
    return True


def read_json_or_none(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def gate_digest(kind, path, env):
    obj = read_json_or_none(path)
    if not isinstance(obj, dict):
        return ""
    if kind == "stock":
        payload = {"file": obj, "env": env}
    else:
        stamp = obj.get("_metadata")
        if not isinstance(stamp, dict):
            stamp = None
        loadable = stamp is None or metadata_loadable(stamp, env)
        payload = {"loadable": loadable, "stamp": stamp, "env": env}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def load_configs(path, env):
    """Returns (status, entries). Invalid JSON raises, like FlashInfer."""
    if not os.path.isfile(path):
        return "missing", {}
    with open(path) as f:
        obj = json.load(f)  # raises json.JSONDecodeError on a corrupt file
    if not isinstance(obj, dict):
        raise TypeError(f"autotune cache {path} is not a JSON object")
    obj.pop("_generation", None)
    stamp = obj.get("_metadata")
    status = "unchecked"
    if stamp is not None:
        if not isinstance(stamp, dict) or not metadata_loadable(stamp, env):
            warn(f"[flashinfer autotuner] WARNING: {path}: _metadata {stamp} does not match the running "
                 f"environment {env}; ignoring the whole file")
            return "rejected", {}
        status = "ok"
    return status, {k: v for k, v in obj.items() if not k.startswith("_")}


def classify_disk_metadata(disk, env):
    if not isinstance(disk, dict):
        return "replace"
    indeterminate = False
    for k, ev in env.items():
        if k not in disk:
            indeterminate = True
            continue
        dv = disk[k]
        if dv == "*":
            continue
        if dv == "unknown" or ev == "unknown":
            indeterminate = True
            continue
        if dv != ev:
            return "conflict"
    if any(k not in env for k in disk):
        indeterminate = True
    return "replace" if indeterminate else "merge"


def generation_of(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def save_configs(path, entries, env, records=None):
    """FlashInfer save_configs. Returns 'created', 'merged', 'replaced' or 'skipped'."""
    existed = os.path.isfile(path)
    disk = read_json_or_none(path) if existed else None
    if isinstance(disk, dict):
        verdict = classify_disk_metadata(disk.get("_metadata"), env)
    else:
        verdict = "replace"
    if verdict == "conflict":
        warn(f"[flashinfer autotuner] WARNING: not saving autotune configs to {path}: its _metadata "
             f"{disk.get('_metadata')} conflicts with the running environment {env}")
        return "skipped"
    if verdict == "merge":
        meta = disk["_metadata"]
        merged = {k: v for k, v in disk.items() if not k.startswith("_")}
        merged.update(entries)
        if records is None:
            records = disk.get("_records")
    else:
        meta = dict(env)
        merged = dict(entries)
    obj = {"_metadata": meta}
    if records is not None:
        obj["_records"] = records
    for k in sorted(merged):
        obj[k] = merged[k]
    obj["_generation"] = generation_of(obj)
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".autotuner_", suffix=".tmp", dir=d)
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)
    if verdict == "merge":
        return "merged"
    return "replaced" if existed else "created"


# ----------------------------------------------------------------------------------------------
# store / collectives


class StoreState:
    def __init__(self, world, timeout):
        self.world = world
        self.timeout = timeout
        self.cond = threading.Condition()
        self.rounds = {}
        self.aborted = None
        self.hello = set()
        self.bye = set()


class StoreHandler(socketserver.StreamRequestHandler):
    def handle(self):
        st = self.server.state
        rank = None
        said_bye = False
        try:
            for line in self.rfile:
                req = json.loads(line)
                op = req.get("op")
                if op == "hello":
                    rank = req["rank"]
                    with st.cond:
                        if req.get("world") != st.world:
                            self._abort(st, f"rank {rank} expects world size {req.get('world')}, store has {st.world}")
                        st.hello.add(rank)
                    self._reply({"ok": True})
                elif op == "allgather":
                    self._reply(self._allgather(st, req))
                elif op == "abort":
                    with st.cond:
                        self._abort(st, f"rank {req.get('rank')}: {req.get('reason')}")
                    self._reply({"ok": True})
                elif op == "bye":
                    said_bye = True
                    with st.cond:
                        st.bye.add(req.get("rank"))
                        st.cond.notify_all()
                    self._reply({"ok": True})
        except (OSError, ValueError):
            pass
        finally:
            if rank is not None and not said_bye:
                with st.cond:
                    self._abort(st, f"rank {rank} disconnected")

    @staticmethod
    def _abort(st, reason):
        if st.aborted is None:
            st.aborted = reason
        st.cond.notify_all()

    def _reply(self, obj):
        self.wfile.write((json.dumps(obj) + "\n").encode())
        self.wfile.flush()

    def _allgather(self, st, req):
        key = (req["group"], req["round"])
        size, index = req["size"], req["index"]
        with st.cond:
            r = st.rounds.setdefault(key, {"vals": {}, "tags": {}, "replied": 0})
            r["vals"][index] = req["value"]
            r["tags"][index] = req["tag"]
            st.cond.notify_all()
            done = st.cond.wait_for(lambda: st.aborted is not None or len(r["vals"]) >= size, st.timeout)
            if st.aborted is not None:
                return {"ok": False, "error": f"store aborted: {st.aborted}", "code": EXIT_PEER_LOST}
            if not done:
                missing = sorted(set(range(size)) - set(r["vals"]))
                return {"ok": False, "error": f"collective {key} timed out waiting for group indices {missing}",
                        "code": EXIT_TIMEOUT}
            vals = [r["vals"][i] for i in range(size)]
            tags = [r["tags"][i] for i in range(size)]
            r["replied"] += 1
            if r["replied"] >= size:
                st.rounds.pop(key, None)
            return {"ok": True, "values": vals, "tags": tags}


class StoreServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def start_store(addr, world, timeout):
    host, port = addr
    srv = StoreServer((host, port), StoreHandler)
    srv.state = StoreState(world, timeout)
    threading.Thread(target=srv.serve_forever, name="store", daemon=True).start()
    return srv


class CollectiveError(Exception):
    def __init__(self, msg, code):
        super().__init__(msg)
        self.code = code


class Client:
    def __init__(self, addr, rank, world, timeout):
        host, port = addr
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.create_connection((host, port), timeout=2)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise CollectiveError(f"cannot reach the store at {host}:{port}: {e}", EXIT_PEER_LOST)
                time.sleep(0.05)
        self.sock.settimeout(timeout + 5)
        self.f = self.sock.makefile("rwb")
        self.rank = rank
        self.rounds = {}
        self.call({"op": "hello", "rank": rank, "world": world})

    def call(self, req):
        try:
            self.f.write((json.dumps(req) + "\n").encode())
            self.f.flush()
            line = self.f.readline()
        except socket.timeout:
            raise CollectiveError(f"store request {req.get('op')} timed out", EXIT_TIMEOUT)
        except OSError as e:
            raise CollectiveError(f"lost the store: {e}", EXIT_PEER_LOST)
        if not line:
            raise CollectiveError("lost the store (connection closed)", EXIT_PEER_LOST)
        rep = json.loads(line)
        if not rep.get("ok"):
            raise CollectiveError(rep.get("error", "store error"), rep.get("code", EXIT_PEER_LOST))
        return rep

    def allgather(self, group, size, index, tag, value):
        k = self.rounds.get(group, 0)
        self.rounds[group] = k + 1
        rep = self.call({"op": "allgather", "group": group, "size": size, "index": index, "round": k,
                         "tag": tag, "value": value})
        if len(set(rep["tags"])) != 1:
            raise CollectiveError(f"collective round {k} of group {group} mixes different calls: {rep['tags']} "
                                  f"(the real engine would hang or reduce unrelated timings)", EXIT_DESYNC)
        return rep["values"]

    def bye(self):
        try:
            self.call({"op": "bye", "rank": self.rank})
        except CollectiveError:
            pass

    def abort(self, reason):
        try:
            self.call({"op": "abort", "rank": self.rank, "reason": reason})
        except (CollectiveError, ValueError):
            pass


def parse_addr(s):
    host, _, port = s.rpartition(":")
    return (host or "127.0.0.1", int(port))


def dist_timeout():
    return float(os.environ.get("FAKE_DIST_TIMEOUT_S", "300"))


# ----------------------------------------------------------------------------------------------
# rank process


class Rank:
    def __init__(self, a, layout, local_index):
        self.a = a
        self.layout = layout
        self.g = layout.global_rank(local_index)
        self.ident = layout.ident(self.g)
        self.env = running_metadata(self.g)
        self.node = layout.node_rank
        self.group = f"tp/pp{self.ident['pp_rank']}"
        self.gsize = layout.tp
        self.gindex = self.ident["tp_rank"]
        self.client = None
        self.rng = random.Random(os.urandom(16))
        self.used = {}  # key -> (tactic, shared)
        self.crash_rank, self.crash_pass = None, None
        if a.crash:
            r, p = a.crash.split(":", 1)
            self.crash_rank, self.crash_pass = int(r), p

    def allgather(self, tag, value):
        if self.gsize == 1:
            return [value]
        return self.client.allgather(self.group, self.gsize, self.gindex, tag, value)

    def run(self):
        a = self.a
        if self.gsize > 1:
            self.client = Client(parse_addr(a._store), self.g, self.layout.world, dist_timeout())
        if a.load_ms:
            time.sleep(a.load_ms / 1000.0)
        if not a.disable_flashinfer_autotune:
            workers = [False] + ([True] if a.speculative_algorithm else [])
            for draft in workers:
                memory = {}
                path = self.cache_file(draft)
                for pname in ("decode", "extend"):
                    self.run_pass(pname, draft, path, memory)
        self.emit_tactics()

    def cache_file(self, draft):
        path = rank_file(self.a, self.layout, self.g, draft)
        if cache_enabled():
            return path
        d, stem = os.path.dirname(path), os.path.basename(path)[:-5]
        stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
        return os.path.join(d, "runs", f"{stem}.{stamp}.{uuid.uuid4().hex}.json")

    def run_pass(self, pname, draft, path, memory):
        a = self.a
        label = ("draft_" if draft else "") + pname
        use_cache = cache_enabled()
        gate = "n/a"
        if use_cache and self.gsize > 1:
            digest = gate_digest(a.gate, path, self.env)
            digests = self.allgather(f"{label}:gate", digest)
            if len(set(digests)) != 1:
                gate = "dropped"
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            else:
                gate = "kept"
        load, loaded = "off", 0
        if use_cache:
            load, entries = load_configs(path, self.env)
            loaded = len(entries)
            for k, v in entries.items():
                memory.setdefault(k, v)
        shapes = pass_shapes(a, self.layout, self.g, pname, draft)
        misses = [s for s in shapes if s.key not in memory]
        hit = len(shapes) - len(misses)
        counts = self.allgather(f"{label}:profile_count", len(misses))
        if len(set(counts)) != 1:
            detail = ", ".join(f"rank {self.group_rank_to_global(i)}: {c}" for i, c in enumerate(counts))
            emit({"event": "desync", "node": self.node, "rank": self.g, "pass": label, "counts": counts})
            raise CollectiveError(f"autotune desync in pass {label}: ranks would profile different numbers of "
                                  f"shapes ({detail}); the real engine hangs in the timing all-reduce", EXIT_DESYNC)
        fi07 = is_fi07(self.env)
        for i, s in enumerate(misses):
            time.sleep(a.tune_ms / 1000.0)
            draw = self.draw(s)
            chosen = self.allgather(f"{label}:profile:{i}", draw)[0]
            value = [s.runner, chosen["tactic"]]
            if fi07:
                value += ["median", {"time_ms": chosen["time_ms"]}]
            memory[s.key] = value
        for s in shapes:
            self.used[s.key] = (memory[s.key][1], s.shared)
        records = None
        if a.megamoe and not draft:
            records = {"gpu_uuid": gpu_uuid(self.layout, self.g), "writer_rank": self.g,
                       "moe_entries": sum(1 for k in memory if "MegaMoERunner" in k)}
        if self.crash_rank == self.g and self.crash_pass in (label, pname):
            d = os.path.dirname(path)
            os.makedirs(d, exist_ok=True)
            fd, _ = tempfile.mkstemp(prefix=".autotuner_", suffix=".tmp", dir=d)
            os.write(fd, b'{\n  "_metadata": {')
            os.close(fd)
            warn(f"[fake_engine] rank {self.g}: --crash {a.crash}: killing myself mid-save")
            os.kill(os.getpid(), signal.SIGKILL)
        saved = save_configs(path, memory, self.env, records)
        emit({"event": "pass", "node": self.node, "rank": self.g, "tp_rank": self.gindex, "pass": label,
              "gate": gate, "load": load, "loaded": loaded, "hit": hit, "tuned": len(misses),
              "saved": saved, "file": path})

    def group_rank_to_global(self, i):
        return self.ident["pp_rank"] * self.layout.tp + i

    def draw(self, s):
        if s.moe:
            tactic = [self.rng.choice([8, 16, 32, 64, 128]), self.rng.randrange(24)]
        else:
            tactic = self.rng.randrange(48)
        return {"tactic": tactic, "time_ms": round(self.rng.uniform(0.005, 2.0), 4)}

    def emit_tactics(self):
        def digest(items):
            return hashlib.sha256(json.dumps(sorted(items), sort_keys=True).encode()).hexdigest()

        all_items = [[k, t] for k, (t, _) in self.used.items()]
        shared = [[k, t] for k, (t, sh) in self.used.items() if sh]
        emit({"event": "tactics", "node": self.node, "rank": self.g, "sha256": digest(all_items),
              "shapes": len(all_items), "shared_sha256": digest(shared), "shared_shapes": len(shared)})


def watch_parent():
    """Die when the launcher dies: our stdin is a pipe whose only writer is the launcher."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass

    def run():
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        os._exit(EXIT_PEER_LOST)

    threading.Thread(target=run, name="parent-watch", daemon=True).start()


def worker_main(a):
    layout = Layout(a)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: os._exit(0))
    watch_parent()
    rank = Rank(a, layout, a._worker)
    try:
        rank.run()
    except CollectiveError as e:
        warn(f"[fake_engine] rank {rank.g}: FATAL: {e}")
        if rank.client is not None and e.code == EXIT_DESYNC:
            rank.client.abort(str(e))
        os._exit(e.code)
    except Exception:
        warn(f"[fake_engine] rank {rank.g}: scheduler exception:\n" + traceback.format_exc().rstrip())
        if rank.client is not None:
            rank.client.abort("exception during autotune")
        os._exit(1)
    if rank.client is not None:
        rank.client.bye()
    if a._status_fd is not None:
        os.write(a._status_fd, b"R")
        os.close(a._status_fd)
    if a.offline:
        os._exit(0)
    while True:  # serving: idle until SIGTERM or the launcher goes away
        time.sleep(3600)


# ----------------------------------------------------------------------------------------------
# launcher (one per node)


class Health:
    def __init__(self, a, node_rank):
        import http.server  # launcher only: keeps rank start-up light

        self.ready = False
        self.a = a
        self.node_rank = node_rank
        health = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path.split("?")[0]
                if path in ("/health", "/health_generate"):
                    code = 200 if health.ready else 503
                    body = b"" if code == 200 else b"starting\n"
                elif path == "/get_model_info" and health.node_rank == 0:
                    code, body = 200, json.dumps({"model_path": health.a.model_path}).encode()
                else:
                    code, body = 404, b"not found\n"
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.handler = H
        self.server = None

    def bind(self):
        import http.server

        srv = http.server.ThreadingHTTPServer((self.a.host, self.a.port), self.handler)
        srv.daemon_threads = True
        self.server = srv
        threading.Thread(target=srv.serve_forever, name="http", daemon=True).start()


def launcher_main(a, argv):
    layout = Layout(a)
    err = layout.validate()
    if err:
        warn(f"fake_engine: error: {err}")
        return 2

    stop = {"sig": None}

    def on_signal(signum, _frame):
        stop["sig"] = signum

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    health = None
    if not a.offline:
        health = Health(a, layout.node_rank)
        if not a.bind_late:
            try:
                health.bind()
            except OSError as e:
                warn(f"fake_engine: error: cannot bind {a.host}:{a.port}: {e}")
                return 1

    store = None
    if layout.node_rank == 0:
        addr = parse_addr(a.dist_init_addr) if a.dist_init_addr else ("127.0.0.1", 0)
        try:
            store = start_store(addr, layout.world, dist_timeout())
        except OSError as e:
            warn(f"fake_engine: error: cannot bind the dist-init store at {addr[0]}:{addr[1]}: {e}")
            return 1
        store_addr = f"{addr[0]}:{store.server_address[1]}"
    else:
        store_addr = a.dist_init_addr

    ranks = []
    for i in range(layout.local):
        g = layout.global_rank(i)
        entry = dict(layout.ident(g))
        entry["file"] = rank_file(a, layout, g, False)
        if a.speculative_algorithm:
            entry["draft_file"] = rank_file(a, layout, g, True)
        ranks.append(entry)
    emit({"event": "start", "node": layout.node_rank, "nnodes": layout.nnodes, "world": layout.world,
          "pid": os.getpid(), "dist_init_addr": store_addr, "gate": a.gate, "offline": a.offline,
          "cache": cache_enabled(), "ranks": ranks})

    procs = []
    status = {}
    for i in range(layout.local):
        r, w = os.pipe()
        cmd = [sys.executable, ENGINE_PATH] + argv + ["--_worker", str(i), "--_store", store_addr,
                                                      "--_status-fd", str(w)]
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, pass_fds=(w,))
        os.close(w)
        os.set_blocking(r, False)
        procs.append(p)
        status[r] = i

    def stop_ranks():
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + 5
        for p in procs:
            try:
                p.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def finish(code, reason):
        stop_ranks()
        if health is not None and health.server is not None:
            health.server.shutdown()
            health.server.server_close()
        emit({"event": "exit", "node": layout.node_rank, "code": code, "reason": reason})
        return code

    ready = set()
    exited = set()
    fd_of = {i: fd for fd, i in status.items()}
    ready_at = None
    announced = False

    def take_status(fd, data):
        if data:
            ready.add(status[fd])
        if not data or b"R" in data:
            os.close(fd)
            del status[fd]

    while True:
        if stop["sig"] is not None:
            return finish(0, f"signal {signal.Signals(stop['sig']).name}")
        # readiness bytes from ranks
        if status:
            rl, _, _ = select.select(list(status), [], [], 0.05)
            for fd in rl:
                try:
                    data = os.read(fd, 16)
                except BlockingIOError:
                    continue
                take_status(fd, data)
        else:
            time.sleep(0.05)
        if stop["sig"] is not None:
            continue
        for i, p in enumerate(procs):
            if i in exited or p.poll() is None:
                continue
            exited.add(i)
            fd = fd_of[i]
            if fd in status:  # drain: the writer is gone, so this cannot block for long
                os.set_blocking(fd, True)
                take_status(fd, os.read(fd, 16))
        if any(procs[i].returncode != 0 or not a.offline or i not in ready for i in exited):
            return finish(*collect_failure(procs, layout))
        if len(ready) == layout.local:
            if a.offline:
                if all(p.poll() is not None for p in procs):
                    if store is not None and layout.tp > 1:
                        wait_byes(store, layout.world)
                    emit({"event": "ready", "node": layout.node_rank, "mode": "offline"})
                    return finish(a.exit_code, "offline run complete")
                continue
            if ready_at is None:
                ready_at = time.monotonic() + a.ready_delay_ms / 1000.0
            if not announced and time.monotonic() >= ready_at:
                if health.server is None:
                    try:
                        health.bind()
                    except OSError as e:
                        warn(f"fake_engine: error: cannot bind {a.host}:{a.port}: {e}")
                        return finish(1, "bind failed")
                health.ready = True
                announced = True
                emit({"event": "ready", "node": layout.node_rank, "mode": "server", "host": a.host,
                      "port": health.server.server_address[1]})
                if layout.node_rank == 0:
                    say(READY_LINE)
            if announced and a.exit_after_ms is not None and \
                    time.monotonic() >= ready_at + a.exit_after_ms / 1000.0:
                return finish(a.exit_code, "--exit-after-ms")


def collect_failure(procs, layout):
    """A rank failed: give the others a moment to fail on their own, then pick the most telling code."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.02)
    codes = []
    for i, p in enumerate(procs):
        rc = p.poll()
        if rc is None:
            continue
        rc = 128 - rc if rc < 0 else rc
        codes.append((layout.global_rank(i), rc))
    bad = [c for c in codes if c[1] != 0]
    primary = [c for c in bad if c[1] not in (EXIT_PEER_LOST, EXIT_TIMEOUT)] or bad or [(None, 1)]
    rank, code = primary[0]
    if code == 0:
        code = 1
    detail = ", ".join(f"rank {r}: {c}" for r, c in codes)
    warn(f"fake_engine: rank {rank} failed with exit code {code} ({detail})")
    return code, f"rank {rank} failed"


def wait_byes(store, world):
    st = store.state
    with st.cond:
        st.cond.wait_for(lambda: len(st.bye) >= world or st.aborted is not None, 30)


def merge_config(argv):
    """SGLang's `--config FILE`: each `key: value` line of the (flat) YAML file becomes `--key value`
    (`true`: the bare flag, `false`: nothing), placed before the command line, which wins."""
    if "--config" not in argv:
        return argv
    i = argv.index("--config")
    extra = []
    with open(argv[i + 1]) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip().strip("'\"")
            if value.lower() == "true":
                extra.append(f"--{key}")
            elif value.lower() != "false":
                extra += [f"--{key}", value]
    return extra + argv[:i] + argv[i + 2:]


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    argv = merge_config(argv)
    a, _unknown = build_parser().parse_known_args(argv)
    if a._worker is not None:
        worker_main(a)
        return 0
    return launcher_main(a, argv)


if __name__ == "__main__":
    sys.exit(main())

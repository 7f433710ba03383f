"""Launch pairs judged by SGLang's own argument parser.

Usage: python3 sglang_launch_pairs.py UNPACKED_WHEEL_DIR DEPS_DIR OUT_DIR [N] [SEED]

UNPACKED_WHEEL_DIR holds `sglang/` from the sglang 0.5.23 wheel
(`pip download --no-deps sglang==0.5.23`, then unzip); DEPS_DIR holds
`msgspec` (`pip install --target DEPS_DIR msgspec`). Every other import
of `sglang.srt.server_args` (torch, triton, ...) is replaced by an inert
stand-in: only `ServerArgs.add_cli_args` and the `--config` merge
(`ConfigArgumentMerger`, PyYAML) run for real, exactly as
`prepare_server_args` calls them.

Writes OUT_DIR/sglang_launch_pairs.jsonl, one JSON object a line:
{"kind", "same", "a", "b"}, each side
{"args": [...], "config": YAML text or null}, where the token "@CONFIG@"
in args stands for the path of a file holding the config text. "same" is
SGLang's verdict: both sides parse to equal namespaces (leaving out what
the `sglang` profile ignores: host, port, logging, ...). Pairs one of
whose sides SGLang rejects are not written.

And OUT_DIR/sglang_config_files.jsonl: {"yaml": TEXT, "args": [...]}, the
tokens SGLang's `ConfigArgumentMerger` makes of a config file (PyYAML's
`safe_load`), for files of tricky YAML SGLang accepts.
"""
import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import os
import random
import sys
import tempfile
import types

WHEEL, DEPS, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
N = int(sys.argv[4]) if len(sys.argv) > 4 else 3000
SEED = int(sys.argv[5]) if len(sys.argv) > 5 else 12
sys.path[:0] = [WHEEL, DEPS]

# ---- inert stand-ins for every module but sglang, msgspec, yaml, stdlib ----
REAL = {"sglang", "msgspec", "yaml", "_yaml"}
ABSENT = {"torch_npu", "habana_frameworks", "intel_extension_for_pytorch",
          "mlx", "torch_musa", "vllm", "deep_gemm", "sgl_kernel_npu"}
DENY_ATTR = {"npu", "hpu", "musa", "mlu"}


class _Base:
    def __init_subclass__(cls, **kw):
        pass

    def __init__(self, *a, **k):
        pass


class Anything:
    __version__ = "2.9.0"

    def __init__(self, *a, **k): pass
    def __call__(self, *a, **k): return Anything()

    def __getattr__(self, n):
        if n.startswith("__") and n.endswith("__"):
            raise AttributeError(n)
        return Anything()

    def __mro_entries__(self, bases): return (_Base,)
    def __iter__(self): return iter(())
    def __bool__(self): return False
    def __int__(self): return 0
    def __index__(self): return 0
    def __float__(self): return 0.0
    def __str__(self): return "stub"
    def __hash__(self): return 0
    def __eq__(self, o): return isinstance(o, Anything)
    def __lt__(self, o): return False
    def __gt__(self, o): return False
    def __le__(self, o): return True
    def __ge__(self, o): return True
    def __add__(self, o): return Anything()
    def __radd__(self, o): return Anything()
    def __mul__(self, o): return Anything()
    def __rmul__(self, o): return Anything()
    def __or__(self, o): return Anything()
    def __ror__(self, o): return Anything()
    def __getitem__(self, k): return Anything()
    def __len__(self): return 0
    def __contains__(self, o): return False
    def __enter__(self): return self
    def __exit__(self, *a): return False


class Stub(types.ModuleType):
    __version__ = "2.9.0"

    def __getattr__(self, name):
        if (name.startswith("__") and name.endswith("__")) or name in DENY_ATTR:
            raise AttributeError(name)
        v = Anything()
        setattr(self, name, v)
        return v


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in ABSENT:
            return None
        if top in REAL or top in sys.stdlib_module_names:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        m = Stub(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, m):
        pass


sys.meta_path.insert(0, Finder())
for pkg in ["sglang", "sglang.srt"]:  # their __init__ starts the runtime
    m = types.ModuleType(pkg)
    m.__path__ = [os.path.join(WHEEL, *pkg.split("."))]
    sys.modules[pkg] = m

from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger  # noqa: E402

assert sys.version_info[:2] == (3, 11), "argparse of the Python SGLang 0.5.23 ships for"
PARSER = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(PARSER)

# what the sglang profile leaves out (src/engine/fingerprint/profiles.rs)
IGNORED = ["--host", "--port", "--api-key", "--admin-api-key", "--served-model-name",
           "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--ssl-keyfile-password",
           "--enable-ssl-refresh", "--dist-init-addr", "--nccl-init-addr", "--nccl-port",
           "--log-level", "--log-level-http", "--log-requests", "--log-requests-level",
           "--decode-log-interval", "--show-time-cost", "--enable-metrics",
           "--enable-metrics-for-all-schedulers", "--enable-request-time-stats-logging",
           "--enable-trace", "--otlp-traces-endpoint", "--crash-dump-folder",
           "--file-storage-path"]
IGNORED_DESTS = {PARSER._option_string_actions[o].dest for o in IGNORED}
TMP = tempfile.mkdtemp()


def sglang(side):
    """SGLang's namespace for one side (prepare_server_args), or None."""
    args = list(side["args"])
    if side["config"] is not None:
        path = os.path.join(TMP, "c.yaml")
        with open(path, "w") as f:
            f.write(side["config"])
        args = [path if a == "@CONFIG@" else a for a in args]
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            if "--config" in args:
                args = ConfigArgumentMerger(PARSER).merge_config_with_args(args)
            explicit = any(a == "--radix-eviction-policy"
                           or a.startswith("--radix-eviction-policy=") for a in args)
            ns = vars(PARSER.parse_args(args))
    except BaseException:
        return None
    out = {k: v for k, v in ns.items() if k not in IGNORED_DESTS}
    out["_radix_eviction_policy_explicitly_set"] = explicit
    return out


# ---- what a launch is made of ----
ACTIONS = [a for a in PARSER._actions if a.option_strings and a.dest != "help"
           and a.dest != "config"]
LONG = {a: [o for o in a.option_strings if o.startswith("--")] for a in ACTIONS}
R = random.Random(SEED)

INTS = ["1", "2", "4", "8", "16", "0", "-1", "4096", "8192"]
INT_SPELLINGS = {"4": ["04", "+4", " 4", "4 ", "4_0"], "8": ["0008", "+8"], "-1": ["-01"]}
FLOATS = ["0.8", "0.85", "0.9", "1.5", "-1.0", "0.5"]
FLOAT_SPELLINGS = {"0.8": [".8", "0.80", "8e-1", "0.8e0"], "0.5": [".5", "5e-1"]}
STRS = ["a", "b", "model", "/models/x", "org/name", "-x", "x y", "-1", "--", "=", "a=b",
        "ünï", "", "None", "true", "false", "0"]


def kind_of(a):
    cls = type(a).__name__
    if cls in ("_StoreTrueAction", "DeprecatedStoreTrueAction", "_StoreConstAction"):
        return "switch"
    if cls == "BooleanOptionalAction":
        return "bool"
    if a.nargs == 0:
        return "switch"
    return "value"


def value_for(a, spelling=False):
    if a.choices is not None:
        c = [str(x) for x in a.choices]
        return R.choice(c)
    t = getattr(a.type, "__name__", "")
    if t == "int":
        v = R.choice(INTS)
        if spelling and v in INT_SPELLINGS and R.random() < 0.5:
            v = R.choice(INT_SPELLINGS[v])
        return v
    if t == "float":
        v = R.choice(FLOATS)
        if spelling and v in FLOAT_SPELLINGS and R.random() < 0.5:
            v = R.choice(FLOAT_SPELLINGS[v])
        return v
    if t in ("loads", "json_list_type"):
        return R.choice(['{"a": 1}', '{"a":1}', "[1, 2]", "[1,2]", "{}"])
    return R.choice(STRS)


def values_for(a):
    if a.nargs in ("+", "*"):
        n = R.choice([0, 1, 2, 3]) if a.nargs == "*" else R.choice([1, 2, 3])
        return [value_for(a) for _ in range(n)]
    if a.nargs == "?":
        return R.choice([[], [value_for(a)]])
    return [value_for(a)]


def group(a):
    """[option, values...] for action a."""
    k = kind_of(a)
    if k == "bool":
        return [R.choice(a.option_strings)]
    if k == "switch":
        return [R.choice(a.option_strings)]
    return [R.choice(LONG[a] or a.option_strings)] + values_for(a)


def abbrev(opt):
    """A shorter spelling argparse still resolves to opt's action, if any."""
    act = PARSER._option_string_actions[opt]
    cands = []
    for n in range(3, len(opt)):
        p = opt[:n]
        hits = {PARSER._option_string_actions[o] for o in PARSER._option_string_actions
                if o.startswith(p)}
        if hits == {act} and p not in PARSER._option_string_actions:
            cands.append(p)
    return R.choice(cands) if cands else None


def spell(g):
    """The same group written another way (=, alias, abbreviation)."""
    opt, vals = g[0], g[1:]
    act = PARSER._option_string_actions.get(opt)
    if act is None:
        return list(g)
    r = R.random()
    if r < 0.3:
        others = [o for o in act.option_strings if o.startswith("--")]
        if type(act).__name__ != "BooleanOptionalAction":
            opt = R.choice(others)
    elif r < 0.6:
        ab = abbrev(opt)
        if ab:
            opt = ab
    if len(vals) == 1 and act.nargs in (None, "?") and R.random() < 0.5:
        return [f"{opt}={vals[0]}"]
    return [opt] + vals


def launch(n):
    acts = R.sample(ACTIONS, n)
    return [["--model-path", R.choice(["/m/a", "/m/b"])]] + [group(a) for a in acts]


def flat(groups):
    return [t for g in groups for t in g]


YAML_BOOL = {True: ["true", "True", "yes", "on", "ON"], False: ["false", "no", "off", "Off"]}


def yaml_scalar(v, typed):
    if not typed:
        return json.dumps(v)
    if v in ("true", "false") and R.random() < 0.5:
        return R.choice(YAML_BOOL[v == "true"])
    if R.random() < 0.2:
        return "'" + v.replace("'", "''") + "'"
    if v == "" or v[0] in "-?:,[]{}#&*!|>'\"%@`" or ": " in v or v.strip() != v or " #" in v:
        return json.dumps(v)
    return v


def to_yaml(groups):
    """Groups as a config file SGLang turns back into them (when it can)."""
    lines = []
    for g in groups:
        opt, vals = g[0], g[1:]
        act = PARSER._option_string_actions[opt]
        key = R.choice([opt[2:], opt[2:].replace("-", "_")]) if opt.startswith("--") else None
        if key is None:
            return None
        k = kind_of(act)
        if k == "switch" and isinstance(act, argparse._StoreTrueAction):
            lines.append(f"{key}: {R.choice(YAML_BOOL[True])}")
        elif k != "value":
            return None
        elif act.nargs in ("+", "*"):
            if not vals:
                return None
            if R.random() < 0.5:
                lines.append(f"{key}: [{', '.join(yaml_scalar(v, True) for v in vals)}]")
            else:
                lines.append(f"{key}:")
                lines.extend(f"  - {yaml_scalar(v, True)}" for v in vals)
        elif len(vals) == 1:
            lines.append(f"{key}: {yaml_scalar(vals[0], True)}")
        else:
            return None
    return "\n".join(lines) + "\n"


YAML_TRAPS = [
    ("017", "17"), ("017", "15"), ("0x10", "16"), ("1_000", "1000"), ("1:30", "90"),
    ("yes", "true"), ("on", "'on'"), ("~", "None"), ("null", "''"), ("1e3", "'1e3'"),
    ("1.0", "1"), ("1.50", "1.5"), ("-0", "0"), ("+4", "4"), (".5", "0.5"),
    ("'4'", "4"), ('"4"', "4"), ("[4]", "4"), ("[]", "''"), ("{}", "'{}'"),
    ("{a: 1}", "'{\"a\": 1}'"), ("2024-01-01", "'2024-01-01'"), ("!!str 4", "'4'"),
]


HOSTILE = ["--", "-1", "-.5", "-5.", "-1e5", "-\u0661", "-1\n", "-x", "- 1", "-", "",
           "--no", "=", "-h", "--tp", "--t", "--cuda-graph-bs", "1", "0", "-0"]


def hostile(tokens):
    """tokens after one or two token-level edits argparse may or may not mind."""
    t = list(tokens)
    for _ in range(R.randint(1, 2)):
        i = R.randrange(len(t) + 1)
        op = R.random()
        if op < 0.3:
            t.insert(i, R.choice(HOSTILE))
        elif op < 0.45 and i < len(t):
            t[i] = R.choice(HOSTILE)
        elif op < 0.6 and i < len(t) - 1 and not t[i + 1].startswith("-"):
            t[i:i + 2] = [t[i] + "=" + t[i + 1]]
        elif op < 0.7 and i < len(t) and "=" in t[i]:
            t[i:i + 1] = t[i].split("=", 1)
        elif op < 0.8 and i < len(t) and t[i].startswith("--") and len(t[i]) > 4:
            t[i] = t[i][:R.randint(3, len(t[i]) - 1)]
        elif op < 0.9 and i < len(t):
            t.insert(i, t[i])
        elif i < len(t):
            del t[i]
    return t


def pair():
    """Two sides and a label of how the second was made from the first."""
    base = launch(R.randint(1, 6))
    r = R.random()
    a = {"args": flat(base), "config": None}
    b_groups = [list(g) for g in base]
    kind = None
    if r < 0.15:
        kind = "reorder"
        R.shuffle(b_groups)
    elif r < 0.3:
        kind = "spelling"
        b_groups = [spell(g) for g in b_groups]
        R.shuffle(b_groups)
    elif r < 0.4:
        kind = "repeat"
        i = R.randrange(len(b_groups))
        acts = PARSER._option_string_actions
        act = acts.get(b_groups[i][0])
        if act is None:
            return None
        b_groups.insert(i, group(act) if R.random() < 0.7 else spell(group(act)))
    elif r < 0.55:
        kind = "value"
        i = R.randrange(len(b_groups))
        act = PARSER._option_string_actions.get(b_groups[i][0])
        if act is None or kind_of(act) != "value":
            return None
        b_groups[i] = [b_groups[i][0]] + ([value_for(act, spelling=True)] if act.nargs in (None, "?")
                                          else values_for(act))
    elif r < 0.65:
        kind = "add-or-drop"
        if R.random() < 0.5 and len(b_groups) > 1:
            del b_groups[R.randrange(1, len(b_groups))]
        else:
            b_groups.insert(R.randrange(len(b_groups) + 1), group(R.choice(ACTIONS)))
    elif r < 0.85:
        kind = "config"
        k = R.randint(1, len(b_groups))
        moved, kept = b_groups[:k], b_groups[k:]
        y = to_yaml(moved)
        if y is None:
            return None
        if R.random() < 0.3:
            # the command line wins over the file
            act = PARSER._option_string_actions[moved[0][0]]
            if kind_of(act) == "value":
                kept = kept + [group(act)]
        pos = R.randrange(len(kept) + 1)
        args = flat(kept[:pos]) + ["--config", "@CONFIG@"] + flat(kept[pos:])
        return "config", a, {"args": args, "config": y}
    elif r < 0.92:
        kind = "tokens"
        return kind, a, {"args": hostile(flat(base)), "config": None}
    else:
        kind = "yaml-typing"
        opt = R.choice(["--chunked-prefill-size", "--tp-size", "--served-model-name",
                        "--revision", "--mem-fraction-static", "--chat-template",
                        "--json-model-override-args", "--cuda-graph-bs-decode",
                        "--trust-remote-code", "--load-format"])
        x, y = R.choice(YAML_TRAPS)
        if R.random() < 0.5:
            x, y = y, x
        extra = R.choice(["", "\n" + opt[2:] + ": 8\n", "\nmodel-path: /m/b\n"])
        rest = flat(base[1:])
        a = {"args": ["--config", "@CONFIG@"] + rest,
             "config": f"model-path: /m/a\n{opt[2:]}: {x}\n" + extra}
        b = {"args": ["--config", "@CONFIG@"] + rest,
             "config": f"model-path: /m/a\n{opt[2:]}: {y}\n" + extra}
        return kind, a, b
    return kind, a, {"args": flat(b_groups), "config": None}


def main():
    written = 0
    seen = set()
    with open(os.path.join(OUT, "sglang_launch_pairs.jsonl"), "w") as out:
        while written < N:
            p = pair()
            if p is None:
                continue
            kind, a, b = p
            key = json.dumps([a, b], sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            na, nb = sglang(a), sglang(b)
            if na is None or nb is None:
                continue
            out.write(json.dumps({"kind": kind, "same": na == nb, "a": a, "b": b},
                                 ensure_ascii=False) + "\n")
            written += 1


# ---- config files: tricky YAML, and the tokens SGLang makes of it ----
SCALARS = [
    "4", "04", "08", "0x1f", "-0x1f", "0b101", "0o17", "1_000", "1__0", "1:30", "190:20:30",
    "-0", "+0", "-00", "+4", "1.5", "1.50", "0.", "09.5", ".5", "-.5", "1.5e3", "1.5e+3",
    "1.0e+999", ".inf", "-.Inf", ".nan", "1e3", "2024-01-01", "2024-01-01 10:00:00",
    "yes", "No", "ON", "off", "y", "n", "true", "False", "~", "null", "Null", "",
    "'4'", '"4"', "'yes'", '"on"', "'~'", "''", '""', "'it''s'", '"a\\tb"', '"\\x41"',
    '"\\u00e9"', '"\\N"', '"\\_"', '"\\L"', '"\\/"', '"\\e"', '"a\\\nb"', "abc",
    "a b", "a  b", "a #b", "a#b", "-x", "--tp", "x: y", "[1, 2]", "[]", "{}", "{a: 1}",
    '{"a": 1, b: [x, 2.5]}', "[a, [b, c]]", "[1, yes, ~, '2']", "{1: a}", "{yes: 1}",
    "|\n  x\n  y\n", "|-\n  x\n\n", "|+\n  x\n\n", ">\n  x\n  y\n\n  z\n",
    ">-\n  x\n   y\n", "|2\n    x\n", "\n  - 1\n  - 2\n", "\n  - [1, 2]\n  - a\n",
    "\n  a: 1\n  b: [2]\n", "x\n  y", "'x\n  y'", '"x\n\n  y"', "!!str 4", "!!int '4'",
    "&a 4", "x\u0085y", '"x\u0085y"', "x\u2028y", '"x\u2028y"', "'x\u2029y'",
    "\tx", "x\t", '"\\t"', "é", "\u00a0x", "x\u00a0",
]
KEYS = ["tp-size", "tp_size", "tp", "chunked-prefill-size", "trust-remote-code",
        "trust_remote_code", "enable-torch-compile", "cuda-graph-bs-decode", "chat-template",
        "revision", "json-model-override-args", "mem-fraction-static", "model-path",
        "'tp-size'", '"chat-template"', "? chat-template\n:"]


def config_text():
    n = R.randint(1, 4)
    lines = []
    for _ in range(n):
        k = R.choice(KEYS)
        v = R.choice(SCALARS)
        sep = "" if k.endswith(":") else ":"
        lines.append(f"{k}{sep} {v}" if not v.startswith("\n") else f"{k}{sep}{v}")
    text = "\n".join(lines) + "\n"
    r = R.random()
    if r < 0.1:
        text = "---\n" + text
    elif r < 0.15:
        text = text.replace("\n", "\r\n")
    elif r < 0.2:
        text = "\ufeff" + text
    elif r < 0.25:
        text = "# c\n" + text + "...\n"
    elif r < 0.3:
        text = "%YAML 1.1\n---\n" + text
    return text


def sglang_config(text):
    import yaml
    path = os.path.join(TMP, "f.yaml")
    with open(path, "w", newline="") as f:
        f.write(text)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            m = ConfigArgumentMerger(PARSER)
            return m._convert_config_to_args(m._parse_yaml_config(path))
    except BaseException:
        return None
    finally:
        del yaml


def configs(n):
    written = 0
    seen = set()
    with open(os.path.join(OUT, "sglang_config_files.jsonl"), "w") as out:
        while written < n:
            text = config_text()
            if text in seen:
                continue
            seen.add(text)
            args = sglang_config(text)
            if args is None:
                continue
            out.write(json.dumps({"yaml": text, "args": args}, ensure_ascii=False) + "\n")
            written += 1


if __name__ == "__main__":  # sglang_arg_table.py imports the parser
    main()
    configs(N)

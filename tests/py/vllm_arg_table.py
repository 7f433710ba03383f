"""How many values each option of `vllm serve` takes, read from vLLM's source.

Usage: python3 vllm_arg_table.py UNPACKED_WHEEL_DIR > src/engine/vllm/launch/table.rs

UNPACKED_WHEEL_DIR holds `vllm/` from the vllm 0.33.0 wheel (`pip download
--no-deps vllm==0.33.0`, then unzip). vLLM's parser cannot be imported
without torch, so this reads the source with `ast` and applies the rules of
`vllm/engine/arg_utils.py` `_compute_kwargs` to each config field's
annotation (type aliases of the config modules resolved):

- a dataclass type: one value; `bool | str | None`: `nargs="?"`;
- any `bool`: `BooleanOptionalAction` (no value; `--no-X` too);
- `list`/`set`/`tuple[X, ...]`: `nargs="+"`; `tuple[X, Y]`: two values;
- anything else: one value;

then the explicit `add_argument` keywords (`action="store_true"`, `nargs=`,
`action="append"`) and `FrontendArgs._customize_cli_kwargs`'s edits (the
`nargs` it deletes). Prints `src/engine/vllm/launch/table.rs`: one entry per
option string, sorted by its bytes, with its arity (`Switch`, `Optional`
for `?`, `Plus` for `+`, `One`, `Exactly(N)`).
"""
import ast
import glob
import os
import sys

ROOT = sys.argv[1]


def parse(path):
    with open(os.path.join(ROOT, path)) as f:
        return ast.parse(f.read())


MODULES = sorted(
    glob.glob(os.path.join(ROOT, "vllm/config/*.py"))
    + [os.path.join(ROOT, p) for p in (
        "vllm/engine/arg_utils.py",
        "vllm/entrypoints/common/cli_args.py",
        "vllm/entrypoints/openai/cli_args.py",
        "vllm/entrypoints/openai/models/protocol.py",
        "vllm/attention/backends/registry.py",
        "vllm/v1/attention/backends/registry.py",
        "vllm/model_executor/layers/quantization/__init__.py",
    ) if os.path.exists(os.path.join(ROOT, p))]
)

classes = {}  # name -> (bases, {field: annotation ast})
aliases = {}  # name -> annotation ast
for path in MODULES:
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            fields = {}
            for s in node.body:
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
                    fields[s.target.id] = s.annotation
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            classes.setdefault(node.name, (bases, fields))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            aliases.setdefault(node.targets[0].id, node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            if ast.unparse(node.annotation) == "TypeAlias":
                aliases.setdefault(node.target.id, node.value)
        elif type(node).__name__ == "TypeAlias":
            aliases.setdefault(node.name.id, node.value)


def fields_of(cls):
    bases, fields = classes.get(cls, ([], {}))
    out = {}
    for b in bases:
        out.update(fields_of(b))
    out.update(fields)
    return out


def members(a, seen=()):
    """The union members of annotation `a`, aliases and Annotated resolved."""
    if isinstance(a, ast.Constant) and isinstance(a.value, str):
        a = ast.parse(a.value, mode="eval").body
    if isinstance(a, ast.BinOp) and isinstance(a.op, ast.BitOr):
        return members(a.left, seen) + members(a.right, seen)
    if isinstance(a, ast.Subscript):
        head = ast.unparse(a.value).split(".")[-1]
        if head == "Optional":
            return members(a.slice, seen) + ["None"]
        if head == "Union":
            elts = a.slice.elts if isinstance(a.slice, ast.Tuple) else [a.slice]
            return [m for e in elts for m in members(e, seen)]
        if head == "Annotated":
            return members(a.slice.elts[0], seen)
        if head in ("list", "List", "set", "Set", "Sequence"):
            return ["list"]
        if head in ("tuple", "Tuple"):
            elts = a.slice.elts if isinstance(a.slice, ast.Tuple) else [a.slice]
            if any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in elts):
                return ["list"]
            return [f"tuple{len(elts)}"]
        if head == "Literal":
            return ["Literal"]
        if head in ("dict", "Dict", "Mapping"):
            return ["dict"]
        return [head]
    if isinstance(a, ast.Constant) and a.value is None:
        return ["None"]
    name = ast.unparse(a).split(".")[-1]
    if name in aliases and name not in seen:
        return members(aliases[name], seen + (name,))
    return [name]


def arity(annotation):
    ms = members(annotation)
    if any(m in classes for m in ms):
        return "1"  # a dataclass: parsed from JSON
    if set(ms) == {"bool", "str", "None"}:
        return "?"
    if "bool" in ms:
        return "0"
    if "Literal" in ms:
        return "1"
    for m in ms:
        if m.startswith("tuple"):
            return m[len("tuple"):]
        if m == "list":
            return "+"
    return "1"


table = {}


def add(flags, ar):
    for f in flags:
        table[f] = ar
        if ar == "0" and f.startswith("--") and not f.startswith("--no-"):
            if fields_bool_optional.get(f, True):
                table["--no-" + f[2:]] = "0"


fields_bool_optional = {}


def explicit(call):
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    act = kw.get("action")
    if act is not None:
        s = ast.unparse(act)
        if "store_true" in s or "store_false" in s:
            return "0", False
        if "BooleanOptionalAction" in s:
            return "0", True
    if "nargs" in kw:
        v = kw["nargs"]
        return (str(v.value) if isinstance(v, ast.Constant) else "+"), False
    return None, False


def walk_add_cli_args(fn):
    kwargs_of = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            c = node.value
            if ast.unparse(c.func).endswith("get_kwargs") and c.args and isinstance(node.targets[0], ast.Name):
                kwargs_of[node.targets[0].id] = ast.unparse(c.args[0]).split(".")[-1]
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("add_argument")):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        flags = [f for f in flags if f.startswith("-")]
        if not flags:
            continue
        ar, boolopt = explicit(node)
        if ar is None:
            ar = "1"
            boolopt = True
            for k in node.keywords:
                if k.arg is None and isinstance(k.value, ast.Subscript):
                    var = ast.unparse(k.value.value)
                    field = k.value.slice.value if isinstance(k.value.slice, ast.Constant) else None
                    cls = kwargs_of.get(var)
                    ann = fields_of(cls).get(field) if cls else None
                    if ann is None:
                        print(f"# unresolved {flags} {var}[{field!r}]", file=sys.stderr)
                    else:
                        ar = arity(ann)
        for f in flags:
            fields_bool_optional[f] = boolopt
        add(flags, ar)


arg_utils = parse("vllm/engine/arg_utils.py")
for node in ast.walk(arg_utils):
    if isinstance(node, ast.FunctionDef) and node.name == "add_cli_args":
        walk_add_cli_args(node)

cli = parse("vllm/entrypoints/common/cli_args.py")
for node in ast.walk(cli):
    if isinstance(node, ast.FunctionDef) and node.name == "make_arg_parser":
        walk_add_cli_args(node)

# FrontendArgs: every field is `--field-name`, edited by _customize_cli_kwargs
nargs_deleted = set()
for node in ast.walk(cli):
    if isinstance(node, ast.Delete):
        for t in node.targets:
            s = ast.unparse(t)
            if s.endswith("['nargs']"):
                nargs_deleted.add(s.split("['")[1].split("']")[0])
for field, ann in fields_of("FrontendArgs").items():
    flag = "--" + field.replace("_", "-")
    ar = arity(ann)
    if field in nargs_deleted and ar == "+":
        ar = "1"
    fields_bool_optional[flag] = True
    add([flag], ar)

HEADER = """//! How many values each option string of vLLM 0.33.0's `vllm serve` parser
//! takes (`vllm/entrypoints/common/cli_args.py` `make_arg_parser`,
//! `vllm/engine/arg_utils.py` `EngineArgs.add_cli_args`): the output of
//! `tests/py/vllm_arg_table.py` over the wheel, sorted by option string
//! (bytes). What finds the model argument where vLLM's parser takes it.

use super::Arity::{self, *};

#[rustfmt::skip]
pub const OPTIONS: &[(&str, Arity)] = &["""
NAMES = {"0": "Switch", "?": "Optional", "+": "Plus", "1": "One"}
print(HEADER)
for f in sorted(table, key=lambda s: s.encode()):
    a = table[f]
    print(f'    ("{f}", {NAMES.get(a, f"Exactly({a})")}),')
print("];")

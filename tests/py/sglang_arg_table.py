"""SGLang 0.5.23's server argument table, from its own parser.

Usage: python3 sglang_arg_table.py UNPACKED_WHEEL_DIR DEPS_DIR > src/engine/sglang/launch/table.rs

UNPACKED_WHEEL_DIR and DEPS_DIR as for `sglang_launch_pairs.py`, whose
stand-ins this imports: `ServerArgs.add_cli_args` builds the parser for
real under Python 3.11, and every action's option strings become one entry
each: the option string, the option it stands for (the action's first long
spelling; `--no-X` of a `BooleanOptionalAction` stays itself), its `dest`,
its `nargs`, and whether it is a `store_true` action. Sorted by option
string (bytes).
"""
import argparse
import os
import sys

WHEEL, DEPS = sys.argv[1], sys.argv[2]
sys.argv = [sys.argv[0], WHEEL, DEPS, os.devnull]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_launch_pairs  # noqa: E402  (builds the parser, runs nothing else)

HEADER = """//! SGLang 0.5.23's server argument table (`sglang serve`,
//! `python -m sglang.launch_server`), as argparse builds it from
//! `python/sglang/srt/server_args.py` and `arg_groups/fields/*.py`: every
//! option string, the option it stands for (aliases map to the first long
//! spelling; `--no-X` of a `BooleanOptionalAction` stays itself), the
//! attribute it writes (argparse `dest`), how many values it takes, and
//! whether it is a `store_true` action (which a config file's `true` turns
//! into a bare flag). Sorted by option string (bytes). Every action in this
//! version stores its value (the last occurrence wins); none appends.
//! Generated, not written by hand: `tests/py/sglang_arg_table.py` prints
//! this file from the wheel. For a new SGLang: `pip download --no-deps
//! sglang==VERSION -d /tmp/wheels`, unzip it into UNPACKED_WHEEL, `pip
//! install --target DEPS msgspec`, then `python3
//! tests/py/sglang_arg_table.py UNPACKED_WHEEL DEPS > src/engine/sglang/launch/table.rs`
//! (update the version in this header and the script's), and review the
//! diff: an option whose arity changed changes how launches are read.

use super::args::{Nargs, Opt};

#[rustfmt::skip]
pub const OPTIONS: &[Opt] = &["""

NARGS = {0: "Switch", None: "One", "?": "Optional", "*": "Star", "+": "Plus"}
rows = []
for a in sglang_launch_pairs.PARSER._actions:
    longs = [o for o in a.option_strings if o.startswith("--")]
    store_true = isinstance(a, argparse._StoreTrueAction)
    for o in a.option_strings:
        if isinstance(a, argparse.BooleanOptionalAction) and o.startswith("--no-"):
            canonical = o
        else:
            canonical = next((l for l in longs if not l.startswith("--no-")), o)
        rows.append((o, canonical, a.dest, NARGS[a.nargs], store_true))

print(HEADER)
for o, c, d, n, t in sorted(rows, key=lambda r: r[0].encode()):
    print(f'    Opt {{ option: "{o}", canonical: "{c}", dest: "{d}", '
          f'nargs: Nargs::{n}, store_true: {"true" if t else "false"} }},')
print("];")

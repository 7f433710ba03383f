"""Reference oracle for the `seed` profile.

Usage: python3 seed_oracle.py CASES.json

CASES.json is a list of {"argv": [HEX, ...], "env": [[HEX_NAME, HEX_VALUE], ...]}
(hex of raw bytes). For each case this imports nothing new: it sets sys.argv
and the process environment to exactly the case's bytes (decoded the way
CPython decodes them at startup: os.fsdecode, i.e. UTF-8 + surrogateescape)
and prints the seed's launch_fingerprint(), one line per case.
"""
import importlib.util
import json
import os
import sys

assert sys.getfilesystemencoding() == "utf-8", sys.getfilesystemencoding()
assert sys.getfilesystemencodeerrors() == "surrogateescape"

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = os.path.join(HERE, "..", "fixtures", "seed_autotune_keep.py")

with open(sys.argv[1], encoding="ascii") as f:
    cases = json.load(f)

spec = importlib.util.spec_from_file_location("seed_autotune_keep", SEED)
seed = importlib.util.module_from_spec(spec)
spec.loader.exec_module(seed)

out = []
for case in cases:
    sys.argv = [os.fsdecode(bytes.fromhex(a)) for a in case["argv"]]
    os.environ.clear()
    for name, value in case["env"]:
        os.environb[bytes.fromhex(name)] = bytes.fromhex(value)
    out.append(seed.launch_fingerprint())
sys.stdout.write("".join(line + "\n" for line in out))

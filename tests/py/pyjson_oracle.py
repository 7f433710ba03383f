"""Reference oracle for keepwrap::canonical: Python's own json.dumps.

Usage: python3 pyjson_oracle.py CASES.json

CASES.json is a list of trees: {"t": "null"}, {"t": "bool", "v": true},
{"t": "int", "v": "123"}, {"t": "float", "v": HEX_OF_BIG_ENDIAN_F64},
{"t": "str", "v": HEX_OF_BYTES} (decoded UTF-8 + surrogateescape),
{"t": "list", "v": [tree, ...]}, {"t": "map", "v": [[HEX_KEY, tree], ...]}.
Prints a JSON list with, per tree, the outputs of STYLES in order.
"""
import json
import struct
import sys

STYLES = [
    dict(),
    dict(sort_keys=True),
    dict(sort_keys=True, separators=(",", ":")),
    dict(indent=2),
    dict(indent=2, sort_keys=True),
]


def build(t):
    kind, v = t["t"], t.get("v")
    if kind == "null":
        return None
    if kind == "bool":
        return v
    if kind == "int":
        return int(v)
    if kind == "float":
        return struct.unpack(">d", bytes.fromhex(v))[0]
    if kind == "str":
        return bytes.fromhex(v).decode("utf-8", "surrogateescape")
    if kind == "list":
        return [build(x) for x in v]
    if kind == "map":
        return {bytes.fromhex(k).decode("utf-8", "surrogateescape"): build(x) for k, x in v}
    raise ValueError(kind)


with open(sys.argv[1], encoding="ascii") as f:
    cases = json.load(f)
result = [[json.dumps(build(c), **s) for s in STYLES] for c in cases]
json.dump(result, sys.stdout)

"""Shim package: `PYTHONPATH=examples python3 -m sglang.launch_server ...` runs the fake engine."""

"""Shim package: `PYTHONPATH=examples python3 -m vllm.entrypoints...` runs the fake vLLM engine."""

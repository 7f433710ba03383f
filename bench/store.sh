#!/bin/sh
# Benchmarks of the store (restore 8 rank files) and of `keepwrap status`
# over 10,000 cache files; see examples/bench_store.rs.
set -e
cd "$(dirname "$0")/.."
cargo build --release --locked --bin keepwrap --example bench_store
exec ./target/release/examples/bench_store "${1:-20}"

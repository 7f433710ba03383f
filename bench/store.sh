#!/bin/sh
# Benchmarks of the store and of the pre-launch prune: reuse, stash and
# remove at 100, 1,000, 10,000 and 100,000 rank files, with the cost per
# file (benches/bench_prune.rs); restore 8 rank files and `keepwrap status`
# over 10,000 cache files (benches/bench_store.rs).
set -e
cd "$(dirname "$0")/.."
cargo bench --locked --quiet --bench bench_prune
exec cargo bench --locked --quiet --bench bench_store -- "${1:-20}"

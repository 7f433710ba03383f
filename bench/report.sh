#!/usr/bin/env bash
# The performance report (docs/performance.md), in one command:
#
#   bash bench/report.sh > report.md
#
# Runs every benchmark on this machine (release builds) and prints Markdown:
# wrapper overhead against tini, dumb-init, catatonit and a direct exec,
# resident memory and idle CPU; before the engine starts and after it
# exits as a user sees it (bench/prestart.py, needs strace); pre-launch prune (reuse, stash, remove) of
# 100 to 100,000 cache files with the cost per file; done to signed at 64
# rank files; unify, store, share; done-to-signed latency; signal latency
# while signing; cold against warm
# boots of the fake engine. Needs hyperfine, tini, dumb-init and catatonit
# (apt-get install hyperfine tini dumb-init catatonit). Takes a few minutes;
# run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --quiet --bins
cargo bench --locked --quiet --no-run
# A benchmark of benches/ with its arguments (cargo bench appends --bench).
bench() { cargo bench --locked --quiet --bench "$1" -- "${@:2}"; }

section() { printf '\n### %s\n\n' "$1"; }
block() { printf '```text\n'; "$@"; printf '```\n'; }

echo "## Performance report ($(date -u +%Y-%m-%d), $(nproc) cores, $(uname -r))"

section "Entrypoint: startup, memory, idle CPU (bench/entrypoint.sh)"
bash bench/entrypoint.sh

section "Before the engine starts, as a user sees it: the release keepwrap with its defaults, 10,000 rank files (bench/prestart.py)"
python3 bench/prestart.py --strace 10000

section "Pre-launch prune: reuse, stash, remove at 100 to 100,000 rank files (benches/bench_prune.rs)"
block bench bench_prune

section "Done to signed at 64 rank files x 2,000 entries, bytes written (benches/bench_done.rs)"
block bench bench_done 64 5

section "Unify 8 rank files of 2,000 entries (benches/bench_unify.rs)"
block bench bench_unify 200

section "Union of four nodes' publications on a share (benches/bench_share.rs)"
block bench bench_share 100

section "Store: restore 8 rank files; status over 10,000 files (benches/bench_store.rs)"
block bench bench_store 20

section "Done to signed (bench/done_to_signed.py)"
block python3 bench/done_to_signed.py target/release/keepwrap 5

section "Signal latency while a set is signed (bench/signal_latency.py)"
block python3 bench/signal_latency.py target/release/keepwrap 5

section "Cold against warm boot of the fake engine (examples/demo.sh)"
bash examples/demo.sh 2>/dev/null

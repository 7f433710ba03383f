#!/usr/bin/env bash
# The fault-injection tests of tests/it/faults.rs, with many more trials:
# 500 SIGKILLs of the engine at random points of its boot (and 100 each of
# keepwrap in prune and in unify + commit), bounded in time.
#
#   bench/faults.sh [ENGINE_TRIALS] [SECONDS]      (default 500, 1800)
#
# Seeded: KEEPWRAP_FAULT_SEED=N replays a run (the seed is printed, and
# every failure names it with the trial).
set -euo pipefail
cd "$(dirname "$0")/.."
export KEEPWRAP_FAULT_TRIALS=${1:-500}
export KEEPWRAP_FAULT_SECS=${2:-1800}
export KEEPWRAP_PRUNE_TRIALS=${KEEPWRAP_PRUNE_TRIALS:-100}
export KEEPWRAP_COMMIT_TRIALS=${KEEPWRAP_COMMIT_TRIALS:-100}
export KEEPWRAP_FAULT_THREADS=${KEEPWRAP_FAULT_THREADS:-3}
start=$(date +%s)
cargo test --locked --test it -- faults:: --include-ignored --skip every_crash_point --skip grown_set --nocapture --test-threads=1 2>&1 |
    grep -E "trials|SIGKILL|panicked|^test |test result|seed"
echo "faults: $(($(date +%s) - start)) s"

#!/usr/bin/env bash
# keepwrap around the fake vLLM engine (`vllm serve`, TP 2 with expert
# parallelism, server mode). vLLM 0.33 (per-rank files): boot 1 tunes and
# signs, boot 2 reuses, boot 3 sets VLLM_FLASHINFER_MOE_BACKEND (vLLM's own
# cache key ignores it and would reuse boot 1's tactics) and re-tunes, boot 4
# goes back and restores boot 1's set from the store. vLLM 0.31 (one shared
# file): boot 5 tunes and keeps nothing (the file would hang the next boot),
# boot 6 would hang without keepwrap (boot 7 shows it: the fake exits 89
# where vLLM waits 30 minutes) and re-tunes behind it.
# Shows keepwrap's lines of each boot, then the boots side by side. The logs
# and the cache are kept.
#
#   bash examples/demo-vllm.sh       # TUNE_MS=40 by default: 40 ms per tuned shape;
#                                    # EXIT_AFTER_MS=1500: each server exits this long after ready
#                                    # (more than the 500 ms between two health probes)
#
# DEMO_DIR=DIR keeps the logs and the cache there (default: a new temporary
# directory); KEEPWRAP_BIN=PATH uses that keepwrap instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${KEEPWRAP_BIN:-}" ]; then
  KW="$KEEPWRAP_BIN"
else
  echo "demo: building keepwrap (cargo build --release; the first build takes a minute or two) ..." >&2
  cargo build --release --quiet
  KW="$PWD/target/release/keepwrap"
fi
work=${DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/keepwrap-demo-vllm.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
echo "demo: logs and cache in $work (kept)" >&2
# `vllm` is the fake's launcher; its cache goes under the demo directory.
# Its package importable, as an installed vLLM's is: keepwrap reads its
# version (a launch whose engine it cannot find is never kept).
export PATH="$PWD/tests/fixtures/engines/bin:$PATH"
export PYTHONPATH="$PWD/tests/fixtures/engines${PYTHONPATH:+:$PYTHONPATH}"
unset VLLM_CACHE_ROOT VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR VLLM_FLASHINFER_MOE_BACKEND FAKE_VLLM_LAYOUT FAKE_VLLM_VERSION
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tune_ms=${TUNE_MS:-40}
rows=()

tuned_of() { # OUT
  python3 -c 'import json,sys; print(sum(json.loads(l)["tuned"] for l in open(sys.argv[1]) if l.startswith("{") and json.loads(l).get("event") == "pass"))' "$1"
}

boot() { # N TITLE VERSION MOE_BACKEND (each version its own VLLM_CACHE_ROOT)
  local n=$1 title=$2 version=$3 backend=$4
  local log="$work/boot$n.log" out="$work/boot$n.out"
  # The fake serves until 1.5 s after ready, then exits 0; keepwrap signs
  # at the first 200 from /health, as it would for a real server.
  env ${backend:+VLLM_FLASHINFER_MOE_BACKEND=$backend} FAKE_VLLM_VERSION="$version" \
    VLLM_CACHE_ROOT="$work/vllm-$version" \
    "$KW" -- vllm serve /models/fake-moe -tp 2 -ep --port "$port" \
    --tune-ms "$tune_ms" --exit-after-ms "${EXIT_AFTER_MS:-1500}" >"$out" 2>"$log"
  local tuned ready outcome
  tuned=$(tuned_of "$out")
  ready=$(sed -n 's/.*answered 200 \([0-9.]*\) s after.*/\1/p' "$log" | head -1)
  outcome=$(grep -E '^keepwrap: (reused|tuned and signed|nothing to keep|not signing|this launch keeps nothing)' "$log" | sed 's/^keepwrap: //; s/: the next start removes .*//' | head -1)
  rows+=("| $n ($title) | $version | ${backend:-(unset)} | $tuned | ${ready:-?} s | $outcome |")
  echo "== boot $n ($title, vLLM $version, VLLM_FLASHINFER_MOE_BACKEND ${backend:-unset}): keepwrap's lines; all of it in $log"
  grep '^keepwrap:' "$log" || true
  echo
}

boot 1 "cold" 0.33.0 ""
boot 2 "same launch" 0.33.0 ""
boot 3 "VLLM_* changed" 0.33.0 latency
boot 4 "back to boot 1" 0.33.0 ""
boot 5 "cold" 0.31.0 ""
boot 6 "warm" 0.31.0 ""

# Boot 7: the same warm boot of vLLM 0.31 with keepwrap only supervising
# (--disable): the shared file boot 6 left hangs it.
log="$work/boot7.log"
set +e
FAKE_VLLM_VERSION=0.31.0 VLLM_CACHE_ROOT="$work/vllm-0.31.0" "$KW" --disable -- vllm serve /models/fake-moe -tp 2 -ep \
  --tune-ms "$tune_ms" --offline >"$work/boot7.out" 2>"$log"
code=$?
set -e
echo "== boot 7 (warm, vLLM 0.31.0, keepwrap --disable): exit $code (89: the fake's stand-in for vLLM's 30-minute hang); all of it in $log"
echo

echo "| boot | vLLM | VLLM_FLASHINFER_MOE_BACKEND | shapes tuned (all ranks) | ready after | keepwrap |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo "| 7 (warm, --disable) | 0.31.0 | (unset) | - | exit $code: hung | supervising only |"
echo
echo "demo: logs in $work/boot{1..7}.log (keepwrap and engine), engine events in $work/boot{1..7}.out"
echo "demo: inspect the cache with: VLLM_CACHE_ROOT=$work/vllm-0.33.0 $KW status --profile vllm"

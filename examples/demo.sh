#!/usr/bin/env bash
# keepwrap around the fake engine (4 ranks, expert parallelism, SGLang's stock
# gate, server mode): boot 1 tunes and signs, boot 2 reuses, boot 3 changes
# --chunked-prefill-size and re-tunes. Shows keepwrap's lines of each boot,
# then the boot times side by side. The logs and the cache are kept.
#
#   bash examples/demo.sh            # TUNE_MS=40 by default: 40 ms per tuned shape
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
work=${DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/keepwrap-demo.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
echo "demo: logs and cache in $work (kept)" >&2
export SGLANG_CACHE_DIR="$work/sglang" PYTHONPATH="$PWD/tests/fixtures/engines${PYTHONPATH:+:$PYTHONPATH}"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tune_ms=${TUNE_MS:-40}
rows=()

boot() { # N TITLE CHUNKED
  local n=$1 title=$2 chunked=$3
  local log="$work/boot$n.log" out="$work/boot$n.out"
  # The fake serves until 1.5 s after ready, then exits 0; keepwrap signs
  # at the first 200 from /health, as it would for a real server.
  "$KW" -- python3 -m sglang.launch_server --model-path /models/fake-moe \
    --tp 4 --ep 4 --gate stock --port "$port" --tune-ms "$tune_ms" \
    --chunked-prefill-size "$chunked" --exit-after-ms 1500 >"$out" 2>"$log"
  local tuned ready outcome
  tuned=$(python3 -c 'import json,sys; print(sum(json.loads(l)["tuned"] for l in open(sys.argv[1]) if l.startswith("{\"event\": \"pass\"") or "\"event\":\"pass\"" in l))' "$out")
  ready=$(sed -n 's/.*answered 200 \([0-9.]*\) s after.*/\1/p' "$log" | head -1)
  outcome=$(grep -E '^keepwrap: (reused|tuned and signed|nothing to keep|not signing)' "$log" | sed 's/^keepwrap: //' | head -1)
  rows+=("| $n ($title) | $chunked | $tuned | ${ready:-?} s | $outcome |")
  echo "== boot $n ($title, --chunked-prefill-size $chunked): keepwrap's lines; all of it in $log"
  grep '^keepwrap:' "$log" || true
  echo
}

boot 1 "cold" 2048
boot 2 "same launch" 2048
boot 3 "changed" 4096

echo "| boot | --chunked-prefill-size | shapes tuned (all ranks) | ready after | keepwrap |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "demo: logs in $work/boot{1,2,3}.log (keepwrap and engine), engine events in $work/boot{1,2,3}.out"
echo "demo: inspect the cache with: SGLANG_CACHE_DIR=$work/sglang $KW status"

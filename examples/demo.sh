#!/usr/bin/env bash
# keepwrap around the fake engine (4 ranks, expert parallelism, SGLang's stock
# gate, server mode): boot 1 tunes and signs, boot 2 reuses, boot 3 changes
# --chunked-prefill-size and re-tunes. Prints the boot times side by side.
#
#   bash examples/demo.sh            # TUNE_MS=40 by default: 40 ms per tuned shape
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --quiet
KW="$PWD/target/release/keepwrap"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SGLANG_CACHE_DIR="$work/sglang" PYTHONPATH="$PWD/examples${PYTHONPATH:+:$PYTHONPATH}"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tune_ms=${TUNE_MS:-40}

boot() { # NAME CHUNKED
  local name=$1 chunked=$2 log="$work/$1.log"
  local start end
  start=$(date +%s.%N)
  # The fake serves until 1.5 s after ready, then exits 0; keepwrap signs
  # at the first 200 from /health, as it would for a real server.
  "$KW" -- python3 -m sglang.launch_server --model-path /models/fake-moe \
    --tp 4 --ep 4 --gate stock --port "$port" --tune-ms "$tune_ms" \
    --chunked-prefill-size "$chunked" --exit-after-ms 1500 >"$work/$name.out" 2>"$log"
  end=$(date +%s.%N)
  local tuned ready outcome
  tuned=$(python3 -c 'import json,sys; print(sum(json.loads(l)["tuned"] for l in open(sys.argv[1]) if l.startswith("{\"event\": \"pass\"") or "\"event\":\"pass\"" in l))' "$work/$name.out")
  ready=$(sed -n 's/.*answered 200 \([0-9.]*\) s after.*/\1/p' "$log" | head -1)
  outcome=$(grep -E 'keepwrap: (reused|tuned and signed|nothing to keep|not signing)' "$log" | sed 's/^keepwrap: //' | head -1)
  printf '| %s | %s | %s | %s s | %s |\n' "$name" "$chunked" "$tuned" "${ready:-?}" "$outcome"
  echo "$name: $(grep -c . "$log") keepwrap and engine log lines in $log" >&2
}

echo "| boot | --chunked-prefill-size | shapes tuned (all ranks) | ready after | keepwrap |"
echo "|---|---|---|---|---|"
boot "boot 1 (cold)" 2048
boot "boot 2 (same launch)" 2048
boot "boot 3 (changed)" 4096

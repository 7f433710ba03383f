#!/usr/bin/env bash
# Two pods of one launch through a fleet store on a local S3 server (moto's,
# on loopback), each on its own cache root: pod 1 boots cold, tunes and
# publishes its signed set; pod 2 restores it, verifies it whole and boots
# warm, tuning 0 shapes. Shows keepwrap's fleet lines of each pod, then what
# each tuned.
#
#   bash examples/demo-fleet.sh
#
# MOTO_VENV=DIR: a virtual environment with moto[server]==5.2.5 (made there
# from PyPI when missing; default ~/.cache/keepwrap-ci/moto-5.2.5, the one
# .ci/run makes); DEMO_DIR=DIR keeps the logs and roots there;
# KEEPWRAP_BIN=PATH uses that keepwrap instead of building one.
#
# A set is restored only onto the GPU model it was tuned on, which keepwrap
# reads from the NVIDIA driver (/proc/driver/nvidia/gpus). The fake engine
# stamps its files "NVIDIA GB10": the demo builds keepwrap with the
# failpoints feature (the tests' build) and shows it a machine of that
# model laid out in its own directory. A keepwrap without the feature on a
# machine without that GPU boots pod 2 cold (fleet_no_gpu_model).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${KEEPWRAP_BIN:-}" ]; then
  KW="$KEEPWRAP_BIN"
else
  echo "demo: building keepwrap (cargo build --release --features failpoints; the first build takes a few minutes) ..." >&2
  cargo build --release --features failpoints --quiet
  KW="$PWD/target/release/keepwrap"
fi
venv="${MOTO_VENV:-$HOME/.cache/keepwrap-ci/moto-5.2.5}"
if ! "$venv/bin/python" -c 'import moto, flask' >/dev/null 2>&1; then
  echo "demo: installing moto[server]==5.2.5 into $venv ..." >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]==5.2.5'
fi
work=${DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/keepwrap-demo-fleet.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
echo "demo: logs and roots in $work (kept)" >&2
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$work/moto.log" 2>&1 &
moto=$!
trap 'kill "$moto" 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo \
  AWS_EC2_METADATA_DISABLED=true KEEPWRAP_FLEET=s3://keepwrap-demo/fleet
for bus in 0000:18:00.0 0000:2a:00.0; do
  mkdir -p "$work/gpus/$bus"
  printf 'Model: \t\t NVIDIA GB10\n' >"$work/gpus/$bus/information"
done
export KEEPWRAP_FAILPOINT_NVIDIA_GPUS="$work/gpus"
"$venv/bin/python" -c 'import boto3, os; boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name="us-east-1").create_bucket(Bucket="keepwrap-demo")'
echo "demo: bucket s3://keepwrap-demo on $AWS_ENDPOINT_URL" >&2

pod() { # N
  local n=$1
  SGLANG_CACHE_DIR="$work/pod$n/sglang" "$KW" -- python3 tests/fixtures/engines/fake_engine.py \
    --model-path /models/fake-moe --tp 2 --tune-ms "${TUNE_MS:-40}" --offline \
    >"$work/pod$n.out" 2>"$work/pod$n.log"
  local tuned
  tuned=$(python3 -c 'import json,sys; print(sum(json.loads(l)["tuned"] for l in open(sys.argv[1]) if l.startswith("{") and json.loads(l).get("event") == "pass"))' "$work/pod$n.out")
  echo
  echo "== pod $n (root $work/pod$n): $tuned shapes tuned"
  grep -E '^keepwrap: (fleet|tuned|reused)' "$work/pod$n.log" || true
}
pod 1
pod 2
echo
echo "demo: logs in $work/pod{1,2}.log"

#!/usr/bin/env bash
# Wrapper overhead against tini, dumb-init, catatonit and a direct exec;
# keepwrap's resident memory while supervising; CPU time over an idle child.
# Prints a Markdown table (the README's "Entrypoint" table).
#
#   bash bench/entrypoint.sh            # needs hyperfine, tini, dumb-init, catatonit
#
# Run it on an otherwise idle machine: the ratios come from one hyperfine run.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in hyperfine tini dumb-init catatonit python3; do
  command -v "$tool" >/dev/null || { echo "bench/entrypoint.sh: $tool is missing (apt-get install hyperfine tini dumb-init catatonit)" >&2; exit 1; }
done
cargo build --release --quiet
KW="$PWD/target/release/keepwrap"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export KEEPWRAP_CACHE_DIR="$work/cache"

hyperfine --warmup 20 --min-runs 300 -N \
  --export-json "$work/startup.json" \
  -n "true" "true" \
  -n "keepwrap -- true" "$KW -- true" \
  -n "keepwrap --disable -- true" "$KW --disable -- true" \
  -n "tini -s -- true" "tini -s -- true" \
  -n "dumb-init true" "dumb-init true" \
  -n "catatonit -- true" "catatonit -- true" >/dev/null 2>&1

# Resident memory and idle CPU of keepwrap supervising `sleep` for 10 s.
"$KW" -- sleep 12 &
kw=$!
for _ in $(seq 100); do [ -n "$(cat /proc/$kw/task/*/children 2>/dev/null)" ] && break; sleep 0.05; done
ticks() { awk '{print $14 + $15}' "/proc/$kw/stat"; }
t0=$(ticks)
sleep 10
t1=$(ticks)
rss_kib=$(awk '/^VmRSS:/ {print $2}' "/proc/$kw/status")
hwm_kib=$(awk '/^VmHWM:/ {print $2}' "/proc/$kw/status")
wait "$kw"

python3 - "$work/startup.json" "$rss_kib" "$hwm_kib" "$((t1 - t0))" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
rss, hwm, idle = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tini = results["tini -s -- true"]["mean"]
print("| command | mean wall time | vs tini -s |")
print("|---|---|---|")
for name, r in results.items():
    print(f"| `{name}` | {r['mean'] * 1e3:.2f} ms ± {r['stddev'] * 1e3:.2f} | {r['mean'] / tini:.2f}x |")
print()
print(f"| keepwrap supervising an idle child | value |")
print("|---|---|")
print(f"| resident memory (VmRSS / peak VmHWM) | {rss / 1024:.2f} MiB / {hwm / 1024:.2f} MiB |")
print(f"| CPU time over 10 s of an idle child | {idle} ticks |")
PY

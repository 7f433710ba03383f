#!/usr/bin/env bash
# Wrapper overhead against tini, dumb-init, catatonit and a direct exec, as
# medians of one hyperfine run (so every ratio has its anchor from the same
# run); keepwrap's resident memory while supervising; CPU time over an idle
# child. Prints a Markdown table (the "Entrypoint" table of docs/performance.md) with each
# goal: keepwrap --keep always -- true (cache keeping on) within 1.5x tini -s
# on a first and a repeat boot with 1,000 launches already made on the root,
# --disable within 1.2x, resident memory within 4 MiB (cache keeping on).
# Beside each median: the CPU time per run (user + system of the whole
# process tree, hyperfine's mean), which another load on the machine
# inflates far less than the wall time; and the load average, before and
# after. When the x86_64 musl target is installed, the static binary the
# Dockerfile ships is measured too (rows marked "static").
#
#   bash bench/entrypoint.sh            # needs hyperfine, tini, dumb-init, catatonit
#   RUNS=100 LAUNCHES=200 bash bench/entrypoint.sh    # a quicker, rougher run
#   STATIC=0 bash bench/entrypoint.sh   # without the static build
#
# Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# Signals this script inherited as ignored (nohup ignores HUP; some session
# managers leave 32 and 33 ignored) would be inherited by tini and
# dumb-init's child, which do not reset them: start again with every signal
# at its default and none blocked.
if [ -z "${KEEPWRAP_BENCH_SIGNALS_RESET:-}" ]; then
  export KEEPWRAP_BENCH_SIGNALS_RESET=1
  exec python3 - "$0" "$@" <<'PY'
import ctypes, os, platform, sys
nr_sigaction, nr_sigprocmask = {"x86_64": (13, 14), "aarch64": (134, 135)}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
default = ctypes.create_string_buffer(64)  # zeroed: SIG_DFL, no flags, empty mask
for n in range(1, 65):
    if n not in (9, 19):
        libc.syscall(nr_sigaction, n, default, None, 8)
libc.syscall(nr_sigprocmask, 2, ctypes.byref(ctypes.c_uint64(0)), None, 8)  # SIG_SETMASK, empty
os.execvp("bash", ["bash"] + sys.argv[1:])
PY
fi

for tool in hyperfine tini dumb-init catatonit python3; do
  command -v "$tool" >/dev/null || { echo "bench/entrypoint.sh: $tool is missing (apt-get install hyperfine tini dumb-init catatonit)" >&2; exit 1; }
done
RUNS=${RUNS:-300}
LAUNCHES=${LAUNCHES:-1000}
cargo build --release --quiet
KW="$PWD/target/release/keepwrap"
# The static binary of Dockerfile.snippet (musl, linked by rust-lld).
musl=x86_64-unknown-linux-musl
KWS=
if [ "${STATIC:-1}" != 0 ] && [ "$(uname -m)" = x86_64 ] \
  && rustup target list --installed 2>/dev/null | grep -qx "$musl"; then
  CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER=rust-lld \
    cargo build --release --quiet --locked --target "$musl"
  KWS="$PWD/target/$musl/release/keepwrap"
fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
TRUE=$(command -v true)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset KEEPWRAP_LOG

# Roots with $LAUNCHES launches already made: each a different command, so
# `keepwrap --keep always -- true` is a first boot on "others" and, after one
# launch of its own, a repeat boot on "repeat". (`true` is no engine launch:
# `--keep always` keeps its cache as an engine's would be.)
mkdir -p "$work/others"
for i in $(seq "$LAUNCHES"); do
  KEEPWRAP_CACHE_DIR="$work/others" "$KW" --keep always -- "$TRUE" "$i" 2>/dev/null
done
cp -a "$work/others" "$work/repeat"
KEEPWRAP_CACHE_DIR="$work/repeat" "$KW" --keep always -- "$TRUE" 2>/dev/null
markers=$(find "$work/others" -type f | wc -l)

# name | prepare (untimed, before each run) | command
export KEEPWRAP_CACHE_DIR="$work/root"
fresh() { echo "sh -c 'rm -rf $work/root && cp -a $work/$1 $work/root'"; }
benches=(
  "true|$TRUE|$TRUE"
  "keepwrap --keep always -- true (empty root)|rm -rf $work/root|$KW --keep always -- $TRUE"
  "keepwrap --keep always -- true (first boot, $LAUNCHES launches on the root)|$(fresh others)|$KW --keep always -- $TRUE"
  "keepwrap --keep always -- true (repeat boot, $LAUNCHES launches on the root)|$(fresh repeat)|$KW --keep always -- $TRUE"
  "keepwrap -- true (not an engine launch: supervising only)|$TRUE|$KW -- $TRUE"
  "keepwrap --disable -- true|$TRUE|$KW --disable -- $TRUE"
  "tini -s -- true|$TRUE|tini -s -- $TRUE"
  "dumb-init true|$TRUE|dumb-init $TRUE"
  "catatonit -- true|$TRUE|catatonit -- $TRUE"
)
if [ -n "$KWS" ]; then
  benches+=(
    "keepwrap --keep always -- true (static, empty root)|rm -rf $work/root|$KWS --keep always -- $TRUE"
    "keepwrap --keep always -- true (static, first boot, $LAUNCHES launches on the root)|$(fresh others)|$KWS --keep always -- $TRUE"
    "keepwrap --keep always -- true (static, repeat boot, $LAUNCHES launches on the root)|$(fresh repeat)|$KWS --keep always -- $TRUE"
    "keepwrap --disable -- true (static)|$TRUE|$KWS --disable -- $TRUE"
  )
fi
# hyperfine pairs the i-th --prepare and the i-th -n with the i-th command.
names=(); prepares=(); commands=()
for b in "${benches[@]}"; do
  IFS='|' read -r name prepare command <<<"$b"
  names+=(-n "$name"); prepares+=(--prepare "$prepare"); commands+=("$command")
done
hyperfine --warmup 20 --runs "$RUNS" -N --export-json "$work/startup.json" \
  "${prepares[@]}" "${names[@]}" "${commands[@]}" >/dev/null 2>&1

# Resident memory and idle CPU of keepwrap supervising `sleep` for 10 s (and
# tini's resident memory for scale).
rm -rf "$work/root"
"$KW" --keep always -- sleep 12 2>/dev/null &
kw=$!
tini -s -- sleep 3 &
tn=$!
for _ in $(seq 100); do [ -n "$(cat /proc/$kw/task/*/children 2>/dev/null)" ] && break; sleep 0.05; done
sleep 0.5
ticks() { awk '{print $14 + $15}' "/proc/$kw/stat"; }
field() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$2/status"; }
t0=$(ticks)
tini_rss=$(field VmRSS "$tn")
sleep 10
t1=$(ticks)
mem="$(field VmRSS "$kw") $(field VmHWM "$kw") $(field RssAnon "$kw") $(field RssFile "$kw") $tini_rss"
wait "$kw" "$tn"
size=$(stat -c %s "$KW")
# The same for the static binary (its C library is inside it).
static="- - - - -"
if [ -n "$KWS" ]; then
  rm -rf "$work/root"
  "$KWS" --keep always -- sleep 3 2>/dev/null &
  kw=$!
  for _ in $(seq 100); do [ -n "$(cat /proc/$kw/task/*/children 2>/dev/null)" ] && break; sleep 0.05; done
  sleep 0.5
  static="$(field VmRSS "$kw") $(field VmHWM "$kw") $(field RssAnon "$kw") $(field RssFile "$kw") $(stat -c %s "$KWS")"
  wait "$kw"
fi

load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$work/startup.json" "$((t1 - t0))" "$size" "$markers" "$load_before" "$load_after" $mem $static <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
idle, size, markers = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
load_before, load_after = sys.argv[5], sys.argv[6]
rss, hwm, anon, file, tini_rss = (int(v) for v in sys.argv[7:12])
static = None if sys.argv[12] == "-" else [int(v) for v in sys.argv[12:17]]
tini = results["tini -s -- true"]
goals = {"keepwrap --keep always": 1.5, "keepwrap --disable": 1.2}
def cpu(r):
    return r["user"] + r["system"]
print("| command | median | mean ± σ | median vs `tini -s` | goal | CPU per run | CPU vs `tini -s` |")
print("|---|---|---|---|---|---|---|")
for name, r in results.items():
    ratio = r["median"] / tini["median"]
    goal = next((g for k, g in goals.items() if name.startswith(k)), None)
    verdict = f"<= {goal}x: {'met' if ratio <= goal else 'NOT met'}" if goal else ""
    print(f"| `{name}` | {r['median'] * 1e3:.2f} ms | {r['mean'] * 1e3:.2f} ± {r['stddev'] * 1e3:.2f} ms "
          f"| {ratio:.2f}x | {verdict} | {cpu(r) * 1e3:.2f} ms | {cpu(r) / cpu(tini):.2f}x |")
print()
print(f"(after the earlier launches the root holds {markers} files; {len(next(iter(results.values()))['times'])} runs each; "
      f"load average {load_before} before, {load_after} after)")
print()
print("| keepwrap supervising an idle child | value | goal |")
print("|---|---|---|")
print(f"| resident memory, VmRSS / peak VmHWM | {rss / 1024:.2f} MiB / {hwm / 1024:.2f} MiB "
      f"| <= 4 MiB: {'met' if hwm <= 4096 else 'NOT met'} |")
print(f"| of which anonymous / file-backed (binary, libc) | {anon / 1024:.2f} MiB / {file / 1024:.2f} MiB | |")
print(f"| tini's VmRSS, for scale | {tini_rss / 1024:.2f} MiB | |")
print(f"| keepwrap binary size | {size / 2**20:.2f} MiB | |")
print(f"| CPU time over 10 s of an idle child | {idle} ticks | 0 |")
if static:
    s_rss, s_hwm, s_anon, s_file, s_size = static
    print(f"| static build: VmRSS / peak VmHWM | {s_rss / 1024:.2f} MiB / {s_hwm / 1024:.2f} MiB "
          f"| <= 4 MiB: {'met' if s_hwm <= 4096 else 'NOT met'} |")
    print(f"| static build: anonymous / file-backed | {s_anon / 1024:.2f} MiB / {s_file / 1024:.2f} MiB | |")
    print(f"| static build: binary size | {s_size / 2**20:.2f} MiB | |")
PY

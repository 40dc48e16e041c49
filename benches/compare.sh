#!/usr/bin/env bash
# Plugin vs perftest on soft-RoCE, in ONE guest boot. Runs INSIDE the test-bed guest:
#
#   testbed/host/run-in-guest.sh --timeout 1500 -- benches/compare.sh [options]
#   (benches/run.sh does the provisioning, the release build and this call)
#
# For every round: perftest ib_write_bw and ib_send_bw (rxe0, GID index 1 = ::ffff:127.0.0.1,
# server in the background, client to 127.0.0.1) for each bandwidth size; ferro-bench bw with
# 1 QP per connection and with --cmp-qps QPs; perftest ib_write_lat and ferro-bench lat for each
# latency size. Rounds alternate which tool goes first. Then `ferro-bench report` reduces runs
# to medians and prints the side-by-side table and the summary.
#
# Results go to $FERRO_GUEST_OUT/bench/ (host: target/guest-out/bench/): perftest.csv,
# ferro-*.csv/json, summary.txt, summary.json, compare.csv, bandwidth.svg, raw/ (every log).
#
# Options:
#   --quick             CI smoke run: sizes 8 and 64K (lat: 8), 1 round, short runs,
#                       no timing assertions (< 1 minute after boot)
#   --rounds N          rounds (default 3)
#   --bw-sizes "A B"    bandwidth sizes in bytes (default "8 64 4096 65536 1048576 4194304")
#   --lat-sizes "A B"   latency sizes (default "8 64 4096 65536")
#   --time S            ferro-bench seconds per size (default 1.0)
#   --window N          ferro-bench window and perftest tx depth (-t) (default 32)
#   --cmp-qps N         QPs per connection for the multi-QP run (default 4; 0 = skip)
#   --cmp-split 0|1     NCCL_IB_SPLIT_DATA_ON_QPS of the multi-QP run (default 0)
#   --dev NAME          device (default rxe0); --gid N: perftest GID index (default 1)
# Environment: FERRO_BENCH (ferro-bench binary, default target/release/ferro-bench),
# FERRO_PLUGIN_SO (plugin, default next to the binary).
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SRC/.." && pwd)"
cd "$REPO"

LOG_TAG=compare
# shellcheck source=../testbed/lib.sh
. "$REPO/testbed/lib.sh"

quick=0
rounds=3
bw_sizes="8 64 4096 65536 1048576 4194304"
lat_sizes="8 64 4096 65536"
ftime=1.0
window=32
cmp_qps=4
cmp_split=0
dev=rxe0
gid=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --rounds) rounds="$2"; shift 2 ;;
    --bw-sizes) bw_sizes="$2"; shift 2 ;;
    --lat-sizes) lat_sizes="$2"; shift 2 ;;
    --time) ftime="$2"; shift 2 ;;
    --window) window="$2"; shift 2 ;;
    --cmp-qps) cmp_qps="$2"; shift 2 ;;
    --cmp-split) cmp_split="$2"; shift 2 ;;
    --dev) dev="$2"; shift 2 ;;
    --gid) gid="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
if [[ "$quick" -eq 1 ]]; then
  rounds=1
  bw_sizes="8 65536"
  lat_sizes="8"
  ftime=0.3
  cmp_sizes="65536"
fi
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds needs a positive integer"

BENCH="${FERRO_BENCH:-$REPO/target/release/ferro-bench}"
[[ -x "$BENCH" ]] || die "$BENCH missing: build it on the host (cargo build --release -p nccl-net-plugin -p ferro-bench)"
[[ -e "/sys/class/infiniband/$dev" ]] || die "no RDMA device $dev here: run this inside the test-bed guest (testbed/host/run-in-guest.sh)"
for t in ib_write_bw ib_send_bw ib_write_lat ss timeout; do
  command -v "$t" >/dev/null || die "$t not found (testbed/host/provision.sh installs perftest)"
done
ulimit -l unlimited 2>/dev/null || true

OUT="${FERRO_GUEST_OUT:-/tmp/ferro-guest-out}/bench"
rm -rf "$OUT"
mkdir -p "$OUT/raw"
PT_CSV="$OUT/perftest.csv"
echo "tool,run,values" >"$PT_CSV"

# Multi-QP run: only the sizes where several QPs can matter (>= 64 KiB), unless --quick.
if [[ -z "${cmp_sizes:-}" ]]; then
  cmp_sizes=""
  for s in $bw_sizes; do [[ "$s" -ge 65536 ]] && cmp_sizes+="$s "; done
  [[ -n "$cmp_sizes" ]] || cmp_sizes="$bw_sizes"
fi
csv_list() { tr -s ' ' ',' <<<"$(echo $1)"; }

# perftest iterations for a size: about 32 MiB of data (~1 s at the ~35 MB/s of rxe under
# TCG), at most 20000 (small messages: about a second at ~20k msg/s) and at least 16 (perftest
# times from the first post to the last completion, so a short run of big messages is biased
# low by the pipeline fill; ferro-bench times from the first to the last receive completion);
# --quick: a tenth (at least 5).
pt_iters() { # size
  local n=$((33554432 / ($1 > 0 ? $1 : 1)))
  ((n > 20000)) && n=20000
  ((n < 16)) && n=16
  ((quick == 1)) && n=$((n / 10))
  ((n < 5)) && n=5
  echo "$n"
}
# ib_write_lat iterations: fewer (every round trip can take milliseconds under TCG).
lat_iters() { # size
  local n=$((8388608 / ($1 > 0 ? $1 : 1)))
  ((n > 1000)) && n=1000
  ((quick == 1)) && n=$((n / 10))
  ((n < 5)) && n=5
  echo "$n"
}

port=18600
# One perftest pair on $dev (server in the background, client to 127.0.0.1; testbed/lib.sh).
# Appends the client's result line to perftest.csv as "tool,round,numbers...".
perftest_pair() { # round tool args...
  local round="$1" tool="$2"
  shift 2
  port=$((port + 1))
  local tag="$tool-$(sed 's/ /_/g; s/-//g' <<<"$*")-r$round"
  local t0=$SECONDS line
  line="$(perftest_run "$port" "$OUT/raw/$tag.server.log" "$OUT/raw/$tag.client.log" \
    "$tool" -d "$dev" -x "$gid" -F "$@")" || return 1
  local fields
  fields="$(awk '{ $1 = $1; gsub(/ /, ","); print }' <<<"$line")"
  echo "$tool,$round,$fields" >>"$PT_CSV"
  log "  $tool $*: $(awk '{ $1 = $1; print }' <<<"$line")   ($((SECONDS - t0)) s)"
}

perftest_bw() { # round
  local s
  for tool in ib_write_bw ib_send_bw; do
    log "round $1: $tool, sizes $bw_sizes (tx depth $window)"
    for s in $bw_sizes; do
      perftest_pair "$1" "$tool" -s "$s" -n "$(pt_iters "$s")" -t "$window" || pt_failures=$((pt_failures + 1))
    done
  done
}

perftest_lat() { # round
  local s
  log "round $1: ib_write_lat, sizes $lat_sizes"
  for s in $lat_sizes; do
    perftest_pair "$1" ib_write_lat -s "$s" -n "$(lat_iters "$s")" || pt_failures=$((pt_failures + 1))
  done
}

# ferro-bench between two processes; the table goes to raw/NAME.txt and stderr.
ferro() { # name args...
  local name="$1"
  shift
  local t0=$SECONDS rc=0
  log "ferro-bench $*"
  "$BENCH" "$@" --dev "$dev" --csv "$OUT/$name.csv" --json "$OUT/$name.json" -q \
    >"$OUT/raw/$name.txt" 2>"$OUT/raw/$name.err" || rc=$?
  if [[ "$rc" -ne 0 ]]; then
    log "ferro-bench $* failed (status $rc):"
    sed 's/^/    /' "$OUT/raw/$name.err" >&2
    rm -f "$OUT/$name.csv"
    failures=$((failures + 1))
    return 0
  fi
  sed 's/^/    /' "$OUT/raw/$name.txt" >&2
  log "  ($((SECONDS - t0)) s)"
}

ferro_bw() { # round
  ferro "ferro-bw-q1-r$1" bw --sizes "$(csv_list "$bw_sizes")" --window "$window" \
    --time "$ftime" --qps 1 --split 0 --label "round $1"
  if [[ "$cmp_qps" -gt 0 ]]; then
    ferro "ferro-bw-q$cmp_qps-s$cmp_split-r$1" bw --sizes "$(csv_list "$cmp_sizes")" \
      --window "$window" --time "$ftime" --qps "$cmp_qps" --split "$cmp_split" --label "round $1"
  fi
}

# Many comms on one thread per side, as one NCCL proxy thread drives its channels.
ferro_comms() { # round
  ferro "ferro-comms-r$1" comms --sizes 8 --comms 16 --window 8 --time "$ftime" --qps 1 \
    --split 0 --label "round $1"
}

# Start-up: a whole process that loads the plugin, runs init and reads every device's
# properties (ferro-bench devices) next to ibv_devinfo on the same device, wall time of each;
# and the plugin process's file opens (strace).
init_times() { # round
  local t0 t1 devinfo_us plugin_us opens
  t0=$(date +%s%N)
  ibv_devinfo -d "$dev" >"$OUT/raw/devinfo-r$1.txt" 2>&1 || true
  t1=$(date +%s%N)
  devinfo_us=$(((t1 - t0) / 1000))
  t0=$(date +%s%N)
  "$BENCH" devices --dev "$dev" >"$OUT/raw/devices-r$1.txt" 2>&1 || true
  t1=$(date +%s%N)
  plugin_us=$(((t1 - t0) / 1000))
  opens=""
  if command -v strace >/dev/null 2>&1; then
    strace -f -qq -e trace=open,openat -o "$OUT/raw/strace-init-r$1.txt" \
      "$BENCH" devices --dev "$dev" >/dev/null 2>&1 || true
    opens=$(grep -c 'open' "$OUT/raw/strace-init-r$1.txt" || true)
  fi
  [[ -f "$OUT/init.csv" ]] || echo "round,ibv_devinfo_us,plugin_devices_us,plugin_file_opens" >"$OUT/init.csv"
  echo "$1,$devinfo_us,$plugin_us,$opens" >>"$OUT/init.csv"
  log "start-up: ibv_devinfo -d $dev $((devinfo_us / 1000)) ms; ferro-bench devices (load, init, properties) $((plugin_us / 1000)) ms, ${opens:-?} file opens"
}

ferro_lat() { # round
  ferro "ferro-lat-r$1" lat --sizes "$(csv_list "$lat_sizes")" --time "$ftime" --qps 1 \
    --split 0 --label "round $1"
}

# Failures of the plugin's benchmark fail the job; perftest's own hiccups (under emulation it now
# and then prints no result line) are reported, and the medians use the other rounds.
failures=0
pt_failures=0
start=$SECONDS
log "plugin vs perftest on $dev: $rounds round(s); bw sizes: $bw_sizes; lat sizes: $lat_sizes"
log "results: $OUT"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2 == 1)); then
    perftest_bw "$r"
    ferro_bw "$r"
    perftest_lat "$r"
    ferro_lat "$r"
  else
    ferro_bw "$r"
    perftest_bw "$r"
    ferro_lat "$r"
    perftest_lat "$r"
  fi
  ferro_comms "$r"
  init_times "$r"
  log "round $r done after $((SECONDS - start)) s"
done

log "report"
rc=0
"$BENCH" report --dir "$OUT" | tee "$OUT/raw/report.txt" >&2 || rc=$?
{
  echo
  echo "($rounds round(s) in one boot, $((SECONDS - start)) s; $failures failed ferro-bench run(s), $pt_failures perftest run(s) without a result; perftest MiB/s converted to GB/s;"
  echo " perftest -t $window (tx depth = ferro-bench window); ferro-bench ~${ftime} s per size)"
} >>"$OUT/summary.txt"
if [[ "$rc" -ne 0 ]]; then
  log "report failed (status $rc)"
  exit "$rc"
fi
if [[ "$pt_failures" -gt 0 ]]; then
  log "warning: $pt_failures perftest run(s) gave no result (see raw/); their sizes use the other rounds"
fi
if [[ "$failures" -gt 0 ]]; then
  log "$failures ferro-bench run(s) failed"
  exit 1
fi
log "done in $((SECONDS - start)) s; results in $OUT"

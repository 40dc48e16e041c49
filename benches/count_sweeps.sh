#!/usr/bin/env bash
# Instructions per comm of a sweep of `test` over N idle comms, counted (not timed), at several N.
# Runs INSIDE the test-bed guest (needs an RDMA device and valgrind):
#
#   testbed/host/run-in-guest.sh --timeout 3000 -- benches/count_sweeps.sh [options]
#
# One `ferro-bench scale --comms N1,N2,.. --count-sweeps K` run whose server process runs under
# callgrind (the client, its child, runs natively). Callgrind instruments nothing until the
# benchmark asks it to (`--instr-atstart=no`: setting up thousands of comms runs at almost full
# speed) and collects only inside `ferro_bench::counted::idle_sweeps`: K sweeps of `test` over
# the N receives posted on the N comms, which cannot complete yet (the peer sends nothing until
# told), as NCCL's proxy tests every idle connection's oldest request. After each N's sweeps the
# counts are dumped to a file of their own; its total divided by the `test` calls it counted
# (K x N when callgrind saw every call; both are shown) is the cost of one `test` per comm per
# sweep (everything it executes: the plugin's code, the verbs library's and libc's, not the
# kernel's). K should be a multiple of 256 (the plugin's periodic look runs every 256
# waiting calls of a comm), so that every comm takes the same number of looks at every N.
#
# Options:
#   --comms LIST        N values (default 16,256,1024)
#   --sweeps K          counted sweeps per N (default 256)
#   --plugin PATH       plugin (default: next to ferro-bench); any ncclNet v8 .so
#   --env "A=B .."      environment for the run (e.g. NCCL_PLUGIN_P2P=ib for the reference)
#   --connect-threads T (default 1: valgrind runs one thread at a time anyway)
#   --top N             functions listed per N (default 12)
#   --dev NAME          device (default rxe0)
#   --report DIR        only print the summary of the callgrind files of an earlier run in DIR
#                       (anywhere callgrind_annotate is installed; writes DIR/summary.txt)
# Results: $FERRO_GUEST_OUT/count-sweeps/ (host: target/guest-out/count-sweeps/): summary.txt,
# the callgrind files and the logs.
# Environment: FERRO_BENCH (default target/release/ferro-bench).
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SRC/.." && pwd)"
cd "$REPO"
LOG_TAG=count-sweeps
# shellcheck source=../testbed/lib.sh
. "$REPO/testbed/lib.sh"
# shellcheck source=callgrind.sh
. "$SRC/callgrind.sh"

comms=16,256,1024
sweeps=256
plugin=""
envs=""
threads=1
top=12
dev=rxe0
report=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --comms) comms="$2"; shift 2 ;;
    --sweeps) sweeps="$2"; shift 2 ;;
    --plugin) plugin="$2"; shift 2 ;;
    --env) envs="$2"; shift 2 ;;
    --connect-threads) threads="$2"; shift 2 ;;
    --top) top="$2"; shift 2 ;;
    --dev) dev="$2"; shift 2 ;;
    --report) report="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ "$sweeps" =~ ^[0-9]+$ && "$sweeps" -gt 0 ]] || die "--sweeps must be a positive number"

FN=ferro_bench::counted::idle_sweeps
say() { echo "$*" | tee -a "$SUMMARY"; }

run() {
BENCH="${FERRO_BENCH:-$REPO/target/release/ferro-bench}"
plugin="${plugin:-$(dirname "$BENCH")/libnccl_net_ferro.so}"
[[ -x "$BENCH" ]] || die "$BENCH missing (cargo build --release -p nccl-net-plugin -p ferro-bench)"
command -v valgrind >/dev/null || die "valgrind not found"
[[ -e "/sys/class/infiniband/$dev" ]] || die "no RDMA device $dev here: run this inside the test-bed guest"
ulimit -l unlimited 2>/dev/null || true
# Valgrind keeps some descriptors for itself under the soft limit it starts with and does not let
# the program raise it: raise it here (each process holds 2 N sockets).
ulimit -S -n "$(ulimit -H -n)" 2>/dev/null || true

rm -rf "$OUT"
mkdir -p "$OUT"
log "ferro-bench scale --comms $comms --count-sweeps $sweeps, the server under callgrind"
t0=$SECONDS
rc=0
# shellcheck disable=SC2086 # $envs is a list of words
env $envs valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no \
  --toggle-collect="$FN" --compress-strings=no --compress-pos=no \
  --callgrind-out-file="$OUT/sweeps.cg" --log-file="$OUT/valgrind.log" \
  "$BENCH" scale --plugin "$plugin" --dev "$dev" --comms "$comms" --count-sweeps "$sweeps" \
  --connect-threads "$threads" --verbs 0 --small-per-comm 1 --big-size 8 --big-per-comm 1 \
  --timeout 900 >"$OUT/scale.txt" 2>"$OUT/scale.err" || rc=$?
log "  ($((SECONDS - t0)) s, status $rc)"
if [[ "$rc" -ne 0 ]]; then
  tail -n 30 "$OUT/scale.err" | sed 's/^/    /' >&2
  exit 1
fi
}

if [[ -n "$report" ]]; then
  OUT="$report"
else
  OUT="${FERRO_GUEST_OUT:-/tmp/ferro-guest-out}/count-sweeps"
  run
fi
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"


say "Instructions per comm per sweep of test over N idle receives (callgrind, $sweeps sweeps per N,"
say "server side; inclusive of the verbs library and libc, not the kernel)"
say "$(printf '  %6s  %14s  %10s  %10s  %12s  %8s' N instructions 'K x N' 'tests seen' 'per comm' 'vs first')"
first=""
declare -A per
files=()
for f in "$OUT"/sweeps.cg*; do
  d="$(grep -m1 -o 'counted sweeps n=[0-9]* sweeps=[0-9]*' "$f" || true)"
  [[ -n "$d" ]] || continue
  files+=("$f")
done
# In the order of N.
mapfile -t files < <(for f in "${files[@]}"; do
  n="$(grep -m1 -o 'counted sweeps n=[0-9]*' "$f" | sed 's/.*n=//')"
  printf '%s\t%s\n' "$n" "$f"
done | sort -n | cut -f2)
[[ "${#files[@]}" -gt 0 ]] || die "no counted sweeps found in $OUT (see scale.err)"
for f in "${files[@]}"; do
  n="$(grep -m1 -o 'counted sweeps n=[0-9]*' "$f" | sed 's/.*n=//')"
  k="$(grep -m1 -o 'counted sweeps n=[0-9]* sweeps=[0-9]*' "$f" | sed 's/.*sweeps=//')"
  total="$(awk '/^totals:/ { print $2; exit }' "$f")"
  # The calls into the stand-in's `test` (the benchmark's one way into the plugin's table).
  seen="$(awk '/^cfn=/ { t = substr($0, 5); next }
    /^calls=/ { split(substr($0, 7), a, " "); if (t == "ferro_nccl_standin::net::Net::test_into") c += a[1] }
    END { print c + 0 }' "$f")"
  [[ "$seen" -gt 0 ]] || seen=$((n * k))
  per[$n]="$(echo "$total / $seen" | bc -l)"
  first="${first:-${per[$n]}}"
  say "$(printf '  %6s  %14s  %10s  %10s  %12.1f  %8.3f' "$n" "$total" "$((n * k))" "$seen" "${per[$n]}" \
    "$(echo "${per[$n]} / $first" | bc -l)")"
done
for f in "${files[@]}"; do
  n="$(grep -m1 -o 'counted sweeps n=[0-9]*' "$f" | sed 's/.*n=//')"
  k="$(grep -m1 -o 'counted sweeps n=[0-9]* sweeps=[0-9]*' "$f" | sed 's/.*sweeps=//')"
  total="$(awk '/^totals:/ { print $2; exit }' "$f")"
  say "  N = $n: top $top functions (inclusive, instructions per comm per sweep)"
  # The benchmark's frames around the sweeps carry the whole total: not listed.
  seen="$(awk '/^cfn=/ { t = substr($0, 5); next }
    /^calls=/ { split(substr($0, 7), a, " "); if (t == "ferro_nccl_standin::net::Net::test_into") c += a[1] }
    END { print c + 0 }' "$f")"
  [[ "$seen" -gt 0 ]] || seen=$((n * k))
  inclusive "$f" | awk -F '\t' -v c="$seen" -v all="$total" '$1 < all { printf "%12.1f  %s\n", $1 / c, $2 }' |
    sort -rn | head -n "$top" | sed 's/^/    /' | tee -a "$SUMMARY"
done

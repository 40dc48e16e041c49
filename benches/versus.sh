#!/usr/bin/env bash
# The plugin side by side with another ncclNet v8 plugin (e.g. a build of NCCL's IB transport
# design), in ONE guest boot, alternating. Runs INSIDE the test-bed guest:
#
#   testbed/host/run-in-guest.sh --timeout 1200 -- benches/versus.sh --reference PATH [options]
#
# Each round runs, for each plugin (the order alternates from round to round):
#   - ping-pong, 8 bytes, each receive posted just before its send
#     (`ferro-bench lat --post-ahead 0`, as NCCL's proxy posts when it is not ahead);
#   - bandwidth, 1 MiB messages, 8 in flight (`ferro-bench bw --window 8 --sizes 1M`).
# It prints every round's figures, the medians and the median of the per-round ratios
# (Ferro / reference: a change of the host's speed between rounds cancels out).
# Then the paired ping-pong and bandwidth: both plugins loaded in the same two processes,
# alternating blocks (100 round trips; 8 messages) for rounds x time seconds each
# (`ferro-bench lat|bw --against`), whose figure is the median of the per-block ratios: a change of the host's speed that lasts longer
# than a pair of blocks (tens of milliseconds) cancels out, which under the emulator the
# rounds' seconds-apart runs cannot promise.
#
# Options:
#   --reference PATH   the other plugin (required)
#   --ref-env "A=B .." its environment (default NCCL_PLUGIN_P2P=ib)
#   --rounds N         rounds (default 5)
#   --time S           seconds per measurement (default 1.0)
#   --lat-size B --bw-size B --window N    (defaults 8, 1M, 8)
#   --dev NAME         device (default rxe0; the reference's first device starting with it)
#   --out NAME         results folder name under $FERRO_GUEST_OUT (default versus)
#   --no-paired        skip the paired runs
#   --yield            both plugins' runs sched_yield between polls that found nothing
#                      (`ferro-bench --yield`; default: spin, as NCCL's proxy does). Under the
#                      emulator the soft-RoCE work runs in the guest kernel on the same vCPUs,
#                      so how often a waiting loop enters the kernel moves the ping-pong.
# Results: $FERRO_GUEST_OUT/versus/ (host: target/guest-out/versus/): summary.txt, the CSV of
# every run and its log.
# Environment: FERRO_BENCH (default target/release/ferro-bench), FERRO_PLUGIN_SO.
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SRC/.." && pwd)"
cd "$REPO"
LOG_TAG=versus
# shellcheck source=../testbed/lib.sh
. "$REPO/testbed/lib.sh"

reference=""
ref_env="NCCL_PLUGIN_P2P=ib"
rounds=5
ftime=1.0
lat_size=8
bw_size=1M
window=8
dev=rxe0
out_name=versus
wait_args=()
paired=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reference) reference="$2"; shift 2 ;;
    --yield) wait_args=(--yield); shift ;;
    --no-paired) paired=0; shift ;;
    --ref-env) ref_env="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --time) ftime="$2"; shift 2 ;;
    --lat-size) lat_size="$2"; shift 2 ;;
    --bw-size) bw_size="$2"; shift 2 ;;
    --window) window="$2"; shift 2 ;;
    --dev) dev="$2"; shift 2 ;;
    --out) out_name="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ -n "$reference" ]] || die "--reference PATH is required"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds needs a positive integer"

BENCH="${FERRO_BENCH:-$REPO/target/release/ferro-bench}"
PLUGIN="${FERRO_PLUGIN_SO:-$(dirname "$BENCH")/libnccl_net_ferro.so}"
[[ -x "$BENCH" ]] || die "$BENCH missing (cargo build --release -p nccl-net-plugin -p ferro-bench)"
[[ -e "/sys/class/infiniband/$dev" ]] || die "no RDMA device $dev here: run this inside the test-bed guest"
ulimit -l unlimited 2>/dev/null || true

[[ "$out_name" =~ ^[A-Za-z0-9._-]+$ ]] || die "--out takes a plain folder name"
OUT="${FERRO_GUEST_OUT:-/tmp/ferro-guest-out}/$out_name"
rm -rf "$OUT"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

dev_of() { # env plugin
  local name
  name="$(env $1 "$BENCH" devices --plugin "$2" -q 2>/dev/null | awk -v d="$dev" 'index($2, d) == 1 { print $2; exit }')"
  echo "${name:-$dev}"
}
FERRO_DEV="$(dev_of "" "$PLUGIN")"
REF_DEV="$(dev_of "$ref_env" "$reference")"

failures=0
# One run; prints the figure (lat: one-way median us; bw: GB/s) or "-".
one() { # tag env plugin dev name args...
  local tag="$1" envs="$2" plugin="$3" d="$4" name="$5" rc=0
  shift 5
  env $envs "$BENCH" "$@" --plugin "$plugin" --dev "$d" --time "$ftime" --csv "$OUT/$name.csv" -q \
    >"$OUT/$name.txt" 2>"$OUT/$name.err" || rc=$?
  if [[ "$rc" -ne 0 || ! -s "$OUT/$name.csv" ]]; then
    log "$name failed (status $rc):"
    sed 's/^/    /' "$OUT/$name.err" >&2
    failures=$((failures + 1))
    echo "-"
    return 0
  fi
  # CSV: tool,mode,size,count,elapsed_s,time_us,algbw_gbs,msg_rate,median_us,...
  awk -F, 'NR == 2 { printf ($2 == "lat" ? "%.2f\n" : "%.5f\n"), ($2 == "lat" ? $9 : $7) }' "$OUT/$name.csv"
}

declare -A LAT BW
for ((r = 1; r <= rounds; r++)); do
  order=(ferro reference)
  ((r % 2 == 0)) && order=(reference ferro)
  for tag in "${order[@]}"; do
    if [[ "$tag" == ferro ]]; then
      envs="" plugin="$PLUGIN" d="$FERRO_DEV"
    else
      envs="$ref_env" plugin="$reference" d="$REF_DEV"
    fi
    LAT[$tag,$r]="$(one "$tag" "$envs" "$plugin" "$d" "$tag-lat-r$r" lat --sizes "$lat_size" --post-ahead 0 "${wait_args[@]}")"
    BW[$tag,$r]="$(one "$tag" "$envs" "$plugin" "$d" "$tag-bw-r$r" bw --sizes "$bw_size" --window "$window" "${wait_args[@]}")"
    log "round $r $tag: ${lat_size} B ping-pong one-way median ${LAT[$tag,$r]} us, ${bw_size} bandwidth ${BW[$tag,$r]} GB/s"
  done
done

median() { tr ' ' '\n' | grep -v '^-*$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.5g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.3f\n", a / b }'; }

say "Side by side, one boot, $rounds alternating rounds (odd rounds: Ferro first); Ferro: $PLUGIN"
say "  ping-pong: ${lat_size} B, each receive posted just before its send (lat --post-ahead 0); one-way median, us"
say "  bandwidth: ${bw_size} messages, ${window} in flight (bw --window $window); GB/s"
say "  waiting: $(if ((${#wait_args[@]})); then echo "sched_yield between empty polls (--yield)"; else echo "spin (NCCL's proxy)"; fi)"
say "$(printf '  %-6s %12s %12s %8s %12s %12s %8s' round 'lat ferro' 'lat ref' ratio 'bw ferro' 'bw ref' ratio)"
lr="" br="" lf="" lref="" bf="" bref=""
for ((r = 1; r <= rounds; r++)); do
  a="$(ratio "${LAT[ferro,$r]}" "${LAT[reference,$r]}")"
  b="$(ratio "${BW[ferro,$r]}" "${BW[reference,$r]}")"
  say "$(printf '  %-6s %12s %12s %8s %12s %12s %8s' "r$r" "${LAT[ferro,$r]}" "${LAT[reference,$r]}" "$a" "${BW[ferro,$r]}" "${BW[reference,$r]}" "$b")"
  lr+="$a " br+="$b " lf+="${LAT[ferro,$r]} " lref+="${LAT[reference,$r]} " bf+="${BW[ferro,$r]} " bref+="${BW[reference,$r]} "
done
say "$(printf '  %-6s %12s %12s %8s %12s %12s %8s' median "$(median <<<"$lf")" "$(median <<<"$lref")" "$(median <<<"$lr")" "$(median <<<"$bf")" "$(median <<<"$bref")" "$(median <<<"$br")")"
say "  (ratio = Ferro / reference per round; the median row's ratios are medians of the per-round ratios;"
say "   latency: lower is better, bandwidth: higher is better)"
# One paired run (`ferro-bench MODE --against`), its table added to the summary under TITLE.
paired_run() { # name title mode args...
  local name="$1" title="$2" rc=0
  shift 2
  env $ref_env "$BENCH" "$@" "${wait_args[@]}" \
    --plugin "$PLUGIN" --dev "$FERRO_DEV" --against "$reference" --against-dev "$REF_DEV" \
    --time "$ptime" --csv "$OUT/$name.csv" -q >"$OUT/$name.txt" 2>"$OUT/$name.err" || rc=$?
  if [[ "$rc" -ne 0 || ! -s "$OUT/$name.csv" ]]; then
    log "$name failed (status $rc):"
    sed 's/^/    /' "$OUT/$name.err" >&2
    failures=$((failures + 1))
  else
    say "$title (A = Ferro, B = reference, in the same two processes, ${ptime} s each):"
    sed 's/^/  /' "$OUT/$name.txt" | tee -a "$SUMMARY"
  fi
}
if ((paired)); then
  ptime="$(awk -v r="$rounds" -v t="$ftime" 'BEGIN { printf "%g", r * t }')"
  paired_run paired "Paired ping-pong" lat --sizes "$lat_size" --post-ahead 0
  paired_run paired-bw "Paired bandwidth, blocks of 8 messages" bw --sizes "$bw_size" --window "$window"
fi
[[ "$failures" -eq 0 ]] || { log "$failures run(s) failed"; exit 1; }

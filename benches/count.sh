#!/usr/bin/env bash
# Instructions per message, counted (not timed), for the plugin and optionally a second one.
# Runs INSIDE the test-bed guest (needs an RDMA device and valgrind):
#
#   testbed/host/run-in-guest.sh --timeout 1200 -- benches/count.sh [--reference PATH] [options]
#
# Each side of `ferro-bench bw` (8-byte messages, --window in flight; the client sends, the
# server receives) runs under callgrind, collecting only inside the benchmark's data-path calls
# into the plugin's table (`benches/src/counted.rs`: the sender's isend and test of the data, the
# receiver's irecv and test of the data; everything they execute, the plugin's code and the
# verbs library's, not the kernel; not the control messages). Two runs with --n1 and --n2
# messages; the difference divided by (n2 - n1) is the cost per message in steady state:
#   sender = isend + test per message,   receiver = irecv + test per message,
# then, per call kind, the calls per message and the instructions per call, the split by object
# (the plugin itself, libibverbs, the provider, libc) and the top functions by inclusive cost per
# message. Polls that find nothing are part of the cost, and their number depends on timing
# (compare the calls per message, and the instructions per call, which do not).
#
# Options:
#   --reference PATH   also count this plugin (any ncclNet v8 .so; its counters are optional)
#   --also NAME=PATH   also count another build of the plugin (e.g. the one before a change);
#                      may be repeated
#   --ref-env "A=B .." environment for the reference run (default NCCL_PLUGIN_P2P=ib)
#   --n1 N --n2 N      message counts of the two runs (default 500, 2000)
#   --window N         messages in flight (default 8)
#   --size BYTES       message size (default 8)
#   --top N            functions listed per side (default 15)
#   --dev NAME         device (default rxe0; for a reference whose device name differs, the
#                      first device whose name starts with NAME)
#   --pace-us N        both sides sleep N us before each isend and test of the data (outside
#                      the counted calls; `ferro-bench --pace-us`), so that nearly every call
#                      finds its work ready: the count is then that of the calls that do the
#                      work (about 1 isend, 1 irecv and 1 test per message on each side),
#                      nearly independent of the host's load (default 0: no pause, the calls
#                      that wait are counted too, and their number depends on timing)
# Results: $FERRO_GUEST_OUT/count/ (host: target/guest-out/count/): summary.txt, the
# callgrind files and every log.
# Environment: FERRO_BENCH (default target/release/ferro-bench), FERRO_PLUGIN_SO (default next
# to it).
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SRC/.." && pwd)"
cd "$REPO"
LOG_TAG=count
# shellcheck source=../testbed/lib.sh
. "$REPO/testbed/lib.sh"
# shellcheck source=callgrind.sh
. "$SRC/callgrind.sh"

reference=""
also=()
ref_env="NCCL_PLUGIN_P2P=ib"
n1=500
n2=2000
window=8
size=8
top=15
dev=rxe0
pace=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reference) reference="$2"; shift 2 ;;
    --ref-env) ref_env="$2"; shift 2 ;;
    --also) also+=("$2"); shift 2 ;;
    --n1) n1="$2"; shift 2 ;;
    --n2) n2="$2"; shift 2 ;;
    --window) window="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --top) top="$2"; shift 2 ;;
    --dev) dev="$2"; shift 2 ;;
    --pace-us) pace="$2"; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ "$n1" =~ ^[0-9]+$ && "$n2" =~ ^[0-9]+$ && "$n2" -gt "$n1" ]] || die "--n2 must be above --n1"

BENCH="${FERRO_BENCH:-$REPO/target/release/ferro-bench}"
PLUGIN="${FERRO_PLUGIN_SO:-$(dirname "$BENCH")/libnccl_net_ferro.so}"
[[ -x "$BENCH" ]] || die "$BENCH missing (cargo build --release -p nccl-net-plugin -p ferro-bench)"
command -v valgrind >/dev/null || die "valgrind not found"
[[ -e "/sys/class/infiniband/$dev" ]] || die "no RDMA device $dev here: run this inside the test-bed guest"
ulimit -l unlimited 2>/dev/null || true

OUT="${FERRO_GUEST_OUT:-/tmp/ferro-guest-out}/count"
rm -rf "$OUT"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

# The benchmark's data-path calls (the same for any plugin).
CALLS=(ferro_bench::counted::data_isend ferro_bench::counted::data_irecv ferro_bench::counted::data_test)
TOGGLES=()
for c in "${CALLS[@]}"; do TOGGLES+=(--toggle-collect="$c"); done
VG=(valgrind --tool=callgrind --compress-strings=no --compress-pos=no "${TOGGLES[@]}")

# The device name the plugin gives $dev (the reference may add a port suffix).
dev_of() { # env plugin
  local name
  name="$(env $1 "$BENCH" devices --plugin "$2" -q 2>/dev/null | awk -v d="$dev" 'index($2, d) == 1 { print $2; exit }')"
  echo "${name:-$dev}"
}

# One counted pair: server (receiver) and client (sender), each under callgrind.
counted() { # tag env plugin n
  local tag="$1" envs="$2" plugin="$3" n="$4" d handle="" i
  d="$(dev_of "$envs" "$plugin")"
  local sv="$OUT/$tag-n$n"
  rm -f "$sv".*
  env $envs "${VG[@]}" --callgrind-out-file="$sv.recv.cg" --log-file="$sv.recv.vg" \
    "$BENCH" server bw --plugin "$plugin" --dev "$d" --sizes "$size" --window "$window" \
    --iters "$n" --time 3000 --timeout 900 --pace-us "$pace" -q >"$sv.server.txt" 2>"$sv.server.err" &
  local spid=$!
  for ((i = 0; i < 1800; i++)); do
    handle="$(head -n1 "$sv.server.txt" 2>/dev/null || true)"
    [[ ${#handle} -eq 256 ]] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.5
  done
  if [[ ${#handle} -ne 256 ]]; then
    kill "$spid" 2>/dev/null || true
    wait "$spid" || true
    log "$tag n=$n: the server gave no handle:"
    sed 's/^/    /' "$sv.server.err" >&2
    return 1
  fi
  local rc=0
  env $envs "${VG[@]}" --callgrind-out-file="$sv.send.cg" --log-file="$sv.send.vg" \
    "$BENCH" client --plugin "$plugin" --dev "$d" --handle "$handle" --timeout 900 --pace-us "$pace" -q \
    2>"$sv.client.err" || rc=$?
  wait "$spid" || rc=$?
  if [[ "$rc" -ne 0 ]]; then
    log "$tag n=$n failed (status $rc):"
    sed 's/^/    /' "$sv.server.err" "$sv.client.err" >&2
    return 1
  fi
}

# Exclusive Ir per object of a callgrind file (uncompressed names): "object<TAB>Ir" lines.
by_object() { # file
  awk '
    /^ob=/ { ob = substr($0, 4); next }
    /^calls=/ { skip = 1; next }
    /^[0-9+*-]/ { if (skip) { skip = 0; next } ; if (NF >= 2) sum[ob] += $2; next }
    END { for (o in sum) printf "%s\t%d\n", o, sum[o] }
  ' "$1"
}

# Calls of a function (by name): the `calls=` lines that target it; when the caller was not
# being collected (no such line), the calls it makes into a table function named like *test*.
calls_of() { # file fn-name
  awk -v f="$2" '
    /^fn=/ { cur = substr($0, 4); next }
    /^cfn=/ { target = substr($0, 5); next }
    /^calls=/ {
      split(substr($0, 7), a, " ")
      if (target == f) n += a[1]
      else if (cur == f && tolower(target) ~ /test/) m += a[1]
      next
    }
    END { print (n > 0 ? n : m) + 0 }
  ' "$1"
}


total_of() { awk '/^totals:/ { print $2; exit }' "$1"; }

report_side() { # tag side(send|recv) label
  local tag="$1" side="$2" label="$3"
  local a="$OUT/$tag-n$n1.$side.cg" b="$OUT/$tag-n$n2.$side.cg" dn=$((n2 - n1))
  local ta tb
  ta="$(total_of "$a")"
  tb="$(total_of "$b")"
  say "$(printf '  %-9s %-8s %10.0f instructions/msg   (%s at n=%s, %s at n=%s)' \
    "$tag" "$label" "$(echo "($tb - $ta) / $dn" | bc -l)" "$ta" "$n1" "$tb" "$n2")"
  local c ca cb ia ib
  for c in "${CALLS[@]}"; do
    ca="$(calls_of "$a" "$c")"
    cb="$(calls_of "$b" "$c")"
    [[ "$cb" -gt "$ca" ]] || continue
    ia="$(inclusive "$a" | awk -F '\t' -v f="$c" '$2 == f { print $1 }')"
    ib="$(inclusive "$b" | awk -F '\t' -v f="$c" '$2 == f { print $1 }')"
    say "$(printf '      %-10s %6.2f calls/msg  %7.0f instructions/call' "${c##*::data_}" \
      "$(echo "($cb - $ca) / $dn" | bc -l)" "$(echo "(${ib:-0} - ${ia:-0}) / ($cb - $ca)" | bc -l)")"
  done
  say "      by object (exclusive, instructions/msg):"
  join -t $'\t' -a1 -a2 -e 0 -o 0,1.2,2.2 <(by_object "$a" | sort -t $'\t' -k1,1) \
    <(by_object "$b" | sort -t $'\t' -k1,1) |
    awk -F '\t' -v dn="$dn" '{ d = ($3 - $2) / dn; if (d >= 0.5) printf "%12.0f  %s\n", d, $1 }' |
    sort -rn | sed 's/^/      /' | tee -a "$SUMMARY"
  say "      top $top functions (inclusive, instructions/msg):"
  join -t $'\t' -a1 -a2 -e 0 -o 0,1.2,2.2 \
    <(inclusive "$a" | awk -F '\t' '{ print $2 "\t" $1 }' | sort -t $'\t' -k1,1) \
    <(inclusive "$b" | awk -F '\t' '{ print $2 "\t" $1 }' | sort -t $'\t' -k1,1) |
    awk -F '\t' -v dn="$dn" -v all="$((tb - ta))" '
      # the benchmark frames around the calls (main, its loops) carry the whole total: skip
      ($3 - $2) < all - 0.5 { printf "%12.0f  %s\n", ($3 - $2) / dn, $1 }' |
    sort -rn | head -n "$top" | sed 's/^/      /' | tee -a "$SUMMARY"
}

plugins=("ferro||$PLUGIN")
for a in "${also[@]}"; do plugins+=("${a%%=*}||${a#*=}"); done
[[ -n "$reference" ]] && plugins+=("reference|$ref_env|$reference")
failed=0
for p in "${plugins[@]}"; do
  IFS='|' read -r tag envs path <<<"$p"
  for n in "$n1" "$n2"; do
    t0=$SECONDS
    log "$tag: bw ${size} B, window $window, $n messages, both sides under callgrind"
    counted "$tag" "$envs" "$path" "$n" || { failed=$((failed + 1)); continue; }
    log "  ($((SECONDS - t0)) s)"
  done
done

say "Instructions per ${size}-byte message (bw, window $window; callgrind, runs of $n1 and $n2 messages, difference / $((n2 - n1)))"
[[ "$pace" -eq 0 ]] || say "  paced: each side slept $pace us before each isend and test of the data (not counted)"
say "  sender = isend + test, receiver = irecv + test; inclusive of the verbs library, not the kernel"
for p in "${plugins[@]}"; do
  IFS='|' read -r tag _ _ <<<"$p"
  [[ -s "$OUT/$tag-n$n1.send.cg" && -s "$OUT/$tag-n$n2.send.cg" ]] || { say "  $tag: no counts"; continue; }
  report_side "$tag" send sender
  report_side "$tag" recv receiver
done
[[ "$failed" -eq 0 ]] || { log "$failed counted run(s) failed"; exit 1; }

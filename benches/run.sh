#!/usr/bin/env bash
# Plugin vs perftest benchmark on the soft-RoCE test bed. Run on the HOST:
#
#   benches/run.sh [compare.sh options]      e.g. benches/run.sh --quick
#
# 1. testbed/host/provision.sh (packages, virtme-ng, the guest kernel; idempotent);
# 2. cargo build --release -p nccl-net-plugin -p ferro-bench;
# 3. testbed/host/run-in-guest.sh --timeout 1500 -- benches/compare.sh "$@" (one boot: perftest and
#    ferro-bench, side by side);
# 4. prints the summary from target/guest-out/bench/ (summary.txt; also summary.json,
#    compare.csv, bandwidth.svg, the ferro-bench CSV/JSON files and raw/ logs).
#
# Environment: FERRO_TESTBED_TIMEOUT (guest timeout, default 1500 s), FERRO_GUEST_OUT (results
# folder, default target/guest-out), and everything testbed/host/run-in-guest.sh reads.
set -euo pipefail

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SRC/.." && pwd)"
cd "$REPO"

log() { printf '[bench] %s\n' "$*" >&2; }

start=$SECONDS
log "1/4 provisioning the test bed"
testbed/host/provision.sh

log "2/4 building the plugin and ferro-bench (release)"
cargo build --release -p nccl-net-plugin -p ferro-bench

out="${FERRO_GUEST_OUT:-$REPO/target/guest-out}"
case "$out" in /*) ;; *) out="$REPO/$out" ;; esac
rm -rf "$out/bench"

log "3/4 running benches/compare.sh $* in the guest (boot ~1 min, the comparison several more)"
rc=0
testbed/host/run-in-guest.sh --timeout "${FERRO_TESTBED_TIMEOUT:-1500}" -- bash benches/compare.sh "$@" || rc=$?

log "4/4 results ($out/bench)"
if [[ -f "$out/bench/summary.txt" ]]; then
  echo
  cat "$out/bench/summary.txt"
  echo
  log "files: $(cd "$out/bench" && ls -1 summary.txt summary.json compare.csv bandwidth.svg 2>/dev/null | tr '\n' ' ')"
else
  log "no summary was written (see the guest output above)"
fi
if [[ "$rc" -eq 0 ]]; then
  log "done in $((SECONDS - start)) s"
else
  log "FAILED (status $rc) after $((SECONDS - start)) s"
fi
exit "$rc"

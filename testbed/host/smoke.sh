#!/usr/bin/env bash
# Self check of the soft-RoCE test bed. Runs on the host:
#
#   testbed/host/smoke.sh
#
# Boots the guest once and runs testbed/guest/smoke.sh there, which checks ibv_devinfo on
# rxe0 and rxe1, the rdma links, the GID tables, and perftest loopback runs on rxe0
# (ib_write_bw 64 KiB, ib_write_lat 8 B). Exits 0 only if every check passed. The perftest
# figures are also written to <results folder>/smoke-summary.txt.
set -euo pipefail

TESTBED_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO="$(cd "$TESTBED_SRC/.." && pwd)"
# shellcheck source=../lib.sh
. "$TESTBED_SRC/lib.sh"
out="${FERRO_GUEST_OUT:-$REPO/target/guest-out}"
case "$out" in /*) ;; *) out="$(pwd)/$out" ;; esac
mkdir -p "$out"
rm -f "$out/smoke-summary.txt"
start=$SECONDS
rc=0
"$TESTBED_SRC/host/run-in-guest.sh" --timeout "${FERRO_TESTBED_TIMEOUT:-900}" -- \
  bash "$TESTBED_SRC/guest/smoke.sh" || rc=$?
if [[ -f "$out/smoke-summary.txt" ]]; then
  log "summary:"
  sed 's/^/[testbed]   /' "$out/smoke-summary.txt" >&2
fi
if [[ "$rc" -eq 0 ]]; then
  log "smoke test PASSED in $((SECONDS - start))s"
else
  log "smoke test FAILED (status $rc) after $((SECONDS - start))s"
fi
exit "$rc"

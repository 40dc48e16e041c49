#!/usr/bin/env bash
# Entry point inside the test-bed guest (host/run-in-guest.sh boots the guest with it).
#
#   testbed/guest/main.sh setup-then-exec CMD [ARGS...]
#
# Raises the memlock limit, sets up the rxe devices (guest/setup.sh), then
# execs CMD in this same process so that CMD keeps the raised limits and its
# exit status becomes the guest's. Exits 125 if the setup fails.
set -euo pipefail

GUEST_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
. "$GUEST_DIR/../lib.sh"

usage() {
  log "usage: testbed/guest/main.sh setup-then-exec CMD [ARGS...]"
  exit 2
}

[[ $# -ge 2 && "$1" == setup-then-exec ]] || usage
shift

read -r uptime _ </proc/uptime
log "guest up after ${uptime}s (kernel $(uname -r))"

if ! ulimit -l unlimited; then
  log "error: cannot raise the locked-memory limit"
  exit 125
fi
export FERRO_GUEST=1

if ! bash "$GUEST_DIR/setup.sh"; then
  log "error: guest setup failed"
  exit 125
fi

log "running: $*"
exec "$@"

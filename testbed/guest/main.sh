#!/usr/bin/env bash
# Entry point inside the test-bed guest (host/run-in-guest.sh boots the guest with it).
#
#   testbed/guest/main.sh setup-then-exec CMD [ARGS...]
#
# Raises the memlock limit and the hard limit of open files, sets up the rxe devices (guest/setup.sh), then
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

# The open-files hard limit in the guest.
FERRO_GUEST_NOFILE=65536

read -r uptime _ </proc/uptime
log "guest up after ${uptime}s (kernel $(uname -r))"

if ! ulimit -l unlimited; then
  log "error: cannot raise the locked-memory limit"
  exit 125
fi
# Each process of `ferro-bench scale` holds 2 N sockets: N = 4,096 needs more than the default
# hard limit (4,096). Only the hard limit is raised (programs that need more raise their soft
# limit to it, as ferro-bench does); fs.nr_open (1,048,576 by default) bounds it.
if ! ulimit -H -n "$FERRO_GUEST_NOFILE"; then
  log "error: cannot raise the open-files hard limit to $FERRO_GUEST_NOFILE"
  exit 125
fi
export FERRO_GUEST=1

if ! bash "$GUEST_DIR/setup.sh"; then
  log "error: guest setup failed"
  exit 125
fi

log "running: $*"
exec "$@"

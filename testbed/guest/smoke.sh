#!/usr/bin/env bash
# The test bed's self check, inside the guest (testbed/host/smoke.sh boots the guest with it):
# ibv_devinfo on rxe0 and rxe1, the rdma links, the GID tables, and perftest loopback runs on
# rxe0 (ib_write_bw 64 KiB, ib_write_lat 8 B). Exits 0 only if every check passed; the figures
# are also written to $FERRO_GUEST_OUT/smoke-summary.txt.
set -euo pipefail

GUEST_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../lib.sh
. "$GUEST_DIR/../lib.sh"

[[ "${FERRO_GUEST:-}" == 1 ]] || die "not inside the test-bed guest: run testbed/host/smoke.sh"

summary_file="${FERRO_GUEST_OUT:-/tmp}/smoke-summary.txt"
: >"$summary_file"
failures=0

note() { printf '%s\n' "$*" | tee -a "$summary_file" >&2; }

pass() { note "PASS $*"; }
fail() {
  note "FAIL $*"
  failures=$((failures + 1))
}

section() { printf '\n[testbed] ===== %s =====\n' "$*" >&2; }

# Run a command, show its output, record PASS/FAIL under the given label.
check() { # label cmd...
  local label="$1"
  shift
  if "$@"; then pass "$label"; else fail "$label (status $?)"; fi
}

devinfo() { # device
  local txt
  txt="$(ibv_devinfo -v -d "$1")" || return 1
  printf '%s\n' "$txt"
  grep -q 'state:[[:space:]]*PORT_ACTIVE' <<<"$txt"
}

# perftest loopback on rxe0; prints the client's result line on stdout.
perftest_pair() { # port tool args...
  local port="$1" tool="$2"
  shift 2
  PERFTEST_TIMEOUT=300 perftest_run "$port" "/tmp/$tool-server.log" "/tmp/$tool-client.log" "$tool" "$@"
}

section "ibv_devinfo -v"
for dev in rxe0 rxe1; do
  check "ibv_devinfo $dev (port active)" devinfo "$dev"
done

section "rdma link"
check "rdma link" rdma link show

section "GID tables (sysfs: index, GID, type, netdev)"
check "GID tables" bash "$GUEST_DIR/setup.sh" --summary
for want in "rxe0 0000:0000:0000:0000:0000:ffff:7f00:0001" \
  "rxe1 0000:0000:0000:0000:0000:ffff:c000:0202" \
  "rxe1 2001:0db8:0000:0000:0000:0000:0000:0002"; do
  set -- $want
  if grep -qx "$2" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null; then
    pass "GID $2 on $1"
  else
    fail "GID $2 on $1"
  fi
done

section "ib_write_bw -d rxe0 -x 1 -s 65536 -n 200 (loopback)"
if line="$(perftest_pair 18515 ib_write_bw -d rxe0 -x 1 -s 65536 -n 200)"; then
  read -r bytes iters bw_peak bw_avg msg_rate _ <<<"$line"
  pass "ib_write_bw: ${bytes} B x ${iters}: BW average ${bw_avg} MB/s (peak ${bw_peak} MB/s, ${msg_rate} Mpps)"
else
  fail "ib_write_bw"
fi

section "ib_write_lat -d rxe0 -x 1 -s 8 -n 200 (loopback)"
if line="$(perftest_pair 18516 ib_write_lat -d rxe0 -x 1 -s 8 -n 200)"; then
  read -r bytes iters t_min t_max t_typ t_avg t_stdev p99 p999 _ <<<"$line"
  pass "ib_write_lat: ${bytes} B x ${iters}: typical ${t_typ} us, avg ${t_avg} us, min ${t_min} us, max ${t_max} us, 99% ${p99} us, 99.9% ${p999:-?} us"
else
  fail "ib_write_lat"
fi

read -r uptime _ </proc/uptime
note "guest uptime at end: ${uptime}s"
section "result"
if [[ "$failures" -eq 0 ]]; then
  log "all checks passed"
  exit 0
fi
log "$failures check(s) failed"
exit 1

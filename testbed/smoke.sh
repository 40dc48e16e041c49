#!/usr/bin/env bash
# Self check of the soft-RoCE test bed. Run on the host:
#
#   testbed/smoke.sh
#
# Boots the guest once and checks there: ibv_devinfo on rxe0 and rxe1, the rdma
# links, the GID tables, and perftest loopback runs on rxe0 (ib_write_bw 64 KiB,
# ib_write_lat 8 B). Exits 0 only if every check passed. The perftest figures
# are also written to <results folder>/smoke-summary.txt.
set -euo pipefail

TESTBED_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$TESTBED_SRC/.." && pwd)"

log() { printf '[testbed] %s\n' "$*" >&2; }

# ---------------------------------------------------------------- host side
if [[ "${1:-}" != --in-guest ]]; then
  out="${FERRO_GUEST_OUT:-$REPO/target/guest-out}"
  case "$out" in /*) ;; *) out="$(pwd)/$out" ;; esac
  mkdir -p "$out"
  rm -f "$out/smoke-summary.txt"
  start=$SECONDS
  rc=0
  "$TESTBED_SRC/run-in-guest.sh" --timeout "${FERRO_TESTBED_TIMEOUT:-900}" -- \
    bash "$TESTBED_SRC/smoke.sh" --in-guest || rc=$?
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
fi

# --------------------------------------------------------------- guest side
[[ "${FERRO_GUEST:-}" == 1 ]] || { log "--in-guest: not inside the test-bed guest"; exit 2; }

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

# Wait until a TCP port listens (perftest servers exchange QP data over TCP).
wait_listen() { # port pid timeout_s
  local deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    kill -0 "$2" 2>/dev/null || return 1
    [[ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]] && return 0
    sleep 0.2
  done
  return 1
}

# perftest loopback on one device: server in the background, client to 127.0.0.1.
# Prints the client's result line on stdout.
perftest_pair() { # port tool args...
  local port="$1" tool="$2"
  shift 2
  local srv_log="/tmp/$tool-server.log" cli_log="/tmp/$tool-client.log"
  timeout 300 "$tool" "$@" -p "$port" >"$srv_log" 2>&1 &
  local srv=$!
  if ! wait_listen "$port" "$srv" 60; then
    log "$tool server did not start listening on port $port:"
    cat "$srv_log" >&2
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    return 1
  fi
  local crc=0 src=0
  timeout 300 "$tool" "$@" -p "$port" 127.0.0.1 >"$cli_log" 2>&1 || crc=$?
  wait "$srv" || src=$?
  log "$tool client output:"
  cat "$cli_log" >&2
  if [[ "$crc" -ne 0 || "$src" -ne 0 ]]; then
    log "$tool server output:"
    cat "$srv_log" >&2
    log "$tool failed: client status $crc, server status $src"
    return 1
  fi
  # The result line: "#bytes #iterations figures..." with numbers only.
  awk '/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+/ { line = $0 } END { if (line == "") exit 1; print line }' "$cli_log"
}

section "ibv_devinfo -v"
for dev in rxe0 rxe1; do
  check "ibv_devinfo $dev (port active)" devinfo "$dev"
done

section "rdma link"
check "rdma link" rdma link show

section "GID tables (sysfs: index, GID, type, netdev)"
check "GID tables" bash "$TESTBED_SRC/guest-setup.sh" --summary
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

#!/usr/bin/env bash
# Set up the soft-RoCE devices inside the test-bed guest (runs as root there).
#
#   rxe0: rdma_rxe on the loopback interface (GID 1 = ::ffff:127.0.0.1, RoCE v2)
#   rxe1: rdma_rxe on dummy1 (192.0.2.2/24 and 2001:db8::2/64)
#
# Idempotent: devices and addresses already present are kept. Waits (bounded by
# FERRO_TESTBED_SETUP_WAIT seconds, default 20) until both ports are ACTIVE and
# the IPv6 GID shows up on rxe1, then prints a summary on stderr.
# `testbed/guest/setup.sh --summary` only prints the summary (devices and GID tables).
#
# The raised memlock limit only applies to this process and its children: to run
# a command with it, use guest/main.sh (which sets the limit and then execs it).
set -euo pipefail

# shellcheck source=../lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

[[ "$(id -u)" -eq 0 ]] || die "testbed/guest/setup.sh must run as root (inside the guest)"

IB_SYSFS=/sys/class/infiniband
DUMMY=dummy1
DUMMY_V4=192.0.2.2/24
DUMMY_V6=2001:db8::2/64
# rxe1's IPv6 GID as sysfs prints it.
DUMMY_V6_GID=2001:0db8:0000:0000:0000:0000:0000:0002
WAIT_S="${FERRO_TESTBED_SETUP_WAIT:-20}"

ulimit -l unlimited || die "cannot raise the locked-memory limit"
export FERRO_GUEST=1

have_rdma_link() { [[ -e "$IB_SYSFS/$1" ]]; }

setup_devices() {
  modprobe rdma_rxe || die "modprobe rdma_rxe failed (is the test-bed kernel booted?)"
  modprobe dummy 2>/dev/null || true
  ip link set lo up

  if ! have_rdma_link rxe0; then
    rdma link add rxe0 type rxe netdev lo
  fi

  if ! ip link show "$DUMMY" >/dev/null 2>&1; then
    ip link add "$DUMMY" type dummy
  fi
  sysctl -qw "net.ipv6.conf.$DUMMY.disable_ipv6=0" 2>/dev/null || true
  ip link set "$DUMMY" up
  ip -4 addr replace "$DUMMY_V4" dev "$DUMMY"
  ip -6 addr replace "$DUMMY_V6" dev "$DUMMY" nodad

  if ! have_rdma_link rxe1; then
    rdma link add rxe1 type rxe netdev "$DUMMY"
  fi
}

# Process spawning is slow in the emulated guest and an rxe port has hundreds
# of GID slots, so sysfs is read with shell builtins (or one grep) only.
readf() { # $1 = file; prints its first line, or "?" when unreadable
  local line
  if read -r line 2>/dev/null <"$1"; then printf '%s' "$line"; else printf '?'; fi
}

port_active() { # $1 = device
  [[ "$(readf "$IB_SYSFS/$1/ports/1/state")" == *ACTIVE* ]]
}

# "INDEX GID" for each non-zero GID of port 1 of device $1.
gids() {
  local dir="$IB_SYSFS/$1/ports/1/gids"
  [[ -d "$dir" ]] || return 0
  grep -s -H -v -x '0000:0000:0000:0000:0000:0000:0000:0000' "$dir"/* |
    sed -e 's|^.*/||' -e 's|:| |' | sort -n || true
}

has_gid() { # $1 = device, $2 = gid
  gids "$1" | grep -q -x "[0-9]* $2"
}

wait_ready() {
  local deadline=$((SECONDS + WAIT_S))
  while :; do
    if port_active rxe0 && port_active rxe1 && has_gid rxe1 "$DUMMY_V6_GID"; then
      return 0
    fi
    if ((SECONDS >= deadline)); then
      log "devices not ready after ${WAIT_S}s:"
      local d
      for d in rxe0 rxe1; do
        log "  $d port 1: $(readf "$IB_SYSFS/$d/ports/1/state")"
      done
      has_gid rxe1 "$DUMMY_V6_GID" || log "  rxe1 has no GID $DUMMY_V6_GID"
      return 1
    fi
    sleep 0.2
  done
}

# One line per device, then its non-zero GIDs: index, GID, type, netdev.
summary() {
  local dev name idx gid attrs
  for dev in "$IB_SYSFS"/*; do
    [[ -e "$dev" ]] || continue
    name="${dev##*/}"
    printf '[testbed]   %s: port 1 %s, %s, netdev %s\n' "$name" \
      "$(readf "$dev/ports/1/state")" "$(readf "$dev/ports/1/link_layer")" \
      "$(readf "$dev/ports/1/gid_attrs/ndevs/0")" >&2
    while read -r idx gid; do
      attrs="$dev/ports/1/gid_attrs"
      printf '[testbed]     gid %-3s %s  %-8s %s\n' "$idx" "$gid" \
        "$(readf "$attrs/types/$idx")" "$(readf "$attrs/ndevs/$idx")" >&2
    done < <(gids "$name")
  done
}

if [[ "${1:-}" == --summary ]]; then
  summary
  exit 0
fi

start=$SECONDS
setup_devices
wait_ready || exit 1
log "rdma link:"
rdma link show | sed 's/^/[testbed]   /' >&2
log "devices:"
summary
log "soft-RoCE ready in $((SECONDS - start))s (memlock: $(ulimit -l), open files: $(ulimit -S -n) soft, $(ulimit -H -n) hard)"

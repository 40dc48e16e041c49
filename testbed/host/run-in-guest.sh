#!/usr/bin/env bash
# Run a command inside the soft-RoCE test-bed guest and return its exit status.
#
#   testbed/host/run-in-guest.sh [--timeout SECS] -- CMD [ARGS...]
#
# Provisions the host if needed (provision.sh), boots the Debian kernel with
# virtme-ng under QEMU/TCG with the host's root filesystem (read-only) and
# <repo>/target/guest-out writable, sets up rxe0/rxe1 (guest/setup.sh), then runs
# CMD as root with cwd = repository root and memlock unlimited.
#
# Exit status: CMD's; 125 if the guest setup failed; 124 (or 137) if the timeout
# (default 1500 s) expired; other non-zero values if the guest could not boot.
#
# Environment (host side):
#   FERRO_TESTBED_TIMEOUT  default for --timeout
#   FERRO_TESTBED_MEMORY   guest memory (default 8G: the 2.1 GiB message test holds two
#                          such buffers in two processes; TCG allocates it lazily)
#   FERRO_TESTBED_CPUS     guest CPUs (default 2)
#   FERRO_TESTBED_APPEND   kernel options for the guest, space-separated (default
#                          "tsc=reliable"; set it empty for none). Under TCG the kernel
#                          distrusts the TSC and falls back to the HPET, and every clock read
#                          in the guest becomes a system call and an emulated device read
#                          that takes QEMU's global lock; with the TSC, clock_gettime stays
#                          in the vDSO, as on hardware.
#   FERRO_TESTBED_QEMU_OPTS  extra QEMU options, space-separated words (default
#                          "-global virtio-serial-pci.max_ports=2": vng adds seven
#                          virtio-serial devices of one port each, and at the default of 31
#                          ports each QEMU's main loop polls some 390 descriptors every time it
#                          wakes, a host CPU's fifth taken from the two vCPUs; 2 ports: 42)
#   FERRO_GUEST_OUT        results folder, writable from the guest (default <repo>/target/guest-out)
#   FERRO_GUEST_ENV        extra variable names to pass into the guest (space-separated)
# Variables named FERRO_*, RUST_*, NCCL_* and CARGO_* are passed into the guest as they are.
set -euo pipefail

HOST_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TESTBED_SRC="$(cd "$HOST_DIR/.." && pwd)"
REPO="$(cd "$TESTBED_SRC/.." && pwd)"
# shellcheck source=../lib.sh
. "$TESTBED_SRC/lib.sh"
FERRO_TESTBED_DIR="${FERRO_TESTBED_DIR:-$REPO/.testbed}"
case "$FERRO_TESTBED_DIR" in /*) ;; *) FERRO_TESTBED_DIR="$(pwd)/$FERRO_TESTBED_DIR" ;; esac
export FERRO_TESTBED_DIR

# Usage and setup errors exit 2 (distinct from the command's own status).
die() {
  log "error: $*"
  exit 2
}

usage() {
  cat >&2 <<'EOF'
usage: testbed/host/run-in-guest.sh [--timeout SECS] -- CMD [ARGS...]
Runs CMD (as root, in the repository root) inside the soft-RoCE QEMU guest.
EOF
  exit 2
}

timeout_s="${FERRO_TESTBED_TIMEOUT:-1500}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --timeout) [[ $# -ge 2 ]] || usage; timeout_s="$2"; shift 2 ;;
    --timeout=*) timeout_s="${1#--timeout=}"; shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    -*) log "unknown option: $1"; usage ;;
    *) break ;;
  esac
done
[[ $# -ge 1 ]] || usage
[[ "$timeout_s" =~ ^[0-9]+$ && "$timeout_s" -gt 0 ]] || die "--timeout needs a positive number of seconds"

# Already inside the guest: run directly.
if [[ "${FERRO_GUEST:-}" == 1 ]]; then
  exec "$@"
fi

"$HOST_DIR/provision.sh"

if [[ -n "${HOME:-}" ]]; then
  case ":$PATH:" in *":$HOME/.local/bin:"*) ;; *) PATH="$PATH:$HOME/.local/bin" ;; esac
fi
kernel="$(cat "$FERRO_TESTBED_DIR/kernel.path")"
[[ -f "$kernel" ]] || die "kernel image $kernel missing; remove $FERRO_TESTBED_DIR and retry"

out="${FERRO_GUEST_OUT:-$REPO/target/guest-out}"
case "$out" in /*) ;; *) out="$(pwd)/$out" ;; esac
mkdir -p "$out"

# Single-quote for a POSIX shell.
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# The command goes into a script file on the host (the guest sees the host's
# files): the kernel command line that would otherwise carry it is short.
mkdir -p "$FERRO_TESTBED_DIR/run"
cmdfile="$(mktemp "$FERRO_TESTBED_DIR/run/cmd.XXXXXX")"
trap 'rm -f "$cmdfile"' EXIT
{
  printf 'export FERRO_GUEST_OUT=%s\n' "$(sq "$out")"
  extra=" ${FERRO_GUEST_ENV:-} "
  while read -r name; do
    case "$name" in
      FERRO_GUEST_OUT | FERRO_GUEST) continue ;;
      FERRO_* | RUST_* | NCCL_* | CARGO_*) ;;
      *) [[ "$extra" == *" $name "* ]] || continue ;;
    esac
    printf 'export %s=%s\n' "$name" "$(sq "${!name}")"
  done < <(compgen -e)
  printf 'exec bash %s setup-then-exec' "$(sq "$TESTBED_SRC/guest/main.sh")"
  for arg in "$@"; do printf ' %s' "$(sq "$arg")"; done
  printf '\n'
} >"$cmdfile"

memory="${FERRO_TESTBED_MEMORY:-8G}"
cpus="${FERRO_TESTBED_CPUS:-2}"
vng_args=(--run "$kernel" --user root --disable-kvm --memory "$memory" --cpus "$cpus"
  --rwdir "$out" --cwd "$REPO" --exec "bash $(sq "$cmdfile")")
qemu_opts="${FERRO_TESTBED_QEMU_OPTS--global virtio-serial-pci.max_ports=2}"
kernel_opts="${FERRO_TESTBED_APPEND-tsc=reliable}"
for opt in $qemu_opts; do
  vng_args+=(--qemu-opts="$opt")
done
for opt in $kernel_opts; do
  vng_args+=(--append "$opt")
done

log "booting guest: $(basename "$kernel"), TCG, $memory, $cpus CPUs, timeout ${timeout_s}s${kernel_opts:+, kernel options: $kernel_opts}"
log "results folder: $out (FERRO_GUEST_OUT)"
start=$SECONDS

# timeout runs vng (and QEMU) in a process group of its own and kills the whole
# group when time is up; stdin is /dev/null so that nothing waits on a terminal.
# QEMU reopens /proc/self/fd/1 and /proc/self/fd/2 from offset 0 (truncating a
# regular file), so its output always goes through pipes to cat.
set +e
timeout -k 30 "$timeout_s" vng "${vng_args[@]}" </dev/null > >(cat) 2> >(cat >&2) &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' INT TERM HUP
wait "$pid"
rc=$?
while kill -0 "$pid" 2>/dev/null; do
  wait "$pid"
  rc=$?
done
wait # for the cat processes to drain the pipes
set -e
trap - INT TERM HUP

elapsed=$((SECONDS - start))
if [[ ( "$rc" -eq 124 || "$rc" -eq 137 ) && "$elapsed" -ge "$timeout_s" ]]; then
  log "error: timed out after ${timeout_s}s"
else
  log "guest exited with status $rc after ${elapsed}s"
fi
exit "$rc"

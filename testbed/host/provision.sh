#!/usr/bin/env bash
# Provision the soft-RoCE test bed on a Debian 12 host (idempotent). Runs on the host.
#
#  - installs the Debian packages the test bed needs (apt-get, root only);
#  - installs virtme-ng (`vng`) from PyPI when it is missing;
#  - downloads the current Debian 6.1 kernel package (it ships rdma_rxe as a
#    module), unpacks it under $FERRO_TESTBED_DIR/kernel and runs depmod there;
#  - writes the kernel image path to $FERRO_TESTBED_DIR/kernel.path.
#
# Environment:
#   FERRO_TESTBED_DIR         cache folder (default: <repo>/.testbed); must not be under /var
#   FERRO_TESTBED_KERNEL_PKG  kernel package to use instead of the one linux-image-amd64 depends on
#   FERRO_TESTBED_VNG_SPEC    pip requirement for virtme-ng (default: virtme-ng)
#
# Prints nothing on stdout; progress goes to stderr.
set -euo pipefail

TESTBED_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO="$(cd "$TESTBED_SRC/.." && pwd)"
# shellcheck source=../lib.sh
. "$TESTBED_SRC/lib.sh"
FERRO_TESTBED_DIR="${FERRO_TESTBED_DIR:-$REPO/.testbed}"
VNG_SPEC="${FERRO_TESTBED_VNG_SPEC:-virtme-ng}"


# Packages the test bed uses on the host (qemu, busybox and kmod for vng;
# rdma-core/ibverbs/perftest/iproute2 are used inside the guest, which sees
# the host's root filesystem; binutils, python3-venv, debootstrap, lintian, rpm (rpmbuild) and
# rpmlint serve scripts/check-package.sh (the portable build's tools, the old Debian root, the
# Debian and RPM packages' checks) and scripts/check-manifests.sh).
APT_PACKAGES=(qemu-system-x86 busybox-static kmod rdma-core ibverbs-utils strace
  ibverbs-providers libibverbs-dev perftest iproute2
  binutils python3-venv debootstrap lintian rpm rpmlint)

IS_ROOT=0
[[ "$(id -u)" -eq 0 ]] && IS_ROOT=1
APT_UPDATED=0

# pip --user installs land in ~/.local/bin.
if [[ -n "${HOME:-}" ]]; then
  case ":$PATH:" in *":$HOME/.local/bin:"*) ;; *) PATH="$PATH:$HOME/.local/bin" ;; esac
fi
export PATH

apt_update() {
  if [[ "$APT_UPDATED" -eq 0 ]]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    APT_UPDATED=1
  fi
}

# Print the names of the given packages that are not installed.
missing_packages() {
  local pkg status
  for pkg in "$@"; do
    status="$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)"
    [[ "$status" == installed ]] || printf '%s\n' "$pkg"
  done
}

ensure_packages() {
  local missing
  mapfile -t missing < <(missing_packages "$@")
  [[ "${#missing[@]}" -eq 0 ]] && return 0
  if [[ "$IS_ROOT" -ne 1 ]]; then
    die "missing Debian packages: ${missing[*]}
[testbed] install them with: sudo apt-get install --no-install-recommends ${missing[*]}"
  fi
  apt_update
  log "installing: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

ensure_vng() {
  command -v vng >/dev/null 2>&1 && return 0
  command -v python3 >/dev/null 2>&1 || ensure_packages python3
  if ! python3 -m pip --version >/dev/null 2>&1; then
    ensure_packages python3-pip
  fi
  local args=(install --quiet --disable-pip-version-check)
  [[ "$IS_ROOT" -ne 1 ]] && args+=(--user)
  log "installing $VNG_SPEC with pip"
  local out
  if ! out="$(python3 -m pip "${args[@]}" "$VNG_SPEC" 2>&1)"; then
    if grep -q externally-managed-environment <<<"$out"; then
      log "python is externally managed (PEP 668); retrying with --break-system-packages"
      python3 -m pip "${args[@]}" --break-system-packages "$VNG_SPEC" >&2
    else
      printf '%s\n' "$out" >&2
      die "pip install $VNG_SPEC failed"
    fi
  fi
  hash -r
  command -v vng >/dev/null 2>&1 || die "vng not found on PATH after installing $VNG_SPEC"
}

# Name of the kernel image package linux-image-amd64 currently depends on.
resolve_kernel_pkg() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}

KDIR="$FERRO_TESTBED_DIR/kernel"
STAMP="$KDIR/.package"

kernel_ready() { # $1 = package name
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$1" && -f "$FERRO_TESTBED_DIR/kernel.path" ]] &&
    [[ -f "$(cat "$FERRO_TESTBED_DIR/kernel.path")" ]]
}

install_kernel() { # $1 = package name
  local pkg="$1" version="${1#linux-image-}"
  local work="$FERRO_TESTBED_DIR/download"
  rm -rf "$work" "$KDIR.new"
  mkdir -p "$work" "$KDIR.new"
  log "downloading $pkg"
  # As root, apt would drop to the _apt user, which cannot write here.
  local sandbox=()
  [[ "$IS_ROOT" -eq 1 ]] && sandbox=(-o APT::Sandbox::User=root)
  if ! (cd "$work" && apt-get download -q "${sandbox[@]}" "$pkg" >&2); then
    # The package lists may be stale (the mirror moved on): refresh once.
    [[ "$IS_ROOT" -eq 1 && "$APT_UPDATED" -eq 0 ]] || die "apt-get download $pkg failed"
    apt_update
    pkg="${FERRO_TESTBED_KERNEL_PKG:-$(resolve_kernel_pkg)}"
    version="${pkg#linux-image-}"
    [[ -n "$pkg" ]] || die "cannot resolve the kernel package of linux-image-amd64"
    log "downloading $pkg"
    (cd "$work" && apt-get download -q "${sandbox[@]}" "$pkg" >&2) || die "apt-get download $pkg failed"
  fi
  local deb
  deb="$(find "$work" -maxdepth 1 -name "${pkg}_*.deb" | head -n1)"
  [[ -n "$deb" ]] || die "downloaded package file for $pkg not found"
  log "unpacking $(basename "$deb")"
  dpkg -x "$deb" "$KDIR.new"
  [[ -f "$KDIR.new/boot/vmlinuz-$version" ]] || die "no boot/vmlinuz-$version in $pkg"
  [[ -d "$KDIR.new/lib/modules/$version" ]] || die "no lib/modules/$version in $pkg"
  find "$KDIR.new/lib/modules/$version" -name 'rdma_rxe.ko*' | grep -q . ||
    die "$pkg has no rdma_rxe module"
  log "depmod $version"
  depmod -b "$KDIR.new" "$version"
  printf '%s\n' "$pkg" >"$KDIR.new/.package"
  rm -rf "$KDIR" "$work"
  mv "$KDIR.new" "$KDIR"
  printf '%s\n' "$KDIR/boot/vmlinuz-$version" >"$FERRO_TESTBED_DIR/kernel.path"
  log "kernel ready: $KDIR/boot/vmlinuz-$version"
}

# True when the cached kernel was resolved after the last change of apt's
# package lists, so resolving again (about 1 s) would give the same answer.
kernel_fresh() {
  [[ -f "$STAMP" && -f "$FERRO_TESTBED_DIR/kernel.path" ]] || return 1
  [[ -f "$(cat "$FERRO_TESTBED_DIR/kernel.path")" ]] || return 1
  [[ -d /var/lib/apt/lists ]] || return 1
  [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -newer "$STAMP" -name '*Packages*' -print -quit)" ]]
}

ensure_kernel() {
  local pkg="${FERRO_TESTBED_KERNEL_PKG:-}"
  if [[ -z "$pkg" ]]; then
    kernel_fresh && return 0
    pkg="$(resolve_kernel_pkg)"
    if [[ -z "$pkg" ]]; then
      # No package lists yet (fresh machine), or linux-image-amd64 unknown.
      if [[ -f "$STAMP" && -f "$FERRO_TESTBED_DIR/kernel.path" ]] &&
        [[ -f "$(cat "$FERRO_TESTBED_DIR/kernel.path")" ]]; then
        log "cannot resolve linux-image-amd64 (no apt lists?); using cached $(cat "$STAMP")"
        return 0
      fi
      [[ "$IS_ROOT" -eq 1 ]] || die "apt-cache cannot resolve linux-image-amd64; run 'sudo apt-get update'"
      apt_update
      pkg="$(resolve_kernel_pkg)"
      [[ -n "$pkg" ]] || die "cannot resolve the kernel package of linux-image-amd64"
    fi
  fi
  if kernel_ready "$pkg"; then
    touch "$STAMP" # record that the lists were checked (see kernel_fresh)
    return 0
  fi
  install_kernel "$pkg"
}

main() {
  case "$FERRO_TESTBED_DIR" in
    /*) ;;
    *) FERRO_TESTBED_DIR="$(pwd)/$FERRO_TESTBED_DIR" ;;
  esac
  case "$FERRO_TESTBED_DIR/" in
    /var/*) die "FERRO_TESTBED_DIR must not be under /var (the guest mounts its own /var/cache)" ;;
  esac
  KDIR="$FERRO_TESTBED_DIR/kernel"
  STAMP="$KDIR/.package"
  mkdir -p "$FERRO_TESTBED_DIR"

  # Serialise concurrent provisioning (several test runs starting at once).
  exec 9>"$FERRO_TESTBED_DIR/.lock"
  if ! flock -n 9; then
    log "waiting for another provisioning run to finish"
    flock 9
  fi

  ensure_packages "${APT_PACKAGES[@]}"
  ensure_vng
  ensure_kernel
}

main "$@"

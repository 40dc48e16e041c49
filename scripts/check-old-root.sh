#!/usr/bin/env bash
# Loads the plugin and runs the doctor inside the root of an old Debian release, whose glibc is
# older than the one the native build links against:
#
#   scripts/check-old-root.sh PLUGIN DOCTOR [NATIVE-PLUGIN]
#
#   1. the root: `debootstrap --variant=minbase --foreign` of FERRO_OLD_ROOT_SUITE (default
#      bullseye, Debian 11, glibc 2.31: the oldest release deb.debian.org still serves; older
#      ones are only on archive.debian.org) into target/old-root/<suite>/, kept between runs.
#      The first stage unpacks the packages without configuring them, which is all a dynamic
#      loader and libc need, in a fraction of the time of a full debootstrap;
#   2. packaging/tests/load-plugin.c, built with zig (from scripts/build-portable.sh's tools) for
#      glibc 2.17, run in the root with chroot: dlopen(PLUGIN, RTLD_NOW), dlsym("ncclNetPlugin_v8"),
#      init and devices (init fails cleanly there: the root has no libibverbs);
#   3. DOCTOR --help in the root;
#   4. the control: NATIVE-PLUGIN (a build linked against this machine's newer glibc), when it
#      needs a glibc symbol version the root lacks, must fail to load there, naming the version,
#      so the check is shown to tell a build that does not load from one that does.
#
# Needs root (debootstrap, chroot). Environment: FERRO_OLD_ROOT_SUITE, FERRO_OLD_ROOT_MIRROR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SUITE="${FERRO_OLD_ROOT_SUITE:-bullseye}"
MIRROR="${FERRO_OLD_ROOT_MIRROR:-http://deb.debian.org/debian}"
ROOT="target/old-root/$SUITE"
ZIG_PYTHON=target/tools/venv/bin/python3

fail() { echo "check-old-root: FAIL: $*" >&2; exit 1; }
ok() { echo "check-old-root: ok: $*" >&2; }

[[ $# -ge 2 && $# -le 3 ]] || { sed -n '2,22p' "$0" >&2; exit 2; }
plugin="$1"
doctor="$2"
native="${3:-}"
[[ -f "$plugin" && -f "$doctor" ]] || fail "no such plugin or doctor: $plugin $doctor"
[[ "$(id -u)" -eq 0 ]] || fail "needs root (debootstrap and chroot)"
command -v debootstrap > /dev/null 2>&1 || fail "needs debootstrap (apt-get install debootstrap)"
[[ -x "$ZIG_PYTHON" ]] || fail "no zig: run scripts/build-portable.sh first"

case "$(uname -m)" in
  x86_64) zig_target=x86_64-linux-gnu.2.17 ;;
  aarch64) zig_target=aarch64-linux-gnu.2.17 ;;
  *) fail "no zig target for $(uname -m)" ;;
esac

if [[ ! -e "$ROOT/.ferro-ready" ]]; then
  echo "check-old-root: debootstrap --variant=minbase --foreign $SUITE from $MIRROR into $ROOT" >&2
  rm -rf "$ROOT"
  mkdir -p "$ROOT"
  debootstrap --variant=minbase --foreign "$SUITE" "$ROOT" "$MIRROR" > "$ROOT.log" 2>&1 \
    || fail "debootstrap $SUITE failed (log: $ROOT.log): $(tail -n 3 "$ROOT.log")"
  touch "$ROOT/.ferro-ready"
fi
libc_deb="$(ls "$ROOT"/var/cache/apt/archives/libc6_*.deb 2> /dev/null | head -n 1)"
[[ -n "$libc_deb" ]] || fail "$ROOT has no libc6 package in its archive cache"
root_glibc="$(dpkg-deb -f "$libc_deb" Version)"
root_glibc="${root_glibc%%-*}"
ok "$SUITE root in $ROOT (glibc $root_glibc)"

# The root's glibc must be older than this machine's, or a native build would load there too and
# the check would prove nothing.
host_glibc="$(getconf GNU_LIBC_VERSION | awk '{print $2}')"
[[ "$(printf '%s\n%s\n' "$root_glibc" "$host_glibc" | sort -V | head -n 1)" == "$root_glibc" \
  && "$root_glibc" != "$host_glibc" ]] || fail "the $SUITE root's glibc $root_glibc is not older than this machine's $host_glibc"

work="$ROOT/opt/ferro-check"
rm -rf "$work"
mkdir -p "$work"
"$ZIG_PYTHON" -m ziglang cc -target "$zig_target" -O2 -Wall -Werror \
  -o "$work/load-plugin" packaging/tests/load-plugin.c -ldl \
  || fail "building packaging/tests/load-plugin.c with zig cc"
install -m 0644 "$plugin" "$work/libnccl-net-ferro.so"
install -m 0755 "$doctor" "$work/nccl-net-doctor"

# In the root: no libibverbs there, so init must fail cleanly.
if ! chroot "$ROOT" /opt/ferro-check/load-plugin /opt/ferro-check/libnccl-net-ferro.so > "$work/load.log" 2>&1; then
  cat "$work/load.log" >&2
  fail "the plugin does not load in the $SUITE root (glibc $root_glibc)"
fi
grep -q 'init returned [1-9]' "$work/load.log" || { cat "$work/load.log" >&2; fail "init did not fail cleanly in a root without libibverbs"; }
grep -q 'libibverbs' "$work/load.log" || { cat "$work/load.log" >&2; fail "no plugin log line names the missing libibverbs"; }
ok "the plugin loads in the $SUITE root: $(grep '^load-plugin: .* loaded' "$work/load.log")"

chroot "$ROOT" /opt/ferro-check/nccl-net-doctor --help > "$work/doctor.log" 2>&1 \
  || { cat "$work/doctor.log" >&2; fail "the doctor does not run in the $SUITE root"; }
grep -q 'Exit status' "$work/doctor.log" || fail "the doctor's --help in the $SUITE root lacks 'Exit status'"
ok "the doctor runs in the $SUITE root"

if [[ -n "$native" ]]; then
  [[ -f "$native" ]] || fail "no native plugin $native"
  newest="$(objdump -T "$native" | grep -o 'GLIBC_[0-9][0-9.]*[0-9]' | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
  if [[ "$(printf '%s\n%s\n' "$newest" "$root_glibc" | sort -V | tail -n 1)" == "$newest" && "$newest" != "$root_glibc" ]]; then
    install -m 0644 "$native" "$work/native.so"
    if chroot "$ROOT" /opt/ferro-check/load-plugin /opt/ferro-check/native.so > "$work/native.log" 2>&1; then
      fail "the native plugin (needs glibc $newest) loaded in the $SUITE root: the check cannot tell"
    fi
    grep -q "GLIBC_.* not found" "$work/native.log" \
      || { cat "$work/native.log" >&2; fail "the native plugin failed in the $SUITE root for another reason than glibc"; }
    ok "control: the native plugin (glibc $newest) is refused in the $SUITE root: $(grep -o "version .GLIBC_[0-9.]*. not found" "$work/native.log" | head -n 1)"
  else
    echo "check-old-root: note: the native plugin needs only glibc $newest, which the $SUITE root has; no control" >&2
  fi
fi
rm -rf "$work"
echo "check-old-root: all checks passed" >&2

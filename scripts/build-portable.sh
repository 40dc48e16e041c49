#!/usr/bin/env bash
# The portable release build of the plugin and the doctor: binaries whose glibc symbol versions are
# no newer than 2.17 (the manylinux2014 baseline), so the plugin that the installer copies from the
# host into a container loads in Ubuntu 20.04, RHEL/Rocky/UBI 8 and Amazon Linux 2 based images.
#
#   scripts/build-portable.sh [x86_64|aarch64]...   (default: this machine's architecture)
#
# For each architecture it prints the directory it filled, target/portable/<deb-arch>/:
#   lib/libnccl-net-ferro.so   bin/nccl-net-doctor
# (the layout deploy/installer/build-image.sh takes as an INPUT), and checks the two files with
# scripts/check-symbol-versions.sh.
#
# How: cargo-zigbuild links against zig's glibc 2.17 stubs (the target `<arch>-unknown-linux-gnu.2.17`),
# and zig's static unwinder replaces libgcc_s. Both come from PyPI (the `cargo-zigbuild` and
# `ziglang` wheels, no compiling), installed once into a virtual environment in target/tools/.
# The Rust standard library of the other architecture comes from `rustup target add`.
# The build has its own cargo target directory (target/portable) so it does not invalidate the
# native one.
#
# Environment: FERRO_ZIGBUILD_VERSION, FERRO_ZIGLANG_VERSION  pinned tool versions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ZIGBUILD_VERSION="${FERRO_ZIGBUILD_VERSION:-0.24.1}"
ZIGLANG_VERSION="${FERRO_ZIGLANG_VERSION:-0.17.1}"
GLIBC_BASELINE=2.17
TOOLS=target/tools/venv

die() { echo "build-portable: $*" >&2; exit 1; }

archs=("$@")
[[ ${#archs[@]} -gt 0 ]] || archs=("$(uname -m)")

# The tools: a virtual environment with the two wheels, reused while their versions match.
stamp="$TOOLS/.ferro-tools-$ZIGBUILD_VERSION-$ZIGLANG_VERSION"
if [[ ! -e "$stamp" ]]; then
  echo "build-portable: installing cargo-zigbuild $ZIGBUILD_VERSION and ziglang $ZIGLANG_VERSION (PyPI) into $TOOLS" >&2
  rm -rf "$TOOLS"
  python3 -m venv "$TOOLS" >&2 || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check \
    "cargo-zigbuild==$ZIGBUILD_VERSION" "ziglang==$ZIGLANG_VERSION" >&2
  touch "$stamp"
fi
# cargo-zigbuild finds zig as `python3 -m ziglang` of the environment's python3.
export PATH="$PWD/$TOOLS/bin:$PATH"

for arch in "${archs[@]}"; do
  case "$arch" in
    x86_64 | amd64) triple=x86_64-unknown-linux-gnu; debarch=amd64 ;;
    aarch64 | arm64) triple=aarch64-unknown-linux-gnu; debarch=arm64 ;;
    *) die "unknown architecture $arch (x86_64 or aarch64)" ;;
  esac
  if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$triple"; then
    rustup target add "$triple" >&2
  fi
  CARGO_TARGET_DIR=target/portable cargo zigbuild --release \
    -p nccl-net-plugin -p nccl-net-doctor --target "$triple.$GLIBC_BASELINE" >&2
  built="target/portable/$triple/release"
  out="target/portable/$debarch"
  rm -rf "$out"
  install -d "$out/lib" "$out/bin"
  install -m 0755 "$built/libnccl_net_ferro.so" "$out/lib/libnccl-net-ferro.so"
  install -m 0755 "$built/nccl-net-doctor" "$out/bin/nccl-net-doctor"
  scripts/check-symbol-versions.sh "$GLIBC_BASELINE" "$out/lib/libnccl-net-ferro.so" "$out/bin/nccl-net-doctor" >&2
  echo "$out"
done

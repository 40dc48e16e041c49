#!/usr/bin/env bash
# Builds the Debian packages into target/deb/ (prints their paths on stdout):
#   nccl-net-ferro_<version>_<arch>.deb
#       /usr/lib/<multiarch>/libnccl-net-ferro.so   the plugin (NCCL_NET_PLUGIN=ferro finds it)
#       /usr/bin/nccl-net-doctor                     the host and pod checker
#       /usr/share/doc/nccl-net-ferro/{README.md,copyright}
#   nccl-net-ferro-legacy-alias_<version>_<arch>.deb   (optional, never pulled in by default)
#       /usr/lib/<multiarch>/libnccl-net.so -> libnccl-net-ferro.so, for NCCL <= 2.20 without
#       NCCL_NET_PLUGIN; dpkg refuses to install it over another package's libnccl-net.so.
#
# Built with dpkg-deb from a staged tree rather than cargo-deb: dpkg-deb ships with dpkg on every
# Debian machine, while cargo-deb would be compiled from crates.io on each fresh CI machine, and
# it has no natural way to build the opt-in alias as a second package.
#
# The release package holds the portable build (scripts/build-portable.sh: glibc symbol versions
# no newer than 2.17), so the plugin the installer copies into a container loads in images with an
# older glibc than the host's; the dev profile packages the native debug build.
#
# Environment: FERRO_DEB_PROFILE  what to package: release (default, the portable build), dev (the
#                                 native debug build) or native-release (the native release build).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PROFILE="${FERRO_DEB_PROFILE:-release}"
case "$PROFILE" in
  release)
    portable="$(scripts/build-portable.sh "$(uname -m)")"
    LIB="$portable/lib/libnccl-net-ferro.so"
    DOCTOR="$portable/bin/nccl-net-doctor"
    ;;
  native-release)
    cargo build --release -p nccl-net-plugin -p nccl-net-doctor >&2
    LIB=target/release/libnccl_net_ferro.so
    DOCTOR=target/release/nccl-net-doctor
    ;;
  dev|debug)
    cargo build -p nccl-net-plugin -p nccl-net-doctor >&2
    LIB=target/debug/libnccl_net_ferro.so
    DOCTOR=target/debug/nccl-net-doctor
    ;;
  *) echo "FERRO_DEB_PROFILE must be release, native-release or dev" >&2; exit 2 ;;
esac

VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
ARCH="$(dpkg --print-architecture)"
case "$ARCH" in
  amd64) TRIPLET=x86_64-linux-gnu ;;
  arm64) TRIPLET=aarch64-linux-gnu ;;
  ppc64el) TRIPLET=powerpc64le-linux-gnu ;;
  *) TRIPLET="$(gcc -print-multiarch)" ;;
esac
[[ -n "$VERSION" && -n "$TRIPLET" ]] || { echo "cannot tell the version or the multiarch triplet" >&2; exit 1; }

# The newest glibc symbol version the two binaries need: the package's libc6 dependency.
GLIBC="$( { objdump -p "$LIB" "$DOCTOR" | sed -n '/^Version References:/,/^$/p'; objdump -T "$LIB" "$DOCTOR"; } \
  | grep -o 'GLIBC_[0-9][0-9.]*[0-9]' | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
[[ -n "$GLIBC" ]] || { echo "cannot read the glibc symbol versions (objdump from binutils)" >&2; exit 1; }

# The shared libraries the two binaries need (NEEDED), each mapped to the package that ships it:
# glibc's to libc6; libgcc_s.so.1 (the native build's unwinder; the portable build links zig's
# statically) to libgcc-s1. Anything else is an error here rather than a missing dependency later.
EXTRA_DEPENDS=""
while read -r needed; do
  case "$needed" in
    libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-*.so.* | ld-linux.so.*) ;;
    libgcc_s.so.1) EXTRA_DEPENDS=", libgcc-s1" ;;
    *) echo "the plugin or the doctor needs $needed: declare its package in $0" >&2; exit 1 ;;
  esac
done < <(objdump -p "$LIB" "$DOCTOR" | awk '$1 == "NEEDED" {print $2}' | sort -u)

OUT=target/deb
STAGE="$OUT/stage"
rm -rf "$STAGE"
mkdir -p "$OUT"

fill() { # template -> control file
  sed -e "s/@VERSION@/$VERSION/g" -e "s/@ARCH@/$ARCH/g" -e "s/@GLIBC@/$GLIBC/g" -e "s/@EXTRA_DEPENDS@/$EXTRA_DEPENDS/g" -e "s/@SIZE@/$2/g" "$1"
}

# The plugin and the doctor.
main="$STAGE/nccl-net-ferro"
install -d "$main/DEBIAN" "$main/usr/lib/$TRIPLET" "$main/usr/bin" "$main/usr/share/doc/nccl-net-ferro"
install -m 0644 "$LIB" "$main/usr/lib/$TRIPLET/libnccl-net-ferro.so"
install -m 0755 "$DOCTOR" "$main/usr/bin/nccl-net-doctor"
install -m 0644 README.md packaging/deb/copyright "$main/usr/share/doc/nccl-net-ferro/"
# Debug information stays in target/; unwinding tables (.eh_frame) are kept by --strip-debug.
objcopy --strip-debug "$main/usr/lib/$TRIPLET/libnccl-net-ferro.so"
objcopy --strip-debug "$main/usr/bin/nccl-net-doctor"
install -m 0644 packaging/deb/triggers "$main/DEBIAN/triggers"
size="$(du -sk --exclude=DEBIAN "$main" | cut -f1)"
fill packaging/deb/control.in "$size" > "$main/DEBIAN/control"

# The opt-in alias.
alias="$STAGE/nccl-net-ferro-legacy-alias"
install -d "$alias/DEBIAN" "$alias/usr/lib/$TRIPLET" "$alias/usr/share/doc/nccl-net-ferro-legacy-alias"
ln -s libnccl-net-ferro.so "$alias/usr/lib/$TRIPLET/libnccl-net.so"
install -m 0644 packaging/deb/copyright "$alias/usr/share/doc/nccl-net-ferro-legacy-alias/"
install -m 0644 packaging/deb/triggers "$alias/DEBIAN/triggers"
fill packaging/deb/control-legacy-alias.in 1 > "$alias/DEBIAN/control"

for pkg in nccl-net-ferro nccl-net-ferro-legacy-alias; do
  deb="$OUT/${pkg}_${VERSION}_${ARCH}.deb"
  dpkg-deb --root-owner-group --build "$STAGE/$pkg" "$deb" >&2
  echo "$deb"
done

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
# Environment: FERRO_DEB_PROFILE  cargo profile to package (default: release).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PROFILE="${FERRO_DEB_PROFILE:-release}"
case "$PROFILE" in
  release) cargo build --release -p nccl-net-plugin -p nccl-net-doctor >&2; OUTDIR=target/release ;;
  dev|debug) cargo build -p nccl-net-plugin -p nccl-net-doctor >&2; OUTDIR=target/debug ;;
  *) echo "FERRO_DEB_PROFILE must be release or dev" >&2; exit 2 ;;
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
GLIBC="$(objdump -T "$OUTDIR/libnccl_net_ferro.so" "$OUTDIR/nccl-net-doctor" \
  | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
[[ -n "$GLIBC" ]] || { echo "cannot read the glibc symbol versions (objdump from binutils)" >&2; exit 1; }

OUT=target/deb
STAGE="$OUT/stage"
rm -rf "$STAGE"
mkdir -p "$OUT"

fill() { # template -> control file
  sed -e "s/@VERSION@/$VERSION/g" -e "s/@ARCH@/$ARCH/g" -e "s/@GLIBC@/$GLIBC/g" -e "s/@SIZE@/$2/g" "$1"
}

# The plugin and the doctor.
main="$STAGE/nccl-net-ferro"
install -d "$main/DEBIAN" "$main/usr/lib/$TRIPLET" "$main/usr/bin" "$main/usr/share/doc/nccl-net-ferro"
install -m 0644 "$OUTDIR/libnccl_net_ferro.so" "$main/usr/lib/$TRIPLET/libnccl-net-ferro.so"
install -m 0755 "$OUTDIR/nccl-net-doctor" "$main/usr/bin/nccl-net-doctor"
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

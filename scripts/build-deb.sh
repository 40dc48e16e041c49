#!/usr/bin/env bash
# Builds the Debian packages into target/deb/ (prints their paths on stdout):
#   nccl-net-ferro_<version>-<revision>_<arch>.deb
#       /usr/lib/<multiarch>/libnccl-net-ferro.so   the plugin (NCCL_NET_PLUGIN=ferro finds it)
#       /usr/bin/nccl-net-doctor                     the host and pod checker
#       /usr/share/man/man1/nccl-net-doctor.1.gz     its manual page
#       /usr/share/doc/nccl-net-ferro/{README.md.gz,copyright,changelog.Debian.gz}
#   nccl-net-ferro-legacy-alias_<version>-<revision>_<arch>.deb   (optional, never pulled in)
#       /usr/lib/<multiarch>/libnccl-net.so -> libnccl-net-ferro.so, the name every NCCL up to
#       2.30 opens when NCCL_NET_PLUGIN is unset; dpkg refuses to install it over another
#       package's libnccl-net.so.
#
# The package version is the top entry of packaging/deb/changelog (upstream version and Debian
# revision); its upstream part must be the workspace version in Cargo.toml. Each package has its
# DEBIAN/md5sums, and packaging/deb/*.lintian-overrides (the tags lintian reports that are right
# for this package, each with its reason); packaging/README.md says how the packages are checked.
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

UPSTREAM="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
# The changelog's first line: `nccl-net-ferro (<upstream>-<revision>) <distribution>; urgency=...`.
VERSION="$(sed -n '1s/^nccl-net-ferro (\([^)]*\)).*/\1/p' packaging/deb/changelog)"
[[ "$VERSION" == "$UPSTREAM"-* ]] \
  || { echo "packaging/deb/changelog's version ($VERSION) is not $UPSTREAM-<revision> (Cargo.toml)" >&2; exit 1; }
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
DEPENDS="libc6 (>= $GLIBC)"
while read -r needed; do
  case "$needed" in
    libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-*.so.* | ld-linux.so.*) ;;
    libgcc_s.so.1) DEPENDS="$DEPENDS, libgcc-s1" ;;
    *) echo "the plugin or the doctor needs $needed: declare its package in $0" >&2; exit 1 ;;
  esac
done < <(objdump -p "$LIB" "$DOCTOR" | awk '$1 == "NEEDED" {print $2}' | sort -u)

OUT=target/deb
STAGE="$OUT/stage"
# The pages of docs/ that users read (the README links them); the developer pages stay in the source.
USER_DOCS="configuration.md log-lines.md doctor.md nccl-versions.md"
rm -rf "$STAGE" "$OUT"/*.deb
mkdir -p "$OUT"

fill() { # template size -> control file
  sed -e "s/@VERSION@/$VERSION/g" -e "s/@ARCH@/$ARCH/g" -e "s/@DEPENDS@/$DEPENDS/g" -e "s/@SIZE@/$2/g" "$1"
}

# What every package's control area and documentation directory hold besides its files: the
# copyright, the changelog and the lintian overrides; then the md5sums of its files and the
# control file. Installed-Size counts everything outside DEBIAN (at least 1 KiB).
finish() { # package-name staged-root control-template
  local name="$1" root="$2" template="$3" size
  install -d "$root/DEBIAN" "$root/usr/share/doc/$name" "$root/usr/share/lintian/overrides"
  install -m 0644 packaging/deb/copyright "$root/usr/share/doc/$name/copyright"
  gzip -9n < packaging/deb/changelog > "$root/usr/share/doc/$name/changelog.Debian.gz"
  install -m 0644 "packaging/deb/$name.lintian-overrides" "$root/usr/share/lintian/overrides/$name"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z \
    | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
  chmod 0644 "$root/DEBIAN/md5sums"
  size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
  fill "$template" "$(( size > 0 ? size : 1 ))" > "$root/DEBIAN/control"
}

# Strips what a distribution strips (debug information, the symbol table, .comment and .note;
# the dynamic symbols and the unwinding tables stay): the debug information stays in target/.
strip_binary() { # file
  objcopy --strip-unneeded --remove-section=.comment --remove-section=.note "$1"
}

# The plugin and the doctor.
main="$STAGE/nccl-net-ferro"
install -d "$main/usr/lib/$TRIPLET" "$main/usr/bin" "$main/usr/share/doc/nccl-net-ferro" "$main/usr/share/man/man1"
install -m 0644 "$LIB" "$main/usr/lib/$TRIPLET/libnccl-net-ferro.so"
install -m 0755 "$DOCTOR" "$main/usr/bin/nccl-net-doctor"
strip_binary "$main/usr/lib/$TRIPLET/libnccl-net-ferro.so"
strip_binary "$main/usr/bin/nccl-net-doctor"
gzip -9n < README.md > "$main/usr/share/doc/nccl-net-ferro/README.md.gz"
# The user pages the README links (settings, log lines, the doctor), beside it as in the source tree.
install -d "$main/usr/share/doc/nccl-net-ferro/docs"
for page in $USER_DOCS; do
  gzip -9n < "docs/$page" > "$main/usr/share/doc/nccl-net-ferro/docs/$page.gz"
  chmod 0644 "$main/usr/share/doc/nccl-net-ferro/docs/$page.gz"
done
gzip -9n < packaging/man/nccl-net-doctor.1 > "$main/usr/share/man/man1/nccl-net-doctor.1.gz"
chmod 0644 "$main/usr/share/doc/nccl-net-ferro/README.md.gz" "$main/usr/share/man/man1/nccl-net-doctor.1.gz"
finish nccl-net-ferro "$main" packaging/deb/control.in

# The opt-in alias.
alias="$STAGE/nccl-net-ferro-legacy-alias"
install -d "$alias/usr/lib/$TRIPLET"
ln -s libnccl-net-ferro.so "$alias/usr/lib/$TRIPLET/libnccl-net.so"
finish nccl-net-ferro-legacy-alias "$alias" packaging/deb/control-legacy-alias.in

for pkg in nccl-net-ferro nccl-net-ferro-legacy-alias; do
  deb="$OUT/${pkg}_${VERSION}_${ARCH}.deb"
  dpkg-deb --root-owner-group --build "$STAGE/$pkg" "$deb" >&2
  echo "$deb"
done

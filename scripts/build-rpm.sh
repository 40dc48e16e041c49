#!/usr/bin/env bash
# Builds the RPM packages into target/rpm/ (prints their paths on stdout) from the portable build
# (scripts/build-portable.sh), with packaging/rpm/nccl-net-ferro.spec:
#   nccl-net-ferro-<version>-<release>.<arch>.rpm
#       /usr/lib64/libnccl-net-ferro.so, /usr/bin/nccl-net-doctor, its manual page,
#       README.md and the two licence files
#   nccl-net-ferro-legacy-alias-<version>-<release>.<arch>.rpm   (opt-in)
#       /usr/lib64/libnccl-net.so -> libnccl-net-ferro.so
#
# rpmbuild compiles nothing: this script stages the binaries, stripped the way
# scripts/build-deb.sh strips them (the two packages hold the same bytes), and rpmbuild -bb
# packages the staged directory. Needs rpmbuild (Debian: apt-get install rpm).
# The spec's Version must be the workspace version in Cargo.toml.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { echo "build-rpm: $*" >&2; exit 1; }
command -v rpmbuild > /dev/null 2>&1 || die "needs rpmbuild (Debian: apt-get install rpm)"

SPEC=packaging/rpm/nccl-net-ferro.spec
UPSTREAM="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
SPEC_VERSION="$(awk '$1 == "Version:" {print $2; exit}' "$SPEC")"
[[ "$SPEC_VERSION" == "$UPSTREAM" ]] || die "$SPEC has Version $SPEC_VERSION, Cargo.toml $UPSTREAM"

case "$(uname -m)" in
  x86_64) arch=x86_64 ;;
  aarch64) arch=aarch64 ;;
  *) die "no portable build for $(uname -m)" ;;
esac
portable="$(scripts/build-portable.sh "$arch")"

OUT="$PWD/target/rpm"
stage="$OUT/stage"
rm -rf "$stage" "$OUT/build" "$OUT"/*.rpm
install -d "$stage" "$OUT/build"
install -m 0755 "$portable/lib/libnccl-net-ferro.so" "$stage/libnccl-net-ferro.so"
install -m 0755 "$portable/bin/nccl-net-doctor" "$stage/nccl-net-doctor"
# The same strip as scripts/build-deb.sh's strip_binary.
for f in "$stage/libnccl-net-ferro.so" "$stage/nccl-net-doctor"; do
  objcopy --strip-unneeded --remove-section=.comment --remove-section=.note "$f"
done
gzip -9n < packaging/man/nccl-net-doctor.1 > "$stage/nccl-net-doctor.1.gz"
install -m 0644 README.md LICENSE-MIT LICENSE-APACHE "$stage/"
# The user pages the README links, as the Debian package ships them (scripts/build-deb.sh).
install -d "$stage/docs"
install -m 0644 docs/configuration.md docs/log-lines.md docs/doctor.md docs/nccl-versions.md "$stage/docs/"

rpmbuild -bb --quiet --target "$arch" \
  --define "_topdir $OUT/build" \
  --define "ferro_stage $stage" \
  "$SPEC" >&2
find "$OUT/build/RPMS" -name '*.rpm' -exec mv -t "$OUT" {} +
for name in nccl-net-ferro nccl-net-ferro-legacy-alias; do
  rpm="$(ls "$OUT/$name-$UPSTREAM"-*."$arch".rpm 2> /dev/null | head -n 1)"
  [[ -n "$rpm" ]] || die "rpmbuild made no $name package"
  echo "$rpm"
done

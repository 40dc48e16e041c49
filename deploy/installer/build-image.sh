#!/usr/bin/env bash
# Builds the multi-architecture installer image from per-architecture artefacts:
#
#   deploy/installer/build-image.sh --amd64 INPUT --arm64 INPUT [--tag TAG] [--push] [--stage-only]
#
# INPUT is one architecture's build of the plugin and the doctor, either
#   - a Debian package from scripts/build-deb.sh (nccl-net-ferro_<version>_<arch>.deb), or
#   - a directory or .tar.gz holding lib/libnccl-net-ferro.so and bin/nccl-net-doctor (the
#     layout of the portable glibc-2.17 builds, target/portable/<arch>/ from scripts/build-portable.sh).
# At least one architecture is needed; the image covers the ones given. The script stages the
# build context in target/installer-image/ (see Containerfile), checks that each binary is an
# ELF file of its architecture whose glibc symbol versions the base image (Debian 12, glibc
# 2.36) provides, then runs `docker buildx build --platform ...` (building the other
# architecture's layer under emulation, binfmt_misc with QEMU, for its apt-get step).
# --stage-only stops after staging and checking (scripts/check-manifests.sh uses it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

BASE_GLIBC=2.36
CONTEXT=target/installer-image
TAG=registry.example.com/ferro/nccl-net-ferro-installer:0.1.0
PUSH=()
STAGE_ONLY=0
declare -A INPUTS=()

die() { echo "build-image: $*" >&2; exit 1; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --amd64 | --arm64) [[ $# -ge 2 && -n "$2" ]] || die "$1 needs an INPUT"; INPUTS[${1#--}]="$2"; shift 2 ;;
    --tag) [[ $# -ge 2 && -n "$2" ]] || die "--tag needs a TAG"; TAG="$2"; shift 2 ;;
    --push) PUSH=(--push); shift ;;
    --stage-only) STAGE_ONLY=1; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) die "unknown argument $1" ;;
  esac
done
[[ ${#INPUTS[@]} -gt 0 ]] || die "give at least one of --amd64 INPUT and --arm64 INPUT"

# ELF e_machine of each architecture, as od prints the two little-endian bytes at offset 18.
declare -A MACHINE=([amd64]="3e 00" [arm64]="b7 00")

check_elf() { # file arch
  [[ "$(od -An -tx1 -N4 "$1" | tr -s ' ' | sed 's/^ //')" == "7f 45 4c 46" ]] || die "$1 is not an ELF file"
  local machine
  machine="$(od -An -tx1 -j18 -N2 "$1" | tr -s ' ' | sed 's/^ //; s/ $//')"
  [[ "$machine" == "${MACHINE[$2]}" ]] || die "$1 is not built for $2 (ELF machine bytes $machine)"
  if command -v readelf > /dev/null; then
    local need
    need="$({ readelf -W --dyn-syms "$1" 2> /dev/null || true; } | { grep -o 'GLIBC_[0-9][0-9.]*' || true; } \
      | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
    if [[ -n "$need" && "$(printf '%s\n%s\n' "$need" "$BASE_GLIBC" | sort -V | tail -n 1)" != "$BASE_GLIBC" ]]; then
      die "$1 needs glibc $need, newer than the base image's $BASE_GLIBC"
    fi
  fi
}

rm -rf "$CONTEXT"
mkdir -p "$CONTEXT"
cp deploy/installer/ferro-installer.sh "$CONTEXT/ferro-installer.sh"
platforms=()
for arch in amd64 arm64; do
  input="${INPUTS[$arch]:-}"
  [[ -n "$input" ]] || continue
  unpack="$CONTEXT/.unpack-$arch"
  mkdir -p "$unpack" "$CONTEXT/$arch"
  case "$input" in
    *.deb)
      dpkg-deb -x "$input" "$unpack"
      lib="$(ls "$unpack"/usr/lib/*/libnccl-net-ferro.so 2> /dev/null | head -n 1)"
      doctor="$unpack/usr/bin/nccl-net-doctor" ;;
    *.tar.gz | *.tgz)
      tar -xzf "$input" -C "$unpack"
      lib="$(find "$unpack" -path '*/lib/libnccl-net-ferro.so' | head -n 1)"
      doctor="$(find "$unpack" -path '*/bin/nccl-net-doctor' | head -n 1)" ;;
    *)
      [[ -d "$input" ]] || die "$input is not a .deb, a .tar.gz or a directory"
      lib="$input/lib/libnccl-net-ferro.so"
      doctor="$input/bin/nccl-net-doctor" ;;
  esac
  [[ -n "$lib" && -f "$lib" ]] || die "no libnccl-net-ferro.so in $input"
  [[ -n "$doctor" && -f "$doctor" ]] || die "no nccl-net-doctor in $input"
  check_elf "$lib" "$arch"
  check_elf "$doctor" "$arch"
  install -m 0644 "$lib" "$CONTEXT/$arch/libnccl-net-ferro.so"
  install -m 0755 "$doctor" "$CONTEXT/$arch/nccl-net-doctor"
  rm -rf "$unpack"
  platforms+=("linux/$arch")
  echo "build-image: staged $arch from $input" >&2
done

if [[ $STAGE_ONLY -eq 1 ]]; then
  echo "$CONTEXT"
  exit 0
fi
platform_list="$(IFS=,; echo "${platforms[*]}")"
docker buildx build --platform "$platform_list" -f deploy/installer/Containerfile -t "$TAG" "${PUSH[@]}" "$CONTEXT"

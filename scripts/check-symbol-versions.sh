#!/usr/bin/env bash
# Checks that ELF binaries need no glibc symbol version newer than a baseline:
#
#   scripts/check-symbol-versions.sh MAX FILE...      e.g. 2.17 target/portable/amd64/lib/*.so
#   scripts/check-symbol-versions.sh --self-test      shows that a newer version is refused
#
# Reads each file's version references (`objdump -p`, the verneed entries the dynamic loader
# checks at load time) and its dynamic symbols' versions (`objdump -T`), and fails, naming the
# symbols, when any GLIBC_x.y is newer than MAX. Prints the newest version found per file.
set -euo pipefail

die() { echo "check-symbol-versions: FAIL: $*" >&2; exit 1; }

# The GLIBC_ versions FILE needs, one a line, oldest first.
glibc_versions() {
  { objdump -p "$1" | sed -n '/^Version References:/,/^$/p'; objdump -T "$1"; } \
    | grep -o 'GLIBC_[0-9][0-9.]*[0-9]' | sed 's/^GLIBC_//' | sort -uV
}

newer_than() { # version max -> true when version > max
  [[ "$1" != "$2" && "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" == "$1" ]]
}

check() { # max file...
  local max="$1" file v newest bad status=0
  shift
  for file in "$@"; do
    [[ -f "$file" ]] || die "$file does not exist"
    objdump -p "$file" > /dev/null 2>&1 || die "$file is not an ELF file objdump can read"
    newest=""
    bad=()
    while read -r v; do
      [[ -n "$v" ]] || continue
      newest="$v"
      newer_than "$v" "$max" && bad+=("$v")
    done < <(glibc_versions "$file")
    [[ -n "$newest" ]] || die "$file names no GLIBC_ symbol version (not a glibc binary?)"
    if [[ ${#bad[@]} -gt 0 ]]; then
      echo "check-symbol-versions: FAIL: $file needs glibc ${bad[*]} (newer than $max):" >&2
      for v in "${bad[@]}"; do
        objdump -T "$file" | grep -E "GLIBC_${v//./\\.}\)?[[:space:]]" | awk '{print "    " $NF " (GLIBC_'"$v"')"}' >&2 || true
      done
      status=1
    else
      echo "check-symbol-versions: ok: $file needs glibc <= $newest (baseline $max)" >&2
    fi
  done
  return "$status"
}

if [[ "${1:-}" == "--self-test" ]]; then
  # A library that calls getrandom (glibc 2.25) must be refused at 2.17 and accepted at 2.25,
  # when this machine's glibc is new enough to link it with that version.
  command -v cc > /dev/null 2>&1 || die "--self-test needs a C compiler"
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/ferro-symver.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  printf '#include <sys/random.h>\nlong f(char *b) { return getrandom(b, 1, 0); }\n' > "$tmp/new.c"
  cc -shared -fPIC -o "$tmp/new.so" "$tmp/new.c"
  objdump -T "$tmp/new.so" | grep -Eq 'GLIBC_2\.25\)?[[:space:]]+getrandom' || die "self-test: cc did not link getrandom@GLIBC_2.25"
  if check 2.17 "$tmp/new.so" 2> "$tmp/log"; then
    die "self-test: a library needing GLIBC_2.25 passed the 2.17 check"
  fi
  grep -q 'getrandom (GLIBC_2.25)' "$tmp/log" || die "self-test: the refusal does not name getrandom: $(cat "$tmp/log")"
  check 2.25 "$tmp/new.so" 2> /dev/null || die "self-test: a library needing GLIBC_2.25 failed the 2.25 check"
  echo "check-symbol-versions: ok: self-test (GLIBC_2.25 refused at 2.17, accepted at 2.25)" >&2
  exit 0
fi

[[ $# -ge 2 ]] || { sed -n '2,9p' "$0" >&2; exit 2; }
[[ "$1" =~ ^[0-9]+(\.[0-9]+)+$ ]] || die "MAX must be a version like 2.17, not $1"
check "$@"

#!/usr/bin/env bash
# Builds the Debian packages (scripts/build-deb.sh), installs them into a scratch root with
# `dpkg-deb -x`, and checks them the way NCCL, a cluster and a distribution use them:
#   1. contents: the plugin under /usr/lib/<multiarch>/ as libnccl-net-ferro.so, the doctor in
#      /usr/bin with its manual page, README, copyright and changelog; the main package does not
#      ship libnccl-net.so; the version carries a Debian revision and matches the changelog; the
#      md5sums match the files; the Description names the ncclNet versions the library exports;
#      lintian reports nothing beyond packaging/deb/*.lintian-overrides (packaging/README.md);
#   2. the plugin has no NEEDED entry for libibverbs (it loads it at run time);
#   3. NCCL-style loading: with the installed library directory on the library path,
#      dlopen("libnccl-net-ferro.so", RTLD_NOW|RTLD_LOCAL) (what NCCL_NET_PLUGIN=ferro does)
#      resolves to the installed file, and dlsym("ncclNetPlugin_v8") finds a table named "Ferro"
#      with its entry points set;
#   4. the opt-in alias package: libnccl-net.so (what NCCL <= 2.20 opens by default) loads the
#      same installed plugin;
#   5. the installed doctor runs: --help, and --json on this host (valid JSON, format_version 2,
#      its verdict.exit_code equal to the process's exit status);
#   6. portability (the release package, built by scripts/build-portable.sh): the packaged plugin
#      and doctor need no glibc symbol version newer than 2.17 (scripts/check-symbol-versions.sh,
#      with its self-test that a newer one is refused), every shared library they need (NEEDED)
#      is declared in Depends, and both load and run in an old Debian root
#      (scripts/check-old-root.sh), where a native build of the plugin is refused;
#   7. the RPM packages (scripts/build-rpm.sh, packaging/rpm/): rpmlint reports nothing beyond
#      packaging/rpm/nccl-net-ferro.rpmlintrc; they hold the same plugin and doctor bytes as the
#      Debian package; they require glibc >= 2.17 and only recommend libibverbs; the alias
#      cannot be installed without its main package; `rpm --root` installs both into a scratch
#      root, where `rpm -V` verifies them, the plugin loads as NCCL loads it (by name and through
#      the alias), and it loads and the doctor runs in the old Debian root as in 6.
#
# Environment: FERRO_DEB_PROFILE (see scripts/build-deb.sh); the portability checks of 6 and the
# RPM checks of 7 apply to the default release profile only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fail() { echo "check-package: FAIL: $*" >&2; exit 1; }
ok() { echo "check-package: ok: $*" >&2; }

mapfile -t debs < <(scripts/build-deb.sh)
[[ ${#debs[@]} -eq 2 ]] || fail "expected two packages, got: ${debs[*]:-none}"
main="${debs[0]}"
legacy="${debs[1]}"

ARCH="$(dpkg --print-architecture)"
libdir="$(dpkg-deb -c "$main" | awk '{print $6}' | grep -o '^\./usr/lib/[^/]*/libnccl-net-ferro\.so$' | sed 's|^\./||; s|/libnccl-net-ferro\.so$||')"
[[ -n "$libdir" ]] || fail "$main has no usr/lib/<multiarch>/libnccl-net-ferro.so"
contents="$(dpkg-deb -c "$main" | awk '{print $6}')"
for f in "./$libdir/libnccl-net-ferro.so" ./usr/bin/nccl-net-doctor \
  ./usr/share/doc/nccl-net-ferro/README.md.gz ./usr/share/doc/nccl-net-ferro/copyright; do
  grep -qxF "$f" <<<"$contents" || fail "$main lacks $f"
done
if grep -q 'libnccl-net\.so$' <<<"$contents"; then
  fail "$main ships libnccl-net.so: the alias must stay in the opt-in package"
fi
[[ "$(dpkg-deb -f "$main" Architecture)" == "$ARCH" ]] || fail "wrong Architecture"
for f in ./usr/share/man/man1/nccl-net-doctor.1.gz ./usr/share/doc/nccl-net-ferro/changelog.Debian.gz; do
  grep -qxF "$f" <<<"$contents" || fail "$main lacks $f"
done
upstream="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
version="$(dpkg-deb -f "$main" Version)"
[[ "${version%-*}" == "$upstream" && "${version##*-}" =~ ^[0-9]+$ ]] || fail "Version $version is not $upstream-<Debian revision>"
[[ "$version" == "$(sed -n '1s/^nccl-net-ferro (\([^)]*\)).*/\1/p' packaging/deb/changelog)" ]] \
  || fail "Version $version is not the top entry of packaging/deb/changelog"
maintainer="$(dpkg-deb -f "$main" Maintainer)"
[[ "$(dpkg-deb -f "$legacy" Maintainer)" == "$maintainer" ]] || fail "the two packages name different maintainers"
grep -qF -- " -- $maintainer  " packaging/deb/changelog || fail "packaging/deb/changelog is not signed by $maintainer"
grep -qF " $maintainer - $version" packaging/rpm/nccl-net-ferro.spec \
  || fail "the spec's %changelog has no $version entry by $maintainer"
dpkg-deb -f "$main" Depends | grep -q '^libc6 (>= ' || fail "no libc6 dependency"
grep -qx "./$libdir/libnccl-net.so" < <(dpkg-deb -c "$legacy" | awk '{print $6}') \
  || fail "$legacy lacks $libdir/libnccl-net.so"
[[ "$(dpkg-deb -f "$legacy" Depends)" == "nccl-net-ferro (= $(dpkg-deb -f "$main" Version))" ]] \
  || fail "$legacy must depend on exactly this nccl-net-ferro"
ok "package contents ($main, $legacy)"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/ferro-deb-root.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
dpkg-deb -x "$main" "$scratch/main"
mkdir -p "$scratch/both"
dpkg-deb -x "$main" "$scratch/both"
dpkg-deb -x "$legacy" "$scratch/both"
ok "installed into scratch roots under $scratch"

# The control area: md5sums that match every file (and only the files), as dpkg --verify uses them.
for pkg in "$main" "$legacy"; do
  name="$(dpkg-deb -f "$pkg" Package)"
  mkdir -p "$scratch/ctl/$name" "$scratch/files/$name"
  dpkg-deb -e "$pkg" "$scratch/ctl/$name"
  dpkg-deb -x "$pkg" "$scratch/files/$name"
  [[ -s "$scratch/ctl/$name/md5sums" ]] || fail "$name has no md5sums"
  (cd "$scratch/files/$name" && md5sum --quiet -c "$scratch/ctl/$name/md5sums") >&2 || fail "$name: md5sums do not match its files"
  diff <(awk '{print $2}' "$scratch/ctl/$name/md5sums" | sort) \
    <(cd "$scratch/files/$name" && find . -type f -printf '%P\n' | sort) >&2 || fail "$name: md5sums do not list exactly its files"
done
ok "md5sums match both packages' files"

# The ncclNet versions the Description states are the tables the library exports.
tables="$(objdump -T "$scratch/main/$libdir/libnccl-net-ferro.so" | grep -o 'ncclNetPlugin_v[0-9]*$' | sed 's/.*_v//' | sort -n)"
[[ -n "$tables" ]] || fail "the plugin exports no ncclNetPlugin_v* table"
span="v$(head -n 1 <<<"$tables") to v$(tail -n 1 <<<"$tables")"
# (Outputs are read into variables before grep -q looks at them: grep -q stops reading at the
# first match, and under pipefail the writer's SIGPIPE would fail the check.)
text="$(dpkg-deb -f "$main" Description | tr '\n' ' ')"
grep -q "ncclNet $span tables" <<<"$text" || fail "the Description does not say the library exports the ncclNet $span tables"
text="$(tr '\n' ' ' < packaging/rpm/nccl-net-ferro.spec)"
grep -q "ncclNet $span tables" <<<"$text" || fail "the spec's %description does not say the library exports the ncclNet $span tables"
ok "both packages' descriptions name the exported tables (ncclNet $span)"

# The manual page documents every option the doctor's --help lists (as a whole word: --root is
# not documented by --sysfs-root).
page="$(zcat "$scratch/main/usr/share/man/man1/nccl-net-doctor.1.gz" | sed 's/\\-/-/g')"
for opt in $("$scratch/main/usr/bin/nccl-net-doctor" --help | grep -oE '(^|[[ ])--[a-z][a-z-]*' | sed 's/^.*--/--/' | sort -u); do
  grep -qE -- "(^|[^a-z-])$opt([^a-z-]|\$)" <<<"$page" || fail "the manual page does not document $opt"
done
ok "the manual page documents every option of --help"

# lintian: every tag it reports is overridden with its reason (packaging/deb/*.lintian-overrides).
# The one override that may go unused is the spelling one: it matches bytes of machine code.
if ! command -v lintian > /dev/null 2>&1; then
  fail "needs lintian (apt-get install lintian)"
fi
set +e
lintian --fail-on error,warning --display-info --pedantic --tag-display-limit 0 "$main" "$legacy" > "$scratch/lintian.log" 2>&1
rc=$?
set -e
unexplained="$(grep -E '^[EWIPX]: ' "$scratch/lintian.log" | grep -vE '^I: nccl-net-ferro: unused-override spelling-error-in-binary ' || true)"
if [[ $rc -ne 0 || -n "$unexplained" ]]; then
  cat "$scratch/lintian.log" >&2
  fail "lintian reports tags that are neither fixed nor overridden with a reason"
fi
ok "lintian: no tag beyond the explained overrides"

if objdump -p "$scratch/main/$libdir/libnccl-net-ferro.so" | grep NEEDED | grep -q libibverbs; then
  fail "the plugin links libibverbs at build time (NEEDED); it must load it at run time"
fi
ok "no NEEDED libibverbs"

# dlopen by name through the library path, as NCCL does, then dlsym the table.
load_check() { # root, soname, [library directory inside the root: the package's by default]
  LD_LIBRARY_PATH="$1/${3:-$libdir}" python3 - "$1" "$2" <<'PY'
import ctypes, os, sys
root, soname = sys.argv[1], sys.argv[2]
lib = ctypes.CDLL(soname, mode=os.RTLD_NOW | os.RTLD_LOCAL)
# ncclNet_v8_t (152 bytes): `const char *name`, then 18 function pointers, init .. closeListen
# (16, all required) and getDeviceMr, irecvConsumed (optional: NCCL accepts NULL).
table = (ctypes.c_void_p * 19).in_dll(lib, "ncclNetPlugin_v8")
name = ctypes.c_char_p(table[0]).value
if name != b"Ferro":
    sys.exit(f"ncclNetPlugin_v8.name is {name!r}, not b'Ferro'")
missing = [i for i in range(1, 17) if not table[i]]
if missing:
    sys.exit(f"ncclNetPlugin_v8 has NULL entries at {missing}")
maps = [l.split()[-1] for l in open("/proc/self/maps") if "libnccl-net" in l]
real = {os.path.realpath(p) for p in maps}
want = os.path.realpath(os.path.join(root, os.environ["LD_LIBRARY_PATH"].split(":")[0][len(root) + 1:], "libnccl-net-ferro.so"))
if real != {want}:
    sys.exit(f"{soname} resolved to {sorted(real)}, not the installed {want}")
print(f"{soname} -> {want}: table {name.decode()}, init..closeListen set")
PY
}
load_check "$scratch/main" libnccl-net-ferro.so >&2 || fail "NCCL-style load of libnccl-net-ferro.so"
ok "NCCL-style load of the installed libnccl-net-ferro.so"
load_check "$scratch/both" libnccl-net.so >&2 || fail "NCCL-style load through the libnccl-net.so alias"
ok "the opt-in alias libnccl-net.so loads the same plugin"
if LD_LIBRARY_PATH="$scratch/main/$libdir" python3 -c 'import ctypes; ctypes.CDLL("libnccl-net.so")' 2>/dev/null; then
  # Another libnccl-net.so on this machine would be found instead: say so, it is not ours.
  echo "check-package: note: this machine has another libnccl-net.so on its library path" >&2
fi

doctor="$scratch/main/usr/bin/nccl-net-doctor"
"$doctor" --help | grep -q 'Exit status' || fail "installed doctor --help"
set +e
"$doctor" --json > "$scratch/doctor.json"
rc=$?
set -e
python3 - "$scratch/doctor.json" "$rc" <<'PY' || fail "installed doctor --json"
import json, sys
r = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
assert r["format_version"] == 2, r["format_version"]
assert r["verdict"]["exit_code"] == rc, (r["verdict"]["exit_code"], rc)
assert rc in (0, 1, 3), rc
assert isinstance(r["node"]["checks"], list) and r["node"]["checks"], "no node checks"
PY
ok "installed nccl-net-doctor runs (--json exit status $rc)"

# Every NEEDED library of the packaged binaries is declared: glibc's by libc6, libgcc_s by libgcc-s1.
depends="$(dpkg-deb -f "$main" Depends)"
while read -r needed; do
  case "$needed" in
    libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux-*.so.* | ld-linux.so.*) want=libc6 ;;
    libgcc_s.so.1) want=libgcc-s1 ;;
    *) fail "the packaged binaries need $needed, which no known package provides" ;;
  esac
  grep -Eq "(^|, )$want( |,|$)" <<<"$depends" || fail "$needed is needed but Depends ($depends) lacks $want"
done < <(objdump -p "$scratch/main/$libdir/libnccl-net-ferro.so" "$doctor" | awk '$1 == "NEEDED" {print $2}' | sort -u)
ok "Depends ($depends) declares every NEEDED library"

# 7. The RPM packages, built from the same portable build; DEB-PLUGIN and DEB-DOCTOR are the
# Debian package's files, which the RPM's must equal byte for byte.
check_rpm() { # deb-plugin deb-doctor
  local rpms rpm_main rpm_alias root requires files f
  command -v rpmbuild > /dev/null 2>&1 && command -v rpmlint > /dev/null 2>&1 \
    || fail "needs rpmbuild and rpmlint (apt-get install rpm rpmlint)"
  mapfile -t rpms < <(scripts/build-rpm.sh)
  [[ ${#rpms[@]} -eq 2 ]] || fail "expected two RPM packages, got: ${rpms[*]:-none}"
  rpm_main="${rpms[0]}"
  rpm_alias="${rpms[1]}"

  rpmlint -c packaging/rpm/rpmlint.toml -r packaging/rpm/nccl-net-ferro.rpmlintrc \
    "$rpm_main" "$rpm_alias" packaging/rpm/nccl-net-ferro.spec > "$scratch/rpmlint.log" 2>&1 || true
  grep -q ' 0 errors, 0 warnings' "$scratch/rpmlint.log" \
    || { cat "$scratch/rpmlint.log" >&2; fail "rpmlint reports what packaging/rpm/nccl-net-ferro.rpmlintrc does not explain"; }
  ok "rpmlint: no report beyond the explained filters"

  requires="$(rpm -qpR "$rpm_main" 2> /dev/null)"
  grep -qx 'glibc >= 2.17' <<<"$requires" || fail "$rpm_main does not require glibc >= 2.17: $requires"
  if grep -E 'GLIBC_2\.(1[89]|[2-9][0-9])' <<<"$requires"; then
    fail "$rpm_main requires a glibc symbol version newer than 2.17"
  fi
  if grep -qi ibverbs <<<"$requires"; then
    fail "$rpm_main requires libibverbs (it is loaded at run time: Recommends only)"
  fi
  [[ "$(rpm -qp --recommends "$rpm_main" 2> /dev/null)" == 'libibverbs >= 34' ]] || fail "$rpm_main does not recommend libibverbs >= 34"
  [[ "$(rpm -qp --qf '%{LICENSE}' "$rpm_main" 2> /dev/null)" == 'MIT OR Apache-2.0' ]] || fail "$rpm_main's License is not MIT OR Apache-2.0"
  files="$(rpm -qpl "$rpm_main" 2> /dev/null)"
  for f in LICENSE-MIT LICENSE-APACHE; do
    grep -qxF "/usr/share/licenses/nccl-net-ferro/$f" <<<"$files" || fail "$rpm_main lacks the %license file $f"
  done
  [[ -n "$(rpm -qp --changelog "$rpm_main" 2> /dev/null)" ]] || fail "$rpm_main has no %changelog"
  for f in "$rpm_main" "$rpm_alias"; do
    [[ "$(rpm -qp --qf '%{PAYLOADCOMPRESSOR} %{FILEDIGESTALGO}' "$f" 2> /dev/null)" == "gzip 8" ]] \
      || fail "$f is not gzip-compressed with SHA-256 digests (what rpm 4.11 on RHEL 7 reads)"
  done
  if grep -q 'libnccl-net\.so$' <<<"$files"; then
    fail "$rpm_main ships libnccl-net.so: the alias must stay in the opt-in package"
  fi
  ok "RPM metadata: Requires glibc >= 2.17 and no newer symbol version, Recommends libibverbs, licence, changelog, gzip payload"

  # The alias alone: rpm must refuse it for want of this very nccl-net-ferro.
  root="$scratch/rpm-alias-only"
  mkdir -p "$root"
  if rpm --root "$root" -i "$rpm_alias" > "$scratch/rpm-alias.log" 2>&1; then
    fail "the RPM alias package installed without nccl-net-ferro"
  fi
  grep -q "nccl-net-ferro(.*) = $(rpm -qp --qf '%{VERSION}-%{RELEASE}' "$rpm_main" 2> /dev/null) is needed" "$scratch/rpm-alias.log" \
    || { cat "$scratch/rpm-alias.log" >&2; fail "the RPM alias package was refused for another reason"; }
  ok "the RPM alias package needs its exact nccl-net-ferro"

  # Installed with rpm into a scratch root (--nodeps: the root has no glibc package of its own).
  root="$scratch/rpm-root"
  mkdir -p "$root"
  rpm --root "$root" --nodeps -i "$rpm_main" "$rpm_alias" > "$scratch/rpm-install.log" 2>&1 \
    || { cat "$scratch/rpm-install.log" >&2; fail "rpm -i into $root"; }
  rpm --root "$root" -V --nodeps nccl-net-ferro nccl-net-ferro-legacy-alias >&2 || fail "rpm -V of the installed packages"
  local rpm_libdir=usr/lib64
  [[ "$(uname -m)" == x86_64 || "$(uname -m)" == aarch64 ]] || fail "no RPM library directory known for $(uname -m)"
  cmp "$root/$rpm_libdir/libnccl-net-ferro.so" "$1" || fail "the RPM's plugin differs from the Debian package's"
  cmp "$root/usr/bin/nccl-net-doctor" "$2" || fail "the RPM's doctor differs from the Debian package's"
  ok "rpm installed both packages into $root (rpm -V clean; the same plugin and doctor as the Debian package)"
  load_check "$root" libnccl-net-ferro.so "$rpm_libdir" >&2 || fail "NCCL-style load of the RPM's libnccl-net-ferro.so"
  load_check "$root" libnccl-net.so "$rpm_libdir" >&2 || fail "NCCL-style load through the RPM's libnccl-net.so alias"
  "$root/usr/bin/nccl-net-doctor" --help | grep -q 'Exit status' || fail "the RPM's doctor --help"
  ok "NCCL-style load of the RPM's plugin, by name and through the alias; its doctor runs"
  scripts/check-old-root.sh "$root/$rpm_libdir/libnccl-net-ferro.so" "$root/usr/bin/nccl-net-doctor" \
    || fail "the RPM's plugin and doctor in an old Debian root"
  ok "the RPM's plugin loads and its doctor runs in an old Debian root"
}

if [[ "${FERRO_DEB_PROFILE:-release}" == release ]]; then
  scripts/check-symbol-versions.sh --self-test
  scripts/check-symbol-versions.sh 2.17 "$scratch/main/$libdir/libnccl-net-ferro.so" "$doctor" \
    || fail "the packaged plugin or doctor needs a glibc newer than 2.17"
  [[ "$depends" =~ libc6\ \(\>=\ 2\.([0-9]+)[^0-9] ]] && [[ "${BASH_REMATCH[1]}" -le 17 ]] \
    || fail "Depends ($depends) asks for a libc6 newer than 2.17"
  ok "the packaged binaries need glibc <= 2.17"
  # The native debug build (test-all.sh builds it first), when there is one, is the control.
  native=()
  [[ -f target/debug/libnccl_net_ferro.so ]] && native=(target/debug/libnccl_net_ferro.so)
  scripts/check-old-root.sh "$scratch/main/$libdir/libnccl-net-ferro.so" "$doctor" "${native[@]}" \
    || fail "the packaged plugin and doctor in an old Debian root"
  ok "the packaged plugin loads and the doctor runs in an old Debian root"

  check_rpm "$scratch/main/$libdir/libnccl-net-ferro.so" "$doctor"
else
  echo "check-package: note: FERRO_DEB_PROFILE=$FERRO_DEB_PROFILE is a native build: no portability or RPM checks" >&2
fi
echo "check-package: all checks passed" >&2

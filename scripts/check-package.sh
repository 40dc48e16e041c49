#!/usr/bin/env bash
# Builds the Debian packages (scripts/build-deb.sh), installs them into a scratch root with
# `dpkg-deb -x`, and checks them the way NCCL and a cluster use them:
#   1. contents: the plugin under /usr/lib/<multiarch>/ as libnccl-net-ferro.so, the doctor in
#      /usr/bin, README and copyright; the main package does not ship libnccl-net.so;
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
#      (scripts/check-old-root.sh), where a native build of the plugin is refused.
#
# Environment: FERRO_DEB_PROFILE (see scripts/build-deb.sh); the portability checks of 6 apply
# to the default release profile only.
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
  ./usr/share/doc/nccl-net-ferro/README.md ./usr/share/doc/nccl-net-ferro/copyright; do
  grep -qxF "$f" <<<"$contents" || fail "$main lacks $f"
done
if grep -q 'libnccl-net\.so$' <<<"$contents"; then
  fail "$main ships libnccl-net.so: the alias must stay in the opt-in package"
fi
[[ "$(dpkg-deb -f "$main" Architecture)" == "$ARCH" ]] || fail "wrong Architecture"
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

if objdump -p "$scratch/main/$libdir/libnccl-net-ferro.so" | grep NEEDED | grep -q libibverbs; then
  fail "the plugin links libibverbs at build time (NEEDED); it must load it at run time"
fi
ok "no NEEDED libibverbs"

# dlopen by name through the library path, as NCCL does, then dlsym the table.
load_check() { # root, soname
  LD_LIBRARY_PATH="$1/$libdir" python3 - "$1" "$2" <<'PY'
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
else
  echo "check-package: note: FERRO_DEB_PROFILE=$FERRO_DEB_PROFILE is a native build: no portability checks" >&2
fi
echo "check-package: all checks passed" >&2

#!/usr/bin/env bash
# Runs inside the soft-RoCE guest (scripts/test-all.sh boots it with this): every test binary
# listed in $1, one after the other (rxe drops completions when many QPs are busy at once, so
# tests run serially), then a short benchmark run. Prints a closing summary line and exits
# non-zero if any binary failed.
set -uo pipefail
list="$1"
failed=()
total=0
while read -r exe; do
  [ -n "$exe" ] || continue
  total=$((total + 1))
  name="$(basename "$exe")"
  printf '\n--- %s (in the guest)\n' "$name"
  if ! "$exe" --test-threads=1; then
    failed+=("$name")
  fi
done < "$list"
# The benchmark, briefly, so it cannot rot: a few sizes next to perftest, no timing assertions.
total=$((total + 1))
printf '\n--- benchmark smoke run: benches/compare.sh --quick (in the guest, no timing assertions)\n'
if ! FERRO_BENCH="${FERRO_BENCH:-target/debug/ferro-bench}" bash benches/compare.sh --quick; then
  failed+=("benchmark-smoke")
fi
# The paced mode of the instruction count (benches/count.sh --pace-us), briefly: 8-byte
# messages whose every data-path call is preceded by a pause; the run must complete.
total=$((total + 1))
printf '\n--- benchmark smoke run: ferro-bench bw --pace-us 200 (in the guest)\n'
if ! "${FERRO_BENCH:-target/debug/ferro-bench}" run bw --dev rxe0 --sizes 8 --window 8 --iters 200 \
  --pace-us 200 -q; then
  failed+=("benchmark-paced-smoke")
fi
# The paired runs (ferro-bench lat|bw --against, run by benches/versus.sh), briefly: the
# plugin against a copy of itself loaded from another path (two instances, as with two
# plugins); the run must complete and print its row.
total=$((total + 1))
printf '\n--- benchmark smoke run: ferro-bench lat --against (in the guest)\n'
bench="${FERRO_BENCH:-target/debug/ferro-bench}"
twin="$(mktemp -d)/twin.so"
if ! cp "${FERRO_PLUGIN_SO:-$(dirname "$bench")/libnccl_net_ferro.so}" "$twin" ||
  ! "$bench" run lat --dev rxe0 --sizes 8 --post-ahead 0 --against "$twin" --time 0.3 \
    --block 20 -q | tee /dev/stderr | grep -Eq '^ +8 B +[0-9]+ +[0-9.]+ +[0-9.]+' ||
  ! "$bench" run bw --dev rxe0 --sizes 64K --window 4 --against "$twin" --time 0.3 \
    --block 8 -q | tee /dev/stderr | grep -Eq '^ +64 KiB +[0-9]+ +[0-9.]+ +[0-9.]+'; then
  failed+=("benchmark-paired-smoke")
fi
if [ "${#failed[@]}" -gt 0 ]; then
  printf '\nguest: %d of %d test binaries/steps failed: %s\n' "${#failed[@]}" "$total" "${failed[*]}"
  exit 1
fi
printf '\nguest: all %d test binaries/steps passed\n' "$total"

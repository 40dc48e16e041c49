#!/usr/bin/env bash
# The project's whole test suite, as run by `make test` and CI:
#   1. provision the machine (packages, soft-RoCE guest kernel) if needed;
#   2. style: rustfmt and clippy (warnings are errors), and no module import circles (layout),
#      before anything slow;
#   3. host tests: unit tests of every crate and the host_* integration tests (no RDMA needed);
#      the loom models of the cross-thread rules;
#      then the Debian and RPM packages (the portable glibc-2.17 build; lintian and rpmlint;
#      each installed into a scratch root, loaded as NCCL does, its symbol versions checked,
#      loaded in an old Debian root) and
#      the Kubernetes manifests (API schemas, custom resources, installer script);
#   4. guest tests: the guest_* integration tests, built here and run inside one boot of the
#      soft-RoCE QEMU guest (rxe0 on lo, rxe1 on a dummy netdev).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

step "provisioning (packages, guest kernel)"
testbed/host/provision.sh

step "style: cargo fmt --check, cargo clippy -D warnings, module import circles"
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  command -v rustup >/dev/null 2>&1 && rustup component add rustfmt clippy >&2 || true
  cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1 || {
    echo "rustfmt and clippy are needed (rustup component add rustfmt clippy)" >&2
    exit 1
  }
fi
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# The test-only fault injection and the guest test that needs it (never in the library NCCL loads).
cargo clippy -p nccl-net-plugin --all-targets --features test-faults -- -D warnings
python3 scripts/check-module-cycles.py

step "building the plugin and tools"
cargo build --workspace --all-targets

step "host tests"
cargo test --workspace --lib --bins --test 'host_*'

step "model checks: the cross-thread rules under every interleaving (loom)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p nccl-net-plugin --lib receivers::model

step "packages: build the .deb and the .rpm (portable build), lintian and rpmlint, install each into a scratch root, load the plugin as NCCL does, glibc 2.17 check, old Debian root"
scripts/check-package.sh

step "Kubernetes manifests: API schemas (offline), custom resources, installer script"
scripts/check-manifests.sh

step "building guest tests"
mkdir -p target/guest-out
# With the test-only fault injection (`test-faults`, inert unless a test calls it), which
# nccl-net-plugin's guest_fault_mqp needs; the package step above built the shipped library
# without it.
cargo test --workspace --features nccl-net-plugin/test-faults --no-run --test 'guest_*' --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' > target/guest-out/guest-tests.list
sed 's/^/    /' target/guest-out/guest-tests.list >&2
[ -s target/guest-out/guest-tests.list ] || { echo "no guest tests were built" >&2; exit 1; }

step "guest tests (soft-RoCE, one boot)"
testbed/host/run-in-guest.sh --timeout "${FERRO_GUEST_TEST_TIMEOUT:-2700}" -- testbed/guest/run-tests.sh target/guest-out/guest-tests.list

#!/usr/bin/env bash
# Validates deploy/kubernetes/ and the installer image's inputs, offline:
#   1. every core manifest (deploy/kubernetes/*.yaml) against the Kubernetes API schemas with
#      kubernetes-validate (PyPI, schemas bundled; strict: unknown fields are errors), for the
#      Kubernetes versions in FERRO_K8S_VERSIONS;
#   2. custom resources (deploy/kubernetes/crd/*.yaml: Multus NetworkAttachmentDefinition) are not
#      in those schemas: their shape is checked here instead (apiVersion, kind, name, the
#      resourceName annotation the job requests, and a CNI config that parses as JSON);
#   3. cross-references: the job requests the resource the network attachment names, mounts the
#      hostPath the DaemonSet installs into, and sets the NCCL variables deploy/README.md lists;
#   4. the installer script parses (sh -n), and its `install` step copies the packaged files
#      into a scratch host directory (after scripts/check-package.sh built the package).
#
# kubernetes-validate is installed into a virtual environment under target/ (Debian's Python
# refuses system-wide pip installs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VERSIONS="${FERRO_K8S_VERSIONS:-1.31.0 1.34.0 1.37.0}"
KV_SPEC="${FERRO_KUBERNETES_VALIDATE_SPEC:-kubernetes-validate==1.37.0}"
VENV=target/kubeval-venv

fail() { echo "check-manifests: FAIL: $*" >&2; exit 1; }
ok() { echo "check-manifests: ok: $*" >&2; }

if ! "$VENV/bin/python" -c 'import kubernetes_validate' 2>/dev/null; then
  python3 -m venv "$VENV" >&2 || fail "python3 -m venv (install python3-venv)"
  "$VENV/bin/pip" install -q "$KV_SPEC" >&2 || fail "pip install $KV_SPEC"
fi

shopt -s nullglob
core=(deploy/kubernetes/*.yaml)
crds=(deploy/kubernetes/crd/*.yaml)
[[ ${#core[@]} -ge 2 ]] || fail "no manifests in deploy/kubernetes"
for v in $VERSIONS; do
  "$VENV/bin/kubernetes-validate" --strict --quiet -k "$v" "${core[@]}" >&2 \
    || fail "schema validation for Kubernetes $v"
  ok "${core[*]} valid for Kubernetes $v (strict)"
done

"$VENV/bin/python" - "${crds[@]}" <<'PY' || fail "custom resources and cross-references"
import json, sys, yaml
docs = {}
for path in ["deploy/kubernetes/installer-daemonset.yaml", "deploy/kubernetes/training-job.yaml", *sys.argv[1:]]:
    for d in yaml.safe_load_all(open(path)):
        if d:
            docs[(d["kind"], d["metadata"]["name"])] = d
nad = docs[("NetworkAttachmentDefinition", "sriov-rdma-net")]
assert nad["apiVersion"] == "k8s.cni.cncf.io/v1", nad["apiVersion"]
resource = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
cni = json.loads(nad["spec"]["config"])
types = [p["type"] for p in cni.get("plugins", [cni])]
assert "sriov" in types, types
assert any(p.get("ipam", {}).get("type") for p in cni.get("plugins", [cni])), "net1 needs an IPAM (an address for NCCL_SOCKET_IFNAME)"

job = docs[("Job", "ferro-allreduce")]["spec"]["template"]
assert job["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == nad["metadata"]["name"]
c = job["spec"]["containers"][0]
env = {e["name"]: e.get("value") for e in c["env"]}
assert env["NCCL_SOCKET_IFNAME"] == "net1" and env["NCCL_DEBUG"] == "INFO", env
assert env["NCCL_NET_PLUGIN"] == "/opt/ferro/lib/libnccl-net-ferro.so", env
assert resource in c["resources"]["limits"], (resource, c["resources"]["limits"])
assert "IPC_LOCK" in c["securityContext"]["capabilities"]["add"]
vols = {v["name"]: v for v in job["spec"]["volumes"]}
mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
assert vols[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
ds = docs[("DaemonSet", "ferro-installer")]["spec"]["template"]["spec"]
ds_vols = {v["name"]: v for v in ds["volumes"]}
install_mount = ds["initContainers"][0]["volumeMounts"][0]
assert ds_vols[install_mount["name"]]["hostPath"]["path"] == vols[mounts["/opt/ferro"]]["hostPath"]["path"] == "/opt/ferro"
probe = ds["containers"][0]["readinessProbe"]["exec"]["command"]
assert probe[-1] == "ready", probe
print("custom resources and cross-references ok", file=sys.stderr)
PY
ok "NetworkAttachmentDefinition shape and cross-references (not covered by the API schemas)"

sh -n deploy/installer/ferro-installer.sh || fail "installer script does not parse"
grep -q '^COPY deploy/installer/ferro-installer.sh ' deploy/installer/Containerfile || fail "Containerfile does not install the script"
deb="$(ls target/deb/nccl-net-ferro_*.deb 2>/dev/null | head -n 1)"
if [[ -n "$deb" ]]; then
  grep -q "ARG FERRO_DEB=target/deb/$(basename "$deb")" deploy/installer/Containerfile \
    || fail "Containerfile's FERRO_DEB default is not $(basename "$deb")"
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/ferro-installer.XXXXXX")"
  trap 'rm -rf "$scratch"' EXIT
  dpkg-deb -x "$deb" "$scratch/image"
  FERRO_HOST_DIR="$scratch/host/opt/ferro" \
    FERRO_LIB_SRC="$(ls "$scratch"/image/usr/lib/*/libnccl-net-ferro.so)" \
    FERRO_DOCTOR_SRC="$scratch/image/usr/bin/nccl-net-doctor" \
    sh deploy/installer/ferro-installer.sh install >&2
  cmp "$scratch/host/opt/ferro/lib/libnccl-net-ferro.so" "$scratch"/image/usr/lib/*/libnccl-net-ferro.so \
    || fail "installer copied a different library"
  [[ -x "$scratch/host/opt/ferro/bin/nccl-net-doctor" ]] || fail "installer did not install the doctor"
  ok "installer script installs the packaged plugin and doctor into the host directory"
else
  echo "check-manifests: note: no package in target/deb (run scripts/check-package.sh first); installer copy not exercised" >&2
fi
echo "check-manifests: all checks passed" >&2

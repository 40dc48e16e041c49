#!/usr/bin/env bash
# Validates deploy/ offline:
#   1. every core manifest (deploy/kubernetes/*.yaml but kustomization.yaml) against the
#      Kubernetes API schemas with kubernetes-validate (PyPI, schemas bundled; strict: unknown
#      fields are errors), for the Kubernetes versions in FERRO_K8S_VERSIONS;
#   2. custom resources (deploy/kubernetes/crd/*.yaml: Multus NetworkAttachmentDefinitions, one
#      per rail) are not in those schemas: their shape is checked here instead (apiVersion, kind,
#      name, the resourceName annotation the job requests, a CNI config that parses as JSON);
#   3. the rules the installer and the job keep (deploy/README.md, "What is checked"): readiness
#      never depends on the verdict (no probe), the verdict is an NFD feature file under the
#      project's label domain with no access to Node objects, hostNetwork, tolerations of every
#      taint, system-node-critical, the namespace's Pod Security level, the install directory
#      set in one place (every place holding it is a target of the install-dir component; the
#      kustomizations rendered with kubectl when it is installed), one SR-IOV attachment and
#      resource per rail and GPU, ttlSecondsAfterFinished, publishNotReadyAddresses, the NCCL
#      variables the README lists;
#   4. the installer script: it parses (sh -n); `install` copies into a scratch host directory and
#      names the setting to change when it cannot write there; `publish` writes the feature file
#      (expiry directive, only the project's keys, a failed verdict when the doctor errs or hangs)
#      and posts a well-formed Event; `hold` removes the file on SIGTERM. A fake doctor and a fake
#      curl stand in for the real ones;
#   5. the image build: build-image.sh stages per-architecture inputs, refuses a binary of the
#      wrong architecture, and the Containerfile copies what it staged; with a package in
#      target/deb (scripts/check-package.sh builds it), the packaged plugin and doctor are
#      staged and installed.
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

scratch="$(mktemp -d "${TMPDIR:-/tmp}/ferro-check-manifests.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

shopt -s nullglob
core=()
for f in deploy/kubernetes/*.yaml; do
  [[ "$(basename "$f")" == kustomization.yaml ]] || core+=("$f")
done
crds=(deploy/kubernetes/crd/*.yaml)
[[ ${#core[@]} -ge 2 ]] || fail "no manifests in deploy/kubernetes"
for v in $VERSIONS; do
  "$VENV/bin/kubernetes-validate" --strict --quiet -k "$v" "${core[@]}" >&2 \
    || fail "schema validation for Kubernetes $v"
  ok "${core[*]} valid for Kubernetes $v (strict)"
done

# The kustomizations, rendered by the real tool where it is installed (kubectl has kustomize
# built in); the install-directory rule is also checked below without it.
rendered=()
if command -v kubectl > /dev/null; then
  kubectl kustomize deploy/kubernetes > "$scratch/base.yaml" || fail "kubectl kustomize deploy/kubernetes"
  kubectl kustomize deploy/overlays/cos > "$scratch/cos.yaml" || fail "kubectl kustomize deploy/overlays/cos"
  rendered=("$scratch/base.yaml" "$scratch/cos.yaml")
else
  echo "check-manifests: note: no kubectl; the kustomizations are not rendered (their replacement is emulated)" >&2
fi

FERRO_RENDERED="${rendered[*]}" "$VENV/bin/python" - "${core[@]}" -- "${crds[@]}" <<'PY' || fail "deployment rules and cross-references"
import copy, ipaddress, json, os, re, sys, yaml

args = sys.argv[1:]
core_paths, crd_paths = args[: args.index("--")], args[args.index("--") + 1 :]
docs = {}
for path in core_paths + crd_paths:
    for d in yaml.safe_load_all(open(path)):
        if d:
            key = (d["kind"], d["metadata"]["name"])
            assert key not in docs, f"{key} defined twice"
            docs[key] = d
DOMAIN = "ferro.nccl-net/"

def containers(spec):
    return spec.get("initContainers", []) + spec["containers"]

def env_of(c):
    return {e["name"]: e for e in c.get("env", [])}

# --- The SR-IOV networks: one per rail, each with its own resource and subnet.
nads = {n: d for (k, n), d in docs.items() if k == "NetworkAttachmentDefinition"}
assert nads, "no NetworkAttachmentDefinition"
subnets, resources = set(), set()
for name, nad in nads.items():
    assert nad["apiVersion"] == "k8s.cni.cncf.io/v1", nad["apiVersion"]
    resource = nad["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
    cni = json.loads(nad["spec"]["config"])
    assert cni["name"] == name, (cni["name"], name)
    plugins = cni.get("plugins", [cni])
    assert "sriov" in [p["type"] for p in plugins], name
    ipams = [p["ipam"] for p in plugins if p.get("ipam", {}).get("type")]
    assert ipams, f"{name}: needs an IPAM (an address for NCCL_SOCKET_IFNAME)"
    subnets.add(ipaddress.ip_network(ipams[0]["range"]))
    resources.add(resource)
assert len(subnets) == len(resources) == len(nads), "each rail needs its own subnet and resource"

# --- The training Job.
svc = docs[("Service", "ferro-allreduce")]["spec"]
assert svc["clusterIP"] == "None" and svc["publishNotReadyAddresses"] is True, svc
job_obj = docs[("Job", "ferro-allreduce")]
assert job_obj["spec"]["ttlSecondsAfterFinished"] > 0
job = job_obj["spec"]["template"]
assert svc["selector"] == {"job-name": "ferro-allreduce"} and job["spec"]["subdomain"] == "ferro-allreduce"
c = job["spec"]["containers"][0]
assert c["image"] == "nvcr.io/nvidia/pytorch:25.11-py3", c["image"]
env = {e["name"]: e.get("value") for e in c["env"]}
assert env["NCCL_SOCKET_IFNAME"] == "net1" and env["NCCL_DEBUG"] == "INFO", env
assert env["NCCL_NET_PLUGIN"] == "/opt/ferro/lib/libnccl-net-ferro.so", env
limits = c["resources"]["limits"]
gpus = int(limits["nvidia.com/gpu"])
attachments = json.loads(job["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])
assert len(attachments) == gpus == 8, f"one SR-IOV attachment per rail and GPU: {len(attachments)} for {gpus} GPUs"
assert [a["interface"] for a in attachments] == [f"net{i + 1}" for i in range(gpus)], attachments
assert len({a["name"] for a in attachments}) == gpus, "each rail attaches its own network"
for a in attachments:
    resource = nads[a["name"]]["metadata"]["annotations"]["k8s.v1.cni.cncf.io/resourceName"]
    assert str(limits.get(resource)) == "1", f"{a['name']}: the job must request one {resource}"
assert "IPC_LOCK" in c["securityContext"]["capabilities"]["add"]
assert any(t.get("operator") == "Exists" for t in job["spec"]["tolerations"]), "the job tolerates the GPU taint"
vols = {v["name"]: v for v in job["spec"]["volumes"]}
mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
assert vols[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
terms = job["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
exprs = [e for t in terms for e in t["matchExpressions"]]
verdict_sel = [e for e in exprs if e["key"] == DOMAIN + "verdict"]
assert verdict_sel and "fail" not in verdict_sel[0]["values"], "the job selects nodes by the published verdict"

# --- The installer DaemonSet: readiness never depends on the verdict.
ns_name = "ferro-system"
ns = docs[("Namespace", ns_name)]
assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged", "namespace Pod Security level"
ds_obj = docs[("DaemonSet", "ferro-installer")]
ds = ds_obj["spec"]["template"]["spec"]
for ctr in containers(ds):
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert probe not in ctr, f"{ctr['name']} has a {probe}: readiness must not depend on the node's verdict"
init, main = ds["initContainers"], ds["containers"]
assert [x["args"] for x in init] == [["install"]], "the init container installs"
assert [x["args"] for x in main] == [["hold"]], "one pause-like container"
assert ds["hostNetwork"] is True and ds["dnsPolicy"] == "ClusterFirstWithHostNet" and ds["hostPID"] is True
assert {"operator": "Exists"} in ds["tolerations"], "tolerate every taint"
assert ds["priorityClassName"] == "system-node-critical"
quotas = [d for (k, _), d in docs.items() if k == "ResourceQuota" and d["metadata"]["namespace"] == ns_name]
assert any(
    e["scopeName"] == "PriorityClass" and "system-node-critical" in e["values"]
    for q in quotas for e in q["spec"]["scopeSelector"]["matchExpressions"]
), "a quota scoped to system-node-critical in the installer's namespace"
assert ds_obj["metadata"]["namespace"] == ns_name

# No access to Node objects (NFD publishes the labels); Events only, in its own namespace.
for (kind, name), d in docs.items():
    if kind in ("ClusterRole", "Role"):
        for rule in d["rules"]:
            assert "nodes" not in rule["resources"], f"{kind} {name} grants access to nodes"
    assert kind not in ("ClusterRole", "ClusterRoleBinding"), f"{kind} {name}: nothing cluster-wide"
role = docs[("Role", "ferro-installer")]
assert role["rules"] == [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}], role["rules"]

# The verdict as an NFD feature file: the features.d hostPath, where the script writes.
hold = main[0]
hold_env = env_of(hold)
ds_vols = {v["name"]: v for v in ds["volumes"]}
hold_mounts = {m["mountPath"]: m for m in hold["volumeMounts"]}
features_mount = hold_mounts[hold_env["FERRO_FEATURES_DIR"]["value"]]
assert not features_mount.get("readOnly")
assert ds_vols[features_mount["name"]]["hostPath"]["path"] == "/etc/kubernetes/node-feature-discovery/features.d"
assert hold_env["FERRO_GDR_POLICY"]["value"] in ("required", "optional")
for field in ("spec.nodeName", "metadata.name", "metadata.uid", "metadata.namespace"):
    assert any(e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == field for e in hold_env.values()), field

# The project's label domain, and no other, for the verdict labels.
text = "".join(open(p).read() for p in core_paths + crd_paths + ["deploy/installer/ferro-installer.sh", "deploy/README.md"])
assert "ferro.nccl.io" not in text, "labels belong under ferro.nccl-net/"

# --- The install directory, set in one place: hostDir of the ferro-install ConfigMap, copied
# by the install-dir component into every hostPath that holds it.
component = yaml.safe_load(open("deploy/kubernetes/install-dir/kustomization.yaml"))
assert component["kind"] == "Component"
base = yaml.safe_load(open("deploy/kubernetes/kustomization.yaml"))
assert "install-dir" in base["components"]
assert sorted(base["resources"]) == sorted(os.path.relpath(p, "deploy/kubernetes") for p in core_paths + crd_paths)

def step(node, part):
    m = re.fullmatch(r"\[(\w+)=(.+)\]", part)
    if m:
        hits = [x for x in node if x.get(m[1]) == m[2]]
        assert len(hits) == 1, part
        return hits[0]
    return node[part]

def field(doc, path, value=None):
    parts = path.split(".")
    node = doc
    for part in parts[:-1]:
        node = step(node, part)
    if value is not None:
        node[parts[-1]] = value
    return node[parts[-1]]

def render(all_docs, host_dir=None):
    out = copy.deepcopy(all_docs)
    for r in component["replacements"]:
        src = out[(r["source"]["kind"], r["source"]["name"])]
        if host_dir is not None:
            field(src, r["source"]["fieldPath"], host_dir)
        value = field(src, r["source"]["fieldPath"])
        for t in r["targets"]:
            for fp in t["fieldPaths"]:
                field(out[(t["select"]["kind"], t["select"]["name"])], fp, value)
    return out

host_dir = docs[("ConfigMap", "ferro-install")]["data"]["hostDir"]
assert host_dir == "/opt/ferro", f"the default install directory is /opt/ferro, not {host_dir}"
assert render(docs) == docs, "the files as they are must equal their rendering (kubectl apply -f)"

def plugin_volumes(all_docs):
    """(kind, volume) of every hostPath that carries the plugin: the installer's target and the
    job's plugin directory."""
    found = []
    d = all_docs[("DaemonSet", "ferro-installer")]["spec"]["template"]["spec"]
    ictr = d["initContainers"][0]
    target = env_of(ictr)["FERRO_HOST_DIR"]["value"]
    vname = {m["mountPath"]: m["name"] for m in ictr["volumeMounts"]}[target]
    found.append(("DaemonSet", {v["name"]: v for v in d["volumes"]}[vname]))
    assert env_of(ictr)["FERRO_NODE_INSTALL_DIR"]["valueFrom"]["configMapKeyRef"] == {"name": "ferro-install", "key": "hostDir"}
    j = all_docs[("Job", "ferro-allreduce")]["spec"]["template"]["spec"]
    jc = j["containers"][0]
    plugin = env_of(jc)["NCCL_NET_PLUGIN"]["value"]
    jm = [m for m in jc["volumeMounts"] if plugin.startswith(m["mountPath"] + "/")]
    assert len(jm) == 1, "one mount holds NCCL_NET_PLUGIN"
    found.append(("Job", {v["name"]: v for v in j["volumes"]}[jm[0]["name"]]))
    return found

for kind, v in plugin_volumes(docs):
    assert v["hostPath"]["path"] == host_dir, f"{kind} volume {v['name']}: {v['hostPath']['path']} is not hostDir {host_dir}"
holding = [(k, v["name"]) for (k, _), d in docs.items() if k in ("DaemonSet", "Job")
           for v in d["spec"]["template"]["spec"]["volumes"]
           if v.get("hostPath", {}).get("path", "").rstrip("/") == host_dir.rstrip("/")
           or v.get("hostPath", {}).get("path", "").startswith(host_dir.rstrip("/") + "/")]
sentinel = "/check-manifests/elsewhere"
moved = render(docs, sentinel)
for kind, v in plugin_volumes(moved):
    assert v["hostPath"]["path"] == sentinel, f"{kind} volume {v['name']} does not follow hostDir"
assert len(holding) == len(plugin_volumes(docs)), f"hostPaths holding {host_dir} that hostDir does not set: {holding}"

for path in filter(None, os.environ.get("FERRO_RENDERED", "").split()):
    out = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(open(path)) if d}
    hd = out[("ConfigMap", "ferro-install")]["data"]["hostDir"]
    for kind, v in plugin_volumes(out):
        assert v["hostPath"]["path"] == hd, f"{path}: {kind} volume {v['name']} is {v['hostPath']['path']}, not {hd}"
    if path.endswith("cos.yaml"):
        assert hd == "/home/kubernetes/bin/ferro", hd
print("deployment rules and cross-references ok", file=sys.stderr)
PY
ok "NetworkAttachmentDefinitions, the installer's and the job's rules, the install directory in one place"

# --- The installer script, against a fake doctor, a fake curl and scratch host directories.
installer=deploy/installer/ferro-installer.sh
sh -n "$installer" || fail "installer script does not parse"
grep -q -- '--gdr-policy "$GDR_POLICY" --output nfd' "$installer" || fail "the installer does not ask the doctor for a feature file under the policy"
mkdir -p "$scratch/bin" "$scratch/img" "$scratch/sa"
printf 'plugin bytes\n' > "$scratch/img/libnccl-net-ferro.so"
printf '#!/bin/sh\n' > "$scratch/img/nccl-net-doctor"
# The fake doctor: records its arguments, prints what $FAKE_OUT holds, exits $FAKE_RC.
cat > "$scratch/bin/nccl-net-doctor" <<'EOF'
#!/bin/sh
echo "$*" >> "$FAKE_ARGS"
[ "${FAKE_SLEEP:-0}" -gt 0 ] && sleep "$FAKE_SLEEP"
case " $* " in *" --output nfd "*) cat "$FAKE_OUT" ;; *) echo "the full report" ;; esac
exit "${FAKE_RC:-0}"
EOF
# The fake curl: keeps the body it was asked to send.
cat > "$scratch/bin/curl" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = -d ] && printf '%s' "$2" > "$FAKE_EVENT"; shift; done
EOF
chmod +x "$scratch/bin/nccl-net-doctor" "$scratch/bin/curl"
echo token > "$scratch/sa/token"; echo ferro-system > "$scratch/sa/namespace"; : > "$scratch/sa/ca.crt"
export FAKE_ARGS="$scratch/args" FAKE_OUT="$scratch/doctor.out" FAKE_EVENT="$scratch/event.json"
# The installer as the pod runs it (a script, so that `run_installer ... &` gives the
# installer's own PID): features directory, then the command.
cat > "$scratch/bin/run_installer" <<EOF
#!/bin/sh
dir="\$1"; shift
exec env PATH="$scratch/bin:\$PATH" FERRO_FEATURES_DIR="\$dir" FERRO_HOST_ROOT=/fake-root \\
  FERRO_GDR_POLICY="\${FERRO_GDR_POLICY:-optional}" FERRO_DOCTOR_TIMEOUT_S=2 \\
  FERRO_SERVICE_ACCOUNT_DIR="$scratch/sa" KUBERNETES_SERVICE_HOST=127.0.0.1 NODE_NAME="\${NODE_NAME:-gpu-7}" \\
  POD_NAME=ferro-installer-x POD_NAMESPACE=ferro-system POD_UID=1234 \\
  FERRO_LIB_SRC="$scratch/img/libnccl-net-ferro.so" FERRO_DOCTOR_SRC="$scratch/img/nccl-net-doctor" \\
  sh "$PWD/$installer" "\$@"
EOF
chmod +x "$scratch/bin/run_installer"
run_installer() { "$scratch/bin/run_installer" "$@"; }

FERRO_HOST_DIR="$scratch/host/opt/ferro" run_installer "$scratch/f" install 2> "$scratch/log"
cmp "$scratch/host/opt/ferro/lib/libnccl-net-ferro.so" "$scratch/img/libnccl-net-ferro.so" || fail "installer copied a different library"
[[ -x "$scratch/host/opt/ferro/bin/nccl-net-doctor" ]] || fail "installer did not install the doctor"
: > "$scratch/not-a-dir"
if FERRO_HOST_DIR="$scratch/not-a-dir/ferro" FERRO_NODE_INSTALL_DIR=/opt/ferro run_installer "$scratch/f" install 2> "$scratch/log"; then
  fail "installing into an unwritable directory succeeded"
fi
grep -q 'cannot write /opt/ferro on the node.*hostDir of the ferro-install ConfigMap' "$scratch/log" \
  || fail "an unwritable install directory is not explained: $(cat "$scratch/log")"
ok "install copies the plugin and the doctor, and names the setting when the node's directory is not writable"

printf '%s\n' "$(printf 'ferro.nccl-net/verdict=ok\nferro.nccl-net/gdr=off\nother.example/x=1\nferro.nccl-net/bad=a b')" > "$FAKE_OUT"
FAKE_RC=0 run_installer "$scratch/f" publish 2> "$scratch/log" || fail "publish: $(cat "$scratch/log")"
file="$scratch/f/ferro-nccl-net"
[[ -f "$file" ]] || fail "no feature file"
[[ -z "$(find "$scratch/f" -name '.*' -type f)" ]] || fail "a temporary file was left in features.d"
grep -q -- '--root /fake-root --gdr-policy optional --output nfd' "$FAKE_ARGS" || fail "doctor arguments: $(cat "$FAKE_ARGS")"
[[ "$(grep -v '^#' "$file")" == "$(printf 'ferro.nccl-net/verdict=ok\nferro.nccl-net/gdr=off')" ]] \
  || fail "the feature file must hold the doctor's ferro.nccl-net keys only: $(cat "$file")"
expiry="$(sed -n 's/^# +expiry-time=//p' "$file")"
[[ "$expiry" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$ ]] || fail "no RFC 3339 expiry directive: $(cat "$file")"
(( $(date -u -d "$expiry" +%s) > $(date -u +%s) + 300 )) || fail "the feature file expires too soon ($expiry)"
[[ "$(grep -n . "$file" | grep -m1 -v ':#' | cut -d: -f1)" -gt "$(grep -n '+expiry-time' "$file" | cut -d: -f1)" ]] \
  || fail "the expiry directive must come before the features"
event_ok() { # python condition on the Event `e`
  "$VENV/bin/python" -c 'import json, re, sys; e = json.load(open(sys.argv[1])); sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$FAKE_EVENT" "$1"
}
event_ok 'e["apiVersion"] == "events.k8s.io/v1" and e["type"] == "Normal" and e["reason"] == "NodeVerdict"
  and e["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ferro-system", "name": "ferro-installer-x", "uid": "1234"}
  and e["related"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-7"} and e["action"]
  and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", e["eventTime"])
  and e["reportingController"] == "ferro.nccl-net/installer" and e["reportingInstance"] == "ferro-installer-gpu-7"
  and "gpu-7" in e["note"] and "ferro.nccl-net/verdict=ok" in e["note"] and len(e["note"]) <= 1024' \
  || fail "the Event is not well formed: $(cat "$FAKE_EVENT")"
rm -f "$FAKE_EVENT"
NODE_NAME="$(printf 'odd"\\\tname')" run_installer "$scratch/f" publish 2> "$scratch/log" || fail "publish: $(cat "$scratch/log")"
event_ok 'e["related"]["name"] == "odd\"\\ name"' || fail "the Event does not quote its strings: $(cat "$FAKE_EVENT")"
ok "publish writes the verdict as an NFD feature file with an expiry time, and posts an Event"

rm -f "$FAKE_EVENT"
FAKE_RC=2 run_installer "$scratch/f" publish 2> "$scratch/log" || fail "publish after a doctor error: $(cat "$scratch/log")"
grep -qx 'ferro.nccl-net/verdict=fail' "$file" && grep -qx 'ferro.nccl-net/doctor-error=exit-2' "$file" \
  || fail "a doctor usage error must publish a failed verdict: $(cat "$file")"
event_ok 'e["type"] == "Warning"' || fail "a failed verdict's Event must be a Warning"
FAKE_SLEEP=5 run_installer "$scratch/f" publish 2> "$scratch/log" || fail "publish after a hung doctor: $(cat "$scratch/log")"
grep -qx 'ferro.nccl-net/doctor-error=timeout' "$file" || fail "a hung doctor must publish a failed verdict: $(cat "$file")"
: > "$FAKE_OUT"
FAKE_RC=0 run_installer "$scratch/f" publish 2> "$scratch/log" || fail "publish without a verdict line"
grep -qx 'ferro.nccl-net/doctor-error=no-verdict' "$file" || fail "output without a verdict must publish a failed verdict: $(cat "$file")"
if FERRO_GDR_POLICY=sometimes run_installer "$scratch/f" publish 2> /dev/null; then fail "an unknown GPUDirect policy was accepted"; fi
ok "a doctor that errs, hangs or gives no verdict publishes a failed verdict with its cause"

printf 'ferro.nccl-net/verdict=warn\n' > "$FAKE_OUT"
"$scratch/bin/run_installer" "$scratch/f" hold 2> "$scratch/hold.log" &
holder=$!
for _ in $(seq 50); do grep -qx 'ferro.nccl-net/verdict=warn' "$file" 2> /dev/null && break; sleep 0.1; done
grep -qx 'ferro.nccl-net/verdict=warn' "$file" || { kill "$holder"; fail "hold did not publish"; }
kill -TERM "$holder"
for _ in $(seq 50); do kill -0 "$holder" 2> /dev/null || break; sleep 0.1; done
if kill -0 "$holder" 2> /dev/null; then kill -KILL "$holder"; fail "hold did not stop within 5 s of SIGTERM"; fi
wait "$holder" || fail "hold exited with status $? on SIGTERM"
[[ ! -e "$file" ]] || fail "hold left the feature file behind on SIGTERM"
ok "hold publishes at once, and removes the feature file when the pod stops"

# --- The image build: per-architecture inputs staged as the Containerfile expects them.
builder=deploy/installer/build-image.sh
bash -n "$builder" || fail "build-image.sh does not parse"
host_arch="$(dpkg --print-architecture)"
# Stand-ins for each architecture's binaries: an ELF header with that machine (x86-64 0x3e,
# AArch64 0xb7) and no dynamic symbols, so no glibc need of the machine running the check.
fake_elf() { # machine-byte-escape file
  { printf '\177ELF\002\001\001'; head -c 9 /dev/zero; printf '\003\000'"$1"'\000'; head -c 44 /dev/zero; } > "$2"
}
for arch in amd64 arm64; do
  mkdir -p "$scratch/portable-$arch/lib" "$scratch/portable-$arch/bin"
  m='\076'; [[ $arch == arm64 ]] && m='\267'
  fake_elf "$m" "$scratch/portable-$arch/lib/libnccl-net-ferro.so"
  fake_elf "$m" "$scratch/portable-$arch/bin/nccl-net-doctor"
done
tar -czf "$scratch/portable-arm64.tar.gz" -C "$scratch/portable-arm64" lib bin
context="$("$builder" --stage-only --amd64 "$scratch/portable-amd64" --arm64 "$scratch/portable-arm64.tar.gz" 2> "$scratch/log")" \
  || fail "staging: $(cat "$scratch/log")"
for arch in amd64 arm64; do
  sed -n 's/^COPY //p' deploy/installer/Containerfile | while read -r src _; do
    src="${src//\$\{TARGETARCH\}/$arch}"
    [[ -f "$context/$src" ]] || fail "the Containerfile copies $src, which build-image.sh does not stage"
  done
  cmp "$context/$arch/nccl-net-doctor" "$scratch/portable-$arch/bin/nccl-net-doctor" || fail "$arch doctor staged wrong"
done
[[ -z "$(find "$context" -name '.unpack-*')" ]] || fail "staging left its unpacked inputs in the build context"
if "$builder" --stage-only --arm64 "$scratch/portable-amd64" 2> "$scratch/log"; then
  fail "an amd64 binary was staged as arm64"
fi
grep -q "not built for arm64" "$scratch/log" || fail "wrong-architecture message: $(cat "$scratch/log")"
# A package in the layout of scripts/build-deb.sh's.
pkg="$scratch/pkg-tree"
mkdir -p "$pkg/DEBIAN" "$pkg/usr/lib/aarch64-linux-gnu" "$pkg/usr/bin"
cp "$scratch/portable-arm64/lib/libnccl-net-ferro.so" "$pkg/usr/lib/aarch64-linux-gnu/"
cp "$scratch/portable-arm64/bin/nccl-net-doctor" "$pkg/usr/bin/"
printf 'Package: nccl-net-ferro\nVersion: 0.0.0\nArchitecture: arm64\nMaintainer: check <check@invalid>\nDescription: check\n' > "$pkg/DEBIAN/control"
dpkg-deb --root-owner-group -b "$pkg" "$scratch/fake_arm64.deb" > /dev/null
"$builder" --stage-only --arm64 "$scratch/fake_arm64.deb" > /dev/null 2> "$scratch/log" || fail "staging a package: $(cat "$scratch/log")"
cmp "$context/arm64/libnccl-net-ferro.so" "$scratch/portable-arm64/lib/libnccl-net-ferro.so" || fail "the package's plugin staged wrong"
ok "build-image.sh stages each architecture's binaries (directory, tarball, package) as the Containerfile copies them, and refuses a wrong architecture"

debs=(target/deb/nccl-net-ferro_*_"$host_arch".deb)
if [[ ${#debs[@]} -gt 0 ]]; then
  deb="${debs[0]}"
  context="$("$builder" --stage-only "--$host_arch" "$deb" 2> "$scratch/log")" || fail "staging $deb: $(cat "$scratch/log")"
  FERRO_HOST_DIR="$scratch/pkg/opt/ferro" FERRO_LIB_SRC="$context/$host_arch/libnccl-net-ferro.so" \
    FERRO_DOCTOR_SRC="$context/$host_arch/nccl-net-doctor" sh "$installer" install >&2
  dpkg-deb -x "$deb" "$scratch/deb"
  cmp "$scratch/pkg/opt/ferro/lib/libnccl-net-ferro.so" "$scratch"/deb/usr/lib/*/libnccl-net-ferro.so \
    || fail "installer copied a different library"
  [[ -x "$scratch/pkg/opt/ferro/bin/nccl-net-doctor" ]] || fail "installer did not install the doctor"
  ok "the packaged plugin and doctor are staged for the image and installed into the host directory"
else
  echo "check-manifests: note: no package in target/deb (run scripts/check-package.sh first); the packaged files are not staged" >&2
fi
echo "check-manifests: all checks passed" >&2

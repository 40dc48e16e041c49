#!/bin/sh
# The installer image's entry point (see deploy/README.md).
#
#   ferro-installer install   copy the plugin and the doctor from the package's install paths
#                             into $FERRO_HOST_DIR (the hostPath, default /host-opt-ferro):
#                             lib/libnccl-net-ferro.so and bin/nccl-net-doctor, each replaced
#                             atomically (copy, then rename), so a job that is starting never sees
#                             a half-written library.
#   ferro-installer watch     every $FERRO_DOCTOR_INTERVAL_S seconds (default 300), run the doctor
#                             on the node (--root $FERRO_HOST_ROOT) and publish its verdict on this
#                             node ($NODE_NAME): label ferro.nccl.io/gpudirect = ready |
#                             gpudirect-fail | plugin-unusable | doctor-error, and annotations with
#                             the summary and the failed checks. Needs curl, jq and the pod's
#                             service account (nodes: get, patch).
#   ferro-installer ready     the readiness probe: run the doctor; ready when it exits 0.
set -eu

HOST_DIR="${FERRO_HOST_DIR:-/host-opt-ferro}"
HOST_ROOT="${FERRO_HOST_ROOT:-/host}"
LIB_SRC="${FERRO_LIB_SRC:-$(ls /usr/lib/*/libnccl-net-ferro.so 2>/dev/null | head -n 1)}"
DOCTOR_SRC="${FERRO_DOCTOR_SRC:-/usr/bin/nccl-net-doctor}"
REPORT_DIR="${FERRO_REPORT_DIR:-/run/ferro}"

put() { # src dest mode
  mkdir -p "$(dirname "$2")"
  cp "$1" "$2.new.$$"
  chmod "$3" "$2.new.$$"
  mv -f "$2.new.$$" "$2"
}

install_files() {
  [ -n "$LIB_SRC" ] && [ -f "$LIB_SRC" ] || { echo "ferro-installer: libnccl-net-ferro.so not found" >&2; exit 1; }
  put "$LIB_SRC" "$HOST_DIR/lib/libnccl-net-ferro.so" 0644
  put "$DOCTOR_SRC" "$HOST_DIR/bin/nccl-net-doctor" 0755
  echo "ferro-installer: installed $HOST_DIR/lib/libnccl-net-ferro.so and $HOST_DIR/bin/nccl-net-doctor"
}

verdict_label() { # doctor exit status -> label value
  case "$1" in
    0) echo ready ;;
    1) echo plugin-unusable ;;
    3) echo gpudirect-fail ;;
    *) echo doctor-error ;;
  esac
}

publish() { # report.json, exit status
  sa=/var/run/secrets/kubernetes.io/serviceaccount
  label="$(verdict_label "$2")"
  body="$(jq -c --arg v "$label" '{metadata: {
      labels: {"ferro.nccl.io/gpudirect": $v},
      annotations: {
        "ferro.nccl.io/doctor-summary": ((.verdict.summary // "") + " " + (.verdict.node_summary // "")),
        "ferro.nccl.io/doctor-failed-checks": ([(.node.checks // [])[] | select(.status == "fail") | .summary] | join("; "))
      }}}' "$1" 2>/dev/null || printf '{"metadata":{"labels":{"ferro.nccl.io/gpudirect":"%s"}}}' "$label")"
  curl -sS --fail --cacert "$sa/ca.crt" -H "Authorization: Bearer $(cat "$sa/token")" \
    -H 'Content-Type: application/merge-patch+json' -X PATCH \
    "https://${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT}/api/v1/nodes/${NODE_NAME}" \
    -d "$body" >/dev/null
}

run_doctor() { # -> exit status; report in $REPORT_DIR/report.json
  mkdir -p "$REPORT_DIR"
  rc=0
  nccl-net-doctor --root "$HOST_ROOT" --json > "$REPORT_DIR/report.json.new" || rc=$?
  mv -f "$REPORT_DIR/report.json.new" "$REPORT_DIR/report.json"
  echo "$rc" > "$REPORT_DIR/exit"
  return "$rc"
}

case "${1:-}" in
  install) install_files ;;
  watch)
    : "${NODE_NAME:?NODE_NAME must be set (downward API spec.nodeName)}"
    while :; do
      rc=0; run_doctor || rc=$?
      echo "ferro-installer: doctor exit status $rc ($(verdict_label "$rc"))"
      publish "$REPORT_DIR/report.json" "$rc" || echo "ferro-installer: could not label node $NODE_NAME" >&2
      sleep "${FERRO_DOCTOR_INTERVAL_S:-300}"
    done ;;
  ready) nccl-net-doctor --root "$HOST_ROOT" > /dev/null ;;
  *) echo "usage: ferro-installer install|watch|ready" >&2; exit 2 ;;
esac

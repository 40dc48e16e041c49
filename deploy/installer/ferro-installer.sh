#!/bin/sh
# The installer image's entry point (see deploy/README.md). It owns the plugin's files on the
# node and the node's verdict file; it never decides whether the pod is Ready.
#
#   ferro-installer install   copy the plugin and the doctor from the image into $FERRO_HOST_DIR
#                             (the hostPath of the node's install directory, mounted at
#                             /host-install): lib/libnccl-net-ferro.so and bin/nccl-net-doctor,
#                             each replaced atomically (copy, then rename), so a job that is
#                             starting never sees a half-written library.
#   ferro-installer hold      the pod's long-running container, pause-like: it is Ready as soon
#                             as it runs, whatever the node's verdict. Every
#                             $FERRO_DOCTOR_INTERVAL_S seconds (default 300) it runs the doctor
#                             on the node (--root $FERRO_HOST_ROOT --gdr-policy $FERRO_GDR_POLICY
#                             --output nfd) and writes the result as a node-feature-discovery
#                             feature file, $FERRO_FEATURES_DIR/ferro-nccl-net, which NFD turns
#                             into the node labels ferro.nccl-net/*; when the verdict changes it
#                             prints the doctor's full report and posts an Event about this pod.
#                             On SIGTERM it removes the feature file, so the labels go with the
#                             pod; the file also carries an expiry time, so a pod that died
#                             without cleaning up leaves no label behind for long.
#   ferro-installer publish   one round of `hold` (the feature file and the Event), then exit.
#   ferro-installer withdraw  remove the feature file.
#
# Events need the pod's service account (events: create in its namespace), POD_NAME, POD_UID,
# POD_NAMESPACE and NODE_NAME from the downward API; without the service account token they are
# skipped, and the feature file is still written.
set -eu

HOST_DIR="${FERRO_HOST_DIR:-/host-install}"
NODE_INSTALL_DIR="${FERRO_NODE_INSTALL_DIR:-$HOST_DIR}"
HOST_ROOT="${FERRO_HOST_ROOT:-/host}"
LIB_SRC="${FERRO_LIB_SRC:-/usr/local/lib/ferro/libnccl-net-ferro.so}"
DOCTOR_SRC="${FERRO_DOCTOR_SRC:-/usr/local/bin/nccl-net-doctor}"
DOCTOR="${FERRO_DOCTOR:-nccl-net-doctor}"
FEATURES_DIR="${FERRO_FEATURES_DIR:-/host-features.d}"
FEATURE_FILE="$FEATURES_DIR/ferro-nccl-net"
GDR_POLICY="${FERRO_GDR_POLICY:-required}"
INTERVAL_S="${FERRO_DOCTOR_INTERVAL_S:-300}"
DOCTOR_TIMEOUT_S="${FERRO_DOCTOR_TIMEOUT_S:-120}"
SA_DIR="${FERRO_SERVICE_ACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}"
DOMAIN=ferro.nccl-net

log() { echo "ferro-installer: $*" >&2; }

put() { # src dest mode
  mkdir -p "$(dirname "$2")"
  cp "$1" "$2.new.$$"
  chmod "$3" "$2.new.$$"
  mv -f "$2.new.$$" "$2"
}

install_files() {
  [ -f "$LIB_SRC" ] || { log "$LIB_SRC not found in the image"; exit 1; }
  [ -f "$DOCTOR_SRC" ] || { log "$DOCTOR_SRC not found in the image"; exit 1; }
  if ! mkdir -p "$HOST_DIR/lib" "$HOST_DIR/bin" 2>/dev/null || [ ! -w "$HOST_DIR" ]; then
    log "cannot write $NODE_INSTALL_DIR on the node; set the install directory (hostDir of the ferro-install ConfigMap) to a writable path, e.g. /home/kubernetes/bin/ferro on Container-Optimized OS"
    exit 1
  fi
  put "$LIB_SRC" "$HOST_DIR/lib/libnccl-net-ferro.so" 0644
  put "$DOCTOR_SRC" "$HOST_DIR/bin/nccl-net-doctor" 0755
  log "installed lib/libnccl-net-ferro.so and bin/nccl-net-doctor into $NODE_INSTALL_DIR on the node"
}

case "$GDR_POLICY" in
  required | optional) ;;
  *) log "FERRO_GDR_POLICY must be required or optional, not '$GDR_POLICY'"; exit 2 ;;
esac
case "$INTERVAL_S" in
  '' | *[!0-9]*) log "FERRO_DOCTOR_INTERVAL_S must be a number of seconds"; exit 2 ;;
esac

# The feature file's expiry: two missed rounds and a minute of slack. NFD ignores the file's
# features after that time, so labels of a pod that died without SIGTERM (a node that lost
# power, a force-deleted pod) do not outlive it by more than this.
expiry_time() {
  now="$(date -u +%s)"
  date -u -d "@$((now + 2 * INTERVAL_S + 60))" +%Y-%m-%dT%H:%M:%SZ
}

# Runs the doctor in NFD mode; prints the feature lines under our domain, and sets DOCTOR_RC.
# Exit statuses 0, 1 and 3 are verdicts (the feature lines say which); anything else (a usage
# error, a crash, the timeout) is a doctor error, published as a failed verdict with its cause.
doctor_features() {
  out="$(mktemp)"
  DOCTOR_RC=0
  timeout "$DOCTOR_TIMEOUT_S" "$DOCTOR" --root "$HOST_ROOT" --gdr-policy "$GDR_POLICY" --output nfd \
    > "$out" 2> "$out.err" || DOCTOR_RC=$?
  lines="$(grep -E "^$DOMAIN/[A-Za-z0-9._-]+(=[A-Za-z0-9._-]*)?\$" "$out" || true)"
  case "$DOCTOR_RC" in
    0 | 1 | 3)
      if printf '%s\n' "$lines" | grep -q "^$DOMAIN/verdict="; then
        printf '%s\n' "$lines"
      else
        printf '%s\n' "$DOMAIN/verdict=fail" "$DOMAIN/doctor-error=no-verdict"
      fi ;;
    124) printf '%s\n' "$DOMAIN/verdict=fail" "$DOMAIN/doctor-error=timeout" ;;
    *) printf '%s\n' "$DOMAIN/verdict=fail" "$DOMAIN/doctor-error=exit-$DOCTOR_RC" ;;
  esac
  if [ -s "$out.err" ]; then sed 's/^/ferro-installer: doctor: /' "$out.err" >&2; fi
  rm -f "$out" "$out.err"
}

write_feature_file() { # features
  mkdir -p "$FEATURES_DIR"
  # NFD skips dot files: write one, then rename it into place.
  tmp="$FEATURES_DIR/.ferro-nccl-net.$$"
  {
    echo "# Written by the Ferro installer pod ${POD_NAME:-?} on ${NODE_NAME:-this node}; removed when it stops."
    echo "# +expiry-time=$(expiry_time)"
    printf '%s\n' "$1"
  } > "$tmp"
  mv -f "$tmp" "$FEATURE_FILE"
}

withdraw() {
  rm -f "$FEATURE_FILE" "$FEATURES_DIR"/.ferro-nccl-net.*
  log "removed $FEATURE_FILE"
}

json_string() { # text -> a JSON string (control characters become spaces)
  printf '"%s"' "$(printf '%s' "$1" | tr '\000-\037' ' ' | sed 's/\\/\\\\/g; s/"/\\"/g')"
}

post_event() { # type reason note
  if [ ! -r "$SA_DIR/token" ] || [ -z "${KUBERNETES_SERVICE_HOST:-}" ] || [ -z "${POD_NAME:-}" ]; then
    log "no service account or pod identity: Event not posted ($2: $3)"
    return 0
  fi
  ns="${POD_NAMESPACE:-$(cat "$SA_DIR/namespace")}"
  now="$(date -u +%Y-%m-%dT%H:%M:%S.000000Z)"
  body="$(cat <<EOF
{"apiVersion": "events.k8s.io/v1", "kind": "Event",
 "metadata": {"generateName": "ferro-installer-", "namespace": $(json_string "$ns")},
 "eventTime": "$now", "type": "$1", "reason": "$2", "action": "Check",
 "reportingController": "$DOMAIN/installer",
 "reportingInstance": $(json_string "ferro-installer-${NODE_NAME:-unknown}"),
 "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": $(json_string "$ns"),
               "name": $(json_string "$POD_NAME"), "uid": $(json_string "${POD_UID:-}")},
 "related": {"apiVersion": "v1", "kind": "Node", "name": $(json_string "${NODE_NAME:-}")},
 "note": $(json_string "$3")}
EOF
)"
  curl -sS --fail --max-time 10 --cacert "$SA_DIR/ca.crt" \
    -H "Authorization: Bearer $(cat "$SA_DIR/token")" -H 'Content-Type: application/json' \
    -X POST "https://${KUBERNETES_SERVICE_HOST}:${KUBERNETES_SERVICE_PORT:-443}/apis/events.k8s.io/v1/namespaces/$ns/events" \
    -d "$body" > /dev/null || log "could not post the Event ($2)"
}

LAST_FEATURES=""
publish() {
  features="$(doctor_features)"
  write_feature_file "$features"
  [ "$features" = "$LAST_FEATURES" ] && return 0
  LAST_FEATURES="$features"
  verdict="$(printf '%s\n' "$features" | sed -n "s|^$DOMAIN/verdict=||p" | head -n 1)"
  summary="$(printf '%s\n' "$features" | paste -s -d ' ' -)"
  log "node ${NODE_NAME:-?}: verdict $verdict (GPUDirect RDMA policy $GDR_POLICY): $summary"
  # The full report, in this container's log, each time the verdict changes.
  timeout "$DOCTOR_TIMEOUT_S" "$DOCTOR" --root "$HOST_ROOT" --gdr-policy "$GDR_POLICY" >&2 || true
  case "$verdict" in
    ok) type=Normal ;;
    *) type=Warning ;;
  esac
  post_event "$type" "NodeVerdict" \
    "Node ${NODE_NAME:-?}: ${verdict:-unknown} (GPUDirect RDMA policy $GDR_POLICY). Labels: $summary. Full report: kubectl logs -n ${POD_NAMESPACE:-ferro-system} ${POD_NAME:-<pod>}"
}

hold() {
  sleeper=""
  trap 'trap - TERM INT; [ -n "$sleeper" ] && kill "$sleeper" 2>/dev/null; withdraw; exit 0' TERM INT
  while :; do
    publish || log "publishing the verdict failed; retrying in ${INTERVAL_S}s"
    # Sleep in the background and wait for it, so SIGTERM is handled at once.
    sleep "$INTERVAL_S" &
    sleeper=$!
    wait "$sleeper" || true
    sleeper=""
  done
}

case "${1:-}" in
  install) install_files ;;
  hold) hold ;;
  publish) publish ;;
  withdraw) withdraw ;;
  *) echo "usage: ferro-installer install|hold|publish|withdraw" >&2; exit 2 ;;
esac

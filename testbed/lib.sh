# shellcheck shell=bash
# Shared by the test bed's scripts (host and guest) and by benches/compare.sh; sourced, never run.
#
#   log MSG...            progress to stderr, prefixed "[$LOG_TAG]" (default "testbed")
#   die MSG...            the same as an error, then exit 1
#   wait_listen PORT PID SECS
#                         wait until a TCP port listens (while PID lives), at most SECS seconds
#   perftest_run PORT SRV_LOG CLI_LOG TOOL ARGS...
#                         one perftest pair: TOOL ARGS -p PORT as the server in the background,
#                         then TOOL ARGS -p PORT 127.0.0.1 as the client (each under a timeout
#                         of $PERFTEST_TIMEOUT s, default 180); the outputs go to the two logs.
#                         Prints the client's result line ("#bytes #iterations figures...")
#                         on stdout; on failure says why (with the logs) and returns non-zero.

log() { printf '[%s] %s\n' "${LOG_TAG:-testbed}" "$*" >&2; }
die() {
  printf '[%s] error: %s\n' "${LOG_TAG:-testbed}" "$*" >&2
  exit 1
}

wait_listen() { # port pid timeout_s
  local deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    kill -0 "$2" 2>/dev/null || return 1
    [[ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]] && return 0
    sleep 0.2
  done
  return 1
}

perftest_run() { # port srv_log cli_log tool args...
  local port="$1" srv_log="$2" cli_log="$3" tool="$4"
  shift 4
  local limit="${PERFTEST_TIMEOUT:-180}"
  timeout "$limit" "$tool" "$@" -p "$port" >"$srv_log" 2>&1 &
  local srv=$!
  if ! wait_listen "$port" "$srv" 60; then
    log "$tool server did not start listening on port $port; its output:"
    sed 's/^/    /' "$srv_log" >&2
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    return 1
  fi
  local crc=0 src=0
  timeout "$limit" "$tool" "$@" -p "$port" 127.0.0.1 >"$cli_log" 2>&1 || crc=$?
  wait "$srv" || src=$?
  if [[ "$crc" -ne 0 || "$src" -ne 0 ]]; then
    log "$tool $* failed (client status $crc, server status $src); client and server output:"
    sed 's/^/    /' "$cli_log" "$srv_log" >&2
    return 1
  fi
  awk '/^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+/ { line = $0 } END { if (line == "") exit 1; print line }' "$cli_log" || {
    log "$tool $*: no result line in the client output:"
    sed 's/^/    /' "$cli_log" >&2
    return 1
  }
}

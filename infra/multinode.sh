#!/usr/bin/env bash
# A two-node Ray cluster simulated on this machine: a head and a worker node, separate processes,
# all on 127.0.0.1, each with few CPUs. Good for trying the cluster path (Ray Jobs API, variants
# spread over nodes, metrics per node) without a second machine.
#
#   infra/multinode.sh start  [--dir DIR] [--port 6390] [--dashboard-port 8275] [--cpus 1] [--nodes 2]
#                             [--auth-mode token|disabled]
#   infra/multinode.sh status [--dir DIR]
#   infra/multinode.sh stop   [--dir DIR]
#
# Then submit exactly what you would submit to a real cluster:
#   ray job submit --address http://127.0.0.1:8275 -- \
#       dtlab run experiment=platform_probe debug=true cluster=remote cluster.include_dashboard=false
# DIR (default $DTLAB_RUNS_DIR/multinode, else <repo>/runs/multinode) holds the logs, pid files and
# cluster.env (RAY_ADDRESS, DASHBOARD_URL, METRICS_TARGETS for infra/prometheus.sh --target).
# Token authentication is on (the token file ~/.ray/auth_token or $RAY_AUTH_TOKEN_PATH, 0600, created
# once; clients need RAY_AUTH_MODE=token, e.g. `RAY_AUTH_MODE=token ray job submit ...`);
# `--auth-mode disabled` turns it off, with a warning. The dashboard is on 127.0.0.1.
# Every port is pinned (free ones picked) so this cluster never collides with other Ray sessions;
# Ray's temp dir is private (/tmp/dtlab-ray-<port>), and stop ends only this cluster's processes
# (never `ray stop`, which would end every Ray session on the machine).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CMD="${1:-}"; shift || true
DIR="${DTLAB_MULTINODE_DIR:-${DTLAB_RUNS_DIR:-$ROOT/runs}/multinode}"
GCS_PORT=6390; DASH_PORT=8275; CPUS=1; NODES=2; AUTH=token
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift 2;;
    --port) GCS_PORT="$2"; shift 2;;
    --dashboard-port) DASH_PORT="$2"; shift 2;;
    --cpus) CPUS="$2"; shift 2;;
    --nodes) NODES="$2"; shift 2;;
    --auth-mode) AUTH="$2"; shift 2;;
    *) echo "multinode: unknown option $1 (allowed: --dir --port --dashboard-port --cpus --nodes --auth-mode)" >&2; exit 2;;
  esac
done
case "$CMD" in start|stop|status) ;; *)
  echo "usage: $0 {start|stop|status} [--dir DIR] [--port N] [--dashboard-port N] [--cpus N] [--nodes N]" >&2; exit 2;; esac
[ "$NODES" -ge 2 ] 2>/dev/null || { echo "multinode: --nodes must be >= 2, got $NODES" >&2; exit 2; }
case "$AUTH" in token|disabled) ;; *) echo "multinode: --auth-mode must be token or disabled, got $AUTH" >&2; exit 2;; esac

die() { echo "multinode: $*" >&2; exit 1; }
mkdir -p "$DIR"; DIR="$(cd "$DIR" && pwd)"
ENVF="$DIR/cluster.env"
BIN="$ROOT/.venv/bin"; [ -x "$BIN/ray" ] || BIN="$(dirname "$(command -v ray || echo /nonexistent/ray)")"
RAY="$BIN/ray"; PY="$BIN/python"
export PATH="$BIN:$PATH"               # job drivers inherit it: `dtlab` resolves on every node
export RAY_AUTH_MODE="$AUTH" RAY_USAGE_STATS_ENABLED=0

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
alive_nodes() {
  "$PY" - "$1" <<'EOF' 2>/dev/null || echo 0
import sys
from ray.util.state import list_nodes
print(sum(n.state == "ALIVE" for n in list_nodes(address=sys.argv[1], timeout=10)))
EOF
}

node_ports() {  # every per-node port pinned to a free one; $1: the node's metrics port
  echo "--node-manager-port=$(free_port) --object-manager-port=$(free_port) --metrics-export-port=$1" \
       "--dashboard-agent-listen-port=$(free_port) --dashboard-agent-grpc-port=$(free_port)" \
       "--runtime-env-agent-port=$(free_port)"
}

stop_all() {
  local pidf pid tmp=""
  [ -f "$ENVF" ] && tmp="$(. "$ENVF"; echo "${RAY_TMP:-}")"
  # workers first, then the head; `ray start --block` exits on SIGTERM and takes its node down
  for pidf in $(ls -r "$DIR"/node*.pid 2>/dev/null); do
    pid="$(cat "$pidf")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$pidf"
  done
  # leftovers of this cluster only: processes whose command line names its private temp dir
  if [ -n "$tmp" ]; then
    for pid in $(pgrep -f -- "$tmp" || true); do kill -TERM "$pid" 2>/dev/null || true; done
    sleep 1
    for pid in $(pgrep -f -- "$tmp" || true); do kill -KILL "$pid" 2>/dev/null || true; done
    rm -rf "$tmp"
  fi
  rm -f "$ENVF"
}

case "$CMD" in
  start)
    [ -x "$RAY" ] || die "ray not found (run make install)"
    if [ "$AUTH" = token ]; then  # the one token file, 0600, created once (before Ray would write it 0644)
      "$PY" -c 'from components.core.raytools import ensure_token; ensure_token()' || die "cannot create the Ray token"
    else
      echo "multinode: WARNING: Ray token authentication is OFF: anyone who can reach this machine's network" \
           "address can submit jobs and run code as $(id -un) on this cluster" >&2
    fi
    [ -f "$ENVF" ] && die "a cluster from $DIR looks up already ($ENVF); run stop first"
    RAY_TMP="/tmp/dtlab-ray-$GCS_PORT"      # short: Ray's socket paths must stay under 107 chars
    rm -rf "$RAY_TMP"
    MP="$(free_port)"; METRICS_TARGETS="127.0.0.1:$MP"
    HEAD_PORTS="$(node_ports "$MP")"
    cat >"$ENVF" <<EOF
RAY_ADDRESS=127.0.0.1:$GCS_PORT
DASHBOARD_URL=http://127.0.0.1:$DASH_PORT
RAY_TMP=$RAY_TMP
RAY_AUTH_MODE=$AUTH
EOF
    trap 'rc=$?; [ "$rc" = 0 ] || { echo "multinode: start failed; stopping what was started (logs: $DIR)" >&2; stop_all; }' EXIT
    # shellcheck disable=SC2086
    setsid "$RAY" start --head --block --node-ip-address=127.0.0.1 --port="$GCS_PORT" --num-cpus="$CPUS" \
      --include-dashboard=true --dashboard-host=127.0.0.1 --dashboard-port="$DASH_PORT" \
      --ray-client-server-port="$(free_port)" --object-store-memory=300000000 --temp-dir="$RAY_TMP" \
      --disable-usage-stats $HEAD_PORTS >"$DIR/node0.log" 2>&1 </dev/null &
    echo $! >"$DIR/node0.pid"
    for _ in $(seq 1 240); do
      curl -fsS --max-time 3 "http://127.0.0.1:$DASH_PORT/api/gcs_healthz" >/dev/null 2>&1 && break
      kill -0 "$(cat "$DIR/node0.pid")" 2>/dev/null || { tail -20 "$DIR/node0.log" >&2; die "head exited during start-up"; }
      sleep 0.5
    done
    curl -fsS --max-time 3 "http://127.0.0.1:$DASH_PORT/api/gcs_healthz" >/dev/null || die "head dashboard not up on $DASH_PORT"
    for i in $(seq 1 $((NODES - 1))); do
      MP="$(free_port)"; METRICS_TARGETS="$METRICS_TARGETS 127.0.0.1:$MP"
      PORTS="$(node_ports "$MP")"
      # shellcheck disable=SC2086
      setsid "$RAY" start --block --address="127.0.0.1:$GCS_PORT" --node-ip-address=127.0.0.1 --num-cpus="$CPUS" \
        --object-store-memory=300000000 --disable-usage-stats $PORTS >"$DIR/node$i.log" 2>&1 </dev/null &
      echo $! >"$DIR/node$i.pid"
    done
    echo "METRICS_TARGETS=\"$METRICS_TARGETS\"" >>"$ENVF"
    for _ in $(seq 1 240); do
      [ "$(alive_nodes "http://127.0.0.1:$DASH_PORT")" -ge "$NODES" ] && break
      for pidf in "$DIR"/node*.pid; do
        kill -0 "$(cat "$pidf")" 2>/dev/null || { tail -20 "${pidf%.pid}.log" >&2; die "$(basename "${pidf%.pid}") exited during start-up"; }
      done
      sleep 0.5
    done
    n="$(alive_nodes "http://127.0.0.1:$DASH_PORT")"
    [ "$n" -ge "$NODES" ] || die "only $n of $NODES nodes alive"
    trap - EXIT
    echo "multinode: $NODES Ray nodes on 127.0.0.1 ($CPUS CPU each); RAY_ADDRESS=127.0.0.1:$GCS_PORT"
    echo "  jobs/dashboard: http://127.0.0.1:$DASH_PORT   metrics: $METRICS_TARGETS   auth: $AUTH"
    ;;
  status)
    [ -f "$ENVF" ] || { echo "multinode: down"; exit 1; }
    . "$ENVF"
    echo "multinode: $(alive_nodes "$DASHBOARD_URL") nodes alive; RAY_ADDRESS=$RAY_ADDRESS dashboard $DASHBOARD_URL"
    ;;
  stop)
    stop_all
    echo "multinode: stopped ($DIR)"
    ;;
esac

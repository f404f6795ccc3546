#!/usr/bin/env bash
# Prometheus (Debian's binary, not its system service) scraping Ray's metrics, on 127.0.0.1.
#
#   infra/prometheus.sh start [--dir DIR] [--port 9090] [--target 127.0.0.1:8080 ...]
#                             [--sd-file /tmp/ray/prom_metrics_service_discovery.json|none] [--interval 5s]
#   infra/prometheus.sh stop  [--dir DIR]
#   infra/prometheus.sh status [--dir DIR]
#
# DIR (default $DTLAB_RUNS_DIR/prometheus, else <repo>/runs/prometheus) holds the rendered
# prometheus.yml (from infra/prometheus/prometheus.yml), the TSDB (data/), prometheus.log and
# prometheus.pid. Point Ray at it: `dtlab run ... cluster.metrics_export_port=8080` (embedded Ray),
# or `ray start --metrics-export-port=8080` (infra/multinode.sh does). Grafana: infra/README.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CMD="${1:-}"; shift || true
DIR="${DTLAB_PROMETHEUS_DIR:-${DTLAB_RUNS_DIR:-$ROOT/runs}/prometheus}"
PORT="${DTLAB_PROMETHEUS_PORT:-9090}"
INTERVAL="5s"
SD_FILE="/tmp/ray/prom_metrics_service_discovery.json"
TARGETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift 2;;
    --port) PORT="$2"; shift 2;;
    --target) TARGETS+=("$2"); shift 2;;
    --sd-file) SD_FILE="$2"; shift 2;;
    --interval) INTERVAL="$2"; shift 2;;
    *) echo "prometheus: unknown option $1 (allowed: --dir --port --target --sd-file --interval)" >&2; exit 2;;
  esac
done
case "$CMD" in start|stop|status) ;; *)
  echo "usage: $0 {start|stop|status} [--dir DIR] [--port N] [--target HOST:PORT]... [--sd-file PATH|none] [--interval 5s]" >&2
  exit 2;; esac
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("127.0.0.1:8080")

die() { echo "prometheus: $*" >&2; exit 1; }
mkdir -p "$DIR"; DIR="$(cd "$DIR" && pwd)"
PIDF="$DIR/prometheus.pid"; CONF="$DIR/prometheus.yml"; LOG="$DIR/prometheus.log"
[ "$CMD" = start ] || { [ -f "$DIR/port" ] && PORT="$(cat "$DIR/port")"; }
PROM_BIN="${PROM_BIN:-$(command -v prometheus || echo /usr/bin/prometheus)}"

alive() { [ -f "$PIDF" ] && kill -0 "$(cat "$PIDF")" 2>/dev/null; }
ready() { curl -fsS --max-time 5 "http://127.0.0.1:$PORT/-/ready" >/dev/null 2>&1; }

render() {
  local tlist="" t
  for t in "${TARGETS[@]}"; do
    case "$t" in 127.0.0.1:*|localhost:*) ;; *) echo "prometheus: note: scraping non-loopback target $t" >&2;; esac
    tlist="$tlist\"$t\", "
  done
  tlist="[${tlist%, }]"
  local sd_expr
  if [ "$SD_FILE" = none ]; then sd_expr='/# @sd/d'; else sd_expr="s|^      - files: .*# @sd-file|      - files: [\"$SD_FILE\"]|"; fi
  sed -e "s|^\(  [a-z_]*_interval:\) [0-9a-z]* *# @interval|\1 $INTERVAL|" \
      -e "s|^      - targets: .*# @targets|      - targets: $tlist|" \
      -e "$sd_expr" \
      "$ROOT/infra/prometheus/prometheus.yml" >"$CONF"
}

case "$CMD" in
  start)
    [ -x "$PROM_BIN" ] || die "prometheus binary not found ($PROM_BIN); run infra/install_services.sh (Debian package 'prometheus')"
    if alive; then echo "prometheus: already running (pid $(cat "$PIDF")) on http://127.0.0.1:$PORT"; exit 0; fi
    render
    if command -v promtool >/dev/null 2>&1; then promtool check config "$CONF" >/dev/null || die "rendered config $CONF is invalid"; fi
    mkdir -p "$DIR/data"
    echo "$PORT" >"$DIR/port"
    setsid "$PROM_BIN" --config.file="$CONF" --storage.tsdb.path="$DIR/data" \
      --web.listen-address="127.0.0.1:$PORT" --storage.tsdb.retention.time=15d \
      >"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDF"
    for _ in $(seq 1 120); do
      ready && break
      alive || { tail -20 "$LOG" >&2; rm -f "$PIDF"; die "prometheus exited during start-up"; }
      sleep 0.5
    done
    ready || { tail -20 "$LOG" >&2; kill "$(cat "$PIDF")" 2>/dev/null || true; rm -f "$PIDF"; die "not ready after 60s"; }
    echo "prometheus: http://127.0.0.1:$PORT  scraping ${TARGETS[*]} (+ sd file: $SD_FILE) every $INTERVAL"
    ;;
  stop)
    if alive; then
      pid="$(cat "$PIDF")"; kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDF" "$DIR/port"
    echo "prometheus: stopped ($DIR)"
    ;;
  status)
    if alive && ready; then echo "prometheus: pid $(cat "$PIDF"), ready on http://127.0.0.1:$PORT"; else echo "prometheus: down"; exit 1; fi
    ;;
esac

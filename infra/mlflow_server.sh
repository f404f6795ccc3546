#!/usr/bin/env bash
# MLflow tracking server on PostgreSQL, both bound to 127.0.0.1 only.
#
#   infra/mlflow_server.sh start  [--dir DIR] [--port 5055] [--pg-port 5433] [--workers 1]
#   infra/mlflow_server.sh stop   [--dir DIR]
#   infra/mlflow_server.sh status [--dir DIR]
#
# DIR (default $DTLAB_RUNS_DIR/mlflow-server, else <repo>/runs/mlflow-server) holds everything:
#   pgdata/ (a private PostgreSQL cluster made by initdb), artifacts/ (the server's artifact root,
#   proxied to clients as mlflow-artifacts:/), logs/, mlflow.pid, ports.env.
# The backend URI is postgresql+psycopg://postgres@127.0.0.1:PG_PORT/mlflow (psycopg 3; SQLAlchemy 2
# maps plain postgresql:// to psycopg 3 as well). Loopback connections are trusted (dev stack: no
# password, never listening beyond 127.0.0.1). As root, PostgreSQL runs as the `postgres` user.
# Point dtlab at it with `tracking=server` (DTLAB_MLFLOW_SERVER=http://127.0.0.1:PORT if not 5055).
# Environment equivalents: DTLAB_MLFLOW_DIR, DTLAB_MLFLOW_PORT, DTLAB_PG_PORT, DTLAB_MLFLOW_WORKERS,
# PG_BIN (PostgreSQL binaries; default the newest /usr/lib/postgresql/*/bin), MLFLOW_BIN.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CMD="${1:-}"; shift || true
DIR="${DTLAB_MLFLOW_DIR:-${DTLAB_RUNS_DIR:-$ROOT/runs}/mlflow-server}"
PORT="${DTLAB_MLFLOW_PORT:-5055}"
PG_PORT="${DTLAB_PG_PORT:-5433}"
WORKERS="${DTLAB_MLFLOW_WORKERS:-1}"
WAIT_S="${DTLAB_MLFLOW_WAIT_S:-90}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift 2;;
    --port) PORT="$2"; shift 2;;
    --pg-port) PG_PORT="$2"; shift 2;;
    --workers) WORKERS="$2"; shift 2;;
    *) echo "mlflow_server: unknown option $1 (allowed: --dir --port --pg-port --workers)" >&2; exit 2;;
  esac
done
case "$CMD" in start|stop|status) ;; *)
  echo "usage: $0 {start|stop|status} [--dir DIR] [--port N] [--pg-port N] [--workers N]" >&2; exit 2;; esac

die() { echo "mlflow_server: $*" >&2; exit 1; }
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
PGDATA="$DIR/pgdata"; ART="$DIR/artifacts"; LOGS="$DIR/logs"; PIDF="$DIR/mlflow.pid"; PORTS="$DIR/ports.env"
# A running stack remembers its ports (stop/status need no flags).
if [ "$CMD" != start ] && [ -f "$PORTS" ]; then . "$PORTS"; fi

PG_BIN="${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"
MLFLOW_BIN="${MLFLOW_BIN:-$ROOT/.venv/bin/mlflow}"
[ -x "$MLFLOW_BIN" ] || MLFLOW_BIN="$(command -v mlflow || true)"

as_pg() {  # run a PostgreSQL binary as the cluster owner
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

mlflow_alive() { [ -f "$PIDF" ] && kill -0 "$(cat "$PIDF")" 2>/dev/null; }
pg_alive() { [ -f "$PGDATA/postmaster.pid" ] && as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; }
healthy() { curl -fsS --max-time 5 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; }

start_pg() {
  [ -x "$PG_BIN/initdb" ] || die "PostgreSQL binaries not found (PG_BIN=$PG_BIN); run infra/install_services.sh"
  mkdir -p "$LOGS"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root but there is no 'postgres' user to own the cluster"
    chown postgres "$DIR" "$LOGS"
    # postgres must be able to reach DIR: every parent needs o+x.
    runuser -u postgres -- test -w "$DIR" || die "user postgres cannot write $DIR (a parent directory lacks o+x?); use --dir elsewhere"
  fi
  if [ ! -f "$PGDATA/PG_VERSION" ]; then
    as_pg "$PG_BIN/initdb" -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 --no-locale >"$LOGS/initdb.log" 2>&1 \
      || { cat "$LOGS/initdb.log" >&2; die "initdb failed"; }
  fi
  if ! pg_alive; then
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$LOGS/postgres.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories='$PGDATA'" start >/dev/null \
      || { tail -20 "$LOGS/postgres.log" >&2; die "PostgreSQL did not start on 127.0.0.1:$PG_PORT"; }
  fi
  if ! as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='mlflow'" | grep -q 1; then
    as_pg "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres mlflow || die "createdb mlflow failed"
  fi
}

start_mlflow() {
  [ -n "$MLFLOW_BIN" ] && [ -x "$MLFLOW_BIN" ] || die "mlflow not found (MLFLOW_BIN); run make install"
  mkdir -p "$ART" "$LOGS"
  if mlflow_alive; then echo "mlflow_server: already running (pid $(cat "$PIDF"))"; return; fi
  if healthy; then die "port $PORT already serves an MLflow /health not started from $DIR; pick --port"; fi
  # setsid: the server and its uvicorn workers form one process group, stopped together.
  setsid "$MLFLOW_BIN" server \
    --backend-store-uri "postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/mlflow" \
    --artifacts-destination "$ART" \
    --host 127.0.0.1 --port "$PORT" --workers "$WORKERS" \
    >"$LOGS/mlflow.log" 2>&1 </dev/null &
  echo $! >"$PIDF"
  local t=0
  until healthy; do
    if ! mlflow_alive; then tail -30 "$LOGS/mlflow.log" >&2; rm -f "$PIDF"; die "mlflow server exited during start-up"; fi
    sleep 0.5; t=$((t + 1))
    if [ "$t" -ge $((WAIT_S * 2)) ]; then tail -30 "$LOGS/mlflow.log" >&2; die "mlflow server not healthy after ${WAIT_S}s"; fi
  done
}

stop_all() {
  if mlflow_alive; then
    local pid; pid="$(cat "$PIDF")"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$PIDF"
  if [ -x "$PG_BIN/pg_ctl" ] && pg_alive; then
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop >/dev/null
  fi
  rm -f "$PORTS"
}

case "$CMD" in
  start)
    printf 'PORT=%s\nPG_PORT=%s\n' "$PORT" "$PG_PORT" >"$PORTS"
    trap 'rc=$?; [ "$rc" = 0 ] || { echo "mlflow_server: start failed; stopping what was started" >&2; stop_all; }' EXIT
    start_pg
    start_mlflow
    trap - EXIT
    echo "mlflow_server: http://127.0.0.1:$PORT  (backend postgresql://127.0.0.1:$PG_PORT/mlflow, artifacts $ART)"
    echo "  use it: dtlab run ... tracking=server   (DTLAB_MLFLOW_SERVER=http://127.0.0.1:$PORT)"
    ;;
  stop)
    stop_all
    echo "mlflow_server: stopped ($DIR)"
    ;;
  status)
    m=down; p=down
    mlflow_alive && m="pid $(cat "$PIDF")"; healthy && m="$m, healthy on http://127.0.0.1:$PORT"
    pg_alive && p="up on 127.0.0.1:$PG_PORT"
    echo "mlflow: $m"; echo "postgres: $p"
    mlflow_alive && healthy && pg_alive
    ;;
esac

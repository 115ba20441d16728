#!/usr/bin/env bash
# Start a Dask scheduler and workers on this machine with the `dask` command line, the way
# a real deployment starts them on several hosts (run `dask worker SCHEDULER` on each).
#
#   deploy/start-cluster.sh                      # 2 workers x 1 thread, 127.0.0.1:8786
#   N_WORKERS=4 PORT=8800 deploy/start-cluster.sh
#   HOST=0.0.0.0 deploy/start-cluster.sh          # listen on every interface (other hosts
#                                                # can join: use TLS, see deploy/README.md)
#   TLS_DIR=certs HOST=0.0.0.0 deploy/start-cluster.sh   # tls:// with the certificates of
#                                                # deploy/tls/make-certs.sh; the dashboard
#                                                # (plain HTTP) stays on 127.0.0.1
#   deploy/stop-cluster.sh
#
# One thread per worker process: NumPy/BLAS then run one thread per core without
# oversubscription (the nanny pins BLAS to 1 thread). Workers must be able to import
# elmscale and every plugin a model uses.
#
# Exits non-zero, with the end of the scheduler's or workers' log, when the scheduler does
# not come up or the workers do not connect; prints the scheduler and dashboard addresses.
# Refuses to start, touching nothing, when RUN_DIR's cluster is still running or the
# scheduler's port is taken. The dashboard binds DASHBOARD_HOST, 127.0.0.1 whatever HOST is:
# it is plain HTTP without login (reach it through `ssh -L`), so serving it on another
# interface takes an explicit DASHBOARD_HOST.
set -euo pipefail
N_WORKERS=${N_WORKERS:-2}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8786}
DASHBOARD_PORT=${DASHBOARD_PORT:-8787}
DASHBOARD_HOST=${DASHBOARD_HOST:-127.0.0.1}   # plain HTTP even with TLS
MEMORY=${MEMORY:-auto}
TIMEOUT=${TIMEOUT:-60}
RUN_DIR=${RUN_DIR:-${TMPDIR:-/tmp}/elmscale-cluster}
TLS_DIR=${TLS_DIR:-}
mkdir -p "$RUN_DIR"

# never start over a running cluster: its pid files, logs and address would be overwritten
# and a failing start would stop its processes
for f in scheduler workers; do
    if [ -f "$RUN_DIR/$f.pid" ] && kill -0 "$(cat "$RUN_DIR/$f.pid")" 2>/dev/null; then
        echo "start-cluster: a cluster is already running from $RUN_DIR ($f pid" \
            "$(cat "$RUN_DIR/$f.pid")); stop it with deploy/stop-cluster.sh or choose" \
            "another RUN_DIR and PORT" >&2
        exit 1
    fi
done
if ! python - "$HOST" "$PORT" <<'PY'
import socket, sys
with socket.socket() as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the scheduler binds
    try:
        s.bind((sys.argv[1], int(sys.argv[2])))
    except OSError:
        sys.exit(1)
PY
then
    echo "start-cluster: address in use: $HOST:$PORT is taken (another scheduler?);" \
        "choose another PORT" >&2
    exit 1
fi

# the address clients and workers dial: the bind host, or this host when binding all
CONNECT_HOST=$HOST
if [ "$HOST" = "0.0.0.0" ]; then CONNECT_HOST=$(hostname -I 2>/dev/null | awk '{print $1}'); fi
CONNECT_HOST=${CONNECT_HOST:-127.0.0.1}

PROTOCOL=tcp
TLS_ARGS=()
if [ -n "$TLS_DIR" ]; then
    PROTOCOL=tls
    TLS_ARGS=(--tls-ca-file "$TLS_DIR/ca.pem" --tls-cert "$TLS_DIR/node.pem"
              --tls-key "$TLS_DIR/node-key.pem")
fi
ADDRESS="$PROTOCOL://$CONNECT_HOST:$PORT"
echo "$ADDRESS" >"$RUN_DIR/address"

fail() {  # stop what this run started (RUN_DIR holds only its pid files), then exit
    echo "start-cluster: $1" >&2
    tail -n 20 "$2" >&2 || true
    RUN_DIR=$RUN_DIR "$(dirname "$0")/stop-cluster.sh"
    exit 1
}

dask scheduler --host "$HOST" --port "$PORT" --protocol "$PROTOCOL" \
    --dashboard-address "$DASHBOARD_HOST:$DASHBOARD_PORT" "${TLS_ARGS[@]}" \
    >"$RUN_DIR/scheduler.log" 2>&1 &
echo $! >"$RUN_DIR/scheduler.pid"

# the scheduler is up when its log says it listens (TLS needs a handshake, so no plain
# socket probe); fail early if the process died (port taken, bad certificate, ...)
for _ in $(seq $((TIMEOUT * 5))); do
    if grep -q "Scheduler at:" "$RUN_DIR/scheduler.log"; then break; fi
    if ! kill -0 "$(cat "$RUN_DIR/scheduler.pid")" 2>/dev/null; then
        fail "the scheduler exited" "$RUN_DIR/scheduler.log"
    fi
    sleep 0.2
done
grep -q "Scheduler at:" "$RUN_DIR/scheduler.log" \
    || fail "the scheduler did not start within ${TIMEOUT}s" "$RUN_DIR/scheduler.log"

dask worker "$ADDRESS" --nworkers "$N_WORKERS" --nthreads 1 --host "$HOST" \
    --memory-limit "$MEMORY" --local-directory "$RUN_DIR" "${TLS_ARGS[@]}" \
    >"$RUN_DIR/workers.log" 2>&1 &
echo $! >"$RUN_DIR/workers.pid"

python - "$ADDRESS" "$N_WORKERS" "$TIMEOUT" "$TLS_DIR" "$DASHBOARD_HOST" <<'PY' || fail "the workers did not connect" "$RUN_DIR/workers.log"
import sys
from distributed import Client
from distributed.security import Security

address, n, timeout, tls, dash_host = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                       sys.argv[4], sys.argv[5])
security = Security(tls_ca_file=f"{tls}/ca.pem", tls_client_cert=f"{tls}/node.pem",
                    tls_client_key=f"{tls}/node-key.pem", require_encryption=True) \
    if tls else None
with Client(address, timeout=f"{timeout}s", security=security) as client:
    client.wait_for_workers(n, timeout=timeout)
    info = client.scheduler_info()
    port = info.get("services", {}).get("dashboard")
    host = address.split("://")[1].rsplit(":", 1)[0] if dash_host == "0.0.0.0" else dash_host
    dashboard = f"http://{host}:{port}/status" if port else \
        "not served (the scheduler needs bokeh: pip install 'elmscale[cli]')"
    print(f"scheduler {address} with {len(info['workers'])} workers ready")
    print(f"dashboard {dashboard}")
PY

#!/usr/bin/env bash
# Start a Dask scheduler and workers on this machine with the `dask` command line, the way
# a real deployment starts them on several hosts (run `dask worker SCHEDULER` on each).
#
#   deploy/start-cluster.sh            # 2 workers x 1 thread, scheduler on port 8786
#   N_WORKERS=4 PORT=8800 deploy/start-cluster.sh
#   deploy/stop-cluster.sh
#
# One thread per worker process: NumPy/BLAS then run one thread per core without
# oversubscription (the nanny pins BLAS to 1 thread). Workers must be able to import
# elmscale and every plugin a model uses.
set -euo pipefail
N_WORKERS=${N_WORKERS:-2}
PORT=${PORT:-8786}
MEMORY=${MEMORY:-auto}
RUN_DIR=${RUN_DIR:-${TMPDIR:-/tmp}/elmscale-cluster}
mkdir -p "$RUN_DIR"

dask scheduler --host 127.0.0.1 --port "$PORT" --dashboard-address :0 \
    >"$RUN_DIR/scheduler.log" 2>&1 &
echo $! >"$RUN_DIR/scheduler.pid"

for _ in $(seq 50); do   # wait until the scheduler accepts connections
    if python -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $PORT)))"; then
        break
    fi
    sleep 0.2
done

dask worker "tcp://127.0.0.1:$PORT" --nworkers "$N_WORKERS" --nthreads 1 \
    --memory-limit "$MEMORY" --local-directory "$RUN_DIR" \
    >"$RUN_DIR/workers.log" 2>&1 &
echo $! >"$RUN_DIR/workers.pid"

python - "$PORT" "$N_WORKERS" <<'PY'
import sys
from distributed import Client
port, n = sys.argv[1], int(sys.argv[2])
with Client(f"tcp://127.0.0.1:{port}", timeout="30s") as client:
    client.wait_for_workers(n, timeout=60)
    print(f"scheduler tcp://127.0.0.1:{port} with {n} workers ready")
PY

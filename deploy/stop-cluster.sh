#!/usr/bin/env bash
# Stop what deploy/start-cluster.sh started (same RUN_DIR), and wait until it has exited.
RUN_DIR=${RUN_DIR:-${TMPDIR:-/tmp}/elmscale-cluster}
for f in workers scheduler; do
    if [ -f "$RUN_DIR/$f.pid" ]; then
        pid=$(cat "$RUN_DIR/$f.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$RUN_DIR/$f.pid"
    fi
done
rm -f "$RUN_DIR/address"

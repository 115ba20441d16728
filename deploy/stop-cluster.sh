#!/usr/bin/env bash
# Stop what deploy/start-cluster.sh started.
RUN_DIR=${RUN_DIR:-${TMPDIR:-/tmp}/elmscale-cluster}
for f in workers scheduler; do
    if [ -f "$RUN_DIR/$f.pid" ]; then
        kill "$(cat "$RUN_DIR/$f.pid")" 2>/dev/null || true
        rm -f "$RUN_DIR/$f.pid"
    fi
done

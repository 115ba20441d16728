"""deploy/ as CI runs it (docker is not available there): start-cluster.sh starts a
scheduler and two workers on loopback, example.py fits on them, stop-cluster.sh stops
them; the same over mutual TLS with the certificates of deploy/tls/make-certs.sh."""

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"

pytestmark = pytest.mark.skipif(
    shutil.which("dask") is None or shutil.which("bash") is None,
    reason="needs bash and the `dask` command line",
)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(run_dir, **extra):
    env = dict(
        os.environ,
        RUN_DIR=str(run_dir),
        PORT=str(_free_port()),
        DASHBOARD_PORT=str(_free_port()),
        N_WORKERS="2",
        MEMORY="1GiB",
        TIMEOUT="60",
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


def _sh(args, env, timeout=180):
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _alive(pid_file):
    if not pid_file.exists():
        return False
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return False
    return True


def _start_run_stop(env, run_dir):
    started = _sh(["bash", str(DEPLOY / "start-cluster.sh")], env)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        address = (run_dir / "address").read_text().strip()
        assert f"scheduler {address} with 2 workers ready" in started.stdout
        assert f"dashboard http://127.0.0.1:{env['DASHBOARD_PORT']}" in started.stdout
        example = _sh([sys.executable, str(DEPLOY / "example.py"), address], env)
        assert example.returncode == 0, example.stderr
        assert "ran on 2 workers" in example.stdout
        return address
    finally:
        pids = [run_dir / "scheduler.pid", run_dir / "workers.pid"]
        stopped = _sh(["bash", str(DEPLOY / "stop-cluster.sh")], env)
        assert stopped.returncode == 0
        assert not any(_alive(p) for p in pids)


def test_start_example_stop_on_loopback(tmp_path):
    address = _start_run_stop(_env(tmp_path), tmp_path)
    assert address.startswith("tcp://127.0.0.1:")


def test_start_fails_clearly_when_the_port_is_taken(tmp_path):
    """A scheduler that cannot start: exit status 1, its log's end on stderr, nothing left
    running."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        env = _env(tmp_path)
        env["PORT"] = str(s.getsockname()[1])
        started = _sh(["bash", str(DEPLOY / "start-cluster.sh")], env)
    assert started.returncode == 1
    assert "start-cluster: the scheduler" in started.stderr
    assert not _alive(tmp_path / "scheduler.pid")


CONNECT = """
import sys
sys.path.insert(0, "deploy")
from distributed import Client
from example import security_from
with Client(sys.argv[1], security=security_from(sys.argv[2]), timeout=sys.argv[3]) as client:
    print(client.submit(sum, [1, 2]).result(), len(client.scheduler_info()["workers"]))
"""


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_tls_cluster_accepts_its_certificates_and_refuses_others(tmp_path):
    """Mutual TLS: a client with the cluster's certificates (example.py's Security) runs a
    task on the workers; one holding certificates of another authority is refused."""
    certs, other = tmp_path / "certs", tmp_path / "other"
    for d in (certs, other):
        made = _sh(["bash", str(DEPLOY / "tls" / "make-certs.sh"), str(d)], os.environ)
        assert made.returncode == 0, made.stderr
    assert oct((certs / "node-key.pem").stat().st_mode & 0o777) == "0o600"
    env = _env(tmp_path / "run", TLS_DIR=str(certs))
    started = _sh(["bash", str(DEPLOY / "start-cluster.sh")], env)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        address = (tmp_path / "run" / "address").read_text().strip()
        assert address.startswith("tls://127.0.0.1:")
        ok = _sh([sys.executable, "-c", CONNECT, address, str(certs), "20s"], env, timeout=60)
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.split() == ["3", "2"]
        stranger = _sh([sys.executable, "-c", CONNECT, address, str(other), "3s"], env, timeout=60)
        assert stranger.returncode != 0
        assert stranger.stdout == ""
        plain = _sh(
            [sys.executable, "-c", CONNECT, address.replace("tls://", "tcp://"), "", "3s"],
            env,
            timeout=60,
        )
        assert plain.returncode != 0
    finally:
        _sh(["bash", str(DEPLOY / "stop-cluster.sh")], env)

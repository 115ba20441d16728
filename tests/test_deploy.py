"""deploy/ as CI runs it (docker is not available there): start-cluster.sh starts a
scheduler and two workers on loopback, example.py fits on them, stop-cluster.sh stops
them; a second start over a running cluster is refused and leaves it alone; the same over
mutual TLS with the certificates of deploy/tls/make-certs.sh, with the dashboard kept on
127.0.0.1; make-certs.sh writes no key where git would commit it."""

import os
import shutil
import socket
import subprocess
import sys
import urllib.request
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


def _pids(run_dir):
    return [(run_dir / f"{name}.pid").read_text() for name in ("scheduler", "workers")]


def _refused_starts(env, run_dir, other_dir):
    """Two starts while the cluster of ``run_dir`` runs: with its RUN_DIR (another port),
    and with another RUN_DIR on its port. Both exit 1 with a clear message and leave the
    running cluster's processes and files as they were."""
    before = _pids(run_dir), (run_dir / "address").read_text()
    again = _sh(["bash", str(DEPLOY / "start-cluster.sh")], {**env, "PORT": str(_free_port())})
    assert again.returncode == 1
    assert "start-cluster: a cluster is already running from" in again.stderr
    same_port = _sh(["bash", str(DEPLOY / "start-cluster.sh")], {**env, "RUN_DIR": str(other_dir)})
    assert same_port.returncode == 1
    assert f"start-cluster: address in use: 127.0.0.1:{env['PORT']} is taken" in same_port.stderr
    assert not (other_dir / "scheduler.pid").exists()
    assert (_pids(run_dir), (run_dir / "address").read_text()) == before
    assert all(_alive(run_dir / f"{name}.pid") for name in ("scheduler", "workers"))


def _start_run_stop(env, run_dir, other_dir=None):
    started = _sh(["bash", str(DEPLOY / "start-cluster.sh")], env)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        address = (run_dir / "address").read_text().strip()
        assert f"scheduler {address} with 2 workers ready" in started.stdout
        link = f"http://127.0.0.1:{env['DASHBOARD_PORT']}/status"
        assert f"dashboard {link}" in started.stdout
        _assert_dashboard_answers(link)
        if other_dir is not None:
            _refused_starts(env, run_dir, other_dir)
        example = _sh([sys.executable, str(DEPLOY / "example.py"), address], env)
        assert example.returncode == 0, example.stderr
        assert "ran on 2 workers" in example.stdout
        return address
    finally:
        pids = [run_dir / "scheduler.pid", run_dir / "workers.pid"]
        stopped = _sh(["bash", str(DEPLOY / "stop-cluster.sh")], env)
        assert stopped.returncode == 0
        assert not any(_alive(p) for p in pids)


def _assert_dashboard_answers(link):
    """The printed dashboard link serves the dashboard (bokeh is in the cli extra)."""
    pytest.importorskip("bokeh")
    with urllib.request.urlopen(link, timeout=30) as page:
        assert page.status == 200
        assert b"Dask" in page.read()


@pytest.mark.slow
def test_start_example_stop_on_loopback(tmp_path):
    address = _start_run_stop(_env(tmp_path / "a"), tmp_path / "a", other_dir=tmp_path / "b")
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
    assert f"start-cluster: address in use: 127.0.0.1:{env['PORT']} is taken" in started.stderr
    assert not (tmp_path / "scheduler.pid").exists()


def test_start_reports_a_scheduler_that_dies(tmp_path):
    """A scheduler that exits at once (an unreadable TLS certificate): exit status 1, the
    end of its log on stderr, nothing left running."""
    env = _env(tmp_path, TLS_DIR=str(tmp_path / "no-certs"))
    started = _sh(["bash", str(DEPLOY / "start-cluster.sh")], env)
    assert started.returncode == 1
    assert "start-cluster: the scheduler exited" in started.stderr
    assert not _alive(tmp_path / "scheduler.pid")


CONNECT = """
import sys
sys.path.insert(0, "deploy")
from distributed import Client
from example import security_from
with Client(sys.argv[1], security=security_from(sys.argv[2]), timeout=sys.argv[3]) as client:
    print(client.submit(sum, [1, 2]).result(), len(client.scheduler_info()["workers"]))
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_tls_cluster_accepts_its_certificates_and_refuses_others(tmp_path):
    """Mutual TLS: a client with the cluster's certificates (example.py's Security) runs a
    task on the workers; one holding certificates of another authority is refused."""
    certs, other = tmp_path / "certs", tmp_path / "other"
    for d in (certs, other):
        made = _sh(["bash", str(DEPLOY / "tls" / "make-certs.sh"), str(d)], os.environ)
        assert made.returncode == 0, made.stderr
    assert oct((certs / "node-key.pem").stat().st_mode & 0o777) == "0o600"
    assert oct((certs / "ca-key.pem").stat().st_mode & 0o777) == "0o600"
    # the recipe of deploy/README.md: every interface for the cluster, the dashboard local
    env = _env(tmp_path / "run", TLS_DIR=str(certs), HOST="0.0.0.0")
    started = _sh(["bash", str(DEPLOY / "start-cluster.sh")], env)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        address = (tmp_path / "run" / "address").read_text().strip()
        assert address.startswith("tls://")
        link = f"http://127.0.0.1:{env['DASHBOARD_PORT']}/status"
        assert f"dashboard {link}" in started.stdout
        _assert_dashboard_answers(link)
        for ip in _other_addresses():
            with socket.socket() as s, pytest.raises(OSError):
                s.settimeout(5)
                s.connect((ip, int(env["DASHBOARD_PORT"])))
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


def _other_addresses():
    """This host's IPv4 addresses other than loopback."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout
    except OSError:
        return []
    return [a for a in out.split() if "." in a and not a.startswith("127.")]


@pytest.mark.skipif(
    shutil.which("openssl") is None or shutil.which("git") is None, reason="needs openssl, git"
)
def test_make_certs_writes_no_key_where_git_would_commit_it(tmp_path):
    """Inside a git work tree, make-certs.sh refuses a folder git does not ignore (nothing
    written) and accepts an ignored one; this repository ignores the README's certs/."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    refused = _sh(["bash", str(DEPLOY / "tls" / "make-certs.sh"), str(repo / "keys")], os.environ)
    assert refused.returncode == 1
    assert "is inside the git work tree" in refused.stderr and "not ignored" in refused.stderr
    assert not (repo / "keys").exists()
    (repo / ".gitignore").write_text("certs/\n")
    made = _sh(["bash", str(DEPLOY / "tls" / "make-certs.sh"), str(repo / "certs")], os.environ)
    assert made.returncode == 0, made.stderr
    assert (repo / "certs" / "ca-key.pem").exists()
    status = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True
    )
    assert status.stdout.split() == ["??", ".gitignore"]
    if (ROOT / ".git").exists():
        ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "certs/ca-key.pem"])
        assert ignored.returncode == 0


def _cli(*argv, env, timeout=240):
    """``elmscale ARGV`` of this checkout in a subprocess."""
    return _sh([sys.executable, "-m", "elmscale.cli", *map(str, argv)], env, timeout=timeout)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
def test_the_cli_fits_on_the_tls_recipe_with_its_certificates(tmp_path):
    """`elmscale fit --scheduler tls://... --tls-ca-file --tls-cert --tls-key` with the files
    of make-certs.sh runs on the recipe's TLS cluster and writes one label per row, as it does
    with the files in dask's configuration instead; with neither, or with a file that cannot
    be read, it is a one-line usage error (exit 2)."""
    import numpy as np
    from sklearn.datasets import make_blobs

    certs = tmp_path / "certs"
    made = _sh(["bash", str(DEPLOY / "tls" / "make-certs.sh"), str(certs)], os.environ)
    assert made.returncode == 0, made.stderr
    X, _ = make_blobs(n_samples=900, n_features=6, centers=3, random_state=0)
    np.save(tmp_path / "X.npy", X)
    env = _env(tmp_path / "run", TLS_DIR=str(certs))
    started = _sh(["bash", str(DEPLOY / "start-cluster.sh")], env)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        address = (tmp_path / "run" / "address").read_text().strip()
        assert address.startswith("tls://")
        fit = [
            "fit",
            "us-elm",
            tmp_path / "X.npy",
            "-p",
            "n_clusters=3",
            "random_state=0",
            "--scheduler",
            address,
        ]
        tls = ["--tls-ca-file", certs / "ca.pem", "--tls-cert", certs / "node.pem"]
        labels = tmp_path / "labels.npy"
        done = _cli(*fit, *tls, "--tls-key", certs / "node-key.pem", "--labels", labels, env=env)
        assert done.returncode == 0, done.stderr
        assert f"dask: {address} with 2 worker(s)" in done.stderr
        assert np.load(labels).shape == (len(X),)
        assert set(np.unique(np.load(labels))) == {0, 1, 2}

        config = {
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(certs / "ca.pem"),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(certs / "node.pem"),
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(certs / "node-key.pem"),
        }
        by_config = _cli(*fit, "--labels", tmp_path / "again.npy", env={**env, **config})
        assert by_config.returncode == 0, by_config.stderr
        np.testing.assert_array_equal(np.load(tmp_path / "again.npy"), np.load(labels))

        without = _cli(*fit, env=env)
        assert without.returncode == 2
        (line,) = without.stderr.splitlines()
        assert line.startswith(f"error: --scheduler {address} needs the cluster's certificates")
        unreadable = _cli(*fit, *tls, "--tls-key", tmp_path / "missing.pem", env=env)
        assert unreadable.returncode == 2
        assert unreadable.stderr.splitlines() == [
            f"error: --tls-key '{tmp_path / 'missing.pem'}': cannot read it "
            "(No such file or directory)"
        ]
    finally:
        _sh(["bash", str(DEPLOY / "stop-cluster.sh")], env)

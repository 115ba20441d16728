"""The command line with a cluster: Ctrl-C on a fit with ``--workers`` and a scheduler that
speaks TLS. Each test runs ``python -m elmscale.cli`` of this checkout in a subprocess."""

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "ELMSCALE_LOAD_PLUGINS": "", "PYTHONPATH": str(ROOT)}


def _default_sigint():
    """SIGINT's default disposition in the child, as an interactive shell gives its
    foreground jobs: a test run started in the background (``pytest ... &``, nohup) has
    SIGINT ignored, children inherit that, and Python then installs no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_cli(*argv):
    """``elmscale ARGV`` in its own process group, as a shell starts a foreground job."""
    return subprocess.Popen(
        [sys.executable, "-m", "elmscale.cli", *map(str, argv)],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_default_sigint,
    )


def _read_until(stream, marker, timeout):
    """Lines of ``stream`` up to the first containing ``marker`` (fails after ``timeout``)."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 1.0)
        if not ready:
            continue
        line = stream.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return lines
    pytest.fail(f"no line with {marker!r} within {timeout} s: {''.join(lines)}")


@pytest.mark.slow
@pytest.mark.distributed
def test_ctrl_c_during_a_fit_on_workers_prints_one_line_and_exits_130(tmp_path):
    """Ctrl-C reaches the whole foreground process group (the CLI, the nanny and worker
    processes): the command prints "interrupted" and exits 130, without the workers'
    tracebacks."""
    rng = np.random.RandomState(0)
    np.save(tmp_path / "X.npy", rng.normal(size=(60_000, 40)))
    proc = _start_cli(
        "fit", "us-elm", tmp_path / "X.npy", "--workers", 2, "--labels", tmp_path / "l.npy"
    )
    try:
        before = _read_until(proc.stderr, "rows x 40 columns", timeout=240)
        time.sleep(2)  # into the fit
        os.killpg(proc.pid, signal.SIGINT)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, "".join(before) + rest
    assert "Traceback" not in rest
    # after the progress and log lines of the fit so far, one line
    fit_lines = re.compile(r"progress: |input: |\d\d:\d\d:\d\d elmscale")
    assert [line for line in rest.splitlines() if not fit_lines.match(line)] == ["interrupted"]
    assert not (tmp_path / "l.npy").exists()


@pytest.mark.parametrize(
    "options, message",
    [
        (["--scheduler", "tls://127.0.0.1:1"], "needs the cluster's certificates: --tls-ca-file"),
        (["--workers", "1", "--tls-ca-file", "{npy}", "--tls-cert", "{npy}"], "need --scheduler"),
        (["--scheduler", "tcp://127.0.0.1:1", "--tls-ca-file", "{npy}"], "need --scheduler tls"),
        (["--scheduler", "tls://127.0.0.1:1", "--tls-ca-file", "{npy}"], "--tls-cert is needed"),
        (
            [
                "--scheduler",
                "tls://127.0.0.1:1",
                "--tls-ca-file",
                "{tmp}/no.pem",
                "--tls-cert",
                "{npy}",
            ],
            "--tls-ca-file '{tmp}/no.pem': cannot read it (No such file or directory)",
        ),
    ],
)
def test_tls_options_that_cannot_work_are_one_line_and_exit_2(tmp_path, options, message):
    """Checked before connecting or reading the data (the scheduler address is unused)."""
    import io

    from elmscale import cli

    np.save(tmp_path / "X.npy", np.ones((4, 2)))
    names = {"npy": tmp_path / "X.npy", "tmp": tmp_path}
    argv = ["fit", "us-elm", names["npy"], *(o.format(**names) for o in options)]
    err = io.StringIO()
    assert cli.main(argv, out=io.StringIO(), err=err) == 2
    (line,) = err.getvalue().splitlines()
    assert line.startswith("error: ") and message.format(**names) in line

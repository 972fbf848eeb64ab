"""Stopping a sweep from outside: SIGTERM (`kill`, a batch system's limit) ends it as Ctrl-C
does, exit 143 and no worker left running; a client killed outright (SIGKILL) takes its
local workers with it (Linux: the workers' parent-death signal)."""
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

HANG = pathlib.Path(__file__).parent / "sweep_models" / "hang.py"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the parent-death signal is Linux's")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"   # a zombie has ended
    except FileNotFoundError:
        return False


def wait_for(pred, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def start(tmp_path):
    shutil.copy(HANG, tmp_path / "hang.py")
    spec = tmp_path / "hang.toml"
    spec.write_text('[fixed]\nbatch = 2\ninput = 32\n[grid]\nmodel = ["hang.py:forever"]\n')
    client = subprocess.Popen([sys.executable, "-m", "pimrt", "sweep", str(spec),
                               "--out", str(tmp_path / "out"), "--quiet"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pid_file = tmp_path / "hang.pid"
    if not wait_for(lambda: pid_file.exists() or client.poll() is not None, 120) \
            or not pid_file.exists():
        client.kill()
        pytest.fail("the worker never started its task: " + client.communicate()[0])
    worker = int(pid_file.read_text())
    assert alive(worker)
    return client, worker


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGKILL, -9)])
def test_a_stopped_client_leaves_no_worker_running(tmp_path, signum, code):
    client, worker = start(tmp_path)
    os.kill(client.pid, signum)
    try:
        out, _ = client.communicate(timeout=60)
    finally:
        if alive(worker):
            os.kill(worker, signal.SIGKILL)
    assert client.returncode == code, out
    if signum == signal.SIGTERM:
        assert "interrupted: 0 points done" in out and "Traceback" not in out
    assert wait_for(lambda: not alive(worker), 10), "the worker outlived its client"

"""`pimrt sweep --scheduler`: a Dask scheduler and two workers started with Dask's own
commands on this machine, as a user starts them on several; a scheduler that does not answer
is one line naming its address."""
import contextlib
import csv
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from pimrt.cli import main

DASK = pathlib.Path(sys.executable).with_name("dask")
CRASH = pathlib.Path(__file__).parent / "sweep_models" / "crash.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_scheduler_that_does_not_answer_is_named_in_seconds(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text('[fixed]\nmodel = "resnet_cifar_20"\nbatch = 2\ninput = 32\n'
                    '[grid]\npolicy = ["serial"]\n')
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    for timeout in ([], ["--timeout", "2"]):      # Dask alone took 18 s with its default 10
        started = time.perf_counter()
        assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--scheduler", address,
                     *timeout, "--quiet"]) == 2
        assert time.perf_counter() - started < 3.0
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"pimrt sweep: error: --scheduler {address}: no Dask scheduler "
                       f"answered: nothing listens at 127.0.0.1:{port} (connection refused)"]
        assert not (tmp_path / "o").exists()


def test_a_port_that_answers_but_not_as_dask_is_one_line(tmp_path, capsys):
    """An HTTP server's first bytes read as a Dask frame of exabytes: MemoryError, a traceback."""
    spec = tmp_path / "s.toml"
    spec.write_text('[fixed]\nmodel = "resnet_cifar_20"\nbatch = 2\ninput = 32\n'
                    '[grid]\npolicy = ["serial"]\n')
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        address = f"tcp://127.0.0.1:{srv.getsockname()[1]}"
        held = []

        def serve():
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = srv.accept()
                    conn.sendall(b"HTTP/1.1 200 OK\r\n" * 64)
                    held.append(conn)
        threading.Thread(target=serve, daemon=True).start()
        started = time.perf_counter()
        code = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--scheduler", address,
                     "--quiet"])
        for conn in held:
            conn.close()
    assert code == 2 and time.perf_counter() - started < 10.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"pimrt sweep: error: --scheduler {address}: something answered, but not a Dask "
        f"scheduler: it does not speak Dask's protocol ("), err


@contextlib.contextmanager
def cluster(tmp_path):
    """`dask scheduler` and two `dask worker`s; the scheduler retries a task whose worker
    died once (docs/sweep.md)."""
    env = dict(os.environ, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="1")
    file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([str(DASK), "scheduler", "--scheduler-file", str(file),
                               "--host", "127.0.0.1", "--port", "0", "--no-dashboard"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)]
    try:
        for _ in range(600):
            if file.exists():
                try:
                    address = json.loads(file.read_text())["address"]
                    break
                except (ValueError, KeyError):
                    pass
            time.sleep(0.1)
        else:
            pytest.fail("dask scheduler did not start")
        for _ in range(2):
            procs.append(subprocess.Popen(
                [str(DASK), "worker", address, "--nworkers", "1", "--nthreads", "1",
                 "--no-dashboard"], env=env, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True))
        yield address
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_a_sweep_on_a_scheduler_and_two_workers(tmp_path, capsys):
    shutil.copy(CRASH, tmp_path / "crash.py")
    spec = tmp_path / "s.toml"
    spec.write_text('[fixed]\nbatch = 2\ninput = 32\n'
                    '[grid]\nmodel = ["resnet_cifar_20", "crash.py:once"]\n'
                    'policy = ["serial", "authority"]\n')
    with cluster(tmp_path) as address:
        assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--scheduler",
                     address, "--timeout", "60", "--quiet"]) == 0
    text, err = capsys.readouterr()
    assert f"on the Dask scheduler at {address}" in text
    # the client says when a worker died under a task and the scheduler runs it again
    assert re.search(r"^sweep: Dask worker tcp://127\.0\.0\.1:\d+ died running (the|point) "
                     r"[^;]*crash\.py:once[^;]*, which the scheduler runs again on another "
                     r"worker(;|$)", err, re.MULTILINE), err
    assert "ran: 4 points done, 0 failed" in text
    # the worker that built crash.py:once died; Dask ran its task again on a live one
    assert (tmp_path / "once.flag").exists()
    with open(tmp_path / "out" / "results.csv", newline="") as f:
        rs = list(csv.DictReader(f))
    assert [r["status"] for r in rs] == ["done"] * 4
    by = {(r["model"], r["policy"]): r for r in rs}
    # crash.py:once builds the same network: the same figures
    for policy in ("serial", "authority"):
        a, b = by[("resnet_cifar_20", policy)], by[("crash.py:once", policy)]
        assert a["step_ms"] == b["step_ms"] and a["gpu_only_step_ms"] == b["gpu_only_step_ms"]
    assert all(r["worker"] for r in rs)
    # each baseline once, as its own task
    with open(tmp_path / "out" / "tasks.csv", newline="") as f:
        tasks = list(csv.DictReader(f))
    assert sorted(t["kind"] for t in tasks) == \
        sorted(["serial", "gpu_only", "bound"] * 2 + ["point"] * 4)
    assert len({t["key"] for t in tasks}) == len(tasks)

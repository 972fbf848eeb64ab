"""A sweep point's step trace (`save_trace`) on its way to the point's folder: written there
in place by a worker that shares the folder (renamed, never read), or spooled on a worker that
does not and read back in bounded chunks; never held whole on either side; a trace of a point
that was killed left under no final name and removed by the next run; the trace replays with
`pimrt memsim` to the point's cycles. The slow test runs the same sweep on local processes and
on a Dask LocalCluster whose workers send their traces back: the same bytes."""
import concurrent.futures as cf
import csv
import json
import pathlib
import tracemalloc

import pytest

from executor_fakes import QuietExecutor
from pimrt.cli import main
from pimrt.sweep import runner, worker
from pimrt.sweep import spec as specs
from pimrt.sweep.executors import DaskExecutor
from pimrt.sweep.store import Store

SPEC = ('[fixed]\nmodel = "resnet_cifar_20"\nbatch = 2\ninput = 32\nsave_trace = "step.npy"\n'
        '[grid]\npolicy = ["authority"]\n')
CHUNK = 1 << 19                          # the test's chunk: the trace is about 13 of them


class FakeClient:
    """Dask's client.run on one fake worker: the function runs here."""

    def __init__(self):
        self.calls = []

    def run(self, fn, *args, workers):
        assert workers == ["tcp://fake:1"]
        self.calls.append((fn.__name__, args))
        return {workers[0]: fn(*args)}


class InProcess(QuietExecutor):
    """Each task run in this process when submitted (so monkeypatches hold in the worker too);
    `shared`: the worker sees the client's folder (as local processes do), else it spools
    the trace and the client fetches it as from a Dask worker (DaskExecutor.fetch)."""

    def __init__(self, shared: bool):
        self.shared = shared
        self.client = FakeClient()

    def slots(self):
        return 1

    def submit(self, kind, options, needs, dest=None):
        f = cf.Future()
        if dest is not None and self.shared:
            dest = {**dest, "local": True}
        f.set_result(worker.run_task(kind, options, tuple(needs),
                                     *(h.result() for h in needs.values()), dest=dest))
        return f

    def outcome(self, h):
        return "ok", h.result()

    fetch = DaskExecutor.fetch
    discard = DaskExecutor.discard


def _sweep(tmp, shared: bool, monkeypatch):
    """One sweep of SPEC in this process; the peak of Python's allocations while the client
    takes each point's result in (tracemalloc), and the chunk sizes read back."""
    tmp.mkdir()
    (tmp / "t.toml").write_text(SPEC)
    spec = specs.load(tmp / "t.toml")
    store = Store.open(tmp / "out", spec)
    store.start()
    peaks, reads = [], []
    real_receive, real_record, real_read = Store.receive_traces, Store.record, worker.read_chunk

    def measured(fn):
        def wrapped(*a, **kw):
            tracemalloc.start()
            try:
                return fn(*a, **kw)
            finally:
                peaks.append(tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()
        return wrapped

    def read_chunk(path, offset, size):
        data = real_read(path, offset, size)
        reads.append(len(data))
        return data

    def read_bytes(self):                # nothing reads a file of more than a chunk whole
        assert self.stat().st_size <= CHUNK, f"{self} read whole"
        return real_read_bytes(self)
    real_read_bytes = pathlib.Path.read_bytes
    with monkeypatch.context() as m:
        m.setattr(worker, "TRACE_CHUNK", CHUNK)
        m.setattr(worker, "read_chunk", read_chunk)
        m.setattr(worker, "_dask_worker", lambda: "tcp://fake:1")
        m.setattr(pathlib.Path, "read_bytes", read_bytes)
        m.setattr(Store, "receive_traces", measured(real_receive))
        m.setattr(Store, "record", measured(real_record))
        if not shared:                   # a worker that does not find the sweep's token
            m.setenv(worker.SEND_ENV, "1")
        ex = InProcess(shared)
        result = runner.run(spec, store, ex, quiet=True)
    assert result.done == 1 and not result.failed
    point = store.folder(spec.points[0])
    return point, result, peaks, reads, ex


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        tmp = tmp_path_factory.mktemp("trace")
        return {shared: _sweep(tmp / f"shared{shared}", shared, mp) for shared in (True, False)}
    finally:
        mp.undo()


def test_a_worker_that_shares_the_folder_writes_the_trace_in_place(both):
    point, result, peaks, reads, ex = both[True]
    trace = point / "step.npy"
    assert trace.stat().st_size > 8 * CHUNK
    assert result.traces == {"in place": 1}
    assert reads == [] and ex.client.calls == []          # renamed, never read
    assert max(peaks) < CHUNK                             # nothing of its size held
    assert not list(point.glob(".*"))                     # no temporary name left
    assert (point / "step.npy.layers.json").exists()


def test_a_worker_that_does_not_sends_it_back_in_bounded_chunks(both):
    point, result, peaks, reads, ex = both[False]
    size = (point / "step.npy").stat().st_size
    assert result.traces == {"sent": 1}
    assert len(reads) == -(-size // CHUNK) and max(reads) <= CHUNK and sum(reads) == size
    names = [name for name, _ in ex.client.calls]
    assert names == ["read_chunk"] * len(reads) + ["remove_spool"]
    assert max(peaks) < 3 * CHUNK                         # a chunk or two at a time
    spool = pathlib.Path(ex.client.calls[0][1][0])
    assert not spool.exists() and not spool.parent.exists()   # the worker's spool removed
    assert not list(point.glob(".*"))
    # the same bytes whichever way it came
    shared = both[True][0]
    with open(point / "step.npy", "rb") as a, open(shared / "step.npy", "rb") as b:
        assert a.read() == b.read()
    assert (point / "step.npy.layers.json").read_text() == \
        (shared / "step.npy.layers.json").read_text()


@pytest.mark.parametrize("shared", [True, False])
def test_the_sweeps_trace_replays_to_the_points_cycles(both, shared, tmp_path, capsys):
    point = both[shared][0]
    summary = json.loads((point / "summary.json").read_text())
    meta = json.loads((point / "step.npy.layers.json").read_text())["meta"]
    stats = tmp_path / "stats.json"
    capsys.readouterr()
    assert main(["memsim", str(point / "step.npy"), "--quiet", "--stats", str(stats)]) == 0
    out = capsys.readouterr().out
    replay = json.loads(stats.read_text())
    assert replay["cycles"] == meta["run"]["cycles"]
    assert replay["drain_cycles"] == summary["makespan_cycles"]     # the point's step
    assert replay["mode_switches"] == summary["mode_switches"]
    assert replay["requestors"]["host"]["cycles_blocked"] == summary["host_blocked_cycles"]
    assert replay["requestors"]["pim"]["cycles_blocked"] == summary["pim_blocked_cycles"]
    assert f"replay the same as the run (resnet_cifar_20 batch 2, authority): " \
           f"{replay['cycles']:,} cycles" in out


def test_a_killed_points_trace_is_removed_and_a_finished_one_kept(tmp_path):
    """A point killed while writing leaves .NAME.XXXX.partial (and its sidecar) beside the
    finished files of an earlier run: the next run removes them, keeps the rest."""
    (tmp_path / "t.toml").write_text(SPEC)
    spec = specs.load(tmp_path / "t.toml")
    store = Store.open(tmp_path / "out", spec)
    store.start()
    folder = store.folder(spec.points[0])
    folder.mkdir(parents=True)
    (folder / "step.npy").write_bytes(b"finished")
    (folder / ".step.npy.abc123.partial").write_bytes(b"half")
    (folder / ".step.npy.abc123.partial.layers.json").write_text("{")
    again = Store.open(tmp_path / "out", spec)
    again.start()
    assert sorted(p.name for p in folder.iterdir()) == ["step.npy"]
    assert (folder / "step.npy").read_bytes() == b"finished"
    # the token a worker looks for is this run's
    dest = again.trace_dest(spec.points[0])
    assert pathlib.Path(dest["token_file"]).read_text() == dest["token"] != store.token
    assert worker.shares_folder(dest) and not worker.shares_folder({**dest, "token": "x"})
    # a finished attempt's trace is renamed over the old one; a lost attempt's is removed
    new, lost = folder / ".step.npy.new.partial", folder / ".step.npy.lost.partial"
    new.write_bytes(b"new")
    lost.write_bytes(b"lost")
    again.record(spec.points[0], {"ok": True, "summary": {"plots": []}, "files": {},
                                  "traces": [{"name": "step.npy", "path": str(new),
                                              "in_place": True}]})
    assert sorted(p.name for p in folder.iterdir()) == ["step.npy", "summary.json"]
    assert (folder / "step.npy").read_bytes() == b"new"


def test_a_trace_that_cannot_come_back_fails_its_point_with_words(tmp_path):
    (tmp_path / "t.toml").write_text(SPEC)
    spec = specs.load(tmp_path / "t.toml")
    store = Store.open(tmp_path / "out", spec)
    store.start()
    p = spec.points[0]

    def fetch(t):
        yield b"x" * 10
        raise OSError("the worker went away")
    why = store.receive_traces(p, {"traces": [{"name": "step.npy", "path": "/nowhere",
                                               "in_place": False, "size": 100,
                                               "worker": "tcp://w:1"}]}, fetch)
    assert why == ("its step trace step.npy could not be read back from worker tcp://w:1 "
                   "(OSError: the worker went away); --retry-failed runs it again")
    assert not list(store.folder(p).iterdir())            # nothing half written left


@pytest.mark.slow              # a LocalCluster's start and two sweeps: ~40 s on two cores
def test_dask_workers_that_send_traces_back_give_the_local_bytes(tmp_path, monkeypatch,
                                                                  capsys):
    spec = tmp_path / "t.toml"
    spec.write_text(SPEC.replace('["authority"]', '["serial", "authority"]'))
    assert main(["sweep", str(spec), "--out", str(tmp_path / "local"), "--jobs", "2",
                 "--quiet"]) == 0
    assert "step traces: 2 written in place by workers that share the folder, 0 sent back" \
        in capsys.readouterr().out
    monkeypatch.setenv(worker.SEND_ENV, "1")               # the workers inherit it
    assert main(["sweep", str(spec), "--out", str(tmp_path / "dask"), "--scheduler", "local:2",
                 "--quiet"]) == 0
    assert "step traces: 0 written in place by workers that share the folder, 2 sent back " \
           "in chunks of 8 MiB" in capsys.readouterr().out
    with open(tmp_path / "local" / "results.csv", newline="") as f:
        ids = [r["id"] for r in csv.DictReader(f)]
    assert len(ids) == 2
    for i in ids:
        for name in ("step.npy", "step.npy.layers.json", "layers.csv", "trace.json"):
            a, b = tmp_path / "local" / "points" / i / name, tmp_path / "dask" / "points" / i / name
            assert a.stat().st_size == b.stat().st_size > 0, (i, name)
            with open(a, "rb") as fa, open(b, "rb") as fb:
                assert fa.read() == fb.read(), (i, name)
        assert not list((tmp_path / "dask" / "points" / i).glob(".*"))

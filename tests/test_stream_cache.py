"""pimrt/host/stream_cache.py: a host kernel's request stream built once a process, read back
the same (docs/architecture.md, "Simulator speed")."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pimrt.errors import ConfigError
from pimrt.host import REQUEST_DTYPE, ConvGeom, HostWork, stream_cache
from pimrt.host.stream_cache import MIN_REQUESTS, PREFIX, StreamCache

LINE = 64


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """The same requests (the dtype's padding bytes aside)."""
    return a.dtype == b.dtype and np.array_equal(a["addr"], b["addr"]) and \
        np.array_equal(a["op"], b["op"])


def _reqs(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    r = np.zeros(n, REQUEST_DTYPE)
    r["addr"] = rng.integers(0, 1 << 40, n, dtype=np.uint64) // LINE * LINE
    r["op"] = rng.integers(0, 2, n, dtype=np.uint8)
    return r


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A process cache of its own under tmp_path (the tests' files never mix with a run's)."""
    monkeypatch.setattr(stream_cache.tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(stream_cache.ENV, raising=False)
    monkeypatch.setattr(stream_cache, "_CACHE", None)
    yield tmp_path
    if stream_cache._CACHE is not None:
        stream_cache._CACHE.close()


@given(n=st.integers(MIN_REQUESTS, 3 * MIN_REQUESTS), seed=st.integers(0, 2**32 - 1),
       rows=st.integers(0, 50))
def test_round_trip_is_the_same_array(tmp_path_factory, n, seed, rows):
    c = StreamCache()
    c.folder = str(tmp_path_factory.mktemp("c"))
    reqs, starts = _reqs(n, seed), np.sort(np.random.default_rng(seed).integers(0, n, rows))
    c.put(("k", seed), reqs, starts)
    got = c.get(("k", seed))
    assert got is not None and c.hits == 1
    assert got[0].dtype == REQUEST_DTYPE and got[0].tobytes() == reqs.tobytes()
    assert got[1].dtype == starts.dtype and np.array_equal(got[1], starts)
    assert c.get(("other", seed)) is None and c.misses == 1


def test_least_recently_used_go_past_the_limit(fresh):
    reqs = _reqs(MIN_REQUESTS)
    size = reqs.nbytes + np.zeros(3, np.int64).nbytes
    c = StreamCache(limit=3 * size)
    for k in "abc":
        c.put(k, reqs, np.zeros(3, np.int64))
    assert c.get("a") is not None          # a is now the most recent
    c.put("d", reqs, np.zeros(3, np.int64))
    assert list(c.files) == ["c", "a", "d"] and c.bytes == 3 * size
    assert sorted(os.listdir(c.folder)) == sorted(
        f"{os.path.basename(p)}.{what}.npy" for p, _ in c.files.values()
        for what in ("requests", "rows"))
    folder = c.folder
    c.close()
    assert not os.path.exists(folder)


def test_short_streams_and_a_zero_limit_keep_nothing(fresh):
    c = StreamCache()
    c.put("short", _reqs(MIN_REQUESTS - 1), np.zeros(1, np.int64))
    assert not c.files and c.folder is None
    off = StreamCache(limit=0)
    off.put("k", _reqs(MIN_REQUESTS), np.zeros(1, np.int64))
    assert not off.files and off.get("k") is None


def test_an_unwritable_folder_builds_each_time(fresh):
    c = StreamCache()
    c.folder = str(fresh / "missing" / "deeper")   # not there: np.save fails
    c.put("k", _reqs(MIN_REQUESTS), np.zeros(1, np.int64))
    assert not c.files and c.bytes == 0 and c.get("k") is None


def test_a_vanished_file_is_a_miss(fresh):
    c = StreamCache()
    c.put("k", _reqs(MIN_REQUESTS), np.zeros(1, np.int64))
    for name in os.listdir(c.folder):
        os.unlink(os.path.join(c.folder, name))
    assert c.get("k") is None and not c.files and c.bytes == 0


@pytest.mark.parametrize("text", ["lots", "-1", "1.5"])
def test_a_bad_limit_in_the_environment_is_named(fresh, monkeypatch, text):
    monkeypatch.setenv(stream_cache.ENV, text)
    with pytest.raises(ConfigError, match=f"{stream_cache.ENV}={text!r}.*whole number"):
        stream_cache.cache()


def test_the_limit_from_the_environment(fresh, monkeypatch):
    monkeypatch.setenv(stream_cache.ENV, "0")
    assert stream_cache.cache().limit == 0
    monkeypatch.setattr(stream_cache, "_CACHE", None)
    monkeypatch.setenv(stream_cache.ENV, " 12345 ")
    assert stream_cache.cache().limit == 12345


def test_folders_of_ended_processes_are_removed(fresh):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = fresh / f"{PREFIX}{dead}-abc"
    stale.mkdir()
    (stale / "1.rows.npy").write_bytes(b"x")
    mine = fresh / f"{PREFIX}{os.getpid()}-old"
    mine.mkdir()
    other = fresh / "pimrt-streams-notapid"
    other.mkdir()
    c = stream_cache.cache()
    c.put("k", _reqs(MIN_REQUESTS), np.zeros(1, np.int64))
    assert not stale.exists() and mine.exists() and other.exists()
    assert c.folder.startswith(str(fresh / f"{PREFIX}{os.getpid()}-"))


def _conv(n=4):
    return ConvGeom("c", "conv", n, 32, 16, 16, 64, 16, 16, 3, 3, 1, 1, 1, 1)


def _tensors(w: HostWork, base=0):
    g = w.geom
    shp = {"input": g.input_shape, "grad_input": g.input_shape, "output": g.output_shape,
           "grad_output": g.output_shape, "weight": g.weight_shape,
           "grad_weight": g.weight_shape}
    out = {}
    for r in w.roles:
        out[r] = (base, shp[r], 4)
        base += -(-math.prod(shp[r]) * 4 // 4096) * 4096 + 4096
    return out


@pytest.mark.parametrize("phase", ["forward", "backward_data", "backward_weight"])
def test_a_kernel_is_built_once_and_read_back_the_same(fresh, phase):
    first = HostWork(_conv(), None, phase, channel_range=(0, 32))
    tensors = _tensors(first)
    reqs = first.requests(tensors)
    c = stream_cache.cache()
    assert len(reqs) >= MIN_REQUESTS and len(c.files) == 1 and c.hits == 0
    again = HostWork(_conv(), None, phase, channel_range=(0, 32))
    assert _same(again.requests(tensors), reqs) and c.hits == 1
    # the chunks (tile rows) come from the kept rows: the same pieces
    a = first.chunks(3, tensors, mem_tck_ns=1.0)
    b = HostWork(_conv(), None, phase, channel_range=(0, 32)).chunks(3, tensors, mem_tck_ns=1.0)
    assert [(x.rows, x.compute_cycles) for x in a] == [(x.rows, x.compute_cycles) for x in b]
    assert all(_same(x.requests, y.requests) for x, y in zip(a, b))
    # another kernel, other addresses or another channel group: built, not read back
    for w, t in ((HostWork(_conv(), None, phase, channel_range=(32, 64)), tensors),
                 (HostWork(_conv(), None, phase, channel_range=(0, 32)),
                  _tensors(first, base=1 << 20)),
                 (HostWork(_conv(), None, phase, channel_range=(0, 32), part="v100_tc"),
                  tensors)):
        hits = c.hits
        got = w.requests(t)
        assert c.hits == hits
        uncached = StreamCache(limit=0)
        assert _same(got, _built(w, t, uncached))


def _built(w: HostWork, tensors, cache: StreamCache) -> np.ndarray:
    """The stream as HostWork builds it with no stream kept."""
    saved = stream_cache._CACHE
    try:
        stream_cache._CACHE = cache
        return HostWork(w.geom, None, w.phase, channel_range=w.channel_range, part=w.part,
                        accumulate=w.accumulate).requests(tensors)
    finally:
        stream_cache._CACHE = saved

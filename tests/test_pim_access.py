"""The access model (pimrt.pim.access) against the RTL: each kernel runs once on the batch
driver with its bank port recorded; the recorded columns, mapped to (stream, column) by the
pointers the kernel set and collapsed to DRAM columns, equal bank_accesses in order and
count, and the RTL's cycles equal bank_cycles. At 8 and 16 lanes."""
import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.pim import access as A, kernels as K, testing
from pimrt.pim.errors import PimError

LANES = (8, 16)


@functools.lru_cache(maxsize=None)
def _driver(lanes):
    from pimrt.pim.driver import PimDriver
    testing.skip_without_verilator()
    return PimDriver(lanes=lanes, record=True)


def _recorded(drv, run):
    """Run `run` (one kernel call of one RTL run) -> (cycles, recorded accesses, pointers)."""
    ptrs = []
    orig = drv.set_pointers
    drv.set_pointers = lambda v: (ptrs.append(list(v)), orig(v))
    drv.accesses.clear()
    try:
        cycles = run()
    finally:
        del drv.set_pointers
    assert len(drv.accesses) == 1 and len(ptrs) == 1, "the work must fit one run"
    return cycles, drv.accesses[0], ptrs[0]


def _dram(kernel, lanes, work, rec, ptrs, column_bytes=64):
    """The recorded unit columns -> [(rw, stream, DRAM column)], written out plainly."""
    layout = A._layout(kernel, lanes, A._work(kernel, lanes, work))[2]
    start = {}
    for value, (stream, base) in zip(ptrs, layout):
        start.setdefault(stream, value - base)
    order = sorted(start, key=start.get)
    per = column_bytes // (4 * lanes)
    out = []
    for r in rec:
        col = int(r["column"])
        stream = [s for s in order if start[s] <= col][-1]
        item = (int(r["write"]), stream, (col - start[stream]) // per)
        if not out or out[-1] != item:
            out.append(item)
    return out


_rng = np.random.default_rng(5)


def _check(kernel, lanes, work, run):
    drv = _driver(lanes)
    cycles, rec, ptrs = _recorded(drv, lambda: run(drv))
    got = _dram(kernel, lanes, work, rec, ptrs)
    want = A.bank_accesses(kernel, lanes=lanes, **work)
    assert got == [tuple(int(v) for v in w) for w in want]
    assert cycles == A.bank_cycles(kernel, lanes=lanes, **work)


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("name", sorted(K.STREAM_KERNELS))
@settings(max_examples=6)
@given(n=st.integers(1, 1500))
def test_stream_kernel_accesses_and_cycles_equal_the_rtl(lanes, name, n):
    k = K.STREAM_KERNELS[name]
    arrays = {s: _rng.standard_normal(n).astype(np.float32) for s in k.inputs}
    scal = {s: 0.5 for s in k.scalars}
    _check(name, lanes, {"elements": n},
           lambda d: K.run_stream(d, name, arrays, scal).cycles)


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("name", sorted(K.CHANNEL_KERNELS))
@settings(max_examples=6)
@given(c=st.integers(1, 6), n=st.integers(1, 1400))      # statistics: pieces of 64 columns
def test_channel_kernel_accesses_and_cycles_equal_the_rtl(lanes, name, c, n):
    k = K.CHANNEL_KERNELS[name]
    arrays = {s: _rng.standard_normal((c, n)).astype(np.float32) for s in k.inputs}
    params = {p: np.ones(c, np.float32) for p in k.params}
    _check(name, lanes, {"channels": c, "elements": n},
           lambda d: K.run_channels(d, name, arrays, params).cycles)


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("name", K.POOL_KERNELS)
@settings(max_examples=6)
@given(i=st.integers(1, 2), h=st.integers(2, 7), w=st.integers(2, 7), c=st.integers(1, 40))
def test_pool_kernel_accesses_and_cycles_equal_the_rtl(lanes, name, i, h, w, c):
    x = _rng.standard_normal((i, c, h, w)).astype(np.float32)
    base, dtype = K.base_of(name)                   # 16-bit variants: x rounded to dtype

    def run(d):
        before = d.stats.get(name, [0])[0]
        if base == "avgpool2_bwd":
            K.avgpool2_backward(d, x[:, :, :h // 2, :w // 2], x.shape, dtype)
        else:
            (K.avgpool2_forward if base == "avgpool2_fwd" else K.maxpool2_forward)(d, x, dtype)
        return d.stats[name][0] - before

    _check(name, lanes, {"images": i, "height": h, "width": w, "channels": c}, run)


def test_streams_and_blocks():
    assert A.kernel_streams("relu_fwd") == ("x", "y")
    assert A.kernel_streams("relu_bwd") == ("y", "dy", "dx")
    assert A.kernel_streams("bn_bwd_stats_ch") == ("x", "dy", "par", "acc")
    assert A.kernel_streams("avgpool2_bwd") == ("dy", "dx")
    # relu_fwd at 8 lanes: x in blocks of 8 unit columns = 4 DRAM columns, then y
    a = A.bank_accesses("relu_fwd", lanes=8, elements=8 * 16)
    assert a["rw"].tolist() == [0] * 4 + [1] * 4 + [0] * 4 + [1] * 4
    assert a["column"].tolist() == [0, 1, 2, 3] * 2 + [4, 5, 6, 7] * 2
    b = A.bank_accesses("relu_fwd", lanes=16, elements=16 * 16)
    assert len(b) == 32 and (b["column"][:8] == np.arange(8)).all()
    # 16 bits: two values a lane word, so 16 * 16 values are what 8 * 16 are in fp32
    h = A.bank_accesses("relu_fwd_f16", lanes=8, elements=16 * 16)
    assert (h == a).all() and A.kernel_streams("relu_fwd_bf16") == ("x", "y")
    # the AMP update: w, g, v fp32, the 16-bit copy w16 a column per two of w's
    s = A.bank_accesses("sgd_amp_bf16", lanes=16, elements=64)
    assert A.kernel_streams("sgd_amp_bf16") == ("w", "g", "v", "w16")
    assert s["stream"].tolist() == [0] * 4 + [1] * 4 + [2] * 8 + [0] * 4 + [3] * 2
    assert A.kernel_streams("amp_unscale") == ("g", "acc")
    # a 128-byte unit column (32 lanes) is two 64-byte DRAM columns
    c = A.bank_accesses("relu_fwd", lanes=32, elements=32 * 8)
    assert c["column"][:16].tolist() == list(range(16))


@pytest.mark.parametrize("kernel,work,match", [
    ("conv", {"elements": 8}, "unknown PIM kernel 'conv'"),
    ("relu_fwd", {"channels": 2, "elements": 8}, "kernel relu_fwd: work is elements="),
    ("bn_stats_ch", {"elements": 8}, "kernel bn_stats_ch: work is channels=, elements="),
    ("relu_fwd", {"elements": 0}, "kernel relu_fwd: work sizes must be positive"),
    ("maxpool2_fwd", {"images": 1, "height": 1, "width": 4, "channels": 8},
     "maxpool2_fwd: a 1x4 image has no 2x2 window"),
])
def test_bad_work_is_a_clear_error(kernel, work, match):
    with pytest.raises(PimError, match=match):
        A.bank_accesses(kernel, **work)
    with pytest.raises(PimError, match=match):
        A.bank_cycles(kernel, **work)

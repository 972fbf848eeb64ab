"""The kernels of an AMP step on the RTL equal the golden model bit for bit, cycles included:
every new kernel on the batch driver at 8 and 16 lanes (random values with the 16-bit and
fp32 edges put in), the unary ones on every 16-bit pattern, batch norm's wrappers on drawn
shapes; the per-cycle pyverilator model on a few (slow). Against torch:
tests/test_pim_amp.py."""
import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.pim import kernels as K, testing
from pimrt.pim.golden import GoldenBackend

NEW = [n for n in K.KERNELS if K.base_of(n)[1] != "f32" or n == "amp_unscale"]
ALL = np.arange(1 << 16, dtype=np.uint16)
EDGES16 = {"f16": [0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x3C00, 0x4600, 0x45FF, 0x7BFF,
                   0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE01],
           "bf16": [0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x3F80, 0x40C0, 0x40BF, 0x7F7F,
                    0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF]}
EDGES32 = np.asarray([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, 65520.0],
                     np.float32)


@functools.lru_cache(maxsize=None)
def _driver(lanes):
    from pimrt.pim.driver import PimDriver
    testing.skip_without_verilator()
    return PimDriver(rows=256, cols=32, lanes=lanes)


def _draw(rng, dtype, shape, edges=True):
    """Normal values in `dtype` (16-bit as uint16 patterns) with its edges put in front."""
    v = (rng.standard_normal(shape) * 3).astype(np.float32)
    if dtype != "f32":
        v = K.bits16(v, dtype)
    flat = v.reshape(-1)
    e = np.asarray(EDGES16[dtype], np.uint16) if dtype != "f32" else EDGES32
    if edges:
        flat[:min(e.size, flat.size)] = e[:flat.size]
    return v


def _run(backend, name, rng, n, c):
    """One run of kernel `name` -> (outputs and sums as raw bytes, cycles)."""
    dts = K.stream_dtypes(name)
    if name in K.STREAM_KERNELS:
        k = K.STREAM_KERNELS[name]
        arrays = {s: _draw(rng, dts[s], n) for s in k.inputs}
        r = K.run_stream(backend, name, arrays, {s: 0.5 for s in k.scalars})
        return {**r.outputs, **r.extra}, r.cycles
    if name in K.CHANNEL_KERNELS:
        k = K.CHANNEL_KERNELS[name]
        arrays = {s: _draw(rng, dts[s], (c, n), edges=not k.acc) for s in k.inputs}
        params = {p: rng.standard_normal(c).astype(np.float32) for p in k.params}
        r = K.run_channels(backend, name, arrays, params)
        return {**r.outputs, "acc": r.acc}, r.cycles
    base, dt = K.base_of(name)
    x = _draw(rng, dt, (2, c, 6, 6))
    before = backend.stats.get(name, [0])[0]
    if base == "avgpool2_bwd":
        out = K.avgpool2_backward(backend, x[:, :, :3, :3], x.shape, dt)
    else:
        out = (K.avgpool2_forward if base == "avgpool2_fwd" else K.maxpool2_forward)(backend, x, dt)
    return {"out": out}, backend.stats[name][0] - before


def _equal(a, b):
    assert a[1] == b[1], f"cycles {a[1]} != {b[1]}"
    assert set(a[0]) == set(b[0])
    for s in a[0]:
        if a[0][s] is not None:
            assert np.array_equal(np.asarray(a[0][s]).view(np.uint8),
                                  np.asarray(b[0][s]).view(np.uint8)), s


@pytest.mark.parametrize("lanes", (8, 16))
@pytest.mark.parametrize("name", NEW)
def test_new_kernels_rtl_equals_golden(name, lanes):
    seed = sum(map(ord, name)) + lanes
    n, c = 1000 + seed % 700, 3
    got = _run(_driver(lanes), name, np.random.default_rng(seed), n, c)
    want = _run(GoldenBackend(rows=256, cols=32, lanes=lanes), name, np.random.default_rng(seed), n, c)
    _equal(got, want)


@pytest.mark.parametrize("dt", ("f16", "bf16"))
def test_unary_kernels_every_pattern_rtl_equals_golden(dt):
    g = GoldenBackend(rows=256, cols=32)
    for name in ("relu_fwd", "relu6_fwd", "copy"):
        k = K.variant(name, dt)
        a = K.run_stream(_driver(8), k, {"x": ALL})
        b = K.run_stream(g, k, {"x": ALL})
        assert (a.outputs["y"] == b.outputs["y"]).all() and a.cycles == b.cycles


@pytest.mark.slow
@pytest.mark.parametrize("dt", ("f16", "bf16"))
@settings(max_examples=6, deadline=None)
@given(N=st.integers(1, 3), C=st.integers(1, 12), H=st.integers(2, 9), mean=st.floats(-100, 100),
       seed=st.integers(0, 2 ** 16))
def test_batchnorm_wrappers_rtl_equals_golden(dt, N, C, H, mean, seed):
    rng = np.random.default_rng(seed)
    x = K.bits16((rng.standard_normal((N, C, H, H)) + mean).astype(np.float32), dt)
    dy = K.bits16(rng.standard_normal(x.shape).astype(np.float32), dt)
    gamma, beta = rng.standard_normal(C).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    outs = []
    for b in (_driver(16), GoldenBackend(rows=256, cols=32, lanes=16)):
        y, m, inv = K.batchnorm_forward(b, x, gamma, beta, dtype=dt)
        outs.append((y, m, inv, *K.batchnorm_backward(b, x, dy, gamma, m, inv, dtype=dt)))
    for a, b in zip(*outs):
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["relu_bwd_f16", "residual_add_bf16", "amp_unscale",
                                  "amp_unscale_bf16", "sgd_amp_f16", "bn_stats_ch_bf16",
                                  "bn_bwd_apply_ch_f16", "avgpool2_fwd_f16", "avgpool2_bwd_bf16"])
def test_pyverilator_equals_golden(name):
    from pimrt.pim.rtl import PimRtl
    testing.skip_without_verilator()
    rtl = _pyverilator()
    got = _run(rtl, name, np.random.default_rng(2), 200, 2)
    _equal(got, _run(GoldenBackend(rows=8, cols=32), name, np.random.default_rng(2), 200, 2))
    assert isinstance(rtl, PimRtl)


@functools.lru_cache(maxsize=None)
def _pyverilator():
    from pimrt.pim.rtl import PimRtl
    return PimRtl(rows=8, cols=32)

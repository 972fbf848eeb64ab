"""The kernels of an AMP step on the golden model against torch (CPU): the 16-bit element-wise
kernels bit for bit (every pattern for the unary ones; edges and hypothesis draws for the
binary ones), batch norm on 16-bit inputs with fp32 weight within the fp32 kernels'
tolerance plus one 16-bit rounding, the scaler's unscale and inf/NaN check, the fp32 SGD
update with its 16-bit copy. RTL == golden: tests/test_pim_amp_rtl.py."""
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from pimrt.pim import access as A, kernels as K, kernels16
from pimrt.pim.errors import PimError
from pimrt.pim.golden import GoldenBackend

DTYPES = ("f16", "bf16")
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
ALL = np.arange(1 << 16, dtype=np.uint16)
# the fp32 batch-norm tolerance (tests/test_pim_kernels.py: the unit sums per lane in fp32,
# torch in another order), and one ulp of the 16-bit result on top: both round their fp32 y
# to 16 bits, and two fp32 values that close can round to neighbouring 16-bit values
BN_RTOL, BN_ATOL = 1e-4, 1e-5
ULP16 = {"f16": 2.0 ** -10, "bf16": 2.0 ** -7}


@pytest.fixture(scope="module")
def g():
    return GoldenBackend(rows=256, cols=32)


def tt(u, dt):
    """uint16 patterns -> a torch tensor of dtype dt with those bits."""
    return torch.from_numpy(np.ascontiguousarray(K.bits16(u, dt)).view(np.int16)).view(TORCH[dt])


def bits(t):
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def isnan16(u, dt):
    return np.isnan(K.widen(u, dt))


def same(got, want, dt, nan_any=True):
    """Bit for bit, a NaN for a NaN (the unit's NaN is canonical; torch's is not always)."""
    got, want = K.bits16(got, dt).ravel(), np.asarray(want, np.uint16).ravel()
    gn, wn = isnan16(got, dt), isnan16(want, dt)
    assert (gn == wn).all(), f"NaN where the other is not: {np.flatnonzero(gn != wn)[:5]}"
    if not nan_any:
        assert (got[gn] == want[gn]).all()
    bad = np.flatnonzero((got != want) & ~gn)
    assert bad.size == 0, f"{bad.size} differ, first at {bad[:5]}: {got[bad[:5]]} vs {want[bad[:5]]}"


def edges(dt):
    """16-bit edge patterns: signed zeros, subnormals, the normal boundary, 1 and its
    neighbours, 6 and its neighbours (ReLU6), the largest finite, infinities, NaNs."""
    f = [0.0, 1.0, 6.0, 0.5, 3.0]
    base = K.bits16(np.asarray(f, np.float32), dt).astype(np.int32)
    hi = {"f16": (0x7BFF, 0x7C00, 0x7E00, 0x7C01, 0x0400, 0x03FF, 0x0001),
          "bf16": (0x7F7F, 0x7F80, 0x7FC0, 0x7F81, 0x0080, 0x007F, 0x0001)}[dt]
    pos = np.concatenate([base, base + 1, base - 1, np.asarray(hi)]) & 0x7FFF
    return np.unique(np.concatenate([pos, pos | 0x8000]).astype(np.uint16))


# ---- element-wise: every pattern -----------------------------------------------------------

@pytest.mark.parametrize("dt", DTYPES)
def test_relu_relu6_copy_on_every_pattern(g, dt):
    x = tt(ALL, dt)
    y, mask = K.relu_forward(g, ALL, dt)
    same(y, bits(torch.relu(x)), dt)
    assert (mask == (x.float() > 0).numpy()).all()
    y6, passed = K.relu6_forward(g, ALL, dt)
    same(y6, bits(F.relu6(x)), dt)
    assert (passed == ((x.float() > 0) & (x.float() < 6)).numpy()).all()
    assert (K.bits16(K.copy(g, ALL, dt), dt) == ALL).all()       # NaN payloads included


@pytest.mark.parametrize("dt", DTYPES)
def test_relu_backward_on_every_output_pattern(g, dt):
    """threshold_backward / hardtanh_backward: every y against random gradients and the
    edges; a NaN y passes dy in both (torch's definition; its vectorised hardtanh_backward
    gives 0 there, its scalar tail dy, so NaN y is checked apart for ReLU6)."""
    rng = np.random.default_rng(1)
    dy = rng.integers(0, 1 << 16, ALL.size, dtype=np.uint16)
    dy[:edges(dt).size] = edges(dt)
    yt, dyt = tt(ALL, dt), tt(dy, dt)
    # a NaN dy: the unit selects its bits, torch passes it through fp32 (quieted; bf16 0xFFFF)
    dx = K.relu_backward(g, ALL, dy, dt)
    same(dx, bits(torch.ops.aten.threshold_backward(dyt, yt, 0)), dt)
    dx6 = K.bits16(K.relu6_backward(g, ALL, dy, dt), dt)
    want = bits(torch.ops.aten.hardtanh_backward(dyt, yt, 0.0, 6.0))
    ok = ~isnan16(ALL, dt)
    same(dx6[ok], want[ok], dt)
    assert (dx6[~ok] == dy[~ok]).all()


# ---- element-wise: binary ------------------------------------------------------------------

@pytest.mark.parametrize("dt", DTYPES)
def test_residual_add_every_pattern_against_the_edges(g, dt):
    e = edges(dt)
    a = np.tile(ALL, e.size)
    b = np.repeat(e, ALL.size)
    same(K.residual_add(g, a, b, dt), bits(tt(a, dt) + tt(b, dt)), dt)


@pytest.mark.parametrize("dt", DTYPES)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_residual_add_draws(g, dt, data):
    n = data.draw(st.integers(1, 300))
    pool = st.one_of(st.integers(0, 0xFFFF), st.sampled_from(edges(dt).tolist()))
    a = np.asarray(data.draw(st.lists(pool, min_size=n, max_size=n)), np.uint16)
    b = np.asarray(data.draw(st.lists(pool, min_size=n, max_size=n)), np.uint16)
    same(K.residual_add(g, a, b, dt), bits(tt(a, dt) + tt(b, dt)), dt)


# ---- pooling ----------------------------------------------------------------------------------

def _image(data, dt, shape):
    pool = st.one_of(st.integers(0, 0xFFFF), st.sampled_from(edges(dt).tolist()),
                     st.sampled_from([0x0000, 0x8000]))
    n = int(np.prod(shape))
    return np.asarray(data.draw(st.lists(pool, min_size=n, max_size=n)), np.uint16).reshape(shape)


@pytest.mark.parametrize("dt", DTYPES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_pooling_bit_for_bit(g, dt, data):
    """avg_pool2d (fp32 sum of the window, rounded once; +0 where that is -0, as torch's
    NCHW kernel gives), max_pool2d (NaN wins, first maximum), and avg_pool2d's backward (dy/4
    into a zeroed gradient: -0 gives +0)."""
    shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 40)),
             data.draw(st.integers(2, 5)), data.draw(st.integers(2, 5)))
    x = _image(data, dt, shape)
    xt = tt(x, dt)
    same(K.avgpool2_forward(g, x, dt), bits(F.avg_pool2d(xt, 2)), dt)
    same(K.maxpool2_forward(g, x, dt), bits(F.max_pool2d(xt, 2)), dt)
    xg = xt.clone().requires_grad_()
    y = F.avg_pool2d(xg, 2)
    dy = _image(data, dt, tuple(y.shape))
    y.backward(tt(dy, dt))
    same(K.avgpool2_backward(g, dy, x.shape, dt), bits(xg.grad), dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_avgpool_signed_zeros(g, dt):
    """torch's NCHW average pooling gives +0 for a mean that rounds to -0: four -0, or a
    tiny negative sum (-s/4 and -2s/4 of the smallest subnormal s; -3s/4 rounds to -s)."""
    x = np.full((1, 5, 2, 2), 0x8000, np.uint16)
    x[0, 1, 0, 0] = 0
    x[0, 2, 0, 0], x[0, 3, 0, 0], x[0, 4, 0, 0] = 0x8001, 0x8002, 0x8003
    y = K.bits16(K.avgpool2_forward(g, x, dt), dt).ravel()
    assert (y == [0, 0, 0, 0, 0x8001]).all()
    assert (y == bits(F.avg_pool2d(tt(x, dt), 2)).ravel()).all()
    m = K.bits16(K.maxpool2_forward(g, x, dt), dt).ravel()
    assert (m == [0x8000, 0, 0x8000, 0x8000, 0x8000]).all()            # the first maximum
    assert (m == bits(F.max_pool2d(tt(x, dt), 2)).ravel()).all()


# ---- batch norm --------------------------------------------------------------------------------

def _close(got, want, dt, atol):
    """Within the fp32 kernels' tolerance plus one 16-bit ulp (see BN_RTOL above)."""
    np.testing.assert_allclose(K.widen(got, dt), want, rtol=BN_RTOL + ULP16[dt], atol=atol)


@pytest.mark.parametrize("dt", DTYPES)
@settings(max_examples=8, deadline=None)
@given(N=st.integers(1, 4), C=st.integers(1, 9), H=st.integers(1, 9), mean=st.floats(-50, 50),
       std=st.floats(0.05, 20), seed=st.integers(0, 2 ** 16))
def test_batchnorm_16bit_vs_torch(g, dt, N, C, H, mean, std, seed):
    """F.batch_norm's forward and autograd on a 16-bit input with fp32 weight and bias (as
    autocast runs it): y and dx 16-bit, mean, invstd, dgamma, dbeta fp32."""
    if N * H * H < 2:
        return
    rng = np.random.default_rng(seed)
    x = K.bits16((rng.standard_normal((N, C, H, H)) * std + mean).astype(np.float32), dt)
    dy = K.bits16(rng.standard_normal(x.shape).astype(np.float32), dt)
    gamma = (rng.standard_normal(C) * 0.3 + 1).astype(np.float32)
    beta = rng.standard_normal(C).astype(np.float32)
    y, m, inv = K.batchnorm_forward(g, x, gamma, beta, eps=1e-5, dtype=dt)
    xt = tt(x, dt).requires_grad_()
    gt, bt = torch.tensor(gamma, requires_grad=True), torch.tensor(beta, requires_grad=True)
    yt, mt, it = torch.ops.aten.native_batch_norm(xt, gt, bt, None, None, True, 0.1, 1e-5)
    assert yt.dtype == TORCH[dt] and mt.dtype == torch.float32
    _close(y, yt.detach().float().numpy(), dt, BN_ATOL)
    np.testing.assert_allclose(m, mt.numpy(), rtol=1e-5, atol=1e-6 * std)
    np.testing.assert_allclose(inv, it.numpy(), rtol=BN_RTOL)
    yt.backward(tt(dy, dt))
    dx, dgamma, dbeta = K.batchnorm_backward(g, x, dy, gamma, m, inv, dtype=dt)
    scale = np.abs(xt.grad.float().numpy()).max()
    _close(dx, xt.grad.float().numpy(), dt, BN_ATOL * scale)
    np.testing.assert_allclose(dgamma, gt.grad.numpy(), rtol=BN_RTOL, atol=BN_ATOL * x.size)
    np.testing.assert_allclose(dbeta, bt.grad.numpy(), rtol=BN_RTOL, atol=BN_ATOL * x.size)


@pytest.mark.parametrize("dt", DTYPES)
def test_batchnorm_16bit_statistics_equal_the_fp32_kernels_on_the_widened_input(g, dt):
    """The 16-bit statistics are the fp32 ones of the widened values, a lane summing at most
    64 values either way: mean and invstd within a float32 ulp or two of the fp32 kernel's."""
    rng = np.random.default_rng(3)
    x = K.bits16((rng.standard_normal((8, 6, 12, 12)) * 2 + 300).astype(np.float32), dt)
    ones, zeros = np.ones(6, np.float32), np.zeros(6, np.float32)
    _, m16, i16 = K.batchnorm_forward(g, x, ones, zeros, dtype=dt)
    _, m32, i32 = K.batchnorm_forward(g, K.widen(x, dt), ones, zeros)
    np.testing.assert_allclose(m16, m32, rtol=3e-7)
    np.testing.assert_allclose(i16, i32, rtol=3e-6)


# The 16-bit batch norm and average pooling bodies before the widening forms (each column
# widened into two registers by CVTLO and CVTHI, then the fp32 body): the same values and
# operations, so the same results bit for bit, in more cycles.
CVT_BODIES = {
    "bn_stats_ch": ("MOV G{j}, B[{x}+]", "CVTLO{dt} G{i}, G{j}", "CVTHI{dt} G{j}, G{j}",
                    "SUB G{i}, G{i}, {shift}", "SUB G{j}, G{j}, {shift}",
                    "ADD A0, A0, G{i}", "ADD A0, A0, G{j}",
                    "MAD A1, G{i}, G{i}, A1", "MAD A1, G{j}, G{j}, A1"),
    "bn_apply_ch": ("MOV G{j}, B[{x}+]", "CVTLO{dt} G{i}, G{j}", "CVTHI{dt} G{j}, G{j}",
                    "SUB G{i}, G{i}, {mean}", "SUB G{j}, G{j}, {mean}",
                    "SUB G{i}, G{i}, {mean_lo}", "SUB G{j}, G{j}, {mean_lo}",
                    "MAD G{i}, G{i}, {scale}, {shift}", "MAD G{j}, G{j}, {scale}, {shift}",
                    "CVTPK{dt} B[{y}+], G{i}, G{j}"),
    "bn_bwd_stats_ch": ("MOV G{j}, B[{x}+]", "CVTLO{dt} G{i}, G{j}", "CVTHI{dt} G{j}, G{j}",
                        "SUB G{i}, G{i}, {mean}", "SUB G{j}, G{j}, {mean}",
                        "MOV G{j2}, B[{dy}+]", "CVTLO{dt} G{i2}, G{j2}", "CVTHI{dt} G{j2}, G{j2}",
                        "ADD A0, A0, G{i2}", "ADD A0, A0, G{j2}",
                        "MAD A1, G{i}, G{i2}, A1", "MAD A1, G{j}, G{j2}, A1"),
    "bn_bwd_apply_ch": ("MOV G{j}, B[{x}+]", "CVTLO{dt} G{i}, G{j}", "CVTHI{dt} G{j}, G{j}",
                        "SUB G{i}, G{i}, {mean}", "SUB G{j}, G{j}, {mean}",
                        "MAD G{i}, G{i}, {c1}, {c0}", "MAD G{j}, G{j}, {c1}, {c0}",
                        "MOV G{j2}, B[{dy}+]", "CVTLO{dt} G{i2}, G{j2}", "CVTHI{dt} G{j2}, G{j2}",
                        "MAD G{i2}, G{i2}, {k}, G{i}", "MAD G{j2}, G{j2}, {k}, G{j}",
                        "CVTPK{dt} B[{dx}+], G{i2}, G{j2}"),
    "avgpool2_fwd": ("MOV G{j}, B[p0+]", "CVTLO{dt} G{i}, G{j}", "CVTHI{dt} G{j}, G{j}",
                     *[ph for p in (1, 2, 3) for ph in (
                         f"MOV G{{j2}}, B[p{p}+]", "CVTLO{dt} G{i2}, G{j2}",
                         "CVTHI{dt} G{j2}, G{j2}", "ADD G{i}, G{i}, G{i2}",
                         "ADD G{j}, G{j}, G{j2}")],
                     "MUL G{i}, G{i}, S0", "MUL G{j}, G{j}, S0", "CVTPK{dt} G{i}, G{i}, G{j}",
                     "ADD{dt} B[p4+], G{i}, S1"),
}


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("base", [b for b in CVT_BODIES if b != "avgpool2_fwd"])
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_bn_widening_bodies_are_the_conversion_bodies(dt, base, data):
    """Batch norm's 16-bit kernels take each column's values into fp32 by the widening forms
    (kernels16.CHANNEL16): bit for bit the outputs and sums of the bodies that widened with
    CVTLO / CVTHI first (any 16-bit pattern, edges included), at 8 and 16 lanes, in fewer
    cycles."""
    name = f"{base}_{dt}"
    k = K.CHANNEL_KERNELS[name]
    old = dataclasses.replace(k, body=kernels16.suffixed(CVT_BODIES[base], dt))
    assert k.block() >= old.block() and len(k.body) < len(old.body)
    C, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 600))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    pool = np.concatenate([edges(dt), rng.integers(0, 1 << 16, 4096).astype(np.uint16)])
    arrays = {s: rng.choice(pool, (C, n)) for s in k.inputs}
    params = {p: rng.standard_normal(C).astype(np.float32) for p in k.params}
    for lanes in (8, 16):
        g = GoldenBackend(rows=256, cols=32, lanes=lanes)
        new = K.run_channels(g, name, arrays, params)
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(K.CHANNEL_KERNELS, name, old)
            was = K.run_channels(g, name, arrays, params)
        for s in new.outputs:
            assert np.array_equal(new.outputs[s].view(np.uint16), was.outputs[s].view(np.uint16))
        if new.acc is not None:
            assert np.array_equal(new.acc.view(np.uint32), was.acc.view(np.uint32))
        assert new.cycles < was.cycles


@pytest.mark.parametrize("dt", DTYPES)
def test_avgpool_widening_body_is_the_conversion_body(dt):
    """Average pooling adds each next pixel in a widening form: the same pooled values as the
    body that widened all four with CVTLO / CVTHI, in fewer cycles."""
    rng = np.random.default_rng(5)
    pool = np.concatenate([edges(dt), rng.integers(0, 1 << 16, 4096).astype(np.uint16)])
    x = rng.choice(pool, (2, 24, 6, 10))
    name = f"avgpool2_fwd_{dt}"
    out = []
    for body in (K.POOL_BODIES[name], kernels16.suffixed(CVT_BODIES["avgpool2_fwd"], dt)):
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(K.POOL_BODIES, name, body)
            K.pool_program.cache_clear()
            g = GoldenBackend(rows=256, cols=32, lanes=8)
            out.append((K.avgpool2_forward(g, x, dt), g.stats[name][0]))
        K.pool_program.cache_clear()
    assert np.array_equal(np.asarray(out[0][0]).view(np.uint16), np.asarray(out[1][0]).view(np.uint16))
    assert out[0][1] < out[1][1]


# ---- the AMP update -------------------------------------------------------------------------------

F32_EDGES = np.asarray([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, 1.0],
                       np.float32)


def _f32_draws(data, n):
    """n normal values of a drawn scale, with drawn values (any float32, the edges) put at
    drawn places."""
    scale = data.draw(st.sampled_from([1e-30, 1.0, 1e4, 1e30]))
    a = (np.random.default_rng(data.draw(st.integers(0, 2 ** 16))).standard_normal(n)
         * scale).astype(np.float32)
    pool = st.one_of(st.floats(width=32), st.sampled_from(F32_EDGES.tolist()))
    for i, v in data.draw(st.lists(st.tuples(st.integers(0, n - 1), pool), max_size=12)):
        a[i] = v
    return a


def _same_as_torchs_unscale(got, found, gt, inv):
    """got, found as torch's _amp_foreach_non_finite_check_and_unscale_ gives them from fp32
    gt: the flag, and the values bit for bit (a NaN for a NaN)."""
    flag = torch.zeros(1)
    torch._amp_foreach_non_finite_check_and_unscale_([gt], flag, torch.tensor(inv))
    assert found == bool(flag.item())
    want = gt.numpy()
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (got.view(np.uint32)[~nan] == want.view(np.uint32)[~nan]).all()


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_amp_unscale_equals_torch(g, data):
    """torch._amp_foreach_non_finite_check_and_unscale_: the flag bit for bit, the values bit
    for bit (a NaN for a NaN: the unit's is canonical)."""
    n = data.draw(st.integers(1, 2000))
    grad = _f32_draws(data, n)
    inv = data.draw(st.sampled_from([1.0, 0.5, 2.0 ** -16, 1 / 3, 2.0 ** 24]))
    got, found = K.amp_unscale(g, grad, inv)
    _same_as_torchs_unscale(got, found, torch.tensor(grad), inv)


def test_amp_unscale_flags_the_last_value_of_a_chunk_and_none_else(g):
    grad = np.ones(40000, np.float32)
    assert K.amp_unscale(g, grad, 0.5)[1] is False
    for where, bad in ((0, np.inf), (39999, -np.inf), (20011, np.nan)):
        grad2 = grad.copy()
        grad2[where] = bad
        assert K.amp_unscale(g, grad2, 0.5)[1] is True


@pytest.mark.parametrize("dt", DTYPES)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_amp_unscale16_equals_torchs_cast_then_unscale(g, dt, data):
    """A CONV's 16-bit weight gradient: torch casts it to the fp32 parameter's gradient
    (autograd's copy back, exact) and unscales that; the unit widens and unscales in one pass:
    the values and the flag bit for bit, every 16-bit edge (subnormals, infs, NaNs, -0)."""
    n = data.draw(st.integers(1, 1200))
    pats = np.asarray(data.draw(st.lists(st.integers(0, 0xFFFF), min_size=n, max_size=n)),
                      np.uint16)
    if data.draw(st.booleans()):            # mostly finite, as a real gradient
        pats &= np.uint16(0xBBFF)
    inv = data.draw(st.sampled_from([1.0, 2.0 ** -16, 1 / 3, 2.0 ** 10]))
    t16 = torch.from_numpy(pats.view(np.int16)).view(TORCH[dt])
    got, found = K.amp_unscale16(g, pats.view(np.float16) if dt == "f16" else pats, inv, dt)
    _same_as_torchs_unscale(got, found, t16.float(), inv)


def test_unscale_then_fold_equals_torch(g):
    """GradSA's fold stays fp32: the unscaled gradient folded equals torch's unscale then
    fold (g' = g + w*wd; u = u*m + g'; v = v + u) on the same bits."""
    rng = np.random.default_rng(7)
    n = 3001
    w, u, v = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    grad = (rng.standard_normal(n) * 65536).astype(np.float32)
    inv, mom, wd = 2.0 ** -16, 0.9, 1e-4
    gu, found = K.amp_unscale(g, grad, inv)
    u2, v2 = K.gradsa_fold(g, w, gu, u, v, momentum=mom, weight_decay=wd)
    gt, flag = torch.tensor(grad), torch.zeros(1)
    torch._amp_foreach_non_finite_check_and_unscale_([gt], flag, torch.tensor(inv))
    assert not found and flag.item() == 0
    ut = torch.tensor(u) * mom + (gt + torch.tensor(w) * wd)
    vt = torch.tensor(v) + ut
    assert (u2.view(np.uint32) == ut.numpy().view(np.uint32)).all()
    assert (v2.view(np.uint32) == vt.numpy().view(np.uint32)).all()


@pytest.mark.parametrize("dt", DTYPES)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_sgd_amp_equals_sgd_and_its_copy_torchs_cast(g, dt, data):
    n = data.draw(st.integers(3, 1500))
    w, grad, v = (_f32_draws(data, n) for _ in range(3))
    w[:3] = [np.inf, 65504.0, 65520.0]            # 65520 rounds to fp16's inf
    lr, mom, wd = 0.05, data.draw(st.sampled_from([0.0, 0.9])), data.draw(st.sampled_from([0.0, 1e-4]))
    w1, v1 = K.sgd_update(g, w, grad, v, lr, mom, wd)
    w2, v2, w16 = K.sgd_amp_update(g, w, grad, v, lr, mom, wd, dtype=dt)
    assert (w1.view(np.uint32) == w2.view(np.uint32)).all()
    assert (v1.view(np.uint32) == v2.view(np.uint32)).all()
    same(w16, bits(torch.from_numpy(w1).to(TORCH[dt])), dt, nan_any=False)


@pytest.mark.parametrize("dt", DTYPES)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_sgd_apply_amp_equals_sgd_apply_and_its_copy_torchs_cast(g, dt, data):
    n = data.draw(st.integers(3, 1500))
    w, d = (_f32_draws(data, n) for _ in range(2))
    w[:3] = [np.inf, 65504.0, 65520.0]            # 65520 rounds to fp16's inf
    lr = data.draw(st.sampled_from([0.1, 0.05, 1e-3]))
    w1 = K.sgd_apply(g, w, d, lr)
    w2, w16 = K.sgd_apply_amp(g, w, d, lr, dtype=dt)
    assert (w1.view(np.uint32) == w2.view(np.uint32)).all()
    same(w16, bits(torch.from_numpy(w1).to(TORCH[dt])), dt, nan_any=False)
    assert K.variant("sgd_apply", dt) == f"sgd_apply_amp_{dt}"
    assert K.stream_dtypes(f"sgd_apply_amp_{dt}") == {"w": "f32", "d": "f32", "w16": dt}


# ---- names, dtypes and the access model ---------------------------------------------------------

def test_variant_and_stream_dtypes():
    assert K.variant("relu_fwd", "f32") == "relu_fwd"
    assert K.variant("relu_fwd", "bf16") == "relu_fwd_bf16"
    assert K.variant("bn_bwd_apply_ch", "f16") == "bn_bwd_apply_ch_f16"
    assert K.variant("sgd", "f16") == "sgd_amp_f16"
    assert K.base_of("sgd_amp_bf16") == ("sgd", "bf16")
    assert K.base_of("maxpool2_fwd_f16") == ("maxpool2_fwd", "f16")
    for base, per in K.VARIANTS.items():
        for dt, name in per.items():
            assert name in K.KERNELS and K.base_of(name) == (base, dt)
    assert K.stream_dtypes("bn_bwd_stats_ch_bf16") == {"x": "bf16", "dy": "bf16", "par": "f32",
                                                       "acc": "f32"}
    assert K.stream_dtypes("sgd_amp_f16") == {"w": "f32", "g": "f32", "v": "f32", "w16": "f16"}
    assert K.stream_dtypes("amp_unscale") == {"g": "f32", "acc": "f32"}
    assert K.stream_dtypes("avgpool2_bwd_f16") == {"dy": "f16", "dx": "f16"}
    for name in K.KERNELS:
        assert tuple(K.stream_dtypes(name)) == A.kernel_streams(name)
    with pytest.raises(PimError, match="kernel gradsa_fold has no bf16 variant"):
        K.variant("gradsa_fold", "bf16")
    assert K.variant("amp_unscale", "f16") == "amp_unscale_f16"
    assert K.stream_dtypes("amp_unscale_bf16") == {"g16": "bf16", "g": "f32", "acc": "f32"}
    with pytest.raises(PimError, match="unknown dtype 'f8'"):
        K.variant("relu_fwd", "f8")
    with pytest.raises(PimError, match="unknown PIM kernel 'conv'"):
        K.variant("conv", "f16")


@pytest.mark.parametrize("lanes", (8, 16))
def test_a_16bit_stream_takes_half_the_columns(lanes):
    n = 6144                                      # whole blocks (relu6_bwd's are 6 columns)
    for base in ("relu_fwd", "residual_add", "relu6_bwd"):
        a32 = A.bank_accesses(base, lanes=lanes, elements=n)
        for dt in DTYPES:
            a16 = A.bank_accesses(K.variant(base, dt), lanes=lanes, elements=n)
            assert len(a16) * 2 == len(a32)
            assert a16["column"].max() * 2 + 1 == a32["column"].max()
    a = A.bank_accesses("sgd_amp_f16", lanes=lanes, elements=n)
    per = {s: int((a["stream"] == i).sum()) for i, s in enumerate(A.kernel_streams("sgd_amp_f16"))}
    w = per["w"] // 2                             # read and written
    assert per["g"] == w and per["v"] == 2 * w and per["w16"] * 2 == w
    pool = A.bank_accesses("maxpool2_fwd_bf16", lanes=lanes, images=2, height=8, width=8,
                           channels=64)
    assert len(pool) * 2 == len(A.bank_accesses("maxpool2_fwd", lanes=lanes, images=2, height=8,
                                                width=8, channels=64))


def test_docs_hold_the_cycles_tables():
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "scripts"))
    import amp_table
    doc = (root / "docs" / "pim.md").read_text()
    for what in ("cycles_per_element", "dram_columns_per_element"):
        assert "\n".join(amp_table.table(what)) in doc


def test_fp32_average_pooling_signed_zeros_as_torch(g):
    """The fp32 kernels too: a mean (or gradient) that is -0 comes out +0, as torch's NCHW
    kernels give (four -0; a tiny negative sum whose quarter rounds to -0)."""
    s = np.float32(1e-45)
    x = np.zeros((1, 4, 2, 2), np.float32) - np.float32(0.0)
    x[0, 1, 0, 0], x[0, 2, 0, 0], x[0, 3, 0, 0] = 0.0, -s, -3 * s
    xt = torch.tensor(x, requires_grad=True)
    y = F.avg_pool2d(xt, 2)
    got = K.avgpool2_forward(g, x)
    assert (got.view(np.uint32) == y.detach().numpy().view(np.uint32)).all()
    assert list(got.ravel().view(np.uint32)) == [0, 0, 0, 0x80000001]
    dy = np.asarray([-0.0, -s, -2 * s, -3 * s], np.float32).reshape(1, 4, 1, 1)
    y.backward(torch.tensor(dy))
    dx = K.avgpool2_backward(g, dy, x.shape)
    assert (dx.view(np.uint32) == xt.grad.numpy().view(np.uint32)).all()

"""Kernels on the golden model against torch: batch norm forward/backward within stated
float tolerances, ReLU exact, residual add exact, SGD equal to torch's float32 formula,
GradSA's fold / select and the plain SGD update equal to torch (and to pimrt.gradsa's
accumulate, select and commit), pooling exact."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from pimrt.gradsa.sparsify import sample_threshold, select
from pimrt.gradsa.state import ParamState, accumulate, commit
from pimrt.pim import isa, kernels as K
from pimrt.pim.errors import PimCapacityError, PimError
from pimrt.pim.golden import GoldenBackend

# Batch-norm tolerance: the unit sums per lane in float32 (8 partial sums, added in float64
# on the host) where torch sums differently, so results differ by rounding only.
BN_RTOL, BN_ATOL = 1e-4, 1e-5


@pytest.fixture
def g():
    return GoldenBackend()


def _x(shape, seed=0, scale=1.0, shift=0.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale + shift).astype(np.float32)


@pytest.mark.parametrize("shape, scale, shift", [((4, 16, 8, 8), 1.0, 0.0),
                                                 ((3, 5, 7, 9), 3.0, 2.0),
                                                 ((64, 3), 0.5, -1.0)])
def test_batchnorm_forward_and_backward_vs_torch(g, shape, scale, shift):
    x = _x(shape, 1, scale, shift)
    C = shape[1]
    gamma = _x(C, 2) * 0.3 + 1.0
    beta = _x(C, 3)
    dy = _x(shape, 4)
    y, mean, invstd = K.batchnorm_forward(g, x, gamma, beta, eps=1e-5)
    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True)
    bt = torch.tensor(beta, requires_grad=True)
    yt = F.batch_norm(xt, None, None, gt, bt, training=True, eps=1e-5)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=BN_RTOL, atol=BN_ATOL)
    dims = tuple(i for i in range(x.ndim) if i != 1)
    np.testing.assert_allclose(mean, x.mean(axis=dims, dtype=np.float64), rtol=1e-5, atol=1e-6)
    yt.backward(torch.tensor(dy))
    dx, dgamma, dbeta = K.batchnorm_backward(g, x, dy, gamma, mean, invstd)
    scale_dx = np.abs(xt.grad.numpy()).max()
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=BN_RTOL, atol=BN_ATOL * scale_dx)
    np.testing.assert_allclose(dgamma, gt.grad.numpy(), rtol=BN_RTOL, atol=BN_ATOL * x.size)
    np.testing.assert_allclose(dbeta, bt.grad.numpy(), rtol=BN_RTOL, atol=BN_ATOL * x.size)


def test_relu_exact(g):
    x = _x((2, 8, 5, 5), 5)
    x.ravel()[:7] = [0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, np.nan]
    y, mask = K.relu_forward(g, x)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.relu(xt)
    assert (y.view(np.uint32) == yt.detach().numpy().view(np.uint32)).all()   # -0 stays -0
    dy = _x(x.shape, 6)
    yt.backward(torch.tensor(dy))
    dx = K.relu_backward(g, y, dy)             # from the output: a NaN passes dy, as in torch
    assert (dx.view(np.uint32) == xt.grad.numpy().view(np.uint32)).all()
    assert dx.ravel()[6] == dy.ravel()[6]
    assert (mask == (x > 0)).all()


def _relu6_vs_torch(g, x, dy):
    """relu6_fwd / relu6_bwd against torch's relu6 (hardtanh(x, 0, 6)) and its backward."""
    y, passed = K.relu6_forward(g, x)
    xt = torch.tensor(x, requires_grad=True)
    yt = F.relu6(xt)
    yt.backward(torch.tensor(dy))
    nan = np.isnan(x)
    # bit for bit (-0 stays -0; the unit makes every NaN the canonical quiet NaN)
    assert (y.view(np.uint32)[~nan] == yt.detach().numpy().view(np.uint32)[~nan]).all()
    assert (y.view(np.uint32)[nan] == isa.QNAN).all()
    dx = K.relu6_backward(g, y, dy)
    assert (dx.view(np.uint32)[~nan] == xt.grad.numpy().view(np.uint32)[~nan]).all()
    # a NaN passes dy, as torch's hardtanh_backward defines it ((x <= 0 || x >= 6) ? 0 : dy,
    # and so on CUDA); torch's vectorised CPU loop gives 0 there instead, its scalar tail dy
    assert (dx[nan] == dy[nan]).all()
    assert (passed == ((y > 0) & (y < 6))).all()


def test_relu6_exact(g):
    x = _x((2, 8, 5, 5), 5, scale=4.0, shift=2.0)
    six = np.float32(6)
    x.ravel()[:12] = [0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, np.nan, 6.0,
                      np.nextafter(six, 0), np.nextafter(six, 7), -6.0, 7.0]
    _relu6_vs_torch(g, x, _x(x.shape, 6))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=200), st.integers(0, 2**16))
def test_relu6_every_bit_pattern(words, seed):
    x = np.array(words, np.uint32).view(np.float32)
    _relu6_vs_torch(GoldenBackend(), x, _x(x.shape, seed))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=300))
def test_copy_moves_every_bit_pattern(words):
    x = np.array(words, np.uint32).view(np.float32)
    y = K.copy(GoldenBackend(), x)
    assert (y.view(np.uint32) == x.view(np.uint32)).all()


def test_residual_add_exact(g):
    a, b = _x(1000, 7), _x(1000, 8)
    y = K.residual_add(g, a, b)
    assert (y == (torch.tensor(a) + torch.tensor(b)).numpy()).all()


def test_sgd_equals_torch_float32_formula(g):
    w, grad, v = _x(777, 9), _x(777, 10), _x(777, 11)
    lr, mom, wd = 0.05, 0.9, 1e-4
    w2, v2 = K.sgd_update(g, w, grad, v, lr=lr, momentum=mom, weight_decay=wd)
    wt, gt, vt = (torch.tensor(a) for a in (w, grad, v))
    d = gt + wt * wd                      # torch: d_p.add(param, alpha=wd)
    vt = vt * mom + d                     # buf.mul_(momentum).add_(d_p)
    wt = wt - lr * vt                     # param.add_(buf, alpha=-lr)
    assert (v2 == vt.numpy()).all()
    assert (w2 == wt.numpy()).all()


def test_sgd_close_to_torch_optimizer(g):
    w, grad, v = _x(300, 12), _x(300, 13), _x(300, 14)
    p = torch.nn.Parameter(torch.tensor(w))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=1e-3)
    opt.state[p]["momentum_buffer"] = torch.tensor(v)
    p.grad = torch.tensor(grad)
    opt.step()
    w2, v2 = K.sgd_update(g, w, grad, v, lr=0.1, momentum=0.9, weight_decay=1e-3)
    np.testing.assert_allclose(w2, p.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(v2, opt.state[p]["momentum_buffer"].numpy(), rtol=1e-6, atol=1e-7)


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def test_gradsa_fold_equals_torch_float32_formula(g):
    w, grad, u, v = _x(777, 20), _x(777, 21), _x(777, 22), _x(777, 23)
    mom, wd = 0.9, 1e-4
    u2, v2 = K.gradsa_fold(g, w, grad, u, v, momentum=mom, weight_decay=wd)
    wt, gt, ut, vt = (torch.tensor(a) for a in (w, grad, u, v))
    d = gt + wt * wd                      # torch.add(g, w, alpha=wd), unfused
    ut = ut * mom + d                     # u.mul_(momentum).add_(g')
    vt = vt + ut                          # v.add_(u)
    assert (_bits(u2) == _bits(ut.numpy())).all()
    assert (_bits(v2) == _bits(vt.numpy())).all()


def test_sgd_apply_equals_torch_float32_formula(g):
    w, d = _x(777, 24), _x(777, 25)
    w2 = K.sgd_apply(g, w, d, lr=0.05)
    wt = torch.tensor(w) - 0.05 * torch.tensor(d)      # p.add_(d, alpha=-lr), unfused
    assert (_bits(w2) == _bits(wt.numpy())).all()


def test_gradsa_select_equals_torch(g):
    v, u = _x(1000, 26), _x(1000, 27)
    v[:6] = [0.0, -0.0, 0.5, -0.5, np.nextafter(np.float32(0.5), 0), np.nan]
    u[:6] = -0.0
    u2, mask, d = K.gradsa_select(g, v, u, 0.5)
    ref = torch.tensor(v).abs() >= 0.5
    ut = torch.tensor(u)
    ut[ref] = 0
    assert (mask == ref.numpy()).all() and list(mask[:6]) == [False, False, True, True, False, False]
    assert (_bits(u2) == _bits(ut.numpy())).all()       # -0 kept where not selected
    assert (_bits(d) == 0).all()                        # +0


@pytest.mark.parametrize("n, k, seed", [(3000, 60, 0), (20000, 40, 5)])
def test_gradsa_fold_select_equal_accumulate_select_commit(g, n, k, seed):
    """The two kernels against compress_bucket's steps: accumulate (momentum correction),
    select (exact top-k for a small layer, the sampled threshold for a big one), and commit
    with masking (here with a lossless decode: v[idx] -= v[idx], u[idx] = 0)."""
    w, grad = _x(n, 30 + seed), _x(n, 31 + seed)
    u, v = _x(n, 32 + seed, 0.1), _x(n, 33 + seed, 0.01)
    mom, wd = 0.9, 1e-4
    ps = ParamState(torch.tensor(u), torch.tensor(v))
    accumulate(ps, torch.tensor(grad) + torch.tensor(w) * wd, mom)
    u2, v2 = K.gradsa_fold(g, w, grad, u, v, momentum=mom, weight_decay=wd)
    assert (_bits(u2) == _bits(ps.u.numpy())).all() and (_bits(v2) == _bits(ps.v.numpy())).all()

    mag = ps.v.abs()
    idx = select(ps.v, k, generator=torch.Generator().manual_seed(seed))
    if n <= 4096:                                   # exact top-k: its smallest magnitude
        thr = float(mag[idx].min())
    else:                                           # the same sampled estimate select made
        thr = sample_threshold(mag, k, 4096, torch.Generator().manual_seed(seed))
    u3, mask, d = K.gradsa_select(g, v2, u2, thr)
    assert (mask == (mag >= thr).numpy()).all()     # select's candidate set
    if mask.sum() <= k:
        assert (np.flatnonzero(mask) == idx.numpy()).all()
    else:                                           # select trimmed it to the top k
        assert mask[idx.numpy()].all() and len(idx) == k
    idx = torch.from_numpy(np.flatnonzero(mask))
    commit(ps, idx, ps.v[idx].clone(), masking=True)
    assert (_bits(u3) == _bits(ps.u.numpy())).all()     # u zeroed exactly where |v| >= t
    assert (_bits(u3[~mask]) == _bits(u2[~mask])).all() and (_bits(u3[mask]) == 0).all()
    v3 = v2.copy()
    v3[mask] -= v2[mask]                            # the host's part: the remainder
    assert (_bits(v3) == _bits(ps.v.numpy())).all()
    assert (_bits(d) == 0).all()


_TINY = float(np.finfo(np.float32).smallest_subnormal)


@given(data=st.data())
def test_gradsa_select_mask_is_selects_rule(data):
    """For any v, u and threshold (float32 or not, zero, negative, NaN, tiny, huge): the mask
    is sparsify.select's `|v| >= thr if thr > 0 else |v| > 0` (torch, float32), u is zeroed
    exactly there and kept bit for bit elsewhere, d is +0."""
    thr = data.draw(st.one_of(st.floats(width=32), st.floats(),
                              st.sampled_from([0.0, -0.0, _TINY, 1e-50, 1e300, float("nan")])),
                    label="thr")
    t32 = np.float32(thr) if abs(thr) < 3e38 else np.float32(1.0)
    near = [float(t32), -float(t32), float(np.nextafter(t32, np.float32(0))),
            float(np.nextafter(t32, np.float32(np.inf))), 0.0, -0.0, _TINY, -_TINY]
    n = data.draw(st.integers(1, 40), label="n")
    vals = st.one_of(st.floats(width=32), st.sampled_from(near))
    v = np.array(data.draw(st.lists(vals, min_size=n, max_size=n), label="v"), np.float32)
    u = np.array(data.draw(st.lists(st.floats(width=32), min_size=n, max_size=n), label="u"),
                 np.float32)
    u2, mask, d = K.gradsa_select(GoldenBackend(rows=8, cols=32), v, u, thr)
    mag = torch.tensor(v).abs()
    ref = (mag >= thr if thr > 0 else mag > 0).numpy()
    assert (mask == ref).all()
    assert (_bits(u2[mask]) == 0).all() and (_bits(u2[~mask]) == _bits(u[~mask])).all()
    assert (_bits(d) == 0).all()


def test_pooling_vs_torch(g):
    x = _x((3, 12, 6, 10), 15)
    xt = torch.tensor(x, requires_grad=True)
    assert (K.avgpool2_forward(g, x) == F.avg_pool2d(xt, 2).detach().numpy()).all()
    assert (K.maxpool2_forward(g, x) == F.max_pool2d(xt, 2).detach().numpy()).all()
    dy = _x((3, 12, 3, 5), 16)
    F.avg_pool2d(xt, 2).backward(torch.tensor(dy))
    assert (K.avgpool2_backward(g, dy, x.shape) == xt.grad.numpy()).all()
    xt.grad = None
    F.max_pool2d(xt, 2).backward(torch.tensor(dy))
    assert (K.maxpool2_backward_host(x, dy) == xt.grad.numpy()).all()


def test_odd_sizes_crop_like_torch(g):
    x = _x((1, 3, 5, 7), 17)
    assert (K.avgpool2_forward(g, x) == F.avg_pool2d(torch.tensor(x), 2).numpy()).all()


def test_big_buffers_are_chunked(g):
    small = GoldenBackend(rows=8, cols=32)          # 256 columns
    x = _x(10_000, 18)
    r = K.run_stream(small, "relu_fwd", {"x": x})
    assert (r.outputs["y"] == np.maximum(x, 0)).all()
    assert r.chunks == -(-10_000 // (8 * (256 // 2 // 8 * 8)))   # several runs


def test_image_too_big_for_bank_is_refused():
    tiny = GoldenBackend(rows=2, cols=32)
    with pytest.raises(PimCapacityError, match="one channel column of one image needs 320 "
                                               "columns \\(16x16\\); the bank has 64"):
        K.avgpool2_forward(tiny, _x((1, 8, 16, 16), 19))


def test_an_image_whose_channels_do_not_fit_is_pooled_in_channel_blocks(g):
    # 128 columns; a 6x6 image takes 36 + 9 per lane column: 2 of its 5 (37 channels) at once
    small = GoldenBackend(rows=4, cols=32)
    x = _x((3, 37, 6, 6), 21)
    xt = torch.tensor(x, requires_grad=True)
    for fwd in (K.avgpool2_forward, K.maxpool2_forward):
        got = fwd(small, x)
        assert (got == fwd(g, x)).all()                           # same bits as one block
    assert (K.maxpool2_forward(small, x) == F.max_pool2d(xt, 2).detach().numpy()).all()
    dy = _x((3, 37, 3, 3), 22)
    F.avg_pool2d(xt, 2).backward(torch.tensor(dy))
    assert (K.avgpool2_backward(small, dy, x.shape) == xt.grad.numpy()).all()


@pytest.mark.parametrize("call, match", [
    (lambda g: K.avgpool2_forward(g, np.ones((1, 8, 1, 4))), r"avgpool2: input of shape \(1, 8, 1, 4\) has no 2x2"),
    (lambda g: K.avgpool2_backward(g, np.ones((1, 8, 3, 3)), (1, 8, 4, 4)),
     r"dy of shape \(1, 8, 3, 3\) does not match the input \(1, 8, 4, 4\)"),
    (lambda g: K.batchnorm_forward_2pass(g, np.ones((2, 3, 2, 2)), np.ones(2), np.ones(3)),
     r"gamma has 2 values for 3 channels \(input shape \(2, 3, 2, 2\)\)"),
    (lambda g: K.batchnorm_forward_2pass(g, np.ones((0, 3, 2, 2)), np.ones(3), np.ones(3)),
     r"more than one value per channel, got shape \(0, 3, 2, 2\)"),
    (lambda g: K.batchnorm_forward_2pass(g, np.ones((1, 3, 1, 1)), np.ones(3), np.ones(3)),
     r"more than one value per channel, got shape \(1, 3, 1, 1\)"),
    (lambda g: K.batchnorm_backward_channels(g, np.ones((2, 3, 4)), np.ones((2, 3, 2)),
                                             np.ones(3), np.ones(3), np.ones(3)),
     r"dy \(2, 3, 2\) and x \(2, 3, 4\) differ"),
    (lambda g: K.relu_backward(g, np.ones(5), np.ones(4)), r"relu_bwd: y \(5,\) and dy \(4,\)"),
    (lambda g: K.relu6_backward(g, np.ones(5), np.ones(4)), r"relu6_bwd: y \(5,\) and dy \(4,\)"),
])
def test_shapes_a_kernel_cannot_honour_are_clear_errors(g, call, match):
    with pytest.raises(PimError, match=match):
        call(g)

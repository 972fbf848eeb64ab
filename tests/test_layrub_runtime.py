"""Layrub on real torch training (CPU): bit-identical gradients, ReLU masks, offload and
prefetch through the host pool, accounting, budgets and unsupported ops."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn

from pimrt import zoo
from pimrt.errors import PimrtError
from pimrt.layrub import (Layrub, LayrubBudgetError, LayrubError, LayrubUnsupportedError,
                          LayrubWarning, HostPool, measure_saved, pack_bits, parse_bytes,
                          train_step, unpack_bits)


def _grads(model, x, y, ctx=None):
    model.zero_grad(set_to_none=True)
    if ctx is None:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
    else:
        with ctx:
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}, loss.detach()


def _assert_identical(ga, gb):
    assert ga.keys() == gb.keys()
    bad = [n for n in ga if not torch.equal(ga[n], gb[n])]
    assert not bad, f"gradients differ for {bad[:5]}"


def _data(batch, size=32, classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, size, size, generator=g),
            torch.randint(0, classes, (batch,), generator=g))


CONFIGS = [
    dict(offload=True, reuse=True),
    dict(offload=True, reuse=False),
    dict(offload=False, reuse=True),
    dict(offload=True, reuse=True, relu_mask="byte", prefetch_distance=0),
    dict(offload=True, reuse=True, prefetch_distance=3, min_offload_bytes=0),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_resnet20_bit_identical(cfg):
    torch.manual_seed(0)
    model = zoo.build("resnet20", input_size=32)
    x, y = _data(2)
    ref = copy.deepcopy(model)
    g0, l0 = _grads(ref, x, y)
    lr = Layrub(model, input_shape=x.shape, **cfg)
    g1, l1 = _grads(model, x, y, lr)
    assert torch.equal(l0, l1)
    _assert_identical(g0, g1)
    s = lr.stats
    if cfg.get("offload"):
        assert s.offloaded_tensors > 0 and s.offloaded_bytes == s.fetched_bytes
        assert lr.pool.in_use == 0              # every block back in the pool
    if cfg.get("reuse"):                       # a mask where the planner says it pays
        assert s.masks == sum(lr.mask_plan.values())
    assert lr.acct.cur == 0                    # nothing left accounted after backward


# mobilenetv2 is left out: its plain CPU backward (depthwise conv) is not bit-reproducible
# run to run even without Layrub, so there is no reference to compare with.
@pytest.mark.parametrize("name,batch", [
    ("resnet18", 2), ("vgg16", 2),
    pytest.param("densenet121", 1, marks=pytest.mark.slow),
    pytest.param("resnet50", 1, marks=pytest.mark.slow)])
def test_zoo_bit_identical(name, batch):
    torch.manual_seed(0)
    model = zoo.build(name, input_size=32)
    x, y = _data(batch)
    ref = copy.deepcopy(model)
    g0, _ = _grads(ref, x, y)
    lr = Layrub(model, input_shape=x.shape)
    g1, _ = _grads(model, x, y, lr)
    _assert_identical(g0, g1)
    assert lr.stats.saved_peak_bytes > 0
    # running statistics updated exactly as without Layrub
    for (n, b0), (_, b1) in zip(ref.named_buffers(), model.named_buffers()):
        assert torch.equal(b0, b1), n


def test_several_steps_match_plain_training():
    torch.manual_seed(1)
    model = zoo.build("resnet20", input_size=32)
    ref = copy.deepcopy(model)
    opt0 = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    opt1 = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lr = Layrub(model, input_shape=(4, 3, 32, 32))
    cap = lr.pool.capacity
    for step in range(3):
        x, y = _data(4, seed=step)
        opt0.zero_grad()
        nn.functional.cross_entropy(ref(x), y).backward()
        opt0.step()
        loss = lr.train_step(opt1, nn.functional.cross_entropy, x, y)
        assert torch.isfinite(loss)
    for (n, p0), p1 in zip(ref.named_parameters(), model.parameters()):
        assert torch.equal(p0, p1), n
    assert lr.pool.capacity == cap             # preallocated once, never grown
    assert len(lr.history) == 3


def test_train_step_function():
    torch.manual_seed(2)
    model = zoo.build("resnet20", input_size=32)
    ref = copy.deepcopy(model)
    x, y = _data(2)
    o0 = torch.optim.SGD(ref.parameters(), lr=0.1)
    o0.zero_grad()
    nn.functional.cross_entropy(ref(x), y).backward()
    o0.step()
    train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy,
               x, y)
    for p0, p1 in zip(ref.parameters(), model.parameters()):
        assert torch.equal(p0, p1)


def test_accounting_baseline_vs_layrub():
    torch.manual_seed(0)
    model = zoo.build("resnet20", input_size=32)
    x, y = _data(8)
    m = measure_saved(model, input_shape=x.shape)
    g0, _ = _grads(model, x, y, m)
    base = m.stats.saved_peak_bytes
    # the accounting counts distinct storages: equal to the dry run's estimate (small extras)
    assert abs(base - m.estimate["device_bytes"]) <= 0.02 * base
    lr = Layrub(model, input_shape=x.shape)
    g1, _ = _grads(model, x, y, lr)
    _assert_identical(g0, g1)
    assert lr.stats.saved_peak_bytes < 0.35 * base
    assert lr.stats.host_peak_bytes <= lr.pool.capacity
    assert lr.stats.prefetch_hits > lr.stats.prefetch_misses
    reuse_only = Layrub(model, input_shape=x.shape, offload=False)
    _grads(model, x, y, reuse_only)
    assert reuse_only.stats.saved_peak_bytes <= base


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_relu_mask_bit_exact(dtype):
    g = torch.Generator().manual_seed(0)
    y = torch.randn(1000, generator=g).to(dtype).relu()
    y[:5] = torch.tensor([0.0, -0.0, float("nan"), float("inf"), 1e-30]).to(dtype)
    grad = torch.randn(1000, generator=g).to(dtype)
    mask = torch.le(y, 0).logical_not()
    stand_in = unpack_bits(pack_bits(mask), tuple(y.shape)).to(dtype)
    a = torch.ops.aten.threshold_backward(grad, y, 0)
    b = torch.ops.aten.threshold_backward(grad, stand_in, 0)
    # bit-identical, NaN and signed zeros included
    assert torch.equal(a.isnan(), b.isnan())
    assert torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8))


def test_hardtanh_mask_bit_exact():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU6(), nn.Conv2d(8, 8, 3),
                          nn.Hardtanh(-1.0, 2.0, inplace=True), nn.Flatten(), nn.Linear(8 * 28 * 28, 10))
    x, y = _data(2)
    ref = copy.deepcopy(model)
    g0, _ = _grads(ref, x, y)
    lr = Layrub(model, input_shape=x.shape, capture_graph=False)
    g1, _ = _grads(model, x, y, lr)
    _assert_identical(g0, g1)
    assert lr.stats.masks == 2


def _pack_reference(mask):
    """Bit k of byte i = element 8i+k, with plain shifts and a sum."""
    flat = mask.reshape(-1)
    flat = torch.cat([flat, flat.new_zeros((-flat.numel()) % 8)])
    return (flat.view(-1, 8).to(torch.uint8) << torch.arange(8, dtype=torch.uint8)).sum(
        1, dtype=torch.uint8)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), start=st.integers(0, 9), p=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
       seed=st.integers(0, 2**16))
def test_pack_bits_matches_the_shift_reference(n, start, p, seed):
    g = torch.Generator().manual_seed(seed)
    m = (torch.rand(start + n, generator=g) < p)[start:]        # also at odd storage offsets
    bits = pack_bits(m)
    assert torch.equal(bits, _pack_reference(m))
    out = unpack_bits(bits, (n,))
    assert out.dtype == torch.bool and torch.equal(out, m)
    assert torch.equal(out.to(torch.float32), m.to(torch.float32))   # true 0/1 bools


def test_pack_bits_roundtrip():
    g = torch.Generator().manual_seed(0)
    for n in (1, 7, 8, 9, 1000, 4099):
        m = torch.rand(n, generator=g) > 0.5
        bits = pack_bits(m)
        assert bits.numel() == (n + 7) // 8 and bits.dtype == torch.uint8
        assert torch.equal(unpack_bits(bits, (n,)), m)


def test_host_budget_too_small_before_training():
    model = zoo.build("resnet20", input_size=32)
    before = [b.clone() for b in model.buffers()]
    with pytest.raises(LayrubBudgetError) as ei:
        Layrub(model, input_shape=(8, 3, 32, 32), host_budget="1MB")
    msg = str(ei.value)
    assert "host memory budget too small" in msg and "needed" in msg
    assert ei.value.needed > ei.value.budget == 2**20
    assert isinstance(ei.value, PimrtError)
    for b0, b1 in zip(before, model.buffers()):    # nothing ran
        assert torch.equal(b0, b1)


def test_device_budget():
    model = zoo.build("resnet20", input_size=32)
    x, y = _data(4)
    base = Layrub(model, input_shape=x.shape, offload=False, reuse=False).estimate
    budget = base["device_bytes"] // 2
    with pytest.raises(LayrubBudgetError):          # baseline: refused before training
        Layrub(model, input_shape=x.shape, offload=False, reuse=False, device_budget=budget)
    m = Layrub(model, offload=False, reuse=False, device_budget=budget)   # no pre-check
    with pytest.raises(LayrubBudgetError, match="device feature-map budget exceeded"):
        _grads(model, x, y, m)
    lr = Layrub(model, input_shape=x.shape, device_budget=budget)
    _grads(model, x, y, lr)
    assert lr.stats.saved_peak_bytes <= budget


def test_pool_runtime_exhaustion_is_clear():
    model = zoo.build("resnet20", input_size=32)
    x, y = _data(4)
    lr = Layrub(model, host_budget="256KB", capture_graph=False)   # no pre-check possible
    with pytest.raises(LayrubBudgetError, match="host memory budget exhausted"):
        _grads(model, x, y, lr)


class _GeluNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.GELU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.relu(self.conv2(self.act(self.conv1(x))))
        return self.fc(x.mean((2, 3)))


def test_unsupported_op_strict_names_node():
    with pytest.raises(LayrubUnsupportedError, match="act"):
        Layrub(_GeluNet(), input_shape=(2, 3, 16, 16), strict=True)


def test_unsupported_op_falls_back_with_warning():
    torch.manual_seed(0)
    model = _GeluNet()
    ref = copy.deepcopy(model)
    x, y = _data(2, size=16)
    with pytest.warns(LayrubWarning, match="act"):
        lr = Layrub(model, input_shape=x.shape, min_offload_bytes=0)
    assert lr.fallback_modules == {"act"}
    g0, _ = _grads(ref, x, y)
    g1, _ = _grads(model, x, y, lr)
    _assert_identical(g0, g1)
    assert lr.stats.fallback_saves >= 1 and lr.stats.offloaded_tensors >= 1


def test_bad_options():
    m = nn.Linear(2, 2)
    with pytest.raises(LayrubError):
        Layrub(m, relu_mask="nibble")
    with pytest.raises(LayrubError):
        Layrub(m, prefetch_distance=-1)
    assert parse_bytes("2GB") == 2 * 2**30 and parse_bytes("512MiB") == 512 * 2**20
    with pytest.raises(LayrubError):
        parse_bytes("lots")
    for bad in ("inf", "nanGB", float("inf"), float("nan")):     # once an OverflowError
        with pytest.raises(LayrubError, match="finite"):
            Layrub(m, host_budget=bad)


def test_host_pool_blocks():
    pool = HostPool(capacity=4096)
    a, b, c = pool.alloc(1000), pool.alloc(1000), pool.alloc(1000)
    assert pool.in_use == 3 * 1024
    pool.free(b)
    d = pool.alloc(512)
    assert d.offset == b.offset                 # first fit reuses the hole
    pool.free(a), pool.free(c), pool.free(d)
    assert pool.in_use == 0 and pool.chunks[0].free_len == {0: 4096}   # coalesced
    e = pool.alloc(8000)                         # grows by a chunk
    assert e.chunk == 1
    limited = HostPool(capacity=1024, max_bytes=1024)
    limited.alloc(1024)
    with pytest.raises(LayrubBudgetError):
        limited.alloc(1)


@pytest.fixture
def deterministic_cuda():
    """cuDNN's deterministic kernels and no TF32: two plain steps on the same data give the
    same bits (by default a wgrad kernel's atomics and TF32 rounding make them differ by about
    1e-3 relative, run to run: seen on an H200, 2026-12-04)."""
    b = torch.backends
    saved = (b.cudnn.deterministic, b.cudnn.benchmark, b.cudnn.allow_tf32,
             b.cuda.matmul.allow_tf32)
    b.cudnn.deterministic, b.cudnn.benchmark = True, False
    b.cudnn.allow_tf32 = b.cuda.matmul.allow_tf32 = False
    yield
    (b.cudnn.deterministic, b.cudnn.benchmark, b.cudnn.allow_tf32,
     b.cuda.matmul.allow_tf32) = saved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_side_stream_bit_identical(deterministic_cuda):
    torch.manual_seed(0)
    model = zoo.build("resnet18", input_size=32).cuda()
    x, y = (t.cuda() for t in _data(8))
    ref = copy.deepcopy(model)
    g0, _ = _grads(ref, x, y)
    lr = Layrub(model, input_shape=x.shape)
    assert lr.pool.chunks[0].buf.is_pinned()
    for _ in range(2):
        g1, _ = _grads(model, x, y, lr)
        _assert_identical(g0, g1)


def test_deep_command_small(capsys):
    from pimrt.layrub.deep import main
    assert main(["--depth", "20", "--batch", "2", "--budget", "1MB", "--steps", "1"]) == 0
    out = capsys.readouterr().out
    assert "baseline: refused before training" in out and "step 1: loss" in out


@pytest.mark.slow
def test_deep_resnet1202_under_budget(capsys):
    from pimrt.layrub.deep import main
    assert main(["--depth", "1202", "--batch", "2", "--budget", "64MB", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "baseline: refused before training" in out and "step 2: loss" in out


class _ReluThenConv(nn.Module):
    """conv -> ReLU -> conv (reads the ReLU's output in full) -> ReLU -> mean (reads
    nothing of it: the one place a mask pays) -> linear."""

    def __init__(self):
        super().__init__()
        self.c1, self.r1 = nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()
        self.c2, self.r2 = nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.r2(self.c2(self.r1(self.c1(x)))).mean((2, 3)))


@pytest.mark.parametrize("offload", [True, False])
def test_masks_follow_the_planner_per_layer(offload):
    """c2 keeps r1's map in full (on the device, or offloaded): no mask for r1. r2's output
    only r2's backward reads: with offload its mask pays (no host copy, no transfers, the
    peak not raised); without, the planner finds that the mask would sit beside the full map
    at the step's peak (the end of the forward pass) and keeps none. The runtime follows it
    layer by layer; without a graph every ReLU is masked, and a mask is freed as soon as
    another save keeps the map, offloaded too."""
    torch.manual_seed(0)
    model = _ReluThenConv()
    x, y = _data(4)
    g0, _ = _grads(copy.deepcopy(model), x, y)
    kw = dict(offload=offload, min_offload_bytes=0)
    lr = Layrub(model, input_shape=x.shape, **kw)
    assert lr.mask_plan == {("r1", "relu", 0): False, ("r2", "relu", 0): offload}
    g1, _ = _grads(model, x, y, lr)
    _assert_identical(g0, g1)
    assert (lr.stats.masks, lr.stats.masks_dropped) == (int(offload), 0)
    blind = Layrub(model, input_shape=x.shape, capture_graph=False, **kw)
    g2, _ = _grads(model, x, y, blind)
    _assert_identical(g0, g2)
    assert (blind.stats.masks, blind.stats.masks_dropped) == (2, 1)
    assert lr.acct.cur == blind.acct.cur == 0
    if offload:                 # r1's map leaves once, for c2 and r1 alike; r2's stays a mask
        n = 4 * 8 * 32 * 32 * 4
        assert blind.stats.saved_peak_bytes == lr.stats.saved_peak_bytes
        assert lr.stats.offloaded_bytes == lr.stats.fetched_bytes
        assert lr.stats.offloaded_bytes == blind.stats.offloaded_bytes
        assert lr.stats.mask_bytes == n // 32


def test_device_budget_offloads_only_what_it_needs():
    """With a device budget between full offload and none, Layrub offloads the earliest maps
    (the longest from forward to backward) and keeps the later ones while the estimate, with
    a margin of the largest map, fits: less copied and a smaller host pool for a larger
    budget, held bytes within the budget, gradients bit-identical."""
    torch.manual_seed(0)
    model = zoo.build("resnet20", input_size=32)
    x, y = _data(4)
    g0, _ = _grads(copy.deepcopy(model), x, y)
    full = Layrub(model, input_shape=x.shape).estimate
    none = Layrub(model, input_shape=x.shape, offload=False).estimate
    copied, pools = [], []
    for frac in (0.1, 0.5, 0.9):
        budget = int(full["device_bytes"] + frac * (none["device_bytes"] - full["device_bytes"]))
        lr = Layrub(model, input_shape=x.shape, device_budget=budget)
        g1, _ = _grads(model, x, y, lr)
        _assert_identical(g0, g1)
        s, est = lr.stats, lr.estimate
        assert s.saved_peak_bytes <= est["device_bytes"] <= budget
        assert s.kept_in_budget == est["kept_in_budget"] > 0
        assert s.offloaded_tensors == est["offloaded"] and s.offloaded_bytes == s.fetched_bytes
        assert lr.pool.capacity == est["host_bytes"] and lr.pool.in_use == 0
        copied.append(s.offloaded_bytes)
        pools.append(lr.pool.capacity)
    assert copied == sorted(copied, reverse=True) and copied[0] > copied[-1]
    assert pools[0] < full["host_bytes"]
    lr = Layrub(model, input_shape=x.shape, device_budget=full["device_bytes"])   # no room
    assert lr.estimate["host_bytes"] == full["host_bytes"] and "kept_in_budget" not in lr.estimate

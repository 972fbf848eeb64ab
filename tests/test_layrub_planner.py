"""Layrub's planner on zoo graphs and on random layer DAGs (hypothesis): no buffer read after
it is freed or overwritten, every tensor resident when read, planned peak <= baseline."""
from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import given, settings, strategies as st

from pimrt import zoo
from pimrt.graph import capture
from pimrt.graph.layer import PLACEMENT, Layer, LayerGraph
from pimrt.layrub import (LayrubBudgetError, LayrubError, LayrubUnsupportedError, LayrubWarning,
                          check_plan, plan)

_GRAPHS: dict = {}


def _graph(name, shape=(8, 3, 32, 32)):
    key = (name, shape)
    if key not in _GRAPHS:
        _GRAPHS[key] = capture(zoo.build(name, device="meta", input_size=shape[-1]), shape)
    return _GRAPHS[key]


@pytest.mark.parametrize("name", ["resnet50", "vgg16", "densenet121", "mobilenetv2"])
@pytest.mark.parametrize("offload,reuse", [(False, False), (False, True), (True, False),
                                           (True, True)])
def test_zoo_plans_check(name, offload, reuse):
    g = _graph(name)
    p = plan(g, offload=offload, reuse=reuse)
    check_plan(p, g)
    assert p.peak_bytes <= p.baseline_peak_bytes <= p.naive_bytes
    assert p.pool_bytes >= p.peak_bytes
    if not offload:
        assert p.host_peak_bytes == 0 and not p.traffic()
    if offload and reuse:
        assert p.reduction > 0.6


def test_resnet_reduction_and_traffic():
    g = _graph("resnet50")
    p = plan(g)
    assert p.reduction > 0.8
    tr = p.traffic()
    out = sum(t["bytes"] for t in tr if t["direction"] == "out")
    back = sum(t["bytes"] for t in tr if t["direction"] == "in")
    assert out == back == sum(p.buffer_bytes[f"A:{t}"] for t in p.offloaded)
    assert all(t["phase"] == "forward" for t in tr if t["direction"] == "out")
    assert all(t["phase"] == "backward" for t in tr if t["direction"] == "in")
    assert p.inplace_grads                       # in-place gradient reuse happened
    assert "planned peak" in p.summary()
    assert p.to_dict()["reduction"] == pytest.approx(p.reduction)


def test_batch_scaling():
    g = _graph("resnet20")
    p8, p16 = plan(g, offload=False, reuse=False), plan(g, batch=16, offload=False, reuse=False)
    assert p16.baseline_peak_bytes == pytest.approx(2 * p8.baseline_peak_bytes, rel=0.01)


def test_budget_offloads_just_enough():
    g = _graph("resnet50")
    full = plan(g)
    none = plan(g, offload=False)
    budget = (full.peak_bytes + none.peak_bytes) // 2
    p = plan(g, budget_bytes=budget)
    check_plan(p, g)
    assert p.peak_bytes <= budget
    assert 0 < len(p.offloaded) < len(full.offloaded)
    with pytest.raises(LayrubBudgetError) as ei:
        plan(g, budget_bytes=full.peak_bytes - 1)
    assert ei.value.needed == full.peak_bytes and str(full.peak_bytes)[:3] in \
        str(ei.value).replace(",", "")
    with pytest.raises(LayrubBudgetError):
        plan(g, offload=False, budget_bytes=none.peak_bytes - 1)
    with pytest.raises(LayrubBudgetError, match="host memory budget too small"):
        plan(g, host_budget_bytes=full.host_peak_bytes - 1)


def test_prefetch_distance():
    g = _graph("resnet20")
    ps = [plan(g, prefetch_distance=d) for d in (0, 1, 4)]
    for p in ps:
        check_plan(p, g)
    assert ps[0].peak_bytes <= ps[1].peak_bytes <= ps[2].peak_bytes
    with pytest.raises(LayrubError):
        plan(g, prefetch_distance=-1)


def test_unsupported_layer():
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.act = nn.GELU()
            self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.conv2(self.act(self.conv(x))))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = capture(Net(), (2, 3, 8, 8), allow_unsupported=True)
    with pytest.raises(LayrubUnsupportedError, match="act"):
        plan(g, strict=True)
    with pytest.warns(LayrubWarning, match="act"):
        p = plan(g)
    check_plan(p, g)
    assert p.no_reuse_layers == ["act"]
    assert "A:act" not in {b for s in p.steps for b, _ in s.offload}


def test_resnet1202_plans_fast():
    import time
    g = _graph("resnet1202", (16, 3, 32, 32))
    t = time.perf_counter()
    p = plan(g)
    assert time.perf_counter() - t < 20
    assert p.reduction > 0.9


# --------------------------------------------------------------------------------------
# random layer DAGs
# --------------------------------------------------------------------------------------
_KINDS = ["conv", "linear", "batchnorm", "relu", "relu6", "add", "maxpool", "avgpool",
          "adaptive_avgpool", "flatten", "concat", "dropout"]


@st.composite
def layer_dags(draw):
    n = draw(st.integers(2, 24))
    batch = draw(st.integers(1, 4))
    nodes = [Layer("x", "input", 0, "placeholder", "x", "", shape=(batch, 4),
                   bytes=batch * 16, placement="io")]
    for i in range(1, n + 1):
        kind = draw(st.sampled_from(_KINDS))
        k_in = 2 if kind in ("add", "concat") else 1
        srcs = [draw(st.integers(0, i - 1)) for _ in range(k_in)]
        if kind == "add":            # same shape as the first input
            srcs[1] = srcs[0] if draw(st.booleans()) else srcs[1]
        ins = [nodes[s].name for s in srcs]
        c = draw(st.integers(1, 64))
        if kind in ("batchnorm", "relu", "relu6", "dropout", "add") or \
                (kind == "flatten"):
            c = nodes[srcs[0]].shape[1]
        if kind == "concat":
            c = sum(nodes[s].shape[1] for s in srcs)
        shape = (batch, c)
        view_of = None
        if kind == "flatten":
            src = nodes[srcs[0]]
            view_of = src.view_of or src.name
        attrs = {"num_features": c} if kind == "batchnorm" else {}
        nodes.append(Layer(f"l{i}", kind, i, "call_module", kind, f"m{i}", inputs=ins,
                           shape=shape, bytes=batch * c * 4, attrs=attrs,
                           placement=PLACEMENT[kind], view_of=view_of))
    last = draw(st.integers(1, n))
    nodes.append(Layer("out", "output", n + 1, "output", "output", "", inputs=[f"l{last}"],
                       shape=nodes[last].shape, placement="io"))
    by = {x.name: x for x in nodes}
    for x in nodes:
        for i in x.inputs:
            if x.name not in by[i].consumers:
                by[i].consumers.append(x.name)
    return LayerGraph(nodes, (batch, 4), model_name="random")


@settings(max_examples=120)
@given(layer_dags(), st.booleans(), st.booleans(), st.integers(0, 3), st.integers(0, 64))
def test_random_dags(g, offload, reuse, d, min_bytes):
    p = plan(g, offload=offload, reuse=reuse, prefetch_distance=d, min_offload_bytes=min_bytes)
    check_plan(p, g)            # reads resident, no overwrite, no leak, peak replayed
    assert p.peak_bytes <= p.baseline_peak_bytes
    base = plan(g, offload=False, reuse=False)
    check_plan(base, g)
    assert base.peak_bytes == p.baseline_peak_bytes


@settings(max_examples=60)
@given(layer_dags(), st.floats(0.0, 1.0))
def test_random_dags_budget(g, frac):
    full = plan(g)
    none = plan(g, offload=False)
    budget = int(full.peak_bytes + frac * (none.peak_bytes - full.peak_bytes))
    p = plan(g, budget_bytes=budget)
    check_plan(p, g)
    assert p.peak_bytes <= budget
    if full.peak_bytes > 0:
        with pytest.raises(LayrubBudgetError):
            plan(g, budget_bytes=full.peak_bytes - 1)


def test_checker_catches_a_read_after_free():
    g = _graph("resnet20")
    p = plan(g)
    # corrupt: free the first offloaded activation one step before its prefetch
    s = next(s for s in p.steps if s.prefetch)
    buf, size = s.prefetch[0]
    s.prefetch.pop(0)
    s.alloc = [a for a in s.alloc if a[0] != buf]
    with pytest.raises(LayrubError):
        check_plan(p, g)


# --------------------------------------------------------------------------------------
# per-layer ReLU masks
# --------------------------------------------------------------------------------------
def test_masks_decided_per_layer():
    """ResNet-50 at 224x224 with every map offloaded: a mask for the stem's ReLU (read by
    the max-pool, whose backward needs only its indices) would sit on the device for the
    whole step while the map waits on the host; the last ReLU's mask pays (it does not raise
    the peak and saves a host copy)."""
    from pimrt.layrub import planner as P
    g = _graph("resnet50", (32, 3, 224, 224))
    p = plan(g)
    check_plan(p, g)
    G = P._Graph(g, 32, False)
    cands = P._mask_candidates(G, set())
    assert set(p.masks) < set(cands) and "relu" in cands and "relu" not in p.masks
    off = set(P._offload_candidates(G, True, 0, set()))
    every = P._schedule1(G, True, off, 1, set(), set(cands))
    none = P._schedule1(G, True, off, 1, set(), set())
    assert p.peak_bytes < every["peak"] and p.peak_bytes <= none["peak"]
    last = p.masks[-1]                  # its mask saves the host copy and both transfers
    assert p.host_peak_bytes == none["host_peak"] - p.buffer_bytes[f"A:{last}"]
    # a ReLU whose output a CONV reads in full gets no mask: the map is kept (or offloaded)
    lives = g.liveness()
    for t in p.masks:
        assert not lives[t].backward_full


@settings(max_examples=80)
@given(layer_dags(), st.booleans(), st.integers(0, 2))
def test_random_dags_masks_never_raise_the_peak(g, offload, d):
    from pimrt.layrub import planner as P
    p = plan(g, offload=offload, prefetch_distance=d)
    check_plan(p, g)
    G = P._Graph(g, g.batch, False)
    assert set(p.masks) <= set(P._mask_candidates(G, set()))
    off = set(P._offload_candidates(G, True, 0, set())) if offload else set()
    none = P._schedule1(G, True, off, d, set(), set())
    assert p.peak_bytes <= none["peak"]

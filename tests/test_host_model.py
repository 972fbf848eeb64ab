"""Host side of the co-execution timing model: host parts, GEMM shapes, compute, traffic."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn

from pimrt.errors import ConfigError
from pimrt.graph import capture
from pimrt.host import (REQUEST_DTYPE, ConvGeom, HostWork, gemm_shape, load_host_part,
                        measure_compute_ms)
from pimrt.host import traffic

PHASES = ("forward", "backward_data", "backward_weight")
LB = 64


# ---------------------------------------------------------------------------------------------
# host parts
def test_shipped_parts_load():
    v = load_host_part("v100")
    assert v.name == "V100" and v.sms == 80 and v.l2_bytes == 6 << 20
    assert v.peak_flops == pytest.approx(15.7e12) and v.clock_ghz == pytest.approx(1.53)
    assert (v.tile_m, v.tile_n, v.tile_k) == (128, 128, 8)
    assert 0 < v.efficiency <= 1 and v.loaded_latency_ns == 150
    assert load_host_part("a100").sms == 108
    assert load_host_part(v.path) == v
    assert load_host_part(v) is v


@pytest.mark.parametrize("table,key,value,word", [
    ("l2", "size_bytes", 0, "> 0"),
    ("compute", "peak_tflops", -1.0, "> 0"),
    ("compute", "efficiency", 1.5, "(0, 1]"),
    ("gemm", "tile_m", 2.5, "integer"),
    ("memory", "loaded_latency_ns", "many", "number"),
    ("memory", "loaded_latency_ns", 0, "> 0"),
])
def test_bad_value_names_parameter(tmp_path, table, key, value, word):
    with pytest.raises(ConfigError) as e:
        load_host_part("v100", overrides={table: {key: value}})
    assert f"[{table}] {key}" in str(e.value) and word in str(e.value)


def test_requests_in_flight_follow_littles_law_on_the_memory_part():
    """The host's outstanding requests: the part's peak bandwidth x the host's loaded latency /
    the request size; four stacks keep four times as many in flight as one."""
    from pimrt.memctl import load_part
    v = load_host_part("v100")
    one, four = load_part("hbm2_pim"), load_part("v100_hbm2_pim")
    assert v.outstanding(one) == 600                   # 256 GB/s x 150 ns / 64 B
    assert v.outstanding(four) == 2106                 # 898.2 GB/s x 150 ns / 64 B
    slow = load_host_part("v100", overrides={"memory": {"loaded_latency_ns": 300}})
    assert slow.outstanding(four) == 4211              # ceil(4210.5)


def test_bad_file_names_file_and_parameter(tmp_path):
    text = load_host_part("v100").path.read_text()
    missing = tmp_path / "gpu.toml"
    missing.write_text(text.replace("sms = 80", ""))
    with pytest.raises(ConfigError, match=r"gpu\.toml: \[compute\] sms: missing"):
        load_host_part(missing)
    zero = tmp_path / "zero.toml"
    zero.write_text(text.replace("clock_ghz = 1.53", "clock_ghz = 0"))
    with pytest.raises(ConfigError, match=r"zero\.toml: \[compute\] clock_ghz: must be > 0"):
        load_host_part(zero)
    typo = tmp_path / "typo.toml"
    typo.write_text(text.replace("tile_k", "tile_kk"))
    with pytest.raises(ConfigError, match=r"typo\.toml: \[gemm\].*'tile_kk'.*tile_k"):
        load_host_part(typo)
    with pytest.raises(ConfigError, match="v100"):
        load_host_part("v10")


# ---------------------------------------------------------------------------------------------
# GEMM shapes
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False)
        self.c2 = nn.Conv2d(16, 32, 3, padding=2, dilation=2, bias=False)
        self.c3 = nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=32, bias=False)   # depthwise
        self.c4 = nn.Conv2d(32, 24, 1, groups=4, bias=False)                         # grouped
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        x = torch.relu(self.c3(x))
        x = self.c4(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1)
        return self.fc(x.flatten(1))


@pytest.fixture(scope="module")
def graph():
    return capture(Net(), (4, 3, 32, 32))


def _host_layers(g):
    return g.layers_of_kind("conv", "linear")


def test_gemm_forward_flops_match_graph(graph):
    for layer in _host_layers(graph):
        m, n, k = gemm_shape(layer, 4, "forward")
        assert 2 * m * n * k == layer.flops, layer.name
        for ph in PHASES:
            assert gemm_shape(layer, 4, ph).flops == layer.flops
        m, n, k = gemm_shape(layer, 4, "backward_weight")
        assert 2 * m * n * k == layer.flops
    # stride 1: the dgrad GEMM is as big as the forward one
    m, n, k = gemm_shape(graph["c2"], 4, "backward_data")
    assert 2 * m * n * k == graph["c2"].flops
    # a different batch scales M
    assert gemm_shape(graph["c1"], 8, "forward").m == 2 * gemm_shape(graph["c1"], 4, "forward").m


def test_gemm_conventions(graph):
    c1 = graph["c1"]
    assert tuple(gemm_shape(c1, 4, "forward", (4, 12))) == (4 * 16 * 16, 8, 3 * 49)
    assert tuple(gemm_shape(c1, 4, "backward_data", (4, 12))) == (4 * 32 * 32, 3, 8 * 49)
    assert tuple(gemm_shape(c1, 4, "backward_weight", (4, 12))) == (8, 147, 4 * 16 * 16)
    dw = graph["c3"]                                   # depthwise: each dY channel feeds one
    assert tuple(gemm_shape(dw, 4, "backward_data", (8, 16))) == (4 * 16 * 16, 8, 9)
    assert tuple(gemm_shape(graph["fc"], 4, "forward")) == (4, 10, 24)
    with pytest.raises(ConfigError, match="channel_range"):
        gemm_shape(c1, 4, "forward", (8, 4))
    with pytest.raises(ConfigError, match="phase"):
        gemm_shape(c1, 4, "sideways")
    with pytest.raises(ConfigError, match="conv and linear"):
        HostWork(graph["output"], 4, "forward")


@pytest.mark.parametrize("phase", PHASES)
def test_channel_groups_partition_flops(graph, phase):
    for layer in _host_layers(graph):
        cout = layer.shape[1]
        for groups in (2, 4, 8):
            if cout % groups:
                continue
            step = cout // groups
            total = sum(gemm_shape(layer, 4, phase, (i * step, (i + 1) * step)).flops
                        for i in range(groups))
            assert total == gemm_shape(layer, 4, phase).flops


# ---------------------------------------------------------------------------------------------
# compute model
def test_compute_cycles(graph):
    part = load_host_part("v100")
    w = HostWork(graph["c2"], 4, "forward", part=part)
    sec = w.model_seconds()
    assert sec >= w.flops / part.sustained_flops            # waves never beat full throughput
    assert w.compute_cycles(None, 1.0) == math.ceil(sec * 1e9 - 1e-9)
    assert w.compute_cycles(part, 0.5) in (2 * w.compute_cycles(part, 1.0),
                                           2 * w.compute_cycles(part, 1.0) - 1)
    assert w.host_cycles() == pytest.approx(sec * 1.53e9, abs=1)
    w.measured_ms = 2.0
    assert w.compute_cycles(None, 1.0) == 2_000_000
    with pytest.raises(ConfigError):
        w.compute_cycles(None, 0)
    # a big implicit-GEMM layer approaches peak x efficiency (a 1x1 conv: no Winograd)
    big = ConvGeom("big", "conv", 64, 256, 56, 56, 256, 56, 56, 1, 1, 1, 1, 0, 0)
    wb = HostWork(big, None, "forward")
    assert wb.launch()["algorithm"] == "implicit_gemm"
    assert wb.model_seconds() == pytest.approx(wb.flops / part.sustained_flops, rel=0.08)


def test_measure_on_cpu_returns_none(graph):
    assert measure_compute_ms(graph["c2"], 4, "forward", None, "cpu") is None
    if not torch.cuda.is_available():
        assert measure_compute_ms(graph["c2"], 4, "forward", None, "cuda") is None
        w = HostWork(graph["c2"], 4, "backward_weight")
        assert w.measure() is None and w.measured_ms is None


# ---------------------------------------------------------------------------------------------
# traffic
def _tensors(w: HostWork, es=4, gap=4096, offset=0):
    g = w.geom
    shp = {"input": g.input_shape, "grad_input": g.input_shape, "output": g.output_shape,
           "grad_output": g.output_shape, "weight": g.weight_shape,
           "grad_weight": g.weight_shape}
    base = offset
    out = {}
    for r in w.roles:
        out[r] = (base, shp[r], es)
        # the next tensor starts at least one line further (no shared lines), at `offset`
        end = base + math.prod(shp[r]) * es
        base = -(-end // LB) * LB + gap // LB * LB + offset % LB
    return out


def _lines_of(base, es, flat_idx):
    return np.unique((base + np.asarray(flat_idx, np.int64) * es) // LB)


def _all_lines(place, lo=None, hi=None, axis=1):
    base, shape, es = place
    idx = np.arange(math.prod(shape)).reshape(shape)
    if lo is not None:
        idx = idx[:, lo:hi] if axis == 1 else idx[lo:hi]
    return _lines_of(base, es, idx.ravel())


def _needed_input(g: ConvGeom, c0, c1):
    """Input elements (flat NCHW indices) some output uses, channels c0..c1, brute force."""
    x = torch.ones(1, g.groups, g.h, g.w, dtype=torch.float64, requires_grad=True)
    wt = torch.ones(g.groups, 1, g.kh, g.kw, dtype=torch.float64)
    y = nn.functional.conv2d(x, wt, None, (g.sh, g.sw), (g.ph, g.pw), (g.dh, g.dw), g.groups)
    y.sum().backward()
    plane = (x.grad[0, 0] != 0).numpy()
    mask = np.zeros(g.input_shape, bool)
    mask[:, c0:c1] = plane
    return np.flatnonzero(mask.ravel())


def _needed_output(g: ConvGeom, c0, c1):
    """Output elements that touch at least one real input pixel (dgrad reads them)."""
    x = torch.ones(1, 1, g.h, g.w, dtype=torch.float64)
    wt = torch.ones(1, 1, g.kh, g.kw, dtype=torch.float64)
    y = nn.functional.conv2d(x, wt, None, (g.sh, g.sw), (g.ph, g.pw), (g.dh, g.dw))
    mask = np.zeros(g.output_shape, bool)
    mask[:, c0:c1] = (y[0, 0] != 0).numpy()
    return np.flatnonzero(mask.ravel())


def _split(reqs, tensors):
    """requests -> role -> (read lines, write lines); asserts every request is inside one."""
    lines = (reqs["addr"] // LB).astype(np.int64)
    seen = np.zeros(len(reqs), bool)
    out = {}
    for role, (base, shape, es) in tensors.items():
        lo, hi = base // LB, (base + math.prod(shape) * es - 1) // LB
        m = (lines >= lo) & (lines <= hi)
        seen |= m
        out[role] = (lines[m & (reqs["op"] == 0)], lines[m & (reqs["op"] == 1)])
    assert seen.all(), "a request outside every placement"
    assert (reqs["addr"] % LB == 0).all()
    return out


def _expected(w: HostWork, tensors):
    """role -> (lines read, lines written) with an infinite L2."""
    g, (lo, hi) = w.geom, w.channel_range
    f0, f1 = g.fed_channels(lo, hi)
    T = tensors
    if w.phase == "forward":
        b, _, es = T["input"]
        out_lines = _all_lines(T["output"], lo, hi)
        return {"input": (_lines_of(b, es, _needed_input(g, f0, f1)), None),
                "weight": (_all_lines(T["weight"], lo, hi, axis=0), None),
                "output": (out_lines if w.accumulate else None, out_lines)}
    if w.phase == "backward_data":
        b, _, es = T["grad_output"]
        out_lines = _all_lines(T["grad_input"], f0, f1)
        return {"grad_output": (_lines_of(b, es, _needed_output(g, lo, hi)), None),
                "weight": (_all_lines(T["weight"], lo, hi, axis=0), None),
                "grad_input": (out_lines if w.accumulate else None, out_lines)}
    b, _, es = T["input"]
    out_lines = _all_lines(T["grad_weight"], lo, hi, axis=0)
    return {"grad_output": (_all_lines(T["grad_output"], lo, hi), None),
            "input": (_lines_of(b, es, _needed_input(g, f0, f1)), None),
            "grad_weight": (out_lines if w.accumulate else None, out_lines)}


SMALL = dict(gemm={"tile_m": 16, "tile_n": 4, "tile_k": 4}, compute={"sms": 2})


def _part(l2_bytes):
    return load_host_part("v100", overrides={**SMALL, "l2": {"size_bytes": l2_bytes}})


@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cin = groups * draw(st.integers(1, 4))
    cout = groups * draw(st.integers(1, 4))
    k = draw(st.integers(1, 4))
    s = draw(st.integers(1, 3))
    d = draw(st.integers(1, 2))
    p = draw(st.integers(0, 2))
    h = draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 14))
    wd = draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), 14))
    n = draw(st.integers(1, 3))
    ho = (h + 2 * p - d * (k - 1) - 1) // s + 1
    wo = (wd + 2 * p - d * (k - 1) - 1) // s + 1
    g = ConvGeom("c", "conv", n, cin, h, wd, cout, ho, wo, k, k, s, s, p, p, d, d, groups)
    lo = draw(st.integers(0, cout - 1))
    hi = draw(st.integers(lo + 1, cout))
    phase = draw(st.sampled_from(PHASES))
    acc = draw(st.sampled_from([None, True]))
    es = draw(st.sampled_from([4, 4, 2]))
    offset = draw(st.sampled_from([0, 64, 4]))
    return g, (lo, hi), phase, acc, es, offset


def _check_exact(w, tensors):
    reqs = w.requests(tensors)
    assert reqs.dtype == REQUEST_DTYPE
    got = _split(reqs, tensors)
    for role, (rd, wr) in _expected(w, tensors).items():
        grd, gwr = got[role]
        for exp, g_ in ((rd, grd), (wr, gwr)):
            if exp is None:
                assert len(g_) == 0, role
            else:
                assert len(np.unique(g_)) == len(g_), f"{role}: a line twice"
                np.testing.assert_array_equal(np.sort(g_), exp, err_msg=role)
    return reqs, got


@given(conv_cases())
@settings(max_examples=60, deadline=None)
def test_infinite_l2_reads_and_writes_each_line_once(case):
    g, rng, phase, acc, es, offset = case
    w = HostWork(g, None, phase, rng, part=_part(1 << 40), accumulate=acc)
    tensors = _tensors(w, es=es, gap=offset + 128, offset=offset)
    _check_exact(w, tensors)


@given(conv_cases())
@settings(max_examples=40, deadline=None)
def test_tiny_l2_traffic_grows_never_below_compulsory(case):
    g, rng, phase, acc, es, offset = case
    big = HostWork(g, None, phase, rng, part=_part(1 << 40), accumulate=acc)
    tensors = _tensors(big, es=es, gap=offset + 128, offset=offset)
    ref = _split(big.requests(tensors), tensors)
    tiny = HostWork(g, None, phase, rng, part=_part(64), accumulate=acc)
    got = _split(tiny.requests(tensors), tensors)
    assert tiny.plan(tensors).a_rows_kept <= big.plan(tensors).a_rows_kept
    for role in ref:
        for i in (0, 1):
            assert len(got[role][i]) >= len(ref[role][i])
            np.testing.assert_array_equal(np.unique(got[role][i]), np.unique(ref[role][i]))


def test_tiny_l2_refetches(graph):
    g = ConvGeom("c", "conv", 2, 8, 16, 16, 16, 16, 16, 3, 3, 1, 1, 1, 1)
    big = HostWork(g, None, "forward", part=_part(1 << 40))
    tiny = HostWork(g, None, "forward", part=_part(64))
    t = _tensors(big)
    assert len(tiny.requests(t)) > len(big.requests(t))
    assert tiny.plan(t).a_rows_kept == 0 and not tiny.plan(t).b_resident


@pytest.mark.parametrize("phase", PHASES)
def test_channel_groups_cover_the_output(phase):
    g = ConvGeom("c", "conv", 3, 12, 9, 7, 20, 9, 7, 3, 3, 1, 1, 1, 1, 1, 1, 2)
    part = load_host_part("v100", overrides=SMALL)
    whole = HostWork(g, None, phase, part=part)
    tensors = _tensors(whole, gap=100)
    out_role = whole.roles[2]
    every = _split(whole.requests(tensors), tensors)[out_role][1]
    union = []
    for lo in range(0, 20, 5):
        w = HostWork(g, None, phase, (lo, lo + 5), part=part)
        union.append(_split(w.requests(tensors), tensors)[out_role][1])
    union = np.unique(np.concatenate(union))
    np.testing.assert_array_equal(union, np.unique(every))
    base, shape, es = tensors[out_role]
    assert union[0] == base // LB and union[-1] == (base + math.prod(shape) * es - 1) // LB
    assert len(union) == (base + math.prod(shape) * es - 1) // LB - base // LB + 1


def test_backward_data_groups_accumulate():
    g = ConvGeom("c", "conv", 2, 8, 8, 8, 16, 8, 8, 3, 3, 1, 1, 1, 1)
    part = load_host_part("v100", overrides=SMALL)
    first = HostWork(g, None, "backward_data", (0, 8), part=part)
    later = HostWork(g, None, "backward_data", (8, 16), part=part)
    assert not first.accumulate and later.accumulate
    t = _tensors(first)
    r = later.requests(t)
    got = _split(r, t)["grad_input"]
    np.testing.assert_array_equal(np.sort(got[0]), np.sort(got[1]))
    # each line is read before it is written
    lines = r["addr"] // LB
    for line in got[1][:50]:
        pos = np.flatnonzero(lines == line)
        assert r["op"][pos[0]] == 0 and r["op"][pos[-1]] == 1


def test_linear_and_graph_layers(graph):
    for layer in _host_layers(graph):
        for ph in PHASES:
            w = HostWork(layer, 4, ph, part=_part(1 << 40))
            _check_exact(w, _tensors(w))
    fc = HostWork(graph["fc"], 4, "forward")
    t = _tensors(fc)
    t2 = {r: (b, s[:2], e) for r, (b, s, e) in t.items()}       # 2-D shapes are accepted
    np.testing.assert_array_equal(fc.requests(t), HostWork(graph["fc"], 4, "forward")
                                  .requests(t2))


def test_bad_tensors(graph):
    w = HostWork(graph["c2"], 4, "forward")
    t = _tensors(w)
    with pytest.raises(ConfigError, match="'weight'"):
        w.requests({k: v for k, v in t.items() if k != "weight"})
    bad = dict(t, output=(t["output"][0], (1, 2, 3, 4), 4))
    with pytest.raises(ConfigError, match=r"\['output'\] has shape"):
        w.requests(bad)


def test_chunks_split_stream_and_cycles(graph):
    w = HostWork(graph["c1"], 4, "forward", part=load_host_part("v100", overrides=SMALL))
    t = _tensors(w)
    reqs = w.requests(t)
    total = w.compute_cycles(None, 1.0)
    for n in (1, 3, 7, 10_000):
        ch = w.chunks(n, t, 1.0)
        assert len(ch) == n
        assert sum(c.compute_cycles for c in ch) == total
        np.testing.assert_array_equal(np.concatenate([c.requests for c in ch]), reqs)
        assert all(c.compute_cycles >= 0 for c in ch)


def test_merge_paths_agree(monkeypatch):
    g = ConvGeom("c", "conv", 2, 8, 12, 12, 16, 12, 12, 3, 3, 1, 1, 1, 1)
    part = _part(64)                                   # A and B in every CTA
    for phase in PHASES:
        w = HostWork(g, None, phase, (4, 16), part=part)
        t = _tensors(w)
        monkeypatch.setattr(traffic, "_SCATTER_MIN_UNITS", 10 ** 9)
        a = HostWork(g, None, phase, (4, 16), part=part).requests(t)
        monkeypatch.setattr(traffic, "_SCATTER_MIN_UNITS", 0)
        b = HostWork(g, None, phase, (4, 16), part=part).requests(t)
        np.testing.assert_array_equal(a, b)


def test_request_rate_printed():
    """Not a timing assertion: prints the generation rate of a ResNet-50 stage-1 conv."""
    g = ConvGeom("layer1_conv2", "conv", 8, 64, 56, 56, 64, 56, 56, 3, 3, 1, 1, 1, 1)
    n = 0
    t0 = time.process_time()
    for phase in PHASES:
        w = HostWork(g, None, phase)
        n += len(w.requests(_tensors(w)))
    dt = time.process_time() - t0
    print(f"\nhost request generation: {n} requests in {dt:.3f} s CPU = {n / dt / 1e6:.1f} M/s")

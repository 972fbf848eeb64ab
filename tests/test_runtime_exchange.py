"""GradSA and LaySA in the PIM runtime (pimrt.runtime.exchange): the tasks that replace the SGD
update, their traffic through memctl, and the DRAM footprint they leave."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.errors import ConfigError
from pimrt.graph import capture
from pimrt.runtime.exchange import ExchangeConfig, footprint
from pimrt.runtime.schedule import build_schedule
from pimrt.runtime.timing import time_step
from test_runtime import cnns, small_cnn


def _param_layers(g):
    return [l for l in g.nodes if l.param_bytes]


@settings(max_examples=15, deadline=None)
@given(model=cnns(), groups=st.sampled_from([1, 2, 4]), mode=st.sampled_from(["gradsa", "laysa"]))
def test_every_layer_is_compressed_exchanged_and_updated_once_in_order(model, groups, mode):
    g = capture(model, (2, 3, 8, 8))
    s = build_schedule(g, groups, exchange=mode)
    pos = {t.id: i for i, t in enumerate(s.tasks)}
    by = {}
    for t in s.tasks:
        assert all(pos[d] < pos[t.id] for d in t.deps)           # dependencies come first
        by.setdefault((t.layer, t.kind, t.phase), []).append(t)
    assert not any(t.kind == "update" and t.phase == "update" for t in s.tasks)   # no dense SGD
    kinds = {("fold", "update"), ("sample", "update"), ("select", "update"),
             ("exchange", "update"), ("update", "apply")}
    if mode == "laysa":
        kinds |= {("fetch", "update"), ("evict", "update")}
    for layer in _param_layers(g):
        one = {k: by.get((layer.name,) + k, []) for k in kinds}
        assert all(len(v) == 1 for v in one.values()), (layer.name, one)
        f, sm, c, x, a = (one[k][0] for k in [("fold", "update"), ("sample", "update"),
                                              ("select", "update"), ("exchange", "update"),
                                              ("update", "apply")])
        assert (f.side, sm.side, c.side, x.side, a.side) == ("pim", "host", "pim", "host", "pim")
        assert f.id in sm.deps and sm.id in c.deps and c.id in x.deps and x.id in a.deps
        writers = [t for t in s.tasks if t.layer == layer.name and t.phase in ("bwd_weight", "bwd")]
        assert writers and all(w.id in f.deps or pos[w.id] < pos[f.id] for w in writers)
        if mode == "laysa":
            fe, e = one[("fetch", "update")][0], one[("evict", "update")][0]
            assert fe.id in f.deps and c.id in e.deps and fe.side == e.side == "host"
    backward = [pos[t.id] for t in s.tasks if t.phase in ("bwd", "bwd_data", "bwd_weight")]
    applies = [pos[t.id] for t in s.tasks if t.phase == "apply"]
    if mode == "gradsa":       # the optimizer's step: after the whole backward pass
        assert min(applies) > max(backward)
    elif len(_param_layers(g)) > 3:   # the mirror update: during backward
        assert min(applies) < max(backward)


@pytest.mark.parametrize("policy", ["serial", "authority"])
def test_laysa_moves_the_residuals_through_memctl_and_needs_less_dram(policy):
    g = capture(small_cnn([8, 16], [False, True], "max"), (2, 3, 16, 16))
    runs = {m: time_step(g, policy, 2, exchange=m) for m in ("sgd", "gradsa", "laysa")}
    for r in runs.values():
        for t in r.schedule.tasks:
            assert all(r.start[t.id] >= r.end[d] for d in t.deps)
    # LaySA's only extra requests: every layer's momentum and residual written in and read out
    lines = sum(2 * 2 * max(1, -(-l.param_bytes // 64)) for l in _param_layers(g))
    assert runs["laysa"].stats["requests"] - runs["gradsa"].stats["requests"] == lines
    assert runs["gradsa"].stats["requests"] > runs["sgd"].stats["requests"]
    params = sum(l.param_bytes for l in _param_layers(g))
    fp = {m: footprint(r, r.exchange) for m, r in runs.items()}
    # GradSA alone: every dense gradient, u and v at once beside the parameters at the peak
    assert fp["gradsa"]["peak_bytes"] == 4 * params
    assert fp["gradsa"]["at_peak"] == {"grad": params, "update": 0, "momentum": params,
                                       "residual": params, "param": params}
    # SGD: parameters and momentum always, gradients while alive
    assert 2 * params < fp["sgd"]["peak_bytes"] <= 3 * params
    # LaySA: u and v of a few layers only, a dense gradient dies with its compress
    biggest = max(l.param_bytes for l in _param_layers(g))
    lay = fp["laysa"]
    assert lay["peak_bytes"] < fp["gradsa"]["peak_bytes"]
    assert lay["at_peak"]["residual"] == lay["at_peak"]["momentum"] <= 3 * biggest
    assert lay["at_peak"]["param"] == params


def test_exchange_config_errors_name_the_option():
    with pytest.raises(ConfigError, match="unknown update 'zip'.*sgd, gradsa, laysa"):
        ExchangeConfig(mode="zip")
    with pytest.raises(ConfigError, match="--density"):
        ExchangeConfig(mode="laysa", density=0.0)
    with pytest.raises(ConfigError, match="--world"):
        ExchangeConfig(mode="laysa", world=0)
    with pytest.raises(ConfigError, match="--link-gbps"):
        ExchangeConfig(mode="gradsa", link_gbps=-1)
    g = capture(small_cnn([8], [False], None), (2, 3, 8, 8))
    with pytest.raises(ConfigError, match="unknown update"):
        build_schedule(g, 2, exchange="adam")
    c = ExchangeConfig(mode="laysa", world=4, density=0.001, link_gbps=10)
    assert c.kept(10_000) == 10 and c.kept(5) == 1
    assert c.wire_seconds(10_000) == pytest.approx(3 * 10 * 2.4 * 8 / 10e9)


def test_pimrt_run_with_laysa_reports_its_memory(tmp_path, capsys):
    from pimrt.cli import main
    assert main(["run", "--model", "resnet_cifar_20", "--batch", "2", "--functional", "none",
                 "--update", "laysa", "--world", "2", "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "update laysa: peak DRAM" in out
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["update"] == {"mode": "laysa", "world": 2, "density": 0.001, "link_gbps": 10.0,
                           "sample_size": 4096}
    assert s["update_memory"]["peak_bytes"] < 4 * s["update_memory"]["param_bytes"]
    assert s["speedup_vs_serial"] > 1.0
    trace = json.loads((tmp_path / "trace.json").read_text())
    kinds = {e.get("cat") for e in trace["traceEvents"]}
    assert {"fold", "sample", "select", "exchange", "fetch", "evict"} <= kinds
    assert main(["run", "--model", "resnet_cifar_20", "--update", "laysa", "--density", "2",
                 "--functional", "none", "--out", str(tmp_path / "bad"), "--quiet"]) == 2
    assert "error: --density must be in (0, 1], got 2.0" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()                   # failed before any work


def test_functional_gradsa_update_on_the_pim_matches_pimrt_gradsa():
    from pimrt.runtime.functional import check_step
    r = check_step("resnet_cifar_20", 2, 32, "golden", groups=2, update="laysa")
    u = r["update_check"]
    assert u["update"] == "laysa" and u["kept_elements"] > 0
    # fold, select and the update on the unit, threshold and encoding on the host, against
    # GradSA's compress + decode + p.add_ in torch on the same gradients: within the ulp that
    # torch's fused add-with-alpha differs by
    assert u["max_param_rel_diff"] < 1e-6 and u["max_residual_rel_diff"] < 1e-6
    assert r["loss_abs_diff"] < 1e-5 and r["groups_equal"]
    t = check_step("resnet_cifar_20", 2, 32, "torch", groups=2, update="gradsa")
    assert t["update_check"]["params_bit_equal"]              # torch on both sides
    assert t["update_check"]["max_residual_rel_diff"] == 0.0


def test_layrub_traffic_is_the_same_under_every_update():
    g = capture(small_cnn([8, 16], [False, True], "max"), (2, 3, 16, 16))
    extra = {}
    for mode in ("sgd", "laysa"):
        plain = time_step(g, "authority", 2, exchange=mode)
        managed = time_step(g, "authority", 2, exchange=mode, layrub=True)
        extra[mode] = managed.stats["requests"] - plain.stats["requests"]
    assert extra["sgd"] > 0 and extra["laysa"] == extra["sgd"]


def test_a_host_fallback_layer_with_parameters_does_not_break_the_footprint():
    import warnings
    import torch.nn as nn
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.GroupNorm(2, 8), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = capture(m, (2, 3, 8, 8), allow_unsupported=True)
    assert any(l.kind == "host_fallback" and l.param_bytes for l in g.nodes)
    params = sum(l.param_bytes for l in g.nodes)
    for mode in ("sgd", "gradsa", "laysa"):
        r = time_step(g, "authority", 2, exchange=mode)
        f = footprint(r, r.exchange)
        assert f["param_bytes"] == params and f["peak_bytes"] >= params

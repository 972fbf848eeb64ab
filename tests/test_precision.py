"""Mixed precision (pimrt.graph.precision): every tensor's dtype as torch's autocast gives it,
the bytes each stream moves, the schedule's unscale and update order, and the refusals of a
precision a part cannot run."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pimrt.errors import ConfigError
from pimrt.graph import capture
from pimrt.graph.precision import autocast, weight_copy
from pimrt.runtime import session
from pimrt.runtime.schedule import build_schedule

FIVE = ("resnet18", "resnet50", "vgg16_bn", "densenet121", "mobilenetv2")
DTYPES = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}


def _autocast_dtypes(name: str, precision: str) -> dict[str, str]:
    """Each fx node's output dtype when torch runs the model under autocast on the CPU."""
    from pimrt import zoo
    torch.manual_seed(0)
    model = zoo.build(name, input_size=32).train()
    gm = torch.fx.symbolic_trace(model)
    seen = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if isinstance(out, torch.Tensor):
                seen[n.name] = str(out.dtype).removeprefix("torch.")
            return out
    with torch.autocast("cpu", dtype=DTYPES[precision]):
        Recorder(gm).run(torch.randn(2, 3, 32, 32))
    return seen


@pytest.mark.parametrize("precision", ["amp-fp16", "amp-bf16"])
@pytest.mark.parametrize("name", FIVE)
def test_every_tensor_has_autocasts_dtype(name, precision):
    graph = session.captured(name, 2, 32, precision=precision)
    want = _autocast_dtypes(name, precision)
    common = [n for n in graph.nodes if n.name in want and n.kind != "output"]
    assert len(common) >= 0.9 * len(graph.nodes) - 2      # the graph's layers are fx nodes
    for layer in common:
        assert layer.dtype == want[layer.name], (layer.name, layer.kind)
        assert layer.itemsize == (4 if layer.dtype == "float32" else 2)
        assert layer.bytes == int(np.prod(layer.shape)) * layer.itemsize


def test_fp32_graph_is_the_captured_one():
    g = session.captured("resnet18", 2, 32)
    assert g.precision == "fp32" and all(n.itemsize == 4 for n in g.nodes)


def test_activation_bytes_halved_parameters_kept():
    f32 = session.captured("resnet18", 4, 32)
    f16 = session.captured("resnet18", 4, 32, precision="amp-fp16")
    for a, b in zip(f32.nodes, f16.nodes):
        assert b.param_bytes == a.param_bytes          # master weights stay fp32
        if a.kind == "input":
            assert b.bytes == a.bytes                  # the images stay fp32
        else:
            assert b.bytes * 2 == a.bytes, a.name
    assert f16.nodes[0].kind == "input"


def _records(graph, policy="serial", side="host"):
    """Requests of each task of the step on `side`, by (layer, kind, phase, side)."""
    from pimrt.memctl import load_part
    from pimrt.runtime.placement import place_step
    from pimrt.runtime.timing import gpu_only_schedule
    from pimrt.runtime.work import context, task_records
    from pimrt.trace.records import READ, WRITE
    part = load_part("v100_hbm2_pim")
    sched = gpu_only_schedule(graph) if policy == "gpu_only" else \
        build_schedule(graph, 1, pipelined=False)
    ctx = context(graph, part, place_step(graph, part), "v100", "serial")
    out = {}
    for t in sched.tasks:
        if t.side != side:
            continue
        r = task_records(t, ctx)
        out[(t.layer, t.kind, t.phase, t.side)] = int(np.isin(r["op"], (READ, WRITE)).sum())
    return out


def test_gpu_only_streams_halved():
    """GPU-only: every streaming kernel of an activation (batch norm, ReLU, add, pooling and
    their backward) moves half the requests in 16 bits."""
    f32 = _records(session.captured("resnet18", 4, 32), "gpu_only")
    f16 = _records(session.captured("resnet18", 4, 32, precision="amp-fp16"), "gpu_only")
    checked = 0
    for key, n in f32.items():
        layer, kind, phase, side = key
        if kind in ("batchnorm", "relu", "add", "maxpool") and n > 64:
            assert abs(f16[key] * 2 - n) <= 8, key
            checked += 1
    assert checked > 20


def test_conv_streams_halved():
    """A host CONV moves 16-bit activations and a 16-bit weight copy: half the requests of
    fp32 (within a request per tensor for rounding) where it reads its whole input; a strided
    1x1 CONV reads every other image row (forward, weight gradient), which in 16 bits shares a 64-byte line with the row
    it skips: its input costs as many requests as in fp32 (its output and weights half). The
    first CONV reads the fp32 images."""
    g32 = session.captured("resnet18", 4, 32)
    f32 = _records(g32)
    f16 = _records(session.captured("resnet18", 4, 32, precision="amp-fp16"))
    convs = [k for k in f32 if k[1] == "conv" and k[0] != "conv1"]
    assert len(convs) > 40
    for key in convs:
        layer = g32[key[0]]
        if layer.attrs["stride"] in (1, (1, 1)) or key[2] == "bwd_data":
            assert f16[key] <= 0.5 * f32[key] + 64, key
        else:
            assert f16[key] < 0.75 * f32[key], key


def test_pim_streams_halved_and_the_update_reads_fp32():
    """The PIM's 16-bit kernels move half the DRAM columns of the fp32 ones for ReLU, add
    and their backward; the update moves the fp32 master weights, gradient and momentum and
    writes the 16-bit copy besides (5 fp32 streams + one half: 5.5/5 of fp32's, apart from
    padding)."""
    f32 = _records(session.captured("resnet18", 4, 32), side="pim")
    f16 = _records(session.captured("resnet18", 4, 32, precision="amp-fp16"), side="pim")
    halved = [k for k in f32 if k[1] in ("relu", "add") and f32[k] >= 512]   # (small ones:
    # padded to whole blocks of columns in every bank)
    assert len(halved) > 10
    for key in halved:
        assert abs(2 * f16[key] - f32[key]) <= 0.02 * f32[key] + 64, key
    conv_updates = [k for k in f32 if k[1] == "update" and k[0].startswith("layer")
                    and "conv" in k[0] and f32[k] >= 512]
    assert conv_updates
    for key in conv_updates:
        # (sgd_amp's blocks are 4 columns, sgd's 6: a bank's share pads differently)
        assert 1.05 * f32[key] <= f16[key] <= 1.25 * f32[key], key


def test_amp_fp16_updates_after_every_check():
    g = session.captured("resnet18", 4, 32, precision="amp-fp16")
    s = build_schedule(g, 1)
    unscale = [t for t in s.tasks if t.kind == "unscale"]
    updates = [t for t in s.tasks if t.kind == "update"]
    with_params = [n.name for n in g.nodes if n.param_bytes]
    assert sorted(t.layer for t in unscale) == sorted(with_params)
    assert sorted(t.layer for t in updates) == sorted(with_params)
    ids = {t.id for t in unscale}
    for u in updates:
        assert ids <= set(u.deps), u.label      # the scaler's check of every gradient first
    for t in unscale:                           # each after its own gradient's producer
        assert t.deps and all(s.tasks[d].layer == t.layer for d in t.deps)


def test_amp_bf16_casts_conv_gradients_without_a_barrier():
    g = session.captured("resnet18", 4, 32, precision="amp-bf16")
    s = build_schedule(g, 1)
    unscale = {t.layer for t in s.tasks if t.kind == "unscale"}
    assert unscale == {n.name for n in g.nodes if weight_copy(g, n)}
    first_update = min(t.id for t in s.tasks if t.kind == "update")
    last_bwd = max(t.id for t in s.tasks if t.phase in ("bwd", "bwd_data", "bwd_weight"))
    assert first_update < last_bwd        # updates run during backward, as in fp32


def test_amp_fp16_gradsa_folds_after_every_check():
    """A fold changes the momentum and the residual: with loss scaling it waits for every
    unscale, as SGD's updates do (a step the scaler skips leaves them as they were); without
    (amp-bf16) each fold waits only for its own layer's widening."""
    for precision, barrier in (("amp-fp16", True), ("amp-bf16", False)):
        g = session.captured("resnet18", 4, 32, precision=precision)
        s = build_schedule(g, 1, exchange="gradsa")
        unscale = {t.id for t in s.tasks if t.kind == "unscale"}
        folds = [t for t in s.tasks if t.kind == "fold"]
        assert sorted(t.layer for t in folds) == sorted(n.name for n in g.nodes if n.param_bytes)
        assert all(unscale <= set(t.deps) for t in folds) is barrier
        if not barrier:
            last_bwd = max(t.id for t in s.tasks if t.phase in ("bwd", "bwd_data", "bwd_weight"))
            assert min(t.id for t in folds) < last_bwd


def test_amp_apply_writes_the_weight_copy():
    """GradSA's and LaySA's apply of a CONV's update under AMP writes the 16-bit copy of its
    weights the next forward reads (sgd_apply_amp_<dtype> on the PIM; on the GPU torch's
    cast after the update); batch norm's parameters have none."""
    from types import SimpleNamespace
    from pimrt.runtime.work import gpu_kernels, pim_kernels
    for precision, dt in (("amp-fp16", "f16"), ("amp-bf16", "bf16")):
        g = session.captured("resnet18", 4, 32, precision=precision)
        ctx = SimpleNamespace(graph=g)
        for exchange in ("gradsa", "laysa") if precision == "amp-bf16" else ("gradsa",):
            applies = [t for t in build_schedule(g, 1, exchange=exchange).tasks
                       if (t.kind, t.phase) == ("update", "apply")]
            conv = [t for t in applies if weight_copy(g, g[t.layer])]
            other = [t for t in applies if not weight_copy(g, g[t.layer])]
            assert len(conv) == 21 and other
            for t in conv:
                assert pim_kernels(t, ctx) == [(f"sgd_apply_amp_{dt}", {
                    "w": "param", "d": "update", "w16": "param16"})]
                assert gpu_kernels(t, ctx)[-1] == [("R", "param", 1), ("W", "param16", 1)]
            for t in other:
                assert pim_kernels(t, ctx) == [("sgd_apply", {"w": "param", "d": "update"})]
                assert ("W", "param16", 1) not in sum(gpu_kernels(t, ctx), [])


def test_laysa_refused_with_loss_scaling():
    g = session.captured("resnet18", 4, 32, precision="amp-fp16")
    with pytest.raises(ConfigError, match="laysa.*amp-fp16"):
        build_schedule(g, 1, exchange="laysa")


def test_host_part_without_the_precision_refused():
    with pytest.raises(ConfigError, match=r"host part V100 .*\[compute\] precisions"):
        session.check_precision("amp-fp16", "v100_hbm2_pim", "v100")
    with pytest.raises(ConfigError, match=r"V100-TC .*amp-bf16"):
        session.check_precision("amp-bf16", "v100_hbm2_pim", "v100_tc")
    session.check_precision("amp-fp16", "v100_hbm2_pim", "v100_tc")
    session.check_precision("amp-bf16", "v100_hbm2_pim", "a100_tc")


def test_fp32_only_lanes_refused():
    from pimrt.memctl import load_part
    part = load_part("v100_hbm2_pim", {"pim.dtypes": ["fp32"]})
    with pytest.raises(ConfigError, match=r"memory part V100_HBM2_x4_PIM .*amp-fp16.*"
                                          r"\[pim\] dtypes = \['fp32'\], without fp16"):
        session.check_precision("amp-fp16", part, "v100_tc")
    session.check_precision("fp32", part, "v100")


def test_run_refuses_before_any_work(tmp_path, capsys):
    from pimrt.cli import main
    rc = main(["run", "--precision", "amp-fp16", "--host-part", "v100", "--functional",
               "none", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "host part V100" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value, message", [
    (["fp16"], "compute fp32 whatever else"), (["fp32", "fp8"], "distinct lane dtypes"),
    (["fp32", "fp32"], "distinct lane dtypes"), ("fp16", "distinct lane dtypes"),
    ([], "distinct lane dtypes")])
def test_part_dtypes_checked(value, message):
    from pimrt.memctl import load_part
    with pytest.raises(ConfigError, match=rf"\[pim\] dtypes.*{message}"):
        load_part("v100_hbm2_pim", {"pim.dtypes": value})
    assert load_part("hbm2")  # a part without PIM units has no dtypes to give


def test_default_host_parts():
    assert session.host_part_for("fp32", None) == "v100"
    assert session.host_part_for("amp-fp16", None) == "v100_tc"
    assert session.host_part_for("amp-bf16", None) == "a100_tc"
    assert session.host_part_for("amp-fp16", "x.toml") == "x.toml"
    with pytest.raises(ConfigError, match="unknown precision 'fp8'"):
        session.host_part_for("fp8", None)


def test_a_sweep_axis_with_each_precisions_host_part(tmp_path):
    from pimrt.sweep.spec import parse
    spec = parse({"fixed": {"model": "resnet18"},
                  "grid": {"precision": ["fp32", "amp-fp16", "amp-bf16"]}},
                 tmp_path / "s.toml")
    got = [(p.options["precision"], p.options["host_part"]) for p in spec.points]
    assert got == [("fp32", "v100"), ("amp-fp16", "v100_tc"), ("amp-bf16", "a100_tc")]
    assert len({p.group for p in spec.points}) == 3       # three systems, three baselines
    with pytest.raises(ConfigError, match="precision"):
        parse({"grid": {"precision": ["fp8"]}}, tmp_path / "s.toml")

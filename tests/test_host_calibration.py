"""The calibrated host model's structure (issue 36): the algorithm chosen for canonical shapes,
parameters read from the part, a fitted parameter moving the time the way it must, the shipped
measurements and their split, bad calibration input. Accuracy figures are a benchmark
(`pimrt bench host`), not a test."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pimrt.cli import main
from pimrt.errors import ConfigError
from pimrt.host import HostWork, load_host_part
from pimrt.host import calibration as cal
from pimrt.host.algorithm import kernel_time
from pimrt.host.gemm import ConvGeom


def conv(n, c, hw, k, r, s=1, p=None, groups=1):
    p = r // 2 if p is None else p
    o = (hw + 2 * p - r) // s + 1
    return ConvGeom("c", "conv", n, c, hw, hw, k, o, o, r, r, s, s, p, p, groups=groups)


V100 = load_host_part("v100")


def algo(g, phase="forward", part=V100):
    return kernel_time(g, phase, (0, g.cout), part).algorithm


def test_algorithm_for_canonical_shapes():
    # ResNet's 3x3 stride-1 convs at batch 32: Winograd, as cuDNN picks on a V100
    for phase in ("forward", "backward_data", "backward_weight"):
        assert algo(conv(32, 64, 56, 64, 3), phase) == "winograd"
    assert algo(conv(32, 256, 14, 256, 3)) == "winograd"
    # 1x1, strided and the 7x7 stem: implicit GEMM
    assert algo(conv(32, 64, 56, 256, 1)) == "implicit_gemm"
    assert algo(conv(32, 128, 56, 128, 3, s=2)) == "implicit_gemm"
    assert algo(conv(32, 3, 224, 64, 7, s=2, p=3)) == "implicit_gemm"
    # depthwise: a direct kernel; linear layers: GEMM
    assert algo(conv(32, 96, 56, 96, 3, groups=96)) == "direct"
    fc = ConvGeom("fc", "linear", 32, 2048, 1, 1, 1000, 1, 1)
    assert algo(fc) == "implicit_gemm"
    # a part without a [winograd] table never takes it
    assert algo(conv(32, 64, 56, 64, 3), part=load_host_part("v100_tc")) == "implicit_gemm"
    assert load_host_part("v100_tc").winograd_tile == 0


def test_winograd_launch_and_tiles():
    kt = kernel_time(conv(32, 64, 56, 64, 3), "forward", (0, 64), V100)
    assert kt.launch["winograd"] == "F(4x4,3x3)"
    assert kt.launch["launches"] >= 4                  # three transforms and the GEMMs
    assert kt.overhead_s == pytest.approx(kt.launch["launches"] * V100.kernel_overhead_s)
    assert kt.transform_s > 0 and kt.main_s > 0
    # the chosen tile is one of the part's
    g = conv(8, 512, 7, 512, 1)
    kt = kernel_time(g, "forward", (0, 512), V100)
    assert tuple(kt.launch["tile"]) in {t[:2] for t in V100.tiles}


def override(**kv):
    over = {}
    for key, v in kv.items():
        table, k = key.split("__")
        over.setdefault(table, {})[k] = v
    return load_host_part("v100", over)


def seconds(g, phase, part):
    return HostWork(g, None, phase, part=part).model_seconds()


def test_fitted_parameters_move_the_time_the_expected_way():
    g1 = conv(32, 256, 14, 1024, 1)          # implicit GEMM
    g3 = conv(32, 64, 56, 64, 3)             # Winograd
    base = seconds(g1, "forward", V100)
    # the fixed cost: exactly launches x the change
    p = override(compute__kernel_overhead_us=V100.kernel_overhead_us + 10)
    launches = HostWork(g1, None, "forward").launch()["launches"]
    assert seconds(g1, "forward", p) - base == pytest.approx(launches * 10e-6)
    # a higher efficiency: faster, in its phase only
    p = override(compute__efficiency=0.5)
    assert seconds(g1, "forward", p) > base
    assert seconds(g1, "backward_data", p) == seconds(g1, "backward_data", V100)
    p = override(compute__wgrad_efficiency=0.3)
    assert seconds(g1, "backward_weight", p) > seconds(g1, "backward_weight", V100)
    # the pipeline fill: more steps, slower
    p = override(compute__k_fill_steps=20.0)
    assert seconds(g1, "forward", p) > base
    # Winograd's efficiency moves the 3x3 conv, not the 1x1
    p = override(winograd__efficiency=0.3)
    assert seconds(g3, "forward", p) > seconds(g3, "forward", V100)
    assert seconds(g1, "forward", p) == base
    # the zero taps of a 1x1 stride-2 backward_data, and only there
    g12 = conv(32, 512, 28, 1024, 1, s=2, p=0)
    p0, p1 = override(compute__strided_dgrad_zero_cost=0.0), \
        override(compute__strided_dgrad_zero_cost=1.0)
    assert seconds(g12, "backward_data", p1) > seconds(g12, "backward_data", p0)
    g33 = conv(32, 128, 56, 128, 3, s=2)
    assert seconds(g33, "backward_data", p1) == seconds(g33, "backward_data", p0)
    # smaller tiles lose more to a higher tile_intensity: a small GEMM slows down
    small = ConvGeom("fc", "linear", 16, 1760, 1, 1, 1760, 1, 1)
    p = override(gemm__tile_intensity=100.0)
    assert seconds(small, "forward", p) > seconds(small, "forward", V100)


@pytest.mark.parametrize("table,key", [("compute", "kernel_overhead_us"),
                                       ("compute", "wgrad_efficiency"),
                                       ("compute", "k_fill_steps"),
                                       ("gemm", "tile_intensity"),
                                       ("memory", "stream_fraction")])
def test_missing_calibration_parameter_is_named(tmp_path, table, key):
    text = (load_host_part("v100").path).read_text()
    lines = [line for line in text.splitlines() if not line.startswith(f"{key} =")]
    f = tmp_path / "gpu.toml"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=rf"gpu.toml: \[{table}\] {key}: missing"):
        load_host_part(f)


@pytest.mark.parametrize("over,msg", [
    ({"compute": {"efficiency": 1.5}}, r"\[compute\] efficiency: must be in \(0, 1\]"),
    ({"compute": {"kernel_overhead_us": -1}}, r"kernel_overhead_us: must be >= 0"),
    ({"memory": {"stream_fraction": 0}}, r"stream_fraction: must be in \(0, 1\]"),
    ({"gemm": {"tiles": [[128, 0, 1]]}}, r"\[gemm\] tiles: must be a non-empty list"),
    ({"winograd": {"filters": []}}, r"\[winograd\] filters: must be a non-empty list"),
])
def test_impossible_calibration_parameter_is_named(over, msg):
    with pytest.raises(ConfigError, match=msg):
        load_host_part("v100", over)


def test_shipped_measurements_and_split():
    rows = cal.load_rows("fp32")
    convs = [r for r in rows if r.kind != "gemm"]
    assert len(convs) == 272 and len(rows) == 272 + 160     # 94 shapes x 3 less 10 first layers
    assert {r.phase for r in convs} == {"forward", "backward_data", "backward_weight"}
    first = next(r for r in rows if r.id == "conv0/forward")
    assert (first.geom.w, first.geom.h, first.geom.cin, first.geom.n, first.geom.cout) == \
        (700, 161, 1, 4, 32)
    assert first.measured_ms == 0.078 and first.algorithm == "IMPLICIT_GEMM"
    assert not any(r.algorithm.startswith("LICIT") for r in rows)
    fit, held = cal.split(rows)
    assert len(fit) + len(held) == len(rows) and fit and held
    assert not {r.group for r in fit} & {r.group for r in held}
    fp16 = cal.load_rows("fp16mixed")
    assert len(fp16) == len(rows) and all(r.dtype_bytes == 2 for r in fp16)
    assert {r.algorithm for r in fp16 if r.kind != "gemm"} == {"IMPLICIT_PRECOMP_GEMM"}
    assert cal.data_for(V100) == "fp32"
    assert cal.data_for(load_host_part("v100_tc")) == "fp16mixed"
    with pytest.raises(ConfigError, match="has no calibration data"):
        cal.data_for(load_host_part("a100"))


def test_error_statistics():
    assert cal.error_factor([1.0, 1.0]) == 1.0
    assert cal.error_factor([2.0, 0.5]) == pytest.approx(2.0)
    s = cal.stats([1.0, 1.2, 0.7, 2.0])
    assert s["within_25pct"] == 0.5 and s["min_ratio"] == 0.7 and s["max_ratio"] == 2.0
    assert s["error_factor"] == pytest.approx(math.exp((0 + math.log(1.2) + math.log(1 / 0.7)
                                                        + math.log(2)) / 4))


def test_report_on_a_few_rows(tmp_path):
    rows = [r for r in cal.load_rows("fp32") if r.app == "Resnet"][:12]
    fit, held = cal.split(rows)
    model = {r.id: r.measured_ms * (1.1 if i % 2 else 0.8) for i, r in enumerate(rows)}
    res = cal.report(rows, fit, held, model, worst=2)
    assert res["all"]["kernels"] == 12
    assert res["all"]["error_factor"] == pytest.approx(math.exp((6 * math.log(1.1)
                                                                  + 6 * math.log(1.25)) / 12))
    assert res["slowest"][0]["ratio"] == pytest.approx(1.1)
    assert res["fastest"][0]["ratio"] == pytest.approx(0.8)
    assert set(res["by_phase"]) <= {"forward", "backward_data", "backward_weight"}
    text = cal.format_report(dict(res, memory="memctl"))
    assert "held out" in text and "by class" in text
    cal.plot(rows, fit, model, tmp_path / "p.png", "t")
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_memctl_time_of_a_kernel_alone_includes_its_fixed_cost():
    row = next(r for r in cal.load_rows("fp32") if r.id == "conv66/forward")
    t = cal.memctl_ms(row, V100, "v100_hbm2_pim")
    kt = kernel_time(row.geom, row.phase, (0, row.geom.cout), V100)
    assert t >= kt.seconds * 1e3 * 0.999               # never faster than its compute
    p = load_host_part("v100", {"compute": {"kernel_overhead_us": 50.0}})
    t2 = cal.memctl_ms(row, p, "v100_hbm2_pim")
    assert t2 - t == pytest.approx((50.0 - V100.kernel_overhead_us) * 1e-3
                                   * kt.launch["launches"], rel=0.02)


def test_bench_host_on_a_part_without_data_says_so(tmp_path, capsys):
    code = main(["bench", "host", "--host-part", "a100", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "has no calibration data" in lines[0], err


def test_streaming_kernel_has_fixed_cost_and_bandwidth_floor():
    from pimrt.memctl.config import load_part
    from pimrt.runtime.work import Context, streaming_kernel
    from pimrt.trace.records import COMPUTE, DELAY
    part = load_part("v100_hbm2_pim")
    ctx = Context.__new__(Context)
    ctx.part, ctx.host_part = part, V100
    n = 10_000
    recs = streaming_kernel(np.arange(n, dtype=np.uint64) * 64, np.zeros(n, np.uint8), ctx)
    assert recs[0]["op"] == DELAY and (recs["op"] == DELAY).sum() == 1
    assert recs[0]["value"] == math.ceil(V100.kernel_overhead_us * 1e3 / part.timing["tCK"])
    floor = n * 64 / (V100.stream_fraction * part.peak_bandwidth_gbs) / part.timing["tCK"]
    assert int(recs["value"][recs["op"] == COMPUTE].sum()) == math.ceil(floor - 1e-9)
    assert recs[1]["op"] == COMPUTE          # each batch's requests issue while it paces


def test_executed_flops_follow_the_algorithm():
    # the host's energy counts what the algorithm executes: Winograd F(4x4, 3x3) does
    # 36 / (16 x 9) = 1/4 of the direct multiplications where the tiles fit the map exactly
    g3 = conv(32, 64, 56, 64, 3)
    w = HostWork(g3, None, "forward")
    assert w.launch()["algorithm"] == "winograd"
    assert w.executed_flops == pytest.approx(w.flops / 4)
    g1 = conv(32, 64, 56, 256, 1)
    assert HostWork(g1, None, "forward").executed_flops == pytest.approx(
        HostWork(g1, None, "forward").flops)
    # the zero taps a 1x1 stride-2 backward_data pays for
    g12 = conv(32, 512, 28, 1024, 1, s=2, p=0)
    w = HostWork(g12, None, "backward_data")
    assert w.executed_flops == pytest.approx(
        w.flops * (1 + 3 * V100.strided_dgrad_zero_cost))

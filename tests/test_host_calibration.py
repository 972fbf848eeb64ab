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


# ---- a host part against kernels measured with pimrt host-times (--measured) ----------------

def _measured_file(path, factor: float, precision: str = "fp32", **head):
    """A host-times file of resnet_cifar_20 (batch 2) whose every kernel took `factor` x the
    v100 model's time alone (the fit's surrogate): a GPU `factor` times slower."""
    import json
    from pimrt.runtime import host_times as ht
    from pimrt.runtime.session import DEFAULT_PART, captured, slices_for
    from pimrt.runtime.timing import DEFAULT_GROUPS, group_rule, slice_rule, step_part
    g = captured("resnet_cifar_20", 2, 32, precision=precision)
    part = step_part(DEFAULT_PART, "v100")
    ks = ht.step_kernels(g, DEFAULT_GROUPS, group_rule(part, "v100", DEFAULT_GROUPS),
                         slices=slices_for(2),
                         slice_rule=slice_rule(part, slices_for(2), groups=DEFAULT_GROUPS))
    meta = {"model": "resnet_cifar_20", "batch": 2, "input_shape": [2, 3, 32, 32],
            "precision": precision, "device": "Tesla V100-SXM2-32GB", **head}
    ht.save(path, {k: 1.0 for k in ks}, meta)
    rows, _ = cal.load_host_times(path)
    v100 = load_host_part("v100")
    model = cal.surrogate_ms(rows, v100, cal.dram_bytes(rows, v100))
    ht.save(path, {k: factor * model[r.id] for k, r in zip(ks, rows)}, meta)
    return json.loads(path.read_text())


def test_a_host_part_against_kernels_measured_with_host_times(tmp_path, capsys):
    """`pimrt bench host --measured FILE`: each kernel of the file as it ran (its images,
    channels, phase) against the model; a GPU twice as slow as the model gives an error factor
    of 2, and --fit brings it back near 1 by the calibration keys (efficiencies halved, the
    fixed cost doubled), fitted on half the layers and checked on the other half."""
    import json
    doc = _measured_file(tmp_path / "v100.json", 2.0)
    rows, info = cal.load_host_times(tmp_path / "v100.json")
    assert len(rows) == len(doc["kernels"]) == 65 and {r.dtype_bytes for r in rows} == {4}
    assert info["device"] == "Tesla V100-SXM2-32GB" and info["precision"] == "fp32"
    fit, held = cal.split(rows)
    assert {r.group for r in fit}.isdisjoint({r.group for r in held})    # by layer
    out = tmp_path / "bh"
    assert main(["bench", "host", "--measured", str(tmp_path / "v100.json"), "--fast",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "65 measured kernels (resnet_cifar_20 batch 2 32x32, fp32, on Tesla V100-SXM2-32GB)" \
        in text and "note:" not in text
    res = json.loads((out / "v100-v100.json").read_text())
    assert res["all"]["error_factor"] == pytest.approx(2.0, rel=1e-6)
    assert main(["bench", "host", "--measured", str(tmp_path / "v100.json"), "--fast", "--fit",
                 "--out", str(out)]) == 0
    res = json.loads((out / "v100-v100.json").read_text())
    assert res["held_out"]["error_factor"] < 1.05 and res["fitted"]["error_factor"] < 1.05
    p = res["fitted_parameters"]
    assert p["compute.efficiency"] == pytest.approx(load_host_part("v100").efficiency / 2,
                                                    rel=0.1)


def test_measured_kernels_of_another_gpu_or_precision(tmp_path, capsys):
    _measured_file(tmp_path / "h200.json", 0.5, "amp-fp16", device="NVIDIA H200")
    rows, info = cal.load_host_times(tmp_path / "h200.json")
    assert {r.dtype_bytes for r in rows} == {2} and info["precision"] == "amp-fp16"
    assert main(["bench", "host", "--host-part", "v100_tc", "--measured",
                 str(tmp_path / "h200.json"), "--fast", "--out", str(tmp_path / "bh")]) == 0
    assert "note: " + str(tmp_path / "h200.json") + " was measured on NVIDIA H200, and host " \
           "part V100-TC models another GPU (V100): the figures below compare two GPUs, " \
           "they do not calibrate one" in capsys.readouterr().out


@pytest.mark.parametrize("edit, message", [
    (lambda d: {k: v for k, v in d.items() if k != "model"}, r'no "model": the kernels'),
    (lambda d: {**d, "input_shape": [2, 3, 32]}, r"input_shape \[2, 3, 32\], expected"),
    (lambda d: {**d, "precision": "fp8"}, "precision 'fp8', expected one of"),
    (lambda d: {**d, "kernels": d["kernels"][:1] + [{**d["kernels"][1], "ms": -1}]},
     r"kernels\[1\]: ms -1"),
])
def test_a_bad_measured_file_is_one_line(tmp_path, capsys, edit, message):
    import json
    import re
    doc = _measured_file(tmp_path / "m.json", 1.0)
    (tmp_path / "m.json").write_text(json.dumps(edit(doc)))
    assert main(["bench", "host", "--measured", str(tmp_path / "m.json"), "--fast",
                 "--out", str(tmp_path / "bh")]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and str(tmp_path / "m.json") in err, err
    assert main(["bench", "host", "--measured", str(tmp_path / "none.json"),
                 "--out", str(tmp_path / "bh")]) == 2
    assert "--measured: no such file" in capsys.readouterr().err
    assert not (tmp_path / "bh").exists()            # refused before the folder

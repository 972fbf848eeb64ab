"""`pimrt bench sensitivity`: one row per (model, input, variant), each variant on its own
system, the ratios those of the steps in the row; an unknown variant refused before any work."""
import csv

import pytest

from pimrt.cli import main


def test_sensitivity_writes_a_row_per_point_with_its_ratios(tmp_path, capsys):
    out = tmp_path / "sens"
    assert main(["bench", "sensitivity", "--models", "resnet_cifar_20", "--batch", "2",
                 "--variants", "default,one_stack,pim_at_memory_clock", "--out", str(out),
                 "--quiet"]) == 0
    rows = list(csv.DictReader(open(out / "sensitivity.csv")))
    assert [r["variant"] for r in rows] == ["default", "one_stack", "pim_at_memory_clock"]
    for r in rows:
        f = {k: float(r[k]) for k in ("gpu_only_ms", "serial_ms", "authority_ms", "bound_ms",
                                      "lower_bound_ms", "speedup_vs_gpu_only",
                                      "speedup_vs_serial", "step_vs_bound")}
        assert f["speedup_vs_gpu_only"] == pytest.approx(f["gpu_only_ms"] / f["authority_ms"],
                                                         rel=1e-3)
        assert f["speedup_vs_serial"] == pytest.approx(f["serial_ms"] / f["authority_ms"],
                                                       rel=1e-3)
        assert f["lower_bound_ms"] <= f["bound_ms"]
    default, one, _ = rows
    # a quarter of the channels: the GPU's own kernels (all of GPU-only) slow down (at batch 2
    # the kernels' fixed costs are most of the step: by 5%)
    assert float(one["gpu_only_ms"]) > 1.03 * float(default["gpu_only_ms"])
    assert (out / "sensitivity.png").stat().st_size > 0
    assert "mean" in capsys.readouterr().out


def test_an_unknown_variant_is_refused(tmp_path, capsys):
    assert main(["bench", "sensitivity", "--variants", "default,hbm3", "--out",
                 str(tmp_path / "s"), "--quiet"]) == 2
    assert "unknown variants ['hbm3']" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()

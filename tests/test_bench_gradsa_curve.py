"""`pimrt bench gradsa --curve`: accuracy against density over seeds, the table from the runs'
own figures, where a compressor stays within 0.5 point of dense, bad lists named."""
import argparse

import pytest

from pimrt.bench import gradsa as bench
from pimrt.bench._gradsa_curve import curve_table, run_curve
from pimrt.errors import PimrtError


def _row(name, density, seed, acc, ratio=100.0):
    return {"compressor": name, "density": density, "seed": seed, "final_acc": acc,
            "ratio": ratio, "ratio_whole": ratio / 2}


def test_the_table_is_the_mean_over_seeds_and_says_from_where_it_holds():
    rows = [_row("dense", 1.0, s, a) for s, a in ((0, 0.98), (1, 0.99), (2, 0.97))]
    # gradsa: 10 points down at 1e-3, within at 1e-2 and 1e-1; dgc: never within
    for s in range(3):
        rows += [_row("gradsa", 0.001, s, 0.88), _row("gradsa", 0.01, s, 0.976),
                 _row("gradsa", 0.1, s, 0.981), _row("dgc", 0.001, s, 0.80),
                 _row("dgc", 0.01, s, 0.90), _row("dgc", 0.1, s, 0.97)]
    rows.append({"compressor": "gradsa", "density": 0.1, "seed": 3, "error": "exit 1"})
    t = curve_table(rows, ["gradsa", "dgc"], [0.001, 0.01, 0.1])
    assert t["dense"]["mean"] == pytest.approx(98.0) and t["dense"]["seeds"] == 3
    g = {p["density"]: p for p in t["gradsa"]}
    assert g[0.001]["delta"] == pytest.approx(-10.0) and not g[0.001]["within"]
    assert g[0.01]["within"] and g[0.1]["within"] and g[0.1]["seeds"] == 3
    assert t["gradsa_within_from"] == 0.01
    assert t["dgc_within_from"] is None          # 0.1 is 1 point down


@pytest.mark.parametrize("curve,seeds,message", [
    ("0.001,x", "0", "--curve must list numbers, got 'x'"),
    ("0.001,2", "0", "--curve densities must be in (0, 1], got [2.0]"),
    ("0.01", "0,a", "--seeds must list numbers, got 'a'"),
])
def test_bad_lists_are_named(curve, seeds, message):
    args = argparse.Namespace(curve=curve, seeds=seeds)
    with pytest.raises(PimrtError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        run_curve(args, ["dense", "gradsa"])


def test_a_curve_without_a_sparse_compressor_is_refused():
    with pytest.raises(PimrtError, match="--curve needs a sparse compressor"):
        run_curve(argparse.Namespace(curve="0.01", seeds="0"), ["dense", "powersgd"])


@pytest.mark.slow
def test_a_small_curve_runs(tmp_path, capsys):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    args = p.parse_args(["--quick", "--max-steps", "3", "--compressors", "dense,gradsa",
                         "--curve", "0.01,0.1", "--seeds", "0", "--out", str(tmp_path / "runs"),
                         "--json", str(tmp_path / "curve.json")])
    assert bench.run(args) == 0
    out = capsys.readouterr().out
    assert "gradsa:" in out and "within 0.5 point of dense" in out
    assert (tmp_path / "curve.png").is_file()

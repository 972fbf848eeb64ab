"""`pimrt bench gradsa --scale`: every compressor at several rank counts, the bytes a ring moves
per rank and in total, against the ring's own formulas."""
import argparse
import json

import pytest

from pimrt.bench import gradsa as bench
from pimrt.errors import PimrtError


def _args(tmp_path, scale):
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return p.parse_args(["--quick", "--max-steps", "3", "--compressors", "dense,gradsa", "--scale", scale,
                         "--out", str(tmp_path / "runs"), "--json", str(tmp_path / "scale.json")])


def test_scale_counts_the_ring_per_rank_and_in_total(tmp_path, capsys):
    from pimrt.train.models import build_model
    assert bench.run(_args(tmp_path, "2,3")) == 0
    rows = {(r["compressor"], r["world_size"]): r for r in json.loads((tmp_path / "scale.json").read_text())["rows"]}
    params = sum(p.numel() for p in build_model("tinycnn", 10, 8, 3).parameters())
    for n in (2, 3):
        d, g = rows[("dense", n)], rows[("gradsa", n)]
        assert d["bytes_per_step"] == 4 * params                         # fp32 all-reduce
        assert d["wire_per_rank_step"] == pytest.approx(2 * (n - 1) / n * 4 * params)
        assert g["wire_per_rank_step"] == pytest.approx((n - 1) * g["bytes_per_step"])   # all-gather
        for r in (d, g):
            assert r["wire_total_step"] == pytest.approx(n * r["wire_per_rank_step"])   # padded: equal ranks
    out = capsys.readouterr().out
    assert "wire/rank" in out and "wire total" in out


def test_scale_must_list_rank_counts(tmp_path):
    with pytest.raises(PimrtError, match=r"--scale must list rank counts >= 1, got 'x' in '2,x'"):
        bench.run(_args(tmp_path, "2,x"))


def test_a_second_run_trains_over_the_first_and_reuse_finds_it(tmp_path, capsys):
    """pimrt train refuses an --out that holds a run: the bench starts its runs with --force, and
    --reuse compares the options summary.json records (pimrt.train.cli.recorded)."""
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    argv = ["--quick", "--max-steps", "2", "--compressors", "dense", "--out", str(tmp_path / "runs")]
    for extra, said in (([], "dense: training"), ([], "dense: training"), (["--reuse"], "dense: reusing")):
        assert bench.run(p.parse_args(argv + extra)) == 0
        out = capsys.readouterr().out
        assert said in out and "FAILED" not in out, out

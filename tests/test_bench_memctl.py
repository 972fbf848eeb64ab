"""`pimrt bench memctl`: the fastest of --repeat runs, the same simulated cycles every run."""
import argparse
import json

import pytest

from pimrt.bench import memctl as bench
from pimrt.errors import ConfigError


def _args(tmp_path, repeat, only="hbm2-random,hbm2pim-authority"):
    return argparse.Namespace(requests=3000, only=only, repeat=repeat, json=tmp_path / "out.json")


def test_repeated_runs_report_the_same_simulation(tmp_path, capsys):
    assert bench.run(_args(tmp_path, 1)) == 0
    once = json.loads((tmp_path / "out.json").read_text())
    assert bench.run(_args(tmp_path, 3)) == 0
    thrice = json.loads((tmp_path / "out.json").read_text())
    assert [r["case"] for r in thrice] == ["hbm2-random", "hbm2pim-authority"]
    assert once[0]["requests"] == thrice[0]["requests"] == 3000
    for a, b in zip(once, thrice):
        assert (a["cycles"], a["mode_switches"]) == (b["cycles"], b["mode_switches"])
        assert b["sim_requests_per_s"] > 0
    assert "hbm2-random" in capsys.readouterr().out


def test_repeat_must_be_positive(tmp_path):
    with pytest.raises(ConfigError, match="--repeat must be >= 1"):
        bench.run(_args(tmp_path, 0))

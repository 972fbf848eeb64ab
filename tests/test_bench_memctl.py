"""`pimrt bench memctl`: the fastest of --repeat runs, the same simulated cycles every run."""
import argparse
import json

import pytest

from pimrt.bench import memctl as bench
from pimrt.errors import ConfigError


def _args(tmp_path, repeat, only="hbm2-random,hbm2pim-authority"):
    return argparse.Namespace(requests=3000, only=only, repeat=repeat, json=tmp_path / "out.json",
                              no_process=False)


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


def test_whole_process_rate_and_quoted_references(tmp_path, capsys):
    """The host-only cases also run `pimrt memsim` on the trace written as a DRAMsim3 text
    file, as a whole process, with the same cycles; the reference columns say they are
    quoted figures and from where."""
    assert bench.run(_args(tmp_path, 1)) == 0
    rows = json.loads((tmp_path / "out.json").read_text())
    random, pim = rows
    assert random["process_seconds"] > 0 and random["process_requests_per_s"] > 0
    assert pim["process_seconds"] is None                  # host + PIM: no text reference
    assert "quoted" in random["reference_source"]
    assert "dram-reference.md" in random["reference_source"]
    out = capsys.readouterr().out
    assert random["process_cpu_seconds"] > 0
    assert "proc wall" in out and "quoted" in out and "not live runs" in out

"""`pimrt bench memctl`: the fastest of --repeat runs, the same simulated cycles every run;
with --dramsim3, DRAMsim3's whole process beside memsim's (a stand-in script for dramsim3main
here; the real build only where PIMRT_DRAMSIM3 names it)."""
import argparse
import json
import os
import pathlib
import sys

import pytest

from pimrt.bench import memctl as bench
from pimrt.errors import ConfigError, PimrtError


def _args(tmp_path, repeat, only="hbm2-random,hbm2pim-authority", dramsim3=None):
    return argparse.Namespace(requests=3000, only=only, repeat=repeat, json=tmp_path / "out.json",
                              no_process=False, dramsim3=dramsim3)


def _rows(tmp_path):
    return json.loads((tmp_path / "out.json").read_text())["rows"]


def test_repeated_runs_report_the_same_simulation(tmp_path, capsys):
    assert bench.run(_args(tmp_path, 1)) == 0
    once = _rows(tmp_path)
    assert bench.run(_args(tmp_path, 3)) == 0
    thrice = _rows(tmp_path)
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
    random, pim = _rows(tmp_path)
    assert random["process_seconds"] > 0 and random["process_requests_per_s"] > 0
    assert pim["process_seconds"] is None                  # host + PIM: no text reference
    assert "quoted" in random["reference_source"]
    assert "dram-reference.md" in random["reference_source"]
    out = capsys.readouterr().out
    assert random["process_cpu_seconds"] > 0
    assert "proc wall" in out and "quoted" in out and "not live runs" in out
    assert random["dramsim3"] is None and random["process_vs_dramsim3_cpu"] is None
    settings = json.loads((tmp_path / "out.json").read_text())["settings"]
    assert settings["date"].endswith("UTC") and settings["dramsim3"] is None
    assert "CPUs" in settings["machine"] and len(settings["load_average_before"]) == 3


# A stand-in for DRAMsim3's dramsim3main: answers --help as DRAMsim3 does, checks the
# arguments the bench gives (CONFIG -c N -t TRACE -o DIR), writes dramsim3.json with the
# requests done per channel (the trace's lines, + 1 as dramsim3main's repeated last line) and
# logs its calls; MODE picks a failure.
FAKE = """#!{python}
import json, pathlib, sys, time
MODE = {mode!r}
a = sys.argv[1:]
if a == ["--help"]:
    print("DRAM Simulator.\\n  -t[trace], --trace=[trace]  Trace file")
    sys.exit(0)
ini, c, t, o = pathlib.Path(a[0]), a[a.index("-c") + 1], a[a.index("-t") + 1], a[a.index("-o") + 1]
assert ini.is_file() and ini.parent.name == "configs" and ini.suffix == ".ini", a
assert int(c) > 0 and pathlib.Path(t).is_file() and pathlib.Path(o).is_dir(), a
with open({log!r}, "a") as f:
    f.write(" ".join([ini.name, c]) + "\\n")
if MODE == "fail":
    print("config file not found: broken ini", file=sys.stderr)
    sys.exit(3)
if MODE == "hang":
    time.sleep(60)
n = sum(1 for _ in open(t)) + 1
if MODE == "short" :
    n = n // 2
(pathlib.Path(o) / "dramsim3.json").write_text(json.dumps(
    {{"0": {{"num_reads_done": n - 1, "num_writes_done": 0}}, "1": {{"num_reads_done": 1}}}}))
"""


def _fake_build(tmp_path, mode="ok"):
    """tmp_path/d3: configs/ with the two inis, build/dramsim3main the stand-in."""
    root = tmp_path / "d3"
    (root / "configs").mkdir(parents=True)
    for ini in bench.DRAMSIM3_CONFIGS.values():
        (root / "configs" / ini).write_text("[dram_structure]\n")
    (root / "build").mkdir()
    exe = root / "build" / "dramsim3main"
    exe.write_text(FAKE.format(python=sys.executable, mode=mode, log=str(tmp_path / "calls")))
    exe.chmod(0o755)
    return root / "build"


def test_dramsim3_measured_side_by_side(tmp_path, capsys):
    """--dramsim3 BUILD: for each host-only case, dramsim3main on the same text trace with the
    part's ini, an untimed run and --repeat timed ones; its rate, and memsim's against it, in
    the JSON and the table; the PIM case has none."""
    build = _fake_build(tmp_path)
    only = "hbm2-stream,ddr4-stream,hbm2pim-serial"
    assert bench.run(_args(tmp_path, 2, only=only, dramsim3=build)) == 0
    hbm2, ddr4, pim = _rows(tmp_path)
    calls = (tmp_path / "calls").read_text().split("\n")[:-1]
    assert [c.split()[0] for c in calls] == ["HBM2_8Gb_x128.ini"] * 3 + ["DDR4_8Gb_x8_3200.ini"] * 3
    for r in (hbm2, ddr4):
        m = r["dramsim3"]
        assert m["requests_done"] == 3001 and m["cpu_seconds"] > 0 and m["wall_seconds"] > 0
        assert m["requests_per_cpu_s"] == pytest.approx(3000 / m["cpu_seconds"])
        assert r["process_vs_dramsim3_cpu"] == pytest.approx(m["cpu_seconds"]
                                                             / r["process_cpu_seconds"])
        assert m["cycles_arg"] >= max(3000, r["cycles"])
    assert pim["dramsim3"] is None
    out = capsys.readouterr().out
    assert "measured in this run" in out and "D3 cpu" in out
    settings = json.loads((tmp_path / "out.json").read_text())["settings"]
    assert settings["dramsim3"]["binary"] == str((build / "dramsim3main").resolve())


def test_dramsim3_binary_path_and_too_few_cycles(tmp_path):
    """The binary itself is accepted as well as its folder; a run that leaves requests undone
    raises -c by a quarter in the untimed run, then stops with the count."""
    exe = _fake_build(tmp_path, mode="short") / "dramsim3main"
    with pytest.raises(PimrtError, match=r"hbm2-stream: DRAMsim3 completed 1500 of 3000 "
                                         r"requests in \d+ cycles \(-c\)"):
        bench.run(_args(tmp_path, 1, only="hbm2-stream", dramsim3=exe))
    cycles = [int(c.split()[1]) for c in (tmp_path / "calls").read_text().split("\n")[:-1]]
    assert len(cycles) == 5 and cycles[1] == int(cycles[0] * 1.25)


@pytest.mark.parametrize("mode,match", [
    ("fail", r"hbm2-stream: DRAMsim3 \(.*dramsim3main .*HBM2_8Gb_x128.ini -c \d+ -t .*\) failed "
             r"with exit code 3: config file not found: broken ini"),
    ("hang", r"hbm2-stream: DRAMsim3 \(.*\) ran past 1 s and was stopped"),
])
def test_dramsim3_run_that_fails_or_hangs(tmp_path, monkeypatch, mode, match):
    monkeypatch.setattr(bench, "DRAMSIM3_TIMEOUT_S", 1.0)
    with pytest.raises(PimrtError, match=match):
        bench.run(_args(tmp_path, 1, only="hbm2-stream", dramsim3=_fake_build(tmp_path, mode)))


def test_not_a_dramsim3_build(tmp_path):
    with pytest.raises(ConfigError, match="no such file or folder"):
        bench.find_dramsim3(tmp_path / "nothing")
    with pytest.raises(ConfigError, match="not a DRAMsim3 build"):
        bench.find_dramsim3(tmp_path)
    other = tmp_path / "other"
    other.write_text("#!/bin/sh\necho hello\n")
    other.chmod(0o755)
    with pytest.raises(ConfigError, match="is not DRAMsim3's dramsim3main"):
        bench.find_dramsim3(other)
    (tmp_path / "plain").write_text("x")
    with pytest.raises(ConfigError, match="plain is not executable"):
        bench.find_dramsim3(tmp_path / "plain")
    exe = _fake_build(tmp_path) / "dramsim3main"
    (tmp_path / "d3" / "configs" / "HBM2_8Gb_x128.ini").unlink()
    with pytest.raises(ConfigError, match="no configs/HBM2_8Gb_x128.ini"):
        bench.find_dramsim3(exe)


@pytest.mark.skipif(not os.environ.get("PIMRT_DRAMSIM3"),
                    reason="PIMRT_DRAMSIM3 names no DRAMsim3 build (its build folder or binary)")
def test_real_dramsim3(tmp_path):
    """With a real DRAMsim3 build: every request of the trace completes within -c, and the
    rates are measured."""
    build = pathlib.Path(os.environ["PIMRT_DRAMSIM3"])
    assert bench.run(_args(tmp_path, 1, only="hbm2-stream,ddr4-random", dramsim3=build)) == 0
    for r in _rows(tmp_path):
        m = r["dramsim3"]
        assert r["requests"] <= m["requests_done"] <= r["requests"] + 1
        assert m["requests_per_cpu_s"] > 0 and r["process_vs_dramsim3_cpu"] > 0

"""Issue 40: a timed step's memctl stream written as it is fed (pimrt.trace.step) and replayed
by `pimrt memsim` to the cycle; the GPU-only step out as DRAMsim3 / Ramulator traces
(pimrt.trace.host_export); memsim's per-layer table."""
import csv
import json

import numpy as np
import pytest

from pimrt.cli import main
from pimrt.runtime import session
from pimrt.runtime.timing import time_step
from pimrt.trace import open_trace
from pimrt.trace.host_export import HostTrace
from pimrt.trace.step import StepTrace, read_meta

POLICIES = ("serial", "bank_partition", "authority")


@pytest.fixture(scope="module")
def graph():
    return session.captured("resnet_cifar_20", 4, 32)


def _write(graph, policy, path):
    sink = StepTrace(path, {"model": "resnet_cifar_20", "batch": 4, "step": policy})
    return time_step(graph, policy, sink=sink), sink


def _replay(path, capsys, *extra):
    stats = path.with_suffix(".stats.json")
    assert main(["memsim", str(path), "--quiet", "--stats", str(stats), *extra]) == 0
    out, err = capsys.readouterr()
    return json.loads(stats.read_text()), out, err


def _same_run(run: dict, replay: dict) -> None:
    for key in ("cycles", "mode_switches", "requests", "refreshes", "commands"):
        assert replay[key] == run[key], key
    assert replay["requestors"] == run["requestors"]
    assert replay["energy_pj"]["total"] == pytest.approx(run["energy_pj"]["total"], rel=1e-12)


@pytest.mark.parametrize("policy", POLICIES)
def test_replay_gives_the_runs_cycles(graph, policy, tmp_path, capsys):
    path = tmp_path / f"{policy}.npy"
    timing, sink = _write(graph, policy, path)
    meta = read_meta(path)
    assert meta["policy"] == policy and meta["part"]["source"] == "v100_hbm2_pim"
    assert meta["part"]["overrides"] == {"controller.host_queue_depth": 66}   # the V100's queue
    assert meta["run"]["cycles"] == timing.stats["cycles"]
    assert meta["records"] == timing.records + sum(1 for _ in _layer_markers(path))
    replay, out, err = _replay(path, capsys)
    _same_run(timing.stats, replay)
    assert err == ""
    assert "replay the same as the run" in out
    # the layer names: one per task's layer and phase, in the order the stream met them
    names = [L["name"] for L in replay["layers"]]
    assert names[0] == "conv1:fwd" and "fc:bwd_data" in names
    assert sum(L["requests"] for L in replay["layers"]) == replay["requests"]


def _layer_markers(path):
    for chunk in open_trace(path):
        yield from np.flatnonzero(chunk["op"] == 2)


@pytest.mark.slow
def test_replay_of_resnet18_is_exact(tmp_path, capsys):
    g = session.captured("resnet18", 32, 32)
    path = tmp_path / "r18.npy"
    timing, _ = _write(g, "authority", path)
    replay, out, _ = _replay(path, capsys)
    _same_run(timing.stats, replay)
    assert "replay the same as the run" in out


def test_other_policy_part_and_code_are_noted(graph, tmp_path, capsys):
    path = tmp_path / "a.npy"
    _write(graph, "authority", path)
    serial, out, err = _replay(path, capsys, "--policy", "serial")
    assert err.strip() == ("note: replayed under policy serial, not the run's authority (the "
                           "schedule, its order and authority parameters stay the run's)")
    assert "replay the same" not in out and serial["policy"] == "serial"
    _, _, err = _replay(path, capsys, "--config", "hbm2_pim")
    assert "note: replayed on part HBM2_8Gb_x128_PIM, not the run's V100_HBM2_x4_PIM" in err
    side = path.with_name(path.name + ".layers.json")
    data = json.loads(side.read_text())
    data["meta"]["code"] = "0" * 16
    data["meta"]["code_files"]["pimrt/__init__.py"] = "0" * 12
    side.write_text(json.dumps(data))
    again, out, err = _replay(path, capsys)
    assert err.startswith("note: the trace was written by other code (0000000000000000, here ")
    assert "pimrt/__init__.py changed" in err and len(err.splitlines()) == 1
    assert "replay the same as the run" in out       # the figures still checked against it


def test_pim_trace_refused_on_a_part_without_pim(graph, tmp_path, capsys):
    path = tmp_path / "a.npy"
    _write(graph, "authority", path)
    assert main(["memsim", str(path), "--quiet", "--config", "hbm2"]) == 2
    err = capsys.readouterr().err
    assert "the trace holds 84,896 PIM requests (a co-execution step's); part HBM2_8Gb_x128 " \
           "has no [pim] units" in err


def test_truncated_trace_says_where(graph, tmp_path, capsys):
    path = tmp_path / "a.npy"
    _write(graph, "serial", path)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    assert main(["memsim", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    have = (size // 2 - 256) // 24
    assert f"a.npy: truncated: its header gives {(size - 256) // 24:,} records of 24 bytes, " \
           f"the file ends at byte {size // 2:,}, in record {have + 1:,} (the last whole one " \
           f"{have:,})" in err, err


def test_unfinished_trace_says_so(tmp_path, capsys):
    from pimrt.trace import binary
    path = tmp_path / "a.npy"
    w = binary.Writer(path)
    w.write(np.zeros(3, binary._records.RECORD_DTYPE))
    w._f.flush()                     # (a run that died before close)
    assert main(["memsim", str(path), "--quiet"]) == 2
    assert "its header gives 0 records but 3 follow: a trace whose writing did not finish" \
        in capsys.readouterr().err
    w.close()


def test_per_layer_table_and_csv(graph, tmp_path, capsys):
    path = tmp_path / "a.npy"
    timing, _ = _write(graph, "authority", path)
    table = tmp_path / "layers.csv"
    replay, out, _ = _replay(path, capsys, "--per-layer", "--layers-csv", str(table))
    rows = list(csv.DictReader(table.open()))
    assert rows[0]["layer"] == "conv1:fwd" and "conv1:fwd" in out
    assert sum(int(r["requests"]) for r in rows) == timing.stats["requests"]
    assert sum(int(r["bytes"]) for r in rows) == sum(
        r["bytes"] for r in timing.stats["requestors"].values())
    e = timing.stats["energy_pj"]["components"]
    dynamic = sum(e[k] for k in ("act", "read", "write", "pim_act", "pim_read", "pim_write"))
    # each layer's own commands: the sum misses only ACTs that refresh forced again
    assert sum(float(r["energy_uj"]) for r in rows) * 1e6 == pytest.approx(dynamic, rel=2e-3)


@pytest.mark.parametrize("fmt", ("dramsim3", "ramulator"))
def test_gpu_only_step_out_to_other_simulators(graph, fmt, tmp_path):
    path = tmp_path / f"gpu.{fmt}"
    sink = HostTrace(path, fmt)
    timing = time_step(graph, "gpu_only", sink=sink)
    recs = open_trace(path, fmt).records()
    host = timing.stats["requestors"]["host"]
    assert sink.count == len(recs) == host["requests"] == host["reads"] + host["writes"]
    assert int((recs["op"] == 1).sum()) == host["writes"]
    if fmt == "dramsim3":
        cyc = recs["cycle"].astype(np.int64)
        assert (np.diff(cyc) >= 0).all()
        assert 0 < cyc[-1] < timing.stats["cycles"]


def test_co_execution_step_refused_in_a_host_format(graph, tmp_path):
    from pimrt.errors import TraceError
    with pytest.raises(TraceError, match="has host requests only; this step has PIM"):
        time_step(graph, "authority", sink=HostTrace(tmp_path / "x.trace", "dramsim3"))


def test_run_save_trace_cli(tmp_path, capsys):
    path = tmp_path / "step.npy"
    assert main(["run", "--model", "resnet_cifar_20", "--batch", "4", "--input", "32",
                 "--functional", "none", "--quiet", "--policy", "bank_partition",
                 "--out", str(tmp_path / "out"), "--save-trace", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"wrote the bank_partition step's memctl stream to {path}" in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    replay, out, _ = _replay(path, capsys)
    assert replay["mode_switches"] == summary["mode_switches"]
    assert replay["cycles"] == read_meta(path)["run"]["cycles"]
    assert "replay the same as the run (resnet_cifar_20 batch 4, bank_partition)" in out


def test_sweep_points_save_their_traces(tmp_path, capsys):
    spec = tmp_path / "t.toml"
    spec.write_text('[fixed]\nmodel = "resnet_cifar_20"\nbatch = 2\ninput = 32\n'
                    'save_trace = "step.npy"\n[grid]\npolicy = ["serial", "authority"]\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    folders = sorted((tmp_path / "out" / "points").iterdir())
    assert len(folders) == 2
    for folder in folders:
        summary = json.loads((folder / "summary.json").read_text())
        capsys.readouterr()
        replay, out, _ = _replay(folder / "step.npy", capsys)
        assert replay["policy"] == summary["policy"]
        assert replay["mode_switches"] == summary["mode_switches"]
        assert "replay the same as the run" in out


def test_sweep_refuses_a_trace_path_or_a_host_format(tmp_path, capsys):
    for line, words in (('save_trace = "a/step.npy"', "a file name (no folder)"),
                        ('save_trace = "s.trace"\nformat = "dramsim3"',
                         "a sweep writes its points' traces as npy")):
        spec = tmp_path / "t.toml"
        spec.write_text(f'[fixed]\nmodel = "resnet_cifar_20"\nbatch = 2\n{line}\n')
        assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--quiet"]) == 2
        assert words in capsys.readouterr().err


def test_docs_commands_parse_and_name_real_options():
    """docs/traces.md's three commands (the first two run in test_run_save_trace_cli and
    the replays above; the DRAMsim3 one in test_gpu_only_step_out_to_other_simulators)."""
    import pathlib
    import shlex
    from pimrt.cli import build_parser
    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "traces.md").read_text()
    block = text.split("```")[1].split("\n", 1)[1]      # after its info string
    lines = [line.split("#")[0] for line in block.splitlines() if line.strip()]
    assert len(lines) == 3
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] == "pimrt"
        build_parser().parse_args(argv[1:])        # SystemExit if it does not parse
    assert "--save-trace step.npy" in lines[0] and "--format dramsim3" in lines[2]

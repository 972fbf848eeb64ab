"""`pimrt compare`: the table, compare.json and each run's folder; an interrupted comparison
keeps the runs it finished; bad input fails before any run."""
import json

import pytest

from pimrt.cli import main


def test_compare_writes_a_table_and_a_folder_per_run(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--models", "resnet_cifar_20", "--policies",
                 "serial,bank_partition,authority", "--batch", "2", "--input", "32", "--out", str(out),
                 "--quiet"]) == 0
    text = capsys.readouterr().out
    results = json.loads((out / "compare.json").read_text())
    assert [r["policy"] for r in results] == ["serial", "bank_partition", "authority"]
    serial, _, auth = results
    assert serial["speedup_vs_serial"] == 1.0
    assert auth["speedup_vs_serial"] == pytest.approx(serial["step_ms"] / auth["step_ms"])
    # the step's forward, backward and update shares add up to the step
    assert sum(p["ms"] for p in auth["phases"].values()) == \
        pytest.approx(auth["step_ms"], rel=1e-6)
    for policy in ("serial", "bank_partition", "authority"):
        for f in ("summary.json", "layers.csv", "trace.json", "timeline.png",
                  "layer_speedup.png", "energy.png"):
            assert (out / "resnet_cifar_20" / policy / f).exists(), (policy, f)
    header = next(line for line in text.splitlines() if line.startswith("model"))
    assert header.split() == ["model", "policy", "step", "ms", "gpu-only", "serial", "bound",
                              "vs", "gpu", "vs", "serial", "/bound", "switches", "fwd", "bwd",
                              "upd", "mJ", "E/gpu", "E/serial"]
    row = next(line for line in text.splitlines()
               if line.startswith("resnet_cifar_20") and "authority" in line)
    for key in ("step_ms", "gpu_only_step_ms", "serial_step_ms", "bound_step_ms",
                "speedup_vs_gpu_only", "speedup_vs_serial", "step_vs_bound"):
        assert f"{auth[key]:.3f}" in row, key
    # every run of a model shares its baselines
    assert len({(r["gpu_only_step_ms"], r["bound_step_ms"]) for r in results}) == 1
    assert auth["speedup_vs_gpu_only"] == pytest.approx(auth["gpu_only_step_ms"] / auth["step_ms"])
    assert auth["system"]["memory"]["channels"] == 32 and auth["system"]["host"]["name"] == "V100"
    assert f"{auth['phases']['fwd']['speedup']:.3f}" in row
    assert any(line.startswith("mean") and "authority" in line for line in text.splitlines())
    # energy per step: the parts add up, the ratios are to the baselines' totals, all printed
    e = auth["energy_mj"]
    assert e["total"] == pytest.approx(sum(e[k] for k in ("host", "dram", "pim", "io")))
    assert e["vs_serial"] == pytest.approx(e["total"] / serial["energy_mj"]["total"])
    assert e["vs_gpu_only"] == pytest.approx(e["total"] / e["gpu_only_total"])
    assert serial["energy_mj"]["vs_serial"] == 1.0
    assert f"{e['total']:,.1f}" in row and f"{e['vs_gpu_only']:.3f}" in row
    assert (out / "energy.png").exists()


def test_an_interrupted_compare_keeps_what_it_finished(tmp_path, capsys, monkeypatch):
    from pimrt.runtime import session
    real = session.timed
    calls = []

    def timed(graph, policy, *a, **kw):
        calls.append(policy)
        if len(calls) == 4:        # the second model's serial run (after serial, gpu_only,
            # authority of the first): Ctrl-C
            raise KeyboardInterrupt
        return real(graph, policy, *a, **kw)

    monkeypatch.setattr(session, "timed", timed)
    out = tmp_path / "cmp"
    assert main(["compare", "--models", "resnet_cifar_20,resnet_cifar_32", "--policies",
                 "authority", "--batch", "2", "--input", "32", "--out", str(out),
                 "--quiet"]) == 130
    captured = capsys.readouterr()
    assert "interrupted: 1 finished runs kept in" in captured.err
    results = json.loads((out / "compare.json").read_text())
    assert [(r["model"], r["policy"]) for r in results] == [("resnet_cifar_20", "authority")]
    assert (out / "resnet_cifar_20" / "authority" / "summary.json").exists()
    assert "resnet_cifar_20  authority" in captured.out      # the table of what finished


def test_compare_refuses_bad_input_before_any_run(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--models", "resnet_cifar_20", "--policies", "authority,fifo",
                 "--out", str(out), "--quiet"]) == 2
    assert "unknown policies ['fifo']" in capsys.readouterr().err
    assert main(["compare", "--models", "resnet_cifar_20,resnet18", "--groups", "3",
                 "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "3" in err
    assert not out.exists()                       # nothing was started


def test_jobs_time_models_side_by_side_with_the_same_results(tmp_path, capsys):
    args = ["compare", "--models", "resnet_cifar_20,resnet_cifar_32", "--policies",
            "serial,authority", "--batch", "2", "--input", "32", "--quiet"]
    assert main(args + ["--out", str(tmp_path / "one")]) == 0
    assert main(args + ["--jobs", "2", "--out", str(tmp_path / "two")]) == 0
    text = capsys.readouterr().out
    one, two = (json.loads((tmp_path / d / "compare.json").read_text()) for d in ("one", "two"))

    def key(r):
        return (r["model"], r["policy"], r["step_ms"], r["serial_step_ms"],
                r["gpu_only_step_ms"], r["bound_step_ms"], r["mode_switches"])
    assert [key(r) for r in two] == [key(r) for r in one]
    assert [(r["model"], r["policy"]) for r in two] == [
        (m, p) for m in ("resnet_cifar_20", "resnet_cifar_32") for p in ("serial", "authority")]
    for m in ("resnet_cifar_20", "resnet_cifar_32"):
        for policy in ("serial", "authority"):
            assert (tmp_path / "two" / m / policy / "summary.json").exists()
    assert sum(line.startswith("mean") for line in text.splitlines()) == 4
    assert main(args + ["--jobs", "0", "--out", str(tmp_path / "three")]) == 2
    assert "--jobs must be >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "three").exists()


def _result(model: str, policy: str) -> dict:
    keys = ("step_ms", "gpu_only_step_ms", "serial_step_ms", "bound_step_ms",
            "speedup_vs_gpu_only", "speedup_vs_serial", "step_vs_bound")
    return {"model": model, "policy": policy, "mode_switches": 12, **dict.fromkeys(keys, 1.5),
            "phases": {k: {"speedup": 1.25} for k in ("fwd", "bwd", "update")},
            "energy_mj": {"available": True, "total": 123.4, "vs_gpu_only": 0.9,
                          "vs_serial": 0.8}}


def test_the_table_sizes_its_columns_to_the_longest_name():
    """A user's long model name does not run into the policy column: every row's policy and
    figures start where the header's do."""
    from pimrt.commands.compare import _row, _table, widths
    long = "/home/someone/experiments/networks/mynets.py:AVeryLongNetworkName"
    results = [_result("resnet18", "authority"), _result(long, "bank_partition"),
               _result(long, "authority")]
    lines = _table(results).splitlines()
    header, rows = lines[0], lines[1:]
    at = header.index("policy")
    assert at == len(long) + 2
    for line in rows:
        assert line[at - 2:at] == "  " and line[at] != " ", line
        assert line[at:].split()[0] in ("authority", "bank_partition")
    # figures right-aligned under their headers
    end = header.index("step ms") + len("step ms")
    assert all(line[end - 5:end] == "1.500" for line in rows if not line.startswith("mean"))
    # rows printed as runs finish have the table's widths
    w = widths([r["model"] for r in results], ["authority", "bank_partition"])
    assert _row(results[1], False, w) == rows[1]
    # short names keep the former widths
    assert _table([_result("resnet18", "serial")]).splitlines()[0].index("policy") == 17


def test_jobs_keep_the_precision(tmp_path):
    """--jobs N under --precision amp-fp16: each worker captures its model with the 16-bit
    tensors, as one process does (until 2026-12-05 the workers captured fp32 tensors and ran
    them on the AMP host part: an fp32 step on Tensor Cores labelled amp-fp16)."""
    args = ["compare", "--models", "resnet_cifar_20,resnet_cifar_32", "--policies",
            "serial", "--batch", "2", "--input", "32", "--quiet"]
    assert main(args + ["--precision", "amp-fp16", "--out", str(tmp_path / "one")]) == 0
    assert main(args + ["--precision", "amp-fp16", "--jobs", "2",
                        "--out", str(tmp_path / "two")]) == 0
    assert main(args + ["--host-part", "v100_tc", "--out", str(tmp_path / "fp32")]) == 0
    one, two, fp32 = (json.loads((tmp_path / d / "compare.json").read_text())
                      for d in ("one", "two", "fp32"))
    assert [r["precision"] for r in two] == ["amp-fp16"] * 2
    assert [(r["model"], r["step_ms"], r["requests"]) for r in two] == \
           [(r["model"], r["step_ms"], r["requests"]) for r in one]
    # 16-bit activations: fewer requests than the same host part with fp32 tensors
    assert all(a["requests"] < b["requests"] for a, b in zip(two, fp32))

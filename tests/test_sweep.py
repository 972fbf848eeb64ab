"""`pimrt sweep` end to end on a tiny grid (ResNet-20 for CIFAR, batch 2, 32x32): each point
as `pimrt run` times it, each shared baseline run once as its own task, the same files from
local processes and a Dask LocalCluster, resumed without re-running, a folder of another spec
or other simulator code refused, a failed or lost point recorded without stopping the others,
plots."""
import csv
import json
import pathlib
import shutil

import pytest

from pimrt.cli import main

SPEC = """
[sweep]
name = "tiny"
[fixed]
model = "resnet_cifar_20"
batch = 2
input = 32
[grid]
policy = ["serial", "authority"]
set.pim.lanes = [8, 16]
"""
# what differs between two runs of one point: where and how long it ran
UNSTABLE = {"worker", "simulation_wall_s"}
CRASH = pathlib.Path(__file__).parent / "sweep_models" / "crash.py"


def rows(out):
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep")
    (d / "tiny.toml").write_text(SPEC)
    code = main(["sweep", str(d / "tiny.toml"), "--out", str(d / "out"), "--jobs", "2",
                 "--quiet"])
    assert code == 0
    return d


@pytest.mark.parametrize("policy, lanes", [("authority", 8), ("serial", 8), ("authority", 16)])
def test_each_point_is_the_run_pimrt_run_times(swept, tmp_path, policy, lanes):
    """A point run after its baselines, in another process than they ran in, is `pimrt run`'s
    run to the last digit and byte (the serial point is the serial baseline's report). The
    16-lane point shares the 8-lane system's GPU-only step (the lanes are the PIM's timing)
    and is still the run on a 16-lane part, its GPU-only energy included."""
    rs = rows(swept / "out")
    assert [(r["index"], r["status"], r["policy"], r["set.pim.lanes"]) for r in rs] == [
        ("1", "done", "serial", "8"), ("2", "done", "serial", "16"),
        ("3", "done", "authority", "8"), ("4", "done", "authority", "16")]
    row = next(r for r in rs if r["policy"] == policy and r["set.pim.lanes"] == str(lanes))
    part = tmp_path / "part.toml"
    from pimrt.memctl.config import PARTS_DIR
    part.write_text(f'include = "{PARTS_DIR / "v100_hbm2_pim.toml"}"\n[pim]\nlanes = {lanes}\n')
    assert main(["run", "--model", "resnet_cifar_20", "--batch", "2", "--input", "32",
                 "--policy", policy, "--functional", "none", "--quiet", "--part", str(part),
                 "--out", str(tmp_path / "run")]) == 0
    ran = json.loads((tmp_path / "run" / "summary.json").read_text())
    for key in ("step_ms", "serial_step_ms", "gpu_only_step_ms", "bound_step_ms",
                "lower_bound_step_ms", "mode_switches", "requests", "speedup_vs_gpu_only",
                "speedup_vs_serial", "step_vs_bound"):
        assert float(row[key]) == ran[key], key
    for key in ("total", "gpu_only_total", "serial_total", "vs_gpu_only"):
        assert float(row[f"energy_mj.{key}"]) == ran["energy_mj"][key], key
    folder = swept / "out" / "points" / row["id"]
    assert (tmp_path / "run" / "layers.csv").read_bytes() == \
        (folder / "layers.csv").read_bytes()


def test_auth8_folder_is_what_pimrt_run_writes(swept):
    rs = rows(swept / "out")
    auth8 = next(r for r in rs if r["policy"] == "authority" and r["set.pim.lanes"] == "8")
    # the point's folder is what pimrt run writes
    folder = swept / "out" / "points" / auth8["id"]
    for f in ("summary.json", "layers.csv", "trace.json", "timeline.png", "layer_speedup.png"):
        assert (folder / f).stat().st_size > 0, f
    s = json.loads((folder / "summary.json").read_text())
    assert s["plots"] == [str(folder / "timeline.png"), str(folder / "layer_speedup.png"),
                          str(folder / "energy.png")]
    assert s["sweep"]["values"] == {"policy": "authority", "set.pim.lanes": 8}
    from pimrt.sweep.code import fingerprint
    assert s["sweep"]["code"] == auth8["code"] == fingerprint()["fingerprint"]


def test_each_baseline_runs_once_as_its_own_task(swept):
    """Two systems (8 and 16 lanes), two policies each: a serial step and a bound per system,
    one GPU-only step for both (the lanes are the PIM's timing), then the four points;
    DIR/tasks.csv has a row per task that ran."""
    with open(swept / "out" / "tasks.csv", newline="") as f:
        tasks = list(csv.DictReader(f))
    kinds = [t["kind"] for t in tasks]
    assert sorted(kinds) == sorted(["serial", "bound"] * 2 + ["gpu_only"] + ["point"] * 4)
    assert len({t["key"] for t in tasks}) == len(tasks)           # none ran twice
    assert all(t["status"] == "done" and t["worker"] and float(t["wall_s"]) > 0
               for t in tasks)
    # a point comes back after every baseline of its system, and after the GPU-only step
    order = {t["key"]: i for i, t in enumerate(tasks)}
    gpu = order[next(k for k in order if k.startswith("gpu_only "))]
    for r in rows(swept / "out"):
        group = json.loads((swept / "out" / "sweep.json").read_text())["points"][
            int(r["index"]) - 1]["group"]
        base = [i for k, i in order.items() if k.split()[0] != "point" and
                k.split()[1] == group]
        assert len(base) == 2 and order[f"point {r['id']}"] > max(base + [gpu])


def test_a_part_key_is_the_part_with_that_key(swept):
    """16 lanes through set.pim.lanes = the sensitivity bench's lanes16 variant."""
    from pimrt.bench.sensitivity import point
    r = next(r for r in rows(swept / "out")
             if r["policy"] == "authority" and r["set.pim.lanes"] == "16")
    assert r["system.memory.pim_lanes"] == "16"
    bench = point(("resnet_cifar_20", 32, 2, "lanes16", "v100_hbm2_pim"))
    assert float(r["step_ms"]) == pytest.approx(bench["authority_ms"], rel=1e-12)
    assert float(r["gpu_only_step_ms"]) == pytest.approx(bench["gpu_only_ms"], rel=1e-12)
    assert float(r["bound_step_ms"]) == pytest.approx(bench["bound_ms"], rel=1e-12)


def test_points_of_a_group_share_their_baselines(swept):
    rs = rows(swept / "out")
    for lanes in ("8", "16"):
        serial, auth = (next(r for r in rs if r["policy"] == p and r["set.pim.lanes"] == lanes)
                        for p in ("serial", "authority"))
        assert serial["gpu_only_step_ms"] == auth["gpu_only_step_ms"]
        assert serial["step_ms"] == serial["serial_step_ms"] == auth["serial_step_ms"]
    assert rs[0]["serial_step_ms"] != rs[1]["serial_step_ms"]     # another system


@pytest.mark.slow              # a LocalCluster's start and the sweep again: ~35 s on two cores
def test_a_local_cluster_gives_the_same_files(swept):
    out = swept / "dask"
    assert main(["sweep", str(swept / "tiny.toml"), "--out", str(out), "--scheduler",
                 "local:2", "--quiet"]) == 0
    one, two = rows(swept / "out"), rows(out)
    assert [{k: v for k, v in r.items() if k not in UNSTABLE} for r in one] == \
        [{k: v for k, v in r.items() if k not in UNSTABLE} for r in two]
    for r in one:
        for f in ("layers.csv", "trace.json"):
            assert (swept / "out" / "points" / r["id"] / f).read_bytes() == \
                (out / "points" / r["id"] / f).read_bytes(), (r["id"], f)


def test_a_rerun_skips_finished_points_and_runs_what_is_missing(swept, capsys):
    out = swept / "resume"
    shutil.copytree(swept / "out", out)
    (out / ".pimrt.lock").unlink(missing_ok=True)
    spec = str(swept / "tiny.toml")
    before = {r["id"]: (out / "points" / r["id"] / "summary.json").stat().st_mtime_ns
              for r in rows(out)}
    capsys.readouterr()
    assert main(["sweep", spec, "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "4 of 4 points were finished before: skipped" in text
    assert "ran: 0 points done, 0 failed" in text
    gone = rows(out)[2]["id"]
    shutil.rmtree(out / "points" / gone)
    assert main(["sweep", spec, "--out", str(out), "--quiet"]) == 0
    assert "ran: 1 point done" in capsys.readouterr().out
    after = rows(out)
    assert [r["status"] for r in after] == ["done"] * 4
    for pid, t in before.items():
        if pid != gone:
            assert (out / "points" / pid / "summary.json").stat().st_mtime_ns == t
    assert (out / "points" / gone / "summary.json").exists()


def test_a_folder_of_another_spec_is_refused_unless_forced(swept, tmp_path, capsys):
    out = tmp_path / "o"
    shutil.copytree(swept / "out", out)
    (out / ".pimrt.lock").unlink(missing_ok=True)
    other = tmp_path / "other.toml"
    other.write_text(SPEC.replace('policy = ["serial", "authority"]', 'policy = ["serial"]'))
    capsys.readouterr()
    assert main(["sweep", str(other), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds the results of another sweep (tiny" in err[0], err
    assert "--force" in err[0]
    assert main(["sweep", str(other), "--out", str(out), "--quiet", "--force"]) == 0
    assert "2 of 2 points were finished before: skipped" in capsys.readouterr().out
    assert [r["policy"] for r in rows(out)] == ["serial", "serial"]
    # a folder that is not a sweep's
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["sweep", str(other), "--out", str(tmp_path / "busy"), "--quiet"]) == 2
    assert "not empty and not a sweep's results folder" in capsys.readouterr().err


def test_a_folder_of_other_simulator_code_is_refused_unless_allowed(swept, tmp_path, capsys):
    out = tmp_path / "o"
    shutil.copytree(swept / "out", out)
    (out / ".pimrt.lock").unlink(missing_ok=True)
    held = json.loads((out / "sweep.json").read_text())
    from pimrt.sweep.code import fingerprint
    now = fingerprint()
    assert held["code"] == now and held["earlier_code"] == []
    old = {"fingerprint": "0123456789abcdef",
           "files": dict(now["files"], **{"pimrt/runtime/timing.py": "000000000000"})}
    (out / "sweep.json").write_text(json.dumps(dict(held, code=old)))
    spec = str(swept / "tiny.toml")
    capsys.readouterr()
    assert main(["sweep", spec, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        f"pimrt sweep: error: --out {out}: its points were made with simulator code "
        f"0123456789abcdef; this pimrt is {now['fingerprint']}: pimrt/runtime/timing.py "
        f"changed; sweep into a new folder, or --allow-code-change to add points made with "
        f"this code to it (the finished ones are kept; results.csv's code column says which "
        f"code made each)"), err
    assert main(["sweep", spec, "--out", str(out), "--quiet", "--force"]) == 2   # not that
    capsys.readouterr()
    assert main(["sweep", spec, "--out", str(out), "--quiet", "--allow-code-change"]) == 0
    assert "4 of 4 points were finished before: skipped" in capsys.readouterr().out
    held = json.loads((out / "sweep.json").read_text())
    assert held["code"] == now and held["earlier_code"] == ["0123456789abcdef"]
    # a folder from before pimrt recorded its code
    del held["code"]
    (out / "sweep.json").write_text(json.dumps(held))
    assert main(["sweep", spec, "--out", str(out), "--quiet"]) == 2
    assert "made with a pimrt that did not record its simulator code" in \
        capsys.readouterr().err


def test_plot_a_column_against_an_axis(swept, capsys):
    out = swept / "out"
    assert main(["sweep", str(out), "--plot", "set.pim.lanes", "--y", "step_ms", "--by",
                 "policy"]) == 0
    png = out / "plots" / "step_ms_vs_set.pim.lanes_by_policy.png"
    assert f"wrote {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["sweep", str(out), "--plot", "policy", "--where", "set.pim.lanes=16",
                 "--png", str(out / "p.png")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out / 'p.png'}"
    assert main(["sweep", str(out), "--plot", "set.pim.lanes"]) == 0
    assert "(each mark the mean over policy)" in capsys.readouterr().out
    for argv, message in ((["--plot", "lanes"], "--plot 'lanes': not a column"),
                          (["--plot", "policy", "--y", "stepms"], "did you mean 'step_ms'?"),
                          (["--plot", "policy", "--y", "part"], "--y part: not a number"),
                          (["--plot", "policy", "--where", "policy=fifo"],
                           "no finished point has policy = fifo")):
        assert main(["sweep", str(out), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)


@pytest.mark.slow              # four worker processes started in turn: ~40 s on two cores
def test_a_lost_worker_is_retried_once_and_a_failure_does_not_stop_the_others(
        tmp_path, capsys):
    """crash.py:once kills the first worker process that builds it, crash.py:always every
    one: with two in flight the pool breaks, each runs again alone; once then finishes and
    always is recorded as failed."""
    model = tmp_path / "crash.py"
    shutil.copy(CRASH, model)
    spec = tmp_path / "crash.toml"
    spec.write_text('[fixed]\nbatch = 2\ninput = 32\n[grid]\n'
                    'model = ["crash.py:once", "crash.py:always"]\n')
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--jobs", "2", "--quiet"]) == 1
    text = capsys.readouterr().out
    assert "ran: 1 point done, 1 failed" in text
    assert "failed: point 2" in text and "worker lost twice" in text
    once, always = rows(out)
    assert once["status"] == "done" and float(once["step_ms"]) > 0
    assert always["status"] == "failed" and "worker lost twice" in always["error"]
    err = json.loads((out / "points" / always["id"] / "error.json").read_text())
    assert "worker lost twice" in err["error"]
    # a re-run leaves a failed point alone unless asked
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 1
    assert "2 of 2 points were finished before: skipped (1 of them failed: --retry-failed " \
        "runs it again)" in capsys.readouterr().out


def test_results_parquet_holds_the_same_rows(swept):
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(swept / "out" / "results.parquet").to_pylist()
    csv_rows = rows(swept / "out")
    assert [r["id"] for r in table] == [r["id"] for r in csv_rows]
    for t, c in zip(table, csv_rows):
        assert t["step_ms"] == float(c["step_ms"]) and t["policy"] == c["policy"]
        assert t["set.pim.lanes"] == int(c["set.pim.lanes"])


def test_where_repeated_on_one_axis_is_or_and_across_axes_is_and(tmp_path, capsys):
    root = tmp_path / "res"
    root.mkdir()
    (root / "sweep.json").write_text(json.dumps({"axes": ["model", "policy"]}))
    with open(root / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["status", "model", "policy", "step_ms"])
        for i, (m, p) in enumerate([(m, p) for m in ("a", "b") for p in ("serial", "authority",
                                                                          "bank_partition")]):
            w.writerow(["done", m, p, 10 + i])
    assert main(["sweep", str(root), "--plot", "policy", "--y", "step_ms", "--where",
                 "policy=serial", "--where", "policy=authority", "--png",
                 str(tmp_path / "p.png")]) == 0
    assert capsys.readouterr().out.strip() == \
        f"wrote {tmp_path / 'p.png'} (each mark the mean over model)"
    assert main(["sweep", str(root), "--plot", "policy", "--y", "step_ms", "--where", "model=a",
                 "--where", "policy=fifo", "--where", "policy=lifo"]) == 2
    assert capsys.readouterr().err.strip() == (
        "pimrt sweep: error: --where policy=fifo --where policy=lifo: no finished point has "
        "policy = fifo or lifo among those with model = a")
    from pimrt.sweep.plot import select
    from pimrt.sweep.store import read_rows
    rows = read_rows(root)
    kept = select(rows, ["policy=serial", "model=a", "policy=authority"], root, [])
    assert [(r["model"], r["policy"]) for r in kept] == [("a", "serial"), ("a", "authority")]

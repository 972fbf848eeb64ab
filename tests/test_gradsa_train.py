"""The trainer (python -m pimrt.train / torchrun): bad input, exact resume, mismatch errors,
a dead rank that makes the others fail fast, and a 2-rank torchrun run."""
import argparse
import csv
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PIMRT_TRAIN_DIE_AT"):
        env.pop(k, None)
    env.update(extra)
    return env


def _train(*args, timeout=180, **env):
    return subprocess.run([PY, "-m", "pimrt.train", "--no-progress", *args], cwd=ROOT, env=_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("args,match", [
    (["--compressor", "zip"], "unknown compressor 'zip'; valid: gradsa, dense"),
    (["--ratio", "0.5"], "impossible compression ratio 0.5"),
    (["--density", "0"], "impossible density 0"),
    (["--density", "2"], "impossible density 2"),
    (["--ratio", "inf"], "impossible compression ratio inf (--ratio): it must be a finite number >= 1"),
    (["--ratio", "nan"], "impossible compression ratio nan (--ratio)"),
    (["--warmup-start-density", "0"], "impossible warm-up start density 0.0 (--warmup-start-density): "
                                      "it must be in (0, 1]"),
    (["--warmup-start-density", "1.5"], "impossible warm-up start density 1.5"),
    (["--checkpoint-every", "-1"], "--checkpoint-every must be >= 0 steps, got -1"),
    (["--value-codec", "int3"], "unknown value codec"),
    (["--manager", "magic"], "unknown memory manager 'magic'"),
    (["--manager", "laysa", "--precision", "amp-fp16"], "--manager laysa with --precision amp-fp16: "
                                                         "LaySA applies each layer's update during backward"),
])
def test_bad_input_fails_before_training(args, match, tmp_path, capsys):
    from pimrt.train.loop import main
    assert main(args + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "metrics.csv").exists()


@pytest.mark.parametrize("args,match", [
    (["--compressor", "zip"], "unknown compressor 'zip'"),
    (["--ratio", "inf"], "impossible compression ratio inf (--ratio)"),
    (["--warmup-start-density", "0"], "impossible warm-up start density 0.0 (--warmup-start-density)"),
])
def test_bad_input_message_from_cli(tmp_path, args, match):
    r = _train(*args, "--out", str(tmp_path), timeout=60)
    assert r.returncode == 2 and match in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr


COMMON = ["--model", "tinycnn", "--image-size", "8", "--batch-size", "128", "--density", "0.05",
          "--warmup-steps", "5", "--lr-schedule", "const"]


def _losses(d):
    return [(int(r["step"]), r["loss"]) for r in csv.DictReader(open(d / "metrics.csv")) if r["loss"]]


@pytest.mark.parametrize("every,die_at", [(4, 15), (0, 13)])   # killed mid-epoch 2 / resumed at epoch 1's end
def test_resume_after_a_kill_is_exact_and_mismatch_is_named(tmp_path, every, die_at):
    import torch
    full, part = tmp_path / "full", tmp_path / "part"
    ck = ["--epochs", "2", "--checkpoint-every", str(every)]
    r = _train(*COMMON, *ck, "--out", str(full))
    assert r.returncode == 0, r.stderr
    r = _train(*COMMON, *ck, "--out", str(part), PIMRT_TRAIN_DIE_AT=f"0:{die_at}")
    assert r.returncode == 17, r.stderr                        # killed before its step die_at + 1
    blob = torch.load(part / "checkpoint-rank0.pt", weights_only=True)   # tensors and plain types only
    assert blob["step"] == (12 if every else 11) and blob["epoch_done"] == (not every)
    assert not list(part.glob("*.tmp"))
    r = _train(*COMMON, *ck, "--out", str(part), "--resume")
    assert r.returncode == 0, r.stderr
    a, b = (json.loads((d / "summary.json").read_text()) for d in (full, part))
    assert _losses(part) == _losses(full)                      # loss for loss, every step once
    assert [s for s, _ in _losses(part)] == list(range(1, 23))
    assert a["params_digest"] == b["params_digest"]  # model, optimizer, residual, momentum, RNG restored
    assert a["counter"]["bytes_sent"] == b["counter"]["bytes_sent"]
    assert a["test_acc_per_epoch"] == b["test_acc_per_epoch"]
    if every:
        return
    # a checkpoint that does not match the model: the error names the file, the parameter and both shapes
    r = _train(*COMMON, "--channels", "1", "--epochs", "3", "--out", str(part), "--resume")
    assert r.returncode == 2 and "checkpoint does not match the model" in r.stderr, r.stderr
    assert "'0.weight' has shape (8, 3, 3, 3) in the checkpoint and (8, 1, 3, 3) in the model" in r.stderr
    assert str(part / "checkpoint-rank0.pt") in r.stderr
    r = _train(*COMMON, "--compressor", "dgc", "--epochs", "3", "--out", str(part), "--resume")
    assert r.returncode == 2 and "compressor 'gradsa'" in r.stderr
    r = _train(*COMMON, "--model", "mlp", "--epochs", "3", "--out", str(part), "--resume")
    assert r.returncode == 2 and "written for model 'tinycnn', this run trains 'mlp'" in r.stderr, r.stderr
    # a file that weights_only refuses (a pickled object): a clear error naming the file, no traceback
    torch.save({"format": 2, "x": argparse.Namespace(a=1)}, part / "checkpoint-rank0.pt")
    r = _train(*COMMON, "--epochs", "3", "--out", str(part), "--resume")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{part / 'checkpoint-rank0.pt'} is not loadable with torch.load(weights_only=True)" in r.stderr


def test_checkpoint_write_is_atomic_and_keeps_the_last_good_one(tmp_path, monkeypatch):
    import torch
    from pimrt.gradsa.errors import GradSAError
    from pimrt.train import checkpoint
    path = tmp_path / "c.pt"
    checkpoint.write_atomic({"format": checkpoint.FORMAT, "w": torch.arange(5)}, path)

    def broken_save(obj, f, *a, **k):
        f.write(b"half a checkpoint")
        raise OSError("disk full")
    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.write_atomic({"format": checkpoint.FORMAT, "w": torch.zeros(5)}, path)
    monkeypatch.undo()
    assert torch.equal(checkpoint.read(path)["w"], torch.arange(5))      # the last good one
    (tmp_path / "bad.pt").write_bytes(b"not a zip")
    with pytest.raises(GradSAError, match=f"{tmp_path / 'bad.pt'} is truncated or corrupt"):
        checkpoint.read(tmp_path / "bad.pt")
    torch.save({"format": 1}, tmp_path / "old.pt")
    with pytest.raises(GradSAError, match="old.pt has checkpoint format 1, expected 2"):
        checkpoint.read(tmp_path / "old.pt")


class _RunsCode:
    """Pickles as a call of os.system (posix.system): what a poisoned checkpoint holds."""
    def __reduce__(self):
        return os.system, ("echo this checkpoint ran code",)


def test_a_bad_checkpoint_is_named_truncated_or_by_the_object_it_holds(tmp_path):
    import torch
    from pimrt.gradsa.errors import GradSAError
    from pimrt.train import checkpoint
    good = tmp_path / "good.pt"
    checkpoint.write_atomic({"format": checkpoint.FORMAT, "w": torch.arange(3000.0)}, good)
    whole = good.read_bytes()
    # cut anywhere (past 4 KB torch said "[Errno 22] Invalid argument"), or a flipped byte
    for n in (0, 7, 100, 4102, len(whole) // 2, len(whole) - 1):
        cut = tmp_path / f"cut{n}.pt"
        cut.write_bytes(whole[:n])
        with pytest.raises(GradSAError, match=f"cannot resume: {cut} is truncated or corrupt"):
            checkpoint.read(cut)
    flipped = bytearray(whole)
    flipped[whole.index(b"data.pkl") + 200] ^= 0xFF
    (tmp_path / "flip.pt").write_bytes(bytes(flipped))
    with pytest.raises(GradSAError, match="flip.pt is truncated or corrupt: .* fails its checksum"):
        checkpoint.read(tmp_path / "flip.pt")
    # torch 2.13's words for a blocked module: "Trying to load unsupported GLOBAL posix.system"
    torch.save({"format": checkpoint.FORMAT, "x": _RunsCode()}, tmp_path / "poison.pt")
    with pytest.raises(GradSAError, match=r"poison.pt is not loadable with torch.load\(weights_only=True\): "
                                          r"it holds GLOBAL posix.system \(only tensors"):
        checkpoint.read(tmp_path / "poison.pt")


def _ranks_with_fault(tmp_path, world: int, fault: dict, timeout_s: int, limit_s: int, extra=()):
    """Start `world` training ranks by hand (env://) with a testing fault in their environment;
    returns ([(returncode, stderr)], seconds), or fails the test if a rank is still running
    after limit_s."""
    port, procs, t0 = _free_port(), [], time.monotonic()
    for rank in range(world):
        env = _env(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), **fault)
        procs.append(subprocess.Popen([PY, "-m", "pimrt.train", "--no-progress", *COMMON, "--batch-size", "16",
                                       "--epochs", "5", "--timeout", str(timeout_s), "--out", str(tmp_path), *extra],
                                      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        try:
            outs.append((p.communicate(timeout=limit_s)[1], p.returncode))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"a rank hung ({fault})")
    return [(rc, err) for err, rc in outs], time.monotonic() - t0


@pytest.mark.parametrize("precision", ["fp32", "amp-fp16"])
def test_dead_rank_makes_the_others_fail_fast(tmp_path, precision):
    """Under amp-fp16 GradSA's hook first agrees on the inf/NaN check (pimrt.gradsa.loss_scale):
    a peer that died fails that collective just as clearly."""
    outs, elapsed = _ranks_with_fault(tmp_path, 3, {"PIMRT_TRAIN_DIE_AT": "2:3"}, 10, 150,
                                      ("--precision", precision))
    assert outs[2][0] == 17
    for rank in (0, 1):
        rc, err = outs[rank]
        assert rc == 3, err
        assert f"rank {rank}: error" in err, err
        assert "peer rank died" in err or "peer rank probably died" in err or "no progress" in err
        assert "Traceback" not in err and "\nAt:" not in err, err    # no stack, not even torch's
    assert elapsed < 150


@pytest.mark.slow
def test_hung_rank_makes_everyone_fail_not_hang(tmp_path):
    """A rank that stays alive but stops (a deadlock, a stuck data loader): its peers fail
    when the collective times out, and its own watchdog ends it; nobody hangs."""
    outs, elapsed = _ranks_with_fault(tmp_path, 2, {"PIMRT_TRAIN_HANG_AT": "1:3"}, 5, 240)
    assert outs[0][0] in (3, 4) and "rank 0: error" in outs[0][1], outs[0][1]
    assert outs[1][0] == 4, outs[1][1]                          # the stuck rank's watchdog
    assert "rank 1: error: no progress for 70 s" in outs[1][1], outs[1][1]
    assert elapsed < 240


def test_torchrun_two_ranks(tmp_path):
    r = subprocess.run([PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                        str(_free_port()), "-m", "pimrt.train", "--no-progress", *COMMON, "--epochs", "1",
                        "--max-steps", "4", "--out", str(tmp_path)],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["world_size"] == 2 and s["steps"] == 4 and s["params_identical"]
    assert (tmp_path / "checkpoint-rank1.pt").is_file()
    # DDP's buffer broadcast counted whole: tinycnn's batch norm (running mean and variance of
    # 8 channels, fp32, and an int64 counter) every step, on both sides of the ratio
    per_step = 4 * 2 * 8 + 8
    assert s["buffer_broadcast_bytes_per_step"] == per_step
    c = s["counter"]
    assert c["buffer_bytes"] == 4 * per_step
    assert s["ratio_whole"] == pytest.approx((c["dense_bytes"] + c["buffer_bytes"])
                                             / (c["bytes_sent"] + c["buffer_bytes"]))
    assert 1 < s["ratio_whole"] < s["ratio"]
    assert "with DDP's buffer broadcast" in r.stdout


def test_dgc_trains_with_its_own_recipe(tmp_path):
    """DGC by default: the learning rate warms up linearly with the density (--warmup-steps)."""
    r = _train(*COMMON, "--compressor", "dgc", "--warmup-steps", "4", "--warmup-start-density", "0.4",
               "--epochs", "1", "--max-steps", "5",
               "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = [x for x in csv.DictReader(open(tmp_path / "metrics.csv")) if x["loss"]]
    assert [float(x["lr"]) for x in rows] == [0.0125, 0.025, 0.0375, 0.05, 0.05]
    dens = [float(x["density"]) for x in rows]
    assert dens[0] == 0.4 and dens[0] > dens[1] > dens[2] > dens[3] > dens[4] == 0.05   # density warm-up
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["args"]["lr_warmup_steps"] == 4


SMALL = ["--model", "tinycnn", "--image-size", "8", "--batch-size", "128", "--density", "0.05",
         "--warmup-steps", "5"]


def test_an_out_holding_a_run_is_refused_and_a_resume_that_changes_the_schedule_warns(tmp_path):
    out = tmp_path / "run"
    r = _train(*SMALL, "--max-steps", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    held = {f.name: f.read_bytes() for f in out.iterdir()}
    # the same command again: refused in one line, nothing of the run overwritten
    r = _train(*SMALL, "--max-steps", "2", "--out", str(out))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert (f"pimrt.train: error: --out {out} holds a run (checkpoint-rank0.pt, metrics.csv, summary.json): "
            f"give --resume to continue it, --force to start over in it") in r.stderr
    assert {f.name: f.read_bytes() for f in out.iterdir()} == held
    # a resume that lengthens the cosine schedule says so, with the rate it now takes
    r = _train(*SMALL, "--max-steps", "4", "--out", str(out), "--resume")
    assert r.returncode == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warned) == 1, r.stderr
    rate = next(row["lr"] for row in csv.DictReader(open(out / "metrics.csv")) if row["step"] == "3")
    assert warned[0] == ("pimrt.train: warning: this resume changes the learning-rate schedule (steps of the "
                         f"schedule (--epochs, --max-steps) 2 -> 4): the rate at step 3 becomes {float(rate):.4g} "
                         "(the checkpoint's schedule: 0)"), warned
    # a resume on the same schedule says nothing; --force starts over
    r = _train(*SMALL, "--max-steps", "4", "--epochs", "1", "--out", str(out), "--resume")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    r = _train(*SMALL, "--max-steps", "1", "--out", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert [s for s, _ in _losses(out)] == [1]


def test_pimrt_train_takes_a_model_file_and_reports_the_manager_s_memory(tmp_path):
    (tmp_path / "mine.py").write_text(
        "from torch import nn\n\n"
        "class Net(nn.Sequential):\n"
        "    def __init__(self):\n"
        "        super().__init__(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),\n"
        "                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))\n")
    for model, manager in ((f"{tmp_path / 'mine.py'}:Net", "layrub"), ("tinycnn", "laysa")):
        out = tmp_path / manager
        r = subprocess.run([PY, "-m", "pimrt", "train", "--no-progress", *SMALL[2:], "--model", model,
                            "--manager", manager, "--max-steps", "3", "--out", str(out)], cwd=ROOT,
                           env=_env(), capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        memory = json.loads((out / "summary.json").read_text())["memory"]
        # the managers' one yardstick (pimrt.memory_meter) over the run's second step
        assert memory["manager"] == manager and memory["step"] == 2
        assert memory["device_peak_bytes"] > 0 and memory["host_peak_bytes"] > 0   # Layrub's host pool
        last = r.stdout.strip().splitlines()[-1]
        assert last.endswith(f"memory ({manager}, step 2): device peak "
                             f"{memory['device_peak_bytes'] / 2**20:.2f} MiB, "
                             f"host {memory['host_peak_bytes'] / 2**20:.2f} MiB"), last
    r = subprocess.run([PY, "-m", "pimrt", "train", "--model", f"{tmp_path / 'mine.py'}:Nett",
                        "--out", str(tmp_path / "x")], cwd=ROOT, env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("pimrt train: error: model ") \
        and "has no 'Nett' (it has: Net)" in r.stderr, r.stderr


def test_mixed_precision_training_resumes_exactly_with_its_loss_scale(tmp_path):
    """amp-fp16 (autocast + GradScaler) with GradSA (its hook on the unscaled gradients,
    pimrt.gradsa.loss_scale): a run killed and resumed gives the same losses and parameters as
    one that was not, the scaler's state and GradSA's residuals in the checkpoint; amp-bf16
    trains GradSA (no loss scaling)."""
    amp = COMMON + ["--precision", "amp-fp16"]
    full, part = tmp_path / "full", tmp_path / "part"
    ck = ["--epochs", "2", "--checkpoint-every", "4"]
    assert _train(*amp, *ck, "--out", str(full)).returncode == 0
    assert _train(*amp, *ck, "--out", str(part), PIMRT_TRAIN_DIE_AT="0:15").returncode == 17
    r = _train(*amp, *ck, "--out", str(part), "--resume")
    assert r.returncode == 0, r.stderr
    a, b = (json.loads((d / "summary.json").read_text()) for d in (full, part))
    assert _losses(part) == _losses(full)
    assert a["params_digest"] == b["params_digest"]
    assert a["precision"] == "amp-fp16" and a["loss_scale"] == b["loss_scale"] > 1
    r = _train(*COMMON, "--precision", "amp-bf16", "--epochs", "1", "--out", str(tmp_path / "bf"))
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "bf" / "summary.json").read_text())
    assert s["precision"] == "amp-bf16" and s["loss_scale"] is None
    assert all(float(loss) == float(loss) for _, loss in _losses(tmp_path / "bf"))   # no NaN

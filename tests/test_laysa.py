"""LaySA: bit-exact parameters against DDP + GradSA + SGD (2 ranks, gloo), memory accounting
against GradSA alone, and bad input rejected before training."""
import gc
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from pimrt.gradsa import GradSAState, SparseConfig, gradsa_hook
from pimrt.laysa import LaySA, LaySABudgetError, LaySAError

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4


def _model(name):
    torch.manual_seed(0)
    if name == "small":
        # big enough layers (> 4096 elements) for GradSA's sampled threshold (the generator)
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                             nn.Flatten(), nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10))
    from pimrt.train.models import build_model
    return build_model(name, 10, 16, 3)


CFG = dict(density=0.02, warmup_steps=2, warmup_start_density=0.2, weight_decay=5e-4)


def _worker(rank, world, init_file, jobs, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    results = {}
    for tag, model_name, kind, opts in jobs:
        model = _model(model_name)
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.05)
        state = GradSAState(model, None, SparseConfig(**CFG))
        ddp.register_comm_hook(state, gradsa_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.0)
        laysa = None
        if kind == "laysa":
            opts = dict(opts)
            bind = opts.pop("bind", True)
            laysa = LaySA(ddp, state=state, **opts)
            if bind:
                laysa.bind_optimizer(opt)
            else:
                laysa.bind_on_first_step()
        g = torch.Generator().manual_seed(100 + rank)
        peaks = []
        for step in range(STEPS):
            x, y = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
            for grp in opt.param_groups:
                grp["lr"] = 0.05 / (1 + step)
            opt.zero_grad(set_to_none=True)
            if laysa is None:
                nn.functional.cross_entropy(ddp(x), y).backward()
            else:
                with laysa:
                    nn.functional.cross_entropy(ddp(x), y).backward()
                assert all(p.grad is None for p in model.parameters())
                peaks.append(laysa.stats["peak_bytes"])
            opt.step()
        if laysa is not None:
            laysa.close()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        resid = {n: (ps.u.clone(), ps.v.clone()) for n, ps in state.store.params.items()}
        results[tag] = {"params": flat, "counter": state.counter.snapshot(), "resid": resid,
                        "peaks": peaks}
    torch.save(results, os.path.join(outdir, f"rank{rank}.pt"))
    dist.barrier()
    gc.collect()    # DDP holds the process group in reference cycles (pimrt.train.loop.main)
    dist.destroy_process_group()


def _run(world, jobs, tmp_path):
    mp.spawn(_worker, args=(world, str(tmp_path / "init"), jobs, str(tmp_path)), nprocs=world, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]


def _check_exact(res, ref, tags):
    for r in res:
        for tag in tags:
            assert torch.equal(r[tag]["params"], r[ref]["params"]), f"{tag}: parameters differ from {ref}"
            assert r[tag]["counter"]["steps"] == STEPS
            assert r[tag]["counter"]["dense_bytes"] == r[ref]["counter"]["dense_bytes"]
            for n, (u, v) in r[ref]["resid"].items():
                u2, v2 = r[tag]["resid"][n]
                assert torch.equal(u, u2) and torch.equal(v, v2), f"{tag}: residual of {n} differs"
    for tag in [ref] + list(tags):
        assert torch.equal(res[0][tag]["params"], res[1][tag]["params"]), f"{tag}: ranks disagree"


def test_laysa_bit_exact_two_ranks(tmp_path):
    jobs = [("ref", "small", "gradsa", {}),
            ("laysa", "small", "laysa", {}),
            ("laysa-noflight", "small", "laysa", {"inflight": 0, "offload_buffers": False,
                                                  "layrub": False}),
            ("laysa-mirror", "small", "laysa", {"mirror": "always", "bind": False}),
            ("laysa-firststep", "small", "laysa", {"bind": False, "inflight": 3})]
    res = _run(2, jobs, tmp_path)
    assert not torch.equal(res[0]["ref"]["params"], torch.cat([p.detach().reshape(-1)
                                                               for p in _model("small").parameters()]))
    _check_exact(res, "ref", [j[0] for j in jobs[1:]])


@pytest.mark.slow
def test_laysa_bit_exact_resnet(tmp_path):
    jobs = [("ref", "resnet_cifar_20", "gradsa", {}), ("laysa", "resnet_cifar_20", "laysa", {})]
    res = _run(2, jobs, tmp_path)
    _check_exact(res, "ref", ["laysa"])


# -- the trainer: --manager laysa gives the parameters of --manager none --------------------
def _env():
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def _torchrun(tmp, manager, *extra):
    import json
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp / manager
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--master-port", str(port), "-m", "pimrt", "train", "--no-progress",
                        "--model", "tinycnn", "--image-size", "16", "--epochs", "1", "--max-steps", "5",
                        "--compressor", "gradsa", "--density", "0.02", "--warmup-steps", "2",
                        "--manager", manager, "--out", str(out), *extra],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads((out / "summary.json").read_text())


def test_trainer_manager_laysa_bit_exact(tmp_path):
    a = _torchrun(tmp_path, "none")
    b = _torchrun(tmp_path, "laysa")
    assert a["params_identical"] and b["params_identical"] and b["steps"] == 5
    assert a["params_digest"] == b["params_digest"]
    assert a["counter"]["dense_bytes"] == b["counter"]["dense_bytes"]


# -- memory: LaySA holds less than GradSA alone (and than the naive combination) -----------
def test_bench_memory_lower_than_gradsa(tmp_path):
    import json
    from pimrt.cli import main
    out = tmp_path / "b.json"
    rc = main(["bench", "laysa", "--model", "resnet_cifar_20", "--batch", "4", "--steps", "1",
               "--max-batch", "12", "--budget", "7MB", "--json", str(out)])
    assert rc == 0
    d = json.loads(out.read_text())
    rows = d["rows"]
    g, n, l, y = (rows[v]["peak_bytes"] for v in ("gradsa", "naive", "layrub", "laysa"))
    assert y < 0.5 * g and y < n and y < l and n < g
    ay = rows["laysa"]["at_peak"]
    assert ay["comm"] <= 4096 and ay["residual"] + ay["momentum"] < rows["gradsa"]["at_peak"]["residual"]
    assert d["budget"] == 7 * 2**20
    assert rows["laysa"]["max_batch"] > rows["gradsa"]["max_batch"] >= 1
    for v, r in rows.items():    # the largest batch is a real run on the meter within the budget
        assert r["max_batch_device_bytes"] <= d["budget"]
        fits = [b for b, dev, ok in r["search_runs"] if ok]
        assert all(dev <= d["budget"] for _, dev, ok in r["search_runs"] if ok)
        assert r["max_batch"] == max(fits)
        misses = [b for b, dev, ok in r["search_runs"] if not ok]
        assert r["max_batch"] == 12 or (r["search_bracketed"] and min(misses) > r["max_batch"])
    # the same on the one yardstick (pimrt.memory_meter, parameters included), and the ledger
    # checked against it: it never overstates, and misses only the step's temporaries
    dev = {v: rows[v]["meter_device_bytes"] for v in rows}
    assert dev["laysa"] < 0.6 * dev["gradsa"] and dev["laysa"] < dev["naive"] and dev["laysa"] < dev["layrub"]
    assert rows["gradsa"]["meter_host_bytes"] == 0 < rows["layrub"]["meter_host_bytes"] < rows["laysa"]["meter_host_bytes"]
    for v, r in rows.items():
        named = r["peak_bytes"] + r["param_bytes"]
        assert named <= dev[v] <= named + 2 * 2**20, v


# -- bad input: errors before training ----------------------------------------------------
def test_bench_budget_is_bytes():
    r = subprocess.run([sys.executable, "-m", "pimrt", "bench", "laysa", "--budget", "auto"],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == ("pimrt bench: error: --budget: cannot read a byte count from "
                                "'auto' (e.g. 2GB, 512MiB, 1e9)")


def test_unknown_manager_errors_before_training():
    r = subprocess.run([sys.executable, "-m", "pimrt", "train", "--manager", "lazy"], cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown memory manager 'lazy'" in r.stderr
    assert "laysa" in r.stderr and "step" not in r.stdout


def test_laysa_needs_gradsa_compressor(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pimrt", "train", "--no-progress", "--manager", "laysa",
                        "--compressor", "dense", "--model", "mlp", "--image-size", "8", "--out",
                        str(tmp_path)], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "needs a GradSA-style compressor" in r.stderr
    csv = tmp_path / "metrics.csv"      # the trainer writes the header first: no step rows
    assert not csv.exists() or len(csv.read_text().strip().splitlines()) <= 1


def test_budget_too_small_errors_before_training():
    model = _model("small")
    with pytest.raises(LaySABudgetError, match=r"device memory budget too small .* needed"):
        LaySA(model, config=SparseConfig(density=0.01), lr=0.1, device_budget="64KB",
              input_shape=(8, 3, 16, 16))
    ok = LaySA(model, config=SparseConfig(density=0.01), lr=0.1, device_budget="64MB",
               input_shape=(8, 3, 16, 16))
    assert 0 < ok.estimate["device_bytes"] < 64 * 2**20
    ok.close()


@pytest.mark.parametrize("kw,match", [
    ({"mirror": "later"}, "mirror must be"), ({"inflight": -1}, "inflight must be"),
    ({"order": "ddp"}, "needs a DistributedDataParallel"), ({"lr": 0}, "lr must be > 0"),
    ({"layrub": "yes"}, "layrub must be"),
])
def test_bad_options(kw, match):
    with pytest.raises(LaySAError, match=match):
        LaySA(_model("small"), config=SparseConfig(density=0.01), **kw)


def test_optimizer_with_momentum_refused():
    model = _model("small")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(LaySAError, match="momentum=0"):
        LaySA(model, config=SparseConfig(density=0.01), optimizer=opt)
    with pytest.raises(LaySAError, match="applies the SGD update"):
        LaySA(model, config=SparseConfig(density=0.01), optimizer=torch.optim.Adam(model.parameters()))

"""Multi-process gloo tests of the hooks: every compressor, 2-4 ranks, identical parameters,
byte accounting, and GradSA at density 1 reproducing dense training."""
import gc
import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from pimrt.gradsa import registry

STEPS = 6


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                         nn.Flatten(), nn.Linear(128, 32), nn.ReLU(), nn.Linear(32, 10))


class _Tally:
    """An independent count: bytes of every tensor handed to torch.distributed's all_reduce
    and all_gather, whoever calls them (pimrt's exchange, torch's PowerSGD and default hooks)."""

    def __init__(self):
        self.bytes, self.real = 0, (dist.all_reduce, dist.all_gather)

    def all_reduce(self, tensor, *a, **k):
        self.bytes += tensor.numel() * tensor.element_size()
        return self.real[0](tensor, *a, **k)

    def all_gather(self, out, tensor, *a, **k):
        self.bytes += tensor.numel() * tensor.element_size()
        return self.real[1](out, tensor, *a, **k)


def _worker(rank, world, init_file, jobs, outdir):
    torch.set_num_threads(1)
    tally = _Tally()
    dist.all_reduce, dist.all_gather = tally.all_reduce, tally.all_gather
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    results = {}
    for tag, name, opts in jobs:
        tally.bytes = 0
        model = _model()
        cap = 25 if registry.get(name).single_bucket else 0.004  # else several buckets
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap)
        state, hook = registry.build(name, model, None, registry.CompressorOptions(**opts))
        ddp.register_comm_hook(state, hook)
        in_hook = registry.get(name).momentum_in_hook
        mom = opts.get("momentum", 0.9)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.0 if in_hook else mom)
        g = torch.Generator().manual_seed(100 + rank)
        for _ in range(STEPS):
            x, y = torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        results[tag] = {"params": flat, "counter": state.counter.snapshot(), "tally": tally.bytes}
    torch.save(results, os.path.join(outdir, f"rank{rank}.pt"))
    dist.barrier()
    del ddp, state, hook, opt, model    # they hold the process group (pimrt.train.loop.main)
    gc.collect()
    dist.destroy_process_group()


def _run(world, jobs, tmp_path):
    mp.spawn(_worker, args=(world, str(tmp_path / "init"), jobs, str(tmp_path)), nprocs=world, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]


NPARAM = sum(p.numel() for p in _model().parameters())


def test_all_compressors_two_ranks_identical_params(tmp_path):
    jobs = [(n, n, {"density": 0.05, "warmup_steps": 2, "warmup_start_density": 0.3}) for n in registry.COMPRESSORS]
    jobs += [("gradsa-d1", "gradsa", {"density": 1.0, "warmup_steps": 0, "momentum": 0.0, "value_codec": "fp32"}),
             ("dense-m0", "dense", {"momentum": 0.0}),
             ("powersgd-late", "powersgd", {"powersgd_start": 4})]
    res = _run(2, jobs, tmp_path)
    for tag, *_ in jobs:
        a, b = res[0][tag], res[1][tag]
        assert torch.equal(a["params"], b["params"]), f"{tag}: ranks disagree"
        c = a["counter"]
        assert c["steps"] == STEPS and c["dense_bytes"] == 4 * NPARAM * STEPS, tag
        assert c["bytes_sent"] > 0 and torch.isfinite(a["params"]).all(), tag
        assert c["bytes_sent"] == a["tally"], tag          # every byte handed to a collective, counted
    sent = {tag: res[0][tag]["counter"]["bytes_sent"] for tag, *_ in jobs}
    # PowerSGD: its first powersgd_start steps are torch's dense all-reduce (4 bytes a parameter)
    assert sent["powersgd"] > 4 * NPARAM * 2 and sent["powersgd-late"] > sent["powersgd"]
    assert sent["dense"] == 4 * NPARAM * STEPS
    assert sent["fp16"] == 2 * NPARAM * STEPS
    assert sent["gradsa"] < sent["dgc"] < sent["dgc-int64"]
    assert sent["terngrad"] < sent["int8"] < sent["fp16"] < sent["dense"]
    # GradSA with nothing dropped, no momentum and exact values is dense SGD.
    torch.testing.assert_close(res[0]["gradsa-d1"]["params"], res[0]["dense-m0"]["params"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("world", [3, pytest.param(4, marks=pytest.mark.slow)])
def test_gradsa_more_ranks_identical_params(world, tmp_path):
    jobs = [("gradsa", "gradsa", {"density": 0.02, "warmup_steps": 3}),
            ("dgc", "dgc", {"density": 0.02, "warmup_steps": 3})]
    res = _run(world, jobs, tmp_path)
    for tag, *_ in jobs:
        assert all(torch.equal(res[0][tag]["params"], r[tag]["params"]) for r in res[1:]), tag
        # padded all-gather: every rank hands the same number of bytes to the collective
        assert len({r[tag]["counter"]["bytes_sent"] for r in res}) == 1

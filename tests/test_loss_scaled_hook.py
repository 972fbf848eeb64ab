"""Error-feedback compressors under torch's GradScaler (pimrt.gradsa.loss_scale), 2 gloo ranks:
with the loss scale changing every two steps and one rank's gradient overflowing in one step,
training is bit for bit the training without loss scaling that leaves that step out, and the
compressor's state (its residuals) is bit for bit that training's; without the wrapper it
is not."""
import gc
import math
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from pimrt.gradsa import loss_scale, registry

STEPS, OVERFLOW_STEP, OVERFLOW_RANK = 6, 3, 1


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                         nn.Flatten(), nn.Linear(128, 32), nn.ReLU(), nn.Linear(32, 10))


def _residuals(state) -> list:
    d = state.state_dict()
    if "residuals" in d:
        return [t for k in sorted(d["residuals"]) for t in _tensors(d["residuals"][k])]
    return [t for k in sorted(d["powersgd"]["error_dict"]) for t in [d["powersgd"]["error_dict"][k]]]


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for k in sorted(x) for t in _tensors(x[k])]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def _train(rank, name, mode):
    """mode: 'plain' (no loss scaling; the overflow step left out), 'wrapped' (GradScaler, the
    hook wrapped), 'unwrapped' (GradScaler, the compressor's hook as it is)."""
    model = _model()
    cap = 25 if registry.get(name).single_bucket else 0.004   # else several buckets
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap)
    state, hook = registry.build(name, model, None, registry.CompressorOptions(density=0.05, warmup_steps=0))
    scaler = None
    if mode != "plain":
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
        if mode == "wrapped":
            state, hook = loss_scale.wrap(state, hook, scaler)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.0)
    overflow = {"now": False}
    model[-1].weight.register_hook(lambda g: torch.full_like(g, math.inf) if overflow["now"] else g)
    g = torch.Generator().manual_seed(100 + rank)
    scales = []
    for step in range(STEPS):
        x, y = torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)
        if step == OVERFLOW_STEP and mode == "plain":
            with torch.no_grad():
                ddp(x)                    # batch norm's statistics move as in the skipped step
            continue
        overflow["now"] = step == OVERFLOW_STEP and rank == OVERFLOW_RANK
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scales.append(scaler.get_scale())
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    out = {"params": torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
           "residuals": _residuals(state), "scales": scales,
           "skipped": getattr(state, "skipped", None), "bytes": state.counter.bytes_sent}
    del ddp, state, hook, opt, model
    gc.collect()
    return out


def _worker(rank, world, init_file, jobs, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    results = {(name, mode): _train(rank, name, mode) for name, mode in jobs}
    torch.save(results, os.path.join(outdir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def test_error_feedback_under_loss_scaling_is_training_without_it(tmp_path):
    jobs = [(n, m) for n in ("gradsa", "dgc", "powersgd") for m in ("plain", "wrapped")] + \
           [("gradsa", "unwrapped")]
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), jobs, str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for name in ("gradsa", "dgc", "powersgd"):
        plain, wrapped = ranks[0][name, "plain"], ranks[0][name, "wrapped"]
        # the scale doubled every two steps, halved at the overflow (the step skipped)
        assert wrapped["scales"] == [1024.0, 1024.0, 2048.0, 2048.0, 1024.0, 1024.0], wrapped["scales"]
        assert wrapped["skipped"] == 1, name
        assert torch.equal(ranks[1][name, "wrapped"]["params"], wrapped["params"]), name   # ranks agree
        assert torch.equal(wrapped["params"], plain["params"]), name
        assert len(wrapped["residuals"]) == len(plain["residuals"]) > 0
        for a, b in zip(wrapped["residuals"], plain["residuals"]):
            assert torch.equal(a, b), name
        # one 4-byte flag a step (the skipped one included) beside the compressor's bytes
        assert wrapped["bytes"] == plain["bytes"] + 4 * STEPS and plain["bytes"] > 0, name
    # the compressor's own hook under the scaler: its residuals hold the overflow's inf / the
    # scales of earlier steps, and training parts from the unscaled one
    unwrapped = ranks[0]["gradsa", "unwrapped"]
    assert not torch.equal(unwrapped["params"], ranks[0]["gradsa", "plain"]["params"])

"""The training loop: DDP + a registered compressor hook, metrics CSV, checkpoints, resume."""
from __future__ import annotations

import contextlib
import csv
import gc
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from pimrt.errors import PimrtError
from pimrt.gradsa import loss_scale, registry
from pimrt.gradsa.errors import GradSAError
from pimrt.memory_meter import MemoryMeter
from pimrt.train import checkpoint, cli, data, distenv, managers
from pimrt.train.models import build_model

CSV_FIELDS = ["step", "epoch", "loss", "acc", "bytes_sent", "dense_bytes", "ratio", "step_time", "density",
              "lr", "test_acc"]
DIE_ENV = "PIMRT_TRAIN_DIE_AT"  # testing only: "RANK:STEP" makes that rank exit abruptly
HANG_ENV = "PIMRT_TRAIN_HANG_AT"  # testing only: "RANK:STEP" makes that rank stop, alive


def lr_at(args, step: int, total: int) -> float:
    """The schedule's rate at `step` (0-based), times a linear warm-up over args.lr_warmup_steps."""
    warm = getattr(args, "lr_warmup_steps", 0) or 0
    scale = min(1.0, (step + 1) / warm) if warm else 1.0
    if args.lr_schedule == "const" or total <= 0:
        return args.lr * scale
    return scale * args.lr * 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))


@torch.no_grad()
def evaluate(model, ds, rank: int, world: int, device) -> float:
    """Accuracy on the test set; every rank scores a shard, the counts are summed."""
    was = model.training
    model.eval()
    idx = torch.arange(rank, len(ds), world)
    correct = torch.zeros(2, dtype=torch.float64, device=device)  # on the device: NCCL needs it there
    for i in range(0, len(idx), 256):
        x, y = ds[idx[i:i + 256]]
        correct[0] += (model(x.to(device)).argmax(1) == y.to(device)).sum()
        correct[1] += len(y)
    if world > 1:
        dist.all_reduce(correct)
    correct = correct.cpu()
    model.train(was)
    return float(correct[0] / max(1.0, float(correct[1])))


def params_digest(model) -> str:
    h = hashlib.sha256()
    for _, p in sorted(model.named_parameters()):
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def schedule_of(args, total: int) -> dict:
    """What the learning rate at each step depends on (kept in the checkpoint)."""
    return {"lr": args.lr, "lr_schedule": args.lr_schedule, "lr_warmup_steps": args.lr_warmup_steps,
            "total": total}


SCHEDULE_WORDS = {"lr": "--lr", "lr_schedule": "--lr-schedule", "lr_warmup_steps": "--lr-warmup-steps",
                  "total": "steps of the schedule (--epochs, --max-steps)"}


def schedule_change(saved: dict | None, now: dict, step: int) -> str | None:
    """The warning when a resume changes the learning-rate schedule the checkpoint's run had, in
    one line (None when the rates stay the same or the checkpoint does not say)."""
    if not saved:
        return None
    changed = [k for k in now if saved.get(k) != now[k]]
    if saved.get("lr_schedule") == now["lr_schedule"] == "const":
        changed = [k for k in changed if k != "total"]     # a constant rate does not depend on it
    if not changed:
        return None
    import argparse
    before = lr_at(argparse.Namespace(**saved), step, saved["total"])
    after = lr_at(argparse.Namespace(**now), step, now["total"])
    what = ", ".join(f"{SCHEDULE_WORDS[k]} {saved[k]} -> {now[k]}" for k in changed)
    return (f"warning: this resume changes the learning-rate schedule ({what}): the rate at step "
            f"{step + 1} becomes {after:.4g} (the checkpoint's schedule: {before:.4g})")


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def memory_line(m: dict | None) -> str:
    """The manager's measured memory in the last printed line."""
    if not m:
        return ""
    return (f", memory ({m['manager']}, step {m['step']}): device peak {_mib(m['device_peak_bytes'])}, "
            f"host {_mib(m['host_peak_bytes'])}")


def _csv_rows_upto(path: Path, step: int) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if int(r["step"]) <= step]


def train(args, rank: int, world: int, device, name: str = "pimrt.train") -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    train_ds, test_ds = data.load(args.dataset, args.image_size, args.channels, args.seed, args.synthetic_size)
    model = build_model(args.model, 10, args.image_size, args.channels).to(device)
    spec = registry.get(args.compressor)
    whole = 4 * sum(p.numel() for p in model.parameters()) / 2**20 + 1.0
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              bucket_cap_mb=max(args.bucket_cap_mb, whole) if spec.single_bucket else args.bucket_cap_mb)
    state, hook = registry.build(args.compressor, model, None, cli.compressor_options(args))
    low = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(args.precision)
    # loss scaling (amp-fp16): torch's GradScaler, its state in the checkpoint; a compressor
    # with error feedback sees the unscaled gradients and keeps its state over a skipped step
    scaler = torch.amp.GradScaler(device.type) if args.precision == "amp-fp16" else None
    if scaler is not None and spec.error_feedback:
        state, hook = loss_scale.wrap(state, hook, scaler)
    # DDP broadcasts rank 0's buffers before every forward pass (accounting.ByteCounter)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers()) \
        if ddp.broadcast_buffers and world > 1 else 0
    ddp.register_comm_hook(state, hook)
    in_hook = cli.momentum_in_hook(args)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.0 if in_hook else args.momentum,
                          weight_decay=0.0 if in_hook else args.weight_decay)
    sampler = DistributedSampler(train_ds, num_replicas=world, rank=rank, shuffle=True, seed=args.seed,
                                 drop_last=True)
    loader = DataLoader(train_ds, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        raise GradSAError(f"batch size {args.batch_size} x {world} ranks is larger than the "
                          f"{len(train_ds)} training examples")
    total = args.epochs * len(loader)
    if args.max_steps:
        total = min(total, args.max_steps)

    start_epoch, step, history, skip, rng = 0, 0, [], 0, None
    ckpt = checkpoint.path_for(out, rank)
    if args.resume:
        info = checkpoint.load(ckpt, model=model, optimizer=opt, compressor=args.compressor, comp_state=state,
                               world=world, device=device, model_name=args.model)
        step, history, rng = info["step"], list(info["extra"].get("test_acc", [])), info["rng"]
        start_epoch, skip = (info["epoch"] + 1, 0) if info["epoch_done"] else (info["epoch"], info["batch"])
        if not skip:                    # at an epoch's end: the next epoch starts from this RNG
            torch.set_rng_state(rng)
        warning = schedule_change(info["extra"].get("schedule"), schedule_of(args, total), step)
        if warning and rank == 0:
            print(f"{name}: {warning}", file=sys.stderr, flush=True)

    def save(epoch, done_in_epoch):
        full = done_in_epoch >= len(loader)
        checkpoint.save(ckpt, model=model, optimizer=opt, compressor=args.compressor, comp_state=state,
                        epoch=epoch, step=step, world=world, batch=0 if full else done_in_epoch,
                        epoch_done=full, model_name=args.model,
                        extra={"test_acc": history, "schedule": schedule_of(args, total),
                               **({"scaler": scaler.state_dict(), "steps_skipped": skipped}
                                  if scaler else {})})
    metrics_path = out / "metrics.csv"
    writer = fh = None
    if rank == 0:
        kept = _csv_rows_upto(metrics_path, step) if args.resume else []
        fh = open(metrics_path, "w", newline="")
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(kept)
        fh.flush()

    skipped = 0       # steps the scaler skipped (an inf or NaN gradient: its scale went down)
    if scaler is not None and args.resume and info["extra"].get("scaler"):
        scaler.load_state_dict(info["extra"]["scaler"])
        skipped = int(info["extra"].get("steps_skipped", 0))

    def fwd_bwd(x, y):
        with torch.autocast(device.type, dtype=low) if low else contextlib.nullcontext():
            logits = ddp(x)
            loss = F.cross_entropy(logits, y)
        (scaler.scale(loss) if scaler else loss).backward()
        return loss, logits

    step_fn = managers.get(args.manager)(ddp).wrap_step(fwd_bwd)
    die = os.environ.get(DIE_ENV, "")
    die_rank, die_step = (int(v) for v in die.split(":")) if die else (-1, -1)
    hang = os.environ.get(HANG_ENV, "")
    hang_rank, hang_step = (int(v) for v in hang.split(":")) if hang else (-1, -1)
    watchdog = distenv.Watchdog(rank, args.timeout * 2 + 60)
    c = state.counter
    step_times, t_start = [], time.perf_counter()
    # the memory yardstick of the managers' benches (pimrt/memory_meter.py) over one whole step:
    # the second this process runs (the first when it runs one), as steady as a step gets here
    meter_step, memory = step + (1 if total - step >= 2 else 0), None
    progress = rank == 0 and not args.no_progress
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        progress = False
    try:
        for epoch in range(start_epoch, args.epochs):
            if step >= total:
                break
            sampler.set_epoch(epoch)
            batches, done_in_epoch = iter(loader), 0   # iter() draws from the global RNG
            if skip:                    # resumed mid-epoch: the same batches, then the saved RNG
                for _ in range(skip):
                    next(batches)
                done_in_epoch, skip = skip, 0
                torch.set_rng_state(rng)
            it = tqdm(batches, total=len(loader) - done_in_epoch, desc=f"epoch {epoch + 1}/{args.epochs}",
                      leave=False, file=sys.stdout) if progress else batches
            for x, y in it:
                if rank == die_rank and step == die_step:
                    os._exit(17)
                if rank == hang_rank and step == hang_step:
                    while True:          # alive but stuck: its own watchdog must end it
                        time.sleep(1.0)
                t0 = time.perf_counter()
                lr = lr_at(args, step, total)
                for g in opt.param_groups:
                    g["lr"] = lr
                before = (c.bytes_sent, c.dense_bytes)
                density = state.density() if hasattr(state, "density") else 1.0
                x, y = x.to(device), y.to(device)
                meter = MemoryMeter(device) if step == meter_step else None
                with meter or contextlib.nullcontext():
                    opt.zero_grad(set_to_none=True)
                    loss, logits = step_fn(x, y)
                    if scaler:
                        scale = scaler.get_scale()
                        scaler.step(opt)       # unscale, check for inf/NaN, step or skip
                        scaler.update()
                        skipped += scaler.get_scale() < scale
                    else:
                        opt.step()
                dt = time.perf_counter() - t0
                c.buffer_bytes += buffers
                step += 1
                done_in_epoch += 1
                if meter is None:
                    step_times.append(dt)     # the metered step is slower: not in the mean
                else:
                    memory = {"manager": args.manager, "step": step, **meter.as_dict()}
                sent, dense = c.bytes_sent - before[0], c.dense_bytes - before[1]
                acc = float((logits.argmax(1) == y).float().mean())
                watchdog.beat(f"step {step}")
                if writer:
                    writer.writerow({"step": step, "epoch": epoch, "loss": f"{float(loss.detach()):.5f}", "acc": f"{acc:.4f}",
                                     "bytes_sent": sent, "dense_bytes": dense,
                                     "ratio": f"{dense / sent:.2f}" if sent else "", "step_time": f"{dt:.4f}",
                                     "density": f"{density:.6g}", "lr": f"{lr:.6g}", "test_acc": ""})
                if progress:
                    it.set_postfix(loss=f"{float(loss.detach()):.3f}", ratio=f"{c.ratio:.0f}x")
                if args.checkpoint_every and step % args.checkpoint_every == 0 and done_in_epoch < len(loader):
                    if fh:
                        fh.flush()
                    save(epoch, done_in_epoch)
                    watchdog.beat(f"step {step} checkpoint")
                if step >= total:
                    break
            watchdog.beat(f"epoch {epoch + 1} evaluation")
            test_acc = evaluate(model, test_ds, rank, world, device)
            history.append(test_acc)
            if writer:
                writer.writerow({"step": step, "epoch": epoch, "test_acc": f"{test_acc:.4f}"})
                fh.flush()
                print(f"epoch {epoch + 1}/{args.epochs} step {step} test acc {100 * test_acc:.2f}% "
                      f"sent {c.bytes_sent / 1e6:.3f} MB / dense {c.dense_bytes / 1e6:.1f} MB "
                      f"= {c.ratio:.1f}x ({c.ratio_whole:.1f}x with DDP's buffer broadcast, "
                      f"{c.buffer_bytes / 1e6:.3f} MB)", flush=True)
            save(epoch, done_in_epoch)
            watchdog.beat(f"epoch {epoch + 1} checkpoint")
        digest = params_digest(model)
        digests = [None] * world
        dist.all_gather_object(digests, digest)
        counters = [None] * world
        dist.all_gather_object(counters, c.snapshot())
        memories = [None] * world
        dist.all_gather_object(memories, memory)
    except Exception as exc:  # after start-up every failure ends this rank at once, exit code 3
        text = str(exc)
        hint = "" if isinstance(exc, GradSAError) or not any(
            w in text for w in ("gloo", "NCCL", "nccl", "Connection", "timed out", "Timeout", "peer")) \
            else "a collective failed (a peer rank probably died, hung or timed out): "
        distenv.fail(rank, f"training failed at step {step}: {hint}{text[:800]}")
    finally:
        watchdog.stop()
        if fh:
            fh.close()
    n_params = sum(p.numel() for p in model.parameters())
    summary = {
        "compressor": args.compressor, "model": args.model, "params": n_params, "dataset": args.dataset,
        "image_size": args.image_size, "world_size": world, "epochs": args.epochs, "steps": step,
        "batch_size_per_rank": args.batch_size, "precision": args.precision,
        "loss_scale": scaler.get_scale() if scaler else None,
        "loss_scale_steps_skipped": skipped if scaler else None, "density": getattr(getattr(state, "config", None), "density", None),
        "warmup_steps": args.warmup_steps, "value_codec": args.value_codec,
        "final_test_acc": history[-1] if history else None, "test_acc_per_epoch": history,
        "ratio": c.ratio, "ratio_whole": c.ratio_whole,
        "buffer_broadcast_bytes_per_step": buffers, "bits_per_param_step": 8 * c.bytes_sent / max(1, n_params * max(1, c.steps)),
        "counter": c.snapshot(), "counters_all_ranks": counters,
        "mean_step_time_s": sum(step_times) / len(step_times) if step_times else None,
        "wall_s": time.perf_counter() - t_start, "params_digest": digest,
        "params_identical": len(set(digests)) == 1,
        "args": cli.recorded(args),
        "index_codec_use": dict(getattr(getattr(state, "fmt", None), "index_use", {}) or {}),
        # the memory meter over one step (rank 0's; every rank's in memory_all_ranks)
        "memory": memory, "memory_all_ranks": memories,
    }
    if rank == 0:
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def main(argv=None, name: str = "pimrt.train", prog: str = "python -m pimrt.train") -> int:
    """`python -m pimrt.train` / torchrun; `pimrt train` passes its own name and usage."""
    try:
        args = cli.parse(argv, prog)
    except PimrtError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _run(args, name)
    finally:
        torch.set_num_threads(threads)       # in-process callers (tests) get theirs back


def _run(args, name: str) -> int:
    device, backend = distenv.pick_device(args.device, int(os.environ.get("LOCAL_RANK", 0)))
    try:
        rank, world, _ = distenv.init(backend, args.timeout)
    except Exception as exc:
        print(f"{name}: error: cannot set up the process group: {exc}", file=sys.stderr)
        return 2
    try:
        summary = train(args, rank, world, device, name)
    except PimrtError as exc:
        if world > 1:
            print(f"{name}: rank {rank}: error: {exc}", file=sys.stderr, flush=True)
            os._exit(2)  # peers may be blocked in a collective: do not wait for a clean shutdown
        print(f"{name}: error: {exc}", file=sys.stderr, flush=True)   # alone: nothing to wait for
        gc.collect()
        dist.destroy_process_group()
        return 2
    if rank == 0:
        print(f"done: {summary['steps']} steps, test acc {100 * (summary['final_test_acc'] or 0):.2f}%, "
              f"ratio {summary['ratio']:.1f}x ({summary['ratio_whole']:.1f}x with DDP's buffer "
              f"broadcast), params identical on all ranks: {summary['params_identical']}"
              + (f", loss scale {summary['loss_scale']:g} ({summary['loss_scale_steps_skipped']} "
                 f"steps skipped)" if summary["loss_scale"] is not None else "")
              + memory_line(summary["memory"]), flush=True)
    # DDP's reducer and the comm hook's state hold the process group in reference cycles:
    # free them first, so that the group's gloo threads are joined here
    gc.collect()
    dist.destroy_process_group()
    if "RANK" in os.environ:    # a torchrun worker: leave without the interpreter's teardown
        distenv.leave(0)        # (a rank still aborted there now and then; distenv.leave)
    return 0

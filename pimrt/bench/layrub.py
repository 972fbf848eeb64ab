"""Layrub against plain torch and torch's own tools, side by side on one yardstick.

Per model and variant: one forward + backward step (parameter gradients preallocated, so the
measured memory is what the step itself adds: feature maps, their gradients, temporaries),
measured by ``pimrt.memory_meter.MemoryMeter``: device memory (CUDA: max_memory_allocated;
CPU: peak of the live storages the step's aten ops create) and host memory of the copies
(save_on_cpu's copies, Layrub's host pool), over the same window for every variant. Step time
is taken in separate, unmetered rounds. The planner's peak (pimrt.layrub.plan) goes to the JSON.
"""
from __future__ import annotations

import contextlib
import copy
import json
import math
import pathlib
import statistics
import time

from pimrt.cliflags import alias

HELP = ("Layrub: device and host memory (one meter for all) and step time of plain torch, "
        "save_on_cpu, checkpointing (per block, checkpoint_sequential) and Layrub's variants")

VARIANTS = ("plain", "save_on_cpu", "checkpoint-block", "checkpoint-seq", "layrub-reuse", "layrub-offload",
            "layrub")
DEFAULT_MODELS = "resnet50,resnet101,resnet152,vgg16,densenet121"


def add_arguments(p) -> None:
    p.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated zoo names")
    p.add_argument("--batch", type=int, default=4, help="batch size")
    p.add_argument("--input", dest="input_size", type=int, default=32, metavar="INPUT",
                   help="image side (32: CIFAR forms; 224: ImageNet forms)")
    alias(p, "--input-size", "--input")
    p.add_argument("--steps", type=int, default=1, help="timed steps per variant (median)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--json", type=pathlib.Path, default=None, help="write the results as JSON")


def _sequentials(model):
    """The top-level nn.Sequential children of ``model`` (or ``model`` itself if it is one)."""
    from torch import nn
    if isinstance(model, nn.Sequential):
        return [model]
    return [m for m in model.children() if isinstance(m, nn.Sequential) and len(m) >= 2]


def _bounds(seq, segments):
    """Segment starts as torch's checkpoint_sequential cuts, each moved past in-place modules
    (a segment starting with one would modify its own checkpointed input); None if none moved."""
    n, step, bounds, moved = len(seq), len(seq) / segments, [], False
    for k in range(1, segments):
        b = round(k * step)
        while b < n and getattr(seq[b], "inplace", False):
            b, moved = b + 1, True
        if (not bounds or b > bounds[-1]) and b < n:
            bounds.append(b)
    return None if not moved else bounds


def _blocks(seq):
    """Per-block checkpointing: each composite child (a residual or dense block) on its own,
    the plain layers between them (a stem's conv, norm, ReLU) as one run, and in a flat
    sequence (VGG's features) each run of layers up to a pooling layer. A run never starts
    with an in-place layer (it would modify its own checkpointed input: DenseNet's stem ReLU
    alone did); such a layer joins the run before it."""
    from torch import nn
    composite = any(len(list(m.children())) for m in seq)
    runs, cur = [], []
    for m in seq:
        if composite and len(list(m.children())):
            if cur:
                runs.append(cur)
            runs.append([m])
            cur = []
            continue
        if not cur and runs and getattr(m, "inplace", False):
            runs[-1].append(m)
            continue
        cur.append(m)
        if not composite and isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)):
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


@contextlib.contextmanager
def _checkpointed(model, how: str):
    """``how`` = "block": every block of each top-level Sequential through
    torch.utils.checkpoint.checkpoint; "seq": each top-level Sequential through
    torch.utils.checkpoint.checkpoint_sequential with ~sqrt(n) segments (where torch's even cut
    would start a segment at an in-place module, as in VGG-16, the same cut moved past it).
    Both with use_reentrant=False."""
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint, checkpoint_sequential

    def run(mods):
        def f(x):
            for m in mods:
                x = m(x)
            return x
        return f

    def forward_of(seq):
        if how == "block":
            parts = _blocks(seq)
        else:
            segments = max(1, round(math.sqrt(len(seq))))
            bounds = _bounds(seq, segments)
            if bounds is None:
                return lambda x: checkpoint_sequential(seq, segments, x, use_reentrant=False)
            parts = [list(seq)[a:b] for a, b in zip([0] + bounds, bounds + [len(seq)])]

        def fwd(x):
            for i, part in enumerate(parts):   # the last segment runs plainly, as torch's does
                last = how == "seq" and i == len(parts) - 1
                x = run(part)(x) if last else checkpoint(run(part), x, use_reentrant=False)
            return x
        return fwd

    patched = []
    for seq in _sequentials(model):
        f = forward_of(seq)
        seq.forward = lambda x, _s=seq, _f=f: _f(x) if torch.is_grad_enabled() else nn.Sequential.forward(_s, x)
        patched.append(seq)
    try:
        yield
    finally:
        for seq in patched:
            del seq.forward


def _step(model, x, y):
    import torch
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss


def run(args) -> int:
    import torch

    from pimrt import zoo
    from pimrt.graph import capture
    from pimrt.layrub import Layrub, plan
    from pimrt.layrub.errors import LayrubError
    from pimrt.memory_meter import MemoryMeter

    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise LayrubError("--device cuda asked for, but CUDA is not available")
    if args.threads:
        torch.set_num_threads(args.threads)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise LayrubError(f"unknown variant(s) {bad} in --variants; known: {', '.join(VARIANTS)}")
    if "plain" not in variants:
        variants.insert(0, "plain")
    shape = (args.batch, 3, args.input_size, args.input_size)
    print(f"pimrt bench layrub: device {dev} ({torch.get_num_threads()} threads), input {shape}, "
          f"{args.steps} timed step(s) per variant; device memory = {MemoryMeter(dev).method}, host = "
          f"copies made by pack hooks, both over one forward+backward", flush=True)
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        torch.manual_seed(0)
        model = zoo.build(name, input_size=args.input_size, device=dev)
        g = capture(zoo.build(name, input_size=args.input_size, device="meta"), shape)
        planned = {"plain": plan(g, offload=False, reuse=False).peak_bytes,
                   "layrub-reuse": plan(g, offload=False).peak_bytes,
                   "layrub-offload": plan(g, reuse=False).peak_bytes, "layrub": plan(g).peak_bytes}
        x = torch.randn(shape, device=dev)
        y = torch.randint(0, 10 if args.input_size <= 64 else 1000, (args.batch,), device=dev)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        _step(model, x, y)                                   # warm-up (kernels, allocator)
        results, factories = {}, {}
        for v in variants:                                   # memory: one metered step each
            factories[v] = _variant(v, model, shape, dev)
            ctx = factories[v]()
            with MemoryMeter(dev) as mem:
                with ctx:
                    _step(model, x, y)
            results[v] = {"model": name, "variant": v, "planned_bytes": planned.get(v), **mem.as_dict()}
            if isinstance(ctx, Layrub):
                results[v]["layrub_host_peak_bytes"] = ctx.stats.host_peak_bytes
        # time: unmetered; the variants take turns, one step each per round, so none of them
        # pays alone for the process's first steps or for a burst of load on a shared machine
        times = {v: [] for v in variants}
        cpu_times = {v: [] for v in variants}
        for _ in range(args.steps):
            for v in variants:
                c = factories[v]()
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t0, c0 = time.perf_counter(), time.process_time()
                with c:
                    _step(model, x, y)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                times[v].append(time.perf_counter() - t0)
                cpu_times[v].append(time.process_time() - c0)
        base = results["plain"]
        key = "time_s" if dev.type == "cuda" else "cpu_s"    # CPU time: robust to a shared machine
        for v in variants:
            r = results[v]
            r["time_s"], r["cpu_s"] = statistics.median(times[v]), statistics.median(cpu_times[v])
        for v in variants:
            r = results[v]
            r["time_overhead"] = r[key] / base[key] - 1
            r["device_change"] = r["device_peak_bytes"] / base["device_peak_bytes"] - 1 \
                if base["device_peak_bytes"] else None
            rows.append(r)
            _print_row(r, first=len(rows) == 1)
        del model, factories
    _print_summary(rows)
    if args.json:
        args.json.write_text(json.dumps({"device": str(dev), "input": list(shape),
                                         "threads": torch.get_num_threads(), "rows": rows}, indent=2))
    return 0


def _variant(v, model, shape, dev):
    import torch
    from pimrt.layrub import Layrub
    if v == "plain":
        return contextlib.nullcontext
    if v in ("checkpoint-block", "checkpoint-seq"):
        return lambda: _checkpointed(model, v.split("-")[1])
    if v == "save_on_cpu":   # pin_memory=True: without CUDA, still a real copy (False: none on CPU)
        return lambda: torch.autograd.graph.save_on_cpu(pin_memory=True)
    kw = {"layrub-reuse": dict(offload=False, reuse=True),
          "layrub-offload": dict(offload=True, reuse=False),
          "layrub": dict(offload=True, reuse=True)}[v]
    lr = Layrub(model, input_shape=shape, **kw)
    return lambda: lr


def _mib(b):
    return "-" if b is None else f"{b / 2**20:.1f}"


def _pct(f):
    return "-" if f is None else f"{100 * f:+.1f}%"


def _print_row(r, first):
    if first:
        print(f"{'model':<16}{'variant':<18}{'device MiB':>11}{'vs plain':>10}{'host MiB':>10}"
              f"{'wall s':>8}{'cpu s':>8}{'time':>8}")
    print(f"{r['model']:<16}{r['variant']:<18}{_mib(r['device_peak_bytes']):>11}{_pct(r['device_change']):>10}"
          f"{_mib(r['host_peak_bytes']):>10}{r['time_s']:>8.2f}{r['cpu_s']:>8.2f}{_pct(r['time_overhead']):>8}",
          flush=True)


def _print_summary(rows):
    by_v: dict[str, list] = {}
    for r in rows:
        by_v.setdefault(r["variant"], []).append(r)
    print("\naverage over the models (device memory and time against plain torch; host memory):")
    for v, rs in by_v.items():
        dev = [r["device_change"] for r in rs if r["device_change"] is not None]
        print(f"  {v:<18} device {_pct(sum(dev) / len(dev) if dev else None):>8}   "
              f"host {sum(r['host_peak_bytes'] for r in rs) / len(rs) / 2**20:7.1f} MiB   "
              f"time {_pct(sum(r['time_overhead'] for r in rs) / len(rs)):>8}")

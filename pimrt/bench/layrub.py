"""Layrub against the baseline, torch.utils.checkpoint and save_on_cpu, side by side.

Per model and variant: one forward + backward step (parameter gradients preallocated, so
the measured memory is what the step itself adds: feature maps, their gradients and
temporaries). Memory: on CUDA ``max_memory_allocated``; on CPU the kernel's peak RSS of the
step (``pimrt.layrub.memory``), plus, for the baseline and the Layrub variants, the bytes
autograd holds for backward counted through saved-tensor hooks (distinct storages). The
``planned`` column is the graph planner's peak (pimrt.layrub.plan) for the same model.
"""
from __future__ import annotations

import contextlib
import copy
import json
import math
import pathlib
import statistics
import time

HELP = ("Layrub: peak feature-map memory and step time of baseline, Layrub (reuse, offload, "
        "both), torch.utils.checkpoint and save_on_cpu, side by side")

VARIANTS = ("baseline", "layrub-reuse", "layrub-offload", "layrub", "checkpoint", "save_on_cpu")
DEFAULT_MODELS = "resnet50,resnet101,resnet152,vgg16,densenet121"


def add_arguments(p) -> None:
    p.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated zoo names")
    p.add_argument("--batch", type=int, default=4, help="batch size")
    p.add_argument("--input-size", type=int, default=32,
                   help="image side (32: CIFAR forms; 224: ImageNet forms)")
    p.add_argument("--steps", type=int, default=1, help="timed steps per variant (median)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--json", type=pathlib.Path, default=None, help="write the results as JSON")


def _checkpointed(model, segments_of=lambda n: max(1, round(math.sqrt(n)))):
    """Context: every top-level nn.Sequential child of ``model`` (and ``model`` itself if it
    is one) runs through checkpoint_sequential with ~sqrt(n) segments, use_reentrant=False."""
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    def checkpoint_sequential(seq, segments, x, use_reentrant=False):
        # like torch's, but a segment never starts with an in-place module (it would modify
        # the checkpointed input of the segment)
        n = len(seq)
        bounds, step = [], n / segments
        for k in range(1, segments):
            b = round(k * step)
            while b < n and getattr(seq[b], "inplace", False):
                b += 1
            if (not bounds or b > bounds[-1]) and b < n:
                bounds.append(b)
        starts = [0] + bounds
        ends = bounds + [n]

        def run(a, b):
            def f(inp):
                for i in range(a, b):
                    inp = seq[i](inp)
                return inp
            return f
        for a, b in zip(starts[:-1], ends[:-1]):
            x = checkpoint(run(a, b), x, use_reentrant=use_reentrant)
        return run(starts[-1], ends[-1])(x)

    @contextlib.contextmanager
    def ctx():
        patched = []
        for m in [model] + list(model.children()):
            if isinstance(m, nn.Sequential) and len(m) >= 2:
                seg = segments_of(len(m))

                def fwd(x, _m=m, _seg=seg):
                    if not torch.is_grad_enabled():
                        return nn.Sequential.forward(_m, x)
                    return checkpoint_sequential(_m, _seg, x, use_reentrant=False)
                m.forward = fwd
                patched.append(m)
                if m is model:
                    break
        try:
            yield
        finally:
            for m in patched:
                del m.forward
    return ctx()


def _step(model, x, y):
    import torch
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss


def run(args) -> int:
    import torch

    from pimrt import zoo
    from pimrt.graph import capture
    from pimrt.layrub import Layrub, measure_saved, plan
    from pimrt.layrub.errors import LayrubError
    from pimrt.layrub.memory import PeakMemory, tune_malloc

    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise LayrubError("--device cuda asked for, but CUDA is not available")
    if args.threads:
        torch.set_num_threads(args.threads)
    if dev.type == "cpu":
        tune_malloc()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise LayrubError(f"unknown variant(s) {bad}; known: {', '.join(VARIANTS)}")
    if "baseline" not in variants:
        variants.insert(0, "baseline")
    shape = (args.batch, 3, args.input_size, args.input_size)
    print(f"pimrt bench layrub: device {dev} ({torch.get_num_threads()} threads), input {shape}, "
          f"{args.steps} timed step(s) per variant; memory = "
          f"{'max_memory_allocated' if dev.type == 'cuda' else 'kernel peak RSS (VmHWM)'} "
          f"of one forward+backward above its start", flush=True)
    rows = []
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        torch.manual_seed(0)
        model = zoo.build(name, input_size=args.input_size, device=dev)
        g = capture(zoo.build(name, input_size=args.input_size, device="meta"), shape)
        planned = {"baseline": plan(g, offload=False, reuse=False).peak_bytes,
                   "layrub-reuse": plan(g, offload=False).peak_bytes,
                   "layrub-offload": plan(g, reuse=False).peak_bytes,
                   "layrub": plan(g).peak_bytes}
        x = torch.randn(shape, device=dev)
        y = torch.randint(0, 10 if args.input_size <= 64 else 1000, (args.batch,), device=dev)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        _step(model, x, y)                                   # warm-up (kernels, allocator)
        saved = {}
        m = measure_saved(model)
        with m:
            _step(model, x, y)
        saved["baseline"] = m.stats.saved_peak_bytes
        results = {}
        factories, layrubs = {}, {}
        for v in variants:                                   # memory: one step each
            factories[v] = _variant(v, model, shape, dev)
            ctx_obj = factories[v]()
            mem = PeakMemory(dev)
            with mem:
                with ctx_obj:
                    _step(model, x, y)
            if isinstance(ctx_obj, Layrub):
                layrubs[v] = ctx_obj
                saved[v] = ctx_obj.stats.saved_peak_bytes
            results[v] = {"peak_bytes": mem.peak, "saved_bytes": saved.get(v),
                          "planned_bytes": planned.get(v), "method": mem.method}
        # time: the variants take turns, one step each per round, so none of them pays alone
        # for the process's first steps or for a burst of load on a shared machine
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
        for v in variants:
            results[v]["time_s"] = statistics.median(times[v])
            results[v]["cpu_s"] = statistics.median(cpu_times[v])
            if v in layrubs:
                results[v]["host_peak_bytes"] = layrubs[v].stats.host_peak_bytes
                results[v]["offloaded_bytes"] = layrubs[v].stats.offloaded_bytes
        del layrubs
        base = results["baseline"]
        for v, r in results.items():
            r["model"] = name
            r["variant"] = v
            # CPU: process CPU time (robust to other load on a shared machine); CUDA: wall time
            key = "time_s" if dev.type == "cuda" else "cpu_s"
            r["time_overhead"] = r[key] / base[key] - 1
            r["peak_reduction"] = 1 - r["peak_bytes"] / base["peak_bytes"] if base["peak_bytes"] \
                else None
            r["saved_reduction"] = (1 - r["saved_bytes"] / saved["baseline"]
                                    if r["saved_bytes"] is not None else None)
            r["planned_reduction"] = (1 - r["planned_bytes"] / planned["baseline"]
                                      if r["planned_bytes"] is not None else None)
            rows.append(r)
            _print_row(r, first=len(rows) == 1)
        del model
    _print_summary(rows)
    if args.json:
        args.json.write_text(json.dumps({"device": str(dev), "input": list(shape),
                                         "threads": torch.get_num_threads(), "rows": rows},
                                        indent=2))
    return 0


def _variant(v, model, shape, dev):
    import torch
    from pimrt.layrub import Layrub
    if v == "baseline":
        return contextlib.nullcontext
    if v == "checkpoint":
        return lambda: _checkpointed(model)
    if v == "save_on_cpu":
        return lambda: torch.autograd.graph.save_on_cpu(pin_memory=dev.type == "cuda")
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
        print(f"{'model':<12}{'variant':<16}{'wall s':>8}{'cpu s':>8}{'time':>8}{'peak MiB':>10}{'peak':>8}"
              f"{'saved MiB':>11}{'saved':>8}{'planned MiB':>12}{'planned':>9}")
    print(f"{r['model']:<12}{r['variant']:<16}{r['time_s']:>8.2f}{r['cpu_s']:>8.2f}"
          f"{_pct(r['time_overhead']):>8}"
          f"{_mib(r['peak_bytes']):>10}{_pct(-r['peak_reduction'] if r['peak_reduction'] is not None else None):>8}"
          f"{_mib(r['saved_bytes']):>11}"
          f"{_pct(-r['saved_reduction'] if r['saved_reduction'] is not None else None):>8}"
          f"{_mib(r['planned_bytes']):>12}"
          f"{_pct(-r['planned_reduction'] if r['planned_reduction'] is not None else None):>9}",
          flush=True)


def _print_summary(rows):
    by_v: dict[str, list] = {}
    for r in rows:
        by_v.setdefault(r["variant"], []).append(r)
    print("\naverage over the models (reduction of peak memory; + = more time):")
    for v, rs in by_v.items():
        if v == "baseline":
            continue
        def avg(key):
            vals = [r[key] for r in rs if r[key] is not None]
            return sum(vals) / len(vals) if vals else None
        pk, sv, pl, tm = avg("peak_reduction"), avg("saved_reduction"), avg("planned_reduction"), \
            avg("time_overhead")
        print(f"  {v:<16} peak {_pct(-pk)}" if pk is not None else f"  {v:<16} peak -",
              end="")
        print(f"   saved {'-' if sv is None else _pct(-sv)}"
              f"   planned {'-' if pl is None else _pct(-pl)}"
              f"   time {100 * tm:+.1f}%")

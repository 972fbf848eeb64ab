"""Where a GPU-only step's time goes: each host task's own share of the step (from its start,
or the end of the task before it if later, to its end), summed by layer kind and phase, in ms;
the same GPU-only run as `pimrt run`'s (its step_ms is summary.json's gpu_only_step_ms).

    python scripts/gpu_only_split.py --model resnet50 --input 224 --precision amp-fp16 \
        --json OUT.json

docs/figures/gpu-only-split-resnet50-224.json holds fp32 and amp-fp16 (docs/host_model.md,
"Whole networks").
"""
from __future__ import annotations

import argparse
import collections
import sys


def split(model: str, batch: int, size: int, precision: str, part: str | None = None,
          host_part: str | None = None) -> dict:
    from pimrt.runtime import session
    from pimrt.runtime.exchange import ExchangeConfig
    from pimrt.runtime.timing import step_part
    host_part, part = session.system_for(precision, host_part, part)
    p = step_part(part, host_part)
    graph = session.captured(model, batch, size, precision=precision)
    t = session.timed(graph, "gpu_only", 1, part, host_part, True, "gpu_only", False,
                      ExchangeConfig())
    by: collections.Counter = collections.Counter()
    prev = 0
    for task in sorted(t.schedule.tasks, key=lambda k: t.start[k.id]):
        start, end = int(t.start[task.id]), int(t.end[task.id])
        by[(_kind(graph, task), task.phase)] += max(0, end - max(start, prev))
        prev = max(prev, end)
    ms = t.tck_ns * 1e-6
    moved = bytes_by_kind(graph, t.schedule, p, host_part)
    assert sum(moved.values()) == t.stats["requests"] * p.request_bytes
    from pimrt.host import load_host_part
    # what the memory-bound kernels are paced to: the host part's stream_fraction of the
    # memory's peak (pimrt.runtime.work.streaming_kernel)
    stream = load_host_part(host_part).stream_fraction * p.peak_bandwidth_gbs
    return {"step_ms": t.seconds * 1e3,
            "by": {f"{k}/{ph}": round(c * ms, 3) for (k, ph), c in by.most_common()},
            "gb": {f"{k}/{ph}": round(b * 1e-9, 3) for (k, ph), b in moved.most_common()},
            "stream_gbs": round(stream, 3)}


def _kind(graph, task) -> str:
    """The task's layer kind (the task's own kind where it has no layer: loss, update)."""
    return graph[task.layer].kind if task.layer in graph else task.kind


def bytes_by_kind(graph, schedule, p, host_part: str) -> collections.Counter:
    """The bytes each task's requests move in the GPU-only step on the step's part p (its
    work's reads and writes times the request size, as memctl is fed them), summed by layer
    kind and phase."""
    from pimrt.runtime.exchange import ExchangeConfig
    from pimrt.runtime.placement import place_step
    from pimrt.runtime.work import context, task_blocks
    from pimrt.trace.records import READ, WRITE
    ctx = context(graph, p, place_step(graph, p, "sgd"), host_part, "serial",
                  exchange=ExchangeConfig())
    out: collections.Counter = collections.Counter()
    for task in schedule.tasks:
        n = sum(int(((b["op"] == READ) | (b["op"] == WRITE)).sum())
                for b in task_blocks(task, ctx))
        out[(_kind(graph, task), task.phase)] += n * p.request_bytes
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--input", type=int, default=224)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--part", default=None)
    ap.add_argument("--host-part", default=None)
    ap.add_argument("--json", default=None, help="also write the figures here")
    a = ap.parse_args(argv)
    if a.json:                                  # before the run, not after it
        from pimrt.output import check_out_file
        check_out_file(a.json, "--json")
    out = split(a.model, a.batch, a.input, a.precision, a.part, a.host_part)
    from figure_out import emit
    emit(out, a.json, indent=0)
    return 0


if __name__ == "__main__":
    from figure_out import run
    sys.exit(run(main))

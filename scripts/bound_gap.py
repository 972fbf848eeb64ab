"""Where a co-executed step loses against its contention-free bound: the same authority step
as `pimrt run` (its step_ms is summary.json's step_ms) beside the bound's list schedule of
the tasks' durations alone (summary.json's contention_free_bound_ms), task by task.

- lag: how much later than in the bound each phase's last task ends (the step's gap, as it
  builds up through the forward pass, the backward pass and the update);
- by kind: each task's own share of its side's time in the step (marginal, as the slack
  rule's profile measures it) against its duration alone, summed by side, kind and phase;
- tasks: the tasks whose own share grew most, each with the other side's tasks that ran
  beside it in the step and, for a host task, the share of the memory's peak bandwidth its
  compulsory bytes (its tensors as the schedule names them, not the cache-filtered
  requests) need at its duration alone;
- deferred: for each weight gradient the plan moved (docs/runtime.md, "The plan"), its
  share in the step against alone, and how much later than in the bound the host task after
  it starts.

    python scripts/bound_gap.py --model resnet50,mobilenetv2 --input 32 \
        --precision fp32,amp-fp16 --json OUT.json

docs/figures/bound-gap-32.json holds ResNet-50 and MobileNetV2 at 32x32 under fp32 and amp-fp16,
docs/figures/bound-gap-224.json ResNet-50, MobileNetV2 and DenseNet-121 at 224x224 under
amp-fp16 (docs/precision.md, "Where the AMP step loses against the bound").
"""
from __future__ import annotations

import argparse
import collections
import sys

PHASES = {"fwd": "forward", "bwd_data": "backward", "bwd_weight": "backward",
          "bwd": "backward", "update": "update"}


def gap(model: str, batch: int, size: int, precision: str, part: str | None = None,
        host_part: str | None = None, top: int = 12) -> dict:
    from pimrt.runtime import session
    from pimrt.runtime.exchange import ExchangeConfig
    from pimrt.runtime.plan import list_schedule, task_key
    from pimrt.runtime.timing import measured_durations, planned_schedule, step_part
    host_part, part = session.system_for(precision, host_part, part)
    graph = session.captured(model, batch, size, precision=precision)
    t = session.timed(graph, "authority", 1, part, host_part, True, "authority", False,
                      ExchangeConfig())
    p = step_part(part, host_part)
    _, alone, _ = planned_schedule(graph, 1, p, host_part, exchange=ExchangeConfig(),
                                   slices=session.slices_for(batch, None))
    s = t.schedule
    bound, b_start, b_end = list_schedule(s, alone)
    ms = t.tck_ns * 1e-6
    mine = measured_durations(t)
    tasks = s.tasks

    last: dict = {}                 # phase -> (its last task's end in the step, in the bound)
    for x in tasks:
        ph = PHASES.get(x.phase, x.phase)
        e, be = last.get(ph, (0, 0))
        last[ph] = (max(e, int(t.end[x.id])), max(be, int(b_end[x.id])))
    lag = {ph: round((e - be) * ms, 3) for ph, (e, be) in last.items()}

    by: dict = collections.defaultdict(lambda: [0, 0, 0])
    for x in tasks:
        k = f"{x.side}/{x.kind}/{x.phase}"
        by[k][0] += alone[task_key(x)]
        by[k][1] += mine[task_key(x)]
        by[k][2] += 1
    by_kind = {k: {"tasks": n, "alone_ms": round(a * ms, 3), "step_ms": round(m * ms, 3),
                   "grew_ms": round((m - a) * ms, 3)}
               for k, (a, m, n) in sorted(by.items(), key=lambda kv: kv[1][0] - kv[1][1])}

    peak = p.peak_bandwidth_gbs * t.tck_ns          # bytes a memory cycle at peak

    def beside(x) -> list:
        s0, e0 = int(t.start[x.id]), int(t.end[x.id])
        ov = collections.Counter()
        for y in tasks:
            if y.side != x.side:
                o = min(e0, int(t.end[y.id])) - max(s0, int(t.start[y.id]))
                if o > 0:
                    ov[y.label] += o
        return [{"task": name, "ms": round(c * ms, 3)} for name, c in ov.most_common(3)]

    def row(x) -> dict:
        a, m = alone[task_key(x)], mine[task_key(x)]
        nbytes = sum(b for _, b in x.tensors.values())
        return {"task": x.label, "side": x.side, "kind": x.kind,
                "alone_ms": round(a * ms, 4), "step_ms": round(m * ms, 4),
                "grew_ms": round((m - a) * ms, 4),
                "peak_share_alone": round(nbytes / max(a, 1) / peak, 3)
                if nbytes and x.side == "host" else None,
                "beside": beside(x)}
    grown = sorted(tasks, key=lambda x: alone[task_key(x)] - mine[task_key(x)])[:top]

    host = [x for x in tasks if x.side == "host"]
    nxt = {a.id: b for a, b in zip(host, host[1:])}
    deferred = []
    for x in host:
        if x.phase == "bwd_weight" and x.layer in t.deferred and x.id in nxt:
            n = nxt[x.id]
            deferred.append({**row(x), "moved_to": t.deferred[x.layer], "next": n.label,
                             "next_starts_later_ms": round(
                                 (int(t.start[n.id]) - int(b_start[n.id])) * ms, 3),
                             "lag_before_ms": round(
                                 (int(t.start[x.id]) - int(b_start[x.id])) * ms, 3)})
    return {"model": model, "batch": batch, "input": size, "precision": precision,
            "part": str(part), "host_part": str(host_part),
            "step_ms": round(t.seconds * 1e3, 3), "bound_ms": round(bound * ms, 3),
            "step_over_bound": round(t.makespan / bound, 4),
            "authority_rule_kept": "layer" if t.slack_step is not None else "slack",
            "lag_at_phase_end_ms": lag, "by_kind": by_kind,
            "tasks_grown_most": [row(x) for x in grown], "deferred": deferred}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50",
                    help="one model or several, comma-separated (default resnet50)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--input", type=int, default=32)
    ap.add_argument("--precision", default="amp-fp16",
                    help="one precision or several, comma-separated (default amp-fp16)")
    ap.add_argument("--part", default=None)
    ap.add_argument("--host-part", default=None)
    ap.add_argument("--top", type=int, default=12, help="tasks listed (default 12)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    a = ap.parse_args(argv)
    if a.json:                                  # before the run, not after it
        from pimrt.output import check_out_file
        check_out_file(a.json, "--json")
    out = {"command": "python scripts/bound_gap.py " + " ".join(argv if argv is not None
                                                                else sys.argv[1:]),
           "runs": [gap(model, a.batch, a.input, prec, a.part, a.host_part, a.top)
                    for model in a.model.split(",") for prec in a.precision.split(",")]}
    from figure_out import emit
    emit(out, a.json)
    return 0


if __name__ == "__main__":
    from figure_out import run
    sys.exit(run(main))

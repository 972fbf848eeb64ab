"""Who the step's time belongs to: each cycle of a timed step split among the tasks running in it.

Under co-execution a layer's tasks overlap other layers' (the PIM's batch norm on group g
beside the host's CONV on group g+1), so a layer's span says little about what it costs.
Instead every cycle from 0 to the makespan is given to the tasks that occupy it:

- a cycle in which n tasks run gives 1/n to each (host and PIM side by side: half each);
- a cycle in which none runs (a side waiting on the other, a mode switch, the memory
  draining) goes to the task(s) that start next, the work that was waited for;
- cycles after the last task's end (none: the makespan is the last end) would go to the
  tasks that end last.

The shares add up to the makespan, so a layer's share is its part of the step, and
sum(serial shares) / sum(co-executed shares) is the step's speedup: the per-layer speedup
(serial share / share) says which layers the co-execution gains or loses on.
"""
from __future__ import annotations

import numpy as np

PHASE_CLASS = {"fwd": "fwd", "update": "update"}    # bwd, bwd_data, bwd_weight: "bwd"
PHASES = ("fwd", "bwd", "update")


def task_shares(start, end, makespan: int | None = None) -> np.ndarray:
    """Cycles of [0, makespan) given to each task (float64, one per task; they sum to the
    makespan, which defaults to the last end). Tasks are half-open intervals [start, end)."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    n = len(start)
    if n == 0:
        return np.zeros(0)
    if np.any(end < start) or np.any(start < 0):
        bad = int(np.flatnonzero((end < start) | (start < 0))[0])
        raise ValueError(f"task {bad} has start {int(start[bad])} and end {int(end[bad])}")
    last = int(end.max())
    horizon = last if makespan is None else int(makespan)
    if horizon < last:
        raise ValueError(f"makespan {horizon} is before the last task's end {last}")
    cuts = np.unique(np.concatenate(([0], start, end)))       # elementary intervals
    lengths = np.diff(cuts).astype(np.float64)
    running = (np.searchsorted(np.sort(start), cuts[:-1], side="right")
               - np.searchsorted(np.sort(end), cuts[:-1], side="right"))
    per_task = np.divide(lengths, running, out=np.zeros_like(lengths), where=running > 0)
    acc = np.concatenate(([0.0], np.cumsum(per_task)))
    i0 = np.searchsorted(cuts, start)
    i1 = np.searchsorted(cuts, end)
    shares = acc[i1] - acc[i0]
    # idle intervals: to the tasks that start at the interval's end
    idle = np.flatnonzero(running == 0)
    if len(idle):
        starters = {}
        for t in np.argsort(start, kind="stable"):
            starters.setdefault(int(start[t]), []).append(int(t))
        for k in idle.tolist():
            who = starters[int(cuts[k + 1])]       # every idle interval ends where one starts
            shares[who] += lengths[k] / len(who)
    if horizon > last:
        enders = np.flatnonzero(end == last)
        shares[enders] += (horizon - last) / len(enders)
    return shares


def layer_shares(run) -> dict[str, dict[str, float]]:
    """layer -> {"fwd", "bwd", "update": cycles of the step given to its tasks of that phase}
    for a `StepTiming`, in the schedule's order of first appearance."""
    tasks = run.schedule.tasks
    shares = task_shares(run.start[[t.id for t in tasks]], run.end[[t.id for t in tasks]],
                         run.makespan)
    out: dict[str, dict[str, float]] = {}
    for t, s in zip(tasks, shares.tolist()):
        row = out.setdefault(t.layer, dict.fromkeys(PHASES, 0.0))
        row[PHASE_CLASS.get(t.phase, "bwd")] += s
    return out

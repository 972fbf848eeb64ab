"""Where the host's weight gradients go in the backward pass (`plan_deferrals`).

In backward the host computes a CONV's dX, then its dW, while the PIM runs the layers below on
that dX (batch norm and ReLU backward); the host's next dX waits for that work. In the late,
host-bound layers the PIM's work is shorter than the dW and the PIM waits for the host's next
dX; in the early, PIM-bound ones (layer1 and the stem of an ImageNet ResNet at 224x224) the
host waits for the PIM. Nothing in the step but the layer's own update needs a dW, so a dW
can move later in the host's order, from where the PIM waits for the host to where the host
would wait for the PIM (what zero-bubble pipeline schedules do with their W passes).

The plan takes every task's duration alone (the contention-free timing that
pimrt.runtime.timing.contention_free_bound also uses), list-schedules the step on them
(`list_schedule`: each side in its stream's order, a task once its side is free and its
dependencies have ended), and moves dWs greedily: each round tries the dWs during which the
PIM idles longest against the host's longest waits in backward, and keeps the move that
shortens the list schedule most, until none shortens it by MIN_GAIN (0.05%) of the
unplanned step.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from pimrt.runtime.schedule import Schedule, Task

TARGETS = 3       # the host's longest waits tried per round
CANDIDATES = 8    # the dWs with the longest PIM idle beside them tried per round
# a move must shorten the list schedule by at least this fraction of the unplanned one: the
# durations alone do not see contention, under which a smaller gain is as likely a loss
# (resnet_cifar_20, batch 4: one move gaining 0.03% alone cost 0.2% under authority)
MIN_GAIN = 0.0005


def task_key(t: Task) -> tuple:
    """What identifies a task across schedules that differ only in order."""
    return (t.layer, t.kind, t.phase, t.group, t.part, t.slice)


def list_schedule(schedule: Schedule, duration: dict) -> tuple[int, np.ndarray, np.ndarray]:
    """Makespan, start and end of every task when each side runs its tasks in order, a task
    starting once its side is free and its dependencies have ended."""
    n = len(schedule.tasks)
    start, end = np.zeros(n, np.int64), np.zeros(n, np.int64)
    free = {"host": 0, "pim": 0}
    for t in schedule.tasks:
        s = max([free[t.side]] + [int(end[d]) for d in t.deps])
        start[t.id], end[t.id] = s, s + duration[task_key(t)]
        free[t.side] = int(end[t.id])
    return (int(end.max()) if n else 0), start, end


def slack(schedule: Schedule, duration: dict) -> np.ndarray:
    """Each task's slack in the list schedule: how much later it could end without the step
    ending later, each side keeping its order (its latest end from a backward pass over its
    dependents and the next task on its side, less its end). The critical path's tasks have
    none."""
    m, start, end = list_schedule(schedule, duration)
    n = len(schedule.tasks)
    latest_end = np.full(n, m, np.int64)
    latest_start = np.zeros(n, np.int64)
    after = {"host": None, "pim": None}
    for t in reversed(schedule.tasks):
        if after[t.side] is not None:
            latest_end[t.id] = min(latest_end[t.id], latest_start[after[t.side]])
        latest_start[t.id] = latest_end[t.id] - duration[task_key(t)]
        for d in t.deps:
            latest_end[d] = min(latest_end[d], latest_start[t.id])
        after[t.side] = t.id
    return latest_end - end


def _host_waits(schedule: Schedule, start, end, defer: dict) -> dict[str, int]:
    """Per CONV, the host's idle time just before its backward tasks (and the dWs deferred
    to it, which come first)."""
    waits: dict[str, int] = {}
    prev = 0
    for t in schedule.tasks:
        if t.side != "host":
            continue
        gap = int(start[t.id]) - prev
        if gap > 0 and t.phase in ("bwd_data", "bwd_weight"):
            at = defer.get(t.layer, t.layer) if t.phase == "bwd_weight" else t.layer
            waits[at] = waits.get(at, 0) + gap
        prev = max(prev, int(end[t.id]))
    return waits


def _pim_idle_during(schedule: Schedule, start, end) -> dict[str, int]:
    """Per CONV with a dX, how long the PIM idles while the host computes its dW."""
    pim = [t.id for t in schedule.tasks if t.side == "pim"]
    ps, pe = start[pim], end[pim]
    has_dx = {t.layer for t in schedule.tasks if t.phase == "bwd_data"}
    out = {}
    for t in schedule.tasks:
        if t.side == "host" and t.phase == "bwd_weight" and t.layer in has_dx:
            a, b = int(start[t.id]), int(end[t.id])
            busy = int(np.clip(np.minimum(pe, b) - np.maximum(ps, a), 0, None).sum())
            out[t.layer] = out.get(t.layer, 0) + max(0, (b - a) - busy)
    return out


def plan_deferrals(build: Callable[[dict], Schedule], duration: dict) -> dict[str, str]:
    """{CONV: later CONV}: the dWs to move (pimrt.runtime.schedule.build_schedule's `defer`),
    chosen on the list schedule of `build(defer)` with the tasks' durations alone."""
    defer: dict[str, str] = {}
    schedule = build(defer)
    best, start, end = list_schedule(schedule, duration)
    least = MIN_GAIN * best
    while True:
        order: list[str] = []      # CONVs in the host's backward order
        for t in schedule.tasks:
            if t.side == "host" and t.phase in ("bwd_data", "bwd_weight") \
                    and t.layer not in order:
                order.append(t.layer)
        waits = _host_waits(schedule, start, end, defer)
        idle = _pim_idle_during(schedule, start, end)
        targets = sorted(waits, key=lambda k: -waits[k])[:TARGETS]
        found = None
        for dst in targets:
            before = order[:order.index(dst)]
            cands = sorted((c for c in before if c in idle and c not in defer and idle[c] > 0),
                           key=lambda c: -idle[c])[:CANDIDATES]
            for src in cands:
                trial = build({**defer, src: dst})
                m = list_schedule(trial, duration)[0]
                if m <= best - least and (found is None or m < found[0]):
                    found = (m, src, dst)
        if found is None:
            break
        best, src, dst = found
        defer[src] = dst
        schedule = build(defer)
        _, start, end = list_schedule(schedule, duration)
    return defer

"""One training step through memctl: the schedule's tasks become two request streams (host,
PIM) with their compute delays and cross-stream dependencies (SIGNAL / WAIT markers), the
controller runs them under a sharing policy, and the events give every task's start and end.
"""
from __future__ import annotations

import dataclasses
import math
import time
import types

import numpy as np

from pimrt.errors import ConfigError
from pimrt.graph import LayerGraph
from pimrt.memctl import load_part
from pimrt.runtime.placement import place_step
from pimrt.runtime.schedule import Schedule, build_schedule
from pimrt.runtime.sides import chunks, run_by_side
from pimrt.runtime.work import context, task_blocks
from pimrt.runtime.authority import layer_parameters, slack_parameters
from pimrt.runtime.heap import release
from pimrt.runtime.authority_rules import AUTHORITY_RULES, DEFAULT_AUTHORITY_RULE  # noqa: F401
from pimrt.trace.records import (BARRIER, COMPUTE, DELAY, HOST, PARAM, PARAM_IDS, PIM, READ,
                                 RECORD_DTYPE, SIGNAL, WAIT, WRITE)

FEED_RECORDS = 1 << 16    # records fed at a time (1.5 MiB; memctl holds about as many)


@dataclasses.dataclass
class StepTiming:
    policy: str
    groups: int
    schedule: Schedule
    start: np.ndarray          # per task id, memory cycles
    end: np.ndarray
    stats: dict                # memctl stats
    tck_ns: float
    wall_s: float
    records: int
    modes: np.ndarray = None   # PIM_ENTER / PIM_EXIT per channel
    exchange: object = None    # the ExchangeConfig the update ran with
    deferred: dict = dataclasses.field(default_factory=dict)  # the planned dWs: {CONV: later CONV}
    authority_rule: str | None = None   # how the authority parameters were set, if they were
    profile: "StepTiming | None" = None  # the profiled earlier step the slack rule planned on
    # the slack rule's step when the runtime kept the profiled step's (per-layer) parameters,
    # that step having been the shorter of the two it measured; None when it kept its own
    slack_step: "StepTiming | None" = None

    @property
    def makespan(self) -> int:
        return int(self.end.max()) if len(self.end) else 0

    @property
    def seconds(self) -> float:
        return self.makespan * self.tck_ns * 1e-9

    def busy(self, side: str) -> int:
        """Cycles in which `side` had a task running (union of intervals)."""
        ids = [t.id for t in self.schedule.tasks if t.side == side]
        iv = sorted(zip(self.start[ids].tolist(), self.end[ids].tolist()))
        total, cur_s, cur_e = 0, None, None
        for s, e in iv:
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    total += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            total += cur_e - cur_s
        return total


def _marker(op: int, requestor: int, value: int) -> np.ndarray:
    m = np.zeros(1, RECORD_DTYPE)
    m["op"], m["requestor"], m["value"] = op, requestor, value
    return m


def _params(values: dict) -> np.ndarray:
    out = np.zeros(len(values), RECORD_DTYPE)
    out["op"] = PARAM
    out["param"] = [PARAM_IDS[k] for k in values]
    out["value"] = list(values.values())
    return out


def layrub_transfers(schedule: Schedule, ctx) -> dict[int, list]:
    """Layrub's offloads and prefetches (pimrt.layrub.plan) as host DMA requests: a feature
    map leaving the device is read from the DRAM after the last forward task of the layer at
    which Layrub offloads it; one coming back is written into the DRAM after the last backward
    task of the layer at which Layrub prefetches it (one layer ahead of its use). Returns task
    id -> [(op, region, bytes)] to emit after that task."""
    from pimrt.layrub import plan
    p = plan(schedule.graph, schedule.graph.batch)
    last: dict[tuple[str, str], int] = {}
    for t in schedule.tasks:
        if t.phase in ("update", "apply"):     # the parameter update is not the layer's backward
            continue
        last[(t.layer, "forward" if t.phase == "fwd" else "backward")] = t.id
    out: dict[int, list] = {}
    pl = ctx.placement
    for ev in p.traffic():
        tid = last.get((ev["name"], ev["phase"]))
        key = f"act:{ev['tensor']}"
        if tid is None or key not in pl.regions:
            continue
        out.setdefault(tid, []).append((READ if ev["direction"] == "out" else WRITE, pl[key],
                                        int(ev["bytes"])))
    return out


def _dma(transfers) -> np.ndarray:
    parts = []
    for op, region, nbytes in transfers:
        n = max(1, -(-nbytes // 64))
        r = np.zeros(n, RECORD_DTYPE)
        r["addr"] = np.uint64(region.base) + np.arange(n, dtype=np.uint64) * np.uint64(64)
        r["op"], r["requestor"] = op, HOST
        parts.append(r)
    return np.concatenate(parts) if parts else np.zeros(0, RECORD_DTYPE)


class TaskPieces:
    """A step's stream task by task, each piece built when asked for: a task's opening (WAITs
    for its dependencies, whose data must have landed: requests completed, not just offered;
    a BARRIER where a serial schedule changes side; the authority parameters of a host
    CONV/linear task under the rule; a SIGNAL at its start, event 2 id), its work
    (pimrt.runtime.work.task_blocks) and its closing (a SIGNAL at its end, event 2 id + 1,
    then Layrub's DMA after the task). task_stream gives them in order; fed by side
    (pimrt.runtime.sides) each side's stream takes every task's opening and closing."""

    def __init__(self, schedule: Schedule, ctx, rule: bool = False,
                 transfers: dict | None = None, slack: dict | None = None):
        self.schedule, self.ctx, self.rule = schedule, ctx, rule
        self.transfers, self.slack = transfers, slack
        self._params: dict[int, np.ndarray] = {}   # task id -> its parameters (PARAM records)
        self._work: dict[int, list] = {}           # task id -> its work, counted, until taken
        self._barrier, last = set(), None
        for t in schedule.tasks:
            if not schedule.pipelined and last not in (None, t.side):
                self._barrier.add(t.id)     # serial: the other side's work is done
            last = t.side

    def params(self, t, keep_work: bool = True) -> np.ndarray | None:
        """Task t's authority parameters as PARAM records (None: it sets none): with slack
        ((slack, duration, the PIM's load) per task id) the slack rule's, else the per-layer
        rule's for its work's requests and compute (its work built to count them, kept for
        work() with keep_work)."""
        if not (self.rule and t.side == "host" and t.kind in ("conv", "linear")):
            return None
        if self.slack is not None:
            return _params(slack_parameters(self.ctx.part, *self.slack[t.id]))
        if t.id not in self._params:
            blocks = task_blocks(t, self.ctx)
            if keep_work:
                blocks = self._work[t.id] = list(blocks)
            nreq = compute = 0
            for w in blocks:
                nreq += int((w["op"] <= WRITE).sum())
                compute += int(w["value"][(w["op"] == DELAY) | (w["op"] == COMPUTE)].sum())
            self._params[t.id] = _params(layer_parameters(self.ctx.part, nreq, compute))
        return self._params[t.id]

    def count_parameters(self) -> None:
        """Every task's parameters now (the per-layer rule builds each host CONV's work to
        count it, then drops it): fed by side, neither side's stream then builds a task's
        work while the other holds one half made."""
        for t in self.schedule.tasks:
            self.params(t, keep_work=False)

    def opening(self, t, keep_work: bool = True) -> np.ndarray:
        who = HOST if t.side == "host" else PIM
        parts = [_marker(WAIT, who, 2 * d + 1) for d in t.deps]
        if t.id in self._barrier:
            parts.append(_marker(BARRIER, who, 0))
        params = self.params(t, keep_work)
        if params is not None:
            parts.append(params)
        parts.append(_marker(SIGNAL, who, 2 * t.id))
        return np.concatenate(parts)

    def work(self, t):
        kept = self._work.pop(t.id, None)
        return kept if kept is not None else task_blocks(t, self.ctx)

    def closing(self, t) -> np.ndarray:
        end = [_marker(SIGNAL, HOST if t.side == "host" else PIM, 2 * t.id + 1)]
        if self.transfers and t.id in self.transfers:
            end.append(_dma(self.transfers[t.id]))
        return np.concatenate(end)

    def stream(self, tasks):
        """Yield record arrays: for each of these tasks (the schedule's, in order) its
        opening, its work (in blocks) and its closing."""
        for t in tasks:
            yield self.opening(t)
            yield from self.work(t)
            yield self.closing(t)


def task_stream(schedule: Schedule, ctx, rule: bool = False, transfers: dict | None = None,
                slack: dict | None = None):
    """Yield record arrays: for each task its opening, its work (in blocks) and its closing
    (TaskPieces). With rule, each host CONV/linear task first sets the authority parameters
    for its traits, or, with slack ((slack, duration, the PIM's load) per task id: the slack
    rule), for whether the step waits for it."""
    yield from TaskPieces(schedule, ctx, rule, transfers, slack).stream(schedule.tasks)


def group_rule(part, host_part, groups: int = 4):
    """How many output-channel groups each CONV gets, at most `groups` (1: it runs whole).
    Every group beyond the first reads the layer's input again and adds a kernel launch on
    the host and a task on the PIM, so a CONV gets as many groups as its arithmetic
    intensity (FLOPs per byte of input, output and weights) covers: the largest divisor g
    of `groups` with intensity >= g x the host's ridge point (sustained FLOP/s over the
    memory's peak bandwidth), when that is at least 2. A CONV above the ridge point whose
    input, read again by every further group, is small beside its output ((groups - 1) x
    input <= output: an ImageNet stem's 3 channels in, 64 out) gets the smallest split (2
    groups when `groups` is even). A memory-bound CONV runs whole: each group would read its
    input again for little overlap. (ResNet-18, batch 32, 32x32, groups = 4: 15.84 ms against 16.05 with 4
    groups for every split CONV; docs/runtime-measurements.md.)"""
    from pimrt.host import load_host_part
    hp = load_host_part(host_part)
    ridge = hp.sustained_flops / (part.peak_bandwidth_gbs * 1e9)
    divisors = [d for d in range(2, groups + 1) if groups % d == 0]

    def count(layer) -> int:
        inputs = sum(int(np.prod(s)) for s in layer.input_shapes) * layer.itemsize
        intensity = layer.flops / max(inputs + layer.bytes + layer.param_bytes, 1)
        covered = [d for d in divisors if intensity >= d * ridge]
        if covered:
            return covered[-1]
        if divisors and intensity >= ridge and (groups - 1) * inputs <= layer.bytes:
            return divisors[0]
        return 1
    return count


# most output-channel groups per CONV by default: 1, the forward pass pipelined by batch slices
# only. On the default system (four stacks) channel groups lengthen every one of the five CNNs'
# steps (batch 32, 32x32, authority, at most 1 / 2 / 4 groups: ResNet-18 10.631 / 10.640 /
# 10.671 ms, MobileNetV2 4.931 / 5.047 / 5.176; docs/runtime-measurements.md); `--groups 4` asks
# for them (the one-stack part's choice).
DEFAULT_GROUPS = 1
# how the authority policy's parameters are set per host task: pimrt.runtime.authority_rules
# (the slack rule, profile-guided, by default: the shorter step on 24 of the 32x32 sensitivity
# study's 30 points with the oracle's durations, all five CNNs on the default system among
# them; docs/runtime.md)
DEFAULT_SLICES = 4     # most batch slices of the forward pass (docs/runtime.md)
# how much longer a CONV's batch slices may take the host (modelled) than its channel groups:
# the pipeline across layers hides some (batch 32, 32x32, authority, slack 0.05 / 0.15 / 0.3:
# ResNet-50 60.692 / 60.530 / 60.076 ms, MobileNetV2 21.946 / 21.794 / 21.794, DenseNet-121
# 66.868 / 66.860 / 66.907, WRN-28-10 132.968 / - / 134.399; docs/runtime-measurements.md)
SLICE_SLACK = 0.3


def slices_for(batch: int, slices: int | None = None) -> int:
    """The forward pass's batch slices: `slices` as given (checked by build_schedule), or by
    default the largest divisor of the batch up to DEFAULT_SLICES."""
    if slices is not None:
        return slices
    return max(d for d in range(1, DEFAULT_SLICES + 1) if batch % d == 0)


def slice_rule(part, slices: int = 4, host_part="v100", groups: int = 4):
    """Which CONVs run their forward pass by batch slices (pimrt.runtime.schedule). Every
    slice reads the layer's weights again, so a CONV is sliced when its weights, read
    `slices` - 1 more times, come to at most its input and output (its feature maps are read
    and written once either way); each slice's output must fill at least one row span of
    the part (one row of every bank of every channel): the PIM's all-bank commands on a
    smaller slice leave banks idle, and its tasks and mode switches multiply for little
    work; and the host's slices together may take at most SLICE_SLACK longer (in the host
    part's model) than the CONV's output-channel groups would (the group rule's): a kernel
    on a quarter of the batch that does not fill the GPU takes about as long as the whole
    one. The others keep output-channel groups. (Batch 32, 4 slices, 32x32, authority:
    ResNet-18 15.116 -> 14.406 ms, MobileNetV2 22.009 -> 21.794 ms; the measured variants
    in docs/runtime-measurements.md.)"""
    from pimrt.host import HostWork, load_host_part
    span = part.capacity_bytes // part.org["rows"]
    count = group_rule(part, host_part, groups)
    hp = load_host_part(host_part)
    decided: dict[str, bool] = {}      # layer name -> sliced (asked again for every schedule)

    def host_seconds(layer, batch: int, ng: int) -> float:
        cout = layer.attrs.get("out_channels", layer.attrs.get("out_features"))
        return sum(HostWork(layer, batch, "forward", (cout * g // ng, cout * (g + 1) // ng),
                            part=hp).model_seconds() for g in range(ng))

    def decide(layer) -> bool:
        inputs = sum(int(np.prod(s)) for s in layer.input_shapes) * layer.itemsize
        if (slices - 1) * layer.param_bytes > inputs + layer.bytes \
                or layer.bytes // slices < span:
            return False
        batch = layer.shape[0]
        return slices * host_seconds(layer, batch // slices, 1) \
            <= (1 + SLICE_SLACK) * host_seconds(layer, batch, count(layer))

    def sliced(layer) -> bool:
        if layer.name not in decided:
            decided[layer.name] = decide(layer)
        return decided[layer.name]
    return sliced


def pipelined_schedule(graph: LayerGraph, groups: int, part, host_part, exchange: str = "sgd",
                       slices: int = 1, defer: dict | None = None, rules=None) -> Schedule:
    """The runtime's pipelined step: each CONV in the channel groups group_rule gives it,
    or by batch slices where slice_rule says, and the weight gradients moved as `defer` says
    (pimrt.runtime.plan). rules: (group_rule, slice_rule) made once for several schedules
    of the graph (the plan builds hundreds; pipelined_rules)."""
    group_count, sliced = rules or pipelined_rules(part, host_part, groups, slices)
    return build_schedule(graph, groups, pipelined=True, group_count=group_count, defer=defer,
                          exchange=exchange, slices=slices, slice_rule=sliced)


def pipelined_rules(part, host_part, groups: int, slices: int) -> tuple:
    """(group_rule, slice_rule) of pipelined_schedule."""
    return group_rule(part, host_part, groups), slice_rule(part, slices, host_part, groups)


def require_pim(part) -> None:
    """A co-execution step needs a part whose file has a [pim] table (the units beside the
    banks); a plain DRAM part (hbm2, ddr4) can only run memsim traces."""
    from pimrt.errors import ConfigError
    if not part.pim:
        where = f" ({part.path})" if part.path else ""
        raise ConfigError(f"memory part {part.name}{where} has no [pim] table: the non-CONV "
                          f"ops run on PIM units beside its banks; use a PIM part (v100_hbm2_pim, hbm2_pim) "
                          f"or add a [pim] table to the part's file")


def step_part(part, host_part):
    """The memory part (a name, a file or a Part) a co-execution step runs on, checked for
    PIM units, as the host sees it (with_host_buffering)."""
    p = load_part(part) if isinstance(part, str) else part
    require_pim(p)
    return with_host_buffering(p, host_part)


def with_host_buffering(part, host_part):
    """The part as the host sees it: a GPU keeps as many requests in flight as Little's law
    gives for this memory (the part's peak bandwidth x the host's loaded latency / request
    size: HostPart.outstanding; docs/host_model.md), so the host's transaction queue per
    channel holds that many / channels requests (never fewer than the part's queue_depth).
    The PIM's queue keeps the part's queue_depth. With a deep host queue the host keeps
    computing while the PIM holds a channel under `authority`, as a GPU does."""
    from pimrt.host import load_host_part
    hp = load_host_part(host_part) if isinstance(host_part, str) else host_part
    qd = part.controller["queue_depth"]
    depth = max(qd, -(-hp.outstanding(part) // part.channel_count))
    if part.controller.get("host_queue_depth", qd) != qd:   # the part file set its own
        return part
    ctrl = dict(part.controller)
    ctrl["host_queue_depth"] = depth
    return dataclasses.replace(part, controller=types.MappingProxyType(ctrl))


def alone_durations(schedule: Schedule, graph: LayerGraph, part, host_part,
                    issue_width: int | None = None, progress=None, exchange=None,
                    host_times=None, layrub: bool = False, prefix=None) -> dict:
    """Every task's duration when its side has the memory to itself: the schedule's host
    tasks, in order, through one controller and its PIM tasks through another, each keeping
    its dependencies on its own side (the other side's have ended by then). No mode switch
    and none of the other side's traffic is in any task's time: the PIM stays in its mode
    from its first task on. A task's duration is its own share of its side's span
    (marginal). task_key -> cycles. exchange: the ExchangeConfig of a GradSA schedule
    (default: the SGD update). layrub: Layrub's DMA is the host's, issued where the step
    issues it (after the host task at or before the one it follows). prefix: the plan's
    Prefixes (pimrt.runtime.prefix), kept from and used by its timings."""
    from pimrt.runtime.exchange import ExchangeConfig
    from pimrt.runtime.plan import task_key
    exchange = exchange or ExchangeConfig()
    dma = {}
    if layrub:
        ctx = context(graph, part, place_step(graph, part, exchange.mode), host_part,
                      "serial", exchange=exchange, host_times=host_times)
        dma = layrub_transfers(schedule, ctx)
    out = {}
    for side in ("host", "pim"):
        tasks = side_tasks(schedule, side)
        if not tasks:
            continue
        transfers = host_dma(schedule, dma) if side == "host" and dma else None
        alone = time_schedule(dataclasses.replace(schedule, tasks=tasks, pipelined=False),
                              graph, part, host_part, "serial", issue_width, progress,
                              exchange=exchange, host_times=host_times, transfers=transfers,
                              prefix=(prefix, side) if prefix else None)
        out.update(zip((task_key(t) for t in tasks), marginal(alone.start, alone.end)))
    return out


def side_tasks(schedule: Schedule, side: str) -> list:
    """The schedule's tasks of one side, in order, numbered from 0, each with its
    dependencies on that side alone."""
    mine = [t for t in schedule.tasks if t.side == side]
    new = {t.id: i for i, t in enumerate(mine)}
    return [dataclasses.replace(t, id=i, deps=[new[d] for d in t.deps if d in new])
            for i, t in enumerate(mine)]


def host_dma(schedule: Schedule, transfers: dict) -> dict:
    """Layrub's DMA (task id -> transfers) renumbered for side_tasks(schedule, "host"): each
    after the last host task at or before the task it follows in the step (the host's own
    stream issues it there); before the first host task, after that one."""
    out: dict[int, list] = {}
    host = -1
    for t in schedule.tasks:
        if t.side == "host":
            host += 1
        if t.id in transfers:
            out.setdefault(max(host, 0), []).extend(transfers[t.id])
    return out


def marginal(start: np.ndarray, end: np.ndarray) -> list[int]:
    """Each task's own share of its side's time, the tasks in stream order: from its start,
    or the previous task's end if that is later (the next task's requests issue while the
    last ones of the task before it complete), to its end. A stream's SIGNALs fire in its
    order, so the shares add up to the side's span less its idle gaps."""
    out, last = [], 0
    for s, e in zip(start.tolist(), end.tolist()):
        out.append(max(0, e - max(s, last)))
        last = max(last, e)
    return out


def _kept_per_graph(fn):
    """fn(schedule, graph, part, ...) kept for the graph's same tasks and arguments (the
    last few calls; progress aside): the slack rule and the bound of an unplanned step
    (--layrub, --no-plan) ask for the same tasks' durations alone."""
    import functools
    import inspect
    signature, kept = inspect.signature(fn), []

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = dict(bound.arguments)
        schedule, graph, part = given.pop("schedule"), given.pop("graph"), given.pop("part")
        given.pop("progress", None)
        given.pop("prefix", None)
        key = (repr(schedule.tasks), schedule.groups,
               part if isinstance(part, str) else _part_key(part),
               repr(sorted((k, v.as_dict() if hasattr(v, "as_dict") else v)
                           for k, v in given.items())))
        for g, k, result in kept:
            if g is graph and k == key:
                return dict(result)
        result = fn(*args, **kwargs)
        kept.append((graph, key, result))
        del kept[:-4]
        return dict(result)
    return inner


alone_durations = _kept_per_graph(alone_durations)


_PLANNED: list = []     # the last few planned schedules: (graph, key, result)


def planned_schedule(graph: LayerGraph, groups: int, part, host_part, issue_width: int | None = None,
                     progress=None, plan: bool = True, exchange=None, host_times=None,
                     slices: int = 1, layrub: bool = False):
    """The pipelined schedule with its weight gradients placed by pimrt.runtime.plan (on the
    tasks' durations alone), its tasks' durations alone (alone_durations, timed again once
    the plan moved any), and the plan ({CONV: later CONV}). exchange:
    an ExchangeConfig for GradSA's schedule (default: the SGD update). Kept for the graph's
    next policy (pimrt compare times each graph several times)."""
    from pimrt.runtime.exchange import ExchangeConfig
    exchange = exchange or ExchangeConfig()
    key = (groups, _part_key(part), str(host_part), issue_width, plan,
           repr(exchange.as_dict()),
           hash(frozenset(host_times.items())) if host_times else None, slices, layrub)
    for g, k, result in _PLANNED:
        if g is graph and k == key:
            return result
    result = _plan(graph, groups, part, host_part, issue_width, progress, plan, exchange,
                   host_times, slices, layrub)
    _PLANNED.append((graph, key, result))
    del _PLANNED[:-4]
    return result


def _part_key(part) -> tuple:
    return (part.name, str(part.path), *(tuple(sorted((k, str(v)) for k, v in m.items()))
                                          for m in (part.org, part.timing, part.controller,
                                                    part.pim or {})))


def _plan(graph, groups, part, host_part, issue_width, progress, plan, exchange, host_times,
          slices, layrub):
    from pimrt.runtime.plan import plan_deferrals
    from pimrt.runtime.prefix import Prefixes

    rules = pipelined_rules(part, host_part, groups, slices)

    def build(defer):
        return pipelined_schedule(graph, groups, part, host_part, exchange.mode, slices, defer,
                                  rules)
    schedule = build({})
    prefix = Prefixes() if plan else None
    duration = alone_durations(schedule, graph, part, host_part, issue_width, progress,
                               exchange, host_times, layrub, prefix)
    defer = plan_deferrals(build, duration) if plan else {}
    if not defer:
        return schedule, duration, defer
    # the moved weight gradients change what runs next to what: the durations of the
    # schedule as it will run (for the slack rule and the bounds), the streams' shared
    # prefix not simulated again
    schedule = build(defer)
    return schedule, alone_durations(schedule, graph, part, host_part, issue_width, progress,
                                     exchange, host_times, layrub, prefix), defer


def time_step(graph: LayerGraph, policy: str = "authority", groups: int = DEFAULT_GROUPS,
              part="v100_hbm2_pim", host_part="v100", issue_width: int | None = None, progress=None,
              options: dict | None = None, rule: bool | None = None,
              layrub: bool = False, exchange=None, plan: bool = True,
              host_times=None, slices: int | None = None,
              authority_rule: str = DEFAULT_AUTHORITY_RULE, sink=None) -> StepTiming:
    """Time one training step of `graph` (captured at its batch) under `policy`. The serial
    policy runs the unpipelined schedule (host and PIM take turns per layer). rule (default:
    on for authority unless options fix the parameters) sets the authority parameters per
    layer (pimrt.runtime.authority). layrub: Layrub's offload and prefetch traffic goes
    through memctl too (pimrt.runtime.timing.layrub_transfers). exchange: an ExchangeConfig
    (or its mode name) for GradSA / LaySA's sparse exchange instead of the SGD update
    (pimrt.runtime.exchange). plan: a pipelined policy with the SGD or GradSA update (and no
    Layrub) first times the schedule's tasks alone and moves weight gradients to where the
    host would wait (pimrt.runtime.plan; StepTiming.schedule then has them in their planned
    place). host_times: measured host kernel times, (layer, phase, lo, hi) -> ms, replacing
    the modelled compute of those tasks (pimrt.runtime.host_times). slices: the forward
    pass's batch slices (default: slices_for the batch; the CONVs slice_rule picks run by
    slice; 1: channel groups only). authority_rule: "slack" (by whether the step waits for
    the host task, the default) or "layer" (the per-layer rule): pimrt.runtime.authority.
    sink: sees the timed run's stream as it is fed (pimrt.trace.step; not the plan's runs)."""
    from pimrt.runtime.exchange import ExchangeConfig
    if authority_rule not in AUTHORITY_RULES:
        raise ConfigError(f"unknown authority rule {authority_rule!r}; choose one of "
                          f"{', '.join(AUTHORITY_RULES)}")
    if not isinstance(exchange, ExchangeConfig):
        exchange = ExchangeConfig(mode=exchange or "sgd")
    slices = slices_for(graph.batch, slices)
    if policy == "gpu_only":
        p = step_part(part, host_part)
        timing = time_schedule(gpu_only_schedule(graph, exchange.mode), graph, p, host_part,
                               "serial", issue_width, progress, options, False, layrub,
                               exchange, None, host_times, sink=sink)
        timing.policy = "gpu_only"
        return timing
    if rule is None:
        rule = policy == "authority" and not options
    p = step_part(part, host_part)
    placement = place_step(graph, p, exchange.mode)
    pipelined = policy != "serial"
    defer, duration = {}, None
    if pipelined and plan and exchange.mode in ("sgd", "gradsa") and not layrub:
        schedule, duration, defer = planned_schedule(graph, groups, p, host_part, issue_width,
                                                     progress, exchange=exchange,
                                                     host_times=host_times, slices=slices)
    elif pipelined:
        schedule = pipelined_schedule(graph, groups, p, host_part, exchange.mode, slices)
    else:
        schedule = build_schedule(graph, 1, pipelined=False, exchange=exchange.mode)
    slack, profile = None, None
    if rule and authority_rule != "layer":
        if authority_rule == "slack":      # profiled on an earlier step, the per-layer rule's
            profile = time_schedule(schedule, graph, p, host_part, policy, issue_width,
                                    progress, options, True, layrub, exchange, placement,
                                    host_times)
            profile.deferred, profile.authority_rule = defer, "layer"
            duration = measured_durations(profile)
        elif duration is None:
            duration = alone_durations(schedule, graph, p, host_part, issue_width, progress,
                                       exchange, host_times, layrub)
        from pimrt.runtime.plan import slack as task_slack, task_key
        left = task_slack(schedule, duration)
        pim_load = side_load(schedule, duration)
        slack = {t.id: (int(left[t.id]), duration[task_key(t)], pim_load)
                 for t in schedule.tasks}
    timing = time_schedule(schedule, graph, p, host_part, policy, issue_width, progress,
                           options, rule, layrub, exchange, placement, host_times, slack,
                           sink=sink)
    if profile is not None and profile.makespan < timing.makespan:
        # the runtime has measured both steps, the profiled one under the per-layer rule and
        # the slack rule's: it keeps the shorter for the steps after them (a trace being
        # written: that step run again, its trace written over the slack rule's step's)
        tried = timing
        timing = dataclasses.replace(profile) if sink is None else time_schedule(
            schedule, graph, p, host_part, policy, issue_width, progress, options, True,
            layrub, exchange, placement, host_times, sink=sink)
        timing.slack_step = tried
    timing.deferred = defer
    timing.authority_rule = authority_rule if rule else None
    timing.profile = profile
    return timing


def side_load(schedule: Schedule, duration: dict) -> float:
    """The PIM tasks' time over the host tasks' (task_key -> cycles): how close the PIM's
    work comes to the host's (0 without host work)."""
    from pimrt.runtime.plan import task_key
    busy = {"host": 0, "pim": 0}
    for t in schedule.tasks:
        busy[t.side] += duration[task_key(t)]
    return busy["pim"] / busy["host"] if busy["host"] else 0.0


def measured_durations(step: StepTiming) -> dict:
    """Each task's duration as a profiler sees it in a timed step: its own share of its
    side's time (marginal over that side's tasks in stream order). task_key -> cycles."""
    from pimrt.runtime.plan import task_key
    out = {}
    for side in ("host", "pim"):
        tasks = [t for t in step.schedule.tasks if t.side == side]
        ids = [t.id for t in tasks]
        out.update(zip(map(task_key, tasks), marginal(step.start[ids], step.end[ids])))
    return out


def peak_issue_width(part) -> int:
    """Requests a side's front end offers per memory cycle: as many as the part's buses move
    at peak (channels x bus bytes x 2 transfers a cycle / request bytes: 4 on one HBM2 stack,
    16 on four), so neither the host's crossbar nor the PIM's command path caps the memory."""
    return max(1, math.ceil(part.channel_count * part.org["bus_width"] / 8 * 2
                            / part.request_bytes))


def gpu_only_schedule(graph: LayerGraph, exchange: str = "sgd") -> Schedule:
    """GPU-only execution: the serial baseline's tasks in its order, every one on the host (the
    non-CONV ops as the GPU's memory-bound kernels: pimrt.runtime.work.GPU_KERNELS)."""
    s = build_schedule(graph, 1, pipelined=False, exchange=exchange)
    return dataclasses.replace(s, tasks=[dataclasses.replace(t, side="host") for t in s.tasks])


def time_schedule(schedule: Schedule, graph: LayerGraph, part, host_part="v100",
                  policy: str = "authority", issue_width: int | None = None, progress=None,
                  options: dict | None = None, rule: bool = False, layrub: bool = False,
                  exchange=None, placement=None, host_times=None,
                  slack: dict | None = None, transfers: dict | None = None,
                  sink=None, prefix=None) -> StepTiming:
    """Run the tasks of `schedule` through memctl under `policy` on the part (a Part, as
    step_part gives it); a schedule with pipelined=False gets a barrier whenever the side
    changes. rule: the authority parameters per host CONV/linear (pimrt.runtime.authority);
    slack: {task id: (slack, duration, the PIM's load)} for the slack rule instead of the per-layer
    one. transfers: Layrub's DMA by task id (layrub_transfers) when the caller placed them
    itself. sink: an object that sees the stream as it is fed (pimrt.trace.step.StepTrace).
    prefix: (Prefixes, side) for a side's tasks alone in a plan (pimrt.runtime.prefix): the
    part of the stream an earlier timing of the plan shared is not simulated again."""
    from pimrt.runtime.exchange import ExchangeConfig
    exchange = exchange or ExchangeConfig()
    issue_width = issue_width or peak_issue_width(part)
    placement = placement or place_step(graph, part, exchange.mode)
    ctx = context(graph, part, placement, host_part, policy, exchange=exchange,
                  host_times=host_times)
    from pimrt.memctl import Controller, Options   # the compiled extension, on first use
    ctl = Controller(part, Options(policy=policy, issue_width=issue_width, **(options or {}),
                                   **(sink.options() if sink else {})))
    wall = time.perf_counter()
    if layrub and transfers is None:
        transfers = layrub_transfers(schedule, ctx)
    if ctl.by_side and schedule.pipelined and not sink:  # (no BARRIERs; a sink writes one)
        total = run_by_side(ctl, TaskPieces(schedule, ctx, rule, transfers, slack), progress)
    elif prefix is not None and not (sink or rule or slack or transfers):
        store, side = prefix
        ctl, total = store.run(side, ctl, schedule.tasks,
                               TaskPieces(schedule, ctx, rule, transfers, slack), progress)
    else:
        stream = task_stream(schedule, ctx, rule, transfers, slack)
        total = _run(ctl, sink.record(stream, schedule, ctl) if sink else stream, progress)
    if sink:
        sink.close(ctl)
    start, end = _task_times(ctl, len(schedule.tasks))
    wall = time.perf_counter() - wall
    timing = StepTiming(policy, schedule.groups, schedule, start, end, ctl.stats(),
                        part.timing["tCK"], wall, total, ctl.mode_switches(), exchange)
    del ctl
    release()                 # (the stream's arrays and memctl's buffers are freed)
    return timing


def _run(ctl, stream, progress=None) -> int:
    """Feed a stream of record arrays to the controller in chunks of at most FEED_RECORDS
    (pimrt.runtime.sides.chunks) and finish the run; returns the number of records."""
    total = 0
    for recs in chunks(stream, FEED_RECORDS):
        ctl.feed(recs)
        total += len(recs)
        if progress:
            progress(len(recs))
    ctl.finish()
    return total


def _task_times(ctl, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each task's start and end cycles from its SIGNAL events (2 id, 2 id + 1)."""
    ev = ctl.events()
    return ev[0:2 * n:2, 0], ev[1:2 * n:2, 1]


def contention_free_bound(graph: LayerGraph, groups: int = DEFAULT_GROUPS, part="v100_hbm2_pim",
                          host_part="v100", issue_width: int | None = None, progress=None,
                          plan: bool = True, host_times=None, slices: int | None = None,
                          exchange=None, layrub: bool = False) -> dict:
    """The pipelined step as if host and PIM each had the memory to themselves: every task of
    the co-execution schedule (with its planned weight gradients, as time_step runs it) is
    timed through memctl alone (host and PIM never at once: a barrier whenever the side
    changes), then each side runs its tasks in order, a task starting once its side is free
    and its dependencies have ended. The gap between this and a policy's step time is what
    sharing the channels costs; the gap between serial and this is all the dependencies leave
    to overlap."""
    from pimrt.runtime.exchange import ExchangeConfig
    from pimrt.runtime.plan import list_schedule, task_key
    if not isinstance(exchange, ExchangeConfig):
        exchange = ExchangeConfig(mode=exchange or "sgd")
    p = step_part(part, host_part)
    slices = slices_for(graph.batch, slices)
    plan = plan and exchange.mode in ("sgd", "gradsa") and not layrub   # as time_step plans
    schedule, duration, _ = planned_schedule(graph, groups, p, host_part, issue_width,
                                             progress, plan, exchange=exchange,
                                             host_times=host_times, slices=slices,
                                             layrub=layrub)
    makespan = list_schedule(schedule, duration)[0]
    busy = {side: int(sum(duration[task_key(t)] for t in schedule.tasks if t.side == side))
            for side in ("host", "pim")}
    ms = p.timing["tCK"] * 1e-6
    return {"makespan_cycles": makespan, "step_ms": makespan * ms,
            "host_busy_cycles": busy["host"], "pim_busy_cycles": busy["pim"],
            # no schedule can beat the longer side's work alone
            "lower_bound_step_ms": max(busy.values()) * ms}

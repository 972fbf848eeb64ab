"""The task graph of one training step.

Every op of the step becomes one or more tasks, each run by one side (host or PIM) on one
output-channel group, with the tasks it depends on. Host tasks: CONV/linear forward, their
backward split into the feature-map-gradient phase (bwd_data, all groups) then the
weight-gradient phase (bwd_weight: one task, or one a group for the first CONV, which has no
bwd_data), the loss, dropout and unsupported ops.
PIM tasks: batch norm, ReLU, residual add, pooling, gradient accumulation at forks, concat, and
the SGD update.

Pipelining (research: Choi et al., IEEE Access 2024): in the forward pass the PIM works on
group g of a CONV's output while the host computes group g+1; in the backward pass the PIM's
feature-map-gradient work for the layers below a CONV (batch norm, ReLU backward on the dX just
computed) runs while the host computes that CONV's weight gradient, and the CONV's SGD update
runs on the PIM after the backward work on the layers below the next UPDATE_LAG CONVs (it
fills the PIM's wait for a dX instead of delaying work the host waits for). Each side runs
its tasks in the order they are created here (one stream per side); a task waits for its
dependencies on the other side. Layers are visited in `step_order`: the graph's order, but
a projection shortcut right after its block's first CONV (backward: the reverse). A CONV's
dW comes right after its dX unless `defer` moves it later in the host's order (the plan of
pimrt.runtime.plan, for the pipelined SGD step).

With `exchange="gradsa"` or `"laysa"` each layer's SGD update becomes GradSA's sparse
exchange (fold, sample, select, exchange, apply; LaySA: fetch and evict of the layer's
momentum and residual too): pimrt.runtime.exchange.

Forward by batch slices (`slices`, and `slice_rule` saying which CONVs): a sliced CONV runs
as `slices` tasks, each on its share of the batch and needing only that share of its input,
and the PIM ops after it follow slice by slice (batch norm as each slice's statistics, then
each slice normalised once all statistics are in), so the host starts the next CONV on slice 0
while the PIM finishes this one: the pipeline runs across layers. Where a sliced tensor meets
one in channel groups, the task waits for all of it. Backward stays by channel groups.

Two finer dependencies: a channel concatenation (DenseNet) is copied part by part, and batch
norm and ReLU on it run per part, each part as soon as its producer is done (the earlier
layers' features are normalised while the host computes the newest); a split depthwise CONV's
group g needs only group g of its input, and its dX comes out in groups.
"""
from __future__ import annotations

import dataclasses
import math

from pimrt.errors import ConfigError
from pimrt.graph.precision import loss_scaling, of as precision_of, weight_copy
from pimrt.graph import LayerGraph
from pimrt.graph.layer import PIM_KINDS, runs_on_pim    # what the PIM runs: one rule

HOST_COMPUTE = ("conv", "linear")
# how many CONVs later in the PIM's order a layer's SGD update (GradSA: its fold) comes than
# its weight gradient: after the PIM's backward work that the host's next dX tasks wait for
# (docs/runtime-measurements.md: 1, 3 and 4 measured against 2)
UPDATE_LAG = 2
PER_CHANNEL = ("batchnorm", "relu", "relu6")   # ops that work channel by channel
ELEMENTWISE_PIM = ("batchnorm", "relu", "relu6", "add", "maxpool", "avgpool", "adaptive_avgpool")


@dataclasses.dataclass
class Task:
    id: int
    side: str                 # "host" or "pim"
    layer: str                # the layer (graph node) it belongs to
    kind: str                 # conv, linear, batchnorm, relu, ..., accumulate, update, loss
    phase: str                # fwd, bwd_data, bwd_weight, bwd, update
    group: int                # output-channel group, or -1 for the whole tensor
    groups: int               # how many groups the layer is split into
    deps: list[int]
    numel: int = 0            # elements it produces (PIM: elements it processes)
    tensors: dict = dataclasses.field(default_factory=dict)  # role -> (tensor name, bytes)
    part: int = -1            # concat part it works on (see `span`), or -1
    span: tuple[float, float] | None = None   # the slice of its tensors (fractions of the
                                              # channels) when it works on one concat part
    slice: int = -1           # batch slice it works on (forward by batch slices), or -1
    slices: int = 1           # how many batch slices the step's forward pass is cut into

    @property
    def label(self) -> str:
        g = f"[{self.group}/{self.groups}]" if self.group >= 0 else \
            (f"[part {self.part}]" if self.part >= 0 else
             (f"[b{self.slice}/{self.slices}]" if self.slice >= 0 else ""))
        return f"{self.layer}.{self.phase}{g}"


@dataclasses.dataclass
class Schedule:
    graph: LayerGraph
    groups: int
    tasks: list[Task]
    pipelined: bool


def channelwise(layer, groups: int) -> bool:
    """A CONV whose output channel c reads only input channel c (depthwise: groups = Cin =
    Cout) and whose channels split into `groups` equal groups: splitting it re-reads nothing
    and its group g depends on group g of its input only."""
    a = layer.attrs
    if layer.kind != "conv" or groups < 2:
        return False
    cin, cout = a.get("in_channels"), a.get("out_channels")
    return a.get("groups", 1) == cin == cout and cout % groups == 0


def _split(n: int, groups: int) -> list[tuple[int, int]]:
    return [(n * g // groups, n * (g + 1) // groups) for g in range(groups)]


def build_schedule(graph: LayerGraph, groups: int = 4, pipelined: bool = True,
                   update: bool = True, group_count=None, exchange: str = "sgd",
                   defer: dict[str, str] | None = None, slices: int = 1,
                   slice_rule=None) -> Schedule:
    """Tasks of one training step (forward, loss, backward, SGD update).

    exchange: "sgd" (a plain SGD update per layer on the PIM), "gradsa" or "laysa" (sparse
    gradient exchange; pimrt.runtime.exchange says which tasks replace the update).

    groups: output-channel groups of every CONV (must divide their output channels);
    pipelined=False gives the serial baseline's task graph (one group, every task waits for
    the whole previous step). group_count(layer) -> int, when given, is each CONV's own
    group count, at most `groups` (1: it runs whole; see pimrt.runtime.timing.group_rule).

    slices: the batch slices of the forward pass (must divide the batch; 1: none);
    slice_rule(layer) -> bool says which CONVs run by slices (default: all;
    pimrt.runtime.timing.slice_rule). The serial baseline has none.

    defer: {CONV: later CONV} moves a CONV's weight gradient (dW, and so its update) later in
    the host's backward order, to just before the later CONV's backward (its dX, or its dW
    when it has no dX), where the host would wait for the PIM (pimrt.runtime.plan chooses
    them). Only with pipelined=True and the SGD or GradSA update (LaySA fetches a layer's u and
    v for its dW and folds at once: a later dW would keep them longer); the serial baseline
    keeps dX, dW."""
    if groups < 1:
        raise ConfigError(f"groups must be >= 1, got {groups}")
    if graph.batch < 1:
        raise ConfigError(f"batch must be >= 1, got {graph.batch}")
    if not pipelined:
        groups = 1
    for layer in graph.layers_of_kind("conv"):
        c = layer.attrs["out_channels"]
        if c % groups:
            ok = [d for d in range(1, c + 1) if all(
                l.attrs["out_channels"] % d == 0 for l in graph.layers_of_kind("conv"))]
            raise ConfigError(f"groups={groups} does not divide the {c} output channels of "
                              f"{layer.name}; group counts that divide every CONV: {ok}")
    tasks: list[Task] = []

    def task(side, layer, kind, phase, group, ngroups, deps, numel=0, tensors=None, part=-1,
             span=None, slice_=-1) -> int:
        tasks.append(Task(len(tasks), side, layer, kind, phase, group, ngroups,
                          sorted(set(deps)), numel, tensors or {}, part, span,
                          slice_, slices if slice_ >= 0 else 1))
        return len(tasks) - 1

    base = {}  # tensor -> the tensor it is a view of (flatten)
    for layer in graph.nodes:
        base[layer.name] = base.get(layer.view_of, layer.view_of) if layer.view_of else layer.name

    def real(name: str) -> str:
        return base.get(name, name)

    size = {layer.name: layer.bytes for layer in graph.nodes}
    # forward: per tensor, the task producing each of its groups
    prod: dict[str, list[int]] = {}
    # tensors produced in concat parts: tensor -> [(lo, hi)] channel fractions, one per task
    parts: dict[str, list[tuple[float, float]]] = {}

    # tensors produced by batch slice in forward: tensor -> its tasks are one per slice
    sliced: set[str] = set()

    def deps_for(tensor: str, g: int, ngroups: int, s: int = -1) -> list[int]:
        p = prod.get(real(tensor), [])
        if not p:
            return []
        if real(tensor) in sliced:
            return [p[s]] if s >= 0 else list(p)
        if len(p) == ngroups and g >= 0 and real(tensor) not in parts:
            return [p[g]]
        return list(p)

    def count(tensor: str) -> int:
        """The channel groups a forward tensor came in (a sliced one: whole)."""
        return 1 if real(tensor) in sliced else len(prod.get(real(tensor), []))

    order = step_order(graph)
    if not pipelined:
        slices = 1
    if slices < 1:
        raise ConfigError(f"slices must be >= 1, got {slices}")
    if graph.batch % slices:
        raise ConfigError(f"slices={slices} does not divide the batch of {graph.batch}")
    ngs: dict[str, int] = {}   # backward: each tensor's output-channel groups
    for layer in order:
        kind, name = layer.kind, layer.name
        if kind in ("input", "output"):
            prod.setdefault(name, [])
            continue
        if layer.view_of:  # flatten: an alias
            continue
        ins = [real(i) for i in layer.inputs]
        if kind in HOST_COMPUTE:
            cout = layer.attrs.get("out_channels", layer.attrs.get("out_features", 1))
            ng = groups if kind == "conv" or cout % groups == 0 else 1
            if group_count is not None:   # the layer's own count: 1 (whole) up to ng
                ng = min(ng, int(group_count(layer)))
                if ng < 1 or cout % ng:
                    raise ConfigError(f"{name}: {ng} groups do not divide its {cout} output "
                                      f"channels")
            ngs[name] = ng
            if slices > 1 and (slice_rule is None or slice_rule(layer)):
                # by batch slice: slice s needs slice s of its input only
                prod[name] = [task("host", name, kind, "fwd", -1, 1,
                                   [d for i in ins for d in deps_for(i, -1, 0, s)],
                                   layer.numel // slices,
                                   {"input": (ins[0], size[ins[0]]), "output": (name, size[name])},
                                   slice_=s) for s in range(slices)]
                sliced.add(name)
                continue
            dw = channelwise(layer, ng) and ins[0] not in parts and ins[0] not in sliced
            prod[name] = []
            for g, (lo, hi) in enumerate(_split(cout, ng)):
                # a depthwise CONV's group g reads only group g of its input
                deps = [d for i in ins for d in (deps_for(i, g, ng) if dw and ng > 1
                                                 else deps_for(i, -1, 0))]
                prod[name].append(task("host", name, kind, "fwd", g if ng > 1 else -1, ng, deps,
                                       layer.numel * (hi - lo) // cout,
                                       {"input": (ins[0], size[ins[0]]), "output": (name, size[name])}))
        elif kind in PER_CHANNEL and len(ins) == 1 and ins[0] in parts \
                and runs_on_pim(layer, "fwd"):
            # batch norm / ReLU of a concatenation: each part as soon as it exists (DenseNet:
            # the earlier layers' features are normalised while the host computes the newest)
            prod[name], parts[name] = [], list(parts[ins[0]])
            for k, (lo, hi) in enumerate(parts[ins[0]]):
                prod[name].append(task("pim", name, kind, "fwd", -1, 1, [prod[ins[0]][k]],
                                       round(layer.numel * (hi - lo)),
                                       {"input": (ins[0], size[ins[0]]),
                                        "output": (name, size[name])}, k, (lo, hi)))
        elif kind in ELEMENTWISE_PIM and any(i in sliced for i in ins) \
                and all(i in sliced or count(i) <= 1 for i in ins):
            # a sliced input (and the others whole): slice by slice. Batch norm needs the
            # statistics of the whole batch: each slice's (its mean and variance, combined on
            # the host) as the slices arrive, then each slice normalised once all are in
            ngs[name] = _common_groups([ngs.get(i, 0) for i in ins])
            numel = max(math.prod(layer.input_shapes[0]), layer.numel) // slices
            io = {"input": (ins[0], size[ins[0]]), "output": (name, size[name])}
            side = "pim" if runs_on_pim(layer, "fwd") else "host"
            if kind == "batchnorm" and side == "pim":
                stats = [task("pim", name, "batchnorm_stats", "fwd", -1, 1,
                              deps_for(ins[0], -1, 0, s), numel, io, slice_=s)
                         for s in range(slices)]
                prod[name] = [task("pim", name, "batchnorm_apply", "fwd", -1, 1, stats, numel,
                                   io, slice_=s) for s in range(slices)]
            else:
                prod[name] = [task(side, name, kind, "fwd", -1, 1,
                                   [d for i in ins for d in deps_for(i, -1, 0, s)], numel, io,
                                   slice_=s) for s in range(slices)]
            sliced.add(name)
        elif kind in ELEMENTWISE_PIM:
            # as many groups as its grouped inputs; an input made whole (one task) is complete
            # before any group starts, so a residual add of a grouped branch and a whole
            # shortcut still runs group by group (and the ReLU after it, and the next CONV)
            ng = 1 if any(i in parts for i in ins) else _common_groups([count(i) for i in ins])
            ngs[name] = ng
            prod[name] = []
            for g in range(ng):
                deps = [d for i in ins for d in deps_for(i, g if ng > 1 else -1, ng)]
                # elements of one input stream (a residual add reads two of them, each of
                # the output's size; a pool's input is larger than its output)
                numel_in = math.prod(layer.input_shapes[0]) // ng
                side = "pim" if runs_on_pim(layer, "fwd") else "host"
                prod[name].append(task(side, name, kind, "fwd", g if ng > 1 else -1, ng, deps,
                                       max(numel_in, layer.numel // ng),
                                       {"input": (ins[0], size[ins[0]]), "output": (name, size[name])}))
        elif kind == "concat" and len(ins) > 1 and layer.attrs.get("dim", 1) in (1, -3) \
                and all(len(s) == 4 for s in layer.input_shapes):
            # channel concatenation: one copy task per part, each waiting for its own producer
            chans = [s[1] for s in layer.input_shapes]
            total, lo = sum(chans), 0
            prod[name], parts[name] = [], []
            for k, (i, c) in enumerate(zip(ins, chans)):
                span = (lo / total, (lo + c) / total)
                prod[name].append(task("pim", name, kind, "fwd", -1, 1, deps_for(i, -1, 0),
                                       layer.numel * c // total,
                                       {"output": (name, size[name])}, k, span))
                parts[name].append(span)
                lo += c
        elif kind == "concat":
            deps = [d for i in ins for d in deps_for(i, -1, 0)]
            prod[name] = [task("pim", name, kind, "fwd", -1, 1, deps, layer.numel,
                               {"output": (name, size[name])})]
        else:  # dropout, host_fallback: the host, whole tensor
            deps = [d for i in ins for d in deps_for(i, -1, 0)]
            prod[name] = [task("host", name, kind, "fwd", -1, 1, deps, layer.numel,
                               {"input": (ins[0], size[ins[0]]), "output": (name, size[name])})]

    for tensor, p in prod.items():
        ngs.setdefault(tensor, len(p))
    # the loss, on the host: reads the logits, writes their gradient
    out_node = graph.nodes[-1]
    logits = real(out_node.inputs[0]) if out_node.inputs else graph.nodes[-2].name
    loss = task("host", "loss", "loss", "bwd", -1, 1, deps_for(logits, -1, 0),
                math.prod(graph[logits].shape), {"input": (logits, size[logits])})
    # backward: per tensor, the contributions to its gradient (each a list of per-group tasks)
    contrib: dict[str, list[list[int]]] = {logits: [[loss]]}
    grad: dict[str, list[int]] = {}
    pending_updates: list[tuple] = []
    if exchange not in ("sgd", "gradsa", "laysa"):
        raise ConfigError(f"unknown update {exchange!r}; choose one of sgd, gradsa, laysa")
    if exchange == "laysa" and loss_scaling(graph):
        raise ConfigError(f"--update laysa with --precision {precision_of(graph)}: LaySA "
                          f"applies each layer's update during backward, before the loss "
                          f"scaler could check every gradient for inf/NaN; use amp-bf16 (no "
                          f"loss scaling) or --exchange sgd/gradsa")
    sparse = exchange != "sgd"
    # sparse exchange (pimrt.runtime.exchange): per layer fold (PIM) -> sample (host) ->
    # select (PIM) -> exchange (host) -> apply (PIM); each stage is created at the next point
    # of the host's order where the host need not wait for the PIM: the fold when the next
    # CONV starts, sample and select after its dX, the exchange after its dW, LaySA's apply
    # when the CONV after it starts (GradSA alone: after backward)
    folded: list[tuple] = []
    selected: list[tuple] = []
    applies: list[tuple] = []
    final_updates: list[tuple] = []
    fetched: dict[str, int] = {}

    # SGD and GradSA: a layer's update (GradSA: its fold) waits UPDATE_LAG more CONVs in the
    # PIM's order, so that it comes after the PIM's backward work on the layers below the
    # next CONVs (the host's dX after each of them waits for that work; nothing in the step
    # waits for an update). LaySA folds at once: its update is applied in backward, freeing
    # the layer's gradient, u and v early.
    lagged: list[list[tuple]] = [[] for _ in range(UPDATE_LAG)]

    def flush_updates():
        for args in applies:
            task(*args)
        applies.clear()
        if exchange == "laysa":
            now = list(pending_updates)
        else:
            lagged.append(list(pending_updates))
            now = lagged.pop(0)
        pending_updates.clear()
        for args in now:
            args = amp_cast(args)
            if args is None:
                continue
            if not sparse:
                task(*args)
                continue
            _, name, _, _, _, _, deps, numel, tensors = args
            fold(name, numel, tensors, deps + [fetched[name]] if exchange == "laysa" else deps)

    def fold(name, numel, tensors, deps):
        folded.append((name, numel, tensors,
                       task("pim", name, "fold", "update", -1, 1, deps, numel, tensors)))

    scaling = loss_scaling(graph)
    unscaled: list[int] = []
    checked: list[tuple] = []

    def amp_cast(args):
        """AMP (pimrt.graph.precision): a CONV's 16-bit weight gradient becomes its fp32
        gradient, and with loss scaling every gradient is unscaled and checked for inf/NaN
        (an "unscale" task; torch: autograd's cast back, then GradScaler.unscale_), before
        its update or fold. With loss scaling no update may run before every gradient is
        checked (the scaler skips the step on an inf, leaving every state as it was): the
        updates, and GradSA's folds (a fold changes the momentum and the residual), wait
        for the last unscale (returns None: held in `checked`)."""
        layer = graph[args[1]]
        if not (weight_copy(graph, layer) or scaling):
            return args
        u = task("pim", args[1], "unscale", "update", -1, 1, args[6], args[7], args[8])
        unscaled.append(u)
        args = args[:6] + ([u],) + args[7:]
        if scaling:
            checked.append(args)
            return None
        return args

    def fetch(name: str, numel: int) -> None:
        """LaySA: bring the layer's momentum and residual in (one layer ahead of its fold)."""
        if exchange == "laysa":
            fetched[name] = task("host", name, "fetch", "update", -1, 1, [], numel)

    def after_dx():
        for name, numel, tensors, f in folded:
            smp = task("host", name, "sample", "update", -1, 1, [f], numel, tensors)
            selected.append((name, numel, tensors,
                             task("pim", name, "select", "update", -1, 1, [smp], numel, tensors)))
        folded.clear()

    def after_dw():
        for name, numel, tensors, sel in selected:
            x = task("host", name, "exchange", "update", -1, 1, [sel], numel, tensors)
            if exchange == "laysa":
                task("host", name, "evict", "update", -1, 1, [sel], numel)
            (applies if exchange == "laysa" else final_updates).append(
                ("pim", name, "update", "apply", -1, 1, [x], numel, tensors))
        selected.clear()

    def by_part(ts: list[int], n: int) -> bool:
        """Whether tasks `ts` are one per concat part, in part order."""
        return len(ts) == n > 1 and all(tasks[t].part == k for k, t in enumerate(ts))

    def newest_first(name: str, make) -> list[int]:
        """One task per concat part of tensor `name`, make(k, (lo, hi)), created newest part
        first (the CONV that produced it is the host's next dX, which need not wait for the
        older parts); returned in part order."""
        out = [0] * len(parts[name])
        for k in reversed(range(len(out))):
            out[k] = make(k, parts[name][k])
        return out

    def grad_of(name: str, ng: int) -> list[int]:
        """The tasks giving the gradient of tensor `name` per group (accumulating the
        contributions of several readers on the PIM)."""
        if name in grad:
            return grad[name]
        got = contrib.get(name, [])
        if not got:
            grad[name] = []
            return []
        if len(got) == 1:
            keep = name in parts and by_part(got[0], len(parts[name]))
            grad[name] = list(got[0]) if keep else _regroup(got[0], ng)
            return grad[name]
        if name in parts:   # a concatenation's gradient part by part
            n = len(parts[name])
            grad[name] = newest_first(name, lambda k, span: task(
                "pim", name, "accumulate", "bwd", -1, 1,
                [d for p in got for d in ([p[k]] if by_part(p, n) else p)],
                round(graph[name].numel * (span[1] - span[0])) * (len(got) - 1),
                {"grad": (name, size[name])}, k, span))
            return grad[name]
        out = []
        for g in range(ng):
            deps = [d for p in got for d in _regroup(p, ng)[g:g + 1]]
            out.append(task("pim", name, "accumulate", "bwd", g if ng > 1 else -1, ng, deps,
                            graph[name].numel * (len(got) - 1) // ng,
                            {"grad": (name, size[name])}))
        grad[name] = out
        return out

    defer = dict(defer or {}) if pipelined and exchange in ("sgd", "gradsa") else {}
    rank = {layer.name: i for i, layer in enumerate(reversed(order))}
    for src, dst in defer.items():
        if src not in rank or dst not in rank or rank[dst] <= rank[src] \
                or graph[src].kind not in HOST_COMPUTE or graph[dst].kind not in HOST_COMPUTE:
            raise ConfigError(f"defer {src!r} -> {dst!r}: a CONV's weight gradient can only "
                              f"move to a CONV later in the backward pass")
    held: dict[str, object] = {}     # deferred CONV -> makes its dW and queues its update

    def weight_gradient(layer, deps: list[int], io: dict) -> None:
        queue_update(layer, [task("host", layer.name, layer.kind, "bwd_weight", -1, 1, deps,
                                  layer.numel, io)])

    def queue_update(layer, ws: list[int]) -> None:
        """After a CONV's dW tasks `ws`: its exchange stages, its update (UPDATE_LAG later)."""
        after_dw()
        if update and layer.param_bytes:
            pending_updates.append(("pim", layer.name, "update", "update", -1, 1, ws,
                                    layer.param_numel,
                                    {"param": (layer.name, layer.param_bytes)}))

    for layer in reversed(order):
        kind, name = layer.kind, layer.name
        if kind in ("input", "output") or layer.view_of:
            continue
        ng = 1 if name in parts else (ngs.get(name) or len(prod.get(name, [])) or 1)
        gout = grad_of(name, ng)
        ins = [real(i) for i in layer.inputs]
        if kind in HOST_COMPUTE:
            flush_updates()
            for src in sorted((s for s, d in defer.items() if d == name and s in held),
                              key=rank.get):
                held.pop(src)()     # deferred dWs fill the host's wait for this CONV's dY
            needs_dx = bool(layer.attrs.get("needs_input_grad", True)) and ins[0] in prod and \
                graph[ins[0]].kind != "input"
            cout = layer.attrs.get("out_channels", layer.attrs.get("out_features", 1))
            # the feature-map gradient first (one task: splitting it by output channel would
            # make every group read and write the whole dX), then the weight gradient, during
            # which the PIM runs the layers below on dX; the update follows on the PIM
            if needs_dx and channelwise(layer, ng):
                # depthwise: dX group g comes from dY group g alone, so the PIM can start
                # on the layers below group by group
                ds = [task("host", name, kind, "bwd_data", g, ng,
                           gout[g:g + 1] if len(gout) == ng else gout, graph[ins[0]].numel // ng,
                           {"grad_output": (name, size[name]),
                            "grad_input": (ins[0], size[ins[0]])}) for g in range(ng)]
                contrib.setdefault(ins[0], []).append(ds)
            elif needs_dx:
                d = task("host", name, kind, "bwd_data", -1, 1, gout, graph[ins[0]].numel,
                         {"grad_output": (name, size[name]), "grad_input": (ins[0], size[ins[0]])})
                contrib.setdefault(ins[0], []).append([d])
            after_dx()
            if update and layer.param_bytes:
                fetch(name, layer.param_numel)
            io = {"grad_output": (name, size[name]), "input": (ins[0], size[ins[0]])}
            if name in defer:
                if not needs_dx:
                    raise ConfigError(f"defer {name!r}: it has no dX, its dW is already where "
                                      f"the host would wait")
                held[name] = lambda layer=layer, deps=list(gout), io=io: \
                    weight_gradient(layer, deps, io)
                continue
            if not needs_dx and kind == "conv" and ng > 1 and len(gout) == ng:
                # no dX (the first CONV): the PIM has no layer below to run during this
                # dW, so the backward of the batch norm and ReLU after this CONV would run
                # alone at the end of the step; dW goes by output-channel group instead, group
                # g once dY's group g exists (each group reads the input again: an image)
                queue_update(layer, [task("host", name, kind, "bwd_weight", g, ng, [gout[g]],
                                          layer.numel // ng, io) for g in range(ng)])
            else:
                weight_gradient(layer, gout, io)
        elif kind in ELEMENTWISE_PIM:
            if kind == "add":  # the gradient passes to both inputs unchanged
                for i in ins:
                    contrib.setdefault(i, []).append(list(gout))
                continue
            io = {"grad_output": (name, size[name]), "grad_input": (ins[0], size[ins[0]]),
                  "input": (ins[0], size[ins[0]])}
            if kind in PER_CHANNEL and len(ins) == 1 and ins[0] in parts \
                    and name in parts and runs_on_pim(layer, "bwd"):
                # batch norm / ReLU backward of a concatenation: part by part
                per = by_part(gout, len(parts[name]))
                outs = newest_first(name, lambda k, span: task(
                    "pim", name, kind, "bwd", -1, 1, [gout[k]] if per else gout,
                    round(layer.numel * (span[1] - span[0])), io, k, span))
            else:
                numel_in = sum(math.prod(s) for s in layer.input_shapes) // ng
                side = "pim" if runs_on_pim(layer, "bwd") else "host"
                outs = [task(side, name, kind, "bwd", g if ng > 1 else -1, ng,
                             gout[g:g + 1] if len(gout) == ng else gout, numel_in, io)
                        for g in range(ng)]
            if ins[0] in prod:
                contrib.setdefault(ins[0], []).append(outs)
            if kind == "batchnorm" and update and layer.param_bytes:
                fetch(name, layer.param_numel)
                pending_updates.append(("pim", name, "update", "update", -1, 1, list(outs),
                                        layer.param_numel,
                                        {"param": (name, layer.param_bytes)}))
        elif kind == "concat":
            split = name in parts and by_part(gout, len(ins))
            for k, i in enumerate(ins):
                contrib.setdefault(i, []).append([gout[k]] if split else list(gout))
        else:
            t = task("host", name, kind, "bwd", -1, 1, gout, layer.numel,
                     {"grad_output": (name, size[name])})
            for i in ins:
                contrib.setdefault(i, []).append([t])
    for _ in range(UPDATE_LAG + 1):     # the last layer's updates, then the lagged ones
        flush_updates()
    after_dx()
    after_dw()
    for args in checked:              # loss scaling: the updates (folds) after every check
        deps = args[6] + unscaled
        if sparse:                    # (never LaySA: refused with loss scaling above)
            fold(args[1], args[7], args[8], deps)
        else:
            task(*(args[:6] + (deps,) + args[7:]))
    after_dx()
    after_dw()
    for args in applies + final_updates:
        task(*(args[:6] + (args[6] + unscaled,) + args[7:]) if scaling else args)
    return Schedule(graph, groups, _group_major(tasks), pipelined)


def layer_sides(schedule: Schedule) -> dict[str, str]:
    """Each layer's side in this schedule (layers.csv's `side`): "pim" (all its work on the
    PIM), "host" (a host layer: CONV/linear, the loss, dropout; a CONV's SGD update may run on
    the PIM), "host_fallback" (a layer of a PIM kind with work the PIM has no program for, or
    an op pimrt does not capture, run on the host). Its own op's tasks decide, not its
    parameters' update (GradSA's exchange runs partly on the host). GPU-only execution: all
    "host"."""
    g, first, on = schedule.graph, {}, {}
    for t in schedule.tasks:
        first.setdefault(t.layer, t.side)
        on.setdefault(t.layer, set())
        if t.phase in ("fwd", "bwd", "bwd_data", "bwd_weight"):
            on[t.layer].add(t.side)
    if not any(t.side == "pim" for t in schedule.tasks):
        return dict.fromkeys(first, "host")
    out = {}
    for layer, sides in on.items():
        kind = g[layer].kind if layer in g else None
        if kind == "host_fallback" or (kind in PIM_KINDS and "host" in sides):
            out[layer] = "host_fallback"
        else:
            out[layer] = "pim" if kind in PIM_KINDS else first[layer]
    return out


def host_fallback_note(graph: LayerGraph, most: int = 6) -> str | None:
    """One line naming the layers of PIM kinds that run on the host because the PIM has no
    program for them (pools other than 2x2 with stride 2, global average pooling; max-pool
    backward), or None when there are none."""
    whole, backward = [], []
    for n in graph.nodes:
        if n.kind not in PIM_KINDS:
            continue
        if not runs_on_pim(n, "fwd"):
            whole.append(f"{n.name} ({_pool_text(n)})")
        elif not runs_on_pim(n, "bwd"):
            backward.append(n.name)
    if not whole and not backward:
        return None

    def names(xs: list[str]) -> str:
        return ", ".join(xs[:most]) + (f" and {len(xs) - most} more" if len(xs) > most else "")
    parts = []
    if whole:
        parts.append(f"{len(whole)} layer{'s' if len(whole) != 1 else ''} the PIM has no "
                     f"program for run on the host: {names(whole)}")
    if backward:
        parts.append(f"the backward pass of {len(backward)} max pool"
                     f"{'s' if len(backward) != 1 else ''} runs on the host: {names(backward)}")
    return ("note: " + "; ".join(parts) + " (the PIM pools 2x2 windows with stride 2; "
            "layers.csv's side: host_fallback)")


def _pool_text(layer) -> str:
    """A pool as the note names it: "maxpool 3x3, stride 2, padding 1", "global average
    pool"."""
    a = layer.attrs
    if layer.kind == "adaptive_avgpool":
        size = tuple(a.get("output_size") or ())
        return "global average pool" if size in ((1, 1), (1,), ()) else \
            f"adaptive average pool to {'x'.join(map(str, size))}"

    def pair(v) -> tuple:
        return tuple(v) if isinstance(v, (tuple, list)) else (v, v)

    def one(v) -> str:           # 2 for (2, 2), 1x2 for (1, 2)
        v = pair(v)
        return str(v[0]) if v[0] == v[1] else "x".join(map(str, v))
    k = pair(a.get("kernel"))
    return f"{layer.kind} {k[0]}x{k[1]}, stride {one(a.get('stride'))}, padding " \
        f"{one(a.get('padding') or 0)}" + (", ceil_mode" if a.get("ceil_mode") else "")


def step_order(graph: LayerGraph) -> list:
    """The order in which the step's layers are turned into tasks (forward; backward in
    reverse): the graph's topological order, except that a CONV reading the same input as an
    earlier CONV (a residual block's projection shortcut beside the block's first CONV), with
    the layers that depend on it alone (its batch norm), comes just before the first CONV
    after that earlier reader. There the host would otherwise wait for the PIM's batch norm
    and ReLU on the reader's last channel group, and the shortcut's batch norm is done before
    the residual add needs it (in the graph's order the shortcut came last in the block, and
    the host waited for its batch norm before the block's add). In backward the shortcut's
    dX and dW then come between the branch's CONVs, while the host would wait for the PIM's
    backward on the branch."""
    nodes = list(graph.nodes)
    conv = [n.kind in HOST_COMPUTE for n in nodes]
    pos = {n.name: i for i, n in enumerate(nodes)}
    anchor: dict[int, list[int]] = {}      # position of a CONV -> chains to place before it
    moved: set[int] = set()
    for i, n in enumerate(nodes):
        if not conv[i] or not n.inputs or i in moved:
            continue
        x = n.inputs[0]
        reader = next((k for k in range(pos.get(x, -1) + 1, i)
                       if conv[k] and x in nodes[k].inputs and k not in moved), None)
        if reader is None:
            continue
        nxt = next((k for k in range(reader + 1, i) if conv[k]), None)
        if nxt is None:
            continue
        chain, names = [i], {n.name}
        for k in range(i + 1, len(nodes)):
            m = nodes[k]
            if not conv[k] and m.inputs and all(j in names for j in m.inputs):
                chain.append(k)
                names.add(m.name)
        anchor.setdefault(nxt, []).extend(chain)
        moved.update(chain)
    out = []
    for i, n in enumerate(nodes):
        for k in anchor.get(i, []):
            out.append(nodes[k])
        if i not in moved:
            out.append(n)
    return out


def _group_major(tasks: list[Task]) -> list[Task]:
    """Within each run of consecutive PIM tasks, order by group: the PIM finishes group g of
    a chain of layers (batch norm, ReLU, add) before it starts group g+1, so the host's next
    consumer of group g is not held up by the other groups. Concatenation parts likewise, in
    the forward pass the oldest part first (it exists first), in the backward pass the newest
    first (its CONV's dX is the host's next task). Whole-tensor tasks keep their
    place after the grouped ones. A run whose reordering would put a task before one it
    depends on keeps its order."""
    out: list[Task] = []
    i = 0
    while i < len(tasks):
        j = i
        while j < len(tasks) and tasks[j].side == "pim":
            j += 1
        if j == i:
            out.append(tasks[i])
            i += 1
            continue
        run = tasks[i:j]
        if any(t.slice >= 0 for t in run) and all(t.group < 0 for t in run):
            out.extend(_slice_major(run))
            i = j
            continue
        key = {t.id: (t.group if t.group >= 0 else
                      (t.part if t.phase == "fwd" else -t.part) if t.part >= 0 else 1 << 30, k)
               for k, t in enumerate(run)}
        ordered = sorted(run, key=lambda t: key[t.id])
        pos = {t.id: k for k, t in enumerate(ordered)}
        if all(pos.get(d, -1) < pos[t.id] for t in ordered for d in t.deps):
            run = ordered
        out.extend(run)
        i = j
    return out


def _common_groups(counts: list[int]) -> int:
    """The groups an elementwise op runs in, from its inputs' group counts (0: an input
    with no tasks, 1: whole): theirs when they agree, else whole."""
    ng = max(counts + [1])
    return ng if all(c in (ng, 1, 0) for c in counts) else 1


def _slice_major(run: list[Task]) -> list[Task]:
    """A run of PIM tasks of the forward pass by batch slices, slice by slice as far as
    their dependencies allow (a batch norm's statistics of every slice come before its first
    normalised slice; then normalisation, ReLU and add of slice 0, of slice 1, ...): each
    time the ready task of the lowest slice, ties in creation order."""
    created = {t.id: k for k, t in enumerate(run)}
    done: set[int] = set()
    left = list(run)
    out = []
    while left:
        ready = [t for t in left if all(d not in created or d in done for d in t.deps)]
        t = min(ready, key=lambda t: (t.slice if t.slice >= 0 else 1 << 30, created[t.id]))
        out.append(t)
        done.add(t.id)
        left.remove(t)
    return out


def _regroup(tasks: list[int], ng: int) -> list[int]:
    """Per-group tasks for ng groups: as they are when the counts agree, else every group
    waits for all of them."""
    if len(tasks) == ng:
        return list(tasks)
    return [max(tasks)] * ng if tasks else []

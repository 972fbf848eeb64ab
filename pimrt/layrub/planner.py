"""Layrub's planner: from a captured :class:`~pimrt.graph.LayerGraph`, a schedule of what
each forward and backward step allocates, frees, offloads and prefetches, with the planned
peak of feature-map memory. Pure Python, no torch execution: the PIM runtime turns the
offload/prefetch events into memory traffic (:meth:`Plan.traffic`).

Buffers (feature-map memory only; parameters, their gradients and optimizer state are not
planned here):

* ``A:t``  the activation (output) of layer ``t``; views (flatten) alias their source;
* ``G:t``  the gradient of ``t``; written by the backward of ``t``'s consumers, read by the
  backward of ``t``;
* ``M:t``  a 1-bit mask of a ReLU/ReLU6 output whose backward readers only need the mask;
* ``E:t``  a layer's extra backward state (batch-norm mean/invstd, max-pool argmax,
  dropout mask).

Steps: forward ``0 .. N-1`` then backward ``N-1 .. 0`` (layer order, the output layer's
backward seeds the loss gradient). Within a step, in this order: allocations (new outputs,
gradients, masks, prefetched copies), reads, in-place renames (``G:y`` becomes ``G:x`` in
the same block), offloads (device -> host copy, then the device copy is freed), frees, host
frees. A step's ``peak_bytes`` is the resident bytes after its allocations.

Options:

* ``reuse``: ReLU masks instead of outputs kept for backward, in each layer where a mask
  pays (:func:`_masks_that_pay`: no backward reads the output in full, and the mask does not
  raise the peak); in-place gradients (a
  grad-in-place layer whose input gradient has its output gradient's size writes it over the
  output gradient's block); every buffer comes from a pool of blocks (best fit; a reused
  block grows to the largest size asked of it). Without ``reuse`` (the baseline) tensors are
  still freed after their last use, as torch does.
* ``offload``: a saved activation leaves the device once its last forward reader has run and
  is brought back ``prefetch_distance`` backward steps ahead of its first backward reader.
  With ``budget_bytes`` only as many activations as needed are offloaded (largest
  forward-to-backward gap first); without it, every saved activation of at least
  ``min_offload_bytes``.
"""
from __future__ import annotations

import bisect
import json
import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from pimrt.graph.layer import BACKWARD_RULES, LayerGraph, mask_bytes
from pimrt.layrub.errors import (LayrubBudgetError, LayrubError, LayrubUnsupportedError,
                                 LayrubWarning, fmt_bytes)

PLANNABLE = frozenset(BACKWARD_RULES) - {"host_fallback"}


@dataclass
class Step:
    """One forward or backward step of one layer. Lists hold ``(buffer, bytes, block)``
    (alloc, free) or ``(buffer, bytes)`` (offload, prefetch, host_free); ``rename`` holds
    ``(old buffer, new buffer)``."""

    phase: str
    layer: int
    name: str
    kind: str
    alloc: list = field(default_factory=list)
    reads: list = field(default_factory=list)
    rename: list = field(default_factory=list)
    offload: list = field(default_factory=list)
    prefetch: list = field(default_factory=list)
    free: list = field(default_factory=list)
    host_free: list = field(default_factory=list)
    peak_bytes: int = 0
    resident_bytes: int = 0
    host_bytes: int = 0


@dataclass
class Plan:
    """A Layrub schedule. ``peak_bytes``: planned peak of resident feature-map bytes;
    ``baseline_peak_bytes``: the same graph with no reuse and no offload (tensors freed
    after their last use); ``naive_bytes``: everything allocated at once (no liveness);
    ``pool_bytes``: capacity of the block pool realising the plan; ``host_peak_bytes``: peak
    of offloaded bytes in host memory."""

    model: str
    batch: int
    options: dict
    steps: list[Step]
    peak_bytes: int
    peak_step: int
    baseline_peak_bytes: int
    naive_bytes: int
    pool_bytes: int
    pool_blocks: int
    host_peak_bytes: int
    offloaded: list[str]
    masks: list[str]
    inplace_grads: list[str]
    no_reuse_layers: list[str]
    buffer_bytes: dict[str, int]

    @property
    def reduction(self) -> float:
        """1 - peak / baseline peak."""
        return 1.0 - self.peak_bytes / self.baseline_peak_bytes if self.baseline_peak_bytes \
            else 0.0

    @property
    def offload_bytes(self) -> int:
        return sum(b for s in self.steps for _, b in s.offload)

    @property
    def prefetch_bytes(self) -> int:
        return sum(b for s in self.steps for _, b in s.prefetch)

    def traffic(self) -> list[dict[str, Any]]:
        """The device<->host copies, in step order: ``{"step", "phase", "layer", "name",
        "direction" ("out" = device -> host, "in" = host -> device), "tensor", "bytes"}``."""
        out = []
        for i, s in enumerate(self.steps):
            for buf, b in s.offload:
                out.append({"step": i, "phase": s.phase, "layer": s.layer, "name": s.name,
                            "direction": "out", "tensor": buf[2:], "bytes": b})
            for buf, b in s.prefetch:
                out.append({"step": i, "phase": s.phase, "layer": s.layer, "name": s.name,
                            "direction": "in", "tensor": buf[2:], "bytes": b})
        return out

    def summary(self) -> str:
        s = self.steps[self.peak_step]
        return "\n".join([
            f"Layrub plan for {self.model or 'model'} at batch {self.batch} "
            f"({', '.join(f'{k}={v}' for k, v in self.options.items())})",
            f"  planned peak   {fmt_bytes(self.peak_bytes):>12}  at {s.phase} of {s.name!r}",
            f"  baseline peak  {fmt_bytes(self.baseline_peak_bytes):>12}  "
            f"(-{100 * self.reduction:.1f}%)",
            f"  no liveness    {fmt_bytes(self.naive_bytes):>12}",
            f"  block pool     {fmt_bytes(self.pool_bytes):>12}  in {self.pool_blocks} blocks",
            f"  host peak      {fmt_bytes(self.host_peak_bytes):>12}",
            f"  traffic        {fmt_bytes(self.offload_bytes)} out, "
            f"{fmt_bytes(self.prefetch_bytes)} in; {len(self.offloaded)} maps offloaded, "
            f"{len(self.masks)} ReLU masks, {len(self.inplace_grads)} in-place gradients",
        ])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["reduction"] = self.reduction
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)


# --------------------------------------------------------------------------------------
class _Graph:
    """The graph reduced to what the planner needs: views resolved to their source."""

    def __init__(self, g: LayerGraph, batch: int, strict: bool):
        self.g = g
        nodes = g.nodes
        self.N = len(nodes)
        gb = max(1, g.batch or 1)
        self.scale = (lambda b: b // gb * batch if b % gb == 0 else math.ceil(b * batch / gb))
        self.root: dict[str, str] = {}
        for n in nodes:
            if n.view_of is not None or n.kind == "flatten":
                src = n.view_of or (n.inputs[0] if n.inputs else None)
                self.root[n.name] = self.root.get(src, src) if src else n.name
            else:
                self.root[n.name] = n.name
        self.bad = [n for n in nodes if n.kind not in PLANNABLE]
        if self.bad and strict:
            n = self.bad[0]
            raise LayrubUnsupportedError(
                f"Layrub cannot analyse layer {n.name!r} (kind {n.kind}, target {n.target}, "
                f"module {n.module_path or '<root>'!r})"
                + (f" and {len(self.bad) - 1} more" if len(self.bad) > 1 else ""))
        self.is_view = {n.name: self.root[n.name] != n.name for n in nodes}
        self.index = {n.name: n.index for n in nodes}
        # effective inputs (roots) of each non-view layer, and consumers of each root
        self.inputs: dict[int, list[str]] = {}
        self.consumers: dict[str, list[int]] = {n.name: [] for n in nodes}
        for n in nodes:
            if self.is_view[n.name]:
                continue
            ins = []
            for i in n.inputs:
                r = self.root[i]
                if r not in ins:
                    ins.append(r)
            self.inputs[n.index] = ins
            for r in ins:
                if n.index not in self.consumers[r]:
                    self.consumers[r].append(n.index)
        # which layers run a backward (reach the output through layers that do)
        self.participates = [False] * self.N
        for n in reversed(nodes):
            if self.is_view[n.name] or n.kind == "input":
                continue
            if n.kind == "output" or any(self.participates[c] for c in self.consumers[n.name]):
                self.participates[n.index] = True
        # gradients exist for roots (not the input batch) with a participating consumer
        self.grad_consumers: dict[str, list[int]] = {}
        for n in nodes:
            if self.is_view[n.name] or n.kind in ("input", "output"):
                continue
            cs = sorted((c for c in self.consumers[n.name] if self.participates[c]),
                        reverse=True)
            if cs:
                self.grad_consumers[n.name] = cs

    def bytes_of(self, name: str) -> int:
        return self.scale(self.g.node(name).bytes)

    def extra_bytes(self, n) -> int:
        e = n.extra_saved_bytes
        if BACKWARD_RULES[n.kind].extra == "mean_invstd":
            return e
        return self.scale(e)

    def backward_reads(self, j: int, masked: set[str]) -> list[str]:
        """Buffers the backward of layer j reads (feature maps; G:j included)."""
        n = self.g.nodes[j]
        if self.is_view[n.name] or n.kind == "input" or not self.participates[j]:
            return []
        rule = BACKWARD_RULES.get(n.kind, BACKWARD_RULES["host_fallback"])
        reads = []
        if n.kind != "output" and n.name in self.grad_consumers:
            reads.append(f"G:{n.name}")
        if rule.inputs:
            for r in self.inputs[j]:
                reads.append(f"A:{r}")
        if rule.output:
            if rule.output == "mask" and n.name in masked:
                reads.append(f"M:{n.name}")
            else:
                reads.append(f"A:{n.name}")
        if n.extra_saved_bytes:
            reads.append(f"E:{n.name}")
        # gradients this backward accumulates into (already allocated by a later consumer)
        for r in self.inputs[j]:
            cs = self.grad_consumers.get(r)
            if cs and cs[0] != j and j in cs:
                reads.append(f"G:{r}")
        return reads


def _bt(N: int, j: int) -> int:
    """Time of the backward step of layer j (forward steps are times 0..N-1)."""
    return 2 * N - 1 - j


def plan(graph: LayerGraph, batch: int | None = None, budget_bytes: int | None = None,
         offload: bool = True, reuse: bool = True, prefetch_distance: int = 1,
         min_offload_bytes: int = 0, host_budget_bytes: int | None = None,
         strict: bool = False) -> Plan:
    """Plan feature-map memory for one training step of ``graph`` at ``batch`` (default: the
    graph's own batch; feature-map bytes scale linearly with it).

    ``budget_bytes``: device bytes for feature maps; with ``offload`` the planner offloads
    the fewest activations (largest forward-to-backward gap first) that bring the peak under
    it; a budget that even full offload cannot meet raises :class:`LayrubBudgetError` naming
    the bytes needed. ``host_budget_bytes``: the same for the offloaded bytes held in host
    memory. Layers the planner cannot analyse (``host_fallback``): with ``strict`` a
    :class:`LayrubUnsupportedError` naming the node, else a warning and no reuse or offload
    of their inputs and output.
    """
    if batch is None:
        batch = graph.batch
    if not isinstance(batch, int) or batch < 1:
        raise LayrubError(f"plan: batch must be a positive integer, got {batch!r}")
    if not isinstance(prefetch_distance, int) or prefetch_distance < 0:
        raise LayrubError(f"plan: prefetch_distance must be an integer >= 0, got "
                          f"{prefetch_distance!r}")
    G = _Graph(graph, batch, strict)
    if G.bad:
        warnings.warn("Layrub plan: no reuse or offload around layer(s) the planner cannot "
                      "analyse: " + ", ".join(f"{n.name!r} ({n.target})" for n in G.bad),
                      LayrubWarning, stacklevel=2)
    frozen = set()
    for n in G.bad:
        frozen.add(G.root[n.name])
        frozen.update(G.inputs.get(n.index, []))

    base = _schedule1(G, False, set(), prefetch_distance, frozen, masked=set())
    cands = _offload_candidates(G, reuse, min_offload_bytes, frozen) if offload else []
    chosen: list[str] = []
    if offload and budget_bytes is None:
        chosen = cands
    sched = _schedule(G, reuse=reuse, offloaded=set(chosen), d=prefetch_distance, frozen=frozen)
    if budget_bytes is not None and sched["peak"] > budget_bytes:
        if offload and cands:
            full = _schedule(G, reuse, set(cands), prefetch_distance, frozen)
            if full["peak"] > budget_bytes:
                _too_small(G, full, budget_bytes, "with every saved feature map offloaded")
            lo, hi = 1, len(cands)          # smallest prefix meeting the budget (monotone)
            best = full
            while lo < hi:
                mid = (lo + hi) // 2
                s = _schedule(G, reuse, set(cands[:mid]), prefetch_distance, frozen)
                if s["peak"] <= budget_bytes:
                    hi, best = mid, s
                else:
                    lo = mid + 1
            if best is full or len(best["offloaded"]) != lo:
                best = _schedule(G, reuse, set(cands[:lo]), prefetch_distance, frozen)
            sched = best
        else:
            _too_small(G, sched, budget_bytes, "without offload" if not offload else
                       "(nothing can be offloaded)")
    if host_budget_bytes is not None and sched["host_peak"] > host_budget_bytes:
        raise LayrubBudgetError(
            f"host memory budget too small for the offloaded feature maps: "
            f"{sched['host_peak']:,} B ({fmt_bytes(sched['host_peak'])}) needed, budget "
            f"{host_budget_bytes:,} B ({fmt_bytes(host_budget_bytes)})",
            needed=sched["host_peak"], budget=host_budget_bytes)
    naive = 0
    for n in graph.nodes:
        if G.is_view[n.name] or n.kind == "output":
            continue
        naive += G.bytes_of(n.name) * (2 if n.name in G.grad_consumers else 1) \
            + G.extra_bytes(n)
    return Plan(
        model=graph.model_name, batch=batch,
        options={"offload": offload, "reuse": reuse, "budget_bytes": budget_bytes,
                 "prefetch_distance": prefetch_distance, "min_offload_bytes": min_offload_bytes,
                 "host_budget_bytes": host_budget_bytes},
        steps=sched["steps"], peak_bytes=sched["peak"], peak_step=sched["peak_step"],
        baseline_peak_bytes=base["peak"], naive_bytes=naive, pool_bytes=sched["pool_bytes"],
        pool_blocks=sched["pool_blocks"], host_peak_bytes=sched["host_peak"],
        offloaded=sorted(sched["offloaded"], key=G.index.__getitem__),
        masks=sched["masks"], inplace_grads=sched["inplace"],
        no_reuse_layers=[n.name for n in G.bad], buffer_bytes=sched["sizes"])


def _too_small(G: _Graph, sched: dict, budget: int, how: str):
    s = sched["steps"][sched["peak_step"]]
    raise LayrubBudgetError(
        f"device budget too small for the feature maps: the plan needs {sched['peak']:,} B "
        f"({fmt_bytes(sched['peak'])}) {how}, at the {s.phase} of layer {s.name!r}; budget "
        f"{budget:,} B ({fmt_bytes(budget)})", needed=sched["peak"], budget=budget)


def _mask_candidates(G: _Graph, frozen: set[str]) -> list[str]:
    """ReLU/ReLU6 outputs a mask could stand for: no backward reads them in full (through
    their views too), so only the ReLU's own backward needs them, and only as a mask."""
    lives = G.g.liveness()
    out = []
    for n in G.g.nodes:
        if n.kind in ("relu", "relu6") and n.name not in frozen and not G.is_view[n.name] \
                and G.participates[n.index]:
            full = any(G.root[t] == n.name and lives[t].backward_full
                       for t in lives if t in G.root)
            if not full:
                out.append(n.name)
    return out


def _uses(G: _Graph, masked: set[str]):
    """Per root activation: forward use times and backward use times, with ``masked``
    ReLU outputs read by their backward as masks."""
    N = G.N
    fwd: dict[str, list[int]] = {}
    bwd: dict[str, list[int]] = {}
    for n in G.g.nodes:
        if G.is_view[n.name] or n.kind == "output":
            continue
        fwd[n.name] = [n.index]
        bwd[n.name] = []
    for j in range(N):
        n = G.g.nodes[j]
        if G.is_view[n.name]:
            continue
        for r in G.inputs.get(j, []):
            fwd[r].append(j)
    for j in range(N):
        n = G.g.nodes[j]
        if not G.participates[j] or G.is_view[n.name]:
            continue
        for buf in G.backward_reads(j, masked):
            if buf.startswith("A:"):
                bwd[buf[2:]].append(_bt(N, j))
    return fwd, bwd


def _offload_candidates(G: _Graph, reuse: bool, min_bytes: int, frozen: set[str]) -> list[str]:
    fwd, bwd = _uses(G, set())
    cands = []
    for t, times in bwd.items():
        if not times or t in frozen:
            continue
        b = G.bytes_of(t)
        if b <= 0 or b < min_bytes:
            continue
        gap = min(times) - max(fwd[t])
        cands.append((-gap, -b, G.index[t], t))
    cands.sort()
    return [c[-1] for c in cands]


class _Pool:
    """Reference-counted blocks: best fit among free blocks, else the largest free block
    grown, else a new block."""

    def __init__(self):
        self.cap: list[int] = []
        self.free_ids: set[int] = set()

    def take(self, size: int) -> int:
        best = None
        for b in self.free_ids:
            if self.cap[b] >= size and (best is None or self.cap[b] < self.cap[best]):
                best = b
        if best is None and self.free_ids:
            best = max(self.free_ids, key=lambda b: (self.cap[b], -b))
            self.cap[best] = size
        if best is None:
            self.cap.append(size)
            return len(self.cap) - 1
        self.free_ids.discard(best)
        return best

    def give(self, b: int) -> None:
        self.free_ids.add(b)


def _schedule(G: _Graph, reuse: bool, offloaded: set[str], d: int, frozen: set[str]) -> dict:
    """The schedule, with ``reuse`` a ReLU mask for each layer where it pays
    (:func:`_masks_that_pay`)."""
    plain = _schedule1(G, reuse, offloaded, d, frozen, masked=set())
    if not reuse:
        return plain
    masked = _masks_that_pay(G, plain, _mask_candidates(G, frozen), offloaded, d)
    if not masked:
        return plain
    return _schedule1(G, reuse, offloaded, d, frozen, masked=masked)


def _masks_that_pay(G: _Graph, plain: dict, cands: list[str], offloaded: set[str],
                    d: int) -> set[str]:
    """Per layer, whether a ReLU mask pays, on the schedule without masks. A mask of ``m``
    bytes for an output of ``s`` bytes made at step ``p`` lives until the ReLU's backward
    ``b``; the output then leaves the device after its last forward reader ``lf`` instead
    of staying until ``b`` (kept: ``-s`` over ``lf+1..b``) or coming back ``d`` steps
    ahead of ``b`` (offloaded: ``-s`` over its prefetch ``pf..b``, and ``s`` fewer host
    bytes and ``2s`` fewer bytes copied). Resident bytes add up, so each mask's effect on
    every step is exact: a mask is kept when it does not raise the peak of the schedule
    with the masks kept so far (largest outputs first). Outputs some backward reads in
    full are no candidates: the map is kept, or offloaded, anyway."""
    if not cands:
        return set()
    N, T = G.N, 2 * G.N
    fwd, _ = _uses(G, set())
    prof = [s.peak_bytes for s in plain["steps"]]
    peak = max(prof) if prof else 0
    chosen: set[str] = set()
    for t in sorted(cands, key=lambda t: (-G.bytes_of(t), G.index[t])):
        p = G.index[t]
        s = G.bytes_of(t)
        m = mask_bytes(s // max(1, G.g.nodes[p].itemsize))
        b = _bt(N, p)
        lf = max(fwd[t])
        lo = max(N, b - d) if t in offloaded else lf + 1
        delta = [0] * T
        for i in range(p, b + 1):
            delta[i] += m
        for i in range(lo, b + 1):
            delta[i] -= s
        new = [x + y for x, y in zip(prof, delta)]
        if max(new) <= peak and (t in offloaded or sum(delta) < 0):
            prof = new
            chosen.add(t)
    return chosen


def _schedule1(G: _Graph, reuse: bool, offloaded: set[str], d: int, frozen: set[str],
               masked: set[str]) -> dict:
    N = G.N
    T = 2 * N
    nodes = G.g.nodes
    fwd, bwd = _uses(G, masked)
    ev_alloc: list[list[tuple[str, int]]] = [[] for _ in range(T)]
    ev_free: list[list[str]] = [[] for _ in range(T)]
    ev_off: list[list[str]] = [[] for _ in range(T)]
    ev_pre: list[list[str]] = [[] for _ in range(T)]
    ev_hfree: list[list[str]] = [[] for _ in range(T)]
    ev_rename: list[list[tuple[str, str]]] = [[] for _ in range(T)]
    sizes: dict[str, int] = {}

    def span(buf: str, size: int, t0: int, t1: int):
        sizes[buf] = size
        ev_alloc[t0].append((buf, size))
        ev_free[t1].append(buf)

    for t, ftimes in fwd.items():
        size = G.bytes_of(t)
        p = G.index[t]
        btimes = bwd[t]
        if t in offloaded and btimes:
            lf = max(ftimes)
            b1, b2 = min(btimes), max(btimes)
            pf = max(N, b1 - d)
            span(f"A:{t}", size, p, b2)          # device: forward part, then back for b1..b2
            ev_off[lf].append(f"A:{t}")          # copied out and freed after last fwd reader
            ev_pre[pf].append(f"A:{t}")          # back d steps ahead of its first bwd reader
            ev_hfree[b2].append(f"A:{t}")
        else:
            span(f"A:{t}", size, p, max(ftimes + btimes))
        n = nodes[p]
        if t in masked:
            span(f"M:{t}", mask_bytes(size // max(1, n.itemsize)), p, _bt(N, p))
        e = G.extra_bytes(n)
        if e and G.participates[p]:
            span(f"E:{t}", e, p, _bt(N, p))
        elif e:
            span(f"E:{t}", e, p, p)
    # gradients
    inplace: list[str] = []
    took_over: dict[str, str] = {}        # G:y -> G:x renamed at y's backward
    if reuse:
        for j in range(N - 1, -1, -1):
            n = nodes[j]
            if not G.participates[j] or n.kind in ("output", "input") or G.is_view[n.name] \
                    or not n.grad_inplace or n.name not in G.grad_consumers \
                    or n.name in frozen:
                continue
            for r in G.inputs[j]:
                cs = G.grad_consumers.get(r)
                if cs and cs[0] == j and G.bytes_of(r) == G.bytes_of(n.name) \
                        and r not in frozen:
                    took_over[n.name] = r
                    inplace.append(r)
                    break
    for t, cs in G.grad_consumers.items():
        size = G.bytes_of(t)
        start = _bt(N, cs[0])
        end = _bt(N, G.index[t]) if G.participates[G.index[t]] else max(_bt(N, c) for c in cs)
        sizes[f"G:{t}"] = size
        if t not in inplace:
            ev_alloc[start].append((f"G:{t}", size))
        if t in took_over:
            ev_rename[end].append((f"G:{t}", f"G:{took_over[t]}"))
        else:
            ev_free[end].append(f"G:{t}")
    # walk the steps
    pool = _Pool()
    block: dict[str, int] = {}
    resident = 0
    host = 0
    peak, peak_step, host_peak = -1, 0, 0
    steps: list[Step] = []
    for time in range(T):
        j = time if time < N else T - 1 - time
        n = nodes[j]
        s = Step("forward" if time < N else "backward", j, n.name, n.kind)
        allocs = list(ev_alloc[time]) + [(b, sizes[b]) for b in ev_pre[time]]
        for buf, size in allocs:
            blk = pool.take(size) if reuse else _fresh(pool, size)
            block[buf] = blk
            resident += size
            s.alloc.append((buf, size, blk))
        for buf in ev_pre[time]:
            s.prefetch.append((buf, sizes[buf]))
        s.peak_bytes = resident
        if resident > peak:
            peak, peak_step = resident, time
        if time < N:
            s.reads = [f"A:{r}" for r in G.inputs.get(j, [])] if not G.is_view[n.name] else []
        else:
            s.reads = G.backward_reads(j, masked)
        for old, new in ev_rename[time]:
            block[new] = block.pop(old)
            s.rename.append((old, new))
        for buf in ev_off[time]:
            s.offload.append((buf, sizes[buf]))
            host += sizes[buf]
            ev_free[time].append(buf)
        for buf in ev_free[time]:
            blk = block.pop(buf)
            pool.give(blk)
            resident -= sizes[buf]
            s.free.append((buf, sizes[buf], blk))
        host_peak = max(host_peak, host)
        for buf in ev_hfree[time]:
            s.host_free.append((buf, sizes[buf]))
            host -= sizes[buf]
        s.resident_bytes = resident
        s.host_bytes = host
        steps.append(s)
    return {"steps": steps, "peak": max(peak, 0), "peak_step": peak_step,
            "pool_bytes": sum(pool.cap), "pool_blocks": len(pool.cap), "host_peak": host_peak,
            "offloaded": [t for t in offloaded if bwd.get(t)],
            "masks": sorted(masked, key=G.index.__getitem__), "inplace": inplace,
            "sizes": sizes}


def _fresh(pool: _Pool, size: int) -> int:
    """No reuse: every buffer gets a block of its own."""
    pool.cap.append(size)
    return len(pool.cap) - 1


# --------------------------------------------------------------------------------------
def check_plan(p: Plan, graph: LayerGraph) -> dict[str, int]:
    """Replay a plan against the graph's semantics, independently of how it was made, and
    raise :class:`LayrubError` on the first violation: a buffer read when it is not resident
    (never allocated, freed, offloaded and not yet back, or its block handed to another
    buffer), a block given to two live buffers, an offload of a buffer not resident, a
    prefetch of a buffer not in host memory, a mask standing for an output some backward
    reads in full, a leak at the end, a peak different from the one reported, or a planned
    peak above the baseline. Returns the replayed peaks."""
    G = _Graph(graph, p.batch, strict=False)
    N = G.N
    masked = set(p.masks)
    lives = graph.liveness()
    for t in masked:
        if any(G.root.get(x) == t and lives[x].backward_full for x in lives if x in G.root):
            raise LayrubError(f"mask kept for {t!r} but a backward reads it in full")
    if len(p.steps) != 2 * N:
        raise LayrubError(f"plan has {len(p.steps)} steps, graph needs {2 * N}")
    live: dict[str, int] = {}          # buffer -> block
    owner: dict[int, str] = {}         # block -> buffer
    hostset: set[str] = set()
    resident = 0
    peak = 0
    host = host_peak = 0
    for time, s in enumerate(p.steps):
        j = time if time < N else 2 * N - 1 - time
        if s.layer != j or s.phase != ("forward" if time < N else "backward"):
            raise LayrubError(f"step {time} is {s.phase} {s.layer}, expected layer {j}")
        pre = {b for b, _ in s.prefetch}
        for buf, size, blk in s.alloc:
            if buf in live:
                raise LayrubError(f"{s.phase} {s.name}: {buf} allocated twice")
            if blk in owner:
                raise LayrubError(f"{s.phase} {s.name}: block {blk} given to {buf} while "
                                  f"{owner[blk]} still lives in it")
            if buf in pre and buf not in hostset:
                raise LayrubError(f"{s.phase} {s.name}: prefetch of {buf}, not in host memory")
            live[buf] = blk
            owner[blk] = buf
            resident += size
        peak = max(peak, resident)
        if s.peak_bytes != resident:
            raise LayrubError(f"{s.phase} {s.name}: reported {s.peak_bytes} B, replay {resident}")
        n = graph.nodes[j]
        if time < N:
            need = [] if G.is_view[n.name] else [f"A:{r}" for r in G.inputs.get(j, [])]
        else:
            need = G.backward_reads(j, masked)
        for buf in need:
            if buf not in live:
                raise LayrubError(f"{s.phase} of {s.name!r} reads {buf}, which is not resident")
            if owner.get(live[buf]) != buf:
                raise LayrubError(f"{s.phase} of {s.name!r} reads {buf}, overwritten")
        for old, new in s.rename:
            if old not in live or new in live:
                raise LayrubError(f"{s.phase} {s.name}: bad in-place rename {old} -> {new}")
            blk = live.pop(old)
            live[new] = blk
            owner[blk] = new
        for buf, size in s.offload:
            if buf not in live:
                raise LayrubError(f"{s.phase} {s.name}: offload of {buf}, not resident")
            hostset.add(buf)
            host += size
        for buf, size, blk in s.free:
            if live.get(buf) != blk:
                raise LayrubError(f"{s.phase} {s.name}: free of {buf} (block {blk}), not live")
            del live[buf]
            del owner[blk]
            resident -= size
        host_peak = max(host_peak, host)
        for buf, size in s.host_free:
            if buf not in hostset:
                raise LayrubError(f"{s.phase} {s.name}: host free of {buf}, not in host")
            hostset.discard(buf)
            host -= size
    if live or hostset:
        raise LayrubError(f"buffers left at the end: {sorted(live)[:5]} {sorted(hostset)[:5]}")
    if peak != p.peak_bytes:
        raise LayrubError(f"replayed peak {peak} != reported {p.peak_bytes}")
    if p.peak_bytes > p.baseline_peak_bytes:
        raise LayrubError(f"planned peak {p.peak_bytes} above baseline {p.baseline_peak_bytes}")
    return {"peak_bytes": peak, "host_peak_bytes": host_peak}

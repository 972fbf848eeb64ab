"""Sparse gradient exchange in the PIM runtime: GradSA alone, or LaySA (GradSA's buffers under
Layrub-style management with the mirror parameter update). docs/laysa.md, "In the PIM runtime".

Per layer with parameters, in backward order, five tasks replace the plain SGD update:

- `fold` (PIM): the `gradsa_fold` program over the layer's parameters (weight decay, momentum
  correction: u = m*u + g', v = v + u);
- `sample` (host): reads the elements of v the threshold is estimated from (GradSA's select:
  `sample_size` random elements, or all of v where it takes an exact top-k);
- `select` (PIM): the `gradsa_select` program (mask = |v| >= threshold, momentum factor
  masking, the decoded update's buffer cleared);
- `exchange` (host): reads the selection mask (1 bit an element) and the selected residuals,
  writes their remainders back, sends the payload and receives the other ranks' (the wire time
  of a ring all-gather at the link's bandwidth, as a host delay), and scatters the decoded,
  averaged update (`world x k` values) into its buffer;
- `update` on phase `apply` (PIM): the `sgd_apply` program, w = w - lr * d: the SGD kernel
  without momentum, as GradSA requires.

The schedule (pimrt.runtime.schedule) creates each stage where the host need not wait for the
PIM: the fold when the next CONV's backward starts, sample and select after that CONV's dX,
the exchange after its dW.

GradSA alone (`gradsa`): u and v of every layer stay in the DRAM, the decoded update is written
over the dense gradient (as DDP copies the hook's result into `param.grad`) and the updates run
after the whole backward pass (the optimizer's step).

LaySA (`laysa`): u and v live in host memory; a `fetch` task (host DMA, written into the DRAM)
brings a layer's pair in one layer ahead of its fold, an `evict` task (read out of the DRAM)
sends it back after the select; the dense gradient dies with its fold, the decoded update
lives in its own buffer from the select to the `apply` task, which runs in backward, when the
next CONV's backward starts (the mirror update), so the parameters' memory traffic overlaps
the rest of backward.

`footprint` gives the peak over the simulated step of the bytes these need in the DRAM
(parameters, dense gradients, decoded updates, u and v, momentum), from the tasks' simulated
start and end cycles.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from pimrt.errors import ConfigError

MODES = ("sgd", "gradsa", "laysa")
# bytes on the wire per kept element: GradSA's measured average over a whole run (int8 values
# with a per-layer scale, delta + varint / bit-packed indices, headers and padding; docs/gradsa.md)
PAYLOAD_BYTES_PER_ELEMENT = 2.4


@dataclasses.dataclass(frozen=True)
class ExchangeConfig:
    mode: str = "sgd"
    world: int = 4               # ranks exchanging (the simulated one is one of them)
    density: float = 0.001       # fraction of each layer's elements sent
    link_gbps: float = 10.0      # per-rank link bandwidth
    sample_size: int = 4096      # elements of v the threshold is estimated from (GradSA's)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ConfigError(f"unknown update {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.world < 1:
            raise ConfigError(f"--world must be >= 1, got {self.world}")
        if not 0.0 < self.density <= 1.0:
            raise ConfigError(f"--density must be in (0, 1], got {self.density}")
        if not self.link_gbps > 0:
            raise ConfigError(f"--link-gbps must be > 0, got {self.link_gbps}")

    def kept(self, numel: int) -> int:
        """Elements a rank sends for a layer of `numel` (GradSA's k_for)."""
        return max(1, min(numel, math.ceil(self.density * numel)))

    def exact_topk(self, numel: int) -> bool:
        """Where GradSA's select takes an exact top-k over all of v instead of a sample."""
        return numel <= self.sample_size or self.kept(numel) >= numel // 4

    def wire_seconds(self, numel: int) -> float:
        """A ring all-gather of every rank's payload: world - 1 payloads in and out per rank."""
        payload = self.kept(numel) * PAYLOAD_BYTES_PER_ELEMENT
        return (self.world - 1) * payload * 8 / (self.link_gbps * 1e9)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def scattered_lines(base: int, nbytes: int, count: int, seed: int) -> np.ndarray:
    """`count` distinct 64-byte lines of a region, in address order (the selected elements of a
    layer are spread over it; a fixed seed keeps runs reproducible)."""
    lines = max(1, int(nbytes) // 64)
    count = min(int(count), lines)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(lines, size=count, replace=False)) if count < lines \
        else np.arange(lines)
    return np.uint64(base) + pick.astype(np.uint64) * np.uint64(64)


def footprint(timing, config: ExchangeConfig) -> dict:
    """Peak DRAM bytes of parameters, dense gradients, decoded updates, momentum and residual
    over the simulated step (see the module doc for each buffer's lifetime), and the split at
    the peak. Feature maps are left out (the same in every mode)."""
    tasks = timing.schedule.tasks
    start, end = timing.start.astype(np.int64), timing.end.astype(np.int64)
    graph = timing.schedule.graph
    params = sum(l.param_bytes for l in graph.nodes)
    by_layer: dict[str, dict[str, list[int]]] = {}
    for t in tasks:
        by_layer.setdefault(t.layer, {}).setdefault(t.kind + "." + t.phase, []).append(t.id)
    t0, t1 = int(start.min()), int(end.max())
    events = []          # (cycle, +bytes/-bytes, category)

    def live(cat, nbytes, a, b):
        events.append((a, nbytes, cat))
        events.append((b, -nbytes, cat))

    from pimrt.graph.precision import weight_copy
    persistent = {"param": params}
    for layer in graph.nodes:
        if not layer.param_bytes:
            continue
        k = by_layer.get(layer.name, {})
        writers = k.get("conv.bwd_weight", []) + k.get("linear.bwd_weight", []) + \
            k.get("batchnorm.bwd", [])
        born = int(start[writers].min()) if writers else t0
        n = layer.param_bytes
        if weight_copy(graph, layer):
            # AMP: the 16-bit weights, and the 16-bit weight gradient until the unscale
            # makes the fp32 one of it
            n16 = layer.param_numel * layer.itemsize
            persistent["param16"] = persistent.get("param16", 0) + n16
            cast = k.get("unscale.update", [])
            if cast:
                live("grad16", n16, born, int(end[cast].max()))
                born = int(start[cast].min())
        if config.mode == "sgd":
            persistent["momentum"] = persistent.get("momentum", 0) + n
            upd = k.get("update.update", [])
            live("grad", n, born, int(end[upd].max()) if upd else t1)
            continue
        if "fold.update" not in k:      # parameters no update task touches (host fallback)
            continue
        fold, sel, app = k["fold.update"], k["select.update"], k["update.apply"]
        if config.mode == "gradsa":
            persistent["momentum"] = persistent.get("momentum", 0) + n
            persistent["residual"] = persistent.get("residual", 0) + n
            live("grad", n, born, int(end[app].max()))      # the update is written over it
            continue
        fetch, evict = k["fetch.update"], k["evict.update"]
        live("momentum", n, int(start[fetch].min()), int(end[evict].max()))
        live("residual", n, int(start[fetch].min()), int(end[evict].max()))
        live("grad", n, born, int(end[fold].max()))
        live("update", n, int(start[sel].min()), int(end[app].max()))
    base = sum(persistent.values())
    cur = {c: 0 for c in ("grad", "update", "momentum", "residual")}
    cur.update({c: 0 for _, _, c in events if c not in cur})      # AMP's grad16
    peak, split = base, dict(cur)
    # at equal cycles frees first: a buffer freed and another born in the same cycle coexist
    # for no time
    for cyc, delta, cat in sorted(events, key=lambda e: (e[0], e[1])):
        cur[cat] += delta
        total = base + sum(cur.values())
        if total > peak:
            peak, split = total, dict(cur)
    for c, v in persistent.items():
        split[c] = split.get(c, 0) + v
    return {"peak_bytes": int(peak), "at_peak": {c: int(v) for c, v in split.items()},
            "param_bytes": int(params)}

"""Where every tensor of a training step lives in the simulated DRAM.

Tensors the PIM works on are aligned to a row span (one row of every bank of every channel:
capacity / rows bytes; 256 KiB on HBM2), so that an all-bank PIM command on (channel, row,
column) touches only that tensor. Host and PIM see the same bytes: the host through ordinary
addresses, the PIM through all-bank commands on the rows they cover.
"""
from __future__ import annotations

import dataclasses

from pimrt.errors import ConfigError
from pimrt.graph import LayerGraph
from pimrt.graph.precision import weight_copy
from pimrt.memctl.config import Part


@dataclasses.dataclass(frozen=True)
class Region:
    name: str
    base: int
    nbytes: int

    @property
    def end(self) -> int:
        return self.base + self.nbytes


class Placement:
    """A bump allocator over the part's capacity: activations (their gradients reuse them),
    ReLU masks, pooling indices, parameters, parameter gradients and momentum buffers (under
    AMP also the 16-bit copies of CONV weights and their gradients)."""

    def __init__(self, part: Part):
        self.part = part
        self.row_span = part.capacity_bytes // part.org["rows"]
        self.regions: dict[str, Region] = {}
        self.top = 0

    def alloc(self, name: str, nbytes: int) -> Region:
        if name in self.regions:
            return self.regions[name]
        base = -(-self.top // self.row_span) * self.row_span
        r = Region(name, base, max(int(nbytes), 1))
        if r.end > self.part.capacity_bytes:
            raise ConfigError(
                f"the model's tensors do not fit {self.part.name}'s "
                f"{self.part.capacity_bytes / 2**30:.1f} GiB: {name} ({nbytes / 2**20:.1f} MiB) "
                f"would end at {r.end / 2**30:.2f} GiB; use a smaller batch or a larger part")
        self.regions[name] = r
        self.top = r.end
        return r

    def __getitem__(self, name: str) -> Region:
        return self.regions[name]

    @property
    def used_bytes(self) -> int:
        return self.top


def place_step(graph: LayerGraph, part: Part, exchange: str = "sgd") -> Placement:
    """Place every tensor a training step touches, before any simulation starts (so a model
    that does not fit fails at once). exchange "gradsa"/"laysa" adds, per layer with
    parameters, GradSA's residual, the selection mask and (LaySA) the decoded update's buffer;
    GradSA alone writes the decoded update over the dense gradient. Every tensor keeps its own
    addresses here; how many of them are alive at once is pimrt.runtime.exchange.footprint."""
    p = Placement(part)
    for layer in graph.nodes:
        if layer.view_of or layer.kind == "output":
            continue
        p.alloc(f"act:{layer.name}", layer.bytes)
    for layer in graph.nodes:
        if layer.view_of or layer.kind in ("output",):
            continue
        # a feature map's gradient is written over the feature map itself (Layrub's intra-layer
        # reuse: no backward reads a layer's own output once its gradient exists; ReLU keeps
        # a mask, pooling its indices)
        p.regions[f"grad:{layer.name}"] = p[f"act:{layer.name}"]
        if layer.kind in ("relu", "relu6", "dropout"):
            p.alloc(f"mask:{layer.name}", (layer.numel + 7) // 8)
        if layer.kind == "maxpool":   # torch's max pool saves an int64 index an output
            p.alloc(f"index:{layer.name}", layer.numel * 8)
    for layer in graph.nodes:
        if layer.param_bytes:
            for what in ("param", "pgrad", "momentum"):
                p.alloc(f"{what}:{layer.name}", layer.param_bytes)
            if weight_copy(graph, layer):
                # AMP: the 16-bit copy of the weights the CONV reads (autocast's cast, written
                # by the update) and the 16-bit weight gradient the CONV's dW writes (its cast
                # to the fp32 gradient is the unscale's)
                for what in ("param16", "pgrad16"):
                    p.alloc(f"{what}:{layer.name}", layer.param_numel * layer.itemsize)
            if exchange != "sgd":
                p.alloc(f"residual:{layer.name}", layer.param_bytes)
                p.alloc(f"smask:{layer.name}", (layer.param_numel + 7) // 8)
                if exchange == "laysa":
                    p.alloc(f"update:{layer.name}", layer.param_bytes)
                else:
                    p.regions[f"update:{layer.name}"] = p[f"pgrad:{layer.name}"]
    return p

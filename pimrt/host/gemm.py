"""GEMM view of a CONV or linear layer for one training phase and output-channel group.

``gemm_shape(layer, batch, phase, channel_range)`` gives the implicit-GEMM dimensions:

=================  ==========================  =========================  =========================
phase              M                           N                          K
=================  ==========================  =========================  =========================
forward            batch x Ho x Wo             output channels lo..hi     Cin/groups x kh x kw
backward_data      batch x H x W (dX pixels)   input channels fed by      (hi-lo) x Cin/groups x
                                               dY channels lo..hi         kh x kw / N  (see below)
backward_weight    dW rows lo..hi              Cin/groups x kh x kw       batch x Ho x Wo
=================  ==========================  =========================  =========================

Channel groups (``channel_range=(lo, hi)``, default the whole layer) always index the layer's
*output* channels, the unit the runtime pipelines by:

- forward: the group computes output channels lo..hi (an N-split);
- backward_data: the group is the dY channels lo..hi that feed dX: dX += W[lo:hi]^T * dY[lo:hi]
  (a K-split; every group writes the dX channels it feeds, the groups after the first one
  accumulate into it);
- backward_weight: the group computes dW rows lo..hi (an M-split).

So the FLOPs of the groups of a phase add up to the phase's FLOPs. For a grouped (or
depthwise) conv each output channel reduces over its own group's Cin/groups input channels;
backward_data's K is the average reduction length per dX element, ``(hi-lo) x Cin/groups x
kh x kw / N`` (an integer when groups == 1 or the slice covers whole conv groups).

``GemmShape.flops`` counts useful FLOPs (2 x MACs): the forward FLOPs of the slice for every
phase (dX of a strided conv skips the zero taps of the dilated dY, as CUTLASS's strided dgrad
does, so it can be below 2 x M x N x K). Linear layers are 1 x 1 convs on a 1 x 1 map (leading
dimensions folded into the batch); their bias is not counted (as in pimrt.graph).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterator

from pimrt.errors import ConfigError

PHASES = ("forward", "backward_data", "backward_weight")
PHASE_ALIASES = {"forward": "forward", "fwd": "forward", "fprop": "forward",
                 "backward_data": "backward_data", "dgrad": "backward_data", "dx": "backward_data",
                 "backward_weight": "backward_weight", "wgrad": "backward_weight",
                 "dw": "backward_weight"}


def normalise_phase(phase: str) -> str:
    try:
        return PHASE_ALIASES[str(phase).lower()]
    except KeyError:
        raise ConfigError(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}") from None


@dataclasses.dataclass(frozen=True)
class ConvGeom:
    """A conv (or linear as a 1x1 conv) with the batch fixed. Shapes NCHW."""

    name: str
    kind: str
    n: int
    cin: int
    h: int
    w: int
    cout: int
    ho: int
    wo: int
    kh: int = 1
    kw: int = 1
    sh: int = 1
    sw: int = 1
    ph: int = 0
    pw: int = 0
    dh: int = 1
    dw: int = 1
    groups: int = 1

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    @property
    def taps(self) -> int:
        return self.kh * self.kw

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.cin, self.h, self.w)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.cout, self.ho, self.wo)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.cout, self.cin_g, self.kh, self.kw)

    def forward_macs(self, lo: int = 0, hi: int | None = None) -> int:
        hi = self.cout if hi is None else hi
        return self.n * self.ho * self.wo * (hi - lo) * self.cin_g * self.taps

    def fed_channels(self, lo: int, hi: int) -> tuple[int, int]:
        """Input channels [c0, c1) read by output channels lo..hi (their conv groups)."""
        g0 = lo // self.cout_g
        g1 = (hi - 1) // self.cout_g
        return g0 * self.cin_g, (g1 + 1) * self.cin_g


def conv_geom(layer, batch: int | None = None) -> ConvGeom:
    """The :class:`ConvGeom` of a captured conv or linear layer at ``batch`` (default: the
    captured batch)."""
    kind = getattr(layer, "kind", None)
    name = getattr(layer, "name", "?")
    if kind not in ("conv", "linear"):
        raise ConfigError(f"layer {name!r}: the host model times conv and linear layers, "
                          f"not {kind!r}")
    if batch is not None and (not isinstance(batch, int) or batch <= 0):
        raise ConfigError(f"layer {name!r}: batch must be a positive integer, found {batch!r}")
    in_shape = tuple(layer.input_shapes[0])
    out_shape = tuple(layer.shape)
    a = layer.attrs
    if kind == "linear":
        lead = math.prod(in_shape[1:-1]) if len(in_shape) > 2 else 1
        n = (batch if batch is not None else in_shape[0]) * lead
        return ConvGeom(name, kind, n, int(a["in_features"]), 1, 1, int(a["out_features"]), 1, 1)
    n = batch if batch is not None else in_shape[0]
    (kh, kw), (sh, sw) = a["kernel"], a["stride"]
    (ph, pw), (dh, dw) = a["padding"], a["dilation"]
    if isinstance(a["padding"], str):
        raise ConfigError(f"layer {name!r}: string padding {a['padding']!r} is not supported")
    return ConvGeom(name, kind, n, int(a["in_channels"]), in_shape[2], in_shape[3],
                    int(a["out_channels"]), out_shape[2], out_shape[3], kh, kw, sh, sw, ph, pw,
                    dh, dw, int(a["groups"]))


def check_range(g: ConvGeom, channel_range) -> tuple[int, int]:
    if channel_range is None:
        return 0, g.cout
    try:
        lo, hi = (int(x) for x in channel_range)
    except (TypeError, ValueError):
        raise ConfigError(f"layer {g.name!r}: channel_range must be (lo, hi), "
                          f"found {channel_range!r}") from None
    if not 0 <= lo < hi <= g.cout:
        raise ConfigError(f"layer {g.name!r}: channel_range {channel_range!r} is not inside "
                          f"0..{g.cout} with lo < hi")
    return lo, hi


@dataclasses.dataclass(frozen=True)
class GemmShape:
    """GEMM dimensions of one (layer, phase, channel group); iterates as (m, n, k)."""

    m: int
    n: int
    k: int | float
    flops: int
    phase: str

    def __iter__(self) -> Iterator:
        return iter((self.m, self.n, self.k))

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i):
        return (self.m, self.n, self.k)[i]


def gemm_shape(layer, batch: int | None, phase: str, channel_range=None) -> GemmShape:
    """GEMM (M, N, K) of a conv or linear ``layer`` at ``batch`` for ``phase``
    (forward, backward_data, backward_weight) and output-channel group ``channel_range``."""
    g = layer if isinstance(layer, ConvGeom) else conv_geom(layer, batch)
    phase = normalise_phase(phase)
    lo, hi = check_range(g, channel_range)
    flops = 2 * g.forward_macs(lo, hi)
    if phase == "forward":
        return GemmShape(g.n * g.ho * g.wo, hi - lo, g.cin_g * g.taps, flops, phase)
    if phase == "backward_weight":
        return GemmShape(hi - lo, g.cin_g * g.taps, g.n * g.ho * g.wo, flops, phase)
    c0, c1 = g.fed_channels(lo, hi)
    n = c1 - c0
    num = (hi - lo) * g.cin_g * g.taps
    k = num // n if num % n == 0 else num / n
    return GemmShape(g.n * g.h * g.w, n, k, flops, phase)

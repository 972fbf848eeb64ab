"""Which algorithm the GPU's library runs for a host kernel, and how long it computes.

    from pimrt.host.algorithm import kernel_time
    kt = kernel_time(geom, "forward", (0, 64), part)      # KernelTime
    kt.algorithm, kt.main_s, kt.transform_s, kt.overhead_s, kt.seconds

Algorithms, as cuDNN 7 / cuBLAS run them (docs/host_model.md, "Compute time"):

- ``implicit_gemm``: the GEMM view of pimrt.host.gemm on CTA tiles chosen per shape from the
  part's ``[gemm] tiles`` (the fastest, as the library's heuristic picks), split-K when there are
  few tiles, whole waves, a pipeline fill of ``k_fill_steps`` K steps per CTA; the backward_data
  of a filter smaller than its stride pays for the dX pixels no tap reaches
  (``strided_dgrad_zero_cost``); on a Tensor-Core part, channel counts that are not multiples of
  ``[tensor_cores] channel_multiple`` run at ``unaligned_efficiency``.
- ``winograd``: F(m x m, r x r) for r x r stride-1 convs with r in ``[winograd] filters``: alpha^2
  batched GEMMs (alpha = m + r - 1) on the transformed tiles, plus the input and output
  transforms as streaming passes timed by their bytes. Taken where it is faster.
- ``direct``: depthwise convs (one input channel per group), cuDNN's dedicated kernels: no
  tiles, FLOPs at ``efficiency``; such kernels are bound by their memory traffic.

Every kernel also pays ``kernel_overhead_us`` (launch, library call, tail), kept apart in
``overhead_s`` so that the runtime can place it before the kernel's first request.
"""
from __future__ import annotations

import dataclasses
import functools
import math

from pimrt.host.gemm import ConvGeom, gemm_shape

ALGORITHMS = ("implicit_gemm", "winograd", "direct")
FP_BYTES = 4   # the model's tensors are fp32 in memory


@dataclasses.dataclass(frozen=True)
class KernelTime:
    """A kernel's modelled time, in seconds, by part."""

    algorithm: str
    main_s: float          # the GEMM main loops (or direct compute)
    transform_s: float     # streaming passes timed by bytes: Winograd transforms, split-K sums
    overhead_s: float      # fixed cost per kernel
    launch: dict           # the chosen tile, split-K factor, CTAs, waves
    flops: float = 0.0     # FLOPs the algorithm executes (Winograd's GEMMs do fewer)

    @property
    def compute_s(self) -> float:
        """What the SMs spend: main loops and transforms (the overhead apart)."""
        return self.main_s + self.transform_s

    @property
    def seconds(self) -> float:
        return self.compute_s + self.overhead_s


def _tile_efficiency(p, tm: int, tn: int, efficiency: float) -> float:
    """A tile's share of peak: ``efficiency`` for the part's main tile (tile_m x tile_n), lower
    for smaller tiles by their operand reuse I = tm tn / (tm + tn) (shared-memory bandwidth per
    FLOP): e x [I / (I + c)] / [I0 / (I0 + c)], c = [gemm] tile_intensity."""
    c = p.tile_intensity
    if c <= 0:
        return efficiency
    i = tm * tn / (tm + tn)
    i0 = p.tile_m * p.tile_n / (p.tile_m + p.tile_n)
    return min(1.0, efficiency * (i / (i + c)) / (i0 / (i0 + c)))


@functools.lru_cache(maxsize=65536)
def _gemm(p, m: int, n: int, k: float, batch: int, efficiency: float) -> tuple[float, float, dict]:
    """(main-loop seconds, split-K reduction seconds, launch) of ``batch`` GEMMs M x N x K on
    the part's candidate tiles: the (tile, split) with the least time."""
    best = None
    steps_total = k / p.tile_k
    for tm, tn, per_sm in p.tiles:
        slots = p.sms * per_sm
        tiles = -(-m // tm) * -(-n // tn) * batch
        # a CTA computes tm x tn x tile_k per K step at its share of the SM
        step_s = 2 * tm * tn * p.tile_k / (p.peak_flops * _tile_efficiency(p, tm, tn, efficiency)
                                           / slots)
        smax = max(1, min(max(p.max_split_k, slots // tiles), int(steps_total // 8)))
        for split in range(1, smax + 1):
            ctas = tiles * split
            waves = -(-ctas // slots)
            main = waves * (math.ceil(steps_total / split - 1e-9) + p.k_fill_steps) * step_s
            # split-K partial sums: written by each split, read back and summed
            red = (2 * split * m * n * batch * FP_BYTES / p.stream_bytes_per_s) if split > 1 else 0.0
            t = main + red
            if best is None or t < best[0] - 1e-15:
                best = (t, main, red, {"tile": (tm, tn), "tiles": tiles, "split_k": split,
                                       "ctas": ctas, "waves": waves})
    return best[1], best[2], best[3]


def _implicit_gemm(g: ConvGeom, phase: str, lo: int, hi: int, p) -> KernelTime:
    s = gemm_shape(g, None, phase, (lo, hi))
    eff = {"forward": p.efficiency, "backward_data": p.dgrad_efficiency,
           "backward_weight": p.wgrad_efficiency}[phase]
    aligned = g.kind == "linear" or (g.cin_g % p.channel_multiple == 0
                                     and g.cout_g % p.channel_multiple == 0)
    if not aligned:     # off the Tensor-Core path
        eff = p.unaligned_efficiency
    k = s.flops / (2 * s.m * s.n)      # the useful taps (by stride phase)
    if phase == "backward_data" and (g.kh < g.sh or g.kw < g.sw):
        # a filter smaller than its stride: dX pixels no tap reaches are computed too, at
        # strided_dgrad_zero_cost of a useful tap's time
        k += (s.k - k) * p.strided_dgrad_zero_cost
    main, red, launch = _gemm(p, s.m, s.n, k, 1, eff)
    launches = 1 + (launch["split_k"] > 1)      # the GEMM, a reduction kernel after a split
    launch = dict(launch, aligned=aligned)
    return KernelTime("implicit_gemm", main, red, launches * p.kernel_overhead_s,
                      dict(launch, launches=launches), 2.0 * s.m * s.n * k)


def winograd_applies(g: ConvGeom, p) -> bool:
    """A conv the part's Winograd kernels take: square r x r filter in ``[winograd] filters``,
    stride 1, no dilation, not grouped."""
    return (p.winograd_tile > 0 and g.kind == "conv" and g.kh == g.kw and g.kh in p.winograd_filters
            and g.sh == g.sw == 1 and g.dh == g.dw == 1 and g.groups == 1)


def _winograd(g: ConvGeom, phase: str, lo: int, hi: int, p) -> KernelTime:
    m, r = p.winograd_tile, g.kh
    alpha = m + r - 1
    cout = hi - lo
    if phase == "backward_data":     # the transposed conv: dY (cout channels) -> dX (cin)
        tiles = g.n * -(-g.h // m) * -(-g.w // m)
        gm, gn, gk = tiles, g.cin, cout
        t_in, t_out = g.n * cout * g.ho * g.wo, g.n * g.cin * g.h * g.w
    else:
        tiles = g.n * -(-g.ho // m) * -(-g.wo // m)
        t_in, t_out = g.n * g.cin * g.h * g.w, g.n * cout * g.ho * g.wo
        if phase == "forward":
            gm, gn, gk = tiles, cout, g.cin
        else:                        # dW[cout, cin] summed over the tiles
            gm, gn, gk = cout, g.cin, tiles
    eff = p.winograd_efficiency
    main, red, launch = _gemm(p, gm, gn, gk, alpha * alpha, eff)
    # transforms: each reads its tensor and writes alpha^2 values per tile and channel (or the
    # reverse); the filter transform (weights) is small beside them and left out
    a2 = alpha * alpha
    if phase == "backward_weight":   # transforms of X and dY in, dW out of alpha^2 x cout x cin
        moved = (t_in + a2 * tiles * g.cin) + (t_out + a2 * tiles * cout) + a2 * cout * g.cin
    else:
        moved = (t_in + a2 * tiles * gk) + (a2 * tiles * gn + t_out)
    transform = moved * FP_BYTES / p.stream_bytes_per_s
    launches = 4 + (launch["split_k"] > 1)     # filter, input and output transforms, the GEMMs
    launch = dict(launch, winograd=f"F({m}x{m},{r}x{r})", launches=launches)
    return KernelTime("winograd", main, transform + red, launches * p.kernel_overhead_s, launch,
                      2.0 * alpha * alpha * gm * gn * gk)


def _direct(g: ConvGeom, phase: str, lo: int, hi: int, p) -> KernelTime:
    flops = 2 * g.forward_macs(lo, hi)
    return KernelTime("direct", flops / (p.peak_flops * p.efficiency), 0.0,
                      p.kernel_overhead_s, {"tile": None, "split_k": 1, "waves": 1,
                                            "launches": 1}, float(flops))


def candidates(g: ConvGeom, phase: str, lo: int, hi: int, p) -> list[KernelTime]:
    """Every algorithm the library could run for the kernel, timed."""
    if g.groups > 1 and g.cin_g == 1:
        return [_direct(g, phase, lo, hi, p)]
    out = [_implicit_gemm(g, phase, lo, hi, p)]
    if winograd_applies(g, p):
        out.append(_winograd(g, phase, lo, hi, p))
    return out


def kernel_time(g: ConvGeom, phase: str, channel_range: tuple[int, int], p) -> KernelTime:
    """The kernel's time with the algorithm the library would pick: the fastest candidate."""
    lo, hi = channel_range
    return min(candidates(g, phase, lo, hi, p), key=lambda kt: kt.seconds)

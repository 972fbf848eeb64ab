"""Measured host compute: time the real conv/linear kernel of a work on a GPU.

``measure_compute_ms(layer, batch, phase, channel_range, device)`` runs the kernel the work
stands for (forward: the conv/linear on output channels lo..hi; backward_data: dX from dY
channels lo..hi and W[lo:hi]; backward_weight: dW rows lo..hi) with CUDA events: ``warmup``
untimed runs, then the median of ``repeats`` timed ones. Without CUDA (no torch.cuda, a CPU
device) it returns None and the caller keeps the model.
"""
from __future__ import annotations

import statistics

from pimrt.host.gemm import ConvGeom, check_range, conv_geom, normalise_phase


def cuda_available() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:        # noqa: BLE001 - no torch / broken driver: no GPU
        return False


def _sub_problem(g: ConvGeom, lo: int, hi: int):
    """The slice as a self-contained conv: (cin, cout, groups, in-channel offset)."""
    if g.groups == 1:
        return g.cin, hi - lo, 1
    g0, g1 = lo // g.cout_g, (hi - 1) // g.cout_g
    ng = g1 - g0 + 1
    # whole conv groups covering the slice (a partial group costs as much as its share)
    return ng * g.cin_g, ng * g.cout_g, ng


def measure_compute_ms(layer, batch, phase: str, channel_range=None, device="cuda",
                       warmup: int = 3, repeats: int = 10, dtype=None) -> float | None:
    """Median kernel time in ms of the work on a CUDA ``device``; None without a GPU."""
    try:
        import torch
    except Exception:        # noqa: BLE001
        return None
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if dev.type != "cuda" or not cuda_available():
        return None
    g = layer if isinstance(layer, ConvGeom) else conv_geom(layer, batch)
    phase = normalise_phase(phase)
    lo, hi = check_range(g, channel_range)
    dtype = dtype or torch.float32
    cin, cout, groups = _sub_problem(g, lo, hi)
    F = torch.nn.functional
    mk = lambda *s: torch.randn(*s, device=dev, dtype=dtype)  # noqa: E731
    if g.kind == "linear":
        x, w, dy = mk(g.n, cin), mk(cout, cin), mk(g.n, cout)
        run = {"forward": lambda: F.linear(x, w),
               "backward_data": lambda: dy @ w,
               "backward_weight": lambda: dy.t() @ x}[phase]
    else:
        stride, pad, dil = (g.sh, g.sw), (g.ph, g.pw), (g.dh, g.dw)
        x = mk(g.n, cin, g.h, g.w)
        w = mk(cout, cin // groups, g.kh, g.kw)
        dy = mk(g.n, cout, g.ho, g.wo)
        gr = torch.nn.grad
        run = {"forward": lambda: F.conv2d(x, w, None, stride, pad, dil, groups),
               "backward_data": lambda: gr.conv2d_input(x.shape, w, dy, stride, pad, dil,
                                                        groups),
               "backward_weight": lambda: gr.conv2d_weight(x, w.shape, dy, stride, pad, dil,
                                                           groups)}[phase]
    with torch.no_grad():
        for _ in range(max(0, warmup)):
            run()
        torch.cuda.synchronize(dev)
        times = []
        for _ in range(max(1, repeats)):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            run()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    return float(statistics.median(times))

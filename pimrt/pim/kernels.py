"""Micro-programs for the non-CONV work of training, and host-side wrappers that run them over
numpy buffers on any backend (golden model, pyverilator RTL, batch driver).

Stream kernels walk one or more equal-length streams of fp32 values, one bank region per
stream, one column (LANES values) per step; the loop body is unrolled to fill the command
register file. Buffers are padded with zeros to whole unrolled steps and split into chunks
that fit the bank. Pooling kernels walk a channels-last (NHWC, C padded to a multiple of
LANES) image with nested loops. Per-channel scalar work (mean, 1/sqrt(var+eps), the
constants of the backward formula) and the final sum of the LANES partial sums of a
reduction are done on the host, in float64.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from pimrt.pim import isa
from pimrt.pim.asm import Program, assemble
from pimrt.pim.backend import Backend
from pimrt.pim.errors import PimCapacityError, PimError


@dataclass(frozen=True)
class StreamKernel:
    name: str
    inputs: tuple[str, ...]          # streams read
    outputs: tuple[str, ...]         # streams written (may name inputs: updated in place)
    body: tuple[str, ...]            # one column step; {stream} stands for its pointer
    scalars: tuple[str, ...] = ()    # S0, S1, ... in this order
    acc: int = 0                     # accumulators A0.. zeroed first and stored at the end
    doc: str = ""

    @property
    def streams(self) -> tuple[str, ...]:
        return self.inputs + tuple(o for o in self.outputs if o not in self.inputs)

    def unroll(self) -> int:
        free = isa.CRF_DEPTH - 2 - 2 * self.acc      # LOOP, EXIT, zeroing and storing ACCs
        return max(1, min(16, free // len(self.body)))

    def program(self) -> Program:
        ptr = {s: f"p{i}" for i, s in enumerate(self.streams)}
        ptr["acc"] = f"p{len(self.streams)}"
        zero = f"S{len(self.scalars)}"                # a scalar the wrapper sets to 0.0
        lines = [f"MOV A{i}, {zero}" for i in range(self.acc)]
        lines.append("top:")
        lines += [line.format(**ptr) for line in self.body] * self.unroll()
        lines.append("LOOP c0, top")
        lines += [f"MOV B[{ptr['acc']}+], A{i}" for i in range(self.acc)]
        lines.append("EXIT")
        return assemble("\n".join(lines))


STREAM_KERNELS = {k.name: k for k in [
    StreamKernel("relu_fwd", ("x",), ("y", "mask"),
                 ("MAX B[{y}+], B[{x}], S0", "CMPGT B[{mask}+], B[{x}+], S0"), ("zero",),
                 doc="y = max(x, +0); mask = x > 0 (all-ones / zero lanes)"),
    StreamKernel("relu_bwd", ("mask", "dy"), ("dx",),
                 ("MOV G0, B[{mask}+]", "SEL B[{dx}+], B[{dy}+], S0, G0"), ("zero",),
                 doc="dx = mask ? dy : 0"),
    StreamKernel("residual_add", ("a", "b"), ("y",),
                 ("MOV G0, B[{a}+]", "ADD B[{y}+], G0, B[{b}+]"),
                 doc="y = a + b"),
    StreamKernel("bn_stats", ("x",), (),
                 ("MOV G0, B[{x}+]", "ADD A0, A0, G0", "MAD A1, G0, G0, A1"), acc=2,
                 doc="A0 += x; A1 += x*x (per lane; the host adds the lanes)"),
    StreamKernel("bn_apply", ("x",), ("y",),
                 ("MAD B[{y}+], B[{x}+], S0, S1",), ("scale", "shift"),
                 doc="y = x*scale + shift (scale = gamma/sqrt(var+eps), shift = beta - mean*scale)"),
    StreamKernel("bn_bwd_stats", ("x", "dy"), (),
                 ("MOV G1, B[{dy}+]", "ADD A0, A0, G1", "SUB G0, B[{x}+], S0",
                  "MUL G0, G0, S1", "MAD A1, G0, G1, A1"), ("mean", "invstd"), acc=2,
                 doc="A0 += dy; A1 += dy * (x - mean) * invstd"),
    StreamKernel("bn_bwd_apply", ("x", "dy"), ("dx",),
                 ("SUB G0, B[{x}+], S0", "MUL G0, G0, S1", "ADD G0, G0, S2",
                  "MAD B[{dx}+], B[{dy}+], S3, G0"), ("mean", "c1", "c0", "k"),
                 doc="dx = dy*k + ((x - mean)*c1 + c0)"),
    StreamKernel("sgd", ("w", "g", "v"), ("w", "v"),
                 ("MOV G0, B[{w}]", "MAD G1, G0, S0, B[{g}+]", "MAD G2, B[{v}], S1, G1",
                  "MOV B[{v}+], G2", "MAD B[{w}+], G2, S2, G0"),
                 ("weight_decay", "momentum", "neg_lr"),
                 doc="g' = w*wd + g; v = v*momentum + g'; w = v*(-lr) + w"),
    # GradSA on the unit: fold the gradient into momentum u and residual v, then select
    StreamKernel("gradsa_fold", ("w", "g", "u", "v"), ("u", "v"),
                 ("MOV G0, B[{g}+]", "MAD G1, B[{w}+], S0, G0", "MAD G2, B[{u}], S1, G1",
                  "MOV B[{u}+], G2", "ADD B[{v}+], B[{v}], G2"),
                 ("weight_decay", "momentum"),
                 doc="g' = w*wd + g; u = u*momentum + g'; v = v + u"),
    StreamKernel("gradsa_select", ("v", "u"), ("u", "mask", "d"),
                 ("SUB G0, S1, B[{v}]", "MAX G0, G0, B[{v}+]", "CMPGE G1, G0, S0",
                  "MOV B[{mask}+], G1", "SEL B[{u}+], S1, B[{u}], G1", "MOV B[{d}+], S1"),
                 ("threshold", "zero"),
                 doc="mask = max(0 - v, v) >= t; u = mask ? +0 : u; d = +0"),
    StreamKernel("sgd_apply", ("w", "d"), ("w",),
                 ("MOV G0, B[{w}]", "MAD B[{w}+], B[{d}+], S0, G0"), ("neg_lr",),
                 doc="w = d*(-lr) + w (plain SGD: the mirror update of LaySA)"),
]}


@dataclass
class StreamResult:
    outputs: dict[str, np.ndarray]
    acc: np.ndarray | None           # (accumulators, LANES) float64 partial sums, chunks added
    cycles: int = 0
    elements: int = 0
    chunks: int = 0
    extra: dict = field(default_factory=dict)


def _f32(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32).ravel())


def run_stream(backend: Backend, name: str, arrays: dict[str, np.ndarray],
               scalars: dict[str, float] | None = None, max_cycles: int | None = None) -> StreamResult:
    """Run stream kernel `name` over 1-D arrays (one per input stream) on `backend`."""
    k = STREAM_KERNELS[name]
    scalars = scalars or {}
    missing = [s for s in k.inputs if s not in arrays] + [s for s in k.scalars if s not in scalars and s != "zero"]
    if missing:
        raise PimError(f"kernel {name}: missing {', '.join(missing)}")
    data = {s: _f32(arrays[s]) for s in k.inputs}
    n = len(next(iter(data.values())))
    if any(len(v) != n for v in data.values()):
        raise PimError(f"kernel {name}: streams differ in length: "
                       + ", ".join(f"{s}={len(v)}" for s, v in data.items()))
    L, u = backend.lanes, k.unroll()
    streams = k.streams
    chunk = (backend.depth - k.acc) // len(streams) // u * u
    if chunk < u:
        raise PimCapacityError(f"kernel {name}: the bank of {backend.depth} columns cannot hold "
                               f"{len(streams)} streams of {u} columns")
    prog = k.program()
    backend.load_program(prog)
    sv = [scalars.get(s, 0.0) for s in k.scalars] + [0.0]
    backend.set_scalars(np.asarray(sv, dtype=np.float32))
    cols_total = -(-n // L)
    outs = {s: np.empty(cols_total * L, np.float32) for s in k.outputs}
    acc = np.zeros((k.acc, L), np.float64) if k.acc else None
    res = StreamResult(outs, acc)
    acc_base = len(streams) * chunk
    for c0 in range(0, max(cols_total, 1), chunk):
        cols = min(chunk, cols_total - c0)
        steps = -(-cols // u)
        padded = steps * u
        for i, s in enumerate(streams):
            if s in data:
                seg = data[s][c0 * L:(c0 + cols) * L]
                if seg.size != padded * L:       # the last chunk: pad with zeros
                    buf = np.zeros(padded * L, np.float32)
                    buf[:seg.size] = seg
                    seg = buf
                backend.write_bank(i * chunk, seg.view(np.uint32).reshape(padded, L))
        backend.set_pointers([i * chunk for i in range(len(streams))] + ([acc_base] if k.acc else []))
        backend.set_counts([steps])
        cyc = backend.run(**({"max_cycles": max_cycles} if max_cycles else {}))
        res.cycles += cyc
        res.chunks += 1
        for i, s in enumerate(streams):
            if s in outs:
                got = backend.read_bank(i * chunk, cols).view(np.float32).ravel()
                outs[s][c0 * L:(c0 + cols) * L] = got
        if k.acc:
            res.acc += backend.read_bank(acc_base, k.acc).view(np.float32).astype(np.float64)
    res.elements = n
    for s in outs:
        outs[s] = outs[s][:n]
    backend.record(name, res.cycles, n)
    return res


# ---- element-wise wrappers ----------------------------------------------------------------

def relu_forward(backend: Backend, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """-> (y, mask as bool), shaped like x."""
    r = run_stream(backend, "relu_fwd", {"x": x})
    shape = np.shape(x)
    return r.outputs["y"].reshape(shape), (r.outputs["mask"].view(np.uint32) != 0).reshape(shape)


def relu_backward(backend: Backend, mask: np.ndarray, dy: np.ndarray) -> np.ndarray:
    m = np.where(np.asarray(mask, bool), np.uint32(0xFFFFFFFF), np.uint32(0)).view(np.float32)
    r = run_stream(backend, "relu_bwd", {"mask": m, "dy": dy})
    return r.outputs["dx"].reshape(np.shape(dy))


def residual_add(backend: Backend, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return run_stream(backend, "residual_add", {"a": a, "b": b}).outputs["y"].reshape(np.shape(a))


def sgd_update(backend: Backend, w, g, v, lr: float, momentum: float = 0.9,
               weight_decay: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """torch.optim.SGD's step (dampening 0, no Nesterov) with an existing momentum buffer v:
    g' = g + wd*w; v = momentum*v + g'; w = w - lr*v, each operation rounded to float32.
    For the first step pass v = g + wd*w and momentum = 0 to match torch's buffer init."""
    r = run_stream(backend, "sgd", {"w": w, "g": g, "v": v},
                   {"weight_decay": weight_decay, "momentum": momentum, "neg_lr": -lr})
    shape = np.shape(w)
    return r.outputs["w"].reshape(shape), r.outputs["v"].reshape(shape)


# ---- GradSA's sparse exchange and the plain SGD update ------------------------------------

def gradsa_fold(backend: Backend, w, g, u, v, momentum: float,
                weight_decay: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """GradSA's momentum correction (pimrt.gradsa.state.accumulate, no Nesterov) with weight
    decay folded in: g' = w*wd + g; u = u*momentum + g'; v = v + u, each operation rounded
    to float32 (torch: torch.add(g, w, alpha=wd), u.mul_(m).add_(g'), v.add_(u); torch's CPU
    add with alpha may fuse w*wd + g). With wd = 0 the unit still adds w*0: g' = g except
    that g = -0 becomes +0 (w positive or +0) and an infinite or NaN w gives NaN. -> (u, v)."""
    r = run_stream(backend, "gradsa_fold", {"w": w, "g": g, "u": u, "v": v},
                   {"weight_decay": weight_decay, "momentum": momentum})
    shape = np.shape(w)
    return r.outputs["u"].reshape(shape), r.outputs["v"].reshape(shape)


def select_threshold(threshold: float) -> np.float32:
    """The float32 t of the unit's |v| >= t that gives the mask of sparsify.select's rule
    `|v| >= thr if thr > 0 else |v| > 0` bit for bit: thr rounded to the nearest float32, as
    torch rounds a Python float it compares a float32 tensor with (so 1e300 is inf and 1e-50
    is 0, which lets zeros through as torch does); for thr <= 0 or NaN the smallest
    subnormal, with which |v| >= t is |v| > 0."""
    if not threshold > 0:
        return np.float32(np.finfo(np.float32).smallest_subnormal)
    with np.errstate(over="ignore"):
        return np.float32(threshold)


def gradsa_select(backend: Backend, v, u, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GradSA's selection and momentum masking (sparsify.select's threshold rule, then
    state.commit's u[idx] = 0): mask = |v| >= t (t from select_threshold); u = mask ? +0 : u;
    d = +0, the cleared slot of the dense gradient the aggregated update is decoded into.
    |v| = max(0 - v, v): +0 for -0, NaN for NaN (never selected, as torch's NaN >= t is
    false). The host reads v[mask], encodes it and writes back the remainder.
    -> (u, mask as bool, d)."""
    r = run_stream(backend, "gradsa_select", {"v": v, "u": u},
                   {"threshold": float(select_threshold(threshold)), "zero": 0.0})
    shape = np.shape(v)
    mask = (r.outputs["mask"].view(np.uint32) != 0).reshape(shape)
    return r.outputs["u"].reshape(shape), mask, r.outputs["d"].reshape(shape)


def sgd_apply(backend: Backend, w, d, lr: float) -> np.ndarray:
    """Plain SGD (no momentum, no weight decay): w = d*(-lr) + w, two float32 roundings
    (torch: p.add_(d, alpha=-lr), whose CPU kernel may fuse). LaySA's mirror update."""
    r = run_stream(backend, "sgd_apply", {"w": w, "d": d}, {"neg_lr": -lr})
    return r.outputs["w"].reshape(np.shape(w))


# ---- batch norm (training) -----------------------------------------------------------------

def _channels(x: np.ndarray):
    x = np.asarray(x, np.float32)
    if x.ndim < 2:
        raise PimError(f"batch norm wants (N, C, ...) input, got shape {x.shape}")
    return x, x.shape[1]


def batchnorm_forward(backend: Backend, x, gamma, beta, eps: float = 1e-5):
    """Training-mode batch norm over (N, C, ...): -> (y, mean, invstd), batch statistics.
    Statistics: per-lane sums of x and x*x in the unit, lanes and chunks added and
    var = E[x^2] - mean^2 (biased) on the host in float64; y = x*scale + shift in the unit."""
    x, C = _channels(x)
    y = np.empty_like(x)
    mean = np.empty(C, np.float64)
    invstd = np.empty(C, np.float64)
    for c in range(C):
        xc = x[:, c].ravel()
        n = xc.size
        acc = run_stream(backend, "bn_stats", {"x": xc}).acc.sum(axis=1)
        m = acc[0] / n
        var = max(acc[1] / n - m * m, 0.0)
        inv = 1.0 / math.sqrt(var + eps)
        scale = float(gamma[c]) * inv
        shift = float(beta[c]) - m * scale
        r = run_stream(backend, "bn_apply", {"x": xc}, {"scale": scale, "shift": shift})
        y[:, c] = r.outputs["y"].reshape(y[:, c].shape)
        mean[c], invstd[c] = m, inv
    return y, mean.astype(np.float32), invstd.astype(np.float32)


def batchnorm_backward(backend: Backend, x, dy, gamma, mean, invstd):
    """Training-mode batch norm backward: -> (dx, dgamma, dbeta).
    Sums of dy and dy*xhat in the unit (per lane), then dx = k*dy + c1*(x - mean) + c0 with
    k = gamma*invstd, c1 = -k*invstd*sum(dy*xhat)/n, c0 = -k*sum(dy)/n."""
    x, C = _channels(x)
    dy = np.asarray(dy, np.float32)
    dx = np.empty_like(x)
    dgamma = np.empty(C, np.float64)
    dbeta = np.empty(C, np.float64)
    for c in range(C):
        xc, dyc = x[:, c].ravel(), dy[:, c].ravel()
        n = xc.size
        s = run_stream(backend, "bn_bwd_stats", {"x": xc, "dy": dyc},
                       {"mean": float(mean[c]), "invstd": float(invstd[c])}).acc.sum(axis=1)
        k = float(gamma[c]) * float(invstd[c])
        c1 = -k * float(invstd[c]) * s[1] / n
        c0 = -k * s[0] / n
        r = run_stream(backend, "bn_bwd_apply", {"x": xc, "dy": dyc},
                       {"mean": float(mean[c]), "c1": c1, "c0": c0, "k": k})
        dx[:, c] = r.outputs["dx"].reshape(dx[:, c].shape)
        dbeta[c], dgamma[c] = s[0], s[1]
    return dx, dgamma.astype(np.float32), dbeta.astype(np.float32)


# ---- batch norm, many channels per run -----------------------------------------------------
#
# The per-channel wrappers above run one kernel call per channel, with the channel's constants
# in the SRF. The channel kernels below walk many channels in one run: an outer loop over the
# channels (c1) around the column loop (c0). The outer loop's prologue zeroes the accumulators
# and loads the channel's constants from the bank into registers (one column per constant, the
# value in every lane: the host lays them out beside the data); its epilogue stores the
# accumulators. Every channel is padded with zeros to the same number of columns (a whole
# number of unrolled steps); a channel too big for the bank is cut into equal pieces whose
# sums the host adds in float64. Per lane the unit does, channel by channel, the same float32
# operations in the same order as the per-channel kernel, so the results do not depend on how
# many channels share a run (nor on the channel groups of the runtime).

@dataclass(frozen=True)
class ChannelKernel:
    name: str
    inputs: tuple[str, ...]          # streams read, one region each, channel after channel
    outputs: tuple[str, ...]         # streams written
    body: tuple[str, ...]            # one column step; {stream} -> its pointer, {param} -> its GRF
    params: tuple[str, ...] = ()     # per-channel constants, loaded into G2, G3, ...
    acc: int = 0                     # accumulators zeroed per channel and stored after it
    doc: str = ""

    @property
    def streams(self) -> tuple[str, ...]:
        return self.inputs + tuple(o for o in self.outputs if o not in self.inputs)

    def max_unroll(self) -> int:
        fixed = 2 * self.acc + len(self.params) + 3      # zero/store ACCs, loads, 2 LOOPs, EXIT
        return max(1, min(16, (isa.CRF_DEPTH - fixed) // len(self.body)))

    def unroll_for(self, cols: int) -> int:
        """The unroll (at most max_unroll) that pads `cols` columns the least (ties: larger)."""
        best = None
        for u in range(self.max_unroll(), 0, -1):
            padded = -(-max(cols, 1) // u) * u
            if best is None or padded < best[0]:
                best = (padded, u)
        return best[1]

    def pointers(self) -> dict[str, str]:
        ptr = {s: f"p{i}" for i, s in enumerate(self.streams)}
        n = len(self.streams)
        if self.params:
            ptr["par"] = f"p{n}"
            n += 1
        if self.acc:
            ptr["acc"] = f"p{n}"
        return ptr

    @functools.lru_cache(maxsize=None)
    def program(self, unroll: int) -> Program:
        ptr = self.pointers()
        reg = {prm: f"G{2 + i}" for i, prm in enumerate(self.params)}
        lines = ["chan:"]
        lines += [f"MOV A{i}, S0" for i in range(self.acc)]          # S0 = 0.0
        lines += [f"MOV {reg[prm]}, B[{ptr['par']}+]" for prm in self.params]
        lines.append("col:")
        lines += [line.format(**ptr, **reg) for line in self.body] * unroll
        lines.append("LOOP c0, col")
        lines += [f"MOV B[{ptr['acc']}+], A{i}" for i in range(self.acc)]
        lines += ["LOOP c1, chan", "EXIT"]
        return assemble("\n".join(lines))


CHANNEL_KERNELS = {k.name: k for k in [
    ChannelKernel("bn_stats_ch", ("x",), (),
                  ("MOV G0, B[{x}+]", "ADD A0, A0, G0", "MAD A1, G0, G0, A1"), acc=2,
                  doc="per channel: A0 += x; A1 += x*x (per lane)"),
    ChannelKernel("bn_bwd_stats_ch", ("x", "dy"), (),
                  ("MOV G1, B[{dy}+]", "ADD A0, A0, G1", "SUB G0, B[{x}+], {mean}",
                   "MUL G0, G0, {invstd}", "MAD A1, G0, G1, A1"), ("mean", "invstd"), acc=2,
                  doc="per channel: A0 += dy; A1 += dy * (x - mean) * invstd"),
    ChannelKernel("bn_bwd_apply_ch", ("x", "dy"), ("dx",),
                  ("SUB G0, B[{x}+], {mean}", "MUL G0, G0, {c1}", "ADD G0, G0, {c0}",
                   "MAD B[{dx}+], B[{dy}+], {k}, G0"), ("mean", "c1", "c0", "k"),
                  doc="per channel: dx = dy*k + ((x - mean)*c1 + c0)"),
]}


@dataclass
class ChannelResult:
    outputs: dict[str, np.ndarray]   # (C, n) each
    acc: np.ndarray | None           # (C, accumulators, LANES) float64, pieces added
    cycles: int = 0
    runs: int = 0
    pieces: int = 1                  # pieces per channel
    unroll: int = 1


def channel_layout(backend: Backend, k: ChannelKernel, n: int) -> tuple[int, int, int]:
    """-> (pieces per channel, padded columns per piece, unroll) for channels of n values:
    fixed by the kernel, the bank and n alone, so a channel's results never depend on the
    other channels of the run."""
    L = backend.lanes
    cols = max(-(-n // L), 1)
    ns, per = len(k.streams), len(k.params) + k.acc
    room = (backend.depth - per) // ns
    pieces = 1
    while True:
        pc = -(-cols // pieces)
        u = k.unroll_for(pc)
        padded = -(-pc // u) * u
        if padded <= room:
            return pieces, padded, u
        pieces += 1
        if pieces > cols:
            raise PimCapacityError(f"kernel {k.name}: the bank of {backend.depth} columns "
                                   f"cannot hold {ns} streams of one column")


def run_channels(backend: Backend, name: str, arrays: dict[str, np.ndarray],
                 params: dict[str, np.ndarray] | None = None,
                 max_cycles: int | None = None) -> ChannelResult:
    """Run channel kernel `name` over (C, n) arrays (one row per channel, one array per input
    stream) with per-channel constants params[name] of shape (C,), on `backend`."""
    k = CHANNEL_KERNELS[name]
    params = params or {}
    missing = [s for s in k.inputs if s not in arrays] + [p for p in k.params if p not in params]
    if missing:
        raise PimError(f"kernel {name}: missing {', '.join(missing)}")
    data = {s: np.asarray(arrays[s], np.float32) for s in k.inputs}
    shapes = {s: v.shape for s, v in data.items()}
    if any(len(v) != 2 for v in shapes.values()) or len(set(shapes.values())) != 1:
        raise PimError(f"kernel {name}: streams must be equal (channels, values) arrays, got "
                       + ", ".join(f"{s}={v}" for s, v in shapes.items()))
    C, n = next(iter(shapes.values()))
    prm = {p: np.asarray(params[p], np.float32).reshape(-1) for p in k.params}
    if any(v.size != C for v in prm.values()):
        raise PimError(f"kernel {name}: want one value per channel ({C}) for "
                       + ", ".join(k.params))
    L = backend.lanes
    pieces, P, u = channel_layout(backend, k, n)
    ns, npar = len(k.streams), len(k.params)
    per_piece = ns * P + npar + k.acc
    rows = C * pieces                                   # one "row" per piece of a channel
    # the data, channel-major, each piece zero-padded to P columns
    lay = {}
    for s in k.inputs:
        buf = np.zeros((C, pieces * P * L), np.float32)
        buf[:, :n] = data[s]
        lay[s] = buf.reshape(rows, P * L)
    par = None
    if npar:
        par = np.repeat(np.stack([prm[p] for p in k.params], axis=1), pieces, axis=0)  # (rows, npar)
        par = np.repeat(par[:, :, None], L, axis=2).reshape(rows, npar, L)
    outs = {s: np.empty((rows, P * L), np.float32) for s in k.outputs}
    acc = np.empty((rows, k.acc, L), np.float32) if k.acc else None
    backend.load_program(k.program(u))
    backend.set_scalars(np.zeros(1, np.float32))
    backend.set_counts([P // u, 0])
    per_run = backend.depth // per_piece
    res = ChannelResult(outs, None, pieces=pieces, unroll=u)
    for r0 in range(0, rows, per_run):
        m = min(per_run, rows - r0)
        bases = [i * m * P for i in range(ns)]
        par_base = ns * m * P
        acc_base = par_base + m * npar
        for i, s in enumerate(k.streams):
            if s in lay:
                backend.write_bank(bases[i], lay[s][r0:r0 + m].view(np.uint32).reshape(m * P, L))
        ptrs = list(bases)
        if npar:
            backend.write_bank(par_base, par[r0:r0 + m].view(np.uint32).reshape(m * npar, L))
            ptrs.append(par_base)
        if k.acc:
            ptrs.append(acc_base)
        backend.set_pointers(ptrs)
        backend.set_counts({1: m})
        res.cycles += backend.run(**({"max_cycles": max_cycles} if max_cycles else {}))
        res.runs += 1
        for i, s in enumerate(k.streams):
            if s in outs:
                outs[s][r0:r0 + m] = backend.read_bank(bases[i], m * P).view(
                    np.float32).reshape(m, P * L)
        if k.acc:
            acc[r0:r0 + m] = backend.read_bank(acc_base, m * k.acc).view(
                np.float32).reshape(m, k.acc, L)
    res.outputs = {s: v.reshape(C, pieces * P * L)[:, :n] for s, v in outs.items()}
    if k.acc:
        res.acc = acc.astype(np.float64).reshape(C, pieces, k.acc, L).sum(axis=1)
    backend.record(name, res.cycles, C * n)
    return res


def _by_channel(x: np.ndarray) -> np.ndarray:
    """(N, C, ...) -> (C, N * ...), each channel's values in the order x[:, c].ravel()."""
    x = np.asarray(x, np.float32)
    return np.ascontiguousarray(np.moveaxis(x, 1, 0)).reshape(x.shape[1], -1)


def _from_channels(v: np.ndarray, shape) -> np.ndarray:
    N, C = shape[0], shape[1]
    return np.ascontiguousarray(np.moveaxis(v.reshape((C, N) + tuple(shape[2:])), 0, 1))


def batchnorm_forward_2pass(backend: Backend, x, gamma, beta, eps: float = 1e-5,
                            slices: int = 1):
    """Training-mode batch norm over (N, C, ...), all channels in a few runs: -> (y, mean,
    invstd). Two-pass variance: the mean from the unit's sums (bn_stats_ch), then
    sum((x - m32) * x) from its dy*xhat reduction (bn_bwd_stats_ch with dy = x, invstd = 1),
    which avoids the cancellation of E[x^2] - mean^2 when the mean is large against the spread,
    corrected on the host for the fp32 mean m32 the unit subtracts; then
    y = (x - mean) * (gamma * invstd) + beta, subtracting the mean first as torch does
    (bn_bwd_apply_ch with k = 0). Lanes and pieces are added on the host in float64.

    slices: the statistics are taken per batch slice (N / slices samples each: the slice's
    mean, then its sum of squared deviations from it) and combined on the host in float64
    (Chan et al.: M2 = sum of the slices' M2 + n_s (m_s - m)^2), so that a slice's statistics
    can run as soon as the host has written it (the forward pass by batch slices,
    pimrt.runtime.schedule). With slices = 1 this is the whole-batch computation, bit for bit."""
    x, C = _channels(x)
    N = x.shape[0]
    if slices < 1 or N % slices:
        raise PimError(f"batch norm: {slices} slices do not divide the batch of {N}")
    sums, means, m2s, counts = [], [], [], []
    for b in range(slices):
        xc = _by_channel(x[b * N // slices:(b + 1) * N // slices])
        nb = xc.shape[1]
        s0 = run_channels(backend, "bn_stats_ch", {"x": xc}).acc.sum(axis=-1)     # (C, 2)
        mb = s0[:, 0] / nb
        mb32 = mb.astype(np.float32)                 # the unit subtracts the fp32 scalar
        s = run_channels(backend, "bn_bwd_stats_ch", {"x": xc, "dy": xc},
                         {"mean": mb32, "invstd": np.ones(C, np.float32)}).acc.sum(axis=-1)
        # sum((x - mb)^2) = sum(x (x - mb32)) + (mb32 - mb) sum(x), with sum(x - mb) = 0
        m2s.append(s[:, 1] + (mb32.astype(np.float64) - mb) * s0[:, 0])
        sums.append(s0[:, 0])
        means.append(mb)
        counts.append(nb)
    n = sum(counts)
    m = sum(sums) / n if slices > 1 else means[0]
    m2 = m2s[0] if slices == 1 else \
        sum(q + nb * (mb - m) ** 2 for q, nb, mb in zip(m2s, counts, means))
    var = np.maximum(m2 / n, 0.0)
    inv = 1.0 / np.sqrt(var + eps)
    m32 = m.astype(np.float32)
    g64 = np.asarray(gamma, np.float32).astype(np.float64)
    xc = _by_channel(x)
    r = run_channels(backend, "bn_bwd_apply_ch", {"x": xc, "dy": xc},
                     {"mean": m32, "c1": g64 * inv, "c0": np.asarray(beta, np.float32),
                      "k": np.zeros(C, np.float32)})
    y = _from_channels(r.outputs["dx"], x.shape)
    return y, m.astype(np.float32), inv.astype(np.float32)


def batchnorm_backward_channels(backend: Backend, x, dy, gamma, mean, invstd):
    """batchnorm_backward with all channels in a few runs (bn_bwd_stats_ch, bn_bwd_apply_ch):
    the same formula, the same float32 operations per channel: -> (dx, dgamma, dbeta)."""
    x, C = _channels(x)
    xc, dyc = _by_channel(x), _by_channel(dy)
    n = xc.shape[1]
    mean32 = np.asarray(mean, np.float32).reshape(C)
    inv64 = np.asarray(invstd, np.float32).astype(np.float64).reshape(C)
    s = run_channels(backend, "bn_bwd_stats_ch", {"x": xc, "dy": dyc},
                     {"mean": mean32, "invstd": inv64}).acc.sum(axis=-1)          # (C, 2)
    k = np.asarray(gamma, np.float32).astype(np.float64).reshape(C) * inv64
    c1 = -k * inv64 * s[:, 1] / n
    c0 = -k * s[:, 0] / n
    r = run_channels(backend, "bn_bwd_apply_ch", {"x": xc, "dy": dyc},
                     {"mean": mean32, "c1": c1, "c0": c0, "k": k})
    dx = _from_channels(r.outputs["dx"], x.shape)
    return dx, s[:, 1].astype(np.float32), s[:, 0].astype(np.float32)


# ---- pooling (2x2, stride 2, channels-last) -----------------------------------------------

POOL_KERNELS = ("avgpool2_fwd", "avgpool2_bwd", "maxpool2_fwd")
HOST_KERNELS = {
    "maxpool2_bwd": "routes dy to the first maximum of each window (torch's tie rule); that "
                    "needs a running 'taken' mask per window and 4 input, 4 output, y and dy "
                    "streams: more bank pointers (8) than the unit has, so it runs on the host",
    "pool_other": "windows other than 2x2/stride 2 (3x3 max pool, global average pool) need "
                  "more pointers or cross-lane sums; they run on the host",
}


def pool_program(name: str, W: int, cb: int) -> Program:
    """2x2/stride-2 pooling over a channels-last image W wide with cb columns per pixel.
    p0..p3: the window's four pixels (row-major), p4: the pooled (or gradient) stream."""
    if name == "avgpool2_fwd":
        body = ["MOV G0, B[p0+]", "ADD G0, G0, B[p1+]", "ADD G0, G0, B[p2+]",
                "ADD G0, G0, B[p3+]", "MUL B[p4+], G0, S0"]
    elif name == "maxpool2_fwd":
        body = ["MOV G0, B[p0+]", "MAX G0, G0, B[p1+]", "MAX G0, G0, B[p2+]",
                "MAX B[p4+], G0, B[p3+]"]
    elif name == "avgpool2_bwd":
        body = ["MUL G0, B[p4+], S0", "MOV B[p0+], G0", "MOV B[p1+], G0", "MOV B[p2+], G0",
                "MOV B[p3+], G0"]
    else:
        raise PimError(f"unknown pooling kernel {name!r}")
    text = ["top:", *body, "LOOP c0, top", f"ADDP p0 p1 p2 p3, {cb}", "LOOP c1, top",
            f"ADDP p0 p1 p2 p3, {W * cb}", "LOOP c2, top", "EXIT"]
    return assemble("\n".join(text))


def _to_nhwc(x: np.ndarray, L: int) -> tuple[np.ndarray, int]:
    N, C, H, W = x.shape
    cp = -(-C // L) * L
    out = np.zeros((N, H, W, cp), np.float32)
    out[..., :C] = x.transpose(0, 2, 3, 1)
    return out, cp // L


def _pool(backend: Backend, name: str, src: np.ndarray, N: int, H: int, W: int, C: int):
    """src: NHWC-padded input of the kernel (x for forward, dy for backward). Pooling works
    channel by channel, so an image whose channels do not fit the bank at once is pooled in
    blocks of channels (whole lane columns), each block's images as one channels-last
    image: the same bits."""
    L = backend.lanes
    cb = -(-C // L)
    pixels = H * W + (H // 2) * (W // 2)
    fit = backend.depth // pixels            # lane columns of one image that fit the bank
    if fit < 1:
        raise PimCapacityError(f"{name}: one channel column of one image needs {pixels} "
                               f"columns ({H}x{W}); the bank has {backend.depth}")
    if cb <= fit:
        return _pool_block(backend, name, src, N, H, W, C)
    outs = []
    for b0 in range(0, cb, fit):
        b1 = min(cb, b0 + fit)
        block = np.ascontiguousarray(src[..., b0 * L:b1 * L])
        outs.append(_pool_block(backend, name, block, N, H, W, min(C, b1 * L) - b0 * L))
    return np.concatenate(outs, axis=-1)


def _pool_block(backend: Backend, name: str, src: np.ndarray, N: int, H: int, W: int, C: int):
    L = backend.lanes
    cb = -(-C // L)
    Ho, Wo = H // 2, W // 2
    big, small = H * W * cb, Ho * Wo * cb
    per_image = big + small
    if W * cb > 0x7FFF:
        raise PimCapacityError(f"{name}: row stride {W * cb} columns does not fit ADDP's step")
    backend.load_program(pool_program(name, W, cb))
    backend.set_scalars(np.asarray([0.25], np.float32))
    fwd = name.endswith("fwd")
    out = np.zeros((N, Ho, Wo, cb * L) if fwd else (N, H, W, cb * L), np.float32)
    per_chunk = backend.depth // per_image
    cycles = 0
    for n0 in range(0, N, per_chunk):
        nb = min(per_chunk, N - n0)
        big_base, small_base = 0, nb * big
        data = src[n0:n0 + nb].reshape(-1, L).view(np.uint32)
        backend.write_bank(big_base if fwd else small_base, data)
        backend.set_pointers([big_base, big_base + cb, big_base + W * cb,
                              big_base + W * cb + cb, small_base])
        backend.set_counts([cb, Wo, nb * Ho])
        cycles += backend.run()
        got = backend.read_bank(small_base if fwd else big_base, nb * (small if fwd else big))
        out[n0:n0 + nb] = got.view(np.float32).reshape(out[n0:n0 + nb].shape)
    elements = N * (Ho * Wo if fwd else H * W) * C
    backend.record(name, cycles, elements)
    return out


def _pool_input(x, what: str):
    x = np.asarray(x, np.float32)
    if x.ndim != 4:
        raise PimError(f"{what} wants NCHW input, got shape {x.shape}")
    N, C, H, W = x.shape
    return x[:, :, :H // 2 * 2, :W // 2 * 2], N, C, H // 2 * 2, W // 2 * 2


def avgpool2_forward(backend: Backend, x) -> np.ndarray:
    """F.avg_pool2d(x, 2): NCHW in, NCHW out (an odd last row/column is dropped)."""
    x, N, C, H, W = _pool_input(x, "avgpool2")
    src, _ = _to_nhwc(x, backend.lanes)
    out = _pool(backend, "avgpool2_fwd", src, N, H, W, C)
    return out[..., :C].transpose(0, 3, 1, 2).copy()


def maxpool2_forward(backend: Backend, x) -> np.ndarray:
    """F.max_pool2d(x, 2) values (NaN wins; max(-0, +0) = +0)."""
    x, N, C, H, W = _pool_input(x, "maxpool2")
    src, _ = _to_nhwc(x, backend.lanes)
    out = _pool(backend, "maxpool2_fwd", src, N, H, W, C)
    return out[..., :C].transpose(0, 3, 1, 2).copy()


def avgpool2_backward(backend: Backend, dy, input_shape) -> np.ndarray:
    """Gradient of F.avg_pool2d(x, 2) for an input of input_shape (NCHW)."""
    N, C, H, W = input_shape
    dy = np.asarray(dy, np.float32)
    src, _ = _to_nhwc(dy, backend.lanes)
    He, We = H // 2 * 2, W // 2 * 2
    out = _pool(backend, "avgpool2_bwd", src, N, He, We, C)
    dx = np.zeros((N, C, H, W), np.float32)
    dx[:, :, :He, :We] = out[..., :C].transpose(0, 3, 1, 2)
    return dx


def maxpool2_backward_host(x, dy) -> np.ndarray:
    """Host implementation (see HOST_KERNELS): dy to the first maximum of each 2x2 window."""
    x = np.asarray(x, np.float32)
    N, C, H, W = x.shape
    He, We = H // 2 * 2, W // 2 * 2
    win = x[:, :, :He, :We].reshape(N, C, He // 2, 2, We // 2, 2).transpose(0, 1, 2, 4, 3, 5)
    win = win.reshape(N, C, He // 2, We // 2, 4)
    nan = np.isnan(win)
    first = np.where(nan.any(-1), nan.argmax(-1), np.argmax(np.where(nan, -np.inf, win), -1))
    dx = np.zeros_like(win)
    np.put_along_axis(dx, first[..., None], np.asarray(dy, np.float32)[..., None], -1)
    dx = dx.reshape(N, C, He // 2, We // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    out = np.zeros_like(x)
    out[:, :, :He, :We] = dx.reshape(N, C, He, We)
    return out


KERNELS = tuple(STREAM_KERNELS) + POOL_KERNELS

"""Micro-programs for the non-CONV work of training, and host-side wrappers that run them over
numpy buffers on any backend (golden model, pyverilator RTL, batch driver).

Every kernel moves each stream through the bank a block at a time (up to BLOCK_MAX
consecutive columns of LANES values per visit, held in the GRF), so one DRAM row visit serves
a block. Stream kernels walk equal-length streams, one bank region per stream; buffers are
padded with zeros to whole blocks and split into chunks that fit the bank. Channel kernels
(batch norm) walk many channels per run; pooling kernels a channels-last (NHWC, C padded to
a multiple of LANES) image with nested loops. Per-channel scalar work (mean, 1/sqrt(var+eps),
the constants of the backward formula) and the final combination of the per-lane partial
sums of a reduction are done on the host, in float64. pimrt.pim.access derives from these
same programs what one unit does in its bank, for the timing model.
"""
from __future__ import annotations

import functools
import string
from dataclasses import dataclass, field

import numpy as np

from pimrt.pim import isa
from pimrt.pim.asm import Program, assemble
from pimrt.pim.backend import Backend
from pimrt.pim.errors import PimCapacityError, PimError


BLOCK_MAX = 8          # columns a stream moves per row visit, at most (the GRF holds 16)


def _block(phases: int, fixed: int, regs_per_col: int, free_regs: int = isa.N_GRF) -> int:
    """The block: the largest even number of columns (at most BLOCK_MAX) whose phases fit the
    CRF beside `fixed` other commands and whose registers fit the GRF; 1 if none does."""
    for b in range(BLOCK_MAX, 1, -2):
        if phases * b + fixed <= isa.CRF_DEPTH and regs_per_col * b <= free_regs:
            return b
    return 1


def _pointer_streams(body, streams) -> tuple[tuple[str, str], ...]:
    """(pointer name, stream) for the pointers a body names: each stream's own, then
    `<stream>_out` (a second pointer into the same stream: read with one, write with the
    other) in the order they first appear."""
    names = [f for line in body for f in string.Formatter().parse(line) if f[1]]
    extra = []
    for _, name, _, _ in names:
        if name not in streams and name not in ("i", "j") and name not in extra:
            extra.append(name)
    return tuple((s, s) for s in streams) + tuple((e, e.rsplit("_out", 1)[0]) for e in extra)


def _expand(body, b: int, fmt: dict) -> list[str]:
    """Each phase of `body` for the block's columns i = 0..b-1 ({i}: Gi, {j}: G(b+i))."""
    return [line.format(i=i, j=b + i, **fmt) for line in body for i in range(b)]


@dataclass(frozen=True)
class StreamKernel:
    """A kernel over equal-length streams, one bank region each, in blocks of `block()`
    columns: each phase of `body` runs for every column of the block before the next, so a
    stream is read (or written) a block at a time."""
    name: str
    inputs: tuple[str, ...]          # streams read
    outputs: tuple[str, ...]         # streams written (may name inputs: updated in place)
    body: tuple[str, ...]            # phases; {stream} / {stream_out} stand for pointers
    scalars: tuple[str, ...] = ()    # S0, S1, ... in this order
    doc: str = ""

    @property
    def streams(self) -> tuple[str, ...]:
        return self.inputs + tuple(o for o in self.outputs if o not in self.inputs)

    def pointers(self) -> tuple[tuple[str, str], ...]:
        return _pointer_streams(self.body, self.streams)

    def block(self) -> int:
        regs = 2 if any("{j}" in line for line in self.body) else 1
        return _block(len(self.body), 2, regs)

    @functools.lru_cache(maxsize=None)
    def program(self) -> Program:
        ptr = {name: f"p{i}" for i, (name, _) in enumerate(self.pointers())}
        lines = ["top:", *_expand(self.body, self.block(), ptr), "LOOP c0, top", "EXIT"]
        return assemble("\n".join(lines))


# scalars a kernel may name without its caller giving them: their values are fixed
CONSTANTS = {"zero": 0.0, "six": 6.0}

STREAM_KERNELS = {k.name: k for k in [
    StreamKernel("relu_fwd", ("x",), ("y",),
                 ("MAX G{i}, B[{x}+], S0", "MOV B[{y}+], G{i}"), ("zero",),
                 doc="y = max(x, +0) (relu(-0) = -0, relu(NaN) = NaN)"),
    StreamKernel("relu_bwd", ("y", "dy"), ("dx",),
                 ("CMPGE G{i}, S0, B[{y}+]", "MOV G{j}, B[{dy}+]", "SEL B[{dx}+], S0, G{j}, G{i}"),
                 ("zero",),
                 doc="dx = (0 >= y) ? +0 : dy from the ReLU output y (torch's threshold_backward: "
                     "a NaN y passes dy)"),
    StreamKernel("relu6_fwd", ("x",), ("y",),
                 ("MAX G{i}, B[{x}+], S0", "MIN B[{y}+], G{i}, S1"), ("zero", "six"),
                 doc="y = min(max(x, +0), 6) (torch's relu6 = hardtanh(x, 0, 6): relu6(-0) = -0, "
                     "relu6(NaN) = NaN)"),
    StreamKernel("relu6_bwd", ("y", "dy"), ("dx",),
                 ("MOV G{i}, B[{y}+]", "CMPGE G{j}, S0, G{i}", "SEL G{j}, S0, B[{dy}+], G{j}",
                  "CMPGE G{i}, G{i}, S1", "SEL B[{dx}+], S0, G{j}, G{i}"),
                 ("zero", "six"),
                 doc="dx = (0 >= y or y >= 6) ? +0 : dy from the ReLU6 output y (torch's "
                     "hardtanh_backward: a NaN y passes dy)"),
    StreamKernel("copy", ("x",), ("y",),
                 ("MOV G{i}, B[{x}+]", "MOV B[{y}+], G{i}"),
                 doc="y = x (a channel concatenation's part moved into place)"),
    StreamKernel("residual_add", ("a", "b"), ("y",),
                 ("MOV G{i}, B[{a}+]", "ADD G{i}, G{i}, B[{b}+]", "MOV B[{y}+], G{i}"),
                 doc="y = a + b"),
    StreamKernel("sgd", ("w", "g", "v"), ("w", "v"),
                 ("MOV G{i}, B[{w}+]", "MAD G{j}, G{i}, S0, B[{g}+]",
                  "MAD G{j}, B[{v}+], S1, G{j}", "MOV B[{v_out}+], G{j}",
                  "MAD B[{w_out}+], G{j}, S2, G{i}"),
                 ("weight_decay", "momentum", "neg_lr"),
                 doc="g' = w*wd + g; v = v*momentum + g'; w = v*(-lr) + w"),
    # GradSA on the unit: fold the gradient into momentum u and residual v, then select
    StreamKernel("gradsa_fold", ("w", "g", "u", "v"), ("u", "v"),
                 ("MOV G{i}, B[{g}+]", "MAD G{i}, B[{w}+], S0, G{i}",
                  "MAD G{i}, B[{u}+], S1, G{i}", "MOV B[{u_out}+], G{i}",
                  "ADD G{i}, B[{v}+], G{i}", "MOV B[{v_out}+], G{i}"),
                 ("weight_decay", "momentum"),
                 doc="g' = w*wd + g; u = u*momentum + g'; v = v + u"),
    StreamKernel("gradsa_select", ("v", "u"), ("u", "mask", "d"),
                 ("MOV G{i}, B[{v}+]", "SUB G{j}, S1, G{i}", "MAX G{i}, G{j}, G{i}",
                  "CMPGE G{i}, G{i}, S0", "MOV B[{mask}+], G{i}", "SEL G{j}, S1, B[{u}+], G{i}",
                  "MOV B[{u_out}+], G{j}", "MOV B[{d}+], S1"),
                 ("threshold", "zero"),
                 doc="mask = max(0 - v, v) >= t; u = mask ? +0 : u; d = +0"),
    StreamKernel("sgd_apply", ("w", "d"), ("w",),
                 ("MOV G{i}, B[{w}+]", "MAD G{i}, B[{d}+], S0, G{i}", "MOV B[{w_out}+], G{i}"),
                 ("neg_lr",),
                 doc="w = d*(-lr) + w (plain SGD: the mirror update of LaySA)"),
]}


@dataclass
class StreamResult:
    outputs: dict[str, np.ndarray]
    cycles: int = 0
    elements: int = 0
    chunks: int = 0
    extra: dict = field(default_factory=dict)


def _f32(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32).ravel())


def stream_counts(k: StreamKernel, cols: int) -> list[int]:
    """The loop count (c0) for `cols` columns of every stream: whole blocks."""
    return [max(-(-cols // k.block()), 1)]


def run_stream(backend: Backend, name: str, arrays: dict[str, np.ndarray],
               scalars: dict[str, float] | None = None, max_cycles: int | None = None) -> StreamResult:
    """Run stream kernel `name` over 1-D arrays (one per input stream) on `backend`: each
    stream zero-padded to whole blocks, in chunks that fit the bank (one region per stream)."""
    if name not in STREAM_KERNELS:
        raise PimError(f"unknown stream kernel {name!r}; known: {', '.join(STREAM_KERNELS)}")
    k = STREAM_KERNELS[name]
    scalars = scalars or {}
    missing = [s for s in k.inputs if s not in arrays] + [s for s in k.scalars
                                                          if s not in scalars and s not in CONSTANTS]
    if missing:
        raise PimError(f"kernel {name}: missing {', '.join(missing)}")
    data = {s: _f32(arrays[s]) for s in k.inputs}
    n = len(next(iter(data.values())))
    if any(len(v) != n for v in data.values()):
        raise PimError(f"kernel {name}: streams differ in length: "
                       + ", ".join(f"{s}={len(v)}" for s, v in data.items()))
    L, B = backend.lanes, k.block()
    streams = k.streams
    chunk = backend.depth // len(streams) // B * B
    if chunk < B:
        raise PimCapacityError(f"kernel {name}: the bank of {backend.depth} columns cannot hold "
                               f"{len(streams)} streams of {B} columns")
    program = k.program()
    scal = np.asarray([scalars.get(s, CONSTANTS.get(s, 0.0)) for s in k.scalars] or [0.0],
                      np.float32)
    cols_total = -(-n // L)
    outs = {s: np.empty(cols_total * L, np.float32) for s in k.outputs}
    res = StreamResult(outs)
    region = {s: i * chunk for i, s in enumerate(streams)}
    ptrs = [region[s] for _, s in k.pointers()]

    def setup(unit: Backend) -> None:
        unit.load_program(program)
        unit.set_scalars(scal)

    def job(c0: int):
        def run_on(unit: Backend) -> int:
            cols = min(chunk, cols_total - c0)
            padded = -(-max(cols, 1) // B) * B
            for s in streams:
                if s in data:
                    seg = data[s][c0 * L:(c0 + cols) * L]
                    if seg.size != padded * L:       # the last chunk: pad with zeros
                        buf = np.zeros(padded * L, np.float32)
                        buf[:seg.size] = seg
                        seg = buf
                    unit.write_bank(region[s], seg.view(np.uint32).reshape(padded, L))
            unit.set_pointers(ptrs)
            unit.set_counts(stream_counts(k, cols))
            cycles = unit.run(**({"max_cycles": max_cycles} if max_cycles else {}))
            for s in outs:
                got = unit.read_bank(region[s], cols).view(np.float32).ravel()
                outs[s][c0 * L:(c0 + cols) * L] = got
            return cycles
        return run_on

    cycles = backend.run_chunks(setup, [job(c0) for c0 in range(0, max(cols_total, 1), chunk)])
    res.cycles, res.chunks = sum(cycles), len(cycles)
    res.elements = n
    for s in outs:
        outs[s] = outs[s][:n]
    backend.record(name, res.cycles, n)
    return res


# ---- element-wise wrappers ----------------------------------------------------------------

def relu_forward(backend: Backend, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """-> (y, y > 0 as bool, computed on the host for callers that keep a mask), shaped like x."""
    y = run_stream(backend, "relu_fwd", {"x": x}).outputs["y"].reshape(np.shape(x))
    return y, y > 0


def relu_backward(backend: Backend, y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx from the ReLU output y, as torch's threshold_backward: dx = 0 where y <= 0, else dy
    (a NaN y passes dy)."""
    if np.shape(y) != np.shape(dy):
        raise PimError(f"relu_bwd: y {np.shape(y)} and dy {np.shape(dy)} differ in shape")
    r = run_stream(backend, "relu_bwd", {"y": y, "dy": dy})
    return r.outputs["dx"].reshape(np.shape(dy))


def relu6_forward(backend: Backend, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """-> (y, 0 < y < 6 as bool: where the backward pass lets the gradient through, computed on
    the host for callers that keep a mask), shaped like x."""
    y = run_stream(backend, "relu6_fwd", {"x": x}).outputs["y"].reshape(np.shape(x))
    return y, (y > 0) & (y < 6)


def relu6_backward(backend: Backend, y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx from the ReLU6 output y, as torch's hardtanh_backward(0, 6): dx = 0 where y <= 0 or
    y >= 6, else dy (a NaN y passes dy)."""
    if np.shape(y) != np.shape(dy):
        raise PimError(f"relu6_bwd: y {np.shape(y)} and dy {np.shape(dy)} differ in shape")
    r = run_stream(backend, "relu6_bwd", {"y": y, "dy": dy})
    return r.outputs["dx"].reshape(np.shape(dy))


def copy(backend: Backend, x: np.ndarray) -> np.ndarray:
    """y = x through the unit's registers: every bit pattern (NaN payloads, -0) as it was."""
    return run_stream(backend, "copy", {"x": x}).outputs["y"].reshape(np.shape(x))


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


# ---- batch norm (training), many channels per run --------------------------------------------
#
# The channel kernels walk many channels in one run: an outer loop over the channels (c1)
# around a loop over blocks of columns (c0). The outer loop's prologue zeroes the accumulators,
# loads the channel's constants from the bank into the top GRF registers (one column per
# constant, the value in every lane: the host lays them out beside the data, stream "par")
# and, for the statistics, reads the channel's first column as a per-lane shift; its
# epilogue stores the accumulators (stream "acc"). Every channel is padded to the same number
# of columns (whole blocks); a channel too big for the bank is cut into equal pieces whose
# sums the host combines in float64. A channel's results depend on its own values and size
# only, so they do not depend on the other channels of a run (nor on the runtime's groups).

@dataclass(frozen=True)
class ChannelKernel:
    name: str
    inputs: tuple[str, ...]          # streams read, one region each, channel after channel
    outputs: tuple[str, ...]         # streams written
    body: tuple[str, ...]            # phases per block column; {stream}, {param} -> register
    params: tuple[str, ...] = ()     # per-channel constants, loaded into G(16 - len)..G15
    acc: int = 0                     # accumulators zeroed per channel and stored after it
    shift: bool = False              # G15 = the channel's first column (per-lane shift)
    piece: int = 0                   # columns per piece at most (0: as many as the bank holds)
    doc: str = ""

    @property
    def streams(self) -> tuple[str, ...]:
        return self.inputs + tuple(o for o in self.outputs if o not in self.inputs)

    @property
    def all_streams(self) -> tuple[str, ...]:
        """Every bank region the kernel touches, in pointer order: data, "par", "acc"."""
        return self.streams + (("par",) if self.params else ()) + (("acc",) if self.acc else ())

    def registers(self) -> dict[str, str]:
        top = isa.N_GRF - len(self.params) - self.shift
        reg = {prm: f"G{top + i}" for i, prm in enumerate(self.params)}
        if self.shift:
            reg["shift"] = f"G{isa.N_GRF - 1}"
        return reg

    def block(self) -> int:
        fixed = 2 * self.acc + len(self.params) + self.shift + 3   # zero/store, loads, LOOPs, EXIT
        regs = 2 if any("{j}" in line for line in self.body) else 1
        return _block(len(self.body), fixed, regs, isa.N_GRF - len(self.params) - self.shift)

    @functools.lru_cache(maxsize=None)
    def program(self) -> Program:
        ptr = {s: f"p{i}" for i, s in enumerate(self.all_streams)}
        reg = self.registers()
        lines = ["chan:"]
        lines += [f"MOV A{i}, S0" for i in range(self.acc)]          # S0 = 0.0
        lines += [f"MOV {reg[prm]}, B[{ptr['par']}+]" for prm in self.params]
        if self.shift:
            lines.append(f"MOV {reg['shift']}, B[{ptr[self.inputs[0]]}]")
        lines.append("col:")
        lines += _expand(self.body, self.block(), {**ptr, **reg})
        lines.append("LOOP c0, col")
        lines += [f"MOV B[{ptr['acc']}+], A{i}" for i in range(self.acc)]
        lines += ["LOOP c1, chan", "EXIT"]
        return assemble("\n".join(lines))


STATS_PIECE = 64     # columns a statistics accumulator sums at most: 64 values a lane

CHANNEL_KERNELS = {k.name: k for k in [
    ChannelKernel("bn_stats_ch", ("x",), (),
                  ("SUB G{i}, B[{x}+], {shift}", "ADD A0, A0, G{i}", "MAD A1, G{i}, G{i}, A1"),
                  acc=2, shift=True, piece=STATS_PIECE,
                  doc="per piece of a channel and lane, K = the lane's first value: "
                      "A0 += x - K; A1 += (x - K)^2"),
    ChannelKernel("bn_apply_ch", ("x",), ("y",),
                  ("SUB G{i}, B[{x}+], {mean}", "SUB G{i}, G{i}, {mean_lo}",
                   "MAD B[{y}+], G{i}, {scale}, {shift}"),
                  ("mean", "mean_lo", "scale", "shift"),
                  doc="per channel: y = ((x - mean) - mean_lo)*scale + shift, mean + mean_lo "
                      "the batch mean to twice float32's precision"),
    ChannelKernel("bn_bwd_stats_ch", ("x", "dy"), (),
                  ("SUB G{i}, B[{x}+], {mean}", "MOV G{j}, B[{dy}+]", "ADD A0, A0, G{j}",
                   "MAD A1, G{i}, G{j}, A1"), ("mean",), acc=2,
                  doc="per channel: A0 += dy; A1 += (x - mean) * dy"),
    ChannelKernel("bn_bwd_apply_ch", ("x", "dy"), ("dx",),
                  ("SUB G{i}, B[{x}+], {mean}", "MAD G{i}, G{i}, {c1}, {c0}", "MOV G{j}, B[{dy}+]",
                   "MAD B[{dx}+], G{j}, {k}, G{i}"), ("mean", "c1", "c0", "k"),
                  doc="per channel: dx = dy*k + ((x - mean)*c1 + c0)"),
]}


@dataclass
class ChannelResult:
    outputs: dict[str, np.ndarray]   # (C, n) each
    acc: np.ndarray | None           # (C, pieces, accumulators, LANES) float32 sums
    cycles: int = 0
    runs: int = 0
    pieces: int = 1                  # pieces per channel
    columns: int = 0                 # padded columns per piece
    shift: np.ndarray | None = None  # (C, pieces, LANES) the per-lane shift (shift kernels)
    counts: np.ndarray | None = None  # (C, pieces, LANES) values per lane (shift kernels)


def channel_layout(backend: Backend, k: ChannelKernel, n: int) -> tuple[int, int]:
    """-> (pieces per channel, padded columns per piece) for channels of n values: fixed by
    the kernel, the bank and n alone, so a channel's results never depend on the other
    channels of the run."""
    B = k.block()
    ns, per = len(k.streams), len(k.params) + k.acc
    room = (backend.depth - per) // ns // B * B
    if room < B:
        raise PimCapacityError(f"kernel {k.name}: the bank of {backend.depth} columns cannot "
                               f"hold {ns} streams of one block ({B} columns)")
    return channel_pieces(k, max(-(-n // backend.lanes), 1), room)


def channel_pieces(k: ChannelKernel, cols: int, room: int | None = None) -> tuple[int, int]:
    """-> (pieces, padded columns per piece) for a channel of `cols` columns: equal pieces of
    at most `room` columns (the bank) and the kernel's `piece`, padded to whole blocks."""
    B = k.block()
    limits = [r for r in (room, k.piece) if r]
    pieces = -(-cols // (min(limits) if limits else cols))
    return pieces, -(-(-(-cols // pieces)) // B) * B


def channel_counts(k: ChannelKernel, columns: int, channels: int) -> list[int]:
    """Loop counts (c0, c1) for `channels` channels (pieces) of `columns` padded columns."""
    return [max(columns // k.block(), 1), max(channels, 1)]


def _layout_channels(k: ChannelKernel, data: dict, C: int, n: int, pieces: int, P: int, L: int):
    """Each input (C, n) -> (C * pieces, P * L), channel-major, each piece padded to P
    columns: with zeros, or for a shift kernel with each lane's shift (its first value in the
    piece, 0 for a lane with none), so that padding adds exactly nothing to the sums."""
    valid = np.zeros((C, pieces * P * L), bool)
    valid[:, :n] = True
    valid = valid.reshape(C, pieces, P, L)
    lay, shift = {}, None
    for s in k.inputs:
        buf = np.zeros((C, pieces * P * L), np.float32)
        buf[:, :n] = data[s]
        buf = buf.reshape(C, pieces, P, L)
        if k.shift and s == k.inputs[0]:
            shift = np.where(valid[:, :, 0, :], buf[:, :, 0, :], np.float32(0))
            buf = np.where(valid, buf, shift[:, :, None, :])
        lay[s] = buf.reshape(C * pieces, P * L)
    return lay, shift, valid.sum(axis=2)


def run_channels(backend: Backend, name: str, arrays: dict[str, np.ndarray],
                 params: dict[str, np.ndarray] | None = None,
                 max_cycles: int | None = None) -> ChannelResult:
    """Run channel kernel `name` over (C, n) arrays (one row per channel, one array per input
    stream) with per-channel constants params[name] of shape (C,), on `backend`."""
    if name not in CHANNEL_KERNELS:
        raise PimError(f"unknown channel kernel {name!r}; known: {', '.join(CHANNEL_KERNELS)}")
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
    pieces, P = channel_layout(backend, k, n)
    ns, npar = len(k.streams), len(k.params)
    per_piece = ns * P + npar + k.acc
    rows = C * pieces                                   # one "row" per piece of a channel
    lay, shift, counts = _layout_channels(k, data, C, n, pieces, P, L)
    par = None
    if npar:
        par = np.repeat(np.stack([prm[p] for p in k.params], axis=1), pieces, axis=0)  # (rows, npar)
        par = np.repeat(par[:, :, None], L, axis=2).reshape(rows, npar, L)
    outs = {s: np.empty((rows, P * L), np.float32) for s in k.outputs}
    acc = np.empty((rows, k.acc, L), np.float32) if k.acc else None
    program = k.program()
    per_run = backend.depth // per_piece
    res = ChannelResult(outs, None, pieces=pieces, columns=P, shift=shift, counts=counts)

    def setup(unit: Backend) -> None:
        unit.load_program(program)
        unit.set_scalars(np.zeros(1, np.float32))

    def job(r0: int):
        def run_on(unit: Backend) -> int:
            m = min(per_run, rows - r0)
            bases = [i * m * P for i in range(ns)]
            par_base = ns * m * P
            acc_base = par_base + m * npar
            for i, s in enumerate(k.streams):
                if s in lay:
                    unit.write_bank(bases[i], lay[s][r0:r0 + m].view(np.uint32).reshape(m * P, L))
            ptrs = list(bases)
            if npar:
                unit.write_bank(par_base, par[r0:r0 + m].view(np.uint32).reshape(m * npar, L))
                ptrs.append(par_base)
            if k.acc:
                ptrs.append(acc_base)
            unit.set_pointers(ptrs)
            unit.set_counts(channel_counts(k, P, m))
            cycles = unit.run(**({"max_cycles": max_cycles} if max_cycles else {}))
            for i, s in enumerate(k.streams):
                if s in outs:
                    outs[s][r0:r0 + m] = unit.read_bank(bases[i], m * P).view(
                        np.float32).reshape(m, P * L)
            if k.acc:
                acc[r0:r0 + m] = unit.read_bank(acc_base, m * k.acc).view(
                    np.float32).reshape(m, k.acc, L)
            return cycles
        return run_on

    cycles = backend.run_chunks(setup, [job(r0) for r0 in range(0, rows, per_run)])
    res.cycles, res.runs = sum(cycles), len(cycles)
    res.outputs = {s: v.reshape(C, pieces * P * L)[:, :n] for s, v in outs.items()}
    if k.acc:
        res.acc = acc.reshape(C, pieces, k.acc, L)
    backend.record(name, res.cycles, C * n)
    return res


def _channels(x: np.ndarray, **per_channel):
    x = np.asarray(x, np.float32)
    if x.ndim < 2:
        raise PimError(f"batch norm wants (N, C, ...) input, got shape {x.shape}")
    for what, v in per_channel.items():
        if np.size(v) != x.shape[1]:
            raise PimError(f"batch norm: {what} has {np.size(v)} values for {x.shape[1]} "
                           f"channels (input shape {x.shape})")
    return x, x.shape[1]


def _by_channel(x: np.ndarray) -> np.ndarray:
    """(N, C, ...) -> (C, N * ...), each channel's values in the order x[:, c].ravel()."""
    x = np.asarray(x, np.float32)
    return np.ascontiguousarray(np.moveaxis(x, 1, 0)).reshape(x.shape[1], -1)


def _from_channels(v: np.ndarray, shape) -> np.ndarray:
    N, C = shape[0], shape[1]
    return np.ascontiguousarray(np.moveaxis(v.reshape((C, N) + tuple(shape[2:])), 0, 1))


def _shifted_moments(r: ChannelResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bn_stats_ch's per-lane sums -> per (channel, group) count m, mean K + S1/m and sum of
    squared deviations S2 - S1^2/m, in float64 (groups: a piece's lane; empty ones m = 0)."""
    C = r.acc.shape[0]
    m = r.counts.reshape(C, -1).astype(np.float64)
    s1 = r.acc[:, :, 0, :].reshape(C, -1).astype(np.float64)
    s2 = r.acc[:, :, 1, :].reshape(C, -1).astype(np.float64)
    k = r.shift.reshape(C, -1).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(m > 0, k + s1 / m, 0.0)
        m2 = np.where(m > 0, s2 - s1 * s1 / np.maximum(m, 1), 0.0)
    return m, mean, m2


def _combine(m: np.ndarray, mean: np.ndarray, m2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Chan et al.: groups' (count, mean, M2) along the last axis -> (mean, M2) per row."""
    n = m.sum(axis=1)
    mu = (m * mean).sum(axis=1) / n
    return mu, (m2 + m * (mean - mu[:, None]) ** 2).sum(axis=1)


def batchnorm_forward_2pass(backend: Backend, x, gamma, beta, eps: float = 1e-5,
                            slices: int = 1):
    """Training-mode batch norm over (N, C, ...), all channels in a few runs: -> (y, mean,
    invstd). Two passes over x. Statistics (bn_stats_ch): each lane subtracts its own first
    value K of the channel and sums x - K and (x - K)^2 in fp32, which keeps the sums of
    the size of the spread whatever the mean; the host turns each lane's sums into a count,
    mean and sum of squared deviations and combines the lanes (and pieces, and slices) in
    float64 (Chan et al.): var = M2 / n (biased). Apply (bn_apply_ch): y = (x - mean) *
    (gamma * invstd) + beta, subtracting the fp32 mean first as torch does.

    slices: the statistics are taken per batch slice (N / slices samples each) and combined
    the same way, so that a slice's statistics can run as soon as the host has written it
    (the forward pass by batch slices, pimrt.runtime.schedule)."""
    x, C = _channels(x, gamma=gamma, beta=beta)
    N = x.shape[0]
    if slices < 1 or N % slices:
        raise PimError(f"batch norm: {slices} slices do not divide the batch of {N}")
    if x.size // max(C, 1) < 2:
        raise PimError(f"batch norm: training needs more than one value per channel, got shape "
                       f"{x.shape} (torch refuses it too)")
    groups = []
    for b in range(slices):
        xc = _by_channel(x[b * N // slices:(b + 1) * N // slices])
        groups.append(_shifted_moments(run_channels(backend, "bn_stats_ch", {"x": xc})))
    m, mu, m2 = (np.concatenate(g, axis=1) for g in zip(*groups))
    mean, m2 = _combine(m, mu, m2)
    var = np.maximum(m2 / m.sum(axis=1), 0.0)
    inv = 1.0 / np.sqrt(var + eps)
    m32 = mean.astype(np.float32)
    g64 = np.asarray(gamma, np.float32).astype(np.float64).reshape(C)
    r = run_channels(backend, "bn_apply_ch", {"x": _by_channel(x)},
                     {"mean": m32, "mean_lo": mean - m32.astype(np.float64), "scale": g64 * inv,
                      "shift": np.asarray(beta, np.float32)})
    return _from_channels(r.outputs["y"], x.shape), m32, inv.astype(np.float32)


def batchnorm_backward_channels(backend: Backend, x, dy, gamma, mean, invstd):
    """Training-mode batch norm backward, all channels in a few runs: -> (dx, dgamma, dbeta).
    Sums of dy and (x - mean)*dy in the unit (bn_bwd_stats_ch, per lane), lanes and pieces
    added in float64; then dx = k*dy + c1*(x - mean) + c0 (bn_bwd_apply_ch) with
    k = gamma*invstd, dgamma = invstd*sum((x - mean)*dy), c1 = -k*invstd*dgamma/n,
    c0 = -k*sum(dy)/n."""
    x, C = _channels(x, gamma=gamma, mean=mean, invstd=invstd)
    dy = np.asarray(dy, np.float32)
    if dy.shape != x.shape:
        raise PimError(f"batch norm backward: dy {dy.shape} and x {x.shape} differ in shape")
    xc, dyc = _by_channel(x), _by_channel(dy)
    n = xc.shape[1]
    mean32 = np.asarray(mean, np.float32).reshape(C)
    inv64 = np.asarray(invstd, np.float32).astype(np.float64).reshape(C)
    s = run_channels(backend, "bn_bwd_stats_ch", {"x": xc, "dy": dyc},
                     {"mean": mean32}).acc.astype(np.float64).sum(axis=(1, 3))   # (C, 2)
    dgamma, dbeta = inv64 * s[:, 1], s[:, 0]
    k = np.asarray(gamma, np.float32).astype(np.float64).reshape(C) * inv64
    r = run_channels(backend, "bn_bwd_apply_ch", {"x": xc, "dy": dyc},
                     {"mean": mean32, "c1": -k * inv64 * dgamma / n, "c0": -k * dbeta / n,
                      "k": k})
    dx = _from_channels(r.outputs["dx"], x.shape)
    return dx, dgamma.astype(np.float32), dbeta.astype(np.float32)


batchnorm_forward = batchnorm_forward_2pass          # the names of the per-channel kernels
batchnorm_backward = batchnorm_backward_channels     # of old: the same computation now


# ---- pooling (2x2, stride 2, channels-last) -----------------------------------------------

POOL_KERNELS = ("avgpool2_fwd", "avgpool2_bwd", "maxpool2_fwd")
HOST_KERNELS = {
    "maxpool2_bwd": "routes dy to the first maximum of each window (torch's tie rule); that "
                    "needs a running 'taken' mask per window and 4 input, 4 output, y and dy "
                    "streams: more bank pointers (8) than the unit has, so it runs on the host",
    "pool_other": "windows other than 2x2/stride 2 (3x3 max pool, global average pool) need "
                  "more pointers or cross-lane sums; they run on the host",
}


POOL_BODIES = {
    "avgpool2_fwd": ("MOV G{i}, B[p0+]", "ADD G{i}, G{i}, B[p1+]", "ADD G{i}, G{i}, B[p2+]",
                     "ADD G{i}, G{i}, B[p3+]", "MUL B[p4+], G{i}, S0"),
    "maxpool2_fwd": ("MOV G{i}, B[p0+]", "MAX G{i}, G{i}, B[p1+]", "MAX G{i}, G{i}, B[p2+]",
                     "MAX G{i}, G{i}, B[p3+]", "MOV B[p4+], G{i}"),
    "avgpool2_bwd": ("MUL G{i}, B[p4+], S0", "MOV B[p0+], G{i}", "MOV B[p1+], G{i}",
                     "MOV B[p2+], G{i}", "MOV B[p3+], G{i}"),
}
POOL_STREAMS = {"avgpool2_fwd": ("x", "y"), "maxpool2_fwd": ("x", "y"),
                "avgpool2_bwd": ("dy", "dx")}


def pool_block(name: str, cb: int) -> int:
    """Lane columns of a pixel each window pointer moves per visit: the largest divisor of
    cb (columns per pixel) whose phases fit the CRF beside the loops."""
    body = POOL_BODIES[name]
    bmax = max(1, min(BLOCK_MAX, (isa.CRF_DEPTH - 6) // len(body)))
    return max(b for b in range(1, bmax + 1) if cb % b == 0)


@functools.lru_cache(maxsize=256)
def pool_program(name: str, W: int, cb: int) -> Program:
    """2x2/stride-2 pooling over a channels-last image W wide with cb columns per pixel.
    p0..p3: the window's four pixels (row-major), p4: the pooled (or gradient) stream; each
    moves a block of pool_block columns of its pixel per visit."""
    if name not in POOL_BODIES:
        raise PimError(f"unknown pooling kernel {name!r}")
    body = _expand(POOL_BODIES[name], pool_block(name, cb), {})
    text = ["top:", *body, "LOOP c0, top", f"ADDP p0 p1 p2 p3, {cb}", "LOOP c1, top",
            f"ADDP p0 p1 p2 p3, {W * cb}", "LOOP c2, top", "EXIT"]
    return assemble("\n".join(text))


def pool_counts(name: str, images: int, H: int, W: int, cb: int) -> list[int]:
    """Loop counts (c0 blocks of a pixel, c1 output columns, c2 output rows of all images)."""
    return [cb // pool_block(name, cb), W // 2, images * (H // 2)]


def pool_pointers(W: int, cb: int, big: int, small: int) -> list[int]:
    """p0..p3 at the first window's pixels in the image region `big`, p4 at `small`."""
    return [big, big + cb, big + W * cb, big + W * cb + cb, small]


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
    program = pool_program(name, W, cb)
    fwd = name.endswith("fwd")
    out = np.zeros((N, Ho, Wo, cb * L) if fwd else (N, H, W, cb * L), np.float32)
    per_chunk = backend.depth // per_image

    def setup(unit: Backend) -> None:
        unit.load_program(program)
        unit.set_scalars(np.asarray([0.25], np.float32))

    def job(n0: int):
        def run_on(unit: Backend) -> int:
            nb = min(per_chunk, N - n0)
            big_base, small_base = 0, nb * big
            data = src[n0:n0 + nb].reshape(-1, L).view(np.uint32)
            unit.write_bank(big_base if fwd else small_base, data)
            unit.set_pointers(pool_pointers(W, cb, big_base, small_base))
            unit.set_counts(pool_counts(name, nb, H, W, cb))
            cycles = unit.run()
            got = unit.read_bank(small_base if fwd else big_base, nb * (small if fwd else big))
            out[n0:n0 + nb] = got.view(np.float32).reshape(out[n0:n0 + nb].shape)
            return cycles
        return run_on

    cycles = sum(backend.run_chunks(setup, [job(n0) for n0 in range(0, N, per_chunk)]))
    elements = N * (Ho * Wo if fwd else H * W) * C
    backend.record(name, cycles, elements)
    return out


def _pool_input(x, what: str):
    x = np.asarray(x, np.float32)
    if x.ndim != 4:
        raise PimError(f"{what} wants NCHW input, got shape {x.shape}")
    N, C, H, W = x.shape
    if H < 2 or W < 2 or N * C == 0:
        raise PimError(f"{what}: input of shape {x.shape} has no 2x2 window")
    return x[:, :, :H // 2 * 2, :W // 2 * 2], N, C, H // 2 * 2, W // 2 * 2


def avgpool2_forward(backend: Backend, x) -> np.ndarray:
    """F.avg_pool2d(x, 2): NCHW in, NCHW out (an odd last row/column is dropped)."""
    x, N, C, H, W = _pool_input(x, "avgpool2")
    src, _ = _to_nhwc(x, backend.lanes)
    out = _pool(backend, "avgpool2_fwd", src, N, H, W, C)
    return out[..., :C].transpose(0, 3, 1, 2).copy()


def maxpool2_forward(backend: Backend, x) -> np.ndarray:
    """F.max_pool2d(x, 2) values (NaN wins; on a tie, +0 and -0 included, the first of the
    window in row-major order, as torch)."""
    x, N, C, H, W = _pool_input(x, "maxpool2")
    src, _ = _to_nhwc(x, backend.lanes)
    out = _pool(backend, "maxpool2_fwd", src, N, H, W, C)
    return out[..., :C].transpose(0, 3, 1, 2).copy()


def avgpool2_backward(backend: Backend, dy, input_shape) -> np.ndarray:
    """Gradient of F.avg_pool2d(x, 2) for an input of input_shape (NCHW)."""
    if len(input_shape) != 4:
        raise PimError(f"avgpool2 backward wants an NCHW input shape, got {tuple(input_shape)}")
    N, C, H, W = input_shape
    dy = np.asarray(dy, np.float32)
    _pool_input(np.empty((N, C, H, W), np.float32), "avgpool2 backward")
    if dy.shape != (N, C, H // 2, W // 2):
        raise PimError(f"avgpool2 backward: dy of shape {dy.shape} does not match the input "
                       f"{tuple(input_shape)} (want {(N, C, H // 2, W // 2)})")
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


KERNELS = tuple(STREAM_KERNELS) + tuple(CHANNEL_KERNELS) + POOL_KERNELS

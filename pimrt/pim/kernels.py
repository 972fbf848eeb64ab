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

The activation kernels have 16-bit variants (`<base>_f16`, `<base>_bf16`: variant(),
stream_dtypes(); their bodies in pimrt.pim.kernels16) and the update an AMP form
(amp_unscale, sgd_amp_<dtype>): docs/pim.md, "Kernels of an AMP step".
"""
from __future__ import annotations

import dataclasses
import functools
import string
from dataclasses import dataclass, field

import numpy as np

from pimrt.pim import isa, kernels16 as K16
from pimrt.pim.asm import Program, assemble
from pimrt.pim.backend import Backend
from pimrt.pim.data16 import bits16, pair_layout, pair_unlayout, scalar_word, values16, widen
from pimrt.pim.errors import PimCapacityError, PimError


BLOCK_MAX = 8          # columns a stream moves per row visit, at most (the GRF holds 16)


def _block(phases: float, fixed: int, regs_per_col: int, free_regs: int = isa.N_GRF) -> int:
    """The block: the largest even number of columns (at most BLOCK_MAX) whose phases fit
    the CRF beside `fixed` other commands and whose registers fit the GRF; 1 if none does."""
    for b in range(BLOCK_MAX, 1, -2):
        if phases * b + fixed <= isa.CRF_DEPTH and regs_per_col * b <= free_regs:
            return b
    return 1


# register placeholders of a body: {i} Gi, {j} G(b+i), {i2} G(2b+i), {j2} G(3b+i); in a
# `pair ` phase (once per two columns) {e} G(2i), {o} G(2i+1). In the other phases {pg} is
# G(2(i//2)+1), the `pair ` phase's {o} of column i's pair, and {hf} the half column i takes
# of it (lo for an even column, hi for an odd one: kernels16's `{wp}` widening form)
REGS = ("i", "j", "i2", "j2")
PAIRED = ("pg", "hf")


def _regs(body) -> int:
    """Registers a block column of `body` uses."""
    return max([1] + [n + 1 for n, r in enumerate(REGS) if any(f"{{{r}}}" in x for x in body)])


def _phases(body) -> float:
    """Instructions per block column: a `pair ` phase counts half."""
    return sum(0.5 if line.startswith("pair ") else 1 for line in body)


def _pointer_streams(body, streams) -> tuple[tuple[str, str], ...]:
    """(pointer name, stream) for the pointers a body names: each stream's own, then
    `<stream>_out` (a second pointer into the same stream: read with one, write with the
    other) in the order they first appear."""
    names = [f for line in body for f in string.Formatter().parse(line) if f[1]]
    extra = []
    for _, name, _, _ in names:
        if name not in streams and name not in REGS + ("e", "o") + PAIRED \
                and name not in extra:
            extra.append(name)
    return tuple((s, s) for s in streams) + tuple((e, e.rsplit("_out", 1)[0]) for e in extra)


def _expand(body, b: int, fmt: dict) -> list[str]:
    """Each phase of `body` for the block's columns i = 0..b-1 (REGS), a `pair ` phase for
    each pair of them."""
    out = []
    for line in body:
        if line.startswith("pair "):
            if b % 2:
                raise PimError(f"a pair phase needs an even block, got {b}: {line!r}")
            out += [line[5:].format(e=2 * i, o=2 * i + 1, **fmt) for i in range(b // 2)]
        else:
            out += [line.format(i=i, j=b + i, i2=2 * b + i, j2=3 * b + i, pg=2 * (i // 2) + 1,
                                hf="hi" if i % 2 else "lo", **fmt) for i in range(b)]
    return out


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
    dtype: str = "f32"               # the format of the `narrow` streams
    narrow: tuple[str, ...] = ()     # streams of 16-bit values, two a lane word
    acc: int = 0                     # accumulators zeroed (scalar "zero") before the loop and
                                     # stored after it, one column each, into stream "acc"

    @property
    def data_streams(self) -> tuple[str, ...]:
        return self.inputs + tuple(o for o in self.outputs if o not in self.inputs)

    @property
    def streams(self) -> tuple[str, ...]:
        return self.data_streams + (("acc",) if self.acc else ())

    def vpc(self) -> int:
        """Values a lane word of the loop's columns: 2 when every data stream is 16-bit
        (scalars then 16-bit too), 1 otherwise (a 16-bit stream moves half the columns of
        the fp32 ones, and the fp32 ones are in pair_layout)."""
        return 2 if self.narrow and set(self.narrow) == set(self.data_streams) else 1

    def width(self, stream: str) -> int:
        return 2 if stream in self.narrow else 1

    def pointers(self) -> tuple[tuple[str, str], ...]:
        return _pointer_streams(self.body, self.streams)

    def block(self) -> int:
        b = _block(_phases(self.body), 2 + 2 * self.acc, _regs(self.body))
        if b == 1 and any(line.startswith("pair ") for line in self.body):
            raise PimError(f"kernel {self.name}: its pair phases need a block of 2 or more")
        return b

    @functools.lru_cache(maxsize=None)
    def program(self) -> Program:
        ptr = {name: f"p{i}" for i, (name, _) in enumerate(self.pointers())}
        zero = [f"MOV A{a}, S{self.scalars.index('zero')}" for a in range(self.acc)]
        store = [f"MOV B[{ptr['acc']}+], A{a}" for a in range(self.acc)]
        lines = [*zero, "top:", *_expand(self.body, self.block(), ptr), "LOOP c0, top",
                 *store, "EXIT"]
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


# ---- the kernels of an AMP step (pimrt.pim.kernels16): <base>_f16, <base>_bf16 ------------

def _stream16(base: str, dt: str) -> StreamKernel:
    k = STREAM_KERNELS[base]
    body, scalars = K16.STREAM16[base]
    return StreamKernel(f"{base}_{dt}", k.inputs, k.outputs, K16.suffixed(body, dt), scalars,
                        doc=f"{k.doc}; {dt} values, each op as torch computes {dt}",
                        dtype=dt, narrow=k.streams)


STREAM_KERNELS.update({k.name: k for k in [
    *[_stream16(base, dt) for base in K16.STREAM16 for dt in K16.DTYPES16],
    StreamKernel("amp_unscale", ("g",), ("g",), K16.AMP_UNSCALE, ("inv_scale", "zero"), acc=1,
                 doc="g = g * inv_scale; per lane A0 = sum of g*0: NaN iff the lane saw an "
                     "inf or NaN g (torch's _amp_foreach_non_finite_check_and_unscale_)"),
    *[StreamKernel(f"amp_unscale_{dt}", ("g16",), ("g",), K16.suffixed(K16.AMP_UNSCALE16, dt),
                   ("inv_scale", "zero"), acc=1, dtype=dt, narrow=("g16",),
                   doc=f"g = fp32(g16) * inv_scale from a {dt} weight gradient, with "
                       f"amp_unscale's inf/NaN flag") for dt in K16.DTYPES16],
    *[StreamKernel(f"sgd_amp_{dt}", ("w", "g", "v"), ("w", "v", "w16"),
                   K16.suffixed(K16.SGD_AMP, dt), ("weight_decay", "momentum", "neg_lr"),
                   doc=f"sgd's update in fp32, and w16 = w rounded to {dt} (RNE)",
                   dtype=dt, narrow=("w16",)) for dt in K16.DTYPES16],
    *[StreamKernel(f"sgd_apply_amp_{dt}", ("w", "d"), ("w", "w16"),
                   K16.suffixed(K16.SGD_APPLY_AMP, dt), ("neg_lr",),
                   doc=f"sgd_apply's update in fp32 (GradSA's, LaySA's), and w16 = w rounded "
                       f"to {dt} (RNE)", dtype=dt, narrow=("w16",)) for dt in K16.DTYPES16],
]})


@dataclass
class StreamResult:
    outputs: dict[str, np.ndarray]
    cycles: int = 0
    elements: int = 0
    chunks: int = 0
    extra: dict = field(default_factory=dict)


def _stream_values(k, s: str, a) -> np.ndarray:
    """A stream's input as 1-D values: float32, or uint16 patterns for a 16-bit stream."""
    if s in k.narrow:
        return np.ascontiguousarray(bits16(a, k.dtype).ravel())
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32).ravel())


def stream_counts(k: StreamKernel, cols: int) -> list[int]:
    """The loop count (c0) for `cols` columns (of the loop's streams, k.vpc() values a lane
    word): whole blocks."""
    return [max(-(-cols // k.block()), 1)]


def run_stream(backend: Backend, name: str, arrays: dict[str, np.ndarray],
               scalars: dict[str, float] | None = None, max_cycles: int | None = None) -> StreamResult:
    """Run stream kernel `name` over 1-D arrays (one per input stream; a 16-bit stream as
    bits16 takes it) on `backend`: each stream zero-padded to whole blocks, in chunks that
    fit the bank (one region per stream). Outputs: float32, or uint16 patterns for a 16-bit
    stream; res.acc: (chunks, accumulators, lanes) float32 for a kernel with accumulators."""
    if name not in STREAM_KERNELS:
        raise PimError(f"unknown stream kernel {name!r}; known: {', '.join(STREAM_KERNELS)}")
    k = STREAM_KERNELS[name]
    scalars = scalars or {}
    missing = [s for s in k.inputs if s not in arrays] + [s for s in k.scalars
                                                          if s not in scalars and s not in CONSTANTS]
    if missing:
        raise PimError(f"kernel {name}: missing {', '.join(missing)}")
    data = {s: _stream_values(k, s, arrays[s]) for s in k.inputs}
    n = len(next(iter(data.values())))
    if any(len(v) != n for v in data.values()):
        raise PimError(f"kernel {name}: streams differ in length: "
                       + ", ".join(f"{s}={len(v)}" for s, v in data.items()))
    L, B, V = backend.lanes, k.block(), k.vpc()
    per_block = B * L * V                          # values of each stream a block holds
    cpb = {s: B * V // k.width(s) for s in k.data_streams}   # its columns
    blocks = max(-(-n // per_block), 1)
    chunk = (backend.depth - k.acc) // sum(cpb.values())     # blocks a run
    if chunk < 1:
        raise PimCapacityError(f"kernel {name}: the bank of {backend.depth} columns cannot hold "
                               f"{len(k.data_streams)} streams of {B} columns")
    region, base = {}, 0
    for s in k.data_streams:
        region[s], base = base, base + chunk * cpb[s]
    region["acc"] = base
    program = k.program()
    sdt = k.dtype if V == 2 else "f32"
    scal = np.asarray([scalar_word(scalars.get(s, CONSTANTS.get(s, 0.0)), sdt)
                       for s in k.scalars] or [0], np.uint32)
    outs = {s: np.empty(blocks * per_block, np.uint16 if s in k.narrow else np.float32)
            for s in k.outputs}
    jobs = list(range(0, blocks, chunk))
    acc = np.empty((len(jobs), k.acc, L), np.float32)
    res = StreamResult(outs)
    ptrs = [region[s] for _, s in k.pointers()]
    paired = V == 1 and bool(k.narrow)

    def setup(unit: Backend) -> None:
        unit.load_program(program)
        unit.set_scalars(scal)

    def job(c, b0: int):
        def run_on(unit: Backend) -> int:
            nb = min(chunk, blocks - b0)
            v0, v1 = b0 * per_block, (b0 + nb) * per_block
            for s in k.inputs:
                seg = data[s][v0:v1]
                if seg.size != v1 - v0:                  # the last chunk: pad with zeros
                    seg = np.concatenate([seg, np.zeros(v1 - v0 - seg.size, seg.dtype)])
                if paired and s not in k.narrow:
                    seg = pair_layout(seg, L)
                unit.write_bank(region[s], seg.view(np.uint32).reshape(-1, L))
            unit.set_pointers(ptrs)
            unit.set_counts([nb])
            cycles = unit.run(**({"max_cycles": max_cycles} if max_cycles else {}))
            for s in outs:
                got = unit.read_bank(region[s], nb * cpb[s]).view(outs[s].dtype).ravel()
                outs[s][v0:v1] = pair_unlayout(got, L) if paired and s not in k.narrow else got
            if k.acc:
                acc[c] = unit.read_bank(region["acc"], k.acc).view(np.float32)
            return cycles
        return run_on

    cycles = backend.run_chunks(setup, [job(c, b0) for c, b0 in enumerate(jobs)])
    res.cycles, res.chunks = sum(cycles), len(cycles)
    res.elements = n
    for s in outs:
        outs[s] = outs[s][:n]
    if k.acc:
        res.extra["acc"] = acc
    backend.record(name, res.cycles, n)
    return res


# ---- element-wise wrappers ----------------------------------------------------------------
# dtype "f32" (float32 arrays) or "f16" / "bf16": 16-bit values in, as bits16 takes them
# (np.float16; bf16 as uint16 bit patterns), and out as values16 gives them.

def _stream(backend: Backend, base: str, dtype: str, arrays: dict, out: str, shape):
    name = variant(base, dtype)
    y = run_stream(backend, name, arrays).outputs[out].reshape(shape)
    return _out(y, dtype)


def relu_forward(backend: Backend, x, dtype: str = "f32") -> tuple[np.ndarray, np.ndarray]:
    """-> (y, y > 0 as bool, computed on the host for callers that keep a mask), shaped like x."""
    y = _stream(backend, "relu_fwd", dtype, {"x": x}, "y", np.shape(x))
    return y, widen(y, dtype) > 0


def relu_backward(backend: Backend, y, dy, dtype: str = "f32") -> np.ndarray:
    """dx from the ReLU output y, as torch's threshold_backward: dx = 0 where y <= 0, else dy
    (a NaN y passes dy)."""
    if np.shape(y) != np.shape(dy):
        raise PimError(f"relu_bwd: y {np.shape(y)} and dy {np.shape(dy)} differ in shape")
    return _stream(backend, "relu_bwd", dtype, {"y": y, "dy": dy}, "dx", np.shape(dy))


def relu6_forward(backend: Backend, x, dtype: str = "f32") -> tuple[np.ndarray, np.ndarray]:
    """-> (y, 0 < y < 6 as bool: where the backward pass lets the gradient through, computed on
    the host for callers that keep a mask), shaped like x."""
    y = _stream(backend, "relu6_fwd", dtype, {"x": x}, "y", np.shape(x))
    w = widen(y, dtype)
    return y, (w > 0) & (w < 6)


def relu6_backward(backend: Backend, y, dy, dtype: str = "f32") -> np.ndarray:
    """dx from the ReLU6 output y, as torch's hardtanh_backward(0, 6): dx = 0 where y <= 0 or
    y >= 6, else dy (a NaN y passes dy)."""
    if np.shape(y) != np.shape(dy):
        raise PimError(f"relu6_bwd: y {np.shape(y)} and dy {np.shape(dy)} differ in shape")
    return _stream(backend, "relu6_bwd", dtype, {"y": y, "dy": dy}, "dx", np.shape(dy))


def copy(backend: Backend, x, dtype: str = "f32") -> np.ndarray:
    """y = x through the unit's registers: every bit pattern (NaN payloads, -0) as it was."""
    return _stream(backend, "copy", dtype, {"x": x}, "y", np.shape(x))


def residual_add(backend: Backend, a, b, dtype: str = "f32") -> np.ndarray:
    """y = a + b (in 16 bits: the fp32 sum rounded once, as torch adds Half / BFloat16)."""
    return _stream(backend, "residual_add", dtype, {"a": a, "b": b}, "y", np.shape(a))


def sgd_update(backend: Backend, w, g, v, lr: float, momentum: float = 0.9,
               weight_decay: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """torch.optim.SGD's step (dampening 0, no Nesterov) with an existing momentum buffer v:
    g' = g + wd*w; v = momentum*v + g'; w = w - lr*v, each operation rounded to float32.
    For the first step pass v = g + wd*w and momentum = 0 to match torch's buffer init."""
    r = run_stream(backend, "sgd", {"w": w, "g": g, "v": v},
                   {"weight_decay": weight_decay, "momentum": momentum, "neg_lr": -lr})
    shape = np.shape(w)
    return r.outputs["w"].reshape(shape), r.outputs["v"].reshape(shape)


def amp_unscale(backend: Backend, g, inv_scale: float) -> tuple[np.ndarray, bool]:
    """The scaler's unscale and inf/NaN check on fp32 gradients, as torch's
    _amp_foreach_non_finite_check_and_unscale_: g * inv_scale (one fp32 rounding; NaNs the
    canonical NaN) and found_inf = whether any g was an inf or a NaN (then the step is
    skipped), from the unit's per-lane NaN flags. -> (g, found_inf)."""
    r = run_stream(backend, "amp_unscale", {"g": g}, {"inv_scale": inv_scale})
    return r.outputs["g"].reshape(np.shape(g)), bool(np.isnan(r.extra["acc"]).any())


def amp_unscale16(backend: Backend, g16, inv_scale: float, dtype: str = "f16"):
    """A CONV's 16-bit weight gradient (values as bits16 takes them) widened to fp32 (exact,
    torch's cast back to the fp32 parameter's gradient) and unscaled as amp_unscale.
    -> (g fp32, found_inf)."""
    r = run_stream(backend, variant("amp_unscale", dtype), {"g16": g16},
                   {"inv_scale": inv_scale})
    return r.outputs["g"].reshape(np.shape(g16)), bool(np.isnan(r.extra["acc"]).any())


def sgd_amp_update(backend: Backend, w, g, v, lr: float, momentum: float = 0.9,
                   weight_decay: float = 0.0, dtype: str = "f16"):
    """sgd_update on the fp32 master weights, and the 16-bit copy of the updated weights
    (w rounded to dtype, RNE: torch's w.to(dtype), what a CONV reads under autocast).
    -> (w, v, w16) with w16 as values16 gives it."""
    name = variant("sgd", dtype)
    if name == "sgd":
        raise PimError("sgd_amp_update: dtype must be f16 or bf16 (sgd_update is the fp32 one)")
    r = run_stream(backend, name, {"w": w, "g": g, "v": v},
                   {"weight_decay": weight_decay, "momentum": momentum, "neg_lr": -lr})
    shape = np.shape(w)
    return (r.outputs["w"].reshape(shape), r.outputs["v"].reshape(shape),
            values16(r.outputs["w16"].reshape(shape), dtype))


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


def sgd_apply_amp(backend: Backend, w, d, lr: float, dtype: str = "f16"):
    """sgd_apply on a CONV's fp32 master weights under AMP, and the 16-bit copy of the
    updated weights (torch's w.to(dtype), RNE) the next forward reads. -> (w, w16) with w16
    as values16 gives it."""
    name = variant("sgd_apply", dtype)
    if name == "sgd_apply":
        raise PimError("sgd_apply_amp: dtype must be f16 or bf16 (sgd_apply is the fp32 one)")
    r = run_stream(backend, name, {"w": w, "d": d}, {"neg_lr": -lr})
    shape = np.shape(w)
    return r.outputs["w"].reshape(shape), values16(r.outputs["w16"].reshape(shape), dtype)


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
    dtype: str = "f32"               # of the data streams ("par" and "acc" are fp32)
    block_max: int = 0               # columns a block at most (0: as many as fit; at())

    @property
    def streams(self) -> tuple[str, ...]:
        return self.inputs + tuple(o for o in self.outputs if o not in self.inputs)

    def at(self, lanes: int, values: int | None = None) -> "ChannelKernel":
        """The kernel as a unit of `lanes` runs it on channels of `values` values each: a
        16-bit kernel without accumulators takes one-column blocks where padding a channel's
        columns to its blocks would cost more cycles than the loop overhead the blocks save
        (a channel of one column, or three). Its outputs are the same bit for bit at any
        block; a kernel with accumulators keeps its block, which fixes the order of its sums,
        and fp32 kernels keep theirs."""
        if self.dtype == "f32" or self.acc or values is None or self.block() == 1:
            return self
        columns = max(-(-values // (lanes * self.vpc())), 1)
        one = dataclasses.replace(self, block_max=1)
        return one if one.loop_cycles(columns) < self.loop_cycles(columns) else self

    def loop_cycles(self, columns: int) -> int:
        """Cycles of the column loop over `columns` columns padded to whole blocks (an
        instruction a cycle, LOOP included)."""
        b = self.block()
        return -(-columns // b) * int(_phases(self.body) * b + 1)

    @property
    def narrow(self) -> tuple[str, ...]:
        return self.streams if self.dtype != "f32" else ()

    def vpc(self) -> int:
        """Values a lane word of the data streams."""
        return 2 if self.dtype != "f32" else 1

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
        b = _block(_phases(self.body), fixed, _regs(self.body),
                   isa.N_GRF - len(self.params) - self.shift)
        return min(b, self.block_max) if self.block_max else b

    @functools.lru_cache(maxsize=None)
    def program(self) -> Program:
        ptr = {s: f"p{i}" for i, s in enumerate(self.all_streams)}
        reg = self.registers()
        lines = ["chan:"]
        lines += [f"MOV A{i}, S0" for i in range(self.acc)]          # S0 = 0.0
        lines += [f"MOV {reg[prm]}, B[{ptr['par']}+]" for prm in self.params]
        if self.shift:
            load = f"CVTLO.{self.dtype}" if self.narrow else "MOV"   # the low value, in fp32
            lines.append(f"{load} {reg['shift']}, B[{ptr[self.inputs[0]]}]")
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


def _channel16(base: str, dt: str) -> ChannelKernel:
    """A lane word holds two values: a statistics piece is half the columns, so that a lane
    still sums at most STATS_PIECE values (the error bound of docs/pim.md holds as is)."""
    k = CHANNEL_KERNELS[base]
    return dataclasses.replace(k, name=f"{base}_{dt}", body=K16.suffixed(K16.CHANNEL16[base], dt),
                               piece=k.piece // 2, dtype=dt,
                               doc=f"{k.doc}; {dt} data widened to fp32, fp32 sums and constants")


CHANNEL_KERNELS.update({f"{b}_{dt}": _channel16(b, dt) for b in K16.CHANNEL16
                        for dt in K16.DTYPES16})


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
    return channel_pieces(k, max(-(-n // (backend.lanes * k.vpc())), 1), room)


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
    """Each input (C, n) -> (C * pieces, P * L * vpc), channel-major, each piece padded to P
    columns: with zeros, or for a shift kernel with each lane's shift (its first value in the
    piece, the low one of a 16-bit word; 0 for a lane with none), so that padding adds
    exactly nothing to the sums. -> (layouts, shifts as float32, values per lane)."""
    V = k.vpc()
    valid = np.zeros((C, pieces * P * L * V), bool)
    valid[:, :n] = True
    valid = valid.reshape(C, pieces, P, L, V)
    lay, shift = {}, None
    for s in k.inputs:
        buf = np.zeros((C, pieces * P * L * V), data[s].dtype)
        buf[:, :n] = data[s]
        buf = buf.reshape(C, pieces, P, L, V)
        if k.shift and s == k.inputs[0]:
            shift = np.where(valid[:, :, 0, :, 0], buf[:, :, 0, :, 0], buf.dtype.type(0))
            buf = np.where(valid, buf, shift[:, :, None, :, None])
            shift = widen(shift, k.dtype)
        lay[s] = buf.reshape(C * pieces, P * L * V)
    return lay, shift, valid.sum(axis=(2, 4))


def run_channels(backend: Backend, name: str, arrays: dict[str, np.ndarray],
                 params: dict[str, np.ndarray] | None = None,
                 max_cycles: int | None = None) -> ChannelResult:
    """Run channel kernel `name` over (C, n) arrays (one row per channel, one array per input
    stream) with per-channel constants params[name] of shape (C,), on `backend`."""
    if name not in CHANNEL_KERNELS:
        raise PimError(f"unknown channel kernel {name!r}; known: {', '.join(CHANNEL_KERNELS)}")
    params = params or {}
    k = CHANNEL_KERNELS[name]
    missing = [s for s in k.inputs if s not in arrays] + [p for p in k.params if p not in params]
    if missing:
        raise PimError(f"kernel {name}: missing {', '.join(missing)}")
    data = {s: bits16(arrays[s], k.dtype) if k.narrow else np.asarray(arrays[s], np.float32)
            for s in k.inputs}
    shapes = {s: v.shape for s, v in data.items()}
    if any(len(v) != 2 for v in shapes.values()) or len(set(shapes.values())) != 1:
        raise PimError(f"kernel {name}: streams must be equal (channels, values) arrays, got "
                       + ", ".join(f"{s}={v}" for s, v in shapes.items()))
    C, n = next(iter(shapes.values()))
    k = k.at(backend.lanes, n)                       # the program a unit of these lanes runs
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
    V = k.vpc()
    outs = {s: np.empty((rows, P * L * V), np.uint16 if k.narrow else np.float32)
            for s in k.outputs}
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
                        outs[s].dtype).reshape(m, P * L * V)
            if k.acc:
                acc[r0:r0 + m] = unit.read_bank(acc_base, m * k.acc).view(
                    np.float32).reshape(m, k.acc, L)
            return cycles
        return run_on

    cycles = backend.run_chunks(setup, [job(r0) for r0 in range(0, rows, per_run)])
    res.cycles, res.runs = sum(cycles), len(cycles)
    res.outputs = {s: v.reshape(C, pieces * P * L * V)[:, :n] for s, v in outs.items()}
    if k.acc:
        res.acc = acc.reshape(C, pieces, k.acc, L)
    backend.record(name, res.cycles, C * n)
    return res


def _as(x, dtype: str) -> np.ndarray:
    """Values of `dtype` as the kernels take them: float32, or uint16 patterns (bits16)."""
    return np.asarray(x, np.float32) if dtype == "f32" else bits16(x, dtype)


def _out(y, dtype: str) -> np.ndarray:
    return y if dtype == "f32" else values16(y, dtype)


def _channels(x: np.ndarray, dtype: str = "f32", **per_channel):
    x = _as(x, dtype)
    if x.ndim < 2:
        raise PimError(f"batch norm wants (N, C, ...) input, got shape {x.shape}")
    for what, v in per_channel.items():
        if np.size(v) != x.shape[1]:
            raise PimError(f"batch norm: {what} has {np.size(v)} values for {x.shape[1]} "
                           f"channels (input shape {x.shape})")
    return x, x.shape[1]


def _by_channel(x: np.ndarray) -> np.ndarray:
    """(N, C, ...) -> (C, N * ...), each channel's values in the order x[:, c].ravel()."""
    x = np.asarray(x)
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
                            slices: int = 1, dtype: str = "f32"):
    """Training-mode batch norm over (N, C, ...), all channels in a few runs: -> (y, mean,
    invstd). Two passes over x. Statistics (bn_stats_ch): each lane subtracts its own first
    value K of the channel and sums x - K and (x - K)^2 in fp32, which keeps the sums of
    the size of the spread whatever the mean; the host turns each lane's sums into a count,
    mean and sum of squared deviations and combines the lanes (and pieces, and slices) in
    float64 (Chan et al.): var = M2 / n (biased). Apply (bn_apply_ch): y = (x - mean) *
    (gamma * invstd) + beta, subtracting the fp32 mean first as torch does.

    slices: the statistics are taken per batch slice (N / slices samples each) and combined
    the same way, so that a slice's statistics can run as soon as the host has written it
    (the forward pass by batch slices, pimrt.runtime.schedule).

    dtype "f16" / "bf16": x and y in 16 bits (bits16's forms; y as values16), widened to fp32
    in the unit, mean, invstd, gamma, beta in fp32, y rounded once to 16 bits (RNE): torch's
    CPU batch norm of a 16-bit input with fp32 weight."""
    x, C = _channels(x, dtype, gamma=gamma, beta=beta)
    N = x.shape[0]
    if slices < 1 or N % slices:
        raise PimError(f"batch norm: {slices} slices do not divide the batch of {N}")
    if x.size // max(C, 1) < 2:
        raise PimError(f"batch norm: training needs more than one value per channel, got shape "
                       f"{x.shape} (torch refuses it too)")
    groups = []
    for b in range(slices):
        xc = _by_channel(x[b * N // slices:(b + 1) * N // slices])
        groups.append(_shifted_moments(run_channels(backend, variant("bn_stats_ch", dtype),
                                                    {"x": xc})))
    m, mu, m2 = (np.concatenate(g, axis=1) for g in zip(*groups))
    mean, m2 = _combine(m, mu, m2)
    var = np.maximum(m2 / m.sum(axis=1), 0.0)
    inv = 1.0 / np.sqrt(var + eps)
    m32 = mean.astype(np.float32)
    g64 = np.asarray(gamma, np.float32).astype(np.float64).reshape(C)
    r = run_channels(backend, variant("bn_apply_ch", dtype), {"x": _by_channel(x)},
                     {"mean": m32, "mean_lo": mean - m32.astype(np.float64), "scale": g64 * inv,
                      "shift": np.asarray(beta, np.float32)})
    return _out(_from_channels(r.outputs["y"], x.shape), dtype), m32, inv.astype(np.float32)


def batchnorm_backward_channels(backend: Backend, x, dy, gamma, mean, invstd,
                                dtype: str = "f32"):
    """Training-mode batch norm backward, all channels in a few runs: -> (dx, dgamma, dbeta).
    Sums of dy and (x - mean)*dy in the unit (bn_bwd_stats_ch, per lane), lanes and pieces
    added in float64; then dx = k*dy + c1*(x - mean) + c0 (bn_bwd_apply_ch) with
    k = gamma*invstd, dgamma = invstd*sum((x - mean)*dy), c1 = -k*invstd*dgamma/n,
    c0 = -k*sum(dy)/n. dtype "f16" / "bf16": x, dy and dx in 16 bits, the rest fp32, as
    batchnorm_forward_2pass."""
    x, C = _channels(x, dtype, gamma=gamma, mean=mean, invstd=invstd)
    dy = _as(dy, dtype)
    if dy.shape != x.shape:
        raise PimError(f"batch norm backward: dy {dy.shape} and x {x.shape} differ in shape")
    xc, dyc = _by_channel(x), _by_channel(dy)
    n = xc.shape[1]
    mean32 = np.asarray(mean, np.float32).reshape(C)
    inv64 = np.asarray(invstd, np.float32).astype(np.float64).reshape(C)
    s = run_channels(backend, variant("bn_bwd_stats_ch", dtype), {"x": xc, "dy": dyc},
                     {"mean": mean32}).acc.astype(np.float64).sum(axis=(1, 3))   # (C, 2)
    dgamma, dbeta = inv64 * s[:, 1], s[:, 0]
    k = np.asarray(gamma, np.float32).astype(np.float64).reshape(C) * inv64
    r = run_channels(backend, variant("bn_bwd_apply_ch", dtype), {"x": xc, "dy": dyc},
                     {"mean": mean32, "c1": -k * inv64 * dgamma / n, "c0": -k * dbeta / n,
                      "k": k})
    dx = _out(_from_channels(r.outputs["dx"], x.shape), dtype)
    return dx, dgamma.astype(np.float32), dbeta.astype(np.float32)


batchnorm_forward = batchnorm_forward_2pass          # the names of the per-channel kernels
batchnorm_backward = batchnorm_backward_channels     # of old: the same computation now


# ---- pooling (2x2, stride 2, channels-last) -----------------------------------------------

POOL_BASES = ("avgpool2_fwd", "avgpool2_bwd", "maxpool2_fwd")
HOST_KERNELS = {
    "maxpool2_bwd": "routes dy to the first maximum of each window (torch's tie rule); that "
                    "needs a running 'taken' mask per window and 4 input, 4 output, y and dy "
                    "streams: more bank pointers (8) than the unit has, so it runs on the host",
    "pool_other": "windows other than 2x2/stride 2 (3x3 max pool, global average pool) need "
                  "more pointers or cross-lane sums; they run on the host",
}


# S0 = 1/4, S1 = +0: an average (or its gradient) of -0 is +0, as torch's NCHW kernels give
# (they add into zeroed outputs): (x*0.25) + 0 is x*0.25 but for -0
POOL_BODIES = {
    "avgpool2_fwd": ("MOV G{i}, B[p0+]", "ADD G{i}, G{i}, B[p1+]", "ADD G{i}, G{i}, B[p2+]",
                     "ADD G{i}, G{i}, B[p3+]", "MAD B[p4+], G{i}, S0, S1"),
    "maxpool2_fwd": ("MOV G{i}, B[p0+]", "MAX G{i}, G{i}, B[p1+]", "MAX G{i}, G{i}, B[p2+]",
                     "MAX G{i}, G{i}, B[p3+]", "MOV B[p4+], G{i}"),
    "avgpool2_bwd": ("MAD G{i}, B[p4+], S0, S1", "MOV B[p0+], G{i}", "MOV B[p1+], G{i}",
                     "MOV B[p2+], G{i}", "MOV B[p3+], G{i}"),
}
POOL_STREAMS = {"avgpool2_fwd": ("x", "y"), "maxpool2_fwd": ("x", "y"),
                "avgpool2_bwd": ("dy", "dx")}
POOL_DTYPE = {name: "f32" for name in POOL_BASES}     # the format of the pooled data
for _b in POOL_BASES:
    for _dt in K16.DTYPES16:
        POOL_BODIES[f"{_b}_{_dt}"] = K16.suffixed(K16.POOL16[_b], _dt)
        POOL_STREAMS[f"{_b}_{_dt}"] = POOL_STREAMS[_b]
        POOL_DTYPE[f"{_b}_{_dt}"] = _dt
POOL_KERNELS = tuple(POOL_BODIES)


def pool_vpc(name: str) -> int:
    """Values a lane word of a pooling kernel's data."""
    return 1 if POOL_DTYPE[name] == "f32" else 2


def pool_scalars(name: str) -> np.ndarray:
    """S0 = 1/4 and S1 = +0: in fp32, or for a 16-bit op (avgpool2_bwd's MAD) in 16 bits."""
    dt = "f32" if name.startswith("avgpool2_fwd") else POOL_DTYPE[name]
    return np.asarray([scalar_word(0.25, dt), scalar_word(0.0, dt)], np.uint32)


def pool_block(name: str, cb: int) -> int:
    """Lane columns of a pixel each window pointer moves per visit: the largest divisor of
    cb (columns per pixel) whose phases fit the CRF beside the loops and whose registers fit
    the GRF."""
    body = POOL_BODIES[name]
    bmax = max(1, min(BLOCK_MAX, (isa.CRF_DEPTH - 6) // len(body), isa.N_GRF // _regs(body)))
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


def _to_nhwc(x: np.ndarray, per_col: int) -> np.ndarray:
    """NCHW -> NHWC with C padded to whole columns of per_col values."""
    N, C, H, W = x.shape
    out = np.zeros((N, H, W, -(-C // per_col) * per_col), x.dtype)
    out[..., :C] = x.transpose(0, 2, 3, 1)
    return out


def _pool(backend: Backend, name: str, src: np.ndarray, N: int, H: int, W: int, C: int):
    """src: NHWC-padded input of the kernel (x for forward, dy for backward). Pooling works
    channel by channel, so an image whose channels do not fit the bank at once is pooled in
    blocks of channels (whole lane columns), each block's images as one channels-last
    image: the same bits."""
    per_col = backend.lanes * pool_vpc(name)
    cb = -(-C // per_col)
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
        block = np.ascontiguousarray(src[..., b0 * per_col:b1 * per_col])
        outs.append(_pool_block(backend, name, block, N, H, W,
                                min(C, b1 * per_col) - b0 * per_col))
    return np.concatenate(outs, axis=-1)


def _pool_block(backend: Backend, name: str, src: np.ndarray, N: int, H: int, W: int, C: int):
    L = backend.lanes
    per_col = L * pool_vpc(name)
    cb = -(-C // per_col)
    Ho, Wo = H // 2, W // 2
    big, small = H * W * cb, Ho * Wo * cb
    per_image = big + small
    if W * cb > 0x7FFF:
        raise PimCapacityError(f"{name}: row stride {W * cb} columns does not fit ADDP's step")
    program = pool_program(name, W, cb)
    fwd = name.startswith(("avgpool2_fwd", "maxpool2_fwd"))
    out = np.zeros((N, Ho, Wo, cb * per_col) if fwd else (N, H, W, cb * per_col), src.dtype)
    per_chunk = backend.depth // per_image

    def setup(unit: Backend) -> None:
        unit.load_program(program)
        unit.set_scalars(pool_scalars(name))

    def job(n0: int):
        def run_on(unit: Backend) -> int:
            nb = min(per_chunk, N - n0)
            big_base, small_base = 0, nb * big
            data = np.ascontiguousarray(src[n0:n0 + nb]).reshape(-1, per_col).view(np.uint32)
            unit.write_bank(big_base if fwd else small_base, data)
            unit.set_pointers(pool_pointers(W, cb, big_base, small_base))
            unit.set_counts(pool_counts(name, nb, H, W, cb))
            cycles = unit.run()
            got = unit.read_bank(small_base if fwd else big_base, nb * (small if fwd else big))
            out[n0:n0 + nb] = got.view(src.dtype).reshape(out[n0:n0 + nb].shape)
            return cycles
        return run_on

    cycles = sum(backend.run_chunks(setup, [job(n0) for n0 in range(0, N, per_chunk)]))
    elements = N * (Ho * Wo if fwd else H * W) * C
    backend.record(name, cycles, elements)
    return out


def _pool_input(x, what: str, dtype: str = "f32"):
    x = _as(x, dtype)
    if x.ndim != 4:
        raise PimError(f"{what} wants NCHW input, got shape {x.shape}")
    N, C, H, W = x.shape
    if H < 2 or W < 2 or N * C == 0:
        raise PimError(f"{what}: input of shape {x.shape} has no 2x2 window")
    return x[:, :, :H // 2 * 2, :W // 2 * 2], N, C, H // 2 * 2, W // 2 * 2


def _pool_forward(backend: Backend, base: str, x, dtype: str) -> np.ndarray:
    x, N, C, H, W = _pool_input(x, base.split("_")[0], dtype)
    name = variant(base, dtype)
    src = _to_nhwc(x, backend.lanes * pool_vpc(name))
    out = _pool(backend, name, src, N, H, W, C)
    return _out(out[..., :C].transpose(0, 3, 1, 2).copy(), dtype)


def avgpool2_forward(backend: Backend, x, dtype: str = "f32") -> np.ndarray:
    """F.avg_pool2d(x, 2): NCHW in, NCHW out (an odd last row/column is dropped). In 16 bits
    (x as bits16 takes it) the window is summed in fp32 and rounded once, as torch does."""
    return _pool_forward(backend, "avgpool2_fwd", x, dtype)


def maxpool2_forward(backend: Backend, x, dtype: str = "f32") -> np.ndarray:
    """F.max_pool2d(x, 2) values (NaN wins; on a tie, +0 and -0 included, the first of the
    window in row-major order, as torch)."""
    return _pool_forward(backend, "maxpool2_fwd", x, dtype)


def avgpool2_backward(backend: Backend, dy, input_shape, dtype: str = "f32") -> np.ndarray:
    """Gradient of F.avg_pool2d(x, 2) for an input of input_shape (NCHW)."""
    if len(input_shape) != 4:
        raise PimError(f"avgpool2 backward wants an NCHW input shape, got {tuple(input_shape)}")
    N, C, H, W = input_shape
    dy = _as(dy, dtype)
    _pool_input(np.empty((N, C, H, W), np.float32), "avgpool2 backward")
    if dy.shape != (N, C, H // 2, W // 2):
        raise PimError(f"avgpool2 backward: dy of shape {dy.shape} does not match the input "
                       f"{tuple(input_shape)} (want {(N, C, H // 2, W // 2)})")
    name = variant("avgpool2_bwd", dtype)
    src = _to_nhwc(dy, backend.lanes * pool_vpc(name))
    He, We = H // 2 * 2, W // 2 * 2
    out = _pool(backend, name, src, N, He, We, C)
    dx = np.zeros((N, C, H, W), dy.dtype)
    dx[:, :, :He, :We] = out[..., :C].transpose(0, 3, 1, 2)
    return _out(dx, dtype)


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


# ---- kernels by dtype (an AMP step's kernels) ----------------------------------------------

F32_ONLY = ("gradsa_fold", "gradsa_select")   # fp32 under AMP too
VARIANTS = {base: {"f32": base, **{dt: f"{base}_{dt}" for dt in K16.DTYPES16}}
            for base in (*K16.STREAM16, *K16.CHANNEL16, *POOL_BASES)}
VARIANTS["sgd"] = {"f32": "sgd", **{dt: f"sgd_amp_{dt}" for dt in K16.DTYPES16}}
# GradSA's and LaySA's apply on a CONV's weights: fp32, and the 16-bit copy
VARIANTS["sgd_apply"] = {"f32": "sgd_apply",
                         **{dt: f"sgd_apply_amp_{dt}" for dt in K16.DTYPES16}}
# a CONV's gradient: its 16-bit weight gradient widened, unscaled and checked
VARIANTS["amp_unscale"] = {"f32": "amp_unscale",
                           **{dt: f"amp_unscale_{dt}" for dt in K16.DTYPES16}}


def variant(base: str, dtype: str) -> str:
    """The kernel that does `base`'s work on `dtype` activations ("f32", "f16", "bf16"):
    base itself for f32; `<base>_<dtype>` (sgd: sgd_amp_<dtype>, which also writes the
    16-bit copy of the weights). A base with no such variant is a PimError."""
    if base not in KERNELS:
        raise PimError(f"unknown PIM kernel {base!r}; known: {', '.join(KERNELS)}")
    if dtype not in ("f32", *K16.DTYPES16):
        raise PimError(f"kernel {base}: unknown dtype {dtype!r} (f32, f16, bf16)")
    if dtype == "f32":
        return base
    if base not in VARIANTS:
        why = " (it stays fp32 under AMP)" if base in F32_ONLY else ""
        raise PimError(f"kernel {base} has no {dtype} variant{why}; with variants: "
                       f"{', '.join(VARIANTS)}")
    return VARIANTS[base][dtype]


def stream_dtypes(name: str) -> dict[str, str]:
    """Each stream of kernel `name` (pimrt.pim.access.kernel_streams' names) -> "f32",
    "f16" or "bf16": a 16-bit stream holds two values a lane word (half the columns)."""
    if name in STREAM_KERNELS:
        k = STREAM_KERNELS[name]
        return {s: k.dtype if s in k.narrow else "f32" for s in k.streams}
    if name in CHANNEL_KERNELS:
        k = CHANNEL_KERNELS[name]
        return {s: k.dtype if s in k.narrow else "f32" for s in k.all_streams}
    if name in POOL_KERNELS:
        return {s: POOL_DTYPE[name] for s in POOL_STREAMS[name]}
    raise PimError(f"unknown PIM kernel {name!r}; known: {', '.join(KERNELS)}")


def values_per_word(name: str) -> int:
    """Values a lane word of the columns a kernel's loop counts (its work's `elements` are
    values): 2 for a kernel whose data are all 16-bit, 1 otherwise."""
    if name in STREAM_KERNELS:
        return STREAM_KERNELS[name].vpc()
    if name in CHANNEL_KERNELS:
        return CHANNEL_KERNELS[name].vpc()
    return pool_vpc(name)


def base_of(name: str) -> tuple[str, str]:
    """variant's inverse: kernel name -> (base, dtype)."""
    for base, per in VARIANTS.items():
        for dt, n in per.items():
            if n == name:
                return base, dt
    if name in KERNELS:
        return name, "f32"
    raise PimError(f"unknown PIM kernel {name!r}; known: {', '.join(KERNELS)}")

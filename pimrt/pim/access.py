"""What one PIM unit does in its bank for a piece of work: the DRAM column accesses, in
program order, and the clock cycles, both derived from the very program the kernel runs
(pimrt.pim.kernels), for the timing model.

    kernel_streams("relu_bwd")                            -> ("y", "dy", "dx")
    bank_accesses("relu_bwd", lanes=8, elements=4096)     -> structured array (rw, stream, column)
    bank_cycles("relu_bwd", lanes=16, elements=4096)      -> int

Work, per unit and bank: stream kernels `elements=n` (values per stream: a 16-bit stream
holds two a lane word, kernels.stream_dtypes); channel kernels
(batch norm) `channels=c, elements=n` (n values per channel); pooling `images=i, height=h,
width=w, channels=c` (an odd last row or column is dropped, as the kernels do). Each stream
has a region of its own; `column` counts DRAM columns of `column_bytes` from the region's
start. The unit's column is 4*lanes bytes: consecutive accesses to the same DRAM column of the
same stream in the same direction are one DRAM access (8 lanes: two unit columns to a 64-byte
DRAM column), and a unit column wider than a DRAM column is several.

How: the program is walked once as a tree of counted loops (pointer moves and loop counts
do not depend on the data); a loop's accesses are its body's, repeated with the body's pointer
step, in numpy. tests/test_pim_access.py checks both against the RTL's recorded bank port.
"""
from __future__ import annotations

import functools

import numpy as np

from pimrt.pim import isa, kernels as K
from pimrt.pim.errors import PimError

ACCESS_DTYPE = np.dtype([("rw", "u1"), ("stream", "u1"), ("column", "<i8")])
READ, WRITE = 0, 1

_WORK = {"stream": ("elements",), "channel": ("channels", "elements"),
         "pool": ("images", "height", "width", "channels")}


def family(kernel: str) -> str:
    if kernel in K.STREAM_KERNELS:
        return "stream"
    if kernel in K.CHANNEL_KERNELS:
        return "channel"
    if kernel in K.POOL_KERNELS:
        return "pool"
    raise PimError(f"unknown PIM kernel {kernel!r}; known: {', '.join(K.KERNELS)}")


def kernel_streams(kernel: str) -> tuple[str, ...]:
    """The stream names of `kernel` in index order: inputs, outputs, then a channel kernel's
    per-channel constants ("par") and sums ("acc")."""
    fam = family(kernel)
    if fam == "stream":
        return K.STREAM_KERNELS[kernel].streams
    if fam == "channel":
        return K.CHANNEL_KERNELS[kernel].all_streams
    return K.POOL_STREAMS[kernel]


def _work(kernel: str, lanes: int, work: dict) -> tuple[int, ...]:
    fam = family(kernel)
    want = _WORK[fam]
    if set(work) != set(want):
        raise PimError(f"kernel {kernel}: work is {', '.join(f'{w}=' for w in want)} "
                       f"(got {', '.join(sorted(work)) or 'nothing'})")
    vals = tuple(work[w] for w in want)
    if any(not isinstance(v, (int, np.integer)) or v < 1 for v in vals):
        raise PimError(f"kernel {kernel}: work sizes must be positive integers, got "
                       + ", ".join(f"{w}={v}" for w, v in zip(want, vals)))
    if lanes < 1 or lanes & (lanes - 1):
        raise PimError(f"kernel {kernel}: lanes must be a power of two, got {lanes}")
    if fam == "pool" and (vals[1] < 2 or vals[2] < 2):
        raise PimError(f"kernel {kernel}: a {vals[1]}x{vals[2]} image has no 2x2 window")
    return tuple(int(v) for v in vals)


def _layout(kernel: str, lanes: int, vals: tuple[int, ...]):
    """-> (program words, loop counts, per pointer (stream index, first column))."""
    fam = family(kernel)
    per_col = lanes * K.values_per_word(kernel)      # values a column of the loop's streams
    if fam == "stream":
        k = K.STREAM_KERNELS[kernel]
        idx = {s: i for i, s in enumerate(k.streams)}
        cols = -(-vals[0] // per_col)
        return (k.program().words, K.stream_counts(k, cols),
                [(idx[s], 0) for _, s in k.pointers()])
    if fam == "channel":
        c, n = vals
        k = K.CHANNEL_KERNELS[kernel].at(lanes, n)
        pieces, P = K.channel_pieces(k, -(-n // per_col))
        return (k.program().words, K.channel_counts(k, P, c * pieces),
                [(i, 0) for i in range(len(k.all_streams))])
    images, H, W, C = vals
    H, W, cb = H // 2 * 2, W // 2 * 2, -(-C // per_col)
    if W * cb > 0x7FFF:
        raise PimError(f"kernel {kernel}: a row of {W * cb} columns does not fit ADDP's step")
    big, small = (1, 0) if kernel.startswith("avgpool2_bwd") else (0, 1)
    ptrs = [(big, b) for b in K.pool_pointers(W, cb, 0, 0)[:4]] + [(small, 0)]
    return K.pool_program(kernel, W, cb).words, K.pool_counts(kernel, images, H, W, cb), ptrs


# ---- the program as a tree of loops ----------------------------------------------------------

def _segment(prog, a: int, b: int, counts: tuple[int, ...]):
    """Instructions a..b-1 (loops inside expanded) -> (pointer, rw, offset) arrays in program
    order (offsets from the pointers' values at a), the pointers' net step, the cycles,
    whether an EXIT ended it, and how many times each instruction of `prog` ran."""
    outer = {}
    for j in range(a, b):
        ins = prog[j]
        if ins.name == "LOOP" and a <= ins.target < j:
            outer[ins.target] = max(outer.get(ins.target, j), j)
    parts, step, cycles, pc = [], np.zeros(isa.N_PTR, np.int64), 0, a
    runs = np.zeros(len(prog), np.int64)
    while pc < b:
        if pc in outer:
            j = outer[pc]
            p, rw, off, d, c, _, inner = _segment(prog, pc, j, counts)
            n = max(counts[prog[j].counter], 1)
            runs += n * inner
            runs[j] += n                                    # the LOOP itself
            r = np.arange(n, dtype=np.int64)[:, None]
            parts.append((np.tile(p, n), np.tile(rw, n),
                          (off[None, :] + r * d[p] + step[p]).ravel()))
            step += n * d
            cycles += n * (c + 1)
            pc = j + 1
            continue
        ins = prog[pc]
        runs[pc] += 1
        cycles += 1
        pc += 1
        if ins.name == "EXIT":
            return (*_join(parts), step, cycles, True, runs)
        if ins.name == "ADDP":
            for i in range(isa.N_PTR):
                if ins.mask >> i & 1:
                    step[i] += ins.step
        elif ins.fmt == "data":
            srcs = [getattr(ins, s) for s in ins.used() if s != "d"]
            banks = [o for o in srcs if o.kind == isa.K_BANK]
            acc = []
            if banks:
                acc.append((banks[0].index, READ))
            if ins.d.kind == isa.K_BANK:
                acc.append((ins.d.index, WRITE))
            for p, rw in acc:
                parts.append((np.array([p]), np.array([rw], np.uint8), np.array([step[p]])))
            for p in {o.index for o in [ins.d, *srcs] if o.kind == isa.K_BANK and o.inc}:
                step[p] += 1
        elif ins.name not in ("NOP", "LOOP"):
            raise PimError(f"access model: {ins.name} at pc {pc - 1} is not supported")
    return (*_join(parts), step, cycles, False, runs)


def _join(parts):
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.int64)
    p, rw, off = zip(*parts)
    return (np.concatenate(p).astype(np.int64), np.concatenate(rw).astype(np.uint8),
            np.concatenate(off).astype(np.int64))


@functools.lru_cache(maxsize=4096)
def _walk(words: tuple[int, ...], counts: tuple[int, ...]):
    prog = [isa.decode(w) for w in words]
    p, rw, off, _, cycles, _, _ = _segment(prog, 0, len(prog), counts)
    return p, rw, off, cycles


@functools.lru_cache(maxsize=4096)
def instruction_runs(kernel: str, lanes: int, work: tuple) -> tuple[tuple, np.ndarray, int]:
    """One bank's run of `kernel` on `work` ((name, value) pairs): its program (decoded), how
    many times each instruction ran, and the unit's clock cycles (= bank_cycles)."""
    words, counts, _ = _layout(kernel, lanes, _work(kernel, lanes, dict(work)))
    counts = tuple(counts) + (0,) * (isa.N_CNT - len(counts))
    prog = [isa.decode(w) for w in words]
    *_, cycles, _, runs = _segment(prog, 0, len(prog), counts)
    return tuple(prog), runs, cycles


def _run(kernel: str, lanes: int, work: dict):
    vals = _work(kernel, lanes, work)
    words, counts, ptrs = _layout(kernel, lanes, vals)
    counts = tuple(counts) + (0,) * (isa.N_CNT - len(counts))
    return (*_walk(tuple(words), counts), ptrs)


@functools.lru_cache(maxsize=4096)
def _accesses(kernel: str, lanes: int, column_bytes: int, work: tuple) -> np.ndarray:
    p, rw, off, _, ptrs = _run(kernel, lanes, dict(work))
    stream = np.array([s for s, _ in ptrs], np.uint8)[p]
    col = np.array([b for _, b in ptrs], np.int64)[p] + off
    unit = 4 * lanes
    if column_bytes % unit == 0:
        col = col // (column_bytes // unit)
    elif unit % column_bytes == 0:
        q = unit // column_bytes
        col = (col[:, None] * q + np.arange(q)).ravel()
        stream, rw = stream.repeat(q), rw.repeat(q)
    else:
        raise PimError(f"kernel {kernel}: a {column_bytes}-byte DRAM column and a {unit}-byte "
                       f"unit column ({lanes} lanes) do not divide one another")
    keep = np.ones(len(col), bool)
    keep[1:] = (col[1:] != col[:-1]) | (stream[1:] != stream[:-1]) | (rw[1:] != rw[:-1])
    out = np.empty(int(keep.sum()), ACCESS_DTYPE)
    out["rw"], out["stream"], out["column"] = rw[keep], stream[keep], col[keep]
    out.setflags(write=False)
    return out


def bank_accesses(kernel: str, *, lanes: int = isa.LANES, column_bytes: int = 64,
                  **work) -> np.ndarray:
    """The DRAM column accesses one unit makes in its bank to do `work`, in program order,
    padding included: a read-only structured array with fields rw (0 read, 1 write), stream
    (index into kernel_streams) and column (DRAM column within that stream's region)."""
    if column_bytes < 1:
        raise PimError(f"kernel {kernel}: column_bytes must be positive, got {column_bytes}")
    return _accesses(kernel, lanes, column_bytes, tuple(sorted(work.items())))


def bank_cycles(kernel: str, *, lanes: int = isa.LANES, **work) -> int:
    """The unit's clock cycles for one run doing `work` (what the RTL counts: one per
    instruction, loops and EXIT included)."""
    return int(_run(kernel, lanes, work)[3])

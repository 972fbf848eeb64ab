"""Element-wise lane ops on bank streams, in binary32 or two 16-bit elements a lane word: the
programs `pimrt bench pim16` measures the 16-bit lanes' cycles per element with (docs/pim.md,
"16-bit lanes"). Streams are blocked like the kernels' (b columns a phase, one row visit per
block and stream). A widening (CVTLO, CVTHI) writes each block of b 16-bit columns as b
columns of the even elements, then b of the odd ones; CVTPK reads that layout back.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pimrt.pim import isa
from pimrt.pim.asm import assemble
from pimrt.pim.errors import PimError


@dataclass(frozen=True)
class StreamOp:
    inputs: int          # input streams (columns in per block: b each, CVTPK's 2b)
    phases: tuple        # phase templates: {i} = Gi, {j} = G(b+i), {op} = the instruction
    out_cols: int = 1    # output columns per block, in units of b


OPS = {
    # a, b -> y
    **{n: StreamOp(2, ("MOV G{i}, B[p0+]", "{op} G{i}, G{i}, B[p1+]", "MOV B[p2+], G{i}"))
       for n in ("ADD", "SUB", "MUL", "MAX", "MIN", "CMPGT", "CMPGE", "CMPEQ")},
    # a, b, c -> y
    **{n: StreamOp(3, ("MOV G{i}, B[p0+]", "MOV G{j}, B[p1+]", "{op} G{i}, G{i}, G{j}, B[p2+]",
                       "MOV B[p3+], G{i}")) for n in ("MAD", "FMA", "SEL")},
    # x -> max(x, +0): ReLU
    "RELU": StreamOp(1, ("MAX{sfx} G{i}, B[p0+], S0", "MOV B[p1+], G{i}")),
    # 16-bit x -> binary32 (even elements, then odd ones)
    "WIDEN": StreamOp(1, ("MOV G{i}, B[p0+]", "CVTLO{sfx} B[p1+], G{i}", "CVTHI{sfx} B[p1+], G{i}"),
                      out_cols=2),
    # binary32 (that layout) -> 16-bit
    "NARROW": StreamOp(1, ("MOV G{i}, B[p0+]", "MOV G{j}, B[p0+]", "CVTPK{sfx} B[p1+], G{i}, G{j}")),
}


def block(name: str) -> int:
    """The largest even block whose phases fit the CRF beside LOOP and EXIT (8 at most)."""
    n = len(OPS[name].phases)
    return max(b for b in (2, 4, 6, 8) if n * b + 2 <= isa.CRF_DEPTH)


def program(name: str, dtype: int):
    if name not in OPS:
        raise PimError(f"no stream op {name!r}; known: {', '.join(OPS)}")
    if name in ("WIDEN", "NARROW") and dtype == isa.F32:
        raise PimError(f"stream op {name} needs a 16-bit dtype")
    b = block(name)
    sfx = f".{isa.DTYPE_NAMES[dtype]}" if dtype else ""
    lines = ["top:"]
    for ph in OPS[name].phases:
        lines += [ph.format(i=i, j=b + i, op=f"{name}{sfx}", sfx=sfx) for i in range(b)]
    return assemble("\n".join(lines + ["LOOP c0, top", "EXIT"]))


def elements_per_column(name: str, dtype: int, lanes: int) -> int:
    return lanes * (2 if dtype else 1)


def run(backend, name: str, dtype: int, inputs: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """Run stream op `name` over input streams of 32-bit lane words (each a multiple of
    block * lanes words; NARROW's twice that) -> (output words, the unit's cycles)."""
    op = OPS[name]
    L, b = backend.lanes, block(name)
    cin = 2 if name == "NARROW" else 1                    # input columns per output column
    cols = len(inputs[0]) // (L * cin)                    # output columns (x out_cols)
    if cols % b or len(inputs) != op.inputs:
        raise PimError(f"stream op {name}: want {op.inputs} streams of a multiple of "
                       f"{b * L * cin} words")
    streams = op.inputs + 1
    region = backend.depth // (streams * 2) // b * b      # output columns per chunk
    prog = program(name, dtype)
    out = np.empty(cols * op.out_cols * L, np.uint32)
    cycles = 0
    for c0 in range(0, cols, region):
        m = min(region, cols - c0)
        base = [k * 2 * region for k in range(streams)]
        backend.load_program(prog)
        for k, v in enumerate(inputs):
            seg = np.asarray(v, np.uint32)[c0 * L * cin:(c0 + m) * L * cin]
            backend.write_bank(base[k], seg.reshape(-1, L))
        backend.set_pointers(base)
        backend.set_counts([m // b])
        cycles += backend.run()
        got = backend.read_bank(base[-1], m * op.out_cols)
        out[c0 * L * op.out_cols:(c0 + m) * L * op.out_cols] = got.ravel()
    return out, cycles

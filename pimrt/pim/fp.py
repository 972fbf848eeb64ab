"""Lane operations on binary32 bit patterns (numpy uint32 arrays), bit-exact with hw/pim_lane_op.vh
(the `lanes_op` function, built from hw/fp_add.vh, fp_mul.vh and fp_cmp.vh).

numpy float32 add, subtract and multiply are IEEE-754 round-to-nearest-even with subnormals,
so they are the reference; the unit's policy on top of them: every arithmetic NaN result is
the canonical quiet NaN 0x7FC00000; MAD rounds twice ((a*b) rounded, then + c rounded);
MAX/MIN: NaN if either input is NaN, otherwise the larger/smaller value and on a tie (equal
values, or +0 and -0) the first operand, as torch.maximum and torch.relu do; compares give
all-ones or zero lanes and are false on NaN; MOV and SEL move bits unchanged.
"""
from __future__ import annotations

import numpy as np

from pimrt.pim.isa import QNAN

U32 = np.uint32
ONES = U32(0xFFFFFFFF)


def f32(u: np.ndarray) -> np.ndarray:
    return np.asarray(u, dtype=U32).view(np.float32)


def canon(x: np.ndarray) -> np.ndarray:
    """float32 array -> uint32 bits with every NaN replaced by the canonical quiet NaN."""
    x = np.asarray(x, dtype=np.float32)
    return np.where(np.isnan(x), U32(QNAN), x.view(U32))


def isnan(u: np.ndarray) -> np.ndarray:
    u = np.asarray(u, dtype=U32)
    return ((u & U32(0x7F800000)) == U32(0x7F800000)) & ((u & U32(0x007FFFFF)) != 0)


def add(a, b):
    with np.errstate(all="ignore"):
        return canon(f32(a) + f32(b))


def sub(a, b):
    with np.errstate(all="ignore"):
        return canon(f32(a) - f32(b))


def mul(a, b):
    with np.errstate(all="ignore"):
        return canon(f32(a) * f32(b))


def mad(a, b, c):
    with np.errstate(all="ignore"):
        return canon((f32(a) * f32(b)) + f32(c))


def _minmax(a, b, want_max: bool):
    a = np.asarray(a, dtype=U32)
    b = np.asarray(b, dtype=U32)
    fa, fb = f32(a), f32(b)
    r = np.where((fa < fb) if want_max else (fb < fa), b, a)   # ties keep a
    return np.where(isnan(a) | isnan(b), U32(QNAN), r).astype(U32)


def vmax(a, b):
    return _minmax(a, b, True)


def vmin(a, b):
    return _minmax(a, b, False)


def _mask(cond):
    return np.where(cond, ONES, U32(0)).astype(U32)


def cmpgt(a, b):
    return _mask(f32(a) > f32(b))


def cmpge(a, b):
    return _mask(f32(a) >= f32(b))


def cmpeq(a, b):
    return _mask(f32(a) == f32(b))


def sel(a, b, c):
    return np.where(np.asarray(c, dtype=U32) != 0, np.asarray(a, dtype=U32),
                    np.asarray(b, dtype=U32)).astype(U32)


def mov(a):
    return np.array(a, dtype=U32)


# lane op name -> (function, number of source operands)
LANE_FUNCS = {
    "MOV": (mov, 1), "ADD": (add, 2), "SUB": (sub, 2), "MUL": (mul, 2), "MAD": (mad, 3),
    "MAX": (vmax, 2), "MIN": (vmin, 2), "CMPGT": (cmpgt, 2), "CMPGE": (cmpge, 2),
    "CMPEQ": (cmpeq, 2), "SEL": (sel, 3),
}


def apply(name: str, a, b=None, c=None) -> np.ndarray:
    func, n = LANE_FUNCS[name]
    return func(*(a, b, c)[:n])

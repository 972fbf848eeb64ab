"""Lane operations on binary32 bit patterns (numpy uint32 arrays), bit-exact with hw/pim_lane_op.vh
(the `lanes_op` function, built from hw/fp_add.vh, fp_mul.vh and fp_cmp.vh).

numpy float32 add, subtract and multiply are IEEE-754 round-to-nearest-even with subnormals,
so they are the reference; the unit's policy on top of them: every arithmetic NaN result is
the canonical quiet NaN 0x7FC00000; MAD rounds twice ((a*b) rounded, then + c rounded), FMA
once;
MAX/MIN: NaN if either input is NaN, otherwise the larger/smaller value and on a tie (equal
values, or +0 and -0) the first operand, as torch.maximum and torch.relu do; compares give
all-ones or zero lanes and are false on NaN; MOV and SEL move bits unchanged.

16-bit lanes (binary16, bfloat16; hw/fp16.vh): two elements a lane word, each op the binary32
op on the widened elements then torch's narrowing (apply16, apply_words; docs/pim.md).
"""
from __future__ import annotations

import numpy as np

from pimrt.pim.isa import QNAN, widening

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


def fma(a, b, c):
    """round(a*b + c) to binary32 once. The product is exact in float64; the float64 sum is
    made round-to-odd from its exact error (TwoSum), so rounding it to float32 rounds the exact
    value once (53 >= 24 + 2 bits)."""
    with np.errstate(all="ignore"):
        p = f32(a).astype(np.float64) * f32(b).astype(np.float64)
        c64 = f32(c).astype(np.float64)
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)
        odd = (s.view(np.uint64) & np.uint64(1)) == 1
        fix = np.isfinite(s) & (err != 0) & ~odd
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return canon(s.astype(np.float32))


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
    "CMPEQ": (cmpeq, 2), "SEL": (sel, 3), "FMA": (fma, 3),
}
# source operands of every lane op, the 16-bit conversions included
ARITY = {**{k: n for k, (_, n) in LANE_FUNCS.items()}, "CVTLO": 1, "CVTHI": 1, "CVTPK": 2}


def apply(name: str, a, b=None, c=None, dtype: int = 0) -> np.ndarray:
    """Lane op `name` on 32-bit lane words; dtype 0 binary32, 1 binary16, 2 bfloat16 (two
    16-bit elements a word, apply_words), 4-7 the widening forms (isa.WIDENING: the binary32
    op on a's low or high 16-bit element widened, widen_a)."""
    if dtype & 4:
        a, dtype = widen_a(a, dtype), 0
    if dtype:
        n = ARITY[name]
        return apply_words(name, dtype, *(a, b, c)[:n])
    func, n = LANE_FUNCS[name]
    return func(*(a, b, c)[:n])


# ---- 16-bit lanes: IEEE binary16 (dtype 1) and bfloat16 (dtype 2), two per 32-bit word ----
# Element 2i of a column is lane i's low half, element 2i+1 its high half (a uint16 array
# viewed as uint32, little-endian). Every 16-bit op is the fp32 op on the widened halves,
# then torch's fp32 -> 16-bit conversion, as torch's CPU kernels compute Half and BFloat16
# (docs/pim.md, "16-bit lanes"). widen16 / narrow16 are torch's conversions, bit for bit.

U16 = np.uint16
F16, BF16 = 1, 2


def widen16(h, dtype: int) -> np.ndarray:
    """16-bit patterns -> binary32 patterns, exact. bf16: the pattern shifted up (a NaN keeps
    its payload). fp16: a NaN keeps sign and payload and is made quiet (sign | 0x7FC00000 |
    payload << 13), as torch's vectorised conversion (F16C) gives it."""
    h = np.asarray(h).astype(U32) & U32(0xFFFF)
    if dtype == BF16:
        return (h << U32(16)).astype(U32)
    v = h.astype(U16).view(np.float16).astype(np.float32).view(U32)
    nan = ((h & U32(0x7C00)) == U32(0x7C00)) & ((h & U32(0x3FF)) != 0)
    q = ((h & U32(0x8000)) << U32(16)) | U32(0x7FC00000) | ((h & U32(0x3FF)) << U32(13))
    return np.where(nan, q, v).astype(U32)


def narrow16(u, dtype: int) -> np.ndarray:
    """binary32 patterns -> 16-bit patterns (as uint32 values < 2**16), round to nearest even,
    subnormals, overflow to infinity. A NaN: bf16 0xFFFF (every NaN, as torch gives it);
    fp16 sign | 0x7E00 | the top 9 payload bits (quiet, as torch's F16C conversion)."""
    u = np.asarray(u).astype(U32)
    nan = isnan(u)
    if dtype == BF16:
        r = (u.astype(np.uint64) + 0x7FFF + ((u >> U32(16)) & U32(1))) >> 16
        return np.where(nan, U32(0xFFFF), r.astype(U32)).astype(U32)
    with np.errstate(all="ignore"):
        r = f32(u).astype(np.float16).view(U16).astype(U32)
    q = ((u >> U32(16)) & U32(0x8000)) | U32(0x7E00) | ((u >> U32(13)) & U32(0x3FF))
    return np.where(nan, q, r).astype(U32)


def canon16(dtype: int) -> int:
    """The 16-bit NaN an arithmetic NaN result gives: the fp32 canonical NaN narrowed."""
    return int(narrow16(np.array([QNAN], U32), dtype)[0])


def _mask16(cond):
    return np.where(cond, U32(0xFFFF), U32(0)).astype(U32)


def apply16(name: str, dtype: int, a, b=None, c=None) -> np.ndarray:
    """One lane op on 16-bit elements (uint values < 2**16; returned as uint32 values)."""
    a = np.asarray(a).astype(U32) & U32(0xFFFF)
    b = np.zeros_like(a) if b is None else np.asarray(b).astype(U32) & U32(0xFFFF)
    c = np.zeros_like(a) if c is None else np.asarray(c).astype(U32) & U32(0xFFFF)
    if name == "MOV":
        return a
    if name == "SEL":
        return np.where(c != 0, a, b).astype(U32)
    wa, wb = widen16(a, dtype), widen16(b, dtype)
    if name == "MAD":
        prod = widen16(narrow16(mul(wa, wb), dtype), dtype)
        return narrow16(add(prod, widen16(c, dtype)), dtype)
    if name == "FMA":
        return narrow16(fma(wa, wb, widen16(c, dtype)), dtype)
    if name in ("CMPGT", "CMPGE", "CMPEQ"):
        return _mask16(LANE_FUNCS[name][0](wa, wb) != 0)
    return narrow16(LANE_FUNCS[name][0](wa, wb), dtype)


def widen_a(a, dtype: int) -> np.ndarray:
    """A widening dtype's operand a (isa.WIDENING): the 16-bit element of each word that the
    dtype names, in its format, widened to binary32 (exact)."""
    fmt, half = widening(dtype)
    a = np.asarray(a, dtype=U32)
    return widen16(a >> U32(16) if half else a & U32(0xFFFF), fmt)


def apply_words(name: str, dtype: int, a, b=None, c=None) -> np.ndarray:
    """A lane op with a 16-bit dtype on 32-bit lane words: the conversions (CVTLO, CVTHI:
    a half widened to fp32; CVTPK: a and b narrowed into the low and high halves) or the
    op on both halves apart."""
    a = np.asarray(a, dtype=U32)
    if name == "CVTLO":
        return widen16(a & U32(0xFFFF), dtype)
    if name == "CVTHI":
        return widen16(a >> U32(16), dtype)
    if name == "CVTPK":
        return (narrow16(a, dtype) | (narrow16(b, dtype) << U32(16))).astype(U32)
    halves = [None if v is None else np.asarray(v, dtype=U32) for v in (a, b, c)]
    lo = apply16(name, dtype, *[None if v is None else v & U32(0xFFFF) for v in halves])
    hi = apply16(name, dtype, *[None if v is None else v >> U32(16) for v in halves])
    return (lo | (hi << U32(16))).astype(U32)

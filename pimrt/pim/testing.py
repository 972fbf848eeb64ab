"""Helpers for the PIM tests (tests/test_pim*.py): edge values, reference results, and the
backends built once per process (skipping when Verilator is missing)."""
from __future__ import annotations

import functools

import numpy as np

from pimrt.pim import fp, isa
from pimrt.pim.asm import assemble

# binary32 edge cases, as bit patterns
EDGES = np.array([
    0x00000000, 0x80000000,             # +0, -0
    0x00000001, 0x80000001,             # smallest subnormals
    0x007FFFFF, 0x00400000,             # largest subnormal, a middle one
    0x00800000, 0x80800000,             # smallest normals
    0x3F800000, 0xBF800000,             # +-1
    0x3F800001, 0x33800000,             # 1 + ulp, 2^-24 (half an ulp of 1: ties)
    0x34000000, 0x3F7FFFFF,             # 2^-23, 1 - ulp/2
    0x7F7FFFFF, 0xFF7FFFFF,             # +-max finite
    0x7F000000, 0x00FFFFFF,             # 2^127, just under 2^-125
    0x7F800000, 0xFF800000,             # +-inf
    0x7FC00000, 0xFFC00001,             # quiet NaNs
    0x7F800001, 0x7FBFFFFF,             # signalling NaNs
    0x40490FDB, 0x3EAAAAAB,             # pi, 1/3
    0x4B000001, 0x4B7FFFFF,             # large integers near 2^23..2^24
], dtype=np.uint32)


# binary16 and bfloat16 edge cases, as bit patterns (isa.F16, isa.BF16)
EDGES16 = {
    isa.F16: np.array([
        0x0000, 0x8000, 0x0001, 0x8001,     # +-0, smallest subnormals
        0x03FF, 0x0200, 0x0400, 0x8400,     # largest subnormal, a middle one, smallest normals
        0x3C00, 0xBC00, 0x3C01, 0x1000,     # +-1, 1 + ulp, 2^-11 (half an ulp of 1: ties)
        0x1400, 0x3BFF, 0x7BFF, 0xFBFF,     # 2^-10, 1 - ulp/2, +-max finite (65504)
        0x7800, 0x07FF, 0x7C00, 0xFC00,     # 2^15, just under 2^-13, +-inf
        0x7E00, 0xFE01, 0x7C01, 0x7DFF,     # quiet NaNs, signalling NaNs
        0x4248, 0x3555, 0x6400, 0x67FF,     # pi, 1/3, 1024, 2047
        0x5BFF, 0x0801, 0x8200, 0x4600,     # 255.9, near 2^-13, a negative subnormal, 6
    ], dtype=np.uint32),
    isa.BF16: np.array([
        0x0000, 0x8000, 0x0001, 0x8001,     # +-0, smallest subnormals
        0x007F, 0x0040, 0x0080, 0x8080,     # largest subnormal, a middle one, smallest normals
        0x3F80, 0xBF80, 0x3F81, 0x3B80,     # +-1, 1 + ulp, 2^-8 (half an ulp of 1: ties)
        0x3C00, 0x3F7F, 0x7F7F, 0xFF7F,     # 2^-7, 1 - ulp/2, +-max finite
        0x7F00, 0x00FF, 0x7F80, 0xFF80,     # 2^127, just under 2^-125, +-inf
        0x7FC0, 0xFFC1, 0x7F81, 0x7FBF,     # quiet NaNs, signalling NaNs
        0x4049, 0x3EAB, 0x4300, 0x437F,     # pi, 1/3, 128, 255
        0x4B00, 0x0101, 0x8040, 0x40C0,     # 2^23, near 2^-125, a negative subnormal, 6
    ], dtype=np.uint32),
}


def edge_pairs() -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(EDGES, EDGES, indexing="ij")
    return a.ravel(), b.ravel()


def numpy_reference(name: str, a, b=None, c=None) -> np.ndarray:
    """The lane op by numpy float32 directly (no canonical NaN): for the numpy comparisons."""
    fa = fp.f32(a)
    fb = fp.f32(b) if b is not None else None
    fc = fp.f32(c) if c is not None else None
    with np.errstate(all="ignore"):
        if name == "ADD":
            r = fa + fb
        elif name == "SUB":
            r = fa - fb
        elif name == "MUL":
            r = fa * fb
        elif name == "MAD":
            r = (fa * fb) + fc
        elif name == "FMA":
            return _exact_fma(a, b, c)
        elif name == "MAX":
            r = np.maximum(fa, fb)
        elif name == "MIN":
            r = np.minimum(fa, fb)
        elif name == "CMPGT":
            return np.where(fa > fb, np.uint32(0xFFFFFFFF), np.uint32(0))
        elif name == "CMPGE":
            return np.where(fa >= fb, np.uint32(0xFFFFFFFF), np.uint32(0))
        elif name == "CMPEQ":
            return np.where(fa == fb, np.uint32(0xFFFFFFFF), np.uint32(0))
        elif name == "SEL":
            return np.where(np.asarray(c) != 0, np.asarray(a, np.uint32), np.asarray(b, np.uint32))
        elif name == "MOV":
            return np.asarray(a, np.uint32)
        else:
            raise KeyError(name)
    return np.asarray(r, np.float32).view(np.uint32)


def _exact_fma(a, b, c) -> np.ndarray:
    """round(a*b + c) to binary32 in exact rational arithmetic, element by element (a reference
    independent of fp.fma's float64 method; NaN for any NaN)."""
    from fractions import Fraction
    out = []
    with np.errstate(all="ignore"):
        for x, y, z in zip(*(fp.f32(v).astype(np.float64).ravel() for v in (a, b, c))):
            if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
                out.append(np.float32(np.float64(x) * y + z))
                continue
            exact = Fraction(x) * Fraction(y) + Fraction(z)
            if exact == 0:
                out.append(np.float32(-0.0 if (x * y == 0 and np.signbit(x * y) and np.signbit(z)) else 0.0))
                continue
            out.append(_round_f32(exact))
    return np.array(out, np.float32).view(np.uint32)


def _round_f32(q) -> np.float32:
    """An exact rational to binary32, round to nearest even (subnormals, overflow to inf)."""
    from fractions import Fraction
    sign = -1 if q < 0 else 1
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    e = max(e, -126)                           # the binade (subnormals: the quantum 2^-149)
    quantum = Fraction(2) ** (e - 23)
    n, rem = divmod(q, quantum)
    n = int(n)
    if rem * 2 > quantum or (rem * 2 == quantum and n % 2):
        n += 1
    v = float(n * quantum) if e - 23 >= -1074 else 0.0
    return np.float32(sign * v) if abs(sign * v) < 2.0 ** 128 else np.float32(sign * np.inf)


def agrees_with_numpy(name: str, got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Element-wise: got (unit) equals ref (numpy) bit for bit, except that any NaN matches
    any NaN (numpy keeps payloads, the unit gives the canonical NaN), and for MAX/MIN a
    +0/-0 tie matches either zero (numpy's choice there is unspecified)."""
    got = np.asarray(got, np.uint32)
    ref = np.asarray(ref, np.uint32)
    ok = got == ref
    ok |= fp.isnan(got) & fp.isnan(ref)
    if name in ("MAX", "MIN"):
        ok |= ((got & 0x7FFFFFFF) == 0) & ((ref & 0x7FFFFFFF) == 0)
    return ok


def lane_program(name: str, dtype: int = isa.F32):
    """A stream program that applies lane op `name` (with `dtype`) to columns of three bank
    streams: p0, p1, p2 -> p3 (so a backend can run one op over big buffers)."""
    slots = isa.OPCODES[name][2]
    srcs = ", ".join(["G0", "G1", "G2"][: len(slots) - 1])
    suffix = f".{isa.DTYPE_NAMES[dtype]}" if dtype else ""
    return assemble(f"""
    top: MOV G0, B[p0+]
         MOV G1, B[p1+]
         MOV G2, B[p2+]
         {name}{suffix} B[p3+], {srcs}
         LOOP c0, top
         EXIT""")


def run_lane_op(backend, name: str, a, b, c, dtype: int = isa.F32) -> np.ndarray:
    """Lane op `name` on 32-bit lane words a, b, c (uint32 arrays) through a backend's bank."""
    L = backend.lanes
    n = len(a)
    cols = -(-n // L)
    region = backend.depth // 4
    out = np.empty(cols * L, np.uint32)
    backend.load_program(lane_program(name, dtype))
    for c0 in range(0, cols, region):
        m = min(region, cols - c0)
        for i, v in enumerate((a, b, c)):
            buf = np.zeros(m * L, np.uint32)
            seg = np.asarray(v, np.uint32)[c0 * L:(c0 + m) * L]
            buf[:seg.size] = seg
            backend.write_bank(i * region, buf.reshape(m, L))
        backend.set_pointers([0, region, 2 * region, 3 * region])
        backend.set_counts([m])
        backend.run()
        out[c0 * L:(c0 + m) * L] = backend.read_bank(3 * region, m).ravel()
    return out[:n]


def skip_without_verilator():
    import pytest

    from pimrt.pim import build
    from pimrt.pim.errors import PimBuildError
    try:
        build.verilator()
    except PimBuildError as exc:
        pytest.skip(str(exc))


@functools.lru_cache(maxsize=None)
def lane_rtl():
    from pimrt.pim.rtl import LaneRtl
    return LaneRtl()


@functools.lru_cache(maxsize=None)
def driver(rows: int = 256, cols: int = 32):
    from pimrt.pim.driver import PimDriver
    return PimDriver(rows=rows, cols=cols)

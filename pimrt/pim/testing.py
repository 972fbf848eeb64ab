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


def lane_program(name: str):
    """A stream program that applies lane op `name` to columns of three bank streams:
    p0, p1, p2 -> p3 (so a backend can run one op over big buffers)."""
    slots = isa.OPCODES[name][2]
    srcs = ", ".join(["G0", "G1", "G2"][: len(slots) - 1])
    return assemble(f"""
    top: MOV G0, B[p0+]
         MOV G1, B[p1+]
         MOV G2, B[p2+]
         {name} B[p3+], {srcs}
         LOOP c0, top
         EXIT""")


def run_lane_op(backend, name: str, a, b, c) -> np.ndarray:
    L = backend.lanes
    n = len(a)
    cols = -(-n // L)
    region = backend.depth // 4
    out = np.empty(cols * L, np.uint32)
    backend.load_program(lane_program(name))
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

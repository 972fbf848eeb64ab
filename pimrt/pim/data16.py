"""16-bit values on the host, as the AMP kernels (pimrt.pim.kernels) take and give them: fp16
as np.float16, bf16 as uint16 bit patterns (numpy has no bfloat16), in the bank two a 32-bit
lane word (element 2i the low half); scalar words; the pair layout of sgd_amp's fp32 streams.
docs/pim.md, "Kernels of an AMP step".
"""
from __future__ import annotations

import numpy as np

from pimrt.pim import fp, isa
from pimrt.pim.errors import PimError


def bits16(a, dtype: str) -> np.ndarray:
    """16-bit values -> their bit patterns (uint16): np.float16 for f16, uint16 patterns as
    they are (bf16's representation), other floats rounded to the dtype (RNE)."""
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return a
    if a.dtype == np.float16 and dtype == "f16":
        return a.view(np.uint16)
    if a.dtype == np.float16:
        raise PimError(f"{dtype} values given as float16; give bf16 as uint16 bit patterns")
    u = np.asarray(a, np.float32).view(np.uint32)
    return fp.narrow16(u, isa.DTYPES[dtype]).astype(np.uint16)


def values16(u, dtype: str) -> np.ndarray:
    """uint16 bit patterns -> what the wrappers return: np.float16 for f16, the uint16
    patterns themselves for bf16 (numpy has no bfloat16)."""
    u = np.asarray(u, np.uint16)
    return u.view(np.float16) if dtype == "f16" else u


def widen(a, dtype: str) -> np.ndarray:
    """Values of `dtype` (f32, or 16-bit as bits16 takes them) -> float32, exactly."""
    if dtype == "f32":
        return np.asarray(a, np.float32)
    return fp.widen16(bits16(a, dtype), isa.DTYPES[dtype]).astype(np.uint32).view(np.float32)


def scalar_word(v, dtype: str) -> np.uint32:
    """A scalar register's word: fp32 bits, or a 16-bit value in both halves."""
    bits = np.asarray([v], np.float32).view(np.uint32)
    if dtype == "f32":
        return bits[0]
    h = fp.narrow16(bits, isa.DTYPES[dtype])[0]
    return np.uint32(h | (h << 16))


def pair_layout(values: np.ndarray, lanes: int) -> np.ndarray:
    """fp32 values (a multiple of 2*lanes) -> the bank order of a kernel that narrows two
    fp32 columns into one 16-bit column (sgd_amp): each 2*lanes values as one column of
    the even ones, then one of the odd ones."""
    return np.ascontiguousarray(np.asarray(values).reshape(-1, lanes, 2).transpose(0, 2, 1)).ravel()


def pair_unlayout(values: np.ndarray, lanes: int) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values).reshape(-1, 2, lanes).transpose(0, 2, 1)).ravel()

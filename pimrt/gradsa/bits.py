"""Vectorised integer codes on numpy arrays: LEB128 varints, fixed-width bit packing and
Rice codes with the unary and remainder parts in two separate streams (so both decode without
a sequential loop). All bit streams are little-endian (bit 0 of byte 0 first)."""
from __future__ import annotations

import numpy as np

from pimrt.gradsa.errors import GradSAError

_U64 = np.uint64


def bit_length(x: np.ndarray) -> np.ndarray:
    """Bits needed for each non-negative integer (0 -> 0)."""
    x = np.asarray(x, dtype=_U64)
    out = np.zeros(x.shape, dtype=np.int64)
    y = x.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        big = y >= (_U64(1) << _U64(shift))
        out[big] += shift
        y[big] >>= _U64(shift)
    out[y > 0] += 1
    return out


# ---------------------------------------------------------------- varint (LEB128)
def varint_sizes(x: np.ndarray) -> np.ndarray:
    return np.maximum(1, (bit_length(x) + 6) // 7)


def varint_encode(x: np.ndarray) -> bytes:
    x = np.asarray(x, dtype=_U64)
    if x.size == 0:
        return b""
    sizes = varint_sizes(x)
    ends = np.cumsum(sizes)
    starts = ends - sizes
    out = np.zeros(int(ends[-1]), dtype=np.uint8)
    for j in range(int(sizes.max())):
        sel = sizes > j
        byte = ((x[sel] >> _U64(7 * j)) & _U64(0x7F)).astype(np.uint8)
        byte[sizes[sel] - 1 > j] |= 0x80
        out[starts[sel] + j] = byte
    return out.tobytes()


def varint_decode(buf: np.ndarray, count: int) -> tuple[np.ndarray, int]:
    """Decode `count` varints from the start of `buf` (uint8); returns (values, bytes used)."""
    if count == 0:
        return np.zeros(0, dtype=_U64), 0
    buf = np.asarray(buf, dtype=np.uint8)
    ends = np.flatnonzero(buf < 0x80)
    if ends.size < count:
        raise GradSAError(f"truncated varint stream: {count} values expected, {ends.size} found")
    used = int(ends[count - 1]) + 1
    b = buf[:used]
    ends = ends[:count]
    starts = np.concatenate(([0], ends[:-1] + 1))
    if int((ends - starts).max()) > 9:
        raise GradSAError("corrupt varint stream: a value longer than 10 bytes")
    pos = np.arange(used) - np.repeat(starts, ends - starts + 1)
    contrib = (b & 0x7F).astype(_U64) << (7 * pos).astype(_U64)
    return np.add.reduceat(contrib, starts), used


def read_varint(buf: memoryview | bytes, offset: int) -> tuple[int, int]:
    """One varint at buf[offset:]; returns (value, new offset)."""
    value = shift = 0
    while True:
        if offset >= len(buf):
            raise GradSAError("truncated payload: varint runs past the end")
        byte = buf[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7
        if shift > 63:
            raise GradSAError("corrupt payload: varint longer than 9 bytes")


def write_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# ---------------------------------------------------------------- fixed-width bit packing
def pack_bits(x: np.ndarray, width: int) -> bytes:
    x = np.asarray(x, dtype=_U64)
    if width == 0 or x.size == 0:
        return b""
    bits = ((x[:, None] >> np.arange(width, dtype=_U64)) & _U64(1)).astype(np.uint8)
    return np.packbits(bits.reshape(-1), bitorder="little").tobytes()


def unpack_bits(buf: np.ndarray, count: int, width: int) -> np.ndarray:
    if width == 0 or count == 0:
        return np.zeros(count, dtype=_U64)
    nbytes = (count * width + 7) // 8
    if len(buf) < nbytes:
        raise GradSAError(f"truncated bit-packed stream: {nbytes} bytes expected, {len(buf)} left")
    bits = np.unpackbits(np.asarray(buf[:nbytes], dtype=np.uint8), bitorder="little")
    bits = bits[: count * width].reshape(count, width).astype(_U64)
    return (bits << np.arange(width, dtype=_U64)).sum(axis=1, dtype=_U64)


# ---------------------------------------------------------------- Rice codes, split streams
def rice_cost_bits(x: np.ndarray, r: int) -> int:
    """Bits of the Rice code of x with parameter r (unary quotient + stop bit + r bits)."""
    x = np.asarray(x, dtype=_U64)
    return int((x >> _U64(r)).sum()) + x.size * (1 + r)


def rice_best_parameter(x: np.ndarray) -> int:
    x = np.asarray(x, dtype=_U64)
    if x.size == 0:
        return 0
    mean = float(x.mean())
    centre = int(np.log2(mean + 1.0))
    candidates = range(max(0, centre - 2), min(62, centre + 3))
    return min(candidates, key=lambda r: rice_cost_bits(x, r))


def rice_encode(x: np.ndarray, r: int) -> tuple[bytes, bytes]:
    """Returns (unary stream, remainder stream)."""
    x = np.asarray(x, dtype=_U64)
    q = (x >> _U64(r)).astype(np.int64)
    total = int(q.sum()) + x.size
    bits = np.zeros(total, dtype=np.uint8)
    bits[np.cumsum(q + 1) - 1] = 1
    unary = np.packbits(bits, bitorder="little").tobytes()
    rem = pack_bits(x & _U64((1 << r) - 1), r)
    return unary, rem


def rice_decode(unary: np.ndarray, rem: np.ndarray, count: int, r: int) -> np.ndarray:
    if count == 0:
        return np.zeros(0, dtype=_U64)
    ones = np.flatnonzero(np.unpackbits(np.asarray(unary, dtype=np.uint8), bitorder="little"))
    if ones.size < count:
        raise GradSAError(f"truncated Rice stream: {count} values expected, {ones.size} found")
    ones = ones[:count]
    q = np.diff(np.concatenate(([-1], ones))) - 1
    return (q.astype(_U64) << _U64(r)) | unpack_bits(rem, count, r)

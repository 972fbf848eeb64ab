"""Byte-exact wire format of a sparse gradient (pure functions on numpy arrays).

A *payload* is what one rank hands to the collective for one DDP bucket:

    payload   := magic 0x47 ('G') | version 0x01 | varint L | record * L
    record    := flags (1 byte) | varint k | [index section | value section]   (sections iff k > 0)
    flags     := index codec (bits 0-1) | value codec << 2 (bits 2-4); bits 5-7 zero

Index section (indices strictly increasing in [0, n); gaps g0 = i0, gj = ij - ij-1 - 1):
    0 varint : k LEB128 varints of the gaps
    1 bitpack: u8 width w | ceil(k*w/8) bytes, gaps packed w bits each, little-endian bit order
    2 rice   : u8 r | varint U | U bytes unary stream (q=g>>r zeros then a one, per gap)
               | ceil(k*r/8) bytes of remainders (g & (2^r-1)) packed r bits each
    3 bitmap : ceil(n/8) bytes, bit i set iff index i is present (k must equal the popcount)
Value section (k values):
    0 fp16 : 2k bytes IEEE half, little-endian
    1 bf16 : 2k bytes, upper halves of the fp32 values (round to nearest even)
    2 int8 : f32 scale | k bytes int8 q, value = q*scale, |q| <= 127
    3 int4 : f32 scale | ceil(k/2) bytes, nibble q+8 (low nibble first), value = q*scale, |q| <= 7
    4 sign : f32 scale | ceil(k/8) bytes, bit set = negative, value = +-scale (scale = mean |v|)
    5 fp32 : 4k bytes

`index codec "auto"` measures the four index encodings of each layer and keeps the smallest.
Encoders return the decoded values too: the hook keeps value - decoded in the residual, so
quantization error is fed back rather than lost.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pimrt.gradsa import bits
from pimrt.gradsa.errors import GradSAError

MAGIC = 0x47
VERSION = 1
INDEX_CODECS = ("varint", "bitpack", "rice", "bitmap")
VALUE_CODECS = ("fp16", "bf16", "int8", "int4", "sign", "fp32")
_LEVELS = {"int8": 127, "int4": 7}


# ---------------------------------------------------------------- values
def encode_values(values: np.ndarray, codec: str) -> tuple[bytes, np.ndarray]:
    """Returns (bytes, the float32 values the receiver will decode)."""
    v = np.ascontiguousarray(values, dtype=np.float32)
    if codec == "fp32":
        return v.astype("<f4").tobytes(), v.copy()
    if codec == "fp16":
        h = np.clip(v, -65504.0, 65504.0).astype("<f2")
        return h.tobytes(), h.astype(np.float32)
    if codec == "bf16":
        u = v.view(np.uint32).astype(np.uint64)
        u16 = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
        return u16.tobytes(), (u16.astype(np.uint32) << 16).view(np.float32)
    if codec in _LEVELS:
        levels = _LEVELS[codec]
        peak = float(np.abs(v).max()) if v.size else 0.0
        scale = np.float32(peak / levels) if peak > 0 else np.float32(0.0)
        q = np.zeros(v.shape, np.int8) if scale == 0 else np.clip(np.rint(v / scale), -levels, levels).astype(np.int8)
        head = np.array([scale], "<f4").tobytes()
        if codec == "int8":
            body = q.tobytes()
        else:
            nib = (q.astype(np.int16) + 8).astype(np.uint8)
            if nib.size % 2:
                nib = np.append(nib, np.uint8(8))
            body = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8).tobytes()
        return head + body, q.astype(np.float32) * scale
    if codec == "sign":
        scale = np.float32(np.abs(v).mean()) if v.size else np.float32(0.0)
        neg = v < 0
        body = np.packbits(neg.astype(np.uint8), bitorder="little").tobytes()
        return np.array([scale], "<f4").tobytes() + body, np.where(neg, -scale, scale).astype(np.float32)
    raise GradSAError(f"unknown value codec {codec!r}; valid: {', '.join(VALUE_CODECS)}")


def value_bytes(k: int, codec: str) -> int:
    return {"fp32": 4 * k, "fp16": 2 * k, "bf16": 2 * k, "int8": 4 + k,
            "int4": 4 + (k + 1) // 2, "sign": 4 + (k + 7) // 8}[codec]


def decode_values(buf: np.ndarray, k: int, codec: str) -> tuple[np.ndarray, int]:
    size = value_bytes(k, codec)
    if len(buf) < size:
        raise GradSAError(f"truncated payload: {codec} values need {size} bytes, {len(buf)} left")
    b = np.asarray(buf[:size], dtype=np.uint8)
    if codec == "fp32":
        return b.view("<f4").astype(np.float32), size
    if codec == "fp16":
        return b.view("<f2").astype(np.float32), size
    if codec == "bf16":
        return (b.view("<u2").astype(np.uint32) << 16).view(np.float32), size
    scale = b[:4].view("<f4")[0]
    body = b[4:]
    if codec == "int8":
        return body.view(np.int8).astype(np.float32) * scale, size
    if codec == "int4":
        nib = np.empty(2 * body.size, np.int16)
        nib[0::2] = body & 0x0F
        nib[1::2] = body >> 4
        return (nib[:k] - 8).astype(np.float32) * scale, size
    neg = np.unpackbits(body, bitorder="little")[:k].astype(bool)
    return np.where(neg, -scale, scale).astype(np.float32), size


# ---------------------------------------------------------------- indices
def gaps_of(indices: np.ndarray) -> np.ndarray:
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size and (idx[0] < 0 or (idx.size > 1 and np.any(np.diff(idx) <= 0))):
        raise GradSAError("indices must be non-negative and strictly increasing")
    return np.diff(idx, prepend=-1).astype(np.uint64) - np.uint64(1)


def index_sizes(gaps: np.ndarray, numel: int) -> dict[str, int]:
    """Encoded byte size of each index codec for these gaps (no encoding performed)."""
    k = gaps.size
    w = max(1, int(bits.bit_length(gaps.max()).item())) if k else 1
    r = bits.rice_best_parameter(gaps)
    unary = (int((gaps >> np.uint64(r)).sum()) + k + 7) // 8
    return {
        "varint": int(bits.varint_sizes(gaps).sum()),
        "bitpack": 1 + (k * w + 7) // 8,
        "rice": 1 + len(bits.write_varint(unary)) + unary + (k * r + 7) // 8,
        "bitmap": (numel + 7) // 8,
    }


def encode_indices(indices: np.ndarray, numel: int, codec: str) -> tuple[str, bytes]:
    gaps = gaps_of(indices)
    if gaps.size and int(indices[-1]) >= numel:
        raise GradSAError(f"index {int(indices[-1])} out of range for a layer of {numel} elements")
    if codec == "auto":
        sizes = index_sizes(gaps, numel)
        codec = min(INDEX_CODECS, key=lambda c: sizes[c])
    if codec == "varint":
        return codec, bits.varint_encode(gaps)
    if codec == "bitpack":
        w = max(1, int(bits.bit_length(gaps.max()).item())) if gaps.size else 1
        return codec, bytes([w]) + bits.pack_bits(gaps, w)
    if codec == "rice":
        r = bits.rice_best_parameter(gaps)
        unary, rem = bits.rice_encode(gaps, r)
        return codec, bytes([r]) + bits.write_varint(len(unary)) + unary + rem
    if codec == "bitmap":
        mask = np.zeros(numel, np.uint8)
        mask[np.asarray(indices, dtype=np.int64)] = 1
        return codec, np.packbits(mask, bitorder="little").tobytes()
    raise GradSAError(f"unknown index codec {codec!r}; valid: auto, {', '.join(INDEX_CODECS)}")


def decode_indices(buf: np.ndarray, k: int, numel: int, codec: str) -> tuple[np.ndarray, int]:
    if codec == "bitmap":
        size = (numel + 7) // 8
        if len(buf) < size:
            raise GradSAError("truncated payload: bitmap shorter than its layer")
        idx = np.flatnonzero(np.unpackbits(np.asarray(buf[:size], np.uint8), bitorder="little")[:numel])
        if idx.size != k:
            raise GradSAError(f"corrupt payload: bitmap holds {idx.size} indices, header says {k}")
        return idx.astype(np.int64), size
    if codec == "varint":
        gaps, used = bits.varint_decode(buf, k)
    elif codec == "bitpack":
        w = int(buf[0])
        gaps, used = bits.unpack_bits(buf[1:], k, w), 1 + (k * w + 7) // 8
    elif codec == "rice":
        r = int(buf[0])
        ulen, off = bits.read_varint(memoryview(buf), 1)
        rlen = (k * r + 7) // 8
        if len(buf) < off + ulen + rlen:
            raise GradSAError("truncated payload: Rice streams run past the end")
        gaps = bits.rice_decode(buf[off:off + ulen], buf[off + ulen:off + ulen + rlen], k, r)
        used = off + ulen + rlen
    else:
        raise GradSAError(f"corrupt payload: index codec {codec!r}")
    idx = np.cumsum(gaps.astype(np.int64) + 1) - 1
    if idx.size and idx[-1] >= numel:
        raise GradSAError(f"corrupt payload: index {int(idx[-1])} beyond a layer of {numel} elements")
    return idx, used


# ---------------------------------------------------------------- records and payloads
@dataclass
class Layer:
    """A decoded sparse layer: sorted indices into the flattened tensor and their values."""
    indices: np.ndarray
    values: np.ndarray
    index_codec: str = ""


def encode_layer(indices, values, numel: int, value_codec: str = "int8",
                 index_codec: str = "auto") -> tuple[bytes, np.ndarray, str]:
    """Encode one layer; returns (record bytes, decoded values, index codec used)."""
    indices = np.asarray(indices, dtype=np.int64)
    values = np.asarray(values, dtype=np.float32)
    if indices.shape != values.shape or indices.ndim != 1:
        raise GradSAError(f"indices {indices.shape} and values {values.shape} must be equal 1-D arrays")
    if value_codec not in VALUE_CODECS:
        raise GradSAError(f"unknown value codec {value_codec!r}; valid: {', '.join(VALUE_CODECS)}")
    k = indices.size
    vcode = VALUE_CODECS.index(value_codec)
    if k == 0:
        return bytes([vcode << 2]) + bits.write_varint(0), values.copy(), "varint"
    used_codec, ibytes = encode_indices(indices, numel, index_codec)
    vbytes, decoded = encode_values(values, value_codec)
    flags = INDEX_CODECS.index(used_codec) | (vcode << 2)
    return bytes([flags]) + bits.write_varint(k) + ibytes + vbytes, decoded, used_codec


def decode_layer(buf: np.ndarray, offset: int, numel: int) -> tuple[Layer, int]:
    if offset >= len(buf):
        raise GradSAError("truncated payload: a layer record is missing")
    flags = int(buf[offset])
    if flags >> 5 or (flags >> 2) >= len(VALUE_CODECS):
        raise GradSAError(f"corrupt payload: bad flags byte 0x{flags:02x} at offset {offset}")
    icodec, vcodec = INDEX_CODECS[flags & 3], VALUE_CODECS[flags >> 2]
    k, off = bits.read_varint(memoryview(buf), offset + 1)
    if k > numel:
        raise GradSAError(f"corrupt payload: {k} values for a layer of {numel} elements")
    if k == 0:
        return Layer(np.zeros(0, np.int64), np.zeros(0, np.float32), icodec), off
    idx, used = decode_indices(buf[off:], k, numel, icodec)
    off += used
    vals, used = decode_values(buf[off:], k, vcodec)
    return Layer(idx, vals, icodec), off + used


def payload_header(num_layers: int) -> bytes:
    return bytes([MAGIC, VERSION]) + bits.write_varint(num_layers)


def decode_payload(buf, numels: list[int]) -> list[Layer]:
    """Decode a whole payload (trailing padding is ignored); `numels` are the layer sizes."""
    buf = np.frombuffer(bytes(buf), np.uint8) if isinstance(buf, (bytes, bytearray)) else np.asarray(buf, np.uint8)
    if len(buf) < 3 or buf[0] != MAGIC or buf[1] != VERSION:
        raise GradSAError("corrupt payload: bad magic or version (not a GradSA payload?)")
    n, off = bits.read_varint(memoryview(buf), 2)
    if n != len(numels):
        raise GradSAError(f"payload holds {n} layers but the bucket has {len(numels)}")
    layers = []
    for numel in numels:
        layer, off = decode_layer(buf, off, numel)
        layers.append(layer)
    return layers


def encode_payload(layers: list[tuple[np.ndarray, np.ndarray, int]], value_codec: str = "int8",
                   index_codec: str = "auto") -> tuple[bytes, list[np.ndarray]]:
    """Encode [(indices, values, numel), ...]; returns (payload, decoded values per layer)."""
    parts, decoded = [payload_header(len(layers))], []
    for idx, vals, numel in layers:
        rec, dec, _ = encode_layer(idx, vals, numel, value_codec, index_codec)
        parts.append(rec)
        decoded.append(dec)
    return b"".join(parts), decoded

"""Synthetic traces, generated chunk by chunk (never a whole trace of Python objects).

Each function returns a SyntheticTrace: iterable of RECORD_DTYPE chunks with layer_names, like
an open file trace, so it can go to memctl or to write_trace() directly.

stream, random and mix are exactly the traces of /work/shared/reference/make_traces.py (the
DRAM reference figures): 64-byte requests, every arrival cycle 0 (drain mode):
  stream(n):  address 64*i, all reads
  random(n):  64 * numpy.random.default_rng(42).integers(0, 2**26, n, dtype=uint64), all reads
  mix(n):     address 64*i, every third request (i % 3 == 2) a write
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from pimrt.trace.records import HOST, LAYER, PIM, READ, RECORD_DTYPE, WRITE

_BLOCK = 1 << 16  # generation block; even, so chunked integers() equal one big call


class SyntheticTrace:
    """An iterable of record chunks made by a generator function (re-iterable)."""

    format = "synthetic"
    path = None

    def __init__(self, make: Callable[[], Iterator[np.ndarray]], layer_names=(),
                 chunk_records: int = 1 << 16, description: str = ""):
        self._make = make
        self.layer_names = list(layer_names)
        self.chunk_records = int(chunk_records)
        self.description = description

    def __iter__(self) -> Iterator[np.ndarray]:
        from pimrt.trace import rechunk
        return rechunk(self._make(), self.chunk_records)

    def records(self) -> np.ndarray:
        chunks = list(self)
        return np.concatenate(chunks) if chunks else np.zeros(0, RECORD_DTYPE)

    def __repr__(self) -> str:
        return f"SyntheticTrace({self.description!r})"


def _ops(pattern: str, index: np.ndarray) -> np.ndarray:
    if pattern in ("read", "stream", "random"):
        return np.full(len(index), READ, np.uint8)
    if pattern == "write":
        return np.full(len(index), WRITE, np.uint8)
    if pattern == "mix":
        return np.where(index % 3 == 2, WRITE, READ).astype(np.uint8)
    raise ValueError(f"unknown op pattern {pattern!r} (read, write or mix)")


def stream(n: int, op_pattern: str = "read", base: int = 0, stride: int = 64,
           chunk_records: int = 1 << 16) -> SyntheticTrace:
    """n requests at base + stride*i; op_pattern: read, write or mix (i % 3 == 2 writes)."""
    _ops(op_pattern, np.zeros(0, np.uint64))  # validate now

    def make():
        for lo in range(0, n, _BLOCK):
            i = np.arange(lo, min(n, lo + _BLOCK), dtype=np.uint64)
            out = np.zeros(len(i), RECORD_DTYPE)
            out["addr"] = np.uint64(base) + i * np.uint64(stride)
            out["op"] = _ops(op_pattern, i)
            yield out
    return SyntheticTrace(make, (), chunk_records, f"stream({n}, {op_pattern!r})")


def mix(n: int, chunk_records: int = 1 << 16) -> SyntheticTrace:
    """make_traces.py's mix: address 64*i, i % 3 == 2 writes."""
    t = stream(n, "mix", chunk_records=chunk_records)
    t.description = f"mix({n})"
    return t


def random(n: int, seed: int = 42, capacity: int = 1 << 32, op_pattern: str = "read",
           request_bytes: int = 64, chunk_records: int = 1 << 16) -> SyntheticTrace:
    """n requests at request_bytes * default_rng(seed).integers(0, capacity // request_bytes)."""
    _ops(op_pattern, np.zeros(0, np.uint64))
    slots = capacity // request_bytes
    if slots < 1:
        raise ValueError("capacity smaller than one request")

    def make():
        rng = np.random.default_rng(seed)
        for lo in range(0, n, _BLOCK):
            m = min(n, lo + _BLOCK) - lo
            out = np.zeros(m, RECORD_DTYPE)
            out["addr"] = rng.integers(0, slots, size=m, dtype=np.uint64) * \
                np.uint64(request_bytes)
            out["op"] = _ops(op_pattern, np.arange(lo, lo + m, dtype=np.uint64))
            yield out
    return SyntheticTrace(make, (), chunk_records, f"random({n}, seed={seed})")


def host_pim_interleave(n: int, part=None, layers: int = 4, pim_fraction: float = 0.5,
                        host_base: int = 0, pim_row_base: int | None = None,
                        pim_write_every: int = 0, cycle_step: int = 0,
                        chunk_records: int = 1 << 16) -> SyntheticTrace:
    """n requests in `layers` layers (each opened by a LAYER marker, names layer0..), host and
    PIM interleaved evenly (a fraction pim_fraction of them PIM).

    Host: a read stream at host_base + 64*k. PIM: an all-bank stream that walks the columns of
    a row, then the channels, then the rows from pim_row_base (default: the upper half of the
    rows), bank group 0 / bank 0 in the address (a PIM request acts on every bank in scope).
    Every pim_write_every-th PIM request (0: none) is a write. Arrival cycle: cycle_step * i
    for the i-th request (0: all at cycle 0). part: a Part or a name (default hbm2_pim).
    """
    from pimrt.memctl.config import encode_address, load_part

    if not 0.0 <= pim_fraction <= 1.0:
        raise ValueError("pim_fraction must be within 0..1")
    if layers < 1:
        raise ValueError("layers must be at least 1")
    p = load_part(part or "hbm2_pim") if part is None or isinstance(part, str) else part
    cols = p.columns_per_row
    chans = p.org["channels"]
    rows = p.org["rows"]
    row0 = rows // 2 if pim_row_base is None else pim_row_base
    names = [f"layer{k}" for k in range(layers)]
    bounds = [n * k // layers for k in range(layers + 1)]

    def make():
        for k in range(layers):
            marker = np.zeros(1, RECORD_DTYPE)
            marker["op"], marker["value"] = LAYER, k
            yield marker
            for lo in range(bounds[k], bounds[k + 1], _BLOCK):
                hi = min(bounds[k + 1], lo + _BLOCK)
                i = np.arange(lo, hi, dtype=np.int64)
                # request i is PIM when floor((i+1) f) > floor(i f): evenly spread
                is_pim = np.floor((i + 1) * pim_fraction) > np.floor(i * pim_fraction)
                j = np.floor(i * pim_fraction).astype(np.int64)   # PIM requests before i
                h = i - j                                          # host requests before i
                out = np.zeros(len(i), RECORD_DTYPE)
                out["cycle"] = (i * cycle_step).astype(np.uint64)
                col = j % cols
                ch = (j // cols) % chans
                row = (row0 + j // (cols * chans)) % rows
                pim_addr = encode_address(p, channel=ch, row=row, column=col)
                out["addr"] = np.where(is_pim, pim_addr,
                                       np.uint64(host_base) + h.astype(np.uint64) * np.uint64(64))
                out["requestor"] = np.where(is_pim, PIM, HOST)
                ops = np.full(len(i), READ, np.uint8)
                if pim_write_every:
                    ops[is_pim & ((j + 1) % pim_write_every == 0)] = WRITE
                out["op"] = ops
                yield out
    return SyntheticTrace(make, names, chunk_records,
                          f"host_pim_interleave({n}, layers={layers}, pim={pim_fraction})")


__all__ = ["SyntheticTrace", "stream", "random", "mix", "host_pim_interleave"]

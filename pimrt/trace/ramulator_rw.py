"""Ramulator 2's read/write trace (`--format ramulator_rw`; its ReadWriteTrace front end):
`R v0,v1,...` or `W v0,v1,...`, one request a line, all from the host, arrival cycle 0.

The vector gives DRAM coordinates, not a byte address: one decimal number per level of the
part's organisation in Ramulator 2's order, for HBM parts `channel,pseudochannel,bankgroup,
bank,row,column` (Ramulator 2's HBM2 levels) and for the others `channel,rank,bankgroup,bank,
row,column` (its DDR4 levels). The column counts requests (bursts), as Ramulator 2's mappers
give it (the device column divided by the prefetch). Reading and writing therefore need the
memory part (`pimrt memsim --config`, `open_trace(part=...)`); each vector becomes the byte
address the part's mapping decodes into those coordinates. Writing drops markers and cycles
and refuses PIM requests.
"""
from __future__ import annotations

import pathlib

import numpy as np

from pimrt.trace import _textparse as tp
from pimrt.trace.dramsim3 import host_requests_only
from pimrt.trace import records as _records   # (RECORD_DTYPE: made on first use)
from pimrt.trace.records import HOST, READ, WRITE
from pimrt.trace._writer import TraceWriter

NAME = "ramulator_rw"
EXTENSIONS = ()
PRIORITY = 34
DESCRIPTION = "Ramulator 2 read/write trace: 'R|W ch,ra|pc,bg,ba,row,col' lines, all host"

OP_WORDS = {b"r": READ, b"w": WRITE}
# level name -> (address field code, decode_address key, organisation count)
_LEVELS = {
    "channel": ("ch", "channel"), "pseudochannel": ("pc", "pseudo_channel"),
    "rank": ("ra", "rank"), "bankgroup": ("bg", "bankgroup"), "bank": ("ba", "bank"),
    "row": ("ro", "row"), "column": ("co", "column"),
}


def sniff(tokens: list[bytes]) -> bool:
    if len(tokens) != 2 or tokens[0].lower() not in OP_WORDS:
        return False
    parts = tokens[1].split(b",")
    return len(parts) >= 2 and all(p.isdigit() for p in parts)


def levels(part) -> list[str]:
    """The part's levels in Ramulator 2's order."""
    hbm = part.standard.upper().startswith("HBM")
    return ["channel", "pseudochannel" if hbm else "rank", "bankgroup", "bank", "row", "column"]


class Layout:
    """How a vector maps to a byte address on one part."""

    def __init__(self, part):
        self.part = part
        self.names = levels(part)
        o = part.org
        counts = {"channel": o["channels"], "pseudochannel": o["pseudo_channels"],
                  "rank": o["ranks"], "bankgroup": o["bankgroups"],
                  "bank": o["banks_per_group"], "row": o["rows"],
                  "column": part.columns_per_row}
        implied = [n for n in ("pseudochannel", "rank") if n not in self.names and counts[n] > 1]
        if implied:
            raise tp.TraceError(
                f"part {part.name}: Ramulator 2's {'/'.join(self.names)} vectors have no "
                f"{implied[0]} level, but the part has {counts[implied[0]]} of them")
        self.counts = np.array([counts[n] for n in self.names], dtype=np.uint64)
        self.shifts = None
        if part.bit_fields:
            shifts = part.field_shifts()
            self.shifts = np.array([shifts[_LEVELS[n][0]][0] for n in self.names],
                                   dtype=np.uint64)
        self.text = ",".join(self.names)

    def encode(self, vec: np.ndarray) -> np.ndarray:
        """(n, levels) uint64 coordinates -> byte addresses (a part whose channels are not a
        power of two: its mixed radix, pimrt.memctl.config.encode_address)."""
        if not len(vec):
            return np.zeros(0, np.uint64)
        if self.shifts is not None:
            return np.bitwise_or.reduce(vec << self.shifts, axis=1)
        from pimrt.memctl.config import encode_address
        return encode_address(self.part, **{_LEVELS[n][1]: vec[:, i].astype(np.int64)
                                            for i, n in enumerate(self.names)})


def _layout(state: tp.ReadState) -> Layout:
    lay = getattr(state, "_rw_layout", None)
    if lay is None:
        if state.part is None:
            raise tp.trace_error(state, None, None, "the ramulator_rw format gives DRAM "
                                 "coordinates, not addresses: give the memory part "
                                 "(pimrt memsim --config, open_trace(part=...))")
        lay = state._rw_layout = Layout(state.part)
    return lay


def parse_line(toks: list[bytes], text: bytes, line: int, state: tp.ReadState) -> list[tuple]:
    lay = _layout(state)
    if len(toks) != 2:
        raise tp.trace_error(state, line, None, f"expected 2 fields 'R|W {lay.text}', found "
                             f"{len(toks)}")
    op = OP_WORDS.get(toks[0].lower())
    if op is None:
        raise tp.trace_error(state, line, "op", f"unknown op {tp.show(toks[0])} (R or W)")
    parts = toks[1].split(b",")
    if len(parts) != len(lay.names):
        raise tp.trace_error(state, line, "vector", f"address vector {tp.show(toks[1])} has "
                             f"{len(parts)} numbers; part {lay.part.name} needs "
                             f"{len(lay.names)}: {lay.text}")
    vec = []
    for name, p, count in zip(lay.names, parts, lay.counts.tolist()):
        v = tp.parse_uint_token(p, "dec")
        if v is None:
            raise tp.trace_error(state, line, name, f"{name} {tp.show(p)} is not a "
                                 f"non-negative integer")
        if v >= count:
            raise tp.trace_error(state, line, name, f"{name} {v} is out of range: part "
                                 f"{lay.part.name} has {name} 0..{count - 1}")
        vec.append(v)
    addr = int(lay.encode(np.array([vec], dtype=np.uint64))[0])
    return [(0, addr, 0, op, HOST, 0)]


def parse_fast(block: bytes, first_line: int, state: tp.ReadState) -> np.ndarray | None:
    lay = _layout(state)
    k = len(lay.names)
    cols = tp.fixed_columns(block, 2)
    if cols is None:
        return None
    t, s, e = cols
    n = len(s)
    if block.count(b",") != n * (k - 1):     # each vector exactly k numbers (checked below)
        return None
    vcols = tp.fixed_columns(block.replace(b",", b" "), 1 + k)
    if vcols is None:
        return None
    tv, sv, ev = vcols
    ops = tp.match_words(t, s[:, 0], e[:, 0], OP_WORDS)
    vals, ok = tp.parse_uint_vec(tv, sv[:, 1:].ravel(), ev[:, 1:].ravel(), "dec")
    if not (ok.all() and (ops >= 0).all()):
        return None
    vec = vals.reshape(n, k)
    if (vec >= lay.counts).any():
        return None
    out = np.zeros(n, _records.RECORD_DTYPE)
    out["addr"], out["op"] = lay.encode(vec), ops
    return out


def read(path: pathlib.Path, state: tp.ReadState, chunk_records: int = 1 << 16):
    _layout(state)
    return tp.read_text(path, state, parse_line, parse_fast)


class Writer(TraceWriter):
    """Needs the part: open_writer(path, "ramulator_rw", part=part)."""

    def __init__(self, path, layer_names=None, part=None):
        if part is None:
            raise tp.TraceError(f"{path}: writing the ramulator_rw format needs the memory "
                                f"part (its lines are DRAM coordinates)")
        self.layout = Layout(part)
        super().__init__(path, layer_names)

    def write(self, records: np.ndarray) -> None:
        from pimrt.memctl.config import decode_address
        req = host_requests_only(records, str(self.path), NAME)
        if self.layout.part.capacity_bytes <= int(req["addr"].max(initial=0)) and len(req):
            raise tp.TraceError(f"{self.path}: an address is beyond part "
                                f"{self.layout.part.name}'s capacity")
        if len(req) and (req["addr"] % np.uint64(self.layout.part.request_bytes)).any():
            raise tp.TraceError(f"{self.path}: the ramulator_rw format has whole requests only; "
                                f"an address is not a multiple of "
                                f"{self.layout.part.request_bytes} bytes")
        fields = decode_address(self.layout.part, req["addr"])
        cols = [fields[_LEVELS[n][1]].astype(str) for n in self.layout.names]
        vec = cols[0]
        for c in cols[1:]:
            vec = np.char.add(np.char.add(vec, ","), c)
        ops = np.where(req["op"] == WRITE, "W ", "R ")
        if len(req):
            self._f.write("\n".join(np.char.add(ops, vec).tolist()) + "\n")
        self.count += len(req)

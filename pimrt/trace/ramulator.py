"""Ramulator 2.0's load/store trace (`--format ramulator`): `LD 0xADDR` or `ST 0xADDR`, one
request a line, all from the host, arrival cycle 0 (the format has no cycle field).

The address is `0x..` hexadecimal or decimal, as Ramulator 2.0's LoadStoreTrace reads it.
Writing drops markers and cycles and refuses PIM requests.
"""
from __future__ import annotations

import pathlib

import numpy as np

from pimrt.trace import _textparse as tp
from pimrt.trace.dramsim3 import host_requests_only
from pimrt.trace.records import HOST, READ, WRITE
from pimrt.trace._writer import TraceWriter

NAME = "ramulator"
EXTENSIONS = ()
PRIORITY = 30
DESCRIPTION = "Ramulator 2.0 load/store: 'LD|ST 0xADDR' lines, all host, cycle 0"

OP_WORDS = {b"ld": READ, b"st": WRITE}


def sniff(tokens: list[bytes]) -> bool:
    return len(tokens) == 2 and tokens[0].lower() in OP_WORDS


def parse_line(toks: list[bytes], text: bytes, line: int, state: tp.ReadState) -> list[tuple]:
    if len(toks) != 2:
        raise tp.trace_error(state, line, None, f"expected 2 fields 'LD|ST 0xADDR', found "
                             f"{len(toks)}")
    op = OP_WORDS.get(toks[0].lower())
    if op is None:
        o = toks[0].decode("utf-8", "replace")
        raise tp.trace_error(state, line, "op", f"unknown op {o!r} (LD or ST)")
    addr = tp.scalar_addr(state, toks[1], line)
    return [(0, addr, 0, op, HOST, 0)]


def parse_fast(block: bytes, first_line: int, state: tp.ReadState) -> np.ndarray | None:
    return tp.c_parse(block, first_line, state, NAME)


def read(path: pathlib.Path, state: tp.ReadState, chunk_records: int = 1 << 16,
         start: tuple[int, int] = (0, 1)):
    return tp.read_c_text(path, state, NAME, parse_line, chunk_records, start=start)


class Writer(TraceWriter):
    def write(self, records: np.ndarray) -> None:
        req = host_requests_only(records, str(self.path), NAME)
        ops = np.where(req["op"] == WRITE, "ST", "LD").tolist()
        self._f.write("".join([f"{o} 0x{a:x}\n" for o, a in zip(ops, req["addr"].tolist())]))
        self.count += len(req)

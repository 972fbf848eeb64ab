"""Ramulator 1's DRAM trace (`--format ramulator_dram`; Ramulator's `--mode=dram`, and what
DRAMsim3's scripts/trace_gen.py writes with `-f ramulator`): `0xADDR R` or `0xADDR W`, one
request a line, all from the host, arrival cycle 0 (the format has no cycle field; Ramulator
offers the requests as fast as the controller takes them).

The address is hexadecimal with or without `0x` (Ramulator reads it with base 16, so `1000` is
0x1000); the op is `R` or `W` (any case), and a line with the address alone is a read, as
Ramulator reads it. Writing drops markers and cycles and refuses PIM requests.
"""
from __future__ import annotations

import pathlib

import numpy as np

from pimrt.trace import _textparse as tp
from pimrt.trace.dramsim3 import host_requests_only
from pimrt.trace.records import HOST, READ, WRITE
from pimrt.trace._writer import TraceWriter

NAME = "ramulator_dram"
EXTENSIONS = ()
PRIORITY = 32
DESCRIPTION = "Ramulator 1 DRAM trace: '0xADDR R|W' lines, all host, cycle 0"

OP_WORDS = {b"r": READ, b"w": WRITE}


def sniff(tokens: list[bytes]) -> bool:
    if len(tokens) == 2:
        return tokens[1].lower() in OP_WORDS and tp.parse_uint_token(tokens[0], "hex") is not None
    return len(tokens) == 1 and tp.parse_uint_token(tokens[0], "hex") is not None


def parse_line(toks: list[bytes], text: bytes, line: int, state: tp.ReadState) -> list[tuple]:
    if len(toks) not in (1, 2):
        raise tp.trace_error(state, line, None, f"expected 2 fields '0xADDR R|W', found "
                             f"{len(toks)}")
    addr = tp.scalar_addr(state, toks[0], line, mode="hex")
    op = READ
    if len(toks) == 2:
        op = OP_WORDS.get(toks[1].lower())
        if op is None:
            raise tp.trace_error(state, line, "op", f"unknown op {tp.show(toks[1])} (R or W)")
    return [(0, addr, 0, op, HOST, 0)]


def parse_fast(block: bytes, first_line: int, state: tp.ReadState) -> np.ndarray | None:
    return tp.c_parse(block, first_line, state, NAME)


def read(path: pathlib.Path, state: tp.ReadState, chunk_records: int = 1 << 16,
         start: tuple[int, int] = (0, 1)):
    return tp.read_c_text(path, state, NAME, parse_line, chunk_records, start=start)


class Writer(TraceWriter):
    def write(self, records: np.ndarray) -> None:
        req = host_requests_only(records, str(self.path), NAME)
        ops = np.where(req["op"] == WRITE, "W", "R").tolist()
        self._f.write("".join([f"0x{a:x} {o}\n" for a, o in zip(req["addr"].tolist(), ops)]))
        self.count += len(req)

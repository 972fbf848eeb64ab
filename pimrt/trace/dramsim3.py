"""DRAMsim3's trace format (`--format dramsim3`): `0xADDR READ|WRITE cycle`, one request a
line, all from the host.

The address is hexadecimal with or without `0x`, as DRAMsim3 reads it (`std::hex`); the op is
READ or WRITE (any case; DRAMsim3's P_MEM_RD and P_MEM_WR are accepted too); the arrival cycle
is decimal. Writing drops markers (the format has none) and refuses PIM requests.
"""
from __future__ import annotations

import pathlib

import numpy as np

from pimrt.trace import _textparse as tp
from pimrt.trace.records import HOST, READ, WRITE
from pimrt.trace._writer import TraceWriter

NAME = "dramsim3"
EXTENSIONS = ()
PRIORITY = 20
DESCRIPTION = "DRAMsim3: '0xADDR READ|WRITE cycle' lines, all host"

OP_WORDS = {b"read": READ, b"write": WRITE, b"p_mem_rd": READ, b"p_mem_wr": WRITE}


def sniff(tokens: list[bytes]) -> bool:
    return len(tokens) == 3 and tokens[1].lower() in OP_WORDS


def parse_line(toks: list[bytes], text: bytes, line: int, state: tp.ReadState) -> list[tuple]:
    if len(toks) != 3:
        raise tp.trace_error(state, line, None, f"expected 3 fields '0xADDR READ|WRITE "
                             f"cycle', found {len(toks)}")
    addr = tp.scalar_addr(state, toks[0], line, mode="hex")
    op = OP_WORDS.get(toks[1].lower())
    if op is None:
        o = toks[1].decode("utf-8", "replace")
        raise tp.trace_error(state, line, "op", f"unknown op {o!r} (READ or WRITE)"
                             + tp.suggest(o.upper(), ["READ", "WRITE"]))
    cycle = tp.scalar_cycle(state, toks[2], line)
    tp.check_order(state, cycle, line)
    return [(cycle, addr, 0, op, HOST, 0)]


def parse_fast(block: bytes, first_line: int, state: tp.ReadState) -> np.ndarray | None:
    return tp.c_parse(block, first_line, state, NAME)


def read(path: pathlib.Path, state: tp.ReadState, chunk_records: int = 1 << 16,
         start: tuple[int, int] = (0, 1)):
    return tp.read_c_text(path, state, NAME, parse_line, chunk_records, start=start)


def host_requests_only(records: np.ndarray, where: str, fmt: str) -> np.ndarray:
    """The request records of a chunk; PIM requests are an error, markers are dropped."""
    req = records[records["op"] <= WRITE]
    if (req["requestor"] != HOST).any():
        raise tp.trace_error(where, None, "requestor", f"the {fmt} format has host requests "
                             f"only; the records hold PIM requests")
    return req


class Writer(TraceWriter):
    def write(self, records: np.ndarray) -> None:
        req = host_requests_only(records, str(self.path), NAME)
        ops = np.where(req["op"] == WRITE, "WRITE", "READ").tolist()
        self._f.write("".join([f"0x{a:x} {o} {c}\n" for a, o, c in
                               zip(req["addr"].tolist(), ops, req["cycle"].tolist())]))
        self.count += len(req)

"""Ramulator's CPU trace (`--format ramulator_cpu`), read only:
`<non-memory instructions> <load address> [<writeback address>]` per line.

Each line gives a host READ of the load address and, when a third field is present, a host
WRITE of the writeback address. Addresses are `0x..` hexadecimal or decimal. The instruction
count is checked (a non-negative integer) but dropped: the records' arrival cycle is 0, since
CPU instructions are not memory cycles. This reader goes line by line (about 1 M lines/s).
"""
from __future__ import annotations

import pathlib

from pimrt.trace import _textparse as tp
from pimrt.trace.records import HOST, READ, WRITE

NAME = "ramulator_cpu"
EXTENSIONS = ()
PRIORITY = 40
DESCRIPTION = "Ramulator CPU trace: 'N ADDR [WBADDR]' lines -> host READ (+ WRITE), cycle 0"
WRITABLE = False


def sniff(tokens: list[bytes]) -> bool:
    return len(tokens) in (2, 3) and all(tp.parse_uint_token(t, "auto") is not None
                                          for t in tokens)


def parse_line(toks: list[bytes], text: bytes, line: int, state: tp.ReadState) -> list[tuple]:
    if len(toks) not in (2, 3):
        raise tp.trace_error(state, line, None, f"expected 2 or 3 fields 'count address "
                             f"[writeback-address]', found {len(toks)}")
    if tp.parse_uint_token(toks[0], "dec") is None:
        raise tp.trace_error(state, line, "count", f"instruction count {tp.show(toks[0])} is "
                             f"not a non-negative integer")
    out = [(0, tp.scalar_addr(state, toks[1], line), 0, READ, HOST, 0)]
    if len(toks) == 3:
        out.append((0, tp.scalar_addr(state, toks[2], line, field="writeback address"), 0,
                    WRITE, HOST, 0))
    return out


def records_in_line(tokens: list[bytes]) -> int:
    """Records a data line gives (a READ, and a WRITE with a writeback address): how
    `pimrt memsim` turns memctl's record index back into the line."""
    return 2 if len(tokens) == 3 else 1


def read(path: pathlib.Path, state: tp.ReadState, chunk_records: int = 1 << 16):
    return tp.read_text(path, state, parse_line, None)

"""Shared machinery of the text trace formats: block reading, the per-line fallback parser, the
C reader's driver, and error reporting (the vectorised tokenising and number parsing are in
_textvec, reached as tp.tokenize etc.).

A text reader works on blocks of whole lines (about BLOCK_BYTES each). Each block first goes
through the format's vectorised parser (numpy over the block's bytes); when that one meets
anything unusual (a malformed line, an out-of-order cycle, a number it cannot convert), it gives
up on the block and the per-line parser, which is authoritative, reads the block again and
raises the precise error. Both produce identical records for valid input (tests check it).
"""
from __future__ import annotations

import dataclasses
import difflib
import pathlib
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import numpy as np   # (imported lazily by pimrt memsim: no numpy at module level here)

from pimrt.errors import TraceError
from pimrt.trace import records as _records   # (RECORD_DTYPE: made on first use)

if TYPE_CHECKING:
    from pimrt.trace._textvec import Tokens

#: the vectorised tokenizer and number parsers, in _textvec (numpy): tp.tokenize etc.
_VECTOR = ("Tokens", "tokenize", "parse_uint_vec", "match_words")


def __getattr__(name: str):
    if name in _VECTOR:
        from pimrt.trace import _textvec
        return getattr(_textvec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


BLOCK_BYTES = 1 << 20
MAX_LINE_BYTES = 1 << 20  # a longer line is an error, not a reason to read the file whole



# ---------------------------------------------------------------------------------------------
# state and errors
@dataclasses.dataclass
class ReadState:
    """What a reader carries from block to block."""

    path: pathlib.Path
    display: str                      # how errors name the file
    layer_names: list[str]
    capacity_bytes: int | None = None
    part: object = None               # the memory part, for formats of DRAM coordinates
    last_cycle: int = 0               # arrival cycle of the last request read
    last_line: int = 0                # its line (or record) number, for the error message
    layer_index: dict = dataclasses.field(default_factory=dict)
    reached: tuple = (0, 1)           # where reading got to: byte offset, number of its line

    def layer_id(self, name: str) -> int:
        i = self.layer_index.get(name)
        if i is None:
            i = self.layer_index[name] = len(self.layer_names)
            self.layer_names.append(name)
        return i

    def snapshot(self):
        return (self.last_cycle, self.last_line, len(self.layer_names))

    def restore(self, snap) -> None:
        self.last_cycle, self.last_line, n = snap
        for name in self.layer_names[n:]:
            del self.layer_index[name]
        del self.layer_names[n:]


def trace_error(state_or_path, line: int | None, field: str | None, msg: str,
                unit: str = "") -> TraceError:
    display = state_or_path.display if isinstance(state_or_path, ReadState) else \
        str(state_or_path)
    where = display if line is None else f"{display}:{unit}{line}"
    err = TraceError(f"{where}: {msg}")
    err.path, err.line, err.field = display, line, field
    return err


def suggest(name: str, known: Sequence[str]) -> str:
    hint = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {hint[0]!r}?" if hint else ""


def show(tok: bytes | str) -> str:
    if isinstance(tok, bytes):
        tok = tok.decode("utf-8", "replace")
    return repr(tok) if len(tok) <= 40 else repr(tok[:37] + "...")


# ---------------------------------------------------------------------------------------------
# scalar (per-line) parsing
def parse_uint_token(tok: bytes, mode: str) -> int | None:
    """mode 'auto': 0x.. hex else decimal; 'hex': hex with or without 0x; 'dec': decimal."""
    try:
        if mode == "dec":
            if not tok.isdigit():
                return None
            return int(tok)
        if tok[:2] in (b"0x", b"0X"):
            digits, base = tok[2:], 16
        else:
            digits, base = tok, (16 if mode == "hex" else 10)
        if not digits or not all(c in b"0123456789abcdefABCDEF" for c in digits):
            return None
        if base == 10 and not digits.isdigit():
            return None
        return int(digits, base)
    except ValueError:
        return None


def scalar_cycle(state: ReadState, tok: bytes, line: int) -> int:
    v = parse_uint_token(tok, "dec")
    if v is None:
        raise trace_error(state, line, "cycle", f"cycle {show(tok)} is not a non-negative "
                          f"integer")
    if v >= 1 << 64:
        raise trace_error(state, line, "cycle", f"cycle {show(tok)} is too large (64 bits)")
    return v


def scalar_addr(state: ReadState, tok: bytes, line: int, mode: str = "auto",
                field: str = "address") -> int:
    v = parse_uint_token(tok, mode)
    if v is None:
        kind = "a hexadecimal" if mode == "hex" else "a hexadecimal or decimal"
        raise trace_error(state, line, field, f"{field} {show(tok)} is not {kind} number")
    if v >= 1 << 64:
        raise trace_error(state, line, field, f"{field} {show(tok)} is too large (64 bits)")
    cap = state.capacity_bytes
    if cap is not None and v >= cap:
        raise trace_error(state, line, field, f"{field} {show(tok)} is beyond the memory's "
                          f"capacity of {cap} bytes (0x{cap:x})")
    return v


def check_order(state: ReadState, cycle: int, line: int, unit: str = "") -> None:
    if cycle < state.last_cycle:
        raise trace_error(state, line, "cycle", f"arrival cycle {cycle} is earlier than "
                          f"{state.last_cycle} of the request before it (line "
                          f"{state.last_line}): requests must be in arrival order", unit)
    state.last_cycle, state.last_line = cycle, line


# ---------------------------------------------------------------------------------------------
# streams
class Stream:
    """A text trace that is not a regular file (`-`: standard input, /dev/stdin or a FIFO on a
    pipe, a character device): read once, front to back, with no seeking. What format
    detection peeks at stays in `head` and is read first."""

    def __init__(self, path: pathlib.Path, display: str):
        import sys
        self.path, self.display = path, display
        self.head = b""
        self.taken = False
        self._own = str(path) != "-"
        try:
            self.file = open(path, "rb") if self._own else sys.stdin.buffer
        except OSError as exc:
            raise trace_error(display, None, None, f"cannot read: {exc.strerror or exc}") \
                from None

    def peek(self, n: int) -> bytes:
        while len(self.head) < n:
            data = self.file.read(n - len(self.head))
            if not data:
                break
            self.head += data
        return self.head[:n]

    def take(self) -> "Stream":
        """The stream for its one reader; a second reader is refused."""
        if self.taken:
            raise trace_error(self.display, None, None, "a stream (standard input, a pipe or "
                              "FIFO) can be read once; write the trace to a file to read it "
                              "again")
        self.taken = True
        return self

    def read(self, n: int) -> bytes:
        if self.head:
            data, self.head = self.head[:n], self.head[n:]
            return data
        return self.file.read(n)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self._own:
            self.file.close()


# ---------------------------------------------------------------------------------------------
# blocks and tokens
def iter_blocks(path: "pathlib.Path | Stream", display: str, block_bytes: int | None = None,
                start: tuple[int, int] = (0, 1), state: ReadState | None = None,
                ) -> Iterator[tuple[int, bytes]]:
    """(number of the block's first line, 1-based; bytes of whole lines), from start: the
    byte offset of a line and its number. state.reached follows where the reading got to."""
    block_bytes = block_bytes or BLOCK_BYTES
    offset, line = start
    rest = b""
    with (path.take() if isinstance(path, Stream) else open(path, "rb")) as f:
        if offset:
            f.seek(offset)
        while True:
            data = f.read(block_bytes)
            if not data:
                if rest:
                    if state is not None:
                        state.reached = (offset + len(rest), line + rest.count(b"\n"))
                    yield line, rest
                return
            data = rest + data if rest else data
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) > MAX_LINE_BYTES:
                    raise trace_error(display, line, None, f"line longer than "
                                      f"{MAX_LINE_BYTES} bytes: not a text trace?")
                rest = data
                continue
            block, rest = data[:cut + 1], data[cut + 1:]
            offset += len(block)
            if state is not None:
                state.reached = (offset, line + block.count(b"\n"))
            yield line, block
            line += block.count(b"\n")


# ---------------------------------------------------------------------------------------------
# driver
LineParser = Callable[[list[bytes], bytes, int, ReadState], list[tuple]]
FastParser = Callable[[bytes, int, ReadState], "np.ndarray | None"]


def parse_block_slow(block: bytes, first_line: int, state: ReadState,
                     parse_line: LineParser) -> np.ndarray:
    """The authoritative per-line parser. parse_line(tokens, text, line, state) returns record
    tuples (cycle, addr, value, op, requestor, param) and raises TraceError."""
    out: list[tuple] = []
    for i, raw in enumerate(block.split(b"\n")):
        text = raw.split(b"#", 1)[0]
        toks = text.split()
        if not toks:
            continue
        out.extend(parse_line(toks, text, first_line + i, state))
    return np.array(out, dtype=_records.RECORD_DTYPE) if out else np.zeros(0, _records.RECORD_DTYPE)


def read_text(path: pathlib.Path, state: ReadState, parse_line: LineParser,
              parse_fast: FastParser | None, block_bytes: int | None = None,
              ) -> Iterator[np.ndarray]:
    block_bytes = block_bytes or BLOCK_BYTES
    for first_line, block in iter_blocks(path, state.display, block_bytes, state=state):
        recs = None
        if parse_fast is not None:
            snap = state.snapshot()
            recs = parse_fast(block, first_line, state)
            if recs is None:
                state.restore(snap)
        if recs is None:
            recs = parse_block_slow(block, first_line, state, parse_line)
        if len(recs):
            yield recs


def fixed_columns(block: bytes, k: int) -> tuple[Tokens, np.ndarray, np.ndarray] | None:
    """Tokens of a block whose non-empty lines all have exactly k tokens: (tokens,
    starts (n, k), ends (n, k)), or None."""
    from pimrt.trace._textvec import tokenize
    t = tokenize(block)
    nonzero = t.counts[t.counts > 0]
    if len(nonzero) and (nonzero != k).any():
        return None
    return t, t.starts.reshape(-1, k), t.ends.reshape(-1, k)


#: the formats of the C reader, as MC_TEXT_* (memctl.h)
C_FORMATS = {"dramsim3": 1, "ramulator": 2, "ramulator_dram": 3}


def c_parse(block: bytes, first_line: int, state: ReadState, fmt: str) -> np.ndarray | None:
    """The block's records by the C reader (memctl/tracetext.c) of the simple host-only
    formats, or None where it meets anything not plainly valid (the per-line parser then
    reads the block and names the error)."""
    from pimrt.memctl._native import ffi, lib   # the extension, on first use
    out = np.empty(len(block) // 2 + 1, _records.RECORD_DTYPE)
    count, used, lines, last = (ffi.new("uint64_t *") for _ in range(4))
    rc = lib.mc_text_parse(C_FORMATS[fmt], block, len(block), state.capacity_bytes or 0,
                           state.last_cycle, ffi.cast("mc_record *", ffi.from_buffer(out)),
                           len(out), count, used, lines, last)
    if rc:
        return None
    n = int(count[0])
    if n and fmt == "dramsim3":
        state.last_cycle, state.last_line = int(out["cycle"][n - 1]), first_line + int(last[0])
    return out[:n]


def read_c_text(path: pathlib.Path, state: ReadState, fmt: str, parse_line: LineParser,
                chunk_records: int, block_bytes: int | None = None,
                start: tuple[int, int] = (0, 1)) -> Iterator[np.ndarray]:
    """read_text for the formats of the C reader: it parses each block straight into chunks
    of chunk_records (no copies); where it gives up, the per-line parser reads the rest of
    that block (and names the error). start: the byte offset and number of the line to begin
    at (where mc_run_text stopped)."""
    from pimrt.memctl._native import ffi, lib
    code, cap = C_FORMATS[fmt], state.capacity_bytes or 0
    count, used, lines, last = (ffi.new("uint64_t *") for _ in range(4))

    def fresh():
        a = np.empty(chunk_records, _records.RECORD_DTYPE)
        return a, ffi.cast("mc_record *", ffi.from_buffer(a))

    out, optr = fresh()
    filled = 0
    for first_line, block in iter_blocks(path, state.display, block_bytes or BLOCK_BYTES,
                                         start, state):
        text = ffi.from_buffer(block)
        pos, line = 0, first_line
        while pos < len(block):
            rc = lib.mc_text_parse(code, text + pos, len(block) - pos, cap, state.last_cycle,
                                   optr + filled, chunk_records - filled, count, used, lines,
                                   last)
            if rc:
                if filled:
                    yield out[:filled]
                    out, optr = fresh()
                    filled = 0
                rest = parse_block_slow(block[pos:], line, state, parse_line)
                if len(rest):
                    yield rest
                break
            n = int(count[0])
            if n and fmt == "dramsim3":
                state.last_cycle = int(out["cycle"][filled + n - 1])
                state.last_line = line + int(last[0])
            filled += n
            pos += int(used[0])
            line += int(lines[0])
            if filled == chunk_records:
                yield out
                out, optr = fresh()
                filled = 0
    if filled:
        yield out[:filled]


def check_requests_fast(state: ReadState, cycles: np.ndarray, addrs: np.ndarray,
                        lines: np.ndarray) -> bool:
    """Order and capacity of a block's requests; updates state when all is well."""
    if len(cycles) == 0:
        return True
    if cycles[0] < state.last_cycle or (len(cycles) > 1 and (cycles[1:] < cycles[:-1]).any()):
        return False
    if state.capacity_bytes is not None and (addrs >= np.uint64(state.capacity_bytes)).any():
        return False
    state.last_cycle, state.last_line = int(cycles[-1]), int(lines[-1])
    return True

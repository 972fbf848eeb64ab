"""Shared machinery of the text trace formats: block reading, vectorised tokenising and number
parsing, the per-line fallback parser, and error reporting.

A text reader works on blocks of whole lines (about BLOCK_BYTES each). Each block first goes
through the format's vectorised parser (numpy over the block's bytes); when that one meets
anything unusual (a malformed line, an out-of-order cycle, a number it cannot convert), it gives
up on the block and the per-line parser, which is authoritative, reads the block again and
raises the precise error. Both produce identical records for valid input (tests check it).
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import pathlib
from typing import Callable, Iterator, Sequence

import numpy as np

from pimrt.errors import TraceError
from pimrt.trace.records import RECORD_DTYPE

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
# blocks and tokens
def iter_blocks(path: pathlib.Path, display: str,
                block_bytes: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(number of the block's first line, 1-based; bytes of whole lines)."""
    block_bytes = block_bytes or BLOCK_BYTES
    line = 1
    rest = b""
    with open(path, "rb") as f:
        while True:
            data = f.read(block_bytes)
            if not data:
                if rest:
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
            yield line, block
            line += block.count(b"\n")


_PAD_BEFORE = 24   # bytes of padding before a block, so 8-byte windows ending at a token's
_PAD_AFTER = 8     # end (or starting at its start) never leave the buffer

_U = np.uint64
_ONES = _U(0x0101010101010101)
_HIGH = _U(0x8080808080808080)
_ZERO_CHARS = _U(0x3030303030303030)
# _LOW_MASK[k]: the low k bytes of a uint64 (k = 0..8)
_LOW_MASK = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)


@dataclasses.dataclass
class Tokens:
    """The tokens of one block. Offsets index `buf`, the block with padding around it;
    `win[i]` is the little-endian uint64 of buf[i:i+8]."""

    buf: np.ndarray           # uint8 view of the padded block
    win: np.ndarray           # overlapping 8-byte windows of buf
    starts: np.ndarray        # int64 offset of each token
    ends: np.ndarray          # one past its last byte
    counts: np.ndarray        # tokens per line
    n_lines: int

    @functools.cached_property
    def line(self) -> np.ndarray:
        """Block-relative line index of each token."""
        return np.repeat(np.arange(self.n_lines), self.counts)


def tokenize(block: bytes) -> Tokens:
    pbuf = b" " * _PAD_BEFORE + block + b" " * _PAD_AFTER
    buf = np.frombuffer(pbuf, dtype=np.uint8)
    win = np.ndarray(shape=(len(pbuf) - 7,), dtype="<u8", buffer=pbuf, strides=(1,))
    sep = (buf == 32) | ((buf - np.uint8(9)) <= 4)    # bytes.split()'s whitespace
    nl_pos = np.flatnonzero(buf == 10)
    if b"#" in block:
        hc = np.cumsum(buf == 35, dtype=np.int32)
        at_nl = np.zeros(len(buf), dtype=np.int32)
        at_nl[nl_pos] = hc[nl_pos]
        base = np.maximum.accumulate(at_nl)
        sep |= (hc - base) > 0
    # sep is True at both ends (padding), so token boundaries alternate start, end
    change = np.flatnonzero(sep[1:] != sep[:-1]) + 1
    starts = change[0::2]
    ends = change[1::2]
    n_lines = len(nl_pos) + (0 if block.endswith(b"\n") or not block else 1)
    before = np.searchsorted(starts, nl_pos)              # tokens before each newline
    if n_lines > len(nl_pos):
        before = np.append(before, len(starts))
    counts = np.diff(before, prepend=0)
    return Tokens(buf, win, starts, ends, counts, n_lines)


def _ge(x: np.ndarray, c: int) -> np.ndarray:
    """Per byte of x (all bytes < 0x80): 0x80 where the byte >= c, else 0."""
    return (x + _U((0x80 - c) * 0x0101010101010101)) & _HIGH


def _hex8(x: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Value and validity of the last k (0..8) bytes of 8-byte windows as hex digits."""
    x = x.byteswap()                                   # least significant digit -> low byte
    keep = _LOW_MASK[k]
    x &= keep
    fold = x | _U(0x2020202020202020)
    digit = _ge(x, 0x30) & ~_ge(x, 0x3A)
    letter = _ge(fold, 0x61) & ~_ge(fold, 0x67)
    ok = (((digit | letter) | (~keep & _HIGH)) == _HIGH) & ((x & _HIGH) == 0)
    v = (x & _U(0x0F0F0F0F0F0F0F0F)) + (letter >> _U(7)) * _U(9)
    v = (v | (v >> _U(4))) & _U(0x00FF00FF00FF00FF)
    v = (v | (v >> _U(8))) & _U(0x0000FFFF0000FFFF)
    v = (v | (v >> _U(16))) & _U(0x00000000FFFFFFFF)
    return v, ok


def _dec8(x: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Value and validity of the last k (0..8) bytes of 8-byte windows as decimal digits."""
    keep = ~_LOW_MASK[8 - k]                           # the high k bytes
    x = (x & keep) | (_ZERO_CHARS & ~keep)             # leading bytes become '0'
    ok = ((_ge(x, 0x30) & ~_ge(x, 0x3A)) == _HIGH) & ((x & _HIGH) == 0)
    x = x - _ZERO_CHARS
    x = (x * _U(10) + (x >> _U(8))) & _U(0x00FF00FF00FF00FF)
    x = (x * _U(100) + (x >> _U(16))) & _U(0x0000FFFF0000FFFF)
    x = (x * _U(10000) + (x >> _U(32))) & _U(0x00000000FFFFFFFF)
    return x, ok


def _parse_hex(win, e, nd):
    v, ok = _hex8(win[e - 8], np.clip(nd, 0, 8))
    if (nd > 8).any():
        v2, ok2 = _hex8(win[e - 16], np.clip(nd - 8, 0, 8))
        v |= v2 << _U(32)
        ok &= ok2
    return v, ok


def _parse_dec(win, e, nd):
    v, ok = _dec8(win[e - 8], np.clip(nd, 0, 8))
    if (nd > 8).any():
        v2, ok2 = _dec8(win[e - 16], np.clip(nd - 8, 0, 8))
        v += v2 * _U(10 ** 8)
        ok &= ok2
        if (nd > 16).any():
            v3, ok3 = _dec8(win[e - 24], np.clip(nd - 16, 0, 8))
            v += v3 * _U(10 ** 16)
            ok &= ok3
    return v, ok


def parse_uint_vec(t: Tokens, s: np.ndarray, e: np.ndarray,
                   mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised parse_uint_token for tokens t.buf[s:e]; returns (uint64 values, ok mask).
    ok is False where the token is malformed or too long for this fast path (the per-line
    parser then decides)."""
    n = len(s)
    if n == 0:
        return np.zeros(0, np.uint64), np.zeros(0, bool)
    length = e - s
    if mode == "dec":
        values, ok = _parse_dec(t.win, e, length)
        ok &= (length >= 1) & (length <= 19)
    else:
        prefix = ((t.win[s] & _U(0xFFFF)) | _U(0x2000)) == _U(0x7830)   # "0x" / "0X"
        prefix &= length > 2
        nd = length - 2 * prefix
        if mode == "hex":
            values, ok = _parse_hex(t.win, e, nd)
            ok &= (nd >= 1) & (nd <= 16)
        else:
            values = np.zeros(n, np.uint64)
            ok = np.zeros(n, bool)
            if prefix.all() or not prefix.any():
                if prefix.all():
                    values, ok = _parse_hex(t.win, e, nd)
                    ok &= nd <= 16
                else:
                    values, ok = _parse_dec(t.win, e, nd)
                    ok &= nd <= 19
            else:
                h = np.flatnonzero(prefix)
                d = np.flatnonzero(~prefix)
                values[h], ok[h] = _parse_hex(t.win, e[h], nd[h])
                ok[h] &= nd[h] <= 16
                values[d], ok[d] = _parse_dec(t.win, e[d], nd[d])
                ok[d] &= nd[d] <= 19
            ok &= nd >= 1
    values[~ok] = 0
    return values, ok


def match_words(t: Tokens, s: np.ndarray, e: np.ndarray,
                words: dict[bytes, int], casefold: bool = True) -> np.ndarray:
    """Code of each token from words (at most 8 bytes each, lower case when casefold); -1
    where none matches."""
    n = len(s)
    out = np.full(n, -1, np.int16)
    if n == 0:
        return out
    length = e - s
    x = t.win[s] & _LOW_MASK[np.minimum(length, 8)]
    usable = (length <= 8) & ((x & _HIGH) == 0)
    if casefold:
        upper = _ge(x, 0x41) & ~_ge(x, 0x5B)
        x = x | (upper >> _U(2))
    for word, code in words.items():
        key = np.frombuffer(word.ljust(8, b"\0"), "<u8")[0]
        out[(x == key) & usable] = code
    return out


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
    return np.array(out, dtype=RECORD_DTYPE) if out else np.zeros(0, RECORD_DTYPE)


def read_text(path: pathlib.Path, state: ReadState, parse_line: LineParser,
              parse_fast: FastParser | None, block_bytes: int | None = None,
              ) -> Iterator[np.ndarray]:
    block_bytes = block_bytes or BLOCK_BYTES
    for first_line, block in iter_blocks(path, state.display, block_bytes):
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
    t = tokenize(block)
    nonzero = t.counts[t.counts > 0]
    if len(nonzero) and (nonzero != k).any():
        return None
    return t, t.starts.reshape(-1, k), t.ends.reshape(-1, k)


_C_FORMATS = {"dramsim3": 1, "ramulator": 2, "ramulator_dram": 3}   # MC_TEXT_* (memctl.h)


def c_parse(block: bytes, first_line: int, state: ReadState, fmt: str) -> np.ndarray | None:
    """The block's records by the C reader (memctl/tracetext.c) of the simple host-only
    formats, or None where it meets anything not plainly valid (the per-line parser then
    reads the block and names the error)."""
    from pimrt.memctl._native import ffi, lib   # the extension, on first use
    out = np.empty(len(block) // 2 + 1, RECORD_DTYPE)
    count, used, lines, last = (ffi.new("uint64_t *") for _ in range(4))
    rc = lib.mc_text_parse(_C_FORMATS[fmt], block, len(block), state.capacity_bytes or 0,
                           state.last_cycle, ffi.cast("mc_record *", ffi.from_buffer(out)),
                           len(out), count, used, lines, last)
    if rc:
        return None
    n = int(count[0])
    if n and fmt == "dramsim3":
        state.last_cycle, state.last_line = int(out["cycle"][n - 1]), first_line + int(last[0])
    return out[:n]


def read_c_text(path: pathlib.Path, state: ReadState, fmt: str, parse_line: LineParser,
                chunk_records: int, block_bytes: int | None = None) -> Iterator[np.ndarray]:
    """read_text for the formats of the C reader: it parses each block straight into chunks
    of chunk_records (no copies); where it gives up, the per-line parser reads the rest of
    that block (and names the error)."""
    from pimrt.memctl._native import ffi, lib
    code, cap = _C_FORMATS[fmt], state.capacity_bytes or 0
    count, used, lines, last = (ffi.new("uint64_t *") for _ in range(4))

    def fresh():
        a = np.empty(chunk_records, RECORD_DTYPE)
        return a, ffi.cast("mc_record *", ffi.from_buffer(a))

    out, optr = fresh()
    filled = 0
    for first_line, block in iter_blocks(path, state.display, block_bytes or BLOCK_BYTES):
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

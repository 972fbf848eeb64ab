"""The vectorised half of the text readers (pimrt.trace._textparse): tokenising a block of lines
and parsing its numbers and words with numpy over the block's bytes. Kept apart so that
importing the trace formats (and detecting one) does not import numpy: `pimrt memsim` on a
text trace memctl's C reader takes never needs it."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

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

"""pimrt's own text trace format (`--format pimrt`), read and written.

    # cycle requestor op address
    0    host R 0x0000
    12   pim  R 0x10000
    @layer conv1                 # layer boundary: the requests after it belong to "conv1"
    @param high_watermark=16 epoch_cap=2000
    @barrier

A request line has 4 fields: arrival cycle (decimal), requestor (host|pim), op (R|READ|W|WRITE,
any case) and byte address (0x.. hexadecimal or decimal). `#` starts a comment. A marker line
starts with `@`: `@layer NAME` (NAME is the rest of the line, without the comment, stripped),
`@param NAME=VALUE ...` (VALUE an unsigned 32-bit integer), `@barrier`. Markers carry cycle 0.
Layer ids are given in order of first appearance; a name seen again gets its first id.
"""
from __future__ import annotations

import pathlib

import numpy as np

from pimrt.trace import _textparse as tp
from pimrt.trace import records as _records   # (RECORD_DTYPE: made on first use)
from pimrt.trace.records import (COMPUTE, DELAY, OP_NAMES, SIGNAL, WAIT, BARRIER, HOST, LAYER,
                                 PARAM, PARAM_IDS, PARAM_NAMES, PIM, READ, WRITE)
from pimrt.trace._writer import TraceWriter

NAME = "pimrt"
EXTENSIONS = (".trace", ".txt", ".pimrt")
PRIORITY = 10
DESCRIPTION = ("pimrt text: 'cycle host|pim R|W 0xADDR' lines and @layer/@param/@barrier/"
               "@delay/@compute/@signal/@wait markers")

REQUESTOR_WORDS = {b"host": HOST, b"pim": PIM}
OP_WORDS = {b"r": READ, b"read": READ, b"w": WRITE, b"write": WRITE}
MARKERS = ("@layer", "@param", "@barrier", "@delay", "@compute", "@signal", "@wait")
_STREAM_MARKERS = {"@delay": DELAY, "@compute": COMPUTE, "@signal": SIGNAL, "@wait": WAIT}


def sniff(tokens: list[bytes]) -> bool:
    if tokens[0].startswith(b"@"):
        return True
    return len(tokens) == 4 and tokens[1].lower() in REQUESTOR_WORDS


# ---------------------------------------------------------------------------------------------
def parse_marker(toks: list[bytes], text: bytes, line: int, state: tp.ReadState) -> list[tuple]:
    word = toks[0].decode("utf-8", "replace")
    if word == "@layer":
        name_b = text.strip()[len(b"@layer"):].strip()
        if not name_b:
            raise tp.trace_error(state, line, "layer", "@layer needs a layer name")
        try:
            name = name_b.decode("utf-8")
        except UnicodeDecodeError:
            raise tp.trace_error(state, line, "layer", f"layer name {tp.show(name_b)} is not "
                                 f"UTF-8") from None
        return [(0, 0, state.layer_id(name), LAYER, HOST, 0)]
    if word == "@param":
        if len(toks) < 2:
            raise tp.trace_error(state, line, "param", "@param needs NAME=VALUE")
        out = []
        for tok in toks[1:]:
            key, eq, val = tok.partition(b"=")
            k = key.decode("utf-8", "replace")
            if not eq:
                raise tp.trace_error(state, line, "param", f"parameter {tp.show(tok)} is not "
                                     f"NAME=VALUE")
            if k not in PARAM_IDS:
                raise tp.trace_error(state, line, "param", f"unknown parameter {k!r}"
                                     + tp.suggest(k, PARAM_IDS) + f" (known: "
                                     f"{', '.join(PARAM_IDS)})")
            v = tp.parse_uint_token(val, "auto")
            if v is None or v >= 1 << 32:
                raise tp.trace_error(state, line, "param", f"value {tp.show(val)} of {k} is "
                                     f"not an unsigned 32-bit integer")
            out.append((0, 0, v, PARAM, HOST, PARAM_IDS[k]))
        return out
    if word == "@barrier":
        if len(toks) > 1:
            raise tp.trace_error(state, line, "barrier", f"@barrier takes no arguments, found "
                                 f"{tp.show(toks[1])}")
        return [(0, 0, 0, BARRIER, HOST, 0)]
    if word in _STREAM_MARKERS:  # @delay host 120 / @signal pim 7 / @wait host 7
        field = word[1:]
        if len(toks) != 3:
            raise tp.trace_error(state, line, field, f"{word} needs a requestor and a number "
                                 f"('{word} host|pim N')")
        req = REQUESTOR_WORDS.get(toks[1].lower())
        if req is None:
            raise tp.trace_error(state, line, "requestor", f"unknown requestor "
                                 f"{tp.show(toks[1])} (host or pim)")
        v = tp.parse_uint_token(toks[2], "auto")
        if v is None or v >= 1 << 32:
            raise tp.trace_error(state, line, field, f"{tp.show(toks[2])} is not an unsigned "
                                 f"32-bit integer")
        return [(0, 0, v, _STREAM_MARKERS[word], req, 0)]
    raise tp.trace_error(state, line, "marker", f"unknown marker {word!r}"
                         + tp.suggest(word, MARKERS) + f" (known: {', '.join(MARKERS)})")


def parse_line(toks: list[bytes], text: bytes, line: int, state: tp.ReadState) -> list[tuple]:
    if toks[0].startswith(b"@"):
        return parse_marker(toks, text, line, state)
    if len(toks) != 4:
        raise tp.trace_error(state, line, None, f"expected 4 fields 'cycle requestor op "
                             f"address' or a @marker, found {len(toks)}")
    cycle = tp.scalar_cycle(state, toks[0], line)
    req = REQUESTOR_WORDS.get(toks[1].lower())
    if req is None:
        r = toks[1].decode("utf-8", "replace")
        raise tp.trace_error(state, line, "requestor", f"unknown requestor {r!r} (host or "
                             f"pim)" + tp.suggest(r.lower(), ["host", "pim"]))
    op = OP_WORDS.get(toks[2].lower())
    if op is None:
        o = toks[2].decode("utf-8", "replace")
        raise tp.trace_error(state, line, "op", f"unknown op {o!r} (R, READ, W or WRITE)")
    addr = tp.scalar_addr(state, toks[3], line)
    tp.check_order(state, cycle, line)
    return [(cycle, addr, 0, op, req, 0)]


def parse_fast(block: bytes, first_line: int, state: tp.ReadState) -> np.ndarray | None:
    t = tp.tokenize(block)
    if t.n_lines == 0:
        return np.zeros(0, _records.RECORD_DTYPE)
    first_tok = np.zeros(t.n_lines, np.int64)
    has = t.counts > 0
    first_tok[has] = np.cumsum(t.counts)[has] - t.counts[has]
    marker_line = has.copy()
    marker_line[has] = t.buf[t.starts[first_tok[has]]] == 64  # '@'
    req_line = has & ~marker_line
    if (t.counts[req_line] != 4).any():
        return None
    tok_is_req = req_line[t.line]
    s = t.starts[tok_is_req].reshape(-1, 4)
    e = t.ends[tok_is_req].reshape(-1, 4)
    cycles, ok_c = tp.parse_uint_vec(t, s[:, 0], e[:, 0], "dec")
    reqs = tp.match_words(t, s[:, 1], e[:, 1], REQUESTOR_WORDS)
    ops = tp.match_words(t, s[:, 2], e[:, 2], OP_WORDS)
    addrs, ok_a = tp.parse_uint_vec(t, s[:, 3], e[:, 3], "auto")
    if not (ok_c.all() and ok_a.all() and (reqs >= 0).all() and (ops >= 0).all()):
        return None
    req_lines = np.flatnonzero(req_line)
    if not tp.check_requests_fast(state, cycles, addrs, req_lines + first_line):
        return None
    marker_lines = np.flatnonzero(marker_line)
    if len(marker_lines) == 0:
        out = np.zeros(len(cycles), _records.RECORD_DTYPE)
        out["cycle"], out["addr"], out["op"], out["requestor"] = cycles, addrs, ops, reqs
        return out
    # markers: the per-line parser, in order; then merge with the requests by line
    lines = block.split(b"\n")
    per_line: dict[int, list[tuple]] = {}
    for li in marker_lines.tolist():
        text = lines[li].split(b"#", 1)[0]
        per_line[li] = parse_marker(text.split(), text, first_line + li, state)
    n_rec = np.ones(t.n_lines, np.int64) * req_line
    for li, recs in per_line.items():
        n_rec[li] = len(recs)
    pos = np.cumsum(n_rec) - n_rec
    out = np.zeros(int(n_rec.sum()), _records.RECORD_DTYPE)
    at = pos[req_lines]
    out["cycle"][at], out["addr"][at], out["op"][at], out["requestor"][at] = \
        cycles, addrs, ops, reqs
    for li, recs in per_line.items():
        out[pos[li]:pos[li] + len(recs)] = np.array(recs, dtype=_records.RECORD_DTYPE)
    return out


def read(path: pathlib.Path, state: tp.ReadState, chunk_records: int = 1 << 16):
    return tp.read_text(path, state, parse_line, parse_fast)


# ---------------------------------------------------------------------------------------------
_OP_TEXT = {READ: "R", WRITE: "W"}
_REQ_TEXT = {HOST: "host", PIM: "pim"}


def format_records(recs: np.ndarray, layer_names: list[str], where: str = "") -> str:
    """pimrt text lines (each ending in a newline) for records."""
    out: list[str] = []
    append = out.append
    ops = recs["op"]
    if (ops <= WRITE).all():
        cyc, addr, req = recs["cycle"].tolist(), recs["addr"].tolist(), recs["requestor"]
        if (req > PIM).any():
            raise tp.trace_error(where, None, "requestor", "requestor code > 1")
        rq = [_REQ_TEXT[r] for r in req.tolist()]
        op = [_OP_TEXT[o] for o in ops.tolist()]
        return "".join([f"{c} {r} {o} 0x{a:x}\n" for c, r, o, a in zip(cyc, rq, op, addr)])
    for i, r in enumerate(recs.tolist()):
        cycle, addr, value, op, req, param = r
        if op <= WRITE:
            if req not in _REQ_TEXT:
                raise tp.trace_error(where, None, "requestor", f"record {i}: requestor {req}")
            append(f"{cycle} {_REQ_TEXT[req]} {_OP_TEXT[op]} 0x{addr:x}\n")
        elif op == LAYER:
            if value >= len(layer_names):
                raise tp.trace_error(where, None, "layer", f"LAYER record value {value} has "
                                     f"no name (layer_names has {len(layer_names)})")
            name = layer_names[value]
            if not name.strip() or name != name.strip() or "#" in name or "\n" in name:
                raise tp.trace_error(where, None, "layer", f"layer name {name!r} cannot be "
                                     f"written as text (empty, '#', newline or outer spaces)")
            append(f"@layer {name}\n")
        elif op == PARAM:
            if param not in PARAM_NAMES:
                raise tp.trace_error(where, None, "param", f"unknown PARAM id {param}")
            append(f"@param {PARAM_NAMES[param]}={value}\n")
        elif op == BARRIER:
            append("@barrier\n")
        elif op in (DELAY, COMPUTE, SIGNAL, WAIT):
            append(f"@{OP_NAMES[op].lower()} {_REQ_TEXT[req]} {value}\n")
        else:
            raise tp.trace_error(where, None, "op", f"unknown op code {op}")
    return "".join(out)


class Writer(TraceWriter):
    """Writes records as pimrt text, chunk by chunk."""

    encoding = "utf-8"

    def start(self) -> None:
        self._f.write("# pimrt trace: cycle requestor op address\n")

    def write(self, records: np.ndarray) -> None:
        self._f.write(format_records(records, self.layer_names, str(self.path)))
        self.count += len(records)

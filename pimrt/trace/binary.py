"""pimrt's binary trace (`--format npy`): a numpy `.npy` file holding a 1-D array of
RECORD_DTYPE, read memory-mapped chunk by chunk; the layer names live beside it in
`FILE.layers.json` (for `conv.npy`: `conv.npy.layers.json`; `conv.layers.json` is read too),
a JSON list indexed by a LAYER record's value (or an object whose "layers" is that list and
"meta" the run that wrote it: pimrt.trace.step).

Writer appends chunks to an open file and fixes the header's length on close, so a trace of any
size is written without holding it in memory:

    with binary.Writer("t.npy") as w:
        w.write(w.layer_marker("conv1"))    # LAYER record, name kept for the sidecar
        w.write(chunk)
"""
from __future__ import annotations

import json
import pathlib

import numpy as np

from pimrt.errors import TraceError
from pimrt.trace import _textparse as tp
from pimrt.trace import records as _records   # (RECORD_DTYPE: made on first use)
from pimrt.trace.records import (LAST_OP, BARRIER, LAYER, OP_NAMES, PARAM, PARAM_NAMES,
                                 REQUESTOR_NAMES, WRITE)
from pimrt.trace._writer import TraceWriter

NAME = "npy"
EXTENSIONS = (".npy",)
PRIORITY = 0
BINARY = True
DESCRIPTION = "numpy .npy of RECORD_DTYPE (+ FILE.layers.json)"

MAGIC = b"\x93NUMPY"
_HEADER_BYTES = 256  # fixed, so the shape can be patched in place on close


def sniff_bytes(head: bytes) -> bool:
    return head.startswith(MAGIC)


#: without a sidecar, Trace.layer_names holds made-up names for the layer ids below this
MADE_UP_NAMES = 1 << 16


def sidecar_path(path: pathlib.Path) -> pathlib.Path:
    return path.with_name(path.name + ".layers.json")


def _find_sidecar(path: pathlib.Path) -> pathlib.Path | None:
    for p in (sidecar_path(path), path.with_suffix(".layers.json")):
        if p.is_file():
            return p
    return None


def read_layer_names(path: pathlib.Path, display: str) -> list[str] | None:
    side = _find_sidecar(path)
    if side is None:
        return None
    from pimrt.jsonfile import read_json

    def error(msg: str) -> TraceError:
        err = TraceError(f"{msg} (the layer names of {display})")
        err.path, err.line, err.field = str(side), None, "layers"
        return err
    names = read_json(side, error)
    if isinstance(names, dict) and "layers" in names:   # a step trace's (pimrt.trace.step)
        names = names["layers"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise tp.trace_error(str(side), None, "layers", "must be a JSON list of strings")
    return names


def _open_array(path: pathlib.Path, display: str) -> np.ndarray:
    """The file's records as a memory map, for its header (dtype, shape, offset) only: the
    records are read through a file (read), as a map would end the process with SIGBUS at a
    page the file lost after it was opened (truncated while read)."""
    _check_length(path, display)
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise tp.trace_error(display, None, None, f"not a readable .npy file: {exc}") from None
    if arr.ndim != 1:
        raise tp.trace_error(display, None, None, f"expected a 1-D array of records, found "
                             f"shape {arr.shape}")
    if arr.dtype != _records.RECORD_DTYPE:
        if arr.dtype.names == _records.RECORD_DTYPE.names:
            pass  # same fields in another layout/byte order: converted chunk by chunk
        else:
            raise tp.trace_error(display, None, None, f"dtype {arr.dtype} is not pimrt's "
                                 f"RECORD_DTYPE {_records.RECORD_DTYPE}")
    return arr


def _check_length(path: pathlib.Path, display: str) -> None:
    """A file shorter or longer than its header's records: truncated (where it ends), or one
    whose writer did not finish (Writer fixes the count on close)."""
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            shape, _, dtype = (fmt.read_array_header_1_0(f) if version == (1, 0)
                               else fmt.read_array_header_2_0(f))
            offset = f.tell()
            size = f.seek(0, 2)
    except (ValueError, OSError, EOFError):
        return        # np.load names it
    if len(shape) != 1 or not dtype.itemsize:
        return
    want, have = shape[0], (size - offset) // dtype.itemsize
    if have < want:
        raise tp.trace_error(display, None, None, f"truncated: its header gives {want:,} "
                             f"records of {dtype.itemsize} bytes, the file ends at byte "
                             f"{size:,}, in record {have + 1:,} (the last whole one "
                             f"{have:,})")
    if want == 0 and have > 0:
        raise tp.trace_error(display, None, None, f"its header gives 0 records but "
                             f"{have:,} follow: a trace whose writing did not finish (the "
                             f"writer fixes the count when it closes)")


def validate_chunk(chunk: np.ndarray, first: int, state: tp.ReadState,
                   names_known: bool) -> None:
    """Checks one chunk of records (first = 0-based index of its first record); errors name
    the 1-based record number."""
    def err(i, field, msg):
        return tp.trace_error(state, first + int(i) + 1, field, msg, unit="record ")

    op = chunk["op"]
    bad = np.flatnonzero(op > LAST_OP)
    if len(bad):
        raise err(bad[0], "op", f"op code {op[bad[0]]} is not one of "
                  f"{', '.join(f'{k} {v}' for k, v in OP_NAMES.items())}")
    req = op <= WRITE
    bad = np.flatnonzero(req & (chunk["requestor"] > max(REQUESTOR_NAMES)))
    if len(bad):
        raise err(bad[0], "requestor", f"requestor code {chunk['requestor'][bad[0]]} is not "
                  f"0 (host) or 1 (pim)")
    is_param = op == PARAM
    if is_param.any():
        known = np.array(sorted(PARAM_NAMES), dtype=np.uint16)
        bad = np.flatnonzero(is_param & ~np.isin(chunk["param"], known))
        if len(bad):
            raise err(bad[0], "param", f"unknown parameter id {chunk['param'][bad[0]]} "
                      f"(known: {', '.join(f'{k} {v}' for k, v in PARAM_NAMES.items())})")
    is_layer = op == LAYER
    if is_layer.any():
        vals = chunk["value"][is_layer]
        top = int(vals.max())
        if names_known and top >= len(state.layer_names):
            i = np.flatnonzero(is_layer & (chunk["value"] >= len(state.layer_names)))[0]
            raise err(i, "layer", f"LAYER value {chunk['value'][i]} has no name in the "
                      f"sidecar ({len(state.layer_names)} names)")
        if not names_known:   # no sidecar: layer N is "layerN", made up here for the ids
            # below MADE_UP_NAMES (a list up to the largest id would grow with its value);
            # the stats name a larger id the same way (Controller.stats)
            small = vals[vals < MADE_UP_NAMES]
            for n in range(len(state.layer_names), int(small.max()) + 1 if len(small) else 0):
                state.layer_id(f"layer{n}")
    idx = np.flatnonzero(req)
    if len(idx):
        cyc = chunk["cycle"][idx]
        back = np.flatnonzero(np.r_[cyc[:1] < state.last_cycle, cyc[1:] < cyc[:-1]])
        if len(back):
            j = back[0]
            prev = state.last_cycle if j == 0 else int(cyc[j - 1])
            prev_at = state.last_line if j == 0 else first + int(idx[j - 1]) + 1
            raise err(idx[j], "cycle", f"arrival cycle {cyc[j]} is earlier than {prev} of "
                      f"the request before it (record {prev_at}): requests must be in "
                      f"arrival order")
        cap = state.capacity_bytes
        if cap is not None:
            over = np.flatnonzero(chunk["addr"][idx] >= np.uint64(cap))
            if len(over):
                i = idx[over[0]]
                raise err(i, "address", f"address 0x{int(chunk['addr'][i]):x} is beyond the "
                          f"memory's capacity of {cap} bytes (0x{cap:x})")
        state.last_cycle, state.last_line = int(cyc[-1]), first + int(idx[-1]) + 1


def read(path: pathlib.Path, state: tp.ReadState, chunk_records: int = 1 << 16):
    arr = _open_array(path, state.display)
    names = read_layer_names(path, state.display)
    if names is not None:
        for n in names:
            state.layer_names.append(n)
            state.layer_index.setdefault(n, len(state.layer_names) - 1)
    count, dtype, offset = len(arr), arr.dtype, int(getattr(arr, "offset", 0))
    del arr
    with open(path, "rb") as f:
        f.seek(offset)
        for i in range(0, count, chunk_records):
            n = min(chunk_records, count - i)
            buf = np.empty(n, dtype)   # (read straight into the records: one copy)
            size = f.readinto(memoryview(buf).cast("B"))
            while 0 < size < n * dtype.itemsize:   # (a short read before the end)
                more = f.readinto(memoryview(buf).cast("B")[size:])
                if not more:
                    break
                size += more
            state.reached = (offset + i * dtype.itemsize + size, i + size // dtype.itemsize + 1)
            if size < n * dtype.itemsize:
                raise tp.trace_error(state, i + size // dtype.itemsize + 1, None, f"the file "
                                     f"ends here, before the {count:,} records its header "
                                     f"gives (truncated while it was read?)", unit="record ")
            chunk = buf if dtype == _records.RECORD_DTYPE else buf.astype(_records.RECORD_DTYPE)
            validate_chunk(chunk, i, state, names is not None)
            yield chunk


def count_records(path: pathlib.Path) -> int:
    return len(_open_array(path, str(path)))


# ---------------------------------------------------------------------------------------------
def _header(n: int) -> bytes:
    d = {"descr": np.lib.format.dtype_to_descr(_records.RECORD_DTYPE), "fortran_order": False,
         "shape": (n,)}
    text = repr(d).encode("latin1")
    pad = _HEADER_BYTES - len(MAGIC) - 2 - 2 - len(text) - 1
    if pad < 0:
        raise AssertionError("npy header too long")
    return MAGIC + bytes([1, 0]) + (_HEADER_BYTES - 10).to_bytes(2, "little") + text + \
        b" " * pad + b"\n"


class Writer(TraceWriter):
    """Appends record chunks to a .npy file; close() fixes the record count in the header and
    writes the layer-name sidecar (when there are layer names)."""

    mode = "wb"

    def start(self) -> None:
        self._f.write(_header(0))

    def layer_marker(self, name: str) -> np.ndarray:
        rec = np.zeros(1, _records.RECORD_DTYPE)
        rec["op"], rec["value"] = LAYER, self.add_layer(name)
        return rec

    def write(self, records: np.ndarray) -> None:
        recs = np.ascontiguousarray(records, dtype=_records.RECORD_DTYPE)
        self._f.write(recs.tobytes())
        self.count += len(recs)

    def close(self) -> None:
        if self._f.closed:
            return
        self._f.seek(0)
        self._f.write(_header(self.count))
        super().close()
        side = sidecar_path(self.path)
        if self.layer_names:
            side.write_text(json.dumps(self.layer_names, indent=0) + "\n", encoding="utf-8")
        elif side.exists():
            side.unlink()

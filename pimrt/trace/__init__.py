"""Memory traces: every format read into chunks of one numpy record type, RECORD_DTYPE.

    from pimrt.trace import open_trace, write_trace
    trace = open_trace("conv.trace", capacity_bytes=part.capacity_bytes)
    for chunk in trace:                 # numpy arrays of RECORD_DTYPE, chunk_records each
        ...
    trace.layer_names                   # filled as LAYER markers are read

Formats are modules of this package that define NAME (see FORMATS): pimrt (text.py), npy
(binary.py), dramsim3, ramulator, ramulator_dram, ramulator_rw, ramulator_cpu. Adding a format is adding a module with NAME,
EXTENSIONS, PRIORITY, sniff(tokens_of_first_data_line) (or sniff_bytes(head) for a binary one),
read(path, state, chunk_records) and, when it can be written, a Writer class.
"""
from __future__ import annotations

import importlib
import pathlib
import pkgutil
import types
from typing import Iterable, Iterator

import numpy as np

from pimrt.errors import TraceError
from pimrt.trace import _textparse as tp
from pimrt.trace import records as _records
from pimrt.trace.records import (BARRIER, HOST, LAYER, OP_NAMES, PARAM, PARAM_IDS, PARAM_NAMES,
                                 PIM, READ, REQUESTOR_NAMES, WRITE)


def __getattr__(name: str):
    if name == "RECORD_DTYPE":   # made on first use (records.py): this package needs no numpy
        return _records.RECORD_DTYPE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_NOT_FORMATS = {"records", "synthetic", "step", "host_export", "replay"}


def _discover() -> dict[str, types.ModuleType]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name in _NOT_FORMATS:
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if isinstance(getattr(mod, "NAME", None), str) and hasattr(mod, "read"):
            found.append(mod)
    found.sort(key=lambda m: (getattr(m, "PRIORITY", 100), m.NAME))
    return {m.NAME: m for m in found}


#: format name -> module (in sniffing order)
FORMATS: dict[str, types.ModuleType] = _discover()

_SNIFF_BYTES = 1 << 16


def detect_format(path) -> str:
    """The format of a trace file: by magic number / extension for binary formats, else by the
    shape of its first data line (blank and `#` comment lines skipped). path may be a
    tp.Stream (what it peeks at is read again by its reader)."""
    if isinstance(path, tp.Stream):
        head, display, path = path.peek(_SNIFF_BYTES), path.display, path.path
    else:
        path = pathlib.Path(path)
        display = str(path)
        try:
            with open(path, "rb") as f:
                head = f.read(_SNIFF_BYTES)
        except OSError as exc:
            raise tp.trace_error(display, None, None, f"cannot read: {exc.strerror}") from None
    for mod in FORMATS.values():
        sniff_bytes = getattr(mod, "sniff_bytes", None)
        if sniff_bytes is not None and sniff_bytes(head):
            return mod.NAME
    for mod in FORMATS.values():
        if getattr(mod, "BINARY", False) and path.suffix.lower() in mod.EXTENSIONS:
            return mod.NAME
    lines = head.split(b"\n")
    if len(head) == _SNIFF_BYTES:
        lines = lines[:-1]  # maybe cut short
    for i, raw in enumerate(lines, 1):
        toks = raw.split(b"#", 1)[0].split()
        if not toks:
            continue
        for mod in FORMATS.values():
            sniff = getattr(mod, "sniff", None)
            if sniff is not None and sniff(toks):
                return mod.NAME
        raise tp.trace_error(display, i, None, f"cannot tell the trace format from "
                             f"{tp.show(raw.strip())}; give the format (one of "
                             f"{', '.join(FORMATS)})")
    return "pimrt"  # no data line: an empty trace in any text format


def get_format(name: str) -> types.ModuleType:
    mod = FORMATS.get(name)
    if mod is None:
        raise TraceError(f"unknown trace format {name!r}" + tp.suggest(name, list(FORMATS))
                         + f" (known: {', '.join(FORMATS)})")
    return mod


def rechunk(chunks: Iterable[np.ndarray], size: int) -> Iterator[np.ndarray]:
    """The same records in chunks of exactly `size` (the last one shorter)."""
    pending: list[np.ndarray] = []
    have = 0
    for c in chunks:
        if len(c) == 0:
            continue
        if have == 0 and len(c) == size:
            yield c
            continue
        pending.append(c)
        have += len(c)
        if have >= size:
            buf = np.concatenate(pending)
            n_full = len(buf) // size * size
            for i in range(0, n_full, size):
                yield buf[i:i + size]
            rest = buf[n_full:]
            pending, have = ([rest], len(rest)) if len(rest) else ([], 0)
    if have:
        yield np.concatenate(pending)


class Trace:
    """An open trace: iterate it for record chunks (each pass reads the file again; a stream,
    standard input or a FIFO, is read once). A file that changes while it is read (its size,
    modification time or inode not those open_trace saw) is a TraceError at the end of the
    pass: its records may stop short of its end or mix two versions."""

    def __init__(self, path, format: str, chunk_records: int = 1 << 16,
                 capacity_bytes: int | None = None, part=None, stream: tp.Stream | None = None):
        self.path = pathlib.Path(path)
        self.format = format
        self.chunk_records = int(chunk_records)
        self.capacity_bytes = capacity_bytes
        self.part = part
        self.stream = stream
        self.display = stream.display if stream is not None else str(self.path)
        self.layer_names: list[str] = []
        self._module = get_format(format)
        self._opened = None if stream is not None else self._stat()

    def __iter__(self) -> Iterator[np.ndarray]:
        return self._chunks()

    @property
    def c_format(self) -> int | None:
        """The format's MC_TEXT_* code where memctl's C reader reads it whole (mc_run_text),
        else None (a stream goes through the Python reader, which reads it once)."""
        return tp.C_FORMATS.get(self.format) if self.stream is None else None

    def _stat(self):
        import os
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns, st.st_ino

    def check_unchanged(self, reached: tuple[int, int] | None = None) -> None:
        """A TraceError if the file is not as open_trace found it; reached: where the
        reading stopped (byte offset, number of the line or record there)."""
        if self._opened is None:
            return
        now = self._stat()
        if now == self._opened:
            return
        unit = "record" if getattr(self._module, "BINARY", False) else "line"
        at = (f"; the reading stopped at byte {reached[0]:,} ({unit} {reached[1]:,})"
              if reached else "")
        held = "is gone" if now is None else f"{now[0]:,} bytes"
        raise TraceError(f"{self.display}: the file changed while it was read "
                         f"({self._opened[0]:,} bytes when opened, {held} now){at}: the records "
                         f"read are not the whole trace (truncated or rewritten meanwhile); "
                         f"read a file nothing writes to")

    def resume(self, offset: int, line: int, last_cycle: int, last_line: int
               ) -> Iterator[np.ndarray]:
        """The chunks from the line at byte `offset` (number `line`) on, after a request at
        `last_cycle` on line `last_line`: where mc_run_text stopped (C formats only)."""
        return self._chunks((offset, line), (last_cycle, last_line))

    def _chunks(self, start=None, last=(0, 0)) -> Iterator[np.ndarray]:
        self.layer_names.clear()
        state = tp.ReadState(path=self.path, display=self.display,
                             layer_names=self.layer_names, capacity_bytes=self.capacity_bytes,
                             part=self.part, last_cycle=last[0], last_line=last[1])
        try:
            chunks = self._module.read(self.stream or self.path, state, self.chunk_records,
                                       **({"start": start} if start else {}))
            yield from rechunk(chunks, self.chunk_records)
        except OSError as exc:
            raise tp.trace_error(self.display, None, None,
                                 f"cannot read: {exc.strerror or exc}") from None
        except TraceError:
            self.check_unchanged(state.reached)   # (the cause, when the file changed)
            raise
        self.check_unchanged(state.reached)

    def records(self) -> np.ndarray:
        """Every record in one array (for small traces)."""
        chunks = list(self)
        return np.concatenate(chunks) if chunks else np.zeros(0, _records.RECORD_DTYPE)

    def __repr__(self) -> str:
        return f"Trace({str(self.path)!r}, format={self.format!r})"


def open_trace(path, format: str | None = None, chunk_records: int = 1 << 16,
               capacity_bytes: int | None = None, part=None) -> Trace:
    """Open a trace file for streaming. format: a name in FORMATS, or None to detect it.
    capacity_bytes: when given, an address at or beyond it is an error. part: the memory part
    (pimrt.memctl.load_part), needed by formats of DRAM coordinates (ramulator_rw); its
    capacity is the default capacity_bytes."""
    if capacity_bytes is None and part is not None:
        capacity_bytes = part.capacity_bytes
    path = pathlib.Path(path)
    if chunk_records < 1:
        raise ValueError("chunk_records must be positive")
    if is_stream(path):
        display = "<stdin>" if str(path) == "-" else str(path)
        fmt = None if format is None else get_format(format).NAME
        stream = None
        if fmt is None:
            stream = tp.Stream(path, display)
            fmt = detect_format(stream)
        if getattr(FORMATS[fmt], "BINARY", False):
            if stream is not None:
                stream.__exit__()
            raise TraceError(f"{display}: the {fmt} format is read from a file (its reader "
                             f"seeks in it); standard input, a pipe or a FIFO can bring a "
                             f"text trace only: write it to a file first")
        return Trace(path, fmt, chunk_records, capacity_bytes, part,
                     stream or tp.Stream(path, display))
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file")
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    if not path.is_file():
        raise TraceError(f"{path}: not a regular file, a pipe or a FIFO")
    fmt = detect_format(path) if format is None else get_format(format).NAME
    return Trace(path, fmt, chunk_records, capacity_bytes, part)


def is_stream(path) -> bool:
    """`-` (standard input), or a path to a pipe, FIFO or character device (/dev/stdin on a
    pipe or a terminal): a trace read once, front to back."""
    import os
    import stat
    if str(path) == "-":
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def _format_for_path(path: pathlib.Path) -> str:
    for mod in FORMATS.values():
        if path.suffix.lower() in getattr(mod, "EXTENSIONS", ()):
            return mod.NAME
    return "pimrt"


def open_writer(path, format: str | None = None, layer_names: Iterable[str] | None = None,
                part=None):
    """A writer of the format (by name, or from the file extension: .npy -> npy, else pimrt)
    with write(records), add_layer(name) -> id, close(); a context manager. part: the memory
    part, for formats of DRAM coordinates (ramulator_rw)."""
    path = pathlib.Path(path)
    mod = get_format(format or _format_for_path(path))
    if not hasattr(mod, "Writer"):
        raise TraceError(f"the {mod.NAME} trace format cannot be written")
    if part is not None:
        return mod.Writer(path, layer_names, part=part) if mod.NAME == "ramulator_rw" else \
            mod.Writer(path, layer_names)
    return mod.Writer(path, layer_names)


def write_trace(path, records, format: str | None = None,
                layer_names: Iterable[str] | None = None, part=None) -> int:
    """Write records (one array, or an iterable of chunks such as a Trace or a synthetic
    generator) to path; returns the number of records written (for dramsim3/ramulator: the
    requests, markers being dropped). layer_names default to records.layer_names."""
    live = getattr(records, "layer_names", None) if layer_names is None else None
    chunks: Iterable[np.ndarray] = [records] if isinstance(records, np.ndarray) else records
    with open_writer(path, format, layer_names if layer_names is not None else live,
                     part=part) as w:
        for c in chunks:
            if live is not None and len(live) > len(w.layer_names):
                w.layer_names.extend(live[len(w.layer_names):])  # names read so far
            w.write(c)
        return w.count


def read_records(path, format: str | None = None, **kw) -> tuple[np.ndarray, list[str]]:
    """Read a whole (small) trace: (records, layer_names)."""
    t = open_trace(path, format, **kw)
    return t.records(), t.layer_names


__all__ = [
    "RECORD_DTYPE", "READ", "WRITE", "LAYER", "PARAM", "BARRIER", "HOST", "PIM", "OP_NAMES",
    "REQUESTOR_NAMES", "PARAM_IDS", "PARAM_NAMES", "FORMATS", "Trace", "open_trace",
    "detect_format", "write_trace", "open_writer", "read_records", "rechunk", "TraceError",
    "is_stream",
]

"""A timed training step's memctl stream written as it is fed (`pimrt run --save-trace`):
every record the run gives memctl, in its order, plus a LAYER marker wherever the task's
layer and phase change (markers cost memctl nothing), in pimrt's binary format; the sidecar
(`FILE.layers.json`) holds the layer names and the run (`meta`: model, batch, part, policy,
issue width, code fingerprint, the run's cycles). docs/traces.md.

    sink = StepTrace("step.npy", {"model": "resnet18", "batch": 32})
    time_step(graph, "authority", sink=sink)     # written while memctl runs
"""
from __future__ import annotations

import json
import pathlib

import numpy as np

from pimrt.trace import binary
from pimrt.trace import records as _records

FORMAT = "pimrt step trace 1"
# the window of a timed step (Options.window None: the cursors may drift any distance apart)
UNLIMITED_WINDOW = 2**62 - 1


def part_ref(part) -> dict:
    """The part as its name (a shipped one) or file, and the keys where the run's part differs
    from what that loads to (the host's deeper queue: with_host_buffering; a sweep's set.*)."""
    from pimrt.memctl.config import PARTS_DIR, load_part
    shipped = part.path is not None and pathlib.Path(part.path).parent == PARTS_DIR
    source = (pathlib.Path(part.path).stem if shipped else str(part.path)) if part.path \
        else part.name
    base = load_part(str(part.path) if part.path else part.name)
    over = {}
    for table in ("org", "timing", "controller", "pim", "power", "pim_energy"):
        mine, theirs = getattr(part, table) or {}, getattr(base, table) or {}
        over.update({f"{table}.{k}": v for k, v in mine.items() if theirs.get(k) != v})
    return {"name": part.name, "source": source, "overrides": over,
            "pim": part.pim is not None}


class StepTrace:
    """The sink time_schedule hands its record stream to (record): each task's records are
    written before memctl gets them; close(stats) writes the sidecar with the run's figures."""

    def __init__(self, path, meta: dict | None = None):
        self.path = pathlib.Path(path)
        self.meta = dict(meta or {})
        self.writer = None

    def options(self) -> dict:
        """Extra memctl Options the sink needs of the run (none: it reads the stream only)."""
        return {}

    def record(self, stream, schedule, ctl):
        """Yield `stream` (record arrays: a task's opening one ends with its start SIGNAL,
        event 2 id; its work may follow in several blocks) unchanged, writing it, with a
        LAYER marker before each task whose layer and phase differ from the one before."""
        from pimrt.sweep.code import fingerprint
        self.writer = w = binary.Writer(self.path)
        opts = ctl.options
        self.meta.update({"format": FORMAT, "policy": opts.policy,
                          "issue_width": opts.issue_width,
                          "window": opts.window if opts.window is not None else None,
                          "part": part_ref(ctl.part), "code": fingerprint()["fingerprint"],
                          "code_files": fingerprint()["files"]})
        last, out = None, _Background(w._f)
        try:
            tasks = {t.id: t for t in schedule.tasks}
            for recs in stream:
                starts = recs["value"][(recs["op"] == _records.SIGNAL)
                                       & (recs["value"] % 2 == 0)]
                if len(starts):             # a task opens here
                    task = tasks[int(starts[-1]) // 2]
                    name = f"{task.layer}:{task.phase}"
                    if name != last:
                        out.add(w.layer_marker(name))
                        last = name
                out.add(np.ascontiguousarray(recs, dtype=_records.RECORD_DTYPE))
                yield recs
        finally:
            w.count += out.close()

    def close(self, ctl=None) -> None:
        """Fix the file's header and write the sidecar (with the run's figures when given the
        controller that ran it)."""
        if self.writer is None:
            return
        stats = ctl.stats() if ctl is not None else None
        names = list(self.writer.layer_names)
        self.writer.layer_names = []       # (the sidecar is this object's, below)
        self.writer.close()
        if stats is not None:
            self.meta["run"] = {k: stats[k] for k in ("cycles", "mode_switches", "requests",
                                                      "records")}
            self.meta["run"]["requestors"] = {
                who: {k: r[k] for k in ("requests", "bytes", "latency_sum", "row_hits")}
                for who, r in stats["requestors"].items()}
            self.meta["requests"] = {who: r["requests"]
                                     for who, r in stats["requestors"].items()}
        self.meta["records"] = self.writer.count
        side = binary.sidecar_path(self.path)
        side.write_text(json.dumps({"layers": names, "meta": self.meta}, indent=0) + "\n",
                        encoding="utf-8")


class _Background:
    """Writes record arrays to a file in a thread (the file's writes overlap the simulation),
    in batches of BATCH records, at most DEPTH batches waiting: what is held is bounded."""

    BATCH, DEPTH = 1 << 18, 4

    def __init__(self, f):
        import queue
        import threading
        self._f, self._q = f, queue.Queue(self.DEPTH)
        self._batch, self._size, self.count, self.error = [], 0, 0, None
        self._thread = threading.Thread(target=self._run, name="trace-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            batch = self._q.get()
            if batch is None:
                return
            if self.error is None:
                try:
                    for arr in batch:
                        self._f.write(arr.data)
                except OSError as exc:
                    self.error = exc

    def add(self, recs) -> None:
        self._batch.append(recs)
        self._size += len(recs)
        self.count += len(recs)
        if self._size >= self.BATCH:
            self._q.put(self._batch)
            self._batch, self._size = [], 0
            if self.error is not None:
                self._raise()

    def close(self) -> int:
        """Write what is left, wait for the thread; the records written."""
        if self._batch:
            self._q.put(self._batch)
            self._batch = []
        self._q.put(None)
        self._thread.join()
        if self.error is not None:
            self._raise()
        return self.count

    def _raise(self):
        from pimrt.output import OutputError
        raise OutputError(f"{self._f.name}: cannot write the trace: "
                          f"{self.error.strerror or self.error}")


def read_meta(path) -> dict | None:
    """The run a trace was written by (its sidecar's meta), or None (no sidecar, or a plain
    list of layer names)."""
    side = binary._find_sidecar(pathlib.Path(path))
    if side is None:
        return None
    from pimrt.jsonfile import read_json
    from pimrt.errors import TraceError
    data = read_json(side, lambda msg: TraceError(f"{side}: {msg}"))
    return data.get("meta") if isinstance(data, dict) else None


"""One task of a sweep (pimrt/sweep/tasks.py), run where it is sent (a local worker process or
a Dask worker), through the same entry points as `pimrt run` (pimrt.runtime.session and
report): a baseline (the serial host+PIM step, the GPU-only step, the contention-free bound,
the functional check) or a point (its policy on the baselines' results, and its folder).

A task returns {"ok": True, "value": ..., "worker", "wall_s", "code"} or {"ok": False,
"error", "detail", "worker", "code"}: an error in the simulation is a result, not an exception,
so the client can say which task failed and fail the points that need it. A point's folder is
written to a temporary folder and sent back as bytes, so the workers need no file system
shared with the client. "code" is the fingerprint of the simulator this worker runs
(pimrt/sweep/code.py): the client refuses results of other code than its own.

A point's step trace (`save_trace`) is never held whole: it is written as the step runs,
either straight into the point's final folder under a temporary name (`.NAME.XXXX.partial`,
renamed by the client when it records the point) where this worker sees the client's folder
(local processes always; a Dask worker that finds the sweep's token file, `dest`), or into a
spool file on the worker that the client reads back in chunks of TRACE_CHUNK bytes
(read_chunk) and removes (remove_spool)."""
from __future__ import annotations

import os
import pathlib
import socket
import tempfile
import time
import traceback

from pimrt.errors import PimrtError


def run_task(kind: str, options: dict, names: tuple = (), *deps: dict,
             dest: dict | None = None) -> dict:
    """kind: a baseline's kind or "point"; deps: the results of the tasks named by `names`
    (their kinds), all of them ok; dest: where a point's step trace goes (Store.trace_dest)."""
    from pimrt.sweep.code import fingerprint
    t0 = time.perf_counter()
    try:
        given = {name: d["value"] for name, d in zip(names, deps)}
        value = POINT(options, given, dest) if kind == "point" else BASELINE[kind](options)
        out = {"ok": True, "value": value, "worker": _where(),
               "wall_s": time.perf_counter() - t0}
    except Exception as exc:                 # recorded with the task and its points
        out = _error(exc)
    out["code"] = fingerprint()["fingerprint"]
    return out


def _error(exc: BaseException) -> dict:
    text = str(exc) if isinstance(exc, PimrtError) else f"{type(exc).__name__}: {exc}"
    return {"ok": False, "error": text.splitlines()[0] if text else type(exc).__name__,
            "detail": "".join(traceback.format_exception(exc)), "worker": _where()}


def _where() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def system_of(o: dict):
    """The point's memory part and host part, loaded with its part keys."""
    from pimrt.host import load_host_part
    from pimrt.memctl import load_part
    from pimrt.sweep.spec import part_keys
    mem, host = part_keys(o)
    return load_part(o["part"], mem or None), load_host_part(o["host_part"], host or None)


class _Setup:
    """What every task of a system builds first: the graph, the parts, the host times."""

    def __init__(self, o: dict, graph=None):
        from pimrt.runtime import session
        from pimrt.runtime.exchange import ExchangeConfig
        self.exchange = ExchangeConfig(o["update"], o["world"], o["density"], o["link_gbps"])
        self.graph = graph if graph is not None else session.captured(
            o["model"], o["batch"], o["input"], o["allow_unsupported"], o["precision"])
        self.part, self.host = system_of(o)
        self.slices = session.slices_for(o["batch"], o["slices"])
        self.times, self.host_info = session.host_times(
            self.graph, o["host_times"], o["groups"], self.part, self.host,
            self.exchange.mode, True, slices=self.slices)
        if self.host_info.get("source") == "model":         # the name, as pimrt run has it
            self.host_info["host_part"] = o["host_part"]

    def timed(self, o: dict, policy: str, groups: int = 1, **kw):
        from pimrt.runtime import session
        return session.timed(self.graph, policy, groups, self.part, self.host, True,
                             layrub=o["layrub"], exchange=self.exchange,
                             host_times=self.times, **kw)


def serial(o: dict):
    return _Setup(o).timed(o, "serial")


def gpu_only(o: dict):
    return _Setup(o).timed(o, "gpu_only")


def bound(o: dict) -> dict:
    """The bound, and the planned schedule it made on the graph (pimrt.runtime.timing keeps
    the last few per graph object): sent with the graph, a pipelined point of the same
    (groups, slices, plan) reuses it instead of timing every task alone again."""
    from pimrt.runtime import timing
    from pimrt.runtime.timing import contention_free_bound
    s = _Setup(o)
    value = contention_free_bound(s.graph, o["groups"], s.part, s.host,
                                  plan=not o["no_plan"], host_times=s.times,
                                  slices=s.slices, exchange=s.exchange, layrub=o["layrub"])
    planned = [(k, r) for g, k, r in getattr(timing, "_PLANNED", []) if g is s.graph]
    return {"bound": value, "graph": s.graph, "planned": planned}


def functional(o: dict) -> dict:
    from pimrt.runtime import session
    from pimrt.runtime.functional_amp import check
    from pimrt.runtime.exchange import ExchangeConfig
    ex = ExchangeConfig(o["update"], o["world"], o["density"], o["link_gbps"])
    return check(o["model"], o["batch"], o["input"], o["functional"], o["groups"],
                 update=ex.mode, density=ex.density,
                 slices=session.slices_for(o["batch"], o["slices"]), precision=o["precision"])


BASELINE = {"serial": serial, "gpu_only": gpu_only, "bound": bound, "functional": functional}


def point(o: dict, given: dict, dest: dict | None = None) -> dict:
    """The point's policy on the graph its bound was planned on, and its folder (its step
    trace, when asked, as a file the client renames or reads back: "traces")."""
    from pimrt.runtime import report, session, timing
    b = given["bound"]
    cache = getattr(timing, "_PLANNED", None)
    if cache is not None and not any(g is b["graph"] for g, _, _ in cache):
        cache.extend((b["graph"], k, r) for k, r in b["planned"])
        del cache[:-4]
    s = _Setup(o, b["graph"])
    meta = {"model": o["model"], "batch": o["batch"], "input": o["input"],
            "slices": s.slices, "part": o["part"], "host_part": o["host_part"],
            "precision": o["precision"],
            "host_times": s.host_info, "system": session.system(s.part, s.host)}
    from pimrt.sweep.spec import part_keys
    mem, host = part_keys(o)
    if mem or host:
        meta["part_keys"] = {"memory": mem, "host": host}
    if o["functional"] != "none":
        meta["functional"] = given["functional"]
    meta["layrub"] = o["layrub"]
    sink, trace = _trace_sink(o, meta, dest)
    try:
        with tempfile.TemporaryDirectory(prefix="pimrt-sweep-") as tmp:
            run = given["serial"] if o["policy"] == "serial" and sink is None else s.timed(
                o, o["policy"], o["groups"], plan=not o["no_plan"], slices=s.slices,
                authority_rule=o["authority_rule"], sink=sink)
            summary = report.write_all(run, given["serial"], meta, tmp, given["gpu_only"],
                                       b["bound"])
            files = {p.name: p.read_bytes() for p in sorted(pathlib.Path(tmp).iterdir())
                     if p.is_file() and p.name != "summary.json"}
        if trace is not None:                    # its sidecar (small) travels with the files
            from pimrt.trace.binary import sidecar_path
            side = sidecar_path(pathlib.Path(trace["path"]))
            files[sidecar_path(pathlib.Path(trace["name"])).name] = side.read_bytes()
            side.unlink()
            trace["size"] = os.path.getsize(trace["path"])
    except BaseException:
        if trace is not None:                    # nothing half written is left behind
            remove_spool(trace["path"], trace["in_place"])
        raise
    summary["plots"] = [pathlib.Path(p).name for p in summary["plots"]]
    return {"summary": summary, "files": files, "traces": [trace] if trace else []}


PARTIAL = ".partial"         # a trace being written: .NAME.XXXX.partial (and its sidecar)
TRACE_CHUNK = 8 << 20        # the bytes of a trace sent back in one piece
SEND_ENV = "PIMRT_SWEEP_SEND_TRACES"   # set on a worker: send traces back even if shared


def shares_folder(dest: dict) -> bool:
    """Whether this worker sees the client's results folder: the sweep's token file holds
    the token the client wrote there (the same file system, or one shared at the same
    path). Local processes always do."""
    if dest.get("local"):
        return True
    if os.environ.get(SEND_ENV):
        return False
    try:
        return pathlib.Path(dest["token_file"]).read_text() == dest["token"]
    except (OSError, ValueError, KeyError):
        return False


def _trace_sink(o: dict, meta: dict, dest: dict | None):
    """`save_trace = "NAME"`: the point's step written as it runs (pimrt.trace.step) to a
    temporary name in the point's final folder (where this worker shares it) or in a spool
    folder on this worker; (sink, what the client needs to put it in place) or (None, None)."""
    if not o.get("save_trace"):
        return None, None
    from pimrt.trace.step import StepTrace
    name = o["save_trace"]
    in_place = dest is not None and shares_folder(dest)
    tmp = None
    if in_place:
        try:
            folder = pathlib.Path(dest["folder"])
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=PARTIAL, dir=folder)
            os.fchmod(fd, 0o644)                 # as the point's other files
            os.close(fd)
        except OSError:                          # seen but not writable here: send it back
            in_place = False
    if not in_place:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=PARTIAL,
                                   dir=tempfile.mkdtemp(prefix="pimrt-sweep-trace-"))
        os.fchmod(fd, 0o644)
        os.close(fd)
    keys = ("model", "batch", "input", "host_part", "precision", "slices")
    sink = StepTrace(tmp, {**{k: meta[k] for k in keys}, "step": o["policy"]})
    trace = {"name": name, "path": tmp, "in_place": in_place}
    if not in_place:
        trace["worker"] = _dask_worker()
    return sink, trace


def _dask_worker() -> str | None:
    """This Dask worker's address (the client reads a spooled trace from it), or None."""
    try:
        from distributed import get_worker
        return get_worker().address
    except (ImportError, ValueError):
        return None


def read_chunk(path: str, offset: int, size: int) -> bytes:
    """At most `size` bytes of a spooled trace from `offset` (run on the worker that holds it)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(min(size, TRACE_CHUNK))


def remove_spool(path: str, in_place: bool = False) -> None:
    """A trace file the client has read back or will not use: the file, its sidecar, and the
    spool folder made for it (not a point's folder)."""
    p = pathlib.Path(path)
    for f in (p, p.with_name(p.name + ".layers.json")):
        try:
            f.unlink()
        except OSError:
            pass
    if not in_place and p.parent.name.startswith("pimrt-sweep-trace-"):
        try:
            p.parent.rmdir()
        except OSError:
            pass


POINT = point

"""One group of points, timed where it runs (a local worker process or a Dask worker): the
group's baselines once (serial host+PIM and GPU-only on its system; the contention-free bound
once per groups/slices/plan), then each point's policy, through the same entry points as
`pimrt run` (pimrt.runtime.session and report). Each point's folder is written to a temporary
folder and sent back as bytes, so the workers need no file system shared with the client."""
from __future__ import annotations

import os
import pathlib
import socket
import tempfile
import time
import traceback

from pimrt.errors import PimrtError


def run_group(points: list[dict]) -> list[dict]:
    """points: [{"id", "options"}] sharing their baselines -> one result each:
    {"id", "ok", "summary", "files" {name: bytes}} or {"id", "ok": False, "error", "detail"}."""
    try:
        base = _Baselines(points[0]["options"])
    except Exception as exc:                       # every point of the group fails with it
        err = _error(exc)
        return [{"id": p["id"], **err} for p in points]
    out = []
    for p in points:
        try:
            out.append({"id": p["id"], "ok": True, **base.point(p["options"])})
        except Exception as exc:
            out.append({"id": p["id"], **_error(exc)})
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


class _Baselines:
    """What every point of a group shares: the graph, the system, serial and GPU-only."""

    def __init__(self, o: dict):
        from pimrt.runtime import session
        from pimrt.runtime.exchange import ExchangeConfig
        t0 = time.perf_counter()
        self.exchange = ExchangeConfig(o["update"], o["world"], o["density"], o["link_gbps"])
        self.graph = session.captured(o["model"], o["batch"], o["input"],
                                      o["allow_unsupported"])
        self.part, self.host = system_of(o)
        self.system = session.system(self.part, self.host)
        self.times, self.host_info = session.host_times(
            self.graph, o["host_times"], o["groups"], self.part, self.host,
            self.exchange.mode, True, slices=session.slices_for(o["batch"], o["slices"]))
        if self.host_info.get("source") == "model":         # the name, as pimrt run has it
            self.host_info["host_part"] = o["host_part"]
        self.serial = session.timed(self.graph, "serial", 1, self.part, self.host, True,
                                    layrub=o["layrub"], exchange=self.exchange,
                                    host_times=self.times)
        self.gpu = session.timed(self.graph, "gpu_only", 1, self.part, self.host, True,
                                 layrub=o["layrub"], exchange=self.exchange,
                                 host_times=self.times)
        self.bounds: dict = {}          # the bound (and functional checks) per their key
        self.wall_s = time.perf_counter() - t0

    def bound(self, o: dict, slices: int) -> dict:
        from pimrt.runtime.timing import contention_free_bound
        plan = not o["no_plan"]
        key = (o["groups"], slices, plan)
        if key not in self.bounds:
            self.bounds[key] = contention_free_bound(
                self.graph, o["groups"], self.part, self.host, plan=plan and not o["layrub"],
                host_times=self.times, slices=slices, exchange=self.exchange)
        return self.bounds[key]

    def point(self, o: dict) -> dict:
        from pimrt.runtime import report, session
        slices = session.slices_for(o["batch"], o["slices"])   # checked before any work
        meta = {"model": o["model"], "batch": o["batch"], "input": o["input"],
                "slices": slices, "part": o["part"], "host_part": o["host_part"],
                "host_times": self.host_info, "system": self.system}
        from pimrt.sweep.spec import part_keys
        mem, host = part_keys(o)
        if mem or host:
            meta["part_keys"] = {"memory": mem, "host": host}
        if o["functional"] != "none":       # once per backend, groups and slices
            from pimrt.runtime.functional import check_step
            key = ("functional", o["functional"], o["groups"], slices)
            if key not in self.bounds:
                self.bounds[key] = check_step(o["model"], o["batch"], o["input"],
                                              o["functional"], o["groups"],
                                              update=self.exchange.mode,
                                              density=self.exchange.density, slices=slices)
            meta["functional"] = self.bounds[key]
        meta["layrub"] = o["layrub"]
        run = self.serial if o["policy"] == "serial" else session.timed(
            self.graph, o["policy"], o["groups"], self.part, self.host, True,
            layrub=o["layrub"], exchange=self.exchange, plan=not o["no_plan"],
            host_times=self.times, slices=slices)
        bound = self.bound(o, slices)
        with tempfile.TemporaryDirectory(prefix="pimrt-sweep-") as tmp:
            s = report.write_all(run, self.serial, meta, tmp, self.gpu, bound)
            files = {p.name: p.read_bytes() for p in sorted(pathlib.Path(tmp).iterdir())
                     if p.is_file() and p.name != "summary.json"}
        s["plots"] = [pathlib.Path(p).name for p in s["plots"]]
        return {"summary": s, "files": files, "worker": _where(),
                "baselines_wall_s": self.wall_s}

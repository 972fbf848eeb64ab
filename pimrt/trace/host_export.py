"""A GPU-only step's host requests out to other simulators (`pimrt run --save-trace FILE
--format dramsim3|ramulator`): each request with the cycle memctl's host front end offered
it in the run (its arrival), in the order the host issued them, written as the run goes
(completions are matched to their requests and written once every earlier request has
arrived). DRAMsim3's format keeps the cycles (memory cycles of the run's part); Ramulator
2's load/store format has none and keeps the order. docs/traces.md."""
from __future__ import annotations

import numpy as np

from pimrt.trace.records import HOST, RECORD_DTYPE, WRITE

# completions gathered before they are matched to their requests and the prefix written
MATCH_EVERY = 1 << 18


class HostTrace:
    """The sink of time_schedule for a host-only schedule (gpu_only_schedule)."""

    def __init__(self, path, format: str):
        from pimrt.trace import get_format
        self.path, self.format = path, get_format(format).NAME
        self.writer = None
        self.count = 0

    def options(self) -> dict:
        return {"keep_completions": True}      # their arrival cycles

    def record(self, stream, schedule, ctl):
        from pimrt.trace import open_writer
        self.writer = open_writer(self.path, self.format)
        self._ctl, self._base = ctl, 0
        self._idx, self._addr, self._op = [], [], []      # requests not written yet
        self._comp, self._ncomp = [], 0
        for recs in stream:
            req = np.flatnonzero(recs["op"] <= WRITE)
            if len(req) and (recs["requestor"][req] != HOST).any():
                from pimrt.errors import TraceError
                raise TraceError(f"{self.path}: the {self.format} format has host requests "
                                 f"only; this step has PIM requests (write the GPU-only step)")
            self._idx.append(req.astype(np.uint64) + np.uint64(self._base))
            self._addr.append(recs["addr"][req])
            self._op.append(recs["op"][req])
            self._base += len(recs)
            self._take()
            if self._ncomp >= MATCH_EVERY:
                self._write()
            yield recs

    def _take(self) -> None:
        c = self._ctl.take_completions()
        if len(c):
            self._comp.append(c)
            self._ncomp += len(c)

    def _write(self) -> None:
        """Match the completions to their requests; write the requests up to the first one
        that has not arrived yet (a request arrives after every one before it: one cursor)."""
        idx = np.concatenate(self._idx)
        addr, op = np.concatenate(self._addr), np.concatenate(self._op)
        arrival = np.full(len(idx), np.iinfo(np.uint64).max, np.uint64)
        comp = np.concatenate(self._comp) if self._comp else np.zeros((0, 4), np.uint64)
        at = np.searchsorted(idx, comp[:, 0])
        arrival[at] = comp[:, 3]
        ready = np.flatnonzero(arrival == np.iinfo(np.uint64).max)
        upto = ready[0] if len(ready) else len(idx)
        out = np.zeros(upto, RECORD_DTYPE)
        out["addr"], out["op"], out["cycle"], out["requestor"] = \
            addr[:upto], op[:upto], arrival[:upto], HOST
        self.writer.write(out)
        self.count += int(upto)
        self._idx, self._addr, self._op = [idx[upto:]], [addr[upto:]], [op[upto:]]
        left = comp[:, 0] >= (idx[upto] if upto < len(idx) else np.uint64(2**63))
        self._comp, self._ncomp = [comp[left]], int(left.sum())

    def close(self, ctl=None) -> None:
        if self.writer is None:
            return
        self._take()
        self._write()
        self.writer.close()

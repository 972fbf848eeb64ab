"""The COMPUTE marker (issue 36): a requestor computes while the requests after it issue, the
way a GPU kernel's SMs compute while their loads are in flight; its next marker waits for it."""
from __future__ import annotations

import numpy as np
import pytest

import pimrt.trace as T
from pimrt.memctl import Controller, Options
from pimrt.memctl.config import load_part
from pimrt.trace.records import (COMPUTE, DELAY, HOST, OP_NAMES, PIM, RECORD_DTYPE, SIGNAL,
                                 WAIT)


def run(first_op: int, second: tuple[int, int] | None = None, n: int = 2000) -> int:
    """Cycle at which SIGNAL 1 fires after [first_op 3000, n reads, second, SIGNAL 1]."""
    r = np.zeros(n + 3, RECORD_DTYPE)
    r[0]["op"], r[0]["value"] = first_op, 3000
    r[1:n + 1]["addr"] = np.arange(1, n + 1, dtype=np.uint64) * 64
    r[n + 1]["op"], r[n + 1]["value"] = second or (DELAY, 0)
    r[n + 2]["op"], r[n + 2]["value"] = SIGNAL, 1
    ctl = Controller(load_part("hbm2_pim"), Options(policy="serial", issue_width=4))
    ctl.feed(r)
    ctl.finish()
    return int(ctl.event_table()[1][1])


def test_requests_issue_while_it_computes():
    assert run(COMPUTE) == 3000                      # 2000 reads fit under 3000 cycles
    assert run(DELAY) > 3000 + 400                   # after a DELAY they add their time
    assert run(COMPUTE, (COMPUTE, 3000)) == 6000     # the next COMPUTE waits for the first
    # more reads than the compute covers: memory-bound, the reads' own time
    assert run(COMPUTE, n=40000) == pytest.approx(run(DELAY, n=40000) - 3000, rel=0.05)


def test_compute_marker_round_trips_as_text(tmp_path):
    r = np.zeros(5, RECORD_DTYPE)
    r["op"] = [COMPUTE, 0, DELAY, SIGNAL, WAIT]
    r["requestor"] = [HOST, HOST, PIM, HOST, PIM]
    r["value"] = [120, 0, 7, 3, 3]
    r["addr"][1] = 4096
    path = tmp_path / "t.trace"
    T.write_trace(path, [r], "pimrt", [])
    text = path.read_text()
    assert "@compute host 120" in text and OP_NAMES[COMPUTE] == "COMPUTE"
    back, _ = T.read_records(path)
    assert list(back["op"]) == list(r["op"]) and list(back["value"]) == list(r["value"])
    assert list(back["requestor"]) == list(r["requestor"])

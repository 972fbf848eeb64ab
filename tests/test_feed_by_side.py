"""memctl fed by side (issue 38, memory): a step's host stream and PIM stream fed each on its
own (Controller.feed_side; pimrt.runtime.sides) run exactly as the one stream fed whole does,
and memctl then holds only what each side's cursor has not read: what it holds no longer grows
with the step, where the one stream's grows with how far the PIM runs ahead of the host."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pimrt.memctl import Controller, Options, load_part
from pimrt.runtime.sides import SHARED_OPS, SIDE_FEED_RECORDS
from pimrt.trace.records import (BARRIER, COMPUTE, DELAY, PARAM, PARAM_IDS, READ, RECORD_DTYPE,
                                 SIGNAL, WAIT, WRITE)

PART = load_part("hbm2_pim")
OPS = [READ, READ, READ, WRITE, WRITE, DELAY, COMPUTE, SIGNAL, SIGNAL, WAIT, WAIT, PARAM]
ROW = st.tuples(st.sampled_from(OPS), st.sampled_from([0, 1]), st.integers(0, 1 << 12),
                st.integers(0, 40), st.sampled_from(sorted(PARAM_IDS.values())))


def _stream(rows) -> np.ndarray:
    """Records of the drawn rows; each SIGNAL its own event, each WAIT for one of them."""
    recs = np.zeros(len(rows), RECORD_DTYPE)
    signals = [i for i, r in enumerate(rows) if r[0] == SIGNAL] or [0]
    for i, (op, who, addr, value, param) in enumerate(rows):
        recs[i]["op"], recs[i]["requestor"], recs[i]["addr"] = op, who, 64 * addr
        recs[i]["param"] = param if op == PARAM else 0
        recs[i]["value"] = {SIGNAL: i, WAIT: signals[value % len(signals)]}.get(
            op, value % 9 if op == PARAM else value)
    return recs


def _result(ctl) -> dict:
    return {"stats": ctl.stats(), "events": ctl.events().tolist(),
            "modes": ctl.mode_switches().tolist()}


def _one_stream(recs, policy):
    """The run of the one stream fed whole (no cursor ever waits for more records)."""
    ctl = Controller(PART, Options(policy=policy))
    try:
        ctl.feed(recs, last=True)
        ctl.finish()
    except Exception as exc:                  # (an error: the same one by side)
        return type(exc)
    return _result(ctl)


def _by_side(recs, policy, chunks):
    ctl = Controller(PART, Options(policy=policy))
    shared = np.isin(recs["op"], SHARED_OPS)
    sides = [recs[shared | (recs["requestor"] == s)] for s in (0, 1)]
    at, k = [0, 0], 0
    try:
        hungry = [0, 1]
        while hungry:
            for s in hungry:
                n = chunks[k % len(chunks)]
                k += 1
                ctl.feed_side(s, sides[s][at[s]:at[s] + n], last=at[s] + n >= len(sides[s]))
                at[s] += n
            hungry = ctl.hungry()
        ctl.finish()
    except Exception as exc:
        return type(exc)
    return _result(ctl)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(ROW, max_size=60), chunks=st.lists(st.integers(1, 9), min_size=1,
                                                        max_size=4),
       policy=st.sampled_from(["authority", "bank_partition"]))
def test_fed_by_side_in_any_chunks_runs_as_the_one_stream(rows, chunks, policy):
    recs = _stream(rows)
    assert _by_side(recs, policy, chunks) == _one_stream(recs, policy)


def test_feed_side_is_refused_where_one_cursor_reads_both_or_the_side_is_wrong():
    from pimrt.errors import SimulationError
    recs = _stream([(READ, 1, 5, 0, 0)])
    with pytest.raises(SimulationError, match="one stream"):
        Controller(PART, Options(policy="serial")).feed_side(1, recs)
    with pytest.raises(Exception, match="requestor 1"):
        Controller(PART, Options(policy="authority")).feed_side(0, recs)
    with pytest.raises(Exception, match="BARRIER"):
        Controller(PART, Options(policy="authority")).feed_side(1, _stream([(BARRIER, 1, 0, 0,
                                                                             0)]))
    ctl = Controller(PART, Options(policy="authority"))
    ctl.feed(recs)
    with pytest.raises(SimulationError, match="one stream"):
        ctl.feed_side(1, recs)


def _step(monkeypatch, batch: int, by_side: bool):
    """A pipelined step of a small CNN under authority: its timing and the most records
    memctl held."""
    from pimrt.runtime.session import captured
    from pimrt.runtime.timing import time_step
    held, finish = [], Controller.finish

    def kept(self, *a, **k):
        finish(self, *a, **k)
        held.append(self.held()["peak"])
    with monkeypatch.context() as m:
        m.setattr(Controller, "finish", kept)
        if not by_side:
            m.setattr(Controller, "by_side", property(lambda self: False))
        step = time_step(captured("resnet_cifar_20", batch, 32), "authority", plan=False,
                         rule=False)
    return step, held[-1]


def test_a_step_fed_by_side_is_the_same_and_what_memctl_holds_does_not_grow(monkeypatch):
    # small chunks and blocks of a task's records, so that a small step shows it
    chunk = 4096
    monkeypatch.setattr("pimrt.runtime.sides.SIDE_FEED_RECORDS", chunk)
    monkeypatch.setattr("pimrt.runtime.timing.FEED_RECORDS", chunk)
    monkeypatch.setattr("pimrt.runtime.work.BLOCK_REQUESTS", chunk)
    held = {}
    for batch in (2, 4):                      # the step, and one twice as long
        one, held[batch, False] = _step(monkeypatch, batch, False)
        side, held[batch, True] = _step(monkeypatch, batch, True)
        assert side.start.tolist() == one.start.tolist() and \
            side.end.tolist() == one.end.tolist()
        assert side.stats == one.stats and side.records == one.records
    # the one stream: what the PIM runs ahead of the host, more in a longer step (20,371 and
    # 34,221 records when written); by side about a chunk a side (7,408 and 7,788)
    assert held[4, False] > 1.5 * held[2, False] and held[2, False] > 4 * chunk
    assert held[2, True] <= 4 * chunk and held[4, True] <= min(4 * chunk, 1.1 * held[2, True])

"""The plan's second timing of a side's tasks alone starts from a copy of the first's controller
where their streams part (pimrt.runtime.prefix): the same durations as timing it whole."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pimrt.errors import SimulationError
from pimrt.memctl import Controller, Options
from pimrt.runtime import session, timing
from pimrt.runtime.prefix import Prefixes, _digests, _segments
from pimrt.runtime.schedule import Task
from pimrt.runtime.timing import alone_durations, side_tasks, step_part


def _task(i, phase):
    return Task(id=i, side="host", layer=f"l{i}", kind="conv", phase=phase, group=-1, groups=1,
                deps=[], numel=1, tensors={})


def test_boundaries_from_the_first_backward_task():
    tasks = [_task(i, "fwd") for i in range(10)] + [_task(10 + i, "bwd_data") for i in range(20)]
    assert Prefixes(keep=4).boundaries(tasks) == [10, 15, 20, 25]
    assert Prefixes(keep=1).boundaries(tasks) == [10]
    assert Prefixes(keep=0).boundaries(tasks) == []
    assert Prefixes().boundaries(tasks[:10]) == []          # nothing but the forward pass
    assert Prefixes(keep=50).boundaries(tasks) == list(range(10, 30))   # at most one a task


def test_segments_and_digests():
    assert _segments(0, [3, 5], 8) == [(0, 3), (3, 5), (5, 8)]
    assert _segments(3, [3, 5], 8) == [(3, 5), (5, 8)]
    assert _segments(6, [3, 5], 8) == [(6, 8)]
    a = [_task(i, "fwd") for i in range(6)]
    b = a[:4] + [_task(9, "fwd"), a[5]]
    da, db = _digests(a, {0, 2, 4, 5}), _digests(b, {0, 2, 4, 5})
    assert da[0] == db[0] and da[2] == db[2] and da[4] == db[4]   # tasks[:k] the same
    assert da[5] != db[5]
    assert len({da[0], da[2], da[4]}) == 3


@pytest.fixture(scope="module")
def mbv2():
    """MobileNetV2, batch 4, 32x32: a graph whose plan moves two weight gradients."""
    return session.captured("mobilenetv2", 4, 32), step_part("v100_hbm2_pim", "v100")


def test_planned_durations_the_same_as_timed_whole(mbv2):
    graph, part = mbv2
    timing._PLANNED.clear()
    schedule, duration, defer = timing.planned_schedule(graph, 1, part, "v100", slices=4)
    assert defer == {"features_14_conv_0_0": "features_4_conv_0_0",
                     "classifier_1": "features_18_0"}
    whole = alone_durations.__wrapped__(schedule, graph, part, "v100")
    assert whole == duration
    assert len(duration) == len(schedule.tasks)


def test_second_timing_starts_where_the_streams_part(mbv2):
    graph, part = mbv2
    rules = timing.pipelined_rules(part, "v100", 1, 4)
    first = timing.pipelined_schedule(graph, 1, part, "v100", "sgd", 4, {}, rules)
    second = timing.pipelined_schedule(graph, 1, part, "v100", "sgd", 4,
                                       {"classifier_1": "features_18_0"}, rules)
    store = Prefixes()
    alone_durations.__wrapped__(first, graph, part, "v100", prefix=store)
    assert store.reused == {"host": 0, "pim": 0}
    got = alone_durations.__wrapped__(second, graph, part, "v100", prefix=store)
    assert got == alone_durations.__wrapped__(second, graph, part, "v100")
    for side in ("host", "pim"):
        a, b = side_tasks(first, side), side_tasks(second, side)
        parted = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        # the latest boundary at or before the first task that differs
        assert store.reused[side] == max(k for k in store.boundaries(a) if k <= parted) > 0


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_moved_task_gives_the_whole_timings_cycles(mbv2, data):
    """A backward host task moved later (the host's tasks alone keep their order on their
    side): timed after the unmoved stream with its copies, the same durations as whole."""
    graph, part = mbv2
    schedule = timing.pipelined_schedule(graph, 1, part, "v100", "sgd", 4, {},
                                         timing.pipelined_rules(part, "v100", 1, 4))
    host = side_tasks(schedule, "host")
    first = next(i for i, t in enumerate(host) if t.phase != "fwd")
    src = data.draw(st.integers(first, len(host) - 2), label="task moved")
    dst = data.draw(st.integers(src + 1, len(host) - 1), label="to after")
    moving = host[src]
    if any(src in t.deps for t in host[src + 1:dst + 1]):
        return                           # (a task it feeds would come before it)
    order = host[:src] + host[src + 1:dst + 1] + [moving] + host[dst + 1:]
    new = {t.id: i for i, t in enumerate(order)}
    moved = [dataclasses.replace(t, id=new[t.id], deps=[new[d] for d in t.deps]) for t in order]
    a = dataclasses.replace(schedule, tasks=host, pipelined=False)
    b = dataclasses.replace(schedule, tasks=moved, pipelined=False)
    store = Prefixes(keep=data.draw(st.integers(1, 12), label="keep"))
    kw = dict(exchange=None, host_times=None)
    timing.time_schedule(a, graph, part, "v100", "serial", prefix=(store, "host"), **kw)
    got = timing.time_schedule(b, graph, part, "v100", "serial", prefix=(store, "host"), **kw)
    want = timing.time_schedule(b, graph, part, "v100", "serial", **kw)
    assert np.array_equal(got.start, want.start) and np.array_equal(got.end, want.end)
    assert got.records == want.records and got.stats == want.stats
    assert store.reused["host"] == max(k for k in store.boundaries(host) if k <= src) > 0


def test_clone_refused_after_finish_and_with_a_command_log(tmp_path):
    from pimrt.memctl.controller import CommandLog
    ctl = Controller("hbm2", Options(policy="serial"))
    ctl.finish()
    with pytest.raises(SimulationError, match="after finish"):
        ctl.clone()
    log = CommandLog(tmp_path / "cmds.csv")
    logged = Controller("hbm2", Options(policy="serial"), cmdlog=log)
    with pytest.raises(SimulationError, match="command log"):
        logged.clone()
    log.close()

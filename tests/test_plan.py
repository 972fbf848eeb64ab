"""Weight gradients moved later in the host's backward order (schedule `defer`, chosen by
pimrt.runtime.plan): same tasks and dependencies, the dW just before the target CONV's
backward, its update after it; the plan never lengthens the list schedule it is made on."""
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.errors import ConfigError
from pimrt.graph import capture
from pimrt.runtime.plan import list_schedule, plan_deferrals, task_key
from pimrt.runtime.schedule import build_schedule
from pimrt.runtime.timing import time_step

from test_runtime import cnns, small_cnn


def _backward_convs(s) -> list[str]:
    """CONVs with a dX, in the host's backward order."""
    out = []
    for t in s.tasks:
        if t.side == "host" and t.phase == "bwd_data" and t.layer not in out:
            out.append(t.layer)
    return out


def _by_key(s) -> dict:
    by_id = {t.id: t for t in s.tasks}
    return {task_key(t): sorted(task_key(by_id[d]) for d in t.deps) for t in s.tasks}


def test_deferred_dw_runs_before_the_target_convs_backward_and_its_update_after_it():
    g = capture(small_cnn([8, 16, 16], [False, True, True], None), (2, 3, 8, 8))
    base = build_schedule(g, 2)
    convs = _backward_convs(base)
    src, dst = convs[0], convs[2]
    s = build_schedule(g, 2, defer={src: dst})
    assert _by_key(s) == _by_key(base)             # the same tasks, waiting for the same ones
    host = [t for t in s.tasks if t.side == "host"]
    dw = next(i for i, t in enumerate(host) if t.layer == src and t.phase == "bwd_weight")
    after = host[dw + 1]
    assert (after.layer, after.phase) == (dst, "bwd_data")   # right before the target's dX
    before = [(t.layer, t.phase) for t in host[:dw]]
    assert (convs[1], "bwd_weight") in before and (dst, "bwd_data") not in before
    pos = {t.id: i for i, t in enumerate(s.tasks)}
    assert all(pos[d] < pos[t.id] for t in s.tasks for d in t.deps)
    update = next(t for t in s.tasks if t.layer == src and t.kind == "update")
    assert host[dw].id in update.deps
    # the serial baseline keeps each dW right after its dX
    serial = build_schedule(g, 1, pipelined=False, defer={src: dst})
    sh = [(t.layer, t.phase) for t in serial.tasks if t.side == "host"]
    assert sh.index((src, "bwd_weight")) == sh.index((src, "bwd_data")) + 1


def test_defer_to_an_earlier_conv_or_a_non_conv_is_an_error():
    g = capture(small_cnn([8, 16], [False, True], None), (2, 3, 8, 8))
    convs = _backward_convs(build_schedule(g, 2))
    with pytest.raises(ConfigError, match="later in the backward pass"):
        build_schedule(g, 2, defer={convs[1]: convs[0]})
    bn = next(n.name for n in g.nodes if n.kind == "batchnorm")
    with pytest.raises(ConfigError, match="weight gradient"):
        build_schedule(g, 2, defer={convs[0]: bn})
    first = next(n.name for n in g.nodes if n.kind == "conv")     # no dX
    fc = next(n.name for n in g.nodes if n.kind == "linear")
    with pytest.raises(ConfigError, match="later in the backward pass"):
        build_schedule(g, 2, defer={first: fc})


@settings(max_examples=15, deadline=None)
@given(model=cnns(), groups=st.sampled_from([1, 2, 4]),
       exchange=st.sampled_from(["sgd", "gradsa"]), data=st.data())
def test_any_deferral_keeps_every_task_and_dependency(model, groups, exchange, data):
    g = capture(model, (2, 3, 8, 8))
    base = build_schedule(g, groups, exchange=exchange)
    convs = _backward_convs(base) + [t.layer for t in base.tasks
                                     if t.phase == "bwd_weight" and t.layer not in
                                     _backward_convs(base)][:1]
    defer = {}
    for i, c in enumerate(convs[:-1]):
        if data.draw(st.booleans()):
            defer[c] = convs[data.draw(st.integers(i + 1, len(convs) - 1))]
    s = build_schedule(g, groups, defer=defer, exchange=exchange)
    assert _by_key(s) == _by_key(base)
    pos = {t.id: i for i, t in enumerate(s.tasks)}
    assert all(pos[d] < pos[t.id] for t in s.tasks for d in t.deps)


@settings(max_examples=15, deadline=None)
@given(model=cnns(), data=st.data())
def test_plan_never_lengthens_the_list_schedule(model, data):
    """On any durations the plan's list schedule is no longer than the schedule's own."""
    g = capture(model, (2, 3, 8, 8))
    base = build_schedule(g, 2)
    duration = {task_key(t): data.draw(st.integers(1, 1000)) for t in base.tasks}
    defer = plan_deferrals(lambda d: build_schedule(g, 2, defer=d), duration)
    planned = build_schedule(g, 2, defer=defer)
    assert list_schedule(planned, duration)[0] <= list_schedule(base, duration)[0]


def test_plan_fills_the_hosts_wait_with_an_earlier_dw():
    """Late layers host-bound (long dW, short PIM work), the early ones PIM-bound: the plan
    moves a late dW to where the host waited and the list schedule gets shorter."""
    g = capture(small_cnn([8, 16, 16], [False, True, True], None), (2, 3, 8, 8))
    base = build_schedule(g, 2)
    convs = _backward_convs(base)
    duration = {}
    for t in base.tasks:
        if t.side == "host":
            duration[task_key(t)] = 500 if t.phase == "bwd_weight" else 100
        else:
            # the PIM's backward below the last CONV is long, elsewhere short
            duration[task_key(t)] = 2000 if t.phase == "bwd" and t.layer in \
                {n.name for n in g.nodes if n.inputs and n.inputs[0] == convs[-1]} else 10
    defer = plan_deferrals(lambda d: build_schedule(g, 2, defer=d), duration)
    assert defer
    planned = build_schedule(g, 2, defer=defer)
    assert list_schedule(planned, duration)[0] < list_schedule(base, duration)[0]


def test_time_step_plans_only_the_pipelined_sgd_step():
    g = capture(small_cnn([8, 16], [False, True], None), (2, 3, 8, 8))
    co = time_step(g, "authority", 2)
    assert isinstance(co.deferred, dict)
    assert time_step(g, "authority", 2, plan=False).deferred == {}
    assert time_step(g, "serial").deferred == {}
    assert time_step(g, "authority", 2, exchange="laysa").deferred == {}
    for t in co.schedule.tasks:
        assert all(co.start[t.id] >= co.end[d] for d in t.deps)


def test_pimrt_run_reports_the_moves_and_no_plan_keeps_the_order(tmp_path):
    import json
    from pimrt.cli import main
    runs = {}
    for flag in ([], ["--no-plan"]):
        out = tmp_path / ("plain" if flag else "planned")
        assert main(["run", "--model", "resnet_cifar_20", "--batch", "4", "--functional",
                     "none", "--out", str(out), "--quiet", *flag]) == 0
        runs[bool(flag)] = json.loads((out / "summary.json").read_text())
    assert runs[True]["deferred_weight_gradients"] == {}
    moved = runs[False]["deferred_weight_gradients"]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in moved.items())
    # the serial baseline is the same either way
    assert runs[True]["serial_makespan_cycles"] == runs[False]["serial_makespan_cycles"]


def test_plan_keeps_only_moves_that_gain_min_gain(monkeypatch):
    """The same case as above: its moves gain a few percent of the step; asking for more than
    the whole step's length leaves the order as it is."""
    import pimrt.runtime.plan as plan
    g = capture(small_cnn([8, 16, 16], [False, True, True], None), (2, 3, 8, 8))
    base = build_schedule(g, 2)
    convs = _backward_convs(base)
    below = {n.name for n in g.nodes if n.inputs and n.inputs[0] == convs[-1]}
    duration = {task_key(t): (500 if t.phase == "bwd_weight" else 100) if t.side == "host"
                else (2000 if t.phase == "bwd" and t.layer in below else 10)
                for t in base.tasks}
    build = lambda d: build_schedule(g, 2, defer=d)     # noqa: E731
    assert plan_deferrals(build, duration)
    monkeypatch.setattr(plan, "MIN_GAIN", 1.0)
    assert plan_deferrals(build, duration) == {}

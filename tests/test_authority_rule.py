"""The authority policy's slack rule (`--authority-rule slack`): each task's slack in the list
schedule (pimrt.runtime.plan.slack), the parameters a host task gets from it, and a step
timed under it doing the same work as under the per-layer rule."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.cli import main
from pimrt.errors import ConfigError
from pimrt.graph import capture
from pimrt.memctl import load_part
from pimrt.runtime.authority import (BUSY_PIM_CAP_SWITCHES, BUSY_PIM_LOAD,
                                     CRITICAL_CAP_SWITCHES, CRITICAL_HOST_EPOCH_CAP,
                                     SLACK_YIELD_EPOCH_CAP,
                                     critical_parameters, host_queue_depth,
                                     slack_parameters, switch_cost, yielding_parameters)
from pimrt.runtime.plan import list_schedule, slack, task_key
from pimrt.runtime.schedule import Schedule, Task
from pimrt.runtime.report import summary as report_summary
from pimrt.runtime.timing import side_load, time_step

from test_runtime import small_cnn


@st.composite
def schedules(draw):
    """A step's tasks on two sides, each depending on some earlier ones, with durations."""
    n = draw(st.integers(1, 14))
    tasks = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        tasks.append(Task(i, draw(st.sampled_from(["host", "pim"])), f"l{i}", "conv", "fwd",
                          -1, 1, sorted(deps)))
    duration = {task_key(t): draw(st.integers(0, 50)) for t in tasks}
    return Schedule(None, 1, tasks, True), duration


@given(schedules())
@settings(max_examples=200, deadline=None)
def test_slack_is_how_much_longer_a_task_may_take(drawn):
    """A task made longer by its slack leaves the list schedule's makespan as it is; one cycle
    more makes it one cycle longer. Some task has none."""
    s, duration = drawn
    m = list_schedule(s, duration)[0]
    left = slack(s, duration)
    assert (left >= 0).all() and (left == 0).any()
    for t in s.tasks:
        k = task_key(t)
        for extra, want in ((int(left[t.id]), m), (int(left[t.id]) + 1, m + 1)):
            assert list_schedule(s, {**duration, k: duration[k] + extra})[0] == want


def test_a_critical_host_task_holds_the_channel_one_with_slack_yields():
    part = load_part("v100_hbm2_pim")
    cost = switch_cost(part)
    q = host_queue_depth(part)
    # the host holds the channel: the PIM takes it only once the host's queue is empty, the
    # host's own epochs run to 4000 cycles
    hold = {"epoch_cap": CRITICAL_CAP_SWITCHES * cost, "host_high_watermark": 1,
            "min_epoch": 2 * cost, "host_low_watermark": 0, "host_epoch_cap": 4000}
    assert CRITICAL_HOST_EPOCH_CAP == 4000
    give = {"epoch_cap": 4000, "host_high_watermark": q // 2, "min_epoch": 8 * cost}
    assert critical_parameters(part) == hold and yielding_parameters(part) == give
    assert slack_parameters(part, 0, 10_000) == hold
    assert slack_parameters(part, 499, 10_000) == hold          # under 5% of its duration
    # the slack rule's yielding epochs are half the per-layer rule's: 2000 cycles; the host's
    # low watermark and epoch cap back at memctl's defaults (a quarter of its queue; epoch_cap)
    assert SLACK_YIELD_EPOCH_CAP == 2000
    assert slack_parameters(part, 500, 10_000) == {**give, "epoch_cap": 2000,
                                                   "host_low_watermark": q // 4,
                                                   "host_epoch_cap": 0}
    # a longer mode switch: the PIM's epochs beside a critical task grow with it
    slow = load_part("v100_hbm2_pim", {"pim": {"mode_switch_cycles": 96}})
    assert critical_parameters(slow)["epoch_cap"] == CRITICAL_CAP_SWITCHES * switch_cost(slow)
    # a switch so long that 8 of them pass 2000 cycles: the cap is the minimum epoch
    slowest = load_part("v100_hbm2_pim", {"pim": {"mode_switch_cycles": 200}})
    floor = 8 * switch_cost(slowest)
    assert floor > 2000 and slack_parameters(slowest, 500, 10_000)["epoch_cap"] == floor


def test_beside_a_busy_pim_a_critical_host_task_leaves_it_longer_epochs():
    """A step whose PIM work is BUSY_PIM_LOAD of its host work or more: the PIM's epochs
    beside a critical host task are capped at BUSY_PIM_CAP_SWITCHES switch costs, not
    CRITICAL_CAP_SWITCHES; a task with slack yields as before."""
    part = load_part("v100_hbm2_pim")
    cost = switch_cost(part)
    busy = {"epoch_cap": BUSY_PIM_CAP_SWITCHES * cost, "host_high_watermark": 1,
            "min_epoch": 2 * cost, "host_low_watermark": 0, "host_epoch_cap": 4000}
    assert BUSY_PIM_CAP_SWITCHES > CRITICAL_CAP_SWITCHES
    assert slack_parameters(part, 0, 10_000, BUSY_PIM_LOAD) == busy
    assert slack_parameters(part, 0, 10_000, 0.9) == busy
    assert slack_parameters(part, 0, 10_000, BUSY_PIM_LOAD - 0.01) == critical_parameters(part)
    assert slack_parameters(part, 500, 10_000, 0.9) == slack_parameters(part, 500, 10_000)


def test_the_pims_load_is_its_tasks_time_over_the_hosts():
    tasks = [Task(0, "host", "a", "conv", "fwd", -1, 1, []),
             Task(1, "pim", "b", "relu", "fwd", -1, 1, [0]),
             Task(2, "host", "c", "conv", "fwd", -1, 1, [1]),
             Task(3, "pim", "d", "relu", "fwd", -1, 1, [2])]
    s = Schedule(None, 1, tasks, True)
    duration = dict(zip((task_key(t) for t in tasks), (100, 30, 300, 50)))
    assert side_load(s, duration) == 80 / 400
    assert side_load(Schedule(None, 1, tasks[1:2], True), {task_key(tasks[1]): 5}) == 0.0


@pytest.fixture(scope="module")
def both():
    g = capture(small_cnn([8, 16, 16], [True, True, False], "max"), (4, 3, 8, 8))
    return {rule: time_step(g, "authority", 1, part="v100_hbm2_pim", authority_rule=rule)
            for rule in ("layer", "slack")}


def test_the_slack_rule_runs_the_same_work(both):
    """Only the epochs differ: the same tasks, requests and bytes per requestor."""
    a, b = both["layer"], both["slack"]
    assert [task_key(t) for t in a.schedule.tasks] == [task_key(t) for t in b.schedule.tasks]
    assert a.stats["requests"] == b.stats["requests"]
    for side in ("host", "pim"):
        assert a.stats["requestors"][side]["bytes"] == b.stats["requestors"][side]["bytes"]
    assert (a.authority_rule, b.authority_rule) == ("layer", "slack")
    for r in (a, b):                    # each task after the tasks it depends on
        for t in r.schedule.tasks:
            assert all(r.start[t.id] >= r.end[d] for d in t.deps)


def test_an_unknown_rule_is_refused():
    g = capture(small_cnn([8], [True], None), (2, 3, 8, 8))
    with pytest.raises(ConfigError, match="unknown authority rule 'fast'; choose one of "
                                          "slack, slack-oracle, layer"):
        time_step(g, "authority", 1, part="v100_hbm2_pim", authority_rule="fast")


def test_pimrt_run_takes_the_rule_and_says_it(tmp_path, capsys):
    """The slack rule by default, the per-layer one when asked, none for other policies."""
    assert main(["run", "--model", "resnet_cifar_20", "--batch", "2", "--functional", "none",
                 "--quiet", "--out", str(tmp_path / "s")]) == 0
    s = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert s["authority_rule"] == "slack" and s["step_ms"] > 0
    assert "profile-guided" in s["authority_rule_knows"]
    out = capsys.readouterr().out
    assert "authority rule: slack, profile-guided" in out and "the per-layer rule's step" in out
    assert main(["run", "--model", "resnet_cifar_20", "--batch", "2", "--functional", "none",
                 "--quiet", "--authority-rule", "layer", "--out", str(tmp_path / "l")]) == 0
    layer = json.loads((tmp_path / "l" / "summary.json").read_text())
    assert layer["authority_rule"] == "layer" and "layer_rule_step_ms" not in layer
    # the per-layer rule's step reported beside the default's is that rule's own step
    assert s["layer_rule_makespan_cycles"] == layer["makespan_cycles"]
    assert s["speedup_vs_layer_rule"] == pytest.approx(
        layer["makespan_cycles"] / s["makespan_cycles"])
    for key in ("serial_step_ms", "gpu_only_step_ms", "bound_step_ms", "requests"):
        assert layer[key] == s[key], key          # the baselines and the work: the same
    assert main(["run", "--model", "resnet_cifar_20", "--batch", "2", "--functional", "none",
                 "--quiet", "--policy", "serial", "--out", str(tmp_path / "r")]) == 0
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["authority_rule"] is None
    with pytest.raises(SystemExit) as e:
        main(["run", "--authority-rule", "fast"])
    assert e.value.code == 2 and "invalid choice: 'fast'" in capsys.readouterr().err


def test_the_slack_rule_plans_on_a_profiled_step_the_oracle_on_durations_alone():
    """'slack' judges each host task on durations measured in the per-layer rule's step
    (StepTiming.profile, each task's own share of its side's time there); 'slack-oracle' on
    the durations alone. Same work under all three rules."""
    from pimrt.runtime.timing import marginal, measured_durations, planned_schedule, step_part
    g = capture(small_cnn([8, 16, 16], [True, True, False], "max"), (4, 3, 8, 8))
    runs = {rule: time_step(g, "authority", 1, part="v100_hbm2_pim", authority_rule=rule)
            for rule in ("slack", "slack-oracle", "layer")}
    profile = runs["slack"].profile
    assert profile is not None and runs["slack-oracle"].profile is None
    assert profile.makespan == runs["layer"].makespan        # the profiled step: the layer rule's
    assert profile.authority_rule == "layer"
    measured = measured_durations(profile)
    host = [t for t in profile.schedule.tasks if t.side == "host"]
    ids = [t.id for t in host]
    assert [measured[task_key(t)] for t in host] == marginal(profile.start[ids], profile.end[ids])
    _, alone, _ = planned_schedule(g, 1, step_part("v100_hbm2_pim", "v100"), "v100")
    assert measured != alone                # contention shows in what the profile measured
    for r in runs.values():
        assert r.stats["requests"] == runs["layer"].stats["requests"]


def test_the_default_keeps_the_shorter_of_the_two_steps_it_measured(monkeypatch, tmp_path,
                                                                     capsys):
    """The runtime has run the profiled step (per-layer rule) and the slack rule's: it keeps
    the shorter, the other beside it (StepTiming.slack_step when the per-layer rule's was
    kept), and a trace it writes is of the step kept. ResNet-18 at batch 4: the slack rule's
    step is the shorter (2,203,472 cycles against 2,214,870); with every host task given
    slack (the PIM's long epochs everywhere) it is 2,227,493, and the per-layer one is kept."""
    from pimrt.runtime import plan, session
    from pimrt.trace.step import StepTrace
    g = session.captured("resnet18", 4, 32)
    run = time_step(g, "authority")
    assert run.slack_step is None and run.makespan == 2_203_472 < run.profile.makespan
    assert report_summary(run, None, {})["authority_rule_kept"] == "slack"
    monkeypatch.setattr(plan, "slack", lambda s, d: np.full(len(s.tasks), 10**9, np.int64))
    sink = StepTrace(tmp_path / "kept.npy", {"model": "resnet18", "batch": 4})
    run = time_step(g, "authority", sink=sink)
    assert run.makespan == run.profile.makespan == 2_214_870
    assert run.slack_step.makespan == 2_227_493 and run.authority_rule == "slack"
    assert run.slack_step.stats["requests"] == run.stats["requests"]
    s = report_summary(run, None, {})
    assert s["authority_rule_kept"] == "layer" and s["speedup_vs_layer_rule"] == 1.0
    assert s["slack_rule_makespan_cycles"] == 2_227_493
    stats = tmp_path / "kept.stats.json"
    assert main(["memsim", str(tmp_path / "kept.npy"), "--quiet", "--stats", str(stats)]) == 0
    assert json.loads(stats.read_text())["cycles"] == run.stats["cycles"]   # the kept step's
    capsys.readouterr()


def test_marginal_shares_add_up_to_the_span_less_the_gaps():
    from pimrt.runtime.timing import marginal
    start, end = np.array([0, 5, 30, 31]), np.array([10, 20, 40, 35])
    assert marginal(start, end) == [10, 10, 10, 0]     # [0,10] [10,20] gap [30,40] inside


@pytest.mark.parametrize("left", [0, 10 ** 9])     # a critical host task; one with slack
def test_the_slack_rules_step_and_its_profile_part_before_any_request(both, left):
    """docs/speed.md ("What the aim would take"): the slack rule's step and the profiled
    step it plans on (the per-layer rule's) share no simulated start to copy: their streams
    part at the first host CONV's parameters, before the first request (the slack rule sets
    the host's low watermark and epoch cap, the per-layer rule leaves them)."""
    from pimrt.runtime.placement import place_step
    from pimrt.runtime.timing import step_part, task_stream
    from pimrt.runtime.work import context
    from pimrt.trace.records import PARAM, WRITE
    step = both["slack"]
    part = step_part("v100_hbm2_pim", "v100")
    ctx = context(step.schedule.graph, part, place_step(step.schedule.graph, part), "v100",
                  "authority")
    per_task = {t.id: (left, 1000, 0.0) for t in step.schedule.tasks}  # (slack, duration, load)
    layer, slacked = (np.concatenate(list(task_stream(step.schedule, ctx, True, slack=s)))
                      for s in (None, per_task))
    n = min(len(layer), len(slacked))
    first = int(np.flatnonzero(layer[:n] != slacked[:n])[0])
    assert first <= int(np.flatnonzero(layer["op"] <= WRITE)[0])
    assert layer["op"][first] == PARAM or slacked["op"][first] == PARAM

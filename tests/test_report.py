"""The step's outputs: how the step's cycles are split among layers (properties over random
task intervals), the per-layer CSV, and a Chrome trace that Perfetto reads without dropping
slices (no two slices on one thread overlap without nesting)."""
import csv
import json
import math
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt import zoo
from pimrt.graph import capture
from pimrt.runtime import report
from pimrt.runtime.attribution import task_shares
from pimrt.runtime.timing import time_step

intervals = st.lists(st.tuples(st.integers(0, 500), st.integers(0, 300)), min_size=1,
                     max_size=40).map(lambda xs: [(s, s + d) for s, d in xs])


@given(intervals, st.integers(0, 200))
@settings(max_examples=200, deadline=None)
def test_shares_add_up_to_the_makespan_and_are_never_negative(iv, tail):
    start, end = np.array(iv).T
    makespan = int(end.max()) + tail
    shares = task_shares(start, end, makespan)
    assert shares.sum() == pytest.approx(makespan)
    assert (shares >= 0).all()
    # a task gets at least its duration divided by the most tasks that ran beside it, and at
    # most its duration plus every idle cycle
    busy = np.zeros(makespan + 1, int)
    for s, e in iv:
        busy[s:e] += 1
    idle = int((busy[:makespan] == 0).sum())
    for (s, e), got in zip(iv, shares):
        if e > s:
            assert got >= (e - s) / busy[s:e].max() - 1e-9
        assert got <= (e - s) + idle + 1e-9


@given(intervals)
@settings(max_examples=100, deadline=None)
def test_tasks_that_never_overlap_get_their_duration_plus_the_wait_before_them(iv):
    # one after the other, with gaps: each gets its duration and the gap before it
    t, seq = 0, []
    for s, e in iv:
        gap = s % 7
        seq.append((t + gap, t + gap + (e - s)))
        t += gap + (e - s)
    start, end = np.array(seq).T
    shares = task_shares(start, end)
    prev_end = np.concatenate(([0], end[:-1]))
    # a zero-length task that starts with the next one shares the gap with it
    expect = (end - start) + (start - prev_end)
    same_start = {}
    for i, s in enumerate(start.tolist()):
        same_start.setdefault(s, []).append(i)
    for s, who in same_start.items():
        if len(who) > 1:
            gap = sum(start[i] - prev_end[i] for i in who)
            for i in who:
                expect[i] = end[i] - start[i]
            expect[who] += gap / len(who) if gap else 0
    assert shares.sum() == pytest.approx(end.max())
    assert np.allclose(shares, expect)


def test_two_sides_side_by_side_share_the_cycles():
    # host [0, 100), PIM [50, 150), a wait, then host [200, 260)
    shares = task_shares([0, 50, 200], [100, 150, 260])
    assert shares.tolist() == [75.0, 75.0, 110.0]


def test_a_task_ending_before_it_starts_is_refused():
    with pytest.raises(ValueError, match="task 1 has start 9 and end 3"):
        task_shares([0, 9], [5, 3])
    with pytest.raises(ValueError, match="makespan 4 is before the last task's end 5"):
        task_shares([0], [5], 4)


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 30)), max_size=60))
@settings(max_examples=200, deadline=None)
def test_lanes_never_hold_two_overlapping_intervals(raw):
    iv = [(s, s + d) for s, d in raw]
    lane = report.lanes(iv)
    by_lane = {}
    for (s, e), ln in zip(iv, lane):
        by_lane.setdefault(ln, []).append((s, e))
    for spans in by_lane.values():
        spans.sort()
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))
    # as few lanes as the most intervals open at once (the greedy is optimal for intervals;
    # empty ones at t need one lane of their own at t)
    depth = max((sum(1 for s, e in iv if s <= t < e) + any(s == e == t for s, e in iv)
                 for t in range(131)), default=0)
    assert max(lane, default=-1) + 1 == depth


def test_trace_times_read_back_exactly_as_perfetto_truncates_them():
    for n in list(range(0, 5000)) + [10**9 + 1, 123456789]:
        assert int(report._trace_us(n) * 1000.0) == n


@pytest.fixture(scope="module")
def resnet_run():
    g = capture(zoo.build("resnet_cifar_20", input_size=32, device="meta"), (4, 3, 32, 32))
    return time_step(g, "authority", 4), time_step(g, "serial")


def test_layer_csv_splits_the_step_among_layers(resnet_run, tmp_path):
    run, serial = resnet_run
    rows = report.write_layer_csv(run, serial, tmp_path / "layers.csv")
    with open(tmp_path / "layers.csv") as f:
        read = list(csv.DictReader(f))
    assert [r["layer"] for r in read] == [r["layer"] for r in rows]
    assert rows[0]["layer"] == "conv1" and rows[0]["kind"] == "conv"
    side = {r["kind"]: r["side"] for r in rows}
    assert (side["conv"], side["batchnorm"], side["relu"], side["add"], side["linear"]) == \
        ("host", "pim", "pim", "pim", "host")
    assert side["adaptive_avgpool"] == "host_fallback"      # the PIM has no global mean
    assert {"batchnorm", "relu", "add", "linear", "loss"} <= {r["kind"] for r in rows}
    for r in rows:
        assert r["step_cycles"] == pytest.approx(r["fwd_cycles"] + r["bwd_cycles"]
                                                 + r["update_cycles"], abs=0.2)
    # the shares add up to each step, so the layers' speedups weigh up to the step's
    total = sum(float(r["step_cycles"]) for r in read)
    total_serial = sum(float(r["serial_step_cycles"]) for r in read)
    assert total == pytest.approx(run.makespan, abs=len(rows))
    assert total_serial == pytest.approx(serial.makespan, abs=len(rows))
    assert total_serial / total == pytest.approx(serial.makespan / run.makespan, rel=1e-4)
    # a CONV has forward, backward and update cycles; a ReLU (no parameters) no update
    conv = next(r for r in rows if r["kind"] == "conv")
    assert conv["fwd_cycles"] > 0 and conv["bwd_cycles"] > 0 and conv["update_cycles"] > 0
    relu = next(r for r in rows if r["kind"] == "relu")
    assert relu["fwd_cycles"] > 0 and relu["bwd_cycles"] > 0 and relu["update_cycles"] == 0


def test_trace_slices_nest_on_every_thread(resnet_run, tmp_path):
    run, _ = resnet_run
    report.write_chrome_trace(run, tmp_path / "trace.json")
    ev = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    threads = {}
    for e in ev:
        if e["ph"] == "X":
            s = int(e["ts"] * 1000.0)                        # as Perfetto reads them
            threads.setdefault((e["pid"], e["tid"]), []).append((s, s + int(e["dur"] * 1000.0)))
    for key, spans in threads.items():
        spans.sort()
        assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:])), key
    tasks = [e for e in ev if e["ph"] == "X" and e["pid"] in (1, 2)]
    assert len(tasks) == len(run.schedule.tasks)           # every task, none dropped
    names = {e["args"]["name"] for e in ev if e["name"] == "thread_name" and e["pid"] == 3}
    assert {"forward", "backward", "update"} <= names
    # the layer slices carry each layer's share of the step, adding up to the step
    share = sum(e["args"]["step_share_cycles"] for e in ev if e["ph"] == "X" and e["pid"] == 3)
    assert share == pytest.approx(run.makespan, abs=0.1 * len(ev))
    modes = [e for e in ev if e["ph"] == "X" and e["pid"] == 4]
    assert modes and all(math.isfinite(e["dur"]) for e in modes)
    # one slice per entry into PIM mode, the last one closed at the step's end if still open
    assert len(modes) == int(run.modes["enter"].sum())


def test_plot_titles_count_groups_and_energy_panels_have_legends(resnet_run, tmp_path,
                                                                 monkeypatch):
    """"1 group", not "1 groups"; both panels of energy.png say which colour is what."""
    from pimrt.runtime import energy
    import pimrt.output
    figs = {}

    def keep(fig, path, **kw):
        figs[pathlib.Path(path).name] = fig
    monkeypatch.setattr(report, "atomic_savefig", keep)
    monkeypatch.setattr(pimrt.output, "atomic_savefig", keep)
    run, serial = resnet_run
    one = time_step(run.schedule.graph, "authority", 1)
    rows = report.layer_rows(one, serial)
    report.plot(one, rows, tmp_path, serial)
    assert figs["timeline.png"].axes[0].get_title().startswith("authority, 1 group: ")
    assert ", 1 group: each layer" in figs["layer_speedup.png"].axes[0].get_title()
    report.plot(run, report.layer_rows(run, serial), tmp_path, serial)
    assert figs["timeline.png"].axes[0].get_title().startswith("authority, 4 groups: ")
    parts = {"host": 5.0, "dram": 2.0, "pim": 1.0, "io": 0.5}
    energy.plot([("GPU-only", parts), ("authority", parts)], tmp_path / "energy.png", "t")
    left, right = figs["energy.png"].axes[:2]
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["host", "DRAM", "PIM", "I/O"]
    assert right.get_legend() is not None
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["DRAM", "PIM", "I/O"]


@pytest.mark.parametrize("exchange", ["sgd", "gradsa", "laysa"])
def test_a_layers_side_is_its_own_ops_not_its_updates(exchange):
    """GradSA's exchange of a batch norm's parameters runs partly on the host; the layer's
    forward and backward run on the PIM, so its side is pim."""
    from pimrt.runtime.schedule import build_schedule, layer_sides
    g = capture(zoo.build("resnet_cifar_20", input_size=32, device="meta"), (4, 3, 32, 32))
    sides = layer_sides(build_schedule(g, 1, exchange=exchange))
    kinds = {n.name: n.kind for n in g.nodes}
    assert {sides[n] for n in sides if kinds.get(n) in ("batchnorm", "relu", "add")} == {"pim"}
    assert {sides[n] for n in sides if kinds.get(n) in ("conv", "linear")} == {"host"}
    assert sides["loss"] == "host"
    assert {sides[n] for n in sides if kinds.get(n) == "adaptive_avgpool"} == {"host_fallback"}


def test_the_note_names_each_layer_the_pim_cannot_run_once():
    from torch import nn
    from pimrt.runtime.schedule import host_fallback_note
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.AvgPool2d(3, 1), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                        nn.Linear(32, 10))
    note = host_fallback_note(capture(net, (2, 3, 16, 16)))
    assert note == ("note: 2 layers the PIM has no program for run on the host: "
                    "_3 (avgpool 3x3, stride 1, padding 0), _4 (adaptive average pool to 2x2); "
                    "the backward pass of 1 max pool runs on the host: _2 (the PIM pools 2x2 "
                    "windows with stride 2; layers.csv's side: host_fallback)")
    plain = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(),
                          nn.Linear(8 * 7 * 7, 10))
    assert host_fallback_note(capture(plain, (2, 3, 16, 16))) is None


def test_a_pool_with_ceil_mode_runs_on_the_host_in_the_timing_as_in_the_functional_step():
    """The PIM's 2x2 programs have no partial window: a pool with ceil_mode is the host's in
    the schedule (it was the PIM's there while the functional step ran it on the host)."""
    from torch import nn
    from pimrt.graph.layer import runs_on_pim
    from pimrt.runtime.schedule import build_schedule, host_fallback_note, layer_sides
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                        nn.MaxPool2d(2, ceil_mode=True), nn.AvgPool2d(2), nn.Flatten(),
                        nn.Linear(8 * 4 * 4, 10))
    g = capture(net, (2, 3, 15, 15))
    pools = [n for n in g.nodes if n.kind in ("maxpool", "avgpool")]
    assert [runs_on_pim(n, "fwd") for n in pools] == [False, True]
    sides = layer_sides(build_schedule(g, 1))
    assert [sides[n.name] for n in pools] == ["host_fallback", "pim"]
    assert "_2 (maxpool 2x2, stride 2, padding 0, ceil_mode)" in host_fallback_note(g)

"""Outputs of a timed step: a Chrome trace (Perfetto), a per-layer CSV, a summary JSON and PNG
plots (timeline, per-layer speedup)."""
from __future__ import annotations

import csv
import itertools
import json
import math
import pathlib

from pimrt.output import atomic_open, atomic_savefig, atomic_write_text
from pimrt.runtime.attribution import PHASE_CLASS, PHASES, layer_shares
from pimrt.runtime.schedule import layer_sides
from pimrt.runtime.authority_rules import AUTHORITY_RULE_TEXT
from pimrt.runtime.heap import release
from pimrt.runtime.timing import StepTiming


def layer_spans(t: StepTiming, by_phase: bool = False) -> dict:
    """layer (by_phase: (layer, "fwd" | "bwd" | "update")) -> (first start, last end, host
    busy cycles, PIM busy cycles) of its tasks in this run."""
    out: dict = {}
    for task in t.schedule.tasks:
        s, e = int(t.start[task.id]), int(t.end[task.id])
        key = (task.layer, PHASE_CLASS.get(task.phase, "bwd")) if by_phase else task.layer
        span = out.setdefault(key, [s, e, 0, 0])
        span[0], span[1] = min(span[0], s), max(span[1], e)
        span[2 if task.side == "host" else 3] += e - s
    return {k: tuple(v) for k, v in out.items()}


def lanes(intervals) -> list[int]:
    """A lane for each [start, end) interval such that no two intervals in one lane overlap:
    each, in order of start, takes the lowest lane free by its start. Perfetto drops a
    complete ("X") event that overlaps another on its thread without nesting in it, so every
    track of the trace is laid out in such lanes."""
    lane_end: list[int] = []
    out = [0] * len(intervals)
    for i in sorted(range(len(intervals)), key=lambda i: (intervals[i][0], -intervals[i][1])):
        s, e = intervals[i]
        for lane, free_at in enumerate(lane_end):
            if free_at <= s:
                break
        else:
            lane = len(lane_end)
            lane_end.append(0)
        lane_end[lane] = e
        out[i] = lane
    return out


def phase_speedups(run: StepTiming, serial: StepTiming) -> dict[str, dict[str, float]]:
    """The step's forward pass, backward pass and parameter update: the time each takes of
    the step (every layer's share, `pimrt.runtime.attribution`), serial and co-executed, and
    its speedup."""
    ms = run.tck_ns * 1e-6
    mine, base = layer_shares(run), layer_shares(serial)
    out = {}
    for ph in PHASES:
        a = sum(v[ph] for v in mine.values())
        b = sum(v[ph] for v in base.values())
        out[ph] = {"ms": a * ms, "serial_ms": b * ms, "speedup": b / a if a else 0.0}
    return out


def summary(run: StepTiming, serial: StepTiming | None, meta: dict,
            gpu_only: StepTiming | None = None, bound: dict | None = None) -> dict:
    s = run.stats
    out = {
        **meta,
        "policy": run.policy,
        "groups": run.groups,
        "makespan_cycles": run.makespan,
        "step_ms": run.seconds * 1e3,
        "host_busy_cycles": run.busy("host"),
        "pim_busy_cycles": run.busy("pim"),
        "tasks": len(run.schedule.tasks),
        "requests": s["requests"],
        "records": run.records,
        "mode_switches": s["mode_switches"],
        "host_bandwidth_gbs": s["host_bandwidth_gbs"],
        "pim_bandwidth_gbs": s["requestors"]["pim"]["bandwidth_gbs"],
        "host_blocked_cycles": s["requestors"]["host"]["cycles_blocked"],
        "pim_blocked_cycles": s["requestors"]["pim"]["cycles_blocked"],
        "simulation_wall_s": run.wall_s,
        # weight gradients the plan moved later in the host's backward order: CONV -> the
        # CONV whose backward they now precede (pimrt.runtime.plan)
        "deferred_weight_gradients": dict(run.deferred),
        # the authority policy's parameters: per layer, by slack (profile-guided, or the
        # oracle's exact durations), or none (other policies, or parameters fixed by
        # options): pimrt.runtime.authority, pimrt.runtime.timing.AUTHORITY_RULES
        "authority_rule": run.authority_rule,
        "authority_rule_knows": AUTHORITY_RULE_TEXT.get(run.authority_rule),
        # CONV/linear layers whose forward pass ran by batch slices (pimrt.runtime.schedule)
        "sliced_layers": list(dict.fromkeys(t.layer for t in run.schedule.tasks
                                            if t.slice >= 0 and t.side == "host"
                                            and t.kind in ("conv", "linear"))),
    }
    if run.profile is not None:    # the earlier step the slack rule was profiled on
        out["layer_rule_makespan_cycles"] = run.profile.makespan
        out["layer_rule_step_ms"] = run.profile.seconds * 1e3
        out["speedup_vs_layer_rule"] = (run.profile.makespan / run.makespan
                                        if run.makespan else 0.0)
        # which rule's parameters the step ran with: the slack rule's, or the profiled step's
        # where that was the shorter of the two (the slack rule's step then beside it)
        out["authority_rule_kept"] = "layer" if run.slack_step is not None else "slack"
        if run.slack_step is not None:
            out["slack_rule_makespan_cycles"] = run.slack_step.makespan
            out["slack_rule_step_ms"] = run.slack_step.seconds * 1e3
    if run.exchange is not None:
        from pimrt.runtime.exchange import footprint
        out["update"] = run.exchange.as_dict()
        out["update_memory"] = footprint(run, run.exchange)
        if serial is not None and serial.exchange is not None:
            out["serial_update_memory"] = footprint(serial, serial.exchange)
    if serial is not None:
        out["serial_makespan_cycles"] = serial.makespan
        out["serial_step_ms"] = serial.seconds * 1e3
        out["speedup_vs_serial"] = serial.makespan / run.makespan if run.makespan else 0.0
        out["phases"] = phase_speedups(run, serial)
    if gpu_only is not None:
        out["gpu_only_makespan_cycles"] = gpu_only.makespan
        out["gpu_only_step_ms"] = gpu_only.seconds * 1e3
        out["speedup_vs_gpu_only"] = gpu_only.makespan / run.makespan if run.makespan else 0.0
    if "part" in meta and "host_part" in meta:   # joules per step (pimrt.runtime.energy)
        from pimrt.runtime import energy
        out["energy_mj"] = energy.summary(run, serial, gpu_only, meta)
    if bound is not None:
        # the co-execution schedule with no contention, and max(host alone, PIM alone)
        out["bound_step_ms"] = bound["step_ms"]
        out["lower_bound_step_ms"] = bound["lower_bound_step_ms"]
        out["bound_host_busy_cycles"] = bound["host_busy_cycles"]
        out["bound_pim_busy_cycles"] = bound["pim_busy_cycles"]
        out["step_vs_bound"] = out["step_ms"] / bound["step_ms"] if bound["step_ms"] else 0.0
    return out


def _trace_us(ns: int) -> float:
    """`ns` nanoseconds as the microseconds of a Chrome trace, such that Perfetto, which
    truncates ts x 1000 to whole nanoseconds, reads back exactly `ns` (1001 / 1000 x 1000 is
    1000.999...: one ulp up), so slices that touch do not overlap by a nanosecond."""
    us = ns / 1000
    while us * 1000.0 < ns:
        us = math.nextafter(us, math.inf)
    return us


def write_chrome_trace(run: StepTiming, path, tck_ns: float | None = None) -> None:
    """Chrome trace JSON (open in Perfetto or chrome://tracing): the host's and the PIM's
    tasks, each layer's forward, backward and update spans, and one memory-mode track per
    channel (PIM mode spans). A side's tasks can overlap (the next task issues while the last
    one's requests finish), and so can layers, so each of these tracks is split into lanes
    (threads) in which no two slices overlap."""
    tck = tck_ns or run.tck_ns

    def ns(cycle) -> int:
        return int(round(float(cycle) * tck))

    ev = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}
          for pid, name in ((1, "host"), (2, "PIM"), (3, "layers"), (4, "memory mode"))]
    ev += [{"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}}
           for pid in (1, 2, 3, 4)]

    def slices(pid: int, items: list[tuple[int, int, dict]], thread: str, tid0: int = 0):
        """items: (start cycle, end cycle, event fields) laid out in lanes from tid0."""
        spans = [(ns(s), ns(e)) for s, e, _ in items]
        lane_of = lanes(spans)
        for (s, e), lane, (_, _, fields) in zip(spans, lane_of, items):
            ev.append({**fields, "ph": "X", "pid": pid, "tid": tid0 + lane,
                       "ts": _trace_us(s), "dur": _trace_us(e - s)})
        for lane in range(max(lane_of, default=-1) + 1):
            name = thread if lane == 0 else f"{thread} (overlapping, {lane + 1})"
            ev.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid0 + lane,
                       "args": {"name": name}})
            ev.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid0 + lane,
                       "args": {"sort_index": tid0 + lane}})

    for pid, side in ((1, "host"), (2, "pim")):
        items = []
        for task in run.schedule.tasks:
            if task.side != side:
                continue
            s, e = int(run.start[task.id]), int(run.end[task.id])
            items.append((s, e, {
                "name": task.label, "cat": task.kind,
                "args": {"layer": task.layer, "phase": task.phase, "group": task.group,
                         "kind": task.kind, "start_cycle": s, "end_cycle": e}}))
        slices(pid, items, "tasks")

    shares = layer_shares(run)
    per_phase = layer_spans(run, by_phase=True)
    for tid0, phase, thread in ((0, "fwd", "forward"), (100, "bwd", "backward"),
                                (200, "update", "update")):
        items = [(s, e, {"name": layer, "cat": f"layer.{phase}",
                         "args": {"phase": phase, "host_busy_cycles": hb, "pim_busy_cycles": pb,
                                  "step_share_cycles": round(shares[layer][phase], 1)}})
                 for (layer, ph), (s, e, hb, pb) in per_phase.items() if ph == phase]
        slices(3, items, thread, tid0)

    with atomic_open(path, "w") as f:      # written as made: the mode spans are many
        f.write('{"traceEvents": [')
        first = True
        for part in _batches(itertools.chain(ev, _mode_events(run, ns))):
            f.write(("" if first else ", ") + json.dumps(part)[1:-1])   # (= one dumps)
            first = False
        f.write("]}")


def _mode_events(run: StepTiming, ns):
    """The memory-mode track: one span a channel's PIM mode, in the order they close (then
    those still open at the end), and the channels' thread names; read from the mode log a
    piece at a time."""
    if run.modes is None or not len(run.modes):
        return
    open_at: dict[int, int] = {}
    for at in range(0, len(run.modes), 1 << 16):
        for cyc, ch, enter in run.modes[at:at + (1 << 16)].tolist():
            if enter:
                open_at[ch] = cyc
            elif ch in open_at:
                s, e = ns(open_at.pop(ch)), ns(cyc)
                yield {"name": "PIM mode", "ph": "X", "pid": 4, "tid": int(ch),
                       "ts": _trace_us(s), "dur": _trace_us(e - s)}
    for ch, cyc in open_at.items():        # still in PIM mode when the step ended
        s, e = ns(cyc), ns(max(cyc, run.makespan))
        yield {"name": "PIM mode", "ph": "X", "pid": 4, "tid": int(ch),
               "ts": _trace_us(s), "dur": _trace_us(e - s)}
    for ch in range(int(run.modes["channel"].max()) + 1):
        yield {"name": "thread_name", "ph": "M", "pid": 4, "tid": ch,
               "args": {"name": f"channel {ch}"}}


def _batches(events, size: int = 10_000):
    """Lists of up to `size` events, none empty."""
    batch = []
    for e in events:
        batch.append(e)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def layer_rows(run: StepTiming, serial: StepTiming | None) -> list[dict]:
    """One row per layer, in the schedule's order (forward order): its kind, the side it ran
    on (`schedule.layer_sides`), its first start and last end, its tasks' busy cycles on each
    side, and the cycles of the step that belong to it
    (`pimrt.runtime.attribution`: forward, backward and update; they add up to the step),
    with the serial run's and the layer's speedup (serial cycles / cycles)."""
    graph = run.schedule.graph
    spans = layer_spans(run)
    sides = layer_sides(run.schedule)
    mine = layer_shares(run)
    base = layer_shares(serial) if serial is not None else {}
    rows = []
    for layer, (s, e, hb, pb) in spans.items():
        kind = graph[layer].kind if layer in graph else \
            next(t.kind for t in run.schedule.tasks if t.layer == layer)
        row = {"layer": layer, "kind": kind, "side": sides[layer], "start_cycle": s, "end_cycle": e,
               "host_busy_cycles": hb, "pim_busy_cycles": pb}
        for ph in PHASES:
            row[f"{ph}_cycles"] = round(mine[layer][ph], 1)
        cycles = sum(mine[layer].values())
        row["step_cycles"] = round(cycles, 1)
        if layer in base:
            for ph in PHASES:
                row[f"serial_{ph}_cycles"] = round(base[layer][ph], 1)
            serial_cycles = sum(base[layer].values())
            row["serial_step_cycles"] = round(serial_cycles, 1)
            row["speedup"] = serial_cycles / cycles if cycles > 0 else 0.0
        rows.append(row)
    return rows


def write_layer_csv(run: StepTiming, serial: StepTiming | None, path) -> list[dict]:
    return _write_rows(layer_rows(run, serial), path)


def _write_rows(rows: list[dict], path) -> list[dict]:
    fields = list(dict.fromkeys(k for r in rows for k in r)) or ["layer"]
    with atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return rows


def plot(run: StepTiming, rows: list[dict], out_dir, serial: StepTiming | None = None
         ) -> list[pathlib.Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = pathlib.Path(out_dir)
    paths = []
    fig, ax = plt.subplots(figsize=(12, 3))
    ms = run.tck_ns * 1e-6
    for y, side, color in ((1, "host", "tab:blue"), (0, "pim", "tab:orange")):
        bars = [(float(run.start[t.id]) * ms, float(run.end[t.id] - run.start[t.id]) * ms)
                for t in run.schedule.tasks if t.side == side]
        ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=color)
    ax.set_yticks([0, 1], ["PIM", "host"])
    ax.set_xlabel("time (ms)")
    ax.set_title(f"{run.policy}, {count(run.groups, 'group')}: {run.seconds * 1e3:.2f} ms")
    fig.tight_layout()
    paths.append(out_dir / "timeline.png")
    atomic_savefig(fig, paths[-1], dpi=110)
    plt.close(fig)
    sp = [r for r in rows if "speedup" in r]
    if sp:
        x = list(range(len(sp)))
        host = [r["host_busy_cycles"] >= r["pim_busy_cycles"] for r in sp]
        fig, (top, bottom) = plt.subplots(2, 1, sharex=True,
                                          figsize=(min(24, max(8, len(sp) * 0.14)), 5.5))
        top.bar([i - 0.2 for i in x], [r["serial_step_cycles"] * ms for r in sp], width=0.4,
                color="0.7", label="serial")
        top.bar([i + 0.2 for i in x], [r["step_cycles"] * ms for r in sp], width=0.4,
                color="tab:green", label=run.policy)
        top.set_ylabel("its share of\nthe step (ms)")
        top.legend(loc="upper right", fontsize=8)
        bottom.bar(x, [r["speedup"] for r in sp],
                   color=["tab:blue" if h else "tab:orange" for h in host])
        bottom.axhline(1.0, color="k", lw=0.8)
        if serial is not None and run.makespan:
            step = serial.makespan / run.makespan
            bottom.axhline(step, color="tab:green", lw=1, ls="--",
                           label=f"whole step {step:.3f}x")
            bottom.legend(loc="upper right", fontsize=8)
        bottom.set_ylabel("speedup vs serial\n(blue: host, orange: PIM)")
        if len(sp) <= 80:
            bottom.set_xticks(x, [r["layer"] for r in sp], rotation=90, fontsize=6)
        else:
            bottom.set_xlabel("layer (forward order)")
        top.set_title(f"{run.policy}, {count(run.groups, 'group')}: each layer's share of "
                      "the step (a cycle split among the tasks running in it)")
        fig.tight_layout()
        paths.append(out_dir / "layer_speedup.png")
        atomic_savefig(fig, paths[-1], dpi=110)
        plt.close(fig)
    return paths


def count(n: int, what: str) -> str:
    """"1 group", "4 groups"."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def write_all(run: StepTiming, serial: StepTiming | None, meta: dict, out_dir,
              gpu_only: StepTiming | None = None, bound: dict | None = None) -> dict:
    release()                 # (the streams' free heap back first: the plots need some)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    s = summary(run, serial, meta, gpu_only, bound)
    write_chrome_trace(run, out_dir / "trace.json")
    rows = layer_rows(run, serial)
    if s.get("energy_mj", {}).get("available"):
        from pimrt.runtime import energy
        energy.layer_energy(rows, run, meta)
    _write_rows(rows, out_dir / "layers.csv")
    s["plots"] = [str(p) for p in plot(run, rows, out_dir, serial)]
    if s.get("energy_mj", {}).get("available"):
        energy.plot(energy.run_bars(s), out_dir / "energy.png",
                    f"{meta.get('model', '')} {run.policy}: energy per training step")
        s["plots"].append(str(out_dir / "energy.png"))
    atomic_write_text(out_dir / "summary.json", json.dumps(s, indent=2))
    return s

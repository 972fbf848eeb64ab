"""Outputs of a timed step: a Chrome trace (Perfetto), a per-layer CSV, a summary JSON and PNG
plots (timeline, per-layer speedup)."""
from __future__ import annotations

import csv
import json
import pathlib

from pimrt.runtime.timing import StepTiming


def layer_spans(t: StepTiming) -> dict[str, tuple[int, int, int, int]]:
    """layer -> (start, end, host busy cycles, PIM busy cycles) in this run."""
    out: dict[str, list[int]] = {}
    for task in t.schedule.tasks:
        s, e = int(t.start[task.id]), int(t.end[task.id])
        span = out.setdefault(task.layer, [s, e, 0, 0])
        span[0], span[1] = min(span[0], s), max(span[1], e)
        span[2 if task.side == "host" else 3] += e - s
    return {k: tuple(v) for k, v in out.items()}


def summary(run: StepTiming, serial: StepTiming | None, meta: dict) -> dict:
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
    }
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
    return out


def write_chrome_trace(run: StepTiming, path, tck_ns: float | None = None) -> None:
    """Chrome trace JSON (open in Perfetto or chrome://tracing): a host and a PIM track with
    every task, a layer track, and one memory-mode track per channel (PIM mode spans)."""
    us = (tck_ns or run.tck_ns) / 1e3
    ev = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}
          for pid, name in ((1, "host"), (2, "PIM"), (3, "layers"), (4, "memory mode"))]
    for task in run.schedule.tasks:
        s, e = int(run.start[task.id]), int(run.end[task.id])
        ev.append({"name": task.label, "cat": task.kind, "ph": "X", "pid": 1 if task.side == "host" else 2,
                   "tid": 0, "ts": s * us, "dur": max(e - s, 0) * us,
                   "args": {"layer": task.layer, "phase": task.phase, "group": task.group,
                            "kind": task.kind, "start_cycle": s, "end_cycle": e}})
    for layer, (s, e, hb, pb) in layer_spans(run).items():
        ev.append({"name": layer, "cat": "layer", "ph": "X", "pid": 3, "tid": 0, "ts": s * us,
                   "dur": (e - s) * us, "args": {"host_busy_cycles": hb, "pim_busy_cycles": pb}})
    if run.modes is not None and len(run.modes):
        open_at: dict[int, int] = {}
        for cyc, ch, enter in run.modes.tolist():
            if enter:
                open_at[ch] = cyc
            elif ch in open_at:
                s = open_at.pop(ch)
                ev.append({"name": "PIM mode", "ph": "X", "pid": 4, "tid": int(ch),
                           "ts": s * us, "dur": (cyc - s) * us})
        for ch in range(int(run.modes["channel"].max()) + 1):
            ev.append({"name": "thread_name", "ph": "M", "pid": 4, "tid": ch,
                       "args": {"name": f"channel {ch}"}})
    pathlib.Path(path).write_text(json.dumps({"traceEvents": ev, "displayTimeUnit": "ns"}))


def write_layer_csv(run: StepTiming, serial: StepTiming | None, path) -> list[dict]:
    spans = layer_spans(run)
    base = layer_spans(serial) if serial is not None else {}
    rows = []
    for layer, (s, e, hb, pb) in spans.items():
        row = {"layer": layer, "start_cycle": s, "end_cycle": e, "span_cycles": e - s,
               "host_busy_cycles": hb, "pim_busy_cycles": pb}
        if layer in base:
            bs, be, _, _ = base[layer]
            row["serial_span_cycles"] = be - bs
            row["speedup"] = (be - bs) / (e - s) if e > s else 0.0
        rows.append(row)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["layer"])
        w.writeheader()
        w.writerows(rows)
    return rows


def plot(run: StepTiming, rows: list[dict], out_dir) -> list[pathlib.Path]:
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
    ax.set_title(f"{run.policy}, {run.groups} groups: {run.seconds * 1e3:.2f} ms")
    fig.tight_layout()
    paths.append(out_dir / "timeline.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    sp = [r for r in rows if "speedup" in r]
    if sp:
        fig, ax = plt.subplots(figsize=(max(6, len(sp) * 0.12), 3))
        ax.bar(range(len(sp)), [r["speedup"] for r in sp], color="tab:green")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylabel("speedup vs serial")
        ax.set_xlabel("layer (forward order)")
        fig.tight_layout()
        paths.append(out_dir / "layer_speedup.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def write_all(run: StepTiming, serial: StepTiming | None, meta: dict, out_dir) -> dict:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    s = summary(run, serial, meta)
    write_chrome_trace(run, out_dir / "trace.json")
    rows = write_layer_csv(run, serial, out_dir / "layers.csv")
    s["plots"] = [str(p) for p in plot(run, rows, out_dir)]
    (out_dir / "summary.json").write_text(json.dumps(s, indent=2))
    return s

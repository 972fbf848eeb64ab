"""The step and energy tables of docs/runtime.md and docs/energy.md, rendered from a
`pimrt compare` results file (compare.json; the ones the docs quote are in docs/figures/), and
docs/gradsa.md's bench tables from `pimrt bench gradsa --json` files (as the bench prints
them, or the 3-seed markdown table), and docs/memctl.md's speed table, memctl against DRAMsim3
as whole processes, from `pimrt bench memctl --dramsim3 BUILD --json` (bench-memctl.json).

    python scripts/doc_tables.py docs/figures/compare-32.json      # step table, energy table
    python scripts/doc_tables.py docs/figures/compare-amp-fp16-32.json docs/figures/compare-32.json
                                                                   # AMP beside fp32
    python scripts/doc_tables.py docs/figures/gradsa-scale.json    # the bench's own table
    python scripts/doc_tables.py docs/figures/bench-speed.json     # pimrt bench speed's runs
    python scripts/doc_tables.py docs/figures/sensitivity.csv      # the sensitivity study
    python scripts/doc_tables.py docs/figures/sensitivity.csv resnet18   # ... and one model
    python scripts/doc_tables.py docs/figures/bench-memctl.json    # memctl vs DRAMsim3 speed
    python scripts/doc_tables.py docs/figures/host-v100.json       # pimrt bench host's errors
    python scripts/doc_tables.py docs/figures/laysa-*.json         # pimrt bench laysa's memory

tests/test_docs_figures.py checks that the docs hold these tables as rendered here, so a
figure in them is the results file's."""
from __future__ import annotations

import json
import sys


def _by(rows: list[dict]) -> tuple[list[str], dict]:
    models = list(dict.fromkeys(r["model"] for r in rows))
    return models, {(r["model"], r["policy"]): r for r in rows}


def step_table(rows: list[dict]) -> list[str]:
    models, by = _by(rows)
    out = ["| model | GPU-only ms | serial ms | bank_partition ms | authority ms | bound ms | "
           "host alone ms | PIM alone ms | authority vs GPU-only | vs serial | step / bound |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    sg = ss = sb = 0.0
    for m in models:
        a, b = by[(m, "authority")], by[(m, "bank_partition")]
        tck = a["step_ms"] / a["makespan_cycles"]
        name = "vgg16 (BN)" if m == "vgg16" else m
        out.append(f"| {name} | {a['gpu_only_step_ms']:.3f} | {a['serial_step_ms']:.3f} | "
                   f"{b['step_ms']:.3f} | {a['step_ms']:.3f} | {a['bound_step_ms']:.3f} | "
                   f"{a['bound_host_busy_cycles'] * tck:.3f} | "
                   f"{a['bound_pim_busy_cycles'] * tck:.3f} | {a['speedup_vs_gpu_only']:.3f}x | "
                   f"{a['speedup_vs_serial']:.3f}x | {a['step_vs_bound']:.3f} |")
        sg += a["speedup_vs_gpu_only"]
        ss += a["speedup_vs_serial"]
        sb += a["step_vs_bound"]
    n = len(models)
    out.append(f"| mean | | | | | | | | **{sg / n:.3f}x** | **{ss / n:.3f}x** | {sb / n:.3f} |")
    return out


def energy_table(rows: list[dict]) -> list[str]:
    models, by = _by(rows)
    out = ["| model | policy | step ms | total mJ | host (static) | DRAM | PIM | I/O | / GPU-only "
           "| / serial |", "|---|---|---|---|---|---|---|---|---|---|"]
    means: dict[str, list] = {}
    for m in models:
        a = by[(m, "authority")]
        e = a["energy_mj"]
        g, tot = e["gpu_only_parts"], e["gpu_only_total"]
        out.append(f"| {m} | GPU-only | {a['gpu_only_step_ms']:.3f} | {tot:,.1f} | "
                   f"{g['host']:,.1f} ({50.0 * a['gpu_only_step_ms']:,.1f}) | {g['dram']:,.1f} | "
                   f"{g['pim']:,.1f} | {g['io']:,.1f} | 1 | {tot / e['serial_total']:.3f} |")
        for pol in ("serial", "bank_partition", "authority"):
            r = by[(m, pol)]
            e = r["energy_mj"]
            c = e["components"]
            out.append(f"| {m} | {pol} | {r['step_ms']:.3f} | {e['total']:,.1f} | "
                       f"{e['host']:,.1f} ({c['host_static']:,.1f}) | {e['dram']:,.1f} | "
                       f"{e['pim']:,.1f} | {e['io']:,.1f} | {e['vs_gpu_only']:.3f} | "
                       f"{e['vs_serial']:.3f} |")
            means.setdefault(pol, []).append((e["vs_gpu_only"], e["vs_serial"]))
    for pol, v in means.items():
        out.append(f"| mean | {pol} | | | | | | | **{sum(x for x, _ in v) / len(v):.3f}** | "
                   f"**{sum(y for _, y in v) / len(v):.3f}** |")
    return out


def energy_summary(rows: list[dict]) -> list[str]:
    """The short energy table (mJ per step by policy), as docs/energy.md quotes 224x224."""
    models, by = _by(rows)
    out = ["| model | GPU-only | serial | bank_partition | authority | authority / GPU-only | "
           "/ serial |", "|---|---|---|---|---|---|---|"]
    g = s = 0.0
    for m in models:
        a = by[(m, "authority")]["energy_mj"]
        out.append(f"| {m} | {a['gpu_only_total']:,.1f} | {a['serial_total']:,.1f} | "
                   f"{by[(m, 'bank_partition')]['energy_mj']['total']:,.1f} | {a['total']:,.1f} "
                   f"| {a['vs_gpu_only']:.3f} | {a['vs_serial']:.3f} |")
        g += a["vs_gpu_only"]
        s += a["vs_serial"]
    out.append(f"| mean | | | | | **{g / len(models):.3f}** | **{s / len(models):.3f}** |")
    return out


def _paired(rows: list[dict], other_rows: list[dict], row_of) -> tuple[list[str], list[float]]:
    """Each model's authority row in `rows` beside its row in `other_rows`: row_of(a, b) ->
    (the line's cells after the model, the values the last line averages); -> (the lines,
    the averages)."""
    models, by = _by(rows)
    _, other = _by(other_rows)
    lines, sums = [], None
    for m in models:
        cells, vals = row_of(by[(m, "authority")], other[(m, "authority")])
        sums = list(vals) if sums is None else [x + y for x, y in zip(sums, vals)]
        lines.append(f"| {'vgg16 (BN)' if m == 'vgg16' else m} | {cells} |")
    return lines, [x / len(models) for x in sums]


def amp_table(rows: list[dict], fp32_rows: list[dict]) -> list[str]:
    """The AMP step beside fp32's (docs/runtime.md, docs/precision.md): an AMP compare's
    authority rows and the fp32 compare's at the same input size."""
    def row_of(a, f):
        e = a["energy_mj"]
        vals = (a["speedup_vs_gpu_only"], a["speedup_vs_serial"], a["step_vs_bound"],
                e["vs_gpu_only"], e["vs_serial"])
        return (f"{f['step_ms']:.3f} | {a['gpu_only_step_ms']:.3f} | {a['serial_step_ms']:.3f} | "
                f"{a['step_ms']:.3f} | {a['bound_step_ms']:.3f} | {vals[0]:.3f}x | "
                f"{vals[1]:.3f}x | {vals[2]:.3f} | {e['total']:,.1f} | {vals[3]:.3f} | "
                f"{vals[4]:.3f} | {a['step_ms'] / f['step_ms']:.3f}"), vals
    lines, m = _paired(rows, fp32_rows, row_of)
    return ["| model | fp32 step ms | AMP GPU-only ms | AMP serial ms | AMP step ms | AMP bound ms "
            "| vs GPU-only | vs serial | step / bound | AMP mJ | E / GPU-only | E / serial | "
            "AMP step / fp32 step |", "|---" * 13 + "|", *lines,
            f"| mean | | | | | | **{m[0]:.3f}x** | **{m[1]:.3f}x** | {m[2]:.3f} | | "
            f"{m[3]:.3f} | {m[4]:.3f} | |"]


def system_table(rows: list[dict], base_rows: list[dict]) -> list[str]:
    """A compare on another system (docs/precision.md: amp-bf16 on the A100) beside the
    default system's compare of the same models and input (amp-fp16 on the V100): each step,
    its yardsticks and the speedups, and the default system's speedups beside them."""
    def row_of(a, b):
        vals = (a["speedup_vs_gpu_only"], a["speedup_vs_serial"], a["step_vs_bound"],
                b["speedup_vs_gpu_only"], b["speedup_vs_serial"])
        return (f"{a['gpu_only_step_ms']:.3f} | {a['serial_step_ms']:.3f} | {a['step_ms']:.3f} "
                f"| {a['bound_step_ms']:.3f} | {vals[0]:.3f}x | {vals[1]:.3f}x | {vals[2]:.3f} "
                f"| {vals[3]:.3f}x | {vals[4]:.3f}x"), vals
    lines, m = _paired(rows, base_rows, row_of)
    b0 = base_rows[0]
    return [f"| model | GPU-only ms | serial ms | step ms | bound ms | vs GPU-only | vs serial | "
            f"step / bound | {b0['precision']} on {b0['part']}: vs GPU-only | vs serial |",
            "|---" * 10 + "|", *lines,
            f"| mean | | | | | **{m[0]:.3f}x** | **{m[1]:.3f}x** | {m[2]:.3f} | {m[3]:.3f}x | "
            f"{m[4]:.3f}x |"]


def _printed(fn, *args) -> list[str]:
    """What a bench's print function prints, as lines."""
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*args)
    return buf.getvalue().splitlines()


def gradsa_table(results: dict) -> list[str]:
    """`pimrt bench gradsa --json`: its table as the bench prints it (the legend left out)."""
    from pimrt.bench.gradsa import print_table
    rows = results["rows"]
    dense = next((r for r in rows if r["compressor"] == "dense" and "error" not in r), None)
    return _printed(print_table, rows, dense["final_acc"] if dense else None,
                    results["compute_s_per_step"], results["settings"]["nproc"])[:-1]


def gradsa_scale(results: dict) -> list[str]:
    """`pimrt bench gradsa --scale ... --json`: its table as the bench prints it."""
    from pimrt.bench.gradsa import print_scale
    return _printed(print_scale, results["rows"])[:-1]


def gradsa_curve(results: dict) -> list[str]:
    """`pimrt bench gradsa --curve ... --json`: the curve's table as the bench prints it."""
    from pimrt.bench._gradsa_curve import print_curve
    return _printed(print_curve, results["curve"], results["curve"]["dense"]["seeds"])


def gradsa_seeds(runs: list[dict]) -> list[str]:
    """`pimrt bench gradsa --seed S --json` for several seeds: accuracy per seed, the mean,
    its standard deviation (n - 1) and the mean's difference from dense."""
    import statistics
    names = list(dict.fromkeys(r["compressor"] for run in runs for r in run["rows"]))
    by = [{r["compressor"]: r for r in run["rows"]} for run in runs]
    seeds = " / ".join(str(run["settings"]["seed"]) for run in runs)
    out = [f"| compressor | ratio (per seed) | test acc % seed {seeds} | mean | std | vs dense |",
           "|---|---|---|---|---|---|"]
    dense = statistics.mean(100 * b["dense"]["final_acc"] for b in by)
    for name in names:
        accs = [100 * b[name]["final_acc"] for b in by]
        ratios = [f"{b[name]['ratio']:.1f}" for b in by]
        ratio = ratios[0] if len(set(ratios)) == 1 else " / ".join(ratios)
        mean = statistics.mean(accs)
        std = statistics.stdev(accs) if len(accs) > 1 else 0.0
        vs = "-" if name == "dense" else f"{mean - dense:+.2f}"
        out.append(f"| {name} | {ratio} | {' / '.join(f'{a:.2f}' for a in accs)} | "
                   f"{mean:.2f} | {std:.2f} | {vs} |")
    return out


def speed_table(results: dict, baseline: str) -> list[str]:
    """`pimrt bench speed --baseline`'s runs (speed.json): each case at this build and at the
    baseline (named `baseline`, e.g. its commit), CPU and wall seconds, peak RSS, the step."""
    out = ["| case | build | CPU s | wall s | peak RSS | step ms | outputs |",
           "|---|---|---|---|---|---|---|"]
    for r in results["runs"]:
        build = baseline if r["build"] == "baseline" else r["build"]
        same = ("" if "same_outputs" not in r else "the same" if r["same_outputs"]
                else "differ: " + ", ".join(r["differing"]))
        out.append(f"| {r['case']} | {build} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | "
                   f"{r['peak_rss_mib']:.0f} MiB | {r['step_ms']:.3f} | {same} |")
    return out


#: the runs of a profile (scripts/profile_run.py) by the stream memctl simulates
_PROFILE_RUNS = (("gpu_only", "memctl: GPU-only"),
                 ("authority", "memctl: the step (this build: the slack rule's and the per-layer "
                               "rule's profiled step)"),
                 ("alone (plan)", "memctl: each side's tasks alone (this build: twice, the "
                                  "second from where the two streams part)"),
                 ("serial", "memctl: serial"))
_PROFILE_PHASES = (("streams", "stream building and feeding (Python)"),
                   ("other", "the runs' own bookkeeping (Python)"),
                   ("planning", "planning"), ("reports", "reports"),
                   ("capture", "capture, placement, checks"))


def profile_table(doc: dict) -> list[str]:
    """scripts/profile_run.py --json profiles of one command at several builds
    (docs/figures/profile-*.json, {"profiles": [...]}) side by side: memctl's CPU by the
    stream it simulated, the other phases, the total and the peak RSS."""
    profs = doc["profiles"]
    out = ["| phase | " + " | ".join(f"{p['label']} ({p['commit']}): CPU s" for p in profs)
           + " |", "|---" * (len(profs) + 1) + "|"]

    def run_phase(p, run, phase):
        return sum(r["cpu_s"] for r in p["by_run"] if r["run"] == run and r["phase"] == phase)
    for run, label in _PROFILE_RUNS:
        out.append(f"| {label} | " + " | ".join(f"{run_phase(p, run, 'memctl'):.1f}"
                                               for p in profs) + " |")
    for phase, label in _PROFILE_PHASES:
        names = (phase,) if phase != "capture" else ("capture", "placement", "checks")
        out.append(f"| {label} | " + " | ".join(
            f"{sum(p['by_phase'].get(n, 0.0) for n in names):.1f}" for p in profs) + " |")
    out.append("| total (every phase; + startup and imports) | " + " | ".join(
        f"{p['cpu_s']:.1f} (+ {p['startup_s']:.1f})" for p in profs) + " |")
    out.append("| peak RSS | " + " | ".join(f"{p['peak_rss_mib']:.0f} MiB" for p in profs)
               + " |")
    return out


_CASE = {"hbm2": "HBM2", "ddr4": "DDR4", "stream": "stream", "random": "random",
         "mix": "2:1 read/write"}


def _load(st: dict) -> str:
    """A bench's settings' load averages, as its table's line of when and where says them."""
    if not (st.get("load_average_before") and st.get("load_average_after")):
        return "load unknown"
    return (f"load average {st['load_average_before'][0]:.2f} at the start, "
            f"{st['load_average_after'][0]:.2f} at the end (1-minute)")


def memctl_speed_table(results: dict) -> list[str]:
    """`pimrt bench memctl --dramsim3 BUILD --json`: a line saying when, where and how, then
    per host-only case the core's rate, `pimrt memsim`'s and DRAMsim3's whole processes on the
    same text trace (measured side by side in the one run) and DRAMsim3's CPU time over
    memsim's."""
    st = results["settings"]
    d3 = st["dramsim3"]
    load = _load(st)
    out = [f"Measured {st['date']} on {st['machine']}, {load}; `pimrt bench memctl --only "
           f"{st['only']} --repeat {st['repeat']} --dramsim3 BUILD`, {st['requests']:,} requests "
           f"a trace, fastest of {st['repeat']} after one untimed run, memctl and DRAMsim3 "
           f"(commit {d3['commit']}) measured side by side in this one run.", "",
           "| case | memctl cycles | core M req/s (CPU) | `pimrt memsim` whole process M req/s, "
           "wall / CPU | DRAMsim3 whole process M req/s, wall / CPU | DRAMsim3 -c | DRAMsim3 CPU "
           "s / memsim CPU s |", "|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        m = r.get("dramsim3")
        if not m:
            continue
        part, pattern = r["case"].split("-", 1)
        out.append(f"| {_CASE.get(part, part)} {_CASE.get(pattern, pattern)}, W={r['issue_width']}"
                   f" | {r['cycles']:,} | {r['sim_requests_per_s'] / 1e6:.2f} | "
                   f"{r['process_requests_per_s'] / 1e6:.2f} / "
                   f"{r['process_requests_per_cpu_s'] / 1e6:.2f} | "
                   f"{m['requests_per_s'] / 1e6:.2f} / {m['requests_per_cpu_s'] / 1e6:.2f} | "
                   f"{m['cycles_arg']:,} | {r['process_vs_dramsim3_cpu']:.1f}x |")
    x = [r["process_vs_dramsim3_cpu"] for r in results["rows"] if r.get("dramsim3")]
    out += ["", f"DRAMsim3's whole process used {min(x):.1f}x to {max(x):.1f}x the CPU seconds "
                f"of `pimrt memsim`'s on the same trace."]
    return out


def pim_speed_table(results: dict) -> list[str]:
    """`pimrt bench pim --json`: a line saying when, where and how, then per kernel its M
    elements a second through the batch driver at each lane count, by the wall clock and per
    CPU-second of the process, and whether the target (issue 26: 20 M/s) is met by each, then
    a line per lane count with the kernels that meet it."""
    st = results["settings"]
    lanes = results["lanes"]
    target = results["target_elements_per_s"]
    load = _load(st)
    cmd = (f"pimrt bench pim --lanes {st['lanes']} --elements {st['elements']} --repeat "
           f"{st['repeat']}" + ("" if st["kernels"] == "all" else f" --kernels {st['kernels']}")
           + (f" --units {st['units_asked']}" if st.get("units_asked") else "")
           + ("" if st["pyverilator"] else " --no-pyverilator") + " --json FILE")
    out = [f"Measured {st['date']} on {st['machine']}, {load}; `{cmd}`: {st['elements']:,} "
           f"elements a kernel, the fastest of {st['repeat']}, on {st['units']} Verilated "
           f"unit(s) at once; wall = elements per wall-clock second, cpu = per second of the "
           f"process's CPU time (all its threads), both in millions.", "",
           "| kernel | " + " | ".join(f"{n} lanes wall / cpu" for n in lanes)
           + f" | {target / 1e6:.0f} M/s by wall clock, {' / '.join(map(str, lanes))} lanes"
           f" | {target / 1e6:.0f} M/s per CPU-second, {' / '.join(map(str, lanes))} lanes |",
           "|---|" + "---|" * (len(lanes) + 2)]
    by = {(r["kernel"], r["lanes"]): r for r in results["results"]}
    names = list(dict.fromkeys(r["kernel"] for r in results["results"]))
    met = lambda r, k: "-" if r is None else "met" if r[k] >= target else "short"  # noqa: E731
    for name in names:
        rs = [by.get((name, n)) for n in lanes]
        cells = [f"{r['driver_elements_per_s'] / 1e6:.2f} / {r['driver_elements_per_cpu_s'] / 1e6:.2f}"
                 if r else "-" for r in rs]
        out.append(f"| {name} | " + " | ".join(cells)
                   + f" | {' / '.join(met(r, 'driver_elements_per_s') for r in rs)}"
                   f" | {' / '.join(met(r, 'driver_elements_per_cpu_s') for r in rs)} |")
    fp32 = [n for n in names if not n.endswith(("_f16", "_bf16"))]
    out.append("")
    for n in lanes:
        def count(key, among):
            return sum(1 for k in among if (k, n) in by and by[k, n][key] >= target)
        out.append(f"At {n} lanes {count('driver_elements_per_s', names)} of {len(names)} "
                   f"kernels reach {target / 1e6:.0f} M elements/s by the wall clock and "
                   f"{count('driver_elements_per_cpu_s', names)} per CPU-second; of the "
                   f"{len(fp32)} fp32 ones, {count('driver_elements_per_s', fp32)} and "
                   f"{count('driver_elements_per_cpu_s', fp32)}.")
    for n in lanes:
        ratios = [by[k, n]["ratio_driver_over_pyverilator"] for k in names
                  if (k, n) in by and by[k, n].get("ratio_driver_over_pyverilator")]
        if ratios:
            out.append(f"At {n} lanes the batch driver runs {min(ratios):.0f}x to "
                       f"{max(ratios):.0f}x the elements a second of per-cycle pyverilator "
                       f"driving ({st['pv_elements']:,} elements a kernel) on {len(ratios)} "
                       f"kernels: {sum(r >= 50 for r in ratios)} of them at 50x or more.")
    return out


def pim_ops_table(results: dict) -> list[str]:
    """`pimrt bench pim_ops --json`: a line saying when, where and how, then per instruction
    and lane count the unit's clocks per CPU-second, the CPU ns a clock and a lane's share."""
    st = results["settings"]
    load = _load(st)
    cmd = f"pimrt bench pim_ops --lanes {st['lanes']} --clocks {st['clocks']} --json FILE"
    lanes = list(dict.fromkeys(r["lanes"] for r in results["rows"]))
    out = [f"Measured {st['date']} on {st['machine']}, {load}; `{cmd}`: M clocks per second of "
           f"the process's CPU time / CPU ns a clock / ns a lane (a clock's ns less those of "
           f"`MOV G, B`, over the lanes).", "",
           "| instruction | " + " | ".join(f"{n} lanes" for n in lanes) + " |",
           "|---|" + "---|" * len(lanes)]
    by = {(r["instruction"], r["lanes"]): r for r in results["rows"]}
    for name in dict.fromkeys(r["instruction"] for r in results["rows"]):
        cells = []
        for n in lanes:
            r = by.get((name, n))
            lane = "-" if r is None or r["ns_per_lane"] is None else f"{r['ns_per_lane']:.2f}"
            cells.append("-" if r is None else f"{r['clocks_per_cpu_s'] / 1e6:.2f} / "
                         f"{r['ns_per_clock']:.1f} / {lane}")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def pim16_table(results: dict) -> list[str]:
    """`pimrt bench pim16 --json`: a line saying when, where and how, then per op, dtype and
    lane count the unit's cycles per element and the elements a second through the batch
    driver (by the wall clock and per CPU-second), and whether the RTL equalled the golden
    model."""
    st = results["settings"]
    load = _load(st)
    cmd = (f"pimrt bench pim16 --lanes {st['lanes']} --elements {st['elements']}"
           + ("" if st["ops"] == "all" else f" --ops {st['ops']}") + " --json FILE")
    out = [f"Measured {st['date']} on {st['machine']}, {load}; `{cmd}`: one unit; M elements "
           f"a second by the wall clock / per CPU-second.", "",
           "| op | dtype | lanes | cycles/element | M elements/s wall / cpu | RTL == golden |",
           "|---|---|---|---|---|---|"]
    for r in results["results"]:
        out.append(f"| {r['op']} | {r['dtype']} | {r['lanes']} | {r['cycles_per_element']:.4f} | "
                   f"{r['elements_per_s'] / 1e6:.2f} / {r['elements_per_cpu_s'] / 1e6:.2f} | "
                   f"{'yes' if r['equal_to_golden'] else 'NO'} |")
    return out


_HOST_GROUPS = (("all", None, None), ("forward", "by_phase", "forward"),
                ("backward_data", "by_phase", "backward_data"),
                ("backward_weight", "by_phase", "backward_weight"), ("GEMM", "by_phase", "gemm"),
                ("1x1", "by_class", "1x1"), ("3x3 stride 1", "by_class", "3x3 stride 1"),
                ("strided", "by_class", "strided"), ("large filter", "by_class", "large filter"))


def host_table(results: dict) -> list[str]:
    """`pimrt bench host`'s JSON (host-v100.json): per phase and per class of kernel the
    error factor, the share within +-25% and the fitted / held-out error factors, as
    docs/host_model.md quotes them."""
    name = results["host_part"].lower().replace("-", "_")
    dataset = {"fp32": "FP32", "fp16mixed": "FP16-mixed"}.get(results["dataset"],
                                                                 results["dataset"])
    out = [f"| {name} vs {dataset} | kernels | error factor | within +-25% | fitted / held-out "
           "error factor |", "|---|---|---|---|---|"]
    for label, group, key in _HOST_GROUPS:
        g = results if group is None else results[group][key]
        a = g["all"] if group else results["all"]
        f = g["fitted"] if group else results["fitted"]
        h = g["held_out"] if group else results["held_out"]
        out.append(f"| {label} | {a['kernels']} | {a['error_factor']:.3f} | "
                   f"{100 * a['within_25pct']:.0f}% | {f['error_factor']:.3f} / "
                   f"{h['error_factor']:.3f} |")
    return out


def sensitivity_table(rows: list[dict]) -> list[str]:
    """A sweep's results.csv (the sensitivity study, docs/sweep-sensitivity.toml) as the
    model-by-variant table of docs/runtime.md: each cell the authority step, its speedup over
    GPU-only / serial and step / bound; the means; the mean energy over GPU-only / serial."""
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    by = {(r["model"], r["variant"]): r for r in rows}
    f = lambda r, k: float(r[k])                                   # noqa: E731
    out = ["| model | " + " | ".join(variants) + " |", "|---|" + "---|" * len(variants)]
    for m in models:
        cells = [f"{f(r, 'step_ms'):.2f} ms: {f(r, 'speedup_vs_gpu_only'):.2f}x / "
                 f"{f(r, 'speedup_vs_serial'):.2f}x / {f(r, 'step_vs_bound'):.3f}"
                 for r in (by[(m, v)] for v in variants)]
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    means, energy = [], []
    for v in variants:
        rs = [by[(m, v)] for m in models if (m, v) in by]
        n = len(rs)
        means.append(f"{sum(f(r, 'speedup_vs_gpu_only') for r in rs) / n:.3f}x / "
                     f"{sum(f(r, 'speedup_vs_serial') for r in rs) / n:.3f}x / "
                     f"{sum(f(r, 'step_vs_bound') for r in rs) / n:.3f} ({n} nets)")
        energy.append(f"{sum(f(r, 'energy_mj.vs_gpu_only') for r in rs) / n:.3f} / "
                      f"{sum(f(r, 'energy_mj.vs_serial') for r in rs) / n:.3f}")
    out.append("| mean | " + " | ".join(means) + " |")
    out.append("| energy vs GPU-only / serial (mean) | " + " | ".join(energy) + " |")
    return out


def sensitivity_model_rows(rows: list[dict], model: str) -> list[str]:
    """One model's row of the sensitivity study per variant (docs/sweep.md): the GPU-only,
    serial and authority steps, the speedups and step / bound, from the sweep's results.csv."""
    out = ["| variant | GPU-only ms | serial ms | authority ms | vs GPU-only | vs serial | "
           "step / bound |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["model"] == model:
            f = lambda k: float(r[k])                           # noqa: E731
            out.append(f"| {r['variant']} | {f('gpu_only_step_ms'):.3f} | "
                       f"{f('serial_step_ms'):.3f} | {f('step_ms'):.3f} | "
                       f"{f('speedup_vs_gpu_only'):.3f}x | {f('speedup_vs_serial'):.3f}x | "
                       f"{f('step_vs_bound'):.3f} |")
    return out


_NET = {"resnet18": "ResNet-18", "resnet_cifar_20": "ResNet-20", "resnet20": "ResNet-20"}


def _laysa_label(results: dict) -> str:
    st = results["settings"]
    return f"{_NET.get(st['model'], st['model'])}, {results['budget'] / 2**20:.0f} MiB"


def laysa_memory_table(runs: list[dict]) -> list[str]:
    """`pimrt bench laysa --json` files (docs/laysa.md): per run and variant the memory
    meter's device and host MiB, the ledger and its split at the peak, and the largest batch
    found by real runs (the bench's columns without its timings: step s and images/s follow the
    machine's load)."""
    m = lambda n: f"{n / 2**20:.2f}"                                # noqa: E731
    out = ["| model, budget | variant | device MiB | vs GradSA | host MiB | ledger | saved | grad "
           "| res+mom | comm | upd | max batch |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in runs:
        rows, cap = res["rows"], res["settings"]["max_batch"]
        base = rows.get("gradsa")
        for v, r in rows.items():
            a, dev = r["at_peak"], r["meter_device_bytes"]
            vs = 100 * (dev / base["meter_device_bytes"] - 1) if base else 0.0
            mb = (">=" if r["max_batch"] >= cap or not r["search_bracketed"] else "") \
                + str(r["max_batch"])
            out.append(f"| {_laysa_label(res)} | {v} | {m(dev)} | {vs:+.1f}% | "
                       f"{m(r['meter_host_bytes'])} | {m(r['peak_bytes'])} | {m(a['saved'])} | "
                       f"{m(a['grad'])} | {m(a['residual'] + a['momentum'])} | {m(a['comm'])} | "
                       f"{m(a['update'])} | {mb} |")
    return out


def laysa_search_table(runs: list[dict]) -> list[str]:
    """The largest-batch search's real runs of `pimrt bench laysa --json` files: per variant
    each batch tried (meter MiB, fits or not), the largest batch, the meter's and the
    ledger's MiB there."""
    out = ["| model, budget | variant | runs | largest batch | meter MiB there | ledger MiB there |",
           "|---|---|---|---|---|---|"]
    for res in runs:
        cap = res["settings"]["max_batch"]
        for v, r in res["rows"].items():
            tried = ", ".join(f"{b} {'fits' if ok else 'not'} ({n / 2**20:.1f})"
                              for b, n, ok in r["search_runs"])
            mb = (">=" if r["max_batch"] >= cap or not r["search_bracketed"] else "") \
                + str(r["max_batch"])
            there = [r.get("max_batch_device_bytes"), r.get("max_batch_ledger_bytes")]
            cells = " | ".join("-" if n is None else f"{n / 2**20:.1f}" for n in there)
            out.append(f"| {_laysa_label(res)} | {v} | {tried} | {mb} | {cells} |")
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[0].endswith(".csv"):                      # a sweep's results.csv
        import csv
        with open(argv[0], newline="") as fh:
            rows = list(csv.DictReader(fh))
        print("\n".join(sensitivity_table(rows)))
        if len(argv) > 1:                             # and one model's rows (docs/sweep.md)
            print()
            print("\n".join(sensitivity_model_rows(rows, argv[1])))
        return 0
    data = [json.load(open(a)) for a in argv]
    if isinstance(data[0], list) and len(data) == 2 \
            and data[0][0]["part"] != data[1][0]["part"]:  # two systems' compare.json
        print("\n".join(system_table(data[0], data[1])))
        return 0
    if isinstance(data[0], list) and len(data) == 2:  # an AMP compare.json and the fp32 one
        print("\n".join(amp_table(data[0], data[1])))
        return 0
    if isinstance(data[0], list):                     # compare.json
        for table in (step_table, energy_table, energy_summary):
            print("\n".join(table(data[0])))
            print()
        return 0
    if data[0].get("settings", {}).get("bench") == "laysa":   # pimrt bench laysa --json
        print("\n".join(laysa_memory_table(data)))
        print()
        print("\n".join(laysa_search_table(data)))
        return 0
    if "profiles" in data[0]:                         # scripts/profile_run.py --json files
        print("\n".join(profile_table(data[0])))
    elif "runs" in data[0]:                           # pimrt bench speed's speed.json
        print("\n".join(speed_table(data[0], "baseline")))
    elif "dramsim3" in data[0].get("settings", {}):      # pimrt bench memctl --json
        print("\n".join(memctl_speed_table(data[0])))
    elif "by_phase" in data[0]:                        # pimrt bench host's JSON
        print("\n".join(host_table(data[0])))
    elif "target_elements_per_s" in data[0]:           # pimrt bench pim --json
        print("\n".join(pim_speed_table(data[0])))
    elif "dtypes" in data[0].get("settings", {}):      # pimrt bench pim16 --json
        print("\n".join(pim16_table(data[0])))
    elif "clocks" in data[0].get("settings", {}):      # pimrt bench pim_ops --json
        print("\n".join(pim_ops_table(data[0])))
    elif len(data) > 1:
        print("\n".join(gradsa_seeds(data)))
    elif "curve" in data[0]:
        print("\n".join(gradsa_curve(data[0])))
    elif data[0]["settings"].get("scale"):
        print("\n".join(gradsa_scale(data[0])))
    else:
        print("\n".join(gradsa_table(data[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`pimrt bench pim`: each PIM kernel through the batch driver and through per-cycle
pyverilator driving, side by side in one run, and the unit's cycles per element."""
from __future__ import annotations

import json
import os
import time

import numpy as np

from pimrt.bench._machine import loadavg, when_where

HELP = ("PIM unit kernels: elements per wall-second through the batch driver (C++) and "
        "through per-cycle pyverilator driving, and cycles per element")

TARGET_RATE = 20e6        # elements per second through the batch driver, every kernel
TARGET_RATIO = 50.0       # batch driver over pyverilator


def add_arguments(parser) -> None:
    parser.add_argument("--elements", type=int, default=1 << 22,
                        help="elements per kernel through the batch driver")
    parser.add_argument("--pv-elements", type=int, default=1 << 11,
                        help="elements per kernel through pyverilator (default 2048)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed runs per figure; the best is reported (default 3)")
    parser.add_argument("--kernels", default="all", help="comma-separated kernel names")
    parser.add_argument("--rows", type=int, default=2048, help="bank rows (columns per row: 32)")
    parser.add_argument("--lanes", default="8,16",
                        help="lane counts of the unit to build and measure (default 8,16)")
    parser.add_argument("--no-pyverilator", action="store_true",
                        help="skip the host-port and pyverilator columns (they build a "
                             "pyverilator model per lane count, minutes the first time)")
    parser.add_argument("--baseline-hw", metavar="DIR",
                        help="also build the batch driver from another copy of hw/ (e.g. an "
                             "older revision's, `git worktree add`) and time it beside the "
                             "current one, run for run, under the same load")
    parser.add_argument("--units", type=int, default=None,
                        help="Verilated units the batch driver spreads a kernel's chunks over, "
                             "a thread each (default: the cores this process may use, or "
                             "PIMRT_PIM_UNITS)")
    parser.add_argument("--baseline-units", type=int, default=None,
                        help="units of the --baseline-hw build (default: as --units)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    parser.add_argument("--update-cycles", action="store_true",
                        help="write the cycles-per-element table the timing model reads "
                             "(pimrt/pim/kernel_cycles.json)")


def _inputs(name: str, n: int, rng):
    """-> (function running the kernel on a backend, elements it counts, the work in
    pimrt.pim.access's terms for one bank)."""
    from pimrt.pim import kernels as K
    dts = K.stream_dtypes(name)               # a 16-bit stream: normal values rounded to it

    def draw(s, shape):
        v = rng.standard_normal(shape).astype(np.float32)
        return v if dts[s] == "f32" else K.bits16(v, dts[s])

    if name in K.STREAM_KERNELS:
        k = K.STREAM_KERNELS[name]
        arrays = {s: draw(s, n) for s in k.inputs}
        scal = {s: K.CONSTANTS.get(s, 0.5) for s in k.scalars}   # threshold 0.5
        return (lambda b: K.run_stream(b, name, arrays, scal)), n, {"elements": n}
    C = 64
    if name in K.CHANNEL_KERNELS:
        k = K.CHANNEL_KERNELS[name]
        per = max(1, n // C)
        arrays = {s: draw(s, (C, per)) for s in k.inputs}
        params = {p: np.full(C, 0.5, np.float32) for p in k.params}
        return ((lambda b: K.run_channels(b, name, arrays, params)), C * per,
                {"channels": C, "elements": per})
    side = 16
    base, dt = K.base_of(name)
    N = max(1, n // (C * (side // 2) ** 2))
    x = draw(K.POOL_STREAMS[name][0], (N, C, side, side))
    work = {"images": N, "height": side, "width": side, "channels": C}
    if base == "avgpool2_fwd":
        return (lambda b: K.avgpool2_forward(b, x, dt)), x.size // 4, work
    if base == "maxpool2_fwd":
        return (lambda b: K.maxpool2_forward(b, x, dt)), x.size // 4, work
    dy = draw("dy", (N, C, side // 2, side // 2))
    return (lambda b: K.avgpool2_backward(b, dy, x.shape, dt)), x.size, work


def parse_lanes(text: str) -> list[int]:
    """--lanes: comma-separated lane counts, each a power of two from 1 to 32."""
    from pimrt.pim.errors import PimError
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        raise PimError(f"--lanes wants comma-separated lane counts, got {text!r}") from None
    bad = [n for n in counts if not (1 <= n <= 32 and n & (n - 1) == 0)]
    if bad:
        raise PimError(f"--lanes: {', '.join(map(str, bad))} is not a power of two from 1 to 32")
    return counts


def _time(fn, backends, repeat: int) -> list[tuple[float, int, float]]:
    """(best wall time, cycles, best CPU time of this process) of `fn` on each backend, the
    backends taking turns run for run so that they see the same load."""
    best = [float("inf")] * len(backends)
    cpu = [float("inf")] * len(backends)
    for _ in range(max(1, repeat)):
        for i, backend in enumerate(backends):
            backend.stats.clear()
            c0, t0 = time.process_time(), time.perf_counter()
            fn(backend)
            best[i] = min(best[i], time.perf_counter() - t0)
            cpu[i] = min(cpu[i], time.process_time() - c0)
    return [(t, sum(v[0] for v in b.stats.values()), c) for t, b, c in zip(best, backends, cpu)]


def run(args) -> int:
    from pimrt.pim import kernels as K
    from pimrt.pim.errors import PimError

    names = list(K.KERNELS) if args.kernels == "all" else args.kernels.split(",")
    unknown = [n for n in names if n not in K.KERNELS]
    if unknown:
        raise PimError(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(K.KERNELS)}")
    rows, cols = args.rows, 32
    lane_counts = parse_lanes(args.lanes)
    if args.baseline_hw and not os.path.isdir(args.baseline_hw):
        raise PimError(f"--baseline-hw: no directory {args.baseline_hw}")
    print(f"building / loading the RTL models (cached under {os.environ.get('PIMRT_CACHE', '~/.cache/pimrt')}) ...",
          flush=True)
    settings = _settings(args)
    load0 = settings["load_average_before"][0]
    from pimrt.pim.driver import default_units
    for what, n in (("--units", args.units), ("--baseline-units", args.baseline_units)):
        if n is not None and n < 1:
            raise PimError(f"{what} must be 1 or more, got {n}")
    units = args.units or default_units()
    base_units = args.baseline_units or units
    rows_out = []
    for lanes in lane_counts:
        rows_out += _measure(names, lanes, rows, cols, args)
    settings.update(load_average_after=loadavg(), units=units,
                    baseline_units=base_units if args.baseline_hw else None)
    load1 = settings["load_average_after"][0]
    _report(rows_out, lane_counts, rows, cols, args, (load0, load1), (units, base_units))
    doc = {"lanes": lane_counts, "bank_rows": rows, "bank_cols": cols, "units": units,
           "baseline_units": base_units if args.baseline_hw else None,
           "baseline_hw": args.baseline_hw, "target_elements_per_s": TARGET_RATE,
           "load_average": [load0, load1], "settings": settings, "results": rows_out}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
        print(f"wrote {args.json}")
    if args.update_cycles:
        _update_table(rows_out, lane_counts, rows, cols, args)
    return 0


def _settings(args) -> dict:
    """When, where and how: the date, the machine and its load before the run, the
    command's settings (the load after and the units are added when the run ends)."""
    return {**when_where(),
            "kernels": args.kernels, "elements": args.elements, "repeat": args.repeat,
            "lanes": args.lanes, "rows": args.rows, "units_asked": args.units,
            "pyverilator": not args.no_pyverilator,
            "pv_elements": None if args.no_pyverilator else args.pv_elements,
            "baseline_hw": args.baseline_hw}



def _report(rows_out, lane_counts, rows: int, cols: int, args, loads, units) -> None:
    base = bool(args.baseline_hw)
    print()
    print(f"PIM unit, bank {rows} x {cols} columns; driver: {args.elements} elements per "
          f"kernel, best of {args.repeat}, on {units[0]} Verilated unit(s) at once"
          + (f" (base: {units[1]})" if base else "")
          + f"; pyverilator and port: {args.pv_elements} elements.")
    print("driver = batch driver, bank data by backdoor copy (elements per wall-clock second; "
          "cpu: per second of this process's CPU time, what it gets with a core to itself)"
          + (f"; base = the batch driver built from {args.baseline_hw}, timed in turn with "
             "driver; x cpu = driver / base in CPU time" if base else "")
          + "; port = batch driver, bank data through the host port (1 column/clock, like "
          "pyverilator); pyverilator = per-cycle driving from Python; col acc/e = the unit's "
          "column accesses (4*lanes bytes) per element; DRAM/e = 64-byte DRAM column accesses "
          f"per element (pimrt.pim.access); target = driver >= {TARGET_RATE / 1e6:.0f} M elements/s.")
    hdr = (f"{'kernel':16s} {'lanes':>5s} {'driver Me/s':>11s} {'cpu':>6s} "
           + (f"{'base Me/s':>9s} {'cpu':>6s} {'x cpu':>5s} " if base else "")
           + f"{'port Me/s':>10s} {'pyv ke/s':>9s} {'drv/pyv':>8s} {'cyc/elem':>8s} "
           f"{'col acc/e':>9s} {'DRAM/e':>7s} {'Mcyc/s':>7s} {'target':>6s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows_out:
        pv = r["pyverilator_elements_per_s"]
        line = (f"{r['kernel']:16s} {r['lanes']:5d} {r['driver_elements_per_s'] / 1e6:11.2f} "
                f"{r['driver_elements_per_cpu_s'] / 1e6:6.2f} ")
        if base:
            b, bc = r["baseline_driver_elements_per_s"], r["baseline_driver_elements_per_cpu_s"]
            line += f"{b / 1e6:9.2f} {bc / 1e6:6.2f} {r['driver_elements_per_cpu_s'] / bc:5.2f} "
        line += (f"{r['driver_port_elements_per_s'] / 1e6:10.2f} {pv / 1e3:9.2f} "
                 f"{r['ratio_driver_over_pyverilator']:8.0f} " if pv
                 else f"{'-':>10s} {'-':>9s} {'-':>8s} ")
        line += (f"{r['cycles_per_element']:8.4f} {r['column_accesses_per_element']:9.4f} "
                 f"{r['dram_columns_per_element']:7.4f} {r['driver_cycles_per_s'] / 1e6:7.2f} "
                 f"{'met' if r['meets_target'] else 'SHORT':>6s}")
        print(line)
    print(f"(1-minute load average {loads[0]:.1f} -> {loads[1]:.1f} on {os.cpu_count()} CPUs; "
          "the figures are wall-clock and shrink when the machine is shared)")
    for lanes in lane_counts:
        mine = [r for r in rows_out if r["lanes"] == lanes]
        short = [r["kernel"] for r in mine if not r["meets_target"]]
        print(f"{lanes} lanes: {len(mine) - len(short)} of {len(mine)} kernels at "
              f"{TARGET_RATE / 1e6:.0f} M elements/s or more through the batch driver"
              + (f"; short: {', '.join(short)}" if short else ""))
        ratios = [r["ratio_driver_over_pyverilator"] for r in mine
                  if r["ratio_driver_over_pyverilator"]]
        if ratios:
            print(f"{lanes} lanes: batch driver / pyverilator {min(ratios):.0f}x to "
                  f"{max(ratios):.0f}x (target {TARGET_RATIO:.0f}x): "
                  + ("met" if min(ratios) >= TARGET_RATIO else "SHORT"))


def _measure(names, lanes: int, rows: int, cols: int, args) -> list[dict]:
    """Each kernel at `lanes` lanes: the batch driver (and the baseline build, the host port
    and pyverilator when asked), the golden model's column counts, the access model's DRAM
    columns."""
    from pimrt.pim import access
    from pimrt.pim.driver import PimDriver
    from pimrt.pim.errors import PimError
    from pimrt.pim.golden import GoldenBackend
    from pimrt.pim.rtl import PimRtl
    full = not args.no_pyverilator
    units = args.units
    base_units = args.baseline_units if args.baseline_units is not None else units
    drv = PimDriver(rows=rows, cols=cols, lanes=lanes, units=units)
    base = (PimDriver(rows=rows, cols=cols, lanes=lanes, hw_dir=args.baseline_hw, units=base_units)
            if args.baseline_hw else None)
    port = PimDriver(rows=rows, cols=cols, lanes=lanes, via_port=True, units=units) if full else None
    pv = PimRtl(rows=rows, cols=cols, lanes=lanes) if full else None
    rng = np.random.default_rng(0)
    out = []
    for name in names:
        fn, n, work = _inputs(name, args.elements, rng)
        timed = _time(fn, [drv] + ([base] if base else []), args.repeat)
        t_drv, c_drv, cpu_drv = timed[0]
        r = {"kernel": name, "lanes": lanes, "driver_elements_per_s": n / t_drv,
             "driver_elements_per_cpu_s": n / max(cpu_drv, 1e-9),
             "baseline_driver_elements_per_s": n / timed[1][0] if base else None,
             "baseline_driver_elements_per_cpu_s": n / max(timed[1][2], 1e-9) if base else None,
             "driver_port_elements_per_s": None, "pyverilator_elements_per_s": None,
             "ratio_driver_over_pyverilator": None, "ratio_port_over_pyverilator": None}
        if base and timed[1][1] != c_drv:
            raise PimError(f"kernel {name}: the baseline RTL took {timed[1][1]} cycles, the "
                           f"current one {c_drv}; they are not the same unit")
        if full:
            pfn, pn, _ = _inputs(name, args.pv_elements, rng)
            ((t_port, _, _),) = _time(pfn, [port], args.repeat)
            ((t_pv, _, _),) = _time(pfn, [pv], 1)
            r.update({"driver_port_elements_per_s": pn / t_port,
                      "pyverilator_elements_per_s": pn / t_pv,
                      "ratio_driver_over_pyverilator": (n / t_drv) / (pn / t_pv),
                      "ratio_port_over_pyverilator": (pn / t_port) / (pn / t_pv),
                      "pv_elements": pn})
        g = GoldenBackend(rows=rows, cols=cols, lanes=lanes)
        gfn, gn, _ = _inputs(name, min(args.elements, 1 << 18), rng)
        gfn(g)
        r.update({"cycles_per_element": c_drv / n,
                  "column_accesses_per_element": (g.col_reads + g.col_writes) / gn,
                  "dram_columns_per_element": len(access.bank_accesses(name, lanes=lanes, **work)) / n,
                  "driver_cycles_per_s": c_drv / t_drv, "elements": n,
                  "meets_target": n / t_drv >= TARGET_RATE})
        out.append(r)
        print(f"  {name:16s} {lanes:2d} lanes: driver {r['driver_elements_per_s'] / 1e6:7.2f} M elem/s"
              + f" ({r['driver_elements_per_cpu_s'] / 1e6:.2f} per CPU s)"
              + (f"; base {r['baseline_driver_elements_per_s'] / 1e6:.2f}"
                 f" ({r['baseline_driver_elements_per_cpu_s'] / 1e6:.2f})" if base else "")
              + f", {r['cycles_per_element']:.4f} cycles/elem", flush=True)
    return out


def _update_table(rows_out, lane_counts, rows: int, cols: int, args) -> None:
    from pimrt.pim import cycles as cyc
    from pimrt.pim import kernels as K
    kernels: dict = {}
    for r in rows_out:
        kernels.setdefault(r["kernel"], {})[str(r["lanes"])] = {
            k: round(r[k], 6) for k in ("cycles_per_element", "column_accesses_per_element",
                                        "dram_columns_per_element")}
    table = {
        "about": "PIM kernel cost per element at each lane count, measured by `pimrt bench pim "
                 "--update-cycles` on the RTL (batch driver); see pimrt/pim/cycles.py",
        "lanes": lane_counts, "bank_rows": rows, "bank_cols": cols, "elements": args.elements,
        "kernels": kernels, "aliases": cyc.ALIASES, "host_kernels": K.HOST_KERNELS,
    }
    if args.kernels != "all" and cyc.DATA.exists():
        old = json.loads(cyc.DATA.read_text())
        for name, per in table["kernels"].items():
            old.get("kernels", {}).setdefault(name, {}).update(per)
        table["kernels"] = old["kernels"]
        table["lanes"] = sorted(set(old.get("lanes", [])) | set(lane_counts))
    cyc.DATA.write_text(json.dumps(table, indent=2) + "\n")
    cyc.table.cache_clear()
    print(f"wrote {cyc.DATA}")

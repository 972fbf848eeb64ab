"""`pimrt bench pim`: each PIM kernel through the batch driver and through per-cycle
pyverilator driving, side by side in one run, and the unit's cycles per element."""
from __future__ import annotations

import json
import os
import time

import numpy as np

HELP = ("PIM unit kernels: elements per wall-second through the batch driver (C++) and "
        "through per-cycle pyverilator driving, and cycles per element")

TARGET_RATE = 20e6        # elements per second, ReLU forward, batch driver
TARGET_RATIO = 50.0       # batch driver over pyverilator


def add_arguments(parser) -> None:
    parser.add_argument("--elements", type=int, default=1 << 22,
                        help="elements per kernel through the batch driver (default 4M)")
    parser.add_argument("--pv-elements", type=int, default=1 << 11,
                        help="elements per kernel through pyverilator (default 2048)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed runs per figure; the best is reported (default 3)")
    parser.add_argument("--kernels", default="all", help="comma-separated kernel names")
    parser.add_argument("--rows", type=int, default=2048, help="bank rows (columns per row: 32)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    parser.add_argument("--update-cycles", action="store_true",
                        help="write the cycles-per-element table the timing model reads "
                             "(pimrt/pim/kernel_cycles.json)")


def _inputs(name: str, n: int, rng):
    """-> (function running the kernel on a backend, elements it counts)."""
    from pimrt.pim import kernels as K
    if name in K.STREAM_KERNELS:
        k = K.STREAM_KERNELS[name]
        arrays = {s: rng.standard_normal(n).astype(np.float32) for s in k.inputs}
        if "mask" in arrays:
            arrays["mask"] = np.where(arrays["mask"] > 0, np.uint32(0xFFFFFFFF),
                                      np.uint32(0)).view(np.float32)
        scal = {s: 0.0 if s == "zero" else 0.5 for s in k.scalars}   # threshold 0.5
        return (lambda b: K.run_stream(b, name, arrays, scal)), n
    side = 16
    C = 64
    N = max(1, n // (C * (side // 2) ** 2))
    x = rng.standard_normal((N, C, side, side)).astype(np.float32)
    if name == "avgpool2_fwd":
        return (lambda b: K.avgpool2_forward(b, x)), x.size // 4
    if name == "maxpool2_fwd":
        return (lambda b: K.maxpool2_forward(b, x)), x.size // 4
    dy = rng.standard_normal((N, C, side // 2, side // 2)).astype(np.float32)
    return (lambda b: K.avgpool2_backward(b, dy, x.shape)), x.size


def _time(fn, backend, repeat: int) -> tuple[float, int]:
    best = float("inf")
    for _ in range(max(1, repeat)):
        backend.stats.clear()
        t0 = time.perf_counter()
        fn(backend)
        best = min(best, time.perf_counter() - t0)
    cycles = sum(v[0] for v in backend.stats.values())
    return best, cycles


def run(args) -> int:
    from pimrt.pim import cycles as cyc
    from pimrt.pim import kernels as K
    from pimrt.pim.driver import PimDriver
    from pimrt.pim.golden import GoldenBackend
    from pimrt.pim.rtl import PimRtl

    names = list(K.KERNELS) if args.kernels == "all" else args.kernels.split(",")
    unknown = [n for n in names if n not in K.KERNELS]
    if unknown:
        from pimrt.pim.errors import PimError
        raise PimError(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(K.KERNELS)}")
    rows, cols = args.rows, 32
    print(f"building / loading the RTL models (cached under {os.environ.get('PIMRT_CACHE', '~/.cache/pimrt')}) ...",
          flush=True)
    drv = PimDriver(rows=rows, cols=cols)
    port = PimDriver(rows=rows, cols=cols, via_port=True)
    pv = PimRtl(rows=rows, cols=cols)
    rng = np.random.default_rng(0)
    load0 = os.getloadavg()[0]
    rows_out = []
    for name in names:
        fn, n = _inputs(name, args.elements, rng)
        t_drv, c_drv = _time(fn, drv, args.repeat)
        pfn, pn = _inputs(name, args.pv_elements, rng)
        t_port, _ = _time(pfn, port, args.repeat)
        t_pv, _ = _time(pfn, pv, 1)
        g = GoldenBackend(rows=rows, cols=cols)
        gfn, gn = _inputs(name, min(args.elements, 1 << 18), rng)
        g.stats.clear()
        gfn(g)
        accesses = (g.col_reads + g.col_writes) / gn
        rows_out.append({
            "kernel": name,
            "driver_elements_per_s": n / t_drv,
            "driver_port_elements_per_s": pn / t_port,
            "pyverilator_elements_per_s": pn / t_pv,
            "ratio_driver_over_pyverilator": (n / t_drv) / (pn / t_pv),
            "ratio_port_over_pyverilator": (pn / t_port) / (pn / t_pv),
            "cycles_per_element": c_drv / n,
            "column_accesses_per_element": accesses,
            "driver_cycles_per_s": c_drv / t_drv,
            "elements": n, "pv_elements": pn,
        })
        r = rows_out[-1]
        print(f"  {name:14s} driver {r['driver_elements_per_s'] / 1e6:7.2f} M elem/s   "
              f"pyverilator {r['pyverilator_elements_per_s'] / 1e3:7.2f} k elem/s", flush=True)
    load1 = os.getloadavg()[0]

    print()
    print(f"PIM unit, {8} fp32 lanes, bank {rows} x {cols} columns; driver: {args.elements} "
          f"elements per kernel, best of {args.repeat}; pyverilator: {args.pv_elements} elements.")
    print("driver = batch driver, bank data by backdoor copy; port = batch driver, bank data "
          "through the host port (1 column/clock, like pyverilator); pyverilator = per-cycle "
          "driving from Python.")
    hdr = (f"{'kernel':14s} {'driver Me/s':>11s} {'port Me/s':>10s} {'pyv ke/s':>9s} "
           f"{'drv/pyv':>8s} {'port/pyv':>8s} {'cyc/elem':>8s} {'col acc/e':>9s} {'Mcyc/s':>7s}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows_out:
        print(f"{r['kernel']:14s} {r['driver_elements_per_s'] / 1e6:11.2f} "
              f"{r['driver_port_elements_per_s'] / 1e6:10.2f} "
              f"{r['pyverilator_elements_per_s'] / 1e3:9.2f} "
              f"{r['ratio_driver_over_pyverilator']:8.0f} {r['ratio_port_over_pyverilator']:8.0f} "
              f"{r['cycles_per_element']:8.4f} {r['column_accesses_per_element']:9.4f} "
              f"{r['driver_cycles_per_s'] / 1e6:7.2f}")
    print(f"(1-minute load average {load0:.1f} -> {load1:.1f} on {os.cpu_count()} CPUs; "
          "the figures are wall-clock and shrink when the machine is shared)")
    status = 0
    relu = next((r for r in rows_out if r["kernel"] == "relu_fwd"), None)
    if relu:
        rate, ratio = relu["driver_elements_per_s"], relu["ratio_driver_over_pyverilator"]
        ok1, ok2 = rate >= TARGET_RATE, ratio >= TARGET_RATIO
        print(f"ReLU forward through the batch driver: {rate / 1e6:.1f} M elements/s "
              f"(target {TARGET_RATE / 1e6:.0f} M): "
              + ("met" if ok1 else f"SHORT by {100 * (1 - rate / TARGET_RATE):.0f}%"))
        print(f"batch driver / pyverilator: {ratio:.0f}x (target {TARGET_RATIO:.0f}x): "
              + ("met" if ok2 else "SHORT"))
    doc = {"lanes": 8, "bank_rows": rows, "bank_cols": cols, "load_average": [load0, load1],
           "results": rows_out}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
        print(f"wrote {args.json}")
    if args.update_cycles:
        table = {
            "about": "PIM kernel cost per element, measured by `pimrt bench pim --update-cycles` "
                     "on the RTL (batch driver); see pimrt/pim/cycles.py",
            "lanes": 8, "bank_rows": rows, "bank_cols": cols, "elements": args.elements,
            "kernels": {r["kernel"]: {
                "cycles_per_element": round(r["cycles_per_element"], 6),
                "column_accesses_per_element": round(r["column_accesses_per_element"], 6),
            } for r in rows_out},
            "host_kernels": K.HOST_KERNELS,
        }
        if args.kernels != "all" and cyc.DATA.exists():
            old = json.loads(cyc.DATA.read_text())
            old["kernels"].update(table["kernels"])
            table["kernels"] = old["kernels"]
        cyc.DATA.write_text(json.dumps(table, indent=2) + "\n")
        cyc.table.cache_clear()
        print(f"wrote {cyc.DATA}")
    return status

"""`pimrt bench pim16`: the 16-bit lanes on the RTL: each element-wise op on bank streams
(pimrt.pim.ops16) in binary32, binary16 and bfloat16 through the batch driver, at each lane
count: the unit's cycles per element (exact, from its cycle counter) and elements per second,
each run checked bit for bit against the golden model."""
from __future__ import annotations

import json
import os
import time

import numpy as np

HELP = ("PIM unit 16-bit lanes: cycles per element and elements per second of each "
        "element-wise op in fp32, fp16 and bf16 through the batch driver, RTL == golden")


def add_arguments(parser) -> None:
    parser.add_argument("--lanes", default="8,16", help="lane counts (default 8,16)")
    parser.add_argument("--elements", type=int, default=1 << 20,
                        help="16-bit elements per op and stream (default 1M; fp32 runs the "
                             "same count)")
    parser.add_argument("--ops", default="all", help="comma-separated ops of pimrt.pim.ops16")
    parser.add_argument("--dtypes", default="f32,f16,bf16", help="dtypes (default f32,f16,bf16)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")


def _streams(name: str, n: int, dt: int, lanes: int, rng):
    """-> (input word streams, elements processed) for about n elements of op `name`."""
    from pimrt.pim import ops16
    per_col = ops16.elements_per_column(name, dt, lanes)
    unit = ops16.block(name) * per_col
    elems = max(unit, n // unit * unit)
    words = elems // (2 if dt else 1)
    if name == "NARROW":
        words *= 2                                   # binary32 in: two words an element pair
    k = ops16.OPS[name].inputs
    return [rng.integers(0, 2**32, words, dtype=np.uint64).astype(np.uint32)
            for _ in range(k)], elems


def run(args) -> int:
    from pimrt.bench.pim import parse_lanes
    from pimrt.pim import isa, ops16
    from pimrt.pim.driver import PimDriver
    from pimrt.pim.errors import PimError
    from pimrt.pim.golden import GoldenBackend
    lane_counts = parse_lanes(args.lanes)
    names = list(ops16.OPS) if args.ops == "all" else args.ops.split(",")
    for n in names:
        if n not in ops16.OPS:
            raise PimError(f"--ops: no op {n!r}; known: {', '.join(ops16.OPS)}")
    dts = []
    for d in args.dtypes.split(","):
        if d not in isa.DTYPES:
            raise PimError(f"--dtypes: no dtype {d!r}; known: {', '.join(isa.DTYPES)}")
        dts.append(isa.DTYPES[d])
    if args.elements < 1:
        raise PimError(f"--elements must be at least 1, got {args.elements}")
    if args.json:
        from pimrt.output import check_out_file
        check_out_file(args.json, "--json")
    from pimrt.bench._machine import loadavg, when_where
    settings = {**when_where(), "lanes": args.lanes, "elements": args.elements,
                "ops": args.ops, "dtypes": args.dtypes}
    load0 = (settings["load_average_before"] or [float("nan")])[0]
    rng = np.random.default_rng(0)
    hdr = (f"{'op':7s} {'dtype':5s} {'lanes':>5s} {'cyc/elem':>9s} {'Me/s':>7s} {'cpu':>7s} "
           f"{'Mclk/s':>7s} {'== golden':>9s}")
    print(hdr)
    print("-" * len(hdr))
    results = []
    for lanes in lane_counts:
        drv = PimDriver(rows=2048, cols=32, lanes=lanes, units=1)
        gold = GoldenBackend(rows=2048, cols=32, lanes=lanes)
        for b in (drv, gold):
            b.set_scalars([0.0])
        for name in names:
            for dt in dts:
                if dt == isa.F32 and name in ("WIDEN", "NARROW"):
                    continue
                ins, elems = _streams(name, args.elements, dt, lanes, rng)
                c0, t0 = time.process_time(), time.perf_counter()
                y, cycles = ops16.run(drv, name, dt, ins)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                yg, gcycles = ops16.run(gold, name, dt, ins)
                same = bool((y == yg).all()) and cycles == gcycles
                r = {"op": name, "dtype": isa.DTYPE_NAMES[dt], "lanes": lanes,
                     "elements": elems, "cycles": cycles, "cycles_per_element": cycles / elems,
                     "elements_per_s": elems / wall, "elements_per_cpu_s": elems / cpu,
                     "clocks_per_s": cycles / wall, "equal_to_golden": same}
                results.append(r)
                print(f"{name:7s} {r['dtype']:5s} {lanes:5d} {r['cycles_per_element']:9.4f} "
                      f"{elems / wall / 1e6:7.2f} {elems / cpu / 1e6:7.2f} "
                      f"{cycles / wall / 1e6:7.2f} {'yes' if same else 'NO':>9s}", flush=True)
    settings["load_average_after"] = loadavg()
    load1 = (settings["load_average_after"] or [float("nan")])[0]
    print(f"cyc/elem: the unit's cycles (its counter, LOOP and EXIT included) per element; "
          f"Me/s and cpu: elements per wall-clock and per CPU second through the batch driver "
          f"(one unit, bank copies included). 1-minute load average {load0:.1f} -> {load1:.1f} "
          f"on {os.cpu_count()} CPUs.")
    if args.json:
        from pimrt.output import atomic_write_text
        atomic_write_text(args.json, json.dumps({"settings": settings, "results": results},
                                                indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0 if all(r["equal_to_golden"] for r in results) else 1

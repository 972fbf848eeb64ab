"""`pimrt bench pim_ops`: what one clock of the Verilated unit costs, per kind of instruction,
on random operands streamed from the bank: where the batch driver's speed comes from."""
from __future__ import annotations

import json
import os
import time

import numpy as np

HELP = ("PIM unit RTL: clocks per second through the batch driver for each kind of "
        "instruction (28 copies in a counted loop, one operand streamed from the bank)")

# name -> the instruction repeated; B[p1+] walks random fp32 data, G0..G3 hold random values
OPS = {
    "NOP": "NOP",
    "MOV G, G": "MOV G4, G0",
    "MOV G, B": "MOV G4, B[p1+]",
    "MOV B, G": "MOV B[p2+], G0",
    "MAX": "MAX G4, B[p1+], G1",
    "CMPGE": "CMPGE G4, B[p1+], G1",
    "SEL": "SEL G4, G0, G1, B[p1+]",
    "ADD": "ADD G4, B[p1+], G1",
    "ADD A (sum)": "ADD A0, A0, B[p1+]",
    "MUL": "MUL G4, B[p1+], G1",
    "MAD": "MAD G4, B[p1+], G1, G2",
    "MAD A (sum)": "MAD A1, B[p1+], G3, A1",
}
BODY = 28


def add_arguments(parser) -> None:
    parser.add_argument("--lanes", default="8,16", help="lane counts (default 8,16)")
    parser.add_argument("--clocks", type=int, default=2_000_000,
                        help="clocks per instruction kind and lane count")
    parser.add_argument("--baseline-hw", metavar="DIR",
                        help="also build the unit from another copy of hw/ and time it in turn")
    parser.add_argument("--threads", type=int, default=1,
                        help="Verilator --threads of the current build (default 1)")
    parser.add_argument("--baseline-threads", type=int, default=1,
                        help="Verilator --threads of the --baseline-hw build (default 1)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures to FILE")


def _time_op(backend, source: str, clocks: int) -> tuple[float, float, int]:
    """-> (wall s, CPU s, clocks) for `clocks` clocks of `source` in a counted loop."""
    from pimrt.pim.asm import assemble
    backend.load_program(assemble("\n".join(["top:"] + [source] * BODY + ["LOOP c0, top", "EXIT"])))
    per_run = max(1, min(clocks, backend.depth // 2 - 64) // (BODY + 1))
    wall = cpu = 0.0
    done = 0
    while done < clocks:
        backend.set_pointers([0, 64, backend.depth // 2, 0, 0, 0, 0, 0])
        backend.set_counts([per_run])
        c0, t0 = time.process_time(), time.perf_counter()
        done += backend.run()
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
    return wall, cpu, done


def _unit(lanes: int, hw_dir, threads: int = 1):
    from pimrt.pim.driver import PimDriver
    d = PimDriver(rows=2048, cols=32, lanes=lanes, hw_dir=hw_dir, threads=threads)
    data = np.random.default_rng(0).standard_normal((d.depth, lanes)).astype(np.float32)
    d.write_bank(0, data)
    from pimrt.pim.asm import assemble
    d.load_program(assemble("\n".join([f"MOV G{i}, B[p0+]" for i in range(16)] + ["EXIT"])))
    d.set_pointers([0])
    d.run()
    return d


def run(args) -> int:
    from pimrt.pim.errors import PimError
    from pimrt.bench.pim import parse_lanes
    from pimrt.bench._machine import loadavg, when_where
    from pimrt.output import atomic_write_text, check_out_file
    lane_counts = parse_lanes(args.lanes)
    if args.clocks < 1:
        raise PimError(f"--clocks must be at least 1, got {args.clocks}")
    for what, n in (("--threads", args.threads), ("--baseline-threads", args.baseline_threads)):
        if n < 1:
            raise PimError(f"{what} must be 1 or more, got {n}")
    if args.baseline_hw and not os.path.isdir(args.baseline_hw):
        raise PimError(f"--baseline-hw: no directory {args.baseline_hw}")
    if args.json:
        check_out_file(args.json, "--json")
    settings = {**when_where(), "lanes": args.lanes, "clocks": args.clocks,
                "threads": args.threads, "baseline_hw": args.baseline_hw,
                "baseline_threads": args.baseline_threads if args.baseline_hw else None}
    load0 = (settings["load_average_before"] or [float("nan")])[0]
    rows = []
    base = bool(args.baseline_hw)
    hdr = (f"{'instruction':12s} {'lanes':>5s} {'Mclk/s':>7s} {'cpu':>6s} {'ns/clk':>7s} "
           f"{'ns/lane':>8s}" + (f" {'base cpu':>8s} {'x cpu':>6s}" if base else ""))
    print(hdr)
    print("-" * len(hdr))
    for lanes in lane_counts:
        units = [_unit(lanes, None, args.threads)] + (
            [_unit(lanes, args.baseline_hw, args.baseline_threads)] if base else [])
        ref = None
        for name, source in OPS.items():
            res = [_time_op(u, source, args.clocks) for u in units]
            wall, cpu, n = res[0]
            ns = 1e9 * cpu / n
            if name == "MOV G, B":
                ref = ns
            lane = (ns - ref) / lanes if ref is not None and name not in (
                "MOV G, B", "MOV B, G") else None
            row = {"instruction": name, "lanes": lanes, "clocks": n,
                   "clocks_per_s": n / wall, "clocks_per_cpu_s": n / cpu, "ns_per_clock": ns,
                   "ns_per_lane": lane}
            line = format_row(row)
            if base:
                bcpu = res[1][1] / res[1][2]
                row.update(baseline_clocks_per_cpu_s=1 / bcpu, x_cpu=bcpu * 1e9 / ns)
                line += f" {1e-6 / bcpu:8.2f} {bcpu * 1e9 / ns:6.2f}"
            rows.append(row)
            print(line, flush=True)
    settings["load_average_after"] = loadavg()
    load1 = (settings["load_average_after"] or [float("nan")])[0]
    print(f"Mclk/s: clocks per wall-clock second; cpu: per second of this process's CPU time; "
          f"ns/clk from CPU time; ns/lane: (ns/clk - that of `MOV G, B`) / lanes, the lane "
          f"datapath's own cost. 1-minute load average {load0:.1f} -> {load1:.1f} on "
          f"{os.cpu_count()} CPUs.")
    if args.json:
        atomic_write_text(args.json, json.dumps({"settings": settings, "rows": rows},
                                                indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


def format_row(row: dict) -> str:
    """One instruction's line of the table (without the baseline's columns)."""
    lane = "-" if row["ns_per_lane"] is None else f"{row['ns_per_lane']:.2f}"
    return (f"{row['instruction']:12s} {row['lanes']:5d} {row['clocks_per_s'] / 1e6:7.2f} "
            f"{row['clocks_per_cpu_s'] / 1e6:6.2f} {row['ns_per_clock']:7.1f} {lane:>8s}")

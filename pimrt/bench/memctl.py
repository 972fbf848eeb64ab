"""Simulator speed and fidelity of memctl on synthetic traces, side by side in one run."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

HELP = ("memctl on synthetic traces (stream, random, 2:1 read/write, host+PIM) on HBM2 and "
        "DDR4: simulated requests per second (the core, and `pimrt memsim` on the trace as a "
        "DRAMsim3 text file as a whole process), bandwidth, latency, row hits, and cycles "
        "against DRAMsim3 / Ramulator 2.1 (quoted figures, pimrt/memctl/reference.py)")


def add_arguments(p) -> None:
    p.add_argument("--requests", type=int, default=1_000_000, help="requests per trace")
    p.add_argument("--only", default=None,
                   help="comma-separated case names to run (e.g. hbm2-stream,ddr4-stream)")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs per case; the fastest is reported (other processes on the machine "
                        "only ever add time), and every run must give the same cycles")
    p.add_argument("--json", type=pathlib.Path, default=None, help="write the results as JSON")
    p.add_argument("--no-process", action="store_true",
                   help="skip the whole-process runs of `pimrt memsim` on text traces")


def _cases(n: int):
    from pimrt.trace import synthetic
    from pimrt.memctl.example_trace import example_chunks
    return [
        # name, part, policy, W, trace pattern (for the reference), chunks
        ("hbm2-stream", "hbm2", "serial", 4, "stream", lambda: synthetic.stream(n)),
        ("hbm2-random", "hbm2", "serial", 4, "random", lambda: synthetic.random(n)),
        ("hbm2-mix", "hbm2", "serial", 4, "mix", lambda: synthetic.mix(n)),
        ("ddr4-stream", "ddr4", "serial", 1, "stream", lambda: synthetic.stream(n)),
        ("ddr4-random", "ddr4", "serial", 1, "random", lambda: synthetic.random(n)),
        ("ddr4-mix", "ddr4", "serial", 1, "mix", lambda: synthetic.mix(n)),
        ("hbm2pim-serial", "hbm2_pim", "serial", 4, "host+pim", lambda: example_chunks(n)),
        ("hbm2pim-partition", "hbm2_pim", "bank_partition", 4, "host+pim",
         lambda: example_chunks(n)),
        ("hbm2pim-authority", "hbm2_pim", "authority", 4, "host+pim", lambda: example_chunks(n)),
    ]


def run(args) -> int:
    from pimrt.errors import ConfigError
    from pimrt.memctl import Options, load_part
    from pimrt.trace import write_trace
    from pimrt.memctl.reference import CYCLES, PROCESS_SECONDS, REQUESTS, SOURCE

    if args.repeat < 1:
        raise ConfigError(f"--repeat must be >= 1, got {args.repeat}")
    only = set(args.only.split(",")) if args.only else None
    rows = []
    texts: dict[str, pathlib.Path] = {}
    tmp = tempfile.TemporaryDirectory(prefix="pimrt-bench-")
    print(f"reference columns: {SOURCE}; not live runs")
    for name, part_name, policy, width, pattern, make in _cases(args.requests):
        if only and name not in only:
            continue
        part = load_part(part_name)
        chunks = [np.ascontiguousarray(c) for c in make()]  # generated before timing
        s, wall, cpu = _timed(part, Options(policy=policy, issue_width=width), chunks,
                              args.repeat, name)
        reqs = s["requests"]
        full = args.requests == REQUESTS
        ref = CYCLES.get((part_name, pattern, width)) if full else None
        proc = proc_cpu = None
        if pattern in ("stream", "random", "mix") and not getattr(args, "no_process", False):
            if pattern not in texts:     # the same trace as a DRAMsim3 text file, once
                texts[pattern] = pathlib.Path(tmp.name) / f"{pattern}.trace"
                write_trace(texts[pattern], chunks, "dramsim3")
            proc, proc_cpu = _process(texts[pattern], part_name, policy, width, args.repeat,
                                      name, s["cycles"])
        row = {
            "case": name, "part": part.name, "policy": policy, "issue_width": width,
            "requests": reqs, "cycles": s["cycles"],
            "sim_requests_per_s": reqs / cpu if cpu else float("inf"),
            "sim_requests_per_wall_s": reqs / wall if wall else float("inf"),
            "host_bandwidth_pct_of_peak": s["host_bandwidth_pct"],
            "host_bandwidth_gbs": s["host_bandwidth_gbs"],
            "pim_bandwidth_gbs": s["requestors"]["pim"]["bandwidth_gbs"],
            "host_mean_latency": s["requestors"]["host"]["mean_latency"],
            "host_row_hit_rate": s["requestors"]["host"]["row_hit_rate"],
            "mode_switches": s["mode_switches"],
            "reference_cycles": ref,
            "process_seconds": proc,
            "process_requests_per_s": reqs / proc if proc else None,
            "process_cpu_seconds": proc_cpu,
            "process_requests_per_cpu_s": reqs / proc_cpu if proc_cpu else None,
            "reference_process_seconds": PROCESS_SECONDS.get((part_name, pattern, width))
            if full else None,
            "reference_source": SOURCE,
        }
        rows.append(row)
        _print_row(row, first=len(rows) == 1)
    tmp.cleanup()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


def _process(path: pathlib.Path, part: str, policy: str, width: int, repeat: int, name: str,
             cycles: int) -> tuple[float, float]:
    """Fastest wall-clock and CPU (user + system) seconds of `pimrt memsim` on the text trace
    as a whole process (start-up, imports, parsing, simulation, the summary), after one
    untimed run; each run must give the in-process cycles."""
    import resource
    from pimrt.errors import PimrtError
    stats = path.with_suffix(".json")
    cmd = [sys.executable, "-m", "pimrt", "memsim", str(path), "--quiet", "--config", part,
           "--policy", policy, "--issue-width", str(width), "--stats", str(stats)]
    # as a user's process runs: with Python's bytecode cache (an environment that turns it
    # off would make every run compile pimrt's modules again, ~0.06 s)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    best = best_cpu = float("inf")
    for i in range(repeat + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        out = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=env)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        if out.returncode != 0:
            raise PimrtError(f"{name}: pimrt memsim failed: {out.stderr.strip()}")
        got = json.loads(stats.read_text())["cycles"]
        if got != cycles:
            raise PimrtError(f"{name}: pimrt memsim gave {got} cycles, the core {cycles}")
        if i:
            best, best_cpu = min(best, wall), min(best_cpu, cpu)
    return best, best_cpu


def _timed(part, opts, chunks, repeat: int, name: str):
    """Run the chunks `repeat` times; the stats and the fastest wall and CPU times."""
    from pimrt.errors import PimrtError
    from pimrt.memctl import Controller

    best_wall = best_cpu = float("inf")
    stats = None
    for _ in range(repeat):
        ctl = Controller(part, opts)
        wall, cpu = time.perf_counter(), time.process_time()
        for c in chunks:
            ctl.feed(c)
        ctl.finish()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        s = ctl.stats()
        if stats is not None and (s["cycles"], s["commands"]) != (stats["cycles"], stats["commands"]):
            raise PimrtError(f"{name}: runs of the same trace differ ({stats['cycles']} and "
                               f"{s['cycles']} cycles): memctl is not deterministic")
        stats = s
        best_wall, best_cpu = min(best_wall, wall), min(best_cpu, cpu)
    return stats, best_wall, best_cpu


def _print_row(r: dict, first: bool) -> None:
    if first:
        print("Mreq/s: cpu and wall of the core (records in memory); proc: `pimrt memsim` on "
              "the trace as a DRAMsim3 text file, a whole process (start-up and parsing "
              "included), wall and CPU")
        print(f"{'case':<19}{'requests':>10}{'cycles':>12}{'Mreq/s cpu':>11}{'Mreq/s wall':>12}"
              f"{'proc wall':>10}{'proc cpu':>9}{'%peak':>7}{'PIM GB/s':>9}{'lat':>7}{'hits':>7}"
              f"  quoted: DRAMsim3 / Ramulator 2.1 cycles; DRAMsim3 proc Mreq/s")
    ref = ""
    if r["reference_cycles"]:
        d = r["reference_cycles"]["DRAMsim3"]
        rm = r["reference_cycles"]["Ramulator 2.1"]
        ref = f"{d:,} ({100 * (r['cycles'] / d - 1):+.1f}%) / {rm:,} ({100 * (r['cycles'] / rm - 1):+.1f}%)"
    if r["reference_process_seconds"]:
        q = r["reference_process_seconds"]["DRAMsim3"]
        ref += f"; {r['requests'] / q / 1e6:.2f}"
    proc = (f"{r['process_requests_per_s'] / 1e6:>10.2f}"
            f"{r['process_requests_per_cpu_s'] / 1e6:>9.2f}") if r["process_requests_per_s"] \
        else f"{'-':>10}{'-':>9}"
    print(f"{r['case']:<19}{r['requests']:>10,}{r['cycles']:>12,}"
          f"{r['sim_requests_per_s'] / 1e6:>11.2f}{r['sim_requests_per_wall_s'] / 1e6:>12.2f}"
          f"{proc}{r['host_bandwidth_pct_of_peak']:>7.1f}{r['pim_bandwidth_gbs']:>9.1f}"
          f"{r['host_mean_latency']:>7.1f}"
          f"{r['host_row_hit_rate']:>7.3f}  {ref}", flush=True)

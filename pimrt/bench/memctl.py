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

from pimrt.bench._machine import loadavg, run_timed, when_where

HELP = ("memctl on synthetic traces (stream, random, 2:1 read/write, host+PIM) on HBM2 and "
        "DDR4: simulated requests per second (the core, and `pimrt memsim` on the trace as a "
        "DRAMsim3 text file as a whole process), bandwidth, latency, row hits, and cycles "
        "against DRAMsim3 / Ramulator 2.1 (quoted figures, pimrt/memctl/reference.py); with "
        "--dramsim3, DRAMsim3's whole process measured side by side on the same text traces")

# pimrt part -> the DRAMsim3 config (in its configs/ folder) that the part mirrors
DRAMSIM3_CONFIGS = {"hbm2": "HBM2_8Gb_x128.ini", "ddr4": "DDR4_8Gb_x8_3200.ini"}
DRAMSIM3_TIMEOUT_S = 600.0


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
    p.add_argument("--dramsim3", type=pathlib.Path, default=None, metavar="PATH",
                   help="a DRAMsim3 build (its dramsim3main binary, or the build folder): run "
                        "DRAMsim3's whole process on the same text traces as `pimrt memsim` "
                        "(host-only cases), side by side, with its own configs/ ini of the part, "
                        "instead of quoting its speed")


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
    dramsim3 = find_dramsim3(args.dramsim3) if getattr(args, "dramsim3", None) else None
    if dramsim3 and getattr(args, "no_process", False):
        raise ConfigError("--dramsim3 and --no-process: DRAMsim3 runs beside the whole-process "
                          "runs of `pimrt memsim`; give one")
    settings = _settings(args, dramsim3)
    rows = []
    texts: dict[str, pathlib.Path] = {}
    tmp = tempfile.TemporaryDirectory(prefix="pimrt-bench-")
    if dramsim3:
        print(f"DRAMsim3 column: measured in this run, {dramsim3['binary']} "
              f"(commit {dramsim3['commit'] or 'unknown'}), side by side with `pimrt memsim`; "
              f"other reference columns: {SOURCE}; not live runs")
    else:
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
        measured = None
        if pattern in ("stream", "random", "mix") and not getattr(args, "no_process", False):
            if pattern not in texts:     # the same trace as a DRAMsim3 text file, once
                texts[pattern] = pathlib.Path(tmp.name) / f"{pattern}.trace"
                write_trace(texts[pattern], chunks, "dramsim3")
            proc, proc_cpu = _process(texts[pattern], part_name, policy, width, args.repeat,
                                      name, s["cycles"])
            if dramsim3:
                cycles = dramsim3_cycles(part_name, pattern, reqs, s["cycles"])
                measured = run_dramsim3(dramsim3, DRAMSIM3_CONFIGS[part_name], texts[pattern],
                                        cycles, reqs, args.repeat, name,
                                        pathlib.Path(tmp.name))
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
            "dramsim3": measured,
            "process_vs_dramsim3_cpu": (proc_cpu and measured and
                                        measured["cpu_seconds"] / proc_cpu) or None,
            "process_vs_dramsim3_wall": (proc and measured and
                                         measured["wall_seconds"] / proc) or None,
        }
        rows.append(row)
        _print_row(row, first=len(rows) == 1, dramsim3=bool(dramsim3))
    tmp.cleanup()
    settings["load_average_after"] = loadavg()
    if args.json:
        args.json.write_text(json.dumps({"settings": settings, "rows": rows}, indent=2) + "\n")
    return 0


def _settings(args, dramsim3) -> dict:
    """When, where and how: the date, the machine and its load, the command's settings."""
    return {**when_where(), "requests": args.requests, "repeat": args.repeat,
            "only": args.only, "dramsim3": dramsim3}



def find_dramsim3(path: pathlib.Path) -> dict:
    """The dramsim3main binary at path (the binary, or a build folder holding it) and the
    configs/ folder of its source tree; a ConfigError naming path when it is not one."""
    from pimrt.errors import ConfigError
    path = pathlib.Path(path)
    binary = path / "dramsim3main" if path.is_dir() else path
    if not path.exists():
        raise ConfigError(f"--dramsim3 {path}: no such file or folder")
    if not binary.is_file():
        raise ConfigError(f"--dramsim3 {path}: not a DRAMsim3 build (no dramsim3main in it)")
    if not os.access(binary, os.X_OK):
        raise ConfigError(f"--dramsim3 {path}: {binary.name} is not executable")
    try:
        out = subprocess.run([str(binary), "--help"], capture_output=True, text=True,
                             timeout=30, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"--dramsim3 {path}: {binary.name} does not run as DRAMsim3's "
                          f"dramsim3main ({exc.__class__.__name__})") from None
    if "DRAM Simulator" not in out.stdout or "--trace" not in out.stdout:
        raise ConfigError(f"--dramsim3 {path}: {binary.name} is not DRAMsim3's dramsim3main "
                          f"(its --help does not read as DRAMsim3's)")
    configs = None
    for up in (binary.parent, *binary.parent.parents):
        if (up / "configs" / DRAMSIM3_CONFIGS["hbm2"]).is_file():
            configs = up / "configs"
            break
    if configs is None:
        raise ConfigError(f"--dramsim3 {path}: no configs/{DRAMSIM3_CONFIGS['hbm2']} in the "
                          f"folders above {binary.name} (DRAMsim3's source tree)")
    commit = None
    try:
        git = subprocess.run(["git", "-C", str(configs.parent), "rev-parse", "--short=12",
                              "HEAD"], capture_output=True, text=True, timeout=30)
        commit = git.stdout.strip() or None if git.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"binary": str(binary.resolve()), "configs": str(configs.resolve()),
            "commit": commit}


def dramsim3_cycles(part: str, pattern: str, requests: int, core_cycles: int) -> int:
    """The cycles (-c) to give dramsim3main, whose trace front end offers at most one request a
    cycle and runs exactly -c cycles: DRAMsim3's own cycles at W = 1 on this trace where the
    quoted figures hold them (1M requests), else the larger of the requests and the core's
    cycles, plus 2%. run_dramsim3 checks that every request completed and raises -c by a
    quarter (up to 4 times) in its untimed first run when not."""
    from pimrt.memctl.reference import CYCLES, REQUESTS
    ref = CYCLES.get((part, pattern, 1)) if requests == REQUESTS else None
    base = ref["DRAMsim3"] if ref else max(requests, core_cycles)
    return int(base * 1.02) + 1000


def _dramsim3_done(stats: pathlib.Path) -> int:
    """Requests DRAMsim3 completed, summed over channels, from its dramsim3.json."""
    data = json.loads(stats.read_text())
    return sum(int(ch.get("num_reads_done", 0)) + int(ch.get("num_writes_done", 0))
               for ch in data.values())


def run_dramsim3(d3: dict, config: str, trace: pathlib.Path, cycles: int, requests: int,
                 repeat: int, name: str, tmp: pathlib.Path,
                 timeout: float | None = None) -> dict:
    """DRAMsim3's whole process on the trace: `dramsim3main CONFIG -c CYCLES -t TRACE -o DIR`,
    one untimed run (which checks every request completed, raising -c if not), then the
    fastest wall and CPU (user + system, os.wait4) of `repeat` runs."""
    from pimrt.errors import PimrtError
    timeout = DRAMSIM3_TIMEOUT_S if timeout is None else timeout
    out = tmp / f"dramsim3-{name}"
    out.mkdir(exist_ok=True)
    ini = pathlib.Path(d3["configs"]) / config
    if not ini.is_file():
        raise PimrtError(f"{name}: DRAMsim3 config {ini} not found")
    best_wall = best_cpu = float("inf")
    done = 0
    tries = 0
    i = 0
    while i < repeat + 1:
        cmd = [d3["binary"], str(ini), "-c", str(cycles), "-t", str(trace), "-o", str(out)]
        stats = out / "dramsim3.json"
        stats.unlink(missing_ok=True)
        wall, cpu, code, err = _wait_timed(cmd, out, timeout, name)
        if code != 0:
            raise PimrtError(f"{name}: DRAMsim3 ({' '.join(cmd)}) failed with exit code "
                             f"{code}: {err.strip().splitlines()[-1] if err.strip() else 'no message'}")
        try:
            done = _dramsim3_done(stats)
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            raise PimrtError(f"{name}: DRAMsim3 ({' '.join(cmd)}) wrote no readable stats "
                             f"({stats.name}: {exc.__class__.__name__})") from None
        if done < requests:      # dramsim3main adds the trace's last line twice: done may be +1
            if i == 0 and tries < 4:
                tries += 1
                cycles = int(cycles * 1.25)
                continue
            raise PimrtError(f"{name}: DRAMsim3 completed {done} of {requests} requests in "
                             f"{cycles} cycles (-c)")
        if i:
            best_wall, best_cpu = min(best_wall, wall), min(best_cpu, cpu)
        i += 1
    return {"config": config, "cycles_arg": cycles, "requests_done": done,
            "front_end": "dramsim3main's trace CPU: at most one request a cycle, in order",
            "wall_seconds": best_wall, "cpu_seconds": best_cpu,
            "requests_per_s": requests / best_wall, "requests_per_cpu_s": requests / best_cpu}


def _wait_timed(cmd: list, cwd: pathlib.Path, timeout: float, name: str):
    """Run cmd; its wall seconds, CPU seconds (user + system of the child, from os.wait4),
    exit code and stderr. A PimrtError when it cannot start or runs past timeout."""
    from pimrt.errors import PimrtError
    err_path = cwd / "stderr.txt"
    with open(err_path, "w") as err:
        try:
            wall, usage, code, killed = run_timed(cmd, cwd, subprocess.DEVNULL, err,
                                                  timeout=timeout)
        except OSError as exc:
            raise PimrtError(f"{name}: DRAMsim3 ({cmd[0]}) did not start: "
                             f"{exc.strerror or exc}") from None
    if killed:
        raise PimrtError(f"{name}: DRAMsim3 ({' '.join(cmd)}) ran past {timeout:g} s and was "
                         f"stopped")
    return wall, usage.ru_utime + usage.ru_stime, code, err_path.read_text(errors="replace")


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


def _print_row(r: dict, first: bool, dramsim3: bool = False) -> None:
    if first:
        print("Mreq/s: cpu and wall of the core (records in memory); proc: `pimrt memsim` on "
              "the trace as a DRAMsim3 text file, a whole process (start-up and parsing "
              "included), wall and CPU" + ("; D3: DRAMsim3's dramsim3main on the same file, "
                                           "a whole process, measured now, wall and CPU; "
                                           "x: its CPU seconds / memsim's" if dramsim3 else ""))
        tail = (f"{'D3 wall':>8}{'D3 cpu':>7}{'x':>7}  quoted: DRAMsim3 / Ramulator 2.1 cycles"
                if dramsim3 else "  quoted: DRAMsim3 / Ramulator 2.1 cycles; DRAMsim3 proc Mreq/s")
        print(f"{'case':<19}{'requests':>10}{'cycles':>12}{'Mreq/s cpu':>11}{'Mreq/s wall':>12}"
              f"{'proc wall':>10}{'proc cpu':>9}{'%peak':>7}{'PIM GB/s':>9}{'lat':>7}{'hits':>7}"
              f"{tail}")
    ref = ""
    if r["reference_cycles"]:
        d = r["reference_cycles"]["DRAMsim3"]
        rm = r["reference_cycles"]["Ramulator 2.1"]
        ref = f"{d:,} ({100 * (r['cycles'] / d - 1):+.1f}%) / {rm:,} ({100 * (r['cycles'] / rm - 1):+.1f}%)"
    if r["reference_process_seconds"] and not dramsim3:
        q = r["reference_process_seconds"]["DRAMsim3"]
        ref += f"; {r['requests'] / q / 1e6:.2f}"
    proc = (f"{r['process_requests_per_s'] / 1e6:>10.2f}"
            f"{r['process_requests_per_cpu_s'] / 1e6:>9.2f}") if r["process_requests_per_s"] \
        else f"{'-':>10}{'-':>9}"
    d3 = ""
    if dramsim3:
        m = r.get("dramsim3")
        d3 = (f"{m['requests_per_s'] / 1e6:>8.2f}{m['requests_per_cpu_s'] / 1e6:>7.2f}"
              f"{r['process_vs_dramsim3_cpu']:>6.1f}x") if m else f"{'-':>8}{'-':>7}{'-':>7}"
    print(f"{r['case']:<19}{r['requests']:>10,}{r['cycles']:>12,}"
          f"{r['sim_requests_per_s'] / 1e6:>11.2f}{r['sim_requests_per_wall_s'] / 1e6:>12.2f}"
          f"{proc}{r['host_bandwidth_pct_of_peak']:>7.1f}{r['pim_bandwidth_gbs']:>9.1f}"
          f"{r['host_mean_latency']:>7.1f}"
          f"{r['host_row_hit_rate']:>7.3f}{d3}  {ref}", flush=True)

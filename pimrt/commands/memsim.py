"""`pimrt memsim TRACE`: replay a memory trace through memctl and print / write its stats."""
from __future__ import annotations

import json
import pathlib
import sys

from pimrt.errors import ConfigError, TraceError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "memsim", help="replay a memory trace through the memctl DRAM model",
        description="Replay a trace (pimrt text, .npy, DRAMsim3, Ramulator 1 or 2 formats) "
                    "through memctl and report per-requestor and per-channel statistics.")
    p.add_argument("trace", type=pathlib.Path,
                   help="trace file; '-' (standard input) or a FIFO for a text trace")
    p.add_argument("--format", default=None,
                   help="trace format: pimrt, npy, dramsim3, ramulator, ramulator_dram, "
                        "ramulator_rw, ramulator_cpu (default: detected)")
    p.add_argument("--config", default=None,
                   help="memory part: a shipped name (hbm2, ddr4, hbm2_pim, v100_hbm2_pim) or a "
                        "TOML file (default: a step trace's part, else hbm2)")
    p.add_argument("--policy", default=None,
                   help="host/PIM sharing: serial, bank_partition, authority (default: a step "
                        "trace's policy, else authority)")
    p.add_argument("--issue-width", type=int, default=None, metavar="W",
                   help="requests the front end offers per memory cycle (1 = DRAMsim3's; "
                        "default: a step trace's, else 4)")
    p.add_argument("--high-watermark", type=int, default=None,
                   help="authority: queued requests of the waiting side that force a hand-over")
    p.add_argument("--epoch-cap", type=int, default=None,
                   help="authority: longest epoch in cycles while the other side waits")
    p.add_argument("--window", type=int, default=None, metavar="RECORDS",
                   help="records the host's and the PIM's cursors may drift apart before the "
                        "leading one waits (default 1048576: at most 24 MiB of records held)")
    p.add_argument("--pim-banks", default=None,
                   help="bank_partition: comma-separated bank indices (within a channel) of the PIM")
    p.add_argument("--set", action="append", default=[], metavar="TABLE.KEY=VALUE",
                   help="override a part parameter, e.g. --set timing.tCCD_L=4 (repeatable)")
    p.add_argument("--stats", type=pathlib.Path, default=None, help="write the stats as JSON")
    p.add_argument("--csv", type=pathlib.Path, default=None,
                   help="write per-channel, per-requestor stats as CSV")
    p.add_argument("--cmdlog", type=pathlib.Path, default=None, help="write every DRAM command (CSV)")
    p.add_argument("--per-layer", action="store_true",
                   help="print the per-layer table (requests, bytes, bandwidth, latency, row "
                        "hits, energy) from the trace's LAYER markers")
    p.add_argument("--layers-csv", type=pathlib.Path, default=None,
                   help="write the per-layer table as CSV (default: none)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected TABLE.KEY=VALUE")
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def run(args) -> int:
    import os
    from pimrt.deferred_import import defer
    # memsim does no linear algebra: one BLAS thread spares numpy's import the start of a
    # thread pool (0.03 s of CPU, 0.07 s of wall of a 0.3 s run); a user's setting wins
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # a text trace of a format memctl's C reader takes goes from the file into the
    # simulator in C: numpy is imported only if something else needs it
    defer("numpy")
    from pimrt.memctl import Options, load_part, run_trace, write_stats_csv
    from pimrt.trace import open_trace

    from pimrt.trace import replay
    meta = _step_meta(args.trace)
    part, policy, width, window, notes = replay.settings(
        meta, args.config, args.policy, args.issue_width, _overrides(args.set), args.window)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    pim_banks = None
    if args.pim_banks:
        try:
            pim_banks = tuple(int(b) for b in args.pim_banks.split(","))
        except ValueError:
            raise ConfigError(f"--pim-banks {args.pim_banks!r}: expected bank numbers") from None
    opts = Options(policy=policy, issue_width=width, pim_banks=pim_banks,
                   host_high_watermark=args.high_watermark, pim_high_watermark=args.high_watermark,
                   epoch_cap=args.epoch_cap, window=window)
    _check_trace_path(args.trace, args.format)
    from pimrt.output import atomic_write_text, check_out_file
    for opt in ("stats", "csv", "cmdlog", "layers_csv"):  # before the simulation, not after it
        if getattr(args, opt) is not None:
            check_out_file(getattr(args, opt), f"--{opt.replace('_', '-')}")
    trace = open_trace(args.trace, args.format, capacity_bytes=part.capacity_bytes, part=part)
    bar = None
    if not args.quiet and sys.stderr.isatty():   # (tqdm's import costs ~15 ms of a 0.2 s run)
        from tqdm import tqdm
        bar = tqdm(unit="rec", unit_scale=True, desc="memsim", file=sys.stderr)
    try:
        stats = run_trace(trace, part, opts, cmdlog=args.cmdlog,
                          progress=bar.update if bar is not None else None,
                          where=trace.display)
    except TraceError as exc:
        if trace.stream is not None:   # (read once: no going back to find the line)
            raise
        raise TraceError(record_to_line(str(exc), args.trace, trace.format)) from None
    finally:
        if bar is not None:
            bar.close()
    if stats["requests"] == 0:
        what = ("holds no records (empty, or only comments)" if stats["records"] == 0 else
                f"holds no requests (its {stats['records']} records are all markers)")
        raise TraceError(f"{trace.display}: {what}: nothing to simulate")
    stats["trace"] = trace.display
    if args.stats:
        atomic_write_text(args.stats, json.dumps(stats, indent=2, allow_nan=False))
    if args.csv:
        write_stats_csv(stats, args.csv)
    print(summary_table(stats))
    if args.per_layer or args.layers_csv:
        from pimrt.memctl.layers import layer_rows, layer_table, write_layers_csv
        rows = layer_rows(stats, part)
        if args.per_layer:
            print(layer_table(rows))
        if args.layers_csv:
            write_layers_csv(rows, args.layers_csv)
    if replay.same_as_run(meta, notes) and (args.high_watermark, args.epoch_cap,
                                            args.pim_banks) == (None, None, None):
        print(replay.check_line(meta, stats))
    return 0


def _step_meta(path: pathlib.Path):
    """The run a .npy step trace was written by (pimrt.trace.step), or None."""
    if path.suffix != ".npy" or not path.is_file():
        return None
    from pimrt.trace.step import read_meta
    return read_meta(path)


NPY_MAGIC = b"\x93NUMPY"
# text formats with one record on each data line; others say how many a line gives with
# records_in_line(tokens) (ramulator_cpu: a READ, and a WRITE with a writeback address)
ONE_RECORD_A_LINE = {"pimrt", "dramsim3", "ramulator", "ramulator_dram", "ramulator_rw"}


def record_to_line(message: str, path, fmt: str) -> str:
    """memctl names a bad record by its index ("TRACE: record N: ..."); in a text trace (blank
    and `#` lines skipped) say its line instead, as the text readers do ("TRACE:LINE: ...")."""
    import re  # noqa: PLC0415
    m = re.match(re.escape(str(path)) + r": record (\d+): ", message)
    if m is None:
        return message
    if fmt in ONE_RECORD_A_LINE:
        def count(tokens):
            return 1
    else:
        from pimrt.trace import get_format  # noqa: PLC0415
        count = getattr(get_format(fmt), "records_in_line", None)
        if count is None:
            return message
    want, seen = int(m.group(1)), 0
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                tokens = raw.split(b"#", 1)[0].split()
                if tokens:
                    seen += count(tokens)
                    if seen > want:
                        return f"{path}:{number}: {message[m.end():]}"
    except OSError:
        pass
    return message


def _check_trace_path(path: pathlib.Path, fmt: str | None) -> None:
    """The cases the trace readers would misname: a directory, a file that is not .npy."""
    from pimrt.trace import is_stream
    if is_stream(path):
        return  # open_trace reads it as a stream (text formats) or says why not
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file")
    if not path.exists():
        return  # the reader says "no such trace file"
    if path.name.endswith(".layers.json"):
        trace = path.with_name(path.name[:-len(".layers.json")])
        raise TraceError(f"{path}: is the sidecar of a binary trace (its layer names and the "
                         f"run that wrote it), not a trace; give the trace ({trace})")
    if fmt == "npy" or (fmt is None and path.suffix == ".npy"):
        try:
            with open(path, "rb") as f:
                head = f.read(len(NPY_MAGIC))
        except OSError as exc:
            raise TraceError(f"{path}: cannot read: {exc.strerror}") from None
        if head != NPY_MAGIC:
            raise TraceError(f"{path}: not a .npy file (it does not start with NumPy's header); "
                             f"for a text trace leave --format out or give its format")


def summary_table(s: dict) -> str:
    lines = [f"part {s['part']}, policy {s['policy']}, issue width {s['issue_width']}: "
             f"{s['cycles']:,} cycles ({s['time_ns'] / 1e3:,.1f} us), {s['requests']:,} requests, "
             f"{s['bandwidth_gbs']:.1f} GB/s ({s['host_bandwidth_pct']:.1f}% of the "
             f"{s['peak_bandwidth_gbs']:.0f} GB/s peak for host traffic), "
             f"{s['refreshes']} refreshes, {s['mode_switches']} mode switches"]
    widths = (12, 9, 10, 9, 10, 12, 13)    # each column right-aligned after at least one space

    def row(first: str, cells) -> str:
        return f"{first:<10}" + "".join(" " + c.rjust(w - 1) for c, w in zip(cells, widths))
    lines.append(row("requestor", ("requests", "GB/s", "mean lat", "p99 lat", "hit rate",
                                   "idle cyc", "blocked cyc")))
    for who, r in s["requestors"].items():
        if not r["requests"]:
            continue
        lines.append(row(who, (f"{r['requests']:,}", f"{r['bandwidth_gbs']:.1f}",
                               f"{r['mean_latency']:.1f}", f"{r['p99_latency']}",
                               f"{r['row_hit_rate']:.3f}", f"{r['cycles_idle']:,}",
                               f"{r['cycles_blocked']:,}")))
    lines.append(energy_line(s.get("energy_pj")))
    return "\n".join(lines)


def _uj(pj: float) -> str:
    """pJ as uJ, three significant digits below 100 uJ (a short trace's few nJ show)."""
    uj = pj / 1e6
    return f"{uj:.3g}" if uj < 100 else f"{uj:,.1f}"


def energy_line(e: dict | None) -> str:
    """The DRAM energy in one line: total, average power, and the components that are not 0."""
    if not e or not e.get("available"):
        return "DRAM energy: unavailable" + (f" ({e['note']})" if e and e.get("note") else "")
    parts = ", ".join(f"{name.replace('_', ' ')} {_uj(pj)}"
                      for name, pj in e["components"].items() if pj)
    line = (f"DRAM energy {_uj(e['total'])} uJ ({e['average_power_mw'] / 1e3:,.2f} W "
            f"average): {parts or 'nothing'} (uJ)")
    return line + (f"; {e['note']}" if e.get("note") else "")

"""`pimrt sweep`: a design-space exploration from a TOML spec, on local processes or a Dask
cluster, resumable (docs/sweep.md); `pimrt sweep DIR --plot X --y Y --by Z` plots it."""
from __future__ import annotations

import pathlib
import time

LIMIT = 200          # points a sweep runs without --yes
OUT = pathlib.Path("results/sweep")    # a spec's results go to OUT/SPEC without --out


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a grid of pimrt run points from a TOML spec, or plot one",
        description="Run every point of a sweep spec (axes: any option of pimrt run, part "
                    "files or presets, single part keys as set.TABLE.KEY / "
                    "host_set.TABLE.KEY) on local processes or a Dask cluster; each finished "
                    "point is written at once and a re-run skips it. With a results folder "
                    "instead of a spec: plot a column against an axis. docs/sweep.md")
    p.add_argument("source", type=pathlib.Path, metavar="SPEC.toml|DIR",
                   help="a sweep spec to run, or a sweep's results folder to plot")
    p.add_argument("--out", type=pathlib.Path, default=None,
                   help="results folder of the run (sweep.json, results.csv, points/ID/; "
                        f"default: {OUT}/SPEC, SPEC the spec file's name without .toml)")
    p.add_argument("--jobs", type=int, default=1,
                   help="local worker processes, one core each (default 1)")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT|local:N",
                   help="run on a Dask cluster: a running scheduler's address, or local:N "
                        "for a LocalCluster of N workers (instead of --jobs)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for the Dask scheduler to answer")
    p.add_argument("--yes", action="store_true",
                   help=f"run a sweep of more than {LIMIT} points")
    p.add_argument("--force", action="store_true",
                   help="run in a folder that holds another spec's results (the finished "
                        "points both specs have are kept)")
    p.add_argument("--allow-code-change", action="store_true",
                   help="run in a folder whose points were made with other simulator code "
                        "(pimrt's sources, memctl's C, the PIM Verilog and cycle table): the "
                        "finished points are kept, results.csv's code column says which code "
                        "made each")
    p.add_argument("--retry-failed", action="store_true",
                   help="run the points that failed before again (skipped by default)")
    p.add_argument("--dry-run", action="store_true",
                   help="check every point and list them; run nothing")
    p.add_argument("--plot", default=None, metavar="X", help="plot mode: the x axis")
    p.add_argument("--y", default="speedup_vs_gpu_only", metavar="Y",
                   help="plot mode: the column to plot (default speedup_vs_gpu_only; any "
                        "number of results.csv: step_ms, speedup_vs_serial, ...)")
    p.add_argument("--by", default=None, metavar="Z", help="plot mode: a line per value of Z")
    p.add_argument("--where", action="append", default=[], metavar="AXIS=VALUE",
                   help="plot mode: only the points with this value (repeatable)")
    p.add_argument("--png", type=pathlib.Path, default=None,
                   help="plot mode: the PNG (default DIR/plots/Y_vs_X_by_Z.png)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from pimrt.errors import ConfigError
    src = args.source
    if src.is_dir():
        if args.plot is None:
            raise ConfigError(f"{src}: a results folder; give --plot X (--y Y --by Z) to plot "
                              f"it, or a SPEC.toml to run a sweep")
        from pimrt.sweep.plot import plot
        png, averaged = plot(src, args.plot, args.y, args.by, args.where, args.png)
        print(f"wrote {png}" + (f" (each mark the mean over {', '.join(averaged)})"
                                if averaged else ""))
        return 0
    if args.plot is not None:
        raise ConfigError(f"--plot: {src} is not a results folder (plot a sweep's --out "
                          f"folder)")
    if not src.is_file():
        raise ConfigError(f"{src}: no such spec file or results folder")
    if args.out is None and not args.dry_run:
        args.out = out_folder(src)
    if args.scheduler and args.jobs != 1:
        raise ConfigError("--jobs is for local processes; with --scheduler the cluster's "
                          "workers run the points")
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    if args.scheduler and not args.dry_run:
        from pimrt.sweep.executors import probe
        probe(args.scheduler, args.timeout)           # an unreachable one: in seconds, first
    from pimrt.sweep import spec as specs
    from pimrt.sweep.check import check_points
    spec = specs.load(src, None if args.yes else LIMIT)
    n = len(spec.points)
    from pimrt.sweep.code import fingerprint
    code = fingerprint()                                    # once per sweep
    store = None
    if args.out is not None:
        from pimrt.sweep.store import Store
        store = Store.open(args.out, spec, args.force, code,  # before any work
                           args.allow_code_change)
    for note in check_points(spec, args.quiet):    # layers the PIM has no program for
        print(note)
    from pimrt.sweep.tasks import plan
    baselines = sum(t.kind != "point" for t in plan(spec.points).values())
    if args.dry_run:
        for p in spec.points:
            print(f"{p.index + 1:>5} {p.id}  " + ", ".join(f"{k}={v}"
                                                         for k, v in p.values.items()))
        print(f"{_count(n, 'point')} and {_count(baselines, 'baseline')} they share, "
              f"simulator code {code['fingerprint']}: all check out")
        return 0
    from pimrt.sweep import executors, runner
    ex = executors.executor(args.jobs, args.scheduler, args.timeout)
    started = time.perf_counter()
    stop = _stop_on_sigterm()
    try:
        store.start()
        print(f"sweep {spec.name}: {_count(n, 'point')} ({', '.join(spec.axes)}) and "
              f"{_count(baselines, 'baseline')} they share, on {ex.describe}; simulator "
              f"code {code['fingerprint']}", flush=True)
        result = runner.run(spec, store, ex, args.quiet, args.retry_failed,
                            code["fingerprint"])
    except BaseException:
        ex.close(cancel=True)
        raise
    finally:
        stop.restore()
    print(runner.report(result, store, started))
    if result.interrupted:
        return 128 + stop.signum
    return 1 if any(store.failed(p) for p in spec.points) else 0


class _stop_on_sigterm:
    """SIGTERM (`kill`, a batch system's time limit) stops a sweep as Ctrl-C does: the tasks
    running are ended, the finished points stay, the command exits 128 + the signal (130
    for Ctrl-C, 143 for SIGTERM), and no worker is left running."""

    def __init__(self):
        import signal
        self.signum = signal.SIGINT
        self.old = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.signum = signum
        raise KeyboardInterrupt

    def restore(self) -> None:
        import signal
        signal.signal(signal.SIGTERM, self.old)


def out_folder(spec: pathlib.Path) -> pathlib.Path:
    """The results folder of a spec run without --out: results/sweep/SPEC."""
    return OUT / spec.stem


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"

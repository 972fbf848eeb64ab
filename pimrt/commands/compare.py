"""`pimrt compare`: several models under several policies; a table of step times against
GPU-only execution, serial host+PIM and the schedule's contention-free bound, and the speedups
over the first two. Each finished run is written at once, so an interrupted comparison keeps
them."""
from __future__ import annotations

import json
import pathlib
import sys

from pimrt import cliflags


def register(subparsers) -> None:
    p = subparsers.add_parser("compare", help="time several CNNs under several policies")
    p.add_argument("--models", default="resnet18,resnet50,vgg16,densenet121,mobilenetv2",
                   help="comma-separated zoo models (pimrt.zoo.list_models()) or your own "
                        "as FILE.py:NAME / module:NAME (see pimrt run --help)")
    p.add_argument("--allow-unsupported", action="store_true",
                   help="run ops pimrt does not capture on the host, with a warning")
    p.add_argument("--policies", default="serial,bank_partition,authority",
                   help="comma-separated: serial, bank_partition, authority (serial is the "
                        "baseline of the speedups and always runs)")
    p.add_argument("--batch", type=int, default=32, help="batch size (images per step)")
    p.add_argument("--input", type=int, default=224, help="input height and width (32 or 224)")
    p.add_argument("--groups", type=int, default=1,  # pimrt.runtime.timing.DEFAULT_GROUPS
                   help="most output-channel groups per CONV (default 1: each CONV runs whole and "
                        "the forward pass is pipelined by batch slices, the shorter step on "
                        "the default system; above 1 each CONV gets as many as its arithmetic "
                        "intensity covers: docs/runtime.md)")
    p.add_argument("--slices", type=int, default=None,
                   help="batch slices of the forward pass (see pimrt run --help; default: the "
                        "largest divisor of the batch up to 4)")
    p.add_argument("--part", default=None, help=cliflags.PART_HELP)
    cliflags.precision(p)
    p.add_argument("--update", default="sgd", choices=("sgd", "gradsa", "laysa"),
                   help="parameter update of every run (see pimrt run --help; the exchange "
                        "uses run's defaults: 4 ranks, density 0.001, 10 Gbit/s)")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results/compare"),
                   help="folder for each run's outputs and the summary table")
    p.add_argument("--no-plan", action="store_true",
                   help="keep every weight gradient right after its dX (see pimrt run --help)")
    cliflags.authority_rule(p)
    p.add_argument("--host-times", default="model", metavar="model|measure|DIR",
                   help="the host's CONV/linear compute: the host part's model ('model'); "
                        "'measure': timed on this machine's CUDA GPU (written to "
                        "OUT/MODEL/host_times.json); or the --out folder of a measuring "
                        "compare (or, for one model, a host_times.json) to replay them")
    p.add_argument("--jobs", type=int, default=1,
                   help="models timed at once, one process (and one core) each; each "
                        "model's runs are reported when the model is done")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args) -> int:
    from pimrt.errors import ConfigError
    from pimrt.memctl import POLICIES
    from pimrt.runtime import session

    models = [m for m in args.models.split(",") if m]
    policies = [p for p in args.policies.split(",") if p]
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        raise ConfigError(f"unknown policies {bad}; choose from {', '.join(POLICIES)}")
    for what, names in (("--models", models), ("--policies", policies)):
        if not names:
            raise ConfigError(f"{what} names nothing ({getattr(args, what[2:])!r}); give at "
                              f"least one, comma-separated")
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    from pimrt.output import atomic_write_text, check_out_dir, incomplete_folders, lock_out_dir
    check_out_dir(args.out, create=False)   # before any work; created and locked below
    args.host_part, args.part = session.system_for(args.precision, args.host_part, args.part)
    graphs = {m: session.captured(m, args.batch, args.input, args.allow_unsupported,
                                  args.precision) for m in models}
    from pimrt.runtime.schedule import host_fallback_note
    for m, g in graphs.items():          # layers one might expect on the PIM: said once each
        note = host_fallback_note(g)
        if note:
            print(f"{m}: {note}")
    args.slices = session.slices_for(args.batch, args.slices)
    for m, g in graphs.items():  # every check before the first long run
        session.preflight(g, args.part, args.groups, args.update, args.host_part, args.slices)
    folders = session.folder_names(list(graphs))
    pipelined = True            # the contention-free bound times the co-execution schedule
    spec = {m: _times_spec(args.host_times, folders[m], len(graphs)) for m in graphs}
    if args.host_times == "measure":
        from pimrt.runtime.host_times import require_cuda
        require_cuda(precision_name=args.precision)
    times = {m: session.host_times(g, spec[m], args.groups, args.part, args.host_part,
                                   args.update, pipelined, slices=args.slices)
             if spec[m] != "measure" else (None, None) for m, g in graphs.items()}
    lock_out_dir(check_out_dir(args.out))  # one run at a time in it (released at exit)
    for m, g in graphs.items():          # on the GPU machine: a few seconds per model
        if spec[m] == "measure":
            (args.out / folders[m]).mkdir(parents=True, exist_ok=True)
            times[m] = session.host_times(
                g, "measure", args.groups, args.part, args.host_part, args.update, pipelined,
                save_to=args.out / folders[m] / "host_times.json", quiet=args.quiet,
                meta={"input": args.input}, slices=args.slices)
    results_path = args.out / "compare.json"
    results: list[dict] = []
    order = {m: i for i, m in enumerate(graphs)}
    width = widths(graphs, policies)

    def finished(s: dict) -> None:       # written at once: an interrupted compare keeps it
        results.append(s)
        results.sort(key=lambda r: order[r["model"]])    # stable: each model's runs in order
        atomic_write_text(results_path, json.dumps(results, indent=2))
        print(_row(s, len(results) == 1, width), flush=True)

    jobs = min(args.jobs, len(graphs))
    try:
        if jobs == 1:
            for m, g in graphs.items():
                for s in _model_runs(m, g, policies, args, folders[m], times[m]):
                    finished(s)
        else:
            _in_parallel(graphs, policies, args, folders, times, jobs, finished)
    except KeyboardInterrupt:
        if results:
            print(f"interrupted: {len(results)} finished runs kept in {results_path}",
                  file=sys.stderr)
        else:
            print(f"interrupted before any run finished: nothing written to {results_path}",
                  file=sys.stderr)
        half = incomplete_folders(args.out)
        if half:
            print(f"interrupted while writing {', '.join(map(str, half))}: their files may "
                  f"mix this run's and an earlier one's (each file is whole)", file=sys.stderr)
        print(_table(results, width))
        return 130
    print()
    print(_table(results, width))
    plotted = _energy_plot(results, args.out / "energy.png")
    if plotted:
        print(f"wrote {plotted}")
    return 0


def _model_runs(m: str, graph, policies: list[str], args, folder: str, times):
    """One model's runs, each written to its folder and yielded as its summary when done:
    the baselines first (serial host+PIM, GPU-only, the contention-free bound), then each
    policy."""
    from pimrt.runtime import report, session
    host_times, host_info = times
    serial = session.timed(graph, "serial", 1, args.part, args.host_part, args.quiet,
                           f"{m} serial", exchange=args.update, host_times=host_times)
    gpu, bound = session.baselines(graph, args.groups, args.part, args.host_part, args.quiet,
                                   m, exchange=args.update, plan=not args.no_plan,
                                   host_times=host_times, slices=args.slices)
    meta = {"model": m, "batch": args.batch, "input": args.input, "slices": args.slices,
            "part": args.part, "host_part": args.host_part, "precision": args.precision,
            "host_times": host_info, "system": session.system(args.part, args.host_part)}
    for policy in policies:
        r = serial if policy == "serial" else session.timed(
            graph, policy, args.groups, args.part, args.host_part, args.quiet, f"{m} {policy}",
            exchange=args.update, plan=not args.no_plan, host_times=host_times,
            slices=args.slices, authority_rule=args.authority_rule)
        from pimrt.output import writing
        with writing(args.out / folder / policy) as where:  # marked until every file is written
            s = report.write_all(r, serial, meta, where, gpu, bound)
        yield s


def _model_worker(job: tuple) -> list[dict]:
    """A worker process of --jobs: capture the model again (cheap) and run it whole."""
    from pimrt.runtime import session
    m, policies, args, folder, times = job
    args.quiet = True                              # one process's bars would garble another's
    graph = session.captured(m, args.batch, args.input, args.allow_unsupported, args.precision)
    return list(_model_runs(m, graph, policies, args, folder, times))


def _worker_init() -> None:
    """Ctrl-C reaches every process of the terminal; the parent's is the one that acts. The
    workers draw no bars, so tqdm gets a thread lock: its default one is a named semaphore
    that a worker stopped by Ctrl-C would leave behind (a resource_tracker warning)."""
    import signal
    import threading
    from tqdm import tqdm
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tqdm.set_lock(threading.RLock())


def _in_parallel(graphs, policies, args, folders, times, jobs: int, finished) -> None:
    """--jobs N: N models at once, one process each (spawned: no torch state is forked);
    each model's runs are reported when the model is done."""
    import multiprocessing
    from tqdm import tqdm
    ctx = multiprocessing.get_context("spawn")
    bar = tqdm(total=len(graphs), unit="model", desc="models", disable=args.quiet or None,
               file=sys.stderr, leave=False)
    with ctx.Pool(jobs, initializer=_worker_init) as pool, bar:
        work = [(m, policies, args, folders[m], times[m]) for m in graphs]
        try:
            # each model's runs as it finishes; a worker's error is raised here
            for runs in pool.imap_unordered(_model_worker, work):
                for s in runs:
                    finished(s)
                bar.update(1)
            pool.close()                         # let the workers exit cleanly
            pool.join()
        except BaseException:
            pool.terminate()                     # Ctrl-C or a failed model: stop the others
            raise


def _times_spec(spec: str, folder: str, models: int) -> str:
    """--host-times for one model of a comparison: model, measure, DIR/FOLDER/host_times.json
    for the folder of a measuring compare, or a file (only with one model)."""
    from pimrt.errors import ConfigError
    if spec in ("model", "measure"):
        return spec
    p = pathlib.Path(spec)
    if p.is_dir():
        return str(p / folder / "host_times.json")
    if models > 1:
        raise ConfigError(f"--host-times {spec}: a file holds one model's times; for "
                          f"{models} models give the --out folder of a measuring compare "
                          f"(DIR/MODEL/host_times.json)")
    return spec


COLUMNS = (("step ms", "step_ms", 10, ".3f"), ("gpu-only", "gpu_only_step_ms", 10, ".3f"),
           ("serial", "serial_step_ms", 10, ".3f"), ("bound", "bound_step_ms", 10, ".3f"),
           ("vs gpu", "speedup_vs_gpu_only", 8, ".3f"),
           ("vs serial", "speedup_vs_serial", 10, ".3f"),
           ("/bound", "step_vs_bound", 8, ".3f"), ("switches", "mode_switches", 10, ""))
#: energy per step (pimrt.runtime.energy): mJ, and the ratio to GPU-only's and serial's
ENERGY_COLUMNS = (("mJ", "total", 10, ",.1f"), ("E/gpu", "vs_gpu_only", 8, ".3f"),
                  ("E/serial", "vs_serial", 9, ".3f"))


def widths(models, policies) -> tuple[int, int]:
    """The model and policy columns: as wide as the longest name and two spaces (at least
    17 and 16), so a long name (a user's path/to/nets.py:NAME) never runs into the next."""
    return (max([15, *map(len, models)]) + 2, max([14, *map(len, policies)]) + 2)


def _row(s: dict, first: bool, width: tuple[int, int] = (17, 16)) -> str:
    """One line of the table: the step, the baselines' steps (GPU-only, serial host+PIM, the
    contention-free bound), the speedups over the first two, the step over the bound, the
    mode switches, and the speedups over serial of the forward pass, backward pass and
    update."""
    mw, pw = width
    head = (f"{'model':<{mw}}{'policy':<{pw}}"
            + "".join(f"{name:>{w}}" for name, _, w, _ in COLUMNS)
            + f"{'fwd':>7}{'bwd':>7}{'upd':>7}"
            + "".join(f"{name:>{w}}" for name, _, w, _ in ENERGY_COLUMNS) + "\n") if first else ""
    ph = s.get("phases")
    split = "".join(f"{ph[k]['speedup']:>7.3f}" for k in ("fwd", "bwd", "update")) if ph else ""
    e = s.get("energy_mj") or {}
    energy = "".join(f"{e[key]:>{w}{fmt}}" if key in e else f"{'-':>{w}}"
                     for _, key, w, fmt in ENERGY_COLUMNS)
    return head + f"{s['model']:<{mw}}{s['policy']:<{pw}}" + "".join(
        f"{s[key]:>{w}{fmt}}" for _, key, w, fmt in COLUMNS) + split + energy


def _table(results: list[dict], width: tuple[int, int] | None = None) -> str:
    if not results:
        return "no finished runs"
    width = width or widths([s["model"] for s in results], [s["policy"] for s in results])
    mw, pw = width
    lines = [_row(results[0], True, width).split("\n")[0]]
    lines += [_row(s, False, width) for s in results]
    by = {}
    for s in results:
        by.setdefault(s["policy"], []).append(s)
    pad = sum(w for _, _, w, _ in COLUMNS[:4])
    for policy, rs in by.items():
        mean = {k: sum(r[k] for r in rs) / len(rs)
                for k in ("speedup_vs_gpu_only", "speedup_vs_serial", "step_vs_bound")}
        line = (f"{'mean':<{mw}}{policy:<{pw}}{'':>{pad}}{mean['speedup_vs_gpu_only']:>8.3f}"
                f"{mean['speedup_vs_serial']:>10.3f}{mean['step_vs_bound']:>8.3f}")
        es = [r["energy_mj"] for r in rs if r.get("energy_mj", {}).get("available")]
        if len(es) == len(rs):
            line += f"{'':>{10 + 21 + 10}}" + "".join(
                f"{sum(e[key] for e in es) / len(es):>{w}.3f}"
                for _, key, w, _ in ENERGY_COLUMNS[1:])
        lines.append(line)
    return "\n".join(lines)


def _energy_plot(results: list[dict], path) -> pathlib.Path | None:
    """energy.png of a comparison: per model, GPU-only, serial and each policy, stacked."""
    from pimrt.runtime import energy
    bars, seen = [], set()
    for s in results:
        e = s.get("energy_mj") or {}
        if not e.get("available"):
            return None
        for label, parts in energy.run_bars(s):
            if (s["model"], label) not in seen:
                seen.add((s["model"], label))
                bars.append((f"{s['model']} {label}", parts))
    if not bars:
        return None
    energy.plot(bars, path, "energy per training step: host, DRAM, PIM, I/O")
    return path

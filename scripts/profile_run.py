"""CPU time and memory of a `pimrt run` by phase (docs/architecture.md, "Simulator speed").

    python scripts/profile_run.py [--tracemalloc] [--json FILE] [--label TEXT] -- run \
        --model resnet50 --batch 32 --input 224 --functional none --quiet --out /tmp/r50

Wraps the functions of each phase (capture, planning, stream building, memctl, reports) and
charges each one's CPU time (time.process_time) to the phase on top of the stack, under the
run it belongs to (serial, the policy's, GPU-only, the bound); prints a table, the peak RSS
(resource.getrusage) reached in each phase, the requests memctl simulated for each run (a
run started from a copy of another's controller counts those after the copy) and how many it
simulated per CPU second, and with --tracemalloc the peak of Python's
allocations (slower: a small case). --json FILE writes the same figures (CPU seconds by phase
and by run and phase, the peak RSS, the requests by run, the command and --label's text) for
scripts/doc_tables.py. Profiling another checkout: PYTHONPATH=DIR (the phases it lacks are
left out).
"""
from __future__ import annotations

import argparse
import collections
import functools
import importlib
import pathlib
import resource
import sys
import time
import tracemalloc

# (module, attribute path, phase); None: the run named by the call's arguments
PHASES = [
    ("pimrt.runtime.session", "captured", "capture"),
    ("pimrt.runtime.session", "preflight", "checks"),
    ("pimrt.runtime.session", "host_times", "checks"),
    ("pimrt.runtime.placement", "place_step", "placement"),
    ("pimrt.runtime.plan", "plan_deferrals", "planning"),
    ("pimrt.runtime.plan", "list_schedule", "planning"),
    ("pimrt.runtime.plan", "slack", "planning"),
    ("pimrt.runtime.timing", "pipelined_schedule", "planning"),
    ("pimrt.runtime.schedule", "build_schedule", "planning"),
    ("pimrt.runtime.work", "task_records", "streams"),
    ("pimrt.runtime.timing", "task_stream", "streams"),     # a generator: each step charged
    ("pimrt.runtime.sides", "side_stream", "streams"),      # (fed by side: one a side)
    ("pimrt.runtime.timing", "TaskPieces.stream", "streams"),  # (the plan's timings alone)
    ("pimrt.memctl.controller", "Controller.feed", "memctl"),
    ("pimrt.memctl.controller", "Controller.feed_side", "memctl"),
    ("pimrt.memctl.controller", "Controller.finish", "memctl"),
    ("pimrt.memctl.controller", "Controller.__init__", "memctl"),
    ("pimrt.runtime.report", "write_all", "reports"),
    ("pimrt.runtime.functional", "check_step", "functional"),
]
# which run a call belongs to: (module, function, run name from its arguments)
RUNS = [
    ("pimrt.runtime.timing", "time_step", lambda a, k: k.get("policy", a[1] if len(a) > 1
                                                             else "authority")),
    ("pimrt.runtime.timing", "contention_free_bound", lambda a, k: "bound"),
    ("pimrt.runtime.timing", "alone_durations", lambda a, k: "alone (plan)"),
]

cpu = collections.Counter()        # (run, phase) -> CPU seconds, exclusive
requests = collections.Counter()   # run -> requests memctl simulated for it (a copy of a
                                   # controller, Controller.clone: only those after the copy)
calls = collections.Counter()
rss = {}                           # phase -> peak RSS (MiB) when it last ended
rss_run = {}                       # (run, phase) -> the same
py_peak = {}                       # phase -> peak traced Python memory (MiB)
stack: list[list] = []             # [run, phase, started]
runs: list[str] = []


def _now() -> float:
    return time.process_time()


def _charge(until: float) -> None:
    if stack:
        run, phase, since = stack[-1]
        cpu[(run, phase)] += until - since


def _enter(run, phase):
    t = _now()
    _charge(t)
    if tracemalloc.is_tracing():
        tracemalloc.reset_peak()
    stack.append([run, phase, t])


def _leave():
    t = _now()
    _charge(t)
    run, phase, _ = stack.pop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss[phase] = max(rss.get(phase, 0), peak)
    rss_run[(run, phase)] = max(rss_run.get((run, phase), 0), peak)
    if tracemalloc.is_tracing():
        py_peak[phase] = max(py_peak.get(phase, 0), tracemalloc.get_traced_memory()[1] / 2**20)
    if stack:
        stack[-1][2] = t


def _wrap_phase(fn, phase):
    @functools.wraps(fn)
    def inner(*a, **k):
        run = runs[-1] if runs else "-"
        _enter(run, phase)
        calls[(run, phase)] += 1
        try:
            return fn(*a, **k)
        finally:
            _leave()
    return inner


def _wrap_generator(fn, phase):
    @functools.wraps(fn)
    def inner(*a, **k):
        run = runs[-1] if runs else "-"
        it = fn(*a, **k)
        while True:
            _enter(run, phase)
            calls[(run, phase)] += 1
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                _leave()
            yield item
    return inner


def _wrap_run(fn, name_of):
    @functools.wraps(fn)
    def inner(*a, **k):
        runs.append(name_of(a, k))
        _enter(runs[-1], "other")
        try:
            return fn(*a, **k)
        finally:
            _leave()
            runs.pop()
    return inner


def _count_requests() -> None:
    """Charge each finished controller's requests to its run, less those a copy began with."""
    from pimrt.memctl.controller import Controller
    finish, clone = Controller.finish, Controller.clone

    @functools.wraps(finish)
    def counted_finish(self, *a, **k):
        out = finish(self, *a, **k)
        requests[runs[-1] if runs else "-"] += (self.stats()["requests"]
                                                 - getattr(self, "_profile_copied", 0))
        return out

    @functools.wraps(clone)
    def counted_clone(self, *a, **k):
        copy = clone(self, *a, **k)
        copy._profile_copied = copy.stats()["requests"]   # (the copy's own attribute)
        return copy
    Controller.finish, Controller.clone = counted_finish, counted_clone


def _patch(module: str, path: str, wrap) -> None:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError:      # an older checkout without this phase's module
        return
    owner, name = mod, path
    if "." in path:
        cls, name = path.split(".")
        owner = getattr(mod, cls, None)
        if owner is None:
            return
    if not hasattr(owner, name):
        return
    new = wrap(getattr(owner, name))
    setattr(owner, name, new)
    if owner is mod:          # also where other modules imported it by name
        for other in list(sys.modules.values()):
            if getattr(other, "__name__", "").startswith("pimrt") and \
                    getattr(other, name, None) is getattr(mod, name).__wrapped__:
                setattr(other, name, new)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tracemalloc", action="store_true", help="also Python's peak allocations")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    ap.add_argument("--label", default="", help="what was profiled, kept in the JSON file")
    ap.add_argument("argv", nargs=argparse.REMAINDER, help="pimrt's arguments (after --)")
    args = ap.parse_args(argv)
    rest = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    import pimrt.commands.run  # noqa: F401  (import everything the run uses before patching)
    import pimrt.runtime.report  # noqa: F401
    import pimrt.runtime.session  # noqa: F401
    import pimrt.runtime.functional  # noqa: F401
    import inspect
    for module, path, phase in PHASES:
        _patch(module, path, lambda fn, ph=phase: (_wrap_generator if inspect.isgeneratorfunction(
            fn) else _wrap_phase)(fn, ph))
    for module, path, name_of in RUNS:
        _patch(module, path, lambda fn, n=name_of: _wrap_run(fn, n))
    _count_requests()
    if args.tracemalloc:
        tracemalloc.start()
    from pimrt.cli import main as pimrt_main
    wall, t0 = time.perf_counter(), _now()
    _enter("-", "other")
    rc = pimrt_main(rest)
    _leave()
    wall, total = time.perf_counter() - wall, _now() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    startup = ru.ru_utime + ru.ru_stime - total     # interpreter, imports, this script
    by_phase = collections.Counter()
    for (run, phase), s in cpu.items():
        by_phase[phase] += s
    print(f"\nprofile of pimrt {' '.join(rest)}")
    print(f"CPU {total:.1f} s (+ {startup:.1f} s startup and imports), wall {wall:.1f} s, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(f"{'phase':<12}{'CPU s':>8}{'share':>7}{'RSS MiB':>9}"
          + (f"{'py MiB':>8}" if args.tracemalloc else ""))
    for phase, s in by_phase.most_common():
        print(f"{phase:<12}{s:>8.1f}{s / max(total, 1e-9):>7.0%}{rss.get(phase, 0):>9.0f}"
              + (f"{py_peak.get(phase, 0):>8.0f}" if args.tracemalloc else ""))
    print(f"\n{'run':<14}{'phase':<12}{'CPU s':>8}{'calls':>7}{'RSS MiB':>9}")
    for (run, phase), s in sorted(cpu.items(), key=lambda kv: -kv[1]):
        if s >= 0.05:
            print(f"{run:<14}{phase:<12}{s:>8.1f}{calls.get((run, phase), 0):>7}"
                  f"{rss_run.get((run, phase), 0):>9.0f}")
    print(f"\n{'run':<14}{'requests simulated':>20}{'memctl CPU s':>14}{'M req/CPU s':>13}")
    for run, n in requests.most_common():
        s = cpu.get((run, "memctl"), 0.0)
        print(f"{run:<14}{n:>20,}{s:>14.1f}{n / max(s, 1e-9) / 1e6:>13.2f}")
    n = sum(requests.values())
    s = by_phase.get("memctl", 0.0)
    print(f"{'all':<14}{n:>20,}{s:>14.1f}{n / max(s, 1e-9) / 1e6:>13.2f}")
    if args.json:
        import json
        import pimrt
        from pimrt.output import atomic_write_text
        import subprocess
        src = pathlib.Path(pimrt.__file__).parent.parent
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        doc = {"label": args.label, "argv": rest, "commit": head, "cpu_s": round(total, 2),
            "startup_s": round(startup, 2), "wall_s": round(wall, 2),
            "peak_rss_mib": round(ru.ru_maxrss / 1024, 1),
            "by_phase": {ph: round(v, 2) for ph, v in by_phase.most_common()},
            "by_run": [{"run": run, "phase": phase, "cpu_s": round(v, 2),
                        "calls": calls.get((run, phase), 0),
                        "rss_mib": round(rss_run.get((run, phase), 0), 1)}
                       for (run, phase), v in sorted(cpu.items(), key=lambda kv: -kv[1])],
            "requests_by_run": dict(requests.most_common())}
        atomic_write_text(pathlib.Path(args.json), json.dumps(doc, indent=1) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())

"""Mutants of the yardsticks (issue 37): each a small search/replace on one file of a copy of
the repository, after which the named test files must fail. Reports each mutant killed or
survived; exits 1 if any survived (or a mutant no longer applies, or one marked as a known
survivor was killed), 0 otherwise.

    .venv/bin/python scripts/mutants.py              # every mutant
    .venv/bin/python scripts/mutants.py bound_x1.05  # the named ones
    .venv/bin/python scripts/mutants.py --list

Adding a mutant: a line in MUTANTS (docs/architecture.md, "Mutants")."""
from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
YARDSTICKS = ("tests/test_yardsticks.py",)
SERIAL_BARRIER = "            parts.append(_marker(BARRIER, who, 0))\n"   # where serial changes side


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    file: str          # relative to the repository root
    search: str        # must occur exactly once in the file
    replace: str
    tests: tuple = YARDSTICKS
    why: str = ""
    # why the mutant is known to survive today: reported, not a failure, until it is killed
    # (then the mark must go: a failure, as a strict xfail that passes)
    known_survivor: str = ""


MUTANTS = [
    Mutant("serial_idle_1000", "pimrt/runtime/timing.py",
           SERIAL_BARRIER, SERIAL_BARRIER + "            parts.append(_marker(DELAY, who, 1000))\n",
           why="serial given a 1,000-cycle idle at every side change"),
    Mutant("bound_x1.05", "pimrt/runtime/timing.py",
           "    makespan = list_schedule(schedule, duration)[0]\n",
           "    makespan = int(list_schedule(schedule, duration)[0] * 1.05)\n",
           why="the contention-free bound multiplied by 1.05"),
    Mutant("gpu_only_idle_20pct", "pimrt/runtime/work.py",
           "    yield launch_records(fixed)\n",
           "    yield launch_records(fixed + math.ceil(0.2 * (fixed + floor)))\n",
           why="GPU-only given an idle of 20% of each memory-bound kernel before it"),
    Mutant("gpu_only_no_queue_depth", "pimrt/runtime/timing.py",
           '    if policy == "gpu_only":\n        p = step_part(part, host_part)\n',
           '    if policy == "gpu_only":\n'
           '        p = load_part(part) if isinstance(part, str) else part\n',
           why="GPU-only run without the host's request queue depth (the part's 32)"),
    Mutant("lower_bound_min", "pimrt/runtime/timing.py",
           '"lower_bound_step_ms": max(busy.values()) * ms}',
           '"lower_bound_step_ms": min(busy.values()) * ms}',
           why="the lower bound from the shorter side"),
    Mutant("list_schedule_no_deps", "pimrt/runtime/plan.py",
           "        s = max([free[t.side]] + [int(end[d]) for d in t.deps])\n",
           "        s = free[t.side]\n",
           why="the bound's list schedule ignoring dependencies"),
    Mutant("alone_with_the_other_side", "pimrt/runtime/timing.py",
           "    mine = [t for t in schedule.tasks if t.side == side]\n",
           "    mine = list(schedule.tasks)\n",
           why="the tasks 'alone' timed with the other side's tasks in the same stream"),
    Mutant("alone_tails_twice", "pimrt/runtime/timing.py",
           "        out.append(max(0, e - max(s, last)))\n",
           "        out.append(e - s)\n",
           why="each task alone from its own start: the tails of consecutive tasks counted "
               "twice"),
    Mutant("slack_rule_oracle_by_default", "pimrt/runtime/authority_rules.py",
           'DEFAULT_AUTHORITY_RULE = "slack"\n', 'DEFAULT_AUTHORITY_RULE = "slack-oracle"\n',
           tests=("tests/test_authority_rule.py",),
           why="the default authority rule planning on durations no controller knows"),
    Mutant("serial_without_barriers", "pimrt/runtime/timing.py",
           "            if not schedule.pipelined and last not in (None, t.side):\n",
           "            if False:\n",
           tests=YARDSTICKS + ("tests/test_runtime.py::test_timed_tasks_respect_dependencies",),
           why="serial with host and PIM free to overlap"),
    Mutant("gpu_only_no_fixed_cost", "pimrt/runtime/work.py",
           "    fixed = math.ceil(launches * hp.kernel_overhead_s * 1e9 / ctx.tck - 1e-9)\n",
           "    fixed = 0\n",
           why="GPU-only's memory-bound kernels without their fixed cost"),
    Mutant("gpu_only_at_peak", "pimrt/runtime/work.py",
           "    floor = len(addr) * ctx.part.request_bytes / (hp.stream_fraction\n",
           "    floor = len(addr) * ctx.part.request_bytes / (1.0\n",
           why="GPU-only's kernels paced to the part's peak, not the streaming bandwidth"),
    Mutant("gpu_only_update_per_layer", "pimrt/runtime/work.py",
           "        launches = len(layer.params) / FOREACH_TENSORS\n",
           "        launches = 1.0\n",
           why="GPU-only's SGD update a launch per layer instead of torch's foreach kernels"),
]

IGNORE = shutil.ignore_patterns(".git", ".venv", "results", "dist", "build", "__pycache__",
                                "*.egg-info", ".hypothesis", ".pytest_cache", "obj_dir")


def _copy(dest: pathlib.Path) -> pathlib.Path:
    shutil.copytree(ROOT, dest, ignore=IGNORE, symlinks=True)
    return dest


def _env(copy: pathlib.Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy)] + ([env["PYTHONPATH"]]
                                                       if env.get("PYTHONPATH") else []))
    env["HYPOTHESIS_PROFILE"] = "mutants"     # tests/conftest.py: ci's examples, no shrinking
    return env


def _pytest(copy: pathlib.Path, tests, python: str) -> tuple[int, str]:
    where = subprocess.run([python, "-c", "import pimrt; print(pimrt.__file__)"], cwd=copy,
                           env=_env(copy), capture_output=True, text=True)
    if not where.stdout.strip().startswith(str(copy)):
        raise SystemExit(f"mutants: the copy's pimrt is not the one imported "
                         f"({where.stdout.strip() or where.stderr.strip()})")
    run = subprocess.run([python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                          *tests], cwd=copy, env=_env(copy), capture_output=True, text=True)
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    return run.returncode, lines[-1] if lines else run.stderr.strip()[-200:]


def apply(mutant: Mutant, copy: pathlib.Path) -> None:
    path = copy / mutant.file
    text = path.read_text()
    if text.count(mutant.search) != 1:
        raise ValueError(f"{mutant.file}: the search text occurs {text.count(mutant.search)} "
                         f"times (must be once)")
    path.write_text(text.replace(mutant.search, mutant.replace))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="mutants to run (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the check that the tests pass on the unmutated copy")
    ap.add_argument("--python", default=sys.executable, help="the interpreter to test with")
    args = ap.parse_args(argv)
    if args.list:
        for m in MUTANTS:
            print(f"{m.name:28s} {m.file:28s} {m.why}")
        return 0
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        print(f"mutants: unknown {', '.join(sorted(unknown))}; see --list", file=sys.stderr)
        return 2
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    with tempfile.TemporaryDirectory(prefix="pimrt-mutants-") as tmp:
        if not args.no_baseline:
            tests = sorted({t for m in chosen for t in m.tests})
            rc, last = _pytest(_copy(pathlib.Path(tmp) / "baseline"), tests, args.python)
            print(f"{'(unmutated)':28s} {'passes' if rc == 0 else 'FAILS'}  {last}")
            if rc != 0:
                return 1
        bad = 0
        for m in chosen:
            t0 = time.perf_counter()
            copy = _copy(pathlib.Path(tmp) / m.name)
            try:
                apply(m, copy)
            except ValueError as exc:
                print(f"{m.name:28s} STALE   {exc}")
                bad += 1
                continue
            rc, last = _pytest(copy, m.tests, args.python)
            verdict = "killed" if rc == 1 else "SURVIVED" if rc == 0 else f"ERROR {rc}"
            if m.known_survivor:
                verdict = {"SURVIVED": "survived (known)",
                           "killed": "KILLED (known survivor: remove its mark)"}.get(verdict,
                                                                                    verdict)
            bad += verdict not in ("killed", "survived (known)")
            print(f"{m.name:28s} {verdict:8s} {time.perf_counter() - t0:5.1f} s  {last}",
                  flush=True)
            if verdict == "survived (known)":
                print(f"{'':28s} {m.known_survivor}")
            shutil.rmtree(copy, ignore_errors=True)
    known = sum(1 for m in chosen if m.known_survivor)
    print(f"{len(chosen) - bad - known} of {len(chosen)} mutants killed"
          + (f", {known} known to survive" if known else "")
          + (f", {bad} failed" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""`pimrt bench speed`: how fast the simulator runs. Each case is a whole `pimrt run` (all its
baselines) in a subprocess, timed for CPU seconds (user + system, os.wait4) and peak RSS;
with --baseline DIR the same cases also run at another pimrt checkout, side by side, and
their outputs (summary.json but its wall-clock fields, layers.csv, trace.json) are compared.
docs/speed.md."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from pimrt.bench._machine import run_timed

HELP = ("simulator speed: CPU seconds and peak memory of pimrt run (ResNet-50 224x224 and a "
        "32x32 case) at this build and, with --baseline DIR, at another checkout")

RUN = ["run", "--functional", "none", "--quiet"]
CASES = {
    "resnet50_224": ["--model", "resnet50", "--batch", "32", "--input", "224"],
    "resnet50_32": ["--model", "resnet50", "--batch", "32", "--input", "32"],
}
FAST_CASES = {"resnet_cifar_20_32": ["--model", "resnet_cifar_20", "--batch", "4",
                                     "--input", "32"]}
# summary fields that are not the simulation's result
WALL_CLOCK = ("simulation_wall_s", "plots")
BUILD_TIMEOUT_S = 900


def add_arguments(p) -> None:
    p.add_argument("--baseline", type=pathlib.Path, default=None, metavar="DIR",
                   help="another pimrt checkout (its memctl built in place if needed) to time "
                        "beside this build")
    p.add_argument("--fast", action="store_true",
                   help="one small case (resnet_cifar_20, batch 4, 32x32) instead of ResNet-50 "
                        "at 224x224 and 32x32 (minutes)")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results/bench-speed"),
                   help="folder for speed.json and each run's outputs (runs/BUILD/CASE)")


def this_root() -> pathlib.Path:
    """The folder that holds the pimrt package this process runs (a checkout, or
    site-packages for an installed wheel)."""
    import pimrt
    return pathlib.Path(pimrt.__file__).resolve().parent.parent


def checkout(path: pathlib.Path) -> pathlib.Path:
    """`path` as a pimrt checkout; a ConfigError naming it when it is not one."""
    from pimrt.errors import ConfigError
    if not path.is_dir():
        raise ConfigError(f"--baseline {path}: not a folder (a pimrt checkout is a folder)")
    missing = [p for p in ("pimrt/cli.py", "pimrt/commands/run.py", "memctl")
               if not (path / p).exists()]
    if missing:
        raise ConfigError(f"--baseline {path}: not a pimrt checkout (no {missing[0]})")
    return path.resolve()


def build(root: pathlib.Path) -> None:
    """Build (where needed) the checkout's memctl extension, as its own first import does; a
    ConfigError naming the checkout and the build's last line when it fails."""
    from pimrt.errors import ConfigError
    code = ("import pathlib, pimrt, pimrt.memctl._native as n; "
            "print(pathlib.Path(pimrt.__file__).resolve().parent.parent)")
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=root, env=_env(root),
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"--baseline {root}: cannot be built: its memctl build took over "
                          f"{BUILD_TIMEOUT_S} s") from None
    lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
    if done.returncode != 0:
        raise ConfigError(f"--baseline {root}: cannot be built: "
                          f"{lines[-1] if lines else f'exit {done.returncode}'}")
    if pathlib.Path(done.stdout.strip()) != root:
        raise ConfigError(f"--baseline {root}: its pimrt is not the one Python imports "
                          f"there ({done.stdout.strip()})")


def _env(root: pathlib.Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(root)}


def timed(root: pathlib.Path, argv: list[str], out: pathlib.Path) -> dict:
    """One `pimrt ARGV --out OUT/result` of the pimrt at `root` in a subprocess: its exit
    code, CPU seconds (user + system), wall seconds, peak RSS."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "stdout.txt", "w") as so, open(out / "stderr.txt", "w") as se:
        wall, ru, code, _ = run_timed([sys.executable, "-m", "pimrt", *argv, "--out",
                                       str(out / "result")], root, so, se, env=_env(root))
    result = {"exit": code, "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
              "user_s": round(ru.ru_utime, 2), "system_s": round(ru.ru_stime, 2),
              "wall_s": round(wall, 2), "peak_rss_mib": round(ru.ru_maxrss / 1024, 1)}
    if code == 0:
        s = json.loads((out / "result" / "summary.json").read_text())
        result.update(makespan_cycles=s["makespan_cycles"], step_ms=s["step_ms"])
    else:
        err = [ln for ln in (out / "stderr.txt").read_text().splitlines() if ln.strip()]
        result["error"] = err[-1] if err else f"exit {code}"
    return result


def outputs(folder: pathlib.Path) -> dict[str, bytes]:
    """A run's outputs to compare: summary.json without its wall-clock fields and paths,
    layers.csv, trace.json."""
    s = json.loads((folder / "summary.json").read_text())
    for key in WALL_CLOCK:
        s.pop(key, None)
    s.pop("system", None)                         # (the part files' paths)
    return {"summary.json": json.dumps(s, sort_keys=True).encode(),
            **{n: (folder / n).read_bytes() for n in ("layers.csv", "trace.json")}}


def differing(a: pathlib.Path, b: pathlib.Path) -> list[str]:
    """The outputs in which two runs differ."""
    x, y = outputs(a), outputs(b)
    return [n for n in x if x[n] != y[n]]


def format_table(rows: list[dict]) -> str:
    head = f"{'case':<20}{'build':<10}{'CPU s':>9}{'wall s':>9}{'peak RSS MiB':>14}" \
           f"{'step ms':>11}  outputs"
    lines = [head]
    for r in rows:
        if r["exit"] != 0:
            lines.append(f"{r['case']:<20}{r['build']:<10}  failed (exit {r['exit']}): "
                         f"{r['error']}")
            continue
        same = r.get("same_outputs")
        note = "" if same is None else "same as this build" if same else \
            "differ: " + ", ".join(r["differing"])
        if r.get("cpu_ratio"):
            note += f"; this build {r['cpu_ratio']:.2f}x less CPU"
        lines.append(f"{r['case']:<20}{r['build']:<10}{r['cpu_s']:>9.1f}{r['wall_s']:>9.1f}"
                     f"{r['peak_rss_mib']:>14.0f}{r['step_ms']:>11.3f}  {note}".rstrip())
    return "\n".join(lines)


def run(args) -> int:
    from pimrt.output import atomic_write_text, check_out_dir
    check_out_dir(args.out, create=False)          # before any work
    builds = {"this": this_root()}
    if args.baseline is not None:
        builds["baseline"] = checkout(args.baseline)
        print(f"building the baseline's memctl if needed: {builds['baseline']}", flush=True)
        build(builds["baseline"])
    out = check_out_dir(args.out)
    rows = []
    for case, argv in (FAST_CASES if args.fast else CASES).items():
        for name, root in builds.items():
            print(f"{case} at {name} ({root}) ...", flush=True)
            folder = out / "runs" / name / case
            r = {"case": case, "build": name, "root": str(root),
                 "argv": ["pimrt", *RUN, *argv], **timed(root, RUN + argv, folder)}
            if name != "this" and r["exit"] == 0 and rows[-1]["exit"] == 0:
                diff = differing(out / "runs" / "this" / case / "result", folder / "result")
                r.update(same_outputs=not diff, differing=diff,
                         cpu_ratio=r["cpu_s"] / max(rows[-1]["cpu_s"], 1e-9))
            rows.append(r)
    text = format_table(rows)
    print(text)
    atomic_write_text(out / "speed.json", json.dumps({"runs": rows}, indent=1) + "\n")
    print(f"wrote {out / 'speed.json'}")
    return 0 if all(r["exit"] == 0 for r in rows) else 1

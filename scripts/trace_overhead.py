"""What writing a step's trace costs (issue 40's aim, docs/traces.md): one training step timed
without and with `--save-trace` (the plan made once before, as a run makes it; best of
--repeat each), the file's size, its records and requests, its bytes per request compressed
by the tools given (--compress), and memsim's replay of it against the run.

    python scripts/trace_overhead.py --model resnet18 --batch 32 --input 32 --out /tmp/t.npy
"""
import argparse
import pathlib
import shutil
import subprocess
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--input", type=int, default=32)
    p.add_argument("--policy", default="authority")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("step.npy"))
    p.add_argument("--repeat", type=int, default=2, help="timed runs of each kind (best kept)")
    p.add_argument("--compress", default="gzip -6",
                   help="compressors, comma-separated (e.g. 'gzip -6,zstd -19 --long=27,xz -6')")
    a = p.parse_args()
    from pimrt.runtime import session
    from pimrt.runtime.timing import time_step
    from pimrt.trace.step import StepTrace
    g = session.captured(a.model, a.batch, a.input)
    time_step(g, a.policy)                      # the plan, made once (cached per graph)
    walls = {"without": [], "with": []}
    for kind in ("without", "with") * a.repeat:
        a.out.unlink(missing_ok=True)        # (a new file, as a run writes it)
        sink = StepTrace(a.out, {"model": a.model, "batch": a.batch, "input": a.input,
                                 "step": a.policy}) if kind == "with" else None
        t = time.perf_counter()
        r = time_step(g, a.policy, sink=sink)
        walls[kind].append(time.perf_counter() - t)
    best = {k: min(v) for k, v in walls.items()}
    size = a.out.stat().st_size
    n = sum(r.stats["requestors"][w]["requests"] for w in ("host", "pim"))
    print(f"{a.model} batch {a.batch} {a.input}x{a.input} {a.policy}: {r.stats['cycles']:,} "
          f"cycles, {r.records:,} records, {n:,} requests")
    print(f"timed step without the trace {best['without']:.2f} s, with it {best['with']:.2f} s "
          f"(+{100 * (best['with'] / best['without'] - 1):.1f}%; runs "
          f"{ {k: [round(x, 2) for x in v] for k, v in walls.items()} })")
    print(f"{a.out}: {size:,} bytes ({size / n:.2f} per request)")
    for tool in (c.split() for c in a.compress.split(",") if c.strip()):
        if shutil.which(tool[0]):
            t = time.perf_counter()
            out = subprocess.run([*tool, "-c", str(a.out)], capture_output=True, check=True)
            print(f"  {' '.join(tool)}: {len(out.stdout):,} bytes, "
                  f"{len(out.stdout) / n:.3f} per request ({time.perf_counter() - t:.1f} s)")
    t = time.perf_counter()
    rep = subprocess.run([sys.executable, "-m", "pimrt", "memsim", str(a.out), "--quiet"],
                         capture_output=True, text=True)
    print(f"replay ({time.perf_counter() - t:.1f} s): " + rep.stdout.strip().splitlines()[-1]
          if rep.returncode == 0 else rep.stderr)


if __name__ == "__main__":
    main()

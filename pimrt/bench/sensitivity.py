"""How the co-executed step moves when one part of the system changes: the five CNNs on the
default system (the V100 with its four HBM2 stacks and HBM-PIM-style units) and with one knob
changed at a time, each against GPU-only execution, serial host+PIM and the contention-free
bound on that same system. Writes a CSV row per (model, input, variant) as it finishes and a
plot of the speedups."""
from __future__ import annotations

import csv
import pathlib
import sys

from pimrt.cliflags import alias

HELP = ("sensitivity of the co-executed step: the five CNNs on the default system and with "
        "one knob changed at a time (stacks, PIM lanes, PIM clock, Tensor-Core host, mode-switch "
        "cost), against GPU-only, serial host+PIM and the contention-free bound")

# variant -> (what changes, memory-part overrides, host part)
VARIANTS = {
    "default": ("V100 + 4 HBM2 stacks, HBM-PIM units (1 per 2 banks, 8 lanes, 300 MHz)", {},
                "v100"),
    "one_stack": ("one HBM2 stack (8 channels, 225 GB/s) under the whole V100",
                  {"organization.channels": 8}, "v100"),
    "lanes16": ("16 fp32 lanes per PIM unit", {"pim.lanes": 16}, "v100"),
    "pim_at_memory_clock": ("PIM units at the memory clock (877 MHz)",
                            {"pim.clock_ratio": 1}, "v100"),
    "tensor_core_host": ("Tensor-Core host (~4x the CONV throughput)", {}, "v100_tc"),
    "switch_x4": ("mode switch 4x as long (96 cycles)", {"pim.mode_switch_cycles": 96}, "v100"),
}
FIELDS = ["model", "input", "batch", "variant", "change", "gpu_only_ms", "serial_ms",
          "authority_ms", "bound_ms", "lower_bound_ms", "speedup_vs_gpu_only",
          "speedup_vs_serial", "step_vs_bound", "host_busy_ms", "pim_busy_ms"]


def add_arguments(p) -> None:
    p.add_argument("--models", default="resnet18,resnet50,vgg16,densenet121,mobilenetv2",
                   help="comma-separated zoo names")
    p.add_argument("--input", dest="inputs", default="32", metavar="INPUTS",
                   help="input sizes, comma-separated (32, 224)")
    alias(p, "--inputs", "--input")
    p.add_argument("--batch", type=int, default=32, help="batch size")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated, of: {', '.join(VARIANTS)}")
    p.add_argument("--part", default="v100_hbm2_pim", help="the system's memory part")
    p.add_argument("--jobs", type=int, default=1, help="points timed at once (one core each)")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results/sensitivity"),
                   help="folder for sensitivity.csv and sensitivity.png")
    p.add_argument("--quiet", action="store_true")


def point(job: tuple) -> dict:
    """One (model, input, variant): its baselines and the authority step on that system."""
    model, size, batch, variant, part_name = job
    from pimrt.memctl import load_part
    from pimrt.runtime import session
    from pimrt.runtime.timing import DEFAULT_GROUPS, contention_free_bound, time_step
    change, overrides, host = VARIANTS[variant]
    part = load_part(part_name, overrides)
    graph = session.captured(model, batch, size)
    session.preflight(graph, part, DEFAULT_GROUPS, "sgd", host)
    gpu = time_step(graph, "gpu_only", 1, part=part, host_part=host)
    serial = time_step(graph, "serial", 1, part=part, host_part=host)
    auth = time_step(graph, "authority", DEFAULT_GROUPS, part=part, host_part=host)
    bound = contention_free_bound(graph, DEFAULT_GROUPS, part, host)
    ms = part.timing["tCK"] * 1e-6
    return {"model": model, "input": size, "batch": batch, "variant": variant,
            "change": change, "gpu_only_ms": gpu.seconds * 1e3,
            "serial_ms": serial.seconds * 1e3, "authority_ms": auth.seconds * 1e3,
            "bound_ms": bound["step_ms"], "lower_bound_ms": bound["lower_bound_step_ms"],
            "speedup_vs_gpu_only": gpu.makespan / auth.makespan,
            "speedup_vs_serial": serial.makespan / auth.makespan,
            "step_vs_bound": auth.seconds * 1e3 / bound["step_ms"],
            "host_busy_ms": bound["host_busy_cycles"] * ms,
            "pim_busy_ms": bound["pim_busy_cycles"] * ms}


def run(args) -> int:
    from pimrt.errors import ConfigError
    from tqdm import tqdm
    variants = [v for v in args.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        raise ConfigError(f"unknown variants {bad}; choose from {', '.join(VARIANTS)}")
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}")
    jobs = [(m, int(i), args.batch, v, args.part) for i in args.inputs.split(",")
            for m in args.models.split(",") for v in variants]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "sensitivity.csv"
    rows = []
    with open(path, "w", newline="") as f, tqdm(total=len(jobs), unit="point",
                                                  disable=args.quiet or None,
                                                  file=sys.stderr) as bar:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()

        def done(row):
            rows.append(row)
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v)
                        for k, v in row.items()})
            f.flush()
            bar.update(1)
        if args.jobs == 1:
            for job in jobs:
                done(point(job))
        else:
            import multiprocessing
            with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
                for row in pool.imap(point, jobs):
                    done(row)
    print(table(rows))
    png = plot(rows, args.out / "sensitivity.png")
    print(f"wrote {path}, {png}")
    return 0


def table(rows: list[dict]) -> str:
    head = (f"{'model':<13}{'input':>6} {'variant':<20}{'gpu-only':>10}{'serial':>10}"
            f"{'authority':>10}{'bound':>10}{'vs gpu':>8}{'vs serial':>10}{'/bound':>8}"
            f"{'host':>9}{'pim':>9}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['model']:<13}{r['input']:>6} {r['variant']:<20}{r['gpu_only_ms']:>10.3f}"
                     f"{r['serial_ms']:>10.3f}{r['authority_ms']:>10.3f}{r['bound_ms']:>10.3f}"
                     f"{r['speedup_vs_gpu_only']:>8.3f}{r['speedup_vs_serial']:>10.3f}"
                     f"{r['step_vs_bound']:>8.3f}{r['host_busy_ms']:>9.3f}"
                     f"{r['pim_busy_ms']:>9.3f}")
    by: dict = {}
    for r in rows:
        by.setdefault((r["input"], r["variant"]), []).append(r)
    for (size, v), rs in by.items():
        n = len(rs)
        lines.append(f"{'mean':<13}{size:>6} {v:<20}{'':>40}"
                     f"{sum(r['speedup_vs_gpu_only'] for r in rs) / n:>8.3f}"
                     f"{sum(r['speedup_vs_serial'] for r in rs) / n:>10.3f}"
                     f"{sum(r['step_vs_bound'] for r in rs) / n:>8.3f}")
    return "\n".join(lines)


def plot(rows: list[dict], path: pathlib.Path) -> pathlib.Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = sorted({r["input"] for r in rows})
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(len(sizes), 2, figsize=(13, 3.6 * len(sizes)), squeeze=False)
    width = 0.8 / max(len(variants), 1)
    for i, size in enumerate(sizes):
        for j, (key, label) in enumerate((("speedup_vs_gpu_only", "speedup vs GPU-only"),
                                          ("speedup_vs_serial", "speedup vs serial host+PIM"))):
            ax = axes[i][j]
            for k, v in enumerate(variants):
                vals = [next((r[key] for r in rows if r["model"] == m and r["input"] == size
                              and r["variant"] == v), 0.0) for m in models]
                ax.bar([x + k * width for x in range(len(models))], vals, width, label=v)
            ax.axhline(1.0, color="black", lw=0.8)
            ax.set_xticks([x + width * (len(variants) - 1) / 2 for x in range(len(models))])
            ax.set_xticklabels(models, fontsize=8)
            ax.set_ylabel(label)
            ax.set_title(f"{size}x{size}, batch {rows[0]['batch']}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(variants), fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

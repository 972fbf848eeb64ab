"""`pimrt bench gradsa --curve D1,D2,... --seeds S1,S2,...`: test accuracy against density.

Every sparse compressor asked for (GradSA, DGC, ...) is trained at each density and seed, dense
once per seed, all with the same options otherwise (the runs of `pimrt bench gradsa`, one
folder each under --out: seed{S}/density{D}/NAME, dense under seed{S}/dense). The table gives
each compressor's mean and spread over the seeds at each density against dense's mean, its
ratio (and counted whole, with DDP's buffer broadcast), and the smallest density from which on
it stays within WITHIN points of dense; --json writes the rows, and a plot beside it
(accuracy against density, log scale, dense's mean as a band of +-WITHIN)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from pimrt.errors import PimrtError

WITHIN = 0.5        # points of test accuracy: "no loss" as the research claims it


def _values(text: str, what: str, kind) -> list:
    out = []
    for v in text.split(","):
        try:
            x = kind(v.strip())
        except ValueError:
            raise PimrtError(f"{what} must list numbers, got {v.strip()!r} in {text!r}") from None
        out.append(x)
    return out


def run_curve(args, names: list[str]) -> int:
    from pimrt.bench.gradsa import _run_all, measure_compute
    densities = _values(args.curve, "--curve", float)
    seeds = _values(args.seeds, "--seeds", int)
    bad = [d for d in densities if not 0 < d <= 1]
    if bad:
        raise PimrtError(f"--curve densities must be in (0, 1], got {bad}")
    sparse = [n for n in names if n not in ("dense", "fp16", "int8", "terngrad", "powersgd")]
    if not sparse:
        raise PimrtError("--curve needs a sparse compressor in --compressors (gradsa, dgc)")
    out = Path(args.out)
    t_compute = measure_compute(args)
    rows, failed = [], 0
    for seed in seeds:
        args.seed = seed
        print(f"== seed {seed}: dense", flush=True)
        got, bad_runs = _run_all(args, ["dense"], out / f"seed{seed}", t_compute, args.nproc)
        rows += [dict(r, seed=seed, density=1.0) for r in got]
        failed += bad_runs
        for d in densities:
            args.density = d
            print(f"== seed {seed}: density {d:g}", flush=True)
            got, bad_runs = _run_all(args, sparse, out / f"seed{seed}" / f"density{d:g}",
                                     t_compute, args.nproc)
            rows += [dict(r, seed=seed, density=d) for r in got]
            failed += bad_runs
    table = curve_table(rows, sparse, densities)
    print()
    print_curve(table, len(seeds))
    if args.json_file:
        path = Path(args.json_file)
        path.write_text(json.dumps({"settings": {k: v for k, v in vars(args).items() if k != "func"},
                                    "rows": rows, "curve": table}, indent=2, default=str))
        plot_curve(table, path.with_suffix(".png"))
        print(f"wrote {path} and {path.with_suffix('.png')}")
    return 1 if failed else 0


def _stats(accs: list[float]) -> tuple[float, float]:
    return statistics.mean(accs), statistics.stdev(accs) if len(accs) > 1 else 0.0


def curve_table(rows: list[dict], sparse: list[str], densities: list[float]) -> dict:
    """{"dense": {...}, NAME: [{density, mean, std, delta, ratio, ratio_whole, within}],
    NAME + "_within_from": the smallest density from which on every point is within}."""
    ok = [r for r in rows if "error" not in r and r.get("final_acc") is not None]
    dense = [100 * r["final_acc"] for r in ok if r["compressor"] == "dense"]
    out: dict = {}
    if not dense:
        return out
    dmean, dstd = _stats(dense)
    out["dense"] = {"mean": dmean, "std": dstd, "seeds": len(dense)}
    for name in sparse:
        points = []
        for d in sorted(densities):
            rs = [r for r in ok if r["compressor"] == name and r["density"] == d]
            if not rs:
                continue
            mean, std = _stats([100 * r["final_acc"] for r in rs])
            points.append({"density": d, "mean": mean, "std": std, "delta": mean - dmean,
                           "seeds": len(rs),
                           "ratio": statistics.mean(r["ratio"] for r in rs),
                           "ratio_whole": statistics.mean(r["ratio_whole"] for r in rs),
                           "within": mean >= dmean - WITHIN})
        out[name] = points
        start = None
        for p in reversed(points):          # the densest points first: where it stops holding
            if not p["within"]:
                break
            start = p["density"]
        out[name + "_within_from"] = start
    return out


def print_curve(table: dict, seeds: int) -> None:
    if "dense" not in table:
        print("no dense run finished: no curve")
        return
    d = table["dense"]
    print(f"dense: {d['mean']:.2f}% test accuracy (std {d['std']:.2f} over {d['seeds']} seed(s))")
    head = (f"{'compressor':<10} {'density':>8} {'acc %':>7} {'std':>5} {'vs dense':>9} "
            f"{'ratio':>8} {'whole':>8} {'within':>7}")
    print(head)
    print("-" * len(head))
    for name, points in table.items():
        if name == "dense" or name.endswith("_within_from"):
            continue
        for p in points:
            print(f"{name:<10} {p['density']:>8g} {p['mean']:>7.2f} {p['std']:>5.2f} "
                  f"{p['delta']:>+9.2f} {p['ratio']:>8.1f} {p['ratio_whole']:>8.1f} "
                  f"{'yes' if p['within'] else 'no':>7}")
    for name in table:
        if name.endswith("_within_from"):
            who, start = name[:-len("_within_from")], table[name]
            print(f"{who}: within {WITHIN} point of dense "
                  + (f"from density {start:g} up" if start is not None else "at no density tried")
                  + f" (mean of {seeds} seed(s))")


def plot_curve(table: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pimrt.output import atomic_savefig
    fig, ax = plt.subplots(figsize=(6, 4))
    if "dense" in table:
        m = table["dense"]["mean"]
        ax.axhspan(m - WITHIN, m + WITHIN, color="0.85", label=f"dense {m:.2f}% +-{WITHIN}")
    for name, points in table.items():
        if name == "dense" or name.endswith("_within_from") or not points:
            continue
        ax.errorbar([p["density"] for p in points], [p["mean"] for p in points],
                    yerr=[p["std"] for p in points], marker="o", capsize=3, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("density (share of each layer's gradient sent)")
    ax.set_ylabel("test accuracy %")
    ax.set_title("accuracy against density")
    ax.legend()
    fig.tight_layout()
    atomic_savefig(fig, path)
    plt.close(fig)

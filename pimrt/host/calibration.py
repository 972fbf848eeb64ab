"""The host model against measured kernels: DeepBench's V100 rows, the split into fitted and
held-out rows, the error statistics and the fit of a part's calibration parameters.

    rows = load_rows("fp32")                       # list[Row] (package data, pimrt/host/data)
    fit, held = split(rows)                        # by layer shape: every batch of one shape
                                                   # lands on the same side
    stats(rows, modelled_ms)                       # error factor, share within 25%, ...
    params = fit_part("v100", fit)                 # least squares on log(model / measured)

Rows are DeepBench's convolutions (forward, backward data, backward weight) and GEMMs (as linear
layers' forward). What is measured and how: pimrt/host/data/README.md; docs/host_model.md.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import pathlib
from typing import Iterable, Sequence

from pimrt.errors import ConfigError
from pimrt.host.gemm import ConvGeom
from pimrt.host.part import HostPart, load_host_part

DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"
#: the data sets: name -> (CSV prefix, the precision the kernels ran in)
DATASETS = {"fp32": "deepbench_v100_fp32", "fp16mixed": "deepbench_v100_fp16mixed"}
#: which data set measures a host part (by the part's name): parts without one are not
#: calibrated
PART_DATA = {"V100": "fp32", "V100-TC": "fp16mixed"}
PHASE_COLUMNS = (("forward", "fwd_ms"), ("backward_data", "bwd_data_ms"),
                 ("backward_weight", "bwd_weight_ms"))
CLASSES = ("1x1", "3x3 stride 1", "strided", "large filter", "depthwise", "gemm")
#: the parameters a fit sets: (table, key, low, high)
FIT_KEYS = (("compute", "efficiency", 0.05, 1.0), ("compute", "dgrad_efficiency", 0.05, 1.0),
            ("compute", "wgrad_efficiency", 0.05, 1.0), ("compute", "k_fill_steps", 0.0, 64.0),
            ("compute", "kernel_overhead_us", 0.0, 100.0),
            ("compute", "strided_dgrad_zero_cost", 0.0, 1.0),
            ("gemm", "tile_intensity", 0.0, 256.0), ("winograd", "efficiency", 0.05, 1.0),
            ("tensor_cores", "unaligned_efficiency", 0.001, 1.0))


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured kernel."""

    id: str             # "conv17/backward_data", "gemm3"
    app: str
    group: str          # the layer shape without its batch: the unit of the split
    geom: ConvGeom
    phase: str
    measured_ms: float
    algorithm: str      # cuDNN's forward algorithm as DeepBench reports it ("" for GEMMs)
    dtype_bytes: int = 4  # of the tensors in memory: 2 for the FP16-mixed rows

    @property
    def kind(self) -> str:
        return kernel_class(self.geom)


def kernel_class(g: ConvGeom) -> str:
    if g.kind == "linear":
        return "gemm"
    if g.groups > 1 and g.cin_g == 1:
        return "depthwise"
    if g.kh == g.kw == 1 and g.sh == g.sw == 1:
        return "1x1"
    if g.kh == g.kw == 3 and g.sh == g.sw == 1:
        return "3x3 stride 1"
    if max(g.kh, g.kw) >= 5:
        return "large filter"
    return "strided"


def data_for(part: HostPart) -> str:
    """The data set that measures ``part``; ConfigError when it has none."""
    try:
        return PART_DATA[part.name]
    except KeyError:
        raise ConfigError(f"host part {part.name!r} has no calibration data (measured kernels "
                          f"exist for {', '.join(PART_DATA)})") from None


def _csv(path: pathlib.Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load_rows(dataset: str = "fp32") -> list[Row]:
    """Every measured kernel of a data set ("fp32" or "fp16mixed")."""
    if dataset not in DATASETS:
        raise ConfigError(f"unknown calibration data set {dataset!r}; known: "
                          f"{', '.join(DATASETS)}")
    prefix = DATA_DIR / DATASETS[dataset]
    es = 2 if dataset == "fp16mixed" else 4
    rows = []
    for i, r in enumerate(_csv(prefix.with_name(prefix.name + "_conv.csv"))):
        w, h, c, n, k, s, rr = (int(r[x]) for x in ("W", "H", "C", "N", "K", "S", "R"))
        pw, ph, sw, sh = (int(r[x]) for x in ("pad_w", "pad_h", "stride_w", "stride_h"))
        wo, ho = (w + 2 * pw - s) // sw + 1, (h + 2 * ph - rr) // sh + 1
        g = ConvGeom(f"conv{i}", "conv", n, c, h, w, k, ho, wo, rr, s, sh, sw, ph, pw)
        group = f"{r['app']} {w}x{h}x{c} k{k} {s}x{rr} p{pw},{ph} s{sw},{sh}"
        # DeepBench's sheet spells two rows' algorithm "LICIT_PRECOMP_GEMM"
        algo = r["fwd_algorithm"].replace("LICIT_PRECOMP", "IMPLICIT_PRECOMP") \
            if r["fwd_algorithm"].startswith("LICIT") else r["fwd_algorithm"]
        for phase, col in PHASE_COLUMNS:
            if r[col]:
                rows.append(Row(f"conv{i}/{phase}", r["app"], group, g, phase, float(r[col]),
                                algo, es))
    for i, r in enumerate(_csv(prefix.with_name(prefix.name + "_gemm.csv"))):
        m, n, k = int(r["M"]), int(r["N"]), int(r["K"])
        # C (M x N) = A (M x K) B (K x N): a linear layer of K inputs, N outputs, batch M
        g = ConvGeom(f"gemm{i}", "linear", m, k, 1, 1, n, 1, 1)
        group = f"{r['app']} M{m} K{k} {r['a_transpose']}{r['b_transpose']}"
        rows.append(Row(f"gemm{i}", r["app"], group, g, "forward", float(r["ms"]), "", es))
    return rows


def load_host_times(path) -> tuple[list[Row], dict]:
    """The kernels of a file `pimrt host-times` wrote (measured on a CUDA GPU) as rows: each
    one's geometry as it ran (its images, its output channels and the whole conv groups they
    cover, pimrt.host.measure), its phase and measured time, its tensors in the file's
    precision; the unit of the split is the layer (all its phases, channel groups and batch
    slices on one side). -> (rows, the file's model, batch, input, precision and device)."""
    from pimrt.host.gemm import conv_geom
    from pimrt.host.measure import _sub_problem
    from pimrt.jsonfile import read_json
    from pimrt.runtime import host_times as ht
    from pimrt.runtime.session import captured
    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"--measured: no such file {path} (a JSON file pimrt host-times "
                          f"wrote)")
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected an object (format {ht.FORMAT})")
    model, shape = doc.get("model"), doc.get("input_shape")
    precision = doc.get("precision", "fp32")
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{path}: no \"model\": the kernels' layers are the model's, so "
                          f"their shapes need it (files pimrt host-times writes have it)")
    if not (isinstance(shape, list) and len(shape) == 4 and all(type(d) is int and d > 0
                                                                for d in shape)
            and shape[2] == shape[3]):
        raise ConfigError(f"{path}: input_shape {shape!r}, expected [batch, channels, side, "
                          f"side] (files pimrt host-times writes have it)")
    from pimrt.graph.precision import PRECISIONS
    if precision not in PRECISIONS:
        raise ConfigError(f"{path}: precision {precision!r}, expected one of "
                          f"{', '.join(PRECISIONS)}")
    graph = captured(model, shape[0], shape[2], precision=precision)
    times, fields = ht.load(path, graph)          # every other check, naming the entry
    es = 2 if precision != "fp32" else 4
    rows = []
    for (layer, phase, lo, hi, samples), ms in times.items():
        g = conv_geom(graph[layer], samples)
        cin, cout, groups = _sub_problem(g, lo, hi)
        geom = dataclasses.replace(g, name=f"{layer}[{lo}:{hi}]", cin=cin, cout=cout,
                                   groups=groups)
        rows.append(Row(f"{layer}[{lo}:{hi}]x{samples}/{phase}", model, f"{model} {layer}",
                        geom, phase, float(ms), "", es))
    info = {"model": model, "batch": shape[0], "input": shape[2], "precision": precision,
            "device": fields.get("device", "a device the file does not name"),
            "file": path.name}
    return rows, info


def split(rows: Sequence[Row]) -> tuple[list[Row], list[Row]]:
    """(fitted, held out): the layer shapes (rows without their batch) in the data's order,
    alternately; all batches of a shape and all its phases land on the same side."""
    order: dict[str, int] = {}
    for r in rows:
        order.setdefault(r.group, len(order))
    fit = [r for r in rows if order[r.group] % 2 == 0]
    held = [r for r in rows if order[r.group] % 2 == 1]
    return fit, held


def error_factor(ratios: Iterable[float]) -> float:
    """Geometric mean of max(r, 1/r): 1.0 is exact, 1.15 is 15% off on the geometric mean."""
    rs = list(ratios)
    return math.exp(sum(abs(math.log(r)) for r in rs) / len(rs)) if rs else float("nan")


def stats(ratios: Sequence[float]) -> dict:
    """Error factor, share within +-25%, the extremes, of model / measured ratios."""
    rs = list(ratios)
    return {"kernels": len(rs), "error_factor": error_factor(rs),
            "within_25pct": sum(0.75 <= r <= 1.25 for r in rs) / len(rs) if rs else float("nan"),
            "min_ratio": min(rs) if rs else float("nan"),
            "max_ratio": max(rs) if rs else float("nan")}


# ---- the fit (on a fast stand-in for the memory: bytes / streaming bandwidth) -----------------

def tensors_for(work, dtype_bytes: int = 4, align: int = 1 << 20) -> dict:
    """The tensors of a kernel one after another in memory (each at a 1 MiB boundary), for its
    request stream alone."""
    g = work.geom
    if g.kind == "linear":
        x, y, w = (g.n, g.cin), (g.n, g.cout), (g.cout, g.cin)
    else:
        x, y, w = g.input_shape, g.output_shape, g.weight_shape
    shapes = {"input": x, "grad_input": x, "output": y, "grad_output": y, "weight": w,
              "grad_weight": w}
    out, base = {}, 0
    for role, shape in shapes.items():
        out[role] = (base, shape, dtype_bytes)
        base += -(-math.prod(shape) * dtype_bytes // align) * align
    return out


#: kernels whose compulsory traffic is above this many requests are timed with their bytes at
#: the streaming bandwidth, not through memctl (DeepBench's large GEMMs: up to 35 M requests
#: compulsory and far more with L2 re-reads; all of them compute-bound)
MEMCTL_MAX_REQUESTS = 4_000_000


def compulsory_bytes(row: Row) -> int:
    """Every operand read and the output written once."""
    g = row.geom
    return row.dtype_bytes * (g.n * g.cin * g.h * g.w + g.n * g.cout * g.ho * g.wo
                              + g.cout * g.cin_g * g.taps)


def through_memctl(row: Row, request_bytes: int = 64) -> bool:
    return compulsory_bytes(row) <= MEMCTL_MAX_REQUESTS * request_bytes


def dram_bytes(rows: Sequence[Row], part: HostPart, request_bytes: int = 64) -> dict[str, int]:
    """Each row's DRAM bytes: its request stream's (the host's L2 model,
    :mod:`pimrt.host.traffic`), or its compulsory bytes for a kernel too large for memctl."""
    from pimrt.host.work import HostWork
    out = {}
    for r in rows:
        if not through_memctl(r, request_bytes):
            out[r.id] = compulsory_bytes(r)
            continue
        w = HostWork(r.geom, None, r.phase, part=part)
        out[r.id] = request_bytes * sum(len(b) for b in w.iter_requests(
            tensors_for(w, r.dtype_bytes), request_bytes))
    return out


def surrogate_ms(rows: Sequence[Row], part: HostPart, nbytes: dict[str, int]) -> dict[str, float]:
    """The kernel alone without memctl: overhead + max(compute, bytes at the streaming
    bandwidth): what the fit minimises on (pimrt bench host reports memctl's times)."""
    from pimrt.host.algorithm import kernel_time
    out = {}
    for r in rows:
        kt = kernel_time(r.geom, r.phase, (0, r.geom.cout), part)
        mem = nbytes[r.id] / part.stream_bytes_per_s
        out[r.id] = (kt.overhead_s + max(kt.compute_s, mem)) * 1e3
    return out


def fit_part(part: str | HostPart, rows: Sequence[Row], keys=FIT_KEYS,
             nbytes: dict[str, int] | None = None, max_rounds: int = 6) -> dict:
    """The part's calibration ``keys`` that minimise the mean |log(model / measured)| over
    ``rows`` (scipy's Nelder-Mead, restarted); -> {"table.key": value}. Keys of a table the
    part lacks are left out."""
    from scipy.optimize import minimize
    base = load_host_part(part)
    keys = [k for k in keys if (k[0] != "winograd" or base.winograd_tile)
            and (k[0] != "tensor_cores" or base.channel_multiple > 1)]
    nbytes = nbytes if nbytes is not None else dram_bytes(rows, base)
    current = base.to_dict()
    names = {("compute", "efficiency"): "efficiency", ("winograd", "efficiency"):
             "winograd_efficiency"}   # the others: the key is the HostPart field

    def value(t, k):
        return current[names.get((t, k), k)]

    def part_at(x):
        over: dict = {}
        for (t, k, _, _), v in zip(keys, x):
            over.setdefault(t, {})[k] = float(v)
        return load_host_part(base, over)

    def residuals(x):
        p = part_at(x)
        model = surrogate_ms(rows, p, nbytes)
        return [math.log(model[r.id] / r.measured_ms) for r in rows]

    x0 = [min(max(value(t, k), lo), hi) for t, k, lo, hi in keys]
    lo, hi = [k[2] for k in keys], [k[3] for k in keys]

    def cost(x):    # the error factor's log: mean |log(model / measured)|
        x = [min(max(v, a), b) for v, a, b in zip(x, lo, hi)]
        return sum(abs(e) for e in residuals(x)) / len(rows)
    # the model is piecewise (tiles, waves, the algorithm chosen): a simplex search, restarted
    # from its own result until it stops improving
    x, best = x0, cost(x0)
    for _ in range(max_rounds):
        res = minimize(cost, x, method="Nelder-Mead",
                       options={"xatol": 1e-3, "fatol": 1e-5, "maxfev": 400 * len(keys)})
        if res.fun >= best - 1e-6:
            break
        x, best = list(res.x), res.fun
    x = [min(max(v, a), b) for v, a, b in zip(x, lo, hi)]
    return {f"{t}.{k}": float(v) for (t, k, _, _), v in zip(keys, x)}


# ---- each kernel alone as the runtime times it ----------------------------------------------

def request_bytes(memory_part) -> int:
    from pimrt.memctl.config import load_part
    p = load_part(memory_part) if isinstance(memory_part, str) else memory_part
    return p.request_bytes


def memctl_ms(row: Row, part: HostPart, memory_part, requests: int | None = None) -> float:
    """The kernel alone on ``memory_part`` as the runtime times a host task: its fixed cost,
    then its request stream with the compute between, through memctl (the host's queue as
    deep as Little's law gives, its front end as wide as the part's peak)."""
    from pimrt.host.work import HostWork
    from pimrt.memctl import Controller, Options
    from pimrt.memctl.config import load_part
    from pimrt.runtime.timing import _run, peak_issue_width, with_host_buffering
    from pimrt.runtime.work import kernel_records
    mem = load_part(memory_part) if isinstance(memory_part, str) else memory_part
    mem = with_host_buffering(mem, part)
    work = HostWork(row.geom, None, row.phase, part=part)
    ctl = Controller(mem, Options(policy="serial", issue_width=peak_issue_width(mem)))
    _run(ctl, kernel_records(work, tensors_for(work, row.dtype_bytes), mem.timing["tCK"],
                             mem.request_bytes, requests))
    return int(ctl.events()[0, 1]) * mem.timing["tCK"] * 1e-6     # when SIGNAL 0 fired


def modelled_ms(rows: Sequence[Row], part: HostPart, memory_part="v100_hbm2_pim",
                fast: bool = False, progress: bool = True) -> dict[str, float]:
    """Each row's modelled time: through memctl (kernels up to MEMCTL_MAX_REQUESTS
    compulsory requests), else (or with fast) bytes at the streaming bandwidth."""
    rb = request_bytes(memory_part)
    nbytes = dram_bytes(rows, part, rb)
    out = surrogate_ms(rows, part, nbytes)
    if fast:
        return out
    from tqdm import tqdm
    small = [r for r in rows if through_memctl(r, rb)]
    for r in tqdm(small, desc="kernels through memctl", unit="kernel", disable=not progress,
                  leave=False):
        out[r.id] = memctl_ms(r, part, memory_part, nbytes[r.id] // rb)
    return out


def report(rows: Sequence[Row], fit: Sequence[Row], held: Sequence[Row],
           model: dict[str, float], worst: int = 5, request_bytes: int = 64) -> dict:
    """Statistics of model / measured: all, fitted and held-out rows, per phase and per class
    (each split too), and the worst rows each way."""
    def ratios(rs):
        return [model[r.id] / r.measured_ms for r in rs]

    out: dict = {"all": stats(ratios(rows)), "fitted": stats(ratios(fit)),
                 "held_out": stats(ratios(held)), "by_phase": {}, "by_class": {}}
    for label, key in (("by_phase", lambda r: "gemm" if r.kind == "gemm" else r.phase),
                       ("by_class", lambda r: r.kind)):
        groups: dict = {}
        for name, rs in (("all", rows), ("fitted", fit), ("held_out", held)):
            for r in rs:
                groups.setdefault(key(r), {}).setdefault(name, []).append(r)
        out[label] = {k: {name: stats(ratios(v.get(name, []))) for name in
                          ("all", "fitted", "held_out")} for k, v in groups.items()}
    held_ids = {r.id for r in held}
    ranked = sorted(rows, key=lambda r: model[r.id] / r.measured_ms)

    def row(r):
        return {"id": r.id, "app": r.app, "shape": r.group, "phase": r.phase, "class": r.kind,
                "measured_ms": r.measured_ms, "modelled_ms": model[r.id],
                "ratio": model[r.id] / r.measured_ms, "held_out": r.id in held_ids,
                "memory": "memctl" if through_memctl(r, request_bytes) else "bytes",
                "cudnn_algorithm": r.algorithm}
    out["fastest"] = [row(r) for r in ranked[:worst]]
    out["slowest"] = [row(r) for r in ranked[::-1][:worst]]
    out["rows"] = [row(r) for r in rows]
    return out


def format_report(res: dict) -> str:
    def line(label, s):
        if not s["kernels"]:
            return f"{label:<34}{0:>5}"
        return (f"{label:<34}{s['kernels']:>5}{s['error_factor']:>9.3f}"
                f"{100 * s['within_25pct']:>9.0f}%{s['min_ratio']:>9.2f}{s['max_ratio']:>9.2f}")
    head = f"{'':<34}{'n':>5}{'err x':>9}{'<=25%':>10}{'min':>9}{'max':>9}"
    out = [f"model / measured (memory: {res['memory']})", head]
    for name in ("all", "fitted", "held_out"):
        out.append(line(name.replace("_", " "), res[name]))
    for label in ("by_phase", "by_class"):
        out.append(f"{label.replace('_', ' ')}: all (fitted / held-out error factor)")
        for k, v in res[label].items():
            extra = "  (" + " / ".join(f"{v[n]['error_factor']:.3f}" if v[n]["kernels"] else "-"
                                       for n in ("fitted", "held_out")) + ")"
            out.append(line(f"  {k}", v["all"]) + extra)
    for what in ("fastest", "slowest"):
        out.append(f"modelled {'too fast' if what == 'fastest' else 'too slow'}:")
        for r in res[what]:
            out.append(f"  {r['ratio']:6.2f}x {r['id']:<28}{r['shape']:<40} measured "
                       f"{r['measured_ms']:.3f} ms, modelled {r['modelled_ms']:.3f} ms"
                       f"{' (held out)' if r['held_out'] else ''}")
    return "\n".join(out)


def plot(rows: Sequence[Row], fit: Sequence[Row], model: dict[str, float], path, title: str):
    """Modelled against measured, log-log, one point per kernel, by phase; the fitted rows
    filled, the held-out ones hollow; the diagonal and +-25%."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pimrt.output import atomic_savefig
    fit_ids = {r.id for r in fit}
    fig, ax = plt.subplots(figsize=(6.5, 6), constrained_layout=True)
    colours = {"forward": "tab:blue", "backward_data": "tab:orange",
               "backward_weight": "tab:green", "gemm": "tab:purple"}
    for key, colour in colours.items():
        for fitted in (True, False):
            rs = [r for r in rows if (("gemm" if r.kind == "gemm" else r.phase) == key)
                  and ((r.id in fit_ids) == fitted)]
            if rs:
                ax.scatter([r.measured_ms for r in rs], [model[r.id] for r in rs], s=14,
                           facecolors=colour if fitted else "none", edgecolors=colour,
                           label=f"{key.replace('_', ' ')} ({'fitted' if fitted else 'held out'})")
    lo = min(min(r.measured_ms for r in rows), min(model.values())) * 0.8
    hi = max(max(r.measured_ms for r in rows), max(model.values())) * 1.25
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    for f in (0.75, 1.25):
        ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured ms",
           ylabel="modelled ms", title=title)
    ax.legend(fontsize=7, loc="upper left")
    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)

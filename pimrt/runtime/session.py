"""What `pimrt run` and `pimrt compare` share: build and capture a model, check everything that
can fail before the long work, time it under policies."""
from __future__ import annotations

import pathlib
import sys
import warnings

from pimrt.errors import ConfigError
from pimrt.graph import capture
from pimrt.graph.errors import UnsupportedOpError, UnsupportedOpWarning
from pimrt.memctl import load_part
from pimrt.runtime.placement import place_step
from pimrt.runtime.schedule import build_schedule
from pimrt.runtime.timing import contention_free_bound, slices_for, step_part, time_step

DEFAULT_PART = "v100_hbm2_pim"   # the V100's own four HBM2 stacks with PIM units
DEFAULT_HOST_PART = "v100"


#: the host part a precision runs on when none is given: the V100 (fp32), its Tensor Cores
#: (amp-fp16); bf16 needs Ampere's Tensor Cores (a100_tc)
DEFAULT_HOST_PARTS = {"fp32": "v100", "amp-fp16": "v100_tc", "amp-bf16": "a100_tc"}


#: the memory part a host part runs on when none is given: its GPU's own memory with PIM
#: units (a host part given as a file: the V100's)
DEFAULT_PARTS = {"v100": "v100_hbm2_pim", "v100_tc": "v100_hbm2_pim",
                 "a100": "a100_hbm2_pim", "a100_tc": "a100_hbm2_pim"}


def part_for(host_part: str, part: str | None) -> str:
    """--part, or the default memory part of --host-part (after host_part_for)."""
    return part if part is not None else DEFAULT_PARTS.get(str(host_part), DEFAULT_PART)


def system_for(precision: str, host_part: str | None, part: str | None) -> tuple[str, str]:
    """--host-part and --part as given or by default (the precision's host part, its own
    memory), checked to run the precision (check_precision) -> (host_part, part)."""
    host_part = host_part_for(precision, host_part)
    part = part_for(host_part, part)
    check_precision(precision, part, host_part)
    return host_part, part


def host_part_for(precision: str, host_part: str | None) -> str:
    """--host-part, or the default host part of --precision."""
    from pimrt.graph.precision import check
    return host_part if host_part is not None else DEFAULT_HOST_PARTS[check(precision)]


def check_precision(precision: str, part, host_part) -> None:
    """A precision the system cannot run: the host part's CONVs not calibrated for it
    ([compute] precisions) or the PIM's lanes without its 16-bit dtype ([pim] dtypes); one
    line naming the part and the key, before any work."""
    from pimrt.graph.precision import PART_DTYPE, check
    from pimrt.host import load_host_part
    check(precision)
    hp = load_host_part(host_part)
    if precision not in hp.precisions:
        raise ConfigError(f"host part {hp.name} ({hp.path or host_part}) cannot run "
                          f"--precision {precision}: its [compute] precisions = "
                          f"{list(hp.precisions)} (default host parts: "
                          f"{', '.join(f'{k}: {v}' for k, v in DEFAULT_HOST_PARTS.items())})")
    p = load_part(part) if isinstance(part, (str, pathlib.Path)) else part
    lanes = PART_DTYPE.get(precision)
    if lanes is not None and p.pim is not None and lanes not in p.pim["dtypes"]:
        raise ConfigError(f"memory part {p.name} ({p.path or part}) cannot run --precision "
                          f"{precision}: its PIM lanes compute [pim] dtypes = "
                          f"{list(p.pim['dtypes'])}, without {lanes}")


def captured(model: str, batch: int, input_size: int, allow_unsupported: bool = False,
             precision: str = "fp32"):
    """The layer graph of zoo model `model` (or a user's FILE.py:NAME / module:NAME) at this
    batch and input size, its tensors in `precision`'s dtypes (pimrt.graph.precision); ops
    pimrt does not capture are refused, or with `allow_unsupported` run on the host with a
    warning."""
    from pimrt.graph.precision import autocast, check
    check(precision)
    from pimrt import zoo
    if batch < 1:
        raise ConfigError(f"--batch must be >= 1, got {batch}")
    if input_size < 8:
        raise ConfigError(f"--input must be >= 8, got {input_size}")
    net = zoo.build(model, input_size=input_size, device="meta")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnsupportedOpWarning)
        try:
            graph = capture(net, (batch, 3, input_size, input_size), name=model,
                            allow_unsupported=allow_unsupported)
        except UnsupportedOpError as exc:
            raise UnsupportedOpError(
                str(exc).replace("Pass allow_unsupported=True", "Pass --allow-unsupported"),
                exc.node, exc.target, exc.module_path, exc.others) from None
    for w in caught:                       # one line each on stderr, without a source line
        if issubclass(w.category, UnsupportedOpWarning):
            print(f"warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return autocast(graph, precision)


def folder_names(models: list[str]) -> dict[str, str]:
    """Each model's output folder in `pimrt compare`: a zoo name as it is, a user's
    path/to/nets.py:NAME as nets.NAME and module:NAME as module.NAME; a name that comes twice
    gets -2, -3, ..."""
    out, used = {}, set()
    for m in models:
        where, _, attr = m.rpartition(":")
        base = f"{pathlib.Path(where).stem if where.endswith('.py') else where}.{attr}" \
            if where else m
        name, k = base, 1
        while name in used:
            k += 1
            name = f"{base}-{k}"
        used.add(name)
        out[m] = name
    return out


def preflight(graph, part: str, groups: int, exchange: str = "sgd",
              host_part: str | None = None, slices: int | None = None) -> None:
    """Errors a run would hit, found before any simulation: a host part that does not load, a
    memory part without PIM units, a precision (the graph's) the parts cannot run, groups or
    slices that do not divide, tensors that do not fit the memory."""
    from pimrt.graph.precision import of
    from pimrt.host import load_host_part
    from pimrt.runtime.timing import require_pim
    if host_part is not None:
        load_host_part(host_part)
    p = load_part(part) if isinstance(part, (str, pathlib.Path)) else part
    require_pim(p)
    if host_part is not None:
        check_precision(of(graph), p, host_part)
    build_schedule(graph, groups, exchange=exchange, slices=slices_for(graph.batch, slices))
    place_step(graph, p, exchange)


def timed(graph, policy: str, groups: int, part: str, host_part: str, quiet: bool = False,
          desc: str = "", layrub: bool = False, exchange=None, plan: bool = True,
          host_times=None, slices: int | None = None, authority_rule: str | None = None,
          sink=None):
    """time_step with a progress bar; sink: writes the step's stream (pimrt.trace.step)."""
    from tqdm import tqdm
    bar = tqdm(unit="rec", unit_scale=True, desc=desc or policy, disable=quiet or None,
               file=sys.stderr, leave=False)
    try:
        return time_step(graph, policy, groups, part=part, host_part=host_part,
                         progress=bar.update, layrub=layrub, exchange=exchange, plan=plan,
                         host_times=host_times, slices=slices, sink=sink,
                         **({"authority_rule": authority_rule} if authority_rule else {}))
    finally:
        bar.close()


def host_times(graph, spec: str, groups: int, part: str, host_part: str,
               exchange: str = "sgd", pipelined: bool = True, save_to=None,
               quiet: bool = False, meta: dict | None = None, slices: int | None = None):
    """`--host-times`: the host kernel times a run uses, and what to report about them.
    "model": None (the host part's model). "measure": every kernel the run needs timed on
    the CUDA GPU, written to `save_to`. Anything else: a JSON file of times (as "measure"
    writes it), checked against the model and the run. Errors come before any simulation."""
    from pimrt.graph.precision import of as graph_precision
    from pimrt.runtime import host_times as ht
    from pimrt.runtime.timing import group_rule, slice_rule, step_part
    if spec == "model":
        return None, {"source": "model", "host_part": str(host_part)}
    p = step_part(part, host_part)
    slices = slices_for(graph.batch, slices)
    count = group_rule(p, host_part, groups) if pipelined else None
    wanted = ht.step_kernels(graph, groups, count, exchange, pipelined, slices,
                             slice_rule(p, slices, host_part, groups))
    if spec != "measure":
        if pathlib.Path(spec).is_dir():           # the --out folder of a measuring run
            spec = str(pathlib.Path(spec) / "host_times.json")
        times, fields = ht.load(spec, graph)
        ht.check_covers(times, wanted, spec)
        return times, {"source": "file", "path": str(spec), "kernels": len(wanted),
                       "precision": graph_precision(graph),
                       **{k: fields[k] for k in ("device", "torch") if k in fields}}
    import torch
    try:
        from tqdm import tqdm
    except ImportError:       # a bare GPU machine measuring for replay elsewhere: no bar
        times = ht.measure(graph, wanted)
    else:
        with tqdm(total=len(wanted), unit="kernel", desc="measuring host kernels",
                  disable=quiet or None, file=sys.stderr, leave=False) as bar:
            times = ht.measure(graph, wanted, progress=bar.update)
    info = {"source": "measured", "device": ht.device_name(), "torch": torch.__version__,
            "kernels": len(wanted), "precision": graph_precision(graph)}
    if save_to is not None:
        ht.save(save_to, times, {"model": graph.model_name, "batch": graph.batch,
                                 "input_shape": list(graph.input_shape), **(meta or {}),
                                 "precision": info["precision"], "device": info["device"],
                                 "torch": info["torch"],
                                 # fp32 CONVs and matmuls in TF32 where torch allows it
                                 "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                                 "matmul_allow_tf32": bool(
                                     torch.backends.cuda.matmul.allow_tf32)})
        info["path"] = str(save_to)
    return times, info



def system(part: str, host_part: str) -> dict:
    """What a step runs on, for summary.json and the reports: the memory part (name,
    channels, peak GB/s, PIM units, lanes, clock) and the host part (name, peak)."""
    from pimrt.host import load_host_part
    p, hp = step_part(part, host_part), load_host_part(host_part)
    units = p.pim["units_per_bankgroup"] * p.org["bankgroups"] * p.org["ranks"]
    return {
        "memory": {"name": p.name, "file": str(p.path), "channels": p.channel_count,
                   "peak_gbs": round(p.peak_bandwidth_gbs, 3),
                   "clock_mhz": round(1000 / p.timing["tCK"], 3),
                   "capacity_gib": p.capacity_bytes / 2**30,
                   "pim_units": units * p.channel_count,
                   "pim_banks_per_unit": p.pim_banks_per_unit,
                   "pim_lanes": p.pim["lanes"],
                   "pim_clock_mhz": round(p.pim["clock_mhz"], 3),
                   "pim_clock_ratio": round(p.pim["clock_ratio"], 6),
                   "host_outstanding_requests": hp.outstanding(p)},
        "host": {"name": hp.name, "file": str(hp.path), "peak_tflops": hp.peak_tflops,
                 "loaded_latency_ns": hp.loaded_latency_ns},
    }


def baselines(graph, groups: int, part: str, host_part: str, quiet: bool = False,
              desc: str = "", layrub: bool = False, exchange=None, plan: bool = True,
              host_times=None, slices: int | None = None, gpu_sink=None) -> tuple:
    """The step's other yardsticks on the same system: GPU-only execution (every op on the
    host) and the co-execution schedule's contention-free bound (with the lower bound
    max(host work alone, PIM work alone)). -> (gpu_only StepTiming, bound dict). gpu_sink:
    writes the GPU-only step's requests (pimrt.trace.host_export)."""
    from tqdm import tqdm
    gpu = timed(graph, "gpu_only", 1, part, host_part, quiet, f"{desc} gpu_only".strip(),
                layrub, exchange, host_times=host_times, sink=gpu_sink)
    bar = tqdm(unit="rec", unit_scale=True, desc=f"{desc} bound".strip(),
               disable=quiet or None, file=sys.stderr, leave=False)
    try:
        bound = contention_free_bound(graph, groups, part, host_part, progress=bar.update,
                                      plan=plan, host_times=host_times, slices=slices,
                                      exchange=exchange, layrub=layrub)
    finally:
        bar.close()
    return gpu, bound

"""Measured host kernel times for a step (`pimrt run --host-times measure | FILE`).

By default each host CONV/linear task's compute comes from the host part's model
(pimrt.host, the V100 preset). With a CUDA GPU the runtime can time the real kernels instead:
every (layer, phase, output-channel group, samples) the step's schedules run, the serial
baseline's whole layers and the pipelined run's groups and batch slices (`kernels`), is timed by
pimrt.host.measure_compute_ms (`measure`). The times replace the modelled compute of those
tasks; their DRAM requests still go through memctl, so a task takes about max(measured
compute, its memory time under contention).

Each kernel runs in the dtype the step's precision gives its layer (`kernel_dtype`): fp32,
or under amp-fp16 / amp-bf16 in float16 / bfloat16, as torch's autocast runs CONV and linear
layers (on the GPU's Tensor Cores where it has them). The file says which (`"precision"`; a
file without it was measured in fp32, as every file before it was).

The times are written as JSON (`save`) and can be replayed on any machine (`load`):
measure once on a GPU, simulate anywhere. A file that is malformed, was measured at another
batch or in another precision, names a layer the model does not have or lacks a kernel the
run needs is refused before any simulation, with what and where.

    {"format": "pimrt-host-times/1", "model": "resnet18", "batch": 32,
     "input_shape": [32, 3, 32, 32], "precision": "fp32", "device": "NVIDIA H200",
     "torch": "2.13.0",
     "kernels": [{"layer": "conv1", "phase": "forward", "channels": [0, 32], "samples": 32,
                  "ms": 0.0213}, ...]}

"samples" (how many images the kernel runs on: the batch, or one batch slice of the forward
pass) may be left out and is then the batch.
"""
from __future__ import annotations

import json
import math
import pathlib
from typing import Callable, Iterable

from pimrt.errors import ConfigError
from pimrt.graph import LayerGraph, precision
from pimrt.host import cuda_available, measure_compute_ms
from pimrt.host.gemm import PHASES
from pimrt.runtime.schedule import Schedule, build_schedule
from pimrt.runtime.work import host_kernel

FORMAT = "pimrt-host-times/1"
Kernel = tuple  # (layer, phase, lo, hi, samples)


def kernels(schedules: Iterable[Schedule], graph: LayerGraph) -> list[Kernel]:
    """The host CONV/linear kernels the schedules run, each once, in first-use order."""
    seen: dict[Kernel, None] = {}
    for s in schedules:
        for t in s.tasks:
            k = host_kernel(t, graph)
            if k is not None:
                seen.setdefault(k, None)
    return list(seen)


def step_kernels(graph: LayerGraph, groups: int, group_count, exchange: str = "sgd",
                 pipelined: bool = True, slices: int = 1, slice_rule=None) -> list:
    """The kernels of a serial step and, with `pipelined`, of a pipelined one with `groups`
    (each CONV split as group_count says) and its forward pass by `slices` batch slices
    where slice_rule says: what `pimrt run` and `pimrt compare` time. Moving weight
    gradients (pimrt.runtime.plan) changes where tasks run, not which."""
    schedules = [build_schedule(graph, 1, pipelined=False, exchange=exchange)]
    if pipelined:
        schedules.append(build_schedule(graph, groups, pipelined=True, group_count=group_count,
                                        exchange=exchange, slices=slices,
                                        slice_rule=slice_rule))
    return kernels(schedules, graph)


def device_name(device="cuda") -> str:
    import torch
    return torch.cuda.get_device_name(torch.device(device))


def require_cuda(device="cuda", what: str = "--host-times measure",
                 precision_name: str = "fp32") -> None:
    """Measuring needs a CUDA GPU, and under amp-bf16 one with bfloat16 arithmetic; say so
    before any work."""
    if not str(device).startswith("cuda") or not cuda_available():
        raise ConfigError(
            f"{what} times the host kernels on a CUDA GPU, and torch sees none here "
            f"(torch.cuda.is_available() is False); use the model (--host-times model) or "
            f"replay times measured on a GPU machine (pimrt host-times there, then "
            f"--host-times FILE.json here)")
    if precision.low_dtype(precision_name) == "bfloat16" and not bf16_supported(device):
        raise ConfigError(
            f"{what} --precision {precision_name} times the host kernels in bfloat16, and "
            f"{device_name(device)} has no bfloat16 arithmetic (torch.cuda.is_bf16_supported() "
            f"is False: bfloat16 needs an Ampere or later GPU); time them on such a GPU, or "
            f"use amp-fp16")


def bf16_supported(device="cuda") -> bool:
    import torch
    with torch.cuda.device(torch.device(device)):
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))


def kernel_dtype(name: str):
    """The torch dtype a host CONV/linear kernel computes in under precision `name`: autocast puts
    CONV and linear on its lower-precision list, so float16 / bfloat16 under AMP."""
    import torch
    return getattr(torch, precision.low_dtype(name) or "float32")


def measure(graph: LayerGraph, wanted: list[Kernel], device="cuda",
            progress: Callable[[int], None] | None = None, warmup: int = 3,
            repeats: int = 10) -> dict[Kernel, float]:
    """Time each kernel on the GPU (the median of `repeats` after `warmup` runs), in the
    dtype the graph's precision gives it (`kernel_dtype`)."""
    require_cuda(device, precision_name=precision.of(graph))
    dtype = kernel_dtype(precision.of(graph))
    out = {}
    for layer, phase, lo, hi, samples in wanted:
        try:
            ms = measure_compute_ms(graph[layer], samples, phase, (lo, hi), device,
                                    warmup=warmup, repeats=repeats, dtype=dtype)
        except RuntimeError as e:            # out of memory, a kernel cuDNN cannot run, ...
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(f"could not time {layer} {phase} channels {lo}..{hi} on "
                              f"{samples} images in {str(dtype).replace('torch.', '')} on "
                              f"{device}: {type(e).__name__}: {why}") from None
        if ms is None:                       # the GPU went away between the check and here
            raise ConfigError(f"could not time {layer} {phase} channels {lo}..{hi} on "
                              f"{device}: torch sees no CUDA GPU")
        out[(layer, phase, lo, hi, samples)] = float(ms)
        if progress:
            progress(1)
    return out


def save(path, times: dict[Kernel, float], meta: dict) -> pathlib.Path:
    """Write the times as JSON (meta: model, batch, input, device, torch, ...)."""
    path = pathlib.Path(path)
    head = {"format": FORMAT, **meta}
    lines = [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    rows = [json.dumps({"layer": k[0], "phase": k[1], "channels": [k[2], k[3]],
                        "samples": k[4], "ms": ms}) for k, ms in times.items()]
    from pimrt.output import atomic_write_text
    atomic_write_text(path, "{\n" + "\n".join(lines) + '\n "kernels": [\n  '
                      + ",\n  ".join(rows) + "\n ]\n}\n")     # one kernel a line
    return path


#: the longest kernel time a file may give (ms): one kernel of a training step; beyond it the
#: compute cycles leave what the DELAY records of the memory model hold
MAX_MS = 1e4


def load(path, graph: LayerGraph) -> tuple[dict[Kernel, float], dict]:
    """The times in a file written by `save` (or by hand), checked against the model:
    (times, the file's other fields)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"--host-times: no such file {path} (give 'model', 'measure' or a "
                          f"JSON file written by a measuring run)")
    from pimrt.jsonfile import read_json
    doc = read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("kernels"), list):
        raise ConfigError(f"{path}: expected an object with a 'kernels' list "
                          f"(format {FORMAT})")
    if doc.get("format", FORMAT) != FORMAT:
        raise ConfigError(f"{path}: format {doc['format']!r}, this pimrt reads {FORMAT!r}")
    batch, shape = doc.get("batch"), doc.get("input_shape")
    if batch is not None and type(batch) is not int:
        raise ConfigError(f"{path}: batch {batch!r}, expected an integer ({graph.batch})")
    if batch is not None and batch != graph.batch:
        raise ConfigError(f"{path}: measured at batch {batch}, this run is at batch "
                          f"{graph.batch}; kernel times do not carry over between batches")
    if shape is not None and not (isinstance(shape, list) and all(type(d) is int for d in shape)):
        raise ConfigError(f"{path}: input_shape {shape!r}, expected a list of integers such as "
                          f"{list(graph.input_shape)}")
    if shape is not None and list(shape) != list(graph.input_shape):
        raise ConfigError(f"{path}: measured with input {list(shape)}, this run's input is "
                          f"{list(graph.input_shape)}")
    given, run_precision = doc.get("precision", "fp32"), precision.of(graph)
    if given != run_precision:
        if not isinstance(given, str) or given not in precision.PRECISIONS:
            raise ConfigError(f"{path}: precision {given!r}, expected one of "
                              f"{', '.join(precision.PRECISIONS)}")
        raise ConfigError(f"{path}: kernels timed in {given} (its \"precision\""
                          + ("" if "precision" in doc else ", absent: fp32") + f"), this run "
                          f"is {run_precision}; kernel times do not carry over between "
                          f"precisions: measure them with pimrt host-times --precision "
                          f"{run_precision}")
    model = doc.get("model")
    if model is not None and graph.model_name and model != graph.model_name:
        raise ConfigError(f"{path}: measured on model {model!r}, this run is "
                          f"{graph.model_name!r}")
    times: dict[Kernel, float] = {}
    first: dict[Kernel, int] = {}
    for i, rec in enumerate(doc["kernels"]):
        where = f"{path}: kernels[{i}]"
        if not isinstance(rec, dict):
            raise ConfigError(f"{where}: expected an object with layer, phase, channels, ms")
        missing = [f for f in ("layer", "phase", "channels", "ms") if f not in rec]
        if missing:
            raise ConfigError(f"{where}: missing {', '.join(missing)}")
        layer, phase, ch, ms = rec["layer"], rec["phase"], rec["channels"], rec["ms"]
        if not isinstance(layer, str) or layer not in graph \
                or graph[layer].kind not in ("conv", "linear"):
            raise ConfigError(f"{where}: {layer!r} is not a CONV or linear layer of "
                              f"{graph.model_name or 'this model'}")
        if phase not in PHASES:
            raise ConfigError(f"{where}: phase {phase!r}, expected one of {', '.join(PHASES)}")
        L = graph[layer]
        cout = L.attrs.get("out_channels", L.attrs.get("out_features"))
        if not (isinstance(ch, list) and len(ch) == 2 and all(type(c) is int for c in ch)
                and 0 <= ch[0] < ch[1] <= cout):
            raise ConfigError(f"{where}: channels {ch!r}, expected [lo, hi] with "
                              f"0 <= lo < hi <= {cout} ({layer}'s output channels)")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms) \
                or not 0 < ms <= MAX_MS:
            raise ConfigError(f"{where}: ms {ms!r}, expected a positive number of "
                              f"milliseconds, at most {MAX_MS:g} (one kernel)")
        samples = rec.get("samples", graph.batch)
        if type(samples) is not int or not 1 <= samples <= graph.batch \
                or graph.batch % samples:
            raise ConfigError(f"{where}: samples {samples!r}, expected a divisor of the "
                              f"batch ({graph.batch}): the images the kernel ran on")
        key = (layer, phase, ch[0], ch[1], samples)
        if key in times:
            raise ConfigError(f"{where}: {layer} {phase} channels {ch} samples {samples} "
                              f"appears twice (first at kernels[{first[key]}])")
        first[key] = i
        times[key] = float(ms)
    return times, {k: v for k, v in doc.items() if k not in ("kernels", "format")}


def check_covers(times: dict[Kernel, float], wanted: list[Kernel], source: str) -> None:
    """Every kernel the run needs has a time, or an error listing what is missing."""
    missing = [k for k in wanted if k not in times]
    k_batch = max((k[4] for k in wanted), default=0)
    if missing:
        shown = "; ".join(f"{k[0]} {k[1]} channels {k[2]}..{k[3]}"
                          + (f" on {k[4]} images" if k[4] != k_batch else "")
                          for k in missing[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise ConfigError(
            f"{source} has no time for {len(missing)} of the {len(wanted)} host kernels this "
            f"run needs: {shown}{more}; measure them on a GPU machine (pimrt host-times, "
            f"or --host-times measure) with the same model, batch, input, --groups and "
            f"--slices")

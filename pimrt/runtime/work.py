"""The memory requests and compute time of each task, as memctl records.

Host CONV/linear tasks come from pimrt.host (implicit-GEMM tiles, L2 filter, compute from the
host part); other host tasks (loss, dropout, pooling the PIM unit cannot do) stream their
bytes. PIM tasks run the micro-programs of pimrt.pim: each stream of a kernel becomes all-bank
commands over the rows of its tensor, and when the unit needs more cycles than the memory
(cycles per element measured on the RTL) the stream pauses for the difference.

Requests and compute interleave in batches. A host kernel: its fixed cost as a DELAY (nothing
issues during a launch), then per batch a COMPUTE with its share of the compute and the batch's
requests, which issue while it computes, so the kernel takes about max(compute, memory) as on a
GPU whose SMs compute while their loads are in flight. A PIM stream: each batch, then a DELAY
for the cycles its unit needs beyond the memory's.
"""
from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Mapping

import numpy as np

from pimrt.errors import ConfigError
from pimrt.graph import LayerGraph
from pimrt.host import HostWork, load_host_part
from pimrt.memctl.config import Part, encode_address
from pimrt.runtime.lines import InterleavedLines
from pimrt.runtime.exchange import ExchangeConfig, scattered_lines
from pimrt.runtime.placement import Placement
from pimrt.graph.precision import weight_copy
from pimrt.runtime.schedule import Task
from pimrt.trace.records import COMPUTE, DELAY, HOST, PIM, READ, RECORD_DTYPE, SIGNAL, WRITE

HOST_BATCH = 128   # requests between two compute delays
PIM_BATCH = 64
BLOCK_REQUESTS = 1 << 18   # requests a block of a task's records holds (its stream in blocks)

# PIM kernels per (kind, phase): the unit's programs (pimrt.pim.kernels) a task runs, one after
# another, each with its streams (pimrt.pim.access.kernel_streams) bound to the task's tensors
# by role. A channel kernel's per-channel constants ("par") and sums ("acc") sit in the layer's
# parameter and parameter-gradient regions (a few columns a bank).
KERNELS = {
    # batch norm forward: one statistics pass over x (per-lane shifted sums), one apply pass
    ("batchnorm", "fwd"): [("bn_stats_ch", {"x": "input", "par": "param", "acc": "pgrad"}),
                           ("bn_apply_ch", {"x": "input", "y": "output", "par": "param"})],
    # the same, split for the forward pass by batch slices (pimrt.runtime.schedule): the
    # statistics of each slice as it arrives, combined on the host; the normalisation of
    # each slice once every slice's are in
    ("batchnorm_stats", "fwd"): [("bn_stats_ch", {"x": "input", "par": "param",
                                                  "acc": "pgrad"})],
    ("batchnorm_apply", "fwd"): [("bn_apply_ch", {"x": "input", "y": "output",
                                                  "par": "param"})],
    ("batchnorm", "bwd"): [("bn_bwd_stats_ch", {"x": "input", "dy": "grad_output",
                                                "par": "param", "acc": "pgrad"}),
                           ("bn_bwd_apply_ch", {"x": "input", "dy": "grad_output",
                                                "dx": "grad_input", "par": "param"})],
    ("relu", "fwd"): [("relu_fwd", {"x": "input", "y": "output"})],
    ("relu6", "fwd"): [("relu6_fwd", {"x": "input", "y": "output"})],
    # ReLU backward from its output, as torch: dx = dy where y > 0
    ("relu", "bwd"): [("relu_bwd", {"y": "result", "dy": "grad_output", "dx": "grad_input"})],
    ("relu6", "bwd"): [("relu6_bwd", {"y": "result", "dy": "grad_output", "dx": "grad_input"})],
    ("add", "fwd"): [("residual_add", {"a": "input", "b": "input2", "y": "output"})],
    ("maxpool", "fwd"): [("maxpool2_fwd", {"x": "input", "y": "output"})],
    ("avgpool", "fwd"): [("avgpool2_fwd", {"x": "input", "y": "output"})],
    ("avgpool", "bwd"): [("avgpool2_bwd", {"dy": "grad_output", "dx": "grad_input"})],
    # a concatenation's part moved into place: its source tensor read, the part's share of
    # the output written
    ("concat", "fwd"): [("copy", {"x": "source", "y": "output"})],
    ("accumulate", "bwd"): [("residual_add", {"a": "grad", "b": "grad", "y": "grad"})],
    ("update", "update"): [("sgd", {"w": "param", "g": "pgrad", "v": "momentum"})],
    # sparse exchange (pimrt.runtime.exchange): GradSA's fold and select, then the update
    ("fold", "update"): [("gradsa_fold", {"w": "param", "g": "pgrad", "u": "momentum",
                                          "v": "residual"})],
    ("select", "update"): [("gradsa_select", {"v": "residual", "u": "momentum",
                                              "mask": "smask", "d": "update"})],
    ("update", "apply"): [("sgd_apply", {"w": "param", "d": "update"})],
}


#: kernels that work on the parameters' fp32 values whatever the precision (the master weights,
#: their gradients and momentum; GradSA's residual): no 16-bit variant
FP32_KERNELS = ("sgd", "gradsa_fold", "gradsa_select", "sgd_apply", "amp_unscale")


def pim_kernels(task: Task, ctx) -> list:
    """The PIM kernels a task runs (KERNELS), each in the lanes' dtype of the task's tensors
    (pimrt.graph.precision): under AMP the activation kernels in 16 bits; a CONV's update
    writes the 16-bit copy of its weights as well (sgd_amp_<dtype>; GradSA's and LaySA's
    apply sgd_apply_amp_<dtype>); the unscale (loss scaling:
    pimrt.runtime.schedule) turns a CONV's 16-bit weight gradient into the fp32 one, or
    unscales batch norm's fp32 gradients in place, and checks them for inf and NaN."""
    from pimrt.graph.precision import amp, lane_dtype
    key = (task.kind, task.phase)
    if not amp(ctx.graph) or (key not in KERNELS and key != ("unscale", "update")):
        return KERNELS.get(key)
    from pimrt.pim.kernels import variant
    layer = ctx.graph[task.layer]
    dt = lane_dtype(layer.dtype)
    copy = weight_copy(ctx.graph, layer)
    if key == ("unscale", "update"):
        # (the flags, a column a run: "acc", beside the gradient as batch norm's sums are)
        return [(variant("amp_unscale", dt), {"g16": "pgrad16", "g": "pgrad", "acc": "pgrad"})] \
            if copy else [("amp_unscale", {"g": "pgrad", "acc": "pgrad"})]
    if key in (("update", "update"), ("update", "apply")) and copy:   # the 16-bit copy too
        (base, roles), = KERNELS[key]
        return [(variant(base, dt), {**roles, "w16": "param16"})]
    base = KERNELS.get(key)
    if base is None:
        return None
    return [(k if k in FP32_KERNELS else variant(k, dt), roles) for k, roles in base]


# The same ops as the GPU runs them (GPU-only execution, and the pools the unit cannot run):
# torch's CUDA kernels and cuDNN in fp32 training, each kernel one pass over its streams, the
# passes one after another; (kind, phase) -> [[(R/W, role, share of the role's region)]].
# Batch norm forward: the statistics (one pass, Welford), then y = x * k + b; backward: the
# sums of dy and dy * x, then dx. ReLU's backward reads its output (threshold_backward); max
# pooling writes an int64 index an output (2 fp32 outputs' worth) that its backward reads.
# A role "result" is the op's own output (act:layer).
GPU_KERNELS = {
    ("batchnorm", "fwd"): [[("R", "input", 1)], [("R", "input", 1), ("W", "output", 1)]],
    ("batchnorm_stats", "fwd"): [[("R", "input", 1)]],
    ("batchnorm_apply", "fwd"): [[("R", "input", 1), ("W", "output", 1)]],
    ("batchnorm", "bwd"): [[("R", "grad_output", 1), ("R", "input", 1)],
                           [("R", "grad_output", 1), ("R", "input", 1), ("W", "grad_input", 1)]],
    ("relu", "fwd"): [[("R", "input", 1), ("W", "output", 1)]],
    ("relu6", "fwd"): [[("R", "input", 1), ("W", "output", 1)]],
    ("relu", "bwd"): [[("R", "result", 1), ("R", "grad_output", 1), ("W", "grad_input", 1)]],
    ("relu6", "bwd"): [[("R", "result", 1), ("R", "grad_output", 1), ("W", "grad_input", 1)]],
    ("add", "fwd"): [[("R", "input", 1), ("R", "input2", 1), ("W", "output", 1)]],
    ("maxpool", "fwd"): [[("R", "input", 1), ("W", "output", 1), ("W", "index", 1)]],
    ("avgpool", "fwd"): [[("R", "input", 1), ("W", "output", 1)]],
    ("avgpool", "bwd"): [[("R", "grad_output", 1), ("W", "grad_input", 1)]],
    ("concat", "fwd"): [[("R", "source", 1), ("W", "output", 1)]],
    ("accumulate", "bwd"): [[("R", "grad", 1), ("R", "grad", 1), ("W", "grad", 1)]],
    ("update", "update"): [[("R", "param", 1), ("R", "pgrad", 1), ("R", "momentum", 1),
                            ("W", "momentum", 1), ("W", "param", 1)]],
    ("fold", "update"): [[("R", "param", 1), ("R", "pgrad", 1), ("R", "momentum", 1),
                          ("R", "residual", 1), ("W", "momentum", 1), ("W", "residual", 1)]],
    ("select", "update"): [[("R", "residual", 1), ("R", "momentum", 1), ("W", "momentum", 1),
                            ("W", "smask", 1), ("W", "update", 1)]],
    ("update", "apply"): [[("R", "param", 1), ("R", "update", 1), ("W", "param", 1)]],
}


@dataclasses.dataclass
class Context:
    graph: LayerGraph
    part: Part
    host_part: object
    placement: Placement
    partition: bool = False        # bank_partition: PIM reaches only its banks
    pim_scope: int = 16            # banks an all-bank command acts on
    pim_units: int = 4             # units of a channel that work (beside a bank of the scope)
    pim_column_cycles: int = 8     # memory cycles between two all-bank column commands
    exchange: ExchangeConfig = ExchangeConfig()
    # measured host kernel times, (layer, phase, lo, hi) -> ms, replacing the modelled
    # compute (pimrt.runtime.host_times); None: the host part's model
    host_times: Mapping | None = None

    @property
    def tck(self) -> float:
        return self.part.timing["tCK"]


def context(graph: LayerGraph, part: Part, placement: Placement, host_part="v100",
            policy: str = "authority", exchange: ExchangeConfig | None = None,
            host_times: Mapping | None = None) -> Context:
    from pimrt.memctl.controller import default_pim_banks
    partition = policy == "bank_partition"
    banks = default_pim_banks(part) if partition else None
    units = part.pim_scope_units(banks)
    return Context(graph, part, load_host_part(host_part), placement, partition,
                   sum(units.values()), len(units), part.pim_scope_column_cycles(banks),
                   exchange or ExchangeConfig(), host_times)


def bank_work(kernel: str, task: Task, ctx: Context) -> dict:
    """One bank's share of a PIM task, as pimrt.pim.access takes it. A tensor spreads over
    every bank the PIM reaches (channels x banks of its scope): a stream kernel's elements
    evenly; batch norm's channels whole, several a bank, or where there are fewer channels
    than banks each channel over banks/channels banks; pooling's images whole (channels-last),
    or where there are fewer images than banks a band of whole window rows of one image."""
    from pimrt.pim.access import family as kernel_family
    banks = ctx.part.channel_count * ctx.pim_scope
    family = kernel_family(kernel)
    if family == "stream":
        return {"elements": max(1, -(-task.numel // banks))}
    layer = ctx.graph[task.layer]
    shape = layer.input_shapes[0] if layer.input_shapes else layer.shape
    frac = (task.span[1] - task.span[0]) if task.span is not None else \
        (1 / task.groups if task.group >= 0 else 1)
    channels = max(1, round(shape[1] * frac)) if len(shape) > 1 else 1
    if family == "channel":
        per = max(1, task.numel // channels)
        if channels >= banks:
            return {"channels": -(-channels // banks), "elements": per}
        return {"channels": 1, "elements": max(1, -(-per * channels // banks))}
    n = shape[0] // task.slices if task.slice >= 0 else shape[0]
    h, w = (shape[2], shape[3]) if len(shape) == 4 else (2, 2)
    if n >= banks:
        return {"images": -(-n // banks), "height": h, "width": w, "channels": channels}
    # fewer images than banks: bands of whole window rows, every channel of a pixel together
    pairs = -(-n * max(h // 2, 1) // banks)
    return {"images": 1, "height": 2 * pairs, "width": w, "channels": channels}


def pim_kernel_cycles(kernel: str, work: dict, ctx: Context) -> float:
    """Memory cycles a unit takes for `kernel` on its banks' share (`work` a bank): the
    unit's clock cycles for the program (pimrt.pim.access.bank_cycles, exact, at the part's
    lanes) for each of its banks in the PIM's scope, over the units' clock ratio."""
    from pimrt.errors import ConfigError
    from pimrt.pim import access, cycles
    pim = ctx.part.pim
    if pim["lanes"] not in cycles.lanes():
        raise ConfigError(f"[pim] lanes = {pim['lanes']}: the PIM kernels are checked on the RTL "
                          f"at {', '.join(map(str, cycles.lanes()))} lanes only "
                          f"(pimrt/pim/kernel_cycles.json; pimrt bench pim --lanes N "
                          f"--update-cycles)")
    per_unit = ctx.pim_scope // ctx.pim_units
    return access.bank_cycles(kernel, lanes=pim["lanes"], **work) * per_unit / pim["clock_ratio"]


def pim_memory_cycles(kernel: str, numel: int, ctx: Context) -> float:
    """pim_kernel_cycles of a stream kernel on `numel` elements spread over the PIM's banks."""
    from pimrt.pim.access import family
    if family(kernel) != "stream":
        raise ValueError(f"{kernel}: pim_memory_cycles takes stream kernels")
    banks = ctx.part.channel_count * ctx.pim_scope
    return pim_kernel_cycles(kernel, {"elements": max(1, -(-numel // banks))}, ctx)


def _records(n: int) -> np.ndarray:
    return np.zeros(n, RECORD_DTYPE)


def _whole(blocks) -> np.ndarray:
    """Blocks of records as one array."""
    blocks = list(blocks)
    if not blocks:
        return _records(0)
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)


def _interleave(addr: np.ndarray, op: np.ndarray, requestor: int, compute: int,
                batch: int, overlap: bool = False) -> np.ndarray:
    """Requests in batches, each followed by a DELAY with its share of `compute` cycles.
    overlap: each batch preceded by a COMPUTE with its share instead: the batch issues while
    it computes (a GPU's SMs compute while their loads are in flight), so a batch costs
    max(its compute, its issue) rather than their sum. (interleave_blocks: the same records
    in blocks.)"""
    blocks = list(interleave_blocks(addr, op, requestor, compute, batch, overlap,
                                    len(addr) + batch))
    return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)


def interleave_blocks(addr: np.ndarray, op: np.ndarray, requestor: int, compute: int,
                      batch: int, overlap: bool = False, block: int | None = None):
    """_interleave's records in blocks of whole batches, about `block` (BLOCK_REQUESTS)
    requests each, so a task's records are never held whole."""
    n = len(addr)
    block = block or BLOCK_REQUESTS
    nb = max(1, -(-n // batch)) if compute > 0 else 0
    # a DELAY record holds 32 bits: a compute time its batches' DELAYs cannot hold gets more
    # DELAYs, one after another at the end (their sum is the same wait)
    extra = max(0, -(-compute // (2**32 - 1)) - nb) if nb else 0
    if nb == 0:
        for a0 in range(0, n, max(block, 1)):
            out = _records(min(n, a0 + block) - a0)
            out["addr"], out["op"], out["requestor"] = addr[a0:a0 + block], \
                op[a0:a0 + block], requestor
            yield out
        if n == 0:
            yield _records(0)
        return
    share = np.full(nb + extra, compute // (nb + extra), dtype=np.int64)
    share[: compute % (nb + extra)] += 1
    if share[0] >= 2**32:  # (cannot happen: the extra DELAYs above)
        raise ConfigError(f"a compute time of {compute} cycles does not fit its DELAY records")
    marker = COMPUTE if overlap else DELAY
    step = max(1, block // batch)              # batches a block
    for b0 in range(0, nb, step):
        b1 = min(nb, b0 + step)
        a0, a1 = b0 * batch, min(n, b1 * batch)
        out = _records(a1 - a0 + b1 - b0)
        _lay_out(out, addr[a0:a1], op[a0:a1], requestor, batch, overlap)
        # the markers: before each batch, or after it (a last short batch's at the end)
        idx = np.arange(b1 - b0) * (batch + 1) if overlap else \
            np.minimum(np.arange(1, b1 - b0 + 1) * (batch + 1) - 1, len(out) - 1)
        out["op"][idx], out["requestor"][idx], out["value"][idx] = marker, requestor, \
            share[b0:b1]
        yield out
    if extra:
        out = _records(extra)
        out["op"], out["requestor"], out["value"] = marker, requestor, share[nb:]
        yield out


def _lay_out(out: np.ndarray, addr, op, requestor: int, batch: int, marker_first: bool):
    """Write requests into `out` in batches of `batch`, leaving one record free before
    (marker_first) or after each batch for its marker."""
    n = len(addr)
    full = n // batch
    w = batch + 1
    if full:
        grid = out[:full * w].reshape(full, w)
        cols = slice(1, None) if marker_first else slice(0, batch)
        grid["addr"][:, cols] = addr[:full * batch].reshape(full, batch)
        grid["op"][:, cols] = op[:full * batch].reshape(full, batch)
        grid["requestor"][:, cols] = requestor
    rest = n - full * batch
    if rest:
        at = full * w + (1 if marker_first else 0)
        tail = out[at:at + rest]
        tail["addr"], tail["op"], tail["requestor"] = addr[full * batch:], op[full * batch:], \
            requestor


def launch_records(cycles: int, requestor: int = HOST) -> np.ndarray:
    """A kernel's fixed cost (launch, library call, tail): DELAYs before its first request,
    during which its side issues nothing; none for 0 cycles."""
    n = -(-int(cycles) // (2**32 - 1))
    out = _records(n)
    out["op"], out["requestor"] = DELAY, requestor
    out["value"] = cycles // n if n else 0
    if n:
        out["value"][: cycles % n] += 1
    return out


def kernel_records(work, tensors, tck: float, request_bytes: int, requests: int | None = None):
    """One host kernel alone as record arrays, in blocks (its stream is never held whole): the
    fixed cost first, then the requests with their share of the compute overlapping them, then
    SIGNAL 0, which fires when the last of both is done: the kernel's end (pimrt bench host).
    requests: the stream's length when known (else counted by a first pass)."""
    compute = work.compute_cycles(None, tck)
    overhead = work.overhead_cycles(None, tck)
    yield launch_records(overhead)
    if requests is None:
        requests = sum(len(b) for b in work.iter_requests(tensors, request_bytes))
    work_cycles, done, given = compute - overhead, 0, 0
    for req in work.iter_requests(tensors, request_bytes):
        done += len(req)
        share = work_cycles * min(done, requests) // max(requests, 1) - given
        given += share
        yield _interleave(req["addr"], req["op"], HOST, share, HOST_BATCH, overlap=True)
    end = _records(2)
    end["op"], end["requestor"], end["value"] = (DELAY, SIGNAL), HOST, (max(work_cycles - given,
                                                                            0), 0)
    yield end


def _stream_lines(base: int, nbytes: int, op: int, line: int = 64) -> tuple[np.ndarray, np.ndarray]:
    n = max(1, -(-int(nbytes) // line))
    a = np.uint64(base) + np.arange(n, dtype=np.uint64) * np.uint64(line)
    return a, np.full(n, op, np.uint8)


# ---------------------------------------------------------------------------------------------
# host tasks

_PHASE = {"fwd": "forward", "bwd_data": "backward_data", "bwd_weight": "backward_weight"}


def _weight(layer):
    for name, shape in layer.params.items():
        if name.endswith("weight"):
            return shape
    raise KeyError(f"{layer.name} has no weight")


def host_kernel(task: Task, graph: LayerGraph) -> tuple[str, str, int, int, int] | None:
    """The kernel a host CONV/linear task runs: (layer, phase as pimrt.host names it,
    output channels lo, hi, samples: the batch, or a batch slice's share of it); None for
    any other task."""
    if task.side != "host" or task.kind not in ("conv", "linear"):
        return None
    layer = graph[task.layer]
    cout = layer.attrs.get("out_channels", layer.attrs.get("out_features"))
    lo, hi = (cout * task.group // task.groups, cout * (task.group + 1) // task.groups) \
        if task.group >= 0 else (0, cout)
    samples = graph.batch // task.slices if task.slice >= 0 else graph.batch
    return task.layer, _PHASE[task.phase], lo, hi, samples


def host_records(task: Task, ctx: Context) -> np.ndarray:
    return _whole(host_blocks(task, ctx))


def host_blocks(task: Task, ctx: Context):
    """A host task's records, in blocks (host_records: all of them)."""
    g, pl = ctx.graph, ctx.placement
    layer = g[task.layer] if task.layer in g else None
    if task.kind in ("conv", "linear"):
        kernel = host_kernel(task, g)
        _, phase, lo, hi, _ = kernel
        inp = task.tensors.get("input", task.tensors.get("grad_input"))[0]
        # each tensor at its own width: under AMP the CONV reads a 16-bit copy of its weights
        # and writes a 16-bit weight gradient (pimrt.graph.precision); the images stay fp32
        es, xs = layer.itemsize, g[inp].itemsize
        x, y, w = tuple(layer.input_shapes[0]), tuple(layer.shape), tuple(_weight(layer))
        wp = "16" if weight_copy(g, layer) else ""
        ws = es if wp else layer.param_bytes // max(layer.param_numel, 1)
        tensors = {
            "input": (pl[f"act:{inp}"].base, x, xs),
            "grad_input": (pl[f"grad:{inp}"].base, x, xs),
            "output": (pl[f"act:{layer.name}"].base, y, es),
            "grad_output": (pl[f"grad:{layer.name}"].base, y, es),
            "weight": (pl[f"param{wp}:{layer.name}"].base, w, ws),
            "grad_weight": (pl[f"pgrad{wp}:{layer.name}"].base, w, ws),
        }
        if task.slice >= 0:   # one batch slice: its samples of the input and output
            x, y = (x[0] // task.slices,) + x[1:], (y[0] // task.slices,) + y[1:]
            for role, shape in (("input", x), ("output", y)):
                base, _, size = tensors[role]
                tensors[role] = (base + task.slice * math.prod(shape) * size, shape, size)
        work = HostWork(layer, x[0], phase, channel_range=(lo, hi), part=ctx.host_part,
                        measured_ms=ctx.host_times.get(kernel) if ctx.host_times else None)
        reqs = work.requests(tensors, ctx.part.request_bytes)
        compute = work.compute_cycles(None, ctx.tck)
        overhead = work.overhead_cycles(None, ctx.tck)
        addr, op = reqs["addr"], reqs["op"]
        if ctx.partition:  # shared feature maps move between the host's and the PIM's banks
            share = task.tensors.get("output") or task.tensors.get("grad_input")
            if share:
                region = pl[("act:" if "output" in task.tensors else "grad:") + share[0]]
                start, part_bytes = _task_slice(task, region)
                ca, co = _stream_lines(start, part_bytes, READ)
                wa, wo = _stream_lines(start, part_bytes, WRITE)
                addr = np.concatenate([addr, ca, wa])
                op = np.concatenate([op, co, wo])
        yield launch_records(overhead)
        yield from interleave_blocks(addr, op, HOST, compute - overhead, HOST_BATCH,
                                     overlap=True)
        return
    if task.kind in ("fetch", "evict", "sample", "exchange"):
        yield exchange_records(task, ctx)
        return
    if (task.kind, task.phase) in GPU_KERNELS or task.kind == "unscale":
        yield from gpu_blocks(task, ctx)
        return
    # streaming host work: loss, dropout, pools the PIM cannot do, unsupported ops
    parts = []
    for role, (tensor, nbytes) in task.tensors.items():
        prefix = "grad:" if role.startswith("grad") else "act:"
        if role == "input" and task.kind == "loss":
            prefix = "act:"
        region = pl[prefix + tensor] if (prefix + tensor) in pl.regions else None
        if region is None:
            continue
        op = WRITE if role in ("output", "grad_input") else READ
        parts.append(_stream_lines(*_task_slice(task, region), op))
        if task.kind == "loss":  # writes the logits' gradient
            parts.append(_stream_lines(pl["grad:" + tensor].base, region.nbytes, WRITE))
    if not parts:
        return
    addr = np.concatenate([p[0] for p in parts])
    op = np.concatenate([p[1] for p in parts])
    yield from streaming_blocks(addr, op, ctx)


#: tensors one launch of torch's multi-tensor SGD (foreach, the default on CUDA) updates: its
#: kernels take lists of param, grad and momentum (depth 3) of up to 48 tensors
#: (aten/src/ATen/native/cuda/MultiTensorApply.cuh, depth_to_max_tensors)
FOREACH_TENSORS = 48


def streaming_kernel(addr: np.ndarray, op: np.ndarray, ctx: Context,
                     launches: float = 1.0) -> np.ndarray:
    """A memory-bound GPU kernel: its fixed cost (x launches: a share of one launch for a
    layer's part of a multi-tensor kernel), then its requests paced so that it moves no more
    than a streaming kernel reaches on this memory (the host part's stream_fraction of the
    part's peak bandwidth); memctl may make it slower, never faster."""
    return _whole(streaming_blocks(addr, op, ctx, launches))


def streaming_blocks(addr: np.ndarray, op: np.ndarray, ctx: Context, launches: float = 1.0):
    """streaming_kernel's records in blocks."""
    hp = ctx.host_part
    floor = len(addr) * ctx.part.request_bytes / (hp.stream_fraction
                                                  * ctx.part.peak_bandwidth_gbs) / ctx.tck
    fixed = math.ceil(launches * hp.kernel_overhead_s * 1e9 / ctx.tck - 1e-9)
    yield launch_records(fixed)
    yield from interleave_blocks(addr, op, HOST, math.ceil(floor - 1e-9), HOST_BATCH,
                                 overlap=True)


def gpu_kernels(task: Task, ctx: Context) -> list:
    """GPU_KERNELS' passes for a task; under AMP torch's: a CONV's 16-bit weight gradient
    cast to its fp32 gradient (autograd's copy back), the scaler's unscale and inf/NaN check
    (_amp_foreach_non_finite_check_and_unscale_, amp-fp16), and after the SGD update (or
    GradSA's, LaySA's apply) the 16-bit copy of the weights autocast casts for the next forward."""
    from pimrt.graph.precision import amp, loss_scaling
    key = (task.kind, task.phase)
    if not amp(ctx.graph) or key not in (("unscale", "update"), ("update", "update"),
                                         ("update", "apply")):
        return GPU_KERNELS[key]
    copy = weight_copy(ctx.graph, ctx.graph[task.layer])
    if key in (("update", "update"), ("update", "apply")):
        return GPU_KERNELS[key] + ([[("R", "param", 1), ("W", "param16", 1)]] if copy else [])
    return ([[("R", "pgrad16", 1), ("W", "pgrad", 1)]] if copy else []) + \
        ([[("R", "pgrad", 1), ("W", "pgrad", 1)]] if loss_scaling(ctx.graph) else [])


def gpu_records(task: Task, ctx: Context) -> np.ndarray:
    return _whole(gpu_blocks(task, ctx))


def gpu_blocks(task: Task, ctx: Context):
    """An op the PIM could run, run by the GPU instead (GPU_KERNELS): each kernel streams its
    share of every region it reads and writes, the streams interleaved line by line as a
    grid of thread blocks walks them; each pass a memory-bound kernel (streaming_kernel); the
    SGD update as torch's multi-tensor kernels, a launch shared by FOREACH_TENSORS tensors.
    In blocks (gpu_records: all of them)."""
    launches = 1.0
    if task.kind in ("update", "unscale") and task.phase == "update":    # torch's foreach
        # kernels (SGD, the scaler's unscale): one launch for FOREACH_TENSORS tensors
        layer = ctx.graph[task.layer]
        launches = len(layer.params) / FOREACH_TENSORS
    for passes in gpu_kernels(task, ctx):
        regions = []
        for rw, role, frac in passes:
            region = _role_region(task, role, ctx)
            start, nbytes = _task_slice(task, region, role)
            regions.append((start, max(1, -(-int(nbytes * frac) // 64)),   # (_stream_lines')
                            WRITE if rw == "W" else READ))
        lines = InterleavedLines(regions)       # (made a block at a time as they are read)
        yield from streaming_blocks(lines.addr, lines.op, ctx, launches)


def exchange_records(task: Task, ctx: Context) -> np.ndarray:
    """LaySA's fetch (u and v written in from host memory) and evict (read out); the sample
    of the residual the threshold comes from (GradSA's select: sample_size random elements,
    or all of v where select takes an exact top-k); the exchange: the selection mask and the
    selected residuals read, their remainders written back, the wire time of the all-gather,
    the decoded update scattered (pimrt.runtime.exchange)."""
    pl, cfg, name = ctx.placement, ctx.exchange, task.layer
    if task.kind == "sample":
        res = pl[f"residual:{name}"]
        if cfg.exact_topk(task.numel):
            a, o = _stream_lines(res.base, res.nbytes, READ)
        else:
            a = scattered_lines(res.base, res.nbytes, cfg.sample_size, zlib.crc32(name.encode()) + 2)
            o = np.full(len(a), READ, np.uint8)
        return _interleave(a, o, HOST, 0, HOST_BATCH)
    if task.kind in ("fetch", "evict"):
        op = WRITE if task.kind == "fetch" else READ
        parts = [_stream_lines(pl[f"{what}:{name}"].base, pl[f"{what}:{name}"].nbytes, op)
                 for what in ("momentum", "residual")]
        return _interleave(np.concatenate([p[0] for p in parts]),
                           np.concatenate([p[1] for p in parts]), HOST, 0, HOST_BATCH)
    k = cfg.kept(task.numel)
    seed = zlib.crc32(name.encode())
    mask_a, mask_o = _stream_lines(pl[f"smask:{name}"].base, pl[f"smask:{name}"].nbytes, READ)
    res = pl[f"residual:{name}"]
    sel = scattered_lines(res.base, res.nbytes, k, seed)
    upd = pl[f"update:{name}"]
    dec = scattered_lines(upd.base, upd.nbytes, k * cfg.world, seed + 1)
    before = np.concatenate([mask_a, sel, sel])
    before_op = np.concatenate([mask_o, np.full(len(sel), READ, np.uint8),
                                np.full(len(sel), WRITE, np.uint8)])
    wire = int(round(cfg.wire_seconds(task.numel) * 1e9 / ctx.tck))
    first = _interleave(before, before_op, HOST, 0, HOST_BATCH)
    delay = _records(1)
    delay["op"], delay["requestor"], delay["value"] = DELAY, HOST, wire
    after = _interleave(dec, np.full(len(dec), WRITE, np.uint8), HOST, 0, HOST_BATCH)
    return np.concatenate([first, delay if wire > 0 else _records(0), after])


# ---------------------------------------------------------------------------------------------
# PIM tasks

def _task_slice(task: Task, region, role: str = "") -> tuple[int, int]:
    """(start address, bytes) of the part of `region` a task works on: its channel group's
    share, or its part of a concatenation (all of the part's source), or all of it."""
    if role == "source":
        return region.base, region.nbytes
    if task.span is not None:
        lo = int(region.nbytes * task.span[0]) // 64 * 64
        return region.base + lo, max(int(region.nbytes * task.span[1]) // 64 * 64 - lo, 1)
    if task.group >= 0:
        share = region.nbytes // max(task.groups, 1)
        return region.base + share * task.group, share
    if task.slice >= 0:
        share = region.nbytes // task.slices
        return region.base + share * task.slice, share
    return region.base, region.nbytes


def _region_for(task: Task, role: str, ctx: Context):
    pl = ctx.placement
    name = task.layer
    if role in ("param", "pgrad", "momentum", "residual", "update", "smask", "param16",
                "pgrad16"):
        return pl[f"{role}:{name}"]
    if role == "mask":
        return pl[f"mask:{name}"]
    if role == "source":                  # the tensor a concatenation's part is copied from
        return pl["act:" + ctx.graph[name].inputs[task.part]]
    tensor = task.tensors.get(role, task.tensors.get("grad", task.tensors.get("output")))
    if role == "input2":
        ins = ctx.graph[name].inputs
        tensor = (ins[1] if len(ins) > 1 else ins[0], 0)
    prefix = "grad:" if role.startswith("grad") else "act:"
    return pl[prefix + tensor[0]]


def pim_records(task: Task, ctx: Context) -> np.ndarray:
    return _whole(pim_blocks(task, ctx))


def pim_blocks(task: Task, ctx: Context):
    """A PIM task's all-bank commands: each of its kernels' programs walked for one bank's
    share (pimrt.pim.access.bank_accesses: the DRAM columns the unit reads and writes, in
    program order, as the RTL does), every access an all-bank command in every channel at
    that stream's row and column; when the units need more cycles than the commands (the
    program's exact cycle count at the part's lanes and clock) the stream pauses for the
    difference. In blocks (pim_records: all of them)."""
    from pimrt.errors import ConfigError
    from pimrt.pim import access
    from pimrt.pim.errors import PimError
    part = ctx.part
    kernels = pim_kernels(task, ctx)
    if kernels is None:
        raise KeyError(f"no PIM kernel for {task.kind} {task.phase}")
    chans, cols = part.channel_count, part.columns_per_row
    banks = chans * ctx.pim_scope
    span = part.capacity_bytes // part.org["rows"]       # one row of every bank
    for kernel, roles in kernels:
        work = bank_work(kernel, task, ctx)
        try:
            acc = access.bank_accesses(kernel, lanes=part.pim["lanes"],
                                       column_bytes=part.request_bytes, **work)
            compute = pim_kernel_cycles(kernel, work, ctx)
        except PimError as exc:
            raise ConfigError(f"{task.label}: {exc}") from None
        first = np.zeros(len(access.kernel_streams(kernel)), np.int64)
        for i, stream in enumerate(access.kernel_streams(kernel)):
            region = _role_region(task, roles[stream], ctx)
            start, _ = _task_slice(task, region, roles[stream]) if roles[stream] not in (
                "param", "pgrad", "param16", "pgrad16") else (region.base, 0)
            # the stream's first column in each bank: its region's row, then its share
            first[i] = region.base // span * cols + (start - region.base) // (
                banks * part.request_bytes)
        idx = first[acc["stream"]] + acc["column"]
        row, col = (idx // cols) % part.org["rows"], idx % cols
        n = len(acc)
        ch = np.tile(np.arange(chans), n)
        addr = encode_address(part, channel=ch, row=np.repeat(row, chans),
                              column=np.repeat(col, chans))
        op = np.repeat(np.where(acc["rw"] == access.WRITE, WRITE, READ).astype(np.uint8),
                       chans)
        memory = n * ctx.pim_column_cycles
        yield from interleave_blocks(addr, op, PIM, int(max(0.0, compute - memory)), PIM_BATCH)


def _role_region(task: Task, role: str, ctx: Context):
    """_region_for, and the op's own output ("result") and max-pool indices ("index")."""
    if role in ("result", "index"):
        return ctx.placement[f"{'act' if role == 'result' else 'index'}:{task.layer}"]
    return _region_for(task, role, ctx)


def task_records(task: Task, ctx: Context) -> np.ndarray:
    return _whole(task_blocks(task, ctx))


def task_blocks(task: Task, ctx: Context):
    """A task's records in blocks of about BLOCK_REQUESTS requests (what memctl is fed: a
    task's stream is never held whole)."""
    return host_blocks(task, ctx) if task.side == "host" else pim_blocks(task, ctx)

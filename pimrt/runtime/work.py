"""The memory requests and compute time of each task, as memctl records.

Host CONV/linear tasks come from pimrt.host (implicit-GEMM tiles, L2 filter, compute from the
host part); other host tasks (loss, dropout, pooling the PIM unit cannot do) stream their
bytes. PIM tasks run the micro-programs of pimrt.pim: each stream of a kernel becomes all-bank
commands over the rows of its tensor, and when the unit needs more cycles than the memory
(cycles per element measured on the RTL) the stream pauses for the difference.

Requests and compute interleave in batches: a batch of requests is offered, then a DELAY for
its share of the compute; the controller serves the queued requests meanwhile, so a task takes
about max(compute, memory) as on a GPU that overlaps the two.
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
from pimrt.pim import cycles as pim_cycles
from pimrt.runtime.exchange import ExchangeConfig, scattered_lines
from pimrt.runtime.placement import Placement
from pimrt.runtime.schedule import Task
from pimrt.trace.records import DELAY, HOST, PIM, READ, RECORD_DTYPE, WRITE

HOST_BATCH = 128   # requests between two compute delays
PIM_BATCH = 64

# PIM kernels per (kind, phase): the streams each reads and writes, in elements of the task
# per element (a ReLU mask is 1 bit an element: 1/32 of an fp32 stream)
KERNELS = {
    # batch norm forward as pimrt.runtime.functional runs it: the mean, a two-pass variance
    # (x read as both streams of the dy*xhat reduction), then (x - mean)*k + beta
    ("batchnorm", "fwd"): [("bn_stats", [("R", "input", 1)]),
                           ("bn_bwd_stats", [("R", "input", 1), ("R", "input", 1)]),
                           ("bn_bwd_apply", [("R", "input", 1), ("R", "input", 1),
                                             ("W", "output", 1)])],
    # the same, split for the forward pass by batch slices (pimrt.runtime.schedule): the
    # statistics of each slice as it arrives (its own mean, then its two-pass variance),
    # combined on the host; the normalisation of each slice once every slice's are in
    ("batchnorm_stats", "fwd"): [("bn_stats", [("R", "input", 1)]),
                                 ("bn_bwd_stats", [("R", "input", 1), ("R", "input", 1)])],
    ("batchnorm_apply", "fwd"): [("bn_bwd_apply", [("R", "input", 1), ("R", "input", 1),
                                                   ("W", "output", 1)])],
    ("relu", "fwd"): [("relu_fwd", [("R", "input", 1), ("W", "output", 1), ("W", "mask", 1 / 32)])],
    ("relu6", "fwd"): [("relu_fwd", [("R", "input", 1), ("W", "output", 1), ("W", "mask", 1 / 32)])],
    ("add", "fwd"): [("residual_add", [("R", "input", 1), ("R", "input2", 1), ("W", "output", 1)])],
    ("maxpool", "fwd"): [("maxpool2_fwd", [("R", "input", 1), ("W", "output", 1 / 4)])],
    ("avgpool", "fwd"): [("avgpool2_fwd", [("R", "input", 1), ("W", "output", 1 / 4)])],
    ("concat", "fwd"): [("residual_add", [("R", "output", 1), ("W", "output", 1)])],
    ("batchnorm", "bwd"): [("bn_bwd_stats", [("R", "grad_output", 1), ("R", "input", 1)]),
                           ("bn_bwd_apply", [("R", "grad_output", 1), ("R", "input", 1),
                                             ("W", "grad_input", 1)])],
    ("relu", "bwd"): [("relu_bwd", [("R", "grad_output", 1), ("R", "mask", 1 / 32),
                                    ("W", "grad_input", 1)])],
    ("relu6", "bwd"): [("relu_bwd", [("R", "grad_output", 1), ("R", "mask", 1 / 32),
                                     ("W", "grad_input", 1)])],
    ("avgpool", "bwd"): [("avgpool2_bwd", [("R", "grad_output", 1 / 4), ("W", "grad_input", 1)])],
    ("accumulate", "bwd"): [("residual_add", [("R", "grad", 1), ("R", "grad", 1), ("W", "grad", 1)])],
    ("update", "update"): [("sgd", [("R", "param", 1), ("R", "pgrad", 1), ("R", "momentum", 1),
                                    ("W", "param", 1), ("W", "momentum", 1)])],
    # sparse exchange (pimrt.runtime.exchange): GradSA's fold and select, then the update
    ("fold", "update"): [("gradsa_fold", [("R", "param", 1), ("R", "pgrad", 1),
                                          ("R", "momentum", 1), ("R", "residual", 1),
                                          ("W", "momentum", 1), ("W", "residual", 1)])],
    ("select", "update"): [("gradsa_select", [("R", "residual", 1), ("R", "momentum", 1),
                                              ("W", "momentum", 1), ("W", "smask", 1 / 32),
                                              ("W", "update", 1)])],
    ("update", "apply"): [("sgd_apply", [("R", "param", 1), ("R", "update", 1),
                                         ("W", "param", 1)])],
}


@dataclasses.dataclass
class Context:
    graph: LayerGraph
    part: Part
    host_part: object
    placement: Placement
    partition: bool = False        # bank_partition: PIM reaches only its banks
    pim_scope: int = 16            # banks an all-bank command acts on
    exchange: ExchangeConfig = ExchangeConfig()
    # measured host kernel times, (layer, phase, lo, hi) -> ms, replacing the modelled
    # compute (pimrt.runtime.host_times); None: the host part's model
    host_times: Mapping | None = None

    @property
    def tck(self) -> float:
        return self.part.timing["tCK"]


def context(graph: LayerGraph, part: Part, placement: Placement, host_part="v100",
            policy: str = "authority", pim_banks: int | None = None,
            exchange: ExchangeConfig | None = None, host_times: Mapping | None = None) -> Context:
    nbanks = part.org["ranks"] * part.banks_per_rank
    partition = policy == "bank_partition"
    scope = (pim_banks or nbanks // 2) if partition else nbanks
    return Context(graph, part, load_host_part(host_part), placement, partition, scope,
                   exchange or ExchangeConfig(), host_times)


def _records(n: int) -> np.ndarray:
    return np.zeros(n, RECORD_DTYPE)


def _interleave(addr: np.ndarray, op: np.ndarray, requestor: int, compute: int,
                batch: int) -> np.ndarray:
    """Requests in batches, each followed by a DELAY with its share of `compute` cycles."""
    n = len(addr)
    nb = max(1, -(-n // batch)) if compute > 0 else 0
    # a DELAY record holds 32 bits: a compute time its batches' DELAYs cannot hold gets more
    # DELAYs, one after another at the end (their sum is the same wait)
    extra = max(0, -(-compute // (2**32 - 1)) - nb) if nb else 0
    out = _records(n + nb + extra)
    if nb == 0:
        out["addr"], out["op"], out["requestor"] = addr, op, requestor
        return out
    idx = np.arange(n)
    pos = idx + idx // batch                 # a DELAY after every `batch` requests
    out["addr"][pos], out["op"][pos], out["requestor"][pos] = addr, op, requestor
    dpos = np.minimum(np.arange(1, nb + 1) * (batch + 1) - 1, n + nb - 1)
    if extra:
        dpos = np.concatenate([dpos, np.arange(n + nb, n + nb + extra)])
    share = np.full(nb + extra, compute // (nb + extra), dtype=np.int64)
    share[: compute % (nb + extra)] += 1
    if share[0] >= 2**32:  # (cannot happen: the extra DELAYs above)
        raise ConfigError(f"a compute time of {compute} cycles does not fit its DELAY records")
    out["op"][dpos] = DELAY
    out["requestor"][dpos] = requestor
    out["value"][dpos] = share
    return out


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
    g, pl = ctx.graph, ctx.placement
    layer = g[task.layer] if task.layer in g else None
    if task.kind in ("conv", "linear"):
        kernel = host_kernel(task, g)
        _, phase, lo, hi, _ = kernel
        inp = task.tensors.get("input", task.tensors.get("grad_input"))[0]
        es = layer.itemsize
        x, y, w = tuple(layer.input_shapes[0]), tuple(layer.shape), tuple(_weight(layer))
        tensors = {
            "input": (pl[f"act:{inp}"].base, x, es),
            "grad_input": (pl[f"grad:{inp}"].base, x, es),
            "output": (pl[f"act:{layer.name}"].base, y, es),
            "grad_output": (pl[f"grad:{layer.name}"].base, y, es),
            "weight": (pl[f"param:{layer.name}"].base, w, es),
            "grad_weight": (pl[f"pgrad:{layer.name}"].base, w, es),
        }
        if task.slice >= 0:   # one batch slice: its samples of the input and output
            x, y = (x[0] // task.slices,) + x[1:], (y[0] // task.slices,) + y[1:]
            for role, shape in (("input", x), ("output", y)):
                base, _, _ = tensors[role]
                tensors[role] = (base + task.slice * math.prod(shape) * es, shape, es)
        work = HostWork(layer, x[0], phase, channel_range=(lo, hi), part=ctx.host_part,
                        measured_ms=ctx.host_times.get(kernel) if ctx.host_times else None)
        reqs = work.requests(tensors, ctx.part.request_bytes)
        compute = work.compute_cycles(None, ctx.tck)
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
        return _interleave(addr, op, HOST, compute, HOST_BATCH)
    if task.kind in ("fetch", "evict", "sample", "exchange"):
        return exchange_records(task, ctx)
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
        return _records(0)
    addr = np.concatenate([p[0] for p in parts])
    op = np.concatenate([p[1] for p in parts])
    return _interleave(addr, op, HOST, 0, HOST_BATCH)


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

def _task_slice(task: Task, region) -> tuple[int, int]:
    """(start address, bytes) of the part of `region` a task works on: its channel group's
    share, or its part of a concatenation, or all of it."""
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
    if role in ("param", "pgrad", "momentum", "residual", "update", "smask"):
        return pl[f"{role}:{name}"]
    if role == "mask":
        return pl[f"mask:{name}"]
    tensor = task.tensors.get(role, task.tensors.get("grad", task.tensors.get("output")))
    if role == "input2":
        ins = ctx.graph[name].inputs
        tensor = (ins[1] if len(ins) > 1 else ins[0], 0)
    prefix = "grad:" if role.startswith("grad") else "act:"
    return pl[prefix + tensor[0]]


def pim_records(task: Task, ctx: Context) -> np.ndarray:
    part = ctx.part
    kernels = KERNELS.get((task.kind, task.phase))
    if kernels is None:
        raise KeyError(f"no PIM kernel for {task.kind} {task.phase}")
    o = part.org
    chans = part.channel_count
    cols = part.columns_per_row
    bytes_per_op = part.request_bytes * ctx.pim_scope
    sets = (o["ranks"] * part.banks_per_rank) // ctx.pim_scope   # bank sets a row span holds
    units = part.pim["units_per_bankgroup"] * o["bankgroups"] * o["ranks"] * chans
    es = 4
    out = []
    for kernel, streams in kernels:
        addrs, ops = [], []
        for rw, role, frac in streams:
            region = _region_for(task, role, ctx)
            start = _task_slice(task, region)[0]
            nbytes = max(int(task.numel * es * frac), 1) if not role.endswith("mask") else \
                max(int(task.numel / 8), 1)
            nops = max(1, -(-nbytes // bytes_per_op))
            k = np.arange(nops, dtype=np.int64)
            row0 = start // (part.capacity_bytes // o["rows"])
            per_row = cols * chans * sets
            row = (row0 + k // per_row) % o["rows"]
            rest = k % per_row
            addrs.append(encode_address(part, channel=rest % chans, row=row,
                                        column=(rest // chans) % cols))
            ops.append(np.full(nops, WRITE if rw == "W" else READ, np.uint8))
        addr = np.concatenate(addrs)
        op = np.concatenate(ops)
        # interleave the streams of the kernel (the unit reads x, writes y, ... column by column)
        order = np.argsort(np.concatenate([np.linspace(0, 1, len(a), endpoint=False)
                                           for a in addrs]), kind="stable")
        addr, op = addr[order], op[order]
        compute = pim_cycles.cycles_per_element(kernel) * task.numel / units
        memory = len(addr) / chans * part.pim_column_cycles
        extra = int(max(0.0, compute - memory))
        out.append(_interleave(addr, op, PIM, extra, PIM_BATCH))
    return np.concatenate(out)


def task_records(task: Task, ctx: Context) -> np.ndarray:
    return host_records(task, ctx) if task.side == "host" else pim_records(task, ctx)

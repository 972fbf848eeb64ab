"""The precision a training step runs in: the dtype of every tensor as torch's autocast gives it.

    fp32       every tensor binary32
    amp-fp16   torch.autocast(dtype=torch.float16) with a GradScaler (loss scaling): CONV and
               linear layers compute in fp16 on fp16 copies of their fp32 weights, every
               activation and activation gradient after them is fp16; parameters (the master
               weights), their gradients, the momentum, batch norm's weights and running
               statistics stay fp32
    amp-bf16   the same in bfloat16, without loss scaling (bf16 has fp32's range)

The rule is autocast's: CONV and linear are on its lower-precision list (their output is 16
bits whatever their input); batch norm, ReLU, pooling, residual add, concatenation, flatten and
dropout are on none of its lists and run in their input's dtype (several inputs: the widest);
the graph's input (the images) stays fp32 (the first CONV reads it through autocast's cast).
tests/test_precision.py checks this against torch's own autocast on every zoo model.
"""
from __future__ import annotations

import copy

from pimrt.errors import ConfigError

#: precision -> the 16-bit dtype of its activations (None: fp32 throughout)
PRECISIONS = {"fp32": None, "amp-fp16": "float16", "amp-bf16": "bfloat16"}
#: the 16-bit lane dtype a memory part's [pim] dtypes must list for a precision
PART_DTYPE = {"amp-fp16": "fp16", "amp-bf16": "bf16"}
#: a dtype as the PIM's lanes name it (pimrt.pim.kernels.variant)
LANE_DTYPE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
#: autocast's lower-precision ops among pimrt's layer kinds
LOWER = ("conv", "linear")
#: loss scaling (torch.amp.GradScaler) for each precision
LOSS_SCALING = {"fp32": False, "amp-fp16": True, "amp-bf16": False}


def check(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; choose one of "
                          f"{', '.join(PRECISIONS)}")
    return precision


def low_dtype(precision: str) -> str | None:
    return PRECISIONS[check(precision)]


def lane_dtype(dtype: str) -> str:
    """"f32", "f16" or "bf16" for a torch dtype name."""
    try:
        return LANE_DTYPE[dtype]
    except KeyError:
        raise ConfigError(f"no PIM lanes for dtype {dtype!r}; the lanes compute "
                          f"{', '.join(LANE_DTYPE)}") from None


def autocast(graph, precision: str):
    """A copy of `graph` with each layer's output dtype, item size and bytes as torch's
    autocast gives them under `precision` (the graph itself for fp32); graph.precision says
    which."""
    low = low_dtype(precision)
    if low is None:
        graph.precision = "fp32"
        return graph
    out = copy.deepcopy(graph)
    out.precision = precision
    dtype: dict[str, str] = {}
    for layer in out.nodes:
        if layer.kind == "input":
            dt = layer.dtype
        elif layer.kind in LOWER:
            dt = low
        elif layer.inputs:
            dt = max((dtype.get(i, layer.dtype) for i in layer.inputs), key=ITEMSIZE.get)
        else:
            dt = layer.dtype
        dtype[layer.name] = dt
        layer.bytes = layer.bytes // layer.itemsize * ITEMSIZE[dt]   # (the output node: 0)
        layer.dtype, layer.itemsize = dt, ITEMSIZE[dt]
    return out


def of(graph) -> str:
    """The precision a graph was set to (LayerGraph.precision: fp32 unless autocast set it)."""
    return graph.precision


def amp(graph) -> bool:
    return of(graph) != "fp32"


def weight_copy(graph, layer) -> bool:
    """Whether `layer` computes on a 16-bit copy of its fp32 weights (CONV/linear under AMP)."""
    return amp(graph) and layer.kind in LOWER and bool(layer.param_bytes)


def loss_scaling(graph) -> bool:
    return LOSS_SCALING[of(graph)]

"""pimrt's layer graph: what :func:`pimrt.graph.capture` returns.

A :class:`LayerGraph` is a topologically ordered list of :class:`Layer` records, one per op
of the traced forward pass (plus one ``input`` and one ``output`` record). Each layer's output
is one tensor, named by the layer's ``name``; ``inputs`` name the layers whose outputs it
reads, in argument order.

Placement (``Layer.placement``) of each kind and why:

=================  =========  ================================================================
kind               placement  why
=================  =========  ================================================================
conv, linear       host       dense MACs: the host's (GPU's) compute
batchnorm          pim        per-channel reductions + elementwise scale/shift, memory bound
relu, relu6        pim        elementwise max (relu6: max then min with 6)
add                pim        elementwise sum of two same-shape tensors (residual add)
maxpool, avgpool   pim        window max/mean over data already in the bank: 2x2 windows with
                   or host    stride 2 and no padding (the PIM's pooling programs); any other
                              pool runs on the host; max-pool backward runs on the host
adaptive_avgpool   host       mean over the spatial window(s): the PIM has no program for it
flatten            view       a reshape of the same bytes: no data moves, no op runs
concat             layout     a copy into one buffer (or producers writing into its slices);
                              no arithmetic; the scheduler decides how it is realised
dropout            host       elementwise mask multiply that needs an RNG; only in
                              classifier heads next to Linear layers, on small tensors
host_fallback      host       an unsupported op the user allowed (``allow_unsupported``)
input, output      io         the batch fed in / the value returned
=================  =========  ================================================================

``Layer.on_pim`` is ``placement == "pim"``; a layer's placement is where its forward pass runs
(:func:`runs_on_pim` per phase, which the runtime's schedule follows).

Backward rules (what each kind's backward reads; used by :meth:`LayerGraph.liveness`):

=================  ===============================================  ==========  ============
kind               backward reads (saved from forward)              extra state grad in-place
=================  ===============================================  ==========  ============
conv               its input (for dW) and its weight (for dX)       -           no
linear             its input (for dW) and its weight (for dX)       -           no
batchnorm          its input (to recompute xhat) and dY             mean, invstd yes
relu               a 1-bit mask of its output (y > 0)               -           yes
relu6              a 1-bit mask of its output (0 < y < 6)           -           yes
add                nothing (dY goes to both inputs unchanged)       -           yes
maxpool            nothing of the feature maps                      argmax idx  no
avgpool,           nothing (only shapes)                            -           no
adaptive_avgpool
flatten            nothing (dX is a view of dY)                     -           yes
concat             nothing (dX_i are slices of dY)                  -           yes
dropout            nothing of the feature maps                      1-bit mask  yes
host_fallback      all its inputs and its output, in full           -           no
=================  ===============================================  ==========  ============

"grad in-place" (``Layer.grad_inplace``) means the op's input gradient has the shape of its
output gradient and can be computed into the output gradient's buffer (Layrub's in-place
gradient reuse). Extra state sizes: batchnorm 2 x C x 4 bytes; maxpool one byte per output
element (the argmax's position inside its window; windows have <= 256 positions); dropout one
bit per element. Masks are 1 bit per element, rounded up to whole bytes.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from pimrt.graph.errors import GraphError

#: Every kind a Layer can have.
KINDS = ("input", "output", "conv", "linear", "batchnorm", "relu", "relu6", "add", "maxpool",
         "avgpool", "adaptive_avgpool", "flatten", "dropout", "concat", "host_fallback")

PIM_KINDS = frozenset({"batchnorm", "relu", "relu6", "add", "maxpool", "avgpool",
                       "adaptive_avgpool"})
HOST_KINDS = frozenset({"conv", "linear", "dropout", "host_fallback"})
PLACEMENT = {**{k: "pim" for k in PIM_KINDS}, **{k: "host" for k in HOST_KINDS},
             "flatten": "view", "concat": "layout", "input": "io", "output": "io"}


def _pool_2x2(attrs: dict) -> bool:
    """The unit's pooling programs do 2x2 windows with stride 2, no padding and no ceil_mode
    (a partial window at an odd edge; docs/pim.md): the functional step's rule too."""
    k, s = attrs.get("kernel"), attrs.get("stride")
    k = k if isinstance(k, (tuple, list)) else (k, k)
    s = s if isinstance(s, (tuple, list)) else (s, s)
    pad = attrs.get("padding") or 0
    pad = pad if isinstance(pad, (tuple, list)) else (pad, pad)
    return tuple(k) == (2, 2) and tuple(s) == (2, 2) and not any(pad) \
        and not attrs.get("ceil_mode", False)


def pim_runs(kind: str, attrs: dict, phase: str) -> bool:
    """Whether the PIM unit has a program for a layer of this kind and attrs in this phase
    ("fwd" or "bwd"): the one rule of what runs where (the graph's placement, the runtime's
    schedule, layers.csv's side)."""
    if kind in ("maxpool", "avgpool"):
        return _pool_2x2(attrs) and not (kind == "maxpool" and phase == "bwd")
    return kind in PIM_KINDS and kind != "adaptive_avgpool"


def runs_on_pim(layer, phase: str) -> bool:
    """Whether the PIM unit has a program for this layer in this phase."""
    return pim_runs(layer.kind, layer.attrs, phase)


def placement_of(kind: str, attrs: dict) -> str:
    """Where a layer's forward pass runs: PLACEMENT, but a layer of a PIM kind the PIM has no
    program for (a 3x3 pool, a global average pool) on the host."""
    if kind in PIM_KINDS and not pim_runs(kind, attrs, "fwd"):
        return "host"
    return PLACEMENT[kind]


@dataclass(frozen=True)
class BackwardRule:
    """What a kind's backward reads. ``inputs``/``output``: None, "full" or "mask"."""

    inputs: str | None
    output: str | None
    extra: str | None
    grad_inplace: bool


BACKWARD_RULES: dict[str, BackwardRule] = {
    "input": BackwardRule(None, None, None, False),
    "output": BackwardRule(None, None, None, False),
    "conv": BackwardRule("full", None, None, False),
    "linear": BackwardRule("full", None, None, False),
    "batchnorm": BackwardRule("full", None, "mean_invstd", True),
    "relu": BackwardRule(None, "mask", None, True),
    "relu6": BackwardRule(None, "mask", None, True),
    "add": BackwardRule(None, None, None, True),
    "maxpool": BackwardRule(None, None, "indices", False),
    "avgpool": BackwardRule(None, None, None, False),
    "adaptive_avgpool": BackwardRule(None, None, None, False),
    "flatten": BackwardRule(None, None, None, True),
    "concat": BackwardRule(None, None, None, True),
    "dropout": BackwardRule(None, None, "mask", True),
    "host_fallback": BackwardRule("full", "full", None, False),
}


_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
             "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def mask_bytes(numel: int) -> int:
    """Bytes of a packed 1-bit-per-element mask."""
    return (numel + 7) // 8


@dataclass
class Layer:
    """One op of the captured forward pass; its output is the tensor named ``name``.

    Shapes include the batch dimension. ``params`` maps the model's full parameter names
    (``layer1.0.conv1.weight``) to shapes; ``buffers`` the same for buffers (BN running
    statistics). ``flops`` is forward FLOPs (2 x MACs) for conv and linear, 0 otherwise.
    ``param_bytes`` is the bytes of this layer's ``params``; ``param_dtypes`` their dtypes.
    ``view_of`` names the tensor this one is a view of (flatten), else None.
    """

    name: str
    kind: str
    index: int
    op: str
    target: str
    module_path: str
    inputs: list[str] = field(default_factory=list)
    consumers: list[str] = field(default_factory=list)
    input_shapes: list[tuple[int, ...]] = field(default_factory=list)
    shape: tuple[int, ...] = ()
    dtype: str = "float32"
    itemsize: int = 4
    bytes: int = 0
    params: dict[str, tuple[int, ...]] = field(default_factory=dict)
    param_bytes: int = 0
    param_dtypes: dict[str, str] = field(default_factory=dict)
    buffers: dict[str, tuple[int, ...]] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    flops: int = 0
    placement: str = "host"
    view_of: str | None = None

    @property
    def on_pim(self) -> bool:
        return self.placement == "pim"

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 0

    @property
    def param_numel(self) -> int:
        """Values in this layer's parameters."""
        return sum(math.prod(s) for s in self.params.values())

    @property
    def backward_rule(self) -> BackwardRule:
        return BACKWARD_RULES[self.kind]

    @property
    def grad_inplace(self) -> bool:
        return BACKWARD_RULES[self.kind].grad_inplace

    @property
    def extra_saved_bytes(self) -> int:
        """Bytes of backward state that is not a graph tensor (BN statistics, pool argmax,
        dropout mask)."""
        extra = BACKWARD_RULES[self.kind].extra
        if extra == "mean_invstd":
            return 2 * self.attrs.get("num_features", self.shape[1] if len(self.shape) > 1
                                      else 0) * 4
        if extra == "indices":
            return self.numel
        if extra == "mask":
            return mask_bytes(self.numel)
        return 0

    @property
    def backward_flops(self) -> int:
        """Backward FLOPs for conv/linear: dW (same MACs as forward) plus dX (same again,
        unless the input is the graph input, whose gradient is not needed)."""
        if self.kind not in ("conv", "linear"):
            return 0
        needs_dx = bool(self.attrs.get("needs_input_grad", True))
        return self.flops * (2 if needs_dx else 1)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["on_pim"] = self.on_pim
        d["grad_inplace"] = self.grad_inplace
        d["extra_saved_bytes"] = self.extra_saved_bytes
        return _jsonable(d)


@dataclass
class TensorLife:
    """Liveness of one tensor (the output of layer ``tensor``).

    ``readers``: indices of the layers that read it in forward (ascending).
    ``last_forward_reader``: max of ``readers`` (the producer's index when nothing reads it).
    ``backward_full``: indices of layers whose backward reads the whole tensor.
    ``backward_mask``: indices of layers whose backward reads only a 1-bit mask of it.
    Backward runs layers in decreasing index order, so the tensor (or its mask) must be kept
    until the backward of ``last_backward_reader`` (the smallest such index) has run.
    """

    tensor: str
    producer: int
    bytes: int
    readers: list[int]
    last_forward_reader: int
    backward_full: list[int]
    backward_mask: list[int]
    view_of: str | None = None

    @property
    def backward_readers(self) -> list[int]:
        return sorted(set(self.backward_full) | set(self.backward_mask), reverse=True)

    @property
    def last_backward_reader(self) -> int | None:
        r = self.backward_readers
        return r[-1] if r else None

    @property
    def saved_for_backward(self) -> bool:
        return bool(self.backward_full or self.backward_mask)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["backward_readers"] = self.backward_readers
        d["last_backward_reader"] = self.last_backward_reader
        return d


class LayerGraph:
    """The captured model. ``nodes`` is topologically ordered (``nodes[i].index == i``)."""

    def __init__(self, nodes: list[Layer], input_shape: tuple[int, ...], dtype: str = "float32",
                 model_name: str = ""):
        self.nodes = nodes
        self.input_shape = tuple(input_shape)
        self.dtype = dtype
        self.model_name = model_name
        self.precision = "fp32"          # pimrt.graph.precision.autocast sets it
        self._by_name = {n.name: n for n in nodes}

    # -- access ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.nodes)

    def __getitem__(self, key: int | str) -> Layer:
        if isinstance(key, str):
            return self.node(key)
        return self.nodes[key]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def node(self, name: str) -> Layer:
        try:
            return self._by_name[name]
        except KeyError:
            raise GraphError(f"no layer named {name!r} in the graph") from None

    @property
    def batch(self) -> int:
        return self.input_shape[0]

    def producers(self, name: str) -> list[Layer]:
        return [self._by_name[i] for i in self.node(name).inputs]

    def consumers(self, name: str) -> list[Layer]:
        return [self._by_name[c] for c in self.node(name).consumers]

    def layers_of_kind(self, *kinds: str | Iterable[str]) -> list[Layer]:
        wanted: set[str] = set()
        for k in kinds:
            wanted.update([k] if isinstance(k, str) else k)
        unknown = wanted - set(KINDS)
        if unknown:
            raise GraphError(f"unknown layer kind(s) {sorted(unknown)}; kinds: {', '.join(KINDS)}")
        return [n for n in self.nodes if n.kind in wanted]

    def kind_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.kind] = counts.get(n.kind, 0) + 1
        return counts

    @property
    def host_layers(self) -> list[Layer]:
        return [n for n in self.nodes if n.placement == "host"]

    @property
    def pim_layers(self) -> list[Layer]:
        return [n for n in self.nodes if n.on_pim]

    # -- totals --------------------------------------------------------------------------
    def total_flops(self, which: str = "forward") -> int:
        """FLOPs (2 x MACs) of conv and linear layers for the whole batch: ``forward``,
        ``backward`` (dW + dX) or ``training`` (both)."""
        fwd = sum(n.flops for n in self.nodes)
        if which == "forward":
            return fwd
        bwd = sum(n.backward_flops for n in self.nodes)
        if which == "backward":
            return bwd
        if which == "training":
            return fwd + bwd
        raise GraphError(f"total_flops: which must be forward, backward or training, got {which!r}")

    def activation_bytes(self, include_input: bool = True) -> int:
        """Bytes of all tensors the forward pass produces (views excluded; the input batch
        included unless ``include_input=False``): what training would keep with no reuse."""
        return sum(n.bytes for n in self.nodes
                   if n.kind != "output" and n.view_of is None
                   and (include_input or n.kind != "input"))

    def saved_bytes(self) -> int:
        """Bytes forward keeps for backward under the rules above, with no recomputation or
        reuse: tensors some backward reads in full, 1-bit masks of tensors only a mask of
        which is read, and the extra state (BN statistics, pool argmax, dropout masks)."""
        total = 0
        for life in self.liveness().values():
            if life.view_of is not None:
                continue
            if life.backward_full:
                total += life.bytes
            elif life.backward_mask:
                total += mask_bytes(life.bytes // max(1, self.node(life.tensor).itemsize))
        return total + sum(n.extra_saved_bytes for n in self.nodes)

    def training_bytes(self, optimizer_slots: int = 1) -> int:
        """A lower bound on training memory with no reuse: parameters, their gradients,
        ``optimizer_slots`` optimizer states per parameter (1 = SGD momentum), the saved
        tensors of :meth:`saved_bytes` and the largest layer output (being produced)."""
        largest = max((n.bytes for n in self.nodes), default=0)
        return self.param_bytes() * (2 + optimizer_slots) + self.saved_bytes() + largest

    def param_bytes(self) -> int:
        """Bytes of the model's parameters (each shared parameter counted once)."""
        return sum(info["bytes"] for info in self.param_info().values())

    def param_count(self) -> int:
        """Number of parameter elements (each shared parameter counted once)."""
        return sum(info["numel"] for info in self.param_info().values())

    def param_info(self) -> dict[str, dict[str, Any]]:
        """Every parameter the layers use: full name -> shape, dtype, numel, bytes, layers."""
        info: dict[str, dict[str, Any]] = {}
        for n in self.nodes:
            for p, s in n.params.items():
                if p not in info:
                    dtype = n.param_dtypes.get(p, "float32")
                    numel = math.prod(s)
                    info[p] = {"shape": tuple(s), "dtype": dtype, "numel": numel,
                               "bytes": numel * _ITEMSIZE.get(dtype, 4), "layers": []}
                info[p]["layers"].append(n.name)
        return info

    # -- liveness ------------------------------------------------------------------------
    def liveness(self) -> dict[str, TensorLife]:
        """For each tensor (keyed by its producer's name, in producer order): producer index,
        forward readers, last forward reader, and the layers whose backward reads it (in full
        or as a mask), following the per-kind rules in this module's docstring."""
        lives: dict[str, TensorLife] = {}
        for n in self.nodes:
            if n.kind == "output":
                continue
            lives[n.name] = TensorLife(n.name, n.index, n.bytes, [], n.index, [], [], n.view_of)
        for n in self.nodes:
            for src in n.inputs:
                life = lives[src]
                if n.index not in life.readers:
                    life.readers.append(n.index)
                life.last_forward_reader = max(life.last_forward_reader, n.index)
            rule = BACKWARD_RULES[n.kind]
            if rule.inputs:
                for src in n.inputs:
                    target = lives[src].backward_full if rule.inputs == "full" \
                        else lives[src].backward_mask
                    if n.index not in target:
                        target.append(n.index)
            if rule.output and n.name in lives:
                target = lives[n.name].backward_full if rule.output == "full" \
                    else lives[n.name].backward_mask
                target.append(n.index)
        for life in lives.values():
            life.readers.sort()
            life.backward_full.sort(reverse=True)
            life.backward_mask.sort(reverse=True)
        return lives

    # -- output --------------------------------------------------------------------------
    def summary(self, max_rows: int | None = None) -> str:
        """A table of the layers and the totals, as a string."""
        head = f"{'#':>4}  {'name':<40} {'kind':<16} {'where':<6} {'output shape':<22} " \
               f"{'MiB':>9} {'params':>11} {'MFLOPs':>11}"
        lines = [head, "-" * len(head)]
        rows = self.nodes if max_rows is None or len(self.nodes) <= max_rows \
            else self.nodes[: max_rows // 2] + [None] + self.nodes[-(max_rows // 2):]
        for n in rows:
            if n is None:
                lines.append(f"{'...':>4}  ({len(self.nodes) - 2 * (max_rows // 2)} more)")
                continue
            nparams = sum(math.prod(s) for s in n.params.values())
            name = n.name if len(n.name) <= 40 else n.name[:18] + ".." + n.name[-20:]
            lines.append(
                f"{n.index:>4}  {name:<40} {n.kind:<16} {n.placement:<6} "
                f"{str(tuple(n.shape)):<22} {n.bytes / 2**20:>9.2f} {nparams:>11,} "
                f"{n.flops / 1e6:>11.1f}")
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.kind_counts().items()))
        lines += [
            "-" * len(head),
            f"model {self.model_name or '?'}: input {tuple(self.input_shape)} {self.dtype}; "
            f"{len(self.nodes)} layers ({counts})",
            f"forward {self.total_flops() / 1e9:.2f} GFLOPs; params {self.param_count():,} "
            f"({self.param_bytes() / 2**20:.1f} MiB); activations "
            f"{self.activation_bytes() / 2**20:.1f} MiB (saved for backward "
            f"{self.saved_bytes() / 2**20:.1f} MiB)",
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON-serialisable data."""
        return {
            "model": self.model_name,
            "input_shape": list(self.input_shape),
            "dtype": self.dtype,
            "nodes": [n.to_dict() for n in self.nodes],
            "totals": {
                "layers": len(self.nodes),
                "kind_counts": self.kind_counts(),
                "forward_flops": self.total_flops(),
                "param_count": self.param_count(),
                "param_bytes": self.param_bytes(),
                "activation_bytes": self.activation_bytes(),
                "saved_bytes": self.saved_bytes(),
            },
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __repr__(self) -> str:
        return (f"LayerGraph({self.model_name or 'model'}, input={tuple(self.input_shape)}, "
                f"{len(self.nodes)} layers)")


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)

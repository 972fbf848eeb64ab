"""Capture a torch ``nn.Module`` into pimrt's :class:`~pimrt.graph.layer.LayerGraph`.

How: the model is traced with ``torch.fx`` (the model is only read), the leaf modules the
graph calls are copied with every parameter and buffer replaced by a ``meta`` tensor (no
memory, no compute), and the graph is run once through
a shape-propagation interpreter (``torch.fx.passes.shape_prop``'s, plus error reporting) on a
``meta`` input of ``input_shape`` (FakeTensors if the modules cannot be copied). Each fx node
is then classified into a layer kind. Ops that only compute shapes (``x.size(0)``,
``x.shape``, int arithmetic) and aliases (``nn.Identity``, ``x.contiguous()``) become no layer.
The user's model is never modified or run.
"""
from __future__ import annotations

import copy
import math
import operator
import warnings
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.fx.node import Node, _get_qualified_name
from torch.fx.passes.shape_prop import TensorMetadata

from pimrt.graph.errors import GraphError, UnsupportedOpError, UnsupportedOpWarning
from pimrt.graph.layer import PLACEMENT, Layer, LayerGraph, placement_of

# --------------------------------------------------------------------------------------------
# What is supported.

#: nn.Module leaf types -> kind ("alias": the module returns its input: no layer).
MODULE_KINDS: list[tuple[type, str]] = [
    (nn.Conv2d, "conv"),
    (nn.Linear, "linear"),
    (nn.BatchNorm2d, "batchnorm"),
    (nn.BatchNorm1d, "batchnorm"),
    (nn.ReLU6, "relu6"),
    (nn.ReLU, "relu"),
    (nn.MaxPool2d, "maxpool"),
    (nn.AvgPool2d, "avgpool"),
    (nn.AdaptiveAvgPool2d, "adaptive_avgpool"),
    (nn.Flatten, "flatten"),
    (nn.Dropout, "dropout"),
    (nn.Dropout2d, "dropout"),
    (nn.Identity, "alias"),
]

# call_function targets -> (kind or a "check:" marker resolved once shapes are known,
# positional parameter names).
_FUNCTIONS: dict[Any, tuple[str, tuple[str, ...]]] = {
    F.relu: ("relu", ("input", "inplace")),
    torch.relu: ("relu", ("input",)),
    torch.relu_: ("relu", ("input",)),
    F.relu6: ("relu6", ("input", "inplace")),
    F.hardtanh: ("check:hardtanh", ("input", "min_val", "max_val", "inplace")),
    torch.clamp: ("check:clamp", ("input", "min", "max")),
    torch.clip: ("check:clamp", ("input", "min", "max")),
    operator.add: ("check:add", ("input", "other")),
    operator.iadd: ("check:add", ("input", "other")),
    torch.add: ("check:add", ("input", "other", "alpha")),
    F.max_pool2d: ("maxpool", ("input", "kernel_size", "stride", "padding", "dilation",
                               "ceil_mode", "return_indices")),
    torch.max_pool2d: ("maxpool", ("input", "kernel_size", "stride", "padding", "dilation",
                                   "ceil_mode")),
    F.avg_pool2d: ("avgpool", ("input", "kernel_size", "stride", "padding", "ceil_mode",
                               "count_include_pad", "divisor_override")),
    F.adaptive_avg_pool2d: ("adaptive_avgpool", ("input", "output_size")),
    torch.mean: ("check:mean", ("input", "dim", "keepdim")),
    torch.flatten: ("flatten", ("input", "start_dim", "end_dim")),
    torch.cat: ("concat", ("tensors", "dim")),
    torch.concat: ("concat", ("tensors", "dim")),
    torch.concatenate: ("concat", ("tensors", "axis")),
    F.dropout: ("dropout", ("input", "p", "training", "inplace")),
    F.dropout2d: ("dropout", ("input", "p", "training", "inplace")),
    torch.dropout: ("dropout", ("input", "p", "train")),
    # Shape arithmetic: no layer when the result is not a tensor.
    getattr: ("check:meta", ()),
    operator.getitem: ("check:getitem", ()),
    operator.mul: ("check:meta", ()),
    operator.floordiv: ("check:meta", ()),
    operator.truediv: ("check:meta", ()),
    operator.sub: ("check:meta", ()),
    operator.mod: ("check:meta", ()),
    operator.neg: ("check:meta", ()),
}

# call_method names -> (kind or check marker, positional parameter names after self).
_METHODS: dict[str, tuple[str, tuple[str, ...]]] = {
    "relu": ("relu", ()),
    "relu_": ("relu", ()),
    "clamp": ("check:clamp", ("min", "max")),
    "clamp_": ("check:clamp", ("min", "max")),
    "clip": ("check:clamp", ("min", "max")),
    "add": ("check:add", ("other", "alpha")),
    "add_": ("check:add", ("other", "alpha")),
    "__add__": ("check:add", ("other",)),
    "__iadd__": ("check:add", ("other",)),
    "flatten": ("flatten", ("start_dim", "end_dim")),
    "view": ("check:reshape", ()),
    "reshape": ("check:reshape", ()),
    "mean": ("check:mean", ("dim", "keepdim")),
    "size": ("meta", ()),
    "dim": ("meta", ()),
    "numel": ("meta", ()),
    "contiguous": ("alias", ()),
}

SUPPORTED_TEXT = ("Conv2d, Linear, BatchNorm2d/1d, ReLU (nn.ReLU, F.relu, torch.relu, "
                  "clamp(min=0)), ReLU6 (nn.ReLU6, F.relu6, hardtanh/clamp to [0, 6]), residual "
                  "add of two same-shape tensors (+, +=, torch.add, Tensor.add), MaxPool2d, "
                  "AvgPool2d, AdaptiveAvgPool2d (and mean over H, W), flatten (nn.Flatten, "
                  "torch.flatten, view/reshape/flatten that merge dims), Dropout, torch.cat, "
                  "nn.Identity")


# --------------------------------------------------------------------------------------------
# Helpers.

def _qualname(fn: Any) -> str:
    try:
        return _get_qualified_name(fn)
    except Exception:  # noqa: BLE001 - anything without a qualified name
        return repr(fn)


def _bind(args: tuple, kwargs: dict, names: tuple[str, ...]) -> dict[str, Any]:
    out = dict(zip(names, args))
    out.update(kwargs)
    return out


def _pair(v: Any) -> Any:
    if isinstance(v, int):
        return (v, v)
    if isinstance(v, (list, tuple)):
        return tuple(v)
    return v


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _module_path(node: Node) -> str:
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack")
    if stack:
        return str(next(reversed(stack)))
    return ""


def _describe_target(node: Node, modules: dict[str, nn.Module]) -> str:
    if node.op == "call_module":
        mod = modules.get(str(node.target))
        cls = type(mod)
        return f"{node.target} ({cls.__module__}.{cls.__qualname__})"
    if node.op == "call_function":
        return _qualname(node.target)
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return str(node.target)


def _arg_nodes(obj: Any) -> list[Node]:
    """fx Nodes inside an argument structure, in order (duplicates kept)."""
    found: list[Node] = []
    torch.fx.node.map_arg(obj, lambda n: found.append(n) or n)
    return found


def _meta_tensor(t: torch.Tensor) -> torch.Tensor:
    m = torch.empty_like(t, device="meta")
    if isinstance(t, nn.Parameter):
        m = nn.Parameter(m, requires_grad=t.requires_grad)
    return m


def _meta_module(mod: nn.Module) -> nn.Module:
    """A shallow copy of leaf module ``mod`` whose parameters and buffers are meta tensors
    (so running it costs nothing and the user's module is untouched)."""
    new = copy.copy(mod)
    new._parameters = {k: None if v is None else _meta_tensor(v)
                       for k, v in mod._parameters.items()}
    new._buffers = {k: None if v is None else _meta_tensor(v) for k, v in mod._buffers.items()}
    new._modules = {k: None if v is None else _meta_module(v) for k, v in mod._modules.items()}
    return new


def _meta_graph_module(model: nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """A GraphModule running ``graph`` with meta copies of the modules and tensors it uses."""
    root: dict[str, Any] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            root[node.target] = _meta_module(model.get_submodule(node.target))
        elif node.op == "get_attr":
            obj: Any = model
            for part in str(node.target).split("."):
                obj = getattr(obj, part)
            root[node.target] = _meta_tensor(obj) if isinstance(obj, torch.Tensor) else obj
    gm = torch.fx.GraphModule(root, graph)
    gm.eval()
    return gm


class _ShapeProp(torch.fx.Interpreter):
    """torch.fx shape propagation (ShapeProp's job: ``node.meta["tensor_meta"]``) that also
    keeps each node's meta value, and reports a failure as a GraphError naming the node
    (ShapeProp itself prints a traceback and raises a bare RuntimeError)."""

    def __init__(self, gm: torch.fx.GraphModule, modules: dict[str, nn.Module],
                 fake_mode: Any = None):
        super().__init__(gm)
        self.extra_traceback = False
        self.values: dict[Node, Any] = {}
        self._modules = modules
        self.fake_mode = fake_mode
        self.real_module = gm
        self.fake_module = None
        if fake_mode is not None:
            from torch._dynamo.utils import deepcopy_to_fake_tensor
            self.fake_module = deepcopy_to_fake_tensor(gm, fake_mode)

    def propagate(self, *args: Any) -> Any:
        if self.fake_mode is not None:
            args = tuple(self.fake_mode.from_tensor(a) if isinstance(a, torch.Tensor) else a
                         for a in args)
        return self.run(*args)

    def run_node(self, n: Node) -> Any:
        try:
            if self.fake_module is not None:
                from torch._dispatch.python import enable_python_dispatcher
                self.module = self.fake_module
                try:
                    with self.fake_mode, enable_python_dispatcher():
                        result = super().run_node(n)
                finally:
                    self.module = self.real_module
            else:
                result = super().run_node(n)
        except GraphError:
            raise
        except Exception as exc:  # noqa: BLE001 - report which node failed, and why
            shapes = [tuple(self.values[a].shape) for a in _arg_nodes((n.args, n.kwargs))
                      if isinstance(self.values.get(a), torch.Tensor)]
            raise GraphError(
                f"shape propagation failed at node '{n.name}' "
                f"({_describe_target(n, self._modules)}) in module "
                f"'{_module_path(n) or '<top>'}' with input shapes {shapes}: "
                f"{type(exc).__name__}: {str(exc).strip()}") from exc
        self.values[n] = result
        if isinstance(result, torch.Tensor):
            n.meta["tensor_meta"] = _tensor_meta(result)
        return result

    # Shape-preserving ops on meta tensors go through Python decompositions (batch norm ~4 ms
    # a call; elementwise ops import torch._dynamo, seconds, on first use). Their output has
    # their input's shape, so they are answered directly.

    def call_module(self, target: Any, args: tuple, kwargs: dict) -> Any:
        mod = self.fetch_attr(target) if self.fake_module is None else None
        if (isinstance(mod, _SHAPE_PRESERVING_MODULES) and not kwargs and len(args) == 1
                and _is_meta(args[0])):
            x = args[0]
            if isinstance(mod, nn.modules.batchnorm._BatchNorm) and (
                    x.dim() < 2 or x.shape[1] != mod.num_features):
                raise GraphError(f"{type(mod).__name__} '{target}' expects "
                                 f"{mod.num_features} channels, its input has shape "
                                 f"{tuple(x.shape)}")
            return torch.empty_like(x)
        if (isinstance(mod, nn.AdaptiveAvgPool2d) and not kwargs and len(args) == 1
                and _is_meta(args[0])):
            return _adaptive_pool_meta(args[0], mod.output_size)
        if isinstance(mod, nn.Linear) and not kwargs and len(args) == 1 and _is_meta(args[0]):
            x = args[0]
            if x.dim() < 1 or x.shape[-1] != mod.in_features:
                raise GraphError(f"Linear '{target}' expects {mod.in_features} input features, "
                                 f"its input has shape {tuple(x.shape)}")
            return x.new_empty(tuple(x.shape[:-1]) + (mod.out_features,))
        return super().call_module(target, args, kwargs)

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        if self.fake_module is None:
            shortcut = _elementwise_shortcut(target in _UNARY_FUNCTIONS,
                                             target in _BINARY_FUNCTIONS, args, kwargs)
            if shortcut is not None:
                return shortcut
            if target in (torch.cat, torch.concat) and args and isinstance(args[0], (list, tuple)) \
                    and args[0] and all(_is_meta(t) for t in args[0]) and set(kwargs) <= {"dim"}:
                return _cat_meta(list(args[0]), args[1] if len(args) > 1 else kwargs.get("dim", 0))
            if target is F.adaptive_avg_pool2d and len(args) + len(kwargs) == 2 and \
                    _is_meta(args[0]):
                return _adaptive_pool_meta(args[0], args[1] if len(args) == 2
                                           else kwargs["output_size"])
        return super().call_function(target, args, kwargs)

    def call_method(self, target: Any, args: tuple, kwargs: dict) -> Any:
        if self.fake_module is None:
            shortcut = _elementwise_shortcut(target in ("relu", "relu_"),
                                             target in ("add", "add_", "__add__", "__iadd__"),
                                             args, kwargs)
            if shortcut is not None:
                return shortcut
        return super().call_method(target, args, kwargs)


_SHAPE_PRESERVING_MODULES = (nn.modules.batchnorm._BatchNorm, nn.ReLU, nn.ReLU6, nn.Dropout,
                             nn.Dropout2d)
_UNARY_FUNCTIONS = frozenset({F.relu, torch.relu, torch.relu_, F.relu6})
_BINARY_FUNCTIONS = frozenset({operator.add, operator.iadd, torch.add})


def _is_meta(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "meta"


def _elementwise_shortcut(unary: bool, binary: bool, args: tuple,
                          kwargs: dict) -> torch.Tensor | None:
    if unary and len(args) == 1 and _is_meta(args[0]) and set(kwargs) <= {"inplace"}:
        return torch.empty_like(args[0])
    if (binary and len(args) == 2 and not kwargs and _is_meta(args[0]) and _is_meta(args[1])
            and args[0].shape == args[1].shape and args[0].dtype == args[1].dtype):
        return torch.empty_like(args[0])
    return None


def _adaptive_pool_meta(x: torch.Tensor, output_size: Any) -> torch.Tensor:
    if x.dim() not in (3, 4):
        raise GraphError(f"adaptive_avg_pool2d needs a 3-d or 4-d input, got shape "
                         f"{tuple(x.shape)}")
    size = _pair(output_size)
    hw = tuple(x.shape[-2 + i] if s is None else int(s) for i, s in enumerate(size))
    return x.new_empty(tuple(x.shape[:-2]) + hw)


def _cat_meta(tensors: list[torch.Tensor], dim: int) -> torch.Tensor:
    first = tensors[0]
    nd = first.dim()
    if nd == 0 or not -nd <= dim < nd:
        raise GraphError(f"torch.cat: dim {dim} out of range for {nd}-d tensors")
    d = dim % nd
    for t in tensors[1:]:
        if t.dim() != nd or t.dtype != first.dtype or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d):
            raise GraphError(f"torch.cat along dim {dim}: shapes "
                             f"{[tuple(x.shape) for x in tensors]} do not match")
    shape = list(first.shape)
    shape[d] = sum(t.shape[d] for t in tensors)
    return first.new_empty(shape)


def _tensor_meta(t: torch.Tensor) -> TensorMetadata:
    """ShapeProp's TensorMetadata, without its (slow on meta) memory-format probing."""
    return TensorMetadata(tuple(t.shape), t.dtype, t.requires_grad, tuple(t.stride()), None,
                          False, {})


# --------------------------------------------------------------------------------------------
# Classification.

class _Unsupported(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _static_kind(node: Node, modules: dict[str, nn.Module]) -> str | None:
    """The kind or check marker a node maps to before shapes are known; raise _Unsupported
    for ops no shape can make supported. None for placeholder/output/get_attr."""
    if node.op == "call_module":
        mod = modules[str(node.target)]
        for cls, kind in MODULE_KINDS:
            if isinstance(mod, cls):
                if kind == "maxpool" and mod.return_indices:
                    raise _Unsupported("MaxPool2d with return_indices=True")
                return kind
        raise _Unsupported(f"module type {type(mod).__qualname__}")
    if node.op == "call_function":
        entry = _FUNCTIONS.get(node.target)
        if entry is None:
            raise _Unsupported(f"function {_qualname(node.target)}")
        return entry[0]
    if node.op == "call_method":
        entry = _METHODS.get(str(node.target))
        if entry is None:
            raise _Unsupported(f"tensor method .{node.target}()")
        return entry[0]
    return None


def _is_tensor(v: Any) -> bool:
    return isinstance(v, torch.Tensor)


def _merge_dims(src: tuple[int, ...], dst: tuple[int, ...]) -> tuple[int, int] | None:
    """(start, end) if ``dst`` is ``src`` with dims start..end merged into one, else None."""
    if src == dst:
        return None
    k = len(src) - len(dst)
    if k < 1:
        return None
    for start in range(len(dst)):
        end = start + k
        if (src[:start] == dst[:start] and src[end + 1:] == dst[start + 1:]
                and math.prod(src[start:end + 1]) == dst[start]):
            return start, end
    return None


class _Classifier:
    def __init__(self, gm: torch.fx.GraphModule, modules: dict[str, nn.Module],
                 values: dict[Node, Any]):
        self.gm = gm
        self.modules = modules
        self.values = values

    def tensor_args(self, node: Node, layer_of: dict[Node, str]) -> list[Node]:
        return [a for a in _arg_nodes((node.args, node.kwargs)) if a in layer_of]

    def resolve(self, node: Node, kind: str, layer_of: dict[Node, str],
                fallback_nodes: set[Node]) -> tuple[str, dict[str, Any]]:
        """Final (kind, attrs) of a call node; kinds 'meta' and 'alias' make no layer."""
        out = self.values.get(node)
        args, kwargs = node.args, node.kwargs
        if node.op == "call_function":
            names = _FUNCTIONS[node.target][1]
            bound = _bind(args, kwargs, names)
        elif node.op == "call_method":
            names = _METHODS[str(node.target)][1]
            bound = _bind(args[1:], kwargs, names)
            bound["input"] = args[0]
        else:
            bound = {}

        if kind == "check:meta":
            if _is_tensor(out):
                raise _Unsupported(f"elementwise {_qualname(node.target)} on tensors")
            return "meta", {}
        if kind == "meta":
            return "meta", {}
        if kind == "check:getitem":
            src = args[0]
            if isinstance(src, Node) and src in fallback_nodes:
                return "host_fallback", {"reason": "item of an unsupported op's output"}
            if _is_tensor(out):
                raise _Unsupported("tensor indexing / slicing")
            return "meta", {}
        if not _is_tensor(out):
            raise _Unsupported(f"op returning {type(out).__name__}, not one tensor")
        if kind == "alias":
            return "alias", {}

        if kind == "check:add":
            operands = [bound.get("input"), bound.get("other")]
            if not all(isinstance(o, Node) and o in layer_of for o in operands):
                raise _Unsupported("add with a scalar or a parameter (only the residual add "
                                   "of two activations is supported)")
            shapes = [tuple(self.values[o].shape) for o in operands]
            if shapes[0] != shapes[1]:
                raise _Unsupported(f"broadcasting add of shapes {shapes[0]} and {shapes[1]}")
            alpha = bound.get("alpha", 1)
            return "add", {"alpha": alpha, "inplace": str(node.target) in
                           ("add_", "__iadd__") or node.target is operator.iadd}
        if kind in ("check:clamp", "check:hardtanh"):
            lo = bound.get("min", bound.get("min_val", -1.0 if kind == "check:hardtanh" else None))
            hi = bound.get("max", bound.get("max_val", 1.0 if kind == "check:hardtanh" else None))
            if isinstance(lo, Node) or isinstance(hi, Node):
                raise _Unsupported("clamp with tensor bounds")
            inplace = bool(bound.get("inplace", False)) or str(node.target).endswith("_")
            if lo == 0 and hi is None:
                return "relu", {"inplace": inplace}
            if lo == 0 and hi == 6:
                return "relu6", {"inplace": inplace, "min": 0.0, "max": 6.0}
            raise _Unsupported(f"clamp to [{lo}, {hi}] (only [0, inf) = ReLU and [0, 6] = "
                               f"ReLU6 are supported)")
        if kind == "check:mean":
            src = bound.get("input")
            dims = bound.get("dim")
            if not (isinstance(src, Node) and src in layer_of) or dims is None:
                raise _Unsupported("mean that is not a spatial (global average) pool")
            in_shape = tuple(self.values[src].shape)
            nd = len(in_shape)
            dims = (dims,) if isinstance(dims, int) else tuple(dims)
            if nd != 4 or sorted(d % nd for d in dims) != [2, 3]:
                raise _Unsupported(f"mean over dims {dims} of a {nd}-d tensor (only the "
                                   f"spatial mean over H, W is supported)")
            return "adaptive_avgpool", {"output_size": (1, 1),
                                        "keepdim": bool(bound.get("keepdim", False)),
                                        "from": "mean"}
        if kind == "check:reshape":
            src = args[0]
            in_shape = tuple(self.values[src].shape)
            if in_shape == tuple(out.shape):
                return "alias", {}
            merged = _merge_dims(in_shape, tuple(out.shape))
            if merged is None or merged[0] == 0:
                raise _Unsupported(f"{node.target} from {in_shape} to {tuple(out.shape)} (only "
                                   f"flattening of non-batch dims is supported)")
            return "flatten", {"start_dim": merged[0], "end_dim": merged[1],
                               "from": str(node.target)}

        if node.op == "call_module":
            return kind, self.module_attrs(kind, self.modules[str(node.target)])
        return kind, self.function_attrs(kind, node, bound)

    @staticmethod
    def module_attrs(kind: str, mod: nn.Module) -> dict[str, Any]:
        if kind == "conv":
            return {"in_channels": mod.in_channels, "out_channels": mod.out_channels,
                    "kernel": tuple(mod.kernel_size), "stride": tuple(mod.stride),
                    "padding": _pair(mod.padding), "dilation": tuple(mod.dilation),
                    "groups": mod.groups, "bias": mod.bias is not None,
                    "padding_mode": mod.padding_mode}
        if kind == "linear":
            return {"in_features": mod.in_features, "out_features": mod.out_features,
                    "bias": mod.bias is not None}
        if kind == "batchnorm":
            return {"num_features": mod.num_features, "eps": mod.eps, "momentum": mod.momentum,
                    "affine": mod.affine, "track_running_stats": mod.track_running_stats}
        if kind == "relu":
            return {"inplace": mod.inplace}
        if kind == "relu6":
            return {"inplace": mod.inplace, "min": 0.0, "max": 6.0}
        if kind == "maxpool":
            return {"kernel": _pair(mod.kernel_size),
                    "stride": _pair(mod.stride if mod.stride is not None else mod.kernel_size),
                    "padding": _pair(mod.padding), "dilation": _pair(mod.dilation),
                    "ceil_mode": mod.ceil_mode}
        if kind == "avgpool":
            return {"kernel": _pair(mod.kernel_size),
                    "stride": _pair(mod.stride if mod.stride is not None else mod.kernel_size),
                    "padding": _pair(mod.padding), "ceil_mode": mod.ceil_mode,
                    "count_include_pad": mod.count_include_pad,
                    "divisor_override": mod.divisor_override}
        if kind == "adaptive_avgpool":
            return {"output_size": _pair(mod.output_size)}
        if kind == "flatten":
            return {"start_dim": mod.start_dim, "end_dim": mod.end_dim}
        if kind == "dropout":
            return {"p": mod.p, "inplace": mod.inplace,
                    "channelwise": isinstance(mod, nn.Dropout2d)}
        return {}

    @staticmethod
    def function_attrs(kind: str, node: Node, b: dict[str, Any]) -> dict[str, Any]:
        if kind == "relu":
            return {"inplace": bool(b.get("inplace", False)) or str(node.target).endswith("_")
                    or node.target is torch.relu_}
        if kind == "relu6":
            return {"inplace": bool(b.get("inplace", False)), "min": 0.0, "max": 6.0}
        if kind == "maxpool":
            if b.get("return_indices"):
                raise _Unsupported("max_pool2d with return_indices=True")
            k = b.get("kernel_size")
            s = b.get("stride") or k
            return {"kernel": _pair(k), "stride": _pair(s), "padding": _pair(b.get("padding", 0)),
                    "dilation": _pair(b.get("dilation", 1)),
                    "ceil_mode": bool(b.get("ceil_mode", False))}
        if kind == "avgpool":
            k = b.get("kernel_size")
            s = b.get("stride") or k
            return {"kernel": _pair(k), "stride": _pair(s), "padding": _pair(b.get("padding", 0)),
                    "ceil_mode": bool(b.get("ceil_mode", False)),
                    "count_include_pad": bool(b.get("count_include_pad", True)),
                    "divisor_override": b.get("divisor_override")}
        if kind == "adaptive_avgpool":
            return {"output_size": _pair(b.get("output_size"))}
        if kind == "flatten":
            return {"start_dim": b.get("start_dim", 0),
                    "end_dim": b.get("end_dim", -1)}
        if kind == "concat":
            return {"dim": b.get("dim", b.get("axis", 0))}
        if kind == "dropout":
            return {"p": b.get("p", 0.5), "inplace": bool(b.get("inplace", False)),
                    "training": b.get("training", b.get("train", True)),
                    "channelwise": node.target is F.dropout2d}
        return {}


# --------------------------------------------------------------------------------------------
# capture()

def _check_input_shape(input_shape: Any) -> tuple[int, ...]:
    try:
        shape = tuple(input_shape)
    except TypeError:
        raise GraphError(f"input_shape must be a sequence of positive ints like "
                         f"(32, 3, 224, 224), got {input_shape!r}") from None
    if len(shape) < 2 or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0
                                 for d in shape):
        raise GraphError(f"input_shape must be (batch, channels, ...) with positive ints, "
                         f"got {input_shape!r}")
    return shape


def capture(model: nn.Module, input_shape: tuple[int, ...] | list[int],
            allow_unsupported: bool = False, dtype: torch.dtype = torch.float32,
            name: str | None = None) -> LayerGraph:
    """Trace ``model`` with torch.fx and propagate ``input_shape`` (batch first) through it on
    meta tensors; return the :class:`LayerGraph`.

    Unsupported ops raise :class:`UnsupportedOpError` naming the fx node, its target and the
    module path (all unsupported nodes are listed), before any shape propagation. With
    ``allow_unsupported=True`` each becomes a ``host_fallback`` layer and a
    :class:`UnsupportedOpWarning` naming it is emitted.
    """
    if not isinstance(model, nn.Module):
        raise GraphError(f"capture: model must be a torch.nn.Module, got {type(model).__name__}")
    shape = _check_input_shape(input_shape)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise GraphError(f"capture: dtype must be a floating torch.dtype, got {dtype!r}")
    model_name = name or getattr(model, "pimrt_name", "") or type(model).__name__

    try:
        graph = torch.fx.Tracer().trace(model)
    except Exception as exc:  # noqa: BLE001 - fx raises many types
        raise GraphError(f"torch.fx could not trace {model_name}: {type(exc).__name__}: {exc}. "
                         f"pimrt captures models whose forward is static (no data-dependent "
                         f"control flow)") from exc
    fake_mode = None
    try:
        gm = _meta_graph_module(model, graph)
    except Exception:  # noqa: BLE001 - a module that cannot be copied: use FakeTensors
        from torch._subclasses.fake_tensor import FakeTensorMode
        gm = torch.fx.GraphModule(model, graph)
        fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    modules = dict(gm.named_modules())
    nodes = list(gm.graph.nodes)

    # 1. Static check: unsupported ops are reported before any shape work.
    static: dict[Node, str | None] = {}
    unsupported: list[tuple[Node, str]] = []
    for node in nodes:
        try:
            static[node] = _static_kind(node, modules)
        except _Unsupported as u:
            static[node] = "host_fallback"
            unsupported.append((node, u.reason))
    if unsupported and not allow_unsupported:
        _raise_unsupported(unsupported, modules)

    placeholders = [n for n in nodes if n.op == "placeholder"]
    if not placeholders:
        raise GraphError(f"{model_name}: forward takes no input")
    extra = [p for p in placeholders[1:] if not p.args]
    if extra:
        raise GraphError(f"{model_name}: forward takes more than one input "
                         f"({', '.join(p.name for p in placeholders)}); pimrt captures "
                         f"single-input models")

    # 2. Shape propagation on meta tensors (or FakeTensors).
    prop = _ShapeProp(gm, modules, fake_mode=fake_mode)
    if prop.fake_module is not None:
        prop.fake_module.eval()
        sample = torch.empty(shape, dtype=dtype)
    else:
        sample = torch.empty(shape, dtype=dtype, device="meta")
    extra_inputs = [p.args[0] for p in placeholders[1:]]
    with torch.no_grad():
        prop.propagate(sample, *extra_inputs)
    values = prop.values

    # 3. Classify with shapes known; build layers.
    clf = _Classifier(gm, modules, values)
    params_of = _param_table(model)
    layer_of: dict[Node, str] = {}
    fallback_nodes: set[Node] = set()
    late_unsupported: list[tuple[Node, str]] = []
    layers: list[Layer] = []
    get_attrs: dict[Node, str] = {}

    for node in nodes:
        if node.op == "placeholder":
            if node is placeholders[0]:
                t = values[node]
                layers.append(_new_layer(node, "input", len(layers), "", [], t, {}))
                layer_of[node] = node.name
            continue
        if node.op == "get_attr":
            get_attrs[node] = str(node.target)
            continue
        if node.op == "output":
            ins = [layer_of[a] for a in _arg_nodes(node.args) if a in layer_of]
            if not ins:
                raise GraphError(f"{model_name}: forward returns no tensor")
            first = layers[_index_of(layers, ins[0])]
            out = Layer(name="output", kind="output", index=len(layers), op="output",
                        target="output", module_path="", inputs=ins,
                        input_shapes=[layers[_index_of(layers, i)].shape for i in ins],
                        shape=first.shape, dtype=first.dtype, itemsize=first.itemsize,
                        bytes=0, placement=PLACEMENT["output"])
            layers.append(out)
            continue

        kind = static[node]
        if kind == "host_fallback":
            reason = next(r for n, r in unsupported if n is node)
            kind, attrs = "host_fallback", {"reason": reason}
        else:
            try:
                kind, attrs = clf.resolve(node, kind, layer_of, fallback_nodes)
            except _Unsupported as u:
                late_unsupported.append((node, u.reason))
                kind, attrs = "host_fallback", {"reason": u.reason}
        if kind == "meta":
            continue
        tensor_ins = clf.tensor_args(node, layer_of)
        if kind == "alias":
            layer_of[node] = layer_of[tensor_ins[0]] if tensor_ins else node.name
            continue
        if kind == "host_fallback":
            fallback_nodes.add(node)
            attrs["target"] = _describe_target(node, modules)
        out_val = values.get(node)
        layer = _new_layer(node, kind, len(layers), _module_path(node),
                           [layer_of[a] for a in tensor_ins],
                           out_val if _is_tensor(out_val) else None, attrs)
        layer.input_shapes = [tuple(values[a].shape) if _is_tensor(values.get(a)) else ()
                              for a in tensor_ins]
        _attach_params(layer, node, kind, modules, params_of, get_attrs)
        _fill_flops(layer)
        if kind == "flatten":
            layer.view_of = layer.inputs[0] if layer.inputs else None
        layers.append(layer)
        layer_of[node] = layer.name

    if late_unsupported and not allow_unsupported:
        _raise_unsupported(late_unsupported, modules)
    for node, reason in unsupported + late_unsupported:
        warnings.warn(
            f"pimrt.graph.capture: node '{node.name}' ({_describe_target(node, modules)}) in "
            f"module '{_module_path(node) or '<top>'}' is unsupported ({reason}); it runs on "
            f"the host as kind 'host_fallback'", UnsupportedOpWarning, stacklevel=2)

    # Consumers, and which conv/linear need dX.
    by_name = {l.name: l for l in layers}
    for l in layers:
        for i in l.inputs:
            c = by_name[i].consumers
            if l.name not in c:
                c.append(l.name)
    input_name = layers[0].name
    for l in layers:
        if l.kind in ("conv", "linear"):
            l.attrs["needs_input_grad"] = l.inputs != [input_name]
    return LayerGraph(layers, shape, _dtype_name(dtype), model_name)


def _index_of(layers: list[Layer], name: str) -> int:
    for l in reversed(layers):
        if l.name == name:
            return l.index
    raise GraphError(f"internal: no layer {name}")


def _new_layer(node: Node, kind: str, index: int, module_path: str, inputs: list[str],
               value: torch.Tensor | None, attrs: dict[str, Any]) -> Layer:
    if node.op == "call_function":
        target = _qualname(node.target)
    elif node.op == "call_method":
        target = f"Tensor.{node.target}"
    else:
        target = str(node.target)
    layer = Layer(name=node.name, kind=kind, index=index, op=node.op, target=target,
                  module_path=module_path, inputs=inputs, attrs=attrs,
                  placement=placement_of(kind, attrs))
    if value is not None:
        layer.shape = tuple(int(d) for d in value.shape)
        layer.dtype = _dtype_name(value.dtype)
        layer.itemsize = value.element_size()
        layer.bytes = value.numel() * value.element_size()
    elif kind == "host_fallback":
        layer.dtype = "mixed"
    return layer


def _param_table(original: nn.Module) -> dict[str, Any]:
    """Full parameter/buffer name -> (shape, dtype), with the original model's dtypes."""
    table: dict[str, Any] = {}
    for name, t in original.named_parameters(remove_duplicate=False):
        table[name] = ("param", tuple(t.shape), _dtype_name(t.dtype), t.element_size())
    for name, t in original.named_buffers(remove_duplicate=False):
        table[name] = ("buffer", tuple(t.shape), _dtype_name(t.dtype), t.element_size())
    return table


def _attach_params(layer: Layer, node: Node, kind: str, modules: dict[str, nn.Module],
                   table: dict[str, Any], get_attrs: dict[Node, str]) -> None:
    names: list[str] = []
    if node.op == "call_module":
        mod = modules[str(node.target)]
        prefix = str(node.target)
        names = [f"{prefix}.{n}" if prefix else n for n, _ in mod.named_parameters()]
        names += [f"{prefix}.{n}" if prefix else n for n, _ in mod.named_buffers()]
    names += [get_attrs[a] for a in _arg_nodes((node.args, node.kwargs)) if a in get_attrs]
    total = 0
    for n in names:
        entry = table.get(n)
        if entry is None:
            continue
        what, shape, dtype, itemsize = entry
        if what == "param":
            layer.params[n] = shape
            layer.param_dtypes[n] = dtype
            total += math.prod(shape) * itemsize
        else:
            layer.buffers[n] = shape
    layer.param_bytes = total


def _fill_flops(layer: Layer) -> None:
    if layer.kind == "conv" and layer.shape:
        a = layer.attrs
        macs_per_out = (a["in_channels"] // a["groups"]) * math.prod(a["kernel"])
        layer.flops = 2 * layer.numel * macs_per_out
    elif layer.kind == "linear" and layer.shape:
        a = layer.attrs
        layer.flops = 2 * layer.numel * a["in_features"]


def _raise_unsupported(items: list[tuple[Node, str]], modules: dict[str, nn.Module]) -> None:
    node, reason = items[0]
    target = _describe_target(node, modules)
    path = _module_path(node)
    others = [(n.name, _describe_target(n, modules), _module_path(n)) for n, _ in items[1:]]
    msg = (f"unsupported op at fx node '{node.name}': {reason}; target {target}, in module "
           f"'{path or '<top>'}'. pimrt captures only: {SUPPORTED_TEXT}. Pass "
           f"allow_unsupported=True to run such ops on the host (kind 'host_fallback').")
    if others:
        listed = ", ".join(f"'{n}' ({t})" for n, t, _ in others[:10])
        more = f" and {len(others) - 10} more" if len(others) > 10 else ""
        msg += f" {len(others)} more unsupported node(s): {listed}{more}."
    raise UnsupportedOpError(msg, node.name, target, path, others)

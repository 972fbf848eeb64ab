"""Layrub on real torch training: offload + prefetch of saved feature maps, ReLU masks,
shared-storage de-duplication, a reference-counted host block pool, and an independent
accounting of the device bytes autograd keeps for backward.

Mechanism (see docs/layrub.md):

* ``torch.autograd.graph.saved_tensors_hooks(pack, unpack)`` sees every tensor autograd
  saves for backward. ``pack`` decides, per tensor:

  - parameter / buffer storage: returned untouched (not a feature map);
  - ReLU's saved output (``reuse``): replaced by a 1-bit (or 1-byte) mask ``not (y <= 0)``;
    ``unpack`` returns ``mask.to(dtype)``, for which ``threshold_backward`` gives bit-identical
    gradients (it only tests ``y <= 0``). ReLU6 / Hardtanh the same with ``lo < y < hi``;
  - a feature map of at least ``min_offload_bytes`` (``offload``): copied into a block of the
    host pool (pinned, on a side CUDA stream, on CUDA), the device tensor is no longer held
    by autograd and is freed as soon as forward drops it, i.e. once it has no forward reader
    left;
  - anything else: kept on the device (accounted).

  Several saves of the same storage (a ReLU output read by the next conv and by a shortcut)
  share one handle: one pool block, one copy each way (reference counting).
* Module forward pre-hooks number the leaf modules (layers) and say which module is running.
  In backward, ``unpack`` of a layer-``L`` tensor starts the copy back of the offloaded tensors
  of the ``prefetch_distance`` previous layers, so they arrive one layer ahead of their use;
  a handle's device copy dies with the handle, i.e. right after the backward of its last
  reader.
* On CUDA the copies run on a side stream; the side stream waits for the compute stream
  before reading a feature map, the compute stream waits for the copy event before using a
  fetched tensor, and ``Tensor.record_stream`` keeps the caching allocator from handing a
  block still read or written by the side stream to another tensor.
* On CPU the same plan runs synchronously: the host pool is a separate preallocated buffer,
  so the bytes autograd keeps in the "device" tensors really drop.
"""
from __future__ import annotations

import bisect
import contextlib
import math
import warnings
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch
from torch import nn

from pimrt.layrub.errors import (LayrubBudgetError, LayrubError, LayrubUnsupportedError,
                                 LayrubWarning, fmt_bytes, parse_bytes)
from pimrt.layrub.pool import HostPool, align

# Bit packing with 64-bit multiplies (little-endian): the 8 bool bytes of a word, each 0 or 1,
# times _GATHER put element k at bit 56 + k with no carries (every partial product lands on its
# own bit); a packed byte times _SPREAD repeats it in all 8 bytes, _SELECT keeps bit k in byte
# k, and adding 0x7F to each byte moves "not zero" to its top bit. int64 arithmetic wraps modulo
# 2**64, which is all the tricks need.
_GATHER = 0x0102040810204080
_SPREAD = 0x0101010101010101
_SELECT = 0x8040201008040201 - (1 << 64)          # as a signed int64
_LOW7 = 0x7F7F7F7F7F7F7F7F                         # + a byte in 0..0x80 sets its top bit
_HIGH = 0x8080808080808080 - (1 << 64)            # iff the byte was not 0
_LITTLE = sys.byteorder == "little"


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """A bool tensor -> uint8 tensor of ceil(numel / 8) bytes (bit k of byte i = element 8i+k)."""
    flat = mask.reshape(-1)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    if not _LITTLE:                                      # plain shifts and a sum
        shifts = torch.arange(8, dtype=torch.uint8, device=flat.device)
        return (flat.view(-1, 8).to(torch.uint8) << shifts).sum(1, dtype=torch.uint8)
    if flat.storage_offset() % 8 or not flat.is_contiguous():
        flat = flat.clone()
    words = flat.view(torch.uint8).view(torch.int64)
    return ((words * _GATHER) >> 56).to(torch.uint8)


def unpack_bits(bits: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: a bool tensor of ``shape``."""
    n = math.prod(shape)
    if not _LITTLE:
        shifts = torch.arange(8, dtype=torch.uint8, device=bits.device)
        out = (bits.unsqueeze(1) >> shifts) & 1
        return out.view(-1)[:n].view(shape).bool()
    words = (bits.to(torch.int64) * _SPREAD) & _SELECT    # byte k: bit k of the packed byte
    words = (((words + _LOW7) & _HIGH) >> 7) & _SPREAD      # byte k: 0 or 1, no carries
    return words.view(torch.uint8)[:n].view(torch.bool).view(shape)


# --------------------------------------------------------------------------------------
# accounting
# --------------------------------------------------------------------------------------
@dataclass
class StepStats:
    """What one step held and moved. Bytes are device bytes unless named host."""

    saved_peak_bytes: int = 0          # peak device bytes held for backward (distinct storages)
    saved_end_of_forward_bytes: int = 0
    host_peak_bytes: int = 0           # peak bytes of offloaded maps in the host pool
    offloaded_bytes: int = 0           # device -> host traffic
    fetched_bytes: int = 0             # host -> device traffic
    offloaded_tensors: int = 0
    prefetch_hits: int = 0             # fetched ahead of the unpack
    prefetch_misses: int = 0           # fetched synchronously at the unpack
    masks: int = 0
    masks_dropped: int = 0             # masks freed because the full output is kept anyway
    mask_bytes: int = 0                # device bytes of the ReLU masks (at their peak sum)
    mask_saved_bytes: int = 0          # full-size bytes the masks stand in for
    kept_tensors: int = 0
    kept_in_budget: int = 0            # maps kept on the device because the budget has room
    dedup_hits: int = 0                # saves that re-used an existing handle
    fallback_saves: int = 0            # saves in a region without reuse (unsupported op)
    layers: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class _Acct:
    """Device bytes held because autograd saved them: distinct storages of kept tensors, ReLU
    masks, fetched copies and expanded masks while alive."""

    def __init__(self, budget: int | None = None):
        self.cur = 0
        self.peak = 0
        self.budget = budget
        self.storages: dict[Any, list[int]] = {}     # key -> [refs, bytes]

    def add(self, n: int) -> None:
        self.cur += n
        if self.cur > self.peak:
            self.peak = self.cur
            if self.budget is not None and self.cur > self.budget:
                raise LayrubBudgetError(
                    f"device feature-map budget exceeded: {self.cur:,} B "
                    f"({fmt_bytes(self.cur)}) held for backward, budget {self.budget:,} B "
                    f"({fmt_bytes(self.budget)})", needed=self.cur, budget=self.budget)

    def sub(self, n: int) -> None:
        self.cur -= n

    def hold_storage(self, key: Any, nbytes: int) -> None:
        e = self.storages.get(key)
        if e is None:
            self.storages[key] = [1, nbytes]
            self.add(nbytes)
        else:
            e[0] += 1

    def drop_storage(self, key: Any) -> None:
        e = self.storages.get(key)
        if e is None:
            return
        e[0] -= 1
        if e[0] == 0:
            del self.storages[key]
            self.sub(e[1])


# --------------------------------------------------------------------------------------
# packed handles
# --------------------------------------------------------------------------------------
class _Keep:
    __slots__ = ("t", "acct", "skey", "layers", "__weakref__")

    def __init__(self, t, acct, skey, layer):
        self.t = t
        self.acct = acct
        self.skey = skey
        self.layers = [layer]

    def __del__(self):
        try:
            self.acct.drop_storage(self.skey)
        except Exception:  # interpreter shutdown
            pass


class _Mask:
    """A ReLU/ReLU6 output saved as a mask. ``held``: device bytes this handle accounts."""

    __slots__ = ("bits", "shape", "dtype", "lo", "hi", "nbytes", "full_bytes", "acct",
                 "layers", "full", "held", "host", "__weakref__")

    def __del__(self):
        try:
            self.acct.sub(self.held)
        except Exception:
            pass

    def drop_for(self, full: torch.Tensor) -> None:
        """The full output is kept on the device by another save anyway (and accounted
        there): use it and free the mask; the mask only pays when nothing else keeps it."""
        self.full = full
        self.bits = None
        self.acct.sub(self.held)
        self.held = 0

    def drop_for_host(self, h: "_Host") -> None:
        """The full output is offloaded by another save anyway: the ReLU's backward reads
        that copy (fetched back for the other reader) and the mask is freed."""
        self.host = h
        self.bits = None
        self.acct.sub(self.held)
        self.held = 0

    def expand(self) -> torch.Tensor:
        """A tensor for which the backward gives the gradient of the real output, bit for bit;
        it replaces the mask (the bits are freed) until the handle dies after the backward."""
        if self.full is not None:
            return self.full
        if self.bits.dtype == torch.bool:
            m = self.bits
        else:
            m = unpack_bits(self.bits, self.shape)
        if self.lo is None:          # ReLU: threshold_backward tests y <= 0
            out = m.to(self.dtype)
        else:                        # Hardtanh/ReLU6: tests y <= lo or y >= hi
            mid = torch.tensor((self.lo + self.hi) / 2, dtype=self.dtype, device=m.device)
            lo = torch.tensor(self.lo, dtype=self.dtype, device=m.device)
            out = torch.where(m, mid, lo)
        self.acct.sub(self.held)
        self.acct.add(self.full_bytes)
        self.held = self.full_bytes
        self.bits = None
        self.full = out
        return out


class _Host:
    __slots__ = ("rt", "block", "shape", "dtype", "nbytes", "dev", "event", "layers",
                 "__weakref__")

    def __del__(self):
        try:
            rt = self.rt
            if self.dev is not None:
                rt.acct.sub(self.nbytes)
                self.dev = None
            if self.block is not None:
                rt._release_block(self.block)
                self.block = None
        except Exception:
            pass


class _Dry:
    """What pack returns during the meta dry run (never unpacked)."""
    __slots__ = ()


# --------------------------------------------------------------------------------------
# the runtime
# --------------------------------------------------------------------------------------
class Layrub:
    """Layrub for an ordinary torch model. Use one object per model; each ``with`` block
    (or :meth:`step`, :meth:`train_step`) is one training step::

        lr = Layrub(model, input_shape=(64, 3, 32, 32), host_budget="4GB")
        for x, y in loader:
            opt.zero_grad()
            with lr:
                loss = loss_fn(model(x), y)
                loss.backward()
            opt.step()
        print(lr.stats)            # StepStats of the last step

    ``offload``: move saved feature maps to host memory and bring them back one layer (or
    ``prefetch_distance`` layers) ahead of backward. ``reuse``: ReLU/ReLU6 masks instead of
    saved outputs (``relu_mask="bit"`` or ``"byte"``); shared storages are always saved once.
    ``host_budget``: bytes (or "4GB") the host pool may use; checked before training when
    ``input_shape`` is given (the offloaded bytes are measured by a dry run of the model on
    the meta device). ``device_budget``: fail (LayrubBudgetError) when the device bytes held
    for backward would exceed it (simulated device memory on CPU). ``strict``: refuse a model
    with an op the planner cannot analyse, naming the node; otherwise that region runs with
    no reuse and no offload, with a :class:`LayrubWarning`.
    """

    def __init__(self, model: nn.Module, *, input_shape: Iterable[int] | None = None,
                 offload: bool = True, reuse: bool = True, relu_mask: str = "bit",
                 prefetch_distance: int = 1, host_budget: int | str | None = None,
                 device_budget: int | str | None = None, min_offload_bytes: int = 64 * 1024,
                 strict: bool = False, capture_graph: bool = True):
        if relu_mask not in ("bit", "byte"):
            raise LayrubError(f"relu_mask must be 'bit' or 'byte', got {relu_mask!r}")
        if not isinstance(prefetch_distance, int) or prefetch_distance < 0:
            raise LayrubError(f"prefetch_distance must be an integer >= 0, got "
                              f"{prefetch_distance!r}")
        if min_offload_bytes < 0:
            raise LayrubError(f"min_offload_bytes must be >= 0, got {min_offload_bytes}")
        self.model = model
        self.offload = bool(offload)
        self.reuse = bool(reuse)
        self.relu_mask = relu_mask
        self.prefetch_distance = prefetch_distance
        self.host_budget = parse_bytes(host_budget)
        self.device_budget = parse_bytes(device_budget)
        self.min_offload_bytes = int(min_offload_bytes)
        self.strict = strict
        p = next(iter(model.parameters()), None)
        self.device = p.device if p is not None else torch.device("cpu")
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self.side_stream = torch.cuda.Stream(device=self.device) if self.cuda else None
        self.graph = None
        self.mask_plan: dict | None = None
        self._keep_from = math.inf          # offloadable maps from this one on stay (budget)
        self._host_saves: list = []
        self.fallback_modules: set[str] = set()
        self.fallback_nodes: list[str] = []
        self.estimate: dict[str, int] | None = None
        self.pool: HostPool | None = None
        self.acct = _Acct(self.device_budget)
        self.stats = StepStats()
        self.history: list[StepStats] = []
        self._hooks: list[Any] = []
        self._saved_hooks = None
        self._names = {m: n for n, m in model.named_modules()}
        self._reset_step_state()
        if input_shape is not None:
            self.prepare(tuple(input_shape), capture_graph=capture_graph)

    # -- preparation: graph, unsupported ops, dry run, budget check ----------------------
    def prepare(self, input_shape: tuple[int, ...], capture_graph: bool = True) -> dict[str, int]:
        """Analyse the model for ``input_shape`` before training: capture its layer graph
        (unsupported ops -> error naming the node in strict mode, else no-reuse regions with a
        warning), dry-run one forward pass on the meta device to measure what would be
        offloaded and kept, check the host budget (LayrubBudgetError naming the bytes needed)
        and preallocate the host pool. Returns the estimate."""
        if capture_graph:
            self._capture(input_shape)
            self._plan_masks()
        est = self._dry_run(input_shape)
        self.estimate = est
        if est is None:
            return {}
        self._fit_budget(est)
        if self.offload:
            need = est["host_bytes"]
            if self.host_budget is not None and need > self.host_budget:
                raise LayrubBudgetError(
                    f"host memory budget too small for the offloaded feature maps: "
                    f"{need:,} B ({fmt_bytes(need)}) needed for input {tuple(input_shape)}, "
                    f"budget {self.host_budget:,} B ({fmt_bytes(self.host_budget)})",
                    needed=need, budget=self.host_budget)
            if self.pool is None or self.pool.capacity < need:
                self.pool = HostPool(capacity=max(need, 1), max_bytes=self.host_budget,
                                     pinned=self.cuda)
        if self.device_budget is not None and est["device_bytes"] > self.device_budget:
            raise LayrubBudgetError(
                f"device feature-map budget too small: this plan keeps about "
                f"{est['device_bytes']:,} B ({fmt_bytes(est['device_bytes'])}) for backward "
                f"at input {tuple(input_shape)}, budget {self.device_budget:,} B "
                f"({fmt_bytes(self.device_budget)})", needed=est["device_bytes"],
                budget=self.device_budget)
        return est

    def _capture(self, input_shape):
        from pimrt.graph import GraphError, UnsupportedOpError, UnsupportedOpWarning, capture
        try:
            self.graph = capture(self.model, input_shape)
            return
        except UnsupportedOpError as exc:
            if self.strict:
                raise LayrubUnsupportedError(f"Layrub cannot plan this model: {exc}") from exc
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UnsupportedOpWarning)
                try:
                    self.graph = capture(self.model, input_shape, allow_unsupported=True)
                except GraphError as exc2:
                    warnings.warn(f"Layrub: no layer graph ({exc2}); running without a plan "
                                  f"and without reuse for unknown ops", LayrubWarning,
                                  stacklevel=3)
                    return
            bad = [n for n in self.graph.nodes if n.kind == "host_fallback"]
            self.fallback_nodes = [n.name for n in bad]
            self.fallback_modules = {n.module_path for n in bad}
            warnings.warn(
                "Layrub: op(s) the planner cannot analyse: "
                + ", ".join(f"{n.name!r} ({n.target}, in module {n.module_path or '<root>'!r})"
                            for n in bad)
                + "; their module regions run with no reuse and no offload",
                LayrubWarning, stacklevel=3)
        except GraphError as exc:
            if self.strict:
                raise LayrubUnsupportedError(f"Layrub cannot plan this model: {exc}") from exc
            warnings.warn(f"Layrub: could not capture the model ({exc}); running without a "
                          f"plan", LayrubWarning, stacklevel=3)

    def _plan_masks(self) -> None:
        """Ask the planner, per ReLU/ReLU6 layer, whether a mask pays (pimrt.layrub.plan:
        not where some backward reads the full map, kept or offloaded anyway, nor where the
        mask would raise the peak). The k-th ReLU call in a module is that module's k-th ReLU
        node of the graph; a call the graph does not name is masked as before, and at run
        time any mask is still freed when another save keeps the full map."""
        self.mask_plan = None
        if self.graph is None or not self.reuse:
            return
        from pimrt.layrub.planner import plan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LayrubWarning)
            p = plan(self.graph, offload=self.offload, reuse=True,
                     prefetch_distance=self.prefetch_distance,
                     min_offload_bytes=self.min_offload_bytes)
        masked = set(p.masks)
        calls: dict[tuple[str, str], int] = {}
        self.mask_plan = {}
        for n in self.graph.nodes:
            if n.kind in ("relu", "relu6"):
                k = calls.get((n.module_path, n.kind), 0)
                calls[(n.module_path, n.kind)] = k + 1
                self.mask_plan[(n.module_path, n.kind, k)] = n.name in masked

    def _mask_pays(self, mod, kind: str) -> bool:
        """The planner's decision for this call of a ReLU (``kind`` relu) or ReLU6 layer."""
        name = self._names.get(mod, "") if mod is not None else ""
        k = self._mask_calls.get((name, kind), 0)
        self._mask_calls[(name, kind)] = k + 1
        if self.mask_plan is None:
            return True
        return self.mask_plan.get((name, kind, k), True)

    def _dry_run(self, input_shape) -> dict[str, int] | None:
        state = {}
        for name, t in list(self.model.named_parameters()) + list(self.model.named_buffers()):
            state[name] = torch.empty_like(t, device="meta").requires_grad_(t.requires_grad)
        self._meta_params = {t._cdata for t in state.values()}
        x = torch.empty(input_shape, device="meta")
        self._dry = {"host_bytes": 0, "device_bytes": 0, "offloaded": 0, "masks": 0,
                     "kept": 0, "baseline_bytes": 0, "layers": {}, "host_saves": []}
        self._dry_seen: set = set()
        self._dry_refs: list = []
        self._reset_step_state()
        training = self.model.training
        try:
            with self._session(dry=True):
                torch.func.functional_call(self.model, state, (x,))
        except LayrubError:
            raise
        except Exception as exc:       # an op with no meta kernel, a shape error...
            warnings.warn(f"Layrub: dry run on the meta device failed ({type(exc).__name__}: "
                          f"{exc}); no budget check before training, the pool grows on demand",
                          LayrubWarning, stacklevel=3)
            return None
        finally:
            self.model.train(training)
            self._reset_step_state()
            self._dry_refs = []
        d = self._dry
        d.pop("mask_keys", None)
        d.pop("layers")
        self._host_saves = d.pop("host_saves")
        self._dry_base_bytes = d["device_bytes"]
        self._keep_from = math.inf
        d["device_bytes"] = self._device_estimate(len(self._host_saves))
        return d

    def _device_estimate(self, keep_from: int) -> int:
        """Device bytes held for backward when the offloadable maps from the ``keep_from``-th
        on (in forward order) stay on the device: the kept maps, masks and small tensors at
        the end of the forward pass, plus the prefetch window of the offloaded ones."""
        kept = sum(nb for _, nb in self._host_saves[keep_from:])
        per_layer: dict[int, int] = {}
        for layer, nb in self._host_saves[:keep_from]:
            per_layer[layer] = per_layer.get(layer, 0) + nb
        sums = [b for _, b in sorted(per_layer.items())]
        k = self.prefetch_distance + 1
        window = max((sum(sums[i: i + k]) for i in range(len(sums))), default=0)
        return self._dry_base_bytes + kept + window

    def _fit_budget(self, est: dict) -> None:
        """With ``device_budget`` and offload: offload only as many feature maps as the
        budget needs, the earliest first (the longest from forward to backward: the
        planner's rule); the later ones stay on the device. The estimate keeps a margin of
        the largest map, for what it does not see (a mask expanded in backward)."""
        saves = self._host_saves
        if self.device_budget is None or not self.offload or not saves:
            return
        n = len(saves)
        margin = max(nb for _, nb in saves)
        fits = lambda i: self._device_estimate(i) + margin <= self.device_budget  # noqa: E731
        if not fits(n):
            return                      # all offloaded, as without a budget
        lo, hi = 0, n                   # the fewest offloaded maps that fit
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid + 1
        self._keep_from = lo
        est["device_bytes"] = self._device_estimate(lo)
        est["host_bytes"] = sum(align(nb) for _, nb in saves[:lo])
        est["offloaded"] = lo
        est["kept_in_budget"] = n - lo

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> "Layrub":
        self._begin()
        return self

    def __exit__(self, *exc) -> None:
        self._end()

    def step(self) -> "Layrub":
        """``with lr.step(): ...`` (same as ``with lr: ...``)."""
        return self

    def train_step(self, optimizer: torch.optim.Optimizer, loss_fn: Callable, x: torch.Tensor,
                   target: torch.Tensor, set_to_none: bool = True) -> torch.Tensor:
        """One ordinary training step under Layrub: zero_grad, forward, loss, backward,
        optimizer.step. Returns the loss (detached)."""
        if self.estimate is None and self.graph is None:
            self.prepare(tuple(x.shape))
        optimizer.zero_grad(set_to_none=set_to_none)
        with self:
            loss = loss_fn(self.model(x), target)
            loss.backward()
        optimizer.step()
        return loss.detach()

    @contextlib.contextmanager
    def _session(self, dry: bool):
        self._dry_mode = dry
        self._install_module_hooks()
        hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        hooks.__enter__()
        try:
            yield
        finally:
            hooks.__exit__(None, None, None)
            self._remove_module_hooks()
            self._dry_mode = False

    def _begin(self) -> None:
        if self._saved_hooks is not None:
            raise LayrubError("Layrub step already active (nested `with`?)")
        self._reset_step_state()
        self.stats = StepStats()
        self.acct.peak = self.acct.cur
        if self.pool is None and self.offload:
            self.pool = HostPool(capacity=None, max_bytes=self.host_budget, pinned=self.cuda)
        if self.pool is not None:
            self.pool.reset_peak()
        self._param_keys = self._storage_keys()     # parameters/buffers: never offloaded
        self._install_module_hooks()
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._saved_hooks.__enter__()

    def _end(self) -> None:
        if self._saved_hooks is not None:
            self._saved_hooks.__exit__(None, None, None)
            self._saved_hooks = None
        self._remove_module_hooks()
        if self.cuda:
            self.side_stream.synchronize()
        s = self.stats
        s.saved_peak_bytes = self.acct.peak
        if self.pool is not None:
            s.host_peak_bytes = self.pool.peak_in_use
        s.layers = self._layer
        self.history.append(s)

    def _reset_step_state(self) -> None:
        self._layer = 0
        self._mod_stack: list[nn.Module] = []
        self._handles: dict = {}
        self._relu_seen: dict = {}
        self._mask_calls: dict = {}
        self._host_seq = 0
        self._masks: dict = {}
        self._by_layer: dict[int, list[weakref.ref]] = {}
        self._layer_ids: list[int] = []
        self._cursor = math.inf
        self._forward_done = False
        self._dry_mode = getattr(self, "_dry_mode", False)

    @staticmethod
    def _seen(table: dict, key, t) -> bool:
        ref = table.get(key)
        return ref is not None and ref() is t

    def _storage_keys(self) -> set[int]:
        keys = set()
        for t in list(self.model.parameters()) + list(self.model.buffers()):
            if t.device.type != "meta":
                keys.add(t.untyped_storage().data_ptr())
        return keys

    def _install_module_hooks(self) -> None:
        if self._hooks:
            return
        for m in self.model.modules():
            leaf = next(iter(m.children()), None) is None
            self._hooks.append(m.register_forward_pre_hook(self._pre_hook(leaf)))
            self._hooks.append(m.register_forward_hook(self._post_hook))

    def _remove_module_hooks(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _pre_hook(self, leaf: bool):
        def hook(module, args):
            if leaf:
                self._layer += 1
            self._mod_stack.append(module)
        return hook

    def _post_hook(self, module, args, output):
        if self._mod_stack and self._mod_stack[-1] is module:
            self._mod_stack.pop()

    # -- pack / unpack -------------------------------------------------------------------
    def _classify(self, t: torch.Tensor, meta: bool):
        """-> (action, key, storage key, nbytes). action: param | mask | host | keep."""
        if meta:
            base = t._base if t._base is not None else t
            if t._cdata in self._meta_params or base._cdata in self._meta_params:
                return "param", None, None, 0
            skey = ("meta", base._cdata)
        else:
            sk = t.untyped_storage().data_ptr()
            if sk in self._param_keys:
                return "param", None, None, 0
            skey = (sk, t.device)
        key = (skey, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype, t._version)
        nbytes = t.numel() * t.element_size()
        mod = self._mod_stack[-1] if self._mod_stack else None
        if mod is not None and self.fallback_modules and \
                self._names.get(mod) in self.fallback_modules:
            return "fallback", key, skey, nbytes
        if self.reuse and t.is_floating_point():
            gf = t.grad_fn
            if gf is not None and gf.name().startswith("ReluBackward") and \
                    not self._seen(self._relu_seen, key, t):
                self._relu_seen[key] = weakref.ref(t)
                if self._mask_pays(mod, "relu"):
                    return "relu", key, skey, nbytes
            elif isinstance(mod, nn.Hardtanh) and float(mod.min_val) < float(mod.max_val):
                if self._mask_pays(mod, "relu6"):
                    return "hardtanh", key, skey, nbytes
        if self.offload and nbytes >= self.min_offload_bytes and nbytes > 0 \
                and t.is_contiguous():
            return "host", key, skey, nbytes
        return "keep", key, skey, nbytes

    def _pack(self, t: torch.Tensor):
        meta = t.device.type == "meta"
        action, key, skey, nbytes = self._classify(t, meta)
        if action == "param":
            return t
        layer = self._layer
        if self._dry_mode:
            return self._pack_dry(t, action, key, skey, nbytes, layer)
        s = self.stats
        if action in ("relu", "hardtanh"):
            return self._pack_mask(t, action, key, nbytes, layer)
        entry = self._handles.get((action, key))
        h = None
        if entry is not None and entry[0]() is t:
            h = entry[1]()
        if h is not None:
            s.dedup_hits += 1
            if not h.layers or h.layers[-1] != layer:
                h.layers.append(layer)
                if type(h) is _Host:
                    self._index(h, layer)
            return h
        if action == "host":
            self._host_seq += 1
            if self._host_seq > self._keep_from:     # the device budget has room for it
                s.kept_in_budget += 1
        if action == "host" and self._host_seq <= self._keep_from:
            h = self._pack_host(t, nbytes, layer)
        else:
            if action == "fallback":
                s.fallback_saves += 1
            s.kept_tensors += 1
            h = _Keep(t, self.acct, skey, layer)
            self.acct.hold_storage(skey, t.untyped_storage().nbytes())
        # a mask of this same output made earlier no longer pays: another save keeps the
        # full map (on the device, or offloaded), so the ReLU's backward reads that
        entry = self._masks.get(key)
        if entry is not None and entry[0]() is t:
            mh = entry[1]()
            if mh is not None and mh.full is None and mh.host is None and mh.bits is not None:
                if type(h) is _Host:
                    mh.drop_for_host(h)
                    if mh.layers[0] not in h.layers:
                        h.layers.insert(0, mh.layers[0])
                        self._index(h, mh.layers[0])
                else:
                    mh.drop_for(t)
                s.masks_dropped += 1
        # de-duplication key -> (the saved tensor, its handle), both weak: a key whose tensor
        # has died may name a new tensor at the same address and must not match
        self._handles[(action, key)] = (weakref.ref(t), weakref.ref(h))
        return h

    def _pack_dry(self, t, action, key, skey, nbytes, layer):
        d = self._dry
        self._dry_refs.append(t)          # meta tensors: no memory, but keeps their ids unique
        k = (action, key)
        if k in self._dry_seen:
            return _Dry()
        self._dry_seen.add(k)
        if ("base", skey) not in self._dry_seen:
            self._dry_seen.add(("base", skey))
            d["baseline_bytes"] += nbytes
        if action == "host":
            d["host_bytes"] += align(nbytes)
            d["offloaded"] += 1
            d["layers"][layer] = d["layers"].get(layer, 0) + nbytes
            d["host_saves"].append((layer, nbytes))
            d["device_bytes"] -= d.get("mask_keys", {}).pop(key, 0)   # mask dropped
        elif action in ("relu", "hardtanh"):
            nb = math.ceil(t.numel() / 8) if self.relu_mask == "bit" else t.numel()
            d["device_bytes"] += nb
            d["masks"] += 1
            d.setdefault("mask_keys", {})[key] = nb
        else:
            nb = d.get("mask_keys", {}).pop(key, 0)
            if action != "host" and nb:
                d["device_bytes"] -= nb            # the mask is dropped at run time
            if ("dev", skey) not in self._dry_seen:
                self._dry_seen.add(("dev", skey))
                d["device_bytes"] += nbytes
            d["kept"] += 1
        return _Dry()

    def _pack_mask(self, t, action, key, nbytes, layer):
        s = self.stats
        h = _Mask()
        with torch.no_grad():
            if action == "relu":
                m = torch.le(t, 0).logical_not_()
                h.lo = h.hi = None
            else:
                mod = self._mod_stack[-1]
                h.lo, h.hi = float(mod.min_val), float(mod.max_val)
                m = torch.logical_or(torch.le(t, h.lo), torch.ge(t, h.hi)).logical_not_()
            h.bits = pack_bits(m) if self.relu_mask == "bit" else m
        h.shape = tuple(t.shape)
        h.dtype = t.dtype
        h.nbytes = h.bits.numel() * h.bits.element_size()
        h.full_bytes = nbytes
        h.acct = self.acct
        h.layers = [layer]
        h.full = None
        h.host = None
        h.held = h.nbytes
        self.acct.add(h.nbytes)
        self._masks[key] = (weakref.ref(t), weakref.ref(h))
        s.masks += 1
        s.mask_bytes += h.nbytes
        s.mask_saved_bytes += nbytes
        return h

    def _pack_host(self, t, nbytes, layer):
        s = self.stats
        h = _Host()
        h.rt = self
        h.dev = None
        h.event = None
        h.block = None
        h.shape = tuple(t.shape)
        h.dtype = t.dtype
        h.nbytes = nbytes
        h.layers = [layer]
        h.block = self.pool.alloc(nbytes)
        dst = self.pool.view(h.block, nbytes)
        src = t.detach().reshape(-1).view(torch.uint8)
        if self.cuda:
            main = torch.cuda.current_stream(self.device)
            side = self.side_stream
            side.wait_stream(main)             # the map is written before we read it
            with torch.cuda.stream(side):
                dst.copy_(src, non_blocking=True)
            src.record_stream(side)            # not reused by the allocator before the copy
            ev = torch.cuda.Event()
            ev.record(side)
            h.event = ev
        else:
            dst.copy_(src)
        s.offloaded_bytes += nbytes
        s.offloaded_tensors += 1
        self._index(h, layer)
        return h

    def _index(self, h, layer) -> None:
        lst = self._by_layer.get(layer)
        if lst is None:
            lst = self._by_layer[layer] = []
            bisect.insort(self._layer_ids, layer)
        lst.append(weakref.ref(h))

    def _release_block(self, block) -> None:
        # all pool traffic is ordered on the side stream, so a block freed here is never
        # overwritten before the copy that reads it has run
        self.pool.free(block)

    def _fetch(self, h: _Host, sync: bool) -> None:
        dst = torch.empty(h.shape, dtype=h.dtype, device=self.device)
        src = self.pool.view(h.block, h.nbytes)
        if self.cuda:
            main = torch.cuda.current_stream(self.device)
            side = self.side_stream
            side.wait_stream(main)             # dst's memory is free on the compute stream
            with torch.cuda.stream(side):
                dst.reshape(-1).view(torch.uint8).copy_(src, non_blocking=True)
            dst.record_stream(side)
            ev = torch.cuda.Event()
            ev.record(side)
            h.event = ev
        else:
            dst.reshape(-1).view(torch.uint8).copy_(src)
            h.event = None
        h.dev = dst
        self.acct.add(h.nbytes)
        self.stats.fetched_bytes += h.nbytes

    def _unpack(self, h):
        if isinstance(h, torch.Tensor):
            return h
        if type(h) is _Keep:
            self._advance(h.layers)
            return h.t
        if type(h) is _Mask:
            if h.host is not None:
                return self._unpack(h.host)
            self._advance(h.layers)
            return h.expand()
        if type(h) is _Dry:
            raise LayrubError("backward through a Layrub dry run")
        L = self._advance(h.layers)
        if h.dev is None:
            self._fetch(h, sync=True)
            self.stats.prefetch_misses += 1
        else:
            self.stats.prefetch_hits += 1
        self._prefetch_below(L)
        if self.cuda and h.event is not None:
            torch.cuda.current_stream(self.device).wait_event(h.event)
        return h.dev

    def _advance(self, layers: list[int]) -> int:
        if not self._forward_done:
            self._forward_done = True
            self.stats.saved_end_of_forward_bytes = self.acct.cur
        below = [l for l in layers if l <= self._cursor]
        L = max(below) if below else max(layers)
        if L < self._cursor:
            self._cursor = L
        return L

    def _prefetch_below(self, L: int) -> None:
        if not self.offload or self.prefetch_distance == 0:
            return
        i = bisect.bisect_left(self._layer_ids, L)
        for j in range(i - 1, max(-1, i - 1 - self.prefetch_distance), -1):
            for ref in self._by_layer[self._layer_ids[j]]:
                h = ref()
                if h is not None and h.dev is None and h.block is not None:
                    self._fetch(h, sync=False)


# --------------------------------------------------------------------------------------
# convenience
# --------------------------------------------------------------------------------------
def measure_saved(model: nn.Module, **kwargs) -> Layrub:
    """A Layrub that changes nothing (no offload, no reuse) and only accounts the device bytes
    autograd keeps: the baseline figure. ``with measure_saved(model) as m: ...``;
    ``m.stats.saved_peak_bytes``."""
    kwargs.setdefault("capture_graph", False)
    return Layrub(model, offload=False, reuse=False, **kwargs)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Callable,
               x: torch.Tensor, target: torch.Tensor, layrub: Layrub | None = None,
               **kwargs) -> torch.Tensor:
    """One training step of ``model`` under Layrub (a new :class:`Layrub` with ``kwargs``
    unless one is passed). Returns the loss."""
    lr = layrub or Layrub(model, input_shape=tuple(x.shape), **kwargs)
    return lr.train_step(optimizer, loss_fn, x, target)

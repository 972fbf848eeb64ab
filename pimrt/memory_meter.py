"""One yardstick for every memory manager: device memory and host memory of the copies,
measured over the same window for whatever runs inside it.

    with MemoryMeter(device) as m:
        with save_on_cpu():            # or Layrub, checkpointing, nothing at all
            loss(model(x), y).backward()
    m.device_peak_bytes, m.host_peak_bytes, m.method

Device memory: on CUDA ``torch.cuda.max_memory_allocated`` above what was allocated when the
window opened. On CPU (no allocator statistics to ask) the peak of the live storages created in
the window: a ``TorchDispatchMode`` sees the outputs of every aten op, each storage is counted
once however many tensors view it, and a weak reference drops it when it is freed.

Host memory of the copies, the same way on both: a storage on the CPU that is the destination
of a copy (``copy_``, ``_to_copy``) of the tensor a saved-tensor pack hook was given (any
``torch.autograd.graph.saved_tensors_hooks``, which is how ``save_on_cpu`` and Layrub work) is
a host copy. It counts at its full size from the first copy into it while it lives, whether it
was made in the window (save_on_cpu's copies) or before it (Layrub's preallocated pool).
Whatever else pack hooks create (Layrub's ReLU bit masks) is device memory. A manager's own
host buffers are declared with ``host_buffer(make)`` (Layrub's and LaySA's ``HostPool`` chunks
do): host memory, counted whole while they live, from their making in the window or the first
op in it that uses them (so a pool that a variant never touches does not count for it).
Storages alive before the window (parameters, their gradients, the input) count in neither.
"""
from __future__ import annotations

import threading
import weakref

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

_COPIES = {torch.ops.aten.copy_.default, torch.ops.aten._to_copy.default}
_push = torch._C._autograd._push_saved_tensors_default_hooks
_HOST: set[int] = set()                 # declared host buffers: id(storage) while alive
_making_host = threading.local()
_OPEN: "weakref.WeakSet[MemoryMeter]" = weakref.WeakSet()


def host_buffer(make):
    """``buf = host_buffer(lambda: torch.empty(...))``: declare a host buffer (a pool) to every
    meter; what ``make`` allocates never counts as device memory."""
    _making_host.on = True
    try:
        t = make()
    finally:
        _making_host.on = False
    s = t.untyped_storage()
    _HOST.add(id(s))
    weakref.finalize(s, _HOST.discard, id(s))
    for m in list(_OPEN):               # made in an open window: held from now on
        m._host_buffer(t)
    return t


class _Tracker(TorchDispatchMode):
    def __init__(self, meter: "MemoryMeter"):
        super().__init__()
        self.meter = meter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        m = self.meter
        with m.lock:
            # an output on an input's storage (in place, out=, a view) is no new storage
            tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            given = {m._key(t)[1] for t in tensors}
            for t in tensors:                          # a declared host buffer, used in the window
                if m._key(t)[1] in _HOST:
                    m._host(t)
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and m._key(t)[1] not in given:
                    m._seen(t)
            if m.packing and func in _COPIES:
                to_copy = func is torch.ops.aten._to_copy.default
                src, dst = (args[0], out) if to_copy else (args[1], args[0])
                if m._key(src)[1] == m.packing[-1]:      # a copy of the tensor being packed
                    m._host(dst)
        return out


class MemoryMeter:
    """Context manager; after it: device_peak_bytes, host_peak_bytes, method."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.device_peak_bytes = self.host_peak_bytes = 0
        self.method = ("cuda max_memory_allocated" if self.device.type == "cuda"
                       else "live storages over every aten op (TorchDispatchMode)")
        self.lock = threading.RLock()

    # ------------------------------------------------------------------ bookkeeping
    def _key(self, t: torch.Tensor):
        if t.device.type == "meta" or t.is_sparse:
            return None, None
        try:
            s = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None, None
        return s, id(s)

    def _seen(self, t: torch.Tensor) -> None:
        s, key = self._key(t)
        if key is None or key in self.kind:
            return
        n = s.nbytes()
        if getattr(_making_host, "on", False):   # host_buffer() declares it right after
            return
        if self.packing:                       # classified when the pack hook returns
            self.kind[key] = ["pending", n]
            self.pending.append(key)
        else:
            self.kind[key] = ["device", n]
            self._add("device", n)
        weakref.finalize(s, self._gone, key)

    def _host_buffer(self, t) -> None:
        with self.lock:
            self._host(t)

    def _host(self, t) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
            return
        s, key = self._key(t)
        if key is None:
            return
        entry = self.kind.get(key)
        if entry is None:                         # made before the window: a preallocated pool
            entry = self.kind[key] = ["pending", s.nbytes()]
            weakref.finalize(s, self._gone, key)
        if entry[0] == "device":
            self._sub("device", entry[1])
        if entry[0] != "host":
            entry[0] = "host"
            self._add("host", entry[1])

    def _add(self, kind: str, n: int) -> None:
        self.live[kind] += n
        self.peak[kind] = max(self.peak[kind], self.live[kind])

    def _sub(self, kind: str, n: int) -> None:
        self.live[kind] -= n

    def _gone(self, key) -> None:
        with self.lock:
            entry = self.kind.pop(key, None)
            if entry is not None and entry[0] in self.live and self.open:
                self._sub(entry[0], entry[1])

    def _pack_wrapper(self, pack):
        def pack_measured(t):
            with self.lock:
                self.packing.append(self._key(t)[1])
            try:
                return pack(t)
            finally:
                with self.lock:
                    self.packing.pop()
                    if not self.packing:
                        for key in self.pending:
                            entry = self.kind.get(key)
                            if entry is not None and entry[0] == "pending":
                                entry[0] = "device"
                                self._add("device", entry[1])
                        self.pending = []
        return pack_measured

    # ------------------------------------------------------------------ window
    def __enter__(self):
        self.kind, self.pending, self.packing, self.open = {}, [], [], True
        self.live, self.peak = {"device": 0, "host": 0}, {"device": 0, "host": 0}
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        torch._C._autograd._push_saved_tensors_default_hooks = \
            lambda pack, unpack: _push(self._pack_wrapper(pack), unpack)
        _OPEN.add(self)
        self._mode = _Tracker(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        torch._C._autograd._push_saved_tensors_default_hooks = _push
        _OPEN.discard(self)
        with self.lock:
            self.open = False
        self.host_peak_bytes = self.peak["host"]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.device_peak_bytes = torch.cuda.max_memory_allocated(self.device) - self._base
        else:
            self.device_peak_bytes = self.peak["device"]
        return False

    def as_dict(self) -> dict:
        return {"device_peak_bytes": self.device_peak_bytes, "host_peak_bytes": self.host_peak_bytes,
                "method": self.method}

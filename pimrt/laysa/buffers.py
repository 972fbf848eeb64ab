"""GradSA's residual and momentum buffers under Layrub-style management.

Every parameter's ``ParamState`` (u: momentum, v: residual, optional age) has one block of a
``pimrt.layrub.HostPool`` (pinned on CUDA), allocated once and reused every step. While a
parameter is not being exchanged its state lives there: ``store.params[name].u`` / ``.v`` are
views into the pool block, so GradSA's ResidualStore (checkpoints included) stays valid at
all times. ``fetch`` brings a state to the device (a fresh device tensor per buffer, copied
from the block; on CUDA on a side stream, the compute stream waiting for its event);
``offload`` copies it back into its block and drops the device tensors. ``prefetch`` is a
``fetch`` issued one parameter ahead in exchange (backward) order.

On CPU host and device are the same RAM: the "device" copies are separate tensors that are
really freed when offloaded, but the process's memory does not shrink by them (they sit in
the pool); the ledger counts what a GPU would hold.
"""
from __future__ import annotations

import torch

from pimrt.gradsa import state as st
from pimrt.laysa.ledger import Ledger
from pimrt.layrub.pool import HostPool


class _Slot:
    __slots__ = ("block", "numel", "host", "resident", "ps", "event")

    def __init__(self):
        self.block = None
        self.numel = 0
        self.host: dict[str, torch.Tensor] = {}
        self.resident = False
        self.ps = None
        self.event = None


class BufferManager:
    """Host residence of a ResidualStore's states, with device fetch/offload accounting."""

    FIELDS = ("u", "v", "age")

    def __init__(self, store: st.ResidualStore, device: torch.device, ledger: Ledger,
                 offload: bool = True, host_budget: int | None = None):
        self.store = store
        self.device = torch.device(device)
        self.ledger = ledger
        self.offload_enabled = offload
        self.cuda = self.device.type == "cuda" and torch.cuda.is_available()
        self.side = torch.cuda.Stream(device=self.device) if self.cuda else None
        self.pool: HostPool | None = None
        self.host_budget = host_budget
        self.slots: dict[str, _Slot] = {}
        self.fetched_bytes = 0
        self.offloaded_bytes = 0
        self.prefetch_hits = 0
        self.prefetch_misses = 0

    # -- sizes ------------------------------------------------------------------------
    def _field_bytes(self, numel: int) -> dict[str, int]:
        d = {"u": 4 * numel, "v": 4 * numel}
        if self.store.track_age:
            d["age"] = 2 * numel
        return d

    def state_bytes(self, numel: int) -> int:
        return sum(self._field_bytes(numel).values())

    def reserve(self, shapes: dict[str, int]) -> None:
        """Preallocate the host pool for every parameter's state (one block each)."""
        if not self.offload_enabled or self.pool is not None:
            return
        from pimrt.layrub.pool import align
        need = sum(align(self.state_bytes(n)) for n in shapes.values())
        self.pool = HostPool(capacity=max(need, 1), max_bytes=self.host_budget, pinned=self.cuda)

    def _account(self, numel: int, sign: int) -> None:
        fb = self._field_bytes(numel)
        f = self.ledger.add if sign > 0 else self.ledger.sub
        f("momentum", fb["u"])
        f("residual", fb["v"] + fb.get("age", 0))

    # -- residence ----------------------------------------------------------------------
    def _slot(self, name: str, numel: int) -> _Slot:
        s = self.slots.get(name)
        ps = self.store.params.get(name)
        if s is not None and ps is s.ps:
            return s
        # new parameter, or the store was replaced (checkpoint load): adopt its state
        if s is not None and s.resident:
            self._account(s.numel, -1)
        s = _Slot() if s is None else s
        s.numel = numel
        s.resident = False
        s.event = None
        if ps is None:
            ps = st.ParamState.zeros(numel, self.device, self.store.track_age)
            self.store.params[name] = ps
        s.ps = ps
        self.slots[name] = s
        if not self.offload_enabled:
            s.resident = True
            self._account(numel, +1)
            return s
        if s.block is None:
            if self.pool is None:
                self.reserve({name: numel})
            s.block = self.pool.alloc(self.state_bytes(numel))
            off = 0
            for f, nb in self._field_bytes(numel).items():
                view = self.pool.view(s.block, off + nb)[off:]
                s.host[f] = view.view(torch.float32 if f != "age" else torch.int16)
                off += nb
        for f in self._field_bytes(numel):
            src = getattr(ps, f)
            if src is None:
                s.host[f].zero_()
            else:
                s.host[f].copy_(src.reshape(-1))
            setattr(ps, f, s.host[f])
        return s

    def fetch(self, name: str, numel: int, prefetch: bool = False) -> st.ParamState:
        s = self._slot(name, numel)
        if s.resident:
            if not prefetch and s.event is not None:
                self.prefetch_hits += 1
                if self.cuda:
                    torch.cuda.current_stream(self.device).wait_event(s.event)
                s.event = None
            return s.ps
        if not prefetch:
            self.prefetch_misses += 1
        self._account(numel, +1)
        s.resident = True
        for f in self._field_bytes(numel):
            host = s.host[f]
            dev = torch.empty(host.shape, dtype=host.dtype, device=self.device)
            if self.cuda:
                self.side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self.side):
                    dev.copy_(host, non_blocking=True)
                dev.record_stream(self.side)
            else:
                dev.copy_(host)
            setattr(s.ps, f, dev)
            self.fetched_bytes += host.numel() * host.element_size()
        if self.cuda:
            ev = torch.cuda.Event()
            ev.record(self.side)
            s.event = ev
            if not prefetch:
                torch.cuda.current_stream(self.device).wait_event(ev)
                s.event = None
        else:
            s.event = object() if prefetch else None
        return s.ps

    def offload(self, name: str) -> None:
        s = self.slots.get(name)
        if s is None or not s.resident or not self.offload_enabled:
            return
        for f in self._field_bytes(s.numel):
            dev = getattr(s.ps, f)
            host = s.host[f]
            if self.cuda:
                self.side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self.side):
                    host.copy_(dev, non_blocking=True)
                dev.record_stream(self.side)
            else:
                host.copy_(dev)
            setattr(s.ps, f, host)
            self.offloaded_bytes += host.numel() * host.element_size()
        s.resident = False
        s.event = None
        self._account(s.numel, -1)

    def offload_all(self) -> None:
        for name in list(self.slots):
            self.offload(name)
        if self.cuda:
            self.side.synchronize()

    def resident_bytes(self) -> int:
        return sum(self.state_bytes(s.numel) for s in self.slots.values() if s.resident)

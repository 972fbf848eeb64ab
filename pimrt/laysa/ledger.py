"""One timeline of the device bytes a training step holds, by category.

Categories (bytes a GPU would hold; parameters themselves are the same for every variant
and are reported separately):

    saved     tensors autograd keeps for backward (Layrub's accounting: distinct storages,
              ReLU masks, fetched copies, kept tensors)
    grad      dense parameter gradients (``param.grad``) while alive
    residual  GradSA's residual v (not yet sent velocity) held on the device
    momentum  GradSA's momentum u on the device, or SGD's momentum buffers (dense baseline)
    comm      exchange buffers: DDP's flat bucket buffers (one per model), payloads
    update    LaySA's per-layer decoded update while it is applied

``Ledger.add``/``sub`` move the current total; the peak total and the split at that peak are
kept. With ``budget`` (bytes) an ``add`` that passes it raises LaySABudgetError.
``LedgerAcct`` is a drop-in for Layrub's saved-tensor accountant that feeds ``saved``.
"""
from __future__ import annotations

from typing import Any

from pimrt.laysa.errors import LaySABudgetError
from pimrt.layrub.errors import fmt_bytes
from pimrt.layrub.runtime import _Acct

CATEGORIES = ("saved", "grad", "residual", "momentum", "comm", "update")


class Ledger:
    def __init__(self, budget: int | None = None):
        self.budget = budget
        self.cur = {c: 0 for c in CATEGORIES}
        self.total = 0
        self.peak = 0
        self.at_peak = dict(self.cur)
        self.max = dict(self.cur)

    def add(self, cat: str, n: int) -> None:
        if n == 0:
            return
        self.cur[cat] += n
        self.total += n
        if self.cur[cat] > self.max[cat]:
            self.max[cat] = self.cur[cat]
        if self.total > self.peak:
            self.peak = self.total
            self.at_peak = dict(self.cur)
            if self.budget is not None and self.total > self.budget:
                raise LaySABudgetError(
                    f"device memory budget exceeded: {self.total:,} B ({fmt_bytes(self.total)}) "
                    f"held ({', '.join(f'{c} {v:,}' for c, v in self.cur.items() if v)}), budget "
                    f"{self.budget:,} B ({fmt_bytes(self.budget)})", needed=self.total,
                    budget=self.budget)

    def sub(self, cat: str, n: int) -> None:
        self.cur[cat] -= n
        self.total -= n

    def set(self, cat: str, n: int) -> None:
        d = n - self.cur[cat]
        if d > 0:
            self.add(cat, d)
        elif d < 0:
            self.sub(cat, -d)

    def reset_peak(self) -> None:
        self.peak = self.total
        self.at_peak = dict(self.cur)
        self.max = dict(self.cur)

    def snapshot(self) -> dict:
        return {"peak_bytes": self.peak, "at_peak": dict(self.at_peak), "max": dict(self.max),
                "current": dict(self.cur)}


class LedgerAcct(_Acct):
    """Layrub's saved-tensor accountant (cur, peak, budget, add, sub, hold_storage,
    drop_storage) that also feeds the ``saved`` category of a Ledger."""

    def __init__(self, ledger: Ledger):
        super().__init__(budget=None)
        self.ledger = ledger

    def add(self, n: int) -> None:
        super().add(n)
        self.ledger.add("saved", n)

    def sub(self, n: int) -> None:
        super().sub(n)
        self.ledger.sub("saved", n)

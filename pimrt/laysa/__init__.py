"""LaySA: Layrub and GradSA working together, with a mirror parameter update (docs/laysa.md).

    from pimrt.laysa import LaySA
    laysa = LaySA(model, config=SparseConfig(density=0.01), optimizer=opt, device_budget="64MB")
    with laysa:                       # one step: forward + backward
        loss_fn(model(x), y).backward()
    # parameters already updated (bit-identical to DDP + GradSA + SGD); opt.step() is a no-op

Modules: runtime (the per-layer exchange and mirror update), buffers (GradSA's residual and
momentum in a host pool, prefetched one layer ahead), ledger (device-byte accounting by
category), manager (``--manager laysa`` / ``layrub`` for pimrt.train), errors.
"""
from pimrt.laysa.errors import LaySABudgetError, LaySAError
from pimrt.laysa.ledger import CATEGORIES, Ledger, LedgerAcct
from pimrt.laysa.buffers import BufferManager
from pimrt.laysa.runtime import LaySA, check_optimizer

__all__ = ["LaySA", "LaySAError", "LaySABudgetError", "Ledger", "LedgerAcct", "CATEGORIES",
           "BufferManager", "check_optimizer"]

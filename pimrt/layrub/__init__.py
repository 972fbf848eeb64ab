"""Layrub: layer-centric feature-map memory management (docs/layrub.md).

Torch training::

    from pimrt.layrub import Layrub
    lr = Layrub(model, input_shape=(64, 3, 32, 32), offload=True, reuse=True)
    with lr:                       # one training step
        loss_fn(model(x), y).backward()

Planning for the PIM runtime (pure Python on a captured LayerGraph)::

    from pimrt.layrub import plan
    p = plan(graph, batch=32, budget_bytes=None, offload=True, reuse=True)
    p.peak_bytes, p.baseline_peak_bytes, p.traffic()
"""
from pimrt.layrub.errors import (LayrubBudgetError, LayrubError, LayrubUnsupportedError,
                                 LayrubWarning, fmt_bytes, parse_bytes)
from pimrt.layrub.pool import HostPool
from pimrt.layrub.runtime import Layrub, StepStats, measure_saved, pack_bits, train_step, \
    unpack_bits
from pimrt.layrub.planner import Plan, Step, check_plan, plan

__all__ = [
    "Layrub", "StepStats", "measure_saved", "train_step", "pack_bits", "unpack_bits",
    "HostPool", "plan", "Plan", "Step", "check_plan",
    "LayrubError", "LayrubBudgetError", "LayrubUnsupportedError", "LayrubWarning",
    "parse_bytes", "fmt_bytes",
]

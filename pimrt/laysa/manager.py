"""Memory managers for pimrt.train (registered in pimrt/train/managers.py).

``--manager laysa``: LaySA takes over the trainer's GradSA state (the one registered as the
DDP comm hook: same residuals, counters, generator and checkpoints); each step runs under
``ddp.no_sync()`` with LaySA's per-layer exchange and mirror update, Layrub on the feature
maps. The trainer's optimizer (SGD without momentum/weight decay, as GradSA needs) is bound at
its first ``step``: the updates of step 1 wait in the mirror until then, later steps update
in backward. Needs ``--compressor gradsa`` (or ``dgc``, same hook).

``--manager layrub``: Layrub alone around the step (any compressor).
"""
from __future__ import annotations

from pimrt.gradsa.hook import GradSAState
from pimrt.laysa.errors import LaySAError
from pimrt.laysa.runtime import LaySA


def _module(model):
    return getattr(model, "module", model)


def find_state(ddp) -> GradSAState | None:
    for _hook, state in getattr(ddp, "_comm_hooks", []) or []:
        if isinstance(state, GradSAState):
            return state
    return None


class LaySAManager:
    def __init__(self, model, **options):
        state = find_state(model)
        if state is None:
            raise LaySAError("--manager laysa needs a GradSA-style compressor registered on DDP "
                             "(--compressor gradsa or dgc)")
        self.laysa = LaySA(model, state=state, **options)
        self.laysa.bind_on_first_step()

    def wrap_step(self, step_fn):
        def step(x, y):
            with self.laysa:
                return step_fn(x, y)
        return step


class LayrubManager:
    def __init__(self, model, **options):
        from pimrt.layrub import Layrub
        options.setdefault("capture_graph", False)
        self.layrub = Layrub(_module(model), **options)

    def wrap_step(self, step_fn):
        def step(x, y):
            with self.layrub:
                return step_fn(x, y)
        return step

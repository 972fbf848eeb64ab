"""Memory managers that wrap the training step (LaySA plugs in here: --manager NAME).

A manager is built as `MANAGERS[name](model)` and returns an object with
`wrap_step(step_fn) -> step_fn`, where step_fn(x, y) runs forward and backward and returns
(loss, logits). The trainer calls the wrapped function once per step, before the optimizer.
"""
from __future__ import annotations

from pimrt.gradsa.errors import GradSAError


class NoManager:
    def __init__(self, model):
        self.model = model

    def wrap_step(self, step_fn):
        return step_fn


def _laysa(model):
    from pimrt.laysa.manager import LaySAManager
    return LaySAManager(model)


def _layrub(model):
    from pimrt.laysa.manager import LayrubManager
    return LayrubManager(model)


MANAGERS = {"none": NoManager, "layrub": _layrub, "laysa": _laysa}


def get(name: str):
    try:
        return MANAGERS[name]
    except KeyError:
        raise GradSAError(f"unknown memory manager {name!r}; valid: {', '.join(MANAGERS)}") from None

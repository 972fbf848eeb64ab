"""Errors of model capture and of checking a split against a captured graph."""
from __future__ import annotations

from pimrt.errors import ConfigError, PimrtError


class GraphError(PimrtError):
    """A model pimrt cannot capture: torch.fx cannot trace it, the input shape does not fit it,
    or a graph query names a layer that is not there."""


class UnsupportedOpError(GraphError):
    """An op outside pimrt's supported layer kinds.

    ``node`` is the torch.fx node name, ``target`` the module path / function / method it
    calls, ``module_path`` the module that owns the call ('' for the top-level forward), and
    ``others`` the further unsupported nodes as ``(node, target, module_path)`` tuples.
    """

    def __init__(self, message: str, node: str, target: str, module_path: str,
                 others: list[tuple[str, str, str]] | None = None):
        super().__init__(message)
        self.node = node
        self.target = target
        self.module_path = module_path
        self.others = list(others or [])


class SplitError(ConfigError):
    """A batch size or output-channel group count the graph's layers cannot be split by."""


class UnsupportedOpWarning(UserWarning):
    """An unsupported op that ``allow_unsupported=True`` lets run on the host."""

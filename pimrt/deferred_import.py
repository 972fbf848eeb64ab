"""A module imported on first use: defer("numpy") puts a stand-in in sys.modules, so that
`import numpy as np` costs nothing until some code reads an attribute of np; that read
imports the real module and the stand-in takes on its attributes.

`pimrt memsim` on a text trace memctl's C reader takes never needs numpy, whose import would
be a third of its CPU time; pimrt's modules read no numpy attribute when they are imported.
(The standard library's importlib.util.LazyLoader does not do here: in Python 3.11 the
`import` statement itself reads the module's __spec__, which makes it load.)"""
from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types

_LOCK = threading.Lock()


class _Deferred(types.ModuleType):
    """Stands in sys.modules for a module not imported yet."""

    def __getattr__(self, attr: str):
        # (called only for attributes not found in the stand-in's own dictionary)
        real = self.__dict__.get("_deferred_real")
        if real is None:
            with _LOCK:
                real = self.__dict__.get("_deferred_real")
                if real is None:
                    name = self.__name__
                    if sys.modules.get(name) is self:
                        del sys.modules[name]
                    real = importlib.import_module(name)
                    self.__dict__.update(real.__dict__)
                    self.__dict__["_deferred_real"] = real
        return getattr(real, attr)


def defer(name: str) -> None:
    """Import module `name` only when one of its attributes is first read (nothing to do if
    it is imported already or cannot be found: then `import` fails where it is needed)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    stand_in = _Deferred(name)
    stand_in.__spec__ = spec        # what `import` reads of a module already imported
    stand_in.__file__ = spec.origin
    sys.modules[name] = stand_in

"""A user's own model for `pimrt run` / `pimrt compare`: ``FILE.py:NAME`` or ``module:NAME``.

NAME is an ``nn.Module`` class or a function that builds the model with no arguments (give
defaults for what it takes). It is built like a zoo model: on the meta device for timing,
with real weights for the functional step; it must take (batch, 3, H, W) images and return
class scores (batch, classes).
"""
from __future__ import annotations

import copy
import importlib
import importlib.util
import pathlib
import sys

import torch
from torch import nn

from pimrt.errors import ConfigError


class UserModelError(ConfigError):
    """A ``FILE.py:NAME`` / ``module:NAME`` model that cannot be loaded or built."""


def is_spec(name: str) -> bool:
    return isinstance(name, str) and ":" in name


def _load_factory(spec: str):
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise UserModelError(f"model {spec!r}: expected FILE.py:NAME or module:NAME")
    if where.endswith(".py"):
        path = pathlib.Path(where)
        if not path.is_file():
            raise UserModelError(f"model {spec!r}: no file {path}")
        mod_name = f"pimrt_user_model_{abs(hash(str(path.resolve())))}"
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's file may raise anything
            del sys.modules[mod_name]
            raise UserModelError(f"model {spec!r}: loading {path} failed: "
                                 f"{_why(exc)}") from exc
    else:
        if "" not in sys.path and str(pathlib.Path.cwd()) not in sys.path:
            sys.path.insert(0, str(pathlib.Path.cwd()))   # as `python -m` would find it
        try:
            module = importlib.import_module(where)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 (sys.exit() in the file too)
            raise UserModelError(f"model {spec!r}: cannot import module {where!r}: "
                                 f"{_why(exc)}") from exc
    if not hasattr(module, attr):
        names = sorted(n for n, v in vars(module).items()
                       if not n.startswith("_") and (isinstance(v, type) and issubclass(v, nn.Module)
                                                     or callable(v) and not isinstance(v, type)))
        raise UserModelError(f"model {spec!r}: {where} has no {attr!r}"
                             + (f" (it has: {', '.join(names)})" if names else ""))
    factory = getattr(module, attr)
    if not callable(factory):
        raise UserModelError(f"model {spec!r}: {attr} is a {type(factory).__name__}, not a "
                             f"class or function")
    return factory


def _why(exc: BaseException) -> str:
    """What the user's code raised, in words (sys.exit() raises SystemExit)."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}"


def build_user_model(spec: str, input_size: int, device=None) -> nn.Module:
    """Build the model ``spec`` names (on ``device``; "meta" allocates nothing) and give it the
    attributes zoo models carry (pimrt_name, input_size, num_classes from its output)."""
    factory = _load_factory(spec)
    try:
        if device is not None:
            with torch.device(device):
                model = factory()
        else:
            model = factory()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 (sys.exit() in the file too)
        raise UserModelError(f"model {spec!r}: building it failed: {_why(exc)} "
                             f"(pimrt calls it with no arguments)") from exc
    if not isinstance(model, nn.Module):
        raise UserModelError(f"model {spec!r}: returned a {type(model).__name__}, not a "
                             f"torch.nn.Module")
    if not any(p.requires_grad for p in model.parameters()):
        raise UserModelError(f"model {spec!r}: has no trainable parameters: a training step "
                             f"has nothing to compute gradients for")
    on_meta = device is not None and torch.device(device).type == "meta"
    try:
        probe = model if on_meta else copy.deepcopy(model).to("meta")   # a shape probe
        with torch.no_grad():
            out = probe.train(False)(torch.empty(2, 3, input_size, input_size, device="meta"))
        model.train(True)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 (sys.exit() in the file too)
        raise UserModelError(f"model {spec!r}: a (2, 3, {input_size}, {input_size}) input "
                             f"fails: {_why(exc)}") from exc
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != 2:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise UserModelError(f"model {spec!r}: returns {shape} for a batch of 2; pimrt trains "
                             f"classifiers whose output is (batch, classes)")
    model.pimrt_name = spec.rpartition(":")[2]
    model.input_size = input_size
    model.num_classes = int(out.shape[1])
    model.variant = "user"
    return model

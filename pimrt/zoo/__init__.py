"""pimrt's model zoo: shape-accurate CNNs built only from layers pimrt captures.

    from pimrt import zoo
    model = zoo.build("resnet18", num_classes=10, input_size=32)   # CIFAR ResNet-18
    model = zoo.build("resnet152")                                   # torchvision ResNet-152
    zoo.list_models()

``input_size`` picks the variant: ``<= 64`` gives the CIFAR form (3x3/1 stem, no max-pool for
ResNets; VGG with a 1x1 final map and one Linear; DenseNet/MobileNetV2 with reduced strides;
``wide_resnet`` = WRN-28-10), larger gives the ImageNet form (torchvision's architecture and
parameter count; ``wide_resnet`` = wide_resnet50_2). ``variant="cifar"|"imagenet"`` overrides
that. ``num_classes`` defaults to 10 for the CIFAR form and 1000 for the ImageNet form.

CIFAR ResNets of any depth: ``resnet_cifar_<depth>`` or ``resnet<depth>`` (for depths other
than 18/34/50/101/152), e.g. ``resnet110``, ``resnet1202`` (basic blocks, depth 6n+2) or
``resnet1001`` (bottleneck, 9n+2); append ``_basic``/``_bottleneck`` to force the block.
``resnet_cifar(depth)`` is the builder behind those names.
"""
from __future__ import annotations

import re
from typing import Callable

import torch
from torch import nn

from pimrt.errors import ConfigError
from pimrt.zoo.densenet import DenseNet, densenet121
from pimrt.zoo.mobilenet import MobileNetV2, mobilenetv2
from pimrt.zoo.resnet import BasicBlock, Bottleneck, ResNet, resnet, resnet_cifar
from pimrt.zoo.user import build_user_model, is_spec
from pimrt.zoo.vgg import VGG, vgg16_bn
from pimrt.zoo.wide_resnet import WideResNet, wide_resnet50_2, wrn

__all__ = [
    "build", "list_models", "resnet_cifar", "count_params", "CANONICAL_PARAMS", "ZooError",
    "ResNet", "BasicBlock", "Bottleneck", "VGG", "DenseNet", "MobileNetV2", "WideResNet",
]


class ZooError(ConfigError):
    """An unknown model name or an impossible zoo option (input size, class count, depth)."""


#: Parameter counts of the ImageNet (224x224, 1000-class) models; they equal torchvision's.
CANONICAL_PARAMS: dict[str, int] = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "vgg16_bn": 138_365_992,
    "densenet121": 7_978_856,
    "mobilenetv2": 3_504_872,
    "wide_resnet": 68_883_240,   # wide_resnet50_2
}

_ALIASES = {
    "vgg16": "vgg16_bn",
    "mobilenet_v2": "mobilenetv2",
    "wide_resnet28_10": "wrn28_10",
    "wrn_28_10": "wrn28_10",
}

#: Depths of the CIFAR ResNets of He et al. listed by list_models() (any 6n+2 / 9n+2 builds).
CIFAR_DEPTHS = (20, 32, 44, 56, 110, 164, 1001, 1202)


def _builders() -> dict[str, Callable[[int, str, int], nn.Module]]:
    def rn(name):
        return lambda nc, variant, size: resnet(name, nc, stem=variant)

    return {
        "resnet18": rn("resnet18"),
        "resnet34": rn("resnet34"),
        "resnet50": rn("resnet50"),
        "resnet101": rn("resnet101"),
        "resnet152": rn("resnet152"),
        "vgg16_bn": lambda nc, variant, size: vgg16_bn(nc, classifier=variant, input_size=size),
        "densenet121": lambda nc, variant, size: densenet121(nc, stem=variant),
        "mobilenetv2": lambda nc, variant, size: mobilenetv2(nc, stem=variant),
        "wide_resnet": lambda nc, variant, size: (wrn(28, 10, nc) if variant == "cifar"
                                                  else wide_resnet50_2(nc)),
        "wide_resnet50_2": lambda nc, variant, size: wide_resnet50_2(nc, stem=variant),
        "wrn28_10": lambda nc, variant, size: wrn(28, 10, nc),
    }


_CIFAR_RE = re.compile(r"^resnet(?:_cifar_?)?(\d+)(?:_(basic|bottleneck))?$")


def list_models() -> list[str]:
    """Names ``build`` accepts (aliases excluded; any ``resnet_cifar_<6n+2 or 9n+2>`` too)."""
    names = list(_builders())
    names += [f"resnet_cifar_{d}" for d in CIFAR_DEPTHS]
    return names


def count_params(model: nn.Module) -> int:
    """Number of parameters (works on meta-device models too)."""
    return sum(p.numel() for p in model.parameters())


def build(name: str, num_classes: int | None = None, input_size: int | None = None,
          variant: str | None = None, device: str | torch.device | None = None) -> nn.Module:
    """Build zoo model ``name`` for ``input_size`` x ``input_size`` RGB inputs, or a user's
    model named ``FILE.py:NAME`` / ``module:NAME`` (:mod:`pimrt.zoo.user`).

    ``input_size=None`` means 224, except for the CIFAR-only models (``resnet_cifar_<depth>``,
    ``resnet<depth>`` for CIFAR depths, ``wrn28_10``), where it means 32.

    ``device="meta"`` builds without allocating or initialising weights (instant even for
    VGG-16 or ResNet-1202): enough for shapes, parameter counts and ``pimrt.graph.capture``.
    The model carries ``pimrt_name``, ``input_size``, ``num_classes`` and ``variant``
    attributes. Raises :class:`ZooError` (a ``pimrt.errors.ConfigError``) naming the problem
    for an unknown name, a bad input size or class count.
    """
    if not isinstance(name, str):
        raise ZooError(f"model name must be a string, got {name!r}")
    if is_spec(name):                       # a user's model: FILE.py:NAME or module:NAME
        if input_size is None or input_size < 8:
            raise ZooError(f"{name}: give an input_size >= 8, got {input_size!r}")
        if num_classes is not None or variant is not None:
            raise ZooError(f"{name}: a user's model sets its own classes and form; "
                           f"num_classes and variant are for zoo models")
        return build_user_model(name, input_size, device)
    key = name.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    cifar_only = key == "wrn28_10" or (key not in _builders() and _CIFAR_RE.match(key))
    if input_size is None:
        input_size = 32 if cifar_only else 224
    if isinstance(input_size, bool) or not isinstance(input_size, int) or input_size < 32:
        raise ZooError(f"{name}: input_size must be an integer >= 32, got {input_size!r}")
    if variant is None:
        variant = "cifar" if input_size <= 64 else "imagenet"
    if variant not in ("cifar", "imagenet"):
        raise ZooError(f"{name}: variant must be 'cifar' or 'imagenet', got {variant!r}")
    if num_classes is None:
        num_classes = 10 if variant == "cifar" else 1000
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ZooError(f"{name}: num_classes must be a positive integer, got {num_classes!r}")
    if variant == "cifar" and key == "vgg16_bn" and input_size % 32:
        raise ZooError(f"{name}: the CIFAR VGG needs input_size a multiple of 32, "
                       f"got {input_size}")

    builders = _builders()
    ctx = torch.device(device) if device is not None else _NullContext()
    if key in builders:
        with ctx:
            model = builders[key](num_classes, variant, input_size)
    else:
        m = _CIFAR_RE.match(key)
        if m is None:
            raise ZooError(f"unknown model {name!r}; known: {', '.join(list_models())} "
                           f"(aliases: {', '.join(sorted(_ALIASES))}; and resnet_cifar_<depth> "
                           f"for any depth 6n+2 or 9n+2)")
        depth, block = int(m.group(1)), m.group(2)
        try:
            with ctx:
                model = resnet_cifar(depth, num_classes, block)
        except ConfigError as exc:
            raise ZooError(f"{name}: {exc}") from None
        variant = "cifar"
    model.pimrt_name = key
    model.input_size = input_size
    model.num_classes = num_classes
    model.variant = variant
    return model


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

"""Models for the trainer: two tiny ones for tests, a user's FILE.py:NAME / module:NAME (loaded
as `pimrt run --model` loads it, pimrt/zoo/user.py), everything else from pimrt.zoo."""
from __future__ import annotations

import torch
from torch import nn

from pimrt.gradsa.errors import GradSAError

TINY = ("mlp", "tinycnn")


def build_model(name: str, num_classes: int = 10, image_size: int = 32, channels: int = 3) -> nn.Module:
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(channels * image_size * image_size, 64), nn.ReLU(),
                             nn.Linear(64, num_classes))
    if name == "tinycnn":
        return nn.Sequential(nn.Conv2d(channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                             nn.Linear(64, num_classes))
    from pimrt.zoo.user import is_spec
    if is_spec(name):
        return _user_model(name, num_classes, image_size, channels)
    try:
        from pimrt import zoo
    except ImportError as exc:  # pragma: no cover
        raise GradSAError(f"model {name!r} needs pimrt.zoo, which cannot be imported: {exc}") from exc
    try:
        # The zoo's CIFAR forms start at 32x32; smaller images (digits are 8x8) go through the
        # same 32x32-form model when it is fully convolutional (checked below).
        model = zoo.build(name, num_classes=num_classes, input_size=max(32, image_size))
    except Exception as exc:
        raise GradSAError(f"unknown or impossible model {name!r} (tiny models: {', '.join(TINY)}; "
                          f"others come from pimrt.zoo): {exc}") from exc
    if image_size < 32:
        try:
            with torch.no_grad():
                model.eval()(torch.zeros(2, channels, image_size, image_size))
            model.train()
        except Exception as exc:
            raise GradSAError(f"model {name!r} cannot take {image_size}x{image_size} images: {exc}") from exc
    return model


def _user_model(spec: str, num_classes: int, image_size: int, channels: int) -> nn.Module:
    """A user's nn.Module, built on the CPU with its own weights; it takes (batch, 3, H, W) images
    (pimrt.zoo.user) and must score at least the dataset's classes."""
    from pimrt.zoo.user import build_user_model
    if channels != 3:
        raise GradSAError(f"model {spec!r}: a user's model takes 3-channel images; "
                          f"--channels {channels} is for mlp and tinycnn")
    model = build_user_model(spec, image_size)
    if model.num_classes < num_classes:
        raise GradSAError(f"model {spec!r}: scores {model.num_classes} classes; the dataset has "
                          f"{num_classes}")
    return model

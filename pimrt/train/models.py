"""Models for the trainer: two tiny ones for tests, everything else from pimrt.zoo."""
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

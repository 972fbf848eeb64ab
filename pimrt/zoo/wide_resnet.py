"""Wide ResNets.

* ``wrn(depth=28, widen=10)``: WRN-d-k of Zagoruyko & Komodakis (2016) for 32x32 inputs:
  pre-activation basic blocks (BN-ReLU-conv), three groups of ``(d-4)/6`` blocks at
  16k/32k/64k channels, BN-ReLU, global average pool, fc. WRN-28-10 has 36.5 M parameters
  (10 classes). The shortcut is ``torch.add`` (1x1 conv on the pre-activated input when the
  shape changes).
* ``wide_resnet50_2``: torchvision's ImageNet wide ResNet-50-2 (68,883,240 parameters).
"""
from __future__ import annotations

import torch
from torch import nn

from pimrt.errors import ConfigError
from pimrt.zoo.resnet import Bottleneck, ResNet


class WideBasic(nn.Module):
    def __init__(self, in_planes: int, out_planes: int, stride: int, dropout: float = 0.0):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.relu2 = nn.ReLU(inplace=True)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.conv2 = nn.Conv2d(out_planes, out_planes, 3, stride=1, padding=1, bias=False)
        self.equal_in_out = in_planes == out_planes and stride == 1
        self.shortcut = (None if self.equal_in_out else
                         nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o = self.relu1(self.bn1(x))
        y = self.relu2(self.bn2(self.conv1(o)))
        if self.dropout is not None:
            y = self.dropout(y)
        y = self.conv2(y)
        shortcut = x if self.shortcut is None else self.shortcut(o)
        return torch.add(shortcut, y)


class WideResNet(nn.Module):
    def __init__(self, depth: int = 28, widen: int = 10, num_classes: int = 10,
                 dropout: float = 0.0):
        super().__init__()
        if (depth - 4) % 6 or depth < 10:
            raise ConfigError(f"WideResNet: depth must be 6n+4 (10, 16, 22, 28, 40), got {depth}")
        n = (depth - 4) // 6
        widths = [16, 16 * widen, 32 * widen, 64 * widen]
        self.conv1 = nn.Conv2d(3, widths[0], 3, stride=1, padding=1, bias=False)
        in_planes = widths[0]
        for g, (w, stride) in enumerate(zip(widths[1:], (1, 2, 2))):
            blocks = []
            for i in range(n):
                blocks.append(WideBasic(in_planes, w, stride if i == 0 else 1, dropout))
                in_planes = w
            setattr(self, f"block{g + 1}", nn.Sequential(*blocks))
        self.bn = nn.BatchNorm2d(in_planes)
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)
        # (meta-device builds have no values to initialise: skip, it would only cost time)
        for m in ([] if next(self.parameters()).is_meta else self.modules()):
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        x = self.block3(self.block2(self.block1(x)))
        x = self.relu(self.bn(x))
        x = self.avgpool(x)
        x = x.flatten(1)
        return self.fc(x)


def wrn(depth: int = 28, widen: int = 10, num_classes: int = 10,
        dropout: float = 0.0) -> WideResNet:
    """WRN-depth-widen for CIFAR-style inputs (any size >= 8 works: the pool is adaptive)."""
    return WideResNet(depth, widen, num_classes, dropout)


def wide_resnet50_2(num_classes: int = 1000, stem: str = "imagenet") -> ResNet:
    """torchvision's wide_resnet50_2: ResNet-50 with bottleneck width doubled (68.9 M params)."""
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes=num_classes, stem=stem,
                  width_per_group=128)

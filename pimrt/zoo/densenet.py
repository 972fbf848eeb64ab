"""DenseNet-121 (torchvision's ``densenet121``, 7,978,856 parameters) and its CIFAR variant.

Module names follow torchvision (``features.denseblock1.denselayer1.conv1``, ...). Each dense
layer's output is appended with ``torch.cat([x, new], 1)`` (one concat per dense layer: 58 in
DenseNet-121), which computes the same function as torchvision's list-of-features form.

* ``stem="imagenet"``: 7x7/2 conv + 3x3/2 max-pool (224x224 -> 56x56 into block 1).
* ``stem="cifar"``: 3x3/1 conv, no max-pool (32x32 stays 32x32 into block 1; the three
  transitions take it to 4x4).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pimrt.errors import ConfigError


class _DenseLayer(nn.Module):
    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int,
                 drop_rate: float = 0.0):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1,
                               stride=1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1,
                               padding=1, bias=False)
        self.dropout = nn.Dropout(drop_rate) if drop_rate > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(self.relu1(self.norm1(x)))
        out = self.conv2(self.relu2(self.norm2(out)))
        if self.dropout is not None:
            out = self.dropout(out)
        return out


class _DenseBlock(nn.Module):
    def __init__(self, num_layers: int, num_input_features: int, bn_size: int,
                 growth_rate: int, drop_rate: float = 0.0):
        super().__init__()
        self.num_layers = num_layers
        for i in range(num_layers):
            layer = _DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size,
                                drop_rate)
            self.add_module(f"denselayer{i + 1}", layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.num_layers):
            new = getattr(self, f"denselayer{i + 1}")(x)
            x = torch.cat([x, new], 1)
        return x


class _Transition(nn.Sequential):
    def __init__(self, num_input_features: int, num_output_features: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1,
                              bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    def __init__(self, growth_rate: int = 32, block_config: tuple[int, ...] = (6, 12, 24, 16),
                 num_init_features: int = 64, bn_size: int = 4, drop_rate: float = 0.0,
                 num_classes: int = 1000, stem: str = "imagenet"):
        super().__init__()
        if stem == "imagenet":
            stem_layers = [
                ("conv0", nn.Conv2d(3, num_init_features, kernel_size=7, stride=2, padding=3,
                                    bias=False)),
                ("norm0", nn.BatchNorm2d(num_init_features)),
                ("relu0", nn.ReLU(inplace=True)),
                ("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1)),
            ]
        elif stem == "cifar":
            stem_layers = [
                ("conv0", nn.Conv2d(3, num_init_features, kernel_size=3, stride=1, padding=1,
                                    bias=False)),
                ("norm0", nn.BatchNorm2d(num_init_features)),
                ("relu0", nn.ReLU(inplace=True)),
            ]
        else:
            raise ConfigError(f"DenseNet: unknown stem {stem!r} (imagenet or cifar)")
        self.features = nn.Sequential()
        for name, mod in stem_layers:
            self.features.add_module(name, mod)
        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            block = _DenseBlock(num_layers, num_features, bn_size, growth_rate, drop_rate)
            self.features.add_module(f"denseblock{i + 1}", block)
            num_features += num_layers * growth_rate
            if i != len(block_config) - 1:
                trans = _Transition(num_features, num_features // 2)
                self.features.add_module(f"transition{i + 1}", trans)
                num_features //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(num_features))
        self.classifier = nn.Linear(num_features, num_classes)
        # (meta-device builds have no values to initialise: skip, it would only cost time)
        for m in ([] if next(self.parameters()).is_meta else self.modules()):
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.features(x)
        out = F.relu(features, inplace=True)
        out = F.adaptive_avg_pool2d(out, (1, 1))
        out = torch.flatten(out, 1)
        return self.classifier(out)


def densenet121(num_classes: int = 1000, stem: str = "imagenet") -> DenseNet:
    return DenseNet(32, (6, 12, 24, 16), 64, num_classes=num_classes, stem=stem)

"""MobileNetV2 (torchvision's ``mobilenet_v2``, width 1.0: 3,504,872 parameters) and its CIFAR
variant.

Layers: Conv2d (incl. depthwise, ``groups == channels``), BatchNorm2d, ReLU6 (a clamp to
[0, 6]: pimrt kind ``relu6``, run on PIM as max/min), residual ``+``, adaptive average pool,
flatten, Dropout, Linear. Module names follow torchvision (``features.1.conv.0.0``).

* ``stem="imagenet"``: first conv stride 2; stage strides (1, 2, 2, 2, 1, 2, 1); 224 -> 7x7.
* ``stem="cifar"``: first conv stride 1 and the second stage (24 channels) stride 1, as in the
  common CIFAR port; 32 -> 4x4.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pimrt.errors import ConfigError


def _make_divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNReLU6(nn.Sequential):
    def __init__(self, in_planes: int, out_planes: int, kernel_size: int = 3, stride: int = 1,
                 groups: int = 1):
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups,
                      bias=False),
            nn.BatchNorm2d(out_planes),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int):
        super().__init__()
        if stride not in (1, 2):
            raise ConfigError(f"InvertedResidual: stride must be 1 or 2, got {stride}")
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(inp, hidden_dim, kernel_size=1))
        layers += [
            ConvBNReLU6(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


IMAGENET_SETTING = [
    # t, c, n, s
    [1, 16, 1, 1],
    [6, 24, 2, 2],
    [6, 32, 3, 2],
    [6, 64, 4, 2],
    [6, 96, 3, 1],
    [6, 160, 3, 2],
    [6, 320, 1, 1],
]


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, stem: str = "imagenet",
                 dropout: float = 0.2, round_nearest: int = 8):
        super().__init__()
        if stem not in ("imagenet", "cifar"):
            raise ConfigError(f"MobileNetV2: unknown stem {stem!r} (imagenet or cifar)")
        setting = [list(row) for row in IMAGENET_SETTING]
        first_stride = 2
        if stem == "cifar":
            first_stride = 1
            setting[1][3] = 1
        input_channel = _make_divisible(32 * width_mult, round_nearest)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), round_nearest)
        features: list[nn.Module] = [ConvBNReLU6(3, input_channel, stride=first_stride)]
        for t, c, n, s in setting:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidual(input_channel, output_channel,
                                                 s if i == 0 else 1, t))
                input_channel = output_channel
        features.append(ConvBNReLU6(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout),
                                        nn.Linear(self.last_channel, num_classes))
        # (meta-device builds have no values to initialise: skip, it would only cost time)
        for m in ([] if next(self.parameters()).is_meta else self.modules()):
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return self.classifier(x)


def mobilenetv2(num_classes: int = 1000, stem: str = "imagenet") -> MobileNetV2:
    return MobileNetV2(num_classes=num_classes, stem=stem)

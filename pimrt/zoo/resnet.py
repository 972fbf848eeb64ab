"""ResNets: the torchvision ImageNet family (18/34/50/101/152) and the CIFAR
family of He et al. (2015), ``resnet_cifar(depth)``, for arbitrarily deep networks.

Only layer kinds pimrt captures are used: Conv2d, BatchNorm2d, ReLU, residual ``+``,
MaxPool2d, AdaptiveAvgPool2d, ``torch.flatten`` and Linear. Module names follow torchvision
(``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer1.0.downsample.0``, ``fc``), so the 224 models
have exactly torchvision's parameter names and counts.

Input stems:
  * ``stem="imagenet"``: 7x7/2 conv + 3x3/2 max-pool (224x224 inputs).
  * ``stem="cifar"``: 3x3/1 conv, no max-pool (32x32 inputs); same stages and widths.
"""
from __future__ import annotations

import torch
from torch import nn

from pimrt.errors import ConfigError


def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1,
                     groups=groups, bias=False)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs; ``relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))``."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: nn.Module | None = None, groups: int = 1, base_width: int = 64):
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ConfigError("BasicBlock supports only groups=1 and base_width=64")
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out = out + identity
        return self.relu(out)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (stride here: ResNet v1.5, as torchvision), 1x1 expand (x4)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1,
                 downsample: nn.Module | None = None, groups: int = 1, base_width: int = 64):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride, groups)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out = out + identity
        return self.relu(out)


def _init_weights(model: nn.Module) -> None:
    if next(model.parameters()).is_meta:      # meta-device build: nothing to initialise
        return
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class ResNet(nn.Module):
    """torchvision's ResNet, with a choice of input stem.

    ``widths`` are the per-stage ``planes`` (64, 128, 256, 512 for ImageNet ResNets;
    16, 32, 64 for the CIFAR ResNets of He et al.). ``stem_width`` is the first conv's
    output channels (defaults to ``widths[0]``).
    """

    def __init__(self, block: type[BasicBlock] | type[Bottleneck], layers: list[int],
                 num_classes: int = 1000, stem: str = "imagenet",
                 widths: tuple[int, ...] = (64, 128, 256, 512), groups: int = 1,
                 width_per_group: int = 64, stem_width: int | None = None):
        super().__init__()
        if len(widths) != len(layers):
            raise ConfigError(f"ResNet: {len(layers)} stages but {len(widths)} widths")
        if stem not in ("imagenet", "cifar"):
            raise ConfigError(f"ResNet: unknown stem {stem!r} (imagenet or cifar)")
        self.inplanes = stem_width or widths[0]
        self.groups = groups
        self.base_width = width_per_group
        self.stem = stem
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3,
                                   bias=False)
        else:
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=3, stride=1, padding=1,
                                   bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = (nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
                        if stem == "imagenet" else None)
        self.num_stages = len(layers)
        for i, (planes, blocks) in enumerate(zip(widths, layers)):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", self._make_layer(block, planes, blocks, stride))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[-1] * block.expansion, num_classes)
        _init_weights(self)

    def _make_layer(self, block, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups,
                                base_width=self.base_width))
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            x = self.maxpool(x)
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


IMAGENET_CONFIGS: dict[str, tuple[type, list[int]]] = {
    "resnet18": (BasicBlock, [2, 2, 2, 2]),
    "resnet34": (BasicBlock, [3, 4, 6, 3]),
    "resnet50": (Bottleneck, [3, 4, 6, 3]),
    "resnet101": (Bottleneck, [3, 4, 23, 3]),
    "resnet152": (Bottleneck, [3, 8, 36, 3]),
}


def resnet(name: str, num_classes: int = 1000, stem: str = "imagenet") -> ResNet:
    """One of resnet18/34/50/101/152 with the given stem (ImageNet widths either way)."""
    try:
        block, layers = IMAGENET_CONFIGS[name]
    except KeyError:
        raise ConfigError(f"unknown ResNet {name!r}; known: {', '.join(IMAGENET_CONFIGS)}") from None
    return ResNet(block, layers, num_classes=num_classes, stem=stem)


def resnet_cifar(depth: int, num_classes: int = 10, block: str | None = None) -> ResNet:
    """The CIFAR ResNet of He et al. (2015): a 3x3 conv (16 channels), three stages of ``n``
    blocks at 16/32/64 planes (32x32 -> 16x16 -> 8x8), global average pool and fc.

    ``block="basic"``: depth = 6n + 2 (20, 32, 44, 56, 110, 1202).
    ``block="bottleneck"``: depth = 9n + 2 (164, 1001), stage outputs 64/128/256 channels.
    ``block=None`` picks bottleneck for the published bottleneck depths 164 and 1001, else basic
    when ``depth - 2`` is a multiple of 6, else bottleneck when it is a multiple of 9. Shortcuts that change shape are 1x1 conv + BN (option B), so every layer is
    one pimrt supports; ResNet-110 has 1.7 M parameters and ResNet-1202 19.4 M.
    """
    if not isinstance(depth, int) or depth < 8:
        raise ConfigError(f"resnet_cifar: depth must be an integer >= 8, got {depth!r}")
    if block is None:
        block = ("bottleneck" if depth in (164, 1001) or (depth - 2) % 6 else "basic")
    if block == "basic":
        if (depth - 2) % 6:
            raise ConfigError(f"resnet_cifar: a basic-block depth is 6n+2 (20, 32, 44, 56, 110, "
                              f"1202), got {depth}")
        n, cls = (depth - 2) // 6, BasicBlock
    elif block == "bottleneck":
        if (depth - 2) % 9:
            raise ConfigError(f"resnet_cifar: a bottleneck depth is 9n+2 (164, 1001), got {depth}")
        n, cls = (depth - 2) // 9, Bottleneck
    else:
        raise ConfigError(f"resnet_cifar: block must be 'basic' or 'bottleneck', got {block!r}")
    model = ResNet(cls, [n, n, n], num_classes=num_classes, stem="cifar", widths=(16, 32, 64))
    model.depth = depth
    return model


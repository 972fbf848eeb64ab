"""VGG-16 with batch norm (torchvision's ``vgg16_bn``) and its CIFAR variant.

* ``classifier="imagenet"``: features, AdaptiveAvgPool2d(7x7), flatten, Linear(25088, 4096),
  ReLU, Dropout, Linear(4096, 4096), ReLU, Dropout, Linear(4096, classes): 138,365,992
  parameters for 1000 classes, exactly torchvision.
* ``classifier="cifar"``: the same 13 conv + BN + ReLU features; five 2x2 max-pools take a
  32x32 input to 1x1x512; flatten and one Linear(512 * s * s, classes) (s = input_size / 32).
"""
from __future__ import annotations

import torch
from torch import nn

from pimrt.errors import ConfigError

CFG_D = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
         512, 512, 512, "M"]


def make_features(cfg: list, batch_norm: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = []
    in_channels = 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers.append(nn.Conv2d(in_channels, v, kernel_size=3, padding=1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(v))
            layers.append(nn.ReLU(inplace=True))
            in_channels = v
    return nn.Sequential(*layers)


class VGG(nn.Module):
    def __init__(self, cfg: list = CFG_D, num_classes: int = 1000, classifier: str = "imagenet",
                 input_size: int = 224, dropout: float = 0.5):
        super().__init__()
        self.features = make_features(cfg)
        if classifier == "imagenet":
            self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
            self.classifier = nn.Sequential(
                nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(p=dropout),
                nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(p=dropout),
                nn.Linear(4096, num_classes),
            )
        elif classifier == "cifar":
            if input_size % 32:
                raise ConfigError(f"VGG (cifar): input_size must be a multiple of 32, "
                                  f"got {input_size}")
            s = input_size // 32
            self.avgpool = None
            self.classifier = nn.Sequential(nn.Linear(512 * s * s, num_classes))
        else:
            raise ConfigError(f"VGG: unknown classifier {classifier!r} (imagenet or cifar)")
        # (meta-device builds have no values to initialise: skip, it would only cost time)
        for m in ([] if next(self.parameters()).is_meta else self.modules()):
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        if self.avgpool is not None:
            x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def vgg16_bn(num_classes: int = 1000, classifier: str = "imagenet",
             input_size: int = 224) -> VGG:
    return VGG(CFG_D, num_classes=num_classes, classifier=classifier, input_size=input_size)

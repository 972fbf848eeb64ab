import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()

    def forward(self, x):
        return self.flat(self.pool(x))

"""Datasets that need no download: scikit-learn's digits, and synthetic tensors for throughput."""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import TensorDataset

from pimrt.gradsa.errors import GradSAError

DATASETS = ("digits", "synthetic")


def digits(image_size: int = 32, channels: int = 3, seed: int = 0, test_fraction: float = 0.2):
    """sklearn's 1,797 8x8 digits, bilinearly scaled to image_size, `channels` copies,
    normalised with the train split's mean/std; a fixed, seeded, stratified split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = torch.from_numpy(d.images.astype(np.float32) / 16.0).unsqueeze(1)
    if image_size != 8:
        x = torch.nn.functional.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x = x.repeat(1, channels, 1, 1)
    y = torch.from_numpy(d.target.astype(np.int64))
    tr, te = train_test_split(np.arange(len(y)), test_size=test_fraction, random_state=seed, stratify=d.target)
    mean, std = x[tr].mean(), x[tr].std()
    x = (x - mean) / std
    return TensorDataset(x[tr], y[tr]), TensorDataset(x[te], y[te])


def synthetic(n: int = 512, image_size: int = 32, channels: int = 3, classes: int = 10, seed: int = 0):
    """Random images with random labels (throughput only: accuracy is meaningless)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, channels, image_size, image_size, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    cut = max(1, n // 8)
    return TensorDataset(x[cut:], y[cut:]), TensorDataset(x[:cut], y[:cut])


def load(name: str, image_size: int, channels: int, seed: int, synthetic_size: int = 512):
    if name == "digits":
        return digits(image_size, channels, seed)
    if name == "synthetic":
        return synthetic(synthetic_size, image_size, channels, 10, seed)
    raise GradSAError(f"unknown dataset {name!r}; valid: {', '.join(DATASETS)}")

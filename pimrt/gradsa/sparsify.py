"""Which elements of a layer to send: a sampled top-k threshold and the sparsity warm-up.

`select(v, k)` estimates the magnitude threshold of the k largest |v| from a random sample
(top-k on the sample, as DGC does), keeps the elements above it and, when the estimate let
through more than k, trims them to exactly k with an exact top-k over the (small) candidate
set. Layers smaller than the sample size use an exact top-k directly. Zeros are never sent.
"""
from __future__ import annotations

import math

import torch

from pimrt.gradsa.errors import GradSAError


def density_at(step: int, density: float, warmup_steps: int = 0, start_density: float = 0.25) -> float:
    """Density for `step` (0-based): exponential decay from start_density to density over
    warmup_steps steps, then constant. With warmup_steps=0 the final density is used at once."""
    if not 0.0 < density <= 1.0:
        raise GradSAError(f"density must be in (0, 1], got {density}")
    if warmup_steps <= 0 or step >= warmup_steps or start_density <= density:
        return density
    frac = step / warmup_steps
    return float(start_density * (density / start_density) ** frac)


def k_for(numel: int, density: float) -> int:
    """Elements to keep in a layer of `numel` at `density`: at least one."""
    return max(1, min(numel, math.ceil(density * numel)))


def sample_threshold(mag: torch.Tensor, k: int, sample_size: int, generator: torch.Generator | None = None) -> float:
    """Estimated k-th largest value of the 1-D non-negative tensor `mag`, from a uniform sample."""
    n = mag.numel()
    if n <= sample_size:
        return float(torch.topk(mag, min(k, n), sorted=False).values.min())
    idx = torch.randint(0, n, (sample_size,), generator=generator, device="cpu").to(mag.device)
    sample = mag[idx]
    ks = max(1, math.ceil(k * sample_size / n))
    return float(torch.topk(sample, ks, sorted=False).values.min())


def select(v: torch.Tensor, k: int, sample_size: int = 4096,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Sorted int64 indices (at most k) of large-magnitude nonzero elements of the flat tensor v."""
    if v.dim() != 1:
        raise GradSAError("select expects a flattened tensor")
    n = v.numel()
    if n == 0 or k <= 0:
        return torch.zeros(0, dtype=torch.long, device=v.device)
    mag = v.abs()
    if n <= sample_size or k >= n // 4:
        top = torch.topk(mag, min(k, n), sorted=False)
        idx = top.indices[top.values > 0]
        return torch.sort(idx).values
    thr = sample_threshold(mag, k, sample_size, generator)
    mask = mag >= thr if thr > 0 else mag > 0
    idx = torch.nonzero(mask, as_tuple=False).reshape(-1)
    if idx.numel() > k:
        sub = torch.topk(mag[idx], k, sorted=False).indices
        idx = torch.sort(idx[sub]).values
    return idx

"""A GPU kernel's request lines as gpu_blocks orders them, made a slice at a time.

A memory-bound kernel walks every region it reads and writes at once, its lines interleaved
as its grid goes: region k's j-th line at position j / n_k (np.linspace(0, 1, n_k,
endpoint=False)), the regions' lines in a stable sort of those positions (ties in region
order). Sorting them all at once holds the kernel's every line several times over (a batch
norm's pass over a 224x224 feature map: millions of lines, about 150 MB); interleave_blocks
reads them in consecutive slices, so InterleavedLines makes each slice when it is read: the
next m lines are the m smallest positions left, all below a threshold every line left above it
reaches, sorted as the whole would be.
"""
from __future__ import annotations

import math

import numpy as np


class InterleavedLines:
    """regions: (base address, line count, op) each, lines `line` bytes apart. len() and
    consecutive slices [a0:a1) of .addr and .op (np.uint64, np.uint8), as interleave_blocks
    takes them."""

    def __init__(self, regions, line: int = 64):
        self.regions = [(int(base), int(n), int(op)) for base, n, op in regions]
        self.line = line
        self.n = sum(n for _, n, _ in self.regions)
        self._taken = [0] * len(self.regions)   # each region's lines already sliced off
        self._at = 0
        self._last = None                       # (a0, a1, addr, op) of the last slice

    @property
    def addr(self) -> "_Field":
        return _Field(self, 0)    # (made when asked for: no reference cycle to outlive it)

    @property
    def op(self) -> "_Field":
        return _Field(self, 1)

    def __len__(self) -> int:
        return self.n

    def slice(self, a0: int, a1: int) -> tuple[np.ndarray, np.ndarray]:
        a1 = min(a1, self.n)
        if self._last is not None and self._last[:2] == (a0, a1):
            return self._last[2:]
        if a0 != self._at:
            raise ValueError(f"lines {a0}:{a1} asked for after {self._at} (read them in order)")
        m = max(0, a1 - a0)
        keys, addr, op = [], [], []
        threshold = (a1 + 1) / max(self.n, 1)
        while True:       # (a few lines of margin a region; widened in the rare case it is short)
            ends = [_below(n, threshold) for _, n, _ in self.regions]
            if sum(e - t for e, t in zip(ends, self._taken)) >= m or threshold > 1:
                break
            threshold += 1 / max(self.n, 1)
        for (base, n, o), t, e in zip(self.regions, self._taken, ends):
            j = np.arange(t, e, dtype=np.int64)
            keys.append(j.astype(np.float64) * (1.0 / n))   # = np.linspace's j-th
            addr.append(np.uint64(base) + j.astype(np.uint64) * np.uint64(self.line))
            op.append(np.full(len(j), o, np.uint8))
        order = np.argsort(np.concatenate(keys), kind="stable")[:m]
        src = np.repeat(np.arange(len(self.regions)), [len(k) for k in keys])[order]
        for k, taken in enumerate(np.bincount(src, minlength=len(self.regions)).tolist()):
            self._taken[k] += taken
        out = (np.concatenate(addr)[order], np.concatenate(op)[order])
        self._at = a0 + m
        self._last = (a0, a0 + m, *out)
        return out


def _below(n: int, threshold: float) -> int:
    """How many of j * (1 / n), j = 0..n-1, lie below threshold (computed as np.linspace
    computes them)."""
    step = 1.0 / n
    j = min(n, max(0, math.ceil(threshold / step)))
    while j > 0 and (j - 1) * step >= threshold:
        j -= 1
    while j < n and j * step < threshold:
        j += 1
    return j


class _Field:
    """.addr or .op of an InterleavedLines: its length, and its slices."""

    def __init__(self, lines: InterleavedLines, which: int):
        self.lines, self.which = lines, which

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, s: slice) -> np.ndarray:
        return self.lines.slice(s.start or 0, s.stop)[self.which]

"""Host staging pool for offloaded feature maps: one preallocated buffer (pinned on CUDA)
carved into reference-counted blocks by a first-fit free list with coalescing.

Offloads during forward allocate blocks in order (a bump pointer in practice); backward
frees them in roughly reverse order, and freed neighbours coalesce, so a pool sized to the
plan's host peak never fragments within a step. With no capacity given the pool grows by
chunks (sized by the first step); with ``max_bytes`` it refuses to grow past it.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch

from pimrt.memory_meter import host_buffer

from pimrt.layrub.errors import LayrubBudgetError, fmt_bytes

ALIGN = 512    # bytes: DMA-friendly alignment of every block


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class Block:
    chunk: int
    offset: int
    size: int
    refs: int = 1


class _Chunk:
    def __init__(self, nbytes: int, pinned: bool):
        self.buf = host_buffer(lambda: torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned))
        if not pinned:
            self.buf.zero_()            # touch the pages now: the pool is resident up front
        self.size = nbytes
        self.free_starts: list[int] = [0]      # sorted offsets of free ranges
        self.free_len: dict[int, int] = {0: nbytes}

    def alloc(self, n: int) -> int | None:
        for off in self.free_starts:
            ln = self.free_len[off]
            if ln >= n:
                i = bisect.bisect_left(self.free_starts, off)
                del self.free_starts[i]
                del self.free_len[off]
                if ln > n:
                    bisect.insort(self.free_starts, off + n)
                    self.free_len[off + n] = ln - n
                return off
        return None

    def free(self, off: int, n: int) -> None:
        i = bisect.bisect_left(self.free_starts, off)
        # merge with the next free range
        if i < len(self.free_starts) and self.free_starts[i] == off + n:
            nxt = self.free_starts.pop(i)
            n += self.free_len.pop(nxt)
        # merge with the previous free range
        if i > 0:
            prev = self.free_starts[i - 1]
            if prev + self.free_len[prev] == off:
                self.free_len[prev] += n
                return
        self.free_starts.insert(i, off)
        self.free_len[off] = n


class HostPool:
    """Blocks of host memory for offloaded tensors.

    ``capacity``: bytes preallocated now (None: nothing yet, grow on demand by chunks of at
    least ``grow_bytes``). ``max_bytes``: hard limit on the total (None: no limit).
    ``pinned``: page-locked memory (CUDA only) so that copies run asynchronously.
    """

    def __init__(self, capacity: int | None = None, max_bytes: int | None = None,
                 pinned: bool = False, grow_bytes: int = 64 * 2**20):
        self.pinned = pinned
        self.max_bytes = max_bytes
        self.grow_bytes = grow_bytes
        self.chunks: list[_Chunk] = []
        self.in_use = 0
        self.peak_in_use = 0
        self.allocs = 0
        if capacity:
            if max_bytes is not None and capacity > max_bytes:
                raise LayrubBudgetError(
                    f"host pool of {fmt_bytes(capacity)} ({capacity:,} B) asked for, but the "
                    f"host budget is {fmt_bytes(max_bytes)} ({max_bytes:,} B)",
                    needed=capacity, budget=max_bytes)
            self.chunks.append(_Chunk(align(capacity), pinned))

    @property
    def capacity(self) -> int:
        return sum(c.size for c in self.chunks)

    def alloc(self, nbytes: int) -> Block:
        n = align(max(1, nbytes))
        for ci, c in enumerate(self.chunks):
            off = c.alloc(n)
            if off is not None:
                return self._took(Block(ci, off, n))
        grow = max(n, self.grow_bytes)
        if self.max_bytes is not None and self.capacity + grow > self.max_bytes:
            grow = self.max_bytes - self.capacity
            if grow < n:
                raise LayrubBudgetError(
                    f"host memory budget exhausted: {fmt_bytes(self.in_use)} of offloaded feature "
                    f"maps held and {fmt_bytes(n)} more needed, budget "
                    f"{fmt_bytes(self.max_bytes)} ({self.max_bytes:,} B); at least "
                    f"{self.in_use + n:,} B are needed", needed=self.in_use + n,
                    budget=self.max_bytes)
        self.chunks.append(_Chunk(grow, self.pinned))
        ci = len(self.chunks) - 1
        off = self.chunks[ci].alloc(n)
        return self._took(Block(ci, off, n))

    def _took(self, b: Block) -> Block:
        self.in_use += b.size
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        self.allocs += 1
        return b

    def free(self, b: Block) -> None:
        self.chunks[b.chunk].free(b.offset, b.size)
        self.in_use -= b.size

    def view(self, b: Block, nbytes: int) -> torch.Tensor:
        return self.chunks[b.chunk].buf[b.offset: b.offset + nbytes]

    def reset_peak(self) -> None:
        self.peak_in_use = self.in_use

"""Measured cost of each PIM kernel, for the timing model.

pimrt/pim/kernel_cycles.json is written by `pimrt bench pim --update-cycles` from runs of the
RTL (batch driver); the golden model gives the same cycle counts (tests check it). Per
kernel it holds cycles_per_element (unit clock cycles, one instruction each, at the bench's
buffer size, loop overhead and padding included) and column_accesses_per_element (bank
column reads + writes; 1/8 per stream per element is the floor with 8 fp32 lanes).
Elements: stream kernels count the elements of one stream; pooling forward counts output
elements, pooling backward input-gradient elements.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

from pimrt.pim.errors import PimError

DATA = Path(__file__).with_name("kernel_cycles.json")


@functools.lru_cache(maxsize=1)
def table() -> dict:
    try:
        return json.loads(DATA.read_text())
    except FileNotFoundError:
        raise PimError(f"{DATA} is missing; run `pimrt bench pim --update-cycles`") from None


def _entry(kernel: str) -> dict:
    kernels = table()["kernels"]
    if kernel not in kernels:
        raise PimError(f"no cycle figures for PIM kernel {kernel!r}; known: {', '.join(sorted(kernels))}")
    return kernels[kernel]


def cycles_per_element(kernel: str) -> float:
    """Unit clock cycles per element of `kernel` (see the module doc for 'element')."""
    return float(_entry(kernel)["cycles_per_element"])


def column_accesses_per_element(kernel: str) -> float:
    """Bank column accesses (reads + writes) per element of `kernel`."""
    return float(_entry(kernel)["column_accesses_per_element"])


def kernels() -> list[str]:
    return sorted(table()["kernels"])

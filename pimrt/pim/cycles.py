"""Measured cost of each PIM kernel, for the timing model, at each lane count measured.

pimrt/pim/kernel_cycles.json is written by `pimrt bench pim --update-cycles` from runs of the
RTL (batch driver) at 8 and 16 lanes; the golden model and pimrt.pim.access.bank_cycles give
the same cycle counts (tests check it). Per kernel and lane count it holds
cycles_per_element (unit clock cycles, one instruction each, at the bench's buffer size, loop
overhead and padding included), column_accesses_per_element (the unit's bank column reads +
writes, a column being 4*lanes bytes) and dram_columns_per_element (64-byte DRAM column
accesses, pimrt.pim.access.bank_accesses). Elements: stream kernels count the elements of
one stream, channel kernels the values of all channels, pooling forward output elements,
pooling backward input-gradient elements. For exact per-task figures use pimrt.pim.access.

Old kernel names (the per-channel batch norm kernels bn_stats, bn_apply, bn_bwd_stats,
bn_bwd_apply) are aliases of the channel kernels that replaced them.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

from pimrt.pim import isa
from pimrt.pim.errors import PimError

DATA = Path(__file__).with_name("kernel_cycles.json")
ALIASES = {"bn_stats": "bn_stats_ch", "bn_apply": "bn_apply_ch",
           "bn_bwd_stats": "bn_bwd_stats_ch", "bn_bwd_apply": "bn_bwd_apply_ch"}


@functools.lru_cache(maxsize=1)
def table() -> dict:
    try:
        return json.loads(DATA.read_text())
    except FileNotFoundError:
        raise PimError(f"{DATA} is missing; run `pimrt bench pim --update-cycles`") from None


def _entry(kernel: str, lanes: int) -> dict:
    kernels = table()["kernels"]
    name = ALIASES.get(kernel, kernel)
    if name not in kernels:
        raise PimError(f"no cycle figures for PIM kernel {kernel!r}; known: {', '.join(sorted(kernels))}")
    per_lanes = kernels[name]
    if str(lanes) not in per_lanes:
        raise PimError(f"no cycle figures for PIM kernel {kernel!r} at {lanes} lanes; measured: "
                       f"{', '.join(sorted(per_lanes, key=int))} (pimrt bench pim --update-cycles)")
    return per_lanes[str(lanes)]


def cycles_per_element(kernel: str, lanes: int = isa.LANES) -> float:
    """Unit clock cycles per element of `kernel` (see the module doc for 'element')."""
    return float(_entry(kernel, lanes)["cycles_per_element"])


def column_accesses_per_element(kernel: str, lanes: int = isa.LANES) -> float:
    """The unit's bank column accesses (reads + writes) per element of `kernel`."""
    return float(_entry(kernel, lanes)["column_accesses_per_element"])


def dram_columns_per_element(kernel: str, lanes: int = isa.LANES) -> float:
    """64-byte DRAM column accesses per element of `kernel`."""
    return float(_entry(kernel, lanes)["dram_columns_per_element"])


def lanes() -> list[int]:
    return sorted(int(n) for n in table()["lanes"])


def kernels() -> list[str]:
    return sorted(table()["kernels"])

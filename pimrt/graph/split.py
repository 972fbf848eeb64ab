"""Checks that a batch size and an output-channel group count fit a captured graph, so a
bad configuration fails before any long work starts."""
from __future__ import annotations

import math
from functools import reduce

from pimrt.graph.errors import SplitError
from pimrt.graph.layer import LayerGraph


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def valid_group_counts(graph: LayerGraph) -> list[int]:
    """Group counts that divide every conv's out_channels (divisors of their gcd)."""
    convs = graph.layers_of_kind("conv")
    if not convs:
        return [1]
    return divisors(reduce(math.gcd, (c.attrs["out_channels"] for c in convs)))


def validate_split(graph: LayerGraph, batch: int, groups: int,
                   micro_batches: int = 1) -> dict[str, int]:
    """Check that the scheduler can run ``graph`` at ``batch`` with every conv's output
    channels split into ``groups`` equal pipeline groups.

    Raises :class:`SplitError` (a ``pimrt.errors.ConfigError``) when ``batch`` or ``groups`` is
    not a positive integer, when ``micro_batches`` (batch pipelining, default 1) does not
    divide ``batch``, or naming the first conv (in graph order) whose out_channels
    ``groups`` does not divide, with the group counts that fit every conv. Linear layers are
    not split (the classifier's class count rarely divides), so they are not checked.
    Returns conv layer name -> output channels per group.
    """
    for label, v in (("batch", batch), ("groups", groups), ("micro_batches", micro_batches)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise SplitError(f"{label} must be a positive integer, got {v!r}")
        if v < 1:
            raise SplitError(f"{label} must be >= 1, got {v}")
    if batch % micro_batches:
        raise SplitError(f"{micro_batches} micro-batches do not divide batch {batch}; "
                         f"micro-batch counts that do: {', '.join(map(str, divisors(batch)))}")
    per_group: dict[str, int] = {}
    for conv in graph.layers_of_kind("conv"):
        c = conv.attrs["out_channels"]
        if c % groups:
            valid = valid_group_counts(graph)
            raise SplitError(
                f"{groups} output-channel groups do not divide conv layer '{conv.name}' "
                f"(module '{conv.module_path}', {c} output channels) of "
                f"{graph.model_name or 'the model'}; group counts that divide every conv: "
                f"{', '.join(map(str, valid))}")
        per_group[conv.name] = c // groups
    return per_group

"""A GPU kernel's interleaved lines made a slice at a time (pimrt.runtime.lines) are those of
the whole sort gpu_blocks made before (issue 38, memory), in any slices read in order."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pimrt.runtime.lines import InterleavedLines


def _whole(regions):
    addrs = [np.uint64(b) + np.arange(n, dtype=np.uint64) * np.uint64(64) for b, n, _ in regions]
    ops = [np.full(n, o, np.uint8) for _, n, o in regions]
    order = np.argsort(np.concatenate([np.linspace(0, 1, n, endpoint=False)
                                       for _, n, _ in regions]), kind="stable")
    return np.concatenate(addrs)[order], np.concatenate(ops)[order]


REGION = st.tuples(st.integers(0, 2**30).map(lambda a: 64 * a),
                   st.one_of(st.integers(1, 50), st.sampled_from([64, 96, 1000, 4096, 12345])),
                   st.integers(0, 1))


@settings(max_examples=200, deadline=None)
@given(regions=st.lists(REGION, min_size=1, max_size=6), step=st.integers(1, 3000))
def test_slices_are_the_whole_sort(regions, step):
    addr, op = _whole(regions)
    lines = InterleavedLines(regions)
    assert len(lines.addr) == len(addr)
    got_a, got_o = [], []
    for a0 in range(0, len(addr), step):
        got_a.append(lines.addr[a0:a0 + step])
        got_o.append(lines.op[a0:a0 + step])       # (the same slice again: kept)
    assert np.array_equal(np.concatenate(got_a), addr)
    assert np.array_equal(np.concatenate(got_o), op)


def test_slices_must_be_read_in_order():
    lines = InterleavedLines([(0, 100, 0), (64000, 50, 1)])
    lines.addr[0:10]
    with pytest.raises(ValueError, match="in order"):
        lines.addr[20:30]

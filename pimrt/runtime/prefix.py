"""The simulated prefix the plan's two timings of a side's tasks alone share, simulated once.

The weight-gradient plan (pimrt.runtime.plan) times each side's tasks alone on the unplanned
schedule, moves some dWs, then times them alone again on the planned schedule
(pimrt.runtime.timing._plan). The two streams are the same up to the first task the move
changed (the forward pass and the start of backward), and so is memctl's simulation of them
up to there. The first timing keeps copies of its controller (Controller.clone) at a few task
boundaries from the first backward task on; the second starts from the copy at the latest
boundary before its tasks differ from the first's, and feeds only the rest. The same records
from the same state give the same cycles (tests/test_prefix.py checks them against timing
the whole stream again).

A task's records follow from the task (its fields, dependencies and place in the stream: its
repr) and the run's context, which both timings share (the store lives for one plan); so
the tasks' reprs tell where the streams part.
"""
from __future__ import annotations

import hashlib

from pimrt.runtime.sides import chunks

# copies kept per side: at the first backward task and evenly after it, about 1.1 MiB each on
# the default part (ResNet-50 batch 32 224x224, the plan's timings alone: none 97.7 s of CPU,
# 4 copies 81.9 s, 8 copies 81.5 s; docs/runtime-measurements.md)
KEEP = 4


class Prefixes:
    """The copies one plan's first timing keeps, per side, for its second."""

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self._kept: dict[str, list] = {}   # side -> [(boundary, digest, records, controller)]
        self.reused: dict[str, int] = {}   # side -> the boundary its last timing started at

    def boundaries(self, tasks: list) -> list[int]:
        """Where a timing of these tasks keeps copies: before the first task that is not of
        the forward pass (a plan moves none of those) and at `keep` - 1 more evenly after."""
        n = len(tasks)
        first = next((i for i, t in enumerate(tasks) if t.phase != "fwd"), n)
        if first >= n or self.keep <= 0:
            return []
        return sorted({first + (n - first) * j // self.keep for j in range(self.keep)})

    def run(self, side: str, ctl, tasks: list, pieces, progress=None):
        """Feed the tasks' stream (pieces: their TaskPieces) to a fresh controller `ctl` and
        finish it. The side's first timing keeps copies at its boundaries; the next starts
        from the latest copy whose tasks are its own, and the copies go. -> (the finished
        controller, the stream's records)."""
        had = self._kept.pop(side, [])
        marks = [] if had else self.boundaries(tasks)
        digests = _digests(tasks, set(marks) | {entry[0] for entry in had})
        start, total, kept = 0, 0, []
        match = next((entry for entry in reversed(had) if digests.get(entry[0]) == entry[1]),
                     None)
        del had                                    # (the other copies go now)
        if match is not None:
            start, _, total, ctl = match
            if progress:
                progress(total)
        self.reused[side] = start
        for a, b in _segments(start, marks, len(tasks)):
            for recs in chunks(pieces.stream(tasks[a:b])):
                ctl.feed(recs)
                total += len(recs)
                if progress:
                    progress(len(recs))
            if b < len(tasks):
                kept.append((b, digests[b], total, ctl.clone()))
        if kept:
            self._kept[side] = kept
        ctl.finish()
        return ctl, total


def _segments(start: int, marks: list[int], n: int) -> list[tuple[int, int]]:
    """[a, b) task ranges from `start` to n, cut at the marks after start."""
    cuts = [m for m in marks if m > start] + [n]
    out, a = [], start
    for b in cuts:
        if b > a:
            out.append((a, b))
        a = b
    return out


def _digests(tasks: list, marks: set[int]) -> dict[int, bytes]:
    """The digest of tasks[:k] for each mark k."""
    h, out, want = hashlib.blake2b(digest_size=16), {}, marks
    for i, t in enumerate(tasks):
        if i in want:
            out[i] = h.copy().digest()
        h.update(repr(t).encode())
    return out

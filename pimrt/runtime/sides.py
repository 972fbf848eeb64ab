"""A step's stream fed to memctl by side (Controller.feed_side): the host's records and the
PIM's, each built when that side's cursor needs more. Fed as one stream (task_stream),
memctl holds every record between its lagging cursor and its leading one, and in a pipelined
step the PIM runs millions of the host's records ahead (ResNet-50, batch 32, 32x32: 3.8
million records, 96 MiB; more as the step grows). By side, each side holds only what its own
cursor has not read, and the host's records are built when the host gets to them; the run
is the same (memctl.h, mc_feed_side)."""
from __future__ import annotations

import numpy as np

from pimrt.errors import SimulationError
from pimrt.trace.records import BARRIER, HOST, LAYER, PARAM, PIM, RECORD_DTYPE

SHARED_OPS = np.array([LAYER, PARAM, BARRIER])  # markers both sides' cursors read
SIDE_FEED_RECORDS = 1 << 16     # records a side is fed at a time (1.5 MiB)


def _shared(recs: np.ndarray) -> np.ndarray:
    return np.isin(recs["op"], SHARED_OPS)


def side_stream(pieces, side: int):
    """`side`'s records in the step's order (pieces: a TaskPieces): every task's opening and
    closing records of that side and the markers both sides read, and the work of the side's
    own tasks (built only here)."""
    for t in pieces.schedule.tasks:
        own = (t.side == "host") == (side == HOST)
        recs = pieces.opening(t, keep_work=own)
        yield recs[(recs["requestor"] == side) | _shared(recs)]
        if own:
            for w in pieces.work(t):
                if not (w["requestor"] == side).all():
                    raise SimulationError(f"task {t.id} ({t.layer} {t.phase}): its work holds "
                                          f"records of the other side")
                yield w
        recs = pieces.closing(t)
        yield recs[(recs["requestor"] == side) | _shared(recs)]


def chunks(stream, size: int | None = None):
    """The stream's records in arrays of at most `size` (SIDE_FEED_RECORDS): small ones
    gathered in one buffer, which the next chunk reuses (each is fed before the next is asked
    for), large ones in slices, so memctl's buffer never needs more than `size`."""
    size = size or SIDE_FEED_RECORDS
    buf, n = np.empty(size, RECORD_DTYPE), 0
    for recs in stream:
        if n and n + len(recs) > size:
            yield buf[:n]
            n = 0
        if len(recs) >= size:
            for a in range(0, len(recs), size):
                yield recs[a:a + size]
        else:
            buf[n:n + len(recs)] = recs
            n += len(recs)
    if n:
        yield buf[:n]


def run_by_side(ctl, pieces, progress=None) -> int:
    """Feed the host's and the PIM's streams, a chunk at a time to the side whose cursor has
    read all it was given, and finish the run; returns the number of records of the one
    stream (the markers both sides read counted once)."""
    pieces.count_parameters()
    streams = {side: chunks(side_stream(pieces, side)) for side in (HOST, PIM)}
    total, side = 0, HOST
    while side is not None:
        recs = next(streams[side], None)
        if recs is None:
            ctl.feed_side(side, None, last=True)
        else:
            n = len(recs) if side == HOST else int(np.count_nonzero(~_shared(recs)))
            ctl.feed_side(side, recs)
            total += n
            if progress:
                progress(n)
        hungry = ctl.hungry()
        side = hungry[0] if hungry else None
    ctl.finish()
    return total

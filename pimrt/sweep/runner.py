"""The sweep's loop: the groups with unfinished points go to the executor (as many in flight
as it has slots, so what runs is what is in flight), each point is recorded the moment its
group comes back, and a bar shows the points done, running and failed with the time left.

A local worker process that dies takes the whole pool with it, so every group in flight is
"lost" though only one was to blame: each is submitted once more, alone (nothing else in
flight), so a second loss is its own and it is recorded as failed. Dask retries a task whose
worker died itself (its scheduler's allowed-failures) and reports it lost for good."""
from __future__ import annotations

import collections
import dataclasses
import sys
import time


@dataclasses.dataclass
class Outcome:
    total: int
    skipped: int          # finished before this run
    done: int
    failed: list          # (point, error)
    interrupted: bool = False


def pending_groups(spec, store, retry_failed: bool) -> list[list]:
    """Each group's points that still have to run (a finished point is skipped; a failed one
    only with retry_failed)."""
    out = []
    for points in spec.groups().values():
        left = [p for p in points if not store.done(p)
                and (retry_failed or not store.failed(p))]
        if left:
            out.append(left)
    return out


def run(spec, store, ex, quiet: bool = False, retry_failed: bool = False) -> Outcome:
    from tqdm import tqdm
    groups = pending_groups(spec, store, retry_failed)
    todo = sum(len(g) for g in groups)
    result = Outcome(len(spec.points), len(spec.points) - todo, 0, [])
    queue = collections.deque((g, 0) for g in groups)        # (points, times lost)
    inflight: dict = {}
    bar = tqdm(total=todo, unit="point", desc="sweep", file=sys.stderr,
               disable=quiet or None, dynamic_ncols=True, smoothing=0.1)

    def show(finished: int = 0):
        running = sum(len(g) for g, _ in inflight.values())
        bar.set_postfix_str(f"done {result.done}, running {running}, failed "
                            f"{len(result.failed)}", refresh=not finished)
        if finished:
            bar.update(finished)

    def fail(points, why: str):
        for p in points:
            store.record(p, {"ok": False, "error": why, "detail": why})
            result.failed.append((p, why))
        show(len(points))

    try:
        show()
        while queue or inflight:
            while queue and len(inflight) < ex.slots():
                if ex.retries_lost and (queue[0][1] and inflight or any(
                        lost for _, lost in inflight.values())):
                    break          # a lost group runs again alone: a second loss is its own
                points, lost = queue.popleft()
                h = ex.submit([{"id": p.id, "options": p.options} for p in points])
                inflight[h] = (points, lost)
            show()
            for h in ex.wait(list(inflight), 1.0):
                points, lost = inflight.pop(h)
                kind, payload = ex.outcome(h)
                if kind == "ok":
                    by_id = {p.id: p for p in points}
                    for r in payload:
                        p = by_id[r["id"]]
                        store.record(p, r)
                        if r["ok"]:
                            result.done += 1
                        else:
                            result.failed.append((p, r["error"]))
                        show(1)
                elif kind == "lost" and ex.retries_lost and lost == 0:
                    queue.appendleft((points, 1))           # once more, in a new process
                elif kind == "lost":
                    fail(points, f"worker lost twice: {payload}" if ex.retries_lost
                         else f"worker lost: {payload}")
                else:
                    fail(points, payload)
    except KeyboardInterrupt:
        result.interrupted = True
        ex.close(cancel=True)
    else:
        ex.close()
    finally:
        bar.close()
    return result


def report(result: Outcome, store, started: float) -> str:
    lines = []
    if result.skipped:
        failed = sum(store.failed(p) for p in store.spec.points) - len(result.failed)
        lines.append(f"{result.skipped} of {_n(result.total)} were finished before: skipped"
                     + (f" ({failed} of them failed: --retry-failed runs "
                        f"{'it' if failed == 1 else 'them'} again)" if failed else ""))
    verb = "interrupted" if result.interrupted else "ran"
    lines.append(f"{verb}: {_n(result.done)} done, {len(result.failed)} failed, in "
                 f"{time.perf_counter() - started:.1f} s")
    if result.interrupted:
        lines.append("the finished points are kept: run the same command again to go on")
    for p, why in result.failed[:10]:
        lines.append(f"  failed: point {p.index + 1} ({p.id}): {why}")
    if len(result.failed) > 10:
        lines.append(f"  ... and {len(result.failed) - 10} more (results.csv, "
                     f"points/ID/error.json)")
    lines.append(f"results: {store.root / 'results.csv'}"
                 + (", results.parquet" if (store.root / "results.parquet").exists() else "")
                 + f"; each point's folder in {store.root / 'points'}")
    return "\n".join(lines)


def _n(count: int) -> str:
    return f"{count} point{'' if count == 1 else 's'}"

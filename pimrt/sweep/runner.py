"""The sweep's loop over its tasks (pimrt/sweep/tasks.py): a task goes to the executor once the
tasks it needs are done (as many in flight as the executor has slots; points that are ready go
before new baselines, so finished points come early), each point is recorded the moment it
comes back, and a bar shows the points done, running and failed with the time left.

A baseline that fails fails every point that needs it, with an error naming the baseline
(a re-run with --retry-failed runs it again); the baselines that only those points needed are
not run. A local worker process that dies takes the whole pool with it, so every task in
flight is "lost" though only one was to blame: each is submitted once more, alone (nothing
else in flight), so a second loss is its own and it is recorded as failed. Dask retries a task
whose worker died itself (its scheduler's allowed-failures) and reports it lost for good."""
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
    tasks: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    traces: collections.Counter = dataclasses.field(default_factory=collections.Counter)


def pending_points(spec, store, retry_failed: bool) -> list:
    """The points that still have to run (a finished point is skipped; a failed one only with
    retry_failed)."""
    return [p for p in spec.points
            if not store.done(p) and (retry_failed or not store.failed(p))]


def run(spec, store, ex, quiet: bool = False, retry_failed: bool = False,
        code: str | None = None) -> Outcome:
    """code: the client's simulator fingerprint; a task that comes back from other code is
    refused (a cluster's worker with another pimrt)."""
    from tqdm import tqdm
    from pimrt.sweep.tasks import plan
    points = pending_points(spec, store, retry_failed)
    tasks = plan(points)
    result = Outcome(len(spec.points), len(spec.points) - len(points), 0, [])
    waiting = {k: set(t.needs) for k, t in tasks.items()}
    users = collections.Counter(n for t in tasks.values() for n in t.needs)
    needed_by = collections.defaultdict(list)
    for k, t in tasks.items():
        for n in t.needs:
            needed_by[n].append(k)
    finished: dict = {}                                  # baseline key -> handle (ok)
    ready = collections.deque(k for k, w in waiting.items() if not w)   # baselines, in order
    ready_points: collections.deque = collections.deque()
    retry: collections.deque = collections.deque()       # lost once: run again alone
    inflight: dict = {}                                  # handle -> (key, times lost)
    bar = tqdm(total=len(points), unit="point", desc="sweep", file=sys.stderr,
               disable=quiet or None, dynamic_ncols=True, smoothing=0.1)

    def show(finished_points: int = 0):
        running = [tasks[k].kind for k, _ in inflight.values()]
        base = sum(kind != "point" for kind in running)
        bar.set_postfix_str(f"done {result.done}, running {len(running) - base}"
                            f"{f' (+{base} baselines)' if base else ''}, failed "
                            f"{len(result.failed)}", refresh=not finished_points)
        if finished_points:
            bar.update(finished_points)

    def drop(key: str):
        """A task no point needs any more: its result is let go."""
        for n in tasks[key].needs:
            users[n] -= 1
            if users[n] == 0 and n in finished:
                ex.release(finished.pop(n))

    def record(key: str, r: dict):
        t = tasks[key]
        store.log_task(t, r)
        if t.kind == "point":
            if r["ok"]:
                why = store.receive_traces(t.point, r["value"], getattr(ex, "fetch", None))
                if why is not None:
                    r = {"ok": False, "error": why, "detail": why, "worker": r.get("worker")}
                else:
                    result.traces.update("sent" if tr.get("sent") else "in place"
                                         for tr in r["value"].get("traces", ()))
            store.record(t.point, {**r, **r["value"]} if r["ok"] else r)
            if r["ok"]:
                result.done += 1
            else:
                result.failed.append((t.point, r["error"]))
            drop(key)
            show(1)
            return
        if r["ok"]:
            if users[key] == 0:                  # its points failed through another baseline
                ex.release(r["handle"])
                return
            finished[key] = r.pop("handle")
            for k in needed_by[key]:
                if k in waiting:
                    waiting[k].discard(key)
                    if not waiting[k]:
                        del waiting[k]
                        ready_points.append(k)
            return
        why = f"its {t.words()} failed: {r['error']}"
        for k in needed_by[key]:
            if k in waiting:                     # not failed already through another
                del waiting[k]
                p = tasks[k].point
                store.record(p, {"ok": False, "error": why, "detail": r.get("detail") or why,
                                 "worker": r.get("worker")})
                result.failed.append((p, why))
                drop(k)
                show(1)

    def fail(key: str, why: str):
        record(key, {"ok": False, "error": why, "detail": why})

    def tell_deaths(settle: float = 1.0):
        """A worker that died under this sweep's tasks, in one line (Dask's scheduler reruns
        them itself; the user hears of it here, not only from a failure)."""
        deaths = ex.deaths([*inflight, *finished.values()], settle)
        if not deaths:
            return

        def named(k):
            return tasks[k].words() if tasks[k].kind == "point" else f"the {tasks[k].words()}"
        words = {h: named(k) for h, (k, _) in inflight.items()}
        words.update((h, named(k)) for k, h in finished.items())
        for worker, running, recomputed in deaths:
            again = [words[h] for h, rescheduled in running if rescheduled]
            given_up = [words[h] for h, rescheduled in running if not rescheduled]
            parts = [f"running {_and(again)}, which the scheduler runs again on another "
                     f"worker"] if again else []
            if given_up:
                parts.append(f"running {_and(given_up)}, which Dask gives up on "
                             f"(allowed-failures)")
            if recomputed:
                parts.append(f"holding the result of {_and([words[h] for h in recomputed])}, "
                             f"which the scheduler computes again")
            bar.write(f"sweep: Dask worker {worker} died {'; '.join(parts)}", file=sys.stderr)

    def next_task():
        for queue in (ready_points, ready):
            while queue:
                k = queue.popleft()
                if tasks[k].kind == "point" or users[k] > 0:
                    return k, 0
        return None

    try:
        show()
        while retry or ready or ready_points or inflight:
            while len(inflight) < ex.slots():
                if ex.retries_lost and (retry and inflight or any(
                        lost for _, lost in inflight.values())):
                    break          # a lost task runs again alone: a second loss is its own
                item = retry.popleft() if retry else next_task()
                if item is None:
                    break
                key, lost = item
                t = tasks[key]
                kw = {"dest": store.trace_dest(t.point)} \
                    if t.kind == "point" and t.options.get("save_trace") else {}
                h = ex.submit(t.kind, t.options, {tasks[n].kind: finished[n] for n in t.needs},
                              **kw)
                inflight[h] = (key, lost)
                result.tasks[t.kind] += 1
            show()
            if not inflight:
                continue
            done = ex.wait(list(inflight), 1.0)
            tell_deaths()
            for h in done:
                key, lost = inflight.pop(h)
                kind, payload = ex.outcome(h)
                if kind == "ok":
                    if code is not None and payload.get("code") != code:
                        _drop_traces(payload, ex)
                        fail(key, f"worker {payload.get('worker')} runs other simulator code "
                                  f"(fingerprint {payload.get('code')}; this client's is "
                                  f"{code}): install the same pimrt on every worker")
                    else:
                        record(key, {**payload, "handle": h})
                elif kind == "lost" and ex.retries_lost and lost == 0:
                    retry.appendleft((key, 1))           # once more, in a new process
                elif kind == "lost":
                    fail(key, f"worker lost twice: {payload}" if ex.retries_lost
                         else f"worker lost: {payload}")
                else:
                    fail(key, payload)
    except KeyboardInterrupt:
        result.interrupted = True
        ex.close(cancel=True)
    else:
        tell_deaths(0.0)             # what came in the last second
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
    ran = ", ".join(f"{n} {k}" for k, n in sorted(result.tasks.items()) if k != "point")
    lines.append(f"{verb}: {_n(result.done)} done, {len(result.failed)} failed, in "
                 f"{time.perf_counter() - started:.1f} s"
                 + (f" (baseline tasks run: {ran})" if ran else ""))
    if result.traces:
        from pimrt.sweep.worker import TRACE_CHUNK
        lines.append(f"step traces: {result.traces['in place']} written in place by workers "
                     f"that share the folder, {result.traces['sent']} sent back in chunks of "
                     f"{TRACE_CHUNK >> 20} MiB")
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


def _drop_traces(payload: dict, ex) -> None:
    """A point's step traces the client will not record (its worker runs other code)."""
    value = payload.get("value") if payload.get("ok") else None
    for t in (value or {}).get("traces", ()) if isinstance(value, dict) else ():
        discard = getattr(ex, "discard", None)
        if discard is not None:
            discard(t)


def _and(names: list) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _n(count: int) -> str:
    return f"{count} point{'' if count == 1 else 's'}"

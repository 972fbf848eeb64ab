"""Where a sweep's tasks run (pimrt/sweep/tasks.py): local processes (`--jobs N`, one core each,
spawned so no torch state is forked) or a Dask cluster (`--scheduler tcp://HOST:PORT`, or
`local:N` for a LocalCluster of N one-thread workers). Both give the runner the same calls:
slots() (tasks to keep in flight), submit(kind, options, needs) with `needs` the finished
handles of the tasks it takes results from ({kind: handle}), wait(handles, seconds),
outcome(handle) -> ("ok", result) | ("lost", why) | ("error", why), release(handle) when
no task needs a result any more, and deaths(handles, settle): the workers that died under
them.
Locally a task's inputs go through the client (the results of its baselines, kept there until
their last point is sent); on Dask they are the baselines' futures, so the scheduler moves them
between workers and runs the point where they are.
"lost" is a worker that died under the task: the runner submits it once more; Dask retries
such a task itself on another worker (its scheduler's distributed.scheduler.allowed-failures;
a LocalCluster is given 1) and then reports it lost for good, and recomputes a finished
baseline whose worker died before its points ran; deaths() tells the runner of each worker that
died under its tasks (the scheduler's remove-worker events), so the user hears of it."""
from __future__ import annotations

import collections
import concurrent.futures as cf
import re
import sys
import time

from pimrt.errors import ConfigError


def _worker_init() -> None:
    """Ctrl-C reaches every process of the terminal; the client is the one that acts. A
    worker whose client is gone (killed outright, even by SIGKILL) is ended with it on
    Linux, not left computing a task no one will read."""
    import signal
    import threading
    from tqdm import tqdm
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        _end_with_parent()
    tqdm.set_lock(threading.RLock())


PR_SET_PDEATHSIG = 1


def _end_with_parent() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGTERM): the kernel sends this process SIGTERM when its
    parent (the sweep's client, which spawned it from its main thread) exits."""
    import ctypes
    import os
    import signal
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return                       # no prctl: the client's own cleanup is what remains
    if os.getppid() == 1:            # the client died before the call: nothing to wait for
        os._exit(1)


class LocalExecutor:
    """N spawned worker processes. A worker that dies breaks the pool: every task in flight
    is reported lost and the pool is started again for the next submissions."""
    retries_lost = True              # the runner resubmits a lost task once

    def __init__(self, jobs: int):
        if jobs < 1:
            raise ConfigError(f"--jobs must be >= 1, got {jobs}")
        self.jobs = jobs
        self.pool = None
        self.describe = f"{jobs} local process{'es' if jobs > 1 else ''}"

    def _pool(self):
        if self.pool is None:
            import multiprocessing
            self.pool = cf.ProcessPoolExecutor(
                self.jobs, mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init)
        return self.pool

    def slots(self) -> int:
        return self.jobs

    def submit(self, kind: str, options: dict, needs: dict, dest: dict | None = None):
        """dest: where a point's step trace goes; these processes share the client's folder,
        so they write it there (pimrt.sweep.worker)."""
        from pimrt.sweep.worker import run_task
        args = (kind, options, tuple(needs), *(h.result() for h in needs.values()))
        kw = {"dest": {**dest, "local": True}} if dest else {}
        try:
            return self._pool().submit(run_task, *args, **kw)
        except cf.process.BrokenProcessPool:
            self._restart()
            return self._pool().submit(run_task, *args, **kw)

    def discard(self, trace: dict) -> None:
        from pimrt.sweep.worker import remove_spool
        remove_spool(trace["path"], trace["in_place"])

    def release(self, handle) -> None:
        pass                         # the client's reference is all there is

    def deaths(self, handles, settle: float = 1.0) -> list:
        return []                    # a dead process breaks the pool: every task comes back lost

    def wait(self, handles, seconds: float):
        done, _ = cf.wait(handles, timeout=seconds, return_when=cf.FIRST_COMPLETED)
        return done

    def outcome(self, handle):
        try:
            return "ok", handle.result()
        except cf.process.BrokenProcessPool:
            self._restart()
            return "lost", "its worker process died"
        except Exception as exc:                    # noqa: BLE001 - recorded with the points
            return "error", f"{type(exc).__name__}: {exc}"

    def _restart(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = None

    def close(self, cancel: bool = False) -> None:
        if self.pool is None:
            return
        if cancel:                   # Ctrl-C: stop the tasks running now, not after them
            for proc in list((getattr(self.pool, "_processes", None) or {}).values()):
                proc.terminate()
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)
        self.pool = None


ADDRESS = re.compile(r"^(tcp|tls|ws|wss|inproc|ucx)://[^\s/:]+(:\d+)?/?$")
CONNECT_S = 3.0                  # a scheduler's host and port answer a TCP connect within this
DASK_PORT = 8786                 # dask's default scheduler port


def probe(address: str, timeout: float) -> None:
    """ConfigError in one line unless something accepts a TCP connection at a tcp/tls/ws(s)
    address within min(timeout, CONNECT_S) seconds: a refused port fails at once, an
    unreachable host in seconds (Dask's own connect retries until its timeout and beyond)."""
    import socket
    if timeout <= 0:
        raise ConfigError(f"--timeout must be > 0 seconds, got {timeout:g}")
    scheme, _, rest = address.partition("://")
    if scheme not in ("tcp", "tls", "ws", "wss") or not ADDRESS.match(address):
        return                       # local:N, or an address DaskExecutor refuses in words
    host, _, port = rest.rstrip("/").partition(":")
    limit = min(timeout, CONNECT_S)
    try:
        socket.create_connection((host, int(port or DASK_PORT)), timeout=limit).close()
    except socket.gaierror as exc:
        why = f"unknown host {host!r} ({exc.strerror})"
    except ConnectionRefusedError:
        why = f"nothing listens at {host}:{port or DASK_PORT} (connection refused)"
    except TimeoutError:
        why = f"{host}:{port or DASK_PORT} did not answer a connect within {limit:g} s"
    except OSError as exc:
        why = f"cannot connect to {host}:{port or DASK_PORT} ({exc.strerror or exc})"
    else:
        return
    raise ConfigError(f"--scheduler {address}: no Dask scheduler answered: {why}")


class DaskExecutor:
    """A Dask cluster: an existing scheduler's address, or local:N for a LocalCluster."""
    retries_lost = False             # the scheduler reschedules a task whose worker died

    def __init__(self, address: str, timeout: float):
        if timeout <= 0:
            raise ConfigError(f"--timeout must be > 0 seconds, got {timeout:g}")
        import logging
        import dask
        import distributed
        self.cluster = None
        m = re.fullmatch(r"local:(\d+)", address)
        if m:
            n = int(m.group(1))
            if n < 1:
                raise ConfigError(f"--scheduler {address}: a LocalCluster needs at least one "
                                  f"worker (local:N, N >= 1)")
            with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
                self.cluster = distributed.LocalCluster(
                    n_workers=n, threads_per_worker=1, processes=True,
                    dashboard_address=None, silence_logs=logging.ERROR)
            target = self.cluster
            self.describe = f"a Dask LocalCluster of {n} worker{'s' if n > 1 else ''}"
        elif ADDRESS.match(address):
            target = address
            self.describe = f"the Dask scheduler at {address}"
        else:
            raise ConfigError(f"--scheduler {address!r}: expected a scheduler's address "
                              f"(tcp://HOST:PORT) or local:N")
        if self.cluster is None:
            probe(address, timeout)
        try:
            self.client = distributed.Client(target, timeout=timeout)
        except (OSError, TimeoutError) as exc:
            self._close_cluster()
            raise ConfigError(f"--scheduler {address}: no Dask scheduler answered within "
                              f"{timeout:g} s ({_first_line(exc)})") from None
        except Exception as exc:     # noqa: BLE001 - a port that speaks another protocol
            self._close_cluster()
            raise ConfigError(f"--scheduler {address}: something answered, but not a Dask "
                              f"scheduler: it does not speak Dask's protocol "
                              f"({type(exc).__name__})") from None
        self.killed = distributed.KilledWorker
        self.removed: collections.deque = collections.deque()
        self.client.subscribe_topic("all", self._event)

    def _event(self, event) -> None:
        """The scheduler's events (on the client's thread): a worker that died, not one that
        was closed, with the keys it was running and the results only it held."""
        msg = event[1] if isinstance(event, tuple) else event
        if isinstance(msg, dict) and msg.get("action") == "remove-worker" \
                and not msg.get("expected"):
            self.removed.append((time.monotonic(), msg.get("worker"),
                                 set(msg.get("processing-tasks") or ()),
                                 set(msg.get("lost-computed-tasks") or ())))

    def deaths(self, handles, settle: float = 1.0) -> list:
        """[(worker, [(future, rescheduled)], [finished future recomputed])] for each worker
        that died under these futures at least `settle` seconds ago (by then the scheduler
        has said whether it gave a task up: allowed-failures)."""
        found = []
        mine = {h.key: h for h in handles}
        while self.removed and time.monotonic() - self.removed[0][0] >= settle:
            _, worker, running, lost = self.removed.popleft()
            ours = [(mine[k], mine[k].status != "error") for k in running if k in mine]
            redo = [mine[k] for k in lost if k in mine and k not in running]
            if ours or redo:
                found.append((worker, ours, redo))
        return found

    def slots(self) -> int:
        return max(1, sum(self.client.nthreads().values()))

    def submit(self, kind: str, options: dict, needs: dict, dest: dict | None = None):
        """dest: where a point's step trace goes; a worker that finds the sweep's token file
        there writes it in place, one that does not keeps it for fetch()."""
        from pimrt.sweep.worker import run_task
        kw = {"dest": dest} if dest else {}
        return self.client.submit(run_task, kind, options, tuple(needs), *needs.values(),
                                  pure=False, **kw)

    def fetch(self, trace: dict):
        """A step trace spooled on the worker that ran its point, in chunks of at most
        TRACE_CHUNK bytes (each one call to that worker), then removed there. A trace
        written in place on a shared folder never comes here."""
        from pimrt.sweep.worker import TRACE_CHUNK, read_chunk, remove_spool
        where, offset = trace.get("worker"), 0
        if where is None:
            raise OSError("no worker address")
        while offset < trace["size"]:
            chunk = self.client.run(read_chunk, trace["path"], offset, TRACE_CHUNK,
                                    workers=[where]).get(where)
            if not chunk:
                raise OSError(f"the worker gave nothing at byte {offset:,}")
            offset += len(chunk)
            yield chunk
        self.discard(trace)

    def discard(self, trace: dict) -> None:
        from pimrt.sweep.worker import remove_spool
        if trace["in_place"]:
            remove_spool(trace["path"], True)
        elif trace.get("worker"):
            try:
                self.client.run(remove_spool, trace["path"], workers=[trace["worker"]])
            except Exception:        # noqa: BLE001 - the worker is gone: so is its spool
                pass

    def release(self, handle) -> None:
        handle.release()

    def wait(self, handles, seconds: float):
        import distributed
        try:
            return distributed.wait(list(handles), timeout=seconds,
                                    return_when="FIRST_COMPLETED").done
        except TimeoutError:
            return set()

    def outcome(self, handle):
        if handle.status == "finished":
            return "ok", handle.result()
        exc = handle.exception()
        if isinstance(exc, self.killed):
            return "lost", f"its worker died and Dask gave up rescheduling it " \
                           f"({_first_line(exc)})"
        return "error", f"{type(exc).__name__}: {_first_line(exc)}"

    def close(self, cancel: bool = False) -> None:
        try:
            self.client.close()
        finally:
            self._close_cluster()

    def _close_cluster(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def executor(jobs: int, scheduler: str | None, timeout: float):
    if scheduler:
        return DaskExecutor(scheduler, timeout)
    return LocalExecutor(jobs)


def warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)

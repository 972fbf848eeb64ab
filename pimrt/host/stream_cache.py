"""Host kernels' request streams kept on disk for the process, so each is built once.

A `pimrt run` times the same CONV kernels in several streams (serial, the step, GPU-only, each
side alone, the profiled step), and each time HostWork built the kernel's L2-filtered request
stream again (pimrt/host/traffic.py: about a fifth of a run's CPU). A stream depends only on
the kernel (its geometry, phase, channel range, accumulation), the host part, the request
size and its tensors' addresses and shapes; here it is kept under that key, in a folder of
the system's temporary directory that this process removes when it ends, and read back the
next time (the same array: the same cycles). A sweep's worker keeps its streams from task to
task. At most `limit` bytes are kept (the least recently used go first); a stream that cannot
be written (a full or unwritable disk) is simply built each time, as before.

    from pimrt.host import stream_cache
    got = stream_cache.get(key)          # (requests, rows) or None
    stream_cache.put(key, requests, rows)
"""
from __future__ import annotations

import atexit
import collections
import os
import shutil
import tempfile

import numpy as np

DEFAULT_LIMIT = 8 << 30     # bytes on disk a process keeps
MIN_REQUESTS = 4096         # shorter streams are built again (cheaper than a file)
PREFIX = "pimrt-streams-"   # then the process id
ENV = "PIMRT_STREAM_CACHE_BYTES"


class StreamCache:
    """Streams on disk under one folder, least recently used dropped past `limit` bytes."""

    def __init__(self, limit: int = DEFAULT_LIMIT):
        self.limit = limit
        self.pid = os.getpid()
        self.folder: str | None = None
        self.files: collections.OrderedDict = collections.OrderedDict()  # key -> (path, bytes)
        self.bytes = 0
        self.broken = False
        self.hits = self.misses = 0
        self.made = 0

    def _open(self) -> str | None:
        if self.folder is None and not self.broken:
            _remove_stale()
            try:
                self.folder = tempfile.mkdtemp(prefix=f"{PREFIX}{self.pid}-")
            except OSError:
                self.broken = True
                return None
            atexit.register(self.close)
        return self.folder

    def get(self, key):
        got = self._read(key)
        if got is None:
            self.misses += 1
        else:
            self.files.move_to_end(key)
            self.hits += 1
        return got

    def _read(self, key):
        """The kept arrays, or None (not kept, or its files gone or damaged: dropped)."""
        entry = self.files.get(key)
        if entry is None:
            return None
        try:
            return np.load(entry[0] + ".requests.npy"), np.load(entry[0] + ".rows.npy")
        except (OSError, ValueError):
            self._drop(key)
            return None

    def put(self, key, requests: np.ndarray, rows: np.ndarray) -> None:
        size = requests.nbytes + rows.nbytes
        if len(requests) < MIN_REQUESTS or size > self.limit or key in self.files:
            return
        folder = self._open()
        if folder is None:
            return
        while self.files and self.bytes + size > self.limit:
            self._drop(next(iter(self.files)))
        self.made += 1
        path = os.path.join(folder, str(self.made))
        try:
            np.save(path + ".requests.npy", requests)
            np.save(path + ".rows.npy", rows)
        except OSError:
            _unlink(path)
            return
        self.files[key] = (path, size)
        self.bytes += size

    def _drop(self, key) -> None:
        path, size = self.files.pop(key)
        self.bytes -= size
        _unlink(path)

    def close(self) -> None:
        """Remove the folder (at the process's end; a forked child leaves its parent's)."""
        if self.folder is not None and os.getpid() == self.pid:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
        self.files.clear()
        self.bytes = 0


def _unlink(path: str) -> None:
    for name in (path + ".requests.npy", path + ".rows.npy"):
        try:
            os.unlink(name)
        except OSError:
            pass


def _remove_stale() -> None:
    """Folders left by processes that ended without removing theirs (killed)."""
    tmp = tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OverflowError, OSError):    # someone else's, or cannot tell: left alone
        pass
    return True


def limit_from_env() -> int:
    """The byte limit: PIMRT_STREAM_CACHE_BYTES (0 keeps nothing), else DEFAULT_LIMIT."""
    text = os.environ.get(ENV)
    if text is None or not text.strip():
        return DEFAULT_LIMIT
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0:
        from pimrt.errors import ConfigError
        raise ConfigError(f"environment variable {ENV}={text!r}: expected a whole number of "
                          f"bytes >= 0 (0 keeps no stream; default {DEFAULT_LIMIT})")
    return value


_CACHE: StreamCache | None = None


def cache() -> StreamCache:
    """This process's cache (a forked child starts its own)."""
    global _CACHE
    if _CACHE is None or _CACHE.pid != os.getpid():
        _CACHE = StreamCache(limit_from_env())
    return _CACHE


def get(key):
    return cache().get(key)


def put(key, requests: np.ndarray, rows: np.ndarray) -> None:
    cache().put(key, requests, rows)

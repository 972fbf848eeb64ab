"""Process group set-up with a bounded collective timeout, and a watchdog that never lets a
rank hang: with a dead peer the others fail with a clear message within the timeout."""
from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def init(backend: str, timeout_s: float) -> tuple[int, int, int]:
    """(rank, world, local_rank). Under torchrun (RANK/WORLD_SIZE set) uses env://, otherwise a
    single-process group on an in-memory store (world size 1; the hook still encodes)."""
    timeout = timedelta(seconds=timeout_s)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        dist.init_process_group(backend, timeout=timeout)
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return 0, 1, 0


def leave(code: int = 0) -> None:
    """End a worker process whose files are written and whose process group is destroyed,
    without the interpreter's teardown: gloo's threads may still drop tensors there, and a
    rank then aborts now and then ("terminate called without an active exception", SIGABRT)
    after all its output was written, which torchrun reports as a failed run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fail(rank: int, message: str, code: int = 3) -> None:
    """Print and leave at once: after a failed collective a clean shutdown may itself hang."""
    print(f"pimrt.train: rank {rank}: error: {message}", file=sys.stderr)
    leave(code)


class Watchdog:
    """Exits the process if `beat()` is not called for `limit_s` seconds."""

    def __init__(self, rank: int, limit_s: float):
        self.rank, self.limit = rank, limit_s
        self.last = time.monotonic()
        self.what = "start-up"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def beat(self, what: str) -> None:
        self.last, self.what = time.monotonic(), what

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            if time.monotonic() - self.last > self.limit:
                fail(self.rank, f"no progress for {self.limit:.0f} s after {self.what}: a peer rank "
                                f"probably died or hangs; giving up", code=4)


def pick_device(name: str, local_rank: int) -> tuple[torch.device, str]:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"

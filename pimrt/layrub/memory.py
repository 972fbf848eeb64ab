"""Independent memory measurement for the Layrub benchmark.

CUDA: ``torch.cuda.max_memory_allocated`` minus the bytes allocated before the step.

CPU: the process's peak resident set during the step, from the kernel: ``VmHWM`` of
``/proc/self/status`` after resetting it (``echo 5 > /proc/self/clear_refs``), minus ``VmRSS``
before the step. To make RSS follow tensor allocations, :func:`tune_malloc` sets glibc's
``M_MMAP_THRESHOLD`` to 128 KiB (so every feature map is its own mmap, returned to the kernel
when freed) and ``malloc_trim(0)`` runs before each measurement. Where ``clear_refs`` cannot
be written, a sampling thread reads ``/proc/self/statm`` every 0.5 ms instead.
"""
from __future__ import annotations

import ctypes
import gc
import os
import threading
import time

import torch

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_libc = None


def _lib():
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL("libc.so.6")
        except OSError:
            _libc = False
    return _libc


def tune_malloc(mmap_threshold: int = 128 * 1024) -> bool:
    """glibc only: big allocations as mmaps (fixed threshold), so RSS tracks tensors."""
    lib = _lib()
    if not lib:
        return False
    try:
        return bool(lib.mallopt(-3, int(mmap_threshold)))     # M_MMAP_THRESHOLD
    except AttributeError:
        return False


def trim() -> None:
    gc.collect()
    lib = _lib()
    if lib:
        try:
            lib.malloc_trim(0)
        except AttributeError:
            pass


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _status(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakMemory:
    """``with PeakMemory(device) as m: step()``; then ``m.peak`` (bytes above the start) and
    ``m.method``."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.peak = 0
        self.method = ""

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            self.method = "cuda max_memory_allocated"
            return self
        trim()
        self._sampler = None
        if _reset_hwm() and _status("VmHWM") is not None:
            self.method = "VmHWM (kernel peak RSS)"
        else:
            self.method = "statm sampling (0.5 ms)"
            self._stop = threading.Event()
            self._max = 0

            def sample():
                while not self._stop.is_set():
                    self._max = max(self._max, rss_bytes())
                    time.sleep(0.0005)
            self._sampler = threading.Thread(target=sample, daemon=True)
        self._base = rss_bytes()
        if self._sampler is not None:
            self._sampler.start()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self._base
            return
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join()
            top = max(self._max, rss_bytes())
        else:
            top = _status("VmHWM") or rss_bytes()
        self.peak = max(0, top - self._base)

"""The C heap's free pages handed back to the system between a run's streams.

A stream's records are made in arrays of a few MB that glibc's malloc serves from its heap and
keeps when they are freed; between one stream's pieces and the next's that heap fragments, so
its free pages (60-70 MiB in `pimrt run` at 224x224) stay resident under what is in use.
release() returns them (glibc's malloc_trim); elsewhere it does nothing.
"""
from __future__ import annotations

import ctypes


def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):   # not glibc
        return None


_TRIM = _malloc_trim()


def release() -> None:
    """Hand the heap's free pages back to the system (what is in use stays as it is)."""
    if _TRIM is not None:
        _TRIM(0)

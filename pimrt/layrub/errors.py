"""Errors and warnings of pimrt.layrub (all errors are :class:`pimrt.errors.PimrtError`)."""
from __future__ import annotations

from pimrt.errors import PimrtError


class LayrubError(PimrtError):
    """Layrub cannot plan or run as asked (bad option, unsupported model region in strict mode)."""


class LayrubBudgetError(LayrubError):
    """A device or host memory budget too small for the plan; names the bytes needed."""

    def __init__(self, message: str, needed: int | None = None, budget: int | None = None):
        super().__init__(message)
        self.needed = needed
        self.budget = budget


class LayrubUnsupportedError(LayrubError):
    """The planner cannot analyse an op (strict mode); names the node."""


class LayrubWarning(UserWarning):
    """Layrub fell back to a safe behaviour (no reuse for a region, no pre-check, ...)."""


def parse_bytes(value) -> int | None:
    """``"2GB"``, ``"512MiB"``, ``"1.5G"``, ``1000000`` -> bytes (GB/GiB/G all mean 2**30)."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise LayrubError(f"a byte count must be a finite number, got {value!r}")
        if value < 0:
            raise LayrubError(f"a byte count must be >= 0, got {value}")
        return int(value)
    s = str(value).strip().upper().replace(" ", "")
    units = {"TIB": 2**40, "GIB": 2**30, "MIB": 2**20, "KIB": 2**10,
             "TB": 2**40, "GB": 2**30, "MB": 2**20, "KB": 2**10,
             "T": 2**40, "G": 2**30, "M": 2**20, "K": 2**10, "B": 1}
    for u, mult in units.items():
        if s.endswith(u):
            num = s[: -len(u)]
            break
    else:
        num, mult = s, 1
    try:
        out = float(num) * mult
    except ValueError:
        raise LayrubError(f"cannot read a byte count from {value!r} (e.g. 2GB, 512MiB, 1e9)") \
            from None
    if out != out or out in (float("inf"), float("-inf")):
        raise LayrubError(f"a byte count must be a finite number, got {value!r}")
    if out < 0:
        raise LayrubError(f"a byte count must be >= 0, got {value!r}")
    return int(out)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, mult in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= mult:
            return f"{n / mult:.2f} {unit}"
    return f"{int(n)} B"

"""Errors of pimrt.laysa. Both are GradSAError (the trainer reports them cleanly, before
training where possible) and PimrtError (the CLI prints them without a traceback)."""
from __future__ import annotations

from pimrt.gradsa.errors import GradSAError
from pimrt.layrub.errors import LayrubBudgetError


class LaySAError(GradSAError):
    """LaySA cannot run as asked (bad option, wrong optimizer, no GradSA state)."""


class LaySABudgetError(LaySAError, LayrubBudgetError):
    """The device memory budget is too small; names the bytes needed."""

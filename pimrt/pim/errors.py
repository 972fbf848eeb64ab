"""Errors of the PIM unit tools: assembler, golden model, RTL harness and batch driver."""
from __future__ import annotations

from pimrt.errors import PimrtError


class PimError(PimrtError):
    """Any error of pimrt.pim: a bad program, a bad buffer, a failed build."""


class PimAsmError(PimError):
    """Assembler input that cannot be encoded; names the line and what is wrong."""


class PimFaultError(PimError):
    """The unit stopped on a fault (unknown opcode, bad register, ...) at a program counter."""

    def __init__(self, message: str, code: int, pc: int):
        super().__init__(message)
        self.code = code
        self.pc = pc


class PimCycleCapError(PimError):
    """A program ran past the harness's cycle cap (a loop with no EXIT); names the pc."""

    def __init__(self, message: str, pc: int, cycles: int):
        super().__init__(message)
        self.pc = pc
        self.cycles = cycles


class PimCapacityError(PimError):
    """A buffer (or one unit of work that cannot be split) does not fit the bank."""


class PimBuildError(PimError):
    """Verilator or the C++ compiler is missing or failed."""

"""What every way of running the unit offers (golden model, pyverilator RTL, batch driver).

A backend holds one unit beside one bank. The host loads a program, scalars, pointers and
loop counts, writes columns into the bank, runs the program to EXIT and reads columns back.
Bank data are uint32 arrays of shape (columns, lanes): the bit patterns of float32 values.
"""
from __future__ import annotations

import numpy as np

from pimrt.pim import isa
from pimrt.pim.asm import Program
from pimrt.pim.errors import PimCapacityError, PimCycleCapError, PimError, PimFaultError

DEFAULT_ROWS = 256
DEFAULT_COLS = 32
DEFAULT_MAX_CYCLES = 1 << 31


def f32_bits(values) -> np.ndarray:
    """float values (or uint32 bit patterns already) -> uint32 bit patterns."""
    arr = np.asarray(values)
    if arr.dtype == np.uint32:
        return arr
    return np.asarray(arr, dtype=np.float32).view(np.uint32)


class Backend:
    """Base class: argument checks and error reporting shared by the backends."""

    name = "backend"

    def __init__(self, rows: int = DEFAULT_ROWS, cols: int = DEFAULT_COLS, lanes: int = isa.LANES):
        self.rows, self.cols, self.lanes = rows, cols, lanes
        self.depth = rows * cols
        if not 0 < self.depth <= isa.PTR_MASK + 1:
            raise PimCapacityError(f"a bank of {rows} x {cols} columns cannot be addressed by "
                                   f"16-bit pointers (at most {isa.PTR_MASK + 1} columns)")
        self.program: tuple[int, ...] = ()
        self.last_cycles = 0
        self.stats: dict[str, list[int]] = {}   # kernel -> [cycles, elements, runs]

    def record(self, kernel: str, cycles: int, elements: int) -> None:
        entry = self.stats.setdefault(kernel, [0, 0, 0])
        entry[0] += cycles
        entry[1] += elements
        entry[2] += 1

    # ---- host side loads ---------------------------------------------------------------
    def load_program(self, program: Program | list[int] | tuple[int, ...]) -> None:
        words = tuple(program.words if isinstance(program, Program) else program)
        if len(words) > isa.CRF_DEPTH:
            raise PimCapacityError(f"program of {len(words)} words does not fit the "
                                   f"{isa.CRF_DEPTH}-entry command register file")
        words = words + (0,) * (isa.CRF_DEPTH - len(words))   # NOP fill
        words = tuple(int(w) & 0xFFFFFFFF for w in words)
        if words != self.program:          # the CRF keeps its program between runs
            self.program = words
            self._load_program(self.program)

    def set_scalars(self, values: dict[int, float] | list[float]) -> None:
        items = values.items() if isinstance(values, dict) else enumerate(values)
        for idx, v in items:
            self._check_index("scalar register", idx, isa.N_SRF)
            bits = int(f32_bits(np.asarray([v]))[0])
            self._set_cfg(1, idx, bits)

    def set_pointers(self, values: dict[int, int] | list[int]) -> None:
        items = values.items() if isinstance(values, dict) else enumerate(values)
        for idx, v in items:
            self._check_index("pointer", idx, isa.N_PTR)
            if not 0 <= v <= isa.PTR_MASK:
                raise PimCapacityError(f"pointer p{idx} = {v} does not fit 16 bits")
            self._set_cfg(2, idx, int(v))

    def set_counts(self, values: dict[int, int] | list[int]) -> None:
        items = values.items() if isinstance(values, dict) else enumerate(values)
        for idx, v in items:
            self._check_index("count register", idx, isa.N_CNT)
            if not 0 <= v < 1 << 32:
                raise PimCapacityError(f"loop count c{idx} = {v} does not fit 32 bits")
            self._set_cfg(3, idx, int(v))

    def write_bank(self, col: int, data: np.ndarray) -> None:
        data = self._columns(data)
        self._check_span(col, len(data))
        self._write_bank(col, data)

    def read_bank(self, col: int, n: int) -> np.ndarray:
        self._check_span(col, n)
        return self._read_bank(col, n)

    def run(self, max_cycles: int = DEFAULT_MAX_CYCLES) -> int:
        """Run the loaded program from pc 0 to EXIT; return the cycles it took."""
        cycles, code, pc = self._run(int(max_cycles))
        self.last_cycles = cycles
        if code == -1:
            raise PimCycleCapError(
                f"the program did not EXIT within {max_cycles} cycles (stopped at pc {pc}: "
                f"{self._disasm(pc)}); a loop with no EXIT?", pc=pc, cycles=cycles)
        if code != isa.E_NONE:
            raise PimFaultError(f"PIM fault at pc {pc}: {isa.FAULTS.get(code, f'code {code}')} "
                                f"in {self._disasm(pc)}", code=code, pc=pc)
        return cycles

    def run_chunks(self, setup, jobs) -> list:
        """Run a kernel's independent chunks: `setup(unit)` loads what every chunk shares
        (program, scalars) into a unit, then each `job(unit)` writes its chunk into the
        unit's bank, runs it and reads its results back, returning its cycles. A chunk's
        bits and cycles depend on the chunk alone. Here: one unit, chunk after chunk; a
        backend with several units (the batch driver) spreads them. -> each job's result,
        in order."""
        setup(self)
        return [job(self) for job in jobs]

    # ---- helpers -----------------------------------------------------------------------
    def _disasm(self, pc: int) -> str:
        if 0 <= pc < len(self.program):
            return f"{isa.disassemble(self.program[pc])!r} (word 0x{self.program[pc]:08x})"
        return "no instruction (past the end of the command register file)"

    def _columns(self, data: np.ndarray) -> np.ndarray:
        data = np.ascontiguousarray(f32_bits(data))
        if data.ndim == 1:
            if data.size % self.lanes:
                raise PimCapacityError(f"{data.size} values are not a whole number of "
                                       f"{self.lanes}-lane columns")
            data = data.reshape(-1, self.lanes)
        if data.ndim != 2 or data.shape[1] != self.lanes:
            raise PimError(f"bank data must be (columns, {self.lanes}), got {data.shape}")
        return data

    def _check_span(self, col: int, n: int) -> None:
        if col < 0 or n < 0 or col + n > self.depth:
            raise PimCapacityError(f"columns {col}..{col + n - 1} do not fit the bank of "
                                   f"{self.depth} columns ({self.rows} rows x {self.cols})")

    @staticmethod
    def _check_index(what: str, idx: int, limit: int) -> None:
        if not 0 <= idx < limit:
            raise PimError(f"{what} {idx} out of range (0..{limit - 1})")

    # ---- what each backend implements ----------------------------------------------------
    def _load_program(self, words: tuple[int, ...]) -> None:
        for i, w in enumerate(words):
            self._set_cfg(0, i, w)

    def _set_cfg(self, sel: int, idx: int, value: int) -> None:
        raise NotImplementedError

    def _write_bank(self, col: int, data: np.ndarray) -> None:
        raise NotImplementedError

    def _read_bank(self, col: int, n: int) -> np.ndarray:
        raise NotImplementedError

    def _run(self, max_cycles: int) -> tuple[int, int, int]:
        """-> (cycles, fault code or -1 for the cycle cap, pc)."""
        raise NotImplementedError

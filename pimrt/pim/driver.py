"""Batch driver: the Verilated pim_top in C++ (native/pim_driver.cpp), called through cffi.

One Python call runs a whole program (pim_run clocks the model in C++ until EXIT), and bank
data move as whole buffers. Bank data go through a backdoor copy into the model's bank array
by default (`via_port=False`); `via_port=True` clocks every column through the host port
instead, as a real host access would (one column per cycle).

The build: Verilator generates the C++ model (-O3 --x-assign fast --x-initial fast
--noassert --output-split 0: one file, so the compiler sees all of it), make compiles it
with -O2 into an archive, and cffi (API mode) compiles the driver against it into an
extension module, all under the build cache (pimrt.pim.build).

A kernel's chunks (Backend.run_chunks) run on `units` Verilated units at once, a Python
thread each: cffi releases the GIL around every C call, so the units' clock loops run on
separate cores.
"""
from __future__ import annotations

import importlib.util
import os
import queue
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from pimrt.pim import build, isa
from pimrt.pim.backend import Backend, DEFAULT_COLS, DEFAULT_ROWS
from pimrt.pim.errors import PimBuildError, PimError

VFLAGS = ["--cc", "-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert",
          "--unroll-stmts", "100000", "--output-split", "0",
          "-CFLAGS", "-fPIC"]
OPT = ["OPT_FAST=-O2", "OPT_SLOW=-O1", "OPT_GLOBAL=-O2"]
CDEF = """
void *pim_new(void);
void pim_free(void *h);
uint32_t pim_lanes(void *h);
uint32_t pim_depth(void *h);
void pim_cfg(void *h, int sel, int idx, uint32_t value);
void pim_bank_write(void *h, uint32_t col, const uint32_t *data, uint32_t ncols, int via_port);
void pim_bank_read(void *h, uint32_t col, uint32_t *data, uint32_t ncols, int via_port);
int pim_run(void *h, uint64_t max_cycles, uint64_t *cycles, uint32_t *pc);
int pim_run_record(void *h, uint64_t max_cycles, uint64_t *cycles, uint32_t *pc,
                   uint32_t *rec, uint64_t cap, uint64_t *nrec);
uint64_t pim_clock_count(void *h);
"""
_loaded: dict[str, object] = {}


def _safe_clock() -> list[str]:
    """PIMRT_PIM_SAFE_CLOCK=1: evaluate the falling clock edge too (see pim_driver.cpp)."""
    return ["-DPIM_SAFE_CLOCK"] if os.environ.get("PIMRT_PIM_SAFE_CLOCK") == "1" else []


def _native_sources() -> list[Path]:
    files = sorted(build.NATIVE_DIR.glob("pim_driver*"))
    if not files:
        raise PimBuildError(f"missing the batch driver source {build.NATIVE_DIR}/pim_driver.cpp")
    return files


def _thread_flags(threads: int) -> tuple[list[str], list[str]]:
    """(Verilator flags, C++ defines) for a model evaluated by `threads` threads."""
    if not isinstance(threads, int) or not 1 <= threads <= 64:
        raise PimError(f"Verilator threads must be an integer from 1 to 64, got {threads!r}")
    if threads == 1:
        return [], []
    return ["--threads", str(threads)], [f"-DPIM_THREADS={threads}"]


def build_driver(lanes: int, rows: int, cols: int, hw_dir: Path | None = None,
                 threads: int = 1):
    """Build (or reuse from the cache) the driver for these parameters; return its lib, ffi.
    hw_dir: the Verilog to build (default hw/; another copy, e.g. an older revision's, to
    measure it side by side). threads: Verilator --threads (the model's logic evaluated by
    that many threads each clock; 1, the default, is the fastest here: docs/pim.md)."""
    vl = build.verilator()
    hw = Path(hw_dir).resolve() if hw_dir is not None else build.HW_DIR
    vthreads, cthreads = _thread_flags(threads)
    params = [f"-GLANES={lanes}", f"-GROWS={rows}", f"-GCOLS={cols}"] + vthreads
    flags = (VFLAGS + params + OPT + _safe_clock() + cthreads
             + ["cffi-api", sys.version.split()[0]])
    key = build.build_key("drv", build.hw_sources(hw) + _native_sources(), flags)
    if key in _loaded:
        return _loaded[key]
    out = build.cache_root() / key
    modname = "_pim_driver_" + key.split("-")[1]
    with build.locked(out):
        so = next(out.glob(f"{modname}*.so"), None) if out.exists() else None
        if so is None:
            build.check_toolchain()
            tmp = out.with_name(out.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            obj = tmp / "obj"
            obj.mkdir(parents=True)
            build.run([vl, *VFLAGS, *params, f"-I{hw}", "--top-module", "pim_top",
                       "-Mdir", str(obj), str(hw / "pim_top.v")])
            build.run(["make", "-C", str(obj), "-f", "Vpim_top.mk", f"-j{build.jobs()}", *OPT,
                       "Vpim_top__ALL.a", "verilated.o", "verilated_threads.o"])
            _compile_cffi(tmp, obj, modname, cthreads)
            tmp.rename(out)
            so = next(out.glob(f"{modname}*.so"))
    spec = importlib.util.spec_from_file_location(modname, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _loaded[key] = (mod.lib, mod.ffi)
    return _loaded[key]


def _compile_cffi(tmp: Path, obj: Path, modname: str, defines: list[str]) -> None:
    try:
        import cffi
    except ImportError as exc:
        raise PimBuildError("cffi is not installed: pip install cffi") from exc
    inc = build.verilator_include()
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source(
        modname, '#include "pim_driver.h"',
        sources=[str(build.NATIVE_DIR / "pim_driver.cpp")], source_extension=".cpp",
        include_dirs=[str(build.NATIVE_DIR), str(obj), str(inc), str(inc / "vltstd")],
        extra_objects=[str(obj / "Vpim_top__ALL.a"), str(obj / "verilated.o"),
                       str(obj / "verilated_threads.o")],
        extra_compile_args=["-O2", "-std=c++17", "-faligned-new", "-DVM_TRACE=0",
                            "-Wno-unused-parameter", *_safe_clock(), *defines],
        libraries=["pthread"],
    )
    try:
        ffi.compile(tmpdir=str(tmp), verbose=False)
    except Exception as exc:
        raise PimBuildError(f"compiling the batch driver failed: {exc}") from exc


def default_units() -> int:
    """Units a batch driver runs chunks on by default: PIMRT_PIM_UNITS, else the cores this
    process may use."""
    env = os.environ.get("PIMRT_PIM_UNITS")
    if env is None:
        return max(1, len(os.sched_getaffinity(0)))
    try:
        n = int(env)
    except ValueError:
        n = 0
    if n < 1:
        raise PimError(f"PIMRT_PIM_UNITS must be a whole number of units (1 or more), got {env!r}")
    return n


class PimDriver(Backend):
    """pim_top in C++, whole programs per call. via_port: bank data through the host port.
    record: keep each run's bank-port accesses in `accesses` (one array per run, fields
    clock, write (0 read, 1 write), column; in program order). hw_dir: build another copy
    of the Verilog (default hw/). threads: Verilator --threads of the model. units: how many
    Verilated units (each beside its own bank) a kernel's chunks are spread over, one
    Python thread each (the C++ runs without the GIL), as a part's units work on their own
    banks; each chunk's bits and cycles are those of one unit, and `run_chunks` returns
    them in order, so the results do not depend on `units`. Default: default_units();
    record=True keeps one (the accesses in program order)."""

    name = "driver"
    ACCESS_DTYPE = np.dtype([("clock", "<u4"), ("write", "u1"), ("column", "<u4")])

    def __init__(self, rows: int = DEFAULT_ROWS, cols: int = DEFAULT_COLS,
                 lanes: int = isa.LANES, via_port: bool = False, record: bool = False,
                 hw_dir: Path | None = None, threads: int = 1, units: int | None = None):
        super().__init__(rows, cols, lanes)
        units = default_units() if units is None else units
        if not isinstance(units, int) or units < 1:
            raise PimError(f"PimDriver units must be a whole number (1 or more), got {units!r}")
        self.lib, self.ffi = build_driver(lanes, rows, cols, hw_dir, threads)
        self.units = 1 if record else units
        self._make_sibling = lambda: PimDriver(rows, cols, lanes, via_port, False, hw_dir,
                                               threads, units=1)
        self._siblings: list[PimDriver] = []
        self.via_port = via_port
        self.record_accesses = record
        self.accesses: list[np.ndarray] = []
        self.record_cap = 1 << 20
        self.h = self.ffi.gc(self.lib.pim_new(), self.lib.pim_free)
        assert self.lib.pim_depth(self.h) == self.depth

    @property
    def clock_count(self) -> int:
        """Clocks simulated so far, over all of this driver's units."""
        return int(self.lib.pim_clock_count(self.h)) + sum(u.clock_count for u in self._siblings)

    def run_chunks(self, setup, jobs) -> list:
        """Backend.run_chunks over up to `units` units at once: a thread per unit takes the
        next chunk when its unit is free; the results come back in chunk order."""
        n = min(self.units, len(jobs))
        if n <= 1:
            return super().run_chunks(setup, jobs)
        while len(self._siblings) < n - 1:
            self._siblings.append(self._make_sibling())
        free: queue.SimpleQueue = queue.SimpleQueue()
        for unit in [self] + self._siblings[:n - 1]:
            setup(unit)
            free.put(unit)

        def on_a_free_unit(job):
            unit = free.get()
            try:
                return job(unit)
            finally:
                free.put(unit)

        with ThreadPoolExecutor(n, thread_name_prefix="pim-unit") as pool:
            futures = [pool.submit(on_a_free_unit, job) for job in jobs]
            try:
                return [f.result() for f in futures]
            finally:
                for f in futures:
                    f.cancel()

    def _set_cfg(self, sel, idx, value):
        self.lib.pim_cfg(self.h, sel, idx, value)

    def _write_bank(self, col, data):
        data = np.ascontiguousarray(data, dtype=np.uint32)
        self.lib.pim_bank_write(self.h, col, self.ffi.from_buffer("uint32_t[]", data),
                                len(data), int(self.via_port))

    def _read_bank(self, col, n):
        out = np.empty((n, self.lanes), np.uint32)
        self.lib.pim_bank_read(self.h, col, self.ffi.from_buffer("uint32_t[]", out), n,
                               int(self.via_port))
        return out

    def _run(self, max_cycles):
        cycles = self.ffi.new("uint64_t *")
        pc = self.ffi.new("uint32_t *")
        if not self.record_accesses:
            code = self.lib.pim_run(self.h, max_cycles, cycles, pc)
            return int(cycles[0]), int(code), int(pc[0])
        cap = self.record_cap
        rec = np.empty((cap, 2), np.uint32)
        nrec = self.ffi.new("uint64_t *")
        code = self.lib.pim_run_record(self.h, max_cycles, cycles, pc,
                                       self.ffi.from_buffer("uint32_t[]", rec), cap, nrec)
        if nrec[0] > cap:
            raise PimError(f"the run made {nrec[0]} bank accesses, more than record_cap "
                           f"({cap}) keeps; set PimDriver.record_cap higher")
        out = np.empty(int(nrec[0]), self.ACCESS_DTYPE)
        out["clock"] = rec[:len(out), 0]
        out["write"] = rec[:len(out), 1] >> 31
        out["column"] = rec[:len(out), 1] & 0x7FFFFFFF
        self.accesses.append(out)
        return int(cycles[0]), int(code), int(pc[0])

"""The RTL under pyverilator (the `pyverilator-mm` fork): per-signal, per-cycle driving from
Python. Used by the signal-level tests and as the slow reference in `pimrt bench pim`.

PimRtl drives pim_top through its ports only: the host bank port (one column per clock),
the configuration port, start / busy / done / err_code / err_pc. LaneRtl drives
pim_lane_array, the datapath alone, to test each lane operation.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pimrt.pim import build, isa
from pimrt.pim.backend import Backend, DEFAULT_COLS, DEFAULT_ROWS
from pimrt.pim.errors import PimBuildError, PimError

PV_ARGS = ["-Wno-fatal", "-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert",
           "--unroll-stmts", "100000"]
PV_CARGS = "-std=c++17 -O1"


def _pyverilator():
    try:
        import pyverilator  # noqa: F401
    except ImportError as exc:
        raise PimBuildError("pyverilator is not installed: pip install pyverilator-mm") from exc
    return pyverilator.PyVerilator


def build_sim(top: str, params: dict[str, int] | None = None):
    """Build (or reuse from the cache) a pyverilator model of hw/<top>.v and load it."""
    PyVerilator = _pyverilator()
    build.verilator()
    params = params or {}
    args = PV_ARGS + [f"-I{build.HW_DIR}"] + [f"-G{k}={v}" for k, v in sorted(params.items())]
    key = build.build_key(f"pv-{top}", build.hw_sources(), args + [PV_CARGS])
    out = build.cache_root() / key
    so = out / f"V{top}"
    with build.locked(out):
        if not so.exists():
            build.check_toolchain(cffi=False)
            tmp = out.with_name(out.name + f".tmp{os.getpid()}")
            try:
                old = os.environ.get("MAKEFLAGS")
                os.environ["MAKEFLAGS"] = f"-j{build.jobs()}"
                try:
                    PyVerilator.build(str(build.HW_DIR / f"{top}.v"), verilog_path=[str(build.HW_DIR)],
                                      build_dir=str(tmp), args=args, cargs=PV_CARGS, quiet=True,
                                      gen_only=False)
                finally:
                    if old is None:
                        os.environ.pop("MAKEFLAGS", None)
                    else:
                        os.environ["MAKEFLAGS"] = old
            except PimError:
                raise
            except Exception as exc:  # subprocess.CalledProcessError and friends
                raise PimBuildError(f"pyverilator build of hw/{top}.v failed: {exc}") from exc
            tmp.rename(out)
    return PyVerilator(str(so))


def _to_int(words: np.ndarray) -> int:
    return int.from_bytes(np.ascontiguousarray(words, dtype="<u4").tobytes(), "little")


def _from_int(value: int, lanes: int) -> np.ndarray:
    return np.frombuffer(value.to_bytes(4 * lanes, "little"), dtype="<u4").astype(np.uint32)


class LaneRtl:
    """pim_lane_array: LANES lanes, one lane op on whole columns."""

    def __init__(self, lanes: int = isa.LANES):
        self.lanes = lanes
        self.sim = build_sim("pim_lane_array", {"LANES": lanes})

    def compute(self, name: str, a, b=None, c=None, dtype: int = isa.F32) -> np.ndarray:
        """Lane op `name` (isa.ALL_LANE_OPS) with dtype (isa.DTYPES) on 32-bit lane words."""
        a = np.asarray(a, np.uint32).ravel()
        b = np.zeros_like(a) if b is None else np.asarray(b, np.uint32).ravel()
        c = np.zeros_like(a) if c is None else np.asarray(c, np.uint32).ravel()
        n = a.size
        pad = (-n) % self.lanes
        a, b, c = (np.concatenate([v, np.zeros(pad, np.uint32)]) for v in (a, b, c))
        sim = self.sim
        sim["op"] = isa.ALL_LANE_OPS[name]
        sim["dtype"] = dtype
        out = []
        for i in range(0, a.size, self.lanes):
            s = slice(i, i + self.lanes)
            sim["a"] = _to_int(a[s])
            sim["b"] = _to_int(b[s])
            sim["c"] = _to_int(c[s])
            out.append(_from_int(sim["y"], self.lanes))
        return np.concatenate(out)[:n]


class PimRtl(Backend):
    """pim_top under pyverilator, driven one clock at a time through its ports."""

    name = "pyverilator"

    def __init__(self, rows: int = DEFAULT_ROWS, cols: int = DEFAULT_COLS, lanes: int = isa.LANES):
        super().__init__(rows, cols, lanes)
        self.sim = build_sim("pim_top", {"LANES": lanes, "ROWS": rows, "COLS": cols})
        self.cycles_driven = 0
        sim = self.sim
        sim["rst_n"] = 0
        self.tick()
        self.tick()
        sim["rst_n"] = 1
        sim["mode"] = 0
        self.tick()

    def tick(self) -> None:
        self.sim["clk"] = 1
        self.sim["clk"] = 0
        self.cycles_driven += 1

    def set_mode(self, mode: int) -> None:
        """mode is registered in pim_top: it acts from the clock after it changes."""
        if self.sim["mode"] != mode:
            self.sim["mode"] = mode
            self.tick()

    def reset(self) -> None:
        self.sim["rst_n"] = 0
        self.tick()
        self.sim["rst_n"] = 1
        self.tick()

    def _set_cfg(self, sel, idx, value):
        sim = self.sim
        sim["cfg_sel"] = sel
        sim["cfg_idx"] = idx
        sim["cfg_wdata"] = value
        sim["cfg_we"] = 1
        self.tick()
        sim["cfg_we"] = 0

    def _write_bank(self, col, data):
        sim = self.sim
        self.set_mode(0)
        sim["h_we"] = 1
        sim["h_en"] = 1
        for i, row in enumerate(data):
            sim["h_addr"] = col + i
            sim["h_wdata"] = _to_int(row)
            self.tick()
            if sim["h_err"]:
                raise PimError(f"host write to column {col + i} refused by the bank")
        sim["h_en"] = 0
        sim["h_we"] = 0

    def _read_bank(self, col, n):
        sim = self.sim
        self.set_mode(0)
        sim["h_we"] = 0
        sim["h_en"] = 1
        out = np.zeros((n, self.lanes), np.uint32)
        for i in range(n):
            sim["h_addr"] = col + i
            self.tick()
            if not sim["h_rvalid"]:
                raise PimError(f"host read of column {col + i} refused by the bank")
            out[i] = _from_int(sim["h_rdata"], self.lanes)
        sim["h_en"] = 0
        return out

    def _run(self, max_cycles):
        sim = self.sim
        self.set_mode(1)
        sim["start"] = 1
        self.tick()
        sim["start"] = 0
        n = 0
        while sim["busy"]:
            if n >= max_cycles:
                pc = sim["pc"]
                self.reset()   # abandon the program
                return n, -1, pc
            self.tick()
            n += 1
        return sim["cycles"], sim["err_code"], sim["err_pc"]

"""One host kernel: a (conv/linear layer, phase, output-channel group) and its timing model.

    from pimrt.host import HostWork, load_host_part
    work = HostWork(layer, 32, "forward", channel_range=(0, 64), part="v100")
    work.compute_cycles(None, mem_tck_ns=part.timing["tCK"])     # memory clock cycles
    reqs = work.requests(tensors, request_bytes=64)              # addr (uint64), op (uint8)
    for piece in work.chunks(8, tensors, mem_tck_ns=1.0):        # HostChunk(requests, ...)
        ...

See docs/host_model.md.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterator, Mapping

import numpy as np

from pimrt.errors import ConfigError
from pimrt.host import stream_cache
from pimrt.host.algorithm import KernelTime, kernel_time
from pimrt.host.gemm import (ConvGeom, GemmShape, check_range, conv_geom, gemm_shape,
                             normalise_phase)
from pimrt.host.part import HostPart, load_host_part
from pimrt.host.traffic import PHASE_ROLES, REQUEST_DTYPE, Plan, StreamBuilder


@dataclasses.dataclass
class HostChunk:
    """A piece of a work's request stream and the compute cycles that go with it."""

    requests: np.ndarray
    compute_cycles: int
    rows: tuple[int, int]          # tile rows [first, last) of the work it covers


class HostWork:
    """A host kernel: ``layer`` (conv or linear) at ``batch`` for ``phase`` ("forward",
    "backward_data", "backward_weight") on output-channel group ``channel_range=(lo, hi)``
    (see :func:`pimrt.host.gemm_shape` for the conventions).

    ``accumulate``: the kernel adds into its output (each output line is read before it is
    written). Default: True for backward_data groups with ``lo > 0`` (dX accumulates over the
    dY channel groups), else False (set it for dW accumulation over micro-batches).
    ``measured_ms``: a measured kernel time that replaces the modelled compute (see
    :meth:`measure`).
    """

    def __init__(self, layer, batch: int | None, phase: str, channel_range=None,
                 part: str | HostPart = "v100", accumulate: bool | None = None,
                 measured_ms: float | None = None):
        self.layer = layer
        self.geom: ConvGeom = layer if isinstance(layer, ConvGeom) else conv_geom(layer, batch)
        self.batch = self.geom.n
        self.phase = normalise_phase(phase)
        self.channel_range = check_range(self.geom, channel_range)
        self.part = load_host_part(part)
        if accumulate is None:
            accumulate = self.phase == "backward_data" and self.channel_range[0] > 0
        self.accumulate = bool(accumulate)
        self.measured_ms = measured_ms
        self.gemm: GemmShape = gemm_shape(self.geom, None, self.phase, self.channel_range)
        self._cache = None

    def __repr__(self) -> str:
        lo, hi = self.channel_range
        return (f"HostWork({self.geom.name!r}, {self.phase}, channels {lo}..{hi}, "
                f"M N K = {self.gemm.m} {self.gemm.n} {self.gemm.k})")

    @property
    def flops(self) -> int:
        return self.gemm.flops

    @property
    def executed_flops(self) -> float:
        """FLOPs the modelled algorithm executes (Winograd's are fewer than :attr:`flops`; the
        zero taps a strided backward_data pays for are more)."""
        return self.kernel_time().flops

    @property
    def roles(self) -> tuple[str, str, str]:
        """Tensor roles ``requests`` needs: (A operand, B operand, output)."""
        return PHASE_ROLES[self.phase]

    # -- compute -------------------------------------------------------------------------------
    def kernel_time(self, part: HostPart | str | None = None) -> KernelTime:
        """The modelled kernel: the algorithm the library would pick and its time by part
        (pimrt.host.algorithm)."""
        p = self.part if part is None else load_host_part(part)
        return kernel_time(self.geom, self.phase, self.channel_range, p)

    def launch(self, part: HostPart | str | None = None) -> dict:
        """The modelled launch: algorithm, tile, tiles, split-K factor, CTAs, waves."""
        kt = self.kernel_time(part)
        return dict(kt.launch, algorithm=kt.algorithm)

    def model_seconds(self, part: HostPart | str | None = None) -> float:
        """Modelled kernel time: main loops, transforms and the fixed cost per kernel (the
        DRAM traffic is timed apart, by memctl)."""
        return self.kernel_time(part).seconds

    def compute_seconds(self, part: HostPart | str | None = None) -> float:
        """The measured time when set (``measured_ms``), else the model."""
        if self.measured_ms is not None:
            return self.measured_ms * 1e-3
        return self.model_seconds(part)

    def compute_cycles(self, part: HostPart | str | None, mem_tck_ns: float) -> int:
        """Compute time in memory clock cycles (``mem_tck_ns`` per cycle), rounded up.
        ``part`` None: the work's own part."""
        if not mem_tck_ns or mem_tck_ns <= 0:
            raise ConfigError(f"mem_tck_ns must be > 0, found {mem_tck_ns!r}")
        return math.ceil(self.compute_seconds(part) * 1e9 / mem_tck_ns - 1e-9)

    def overhead_cycles(self, part: HostPart | str | None, mem_tck_ns: float) -> int:
        """The fixed cost per kernel in memory cycles, part of :meth:`compute_cycles`; the
        runtime puts it before the kernel's first request (no request issues during a launch).
        0 with a measured time (it holds the overhead already)."""
        if self.measured_ms is not None:
            return 0
        p = self.part if part is None else load_host_part(part)
        return min(self.compute_cycles(part, mem_tck_ns),
                   math.ceil(p.kernel_overhead_s * 1e9 / mem_tck_ns - 1e-9))

    def host_cycles(self, part: HostPart | str | None = None) -> int:
        """Compute time in host clock cycles."""
        p = self.part if part is None else load_host_part(part)
        return math.ceil(self.compute_seconds(p) * p.clock_ghz * 1e9 - 1e-9)

    def measure(self, device="cuda", warmup: int = 3, repeats: int = 10) -> float | None:
        """Time the real kernel on ``device`` (CUDA only); stores and returns milliseconds,
        or None (model kept) without a GPU."""
        from pimrt.host.measure import measure_compute_ms
        ms = measure_compute_ms(self.geom, self.batch, self.phase, self.channel_range, device,
                                warmup=warmup, repeats=repeats)
        if ms is not None:
            self.measured_ms = ms
        return ms

    # -- memory --------------------------------------------------------------------------------
    def _builder(self, tensors, request_bytes) -> StreamBuilder:
        lo, hi = self.channel_range
        return StreamBuilder(self.geom, self.phase, lo, hi, self.part, tensors, request_bytes,
                             self.accumulate)

    def plan(self, tensors: Mapping, request_bytes: int = 64) -> Plan:
        """The tiling and L2 decisions the request stream uses."""
        return self._builder(tensors, request_bytes).plan

    def iter_requests(self, tensors: Mapping,
                      request_bytes: int = 64) -> Iterator[np.ndarray]:
        """The request stream in blocks (each a REQUEST_DTYPE array), without holding it all."""
        for req, _ in self._builder(tensors, request_bytes).generate():
            yield req

    def _stream(self, tensors, request_bytes):
        key = (request_bytes, tuple(sorted((r, (int(v[0]), tuple(v[1]), int(v[2])))
                                           for r, v in tensors.items())))
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1], self._cache[2]
        kernel = (self.geom, self.phase, self.channel_range, self.accumulate, self.part, key)
        kept = stream_cache.get(kernel)
        if kept is not None:
            reqs, rows = kept[0].view(REQUEST_DTYPE), kept[1]
        else:
            b = self._builder(tensors, request_bytes)
            blocks, starts, n = [], [], 0
            for req, offs in b.generate():
                blocks.append(req)
                starts.append(offs + n)
                n += len(req)
            reqs = np.concatenate(blocks) if blocks else np.zeros(0, REQUEST_DTYPE)
            rows = np.concatenate(starts) if starts else np.zeros(0, np.int64)
            del blocks, starts
            stream_cache.put(kernel, reqs, rows)
        self._cache = (key, reqs, rows)
        return reqs, rows

    def requests(self, tensors: Mapping, request_bytes: int = 64) -> np.ndarray:
        """DRAM requests (``addr`` request-aligned uint64, ``op`` 0 read / 1 write) in issue
        order, after the L2 filter. ``tensors``: role -> (base_addr, shape NCHW, dtype bytes)
        for the roles of :attr:`roles`."""
        return self._stream(tensors, request_bytes)[0]

    def dram_bytes(self, tensors: Mapping, request_bytes: int = 64) -> dict[str, int]:
        """Bytes read and written by the stream."""
        r = self.requests(tensors, request_bytes)
        w = int(np.count_nonzero(r["op"]))
        return {"read": (len(r) - w) * request_bytes, "write": w * request_bytes,
                "total": len(r) * request_bytes}

    def chunks(self, n: int, tensors: Mapping, mem_tck_ns: float, request_bytes: int = 64,
               part: HostPart | str | None = None) -> list[HostChunk]:
        """The stream split at tile-row boundaries into ``n`` pieces of (nearly) equal rows,
        each with its share of the compute cycles (rows are equal work; the shares add up to
        :meth:`compute_cycles`). Pieces past the number of rows are empty with 0 cycles."""
        if not isinstance(n, int) or n <= 0:
            raise ConfigError(f"chunks: n must be a positive integer, found {n!r}")
        reqs, rows = self._stream(tensors, request_bytes)
        total = self.compute_cycles(part, mem_tck_ns)
        nrows = len(rows)
        bounds = [nrows * i // n for i in range(n + 1)]
        out = []
        for i in range(n):
            r0, r1 = bounds[i], bounds[i + 1]
            a = int(rows[r0]) if r0 < nrows else len(reqs)
            b = int(rows[r1]) if r1 < nrows else len(reqs)
            c0 = total * r0 // nrows if nrows else 0
            c1 = total * r1 // nrows if nrows else 0
            if i == n - 1:
                c1 = total
                b = len(reqs)
            out.append(HostChunk(reqs[a:b], int(c1 - c0), (r0, r1)))
        return out

"""Host side of pimrt's co-execution timing model: CONV and linear layers on the host GPU.

- :func:`load_host_part` -> :class:`HostPart` (TOML files in ``pimrt/host/parts/``)
- :func:`gemm_shape` -> :class:`GemmShape` (M, N, K of a layer, phase and channel group)
- :class:`HostWork`: compute cycles, the DRAM request stream after an L2 model, chunks
- :func:`measure_compute_ms`: the real kernel time on a GPU (None on CPU)

See docs/host_model.md.
"""
from pimrt.host.gemm import PHASES, ConvGeom, GemmShape, conv_geom, gemm_shape
from pimrt.host.measure import cuda_available, measure_compute_ms
from pimrt.host.part import (HOST_PARTS_DIR, HostPart, list_host_parts, load_host_part)
from pimrt.host.traffic import PHASE_ROLES, REQUEST_DTYPE, Plan
from pimrt.host.work import HostChunk, HostWork

__all__ = ["PHASES", "PHASE_ROLES", "REQUEST_DTYPE", "ConvGeom", "GemmShape", "HOST_PARTS_DIR",
           "HostChunk", "HostPart", "HostWork", "Plan", "conv_geom", "cuda_available",
           "gemm_shape", "list_host_parts", "load_host_part", "measure_compute_ms"]

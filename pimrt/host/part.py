"""Host parts: the GPU that runs CONV and linear layers, as a TOML file.

    part = load_host_part("v100")                  # a shipped part, by name or file stem
    part = load_host_part("my_gpu.toml", overrides={"l2": {"size_bytes": 1 << 20}})
    part.peak_flops, part.l2_usable_bytes, part.slots

A host part file has the tables [host], [compute], [l2], [gemm], [memory] and optionally
[energy] (see docs/host_model.md, docs/energy.md). Every problem raises :class:`pimrt.errors.ConfigError` naming the file
and the parameter (``v100.toml: [l2] size_bytes: must be > 0, found 0``).
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import pathlib
from typing import Any, Mapping

from pimrt.errors import ConfigError

HOST_PARTS_DIR = pathlib.Path(__file__).resolve().parent / "parts"

#: short names of the shipped host parts -> file name in HOST_PARTS_DIR
HOST_PART_ALIASES = {"v100": "v100.toml", "v100_tc": "v100_tc.toml", "a100": "a100.toml"}

_REQUIRED = object()

# table -> key -> (kind, default). kinds: "str"; "count" (int > 0); "float+" (> 0);
# "float0" (>= 0); "frac" (0 < x <= 1)
SCHEMA: dict[str, dict[str, tuple[str, Any]]] = {
    "host": {"name": ("str", None), "description": ("str", "")},
    "compute": {
        "peak_tflops": ("float+", _REQUIRED),
        "sms": ("count", _REQUIRED),
        "clock_ghz": ("float+", _REQUIRED),
        "efficiency": ("frac", _REQUIRED),        # implicit-GEMM forward, main tile, full wave
        "dgrad_efficiency": ("frac", _REQUIRED),  # the same for backward_data
        "wgrad_efficiency": ("frac", _REQUIRED),  # the same for backward_weight
        "ctas_per_sm": ("count", 1),
        "k_fill_steps": ("float0", _REQUIRED),    # K steps a CTA spends filling its pipeline
        "kernel_overhead_us": ("float0", _REQUIRED),  # fixed cost per kernel
        "max_split_k": ("count", _REQUIRED),      # most K splits of one GEMM
        "strided_dgrad_zero_cost": ("float0", _REQUIRED),  # see pimrt.host.algorithm
        # the training precisions its CONVs are calibrated for (pimrt.graph.precision): "fp32"
        # (CUDA cores), "amp-fp16" / "amp-bf16" (Tensor Cores on 16-bit operands)
        "precisions": ("precisions", ("fp32",)),
    },
    "l2": {
        "size_bytes": ("count", _REQUIRED),
        "line_bytes": ("count", _REQUIRED),
        "sector_bytes": ("count", _REQUIRED),
        "usable_fraction": ("frac", 1.0),
    },
    "gemm": {
        "tile_m": ("count", _REQUIRED),
        "tile_n": ("count", _REQUIRED),
        "tile_k": ("count", _REQUIRED),
        # candidate CTA tiles [tile_m, tile_n, CTAs per SM]; default: the main tile alone
        "tiles": ("tiles", None),
        "tile_intensity": ("float0", _REQUIRED),  # c of a smaller tile's share of peak
    },
    # Winograd kernels for r x r stride-1 convs (docs/host_model.md); without the table, none
    "winograd": {
        "tile": ("count", _REQUIRED),             # m of F(m x m, r x r)
        "filters": ("sizes", _REQUIRED),          # the r it takes
        "efficiency": ("frac", _REQUIRED),        # share of peak of its batched GEMMs
    },
    # Tensor-Core kernels need channel counts in multiples of channel_multiple (cuDNN 7);
    # others run on a slower path (docs/host_model.md); without the table, no such rule
    "tensor_cores": {
        "channel_multiple": ("count", _REQUIRED),
        "unaligned_efficiency": ("frac", _REQUIRED),  # share of peak on the slower path
    },
    "memory": {
        "loaded_latency_ns": ("float+", _REQUIRED),
        "peak_gbs": ("float+", _REQUIRED),        # the GPU's own memory, GB/s
        "stream_fraction": ("frac", _REQUIRED),   # what a streaming kernel reaches of a peak
    },
    # energy (docs/energy.md); a part without the table reports its energy as unavailable
    "energy": {
        "fp32_pj_per_flop": ("float+", _REQUIRED),
        "tensor_pj_per_flop": ("float+", _REQUIRED),
        "flops": ("str", "fp32"),            # which of the two this part's CONVs run on
        "io_pj_per_byte": ("float+", _REQUIRED),  # a byte over the memory interface
        "static_w": ("float0", _REQUIRED),   # drawn whatever the GPU does
    },
}
OPTIONAL_TABLES = {"energy", "winograd", "tensor_cores"}
FLOP_KINDS = ("fp32", "tensor")


@dataclasses.dataclass(frozen=True)
class HostPart:
    """One validated host part (a GPU). Times in seconds unless named otherwise."""

    name: str
    description: str
    path: pathlib.Path | None
    peak_tflops: float
    sms: int
    clock_ghz: float
    efficiency: float
    ctas_per_sm: int
    kernel_overhead_us: float
    dgrad_efficiency: float
    wgrad_efficiency: float
    k_fill_steps: float
    max_split_k: int
    strided_dgrad_zero_cost: float
    l2_bytes: int
    l2_line_bytes: int
    l2_sector_bytes: int
    l2_usable_fraction: float
    tile_m: int
    tile_n: int
    tile_k: int
    tiles: tuple            # ((tile_m, tile_n, CTAs per SM), ...)
    tile_intensity: float
    winograd_tile: int      # 0: no Winograd kernels
    winograd_filters: tuple
    winograd_efficiency: float
    channel_multiple: int           # 1: any channel count runs at full speed
    unaligned_efficiency: float
    loaded_latency_ns: float
    peak_gbs: float
    stream_fraction: float
    precisions: tuple = ("fp32",)
    #: [energy] as (key, value) pairs (hashable, as the part is); () when the file has none
    energy_items: tuple = ()

    @property
    def energy(self) -> dict | None:
        """[energy]: energy per FLOP (fp32, Tensor Core), per byte of I/O, static power."""
        return dict(self.energy_items) if self.energy_items else None

    @property
    def pj_per_flop(self) -> float | None:
        """Energy of one of this part's CONV FLOPs (fp32 or Tensor Core, [energy] flops)."""
        if self.energy is None:
            return None
        return self.energy[f"{self.energy['flops']}_pj_per_flop"]

    @property
    def peak_flops(self) -> float:
        """Peak FLOP/s (1 FMA = 2 FLOP)."""
        return self.peak_tflops * 1e12

    @property
    def sustained_flops(self) -> float:
        """peak_flops x efficiency: what a full wave of CTAs achieves."""
        return self.peak_flops * self.efficiency

    @property
    def kernel_overhead_s(self) -> float:
        return self.kernel_overhead_us * 1e-6

    @property
    def stream_bytes_per_s(self) -> float:
        """What a streaming kernel moves a second on the GPU's own memory: peak_gbs x
        stream_fraction."""
        return self.peak_gbs * 1e9 * self.stream_fraction

    @property
    def slots(self) -> int:
        """CTAs running at once: sms x ctas_per_sm."""
        return self.sms * self.ctas_per_sm

    def outstanding(self, part) -> int:
        """Requests the host keeps in flight on memory part `part` (Little's law): the part's
        peak bandwidth x this host's loaded memory latency / the part's request size."""
        return max(1, math.ceil(part.peak_bandwidth_gbs * self.loaded_latency_ns
                                / part.request_bytes))

    @property
    def l2_usable_bytes(self) -> int:
        """L2 bytes the tile-block model may fill: size_bytes x usable_fraction."""
        return int(self.l2_bytes * self.l2_usable_fraction)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["path"] = str(self.path) if self.path else None
        d.pop("energy_items")
        d["energy"] = self.energy
        return d


def list_host_parts() -> dict[str, pathlib.Path]:
    """Shipped host parts: name -> file."""
    return {name: HOST_PARTS_DIR / f for name, f in HOST_PART_ALIASES.items()}


def resolve_host_part_path(name_or_path: str | pathlib.Path) -> pathlib.Path:
    s = str(name_or_path)
    if s.lower() in HOST_PART_ALIASES:
        return HOST_PARTS_DIR / HOST_PART_ALIASES[s.lower()]
    p = pathlib.Path(s)
    if p.suffix == "" and (HOST_PARTS_DIR / f"{s}.toml").is_file():
        return HOST_PARTS_DIR / f"{s}.toml"
    if p.is_file():
        return p
    msg = f"no host part {s!r}: not a shipped part ({', '.join(HOST_PART_ALIASES)}) nor a file"
    close = difflib.get_close_matches(s.lower(), list(HOST_PART_ALIASES), n=1)
    if close:
        msg += f"; did you mean {close[0]!r}?"
    raise ConfigError(msg)


def load_host_part(name_or_path: str | pathlib.Path | HostPart,
                   overrides: Mapping[str, Mapping[str, Any]] | None = None) -> HostPart:
    """Load and validate a host part by shipped name (``v100``, ``a100``) or TOML path.

    ``overrides`` is ``{table: {key: value}}`` applied over the file (validated the same way).
    A :class:`HostPart` passed in is returned as is (with overrides applied if given).
    """
    if isinstance(name_or_path, HostPart):
        if not overrides:
            return name_or_path
        path = name_or_path.path or pathlib.Path(name_or_path.name)
        data = _to_tables(name_or_path)
    else:
        path = resolve_host_part_path(name_or_path)
        from pimrt.tomlfile import read_toml
        data = read_toml(path)
    where = path.name
    for table, values in data.items():
        if table not in SCHEMA:
            raise ConfigError(_unknown(where, "table", table, SCHEMA))
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: [{table}] must be a table, found {values!r}")
        for key in values:
            if key not in SCHEMA[table]:
                raise ConfigError(_unknown(f"{where}: [{table}]", "parameter", key, SCHEMA[table]))
    merged = {t: dict(data.get(t, {})) for t in SCHEMA}
    for table, values in (overrides or {}).items():
        if table not in SCHEMA:
            raise ConfigError(_unknown("overrides", "table", table, SCHEMA))
        for key, value in values.items():
            if key not in SCHEMA[table]:
                raise ConfigError(_unknown(f"overrides: [{table}]", "parameter", key,
                                           SCHEMA[table]))
            merged[table][key] = value
    v: dict[str, dict[str, Any]] = {}
    for table, keys in SCHEMA.items():
        if table in OPTIONAL_TABLES and not merged[table]:
            v[table] = None
            continue
        v[table] = {}
        for key, (kind, default) in keys.items():
            label = f"{where}: [{table}] {key}"
            if key not in merged[table]:
                if default is _REQUIRED:
                    raise ConfigError(f"{label}: missing (required)")
                v[table][key] = default
                continue
            v[table][key] = _check(label, kind, merged[table][key])
    name = v["host"]["name"] or path.stem
    if v["energy"] is not None and v["energy"]["flops"] not in FLOP_KINDS:
        raise ConfigError(f"{where}: [energy] flops: {v['energy']['flops']!r} is not one of "
                          f"{', '.join(FLOP_KINDS)}")
    tiles = v["gemm"]["tiles"] or ((v["gemm"]["tile_m"], v["gemm"]["tile_n"],
                                     v["compute"]["ctas_per_sm"]),)
    wino, tc = v["winograd"], v["tensor_cores"]
    return HostPart(
        name=name, description=v["host"]["description"], path=path,
        peak_tflops=v["compute"]["peak_tflops"], sms=v["compute"]["sms"],
        clock_ghz=v["compute"]["clock_ghz"], efficiency=v["compute"]["efficiency"],
        ctas_per_sm=v["compute"]["ctas_per_sm"],
        kernel_overhead_us=v["compute"]["kernel_overhead_us"],
        dgrad_efficiency=v["compute"]["dgrad_efficiency"],
        wgrad_efficiency=v["compute"]["wgrad_efficiency"],
        k_fill_steps=v["compute"]["k_fill_steps"],
        max_split_k=v["compute"]["max_split_k"],
        strided_dgrad_zero_cost=v["compute"]["strided_dgrad_zero_cost"],
        l2_bytes=v["l2"]["size_bytes"], l2_line_bytes=v["l2"]["line_bytes"],
        l2_sector_bytes=v["l2"]["sector_bytes"], l2_usable_fraction=v["l2"]["usable_fraction"],
        tile_m=v["gemm"]["tile_m"], tile_n=v["gemm"]["tile_n"], tile_k=v["gemm"]["tile_k"],
        tiles=tiles, tile_intensity=v["gemm"]["tile_intensity"],
        winograd_tile=wino["tile"] if wino else 0,
        winograd_filters=tuple(wino["filters"]) if wino else (),
        winograd_efficiency=wino["efficiency"] if wino else 0.0,
        channel_multiple=tc["channel_multiple"] if tc else 1,
        unaligned_efficiency=tc["unaligned_efficiency"] if tc else 1.0,
        loaded_latency_ns=v["memory"]["loaded_latency_ns"],
        peak_gbs=v["memory"]["peak_gbs"], stream_fraction=v["memory"]["stream_fraction"],
        energy_items=tuple(v["energy"].items()) if v["energy"] is not None else (),
        precisions=v["compute"]["precisions"],
    )


def _to_tables(p: HostPart) -> dict:
    return {
        "host": {"name": p.name, "description": p.description},
        "compute": {"peak_tflops": p.peak_tflops, "sms": p.sms, "clock_ghz": p.clock_ghz,
                    "efficiency": p.efficiency, "ctas_per_sm": p.ctas_per_sm,
                    "kernel_overhead_us": p.kernel_overhead_us,
                    "dgrad_efficiency": p.dgrad_efficiency, "wgrad_efficiency": p.wgrad_efficiency,
                    "k_fill_steps": p.k_fill_steps, "max_split_k": p.max_split_k,
                    "strided_dgrad_zero_cost": p.strided_dgrad_zero_cost,
                    "precisions": list(p.precisions)},
        "l2": {"size_bytes": p.l2_bytes, "line_bytes": p.l2_line_bytes,
               "sector_bytes": p.l2_sector_bytes, "usable_fraction": p.l2_usable_fraction},
        "gemm": {"tile_m": p.tile_m, "tile_n": p.tile_n, "tile_k": p.tile_k,
                 "tiles": [list(t) for t in p.tiles], "tile_intensity": p.tile_intensity},
        "winograd": ({"tile": p.winograd_tile, "filters": list(p.winograd_filters),
                      "efficiency": p.winograd_efficiency} if p.winograd_tile else {}),
        "tensor_cores": ({"channel_multiple": p.channel_multiple,
                          "unaligned_efficiency": p.unaligned_efficiency}
                         if p.channel_multiple > 1 else {}),
        "memory": {"loaded_latency_ns": p.loaded_latency_ns, "peak_gbs": p.peak_gbs,
                   "stream_fraction": p.stream_fraction},
        "energy": p.energy or {},
    }


def _check(label: str, kind: str, value: Any) -> Any:
    if kind == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{label}: must be a string, found {value!r}")
        return value
    if kind == "tiles":
        if not isinstance(value, list) or not value or not all(
                isinstance(t, list) and len(t) == 3 and all(
                    isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in t)
                for t in value):
            raise ConfigError(f"{label}: must be a non-empty list of [tile_m, tile_n, "
                              f"ctas_per_sm] with positive integers, found {value!r}")
        return tuple(tuple(t) for t in value)
    if kind == "precisions":
        known = ("fp32", "amp-fp16", "amp-bf16")
        if not isinstance(value, list) or not value or any(x not in known for x in value):
            raise ConfigError(f"{label}: must be a non-empty list of precisions from "
                              f"{', '.join(known)}, found {value!r}")
        return tuple(value)
    if kind == "sizes":
        if not isinstance(value, list) or not value or not all(
                isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in value):
            raise ConfigError(f"{label}: must be a non-empty list of positive integers, "
                              f"found {value!r}")
        return tuple(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{label}: must be a number, found {value!r}")
    if kind == "count":
        if not isinstance(value, int) and not (isinstance(value, float) and value.is_integer()):
            raise ConfigError(f"{label}: must be a positive integer, found {value!r}")
        if value <= 0:
            raise ConfigError(f"{label}: must be > 0, found {value!r}")
        return int(value)
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ConfigError(f"{label}: must be finite, found {value!r}")
    if kind == "float+" and value <= 0:
        raise ConfigError(f"{label}: must be > 0, found {value!r}")
    if kind == "float0" and value < 0:
        raise ConfigError(f"{label}: must be >= 0, found {value!r}")
    if kind == "frac" and not 0 < value <= 1:
        raise ConfigError(f"{label}: must be in (0, 1], found {value!r}")
    return value


def _unknown(where: str, what: str, name: str, known) -> str:
    msg = f"{where}: unknown {what} {name!r}"
    close = difflib.get_close_matches(name, list(known), n=1)
    if close:
        msg += f"; did you mean {close[0]!r}?"
    return msg + f" (known: {', '.join(known)})"

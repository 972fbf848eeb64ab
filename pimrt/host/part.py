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
        "efficiency": ("frac", _REQUIRED),
        "ctas_per_sm": ("count", 1),
        "kernel_overhead_us": ("float0", 0.0),
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
    },
    "memory": {"loaded_latency_ns": ("float+", _REQUIRED)},
    # energy (docs/energy.md); a part without the table reports its energy as unavailable
    "energy": {
        "fp32_pj_per_flop": ("float+", _REQUIRED),
        "tensor_pj_per_flop": ("float+", _REQUIRED),
        "flops": ("str", "fp32"),            # which of the two this part's CONVs run on
        "io_pj_per_byte": ("float+", _REQUIRED),  # a byte over the memory interface
        "static_w": ("float0", _REQUIRED),   # drawn whatever the GPU does
    },
}
OPTIONAL_TABLES = {"energy"}
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
    l2_bytes: int
    l2_line_bytes: int
    l2_sector_bytes: int
    l2_usable_fraction: float
    tile_m: int
    tile_n: int
    tile_k: int
    loaded_latency_ns: float
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
    return HostPart(
        name=name, description=v["host"]["description"], path=path,
        peak_tflops=v["compute"]["peak_tflops"], sms=v["compute"]["sms"],
        clock_ghz=v["compute"]["clock_ghz"], efficiency=v["compute"]["efficiency"],
        ctas_per_sm=v["compute"]["ctas_per_sm"],
        kernel_overhead_us=v["compute"]["kernel_overhead_us"],
        l2_bytes=v["l2"]["size_bytes"], l2_line_bytes=v["l2"]["line_bytes"],
        l2_sector_bytes=v["l2"]["sector_bytes"], l2_usable_fraction=v["l2"]["usable_fraction"],
        tile_m=v["gemm"]["tile_m"], tile_n=v["gemm"]["tile_n"], tile_k=v["gemm"]["tile_k"],
        loaded_latency_ns=v["memory"]["loaded_latency_ns"],
        energy_items=tuple(v["energy"].items()) if v["energy"] is not None else (),
    )


def _to_tables(p: HostPart) -> dict:
    return {
        "host": {"name": p.name, "description": p.description},
        "compute": {"peak_tflops": p.peak_tflops, "sms": p.sms, "clock_ghz": p.clock_ghz,
                    "efficiency": p.efficiency, "ctas_per_sm": p.ctas_per_sm,
                    "kernel_overhead_us": p.kernel_overhead_us},
        "l2": {"size_bytes": p.l2_bytes, "line_bytes": p.l2_line_bytes,
               "sector_bytes": p.l2_sector_bytes, "usable_fraction": p.l2_usable_fraction},
        "gemm": {"tile_m": p.tile_m, "tile_n": p.tile_n, "tile_k": p.tile_k},
        "memory": {"loaded_latency_ns": p.loaded_latency_ns},
        "energy": p.energy or {},
    }


def _check(label: str, kind: str, value: Any) -> Any:
    if kind == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{label}: must be a string, found {value!r}")
        return value
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

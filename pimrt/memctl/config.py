"""Memory part configuration: load, merge and validate a part's TOML file.

    part = load_part("hbm2")                       # a shipped part, by name or file stem
    part = load_part("my_part.toml", overrides={"timing": {"tCCD_L": 4}})
    part.timing["tRCDRD"], part.request_bytes, part.address_fields()
    fields = decode_address(part, numpy_array_of_addresses)

A part file has the tables [part], [organization], [timing], [controller] and optionally [pim],
[power] (the DRAM currents of DRAMsim3's energy model, docs/energy.md) and [pim_energy] (see
docs/memctl.md "Parts"). `include = "other.toml"` (relative to the including file) loads
another file first; the including file's tables override it key by key. Every problem raises
pimrt.errors.ConfigError naming the file and the parameter.

Address mapping (the C model implements the same): a byte address is, lsb first, a byte offset
inside one request (log2(request_bytes) bits), then the fields of the mapping string from its
last to its first (msb..lsb order in the string). Field widths follow DRAMsim3: log2 of the
count for ch, pc, ra, bg, ba, ro; co = log2(physical_columns) - log2(burst_length), where
physical_columns is `columns` x 2 for HBM/HBM2 (DRAMsim3 counts HBM's 2n prefetch) and
`columns` x burst_length for GDDR5/5X/6, `columns` otherwise. Bits above the mapped fields are
ignored (the address wraps, as in DRAMsim3). The decoded column is in request (burst) units.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import pathlib
import types
from typing import Any, Iterable, Mapping

import numpy as np

from pimrt.errors import ConfigError

PARTS_DIR = pathlib.Path(__file__).resolve().parent / "parts"

#: short names of the shipped parts -> file name in PARTS_DIR
PART_ALIASES = {
    "hbm2": "hbm2.toml",
    "ddr4": "ddr4_3200.toml",
    "hbm2_pim": "hbm2_pim.toml",
    "v100_hbm2_pim": "v100_hbm2_pim.toml",
}

# ---------------------------------------------------------------------------------------------
# schema: table -> key -> (kind, default); default _REQUIRED means the key must be given
# kinds: "str", "bool", "count" (int > 0), "cycles" (int >= 0), "pcycles" (int > 0),
# "float+" (> 0)
_REQUIRED = object()
_DERIVED = object()  # optional in the file, computed when absent

SCHEMA: dict[str, dict[str, tuple[str, Any]]] = {
    "part": {
        "name": ("str", _DERIVED),       # default: the file's stem
        "standard": ("str", _REQUIRED),  # DDR3, DDR4, HBM, HBM2, GDDR5, ... (free text)
        "description": ("str", ""),
    },
    "organization": {
        "channels": ("count", _REQUIRED),
        "pseudo_channels": ("count", 1),
        "ranks": ("count", _REQUIRED),
        "bankgroups": ("count", _REQUIRED),
        "banks_per_group": ("count", _REQUIRED),
        "rows": ("count", _REQUIRED),
        "columns": ("count", _REQUIRED),
        "device_width": ("count", _REQUIRED),
        "bus_width": ("count", _REQUIRED),
        "burst_length": ("count", _REQUIRED),
    },
    "timing": {
        "tCK": ("float+", _REQUIRED),
        "CL": ("pcycles", _REQUIRED),
        "CWL": ("cycles", _REQUIRED),
        "tRCD": ("pcycles", None),          # shorthand: sets tRCDRD and tRCDWR
        "tRCDRD": ("pcycles", _DERIVED),
        "tRCDWR": ("pcycles", _DERIVED),
        "tRP": ("pcycles", _REQUIRED),
        "tRAS": ("pcycles", _REQUIRED),
        "tRC": ("pcycles", _DERIVED),       # default tRAS + tRP
        "tCCD_S": ("pcycles", _REQUIRED),
        "tCCD_L": ("pcycles", _REQUIRED),
        "tRRD_S": ("cycles", _REQUIRED),
        "tRRD_L": ("cycles", _REQUIRED),
        "tFAW": ("cycles", _REQUIRED),
        "tWR": ("cycles", _REQUIRED),
        "tWTR_S": ("cycles", _REQUIRED),
        "tWTR_L": ("cycles", _REQUIRED),
        "tRTP": ("cycles", _REQUIRED),
        "tRTRS": ("cycles", _REQUIRED),
        "tREFI": ("pcycles", _REQUIRED),
        "tRFC": ("pcycles", _REQUIRED),
        "tRFCb": ("pcycles", None),         # per-bank refresh (refresh = "bank"): < tRFC
        "tRREFD": ("cycles", None),         # per-bank refresh: REFB -> ACT / REFB other bank
    },
    "controller": {
        "address_mapping": ("str", "row_interleaved"),
        "row_policy": ("str", "open"),
        "scheduler": ("str", "frfcfs"),
        "arbitration": ("str", "round_robin"),        # among the banks' commands (ARBITRATIONS)
        "refresh": ("str", "rank"),
        "queue_depth": ("count", 32),
        "host_queue_depth": ("count", _DERIVED),      # the host's; default: queue_depth
        "bank_queue_depth": ("count", 8),             # commands queued per bank
        "dual_command_bus": ("bool", _DERIVED),       # row + column command in one cycle;
                                                      # default: true for HBM parts
        "row_hit_cap": ("count", 16),
        "write_high_watermark": ("count", _DERIVED),  # default 3/4 of queue_depth
        "write_low_watermark": ("cycles", _DERIVED),  # default 1/4 of queue_depth
    },
    "pim": {
        "units_per_bankgroup": ("count", 1),
        "mode_switch_cycles": ("cycles", _REQUIRED),
        "lanes": ("count", _REQUIRED),                # fp32 lanes per unit, a power of two
        "clock_ratio": ("float+", _DERIVED),          # unit clock / memory clock; default 1
        "clock_mhz": ("float+", None),                # or the unit clock: ratio = MHz x tCK
        "dtypes": ("dtypes", _DERIVED),               # what the lanes compute: "fp32" and
                                                      # "fp16", "bf16" (two a lane); default
                                                      # ["fp32"]
    },
    # DRAM energy (docs/energy.md): one device's supply voltage (V) and currents (mA), as in
    # DRAMsim3's ini files; a part without the table reports its energy as unavailable
    "power": {
        "VDD": ("float+", _REQUIRED),
        "IDD0": ("float+", _REQUIRED),     # one ACT-PRE cycle (tRC)
        "IDD2N": ("float+", _REQUIRED),    # precharged standby
        "IDD3N": ("float+", _REQUIRED),    # active standby
        "IDD4R": ("float+", _REQUIRED),    # burst read
        "IDD4W": ("float+", _REQUIRED),    # burst write
        "IDD5AB": ("float+", _REQUIRED),   # all-bank refresh
        "IDD5B": ("float+", None),         # per-bank refresh (needed with refresh = "bank")
    },
    # PIM energy (docs/energy.md): the bank's share of a column access (the rest is the I/O an
    # all-bank command does not use), each fp32 lane operation, the units' register files and
    # sequencer per unit clock cycle
    "pim_energy": {
        "column_share": ("fraction", _REQUIRED),
        "process_nm": ("count", _REQUIRED),        # the node the per-operation figures are for
        "add_pj": ("float+", _REQUIRED),
        "mul_pj": ("float+", _REQUIRED),
        "fma_pj": ("float+", _REQUIRED),
        "compare_pj": ("float+", _REQUIRED),
        "add16_pj": ("float+", None),              # the same for a 16-bit element (fp16,
        "mul16_pj": ("float+", None),              # bf16): needed by a step that runs
        "fma16_pj": ("float+", None),              # 16-bit lanes
        "compare16_pj": ("float+", None),
        "register_file_pj_per_cycle": ("float+", _REQUIRED),
        "sequencer_pj_per_cycle": ("float+", _REQUIRED),
    },
}
OPTIONAL_TABLES = {"pim", "power", "pim_energy"}

#: the C model (memctl/memctl.h) holds every integer of a part in a C int; its queues are
#: arrays it allocates per channel; its channels, ranks and banks per channel are bounded
INT_MAX = 2**31 - 1
MAX_QUEUE = 65536          # MC_MAX_QUEUE
MAX_CHANNELS = 64          # MC_MAX_CHANNELS (channels x pseudo_channels)
MAX_BANKS = 64             # MC_MAX_BANKS (ranks x bankgroups x banks_per_group)
MAX_RANKS = 8
MAX_ADDRESS_BITS = 62
MAX_REQUEST_BYTES = 1 << 20
#: tCK in ns: beyond these the figures (GB/s, ns) lose their meaning or overflow
TCK_RANGE = (1e-3, 1e6)
#: refresh may take at most this share of the time (memctl/sim.c, check_config)
MAX_REFRESH_SHARE = 0.5

ROW_POLICIES = ("open", "closed")
SCHEDULERS = ("frfcfs",)
#: how the channel picks among the banks' commands: round_robin (DRAMsim3's: banks in turn
#: from the one after the last that issued, row and column commands alike) or column_first
#: (a ready row hit first, else the oldest command)
ARBITRATIONS = ("round_robin", "column_first")
REFRESH_POLICIES = ("rank", "bank", "none")

#: address-mapping field codes -> decode_address() key and organisation count
FIELD_NAMES = {
    "ch": "channel", "pc": "pseudo_channel", "ra": "rank", "bg": "bankgroup",
    "ba": "bank", "ro": "row", "co": "column",
}
MAPPING_ALIASES = {
    "row_interleaved": "ro_ra_bg_ba_ch_co",
    "bankgroup_interleaved": "ro_ra_ba_co_bg_ch",
}
# organisation fields the address mapping takes bits of
_POW2_FIELDS = ("pseudo_channels", "ranks", "bankgroups", "banks_per_group", "rows",
                "columns", "burst_length")


# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class Part:
    """One validated memory part. The dict attributes are read-only mappings."""

    name: str
    standard: str
    path: pathlib.Path | None
    org: Mapping[str, int]
    timing: Mapping[str, Any]
    controller: Mapping[str, Any]
    pim: Mapping[str, Any] | None = None
    power: Mapping[str, float] | None = None
    pim_energy: Mapping[str, Any] | None = None
    #: (field, count) msb..lsb, computed at load time (see address_radices())
    _fields: tuple = dataclasses.field(default=(), repr=False)

    # -- derived quantities ------------------------------------------------------------------
    @property
    def burst_cycles(self) -> int:
        """Data-bus cycles of one burst (double data rate): burst_length / 2."""
        return self.org["burst_length"] // 2

    @property
    def request_bytes(self) -> int:
        """Bytes one request (one burst) moves: bus_width / 8 x burst_length."""
        return self.org["bus_width"] // 8 * self.org["burst_length"]

    @property
    def physical_columns(self) -> int:
        """Columns per row as DRAMsim3 counts them (x2 for HBM's prefetch, x BL for GDDR)."""
        return self.org["columns"] * _column_factor(self.standard, self.org["burst_length"])

    @property
    def columns_per_row(self) -> int:
        """Requests (bursts) per row and rank: the range of the decoded column."""
        return self.physical_columns // self.org["burst_length"]

    @property
    def banks_per_rank(self) -> int:
        return self.org["bankgroups"] * self.org["banks_per_group"]

    @property
    def channel_count(self) -> int:
        """Independent command/data buses: channels x pseudo_channels."""
        return self.org["channels"] * self.org["pseudo_channels"]

    @property
    def row_bytes(self) -> int:
        """Bytes of one open row across the rank (the page)."""
        return self.columns_per_row * self.request_bytes

    @property
    def capacity_bytes(self) -> int:
        """Total bytes: 2 ** (address bits of the mapping, offset included)."""
        o = self.org
        return (self.channel_count * o["ranks"] * self.banks_per_rank * o["rows"]
                * self.row_bytes)

    @property
    def peak_bandwidth_gbs(self) -> float:
        """Peak data bandwidth in GB/s (1e9 bytes): every bus busy, two transfers per tCK."""
        return self.channel_count * self.org["bus_width"] / 8 * 2 / self.timing["tCK"]

    @property
    def pim_banks_per_unit(self) -> int | None:
        if self.pim is None:
            return None
        return self.org["banks_per_group"] // self.pim["units_per_bankgroup"]

    @property
    def pim_column_cycles(self) -> int | None:
        """Cycles between two PIM column commands: banks per unit x tCCD_L (None: no [pim])."""
        if self.pim is None:
            return None
        return self.pim_banks_per_unit * self.timing["tCCD_L"]

    def pim_scope_units(self, banks=None) -> dict[int, int]:
        """unit -> how many of `banks` (bank indices within a channel: rank x banks_per_rank
        + bankgroup x banks_per_group + bank; None: every bank) it sits beside, for the units
        of one channel that have any. Unit u serves banks_per_unit consecutive banks of one
        bank group."""
        per = self.pim_banks_per_unit
        nb = self.org["ranks"] * self.banks_per_rank
        out: dict[int, int] = {}
        for b in (range(nb) if banks is None else banks):
            out[b // per] = out.get(b // per, 0) + 1
        return out

    def pim_scope_column_cycles(self, banks=None) -> int:
        """Cycles between two all-bank column commands on the banks `banks` (None: all):
        each unit takes its banks' columns one after another, tCCD_L apart, so the unit with
        the most banks in the scope sets the pace."""
        return max(self.pim_scope_units(banks).values()) * self.timing["tCCD_L"]

    @property
    def devices_per_rank(self) -> float:
        """Devices whose currents add up in one rank: bus_width / device_width (DRAMsim3)."""
        return self.org["bus_width"] / self.org["device_width"]

    @property
    def read_latency(self) -> int:
        return self.timing["CL"]

    @property
    def write_latency(self) -> int:
        return self.timing["CWL"]

    def address_radices(self, include_offset: bool = True) -> list[tuple[str, int]]:
        """(field code, count) msb..lsb: every one of ro ra bg ba pc ch co in mapping order
        (count 1: the field takes no place), then ("offset", request_bytes) unless
        include_offset is False. An address is these digits in this mixed radix."""
        fields = list(self._fields)
        if include_offset:
            fields.append(("offset", self.request_bytes))
        return fields

    @property
    def bit_fields(self) -> bool:
        """Every field's count a power of two, so each field is a range of address bits (a
        GPU's 5 or 6 stacks, 40 or 48 channels, are not)."""
        return all(_is_pow2(n) for _, n in self._fields)

    def address_fields(self, include_offset: bool = True) -> list[tuple[str, int]]:
        """(field code, bits) msb..lsb: every one of ro ra bg ba pc ch co in mapping order (0
        bits where the count is 1), then ("offset", log2(request_bytes)) unless
        include_offset is False. A part with a count that is not a power of two has no bit
        fields: ConfigError (address_radices holds its mapping)."""
        if not self.bit_fields:
            odd = ", ".join(f"{FIELD_NAMES[c]} count {n}" for c, n in self._fields
                            if not _is_pow2(n))
            raise ConfigError(f"part {self.name} ({self.path or 'in memory'}): its {odd} is not "
                              f"a power of two, so its addresses are digits in a mixed radix, "
                              f"not bit fields (as DRAMsim3's and Ramulator's address "
                              f"mappings need)")
        return [(name, _log2(n)) for name, n in self.address_radices(include_offset)]

    def field_shifts(self) -> dict[str, tuple[int, int]]:
        """field code -> (bit position of its lsb in the byte address, bits); ConfigError for
        a part without bit fields (DRAMsim3's and Ramulator's address mappings need them)."""
        out = {}
        pos = 0
        for name, bits in reversed(self.address_fields()):
            out[name] = (pos, bits)
            pos += bits
        return out

    @property
    def address_bits(self) -> int:
        """Bits of a byte address below the capacity (all of the mapping's with bit fields)."""
        return (self.capacity_bytes - 1).bit_length()

    def to_dict(self) -> dict:
        """Plain JSON-serialisable dict (for stats files), derived values included."""
        return {
            "name": self.name,
            "standard": self.standard,
            "path": str(self.path) if self.path else None,
            "org": dict(self.org),
            "timing": dict(self.timing),
            "controller": dict(self.controller),
            "pim": dict(self.pim) if self.pim is not None else None,
            "power": dict(self.power) if self.power is not None else None,
            "pim_energy": dict(self.pim_energy) if self.pim_energy is not None else None,
            "derived": {
                "burst_cycles": self.burst_cycles,
                "request_bytes": self.request_bytes,
                "physical_columns": self.physical_columns,
                "columns_per_row": self.columns_per_row,
                "banks_per_rank": self.banks_per_rank,
                "capacity_bytes": self.capacity_bytes,
                "peak_bandwidth_gbs": self.peak_bandwidth_gbs,
                "pim_column_cycles": self.pim_column_cycles,
                **({"address_fields": [list(f) for f in self.address_fields()]}
                   if self.bit_fields else
                   {"address_radices": [list(f) for f in self.address_radices()]}),
            },
        }

    def __repr__(self) -> str:
        return f"Part({self.name!r}, standard={self.standard!r}, path={str(self.path)!r})"


# ---------------------------------------------------------------------------------------------
def list_parts() -> dict[str, pathlib.Path]:
    """The shipped parts: short name -> file, then every other file stem in parts/."""
    out = {name: PARTS_DIR / fname for name, fname in PART_ALIASES.items()}
    for p in sorted(PARTS_DIR.glob("*.toml")):
        if p not in out.values():
            out[p.stem] = p
    return out


def resolve_part_path(name_or_path: str | pathlib.Path) -> pathlib.Path:
    """A shipped part's short name or file stem, or else a path to an existing file."""
    text = str(name_or_path)
    if isinstance(name_or_path, str):
        key = text.lower()
        if key in PART_ALIASES:
            return PARTS_DIR / PART_ALIASES[key]
        stem_file = PARTS_DIR / f"{key}.toml"
        if "/" not in text and stem_file.is_file():
            return stem_file
    path = pathlib.Path(name_or_path).expanduser()
    if path.is_file():
        return path
    names = list(list_parts())
    hint = difflib.get_close_matches(text.lower(), names, n=1)
    msg = f"no such part: {text!r} is neither a shipped part ({', '.join(names)}) nor a file"
    if hint:
        msg += f"; did you mean {hint[0]!r}?"
    raise ConfigError(msg)


def load_part(name_or_path: str | pathlib.Path, overrides: Mapping | None = None) -> Part:
    """Load, merge (include, overrides) and validate a part.

    overrides: {"timing": {"tCCD_L": 4}}, or dotted keys {"timing.tCCD_L": 4}, or bare keys
    {"tCCD_L": 4} when the key belongs to exactly one table. They win over the file."""
    path = resolve_part_path(name_or_path)
    merged, origin = _load_layers(path, [])
    if overrides:
        layer = _normalise_overrides(overrides, path)
        _merge_layer(merged, origin, layer, "overrides")
    return _build(merged, origin, path)


# ---------------------------------------------------------------------------------------------
def _column_factor(standard: str, burst_length: int) -> int:
    s = standard.upper()
    if s.startswith("HBM"):
        return 2
    if s.startswith("GDDR"):
        return burst_length
    return 1


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _read_toml(path: pathlib.Path) -> dict:
    from pimrt.tomlfile import read_toml
    return read_toml(path)


def _load_layers(path: pathlib.Path, stack: list[pathlib.Path]) -> tuple[dict, dict]:
    """Merged tables of path and its includes; origin[(table, key)] = file that set it."""
    real = path.resolve()
    if real in stack:
        chain = " -> ".join(str(p.name) for p in stack + [real])
        raise ConfigError(f"{path}: include cycle: {chain}")
    data = _read_toml(path)
    merged: dict = {}
    origin: dict = {}
    include = data.pop("include", None)
    if include is not None:
        includes = [include] if isinstance(include, str) else include
        if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
            raise ConfigError(f"{path}: include must be a file name or a list of file names")
        for inc in includes:
            inc_path = (path.parent / inc)
            if not inc_path.is_file():
                raise ConfigError(f"{path}: include: no such file {inc!r} (looked at {inc_path})")
            sub, sub_origin = _load_layers(inc_path, stack + [real])
            for table, values in sub.items():
                merged.setdefault(table, {}).update(values)
            origin.update(sub_origin)
    layer = {}
    for table, values in data.items():
        if table not in SCHEMA:
            raise ConfigError(_unknown(path, "table", table, list(SCHEMA) + ["include"]))
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: [{table}] must be a table, found {values!r}")
        layer[table] = dict(values)
    _merge_layer(merged, origin, layer, str(path))
    return merged, origin


def _merge_layer(merged: dict, origin: dict, layer: dict, source: str) -> None:
    for table, values in layer.items():
        values = dict(values)
        # tRCD in a layer sets tRCDRD and tRCDWR, unless that same layer names them itself
        if table == "timing" and "tRCD" in values:
            for k in ("tRCDRD", "tRCDWR"):
                values.setdefault(k, values["tRCD"])
        dst = merged.setdefault(table, {})
        # the units' clock is one value given two ways: a layer that sets one drops the
        # other that an included file (or the part below the overrides) gave
        if table == "pim":
            for key, other in (("clock_mhz", "clock_ratio"), ("clock_ratio", "clock_mhz")):
                if key in values and other not in values:
                    dst.pop(other, None)
        for key, value in values.items():
            dst[key] = value
            origin[(table, key)] = source


def _normalise_overrides(overrides: Mapping, path: pathlib.Path) -> dict:
    layer: dict = {}
    for key, value in overrides.items():
        if key in SCHEMA and isinstance(value, Mapping):
            layer.setdefault(key, {}).update(value)
        elif isinstance(key, str) and "." in key:
            table, _, sub = key.partition(".")
            if table not in SCHEMA:
                raise ConfigError(_unknown("overrides", "table", table, list(SCHEMA)))
            layer.setdefault(table, {})[sub] = value
        else:
            tables = [t for t, keys in SCHEMA.items() if key in keys]
            if len(tables) != 1:
                every = [k for keys in SCHEMA.values() for k in keys]
                raise ConfigError(_unknown("overrides", "parameter", str(key), every))
            layer.setdefault(tables[0], {})[key] = value
    return layer


def _unknown(where, what: str, name: str, known: Iterable[str]) -> str:
    msg = f"{where}: unknown {what} {name!r}"
    hint = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if not hint:
        lower = {k.lower(): k for k in known}
        hint = [lower[name.lower()]] if name.lower() in lower else []
    if hint:
        msg += f"; did you mean {hint[0]!r}?"
    return msg


def _build(merged: dict, origin: dict, path: pathlib.Path) -> Part:
    def where(table: str, key: str | None = None) -> str:
        src = origin.get((table, key)) if key else None
        if src is None or src == str(path):
            return str(path)
        return f"{path} ({src})" if src == "overrides" else f"{path} (via {src})"

    def fail(table: str, key: str | None, msg: str):
        label = f"[{table}] {key}" if key else f"[{table}]"
        raise ConfigError(f"{where(table, key)}: {label}: {msg}")

    for table in SCHEMA:
        if table not in merged and table not in OPTIONAL_TABLES:
            raise ConfigError(f"{path}: missing table [{table}]")

    values: dict[str, dict[str, Any]] = {}
    for table, given in merged.items():
        schema = SCHEMA[table]
        out: dict[str, Any] = {}
        for key, value in given.items():
            if key not in schema:
                raise ConfigError(_unknown(f"{where(table, key)}: [{table}]", "parameter",
                                           key, schema))
            kind, _ = schema[key]
            out[key] = _check_kind(value, kind, lambda m, k=key: fail(table, k, m))
        for key, (kind, default) in schema.items():
            if key in out:
                continue
            if default is _REQUIRED:
                raise ConfigError(f"{path}: [{table}]: missing required parameter {key!r}")
            if default is not _DERIVED and default is not None:
                out[key] = default
        values[table] = out

    part_t, org, timing, ctrl = (values["part"], values["organization"], values["timing"],
                                 values["controller"])
    pim = values.get("pim")
    part_t.setdefault("name", path.stem)

    # organisation ------------------------------------------------------------------------
    for key in _POW2_FIELDS:
        if not _is_pow2(org[key]):
            fail("organization", key, f"must be a power of two (the address mapping takes "
                 f"log2 bits of it), found {org[key]}")
    nch = org["channels"] * org["pseudo_channels"]
    if nch > MAX_CHANNELS:
        fail("organization", "channels", f"channels x pseudo_channels = {org['channels']} x "
             f"{org['pseudo_channels']} = {nch}: the model holds at most {MAX_CHANNELS}")
    if org["ranks"] > MAX_RANKS:
        fail("organization", "ranks", f"{org['ranks']}: the model holds at most {MAX_RANKS} "
             f"ranks per channel")
    nbanks = org["ranks"] * org["bankgroups"] * org["banks_per_group"]
    if nbanks > MAX_BANKS:
        fail("organization", "banks_per_group", f"ranks x bankgroups x banks_per_group = "
             f"{org['ranks']} x {org['bankgroups']} x {org['banks_per_group']} = {nbanks} banks "
             f"per channel: the model holds at most {MAX_BANKS}")
    if org["bus_width"] % 8:
        fail("organization", "bus_width", f"must be a multiple of 8 bits, found "
             f"{org['bus_width']}")
    req = org["bus_width"] // 8 * org["burst_length"]
    if not _is_pow2(req):
        fail("organization", "bus_width", f"bus_width / 8 x burst_length = {req} bytes per "
             f"request must be a power of two")
    if org["burst_length"] < 2:
        fail("organization", "burst_length", "must be at least 2 (double data rate)")
    if req > MAX_REQUEST_BYTES:
        fail("organization", "bus_width", f"bus_width / 8 x burst_length = {req} bytes per "
             f"request: the model takes at most {MAX_REQUEST_BYTES}")
    phys_cols = org["columns"] * _column_factor(part_t["standard"], org["burst_length"])
    if phys_cols < org["burst_length"]:
        fail("organization", "columns", f"{org['columns']} columns hold less than one burst "
             f"of {org['burst_length']}")

    # timing --------------------------------------------------------------------------------
    timing.pop("tRCD", None)
    for k in ("tRCDRD", "tRCDWR"):
        if k not in timing:
            raise ConfigError(f"{path}: [timing]: missing required parameter {k!r} "
                              f"(give {k} or tRCD)")
    if "tRC" not in timing:
        timing["tRC"] = timing["tRAS"] + timing["tRP"]
        origin[("timing", "tRC")] = str(path)
    tck = timing["tCK"]
    if not TCK_RANGE[0] <= tck <= TCK_RANGE[1]:
        fail("timing", "tCK", f"{tck!r} ns is outside {TCK_RANGE[0]:g}..{TCK_RANGE[1]:g} ns "
             f"(the bandwidth and time figures would be meaningless or overflow)")
    if timing["tRAS"] > timing["tRC"]:
        fail("timing", "tRAS", f"tRAS ({timing['tRAS']}) is greater than tRC "
             f"({timing['tRC']})")
    if timing["tRC"] < timing["tRAS"] + timing["tRP"]:
        # JEDEC: tRC >= tRAS + tRP, checked on the merged part whichever layer set each value
        # (one file, an include, an override): a tRP raised alone needs its tRC raised too
        src = origin.get(("timing", "tRC"))
        others = [f"{k} from {_source(origin.get(('timing', k)), path)}" for k in ("tRAS", "tRP")
                  if origin.get(("timing", k)) != src]
        fail("timing", "tRC", f"tRC ({timing['tRC']}) is less than tRAS + tRP = "
             f"{timing['tRAS']} + {timing['tRP']} = {timing['tRAS'] + timing['tRP']}"
             + (f" ({', '.join(others)}); set tRC as well" if others else ""))
    for k in ("tRCDRD", "tRCDWR"):
        if timing["tRAS"] < timing[k]:
            fail("timing", "tRAS", f"tRAS ({timing['tRAS']}) is less than {k} "
                 f"({timing[k]}): a row must stay open at least until it can be read")
    if timing["tFAW"] < 4 * timing["tRRD_S"]:
        fail("timing", "tFAW", f"tFAW ({timing['tFAW']}) is less than 4 x tRRD_S = 4 x "
             f"{timing['tRRD_S']} = {4 * timing['tRRD_S']}")
    burst = org["burst_length"] // 2
    if timing["CL"] + burst + timing["tRTRS"] < timing["CWL"]:
        fail("timing", "CWL", f"CWL ({timing['CWL']}) is more than CL + burst + tRTRS = "
             f"{timing['CL']} + {burst} + {timing['tRTRS']}")
    for long, short in (("tCCD_L", "tCCD_S"), ("tRRD_L", "tRRD_S"), ("tWTR_L", "tWTR_S")):
        if timing[long] < timing[short]:
            fail("timing", long, f"{long} ({timing[long]}) is less than {short} "
                 f"({timing[short]}); the same-bank-group distance cannot be shorter")
    if timing["tRFC"] >= timing["tREFI"]:
        fail("timing", "tRFC", f"tRFC ({timing['tRFC']}) must be less than tREFI "
             f"({timing['tREFI']})")
    if pim is not None and isinstance(pim.get("units_per_bankgroup"), int) \
            and pim["units_per_bankgroup"] > 0:
        col = org["banks_per_group"] // pim["units_per_bankgroup"] * timing["tCCD_L"]
        if col > INT_MAX:
            fail("timing", "tCCD_L", f"the PIM's column cycles, banks per unit x tCCD_L = "
                 f"{col}, are more than the model holds ({INT_MAX})")
    refresh = ctrl.get("refresh", "rank")
    if refresh == "bank":
        _check_bank_refresh(timing, org, pim, fail)
    elif refresh != "none":
        _check_refresh(timing, org, pim, fail)
    order = list(SCHEMA["timing"])
    timing = {k: timing[k] for k in order if k in timing}

    # controller ----------------------------------------------------------------------------
    for key, allowed in (("row_policy", ROW_POLICIES), ("scheduler", SCHEDULERS),
                         ("arbitration", ARBITRATIONS), ("refresh", REFRESH_POLICIES)):
        if ctrl[key] not in allowed:
            raise ConfigError(_unknown(f"{where('controller', key)}: [controller] {key}",
                                       "name", ctrl[key], allowed)
                              + f" (one of: {', '.join(allowed)})")
    ctrl.setdefault("dual_command_bus", part_t["standard"].upper().startswith("HBM"))
    qd = ctrl["queue_depth"]
    ctrl.setdefault("host_queue_depth", qd)
    ctrl.setdefault("write_high_watermark", max(1, qd * 3 // 4))
    ctrl.setdefault("write_low_watermark", min(qd // 4, ctrl["write_high_watermark"] - 1))
    for key in ("queue_depth", "host_queue_depth", "bank_queue_depth"):
        if ctrl[key] > MAX_QUEUE:
            fail("controller", key, f"{ctrl[key]} is more than the model's {MAX_QUEUE}")
    hi, lo = ctrl["write_high_watermark"], ctrl["write_low_watermark"]
    if hi > qd:
        fail("controller", "write_high_watermark", f"{hi} is more than queue_depth {qd}")
    if lo > qd:
        fail("controller", "write_low_watermark", f"{lo} is more than queue_depth {qd}")
    if lo >= hi:
        fail("controller", "write_low_watermark", f"write_low_watermark ({lo}) must be less "
             f"than write_high_watermark ({hi})")
    if lo >= ctrl["host_queue_depth"]:
        fail("controller", "host_queue_depth", f"{ctrl['host_queue_depth']} is not more than "
             f"write_low_watermark ({lo}): the host's write buffer, full at or below the low "
             f"watermark, would never drain while the host waits for room")
    mapping_text = ctrl["address_mapping"]
    try:
        fields = _parse_mapping(mapping_text, org, phys_cols)
    except ValueError as exc:
        fail("controller", "address_mapping", f"{mapping_text!r}: {exc}")
    bits = (math.prod(n for _, n in fields) * req - 1).bit_length()
    if bits > MAX_ADDRESS_BITS:
        fail("controller", "address_mapping", f"the organisation needs {bits} address bits; the "
             f"model maps at most {MAX_ADDRESS_BITS}")
    order = list(SCHEMA["controller"])
    ctrl = {k: ctrl[k] for k in order}

    # pim -----------------------------------------------------------------------------------
    if pim is not None:
        units, bpg = pim["units_per_bankgroup"], org["banks_per_group"]
        if units > bpg:
            fail("pim", "units_per_bankgroup", f"{units} units per bank group are more than "
                 f"its {bpg} banks (a unit sits beside one or more banks)")
        if bpg % units:
            fail("pim", "units_per_bankgroup", f"{units} units do not divide "
                 f"banks_per_group {bpg}")
        if not _is_pow2(pim["lanes"]):
            fail("pim", "lanes", f"must be a power of two (the unit's datapath is lanes x 32 "
                 f"bits of a bank column), found {pim['lanes']}")
        if "clock_mhz" in pim:
            if "clock_ratio" in pim:
                fail("pim", "clock_mhz", "give the units' clock as clock_mhz or as "
                     "clock_ratio, not both")
            pim["clock_ratio"] = pim["clock_mhz"] * timing["tCK"] / 1000.0
        pim.setdefault("clock_ratio", 1)
        if pim["clock_ratio"] > 1:
            fail("pim", "clock_ratio", f"the units would run at {pim['clock_ratio']:.3g} x the "
                 f"memory clock ({1000 / timing['tCK']:.0f} MHz); a unit in the DRAM die runs "
                 f"at most at the memory clock")
        pim["clock_mhz"] = pim["clock_ratio"] * 1000.0 / timing["tCK"]
        pim.setdefault("dtypes", ("fp32",))
        if "fp32" not in pim["dtypes"]:
            fail("pim", "dtypes", f"the lanes compute fp32 whatever else they do (the "
                 f"updates of the master weights), found {list(pim['dtypes'])}")
        pim = {k: pim[k] for k in SCHEMA["pim"]}

    # power ---------------------------------------------------------------------------------
    power = values.get("power")
    if power is not None:
        _check_power(power, timing, fail)
        if ctrl["refresh"] == "bank":
            _check_bank_refresh_power(power, fail)
        power = {k: power[k] for k in SCHEMA["power"] if k in power}
    pim_energy = values.get("pim_energy")
    if pim_energy is not None:
        if pim is None:
            fail("pim_energy", None, "a part without [pim] units has no PIM energy")
        if power is None:
            fail("pim_energy", "column_share", "the share of a column access needs the DRAM "
                 "currents of [power]")
        pim_energy = {k: pim_energy[k] for k in SCHEMA["pim_energy"] if k in pim_energy}

    ro = types.MappingProxyType
    return Part(
        name=part_t["name"], standard=part_t["standard"], path=path.resolve(),
        org=ro({k: org[k] for k in SCHEMA["organization"]}), timing=ro(timing),
        controller=ro(ctrl), pim=ro(pim) if pim is not None else None,
        power=ro(power) if power is not None else None,
        pim_energy=ro(pim_energy) if pim_energy is not None else None, _fields=tuple(fields),
    )


def _source(src: str | None, path: pathlib.Path) -> str:
    """Where a merged value came from, as an error names it."""
    if src is None or src == str(path):
        return pathlib.Path(path).name
    return "the overrides" if src == "overrides" else pathlib.Path(src).name


def _check_power(p: Mapping, timing: Mapping, fail) -> None:
    """The currents must give non-negative energy for every command and state (DRAMsim3's
    increments, memctl/energy.c): IDD3N >= IDD2N (a row open costs more than none), IDD4R,
    IDD4W, IDD5AB >= IDD3N, and IDD0 x tRC >= IDD3N x tRAS + IDD2N x tRP."""
    if p["IDD3N"] < p["IDD2N"]:
        fail("power", "IDD3N", f"IDD3N ({p['IDD3N']} mA, active standby) is below IDD2N "
             f"({p['IDD2N']} mA, precharged standby)")
    for key in ("IDD4R", "IDD4W", "IDD5AB"):
        if p[key] < p["IDD3N"]:
            fail("power", key, f"{key} ({p[key]} mA) is below IDD3N ({p['IDD3N']} mA): the "
                 f"command's energy over the background would be negative")
    t = timing
    act = p["IDD0"] * t["tRC"] - (p["IDD3N"] * t["tRAS"] + p["IDD2N"] * t["tRP"])
    if act < 0:
        fail("power", "IDD0", f"IDD0 x tRC = {p['IDD0']} x {t['tRC']} is below IDD3N x tRAS + "
             f"IDD2N x tRP = {p['IDD3N']} x {t['tRAS']} + {p['IDD2N']} x {t['tRP']}: an ACT's "
             f"energy would be negative")


def _check_bank_refresh(timing: Mapping, org: Mapping, pim: Mapping | None, fail) -> None:
    """refresh = "bank" (memctl/refresh.c): each rank refreshes one bank every tREFI / banks
    for tRFCb, which must be given and below tRFC; it blocks that bank, and with PIM units
    every all-bank command, so the same rules as _check_refresh hold for what it blocks."""
    t = timing
    if "tRFCb" not in t:
        fail("timing", "tRFCb", 'refresh = "bank" needs tRFCb, the cycles one bank\'s refresh '
             'blocks it (the part gives none: use refresh = "rank")')
    if t["tRFCb"] >= t["tRFC"]:
        fail("timing", "tRFCb", f"tRFCb ({t['tRFCb']}) must be less than tRFC ({t['tRFC']}): "
             f"one bank's refresh cannot take longer than all banks'")
    banks = org["bankgroups"] * org["banks_per_group"]
    every = t["tREFI"] // banks
    if every < 1:
        fail("timing", "tREFI", f"tREFI ({t['tREFI']}) is less than the {banks} banks of a "
             f"rank: per-bank refresh has no interval tREFI / banks")
    if t.get("tRREFD", 0) >= every:
        fail("timing", "tRREFD", f"tRREFD ({t['tRREFD']}) must be less than tREFI / banks = "
             f"{every}, the interval between two per-bank refreshes of a rank")
    if pim is not None:
        busy, span = org["ranks"] * t["tRFCb"], every
        who = (f"the PIM's all-bank commands wait for every bank's refresh: ranks x tRFCb = "
               f"{org['ranks']} x {t['tRFCb']} = {busy} of every tREFI / banks = {every}")
    else:
        busy, span = t["tRFCb"], t["tREFI"]
        who = f"each bank refreshes for tRFCb = {busy} of every tREFI = {span}"
    if busy > MAX_REFRESH_SHARE * span:
        fail("timing", "tRFCb", f"per-bank refresh leaves too little time for requests: {who} "
             f"cycles, {100 * busy / span:.1f}% of the time; refresh may take at most "
             f"{100 * MAX_REFRESH_SHARE:.0f}%")
    need = _service_cycles(t, org, pim)
    if need > span - busy:
        fail("timing", "tRFCb", f"per-bank refresh leaves too little time for requests: the "
             f"{span - busy} cycles between two refreshes that block a request are fewer "
             f"than one request's longest service ({need} cycles)")


def _check_bank_refresh_power(p: Mapping, fail) -> None:
    """With refresh = "bank" the energy needs IDD5B (one bank's refresh current) >= IDD3N."""
    if "IDD5B" not in p:
        fail("power", "IDD5B", 'refresh = "bank" needs IDD5B, the per-bank refresh current '
             '(mA), for its energy')
    if p["IDD5B"] < p["IDD3N"]:
        fail("power", "IDD5B", f"IDD5B ({p['IDD5B']} mA) is below IDD3N ({p['IDD3N']} mA): a "
             f"per-bank refresh's energy over the background would be negative")


def _service_cycles(t: Mapping, org: Mapping, pim: Mapping | None) -> int:
    """One request's longest service from a freshly refreshed bank (memctl/sim.c,
    mc_refresh_service)."""
    terms = [t["tRP"], max(t["tRCDRD"], t["tRCDWR"]), t["tRC"], max(t["CL"], t["CWL"] + t["tWR"]),
             org["burst_length"] // 2, t["tFAW"]]
    terms += [t[k] for k in ("tCCD_L", "tCCD_S", "tWTR_L", "tWTR_S", "tRTP", "tRRD_L", "tRRD_S",
                             "tRTRS")]
    if pim is not None:
        units = pim["units_per_bankgroup"]
        terms += [2 * pim["mode_switch_cycles"],
                  (org["banks_per_group"] // units if units else 1) * t["tCCD_L"]]
    return sum(terms)


def _check_refresh(timing: Mapping, org: Mapping, pim: Mapping | None, fail) -> None:
    """Refresh must leave requests time (memctl/sim.c, check_config): it may take at most
    MAX_REFRESH_SHARE of the time of what it blocks (a rank; with PIM units the all-bank
    commands, which every rank's refresh blocks), and between two such refreshes there must
    be room for one request's longest service, or a request could wait forever."""
    t = timing
    blocking = org["ranks"] if pim is not None else 1
    busy = blocking * t["tRFC"]
    share = busy / t["tREFI"]
    who = (f"the PIM's all-bank commands wait for every rank's refresh: ranks x tRFC = "
           f"{blocking} x {t['tRFC']} = {busy}" if pim is not None else
           f"each rank refreshes for tRFC = {t['tRFC']}")
    if share > MAX_REFRESH_SHARE:
        fail("timing", "tREFI", f"refresh leaves too little time for requests: {who} of every "
             f"tREFI = {t['tREFI']} cycles, {100 * share:.1f}% of the time; refresh may take "
             f"at most {100 * MAX_REFRESH_SHARE:.0f}% (requests need the rest)")
    burst = org["burst_length"] // 2
    terms = [("tRP", t["tRP"]), ("max(tRCDRD, tRCDWR)", max(t["tRCDRD"], t["tRCDWR"])),
             ("tRC", t["tRC"]), ("max(CL, CWL + tWR)", max(t["CL"], t["CWL"] + t["tWR"])),
             ("burst", burst), ("tFAW", t["tFAW"])]
    terms += [(k, t[k]) for k in ("tCCD_L", "tCCD_S", "tWTR_L", "tWTR_S", "tRTP", "tRRD_L",
                                  "tRRD_S", "tRTRS")]
    if pim is not None:
        units = pim["units_per_bankgroup"]
        col = (org["banks_per_group"] // units if units else 1) * t["tCCD_L"]
        terms += [("2 x mode_switch_cycles", 2 * pim["mode_switch_cycles"]),
                  ("PIM column cycles", col)]
    need = sum(v for _, v in terms)
    window = t["tREFI"] // blocking - t["tRFC"]
    if need > window:
        fail("timing", "tREFI", f"refresh leaves too little time for requests: the "
             f"{window} cycles between two refreshes (tREFI / {blocking} - tRFC = "
             f"{t['tREFI']} / {blocking} - {t['tRFC']}) are fewer than one request's longest "
             f"service, {' + '.join(n for n, _ in terms)} = {need}")


def _check_kind(value, kind: str, fail):
    if kind == "bool":
        if not isinstance(value, bool):
            fail(f"must be true or false, found {value!r}")
        return value
    if kind == "str":
        if not isinstance(value, str):
            fail(f"must be a string, found {value!r}")
        return value
    if kind == "dtypes":
        known = ("fp32", "fp16", "bf16")
        if not isinstance(value, list) or not value or \
                any(v not in known for v in value) or len(set(value)) != len(value):
            fail(f"must be a list of distinct lane dtypes from {', '.join(known)}, "
                 f"found {value!r}")
        return tuple(value)
    if kind == "fraction":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail(f"must be a number, found {value!r}")
        if not 0 < value <= 1:
            fail(f"must be a share in (0, 1], found {value!r}")
        return float(value)
    if kind == "float+":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail(f"must be a number, found {value!r}")
        if not (value > 0) or math.isinf(value):
            fail(f"must be positive, found {value!r}")
        if isinstance(value, int) and value > INT_MAX:
            fail(f"{value} is more than the model holds (at most {INT_MAX})")
        return float(value) if isinstance(value, float) else value
    # integer kinds
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        fail(f"must be an integer, found {value!r}")
    if kind in ("count", "pcycles") and value <= 0:
        fail(f"must be positive, found {value}")
    if kind == "cycles" and value < 0:
        fail(f"must not be negative, found {value}")
    if value > INT_MAX:
        fail(f"{value} is more than the model holds (a 32-bit integer: at most {INT_MAX})")
    return value


def mapping_counts(org: Mapping[str, int], physical_columns: int) -> dict[str, int]:
    """field code -> number of values (co in requests per row)."""
    return {
        "ch": org["channels"], "pc": org["pseudo_channels"], "ra": org["ranks"],
        "bg": org["bankgroups"], "ba": org["banks_per_group"], "ro": org["rows"],
        "co": physical_columns // org["burst_length"],
    }


def _parse_mapping(text: str, org: Mapping[str, int], physical_columns: int):
    spec = MAPPING_ALIASES.get(text, text)
    if "_" in spec:
        tokens = spec.split("_")
    elif len(spec) % 2 == 0 and spec:
        tokens = [spec[i:i + 2] for i in range(0, len(spec), 2)]  # DRAMsim3's "rorabgbachco"
    else:
        tokens = [spec]
    tokens = [t.lower() for t in tokens]
    for t in tokens:
        if t not in FIELD_NAMES:
            aliases = ", ".join(MAPPING_ALIASES)
            raise ValueError(f"unknown field {t!r} (fields: {', '.join(FIELD_NAMES)}; or one "
                             f"of {aliases})")
    dup = {t for t in tokens if tokens.count(t) > 1}
    if dup:
        raise ValueError(f"field {sorted(dup)[0]!r} appears twice")
    counts = mapping_counts(org, physical_columns)
    if "pc" not in tokens and "ch" in tokens:
        tokens.insert(tokens.index("ch"), "pc")  # just above ch
    elif "pc" not in tokens and counts["pc"] > 1:
        raise ValueError("pseudo_channels > 1 needs a 'pc' or 'ch' field")
    for t in FIELD_NAMES:
        if t not in tokens:
            if counts[t] > 1:
                raise ValueError(f"field {t!r} ({FIELD_NAMES[t]}, {counts[t]} values) is "
                                 f"missing")
            tokens.insert(0, t)  # zero bits; place at the msb end
    return [(t, counts[t]) for t in tokens]


# ---------------------------------------------------------------------------------------------
def decode_address(part: Part, addr) -> dict[str, np.ndarray]:
    """Split byte addresses (any integer array-like) into their fields.

    Returns int64 arrays: channel, pseudo_channel, rank, bankgroup, bank, row, column (column
    in request units, 0 .. part.columns_per_row - 1)."""
    a = np.asarray(addr)
    if a.dtype.kind not in "ui":
        a = a.astype(np.uint64)
    a = a.astype(np.uint64, copy=False)
    out = {}
    if part.bit_fields:
        for code, (pos, bits) in part.field_shifts().items():
            if code == "offset":
                continue
            mask = np.uint64((1 << bits) - 1)
            out[FIELD_NAMES[code]] = ((a >> np.uint64(pos)) & mask).astype(np.int64)
    else:                    # the digits of the request's index, least significant first
        x = a // np.uint64(part.request_bytes)
        for code, n in reversed(part.address_radices(include_offset=False)):
            out[FIELD_NAMES[code]] = (x % np.uint64(n)).astype(np.int64)
            x = x // np.uint64(n)
    return {FIELD_NAMES[c]: out[FIELD_NAMES[c]] for c in
            ("ch", "pc", "ra", "bg", "ba", "ro", "co")}


def encode_address(part: Part, channel=0, pseudo_channel=0, rank=0, bankgroup=0, bank=0,
                   row=0, column=0, offset=0):
    """The inverse of decode_address: byte address(es) (uint64) of the given fields."""
    given = {"ch": channel, "pc": pseudo_channel, "ra": rank, "bg": bankgroup, "ba": bank,
             "ro": row, "co": column, "offset": offset}
    scalar = all(np.ndim(v) == 0 for v in given.values())
    addr = np.uint64(0) if scalar else np.zeros(np.broadcast(*given.values()).shape, np.uint64)
    for code, n in part.address_radices():           # msb..lsb: Horner's rule in mixed radix
        value = given[code]
        v = np.asarray(value, dtype=np.int64)
        if np.any(v < 0) or np.any(v >= n):
            raise ValueError(f"{FIELD_NAMES.get(code, code)} {value} out of range "
                             f"0..{n - 1}")
        addr = addr * np.uint64(n) + v.astype(np.uint64)
    return int(addr) if scalar else addr


__all__ = [
    "Part", "load_part", "list_parts", "resolve_part_path", "decode_address", "encode_address",
    "PART_ALIASES", "PARTS_DIR", "FIELD_NAMES", "MAPPING_ALIASES", "SCHEMA",
]

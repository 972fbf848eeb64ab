"""A sweep spec (TOML) -> its points.

    [sweep]                     # optional: a name for the study
    name = "sensitivity"
    [fixed]                     # held in every point (any axis)
    batch = 32
    [grid]                      # the full grid: every combination of these values
    model = ["resnet18", "resnet50"]
    set.pim.lanes = [8, 16]     # a memory-part key (set.TABLE.KEY); host_set.TABLE.KEY too
    [[points]]                  # and/or a list of points, crossed with the grid
    name = "one_stack"
    set.organization.channels = 8

A point is `pimrt run`'s options (its defaults, then [fixed], then the grid's and the point's
values). Its id is a hash of those options and of the files they name, so a point means the
same run in any spec; points that differ only in policy, groups, slices, no_plan or
functional share their system (`group`): its baselines (GPU-only, serial host+PIM) run once
(pimrt/sweep/tasks.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import pathlib
from typing import Any

from pimrt.errors import ConfigError
from pimrt.sweep.options import (HOST_PREFIX, PART_PREFIX, canonical, check_value,
                                 run_options)

TABLES = ("sweep", "fixed", "grid", "points")
# options that do not change a point's serial and GPU-only baselines (its system)
PER_POINT = ("policy", "groups", "slices", "no_plan", "functional", "authority_rule",
             "save_trace", "format")
# part keys that only the PIM's timing reads: the GPU-only step never enters PIM mode, so
# points that differ only in these share one GPU-only baseline (its energy is still counted
# per point, with the point's own part); the units per bank group are not here, since the
# placement of the tensors follows the units
PIM_TIMING_KEYS = ("set.pim.lanes", "set.pim.clock_mhz", "set.pim.clock_ratio",
                   "set.pim.mode_switch_cycles")
FILE_OPTIONS = ("part", "host_part", "host_times")


@dataclasses.dataclass
class Point:
    index: int
    id: str
    values: dict           # the axes' values of this point (what the results table shows)
    options: dict          # every option of the run, with the part keys (set.*, host_set.*)
    group: str             # the id of its system, whose baselines it shares
    gpu_group: str         # the id of its system as the GPU-only step sees it (no PIM timing)


@dataclasses.dataclass
class Spec:
    path: pathlib.Path
    name: str
    axes: list[str]        # the columns that vary, in the spec's order
    fixed: dict
    points: list[Point]
    hash: str


HARD_LIMIT = 100_000      # points a spec may have even with --yes


class TooManyPoints(ConfigError):
    """A grid over the limit; raised before its points are made."""


def load(path, limit: int | None = None) -> Spec:
    """The spec's points; a grid of more than `limit` points (or HARD_LIMIT) is refused
    before any is made."""
    from pimrt.tomlfile import read_toml
    path = pathlib.Path(path)
    return parse(read_toml(path), path, limit)


def parse(data: dict, path: pathlib.Path, limit: int | None = None) -> Spec:
    where = str(path)
    for table in data:
        if table not in TABLES:
            raise ConfigError(f"{where}: unknown table [{table}]; a spec has "
                              f"{', '.join(f'[{t}]' for t in TABLES[:3])} and [[points]]")
    options = run_options()
    head = data.get("sweep", {})
    if not isinstance(head, dict) or set(head) - {"name"}:
        raise ConfigError(f"{where}: [sweep] takes only name = \"...\"")
    name = head.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: [sweep] name = {name!r}: expected a non-empty string")
    fixed = {k: check_value(k, v, options, f"{where}: [fixed]")
             for k, v in _axes(data.get("fixed", {}), "[fixed]", where, options).items()}
    grid = _axes(data.get("grid", {}), "[grid]", where, options)
    for k, vs in grid.items():
        if not isinstance(vs, list):
            raise ConfigError(f"{where}: [grid] {k} = {vs!r}: expected a list of values")
        if not vs:
            raise ConfigError(f"{where}: [grid] {k} = []: an axis with no values makes an "
                              f"empty grid")
        grid[k] = [check_value(k, v, options, f"{where}: [grid]") for v in vs]
        if len(set(map(repr, grid[k]))) != len(grid[k]):
            raise ConfigError(f"{where}: [grid] {k} lists a value twice: {vs!r}")
    listed = data.get("points", [])
    if not isinstance(listed, list) or not all(isinstance(p, dict) for p in listed):
        raise ConfigError(f"{where}: points must be an array of tables ([[points]])")
    variants = []
    for i, entry in enumerate(listed, 1):
        here = f"{where}: [[points]] #{i}"
        entry = dict(entry)
        label = entry.pop("name", None)
        if label is not None and (not isinstance(label, str) or not label):
            raise ConfigError(f"{here}: name = {label!r}: expected a non-empty string")
        values = {k: check_value(k, v, options, here)
                  for k, v in _axes(entry, f"[[points]] #{i}", where, options).items()}
        variants.append((label or f"point{i}", values))
    if not grid and not variants:
        raise ConfigError(f"{where}: empty grid: give [grid] axes with values or [[points]]")
    for k in fixed:
        if k in grid or any(k in v for _, v in variants):
            raise ConfigError(f"{where}: {k} is in [fixed] and also varies; keep it in one place")
    for k in grid:
        clash = [lab for lab, v in variants if k in v]
        if clash:
            raise ConfigError(f"{where}: {k} is a [grid] axis and also set by [[points]] "
                              f"{clash[0]!r}; keep it in one place")
    labels = [lab for lab, _ in variants]
    if len(set(labels)) != len(labels):
        dup = next(lab for lab in labels if labels.count(lab) > 1)
        raise ConfigError(f"{where}: two [[points]] are named {dup!r}")
    axes = list(grid) + list(dict.fromkeys(k for _, v in variants for k in v))
    if variants:
        axes.append("variant")
    count = math.prod(len(vs) for vs in grid.values()) * max(len(variants), 1)
    for most, what in ((limit, "without --yes"), (HARD_LIMIT, "even with --yes")):
        if most is not None and count > most:
            raise TooManyPoints(f"{where}: {count} points is over the limit of {most} {what} "
                                f"({' x '.join(str(len(v)) for v in grid.values())}"
                                f"{f' x {len(variants)} [[points]]' if variants else ''})")
    defaults = {k: o.default for k, o in options.items()}
    points, seen = [], {}
    for combo in itertools.product(*grid.values()):
        for label, extra in (variants or [(None, {})]):
            values = dict(zip(grid, combo)) | extra
            opts = defaults | fixed | values
            if opts.get("host_part") is None:     # the precision's default host part
                from pimrt.runtime.session import host_part_for
                opts["host_part"] = host_part_for(opts["precision"], None)
            if opts.get("part") is None:          # the host part's GPU's own memory
                from pimrt.runtime.session import part_for
                opts["part"] = part_for(opts["host_part"], None)
            if label is not None:
                values["variant"] = label
            pid = _hash(opts, path.parent)
            if pid in seen:
                first, before = seen[pid]
                raise ConfigError(f"{where}: points {first} and {len(points) + 1} are the "
                                  f"same run ({_show(before)} and {_show(values)})")
            seen[pid] = (len(points) + 1, values)
            group = _hash({k: v for k, v in opts.items() if k not in PER_POINT},
                          path.parent)
            gpu_group = _hash({k: v for k, v in opts.items()
                               if k not in PER_POINT and k not in PIM_TIMING_KEYS},
                              path.parent)
            points.append(Point(len(points), pid, values, _resolved(opts, path.parent),
                                group, gpu_group))
    spec_hash = hashlib.sha256("\n".join(p.id for p in points).encode()).hexdigest()[:16]
    return Spec(path, name, axes, fixed, points, spec_hash)


def _axes(table: Any, label: str, where: str, options) -> dict:
    """A table's axes with set.* / host_set.* flattened to their dotted names."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: {label} must be a table")
    out = {}
    for key, value in table.items():
        if key in ("set", "host_set") and isinstance(value, dict):
            for t, keys in value.items():
                if not isinstance(keys, dict):
                    raise ConfigError(f"{where}: {label} {key}.{t}: expected {key}.TABLE.KEY")
                for k, v in keys.items():
                    if isinstance(v, dict):
                        raise ConfigError(f"{where}: {label} {key}.{t}.{k}: expected "
                                          f"{key}.TABLE.KEY")
                    out[f"{key}.{t}.{k}"] = v
            continue
        out[canonical(key, options, f"{where}: {label}")] = value
    return out


def _show(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "no axes"


def _files(opts: dict, base: pathlib.Path) -> dict:
    """The content hash of each file a point names (a part or host-part file, a host-times
    file, a user's model file): the same name with other contents is another run."""
    out = {}
    for k in FILE_OPTIONS:
        v = opts.get(k)
        if isinstance(v, str) and (v.endswith(".toml") or v.endswith(".json")):
            out[k] = _digest(v, base)
    model = opts.get("model", "")
    if isinstance(model, str) and ".py:" in model:
        out["model"] = _digest(model.rpartition(":")[0], base)
    return out


def _digest(name: str, base: pathlib.Path) -> str | None:
    p = pathlib.Path(name)
    for c in (base / p, p):
        try:
            return hashlib.sha256(c.read_bytes()).hexdigest()[:16]
        except OSError:
            continue
    return None                       # missing: check.py reports it before any work


def _hash(opts: dict, base: pathlib.Path) -> str:
    text = json.dumps({"options": opts, "files": _files(opts, base)}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _resolved(opts: dict, base: pathlib.Path) -> dict:
    """The options as a worker runs them: a file named relative to the spec's folder (where
    it is there) as an absolute path."""
    out = dict(opts)
    for k in FILE_OPTIONS + ("model",):
        v = out.get(k)
        if not isinstance(v, str) or v in ("model",):
            continue
        name, colon, attr = v.rpartition(":") if k == "model" else (v, "", "")
        if k == "model" and not name.endswith(".py"):
            continue
        if k != "model" and "/" not in name and not name.endswith((".toml", ".json")):
            continue                              # a shipped part's name
        p = pathlib.Path(name)
        if not p.is_absolute() and (base / p).exists():
            out[k] = str((base / p).resolve()) + colon + attr
        elif not p.is_absolute() and p.exists():
            out[k] = str(p.resolve()) + colon + attr
    return out


def part_keys(opts: dict) -> tuple[dict, dict]:
    """A point's memory-part and host-part overrides."""
    from pimrt.sweep.options import part_overrides
    return part_overrides(opts, PART_PREFIX), part_overrides(opts, HOST_PREFIX)

"""The axes a sweep spec may name: every option of `pimrt run` (read from its own parser, so
a new option or a changed default is a sweep axis at once), and single keys of the memory part
(`set.TABLE.KEY`, as `pimrt memsim --set`) and of the host part (`host_set.TABLE.KEY`)."""
from __future__ import annotations

import argparse
import dataclasses
import difflib
from typing import Any

from pimrt.errors import ConfigError

# options of `pimrt run` that are not a property of a point
NOT_AXES = {"out": "each point's folder is DIR/points/ID", "quiet": "a sweep draws one bar",
            "help": ""}
# a sweep's own defaults where they differ from `pimrt run`'s: the functional check does not
# change a figure and costs more than a small point's timing
SWEEP_DEFAULTS = {"functional": "none"}
PART_PREFIX, HOST_PREFIX = "set.", "host_set."


@dataclasses.dataclass(frozen=True)
class Option:
    name: str           # argparse dest: host_part, no_plan, link_gbps, ...
    kind: type          # int, float, str or bool
    default: Any
    choices: tuple | None


def run_options() -> dict[str, Option]:
    """name -> Option for every option of `pimrt run` a point can set."""
    from pimrt.commands import run
    sub = argparse.ArgumentParser(add_help=False).add_subparsers()
    run.register(sub)
    parser = sub.choices["run"]
    out = {}
    for a in parser._actions:
        if a.dest in NOT_AXES or not a.option_strings:
            continue
        if isinstance(a, argparse._StoreTrueAction):
            kind = bool
        else:
            kind = a.type if a.type in (int, float) else str
        out[a.dest] = Option(a.dest, kind, SWEEP_DEFAULTS.get(a.dest, a.default),
                             tuple(a.choices) if a.choices else None)
    return out


def canonical(name: str, options: dict[str, Option], where: str) -> str:
    """An axis as the spec spells it (host-part or host_part, set.pim.lanes) -> its name."""
    if name.startswith((PART_PREFIX, HOST_PREFIX)):
        prefix = PART_PREFIX if name.startswith(PART_PREFIX) else HOST_PREFIX
        rest = name[len(prefix):]
        table, dot, key = rest.partition(".")
        if not dot or not table or not key or "." in key:
            example = "pim.lanes" if prefix == PART_PREFIX else "compute.peak_tflops"
            raise ConfigError(f"{where}: axis {name!r}: expected {prefix}TABLE.KEY "
                              f"(e.g. {prefix}{example})")
        return name
    dest = name.replace("-", "_")
    if dest in options:
        return dest
    if dest in NOT_AXES:
        raise ConfigError(f"{where}: {name!r} is not an axis: {NOT_AXES[dest]}")
    hint = difflib.get_close_matches(dest, list(options), n=1)
    if hint:
        raise ConfigError(f"{where}: unknown axis {name!r}; did you mean {hint[0]!r}? (axes: "
                          f"options of pimrt run, set.TABLE.KEY, host_set.TABLE.KEY)")
    raise ConfigError(f"{where}: unknown axis {name!r}; an axis is an option of pimrt run "
                      f"({', '.join(options)}), set.TABLE.KEY or host_set.TABLE.KEY")


def check_value(name: str, value: Any, options: dict[str, Option], where: str) -> Any:
    """A value of axis `name` as the point will use it, or a ConfigError naming it."""
    if name.startswith((PART_PREFIX, HOST_PREFIX)):
        if isinstance(value, (dict, list)) or value is None:
            raise ConfigError(f"{where}: {name} = {value!r}: a part key takes one number, "
                              f"string or boolean")
        return value           # the part loader checks it (check.py, before any work)
    o = options[name]
    if o.kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {name} = {value!r}: expected true or false")
    elif o.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: {name} = {value!r}: expected an integer")
    elif o.kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: {name} = {value!r}: expected a number")
        value = float(value)
    elif not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {name} = {value!r}: expected a non-empty string")
    if o.choices and value not in o.choices:
        raise ConfigError(f"{where}: {name} = {value!r}: choose one of "
                          f"{', '.join(map(str, o.choices))}")
    if name == "save_trace" and ("/" in value or "\\" in value or value in (".", "..")):
        raise ConfigError(f"{where}: save_trace = {value!r}: a file name (no folder): each "
                          f"point writes its step's trace into its own folder")
    if name == "save_trace" and (value.startswith(".") or value in POINT_FILES):
        raise ConfigError(f"{where}: save_trace = {value!r}: "
                          + (f"a name the point's folder uses for its own {value}"
                             if value in POINT_FILES else
                             "a name that starts with '.' (the point's folder keeps its "
                             "files being written under such names)")
                          + "; give another file name, such as step.npy")
    if name == "format" and value != "npy":
        raise ConfigError(f"{where}: format = {value!r}: a sweep writes its points' traces "
                          f"as npy (the GPU-only step, a baseline the points share, is "
                          f"written by pimrt run --save-trace FILE --format {value})")
    if name == "host_times" and value == "measure":
        raise ConfigError(f"{where}: host_times = 'measure': a sweep replays host times; "
                          f"measure them once with pimrt run --host-times measure and give "
                          f"that file or folder")
    return value


# the files of a point's folder (pimrt.runtime.report, pimrt.sweep.store): a trace named so
# would be overwritten by them, or overwrite them
POINT_FILES = ("summary.json", "layers.csv", "trace.json", "timeline.png", "layer_speedup.png",
               "energy.png", "error.json")


def part_overrides(values: dict, prefix: str) -> dict:
    """{"set.pim.lanes": 16, ...} -> {"pim": {"lanes": 16}} for the keys with `prefix`."""
    out: dict = {}
    for name, v in values.items():
        if name.startswith(prefix):
            table, _, key = name[len(prefix):].partition(".")
            out.setdefault(table, {})[key] = v
    return out

"""Which simulator made a results folder: a fingerprint of the code the figures come from.

The pimrt package's sources and data (every .py, the shipped parts' TOML files, the PIM
cycle table kernel_cycles.json), and beside it in a checkout the memctl C sources with their
build script (memctl/, native/memctl_build.py) and the PIM unit's Verilog with its batch driver
(hw/, native/pim_driver*). An installed package has no memctl/ beside it: its compiled memctl
extension stands for the C code then, and the Verilog is not part of the fingerprint (the
figures use the cycle table, which is). Each file is hashed by content (not by time or git
state), so the same code gives the same fingerprint in any checkout or install; the per-file
hashes say what changed between two."""
from __future__ import annotations

import functools
import hashlib
import pathlib

import pimrt

PACKAGE = pathlib.Path(pimrt.__file__).resolve().parent
ROOT = PACKAGE.parent
# (folder under ROOT, patterns): what beside the package the simulator is built from
BESIDE = (("memctl", ("*.c", "*.h")), ("native", ("memctl_build.py", "pim_driver*")),
          ("hw", ("*.v", "*.vh", "*.sv")))


def _files() -> list[pathlib.Path]:
    out = [p for p in PACKAGE.rglob("*")
           if p.suffix in (".py", ".toml", ".json") and "__pycache__" not in p.parts
           and p.is_file()]
    if (ROOT / "memctl").is_dir():
        for folder, patterns in BESIDE:
            for pattern in patterns:
                out += [p for p in (ROOT / folder).glob(pattern) if p.is_file()]
    else:                             # an installed package: the C code as it was built
        out += [p for p in map(PACKAGE.joinpath, built_extensions()) if p.is_file()]
    return sorted(set(out))


def built_extensions() -> list[str]:
    """The names the compiled memctl extension may have in the package (not the C file or
    object file an in-place build leaves beside it)."""
    from importlib.machinery import EXTENSION_SUFFIXES
    return [f"_memctl{suffix}" for suffix in EXTENSION_SUFFIXES]


@functools.cache
def fingerprint() -> dict:
    """{"fingerprint": 16 hex digits, "files": {path: 12 hex digits}} of the code here
    (computed once per process)."""
    files = {p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()[:12]
             for p in _files()}
    text = "\n".join(f"{k} {v}" for k, v in sorted(files.items()))
    return {"fingerprint": hashlib.sha256(text.encode()).hexdigest()[:16], "files": files}


def changes(old: dict, new: dict, most: int = 4) -> str:
    """What differs between two fingerprints' files, in a few words: "pimrt/runtime/timing.py
    changed, memctl/sim.c added (+3 more)"."""
    a, b = old.get("files") or {}, new.get("files") or {}
    if not a:
        return "the folder does not list its files"
    said = [f"{k} changed" for k in sorted(a) if k in b and a[k] != b[k]]
    said += [f"{k} added" for k in sorted(set(b) - set(a))]
    said += [f"{k} removed" for k in sorted(set(a) - set(b))]
    if not said:
        return "the same files"
    return ", ".join(said[:most]) + (f" (+{len(said) - most} more)" if len(said) > most else "")

"""Loads the compiled memctl extension (pimrt._memctl), rebuilding it in place first when the
C sources in memctl/ (or the build script with its compiler flags, native/memctl_build.py) are
newer than it (a checkout where someone edited the C code)."""
from __future__ import annotations

import importlib
import importlib.util
import os
import pathlib
import sys

from pimrt.errors import PimrtError

_PKG = pathlib.Path(__file__).resolve().parent.parent
_ROOT = _PKG.parent


def _stale(module_file: str | None) -> bool:
    src = _ROOT / "memctl"
    if not module_file or not src.is_dir():
        return False  # an installed wheel: no sources beside it
    built = pathlib.Path(module_file).stat().st_mtime
    inputs = [*src.glob("*.[ch]"), _ROOT / "native" / "memctl_build.py"]
    return any(p.is_file() and p.stat().st_mtime > built for p in inputs)


def _rebuild() -> None:
    sys.path.insert(0, str(_ROOT / "native"))
    try:
        import memctl_build  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    cwd = os.getcwd()
    os.chdir(_ROOT)  # the build script names its sources relative to the repository root
    try:
        memctl_build.ffibuilder.compile(tmpdir=str(_ROOT), verbose=False)
    finally:
        os.chdir(cwd)


def load():
    spec = importlib.util.find_spec("pimrt._memctl")
    if spec is None or _stale(spec.origin):
        try:
            _rebuild()
        except Exception as exc:  # a compiler missing or failing
            raise PimrtError(
                f"cannot build the memctl extension ({exc}); run scripts/bootstrap.sh, which "
                "installs a C compiler and builds pimrt") from exc
        importlib.invalidate_caches()
    mod = importlib.import_module("pimrt._memctl")
    return mod.ffi, mod.lib


ffi, lib = load()

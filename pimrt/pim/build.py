"""Where the RTL lives, finding Verilator and a compiler, and the build cache.

The sources: in a checkout, hw/ and native/ beside the package (edited in place); in a package
installed from a wheel, the copies setup.py put into it (pimrt/_rtl/hw, pimrt/_rtl/native).

Builds go under $PIMRT_CACHE/pim, else $XDG_CACHE_HOME/pimrt/pim, else ~/.cache/pimrt/pim
(never into the package), as <what>-<hash>, where the hash covers every file in hw/ (and
native/pim_* for the driver), the build flags and the Verilator version, so a build is redone
only when one of those changes. Concurrent builders take a file lock.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

from pimrt.pim.errors import PimBuildError

PACKAGE = Path(__file__).resolve().parents[1]
REPO = PACKAGE.parent
PACKAGED = PACKAGE / "_rtl"     # setup.py copies hw/ and native/pim_driver* here in a wheel


def _source_dirs() -> tuple[Path, Path]:
    """(hw/, native/) of a checkout when the package sits in one, else the package's copies."""
    if (REPO / "hw" / "pim_top.v").is_file() and (REPO / "native" / "pim_driver.cpp").is_file():
        return REPO / "hw", REPO / "native"
    return PACKAGED / "hw", PACKAGED / "native"


HW_DIR, NATIVE_DIR = _source_dirs()
INSTALL_HINT = ("install it with `apt-get install -y verilator` (Debian/Ubuntu; Verilator 5.x) "
                "or run scripts/bootstrap.sh")
_which = shutil.which


def verilator() -> str:
    """Path of the verilator executable, or a PimBuildError that says how to install it."""
    path = _which(os.environ.get("PIMRT_VERILATOR", "verilator"))
    if path is None:
        raise PimBuildError(f"Verilator is not installed (no `verilator` on PATH); {INSTALL_HINT}")
    return path


def verilator_version() -> str:
    out = subprocess.run([verilator(), "--version"], capture_output=True, text=True)
    return out.stdout.strip()


def verilator_include() -> Path:
    root = os.environ.get("VERILATOR_ROOT")
    candidates = [Path(root) / "include"] if root else []
    candidates += [Path("/usr/share/verilator/include"), Path("/usr/local/share/verilator/include")]
    for c in candidates:
        if (c / "verilated.cpp").exists():
            return c
    out = subprocess.run([verilator(), "--getenv", "VERILATOR_ROOT"], capture_output=True, text=True)
    c = Path(out.stdout.strip()) / "include"
    if (c / "verilated.cpp").exists():
        return c
    raise PimBuildError(f"cannot find Verilator's include directory (verilated.cpp); {INSTALL_HINT}")


def hw_sources(hw_dir: Path | None = None) -> list[Path]:
    """The Verilog files of the unit: hw/, or another copy of it (`hw_dir`, e.g. an older
    revision's, for `pimrt bench pim --baseline-hw`)."""
    default = hw_dir is None
    hw_dir = Path(hw_dir) if hw_dir is not None else HW_DIR
    if not hw_dir.is_dir():
        if default:
            raise PimBuildError(
                f"no Verilog sources: neither a checkout's {REPO / 'hw'} nor the package's copy "
                f"{hw_dir}; reinstall pimrt from a wheel built by its setup.py (pip wheel .)")
        raise PimBuildError(f"no Verilog directory {hw_dir}")
    files = sorted(p for p in hw_dir.iterdir() if p.suffix in (".v", ".vh", ".sv"))
    if not files:
        raise PimBuildError(f"no Verilog sources in {hw_dir}")
    if not (hw_dir / "pim_top.v").exists():
        raise PimBuildError(f"{hw_dir} has no pim_top.v")
    return files


def cache_root() -> Path:
    """Where builds go: $PIMRT_CACHE/pim, else $XDG_CACHE_HOME/pimrt/pim, else
    ~/.cache/pimrt/pim."""
    root = os.environ.get("PIMRT_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = Path(xdg) / "pimrt" if xdg and Path(xdg).is_absolute() else Path.home() / ".cache" / "pimrt"
    return Path(root).expanduser().resolve() / "pim"


def check_toolchain(cffi: bool = True) -> None:
    """One PimBuildError line naming every missing tool a build of the Verilated model needs:
    make and g++ (Verilator's makefile calls g++), and for the cffi driver the compiler
    Python builds extensions with and Python's C headers. Called before a build only, so a
    cached model runs without them."""
    missing = [t for t in ("make", "g++") if _which(t) is None]
    if cffi:
        cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
        if _which(cc) is None and cc not in missing:
            missing.append(cc)
    if missing:
        raise PimBuildError(
            f"cannot build the Verilated PIM unit: {', '.join(missing)} not found on PATH; "
            f"install a C/C++ compiler and make with `apt-get install -y build-essential g++ make` "
            f"(Debian/Ubuntu) or run scripts/bootstrap.sh")
    if cffi:
        include = Path(sysconfig.get_paths()["include"])
        if not (include / "Python.h").is_file():
            raise PimBuildError(
                f"cannot build the Verilated PIM unit's driver: Python's C headers are missing "
                f"(no {include / 'Python.h'}); install them, e.g. `apt-get install -y python3-dev`")


def build_key(what: str, files: list[Path], flags: list[str]) -> str:
    h = hashlib.sha256()
    h.update(verilator_version().encode())
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    h.update("\0".join(flags).encode())
    return f"{what}-{h.hexdigest()[:16]}"


@contextlib.contextmanager
def locked(path: Path):
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path.with_suffix(".lock"), "w")
    except OSError as exc:
        raise PimBuildError(f"cannot write the build cache {path.parent} ({exc.strerror}); "
                            f"set PIMRT_CACHE to a writable folder") from exc
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-4000:]
        raise PimBuildError(f"build step failed: {' '.join(cmd[:3])} ...\n{tail}")


def jobs() -> str:
    return os.environ.get("PIMRT_BUILD_JOBS", "2")

"""Where the RTL lives, finding Verilator, and the build cache.

Builds go under ${PIMRT_CACHE:-~/.cache/pimrt}/pim/<what>-<hash>, where the hash covers every
file in hw/ (and native/pim_* for the driver), the build flags and the Verilator version,
so a build is redone only when one of those changes. Concurrent builders take a file lock.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from pimrt.pim.errors import PimBuildError

REPO = Path(__file__).resolve().parents[2]
HW_DIR = REPO / "hw"
NATIVE_DIR = REPO / "native"
INSTALL_HINT = ("install it with `apt-get install -y verilator` (Debian/Ubuntu; Verilator 5.x) "
                "or run scripts/bootstrap.sh")


def verilator() -> str:
    """Path of the verilator executable, or a PimBuildError that says how to install it."""
    path = shutil.which(os.environ.get("PIMRT_VERILATOR", "verilator"))
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
    hw_dir = Path(hw_dir) if hw_dir is not None else HW_DIR
    if not hw_dir.is_dir():
        raise PimBuildError(f"no Verilog directory {hw_dir}")
    files = sorted(p for p in hw_dir.iterdir() if p.suffix in (".v", ".vh", ".sv"))
    if not files:
        raise PimBuildError(f"no Verilog sources in {hw_dir}")
    if not (hw_dir / "pim_top.v").exists():
        raise PimBuildError(f"{hw_dir} has no pim_top.v")
    return files


def cache_root() -> Path:
    root = os.environ.get("PIMRT_CACHE") or Path.home() / ".cache" / "pimrt"
    return Path(root).expanduser().resolve() / "pim"


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
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as fh:
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

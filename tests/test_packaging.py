"""pimrt installed from its own wheel runs its hardware: the wheel carries the PIM unit's
Verilog and the batch driver's C++ (setup.py copies hw/ and native/pim_driver* into
pimrt/_rtl), the Verilated model is built into a user cache (PIMRT_CACHE, XDG_CACHE_HOME or
~/.cache/pimrt; never into the package), and a missing tool is one line.

The slow test builds the wheel from a copy of the repo, installs it with torch into a fresh
virtual environment and runs the RTL functional step from outside the checkout."""
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from pimrt import cli
from pimrt.pim import build, driver, testing
from pimrt.pim.errors import PimBuildError

REPO = Path(__file__).resolve().parents[1]
# what a wheel is built from; build products of a checkout left out
SOURCES = ("pimrt", "memctl", "native", "hw", "setup.py", "pyproject.toml", "MANIFEST.in",
           "README.md")
IGNORE = shutil.ignore_patterns("__pycache__", "*.so", "*.o", "*.a", "_memctl.c", "*.egg-info",
                                "_rtl", "test_memctl*", "bench_memctl", "sanitized")
TORCH = "torch==2.13.0"


def _copy_repo(dest: Path) -> Path:
    dest.mkdir()
    for name in SOURCES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=IGNORE)
        else:
            shutil.copy2(src, dest / name)
    return dest


def test_checkout_builds_its_own_hw_and_native():
    """In a checkout the RTL is hw/ and native/ edited in place, not a packaged copy."""
    assert build.HW_DIR == REPO / "hw"
    assert build.NATIVE_DIR == REPO / "native"


def test_cache_root_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PIMRT_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build.cache_root() == (tmp_path / "mine" / "pim").resolve()
    monkeypatch.delenv("PIMRT_CACHE")
    assert build.cache_root() == (tmp_path / "xdg" / "pimrt" / "pim").resolve()
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")      # the XDG spec: absolute only
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert build.cache_root() == (tmp_path / "home" / ".cache" / "pimrt" / "pim").resolve()


def test_build_py_packages_every_rtl_source(tmp_path):
    """setup.py's build_py puts into the package every file the driver's build hashes and
    compiles, byte for byte (so an installed build has the checkout's cache key)."""
    src = _copy_repo(tmp_path / "src")
    out = tmp_path / "lib"
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "-d", str(out)],
                          cwd=src, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rtl = out / "pimrt" / "_rtl"
    for folder, files in (("hw", build.hw_sources()), ("native", driver._native_sources())):
        assert sorted(p.name for p in (rtl / folder).iterdir()) == [f.name for f in files]
        for f in files:
            assert (rtl / folder / f.name).read_bytes() == f.read_bytes(), f


def test_missing_compiler_is_one_line(monkeypatch, tmp_path):
    """Verilator present, g++ or make missing, no cached model: one line naming them."""
    testing.skip_without_verilator()
    real = build._which
    monkeypatch.setattr(build, "_which", lambda t: None if t in ("g++", "make") else real(t))
    monkeypatch.setattr(driver, "_loaded", {})
    monkeypatch.setenv("PIMRT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(PimBuildError) as err:
        driver.build_driver(8, 4, 32)
    assert "\n" not in str(err.value)
    assert "make, g++ not found" in str(err.value) and "apt-get install" in str(err.value)
    assert not [p for p in (tmp_path / "cache" / "pim").iterdir() if p.is_dir()]  # no build


def test_missing_compiler_cli_exits_with_one_line(monkeypatch, tmp_path, capsys):
    testing.skip_without_verilator()
    real = build._which
    monkeypatch.setattr(build, "_which", lambda t: None if t == "g++" else real(t))
    monkeypatch.setattr(driver, "_loaded", {})
    monkeypatch.setenv("PIMRT_CACHE", str(tmp_path / "cache"))
    rc = cli.main(["run", "--model", "resnet_cifar_20", "--batch", "2", "--functional", "rtl",
                   "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("pimrt run: error: cannot build the Verilated PIM unit: g++ not found")


def test_unwritable_cache_is_one_line(monkeypatch, tmp_path):
    testing.skip_without_verilator()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(driver, "_loaded", {})
    monkeypatch.setenv("PIMRT_CACHE", str(blocker / "cache"))
    with pytest.raises(PimBuildError, match="set PIMRT_CACHE to a writable folder"):
        driver.build_driver(8, 4, 32)


def _pip(python: Path, *args, cwd: Path, timeout: int = 900):
    return subprocess.run([str(python), "-m", "pip", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PIP_NO_INPUT": "1"})


@pytest.mark.slow
def test_wheel_in_fresh_venv_runs_the_rtl_functional_step(tmp_path):
    """pip wheel of the repo, a fresh venv with torch then the wheel, and from a folder outside
    the checkout `pimrt run --functional rtl`: the Verilated model built into the user cache
    from the package's own copy of the RTL, the functional check within tolerance, nothing
    written into the venv."""
    testing.skip_without_verilator()
    src = _copy_repo(tmp_path / "src")
    wheels = tmp_path / "wheels"
    proc = _pip(Path(sys.executable), "wheel", str(src), "-w", str(wheels), "--no-deps", "-q",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = wheels.glob("pimrt-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    proc = _pip(python, "install", "-q", TORCH, cwd=tmp_path)
    if proc.returncode != 0:
        pytest.skip(f"{TORCH} is not installable here: {proc.stderr.strip()[-300:]}")
    proc = _pip(python, "install", "-q", str(wheel), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PIMRT_CACHE", "PYTHONPATH", "VIRTUAL_ENV", "PIMRT_PIM_UNITS")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    site = subprocess.run(
        [str(python), "-c", "import pimrt.pim.build as b; print(b.HW_DIR); print(b.cache_root())"],
        cwd=work, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert Path(site[0]).is_relative_to(env_dir.resolve()) and site[0].endswith("pimrt/_rtl/hw"), site
    assert Path(site[1]) == (tmp_path / "xdg" / "pimrt" / "pim").resolve()

    before = {p for p in env_dir.rglob("*") if "__pycache__" not in p.parts}
    out = work / "run"
    proc = subprocess.run(
        [str(env_dir / "bin" / "pimrt"), "run", "--model", "resnet_cifar_20", "--batch", "2",
         "--functional", "rtl", "--out", str(out)],
        cwd=work, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "functional step (rtl backend)" in proc.stdout + proc.stderr
    functional = json.loads((out / "summary.json").read_text())["functional"]
    assert functional["backend"] == "rtl"
    assert functional["grads_within_tolerance"] is True
    assert functional["groups_equal"] is True
    assert functional["loss_abs_diff"] < 1e-4
    assert list((tmp_path / "xdg" / "pimrt" / "pim").glob("drv-*/_pim_driver_*.so"))
    after = {p for p in env_dir.rglob("*") if "__pycache__" not in p.parts}
    assert after == before, sorted(map(str, after - before))[:10]

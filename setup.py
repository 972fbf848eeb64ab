# The memctl C library is compiled into the extension pimrt._memctl by cffi (API mode) when the
# package is installed; the build script lives in native/.
#
# A wheel also carries what the RTL backends build on first use (pimrt.pim.build): the PIM
# unit's Verilog (hw/) and the batch driver's C++ (native/pim_driver*), copied into the
# package as pimrt/_rtl/hw and pimrt/_rtl/native. An editable install (scripts/bootstrap.sh)
# copies nothing: pimrt.pim.build reads hw/ and native/ of the checkout in place.
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
RTL_SOURCES = {"hw": ("*.v", "*.vh", "*.sv"), "native": ("pim_driver*",)}


def rtl_files() -> list[tuple[Path, str]]:
    """(source file, path under pimrt/_rtl/) of every RTL source the package carries."""
    out = []
    for folder, patterns in RTL_SOURCES.items():
        for pattern in patterns:
            out += [(p, f"{folder}/{p.name}") for p in sorted((HERE / folder).glob(pattern))
                    if p.is_file()]
    if not any(rel == "hw/pim_top.v" for _, rel in out):
        raise SystemExit(f"setup.py: no hw/pim_top.v under {HERE}: cannot package the RTL")
    return out


class BuildPyWithRtl(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "pimrt" / "_rtl"
        shutil.rmtree(dest, ignore_errors=True)        # no stale file from an earlier build
        for src, rel in rtl_files():
            self.mkpath(str((dest / rel).parent))
            self.copy_file(str(src), str(dest / rel), preserve_times=False)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        dest = Path(self.build_lib) / "pimrt" / "_rtl"
        return outputs + [str(dest / rel) for _, rel in rtl_files()]


setup(cffi_modules=["native/memctl_build.py:ffibuilder"], cmdclass={"build_py": BuildPyWithRtl})

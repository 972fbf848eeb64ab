"""cffi (API mode) build of the memctl C library into the extension module pimrt._memctl.

Used by setup.py (`cffi_modules`) when the package is installed, and by
pimrt.memctl._native to rebuild in place when the C sources are newer than the extension.
"""
import pathlib
import re

from cffi import FFI

ROOT = pathlib.Path(__file__).resolve().parent.parent
MEMCTL = ROOT / "memctl"
SOURCES = sorted(str(p.relative_to(ROOT)) for p in MEMCTL.glob("*.c"))


def cdef_text() -> str:
    """memctl.h without the preprocessor lines cffi's cdef does not take."""
    lines = []
    for line in (MEMCTL / "memctl.h").read_text().splitlines():
        if re.match(r"\s*#\s*(ifndef|endif|include)", line) or re.match(r"\s*#define MEMCTL_H", line):
            continue
        lines.append(line)
    return "\n".join(lines)


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "pimrt._memctl",
    '#include "memctl.h"',
    sources=SOURCES,
    include_dirs=[str(MEMCTL.relative_to(ROOT))],
    extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=False)

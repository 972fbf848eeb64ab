"""cffi (API mode) build of the memctl C library into the extension module pimrt._memctl.

Used by setup.py (`cffi_modules`) when the package is installed, and by
pimrt.memctl._native to rebuild in place when the C sources are newer than the extension.

With PIMRT_MEMCTL_SANITIZE=DIR in the environment it builds instead a separate module,
`_memctl_sanitized` in DIR, compiled with AddressSanitizer and UBSan (never the package's
module): `make -C memctl sanitize` runs the C API's hypothesis test on it
(tests/test_memctl_capi.py) with the compiler's libasan preloaded.
"""
import os
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


# -O3: inlines the scheduler's small helpers within each file (about 5% fewer instructions
# than -O2 on random traffic). -fvisibility=hidden: the C functions are called only from inside
# the extension (the module's init function stays exported), so calls between memctl's files
# are direct instead of going through the PLT.
COMPILE_ARGS = ["-std=c11", "-O3", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror"]

# the sanitizer build: every report fatal, so a test run under it fails on the first
SANITIZE_DIR = os.environ.get("PIMRT_MEMCTL_SANITIZE")
SANITIZE_ARGS = ["-std=c11", "-O1", "-g", "-fno-omit-frame-pointer", "-Wall", "-Wextra",
                 "-Werror", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]

ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "_memctl_sanitized" if SANITIZE_DIR else "pimrt._memctl",
    '#include "memctl.h"',
    # (absolute for the sanitizer build, which compiles in its own folder)
    sources=[str(ROOT / s) for s in SOURCES] if SANITIZE_DIR else SOURCES,
    include_dirs=[str(MEMCTL if SANITIZE_DIR else MEMCTL.relative_to(ROOT))],
    extra_compile_args=SANITIZE_ARGS if SANITIZE_DIR else COMPILE_ARGS,
    extra_link_args=["-fsanitize=address,undefined"] if SANITIZE_DIR else [],
)

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=SANITIZE_DIR or ".", verbose=False)

# The memctl C library is compiled into the extension pimrt._memctl by cffi (API mode) when the
# package is installed; the build script lives in native/.
from setuptools import setup

setup(cffi_modules=["native/memctl_build.py:ffibuilder"])

# setuptools cannot declare cffi_modules or C extensions in pyproject.toml; everything else
# lives there.  Two native modules: storage._plog, the C core (cffi), and storage._pyrecords,
# the list walk behind build_batch (Python's limited API: cffi cannot take a Python list).
import os
import sys

from setuptools import Extension, setup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc"))
from build_plog import compile_args, link_args  # noqa: E402

pyrecords = Extension(
    "storage._pyrecords",
    sources=["csrc/pyrecords.c"],
    include_dirs=["csrc"],
    define_macros=[("Py_LIMITED_API", "0x030B0000")],
    extra_compile_args=compile_args(),
    extra_link_args=link_args(),
    py_limited_api=True,
)

setup(cffi_modules=["csrc/build_plog.py:ffi"], ext_modules=[pyrecords])

# setuptools cannot declare cffi_modules in pyproject.toml; everything else lives there.
from setuptools import setup

setup(cffi_modules=["csrc/build_plog.py:ffi"])

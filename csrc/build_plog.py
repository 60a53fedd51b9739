"""cffi build script for the C core (out-of-line API mode).

The cdef is the region of csrc/plog.h between CDEF-BEGIN and CDEF-END, plus the
`extern "Python+C"` callbacks through which the C I/O seam reaches storage/core/io.py.
Build switches (environment): PLOG_DEBUG=1 compiles -O0 -g with PLOG_ASSERT on; PLOG_SANITIZE=address,undefined
adds the sanitizers (run Python with the matching LD_PRELOAD).
"""
import hashlib
import os
import re

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SOURCES = ["plog.c", "crc32c.c", "batch.c", "records.c", "index.c", "segment.c", "recover.c", "io.c"]

PYTHON_CALLBACKS = """
extern "Python+C" int _plog_py_open(const char *path, int flags, int *fd_out);
extern "Python+C" int _plog_py_close(int fd);
extern "Python+C" int _plog_py_pread(int fd, uint8_t *buf, size_t length, int64_t offset, size_t *read_out);
extern "Python+C" int _plog_py_pwrite(int fd, const uint8_t *buf, size_t length, int64_t offset);
extern "Python+C" int _plog_py_pwritev(int fd, const plog_iovec *iov, int count, int64_t offset);
extern "Python+C" int _plog_py_fsync(int fd, int flags);
extern "Python+C" int _plog_py_ftruncate(int fd, int64_t size);
extern "Python+C" int _plog_py_fsize(int fd, int64_t *size_out);
extern "Python+C" int _plog_py_mmap(int fd, size_t length, int writable, uint8_t **addr_out);
extern "Python+C" int _plog_py_munmap(uint8_t *addr, size_t length);
extern "Python+C" int _plog_py_msync(uint8_t *addr, size_t length, int flags);
"""


def read_cdef() -> str:
    with open(os.path.join(HERE, "plog.h"), encoding="utf-8") as f:
        text = f.read()
    match = re.search(r"/\* CDEF-BEGIN \*/(.*)/\* CDEF-END \*/", text, re.S)
    if not match:
        raise RuntimeError("csrc/plog.h: CDEF-BEGIN/CDEF-END markers missing")
    return match.group(1)


def source_digest() -> str:
    """Digest of everything the native module is built from; storage/core/_native.py compares it."""
    digest = hashlib.sha256()
    for name in sorted(SOURCES + ["plog.h", "internal.h", "build_plog.py", "pyrecords.c"]):
        with open(os.path.join(HERE, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


def package_version() -> str:
    with open(os.path.join(ROOT, "storage", "_version.py"), encoding="utf-8") as f:
        return re.search(r'__version__ = "([^"]+)"', f.read()).group(1)


def compile_args():
    args = ["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    if os.environ.get("PLOG_DEBUG"):
        args += ["-O0", "-g"]
    else:
        args += ["-O3"]
    sanitize = os.environ.get("PLOG_SANITIZE")
    if os.environ.get("PLOG_DEBUG") or sanitize:
        args += ["-DPLOG_ASSERTS"]      # PLOG_ASSERT (internal.h): on in debug and sanitizer builds
    if sanitize:
        # Python's own CFLAGS carry -fwrapv, which defines signed overflow and so hides it from
        # UBSan: -fno-wrapv (later on the command line, so it wins) makes it visible, and no
        # recovery makes every finding abort the run.
        args += [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g", "-fno-wrapv",
                 "-fno-sanitize-recover=all"]
    return args


def link_args():
    sanitize = os.environ.get("PLOG_SANITIZE")
    return [f"-fsanitize={sanitize}"] if sanitize else []


ffi = FFI()
ffi.cdef(read_cdef() + PYTHON_CALLBACKS)
ffi.set_source(
    "storage._plog",
    '#include "plog.h"\n',
    sources=[os.path.relpath(os.path.join(HERE, s), ROOT) for s in SOURCES],
    include_dirs=[os.path.relpath(HERE, ROOT)],
    define_macros=[("PLOG_VERSION_STRING", '"%s+%s"' % (package_version(), source_digest())),
                   ("_GNU_SOURCE", None)],
    extra_compile_args=compile_args(),
    extra_link_args=link_args(),
    libraries=["pthread"],
)

if __name__ == "__main__":
    ffi.compile(verbose=True)

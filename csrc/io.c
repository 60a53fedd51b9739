/*
 * io.c -- the one I/O seam of the C core.
 *
 * Every open, read, write, fsync, truncate and mapping the core makes goes through the
 * plog_io_* functions below.  By default they call the POSIX implementation (plog_posix_*).
 * plog_io_use_python(1) sends them to callbacks defined by the cffi module
 * (`extern "Python+C"`, see csrc/build_plog.py) that dispatch to the Python seam object
 * installed with storage.io.install(): a simulated file system sees exactly the operations
 * and flush points the engine makes in production (docs/design.md "Durability switch").
 *
 * Contract of each operation: 0 or a positive errno.  pwrite writes everything or fails.
 * fsync with PLOG_SYNC_NOOP is a flush point with fsync disabled: the POSIX implementation
 * does nothing, a simulator records it as a flush.
 */
#define _GNU_SOURCE
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stddef.h>
#include <sys/uio.h>
#include <unistd.h>
#include <string.h>

/* Provided by the cffi-generated module. */
extern int _plog_py_open(const char *path, int flags, int *fd_out);
extern int _plog_py_close(int fd);
extern int _plog_py_pread(int fd, uint8_t *buf, size_t length, int64_t offset, size_t *read_out);
extern int _plog_py_pwrite(int fd, const uint8_t *buf, size_t length, int64_t offset);
extern int _plog_py_pwritev(int fd, const plog_iovec *iov, int count, int64_t offset);
extern int _plog_py_fsync(int fd, int flags);
extern int _plog_py_ftruncate(int fd, int64_t size);
extern int _plog_py_fsize(int fd, int64_t *size_out);
extern int _plog_py_mmap(int fd, size_t length, int writable, uint8_t **addr_out);
extern int _plog_py_munmap(uint8_t *addr, size_t length);
extern int _plog_py_msync(uint8_t *addr, size_t length, int flags);

static int python_active = 0;

void plog_io_use_python(int on) { python_active = on ? 1 : 0; }
int plog_io_python_active(void) { return python_active; }

/* ---- POSIX ---------------------------------------------------------------------------- */

int plog_posix_open(const char *path, int flags, int *fd_out) {
    int oflags = O_CLOEXEC;
    oflags |= (flags & PLOG_O_WRITE) ? O_RDWR : O_RDONLY;
    if (flags & PLOG_O_CREATE) oflags |= O_CREAT;
    if (flags & PLOG_O_TRUNCATE) oflags |= O_TRUNC;
    int fd;
    do fd = open(path, oflags, 0644); while (fd < 0 && errno == EINTR);
    if (fd < 0) return errno;
    *fd_out = fd;
    return 0;
}

int plog_posix_close(int fd) { return close(fd) ? errno : 0; }

int plog_posix_pread(int fd, uint8_t *buf, size_t length, int64_t offset, size_t *read_out) {
    size_t done = 0;
    while (done < length) {
        ssize_t n = pread(fd, buf + done, length - done, (off_t)(offset + (int64_t)done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) break;
        done += (size_t)n;
    }
    *read_out = done;
    return 0;
}

int plog_posix_pwrite(int fd, const uint8_t *buf, size_t length, int64_t offset) {
    size_t done = 0;
    while (done < length) {
        ssize_t n = pwrite(fd, buf + done, length - done, (off_t)(offset + (int64_t)done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        done += (size_t)n;
    }
    return 0;
}

_Static_assert(sizeof(plog_iovec) == sizeof(struct iovec) &&
               offsetof(plog_iovec, base) == offsetof(struct iovec, iov_base) &&
               offsetof(plog_iovec, length) == offsetof(struct iovec, iov_len),
               "plog_iovec must have the layout of struct iovec");

/* Short writes resume where they stopped: the written buffers are skipped, the one cut
 * short continues from its first unwritten byte (in a local copy; iov is not changed). */
int plog_posix_pwritev(int fd, const plog_iovec *iov, int count, int64_t offset) {
    if (count < 0 || count > PLOG_IOV_MAX) return EINVAL;
    struct iovec local[PLOG_IOV_MAX];
    memcpy(local, iov, (size_t)count * sizeof *local);
    int first = 0;
    while (first < count && local[first].iov_len == 0) first++;
    while (first < count) {
        ssize_t n = pwritev(fd, local + first, count - first, (off_t)offset);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (n == 0) return EIO;             /* no progress on a non-empty write */
        offset += n;
        while (first < count && (size_t)n >= local[first].iov_len) n -= (ssize_t)local[first++].iov_len;
        if (first < count) {
            local[first].iov_base = (uint8_t *)local[first].iov_base + n;
            local[first].iov_len -= (size_t)n;
        }
        while (first < count && local[first].iov_len == 0) first++;
    }
    return 0;
}

int plog_posix_fsync(int fd, int flags) {
    if (flags & PLOG_SYNC_NOOP) return 0;
    return fsync(fd) ? errno : 0;
}

int plog_posix_ftruncate(int fd, int64_t size) {
    int rc;
    do rc = ftruncate(fd, (off_t)size); while (rc && errno == EINTR);
    return rc ? errno : 0;
}

int plog_posix_fsize(int fd, int64_t *size_out) {
    struct stat st;
    if (fstat(fd, &st)) return errno;
    *size_out = (int64_t)st.st_size;
    return 0;
}

int plog_posix_mmap(int fd, size_t length, int writable, uint8_t **addr_out) {
    if (length == 0) {
        *addr_out = NULL;
        return 0;
    }
    void *p = mmap(NULL, length, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return errno;
    /* Index maps are written a slot at a time and searched at random: read-ahead would only
     * fault in (zero) pages nobody asked for.  A hint; its failure is harmless. */
    if (writable) (void)madvise(p, length, MADV_RANDOM);
    *addr_out = p;
    return 0;
}

int plog_posix_munmap(uint8_t *addr, size_t length) {
    if (!addr || !length) return 0;
    return munmap(addr, length) ? errno : 0;
}

int plog_posix_msync(uint8_t *addr, size_t length, int flags) {
    if (!addr || !length || (flags & PLOG_SYNC_NOOP)) return 0;
    return msync(addr, length, MS_SYNC) ? errno : 0;
}

/* ---- dispatch ------------------------------------------------------------------------- */

#define DISPATCH(name, ...) (python_active ? _plog_py_##name(__VA_ARGS__) : plog_posix_##name(__VA_ARGS__))

int plog_io_open(const char *path, int flags, int *fd_out) { return DISPATCH(open, path, flags, fd_out); }
int plog_io_close(int fd) { return DISPATCH(close, fd); }
int plog_io_pread(int fd, uint8_t *buf, size_t length, int64_t offset, size_t *read_out) {
    return DISPATCH(pread, fd, buf, length, offset, read_out);
}
int plog_io_pwrite(int fd, const uint8_t *buf, size_t length, int64_t offset) {
    return DISPATCH(pwrite, fd, buf, length, offset);
}
int plog_io_pwritev(int fd, const plog_iovec *iov, int count, int64_t offset) {
    return DISPATCH(pwritev, fd, iov, count, offset);
}
int plog_io_fsync(int fd, int flags) { return DISPATCH(fsync, fd, flags); }
int plog_io_ftruncate(int fd, int64_t size) { return DISPATCH(ftruncate, fd, size); }
int plog_io_fsize(int fd, int64_t *size_out) { return DISPATCH(fsize, fd, size_out); }
int plog_io_mmap(int fd, size_t length, int writable, uint8_t **addr_out) {
    return DISPATCH(mmap, fd, length, writable, addr_out);
}
int plog_io_munmap(uint8_t *addr, size_t length) { return DISPATCH(munmap, addr, length); }
int plog_io_msync(uint8_t *addr, size_t length, int flags) { return DISPATCH(msync, addr, length, flags); }

int plog_io_mmap_snapshot(uint8_t *addr, size_t valid, size_t from, size_t length) {
    if (!addr || !length || from >= length) return 0;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t base = (uintptr_t)addr;
    uintptr_t start = (base + from) & ~((uintptr_t)page - 1);
    uintptr_t copy_end = (base + (valid < length ? valid : length) + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    if (copy_end > start) {
        /* Private copies of the pages that hold bytes a reader may still look at, swapped in
         * over the shared file pages in one mremap: the file can then shrink under them. */
        size_t bytes = copy_end - start;
        void *copy = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (copy == MAP_FAILED) return errno;
        memcpy(copy, (void *)start, bytes);
        if (mprotect(copy, bytes, PROT_READ) ||
            mremap(copy, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)start) == MAP_FAILED) {
            int rc = errno;
            munmap(copy, bytes);
            return rc;
        }
        start = copy_end;
    }
    size_t rest = (size_t)(base + length - start);
    return start < base + length ? plog_io_mmap_retire((uint8_t *)start, rest) : 0;
}

int plog_io_mmap_retire(uint8_t *addr, size_t length) {
    if (!addr || !length) return 0;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)addr + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t end = ((uintptr_t)addr + length + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    if (end <= start) return 0;
    void *p = mmap((void *)start, end - start, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    return p == MAP_FAILED ? errno : 0;
}

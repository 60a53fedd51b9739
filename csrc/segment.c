/*
 * segment.c -- one log segment: NNNNNNNNNNNNNNNNNNNN.log plus its .index and .timeindex.
 *
 * The .log is a bare concatenation of batches, written with pwrite at the logical end
 * (never pre-allocated).  Reads are served by Python from its own read-only mapping of the
 * .log (storage/log/segment.py); this file keeps the write side and the indexes.
 *
 * Invariants kept by every function here:
 *  I-size    size == the byte length of the valid batches; the file is never longer after a
 *            successful call (a failed append is truncated back to size).
 *  I-next    next_offset == last offset of the last batch + 1, or base_offset when empty.
 *  I-index   every offset-index entry names a batch start < size whose last offset is the
 *            entry's offset (or a chunk ending there), entries strictly increasing; every
 *            time-index entry's offset < next_offset.
 *  I-cadence an offset-index entry is added before appending a chunk iff more than
 *            index_interval_bytes were appended since the last entry (Kafka's rule; the
 *            first chunk of a segment never gets one).
 *  I-seal    a sealed segment's index files are exactly entries * entry size bytes long.
 */
#include "internal.h"
#include <errno.h>
#include <stdlib.h>

static int map_index(int fd, int64_t bytes, int writable, uint8_t **addr) {
    *addr = NULL;
    if (bytes <= 0) return 0;
    return plog_io_mmap(fd, (size_t)bytes, writable, addr);
}

/* Take an index file's entries as valid (Kafka does; recovery rebuilds them when it must):
 * read into heap memory for an active segment, mapped read-only for a sealed one.  A file
 * longer than its maximum is not read at all (a huge sparse file must not become a huge
 * allocation): no entries, and the segment is marked suspect for the caller to rebuild. */
static int open_index(plog_segment *seg, plog_index_ref x, int64_t max_bytes, int mutable_indexes) {
    int64_t file_bytes;
    int rc = plog_io_fsize(x.fd, &file_bytes);
    if (rc) return rc;
    *x.file_bytes = file_bytes;
    int64_t limit = max_bytes - max_bytes % x.entry_bytes;
    int64_t entries = file_bytes / x.entry_bytes;
    if (file_bytes > limit || entries > INT32_MAX) {
        seg->index_suspect = 1;
        entries = 0;
    }
    int64_t capacity_limit = limit / x.entry_bytes;
    *x.max_entries = (int32_t)(entries > capacity_limit ? entries : capacity_limit);
    if (!mutable_indexes) {
        *x.max_entries = (int32_t)entries;
        *x.map_bytes = entries * x.entry_bytes;
        if ((rc = map_index(x.fd, *x.map_bytes, 0, x.buf))) return rc;
    } else {
        *x.entries = 0;
        if ((rc = plog_index_to_heap(x, entries))) return rc;
        if (entries > 0) {
            size_t done = 0;
            size_t want = (size_t)entries * (size_t)x.entry_bytes;
            if ((rc = plog_io_pread(x.fd, *x.buf, want, 0, &done))) return rc;
            if (done != want) return EIO;      /* the file shrank under us */
        }
    }
    *x.entries = (int32_t)entries;
    *x.written = (int32_t)entries;
    return 0;
}

/* The empty heap index of a lazy segment: no file yet, room for max_bytes of entries. */
static int lazy_index(plog_index_ref x, int64_t max_bytes) {
    int64_t limit = (max_bytes - max_bytes % x.entry_bytes) / x.entry_bytes;
    *x.max_entries = (int32_t)(limit > INT32_MAX ? INT32_MAX : limit);
    *x.entries = *x.written = 0;
    *x.file_bytes = 0;
    return plog_index_to_heap(x, 0);
}

int plog_segment_attach_indexes(plog_segment *seg, const char *index_path, const char *time_path) {
    PLOG_ASSERT(seg != NULL);
    PLOG_ASSERT(index_path != NULL);
    PLOG_ASSERT(time_path != NULL);
    if (!seg->indexes_lazy) return 0;
    int index_fd = -1, time_fd = -1, rc;
    int64_t index_bytes = 0, time_bytes = 0;
    int flags = PLOG_O_READ | PLOG_O_WRITE | PLOG_O_CREATE;
    if ((rc = plog_io_open(index_path, flags, &index_fd))) goto fail;
    if ((rc = plog_io_open(time_path, flags, &time_fd))) goto fail;
    if ((rc = plog_io_fsize(index_fd, &index_bytes))) goto fail;
    if ((rc = plog_io_fsize(time_fd, &time_bytes))) goto fail;
    seg->index_fd = index_fd;
    seg->time_fd = time_fd;
    seg->offset_file_bytes = index_bytes;     /* the next sync cuts anything found there */
    seg->time_file_bytes = time_bytes;
    seg->offset_written = seg->time_written = 0;
    seg->indexes_lazy = 0;
    return 0;
fail:
    if (index_fd >= 0) plog_io_close(index_fd);
    if (time_fd >= 0) plog_io_close(time_fd);
    return rc;
}

int plog_segment_open(plog_segment *seg, const char *log_path, const char *index_path,
                      const char *time_path, int64_t base_offset, int32_t index_interval_bytes,
                      int64_t index_max_bytes, int create, int mutable_indexes, int sync_flags) {
    PLOG_ASSERT(seg != NULL);
    PLOG_ASSERT(log_path != NULL);
    PLOG_ASSERT(index_path != NULL);
    PLOG_ASSERT(time_path != NULL);
    PLOG_ASSERT(base_offset >= 0);
    PLOG_ASSERT(index_max_bytes >= 0);
    memset(seg, 0, sizeof *seg);
    seg->log_fd = seg->index_fd = seg->time_fd = -1;
    seg->base_offset = base_offset;
    seg->next_offset = base_offset;
    seg->index_interval_bytes = index_interval_bytes;
    seg->max_timestamp = seg->first_batch_max_timestamp = -1;
    seg->offset_of_max_timestamp = base_offset;
    seg->sync_flags = sync_flags;
    seg->mutable_indexes = mutable_indexes;
    int flags = PLOG_O_READ | PLOG_O_WRITE | (create ? PLOG_O_CREATE : 0);
    int rc;
    if ((rc = plog_io_open(log_path, flags, &seg->log_fd))) goto fail;
    if ((rc = plog_io_fsize(seg->log_fd, &seg->size))) goto fail;
    if (create && mutable_indexes && seg->size == 0) {
        /* A new segment: its index files come when first needed (Kafka's LazyIndex), unless
         * both are already there (left behind at this base offset: they are read, as on load). */
        int probe = plog_io_open(index_path, PLOG_O_READ | PLOG_O_WRITE, &seg->index_fd);
        if (probe == 0) probe = plog_io_open(time_path, PLOG_O_READ | PLOG_O_WRITE, &seg->time_fd);
        if (probe == ENOENT) {
            if (seg->index_fd >= 0 && (rc = plog_io_close(seg->index_fd))) goto fail;
            seg->index_fd = -1;
            seg->indexes_lazy = 1;
            if ((rc = lazy_index(plog_offset_index_ref(seg), index_max_bytes))) goto fail;
            if ((rc = lazy_index(plog_time_index_ref(seg), index_max_bytes))) goto fail;
            return 0;
        }
        if (probe) {
            rc = probe;
            goto fail;
        }
    } else {
        /* Index files are created when missing, as Kafka does on load. */
        if ((rc = plog_io_open(index_path, PLOG_O_READ | PLOG_O_WRITE | PLOG_O_CREATE, &seg->index_fd))) goto fail;
        if ((rc = plog_io_open(time_path, PLOG_O_READ | PLOG_O_WRITE | PLOG_O_CREATE, &seg->time_fd))) goto fail;
    }
    if ((rc = open_index(seg, plog_offset_index_ref(seg), index_max_bytes, mutable_indexes))) goto fail;
    if ((rc = open_index(seg, plog_time_index_ref(seg), index_max_bytes, mutable_indexes))) goto fail;
    return 0;
fail:
    plog_segment_close(seg);
    return rc;
}

int plog_segment_close(plog_segment *seg) {
    PLOG_ASSERT(seg != NULL);
    int rc = 0, r;
    if ((r = plog_index_release(plog_offset_index_ref(seg))) && !rc) rc = r;
    if ((r = plog_index_release(plog_time_index_ref(seg))) && !rc) rc = r;
    seg->offset_entries = seg->time_entries = 0;
    if (seg->log_fd >= 0 && (r = plog_io_close(seg->log_fd)) && !rc) rc = r;
    if (seg->index_fd >= 0 && (r = plog_io_close(seg->index_fd)) && !rc) rc = r;
    if (seg->time_fd >= 0 && (r = plog_io_close(seg->time_fd)) && !rc) rc = r;
    seg->log_fd = seg->index_fd = seg->time_fd = -1;
    return rc;
}

int plog_segment_suspend(plog_segment *seg) {
    PLOG_ASSERT(seg != NULL);
    int rc = 0, r;
    /* A mapped (sealed, from disk) index is released; a heap index stays as it is. */
    if (seg->offset_capacity == 0 && (r = plog_index_release(plog_offset_index_ref(seg))) && !rc) rc = r;
    if (seg->time_capacity == 0 && (r = plog_index_release(plog_time_index_ref(seg))) && !rc) rc = r;
    if (seg->log_fd >= 0 && (r = plog_io_close(seg->log_fd)) && !rc) rc = r;
    if (seg->index_fd >= 0 && (r = plog_io_close(seg->index_fd)) && !rc) rc = r;
    if (seg->time_fd >= 0 && (r = plog_io_close(seg->time_fd)) && !rc) rc = r;
    seg->log_fd = seg->index_fd = seg->time_fd = -1;
    return rc;
}

static int remap_index(plog_index_ref x) {
    if (*x.capacity > 0 || *x.entries == 0) return 0;      /* heap, or nothing to map */
    int64_t file_bytes;
    int rc = plog_io_fsize(x.fd, &file_bytes);
    if (rc) return rc;
    int64_t bytes = (int64_t)*x.entries * x.entry_bytes;
    if (file_bytes < bytes) return PLOG_EINDEXCORRUPT;     /* shrank while suspended */
    *x.file_bytes = file_bytes;
    *x.map_bytes = bytes;
    return map_index(x.fd, bytes, 0, x.buf);
}

int plog_segment_resume(plog_segment *seg, const char *log_path, const char *index_path, const char *time_path) {
    PLOG_ASSERT(seg != NULL);
    PLOG_ASSERT(log_path != NULL);
    PLOG_ASSERT(index_path != NULL);
    PLOG_ASSERT(time_path != NULL);
    if (seg->log_fd >= 0) return 0;
    int flags = PLOG_O_READ | PLOG_O_WRITE;
    int64_t size;
    int rc;
    if ((rc = plog_io_open(log_path, flags, &seg->log_fd))) goto fail;
    if ((rc = plog_io_fsize(seg->log_fd, &size))) goto fail;
    if (size != seg->size) {                               /* changed under us while suspended */
        rc = PLOG_ECORRUPT;
        goto fail;
    }
    if (!seg->indexes_lazy) {
        if ((rc = plog_io_open(index_path, flags | PLOG_O_CREATE, &seg->index_fd))) goto fail;
        if ((rc = plog_io_open(time_path, flags | PLOG_O_CREATE, &seg->time_fd))) goto fail;
    }
    if ((rc = remap_index(plog_offset_index_ref(seg)))) goto fail;
    if ((rc = remap_index(plog_time_index_ref(seg)))) goto fail;
    return 0;
fail:
    plog_segment_suspend(seg);
    return rc;
}

/* What plog_segment_append refuses before writing anything. */
static int append_check(const plog_segment *seg, size_t length, const plog_validate *v) {
    if (!seg->mutable_indexes || v->batch_count <= 0) return PLOG_EARG;
    int64_t relative = v->last_offset - seg->base_offset;
    if (v->first_offset < seg->base_offset || relative > INT32_MAX) return PLOG_EOVERFLOW;
    if (seg->size + (int64_t)length > INT32_MAX) return PLOG_ETOOLARGE;
    if (seg->bytes_since_last_index_entry > seg->index_interval_bytes &&
        (seg->offset_entries >= seg->offset_max_entries || seg->time_entries >= seg->time_max_entries - 1))
        return PLOG_EINDEXFULL;
    return 0;
}

/* The chunk of `length` bytes now follows seg->size in the file: index it (Kafka's cadence:
 * an entry for the chunk's last offset at its start when more than index_interval_bytes came
 * since the last entry) and account for it. */
static int append_done(plog_segment *seg, size_t length, const plog_validate *v) {
    int rc;
    if (v->max_timestamp > seg->max_timestamp) {
        seg->max_timestamp = v->max_timestamp;
        seg->offset_of_max_timestamp = v->offset_of_max_timestamp;
    }
    if (seg->bytes_since_last_index_entry > seg->index_interval_bytes) {
        if ((rc = plog_index_add(seg, v->last_offset, seg->size))) return rc;
        if ((rc = plog_time_index_maybe_add(seg, seg->max_timestamp, seg->offset_of_max_timestamp, 0))) return rc;
        seg->bytes_since_last_index_entry = 0;
    }
    if (seg->size == 0) seg->first_batch_max_timestamp = v->first_batch_max_timestamp;
    seg->bytes_since_last_index_entry += (int64_t)length;
    seg->size += (int64_t)length;
    seg->next_offset = v->last_offset + 1;
    /* What this append indexed points inside the log, below the next offset. */
    PLOG_ASSERT(seg->offset_entries == 0 ||
                (be32(seg->offset_index + (size_t)(seg->offset_entries - 1) * PLOG_OFFSET_ENTRY_BYTES + 4) < seg->size));
    plog_segment_assert_invariants(seg);
    return 0;
}

/* All or nothing after a failed append write: cut off whatever part of the chunk reached the
 * file, and return the append's error.  When even the cut fails, the file holds bytes past
 * seg->size: a CRC mismatch then gives way to that I/O error, which the caller must see. */
static int cut_back(plog_segment *seg, int rc) {
    int cut = plog_io_ftruncate(seg->log_fd, seg->size);
    return cut && rc == PLOG_ECRC ? cut : rc;
}

int plog_segment_append(plog_segment *seg, const uint8_t *buf, size_t length, const plog_validate *v) {
    PLOG_ASSERT(buf != NULL || length == 0);
    PLOG_ASSERT(v != NULL);
    plog_segment_assert_invariants(seg);
    int rc = append_check(seg, length, v);
    if (rc) return rc;
    if ((rc = plog_io_pwrite(seg->log_fd, buf, length, seg->size))) return cut_back(seg, rc);
    return append_done(seg, length, v);
}

/* Stamp each batch of a chunk that passed plog_validate_headers with a leader's offsets and
 * epoch (ASSIGN_OFFSETS / STAMP_EPOCH): in buf itself, or, given heads, in copies of each
 * batch's first PLOG_STAMPED_BYTES (buf is then not written). */
static void stamp_chunk(uint8_t *buf, size_t length, const plog_validate *v, uint8_t (*heads)[PLOG_STAMPED_BYTES]) {
    int64_t next = v->next_offset;
    for (size_t pos = 0, i = 0; pos < length; pos += (size_t)be32(buf + pos + POS_LENGTH) + PLOG_LOG_OVERHEAD, i++) {
        int64_t base = v->flags & PLOG_VALIDATE_ASSIGN_OFFSETS ? next : be64(buf + pos + POS_BASE_OFFSET);
        int32_t epoch = v->flags & PLOG_VALIDATE_STAMP_EPOCH ? v->leader_epoch : be32(buf + pos + POS_PLE);
        plog_batch_stamp(heads ? memcpy(heads[i], buf + pos, PLOG_STAMPED_BYTES) : buf + pos, base, epoch);
        next = base + be32(buf + pos + POS_LAST_OFFSET_DELTA) + 1;
    }
}

/* The write half of plog_segment_append_chunk, for a chunk that passed plog_validate_headers:
 * stamp it, then write it piece by piece, hashing each piece right after its write, while
 * the bytes the kernel just copied are still in the cache (see plog.h).  Invariant of the
 * loop: [0, written) was written; the batches before `pos` matched their CRCs; crc covers
 * [pos + 21, hashed) of the batch at pos.  Pieces are large on purpose: the page cache
 * takes one large write much faster than several small ones (large folios), and a 1 MiB
 * piece still fits the caches it is hashed from. */
static int write_verified(plog_segment *seg, uint8_t *buf, size_t length, plog_validate *v) {
    if (v->flags & (PLOG_VALIDATE_ASSIGN_OFFSETS | PLOG_VALIDATE_STAMP_EPOCH)) stamp_chunk(buf, length, v, NULL);
    size_t written = 0, pos = 0, hashed = POS_ATTRIBUTES;
    uint32_t crc = 0;
    int rc;
    while (written < length) {
        size_t piece = length - written < PLOG_APPEND_PIECE_BYTES ? length - written : PLOG_APPEND_PIECE_BYTES;
        if ((rc = plog_io_pwrite(seg->log_fd, buf + written, piece, seg->size + (int64_t)written))) goto fail;
        written += piece;
        while (hashed < written) {
            size_t end = pos + (size_t)be32(buf + pos + POS_LENGTH) + PLOG_LOG_OVERHEAD;
            size_t stop = end < written ? end : written;
            crc = plog_crc32c(crc, buf + hashed, stop - hashed);
            hashed = stop;
            if (hashed < end) break;
            if (crc != (uint32_t)be32(buf + pos + POS_CRC)) {
                v->error_position = (int64_t)pos;
                v->error_offset = be64(buf + pos + POS_BASE_OFFSET);
                rc = PLOG_ECRC;
                goto fail;
            }
            pos = end;
            hashed = pos + POS_ATTRIBUTES;
            crc = 0;
        }
    }
    return 0;
fail:
    return cut_back(seg, rc);
}

/* write_verified for PLOG_APPEND_READONLY (see plog.h): groups of whole batches, each batch
 * as its stamped head from `heads` and its rest from buf, one vectored write a group of at
 * most PLOG_APPEND_PIECE_BYTES (or one batch), then every batch of the group hashed. */
static int write_stamped(plog_segment *seg, uint8_t *buf, size_t length, plog_validate *v) {
    uint8_t (*heads)[PLOG_STAMPED_BYTES] = malloc((size_t)v->batch_count * PLOG_STAMPED_BYTES);
    if (!heads) return ENOMEM;
    stamp_chunk(buf, length, v, heads);
    plog_iovec iov[PLOG_IOV_MAX];
    size_t pos = 0, written = 0, batch = 0;
    int rc = 0;
    while (pos < length) {
        size_t start = pos, first = batch;
        int n = 0;
        while (pos < length && n + 2 <= PLOG_IOV_MAX) {
            size_t size = (size_t)be32(buf + pos + POS_LENGTH) + PLOG_LOG_OVERHEAD;
            if (n > 0 && pos - start + size > PLOG_APPEND_PIECE_BYTES) break;
            iov[n++] = (plog_iovec){heads[batch++], PLOG_STAMPED_BYTES};
            iov[n++] = (plog_iovec){buf + pos + PLOG_STAMPED_BYTES, size - PLOG_STAMPED_BYTES};
            pos += size;
        }
        if ((rc = plog_io_pwritev(seg->log_fd, iov, n, seg->size + (int64_t)written))) goto fail;
        written = pos;
        for (size_t at = start, i = first; at < pos; i++) {
            size_t size = (size_t)be32(buf + at + POS_LENGTH) + PLOG_LOG_OVERHEAD;
            if (plog_crc32c(0, buf + at + POS_ATTRIBUTES, size - POS_ATTRIBUTES) != (uint32_t)be32(buf + at + POS_CRC)) {
                v->error_position = (int64_t)at;
                v->error_offset = be64(heads[i]);
                rc = PLOG_ECRC;
                goto fail;
            }
            at += size;
        }
    }
    free(heads);
    return 0;
fail:
    free(heads);
    return cut_back(seg, rc);
}

/* PLOG_VALIDATE_PRODUCERS: is the chunk (valid, with a producer id) the next batch of an
 * expected producer?  Sets v->expected_hit to its slot. */
static int expected_producer(const uint8_t *buf, size_t length, plog_validate *v) {
    plog_batch_info info;
    if (v->batch_count != 1 || plog_batch_parse(buf, length, 0, 0, &info)) return PLOG_EPRODUCER;
    if (info.attributes & (PLOG_ATTR_TRANSACTIONAL | PLOG_ATTR_CONTROL)) return PLOG_EPRODUCER;
    int count = v->expected_count < PLOG_EXPECTED_PRODUCERS ? v->expected_count : PLOG_EXPECTED_PRODUCERS;
    for (int i = 0; i < count; i++) {
        if (v->expected_id[i] != info.producer_id) continue;
        if (v->expected_epoch[i] != info.producer_epoch || v->expected_sequence[i] != info.base_sequence ||
            info.base_sequence > INT32_MAX - info.last_offset_delta)
            return PLOG_EPRODUCER;
        v->expected_hit = i;
        return 0;
    }
    return PLOG_EPRODUCER;
}

/* After the write of an expected producer's batch: the sequence its next batch starts at. */
static void advance_expected(plog_validate *v) {
    int i = v->expected_hit;
    int64_t next = (int64_t)v->expected_sequence[i] + (v->last_offset - v->first_offset) + 1;
    if (next > INT32_MAX) v->expected_id[i] = -1;     /* wraps to 0: the caller's check decides */
    else v->expected_sequence[i] = (int32_t)next;
}

/* plog_segment_should_roll as an append's verdict: 0, PLOG_EROLL or PLOG_ECLOCK. */
static int roll_verdict(const plog_segment *seg, size_t length, const plog_validate *v, int64_t now_ms) {
    int roll = plog_segment_should_roll(seg, length, v, now_ms);
    return roll == 1 ? PLOG_EROLL : roll;
}

int plog_segment_append_chunk(plog_segment *seg, uint8_t *buf, size_t length, int64_t next_offset,
                              int32_t leader_epoch, int flags, int64_t now_ms, plog_validate *v) {
    PLOG_ASSERT(buf != NULL || length == 0);
    PLOG_ASSERT(v != NULL);
    plog_segment_assert_invariants(seg);
    v->flags = flags;
    v->next_offset = next_offset;
    v->leader_epoch = leader_epoch;
    v->expected_hit = -1;
    int rc = plog_validate_headers(buf, length, v);
    if (rc == 0 && (int64_t)length > v->segment_bytes) rc = PLOG_ELISTTOOLARGE;
    if (rc == 0 && (v->flags & PLOG_VALIDATE_PRODUCERS) && v->producer_batch_count > 0)
        rc = expected_producer(buf, length, v);
    if (rc == 0 && !(flags & PLOG_APPEND_NO_ROLL)) rc = roll_verdict(seg, length, v, now_ms);
    if (rc == 0) rc = append_check(seg, length, v);
    /* the caller's check looks at the CRCs when it refuses; the call with the time does */
    if (rc == PLOG_EPRODUCER || rc == PLOG_ECLOCK) return rc;
    if (rc) {
        /* Nothing written: a CRC mismatch in a batch before the one that failed (or in any
         * batch, when the chunk itself was fine) comes first, as in plog_validate_chunk. */
        int crc_rc = plog_validate_crcs(buf, length, v->batch_count, v);
        v->expected_hit = -1;
        return crc_rc ? crc_rc : rc;
    }
    int stamped_aside = (v->flags & PLOG_APPEND_READONLY) &&
                        (v->flags & (PLOG_VALIDATE_ASSIGN_OFFSETS | PLOG_VALIDATE_STAMP_EPOCH));
    rc = stamped_aside ? write_stamped(seg, buf, length, v) : write_verified(seg, buf, length, v);
    if (rc || (rc = append_done(seg, length, v))) {
        v->expected_hit = -1;
        return rc;
    }
    if (v->expected_hit >= 0) advance_expected(v);
    return 0;
}

/* write_verified for pieces: vectored writes of whole pieces straight from the caller's
 * buffers (at most PLOG_IOV_MAX of them, PLOG_APPEND_PIECE_BYTES unless one piece is larger),
 * each group's batches hashed right after its write, while they are still in the cache. */
static int write_pieces(plog_segment *seg, const plog_iovec *pieces, int count, plog_validate *v) {
    size_t written = 0;
    int rc;
    for (int p = 0; p < count;) {
        int first = p, n = 0;
        size_t bytes = 0;
        plog_iovec iov[PLOG_IOV_MAX];
        while (p < count && n < PLOG_IOV_MAX && (n == 0 || bytes + pieces[p].length <= PLOG_APPEND_PIECE_BYTES)) {
            bytes += pieces[p].length;
            if (pieces[p].length) iov[n++] = pieces[p];
            p++;
        }
        if (n && (rc = plog_io_pwritev(seg->log_fd, iov, n, seg->size + (int64_t)written))) return cut_back(seg, rc);
        for (int q = first; q < p; written += pieces[q].length, q++) {
            if ((rc = plog_validate_crcs(pieces[q].base, pieces[q].length, INT64_MAX, v))) {
                v->error_position += (int64_t)written;      /* from the chunk's start, not the piece's */
                return cut_back(seg, rc);
            }
        }
    }
    return 0;
}

int plog_segment_append_pieces(plog_segment *seg, const plog_iovec *pieces, int count, int64_t next_offset,
                               int flags, int64_t now_ms, plog_validate *v) {
    PLOG_ASSERT(v != NULL);
    PLOG_ASSERT(pieces != NULL || count <= 0);
    plog_segment_assert_invariants(seg);
    v->flags = flags;
    if (count < 0 || (flags & (PLOG_VALIDATE_ASSIGN_OFFSETS | PLOG_VALIDATE_STAMP_EPOCH |
                                  PLOG_VALIDATE_CLIENT | PLOG_VALIDATE_PRODUCERS)))
        return PLOG_EARG;
    v->next_offset = next_offset;
    v->expected_hit = -1;
    int rc = plog_validate_pieces(pieces, count, v);
    size_t length = (size_t)v->size_bytes;
    if (rc == 0 && (int64_t)length > v->segment_bytes) rc = PLOG_ELISTTOOLARGE;
    if (rc == 0 && !(flags & PLOG_APPEND_NO_ROLL)) rc = roll_verdict(seg, length, v, now_ms);
    if (rc == 0) rc = append_check(seg, length, v);
    if (rc == 0) rc = write_pieces(seg, pieces, count, v);
    return rc ? rc : append_done(seg, length, v);
}

int plog_segment_should_roll(const plog_segment *seg, size_t length, const plog_validate *v, int64_t now_ms) {
    if (seg->size > v->segment_bytes - (int64_t)length) return 1;
    if (seg->size > 0) {
        /* Kafka's timeWaitedForRoll: from the first batch's max timestamp to the chunk's, or
         * from the segment's creation to now when that batch carries none. */
        int64_t first = seg->first_batch_max_timestamp;
        if (first < 0 && now_ms < 0) return PLOG_ECLOCK;
        int64_t waited = first >= 0 ? v->max_timestamp - first : now_ms - seg->created_ms;
        if (waited > v->segment_ms) return 1;
    }
    if (seg->offset_entries >= seg->offset_max_entries || seg->time_entries >= seg->time_max_entries - 1) return 1;
    return v->last_offset - seg->base_offset > INT32_MAX || v->first_offset < seg->base_offset;
}

/* The batch headers a walk reads: from the mapping `log` or, without one, from the .log
 * descriptor by pread through `window` (HEADER_WINDOW bytes; a clean open maps nothing). */
#define HEADER_WINDOW 4096
typedef struct {
    const plog_segment *seg;
    const uint8_t *log;
    uint8_t *window;
    int64_t start, length;                 /* the window's place in the file */
} header_reader;

/* 0 and *info, a parse error (negative), or an errno from the read (positive). */
static int read_header(header_reader *r, int64_t pos, plog_batch_info *info) {
    int64_t size = r->seg->size;
    if (r->log) return plog_batch_parse(r->log, (size_t)size, (size_t)pos, 0, info);
    if (pos > size) return PLOG_EPARTIAL;
    int64_t need = size - pos < PLOG_BATCH_OVERHEAD ? size - pos : PLOG_BATCH_OVERHEAD;
    if (pos < r->start || pos + need > r->start + r->length) {
        int64_t want = size - pos < HEADER_WINDOW ? size - pos : HEADER_WINDOW;
        size_t done = 0;
        int rc = plog_io_pread(r->seg->log_fd, r->window, (size_t)want, pos, &done);
        if (rc) return rc;
        if ((int64_t)done != want) return EIO;     /* the file is shorter than its size said */
        r->start = pos;
        r->length = want;
    }
    return plog_batch_parse_header(r->window + (pos - r->start), (size_t)(size - pos), 0, info);
}

/* Does the offset-index entry (entry_offset, pos) point at a batch it can describe?  0 when
 * it does, a negative code when it does not, an errno (positive) when the read failed. */
static int check_hint(header_reader *r, int64_t entry_offset, int64_t pos) {
    const plog_segment *seg = r->seg;
    plog_batch_info info;
    if (pos < 0 || pos >= seg->size) return PLOG_ECORRUPT;
    int rc = read_header(r, pos, &info);
    if (rc) return rc;
    return info.base_offset >= seg->base_offset && info.last_offset >= info.base_offset &&
           info.last_offset <= entry_offset ? 0 : PLOG_ECORRUPT;
}

int plog_segment_find(plog_segment *seg, const uint8_t *log, int64_t target,
                      int64_t *position_out, plog_batch_info *info_out) {
    PLOG_ASSERT(seg != NULL);
    PLOG_ASSERT(position_out != NULL);
    PLOG_ASSERT(info_out != NULL);
    int64_t offset, pos;
    plog_offset_index_lookup(seg, target, &offset, &pos);
    header_reader r = {.seg = seg, .log = log};
    if (pos != 0 && check_hint(&r, offset, pos)) {
        seg->index_suspect = 1;
        pos = 0;
    }
    *position_out = -1;
    while (pos < seg->size) {
        int rc = plog_batch_parse(log, (size_t)seg->size, (size_t)pos, 0, info_out);
        if (rc) return rc;
        if (info_out->last_offset >= target) {
            *position_out = pos;
            return 0;
        }
        pos += info_out->size_bytes;
    }
    return 0;
}

int plog_segment_read(plog_segment *seg, const uint8_t *log, int64_t target, int64_t max_bytes,
                      int64_t max_offset, int64_t *span_out) {
    PLOG_ASSERT(seg != NULL);
    PLOG_ASSERT(span_out != NULL);
    plog_batch_info info;
    int64_t position;
    span_out[0] = -1;
    span_out[1] = 0;
    if (seg->size == 0) return 0;
    int rc = plog_segment_find(seg, log, target, &position, &info);
    if (rc || position < 0) return rc;
    span_out[0] = position;
    span_out[1] = plog_batches_span(log, seg->size, position, max_bytes, max_offset);
    return 0;
}

/* Re-derive next_offset and the max timestamp after open or truncation, scanning only from
 * the index hints (cost bounded by the index interval, never by the segment size). */
static int restore_state(plog_segment *seg, const uint8_t *log) {
    seg->next_offset = seg->base_offset;
    seg->first_batch_max_timestamp = -1;
    seg->max_timestamp = -1;
    seg->offset_of_max_timestamp = seg->base_offset;
    if (seg->size == 0) return 0;
    uint8_t window[HEADER_WINDOW];         /* filled before it is read */
    header_reader r = {.seg = seg, .log = log, .window = window};
    plog_batch_info info;
    int rc = read_header(&r, 0, &info);
    if (rc) return rc;
    /* The first batch is always walked: it may not lie below the segment's base (I9). */
    if (info.base_offset < seg->base_offset || info.last_offset < info.base_offset) return PLOG_ECORRUPT;
    seg->first_batch_max_timestamp = info.max_timestamp;
    int64_t hint_offset, pos;
    if (seg->time_entries > 0) {
        int64_t ts, off;
        plog_time_index_entry(seg, seg->time_entries - 1, &ts, &off);
        seg->max_timestamp = ts;
        seg->offset_of_max_timestamp = off;
        /* The walk starts at the last offset entry: the time index's last entry holds the largest
         * timestamp of the batches up to and including the one it points at (a time entry is
         * added with an offset entry when the largest grew; a truncation trims both alike). */
        plog_offset_index_lookup(seg, INT64_MAX, &hint_offset, &pos);
        int hint = pos != 0 ? check_hint(&r, hint_offset, pos) : 0;
        if (hint > 0) return hint;               /* a read error is an error, not a bad hint */
        if (hint) {
            seg->index_suspect = 1;               /* scan it all; the caller rebuilds the index */
            pos = 0;
        }
    } else {
        pos = 0;
    }
    int64_t previous_last = seg->base_offset - 1;
    while (pos < seg->size) {
        if ((rc = read_header(&r, pos, &info))) return rc;
        /* The checks recovery makes of offsets (outside the CRC): a clean open that finds a
         * batch below the segment base or going back must recover the segment instead. */
        if (info.base_offset < seg->base_offset || info.last_offset < info.base_offset ||
            info.last_offset - seg->base_offset > INT32_MAX || info.base_offset <= previous_last)
            return PLOG_ECORRUPT;
        previous_last = info.last_offset;
        if (info.max_timestamp > seg->max_timestamp) {
            seg->max_timestamp = info.max_timestamp;
            seg->offset_of_max_timestamp = info.last_offset;
        }
        seg->next_offset = info.last_offset + 1;
        pos += info.size_bytes;
    }
    return 0;
}

int plog_segment_load(plog_segment *seg, const uint8_t *log) {
    PLOG_ASSERT(seg != NULL);
    seg->bytes_since_last_index_entry = 0;
    return restore_state(seg, log);
}

int plog_segment_truncate_to(plog_segment *seg, const uint8_t *log, int64_t offset) {
    PLOG_ASSERT(offset >= 0);
    plog_segment_assert_invariants(seg);
    int64_t pos;
    plog_batch_info info;
    int rc = plog_segment_find(seg, log, offset, &pos, &info);
    if (rc) return rc;
    if (pos < 0) return 0;                 /* nothing at or above offset */
    if ((rc = plog_io_ftruncate(seg->log_fd, pos))) return rc;
    plog_index_truncate_to(seg, offset);
    seg->size = pos;
    seg->bytes_since_last_index_entry = 0;
    return restore_state(seg, log);
}

int plog_segment_seal(plog_segment *seg) {
    plog_segment_assert_invariants(seg);
    if (!seg->mutable_indexes) return 0;
    if (seg->indexes_lazy) return PLOG_EARG;
    /* The closing time entry goes in the slot kept for it -- unless segment.index.bytes is
     * under one time entry (Kafka accepts 4..11): that index has no slot at all, counts as
     * full from the start, so the log rolled after this segment's one batch and the open
     * finds its largest timestamp by walking it.  Sealing must not fail then: a log that
     * cannot seal cannot roll, nor close, nor open again. */
    int rc = 0;
    if (seg->time_max_entries > 0)
        rc = plog_time_index_maybe_add(seg, seg->max_timestamp, seg->offset_of_max_timestamp, 1);
    if (rc) return rc;
    if ((rc = plog_index_sync(plog_offset_index_ref(seg)))) return rc;
    if ((rc = plog_index_sync(plog_time_index_ref(seg)))) return rc;
    seg->offset_max_entries = seg->offset_entries;
    seg->time_max_entries = seg->time_entries;
    seg->mutable_indexes = 0;
    return 0;
}

int plog_segment_unseal(plog_segment *seg, int64_t index_max_bytes) {
    PLOG_ASSERT(index_max_bytes >= 0);
    plog_segment_assert_invariants(seg);
    if (seg->mutable_indexes) return 0;
    int64_t offset_max = index_max_bytes / PLOG_OFFSET_ENTRY_BYTES;
    int64_t time_max = index_max_bytes / PLOG_TIME_ENTRY_BYTES;
    if (offset_max < seg->offset_entries) offset_max = seg->offset_entries;
    if (time_max < seg->time_entries) time_max = seg->time_entries;
    if (offset_max > INT32_MAX) offset_max = INT32_MAX;
    if (time_max > INT32_MAX) time_max = INT32_MAX;
    int rc;
    if ((rc = plog_index_to_heap(plog_offset_index_ref(seg), seg->offset_entries))) return rc;
    if ((rc = plog_index_to_heap(plog_time_index_ref(seg), seg->time_entries))) return rc;
    seg->offset_max_entries = (int32_t)offset_max;
    seg->time_max_entries = (int32_t)time_max;
    seg->mutable_indexes = 1;
    return 0;
}

int plog_segment_flush(plog_segment *seg) {
    plog_segment_assert_invariants(seg);
    int rc;
    if (seg->indexes_lazy) return PLOG_EARG;
    if ((rc = plog_index_sync(plog_offset_index_ref(seg)))) return rc;
    if ((rc = plog_index_sync(plog_time_index_ref(seg)))) return rc;
    if ((rc = plog_io_fsync(seg->log_fd, seg->sync_flags))) return rc;
    if ((rc = plog_io_fsync(seg->index_fd, seg->sync_flags))) return rc;
    return plog_io_fsync(seg->time_fd, seg->sync_flags);
}

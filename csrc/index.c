/*
 * index.c -- the sparse offset index (.index) and time index (.timeindex).
 *
 * .index entry, 8 bytes: relativeOffset int32 | position int32.  "The batch whose last offset
 * is base + relativeOffset starts at position."  Offsets strictly increase.
 * .timeindex entry, 12 bytes: timestamp int64 | relativeOffset int32.  "The largest timestamp
 * seen up to and including the batch ending at base + relativeOffset."  Timestamps strictly
 * increase (an equal timestamp is silently skipped); offsets never go back.
 * (docs/kafka-formats.md 2.2, 2.3.)
 *
 * Where the entries live.  An index is never written through a shared mapping: a page fault
 * on a sparse file cannot report a full disk except by SIGBUS.  An active segment keeps its
 * entries in heap memory (the file's byte layout, grown as entries come) and writes them to
 * the file with pwrite through the I/O seam when the segment is flushed or sealed
 * (plog_index_sync), so a full disk is an error code.  A sealed segment opened from disk maps
 * its file read-only; one sealed in this process keeps its heap copy.
 *
 * Invariants:
 *  - entries <= max_entries; a time index counts as full one slot early, keeping the last slot
 *    for the entry written when the segment is sealed (skip_full_check);
 *  - heap indexes: entries <= capacity <= max_entries (capacity 0 means "mapped read-only");
 *    written <= entries, and the first `written` entries are in the file as they are in memory;
 *    after plog_index_sync the file is exactly entries * entry size bytes long (what Kafka's
 *    loader expects of an inactive segment);
 *  - lookups are binary searches over the entries, O(log entries).
 */
#include "internal.h"
#include <errno.h>
#include <stdlib.h>

static inline int64_t oi_offset(const plog_segment *s, int32_t i) {
    return s->base_offset + be32(s->offset_index + (size_t)i * PLOG_OFFSET_ENTRY_BYTES);
}
static inline int64_t oi_position(const plog_segment *s, int32_t i) {
    return be32(s->offset_index + (size_t)i * PLOG_OFFSET_ENTRY_BYTES + 4);
}
static inline int64_t ti_timestamp(const plog_segment *s, int32_t i) {
    return be64(s->time_index + (size_t)i * PLOG_TIME_ENTRY_BYTES);
}
static inline int64_t ti_offset(const plog_segment *s, int32_t i) {
    return s->base_offset + be32(s->time_index + (size_t)i * PLOG_TIME_ENTRY_BYTES + 8);
}

/* Largest i in [0, n) with key(s, i) <= target (keys ascending), or -1. */
static int32_t floor_slot(const plog_segment *s, int32_t n, int64_t (*key)(const plog_segment *, int32_t),
                          int64_t target) {
    int32_t lo = 0, hi = n - 1, found = -1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (key(s, mid) <= target) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

/* Kafka's three-case truncation rule, given the floor slot of the target. */
static int32_t entries_below(int32_t slot, int64_t slot_key, int64_t target) {
    if (slot < 0) return 0;
    return slot_key == target ? slot : slot + 1;
}

void plog_index_reset(plog_segment *s) {
    s->offset_entries = 0;
    s->time_entries = 0;
    s->offset_written = 0;
    s->time_written = 0;
}

plog_index_ref plog_offset_index_ref(plog_segment *s) {
    return (plog_index_ref){&s->offset_index, &s->offset_entries, &s->offset_max_entries, &s->offset_capacity,
                            &s->offset_written, &s->offset_map_bytes, &s->offset_file_bytes, s->index_fd,
                            PLOG_OFFSET_ENTRY_BYTES};
}

plog_index_ref plog_time_index_ref(plog_segment *s) {
    return (plog_index_ref){&s->time_index, &s->time_entries, &s->time_max_entries, &s->time_capacity,
                            &s->time_written, &s->time_map_bytes, &s->time_file_bytes, s->time_fd,
                            PLOG_TIME_ENTRY_BYTES};
}

int plog_index_release(plog_index_ref x) {
    int rc = 0;
    if (*x.capacity > 0) free(*x.buf);
    else if (*x.buf) rc = plog_io_munmap(*x.buf, (size_t)*x.map_bytes);
    *x.buf = NULL;
    *x.capacity = 0;
    *x.map_bytes = 0;
    return rc;
}

/* Move the entries to a heap buffer of at least `capacity` entries (mapped -> heap, or grow).
 * On failure nothing changes. */
int plog_index_to_heap(plog_index_ref x, int64_t capacity) {
    if (capacity < *x.entries) capacity = *x.entries;
    if (capacity < 64) capacity = 64;
    if (capacity > INT32_MAX) capacity = INT32_MAX;
    if (*x.capacity > 0) {
        if (capacity <= *x.capacity) return 0;
        uint8_t *grown = realloc(*x.buf, (size_t)capacity * (size_t)x.entry_bytes);
        if (!grown) return ENOMEM;
        *x.buf = grown;
        *x.capacity = (int32_t)capacity;
        *x.map_bytes = capacity * x.entry_bytes;
        return 0;
    }
    uint8_t *heap = malloc((size_t)capacity * (size_t)x.entry_bytes);
    if (!heap) return ENOMEM;
    if (*x.entries > 0) memcpy(heap, *x.buf, (size_t)*x.entries * (size_t)x.entry_bytes);
    int rc = plog_index_release(x);   /* unmapping a read-only map; its failure leaks a mapping only */
    (void)rc;
    *x.buf = heap;
    *x.capacity = (int32_t)capacity;
    *x.map_bytes = capacity * x.entry_bytes;
    return 0;
}

/* Room for one more entry in a heap index (doubling, never past max_entries). */
static int reserve_one(plog_index_ref x) {
    if (*x.capacity <= 0) return PLOG_EARG;    /* a mapped (sealed) index is read-only */
    if (*x.entries < *x.capacity) return 0;
    int64_t want = (int64_t)*x.capacity * 2;
    if (want > *x.max_entries) want = *x.max_entries;
    if (want <= *x.entries) return PLOG_EINDEXFULL;
    return plog_index_to_heap(x, want);
}

int plog_index_sync(plog_index_ref x) {
    if (*x.capacity <= 0) return 0;            /* mapped: the file is what was read */
    int64_t want = (int64_t)*x.entries * x.entry_bytes;
    int rc;
    if (*x.written > *x.entries) *x.written = *x.entries;
    if (*x.file_bytes > want) {
        if ((rc = plog_io_ftruncate(x.fd, want))) return rc;
        *x.file_bytes = want;
    }
    if (*x.written < *x.entries) {
        int64_t from = (int64_t)*x.written * x.entry_bytes;
        if ((rc = plog_io_pwrite(x.fd, *x.buf + from, (size_t)(want - from), from))) return rc;
        *x.written = *x.entries;
        *x.file_bytes = want;
    }
    return 0;
}

int plog_index_add(plog_segment *s, int64_t last_offset, int64_t position) {
    if (!s->mutable_indexes) return PLOG_EARG;
    if (s->offset_entries >= s->offset_max_entries) return PLOG_EINDEXFULL;
    int64_t relative = last_offset - s->base_offset;
    if (relative < 0 || relative > INT32_MAX || position > INT32_MAX) return PLOG_EOVERFLOW;
    if (s->offset_entries > 0 && last_offset <= oi_offset(s, s->offset_entries - 1)) return PLOG_EORDER;
    int rc = reserve_one(plog_offset_index_ref(s));
    if (rc) return rc;
    uint8_t *e = s->offset_index + (size_t)s->offset_entries * PLOG_OFFSET_ENTRY_BYTES;
    put32(e, (int32_t)relative);
    put32(e + 4, (int32_t)position);
    s->offset_entries++;
    return 0;
}

int plog_time_index_maybe_add(plog_segment *s, int64_t timestamp, int64_t offset, int skip_full_check) {
    if (!s->mutable_indexes) return PLOG_EARG;
    if (!skip_full_check && s->time_entries >= s->time_max_entries - 1) return PLOG_EINDEXFULL;
    int64_t last_ts = -1, last_offset = s->base_offset;
    if (s->time_entries > 0) {
        last_ts = ti_timestamp(s, s->time_entries - 1);
        last_offset = ti_offset(s, s->time_entries - 1);
        if (offset < last_offset) return PLOG_EORDER;
        if (timestamp < last_ts) return PLOG_EORDER;
    }
    if (timestamp <= last_ts) return 0;
    if (s->time_entries >= s->time_max_entries) return PLOG_EINDEXFULL;
    int64_t relative = offset - s->base_offset;
    if (relative < 0 || relative > INT32_MAX) return PLOG_EOVERFLOW;
    int rc = reserve_one(plog_time_index_ref(s));
    if (rc) return rc;
    uint8_t *e = s->time_index + (size_t)s->time_entries * PLOG_TIME_ENTRY_BYTES;
    put64(e, timestamp);
    put32(e + 8, (int32_t)relative);
    s->time_entries++;
    return 0;
}

static int32_t offset_slot(const plog_segment *s, int64_t target) {
    return floor_slot(s, s->offset_entries, oi_offset, target);
}

void plog_offset_index_lookup(const plog_segment *s, int64_t target, int64_t *offset_out,
                              int64_t *position_out) {
    int32_t slot = offset_slot(s, target);
    if (slot < 0) {
        *offset_out = s->base_offset;
        *position_out = 0;
    } else {
        *offset_out = oi_offset(s, slot);
        *position_out = oi_position(s, slot);
    }
}

void plog_time_index_lookup(const plog_segment *s, int64_t target, int64_t *timestamp_out,
                            int64_t *offset_out) {
    int32_t found = floor_slot(s, s->time_entries, ti_timestamp, target);
    if (found < 0) {
        *timestamp_out = -1;
        *offset_out = s->base_offset;
    } else {
        *timestamp_out = ti_timestamp(s, found);
        *offset_out = ti_offset(s, found);
    }
}

int plog_offset_index_entry(const plog_segment *s, int32_t i, int64_t *offset, int64_t *position) {
    if (i < 0 || i >= s->offset_entries) return PLOG_EARG;
    *offset = oi_offset(s, i);
    *position = oi_position(s, i);
    return 0;
}

int plog_time_index_entry(const plog_segment *s, int32_t i, int64_t *timestamp, int64_t *offset) {
    if (i < 0 || i >= s->time_entries) return PLOG_EARG;
    *timestamp = ti_timestamp(s, i);
    *offset = ti_offset(s, i);
    return 0;
}

/* Keep the entries with offset < target, in both indexes. */
void plog_index_truncate_to(plog_segment *s, int64_t target) {
    int32_t slot = offset_slot(s, target);
    s->offset_entries = entries_below(slot, slot >= 0 ? oi_offset(s, slot) : 0, target);
    slot = floor_slot(s, s->time_entries, ti_offset, target);
    s->time_entries = entries_below(slot, slot >= 0 ? ti_offset(s, slot) : 0, target);
    if (s->offset_written > s->offset_entries) s->offset_written = s->offset_entries;
    if (s->time_written > s->time_entries) s->time_written = s->time_entries;
}

int plog_segment_index_check(const plog_segment *seg, int thorough, int64_t *bad) {
    int32_t first = thorough || seg->offset_entries < 2 ? 0 : seg->offset_entries - 2;
    int64_t prev_rel = -1, prev_pos = -1;
    for (int32_t i = first; i < seg->offset_entries; i++) {
        const uint8_t *e = seg->offset_index + (size_t)i * PLOG_OFFSET_ENTRY_BYTES;
        int64_t rel = be32(e), pos = be32(e + 4);
        if (rel <= prev_rel || pos <= prev_pos || pos >= seg->size) {
            bad[0] = seg->base_offset + rel;
            bad[1] = pos;
            return PLOG_INDEX_BAD_OFFSET_ENTRY;
        }
        prev_rel = rel;
        prev_pos = pos;
    }
    /* An entry below the base offset needs no check of its own: the first entry checked is
     * compared with -1, so a negative relative offset is already out of order. */
    first = thorough || seg->time_entries < 2 ? 0 : seg->time_entries - 2;
    int64_t prev_ts = INT64_MIN;
    prev_rel = -1;
    for (int32_t i = first; i < seg->time_entries; i++) {
        const uint8_t *e = seg->time_index + (size_t)i * PLOG_TIME_ENTRY_BYTES;
        int64_t ts = be64(e), rel = be32(e + 8);
        if (ts < prev_ts || rel < prev_rel || rel < 0) {
            bad[0] = ts;
            bad[1] = seg->base_offset + rel;
            return PLOG_INDEX_BAD_TIME_ENTRY;
        }
        prev_ts = ts;
        prev_rel = rel;
    }
    return 0;
}

#ifdef PLOG_ASSERTS
void plog_segment_assert_invariants(const plog_segment *seg) {
    PLOG_ASSERT(seg != NULL);
    PLOG_ASSERT(seg->size >= 0 && seg->size <= INT32_MAX);
    PLOG_ASSERT(seg->next_offset >= seg->base_offset);
    PLOG_ASSERT(seg->next_offset - seg->base_offset <= (int64_t)INT32_MAX + 1);
    PLOG_ASSERT(seg->offset_entries >= 0 && seg->time_entries >= 0);
    PLOG_ASSERT(seg->offset_written >= 0 && seg->offset_written <= seg->offset_entries);
    PLOG_ASSERT(seg->time_written >= 0 && seg->time_written <= seg->time_entries);
    PLOG_ASSERT(seg->bytes_since_last_index_entry >= 0);
    PLOG_ASSERT(seg->offset_entries == 0 || seg->offset_index != NULL);
    PLOG_ASSERT(seg->time_entries == 0 || seg->time_index != NULL);
    PLOG_ASSERT(!seg->indexes_lazy || (seg->index_fd < 0 && seg->time_fd < 0));
}
#endif

/*
 * index.c -- the sparse offset index (.index) and time index (.timeindex) over mmap.
 *
 * .index entry, 8 bytes: relativeOffset int32 | position int32.  "The batch whose last offset
 * is base + relativeOffset starts at position."  Offsets strictly increase.
 * .timeindex entry, 12 bytes: timestamp int64 | relativeOffset int32.  "The largest timestamp
 * seen up to and including the batch ending at base + relativeOffset."  Timestamps strictly
 * increase (an equal timestamp is silently skipped); offsets never go back.
 * (kafka-reference 2.2, 2.3.)
 *
 * Invariants:
 *  - entries <= max_entries; a time index counts as full one slot early, keeping the last slot
 *    for the entry written when the segment is sealed (skip_full_check);
 *  - an active segment's index files are pre-allocated to their maximum size, and a file
 *    opened from disk is taken as entirely valid -- which is why sealing trims the files and
 *    why unclean recovery rebuilds them;
 *  - lookups are binary searches over the mapped entries, O(log entries).
 */
#include "internal.h"

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
}

int plog_index_add(plog_segment *s, int64_t last_offset, int64_t position) {
    if (!s->mutable_indexes) return PLOG_EARG;
    if (s->offset_entries >= s->offset_max_entries) return PLOG_EINDEXFULL;
    int64_t relative = last_offset - s->base_offset;
    if (relative < 0 || relative > INT32_MAX || position > INT32_MAX) return PLOG_EOVERFLOW;
    if (s->offset_entries > 0 && last_offset <= oi_offset(s, s->offset_entries - 1)) return PLOG_EORDER;
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
}

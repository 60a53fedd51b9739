/* internal.h -- helpers shared by the C core's files; not part of the contract. */
#ifndef PLOG_INTERNAL_H
#define PLOG_INTERNAL_H
#include "plog.h"
#include <string.h>

/* Asserted invariants, TigerBeetle style: compiled in under PLOG_ASSERTS (PLOG_DEBUG=1 and
 * the sanitizer tier's builds), nothing in a release build.  A failed assertion is a bug in
 * the core, never a data problem: it aborts with the condition and where. */
#ifdef PLOG_ASSERTS
#include <stdio.h>
#include <stdlib.h>
#define PLOG_ASSERT(cond)                                                                   \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s:%d: PLOG_ASSERT(%s) failed\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                        \
        }                                                                                   \
    } while (0)
#else
#define PLOG_ASSERT(cond) ((void)0)
#endif

/* The segment invariants (docs/reliability.md I9), checked at entry and exit of every
 * mutating segment function (segment.c): sizes in range, the next offset at or above the
 * base, index entries counted within capacity and what was written within what exists,
 * the newest index entries in order and pointing inside the log, the index cadence counter
 * within the log's size. */
#ifdef PLOG_ASSERTS
void plog_segment_assert_invariants(const plog_segment *seg);
#else
#define plog_segment_assert_invariants(seg) ((void)0)
#endif

static inline int64_t be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (int64_t)__builtin_bswap64(v);
}
static inline int32_t be32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return (int32_t)__builtin_bswap32(v);
}
static inline int16_t be16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return (int16_t)__builtin_bswap16(v);
}
static inline void put64(uint8_t *p, int64_t v) {
    uint64_t x = __builtin_bswap64((uint64_t)v);
    memcpy(p, &x, 8);
}
static inline void put32(uint8_t *p, int32_t v) {
    uint32_t x = __builtin_bswap32((uint32_t)v);
    memcpy(p, &x, 4);
}
static inline void put16(uint8_t *p, int16_t v) {
    uint16_t x = __builtin_bswap16((uint16_t)v);
    memcpy(p, &x, 2);
}

/* v2 header field positions (docs/kafka-formats.md 1.1). */
enum {
    POS_BASE_OFFSET = 0, POS_LENGTH = 8, POS_PLE = 12, POS_MAGIC = 16, POS_CRC = 17,
    POS_ATTRIBUTES = 21, POS_LAST_OFFSET_DELTA = 23, POS_BASE_TIMESTAMP = 27,
    POS_MAX_TIMESTAMP = 35, POS_PRODUCER_ID = 43, POS_PRODUCER_EPOCH = 51,
    POS_BASE_SEQUENCE = 53, POS_RECORD_COUNT = 57
};

/* batch.c: the two halves of plog_validate_chunk, for plog_segment_append_chunk.  Headers:
 * every check but the CRCs, nothing stamped.  CRCs: the first `count` batches, reporting
 * a mismatch as plog_validate_chunk would. */
int plog_validate_headers(uint8_t *buf, size_t length, plog_validate *v);
int plog_validate_crcs(const uint8_t *buf, size_t length, int64_t count, plog_validate *v);
/* plog_validate_headers over the concatenation of `count` pieces, each holding whole batches
 * (plog_segment_append_pieces); nothing is written. */
int plog_validate_pieces(const plog_iovec *pieces, int count, plog_validate *v);
/* plog_batch_parse of the batch at `b`, with `avail` bytes of the log from there on (only
 * its header need be readable at `b`: what the parse reads lies within min(avail, 61)). */
int plog_batch_parse_header(const uint8_t *b, size_t avail, int32_t max_batch_bytes, plog_batch_info *out);

/* index.c: one index (offset or time) seen through pointers into plog_segment. */
typedef struct plog_index_ref {
    uint8_t **buf;
    int32_t *entries;
    int32_t *max_entries;
    int32_t *capacity;              /* heap entries allocated; 0 = mapped read-only (or none) */
    int32_t *written;
    int64_t *map_bytes;
    int64_t *file_bytes;
    int fd;
    int64_t entry_bytes;
} plog_index_ref;
plog_index_ref plog_offset_index_ref(plog_segment *seg);
plog_index_ref plog_time_index_ref(plog_segment *seg);
int plog_index_release(plog_index_ref x);
int plog_index_to_heap(plog_index_ref x, int64_t capacity);
int plog_index_sync(plog_index_ref x);

int plog_index_add(plog_segment *seg, int64_t last_offset, int64_t position);
void plog_index_reset(plog_segment *seg);
void plog_index_truncate_to(plog_segment *seg, int64_t target);
int plog_time_index_maybe_add(plog_segment *seg, int64_t timestamp, int64_t offset, int skip_full_check);

#endif

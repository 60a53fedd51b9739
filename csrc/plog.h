/*
 * plog.h -- the public contract of the partition-log C core.
 *
 * The core knows Kafka's on-disk formats (record batch v2, legacy message
 * sets v0/v1 for reading, the sparse .index and .timeindex files) and does
 * the byte work of the engine: CRC-32C, batch build/parse/validate, segment
 * append and scan, index maintenance and lookup.  Policy (when to roll, what
 * to truncate, epochs) lives in Python (storage/log/).
 *
 * Caveats
 * -------
 *  - Every integer in a file is big-endian.  Structs in this header are host
 *    order; the core converts at the boundary.
 *  - No function allocates memory that the caller must free, except the
 *    mappings made by plog_segment_open() and released by plog_segment_close().
 *  - A plog_segment is not thread-safe; the Python layer serialises access.
 *  - Every file operation goes through the I/O seam (plog_io_*), never
 *    directly to the kernel, so a test can substitute a simulated file system.
 *  - A mapping handed out by the seam stays valid until the seam's unmap is
 *    called for it; the core never keeps a pointer into a mapping after that.
 *  - Arguments that break a documented precondition (a NULL pointer where one
 *    is needed, a negative length or offset, a position past its buffer) are
 *    programmer errors: debug and sanitizer builds abort on them (PLOG_ASSERT,
 *    internal.h), release builds do not check them.  Bad bytes are never
 *    asserted on: they are the PLOG_E* errors below.
 *
 * Errors
 * ------
 *  Functions return int: 0 on success, a positive errno for an operating
 *  system failure, or one of the negative PLOG_E* codes below.  Where a
 *  function reports a position or an offset with an error it says so.
 *  plog_strerror() names every code.
 *
 * Only the text between CDEF-BEGIN and CDEF-END is read by the cffi build
 * (csrc/build_plog.py); it must stay free of preprocessor conditionals.
 */
#ifndef PLOG_H
#define PLOG_H
#include <stddef.h>
#include <stdint.h>

/* CDEF-BEGIN */

/* Version of the C ABI; storage/core/_native.py refuses a module built from other sources. */
#define PLOG_ABI_VERSION 10

/* Error codes (negative, private range). */
#define PLOG_EPARTIAL      -1001  /* data ends inside a batch (not an error during iteration) */
#define PLOG_ECORRUPT      -1002  /* size field out of range / structure broken */
#define PLOG_ECRC          -1003  /* stored CRC differs from the computed CRC */
#define PLOG_EMAGIC        -1004  /* magic byte not 0, 1 or 2 (or not 2 where v2 is required) */
#define PLOG_ETOOLARGE     -1005  /* batch larger than the allowed maximum */
#define PLOG_EORDER        -1006  /* offsets not strictly increasing */
#define PLOG_ERECORD       -1007  /* a record inside a batch is malformed */
#define PLOG_EINDEXFULL    -1008  /* index has no free slot */
#define PLOG_EOVERFLOW     -1009  /* offset - segment base does not fit in int32 */
#define PLOG_ESPACE        -1010  /* output buffer too small */
#define PLOG_EARG          -1011  /* invalid argument (programmer error) */
#define PLOG_EAPPENDOFFSET -1012  /* follower append starts below the log end offset */
#define PLOG_EINDEXCORRUPT -1013  /* index file fails its sanity check */
#define PLOG_ECALLBACK     -1014  /* a Python I/O callback raised */
#define PLOG_EEMPTY        -1015  /* appended buffer holds no complete batch */
#define PLOG_ELISTTOOLARGE -1016  /* appended chunk larger than segment_bytes */
#define PLOG_EROLL         -1017  /* the segment must roll before this chunk (nothing written) */
#define PLOG_ETIMESTAMP    -1018  /* a client batch's timestamps are not acceptable */
#define PLOG_ERECHECK      -1019  /* the caller must check or rewrite a batch first (nothing written) */
#define PLOG_EPRODUCER     -1020  /* the caller must check a batch's producer state first (nothing written) */
#define PLOG_ECLOCK        -1021  /* the roll rule needs the time: call again with now_ms (nothing written) */

/* Format constants (Kafka's). */
#define PLOG_LOG_OVERHEAD 12
#define PLOG_HEADER_SIZE_UP_TO_MAGIC 17
#define PLOG_BATCH_OVERHEAD 61
#define PLOG_LEGACY_RECORD_OVERHEAD_V0 14
#define PLOG_RECORD_OVERHEAD_MAX 21
#define PLOG_OFFSET_ENTRY_BYTES 8
#define PLOG_TIME_ENTRY_BYTES 12
#define PLOG_CURRENT_MAGIC 2

/* Attribute bits (low byte of the int16 at byte 21). */
#define PLOG_ATTR_COMPRESSION_MASK 7
#define PLOG_ATTR_LOG_APPEND_TIME 8
#define PLOG_ATTR_TRANSACTIONAL 16
#define PLOG_ATTR_CONTROL 32
#define PLOG_ATTR_DELETE_HORIZON 64

/* Open flags for the I/O seam. */
#define PLOG_O_READ 1
#define PLOG_O_WRITE 2
#define PLOG_O_CREATE 4
#define PLOG_O_TRUNCATE 8

/* Flags for fsync through the seam: NOOP marks a flush point with fsync disabled. */
#define PLOG_SYNC_NOOP 1

/* ---- version, errors, CRC ------------------------------------------------------------- */

int plog_abi_version(void);
const char *plog_version(void);
const char *plog_strerror(int rc);

/* CRC-32C (Castagnoli), conditioned: plog_crc32c(0, "123456789", 9) == 0xE3069283.
 * Pass the previous result as crc to continue a running CRC. */
uint32_t plog_crc32c(uint32_t crc, const uint8_t *data, size_t length);
/* The path in use: 0 portable tables, 1 the SSE4.2 crc32 instruction, 2 VPCLMULQDQ folding
 * (AVX-512) for buffers of 256 bytes or more, the crc32 instruction below that. */
int plog_crc32c_path(void);
/* Cap the path at `path` (0, 1 or 2); 2 restores run-time detection.  For tests and benchmarks. */
void plog_crc32c_limit(int path);
/* Legacy (magic 0/1) messages use CRC-32 (IEEE). */
uint32_t plog_crc32_ieee(uint32_t crc, const uint8_t *data, size_t length);

/* ---- batches ------------------------------------------------------------------------- */

/* One batch header.  For legacy entries (magic 0/1) the core fills base_offset, length,
 * magic, crc, attributes, max_timestamp (v1) and last_offset from the wrapper entry;
 * the other fields hold Kafka's "none" sentinels. */
typedef struct plog_batch_info {
    int64_t base_offset;
    int32_t length;                 /* bytes after the length field; size = length + 12 */
    int32_t partition_leader_epoch;
    int8_t magic;
    uint32_t crc;
    int16_t attributes;
    int32_t last_offset_delta;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t record_count;
    int64_t last_offset;            /* derived */
    int64_t size_bytes;             /* derived: length + 12 */
} plog_batch_info;

/* Parse the batch starting at buf[position] (buffer of `length` bytes), following Kafka's
 * in-memory iteration rules:
 *   fewer than 17 bytes left, or the batch extends past the end  -> PLOG_EPARTIAL;
 *   length field < 14, or > max_batch_bytes when that is > 0       -> PLOG_ECORRUPT / PLOG_ETOOLARGE;
 *   magic outside 0..2                                            -> PLOG_EMAGIC;
 *   v2 batch shorter than 61 bytes                                -> PLOG_ECORRUPT.
 * The CRC is not checked here (see plog_batch_crc_ok). */
int plog_batch_parse(const uint8_t *buf, size_t length, size_t position,
                     int32_t max_batch_bytes, plog_batch_info *out);

/* 1 when the stored CRC matches: CRC-32C of [21, end) for v2, CRC-32 of [16, end) for v0/v1. */
int plog_batch_crc_ok(const uint8_t *batch, const plog_batch_info *info);

/* Write the 61-byte v2 header into batch[0..61) for a batch of `size_bytes` bytes whose
 * records section already sits at batch[61..size_bytes), and compute its CRC.
 * Uses every field of info except length, crc, last_offset and size_bytes. */
int plog_batch_finish(uint8_t *batch, size_t size_bytes, const plog_batch_info *info);

/* Rewrite base offset and partition leader epoch in place (both outside the CRC). */
void plog_batch_stamp(uint8_t *batch, int64_t base_offset, int32_t partition_leader_epoch);

/* The header fields of every batch of a buffer, as columns, in one call (reads in bulk: a
 * fetch's validation, the Spark source).  Rows are filled for each batch that parses, in
 * order, until the buffer ends (stop = 0), a partial batch ends it (stop = PLOG_EPARTIAL),
 * a batch cannot be delimited (stop = its plog_batch_parse error, at `end`), or the arrays
 * are full (stop = PLOG_ESPACE).  With check_crc, crc_valid[i] is 1 or 0 and
 * first_invalid is the row of the first mismatch (-1: none); without, crc_valid[i] = -1.
 * capacity 0 with NULL arrays counts the rows only (no CRC).  `end` is the position after
 * the last row's batch. */
typedef struct plog_batch_columns {
    int64_t capacity;               /* in: rows the arrays hold */
    int64_t count;                  /* out */
    int64_t end;                    /* out */
    int64_t first_invalid;          /* out */
    int stop;                       /* out */
    int64_t *position, *base_offset, *last_offset, *base_timestamp, *max_timestamp, *producer_id, *size_bytes;
    int32_t *partition_leader_epoch, *record_count, *base_sequence;
    uint32_t *crc;
    int16_t *attributes, *producer_epoch;
    int8_t *magic, *crc_valid;
} plog_batch_columns;

int plog_batch_columns_scan(const uint8_t *buf, size_t length, int32_t max_batch_bytes, int check_crc,
                            plog_batch_columns *c);

/* ---- records (v2) -------------------------------------------------------------------- */

/* A payload given by address: length -1 is null (data ignored), 0 is empty. */
typedef struct plog_span {
    const uint8_t *data;
    int32_t length;
} plog_span;

/* The columns of n records to encode, as storage/_pyrecords walks a producer's list (or the
 * cleaner's kept records) into them, payloads read where they lie. */
typedef struct plog_record_spans {
    const plog_span *keys;
    const plog_span *values;
    const plog_span *headers;       /* each record's header section already encoded (count varint,
                                       then the pairs); a length 0: none (a zero count is written) */
    const int64_t *timestamps;
    const int32_t *offset_deltas;   /* NULL: 0, 1, ..., n - 1 (the cleaner keeps its records' own) */
    int64_t base_timestamp;         /* the timestamp deltas count from it */
} plog_record_spans;

/* Encode n records back to back into out; *written gets the size, *max_timestamp the largest
 * timestamp (-1 when none is larger).  out NULL is the sizing pass: *written gets the exact
 * encoded size (capacity ignored), so the caller allocates no more than needed.  PLOG_ESPACE
 * when capacity is short, PLOG_ETOOLARGE for a record past int32, PLOG_EARG for a length
 * below -1 (below 0 for headers) or a negative offset delta, PLOG_ETIMESTAMP for a timestamp
 * delta past int64. */
int plog_records_encode_spans(uint8_t *out, size_t capacity, size_t *written, int32_t n,
                              const plog_record_spans *records, int64_t *max_timestamp);

/* One decoded record: positions are relative to the records buffer. */
typedef struct plog_record_view {
    int64_t timestamp_delta;
    int32_t offset_delta;
    int32_t key_position;
    int32_t key_length;             /* -1 = null */
    int32_t value_position;
    int32_t value_length;           /* -1 = null */
    int32_t headers_position;       /* first header (after the count varint) */
    int32_t headers_count;
} plog_record_view;

/* Decode exactly `count` records with Kafka's record-level validation (declared length
 * fully consumed, header counts and key lengths non-negative, nothing left over).
 * On PLOG_ERECORD, *error_position holds the position of the failing record. */
int plog_records_decode(const uint8_t *buf, size_t length, int32_t count,
                        plog_record_view *out, int64_t *error_position);

/* Kafka's LogValidator pass over the records of one uncompressed batch (or the decompressed
 * records of a compressed one), without decoding keys and values: exactly `count` records,
 * each valid as plog_records_decode checks, nothing left over (PLOG_ERECORD), and each
 * record's offset delta equal to its index (PLOG_EORDER).  *max_timestamp_delta receives the
 * largest timestamp delta (INT64_MIN when count is 0); on error *error_position holds the
 * position of the failing record. */
int plog_records_check(const uint8_t *buf, size_t length, int32_t count, int64_t *max_timestamp_delta,
                       int64_t *error_position);

/* Decode `count` headers starting at buf[position]; header values may be null (-1). */
int plog_headers_decode(const uint8_t *buf, size_t length, int32_t position, int32_t count,
                        int32_t *key_positions, int32_t *key_lengths,
                        int32_t *value_positions, int32_t *value_lengths);

/* Zig-zag varint (int32) and varlong (int64); return the bytes written (<= 10). */
int plog_varint_encode(int64_t value, uint8_t *out);

/* ---- validation of appended chunks --------------------------------------------------- */

#define PLOG_VALIDATE_ASSIGN_OFFSETS 1   /* leader: rewrite base offsets from next_offset */
#define PLOG_VALIDATE_STAMP_EPOCH 2      /* leader: write leader_epoch into every batch */
#define PLOG_VALIDATE_REQUIRE_FIRST 4    /* follower: first base offset >= next_offset */
#define PLOG_APPEND_NO_ROLL 8            /* plog_segment_append_chunk: skip the roll check (just rolled) */
#define PLOG_VALIDATE_CLIENT 16          /* leader, producer origin: Kafka's LogValidator checks */
#define PLOG_VALIDATE_RECHECKED 32       /* the caller checked the compressed batches' records */
#define PLOG_VALIDATE_MAX_EPOCHS 64
#define PLOG_VALIDATE_PRODUCERS 128      /* leader, producer origin: the producer check below */
#define PLOG_APPEND_READONLY 256         /* plog_segment_append_chunk: buf is never written (below) */
#define PLOG_EXPECTED_PRODUCERS 32
#define PLOG_EPOCH_MIXED -2147483649     /* sole_epoch when the batches carry different epochs */

/* Validate a chunk of v2 batches before it is appended: each batch complete, v2, within
 * max_batch_bytes (0 = no limit), CRC valid; base offsets strictly increasing (after
 * assignment).  With ASSIGN_OFFSETS the buffer is rewritten in place (it must be a
 * private copy).  Records are not parsed.  On error, error_position / error_offset
 * name the failing batch.  Nothing is written to any file.
 *
 * The first seven fields are the AppendInfo of the chunk, int64 and in AppendInfo's order
 * on purpose, then sole_epoch and producer_batch_count: storage/log/appends.py reads the nine
 * as one int64 array after an append, all an append's common case asks of C (batch.c asserts
 * the layout).  Keep them first. */
typedef struct plog_validate {
    int64_t first_offset;           /* out */
    int64_t last_offset;            /* out */
    int64_t max_timestamp;          /* out: -1 when no batch carries one */
    int64_t offset_of_max_timestamp;/* out: last offset of the batch with max_timestamp */
    int64_t batch_count;            /* out */
    int64_t record_count;           /* out */
    int64_t size_bytes;             /* out: bytes of the chunk */
    int64_t sole_epoch;             /* out: the epoch every batch carries, or PLOG_EPOCH_MIXED */
    int64_t producer_batch_count;   /* out: batches with a producer id (idempotent, transactional,
                                       control): the log updates its producer state only then */
    int flags;                      /* in (plog_segment_append_chunk/_pieces: set from their argument) */
    int64_t next_offset;            /* in: log end offset */
    int32_t leader_epoch;           /* in: epoch stamped with STAMP_EPOCH */
    int32_t max_batch_bytes;        /* in */
    int64_t segment_bytes;          /* in: plog_segment_append_chunk only */
    int64_t segment_ms;             /* in: plog_segment_append_chunk only */
    int64_t first_batch_max_timestamp; /* out */
    int32_t epoch_count;            /* out: epoch changes seen, may exceed MAX_EPOCHS */
    int32_t epochs[64];             /* out: partition leader epoch at each change */
    int64_t epoch_offsets[64];      /* out: base offset of the batch where it changed */
    int64_t error_position;         /* out */
    int64_t error_offset;           /* out */
    /* PLOG_VALIDATE_PRODUCERS (plog_segment_append_chunk only): a chunk with a producer id is
     * written only when it is the next batch of an expected producer -- one batch, neither
     * transactional nor control, from expected_id[i] with expected_epoch[i], starting at
     * expected_sequence[i], its last sequence not past 2^31-1; otherwise PLOG_EPRODUCER and
     * nothing is written (the caller checks the producer state, then appends without the flag).
     * After such a write expected_hit = i and expected_sequence[i] is the sequence after the
     * batch's last (the slot is emptied, expected_id[i] = -1, when that would wrap). */
    int32_t expected_count;         /* in: slots in use */
    int32_t expected_hit;           /* out: the slot a write advanced, else -1 */
    int64_t expected_id[32];        /* in */
    int32_t expected_epoch[32];     /* in */
    int32_t expected_sequence[32];  /* in/out */
} plog_validate;

int plog_validate_chunk(uint8_t *buf, size_t length, plog_validate *v);

/* ---- scan (recovery, verification) --------------------------------------------------- */

/* Walk the batches of a segment image following Kafka's file iteration and recovery rules
 * (docs/kafka-formats.md 1.6, 5.4): stops at <= 17 trailing bytes or a partial trailing batch
 * (stop = PLOG_EPARTIAL), or at the first corrupt batch (stop = PLOG_ECORRUPT / PLOG_ECRC /
 * PLOG_EMAGIC / PLOG_EOVERFLOW, or PLOG_EORDER for a batch whose offsets do not follow its
 * predecessor's -- stricter than Kafka, since offsets are outside the CRC); valid_bytes is
 * where the valid prefix ends.  When seg is non-NULL the offset and time indexes of seg are
 * rebuilt from the valid batches with Kafka's cadence; an index that cannot take an entry
 * ends the scan with that error as the return value. */
typedef struct plog_scan {
    int64_t base_offset;            /* in: segment base offset */
    int32_t index_interval_bytes;   /* in */
    int check_crc;                  /* in: 1 to validate CRCs */
    int64_t valid_bytes;            /* out */
    int32_t batch_count;            /* out */
    int64_t record_count;           /* out (record counts from headers) */
    int64_t first_offset;           /* out: -1 when no batch */
    int64_t last_offset;            /* out: -1 when no batch */
    int64_t max_timestamp;          /* out: -1 when none */
    int64_t offset_of_max_timestamp;/* out */
    int64_t first_batch_max_timestamp; /* out */
    int32_t min_magic;              /* out */
    int32_t max_magic;              /* out */
    int stop;                       /* out: 0 (clean end), or why the scan stopped */
    int64_t stop_position;          /* out */
    int64_t stop_offset;            /* out: base offset of the failing batch, -1 if unknown */
    int32_t epoch_count;            /* out: number of epoch changes (v2 batches only) */
    int32_t epoch_capacity;         /* in: size of the arrays below */
    int32_t *epochs;                /* in/out */
    int64_t *epoch_offsets;         /* in/out */
    int64_t producer_batch_count;   /* out: v2 batches with a producer id (idempotent,
                                       transactional, control): none, and a replay of the
                                       producer state has nothing to read here */
} plog_scan;

struct plog_segment;
int plog_scan_buffer(const uint8_t *buf, size_t length, plog_scan *scan, struct plog_segment *seg);
/* The same scan over a file read in windows (a file another process may shrink is never
 * mapped): plog_scan_start, then plog_scan_window for each window in order -- buf holds the
 * file's bytes from `origin`, which is the previous call's valid_bytes; with `more` (the file
 * goes on past the window) a batch running past the window leaves stop 0, to be read whole by
 * the next window.  The last call (more 0) gives the verdict plog_scan_buffer would give. */
void plog_scan_start(plog_scan *scan, int32_t *last_epoch);
int plog_scan_window(const uint8_t *buf, size_t length, int64_t origin, int more, plog_scan *scan, int32_t *last_epoch);

/* ---- segment ------------------------------------------------------------------------- */

/* A segment: its .log file and its .index / .timeindex.  The indexes of an active segment
 * live in heap memory and reach their files by pwrite at flush and seal (never through a
 * writable mapping: a full disk must be an error, not SIGBUS); a sealed segment opened from
 * disk maps them read-only.  The struct is public so Python reads fields without a call; only
 * the functions below change it. */
typedef struct plog_segment {
    int64_t base_offset;
    int log_fd;
    int index_fd;
    int time_fd;
    int64_t size;                   /* logical size of the .log file */
    int64_t next_offset;            /* one past the last offset appended (base when empty) */
    int32_t index_interval_bytes;
    int64_t bytes_since_last_index_entry;
    int64_t max_timestamp;          /* max batch timestamp seen, -1 none */
    int64_t offset_of_max_timestamp;
    int64_t first_batch_max_timestamp; /* for time-based roll; -1 none */
    int64_t created_ms;             /* Kafka's LogSegment.created: the time-based roll's fallback
                                       (set by the caller after the open; the open zeroes it) */
    uint8_t *offset_index;
    int32_t offset_entries;
    int32_t offset_max_entries;
    int64_t offset_map_bytes;
    uint8_t *time_index;
    int32_t time_entries;
    int32_t time_max_entries;
    int64_t time_map_bytes;
    int sync_flags;                 /* PLOG_SYNC_NOOP when fsync is disabled */
    int mutable_indexes;            /* 1 while the segment is active */
    int32_t offset_capacity;        /* heap entries allocated; 0 = mapped read-only (sealed, from disk) */
    int32_t offset_written;         /* leading entries known to be in the .index file as in memory */
    int64_t offset_file_bytes;      /* length of the .index file */
    int32_t time_capacity;
    int32_t time_written;
    int64_t time_file_bytes;
    int index_suspect;              /* an index file failed a check at open, or a lookup hint was wrong */
    int indexes_lazy;               /* 1: a new segment whose index files do not exist yet */
} plog_segment;

/* Open (or create) the three files.  Index files are created lazily, as Kafka's LazyIndex
 * does: a new active segment (create and mutable_indexes) whose index files do not exist opens
 * without them (indexes_lazy = 1, index_fd = time_fd = -1, empty heap indexes) and
 * plog_segment_attach_indexes creates them, before the first flush or seal.  With
 * mutable_indexes the existing index entries are
 * read into heap memory (the files are not extended); otherwise the index files are mapped
 * read-only at their length.  Existing index entries are taken as valid, as Kafka does: call
 * plog_segment_recover (or trust a clean shutdown).  An index file longer than
 * index_max_bytes (or than 2^31 entries) is not read: the segment opens with no entries in it
 * and index_suspect = 1, for the caller to rebuild.  On failure every descriptor and mapping
 * opened here is released. */
int plog_segment_open(plog_segment *seg, const char *log_path, const char *index_path,
                      const char *time_path, int64_t base_offset, int32_t index_interval_bytes,
                      int64_t index_max_bytes, int create, int mutable_indexes, int sync_flags);

/* Create and open the index files of a lazy segment (a no-op otherwise); their entries are
 * all written at the next plog_index_sync (flush, seal).  Returns 0 or an error, the segment
 * unchanged on failure.  plog_segment_flush and plog_segment_seal refuse a lazy segment
 * (PLOG_EARG): the caller attaches first, and makes the new directory entries durable. */
int plog_segment_attach_indexes(plog_segment *seg, const char *index_path, const char *time_path);

/* Append a validated chunk (see plog_validate_chunk) at the end of the .log, then add the
 * index entries Kafka's cadence asks for.  The chunk is written whole or the segment is
 * left as it was (a failed write is truncated back). */
int plog_segment_append(plog_segment *seg, const uint8_t *buf, size_t length,
                        const plog_validate *v);

/* The whole append of a chunk in one call, as PartitionLog does it: validate (as
 * plog_validate_chunk, with v->flags = flags, v->next_offset = next_offset and
 * v->leader_epoch = leader_epoch; max_batch_bytes, segment_bytes and segment_ms are read from
 * v), refuse a chunk larger than segment_bytes (PLOG_ELISTTOOLARGE), run Kafka's roll check
 * (plog_segment_should_roll at now_ms; now_ms < 0: the caller has not read the clock) unless
 * flags has PLOG_APPEND_NO_ROLL, check what
 * plog_segment_append checks, then write and index the chunk as plog_segment_append does.
 * The flags are the caller's for this one call: v keeps nothing of them for the next.
 *
 * Besides 0 and the errors, four verdicts ask the caller to do something and call again,
 * nothing written (storage/log/appends.py, its one loop): PLOG_ERECHECK (check the records in
 * Python, then call with PLOG_VALIDATE_RECHECKED), PLOG_EPRODUCER (check the producer state,
 * then call without PLOG_VALIDATE_PRODUCERS), PLOG_ECLOCK (the roll rule needs the time and
 * now_ms was < 0: read the clock, then call with it) and PLOG_EROLL (roll, then call with
 * NO_ROLL), in that order of precedence: recheck and producer check before the roll, so that
 * a refused chunk never leaves a new empty segment behind.  The clock is asked for only for
 * a segment whose first batch carries no timestamp: the common append reads no time.
 *
 * The CRCs are checked while writing: the chunk goes to the file in pieces of
 * PLOG_APPEND_PIECE_BYTES, and each piece is hashed right after its write, while the bytes
 * are still in the cache (one pass over memory instead of two).  When a CRC mismatches, the
 * file is cut back to seg->size through the seam's truncate and PLOG_ECRC is returned:
 * seg is unchanged and nothing past seg->size remains in the file.  (A crash in between
 * leaves a torn tail past the valid batches, which recovery cuts, as after any torn
 * write.)  The offsets and epoch are stamped (ASSIGN_OFFSETS / STAMP_EPOCH) into buf
 * before the first write, so buf must be a private copy for a leader, and a CRC error found
 * while writing names the batch's base offset as stamped.  Every other outcome is decided
 * before the first write, and the error is the one plog_validate_chunk would report (the
 * first failing batch, CRC included); nothing is stamped then.  On success, v holds what
 * plog_validate_chunk reports, and size_bytes.
 *
 * PLOG_APPEND_READONLY: buf is not written to, not even stamped (a caller's immutable bytes
 * need no private copy).  Each batch's first PLOG_STAMPED_BYTES bytes (base offset, length,
 * partition leader epoch) are stamped into a scratch copy instead, and the file gets the
 * scratch headers and the rest of each batch from buf by vectored writes (plog_io_pwritev),
 * whole batches at a time, each group hashed right after its write as above.  The stamped
 * bytes lie before the CRC'd range, so the CRCs are checked on buf itself. */
#define PLOG_APPEND_PIECE_BYTES 1048576
#define PLOG_STAMPED_BYTES 16
int plog_segment_append_chunk(plog_segment *seg, uint8_t *buf, size_t length, int64_t next_offset,
                              int32_t leader_epoch, int flags, int64_t now_ms, plog_validate *v);

/* Kafka's roll rule (LogSegment.shouldRoll), the only one: 1 when an append of `length` bytes
 * (the validated chunk in v: its offsets, its max timestamp; v->segment_bytes and
 * v->segment_ms) would push the segment past segment_bytes; or the segment is not empty and
 * has waited more than segment_ms -- from its first batch's max timestamp to the chunk's max
 * timestamp, or, when that first batch carries none, from seg->created_ms to now_ms (Kafka's
 * timeWaitedForRoll; segment.jitter.ms is not a config here: no jitter); or an index is
 * full; or the chunk's offsets do not fit the segment (below its base, or its last offset
 * more than INT32_MAX past the base).  PLOG_ECLOCK when the creation time decides and now_ms
 * is < 0 (unknown). */
int plog_segment_should_roll(const plog_segment *seg, size_t length, const plog_validate *v, int64_t now_ms);

/* Offset index lookup: largest entry with offset <= target, or (base, 0). */
void plog_offset_index_lookup(const plog_segment *seg, int64_t target,
                              int64_t *offset_out, int64_t *position_out);
/* Time index lookup: largest entry with timestamp <= target, or (-1, base). */
void plog_time_index_lookup(const plog_segment *seg, int64_t target,
                            int64_t *timestamp_out, int64_t *offset_out);
/* Entry i of each index (for tools and tests). */
int plog_offset_index_entry(const plog_segment *seg, int32_t i, int64_t *offset, int64_t *position);
int plog_time_index_entry(const plog_segment *seg, int32_t i, int64_t *timestamp, int64_t *offset);

/* Kafka's index sanity check (LogSegment.sanityCheck), stricter: the last two entries of
 * each index (every entry with `thorough`) must be in order, the offset entries' positions
 * inside the segment.  0, or which check failed, the entry in bad[0..1]: (absolute offset,
 * position) for the offset index, (timestamp, absolute offset) for the time index. */
#define PLOG_INDEX_BAD_OFFSET_ENTRY 1
#define PLOG_INDEX_BAD_TIME_ENTRY 3
int plog_segment_index_check(const plog_segment *seg, int thorough, int64_t *bad);

/* Find, in the segment image `log` (seg->size bytes), the first batch whose last offset is
 * >= target, starting from the offset index hint.  *position_out = its position or -1.  The
 * hint is checked against the batch it points at (inside the segment, a batch starts there,
 * its base offset is at least the segment's and its last offset at most the entry's); a hint
 * that fails is not used -- the scan starts at position 0 -- and seg->index_suspect is set:
 * a damaged index never serves a wrong batch. */
int plog_segment_find(plog_segment *seg, const uint8_t *log, int64_t target,
                      int64_t *position_out, plog_batch_info *info_out);

/* A read by offset in one call (plog_segment_find, then plog_batches_span): span_out[0] = the
 * position of the first batch whose last offset is >= target, or -1 when the segment holds
 * none (then span_out[1] = 0); span_out[1] = the bytes of whole batches from there, as
 * plog_batches_span counts them.  An error of plog_segment_find is returned as is. */
int plog_segment_read(plog_segment *seg, const uint8_t *log, int64_t target, int64_t max_bytes,
                      int64_t max_offset, int64_t *span_out);

/* Bytes of whole batches from position: at least the first batch, then more while the
 * total stays <= max_bytes and each batch's last offset < max_offset (-1 = no bound). */
int64_t plog_batches_span(const uint8_t *log, int64_t size, int64_t position, int64_t max_bytes,
                          int64_t max_offset);

/* Truncate so that no batch with last offset >= offset remains: cut the .log at the
 * batch that holds `offset`, drop index entries >= offset.  *new_size reports the size. */
int plog_segment_truncate_to(plog_segment *seg, const uint8_t *log, int64_t offset);

/* Derive next_offset and the max timestamp of an opened segment from its index hints and
 * the image `log` (seg->size bytes), or, when `log` is NULL, from the batch headers read
 * from the .log by pread (a clean open maps nothing); used after a clean open.  A read
 * error is returned as its errno (positive), damage as a negative PLOG_ code. */
int plog_segment_load(plog_segment *seg, const uint8_t *log);

/* Rebuild the indexes and size from the segment image (unclean recovery).  The .log is
 * cut to the valid prefix; scan reports what was found and why the scan stopped.  The caller
 * sets scan->check_crc (always 1 outside the simulator's mutation runs) and the epoch arrays. */
int plog_segment_recover(plog_segment *seg, const uint8_t *log, size_t log_length, plog_scan *scan);

/* Append the final time-index entry and write both indexes to their files, exactly their
 * entries long: the segment becomes inactive (roll) or is about to close.  On failure the
 * segment stays active and usable (and closeable); nothing in memory is lost. */
int plog_segment_seal(plog_segment *seg);
/* Make a sealed segment active again (after truncation into it): a mapped index is copied to
 * heap memory.  On failure (ENOMEM) the segment stays sealed. */
int plog_segment_unseal(plog_segment *seg, int64_t index_max_bytes);
/* Write the indexes' pending entries (pwrite through the seam), then fsync .log and both
 * indexes (a no-op when sync_flags has PLOG_SYNC_NOOP, but the seam still sees the flush
 * point). */
int plog_segment_flush(plog_segment *seg);
/* Close the three files (and release a read-only index mapping) but keep everything the
 * segment knows in memory: a sealed or idle segment holds no descriptor.  Only
 * plog_segment_resume, plog_segment_close and field reads are legal on a suspended segment. */
int plog_segment_suspend(plog_segment *seg);
/* Reopen a suspended segment's files (a no-op when open); the .log must still be seg->size
 * bytes long (else PLOG_ECORRUPT) and a mapped index at least its entries.  On failure the
 * segment stays suspended. */
int plog_segment_resume(plog_segment *seg, const char *log_path, const char *index_path, const char *time_path);
/* Release the index memory or mappings and close the files; does not seal.  Legal in every
 * state a plog_segment_* call left the segment in, failed calls included; idempotent. */
int plog_segment_close(plog_segment *seg);

/* ---- the I/O seam -------------------------------------------------------------------- */

/* Every file operation of the core.  plog_io_use_python(1) routes them to the Python
 * callbacks (storage/core/io.py) instead of the POSIX implementation. */
int plog_io_open(const char *path, int flags, int *fd_out);
int plog_io_close(int fd);
int plog_io_pread(int fd, uint8_t *buf, size_t length, int64_t offset, size_t *read_out);
int plog_io_pwrite(int fd, const uint8_t *buf, size_t length, int64_t offset);
/* One buffer of a vectored write (the layout of struct iovec). */
typedef struct plog_iovec {
    const uint8_t *base;
    size_t length;
} plog_iovec;
/* Write count buffers (at most PLOG_IOV_MAX) one after another from offset: everything or an error. */
#define PLOG_IOV_MAX 256
int plog_io_pwritev(int fd, const plog_iovec *iov, int count, int64_t offset);

/* plog_segment_append_chunk for a follower's chunk given as `count` pieces, each holding
 * whole batches (PartitionLog.append_batches), without gathering them: validated as their
 * concatenation would be (plog_validate_headers over the pieces; error positions count from
 * the first piece's start), then written straight from the pieces by vectored writes of at
 * most PLOG_IOV_MAX pieces and PLOG_APPEND_PIECE_BYTES (a larger piece alone), each group's
 * batches hashed right after its write; a CRC mismatch cuts the file back to seg->size.
 * Nothing is stamped: v->flags may not ask for ASSIGN_OFFSETS, STAMP_EPOCH, CLIENT or
 * PRODUCERS (PLOG_EARG).  A refusal leaves the segment as it was and does not say which
 * check of the concatenation would have come first (no CRC pass before the others): the
 * caller gathers the pieces and appends them with plog_segment_append_chunk, which does. */
int plog_segment_append_pieces(plog_segment *seg, const plog_iovec *pieces, int count, int64_t next_offset,
                               int flags, int64_t now_ms, plog_validate *v);
int plog_io_fsync(int fd, int flags);
int plog_io_ftruncate(int fd, int64_t size);
int plog_io_fsize(int fd, int64_t *size_out);
int plog_io_mmap(int fd, size_t length, int writable, uint8_t **addr_out);
int plog_io_munmap(uint8_t *addr, size_t length);
int plog_io_msync(uint8_t *addr, size_t length, int flags);
/* Replace the pages of [addr, addr+length) with anonymous zero pages (keeps a mapping
 * that Python still exports safe after the file under it was truncated). */
int plog_io_mmap_retire(uint8_t *addr, size_t length);
/* Before the file under a read-only mapping of `length` bytes at addr shrinks to `from`: the
 * pages holding [from, valid) -- bytes readers may still hold views of -- become private copies
 * of what they hold now, and the pages past `valid` zero pages.  A reader then keeps reading
 * the data as it was (never zeros, never SIGBUS); the mapping must not be used for new reads. */
int plog_io_mmap_snapshot(uint8_t *addr, size_t valid, size_t from, size_t length);

/* The POSIX implementation, callable from the Python seam. */
int plog_posix_open(const char *path, int flags, int *fd_out);
int plog_posix_close(int fd);
int plog_posix_pread(int fd, uint8_t *buf, size_t length, int64_t offset, size_t *read_out);
int plog_posix_pwrite(int fd, const uint8_t *buf, size_t length, int64_t offset);
int plog_posix_pwritev(int fd, const plog_iovec *iov, int count, int64_t offset);
int plog_posix_fsync(int fd, int flags);
int plog_posix_ftruncate(int fd, int64_t size);
int plog_posix_fsize(int fd, int64_t *size_out);
int plog_posix_mmap(int fd, size_t length, int writable, uint8_t **addr_out);
int plog_posix_munmap(uint8_t *addr, size_t length);
int plog_posix_msync(uint8_t *addr, size_t length, int flags);

void plog_io_use_python(int on);
int plog_io_python_active(void);

/* CDEF-END */

#endif

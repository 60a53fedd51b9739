/*
 * batch.c -- record batches: header parse and build, validation of appended chunks, and the
 * segment scan used by recovery and verification.
 *
 * Layout (docs/kafka-formats.md 1.1): a v2 batch is a 61-byte header followed by the records
 * section.  Length (bytes 8..12) counts everything after itself, so a batch occupies
 * Length + 12 bytes.  The CRC at 17..21 is CRC-32C of [21, end): BaseOffset, Length,
 * PartitionLeaderEpoch and Magic are outside it, which is why a leader can assign offsets
 * and stamp its epoch without recomputing it, and why recovery cannot notice a flipped
 * epoch or magic byte (docs/kafka-formats.md 11.1).
 *
 * Legacy entries (magic 0/1) are read, never written: offset(8) size(4) crc(4) magic(1)
 * attributes(1) [timestamp(8) for v1] key(4+n) value(4+n); the CRC is CRC-32 (IEEE) of
 * [16, end).  A compressed legacy entry wraps an inner message set in its value.
 *
 * Rules kept here, each with its source:
 *  - iteration stops without error at <= 17 trailing bytes or a batch that runs past the
 *    end; Length < 14 is corruption (FileLogInputStream.nextBatch);
 *  - a v2 batch is valid iff size >= 61 and the CRC matches (DefaultRecordBatch.isValid);
 *  - recovery truncates at the first invalid batch and indexes every batch whose start is
 *    more than index_interval_bytes past the last indexed one (LogSegment.recover);
 *  - appended chunks: whole v2 batches, CRC valid, base offsets strictly increasing and not
 *    overlapping, follower chunks start at or after the log end offset
 *    (UnifiedLog.analyzeAndValidateRecords).
 */
#include "internal.h"
#include <stddef.h>

static int parse_legacy(const uint8_t *b, size_t avail, plog_batch_info *out) {
    int8_t magic = (int8_t)b[16];
    size_t min = magic == 0 ? 14 : 22;
    if ((size_t)out->length < min) return PLOG_ECORRUPT;
    (void)avail;
    out->magic = magic;
    out->crc = (uint32_t)be32(b + 12);
    out->attributes = (int8_t)b[17];      /* a signed byte, as Kafka's LegacyRecord.attributes() */
    out->partition_leader_epoch = -1;
    out->last_offset_delta = 0;
    out->base_timestamp = -1;
    out->max_timestamp = magic == 1 ? be64(b + 18) : -1;
    out->producer_id = -1;
    out->producer_epoch = -1;
    out->base_sequence = -1;
    out->record_count = 1;
    out->last_offset = out->base_offset;
    return 0;
}

int plog_batch_parse(const uint8_t *buf, size_t length, size_t position, int32_t max_batch_bytes,
                     plog_batch_info *out) {
    PLOG_ASSERT(out != NULL);
    PLOG_ASSERT(buf != NULL || length == 0);
    if (position > length) return PLOG_EPARTIAL;
    return plog_batch_parse_header(buf + position, length - position, max_batch_bytes, out);
}

int plog_batch_parse_header(const uint8_t *b, size_t avail, int32_t max_batch_bytes, plog_batch_info *out) {
    PLOG_ASSERT(out != NULL);
    PLOG_ASSERT(b != NULL || avail == 0);
    if (avail <= PLOG_HEADER_SIZE_UP_TO_MAGIC) return PLOG_EPARTIAL;
    out->base_offset = be64(b + POS_BASE_OFFSET);
    out->length = be32(b + POS_LENGTH);
    out->size_bytes = (int64_t)out->length + PLOG_LOG_OVERHEAD;
    if (out->length < PLOG_LEGACY_RECORD_OVERHEAD_V0) return PLOG_ECORRUPT;
    if (max_batch_bytes > 0 && out->size_bytes > max_batch_bytes) return PLOG_ETOOLARGE;
    int8_t magic = (int8_t)b[POS_MAGIC];
    if (magic < 0 || magic > PLOG_CURRENT_MAGIC) return PLOG_EMAGIC;
    if ((uint64_t)out->size_bytes > avail) return PLOG_EPARTIAL;
    if (magic < 2) return parse_legacy(b, avail, out);
    if (out->size_bytes < PLOG_BATCH_OVERHEAD) return PLOG_ECORRUPT;
    out->partition_leader_epoch = be32(b + POS_PLE);
    out->magic = magic;
    out->crc = (uint32_t)be32(b + POS_CRC);
    out->attributes = be16(b + POS_ATTRIBUTES);
    out->last_offset_delta = be32(b + POS_LAST_OFFSET_DELTA);
    out->base_timestamp = be64(b + POS_BASE_TIMESTAMP);
    out->max_timestamp = be64(b + POS_MAX_TIMESTAMP);
    out->producer_id = be64(b + POS_PRODUCER_ID);
    out->producer_epoch = be16(b + POS_PRODUCER_EPOCH);
    out->base_sequence = be32(b + POS_BASE_SEQUENCE);
    out->record_count = be32(b + POS_RECORD_COUNT);
    /* Offsets are int64 and the last one must leave room for a next offset: a batch whose
     * offsets would overflow is corrupt (and the sum is never computed with overflow). */
    if (out->base_offset < 0 ? out->last_offset_delta < 0 && out->base_offset < INT64_MIN - out->last_offset_delta
                             : out->last_offset_delta > 0 && out->base_offset > INT64_MAX - 1 - out->last_offset_delta)
        return PLOG_ECORRUPT;
    out->last_offset = out->base_offset + out->last_offset_delta;
    return 0;
}

int plog_batch_crc_ok(const uint8_t *batch, const plog_batch_info *info) {
    PLOG_ASSERT(batch != NULL);
    PLOG_ASSERT(info != NULL);
    PLOG_ASSERT(info->size_bytes >= (info->magic >= 2 ? PLOG_BATCH_OVERHEAD : 16));  /* parsed: a CRC'd range */
    if (info->magic >= 2)
        return plog_crc32c(0, batch + POS_ATTRIBUTES, (size_t)info->size_bytes - POS_ATTRIBUTES) == info->crc;
    return plog_crc32_ieee(0, batch + 16, (size_t)info->size_bytes - 16) == info->crc;
}

int plog_batch_finish(uint8_t *b, size_t size_bytes, const plog_batch_info *h) {
    PLOG_ASSERT(b != NULL);
    PLOG_ASSERT(h != NULL);
    if (size_bytes < PLOG_BATCH_OVERHEAD || size_bytes > INT32_MAX) return PLOG_EARG;
    put64(b + POS_BASE_OFFSET, h->base_offset);
    put32(b + POS_LENGTH, (int32_t)(size_bytes - PLOG_LOG_OVERHEAD));
    put32(b + POS_PLE, h->partition_leader_epoch);
    b[POS_MAGIC] = PLOG_CURRENT_MAGIC;
    put16(b + POS_ATTRIBUTES, h->attributes);
    put32(b + POS_LAST_OFFSET_DELTA, h->last_offset_delta);
    put64(b + POS_BASE_TIMESTAMP, h->base_timestamp);
    put64(b + POS_MAX_TIMESTAMP, h->max_timestamp);
    put64(b + POS_PRODUCER_ID, h->producer_id);
    put16(b + POS_PRODUCER_EPOCH, h->producer_epoch);
    put32(b + POS_BASE_SEQUENCE, h->base_sequence);
    put32(b + POS_RECORD_COUNT, h->record_count);
    put32(b + POS_CRC, (int32_t)plog_crc32c(0, b + POS_ATTRIBUTES, size_bytes - POS_ATTRIBUTES));
    return 0;
}

void plog_batch_stamp(uint8_t *b, int64_t base_offset, int32_t partition_leader_epoch) {
    PLOG_ASSERT(b != NULL);
    put64(b + POS_BASE_OFFSET, base_offset);
    put32(b + POS_PLE, partition_leader_epoch);
}

/* ---- appended chunks ----------------------------------------------------------------- */

static void note_epoch(int32_t *count, int32_t *epochs, int64_t *offsets, int32_t capacity,
                       int32_t epoch, int64_t base_offset) {
    if (*count > 0 && *count <= capacity && epochs[*count - 1] == epoch) return;
    if (*count < capacity) {
        epochs[*count] = epoch;
        offsets[*count] = base_offset;
    } else if (*count == capacity) {
        /* overflow: the caller re-derives changes from the batches themselves */
    }
    (*count)++;
}

/* Kafka's LogValidator for a batch a producer sent (AppendOrigin.CLIENT, LogValidator
 * validateBatch and validateRecord): at least one record, a record count that matches the
 * offset range, no control batch, a sequence number when there is a producer id, CreateTime.
 * An uncompressed batch's records are walked (plog_records_check): well formed, offset deltas
 * 0..n-1, and the batch's max timestamp must be the largest record timestamp, as Kafka sets
 * it.  A compressed batch (its records are not in buf) and a max timestamp to rewrite go
 * back to the caller (PLOG_ERECHECK) unless it has done that (PLOG_VALIDATE_RECHECKED). */
static int check_client_batch(const uint8_t *b, const plog_batch_info *info, int flags) {
    if (info->record_count <= 0 || (int64_t)info->record_count != (int64_t)info->last_offset_delta + 1)
        return PLOG_ERECORD;
    if (info->attributes & PLOG_ATTR_CONTROL) return PLOG_ERECORD;
    if (info->producer_id >= 0 && info->base_sequence < 0) return PLOG_ERECORD;
    if (info->attributes & PLOG_ATTR_LOG_APPEND_TIME) return PLOG_ETIMESTAMP;
    if (flags & PLOG_VALIDATE_RECHECKED) return 0;
    if (info->attributes & PLOG_ATTR_COMPRESSION_MASK) return PLOG_ERECHECK;
    int64_t max_delta, error_position, max_timestamp = -1;
    int rc = plog_records_check(b + PLOG_BATCH_OVERHEAD, (size_t)info->size_bytes - PLOG_BATCH_OVERHEAD,
                                info->record_count, &max_delta, &error_position);
    if (rc) return rc == PLOG_EORDER ? PLOG_ERECORD : rc;
    int64_t newest;
    if (__builtin_add_overflow(info->base_timestamp, max_delta, &newest)) return PLOG_ETIMESTAMP;
    if (newest > max_timestamp) max_timestamp = newest;
    return max_timestamp == info->max_timestamp ? 0 : PLOG_ERECHECK;
}

/* The checks of plog_validate_chunk for one batch, at pos of its piece buf (length bytes);
 * `at` is where the piece starts in the whole chunk (error positions count from the chunk's
 * start), *next and *previous_last carry the walk from batch to batch, *size gets the
 * batch's size.  check_crc = 0 is the structural pass of plog_segment_append_chunk: nothing
 * is stamped, offsets are computed as ASSIGN_OFFSETS would write them, and the CRCs are left
 * to the caller -- but a batch failing an offset check has its own CRC checked first,
 * because plog_validate_chunk checks a batch's CRC before its offsets (the caller then
 * checks the batch_count batches before it). */
static int validate_batch(uint8_t *buf, size_t length, size_t pos, size_t at, plog_validate *v,
                          int64_t *next, int64_t *previous_last, int check_crc, size_t *size) {
    plog_batch_info info;
    int rc = plog_batch_parse(buf, length, pos, v->max_batch_bytes, &info);
    v->error_position = (int64_t)(at + pos);
    v->error_offset = length - pos >= 8 ? be64(buf + pos) : -1;
    if (rc) return rc;
    if (info.magic != PLOG_CURRENT_MAGIC) return PLOG_EMAGIC;
    if (info.record_count < 0 || info.last_offset_delta < 0) return PLOG_ECORRUPT;
    if (check_crc && !plog_batch_crc_ok(buf + pos, &info)) return PLOG_ECRC;
    if (v->flags & PLOG_VALIDATE_ASSIGN_OFFSETS) {
        if (*next > INT64_MAX - 1 - info.last_offset_delta) return PLOG_ECORRUPT;
        info.base_offset = *next;
        info.last_offset = *next + info.last_offset_delta;
    }
    if (info.last_offset == INT64_MAX) return PLOG_ECORRUPT;   /* no next offset after it */
    if (v->flags & PLOG_VALIDATE_CLIENT) {
        rc = check_client_batch(buf + pos, &info, v->flags);
        if (rc) return !check_crc && !plog_batch_crc_ok(buf + pos, &info) ? PLOG_ECRC : rc;
    }
    if (v->flags & PLOG_VALIDATE_STAMP_EPOCH) info.partition_leader_epoch = v->leader_epoch;
    if (check_crc && (v->flags & (PLOG_VALIDATE_ASSIGN_OFFSETS | PLOG_VALIDATE_STAMP_EPOCH)))
        plog_batch_stamp(buf + pos, info.base_offset, info.partition_leader_epoch);
    rc = 0;
    if (v->batch_count == 0) {
        if ((v->flags & PLOG_VALIDATE_REQUIRE_FIRST) && info.base_offset < v->next_offset)
            rc = PLOG_EAPPENDOFFSET;
        v->first_offset = info.base_offset;
        v->first_batch_max_timestamp = info.max_timestamp;
    } else if (info.base_offset <= *previous_last) {
        rc = PLOG_EORDER;
    }
    if (rc) return !check_crc && !plog_batch_crc_ok(buf + pos, &info) ? PLOG_ECRC : rc;
    if (info.max_timestamp > v->max_timestamp) {
        v->max_timestamp = info.max_timestamp;
        v->offset_of_max_timestamp = info.last_offset;
    }
    note_epoch(&v->epoch_count, v->epochs, v->epoch_offsets, PLOG_VALIDATE_MAX_EPOCHS,
               info.partition_leader_epoch, info.base_offset);
    *previous_last = info.last_offset;
    *next = info.last_offset + 1;
    v->batch_count++;
    v->record_count += info.record_count;
    if (info.producer_id >= 0) v->producer_batch_count++;
    *size = (size_t)info.size_bytes;
    return 0;
}

/* Every batch of a chunk given as pieces that each hold whole batches (one piece for
 * plog_validate_chunk and plog_validate_headers; the buffer is written -- stamped -- only
 * when check_crc, which only plog_validate_chunk's one mutable buffer asks for). */
static int validate(const plog_iovec *pieces, int count, plog_validate *v, int check_crc) {
    int64_t next = v->next_offset, previous_last = -1;
    size_t total = 0;
    for (int p = 0; p < count; p++) total += pieces[p].length;
    v->first_offset = v->last_offset = -1;
    v->max_timestamp = v->offset_of_max_timestamp = v->first_batch_max_timestamp = -1;
    v->batch_count = 0;
    v->record_count = 0;
    v->size_bytes = (int64_t)total;
    v->sole_epoch = PLOG_EPOCH_MIXED;
    v->epoch_count = 0;
    v->producer_batch_count = 0;
    v->error_position = v->error_offset = -1;
    if (total == 0) return PLOG_EEMPTY;
    size_t at = 0;
    for (int p = 0; p < count; at += pieces[p].length, p++) {
        uint8_t *buf = (uint8_t *)pieces[p].base;
        for (size_t pos = 0, size = 0; pos < pieces[p].length; pos += size) {
            int rc = validate_batch(buf, pieces[p].length, pos, at, v, &next, &previous_last, check_crc, &size);
            if (rc) return rc;
        }
    }
    v->last_offset = previous_last;
    if (v->epoch_count == 1) v->sole_epoch = v->epochs[0];
    v->error_position = v->error_offset = -1;
    return 0;
}

int plog_validate_chunk(uint8_t *buf, size_t length, plog_validate *v) {
    PLOG_ASSERT(v != NULL);
    PLOG_ASSERT(buf != NULL || length == 0);
    plog_iovec one = {buf, length};
    return validate(&one, 1, v, 1);
}

int plog_validate_headers(uint8_t *buf, size_t length, plog_validate *v) {
    PLOG_ASSERT(v != NULL);
    PLOG_ASSERT(buf != NULL || length == 0);
    plog_iovec one = {buf, length};
    return validate(&one, 1, v, 0);
}

int plog_validate_pieces(const plog_iovec *pieces, int count, plog_validate *v) {
    PLOG_ASSERT(v != NULL);
    PLOG_ASSERT(count >= 0);
    PLOG_ASSERT(pieces != NULL || count == 0);
    return validate(pieces, count, v, 0);
}

int plog_validate_crcs(const uint8_t *buf, size_t length, int64_t count, plog_validate *v) {
    PLOG_ASSERT(v != NULL);
    PLOG_ASSERT(buf != NULL || length == 0);
    PLOG_ASSERT(count >= 0);
    size_t pos = 0;
    for (int64_t i = 0; i < count && pos < length; i++) {
        plog_batch_info info;
        if (plog_batch_parse(buf, length, pos, 0, &info)) return 0;   /* cannot happen: passed validate */
        if (!plog_batch_crc_ok(buf + pos, &info)) {
            v->error_position = (int64_t)pos;
            v->error_offset = info.base_offset;
            return PLOG_ECRC;
        }
        pos += (size_t)info.size_bytes;
    }
    return 0;
}

/* storage/log/appends.py reads the AppendInfo fields of plog_validate, then sole_epoch and
 * producer_batch_count, as one int64 array. */
_Static_assert(offsetof(plog_validate, first_offset) == 0 && offsetof(plog_validate, last_offset) == 8 &&
               offsetof(plog_validate, max_timestamp) == 16 && offsetof(plog_validate, offset_of_max_timestamp) == 24 &&
               offsetof(plog_validate, batch_count) == 32 && offsetof(plog_validate, record_count) == 40 &&
               offsetof(plog_validate, size_bytes) == 48 && offsetof(plog_validate, sole_epoch) == 56 &&
               offsetof(plog_validate, producer_batch_count) == 64,
               "plog_validate: the AppendInfo fields, sole_epoch and producer_batch_count must come first, int64");

int64_t plog_batches_span(const uint8_t *log, int64_t size, int64_t position, int64_t max_bytes,
                          int64_t max_offset) {
    PLOG_ASSERT(log != NULL || size == 0);
    PLOG_ASSERT(size >= 0);
    PLOG_ASSERT(position >= 0);
    int64_t pos = position;
    while (pos < size) {
        plog_batch_info info;
        if (plog_batch_parse(log, (size_t)size, (size_t)pos, 0, &info)) break;
        if (max_offset >= 0 && info.last_offset >= max_offset) break;
        if (pos > position && pos + info.size_bytes - position > max_bytes) break;
        pos += info.size_bytes;
    }
    return pos - position;
}

static void put_row(plog_batch_columns *c, int64_t row, int64_t pos, const plog_batch_info *in, int8_t valid) {
    c->position[row] = pos;
    c->base_offset[row] = in->base_offset;
    c->last_offset[row] = in->last_offset;
    c->size_bytes[row] = in->size_bytes;
    c->magic[row] = in->magic;
    c->crc[row] = in->crc;
    c->crc_valid[row] = valid;
    c->attributes[row] = in->attributes;
    c->partition_leader_epoch[row] = in->partition_leader_epoch;   /* parse_legacy: -1 for v0/v1 */
    c->base_timestamp[row] = in->base_timestamp;
    c->max_timestamp[row] = in->max_timestamp;
    c->producer_id[row] = in->producer_id;
    c->producer_epoch[row] = in->producer_epoch;
    c->base_sequence[row] = in->base_sequence;
    c->record_count[row] = in->record_count;
}

int plog_batch_columns_scan(const uint8_t *buf, size_t length, int32_t max_batch_bytes, int check_crc,
                            plog_batch_columns *c) {
    PLOG_ASSERT(c != NULL);
    PLOG_ASSERT(buf != NULL || length == 0);
    PLOG_ASSERT(c->capacity >= 0);
    PLOG_ASSERT(c->capacity == 0 || (c->position != NULL && c->crc_valid != NULL));
    int64_t pos = 0, row = 0;
    int counting = c->capacity == 0;
    c->first_invalid = -1;
    c->stop = 0;
    while ((size_t)pos < length) {
        plog_batch_info info;
        int rc = plog_batch_parse(buf, length, (size_t)pos, max_batch_bytes, &info);
        if (rc) {
            c->stop = rc;
            break;
        }
        if (!counting) {
            if (row >= c->capacity) {
                c->stop = PLOG_ESPACE;
                break;
            }
            int8_t valid = -1;
            if (check_crc) {
                valid = (int8_t)plog_batch_crc_ok(buf + pos, &info);
                if (!valid && c->first_invalid < 0) c->first_invalid = row;
            }
            put_row(c, row, pos, &info, valid);
        }
        row++;
        pos += info.size_bytes;
    }
    c->count = row;
    c->end = pos;
    return 0;
}

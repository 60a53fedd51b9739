/* Recovery: the scan of a segment's bytes (the one verdict verify and recovery share: where
 * the first batch that fails its size, magic, CRC, offset range or order checks starts) and
 * Kafka's LogSegment.recover on top of it (indexes rebuilt at Kafka's cadence, the .log cut
 * at that batch). */
#include "internal.h"

/* ---- segment scan -------------------------------------------------------------------- */

static void scan_reset(plog_scan *s) {
    s->valid_bytes = 0;
    s->batch_count = 0;
    s->record_count = 0;
    s->first_offset = s->last_offset = -1;
    s->max_timestamp = s->offset_of_max_timestamp = s->first_batch_max_timestamp = -1;
    s->min_magic = 3;
    s->max_magic = -1;
    s->stop = 0;
    s->stop_position = -1;
    s->stop_offset = -1;
    s->epoch_count = 0;
    s->producer_batch_count = 0;
}

/* The batch at pos, as recovery judges it: parsed, its CRC (when asked), an offset inside the
 * segment's int32 range and after its predecessor's. */
static int scan_check(const uint8_t *buf, size_t length, size_t pos, const plog_scan *s, plog_batch_info *info) {
    int rc = plog_batch_parse(buf, length, pos, 0, info);
    if (rc == 0 && s->check_crc && !plog_batch_crc_ok(buf + pos, info)) rc = PLOG_ECRC;
    if (rc) return rc;
    int64_t relative = info->last_offset - s->base_offset;
    if (relative < 0 || relative > INT32_MAX || info->base_offset < s->base_offset) return PLOG_EOVERFLOW;
    /* Stricter than Kafka (which does not look): offsets are outside the CRC, so a batch that
     * does not follow its predecessor is treated as corruption. */
    if (info->last_offset < info->base_offset || (s->batch_count > 0 && info->base_offset <= s->last_offset))
        return PLOG_EORDER;
    return 0;
}

/* The scan loop over buf[0, length), which lies at `origin` in the file (positions reported
 * are the file's).  A batch running past `length` stops it with PLOG_EPARTIAL in s->stop, or,
 * with `more` (a window of a longer file), with s->stop left 0: the caller reads on from
 * s->valid_bytes.  `last_epoch` carries the epoch of the last batch between windows. */
static int scan_loop(const uint8_t *buf, size_t length, int64_t origin, plog_scan *s, plog_segment *seg,
                     int32_t *last_epoch, int more) {
    size_t pos = 0;
    int64_t last_indexed_position = 0;
    for (;;) {
        plog_batch_info info;
        if (pos >= length) break;
        int rc = scan_check(buf, length, pos, s, &info);
        if (rc == PLOG_EPARTIAL && more) return 0;
        if (rc) {
            s->stop = rc;
            s->stop_position = origin + (int64_t)pos;
            s->stop_offset = length - pos >= 8 ? be64(buf + pos) : -1;
            break;
        }
        if (info.max_timestamp > s->max_timestamp) {
            s->max_timestamp = info.max_timestamp;
            s->offset_of_max_timestamp = info.last_offset;
        }
        if (seg && (int64_t)pos - last_indexed_position > s->index_interval_bytes) {
            rc = plog_index_add(seg, info.last_offset, (int64_t)pos);
            if (rc == 0) rc = plog_time_index_maybe_add(seg, s->max_timestamp, s->offset_of_max_timestamp, 0);
            if (rc) {
                /* The index cannot take the entry (full): not a data problem, the caller fails. */
                s->stop = rc;
                s->stop_position = (int64_t)pos;
                s->stop_offset = info.base_offset;
                return rc;
            }
            last_indexed_position = (int64_t)pos;
        }
        if (s->batch_count == 0) {
            s->first_offset = info.base_offset;
            s->first_batch_max_timestamp = info.max_timestamp;
        }
        if (info.magic >= 2 && info.partition_leader_epoch != *last_epoch) {
            if (s->epoch_count < s->epoch_capacity) {
                s->epochs[s->epoch_count] = info.partition_leader_epoch;
                s->epoch_offsets[s->epoch_count] = info.base_offset;
            }
            s->epoch_count++;
            *last_epoch = info.partition_leader_epoch;
        }
        if (info.magic >= 2 && info.producer_id >= 0) s->producer_batch_count++;
        if (info.magic < s->min_magic) s->min_magic = info.magic;
        if (info.magic > s->max_magic) s->max_magic = info.magic;
        s->last_offset = info.last_offset;
        s->batch_count++;
        s->record_count += info.record_count;
        pos += (size_t)info.size_bytes;
        s->valid_bytes = origin + (int64_t)pos;
    }
    if (s->stop == 0 && s->valid_bytes < origin + (int64_t)length) {
        s->stop = PLOG_EPARTIAL;
        s->stop_position = s->valid_bytes;
    }
    return 0;
}

int plog_scan_buffer(const uint8_t *buf, size_t length, plog_scan *s, plog_segment *seg) {
    PLOG_ASSERT(s != NULL);
    PLOG_ASSERT(buf != NULL || length == 0);
    PLOG_ASSERT(s->epoch_capacity >= 0);
    PLOG_ASSERT(s->epoch_capacity == 0 || (s->epochs != NULL && s->epoch_offsets != NULL));
    int32_t last_epoch = INT32_MIN;
    scan_reset(s);
    return scan_loop(buf, length, 0, s, seg, &last_epoch, 0);
}

void plog_scan_start(plog_scan *s, int32_t *last_epoch) {
    PLOG_ASSERT(s != NULL);
    PLOG_ASSERT(last_epoch != NULL);
    scan_reset(s);
    *last_epoch = INT32_MIN;
}

int plog_scan_window(const uint8_t *buf, size_t length, int64_t origin, int more, plog_scan *s, int32_t *last_epoch) {
    PLOG_ASSERT(s != NULL);
    PLOG_ASSERT(last_epoch != NULL);
    PLOG_ASSERT(buf != NULL || length == 0);
    PLOG_ASSERT(origin >= 0);
    PLOG_ASSERT(s->epoch_capacity == 0 || (s->epochs != NULL && s->epoch_offsets != NULL));
    return scan_loop(buf, length, origin, s, NULL, last_epoch, more);
}

int plog_segment_recover(plog_segment *seg, const uint8_t *log, size_t log_length, plog_scan *scan) {
    PLOG_ASSERT(scan != NULL);
    PLOG_ASSERT(log != NULL || log_length == 0);
    plog_segment_assert_invariants(seg);
    if (!seg->mutable_indexes) return PLOG_EARG;
    plog_index_reset(seg);
    scan->base_offset = seg->base_offset;
    scan->index_interval_bytes = seg->index_interval_bytes;   /* check_crc: the caller's (1 but in mutation runs) */
    int rc = plog_scan_buffer(log, log_length, scan, seg);
    if (rc) return rc;
    if ((size_t)scan->valid_bytes != log_length || seg->size != scan->valid_bytes) {
        if ((rc = plog_io_ftruncate(seg->log_fd, scan->valid_bytes))) return rc;
    }
    seg->size = scan->valid_bytes;
    seg->next_offset = scan->batch_count ? scan->last_offset + 1 : seg->base_offset;
    seg->max_timestamp = scan->max_timestamp;
    seg->offset_of_max_timestamp = scan->batch_count ? scan->offset_of_max_timestamp : seg->base_offset;
    seg->first_batch_max_timestamp = scan->first_batch_max_timestamp;
    seg->bytes_since_last_index_entry = 0;
    return 0;
}

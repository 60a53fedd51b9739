/*
 * records.c -- the records section of a v2 batch (docs/kafka-formats.md 1.3).
 *
 * Each record: Length varint | Attributes int8 (0) | TimestampDelta varlong |
 * OffsetDelta varint | KeyLength varint (-1 null) | Key | ValueLength varint (-1 null) |
 * Value | HeadersCount varint | headers (KeyLength varint >= 0, Key, ValueLength varint,
 * -1 null, Value).  Varints are zig-zag, base-128, little-endian groups; at most 5 bytes
 * for an int and 10 for a long.
 *
 * Encoding turns whole arrays of records into a section in one call, so Python pays one
 * foreign call per batch, never per record.  Decoding applies Kafka's record-level checks:
 * the declared length is present and consumed exactly, counts and key lengths are not
 * negative, exactly `count` records and no trailing bytes.
 */
#include "internal.h"

static inline uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static inline int put_varint(uint8_t *out, int64_t value) {
    uint64_t v = zigzag(value);
    int n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static inline int varint_size(int64_t value) {
    /* 7 bits a byte: ceil(significant bits / 7), one byte for zero -- no loop, no branch */
    int bits = 64 - __builtin_clzll(zigzag(value) | 1);
    return (bits + 6) / 7;
}

int plog_varint_encode(int64_t value, uint8_t *out) { return put_varint(out, value); }

/* Read a zig-zag varint of at most max_bytes (5 or 10); -1 on overrun or overlong.  One- and
 * two-byte varints (every field of a typical record header) take the short paths. */
static inline int get_varint(const uint8_t *p, size_t avail, int max_bytes, int64_t *out) {
    if (__builtin_expect(avail >= 2, 1)) {
        if (!(p[0] & 0x80)) {
            *out = (int64_t)(p[0] >> 1) ^ -(int64_t)(p[0] & 1);
            return 1;
        }
        if (!(p[1] & 0x80)) {
            uint64_t v = (uint64_t)(p[0] & 0x7f) | ((uint64_t)p[1] << 7);
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 2;
        }
    }
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if ((size_t)i >= avail) return -1;
        uint8_t b = p[i];
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return i + 1;
        }
        shift += 7;
    }
    return -1;
}

/* The body of one record (everything after its Length varint); header_length 0 stands for
 * the single zero-count byte. */
static inline size_t record_body(int64_t ts_delta, int32_t offset_delta, int32_t key_length,
                                 int32_t value_length, int32_t header_length) {
    return 1 + (size_t)varint_size(ts_delta) + (size_t)varint_size(offset_delta) +
           (size_t)varint_size(key_length) + (key_length > 0 ? (size_t)key_length : 0) +
           (size_t)varint_size(value_length) + (value_length > 0 ? (size_t)value_length : 0) +
           (header_length > 0 ? (size_t)header_length : 1);
}

/* Write one record of `body` bytes (record_body) at out; returns the bytes written. */
static inline size_t record_put(uint8_t *out, size_t body, int64_t ts_delta, int32_t offset_delta,
                                const uint8_t *key, int32_t key_length, const uint8_t *value,
                                int32_t value_length, const uint8_t *headers, int32_t header_length) {
    size_t pos = (size_t)put_varint(out, (int64_t)body);
    out[pos++] = 0;
    pos += (size_t)put_varint(out + pos, ts_delta);
    pos += (size_t)put_varint(out + pos, offset_delta);
    pos += (size_t)put_varint(out + pos, key_length);
    if (key_length > 0) {
        memcpy(out + pos, key, (size_t)key_length);
        pos += (size_t)key_length;
    }
    pos += (size_t)put_varint(out + pos, value_length);
    if (value_length > 0) {
        memcpy(out + pos, value, (size_t)value_length);
        pos += (size_t)value_length;
    }
    if (header_length > 0) {
        memcpy(out + pos, headers, (size_t)header_length);
        pos += (size_t)header_length;
    } else {
        out[pos++] = 0;     /* zero headers */
    }
    return pos;
}

int plog_records_encode_spans(uint8_t *out, size_t capacity, size_t *written, int32_t n,
                              const plog_record_spans *r, int64_t *max_timestamp) {
    size_t pos = 0;
    int64_t max_ts = -1;
    if (n < 0) return PLOG_EARG;
    for (int32_t i = 0; i < n; i++) {
        int32_t key_length = r->keys[i].length, value_length = r->values[i].length;
        int32_t header_length = r->headers[i].length;
        int32_t offset_delta = r->offset_deltas ? r->offset_deltas[i] : i;
        if (key_length < -1 || value_length < -1 || header_length < 0 || offset_delta < 0) return PLOG_EARG;
        int64_t ts = r->timestamps[i], ts_delta;
        if (__builtin_sub_overflow(ts, r->base_timestamp, &ts_delta)) return PLOG_ETIMESTAMP;
        if (ts > max_ts) max_ts = ts;
        size_t body = record_body(ts_delta, offset_delta, key_length, value_length, header_length);
        if (body > INT32_MAX) return PLOG_ETOOLARGE;
        size_t need = (size_t)varint_size((int64_t)body) + body;
        if (out) {
            if (pos + need > capacity) return PLOG_ESPACE;
            record_put(out + pos, body, ts_delta, offset_delta, r->keys[i].data, key_length, r->values[i].data,
                       value_length, r->headers[i].data, header_length);
        }
        pos += need;
    }
    *written = pos;
    *max_timestamp = max_ts;
    return 0;
}

/* Skip `count` headers from p; returns bytes consumed or -1. */
static int64_t skip_headers(const uint8_t *p, size_t avail, int64_t count) {
    size_t pos = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t len;
        int n = get_varint(p + pos, avail - pos, 5, &len);
        if (n < 0 || len < 0) return -1;
        pos += (size_t)n;
        if ((uint64_t)len > avail - pos) return -1;
        pos += (size_t)len;
        n = get_varint(p + pos, avail - pos, 5, &len);
        if (n < 0 || len < -1) return -1;
        pos += (size_t)n;
        if (len > 0) {
            if ((uint64_t)len > avail - pos) return -1;
            pos += (size_t)len;
        }
    }
    return (int64_t)pos;
}

/* One record of a v2 records section at buf[pos], with Kafka's record-level validation
 * (DefaultRecord.readFrom): the declared length is present and consumed exactly, lengths are
 * -1 or fit, header counts and key lengths are non-negative.  Fills *out, returns the
 * position after the record, or 0 when it is malformed (a record is never empty). */
static inline size_t parse_record(const uint8_t *buf, size_t length, size_t pos, plog_record_view *out) {
    int64_t body, value;
    int n = get_varint(buf + pos, length - pos, 5, &body);
    if (n < 0 || body < 0) return 0;
    pos += (size_t)n;
    if ((uint64_t)body > length - pos) return 0;
    size_t end = pos + (size_t)body, p = pos;
    if (p >= end) return 0;
    p++;                                        /* attributes */
    n = get_varint(buf + p, end - p, 10, &value);
    if (n < 0) return 0;
    out->timestamp_delta = value;
    p += (size_t)n;
    n = get_varint(buf + p, end - p, 5, &value);
    if (n < 0) return 0;
    out->offset_delta = (int32_t)value;
    p += (size_t)n;
    n = get_varint(buf + p, end - p, 5, &value);
    if (n < 0 || value < -1 || (value > 0 && (uint64_t)value > end - p - (size_t)n)) return 0;
    p += (size_t)n;
    out->key_position = (int32_t)p;
    out->key_length = (int32_t)value;
    if (value > 0) p += (size_t)value;
    n = get_varint(buf + p, end - p, 5, &value);
    if (n < 0 || value < -1 || (value > 0 && (uint64_t)value > end - p - (size_t)n)) return 0;
    p += (size_t)n;
    out->value_position = (int32_t)p;
    out->value_length = (int32_t)value;
    if (value > 0) p += (size_t)value;
    n = get_varint(buf + p, end - p, 5, &value);
    if (n < 0 || value < 0 || (uint64_t)value > end - p) return 0;
    p += (size_t)n;
    out->headers_position = (int32_t)p;
    out->headers_count = (int32_t)value;
    int64_t skipped = skip_headers(buf + p, end - p, value);
    if (skipped < 0) return 0;
    p += (size_t)skipped;
    if (p != end) return 0;                     /* declared length not consumed exactly */
    return end;
}

int plog_records_decode(const uint8_t *buf, size_t length, int32_t count, plog_record_view *out,
                        int64_t *error_position) {
    size_t pos = 0;
    if (count < 0) {
        *error_position = 0;
        return PLOG_ERECORD;
    }
    for (int32_t i = 0; i < count; i++) {
        *error_position = (int64_t)pos;
        size_t end = parse_record(buf, length, pos, &out[i]);
        if (end == 0) return PLOG_ERECORD;
        pos = end;
    }
    *error_position = (int64_t)pos;
    if (pos != length) return PLOG_ERECORD;         /* "Incorrect declared batch size" */
    return 0;
}

/* plog_records_check's walk over one record: parse_record's checks, without filling a view
 * (this runs on every leader append, so it is kept lean).  Returns the position after the
 * record, 0 when it is malformed, or 1 when its offset delta is not `index` (a record is
 * never one byte long: length, attributes, timestamp, offset, key, value, headers). */
static inline size_t check_record(const uint8_t *buf, size_t length, size_t pos, int32_t index,
                                  int64_t *max_timestamp_delta) {
    int64_t body, v;
    int n = get_varint(buf + pos, length - pos, 5, &body);
    if (n < 0 || body <= 0 || (uint64_t)body > length - pos - (size_t)n) return 0;
    const uint8_t *p = buf + pos + n + 1, *end = buf + pos + n + body;     /* past the attributes */
    if ((n = get_varint(p, (size_t)(end - p), 10, &v)) < 0) return 0;
    p += n;
    if (v > *max_timestamp_delta) *max_timestamp_delta = v;
    if ((n = get_varint(p, (size_t)(end - p), 5, &v)) < 0) return 0;
    p += n;
    int misplaced = v != index;
    for (int field = 0; field < 2; field++) {                               /* key, value */
        if ((n = get_varint(p, (size_t)(end - p), 5, &v)) < 0 || v < -1) return 0;
        p += n;
        if (v > 0) {
            if ((uint64_t)v > (size_t)(end - p)) return 0;
            p += v;
        }
    }
    if ((n = get_varint(p, (size_t)(end - p), 5, &v)) < 0 || v < 0 || (uint64_t)v > (size_t)(end - p)) return 0;
    p += n;
    if (v) {
        int64_t skipped = skip_headers(p, (size_t)(end - p), v);
        if (skipped < 0) return 0;
        p += skipped;
    }
    if (p != end) return 0;                     /* declared length not consumed exactly */
    return misplaced ? 1 : (size_t)(end - buf);
}

int plog_records_check(const uint8_t *buf, size_t length, int32_t count, int64_t *max_timestamp_delta,
                       int64_t *error_position) {
    size_t pos = 0;
    int64_t max_delta = INT64_MIN;
    if (count < 0) {
        *error_position = 0;
        return PLOG_ERECORD;
    }
    for (int32_t i = 0; i < count; i++) {
        size_t end = check_record(buf, length, pos, i, &max_delta);
        if (__builtin_expect(end <= 1, 0)) {
            *error_position = (int64_t)pos;
            return end ? PLOG_EORDER : PLOG_ERECORD;
        }
        pos = end;
    }
    *error_position = (int64_t)pos;
    if (pos != length) return PLOG_ERECORD;
    *max_timestamp_delta = max_delta;
    return 0;
}

int plog_headers_decode(const uint8_t *buf, size_t length, int32_t position, int32_t count,
                        int32_t *key_positions, int32_t *key_lengths,
                        int32_t *value_positions, int32_t *value_lengths) {
    size_t pos = (size_t)position;
    for (int32_t i = 0; i < count; i++) {
        int64_t len;
        int n = get_varint(buf + pos, length - pos, 5, &len);
        if (n < 0 || len < 0 || (uint64_t)len > length - pos - (size_t)n) return PLOG_ERECORD;
        pos += (size_t)n;
        key_positions[i] = (int32_t)pos;
        key_lengths[i] = (int32_t)len;
        pos += (size_t)len;
        n = get_varint(buf + pos, length - pos, 5, &len);
        if (n < 0 || len < -1 || (len > 0 && (uint64_t)len > length - pos - (size_t)n)) return PLOG_ERECORD;
        pos += (size_t)n;
        value_positions[i] = (int32_t)pos;
        value_lengths[i] = (int32_t)len;
        if (len > 0) pos += (size_t)len;
    }
    return 0;
}

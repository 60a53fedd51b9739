/*
 * pyrecords.c -- storage._pyrecords: the records of a batch to and from Python objects.
 *
 * cffi cannot hand C a Python list, nor build one, so both directions paid Python per record:
 * build_batch joined, measured and packed the values (about 45 ns a record, more than the
 * encoding; 0.5-2.4 us for Records with timestamps and headers), and RecordBatch.records()
 * read a cffi struct and sliced the payloads (about 1 us a record).  This small module
 * (Python's limited API, so one abi3 build serves every CPython >= 3.11) does that walk in C
 * and calls the core through function pointers handed over once by storage/core/_native.py: the
 * encoder, the decoder and the CRC stay in the one cffi module, compiled once, with their
 * checks.
 *
 * build: values, (key, value) and (key, value, headers) tuples and Records, payloads bytes,
 * bytearray, contiguous memoryview, str or None, timestamps int, headers (key, value) pairs --
 * each header section encoded here with the core's varint.  Anything else (a float
 * timestamp, a tuple subclass other than Record, a header pair given as a list) returns
 * None: storage/core/records.py normalises such a list into the shapes above and walks it again,
 * so there is one encoder.
 * decode: every v2 records section, as Record(offset, timestamp, key, value, headers).
 * pieces: the addresses of a tuple of bytes, for PartitionLog.append_batches' vectored write.
 * appender: PartitionLog's common append in one call (below, "append").
 */
#define PY_SSIZE_T_CLEAN   /* Py_LIMITED_API 0x030B0000 comes from setup.py */
#include <Python.h>

#include <stddef.h>
#include <string.h>
#include <structmember.h>

#include "plog.h"

typedef int (*encode_spans_fn)(uint8_t *, size_t, size_t *, int32_t, const plog_record_spans *, int64_t *);
typedef int (*finish_fn)(uint8_t *, size_t, const plog_batch_info *);
typedef int (*varint_fn)(int64_t, uint8_t *);
typedef int (*records_decode_fn)(const uint8_t *, size_t, int32_t, plog_record_view *, int64_t *);
typedef int (*headers_decode_fn)(const uint8_t *, size_t, int32_t, int32_t, int32_t *, int32_t *, int32_t *,
                                 int32_t *);

static encode_spans_fn encode_spans;
static finish_fn batch_finish;
static varint_fn put_varint;
static records_decode_fn records_decode;
static headers_decode_fn headers_decode;
static newfunc tuple_new;          /* tuple.__new__: makes a Record (a tuple subclass) from a tuple */
typedef int (*append_chunk_fn)(plog_segment *, uint8_t *, size_t, int64_t, int32_t, int, int64_t, plog_validate *);
static append_chunk_fn segment_append;

/* ---- build ------------------------------------------------------------------------------ */

enum { SHAPE = 1 };                 /* "not a shape the walk takes": the caller's general path */

/* One payload: bytes, bytearray, a contiguous memoryview, str (its UTF-8, which the str keeps)
 * or None (null).  0, SHAPE or PLOG_ETOOLARGE.  A bytearray's or memoryview's bytes stay
 * where they are until the encoding is done: the list holds the object, and nothing of
 * Python runs meanwhile that could resize or release it -- so the buffer view taken here is
 * given back at once (a memoryview's bytes are its own view's, held while it lives). */
static int span_of(PyObject *item, plog_span *out) {
    Py_ssize_t length;
    if (item == Py_None) {
        out->data = NULL;
        out->length = -1;
        return 0;
    }
    if (PyBytes_CheckExact(item)) {
        length = PyBytes_Size(item);
        out->data = (const uint8_t *)PyBytes_AsString(item);
    } else if (PyByteArray_CheckExact(item) || PyMemoryView_Check(item)) {
        Py_buffer view;
        if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE)) {    /* not contiguous, or released */
            PyErr_Clear();
            return SHAPE;
        }
        length = view.len;
        out->data = view.buf;
        PyBuffer_Release(&view);
    } else if (PyUnicode_CheckExact(item)) {
        out->data = (const uint8_t *)PyUnicode_AsUTF8AndSize(item, &length);
        if (!out->data) {           /* a lone surrogate: the general path raises for it */
            PyErr_Clear();
            return SHAPE;
        }
    } else {
        return SHAPE;
    }
    if (length > INT32_MAX) return PLOG_ETOOLARGE;
    out->length = (int32_t)length;
    return 0;
}

/* Header sections, encoded one after another into a growing scratch buffer. */
typedef struct scratch {
    uint8_t *data;
    size_t used, size;
} scratch;

static int reserve(scratch *s, size_t more) {
    if (s->size - s->used >= more) return 0;
    size_t size = s->size ? s->size : 4096;
    while (size - s->used < more) size *= 2;
    uint8_t *data = PyMem_Realloc(s->data, size);
    if (!data) return PLOG_ETOOLARGE;
    s->data = data;
    s->size = size;
    return 0;
}

static int put_span(scratch *s, plog_span p) {
    if (reserve(s, 10 + (p.length > 0 ? (size_t)p.length : 0))) return PLOG_ETOOLARGE;
    s->used += (size_t)put_varint(p.length, s->data + s->used);
    if (p.length > 0) memcpy(s->data + s->used, p.data, (size_t)p.length);
    s->used += p.length > 0 ? (size_t)p.length : 0;
    return 0;
}

/* One record's headers -- a list or tuple of (key, value) pairs, key str or bytes, value bytes,
 * str or None -- as Kafka's header section (count, then the pairs) into s; *at and *length
 * say where (length 0: no headers).  0, SHAPE or an error code. */
static int headers_into(PyObject *headers, scratch *s, size_t *at, int32_t *length) {
    *at = s->used;
    *length = 0;
    if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers)) return SHAPE;
    Py_ssize_t n = PySequence_Size(headers);
    if (n == 0) return 0;
    if (n > INT32_MAX || reserve(s, 10)) return PLOG_ETOOLARGE;
    s->used += (size_t)put_varint(n, s->data + s->used);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_CheckExact(headers) ? PyList_GetItem(headers, i) : PyTuple_GetItem(headers, i);
        plog_span key, value;
        if (!PyTuple_CheckExact(pair) || PyTuple_Size(pair) != 2) return SHAPE;
        int rc = span_of(PyTuple_GetItem(pair, 0), &key);
        if (rc == 0 && key.length < 0) rc = SHAPE;       /* a null key: the general path refuses it */
        if (rc == 0) rc = span_of(PyTuple_GetItem(pair, 1), &value);
        if (rc == 0) rc = put_span(s, key);
        if (rc == 0) rc = put_span(s, value);
        if (rc) return rc;
    }
    if (s->used - *at > INT32_MAX) return PLOG_ETOOLARGE;
    *length = (int32_t)(s->used - *at);
    return 0;
}

/* The columns of one walk: spans, timestamps, offset deltas, header sections. */
typedef struct walk {
    plog_span *keys, *values, *headers;
    int64_t *timestamps;
    int32_t *offset_deltas;
    PyObject *offset_base;          /* None, or the base the Records' own offsets count from */
    int64_t base_timestamp;         /* a record without a timestamp gets it */
    scratch extra;
} walk;

/* A timestamp that is an int within int64.  0 or SHAPE. */
static int timestamp_of(PyObject *timestamp, int64_t *out) {
    int overflow;
    if (!PyLong_CheckExact(timestamp)) return SHAPE;
    *out = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return SHAPE;
    }
    return 0;
}

/* The base timestamp: the caller's, else the first record's, else now.  0 or SHAPE. */
static int base_of(PyObject *records, PyObject *base_timestamp, PyObject *record_type, long long now,
                   int64_t *base) {
    PyObject *first = PyList_GetItem(records, 0);
    if (base_timestamp == Py_None && Py_IS_TYPE(first, (PyTypeObject *)record_type))
        base_timestamp = PyTuple_GetItem(first, 1);
    *base = now;
    return base_timestamp == Py_None ? 0 : timestamp_of(base_timestamp, base);
}

/* Record i's offset delta from its own offset (the cleaner's kept records). */
static int offset_delta_of(PyObject *item, PyObject *record_type, walk *w, Py_ssize_t i) {
    if (!Py_IS_TYPE(item, (PyTypeObject *)record_type)) return SHAPE;
    PyObject *offset = PyTuple_GetItem(item, 0);
    if (!PyLong_CheckExact(offset)) return SHAPE;
    long long delta = PyLong_AsLongLong(offset) - PyLong_AsLongLong(w->offset_base);
    if (PyErr_Occurred() || delta < 0 || delta > INT32_MAX) {
        PyErr_Clear();
        return SHAPE;
    }
    w->offset_deltas[i] = (int32_t)delta;
    return 0;
}

/* Record i into the walk: a value, (key, value), (key, value, headers) or a Record. */
static int take(PyObject *item, PyObject *record_type, walk *w, Py_ssize_t i) {
    PyObject *key = Py_None, *value = item, *headers = NULL, *timestamp = Py_None;
    if (w->offset_base != Py_None && offset_delta_of(item, record_type, w, i)) return SHAPE;
    if (PyTuple_CheckExact(item)) {
        Py_ssize_t size = PyTuple_Size(item);
        if (size != 2 && size != 3) return SHAPE;
        key = PyTuple_GetItem(item, 0);
        value = PyTuple_GetItem(item, 1);
        headers = size == 3 ? PyTuple_GetItem(item, 2) : NULL;
    } else if (Py_IS_TYPE(item, (PyTypeObject *)record_type)) {
        timestamp = PyTuple_GetItem(item, 1);
        key = PyTuple_GetItem(item, 2);
        value = PyTuple_GetItem(item, 3);
        headers = PyTuple_GetItem(item, 4);
    }
    w->timestamps[i] = w->base_timestamp;
    if (timestamp != Py_None && timestamp_of(timestamp, &w->timestamps[i])) return SHAPE;
    int rc = span_of(key, &w->keys[i]);
    if (rc == 0) rc = span_of(value, &w->values[i]);
    size_t at = 0;
    int32_t length = 0;
    if (rc == 0 && headers) rc = headers_into(headers, &w->extra, &at, &length);
    w->headers[i].data = (const uint8_t *)(uintptr_t)at;   /* an offset until the scratch stops moving */
    w->headers[i].length = length;
    return rc;
}

/* The batch: the encoded records after PLOG_BATCH_OVERHEAD header bytes, finished (header and
 * CRC) when `finish`, else the header left zero for a caller that compresses the section. */
static PyObject *encode_batch(Py_ssize_t n, const walk *w, plog_batch_info *info, int finish) {
    size_t size = 0;
    plog_record_spans r = {w->keys, w->values, w->headers, w->timestamps,
                           w->offset_base != Py_None ? w->offset_deltas : NULL, w->base_timestamp};
    int rc = encode_spans(NULL, 0, &size, (int32_t)n, &r, &info->max_timestamp);
    if (rc) return PyLong_FromLong(rc);
    if (size > (size_t)INT32_MAX - PLOG_BATCH_OVERHEAD) return PyLong_FromLong(PLOG_ETOOLARGE);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(PLOG_BATCH_OVERHEAD + size));
    if (!out) return NULL;
    uint8_t *b = (uint8_t *)PyBytes_AsString(out);
    memset(b, 0, PLOG_BATCH_OVERHEAD);
    rc = encode_spans(b + PLOG_BATCH_OVERHEAD, size, &size, (int32_t)n, &r, &info->max_timestamp);
    if (rc == 0 && finish) rc = batch_finish(b, PLOG_BATCH_OVERHEAD + size, info);
    if (rc) {
        Py_DECREF(out);
        return PyLong_FromLong(rc);
    }
    return Py_BuildValue("NLL", out, (long long)r.base_timestamp, (long long)info->max_timestamp);
}

/* The header sections' offsets turned into addresses, once the scratch no longer moves. */
static void place_headers(walk *w, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        uintptr_t at = (uintptr_t)w->headers[i].data;
        w->headers[i].data = w->headers[i].length ? w->extra.data + at : NULL;
    }
}

PyDoc_STRVAR(build_doc,
"build(records, finish, base_offset, partition_leader_epoch, attributes, base_timestamp, now,\n"
"      producer_id, producer_epoch, base_sequence, record_type, offset_base=None)\n"
"    -> (bytes, base_timestamp, max_timestamp) | int | None\n\n"
"The batch of a list of values, (key, value) or (key, value, headers) tuples and Records\n"
"(payloads bytes, str or None): finished when `finish`, else with a zero header for the\n"
"caller to compress.  base_timestamp None: the first record's, else `now`.  offset_base: the\n"
"records are Records whose own offsets count from it (else offset deltas are 0..n-1).  None when the\n"
"list holds another shape; a negative PLOG_E* code when the core refuses it.");

static PyObject *build(PyObject *self, PyObject *args) {
    PyObject *records, *base_timestamp, *record_type, *offset_base = Py_None;
    int finish;
    long long now;
    plog_batch_info info;
    memset(&info, 0, sizeof info);
    if (!PyArg_ParseTuple(args, "O!pLihOLLhiO!|O", &PyList_Type, &records, &finish, &info.base_offset,
                          &info.partition_leader_epoch, &info.attributes, &base_timestamp, &now,
                          &info.producer_id, &info.producer_epoch, &info.base_sequence, &PyType_Type,
                          &record_type, &offset_base))
        return NULL;
    /* The list's items are borrowed: nothing below runs Python code (the allocations are
     * bytes objects and raw memory, which never start the cyclic collector), so none can go
     * away while the walk reads them. */
    Py_ssize_t n = PyList_Size(records);
    walk w = {0};
    w.offset_base = offset_base;
    if (n <= 0 || n > INT32_MAX || (offset_base != Py_None && !PyLong_CheckExact(offset_base)) ||
        base_of(records, base_timestamp, record_type, now, &w.base_timestamp))
        Py_RETURN_NONE;
    info.base_timestamp = w.base_timestamp;
    uint8_t *columns = PyMem_Malloc((size_t)n * (3 * sizeof(plog_span) + sizeof(int64_t) + sizeof(int32_t)));
    if (!columns) return PyErr_NoMemory();
    w.keys = (plog_span *)columns;
    w.values = w.keys + n;
    w.headers = w.values + n;
    w.timestamps = (int64_t *)(w.headers + n);
    w.offset_deltas = (int32_t *)(w.timestamps + n);
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) rc = take(PyList_GetItem(records, i), record_type, &w, i);
    PyObject *result;
    if (rc == SHAPE) {
        result = Py_NewRef(Py_None);
    } else if (rc) {
        result = PyLong_FromLong(rc);
    } else {
        place_headers(&w, n);
        info.last_offset_delta = (int32_t)(n - 1);
        info.record_count = (int32_t)n;
        result = encode_batch(n, &w, &info, finish);
    }
    PyMem_Free(w.extra.data);
    PyMem_Free(columns);
    return result;
}

/* ---- decode ------------------------------------------------------------------------- */

static PyObject *payload(const uint8_t *data, int32_t position, int32_t length) {
    if (length < 0) return Py_NewRef(Py_None);
    return PyBytes_FromStringAndSize((const char *)data + position, length);
}

/* base + delta as a Python int; a crafted header may take it past int64, which Python holds. */
static PyObject *sum_of(int64_t base, int64_t delta) {
    int64_t total;
    if (!__builtin_add_overflow(base, delta, &total)) return PyLong_FromLongLong(total);
    PyObject *a = PyLong_FromLongLong(base), *b = PyLong_FromLongLong(delta), *out = NULL;
    if (a && b) out = PyNumber_Add(a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return out;
}

/* The headers of one record as a list of (str, bytes | None); *bad set (and NULL returned
 * without an exception) when the core refuses them. */
static PyObject *headers_of(const uint8_t *data, size_t length, const plog_record_view *v, int *bad) {
    int32_t n = v->headers_count;
    PyObject *list = PyList_New(n);
    if (!list || n == 0) return list;
    int32_t *at = PyMem_Malloc(4 * (size_t)n * sizeof *at);
    if (!at) {
        Py_DECREF(list);
        return PyErr_NoMemory();
    }
    int32_t *kp = at, *kl = at + n, *vp = at + 2 * n, *vl = at + 3 * n;
    if (headers_decode(data, length, v->headers_position, n, kp, kl, vp, vl)) {
        *bad = 1;
        Py_CLEAR(list);
    }
    for (int32_t i = 0; list && i < n; i++) {
        PyObject *key = PyUnicode_DecodeUTF8((const char *)data + kp[i], kl[i], "replace");
        PyObject *value = key ? payload(data, vp[i], vl[i]) : NULL;
        PyObject *pair = value ? PyTuple_Pack(2, key, value) : NULL;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (!pair) Py_CLEAR(list);
        else PyList_SetItem(list, i, pair);
    }
    PyMem_Free(at);
    return list;
}

typedef struct batch_fields {
    long long base_offset, base_timestamp, max_timestamp;     /* PyArg_ParseTuple's "L" */
    int log_append_time;            /* every record's timestamp is the batch's max timestamp */
} batch_fields;

/* One Record; NULL with *bad set when its headers are refused, NULL with an exception else.
 * `pack` is (fields,), reused for every record: tuple.__new__ copies the five fields into the
 * new Record and lets go of `fields` again, so it is ours alone (reference count 1) and
 * PyTuple_SetItem may refill it -- which refuses, with SystemError, should that not hold.
 * Two tuples fewer a record, and fewer runs of the cyclic collector. */
static PyObject *record_of(PyObject *record_type, PyObject *pack, const uint8_t *data, size_t length,
                           const plog_record_view *v, const batch_fields *b, int *bad) {
    PyObject *fields = PyTuple_GetItem(pack, 0);
    PyObject *items[5] = {
        sum_of(b->base_offset, v->offset_delta),
        b->log_append_time ? PyLong_FromLongLong(b->max_timestamp) : sum_of(b->base_timestamp, v->timestamp_delta),
        payload(data, v->key_position, v->key_length),
        payload(data, v->value_position, v->value_length),
        headers_of(data, length, v, bad),
    };
    int complete = 1;
    for (int i = 0; i < 5; i++) {
        if (!items[i]) complete = 0;
        if (PyTuple_SetItem(fields, i, items[i] ? items[i] : Py_NewRef(Py_None))) complete = 0;
    }
    return complete ? tuple_new((PyTypeObject *)record_type, pack, NULL) : NULL;
}

PyDoc_STRVAR(decode_doc,
"decode(records_section, count, base_offset, base_timestamp, log_append_time, max_timestamp,\n"
"       record_type) -> list | (code, error_position, in_headers)\n\n"
"The `count` records of a v2 records section (any buffer), checked as plog_records_decode\n"
"checks them.  Each timestamp is max_timestamp under log-append time, else base_timestamp\n"
"plus its delta.  A refusal comes back as a tuple for the caller to explain.");

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    int count;
    batch_fields b;
    PyObject *record_type;
    if (!PyArg_ParseTuple(args, "y*iLLpLO!", &view, &count, &b.base_offset, &b.base_timestamp,
                          &b.log_append_time, &b.max_timestamp, &PyType_Type, &record_type))
        return NULL;
    PyObject *result = NULL;
    plog_record_view *views = PyMem_Malloc((size_t)(count > 0 ? count : 1) * sizeof *views);
    if (!views) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    int64_t error_position = -1;
    const uint8_t *data = view.buf;
    size_t length = (size_t)view.len;
    int rc = records_decode(data, length, count, views, &error_position);
    if (rc) {
        result = Py_BuildValue("iLO", rc, (long long)error_position, Py_False);
    } else if ((result = PyList_New(count))) {
        PyObject *fields = PyTuple_New(5), *pack = NULL;
        for (int i = 0; fields && i < 5; i++) PyTuple_SetItem(fields, i, Py_NewRef(Py_None));
        if (fields) pack = PyTuple_Pack(1, fields);
        Py_XDECREF(fields);             /* pack holds it alone now */
        if (!pack) Py_CLEAR(result);
        for (int i = 0; result && i < count; i++) {
            int bad = 0;
            PyObject *record = record_of(record_type, pack, data, length, &views[i], &b, &bad);
            if (!record) {
                Py_CLEAR(result);
                if (bad && !PyErr_Occurred()) result = Py_BuildValue("iLO", PLOG_ERECORD, -1LL, Py_True);
                break;
            }
            PyList_SetItem(result, i, record);
        }
        Py_XDECREF(pack);
    }
    PyMem_Free(views);
    PyBuffer_Release(&view);
    return result;
}

/* ---- pieces --------------------------------------------------------------------------- */

PyDoc_STRVAR(pieces_doc,
"pieces(buffers: tuple) -> bytes | None\n\n"
"The plog_iovec array (address, length) of a tuple of bytes objects, for\n"
"plog_segment_append_pieces; None when an item is not bytes.  The addresses are good while\n"
"the tuple lives: the caller holds it for the whole call.");

static PyObject *pieces(PyObject *self, PyObject *args) {
    PyObject *buffers;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &buffers)) return NULL;
    Py_ssize_t n = PyTuple_Size(buffers);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(plog_iovec));
    if (!out) return NULL;
    plog_iovec *iov = (plog_iovec *)PyBytes_AsString(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GetItem(buffers, i);
        if (!PyBytes_CheckExact(item)) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        iov[i].base = (const uint8_t *)PyBytes_AsString(item);
        iov[i].length = (size_t)PyBytes_Size(item);
    }
    return out;
}

/* ---- append ------------------------------------------------------------------------- */

/* PartitionLog's common append (storage/log/partition.py): a chunk of `bytes` (or a read-only
 * contiguous view) on the open active segment, written by plog_segment_append_chunk; when C's
 * answer is 0 and the chunk asks nothing more of the log (no new epoch; a follower's: no
 * producer batch), the log's four append counters are added here and the AppendInfo is made
 * here, so the append is one Python frame and this one call.  Anything else -- a verdict of C
 * (nothing written), a refusal, or a write that needs the general bookkeeping -- returns C's
 * answer as an int: the caller takes its general path, reading the plog_validate struct this
 * call filled, as it did when it called C itself.
 *
 * Counters: the log's four append counters live in an AppendCounts (int64 fields, read and
 * written from Python as attributes: LogMetrics' appends, append_batches, append_records and
 * append_bytes are views of it), which this call adds to in place. */

typedef struct {
    PyObject_HEAD
    long long appends, batches, records, bytes;
} AppendCounts;

static PyMemberDef counts_members[] = {
    {"appends", T_LONGLONG, offsetof(AppendCounts, appends), 0, "append calls that wrote something"},
    {"batches", T_LONGLONG, offsetof(AppendCounts, batches), 0, "batches appended"},
    {"records", T_LONGLONG, offsetof(AppendCounts, records), 0, "records appended"},
    {"bytes", T_LONGLONG, offsetof(AppendCounts, bytes), 0, "bytes appended"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot counts_slots[] = {
    {Py_tp_members, counts_members},
    {Py_tp_doc, "A log's append counters (storage/log/metrics.py's LogMetrics); made by append_counts()."},
    {0, NULL},
};

static PyType_Spec counts_spec = {
    "storage._pyrecords.AppendCounts", sizeof(AppendCounts), 0, Py_TPFLAGS_DEFAULT, counts_slots,
};

static PyObject *counts_type;

PyDoc_STRVAR(append_counts_doc, "append_counts(): a new AppendCounts, every field 0.");

static PyObject *append_counts(PyObject *module, PyObject *unused) {
    if (counts_type == NULL) {
        counts_type = PyType_FromSpec(&counts_spec);
        if (counts_type == NULL) return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)counts_type, Py_tp_alloc);
    return alloc((PyTypeObject *)counts_type, 0);       /* zeroed */
}

typedef struct {
    PyObject_HEAD
    plog_validate *v;          /* the struct `owner` (its cffi cdata) holds */
    PyObject *owner;
    int flags;                 /* the state's flags | PLOG_APPEND_READONLY */
    int follower;              /* 1: a follower's appends (their epoch and producer rules) */
    PyObject *counts;          /* the log's AppendCounts */
    PyObject *info_type;       /* AppendInfo */
} Appender;

/* The AppendInfo of a common append: its seven int64 fields from v, duplicate False.  Made as
 * tuple.__new__ makes an instance of a tuple subclass (its tp_alloc with the length, then the
 * items), without the argument tuples that call takes: no tuple from the free lists, whose
 * reuse the collector counts as an allocation, so a discarded AppendInfo adds no GC round. */
static PyObject *append_info(PyObject *info_type, const plog_validate *v) {
    const int64_t fields[7] = {v->first_offset, v->last_offset, v->max_timestamp, v->offset_of_max_timestamp,
                               v->batch_count, v->record_count, v->size_bytes};
    allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)info_type, Py_tp_alloc);
    PyObject *info = alloc((PyTypeObject *)info_type, 8);
    if (info == NULL) return NULL;
    for (int i = 0; i < 7; i++) {
        PyObject *number = PyLong_FromLongLong(fields[i]);
        if (number == NULL || PyTuple_SetItem(info, i, number) < 0) {
            Py_DECREF(info);
            return NULL;
        }
    }
    Py_INCREF(Py_False);
    PyTuple_SetItem(info, 7, Py_False);
    return info;
}

PyDoc_STRVAR(appender_append_doc,
"append(segment_address, data, log_end_offset, leader_epoch, latest_epoch) -> AppendInfo or int:\n"
"plog_segment_append_chunk of data (bytes or a read-only contiguous view) on the segment at\n"
"segment_address; the AppendInfo (counters added) when the common case holds, else C's answer.");

static PyObject *appender_append(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs) {
    Appender *self = (Appender *)self_obj;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "append takes 5 arguments");
        return NULL;
    }
    uintptr_t address = (uintptr_t)PyLong_AsUnsignedLongLong(args[0]);
    int64_t next_offset = PyLong_AsLongLong(args[2]);
    long leader_epoch = PyLong_AsLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (leader_epoch < INT32_MIN || leader_epoch > INT32_MAX) {     /* as cffi refuses an int32_t argument */
        PyErr_SetString(PyExc_OverflowError, "append: leader_epoch out of range for int32_t");
        return NULL;
    }
    if (address == 0) {
        PyErr_SetString(PyExc_ValueError, "append: the segment is closed");
        return NULL;
    }
    /* The cache's latest epoch, or None (no epoch: no sole_epoch equals it). */
    int has_latest = args[4] != Py_None;
    int64_t latest = has_latest ? PyLong_AsLongLong(args[4]) : 0;
    if (has_latest && latest == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) return NULL;
    plog_validate *v = self->v;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = segment_append((plog_segment *)address, (uint8_t *)view.buf, (size_t)view.len, next_offset,
                        (int32_t)leader_epoch, self->flags, -1, v);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    int64_t epoch = v->sole_epoch;
    int common = rc == 0 && (self->follower
        ? v->producer_batch_count == 0 && ((has_latest && epoch == latest) || (epoch < 0 && epoch != PLOG_EPOCH_MIXED))
        : has_latest && epoch == latest);
    if (!common) return PyLong_FromLong(rc);
    AppendCounts *counts = (AppendCounts *)self->counts;      /* written: counted (as appends._written) */
    counts->appends += 1;
    counts->batches += v->batch_count;
    counts->records += v->record_count;
    counts->bytes += v->size_bytes;
    return append_info(self->info_type, v);
}

static void appender_dealloc(PyObject *self_obj) {
    Appender *self = (Appender *)self_obj;
    PyTypeObject *type = Py_TYPE(self_obj);
    Py_XDECREF(self->counts);
    Py_XDECREF(self->owner);
    Py_XDECREF(self->info_type);
    freefunc free_slot = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_slot(self_obj);
    Py_DECREF(type);
}

static PyMethodDef appender_methods[] = {
    {"append", (PyCFunction)(void (*)(void))appender_append, METH_FASTCALL, appender_append_doc},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot appender_slots[] = {
    {Py_tp_dealloc, appender_dealloc},
    {Py_tp_methods, appender_methods},
    {Py_tp_doc, "The one-call append of one _AppendState (storage/log/appends.py); made by appender()."},
    {0, NULL},
};

static PyType_Spec appender_spec = {
    "storage._pyrecords.Appender", sizeof(Appender), 0, Py_TPFLAGS_DEFAULT, appender_slots,
};

static PyObject *appender_type;

PyDoc_STRVAR(appender_doc,
"appender(v, v_address, flags, follower, counts, info_type): an Appender over the plog_validate\n"
"struct at v_address (v: the cffi object that owns it, kept alive), calling C with `flags`.");

static PyObject *appender(PyObject *module, PyObject *args) {
    unsigned long long address;
    int flags, follower;
    PyObject *owner, *counts, *info_type;
    if (!PyArg_ParseTuple(args, "OKiiOO", &owner, &address, &flags, &follower, &counts, &info_type)) return NULL;
    if (address == 0 || segment_append == NULL || tuple_new == NULL) {
        PyErr_SetString(PyExc_ValueError, "appender: no struct, or the module is not bound");
        return NULL;
    }
    if (counts_type == NULL || !PyObject_TypeCheck(counts, (PyTypeObject *)counts_type)) {
        PyErr_SetString(PyExc_TypeError, "appender: counts must be an AppendCounts");
        return NULL;
    }
    if (!PyType_Check(info_type) || !PyType_IsSubtype((PyTypeObject *)info_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "appender: info_type must be a tuple subclass");
        return NULL;
    }
    if (appender_type == NULL) {
        appender_type = PyType_FromSpec(&appender_spec);
        if (appender_type == NULL) return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)appender_type, Py_tp_alloc);
    Appender *self = (Appender *)alloc((PyTypeObject *)appender_type, 0);
    if (self == NULL) return NULL;
    self->v = (plog_validate *)(uintptr_t)address;
    self->flags = flags;
    self->follower = follower != 0;
    Py_INCREF(counts);
    self->counts = counts;
    Py_INCREF(owner);
    self->owner = owner;
    Py_INCREF(info_type);
    self->info_type = info_type;
    return (PyObject *)self;
}

/* ---- binding ------------------------------------------------------------------------ */

PyDoc_STRVAR(bind_doc,
"bind(encode_spans, batch_finish, varint_encode, records_decode, headers_decode, segment_append_chunk):\n"
"the core's functions, as addresses (storage/core/_native.py, once at import).");

static PyObject *bind(PyObject *self, PyObject *args) {
    unsigned long long encode, finish, varint, records, headers, append;
    if (!PyArg_ParseTuple(args, "KKKKKK", &encode, &finish, &varint, &records, &headers, &append)) return NULL;
    encode_spans = (encode_spans_fn)(uintptr_t)encode;
    batch_finish = (finish_fn)(uintptr_t)finish;
    put_varint = (varint_fn)(uintptr_t)varint;
    records_decode = (records_decode_fn)(uintptr_t)records;
    headers_decode = (headers_decode_fn)(uintptr_t)headers;
    segment_append = (append_chunk_fn)(uintptr_t)append;
    tuple_new = (newfunc)PyType_GetSlot(&PyTuple_Type, Py_tp_new);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS, build_doc},
    {"decode", decode, METH_VARARGS, decode_doc},
    {"pieces", pieces, METH_VARARGS, pieces_doc},
    {"appender", appender, METH_VARARGS, appender_doc},
    {"append_counts", append_counts, METH_NOARGS, append_counts_doc},
    {"bind", bind, METH_VARARGS, bind_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "storage._pyrecords",
    "The records of a batch to and from Python objects (csrc/pyrecords.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pyrecords(void) { return PyModule_Create(&module); }

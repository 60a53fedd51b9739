/*
 * pyrecords.c -- storage._pyrecords: build_batch's walk over a Python list of records.
 *
 * cffi cannot hand C a Python list, so a producer's list of values went through b"".join,
 * map(len) and struct.pack before the one C call: about 45 ns of Python per record, more than
 * the encoding itself.  This small module (Python's limited API, so one abi3 build serves
 * every CPython >= 3.11) walks the list in C, reads each payload where it lies, and calls the
 * core through function pointers handed over once by storage/_native.py -- the encoder and
 * the CRC stay in the one cffi module, compiled once.
 *
 * Shapes it takes: values, or 2-tuples (key, value), each bytes or None (null).  Anything else
 * (bytearray, memoryview, Record, headers, timestamps) returns None and the caller takes the
 * general path, which gives the same bytes.
 */
#define PY_SSIZE_T_CLEAN   /* Py_LIMITED_API 0x030B0000 comes from setup.py */
#include <Python.h>

#include <string.h>

#include "plog.h"

typedef int (*encode_spans_fn)(uint8_t *, size_t, size_t *, int32_t, const plog_span *, const plog_span *);
typedef int (*finish_fn)(uint8_t *, size_t, const plog_batch_info *);

static encode_spans_fn encode_spans;
static finish_fn batch_finish;

/* One payload: bytes, or None (null).  0 ok, 1 not this shape, PLOG_ETOOLARGE. */
static int span_of(PyObject *item, plog_span *out) {
    if (item == Py_None) {
        out->data = NULL;
        out->length = -1;
        return 0;
    }
    if (!PyBytes_CheckExact(item)) return 1;
    Py_ssize_t length = PyBytes_Size(item);
    if (length > INT32_MAX) return PLOG_ETOOLARGE;
    out->data = (const uint8_t *)PyBytes_AsString(item);
    out->length = (int32_t)length;
    return 0;
}

/* Fill keys/values from the list; *keyed is set when any record is a (key, value) pair. */
static int collect(PyObject *records, Py_ssize_t n, plog_span *keys, plog_span *values, int *keyed) {
    *keyed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GetItem(records, i);
        int rc;
        keys[i].data = NULL;
        keys[i].length = -1;
        if (PyTuple_CheckExact(item)) {
            if (PyTuple_Size(item) != 2) return 1;
            rc = span_of(PyTuple_GetItem(item, 0), &keys[i]);
            if (rc == 0) rc = span_of(PyTuple_GetItem(item, 1), &values[i]);
            *keyed = 1;
        } else {
            rc = span_of(item, &values[i]);
        }
        if (rc) return rc;
    }
    return 0;
}

/* The batch: the encoded records after PLOG_BATCH_OVERHEAD header bytes, finished (header and
 * CRC) when `finish`, else the header left zero for a caller that compresses the section. */
static PyObject *encode_batch(Py_ssize_t n, const plog_span *keys, const plog_span *values,
                              plog_batch_info *info, int finish) {
    size_t size = 0;
    int rc = encode_spans(NULL, 0, &size, (int32_t)n, keys, values);
    if (rc) return PyLong_FromLong(rc);
    if (size > (size_t)INT32_MAX - PLOG_BATCH_OVERHEAD) return PyLong_FromLong(PLOG_ETOOLARGE);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(PLOG_BATCH_OVERHEAD + size));
    if (!out) return NULL;
    uint8_t *b = (uint8_t *)PyBytes_AsString(out);
    memset(b, 0, PLOG_BATCH_OVERHEAD);
    rc = encode_spans(b + PLOG_BATCH_OVERHEAD, size, &size, (int32_t)n, keys, values);
    if (rc == 0 && finish) rc = batch_finish(b, PLOG_BATCH_OVERHEAD + size, info);
    if (rc) {
        Py_DECREF(out);
        return PyLong_FromLong(rc);
    }
    return out;
}

PyDoc_STRVAR(build_doc,
"build(records, finish, base_offset, partition_leader_epoch, attributes, base_timestamp,\n"
"      producer_id, producer_epoch, base_sequence) -> bytes | int | None\n\n"
"The batch of a list of bytes values or (key, value) pairs, every record at the base\n"
"timestamp: finished when `finish`, else with a zero header.  None when the list holds\n"
"another shape; a negative PLOG_E* code when the core refuses it.");

static PyObject *build(PyObject *self, PyObject *args) {
    PyObject *records;
    int finish;
    plog_batch_info info;
    memset(&info, 0, sizeof info);
    if (!PyArg_ParseTuple(args, "O!pLihLLhi", &PyList_Type, &records, &finish, &info.base_offset,
                          &info.partition_leader_epoch, &info.attributes, &info.base_timestamp,
                          &info.producer_id, &info.producer_epoch, &info.base_sequence))
        return NULL;
    if (!encode_spans || !batch_finish) {
        PyErr_SetString(PyExc_RuntimeError, "storage._pyrecords: bind() was not called");
        return NULL;
    }
    /* The list's items are borrowed: nothing below runs Python code (the one allocation is
     * a bytes object, which never starts the cyclic collector), so none can go away. */
    Py_ssize_t n = PyList_Size(records);
    if (n <= 0 || n > INT32_MAX) Py_RETURN_NONE;
    plog_span *spans = PyMem_Malloc(2 * (size_t)n * sizeof *spans);
    if (!spans) return PyErr_NoMemory();
    int keyed;
    int rc = collect(records, n, spans, spans + n, &keyed);
    PyObject *result;
    if (rc == 1) {
        result = Py_NewRef(Py_None);
    } else if (rc) {
        result = PyLong_FromLong(rc);
    } else {
        info.last_offset_delta = (int32_t)(n - 1);
        info.record_count = (int32_t)n;
        info.max_timestamp = info.base_timestamp;
        result = encode_batch(n, keyed ? spans : NULL, spans + n, &info, finish);
    }
    PyMem_Free(spans);
    return result;
}

PyDoc_STRVAR(bind_doc, "bind(encode_spans, batch_finish): the core's functions, as addresses.");

static PyObject *bind(PyObject *self, PyObject *args) {
    unsigned long long encode, finish;
    if (!PyArg_ParseTuple(args, "KK", &encode, &finish)) return NULL;
    encode_spans = (encode_spans_fn)(uintptr_t)encode;
    batch_finish = (finish_fn)(uintptr_t)finish;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"build", build, METH_VARARGS, build_doc},
    {"bind", bind, METH_VARARGS, bind_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "storage._pyrecords",
    "build_batch's walk over a list of records (csrc/pyrecords.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pyrecords(void) { return PyModule_Create(&module); }

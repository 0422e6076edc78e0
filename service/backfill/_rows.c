/* Backfill rows: COPY BINARY tuples of text columns -> pgoutput Insert messages (compiled).
 *
 * The chunk query is COPY (SELECT key columns::text..., every column::text...) TO STDOUT
 * (FORMAT binary): each tuple is Int16 field count, then per field Int32 length (-1: NULL) and
 * the text bytes. pgoutput's TupleData is Int16 column count, then per column 't' Int32 length
 * bytes, or 'n'. rows.py holds the same rules in Python (the specification and the fallback).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static const char SIGNATURE[11] = "PGCOPY\n\377\r\n\0";

static int32_t get_i32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static PyObject *bad(const char *what) {
    PyErr_Format(PyExc_ValueError, "COPY BINARY data: %s", what);
    return NULL;
}

/* copy_rows(block, header, nkeys, out) -> number of tuples appended to out as (key, body):
 * key a tuple of the first nkeys fields (bytes), body >I length + header + TupleData of the
 * other fields. A block may start with the signature header and may hold the -1 trailer. */
static PyObject *copy_rows(PyObject *self, PyObject *args) {
    Py_buffer data, header;
    Py_ssize_t nkeys;
    PyObject *out;
    if (!PyArg_ParseTuple(args, "y*y*nO!", &data, &header, &nkeys, &PyList_Type, &out))
        return NULL;
    const unsigned char *p = data.buf, *end = p + data.len;
    Py_ssize_t count = 0;
    PyObject *result = NULL;
    if (end - p >= 19 && memcmp(p, SIGNATURE, 11) == 0) {
        int32_t ext = get_i32(p + 15);
        if (ext < 0 || end - p < 19 + (Py_ssize_t)ext) { bad("short header"); goto done; }
        p += 19 + ext;
    }
    while (end - p >= 2) {
        int fields = (int16_t)((p[0] << 8) | p[1]);
        p += 2;
        if (fields == -1) break;  /* trailer */
        if (fields < nkeys) { bad("fewer fields than key columns"); goto done; }
        /* first pass: size of the body */
        const unsigned char *q = p;
        Py_ssize_t size = 4 + header.len + 0;
        for (int i = 0; i < fields; i++) {
            if (end - q < 4) { bad("short field"); goto done; }
            int32_t n = get_i32(q);
            q += 4;
            if (n < -1 || (n > 0 && end - q < n)) { bad("bad field length"); goto done; }
            if (i >= nkeys) size += n < 0 ? 1 : 5 + n;
            if (n > 0) q += n;
        }
        PyObject *key = PyTuple_New(nkeys);
        PyObject *body = PyBytes_FromStringAndSize(NULL, size);
        if (key == NULL || body == NULL) { Py_XDECREF(key); Py_XDECREF(body); goto done; }
        unsigned char *w = (unsigned char *)PyBytes_AS_STRING(body);
        put_u32(w, (uint32_t)(size - 4));
        memcpy(w + 4, header.buf, header.len);
        w += 4 + header.len;
        for (int i = 0; i < fields; i++) {
            int32_t n = get_i32(p);
            p += 4;
            if (i < nkeys) {
                PyObject *v = n < 0 ? (Py_INCREF(Py_None), Py_None)
                                    : PyBytes_FromStringAndSize((const char *)p, n);
                if (v == NULL) { Py_DECREF(key); Py_DECREF(body); goto done; }
                PyTuple_SET_ITEM(key, i, v);
            } else if (n < 0) {
                *w++ = 'n';
            } else {
                *w++ = 't';
                put_u32(w, (uint32_t)n);
                memcpy(w + 4, p, n);
                w += 4 + n;
            }
            if (n > 0) p += n;
        }
        PyObject *pair = PyTuple_Pack(2, key, body);
        Py_DECREF(key);
        Py_DECREF(body);
        if (pair == NULL || PyList_Append(out, pair) < 0) { Py_XDECREF(pair); goto done; }
        Py_DECREF(pair);
        count++;
    }
    result = PyLong_FromSsize_t(count);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&header);
    return result;
}

static PyMethodDef methods[] = {
    {"copy_rows", copy_rows, METH_VARARGS, "COPY BINARY tuples -> (key, >I length + Insert message)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }

/* Backfill rows: COPY text rows -> pgoutput Insert messages (compiled).
 *
 * The chunk query is COPY (SELECT every published column ...) TO STDOUT: each value is its
 * type's output function (what pgoutput sends) with COPY's text escapes. pgoutput's TupleData is
 * Int16 column count, then per column 't' Int32 length bytes, or 'n'. rows.py holds the same
 * rules in Python (the specification and the fallback).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static PyObject *bad(const char *what) {
    PyErr_Format(PyExc_ValueError, "COPY text data: %s", what);
    return NULL;
}

static unsigned char unescape(unsigned char c) {
    switch (c) {
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'v': return '\v';
    default: return c;  /* the backslash itself, or an escaped delimiter */
    }
}

/* copy_text_rows(block, header, key_positions, out) -> rows appended to out as (key, body), from
 * COPY text format (each value its type's output function, as pgoutput sends it): rows end with
 * a newline, fields are tab-separated, \N is NULL, backslash escapes \b \f \n \r \t \v and a
 * backslash before any other character stand for that character. key_positions: the key
 * columns' field indexes; header ends with the column count, which every row must have. */
static PyObject *copy_text_rows(PyObject *self, PyObject *args) {
    Py_buffer data, header;
    PyObject *positions, *out;
    if (!PyArg_ParseTuple(args, "y*y*O!O!", &data, &header, &PyTuple_Type, &positions,
                          &PyList_Type, &out))
        return NULL;
    PyObject *result = NULL;
    int *slot = NULL;
    Py_ssize_t nkeys = PyTuple_GET_SIZE(positions), count = 0;
    if (header.len < 2) { bad("header without a column count"); goto done; }
    const unsigned char *hp = (const unsigned char *)header.buf + header.len - 2;
    int ncols = (int16_t)((hp[0] << 8) | hp[1]);
    if (ncols < 0) { bad("negative column count"); goto done; }
    slot = PyMem_Malloc(sizeof(int) * (ncols + 1));
    if (slot == NULL) { PyErr_NoMemory(); goto done; }
    for (int i = 0; i < ncols; i++) slot[i] = -1;
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        long at = PyLong_AsLong(PyTuple_GET_ITEM(positions, k));
        if (at < 0 || at >= ncols) { if (!PyErr_Occurred()) bad("key position out of range"); goto done; }
        slot[at] = (int)k;
    }
    const unsigned char *p = data.buf, *end = p + data.len;
    while (p < end) {
        const unsigned char *eol = memchr(p, '\n', end - p);
        if (eol == NULL) { bad("row without end of line"); goto done; }
        /* first pass: the fields and the body's size */
        Py_ssize_t size = 4 + header.len;
        int fields = 0;
        const unsigned char *q = p;
        for (;;) {
            const unsigned char *f = q;
            Py_ssize_t n = 0;
            while (q < eol && *q != '\t') {
                if (*q == '\\') { if (++q == eol) { bad("backslash at end of line"); goto done; } }
                q++; n++;
            }
            size += (q - f == 2 && f[0] == '\\' && f[1] == 'N') ? 1 : 5 + n;
            fields++;
            if (q == eol) break;
            q++;  /* the tab */
        }
        if (fields != ncols) { bad("a row's field count is not the column count"); goto done; }
        PyObject *key = PyTuple_New(nkeys);
        PyObject *body = PyBytes_FromStringAndSize(NULL, size);
        if (key == NULL || body == NULL) { Py_XDECREF(key); Py_XDECREF(body); goto done; }
        for (Py_ssize_t k = 0; k < nkeys; k++) { Py_INCREF(Py_None); PyTuple_SET_ITEM(key, k, Py_None); }
        unsigned char *w = (unsigned char *)PyBytes_AS_STRING(body);
        put_u32(w, (uint32_t)(size - 4));
        memcpy(w + 4, header.buf, header.len);
        w += 4 + header.len;
        q = p;
        for (int i = 0; i < ncols; i++) {
            const unsigned char *f = q;
            while (q < eol && *q != '\t') q += (*q == '\\') ? 2 : 1;
            if (q - f == 2 && f[0] == '\\' && f[1] == 'N') {
                *w++ = 'n';
            } else {
                unsigned char *len_at = w + 1, *v = w + 5, *o = v;
                *w = 't';
                for (const unsigned char *c = f; c < q; c++)
                    *o++ = (*c == '\\') ? unescape(*++c) : *c;
                put_u32(len_at, (uint32_t)(o - v));
                if (slot[i] >= 0) {
                    PyObject *kv = PyBytes_FromStringAndSize((const char *)v, o - v);
                    if (kv == NULL) { Py_DECREF(key); Py_DECREF(body); goto done; }
                    PyObject *old = PyTuple_GET_ITEM(key, slot[i]);
                    PyTuple_SET_ITEM(key, slot[i], kv);
                    Py_DECREF(old);
                }
                w = o;
            }
            q++;  /* the tab, or the newline after the last field */
        }
        p = eol + 1;
        PyObject *pair = PyTuple_Pack(2, key, body);
        Py_DECREF(key);
        Py_DECREF(body);
        if (pair == NULL || PyList_Append(out, pair) < 0) { Py_XDECREF(pair); goto done; }
        Py_DECREF(pair);
        count++;
    }
    result = PyLong_FromSsize_t(count);
done:
    PyMem_Free(slot);
    PyBuffer_Release(&data);
    PyBuffer_Release(&header);
    return result;
}

static PyMethodDef methods[] = {
    {"copy_text_rows", copy_text_rows, METH_VARARGS, "COPY text rows -> (key, >I length + Insert message)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }

/* Backfill rows: a chunk's COPY text -> log frames of pgoutput Insert messages (compiled).
 *
 * The chunk query is COPY (SELECT every published column ...) TO STDOUT: each value is its
 * type's output function (what pgoutput sends) with COPY's text escapes. pgoutput's TupleData is
 * Int16 column count, then per column 't' Int32 length bytes, or 'n'. rows.py holds the same
 * rules in Python (the specification and the fallback).
 *
 * Why C, and why whole chunks: a backfill is bound by the server's CPU, and per-row Python
 * (a call, a key tuple, a bytes object per row) cost more than reading the table. Here a chunk is
 * one call over one buffer, with no Python object per row, and the GIL released around the loops:
 * the `parallel` chunk readers then use both cores while capture keeps the GIL for itself.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define LSN_BYTES 8 /* a frame: the LSN (stamped when stored), >I length, the message */

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) { p[i] = (unsigned char)v; v >>= 8; }
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

/* One row's fields -> 't' length value / 'n' at w; returns the end, or NULL with *error set. */
static unsigned char *tuple_data(const unsigned char *p, const unsigned char *eol, int ncols,
                                 unsigned char *w, const char **error) {
    int fields = 0;
    for (;;) {
        if (eol - p >= 2 && p[0] == '\\' && p[1] == 'N' && (eol - p == 2 || p[2] == '\t')) {
            *w++ = 'n';
            p += 2;
        } else {
            unsigned char *v = w + 5, *o = v;
            *w = 't';
            /* most values have no escape: copy up to the tab in one go (memchr is vectorised) */
            const unsigned char *tab = memchr(p, '\t', eol - p);
            if (tab == NULL) tab = eol;
            if (memchr(p, '\\', tab - p) == NULL) {
                memcpy(o, p, tab - p);
                o += tab - p;
                p = tab;
            } else {
                while (p < eol && *p != '\t') {
                    unsigned char c = *p++;
                    if (c == '\\') {
                        if (p == eol) { *error = "backslash at end of line"; return NULL; }
                        c = unescape(*p++);
                    }
                    *o++ = c;
                }
            }
            put_u32(w + 1, (uint32_t)(o - v));
            w = o;
        }
        fields++;
        if (p == eol) break;
        p++;  /* the tab */
    }
    if (fields != ncols) { *error = "a row's field count is not the column count"; return NULL; }
    return w;
}

/* copy_text_frames(block, header) -> (frames, starts): every row of COPY text format in block
 * (rows end with a newline, fields are tab-separated, \N is NULL, backslash escapes \b \f \n \r
 * \t \v and a backslash before any other character stand for that character) as a log frame:
 * 8 zero bytes for the LSN, >I length, header + TupleData. starts: native uint64 offsets of each
 * frame and of the end. header ends with the column count, which every row must have. */
static PyObject *copy_text_frames(PyObject *self, PyObject *args) {
    Py_buffer data, header;
    if (!PyArg_ParseTuple(args, "y*y*", &data, &header))
        return NULL;
    PyObject *frames = NULL, *starts = NULL, *result = NULL;
    const char *error = NULL;
    if (header.len < 2) { error = "header without a column count"; goto done; }
    const unsigned char *hp = (const unsigned char *)header.buf + header.len - 2;
    int ncols = (int16_t)((hp[0] << 8) | hp[1]);
    if (ncols < 1) { error = "no columns"; goto done; }
    const unsigned char *begin = data.buf, *end = begin + data.len;
    if (data.len > 0 && end[-1] != '\n') { error = "row without end of line"; goto done; }
    Py_ssize_t rows = 0;
    Py_BEGIN_ALLOW_THREADS
    for (const unsigned char *p = begin; p < end; rows++) p = (const unsigned char *)memchr(p, '\n', end - p) + 1;
    Py_END_ALLOW_THREADS
    /* at most: the text, and per row a frame head and header, per field 5 bytes for its tab */
    Py_ssize_t most = data.len + rows * (LSN_BYTES + 4 + header.len + 5 * (Py_ssize_t)ncols);
    frames = PyBytes_FromStringAndSize(NULL, most);
    starts = PyBytes_FromStringAndSize(NULL, (rows + 1) * (Py_ssize_t)sizeof(uint64_t));
    if (frames == NULL || starts == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(frames), *w = out;
    uint64_t *at = (uint64_t *)PyBytes_AS_STRING(starts);
    Py_BEGIN_ALLOW_THREADS
    const unsigned char *p = begin;
    for (Py_ssize_t r = 0; r < rows; r++) {
        const unsigned char *eol = memchr(p, '\n', end - p);
        unsigned char *frame = w;
        at[r] = (uint64_t)(frame - out);
        memset(frame, 0, LSN_BYTES);
        memcpy(frame + LSN_BYTES + 4, header.buf, header.len);
        w = tuple_data(p, eol, ncols, frame + LSN_BYTES + 4 + header.len, &error);
        if (w == NULL) break;
        put_u32(frame + LSN_BYTES, (uint32_t)(w - frame - LSN_BYTES - 4));
        p = eol + 1;
    }
    if (w != NULL) at[rows] = (uint64_t)(w - out);
    Py_END_ALLOW_THREADS
    if (error != NULL) goto done;
    if (_PyBytes_Resize(&frames, w - out) < 0) { frames = NULL; goto done; }
    result = PyTuple_Pack(2, frames, starts);
done:
    if (error != NULL) PyErr_Format(PyExc_ValueError, "COPY text data: %s", error);
    Py_XDECREF(frames);
    Py_XDECREF(starts);
    PyBuffer_Release(&data);
    PyBuffer_Release(&header);
    return result;
}

/* stamp(prefix, frames, starts, runs, lsn) -> prefix, then the frames of the rows of each
 * [start, stop) run in runs (a list of pairs), with lsn written in each: a read transaction's
 * payload (its rows all sit at its one position), built with one allocation and one copy. */
static PyObject *stamp(PyObject *self, PyObject *args) {
    Py_buffer prefix, frames, starts;
    PyObject *runs;
    unsigned long long lsn;
    if (!PyArg_ParseTuple(args, "y*y*y*O!K", &prefix, &frames, &starts, &PyList_Type, &runs, &lsn))
        return NULL;
    PyObject *result = NULL;
    const uint64_t *at = starts.buf;
    Py_ssize_t count = starts.len / (Py_ssize_t)sizeof(uint64_t), nruns = PyList_GET_SIZE(runs);
    Py_ssize_t *bounds = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (nruns + 1));
    if (bounds == NULL) { PyErr_NoMemory(); goto done; }
    Py_ssize_t size = prefix.len;
    for (Py_ssize_t i = 0; i < nruns; i++) {
        PyObject *run = PyList_GET_ITEM(runs, i);
        Py_ssize_t start, stop;
        if (!PyTuple_Check(run) || !PyArg_ParseTuple(run, "nn", &start, &stop)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "stamp: runs are (start, stop) pairs");
            goto done;
        }
        if (start < 0 || stop < start || stop >= count || at[stop] > (uint64_t)frames.len) {
            PyErr_SetString(PyExc_IndexError, "stamp: rows out of range");
            goto done;
        }
        bounds[2 * i] = start;
        bounds[2 * i + 1] = stop;
        size += at[stop] - at[start];
    }
    result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(result);
    memcpy(w, prefix.buf, prefix.len);
    w += prefix.len;
    for (Py_ssize_t i = 0; i < nruns; i++) {
        Py_ssize_t start = bounds[2 * i], stop = bounds[2 * i + 1];
        memcpy(w, (const char *)frames.buf + at[start], at[stop] - at[start]);
        for (Py_ssize_t r = start; r < stop; r++) put_u64(w + (at[r] - at[start]), lsn);
        w += at[stop] - at[start];
    }
done:
    PyMem_Free(bounds);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&frames);
    PyBuffer_Release(&starts);
    return result;
}

/* read_copy(pgconn, get_copy_data, freemem) -> (status, data): the rest of a COPY TO STDOUT
 * in progress on a libpq connection (PGconn *, as psycopg's pgconn.pgconn_ptr), every CopyData
 * message back to back; status -1 at the COPY's end, -2 on an error (PQerrorMessage says which).
 * Why: psycopg's get_copy_data costs a Python call, a tuple and a buffer object per row
 * (PostgreSQL sends one message a row), a third of a chunk's CPU, all of it under the GIL. Here
 * the loop waits and copies with the GIL released. The libpq functions come as addresses (of the
 * one libpq psycopg's connection lives in: psycopg's wheel ships its own), so this module does
 * not link a libpq of its own, which could differ from the connection's. */
typedef int (*get_copy_data_fn)(void *conn, char **buffer, int async);
typedef void (*freemem_fn)(void *ptr);

static PyObject *read_copy(PyObject *self, PyObject *args) {
    unsigned long long conn_at, get_at, free_at;
    if (!PyArg_ParseTuple(args, "KKK", &conn_at, &get_at, &free_at))
        return NULL;
    if (conn_at == 0 || get_at == 0 || free_at == 0) {
        PyErr_SetString(PyExc_ValueError, "read_copy: a null connection or function");
        return NULL;
    }
    void *conn = (void *)(uintptr_t)conn_at;
    get_copy_data_fn get = (get_copy_data_fn)(uintptr_t)get_at;
    freemem_fn release = (freemem_fn)(uintptr_t)free_at;
    char *data = NULL;
    size_t used = 0, size = 0;
    int n, nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        char *buffer = NULL;
        n = get(conn, &buffer, 0);  /* blocking: waits for the socket itself */
        if (n <= 0) break;
        if (!nomem && used + (size_t)n > size) {
            size_t grown = size ? size * 2 : (size_t)1 << 20;
            while (grown < used + (size_t)n) grown *= 2;
            char *more = PyMem_RawRealloc(data, grown);
            if (more == NULL) nomem = 1;  /* the COPY is still read to its end */
            else { data = more; size = grown; }
        }
        if (!nomem) { memcpy(data + used, buffer, n); used += n; }
        release(buffer);
    }
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (nomem) PyErr_NoMemory();
    else result = Py_BuildValue("(iy#)", n, data == NULL ? "" : data, (Py_ssize_t)used);
    PyMem_RawFree(data);
    return result;
}

static PyMethodDef methods[] = {
    {"read_copy", read_copy, METH_VARARGS,
     "(PGconn *, PQgetCopyData, PQfreemem addresses) -> (status, the COPY's data)"},
    {"copy_text_frames", copy_text_frames, METH_VARARGS,
     "COPY text rows -> (frames of Insert messages, native uint64 frame offsets)"},
    {"stamp", stamp, METH_VARARGS, "prefix + the frames of runs of rows, with their LSN written"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__rows(void) { return PyModule_Create(&module); }

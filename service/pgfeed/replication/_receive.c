/* The replication stream's receive loop (compiled): every CopyData message libpq has ready, as
 * log frames back to back, in one call.
 *
 * Why C: the walsender sends one CopyData message per pgoutput message, and psycopg's
 * get_copy_data costs a Python call, a tuple and a buffer object per message; with the
 * assembler's loop over them, Python spent more per message than the walsender did decoding it,
 * and capture trailed pg_recvlogical (bench/RESULTS.md, Capture). Here the loop runs with the GIL
 * released (the log writer's thread runs meanwhile) and hands back one buffer per batch: each
 * XLogData payload behind its frame header (>Q dataStart, >I length: assembler/framing.py's FRAME,
 * so runs of row changes are appended to a transaction as they are), with the bounds of each run
 * of consecutive row changes. stream.py's _receive_py is the same loop in Python (the fallback
 * and the specification); libpq's functions come as addresses, as in backfill/_rows.c. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FRAME_HEADER 12 /* >Q dataStart, >I length */
#define XLOG_HEADER 25  /* 'w', dataStart, walEnd, sendTime */
#define KEEPALIVE_SIZE 18 /* 'k', walEnd, sendTime, replyRequested */

typedef int (*get_copy_data_fn)(void *conn, char **buffer, int async);
typedef void (*freemem_fn)(void *ptr);
typedef int (*consume_input_fn)(void *conn);

typedef struct { size_t start, stop, rows; } run_t;
typedef struct { uint64_t wal_end; int reply; } keepalive_t;

typedef struct {
    unsigned char *data; size_t used, size;
    run_t *runs; size_t nruns, runs_size;
    keepalive_t *keepalives; size_t nkeep, keep_size;
    uint64_t last_lsn; /* the last frame's dataStart */
    int nomem;
} batch_t;

static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static int grow(void **at, size_t *size, size_t need, size_t item, size_t first) {
    if (need <= *size) return 1;
    size_t grown = *size ? *size * 2 : first;
    while (grown < need) grown *= 2;
    void *more = PyMem_RawRealloc(*at, grown * item);
    if (more == NULL) return 0;
    *at = more;
    *size = grown;
    return 1;
}

/* Row changes inside Begin..Commit are most messages: the assembler appends a run of them as it
 * is. Everything else (Begin, Commit, Relation, stream blocks' markers, ...) is its own run. */
static int is_row(unsigned char tag) {
    return tag == 'I' || tag == 'U' || tag == 'D' || tag == 'T';
}

static int add_frame(batch_t *b, const unsigned char *buf, size_t n) {
    size_t length = n - XLOG_HEADER, at = b->used;
    if (!grow((void **)&b->data, &b->size, at + FRAME_HEADER + length, 1, (size_t)1 << 20))
        return 0;
    memcpy(b->data + at, buf + 1, 8); /* dataStart, already big-endian */
    put_u32(b->data + at + 8, (uint32_t)length);
    memcpy(b->data + at + FRAME_HEADER, buf + XLOG_HEADER, length);
    b->used = at + FRAME_HEADER + length;
    b->last_lsn = get_u64(buf + 1);
    int row = length > 0 && is_row(buf[XLOG_HEADER]);
    if (row && b->nruns && b->runs[b->nruns - 1].rows) {
        run_t *last = &b->runs[b->nruns - 1];
        last->stop = b->used;
        last->rows++;
        return 1;
    }
    if (!grow((void **)&b->runs, &b->runs_size, b->nruns + 1, sizeof(run_t), 64)) return 0;
    b->runs[b->nruns++] = (run_t){at, b->used, row ? 1 : 0};
    return 1;
}

/* receive(conn, get_copy_data, freemem, consume_input, max_messages)
 *   -> (status, data, runs, keepalives, last_lsn, bad)
 * Reads without waiting. status: 0 nothing more is ready, 1 max_messages read, -1 the server
 * ended the copy, -2 a libpq error (PQerrorMessage says which), -3 a message that is neither a
 * well-formed XLogData nor a well-formed keepalive (``bad``: its bytes; the caller's parser says
 * what is wrong). runs: (start, stop, rows) over ``data``, rows > 0 for that many consecutive row
 * changes, 0 for one other message; keepalives: (walEnd, replyRequested) in order; last_lsn: the
 * last frame's dataStart (0: none). */
static PyObject *receive(PyObject *self, PyObject *args) {
    unsigned long long conn_at, get_at, free_at, consume_at;
    Py_ssize_t max_messages;
    if (!PyArg_ParseTuple(args, "KKKKn", &conn_at, &get_at, &free_at, &consume_at, &max_messages))
        return NULL;
    if (conn_at == 0 || get_at == 0 || free_at == 0 || consume_at == 0) {
        PyErr_SetString(PyExc_ValueError, "receive: a null connection or function");
        return NULL;
    }
    void *conn = (void *)(uintptr_t)conn_at;
    get_copy_data_fn get = (get_copy_data_fn)(uintptr_t)get_at;
    freemem_fn release = (freemem_fn)(uintptr_t)free_at;
    consume_input_fn consume = (consume_input_fn)(uintptr_t)consume_at;
    batch_t b = {0};
    char *bad = NULL;
    int bad_size = 0, status = 0;
    Py_ssize_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    int consumed = 0; /* the socket was read since the last message: nothing more is ready */
    while (count < max_messages) {
        char *buffer = NULL;
        int n = get(conn, &buffer, 1);
        if (n == 0) {
            if (consumed) break;
            if (!consume(conn)) { status = -2; break; }
            consumed = 1;
            continue;
        }
        if (n < 0) { status = n == -1 ? -1 : -2; break; }
        consumed = 0;
        const unsigned char *m = (const unsigned char *)buffer;
        int ok = 1;
        if (m[0] == 'w' && n >= XLOG_HEADER) {
            ok = add_frame(&b, m, (size_t)n);
            if (!ok) b.nomem = 1;
        } else if (m[0] == 'k' && n == KEEPALIVE_SIZE && m[17] <= 1) {
            ok = grow((void **)&b.keepalives, &b.keep_size, b.nkeep + 1, sizeof(keepalive_t), 16);
            if (ok) b.keepalives[b.nkeep++] = (keepalive_t){get_u64(m + 1), m[17]};
            else b.nomem = 1;
        } else {
            bad = buffer; /* freed once copied, below */
            bad_size = n;
            status = -3;
            break;
        }
        release(buffer);
        if (!ok) break;
        count++;
    }
    if (status == 0 && count >= max_messages) status = 1;
    Py_END_ALLOW_THREADS

    PyObject *result = NULL, *runs = NULL, *keepalives = NULL, *data = NULL, *bad_bytes = NULL;
    if (b.nomem) {
        PyErr_NoMemory();
        goto done;
    }
    data = PyBytes_FromStringAndSize((const char *)(b.data ? b.data : (unsigned char *)""),
                                     (Py_ssize_t)b.used);
    runs = PyList_New((Py_ssize_t)b.nruns);
    keepalives = PyList_New((Py_ssize_t)b.nkeep);
    bad_bytes = bad ? PyBytes_FromStringAndSize(bad, bad_size) : (Py_INCREF(Py_None), Py_None);
    if (!data || !runs || !keepalives || !bad_bytes) goto done;
    for (size_t i = 0; i < b.nruns; i++) {
        PyObject *run = Py_BuildValue("(nnn)", (Py_ssize_t)b.runs[i].start,
                                      (Py_ssize_t)b.runs[i].stop, (Py_ssize_t)b.runs[i].rows);
        if (!run) goto done;
        PyList_SET_ITEM(runs, (Py_ssize_t)i, run);
    }
    for (size_t i = 0; i < b.nkeep; i++) {
        PyObject *k = Py_BuildValue("(KO)", (unsigned long long)b.keepalives[i].wal_end,
                                    b.keepalives[i].reply ? Py_True : Py_False);
        if (!k) goto done;
        PyList_SET_ITEM(keepalives, (Py_ssize_t)i, k);
    }
    result = Py_BuildValue("(iOOOKO)", status, data, runs, keepalives,
                           (unsigned long long)b.last_lsn, bad_bytes);
done:
    if (bad) release(bad);
    Py_XDECREF(data);
    Py_XDECREF(runs);
    Py_XDECREF(keepalives);
    Py_XDECREF(bad_bytes);
    PyMem_RawFree(b.data);
    PyMem_RawFree(b.runs);
    PyMem_RawFree(b.keepalives);
    return result;
}

static PyMethodDef methods[] = {
    {"receive", receive, METH_VARARGS,
     "(PGconn *, PQgetCopyData, PQfreemem, PQconsumeInput addresses, max messages) -> "
     "(status, frames, runs, keepalives, last dataStart, bad message)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_receive", NULL, -1, methods};

PyMODINIT_FUNC PyInit__receive(void) { return PyModule_Create(&module); }

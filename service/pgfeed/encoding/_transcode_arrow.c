/*
 * Compiled typed-Arrow rows: pgoutput Insert/Update/Delete frames of one table, straight from
 * the stored transaction payload into per-column Arrow buffers (validity bitmaps, fixed-width
 * values, offsets + data), with no Python object per change or per value.
 *
 * Included by _transcode.c (it shares its TupleData parser and text-shape checks). The
 * specification is the reference typed path, to_arrow.typed_batch over loaded changes;
 * encoding/arrow_rows.py drives this and falls back to the reference for any change this
 * refuses (FALLBACK: a shape, value or layout outside the rules below), which
 * tests/unit/encoding/test_arrow_rows.py holds to it.
 */

/* The interface with arrow_rows.py (Arrow column kinds A_*, metadata columns M_*, buffers()'
 * slots S_*, row ops ROW_*, scan()'s flags F_*): generated from encoding/arrow_abi.py */
#include "_arrow_abi.h"

/* Column memory comes from PyMem_Raw* (the C library's allocator), which needs no GIL: scan()
 * appends with the GIL released. ERROR from these means out of memory, with no exception set
 * (nomem() sets it once the GIL is held). */
typedef struct { unsigned char *p; Py_ssize_t len, cap; } Grow;

static int nomem(void) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return -1;
}

static int grow_reserve(Grow *g, Py_ssize_t n) {
    if (g->len + n <= g->cap) return 0;
    Py_ssize_t cap = g->cap ? g->cap * 2 : 4096;
    while (cap < g->len + n) cap *= 2;
    unsigned char *p = PyMem_RawRealloc(g->p, cap);
    if (p == NULL) return ERROR;
    g->p = p;
    g->cap = cap;
    return 0;
}

static int grow_put(Grow *g, const void *s, Py_ssize_t n) {
    CHECK(grow_reserve(g, n));
    memcpy(g->p + g->len, s, n);
    g->len += n;
    return 0;
}

/* bit ``row`` of a bitmap grown to cover it */
static int bit_set(Grow *g, Py_ssize_t row, int on) {
    Py_ssize_t byte = row >> 3;
    if (byte >= g->len) {
        CHECK(grow_reserve(g, byte + 1 - g->len));
        memset(g->p + g->len, 0, byte + 1 - g->len);
        g->len = byte + 1;
    }
    if (on) g->p[byte] |= (unsigned char)(1u << (row & 7));
    else g->p[byte] &= (unsigned char)~(1u << (row & 7));
    return 0;
}

typedef struct Column {
    int kind, width, precision, scale;
    Grow valid;  /* validity bitmap */
    Grow values; /* fixed-width values, the bool bitmap, or int32 offsets (strings, lists) */
    Grow data;   /* string/binary bytes */
    Py_ssize_t nulls, n;   /* n: values appended (a list's elements: the next one's index) */
    struct Column *child; /* a list's elements */
} Column;

typedef struct { Py_ssize_t values, data, nulls, n; } Mark;

static int is_var(int kind) { return kind == A_STRING || kind == A_BINARY || kind == A_LIST; }

static int column_init(Column *c, int kind, int precision, int scale) {
    static const int widths[] = {2, 4, 8, 4, 8, 0, 16, 4, 8, 0, 0, 0};
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->width = widths[kind];
    c->precision = precision;
    c->scale = scale;
    if (is_var(kind)) { int32_t zero = 0; return grow_put(&c->values, &zero, 4); }
    return 0;
}

static void column_free(Column *c) {
    PyMem_RawFree(c->valid.p);
    PyMem_RawFree(c->values.p);
    PyMem_RawFree(c->data.p);
}

static int column_null(Column *c, Py_ssize_t row) {
    CHECK(bit_set(&c->valid, row, 0));
    c->nulls++;
    c->n++;
    if (is_var(c->kind)) {
        int32_t end;
        memcpy(&end, c->values.p + c->values.len - 4, 4); /* the previous value's end */
        return grow_put(&c->values, &end, 4);
    }
    if (c->kind == A_BOOL) return bit_set(&c->values, row, 0);
    CHECK(grow_reserve(&c->values, c->width));
    memset(c->values.p + c->values.len, 0, c->width);
    c->values.len += c->width;
    return 0;
}

static int column_fixed(Column *c, Py_ssize_t row, const void *v) {
    CHECK(bit_set(&c->valid, row, 1));
    c->n++;
    return grow_put(&c->values, v, c->width);
}

/* ends a string/binary value whose bytes were appended to c->data */
static int column_end_var(Column *c, Py_ssize_t row) {
    Py_ssize_t at = c->kind == A_LIST ? c->child->n : c->data.len;
    if (at > INT32_MAX) return FALLBACK; /* a page past int32 offsets: the reference */
    CHECK(bit_set(&c->valid, row, 1));
    c->n++;
    int32_t end = (int32_t)at;
    return grow_put(&c->values, &end, 4);
}

static int column_var(Column *c, Py_ssize_t row, const unsigned char *p, Py_ssize_t n) {
    CHECK(grow_put(&c->data, p, n));
    return column_end_var(c, row);
}

/* -- values ------------------------------------------------------------------------------------ */

/* numeric text -> the unscaled decimal128 of (precision, scale); ``*null`` for NaN/±Infinity
 * (Arrow's decimals hold neither: the reference writes null). More fraction digits than the
 * scale, or more digits than the precision: FALLBACK (the reference decides). */
static int parse_decimal(const unsigned char *t, Py_ssize_t n, int precision, int scale,
                         __int128 *out, int *null) {
    *null = 0;
    if (!numeric_ok(t, n)) return FALLBACK;
    if (t[n - 1] == 'N' || t[n - 1] == 'y') { *null = 1; return 0; }
    int neg = t[0] == '-';
    if (neg) { t++; n--; }
    Py_ssize_t i = 0, int_end, frac = 0;
    while (i < n && t[i] != '.') i++;
    int_end = i;
    if (i < n) frac = n - i - 1;
    if (frac > scale) return FALLBACK;
    Py_ssize_t lead = 0;
    while (lead < int_end && t[lead] == '0') lead++;
    if ((int_end - lead) + scale > precision) return FALLBACK;
    __int128 v = 0;
    for (Py_ssize_t k = lead; k < int_end; k++) v = v * 10 + (t[k] - '0');
    for (Py_ssize_t k = int_end + 1; k < n; k++) v = v * 10 + (t[k] - '0');
    for (Py_ssize_t k = frac; k < scale; k++) v *= 10;
    *out = neg ? -v : v;
    return 0;
}

/* ``YYYY-MM-DD HH:MM:SS[.f{1,6}]`` (timestamp_ok) -> microseconds since 1970-01-01 */
static int stamp_micros(const unsigned char *t, Py_ssize_t n, int64_t *out) {
    int64_t days;
    CHECK(ordinal(digits_value(t, 4), digits_value(t + 5, 2), digits_value(t + 8, 2), &days));
    int64_t seconds = (days - UNIX_DAY0) * 86400 + digits_value(t + 11, 2) * 3600
                      + digits_value(t + 14, 2) * 60 + digits_value(t + 17, 2);
    int64_t micros = 0;
    if (n > 19) {
        Py_ssize_t k = n - 20;
        micros = digits_value(t + 20, k);
        for (Py_ssize_t i = k; i < 6; i++) micros *= 10;
    }
    *out = seconds * 1000000 + micros;
    return 0;
}

static int arrow_list(Column *c, Py_ssize_t row, int kind, Col v);

/* one column text (kind: transcode's K_*; a list's: its elements') into an Arrow column; NULL
 * and unchanged TOAST are null */
static int arrow_value(Column *c, Py_ssize_t row, int kind, Col v) {
    const unsigned char *t = v.p;
    Py_ssize_t n = v.n;
    if (n < 0) return column_null(c, row);
    switch (c->kind) {
    case A_INT16: case A_INT32: case A_INT64: {
        int64_t x;
        if (kind != K_INT) return FALLBACK;
        CHECK(parse_int(t, n, &x));
        if (c->kind == A_INT16) {
            if (x < INT16_MIN || x > INT16_MAX) return FALLBACK;
            int16_t y = (int16_t)x;
            return column_fixed(c, row, &y);
        }
        if (c->kind == A_INT32) {
            if (x < INT32_MIN || x > INT32_MAX) return FALLBACK;
            int32_t y = (int32_t)x;
            return column_fixed(c, row, &y);
        }
        return column_fixed(c, row, &x);
    }
    case A_FLOAT32: case A_FLOAT64: {
        double x;
        if (kind != K_FLOAT) return FALLBACK;
        CHECK(parse_double(t, n, &x));
        if (c->kind == A_FLOAT64) return column_fixed(c, row, &x);
        float y = (float)x;
        return column_fixed(c, row, &y);
    }
    case A_BOOL:
        if (kind != K_BOOL || n != 1 || (t[0] != 't' && t[0] != 'f')) return FALLBACK;
        CHECK(bit_set(&c->valid, row, 1));
        c->n++;
        return bit_set(&c->values, row, t[0] == 't');
    case A_DECIMAL: {
        __int128 x;
        int null;
        if (kind != K_NUMERIC) return FALLBACK;
        CHECK(parse_decimal(t, n, c->precision, c->scale, &x, &null));
        if (null) return column_null(c, row);
        return column_fixed(c, row, &x); /* little-endian two's complement, as Arrow's */
    }
    case A_DATE32: {
        int64_t days;
        if (kind != K_DATE || n != 10 || !date_ok(t)) return FALLBACK;
        CHECK(ordinal(digits_value(t, 4), digits_value(t + 5, 2), digits_value(t + 8, 2), &days));
        int32_t y = (int32_t)(days - UNIX_DAY0);
        return column_fixed(c, row, &y);
    }
    case A_TIMESTAMP: {
        int64_t x;
        if (kind == K_TIMESTAMP) {
            if (!timestamp_ok(t, n)) return FALLBACK;
            CHECK(stamp_micros(t, n, &x));
        } else if (kind == K_TIMESTAMPTZ) {
            if (!timestamptz_ok(t, n)) return FALLBACK;
            CHECK(stamp_micros(t, n - 3, &x));
        } else {
            return FALLBACK;
        }
        return column_fixed(c, row, &x);
    }
    case A_STRING:
        switch (kind) {
        case K_TEXT:
            CHECK(valid_utf8(t, n));
            return column_var(c, row, t, n);
        case K_JSON:
            /* the document null is the text "null", SQL NULL a null (n < 0, above) */
            CHECK(valid_utf8(t, n));
            return column_var(c, row, t, n);
        case K_NUMERIC:
            if (!numeric_ok(t, n)) return FALLBACK;
            return column_var(c, row, t, n);
        case K_TIME: {
            int pad = time_pad(t, n);
            CHECK(pad);
            CHECK(grow_put(&c->data, t, n));
            CHECK(grow_put(&c->data, ZEROS, pad));
            return column_end_var(c, row);
        }
        }
        return FALLBACK;
    case A_BINARY: {
        if (kind != K_BYTEA) return FALLBACK;
        Buf b; /* put_unhex writes a Buf: point one at the column's data */
        b.p = NULL;
        CHECK(grow_reserve(&c->data, n / 2 + 1));
        b.p = c->data.p;
        b.len = c->data.len;
        b.cap = c->data.cap;
        int rc = put_unhex(&b, t, n); /* fits: never grows */
        if (rc < 0) return rc;
        c->data.len = b.len;
        return column_end_var(c, row);
    }
    case A_LIST:
        return arrow_list(c, row, kind, v);
    }
    return FALLBACK;
}

/* A one-dimensional array's text, ``{a,NULL,"b \"c\""}`` (the default bounds: no ``[l:u]=``
 * prefix), its elements converted as a column of their kind's would be. Anything else (more
 * dimensions, other bounds) is the reference's: its typed value is null for those. */
static int arrow_list(Column *c, Py_ssize_t row, int kind, Col v) {
    const unsigned char *t = v.p;
    Py_ssize_t n = v.n, i = 1;
    if (n < 2 || t[0] != '{' || t[n - 1] != '}') return FALLBACK;
    Column *e = c->child;
    unsigned char stack[256];
    Grow tmp = {NULL, 0, 0};
    int rc = 0;
    if (n == 2) return column_end_var(c, row); /* {} */
    while (rc == 0) {
        Col item;
        if (i >= n - 1) { rc = FALLBACK; break; }
        if (t[i] == '"') { /* quoted: backslash escapes */
            tmp.len = 0;
            i++;
            while (i < n - 1 && t[i] != '"') {
                if (t[i] == '\\') i++;
                if (i >= n - 1) break;
                if (tmp.p == NULL) { tmp.p = stack; tmp.cap = sizeof stack; }
                if (tmp.len == tmp.cap) {
                    unsigned char *p = PyMem_RawMalloc(tmp.cap * 2);
                    if (p == NULL) { rc = ERROR; break; }
                    memcpy(p, tmp.p, tmp.len);
                    if (tmp.p != stack) PyMem_RawFree(tmp.p);
                    tmp.p = p;
                    tmp.cap *= 2;
                }
                tmp.p[tmp.len++] = t[i++];
            }
            if (rc) break;
            if (i >= n - 1) { rc = FALLBACK; break; }
            i++; /* the closing quote */
            item.p = tmp.p == NULL ? stack : tmp.p;
            item.n = tmp.len;
        } else {
            Py_ssize_t start = i;
            while (i < n - 1 && t[i] != ',') {
                if (t[i] == '{' || t[i] == '}' || t[i] == '"' || t[i] == '\\') { rc = FALLBACK; break; }
                i++;
            }
            if (rc) break;
            item.p = t + start;
            item.n = i - start;
            if (item.n == 0) { rc = FALLBACK; break; }
            if (item.n == 4 && memcmp(item.p, "NULL", 4) == 0) item.n = -1;
        }
        rc = arrow_value(e, e->n, kind, item);
        if (rc) break;
        if (i == n - 1) break; /* the closing brace */
        if (t[i] != ',') { rc = FALLBACK; break; }
        i++;
    }
    if (tmp.p != NULL && tmp.p != stack) PyMem_RawFree(tmp.p);
    if (rc) return rc;
    return column_end_var(c, row);
}

/* -- ArrowRows --------------------------------------------------------------------------------- */

/* buffers() appends one entry a metadata column, in M_ order, and the _unchanged_toast lists'
 * offsets just before their names: the slots arrow_abi.Slot names */
_Static_assert((int)S_TOAST_OFFSETS == (int)M_TOAST_NAME && (int)S_COUNT == (int)M_COUNT + 1
               && (int)S_TOAST_NAME == (int)M_TOAST_NAME + 1
               && (int)S_TABLE_VERSION == (int)M_TABLE_VERSION + 1,
               "buffers() slots: see arrow_abi.Slot");

typedef struct {
    PyObject_HEAD
    Py_ssize_t ncols, nkeys, nlists, rows;
    int taken;            /* buffers() has taken the columns' memory: nothing more to append */
    int scanning;         /* a scan() runs without the GIL: no other call may touch the columns */
    Column *cols;         /* ncols table columns, nkeys key struct fields, M_COUNT metadata,
                             then the elements of each list column, in column order */
    Py_ssize_t *keys;     /* key columns, as table column indexes */
    Grow toast_offsets;   /* the _unchanged_toast list's int32 offsets */
    PyObject *names;      /* tuple of bytes: the table's column names (for _unchanged_toast) */
    Col *newc, *oldc;
    Mark *marks;
} ArrowRows;

static Column *meta(ArrowRows *self, int m) { return &self->cols[self->ncols + self->nkeys + m]; }

static Py_ssize_t total_columns(ArrowRows *self) {
    return self->ncols + self->nkeys + M_COUNT + self->nlists;
}

static void ArrowRows_dealloc(ArrowRows *self) {
    if (self->cols != NULL)
        for (Py_ssize_t i = 0; i < total_columns(self); i++) column_free(&self->cols[i]);
    PyMem_Free(self->cols);
    PyMem_Free(self->keys);
    PyMem_RawFree(self->toast_offsets.p);
    PyMem_Free(self->newc);
    PyMem_Free(self->marks);
    Py_XDECREF(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ArrowRows(columns: tuple[(arrow kind, precision, scale, element kind)], keys: tuple[int],
 *           names: tuple[bytes]); a list's precision and scale are its elements' */
static int ArrowRows_init(ArrowRows *self, PyObject *args, PyObject *kw) {
    PyObject *specs, *keys, *names;
    if (!PyArg_ParseTuple(args, "O!O!O!:ArrowRows", &PyTuple_Type, &specs, &PyTuple_Type, &keys,
                          &PyTuple_Type, &names))
        return -1;
    if (self->cols != NULL) { PyErr_SetString(PyExc_TypeError, "ArrowRows is initialised once"); return -1; }
    Py_ssize_t n = PyTuple_GET_SIZE(specs), k = PyTuple_GET_SIZE(keys);
    if (PyTuple_GET_SIZE(names) != n) { PyErr_SetString(PyExc_ValueError, "one name per column"); return -1; }
    self->ncols = n;
    self->nkeys = k;
    Py_ssize_t lists = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != SPEC_COUNT) {
            PyErr_SetString(PyExc_ValueError, "a column spec is (kind, precision, scale, element kind)");
            return -1;
        }
        lists += PyLong_AsLong(PyTuple_GET_ITEM(spec, SPEC_KIND)) == A_LIST;
    }
    if (PyErr_Occurred()) return -1;
    self->nlists = lists;
    self->cols = PyMem_Calloc(n + k + M_COUNT + lists, sizeof(Column));
    self->keys = PyMem_Calloc(k + 1, sizeof(Py_ssize_t));
    self->newc = PyMem_Calloc(2 * n + 2, sizeof(Col));
    self->marks = PyMem_Calloc(n + k + M_COUNT + lists + 1, sizeof(Mark));
    if (!self->cols || !self->keys || !self->newc || !self->marks) { PyErr_NoMemory(); return -1; }
    self->oldc = self->newc + n + 1;
    Py_ssize_t child = n + k + M_COUNT;
    _Static_assert(SPEC_KIND == 0 && SPEC_PRECISION == 1 && SPEC_SCALE == 2 && SPEC_ELEMENT == 3
                   && SPEC_COUNT == 4, "a spec parses as (kind, precision, scale, element)");
    for (Py_ssize_t i = 0; i < n; i++) {
        int kind, precision, scale, element;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(specs, i), "iiii", &kind, &precision, &scale, &element))
            return -1;
        if (kind < 0 || kind >= A_COUNT || element < 0 || element >= A_LIST
            || !PyBytes_Check(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_ValueError, "bad column spec or name");
            return -1;
        }
        if (kind == A_LIST) {
            if (column_init(&self->cols[i], A_LIST, 0, 0) < 0
                || column_init(&self->cols[child], element, precision, scale) < 0)
                return nomem();
            self->cols[i].child = &self->cols[child++];
        } else if (column_init(&self->cols[i], kind, precision, scale) < 0) {
            return nomem();
        }
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(keys, j));
        if (at == -1 && PyErr_Occurred()) return -1;
        if (at < 0 || at >= n) { PyErr_SetString(PyExc_ValueError, "key index out of range"); return -1; }
        self->keys[j] = at;
        Column *src = &self->cols[at];
        if (src->kind == A_LIST) { PyErr_SetString(PyExc_ValueError, "a list key column"); return -1; }
        if (column_init(&self->cols[n + j], src->kind, src->precision, src->scale) < 0) return nomem();
    }
    for (int m = 0; m < M_COUNT; m++)
        if (column_init(meta(self, m), META_KINDS[m], 0, 0) < 0) return nomem();
    int32_t zero = 0;
    if (grow_put(&self->toast_offsets, &zero, 4) < 0) return nomem();
    Py_INCREF(names);
    self->names = names;
    return 0;
}

static void mark(ArrowRows *self) {
    for (Py_ssize_t i = 0; i < total_columns(self); i++) {
        Column *c = &self->cols[i];
        self->marks[i] = (Mark){c->values.len, c->data.len, c->nulls, c->n};
    }
    self->marks[total_columns(self)].values = self->toast_offsets.len;
}

/* forget a row half written (bitmap bits past it are rewritten by the next row) */
static void rollback(ArrowRows *self) {
    for (Py_ssize_t i = 0; i < total_columns(self); i++) {
        Column *c = &self->cols[i];
        if (c->kind != A_BOOL) c->values.len = self->marks[i].values;
        c->data.len = self->marks[i].data;
        c->nulls = self->marks[i].nulls;
        c->n = self->marks[i].n;
    }
    self->toast_offsets.len = self->marks[total_columns(self)].values;
}

static int put_int64(Column *c, Py_ssize_t row, int64_t v) { return column_fixed(c, row, &v); }

/* one Insert/Update/Delete message as a row (to_arrow.typed_batch's image, key and metadata) */
static int append_row(ArrowRows *self, const unsigned char *d, Py_ssize_t len,
                      const unsigned char *kinds, int op, int allow_u, uint64_t lsn, uint64_t seq,
                      int64_t commit_lsn, int64_t commit_ts, int64_t xid, int32_t version) {
    Layout l;
    Py_ssize_t row = self->rows, n = self->ncols;
    CHECK(parse_message(d, len, n, self->newc, self->oldc, &l, allow_u));
    /* the row image: the new row, else the whole old row ('O'), else only the key ('K') */
    Col *image = l.op == 2 ? self->oldc : self->newc;
    int key_only = l.op == 2 && l.old_kind == 'K';
    for (Py_ssize_t i = 0; i < n; i++) {
        Col v = image[i];
        if (key_only) {
            int is_key = 0;
            for (Py_ssize_t j = 0; j < self->nkeys; j++) is_key |= self->keys[j] == i;
            if (!is_key) v.n = -1;
        }
        CHECK(arrow_value(&self->cols[i], row, kinds[i], v));
    }
    for (Py_ssize_t j = 0; j < self->nkeys; j++) {
        Py_ssize_t at = self->keys[j];
        CHECK(arrow_value(&self->cols[n + j], row, kinds[at], l.key_from[at]));
    }
    if (self->nkeys) {
        Column *kv = meta(self, M_KEY_VALID);
        CHECK(bit_set(&kv->valid, row, 1));
    }
    Column *names = meta(self, M_TOAST_NAME);
    if (l.op != 2)
        for (Py_ssize_t i = 0; i < n; i++)
            if (self->newc[i].n == UNCHANGED) {
                PyObject *name = PyTuple_GET_ITEM(self->names, i);
                CHECK(column_var(names, names->n,
                                 (const unsigned char *)PyBytes_AS_STRING(name),
                                 PyBytes_GET_SIZE(name)));
            }
    int32_t end = (int32_t)names->n;
    CHECK(grow_put(&self->toast_offsets, &end, 4));
    const char *name = OP_NAMES[op];
    CHECK(column_var(meta(self, M_OP), row, (const unsigned char *)name, (Py_ssize_t)strlen(name)));
    CHECK(put_int64(meta(self, M_LSN), row, (int64_t)lsn));
    CHECK(put_int64(meta(self, M_SEQ), row, (int64_t)seq));
    CHECK(put_int64(meta(self, M_COMMIT_LSN), row, commit_lsn));
    CHECK(put_int64(meta(self, M_COMMIT_TS), row, commit_ts));
    CHECK(put_int64(meta(self, M_XID), row, xid));
    /* the relation version the row was decoded with (0: an unnumbered one, null) */
    if (version > 0) CHECK(column_fixed(meta(self, M_TABLE_VERSION), row, &version));
    else CHECK(column_null(meta(self, M_TABLE_VERSION), row));
    return 0;
}

static uint64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* scan(payload, pos, seq, stop, relation_id, kinds, commit_lsn, commit_ts, xid, flags, version)
 *   -> (pos, seq, rows appended)
 * Appends the frames from ``pos`` on (seq = the last one's seq before them) while they are row
 * changes of ``relation_id`` below ``stop`` that these rules write; stops before any other frame
 * (the caller's to handle, e.g. by the reference path). Changes of ops not wanted are passed. */
static PyObject *ArrowRows_scan(ArrowRows *self, PyObject *const *args, Py_ssize_t nargs) {
    if (self->cols == NULL) { PyErr_SetString(PyExc_TypeError, "ArrowRows not initialised"); return NULL; }
    if (nargs != 11) { PyErr_SetString(PyExc_TypeError, "scan() takes 11 arguments"); return NULL; }
    if (self->taken) { PyErr_SetString(PyExc_ValueError, "scan() after buffers()"); return NULL; }
    if (self->scanning) { PyErr_SetString(PyExc_RuntimeError, "ArrowRows is being scanned"); return NULL; }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long long seq = PyLong_AsLongLong(args[2]), stop = PyLong_AsLongLong(args[3]);
    unsigned long relation_id = PyLong_AsUnsignedLong(args[4]);
    long long commit_lsn = PyLong_AsLongLong(args[6]), commit_ts = PyLong_AsLongLong(args[7]);
    long long xid = PyLong_AsLongLong(args[8]);
    long flags = PyLong_AsLong(args[9]);
    long version = PyLong_AsLong(args[10]);
    if (PyErr_Occurred()) return NULL;
    if (version < 0 || version > INT32_MAX) { PyErr_SetString(PyExc_ValueError, "version out of range"); return NULL; }
    if (!PyBytes_Check(args[5]) || PyBytes_GET_SIZE(args[5]) != self->ncols) {
        PyErr_SetString(PyExc_ValueError, "kinds: one byte per column");
        return NULL;
    }
    const unsigned char *kinds = (const unsigned char *)PyBytes_AS_STRING(args[5]);
    for (Py_ssize_t i = 0; i < self->ncols; i++)
        if (kinds[i] >= K_COUNT) { PyErr_SetString(PyExc_ValueError, "unknown kind"); return NULL; }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *d = view.buf;
    Py_ssize_t end = view.len, appended = 0;
    int rc = 0;
    if (pos < 0) pos = end;
    /* Nothing below touches a Python object but the payload's buffer (held by ``view``) and
     * ``self->names`` (an immutable tuple of bytes it keeps): let the server's other threads run,
     * so pages of several readers are scanned on several cores. */
    self->scanning = 1;
    Py_BEGIN_ALLOW_THREADS
    while (end - pos > 12 && seq + 1 < stop) {
        uint64_t lsn = be64(d + pos);
        Py_ssize_t length = be32(d + pos + 8), start = pos + 12;
        if (length < 5 || length > end - start) break;
        unsigned char tag = d[start];
        int op = tag == 'I' ? ((flags & F_READ) ? ROW_READ : ROW_INSERT)
                 : tag == 'U' ? ROW_UPDATE : tag == 'D' ? ROW_DELETE : -1;
        if (op < 0 || be32(d + start + 1) != relation_id) break;
        if (flags & F_WANT(op)) {
            mark(self);
            rc = append_row(self, d + start, length, kinds, op, (flags & F_ALLOW_U) != 0, lsn,
                            (uint64_t)(seq + 1), commit_lsn, commit_ts, xid, (int32_t)version);
            if (rc < 0) {
                rollback(self);
                if (rc != ERROR) rc = 0; /* FALLBACK: the caller takes this change */
                break;
            }
            self->rows++;
            appended++;
        }
        seq++;
        pos = start + length;
    }
    Py_END_ALLOW_THREADS
    self->scanning = 0;
    PyBuffer_Release(&view);
    if (rc == ERROR) { nomem(); return NULL; }
    return Py_BuildValue("(nLn)", pos, seq, appended);
}

/* A buffer handed over to Arrow as it is (``pa.py_buffer`` wraps it without a copy): it owns
 * the memory a Grow had, and frees it when Arrow lets go of it. A page's buffers are tens of
 * megabytes; copying them into bytes cost a copy and, in a fresh process, the page faults of
 * as much new memory. */
typedef struct { PyObject_HEAD unsigned char *p; Py_ssize_t len; } Owned;

static int Owned_getbuffer(Owned *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p, self->len, 1, flags);
}

static void Owned_dealloc(Owned *self) {
    PyMem_RawFree(self->p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Owned_as_buffer = {(getbufferproc)Owned_getbuffer, NULL};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pgfeed.encoding._transcode.Owned",
    .tp_basicsize = sizeof(Owned),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An Arrow buffer taken from ArrowRows (read-only, no copy).",
    .tp_dealloc = (destructor)Owned_dealloc,
    .tp_as_buffer = &Owned_as_buffer,
};

/* the first ``n`` bytes of ``g``, taken: ``g`` is left empty */
static PyObject *grow_take(Grow *g, Py_ssize_t n) {
    if (n > g->len) { /* a bitmap never written past its last set bit's byte */
        if (grow_reserve(g, n - g->len) < 0) { nomem(); return NULL; }
        memset(g->p + g->len, 0, n - g->len);
        g->len = n;
    }
    if (n == 0) return PyBytes_FromStringAndSize(NULL, 0);
    Owned *out = PyObject_New(Owned, &OwnedType);
    if (out == NULL) return NULL;
    out->p = g->p;
    out->len = n;
    *g = (Grow){0};
    return (PyObject *)out;
}

/* one column's entry of buffers() (B_*: validity or None, values or None, data or None, null
 * count), taken */
static PyObject *column_buffers(Column *c, Py_ssize_t rows, int values) {
    Py_ssize_t bitmap = (rows + 7) / 8;
    PyObject *valid = c->nulls ? grow_take(&c->valid, bitmap) : Py_NewRef(Py_None);
    PyObject *vals = !values ? Py_NewRef(Py_None)
                     : grow_take(&c->values, is_var(c->kind) ? 4 * (rows + 1)
                                             : c->kind == A_BOOL ? bitmap : c->width * rows);
    PyObject *data = is_var(c->kind) ? grow_take(&c->data, c->data.len) : Py_NewRef(Py_None);
    PyObject *nulls = PyLong_FromSsize_t(c->nulls), *out = PyTuple_New(B_COUNT);
    if (valid == NULL || vals == NULL || data == NULL || nulls == NULL || out == NULL) {
        Py_XDECREF(valid); Py_XDECREF(vals); Py_XDECREF(data); Py_XDECREF(nulls); Py_XDECREF(out);
        return NULL;
    }
    PyTuple_SET_ITEM(out, B_VALID, valid);
    PyTuple_SET_ITEM(out, B_VALUES, vals);
    PyTuple_SET_ITEM(out, B_DATA, data);
    PyTuple_SET_ITEM(out, B_NULLS, nulls);
    return out;
}

/* buffers() -> [table columns..., key fields..., op, lsn, seq, commit_lsn, commit_ts, xid,
 *               (toast list offsets), toast names, key validity, table version, list elements...]; a list
 *               column's own entry holds its validity and offsets. The buffers are taken, not
 *               copied: called once, when the page's rows are all appended. */
static PyObject *ArrowRows_buffers(ArrowRows *self, PyObject *unused) {
    if (self->cols == NULL) { PyErr_SetString(PyExc_TypeError, "ArrowRows not initialised"); return NULL; }
    if (self->taken) { PyErr_SetString(PyExc_ValueError, "buffers() taken already"); return NULL; }
    if (self->scanning) { PyErr_SetString(PyExc_RuntimeError, "ArrowRows is being scanned"); return NULL; }
    self->taken = 1;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    Py_ssize_t rows = self->rows;
    for (Py_ssize_t i = 0; i < total_columns(self); i++) {
        PyObject *item;
        Column *c = &self->cols[i];
        if (c == meta(self, M_TOAST_NAME)) {
            PyObject *offsets = grow_take(&self->toast_offsets, 4 * (rows + 1));
            if (offsets == NULL || PyList_Append(out, offsets) < 0) { Py_XDECREF(offsets); Py_DECREF(out); return NULL; }
            Py_DECREF(offsets);
            item = column_buffers(c, c->n, 1);
        } else if (c == meta(self, M_KEY_VALID)) {
            Py_ssize_t nulls = c->nulls;
            c->nulls = self->nkeys ? 0 : rows;
            item = column_buffers(c, rows, 0);
            c->nulls = nulls;
        } else {
            item = column_buffers(c, i < self->ncols + self->nkeys + M_COUNT ? rows : c->n, 1);
        }
        if (item == NULL || PyList_Append(out, item) < 0) { Py_XDECREF(item); Py_DECREF(out); return NULL; }
        Py_DECREF(item);
    }
    return out;
}

static PyObject *ArrowRows_len(ArrowRows *self, void *unused) { return PyLong_FromSsize_t(self->rows); }

static PyMethodDef ArrowRows_methods[] = {
    {"scan", (PyCFunction)(void (*)(void))ArrowRows_scan, METH_FASTCALL,
     "scan(payload, pos, seq, stop, relation_id, kinds, commit_lsn, commit_ts, xid, flags, version) "
     "-> (pos, seq, appended)"},
    {"buffers", (PyCFunction)ArrowRows_buffers, METH_NOARGS,
     "the Arrow buffers of every column, taken (once, after the last scan)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ArrowRows_getset[] = {
    {"rows", (getter)ArrowRows_len, NULL, "rows appended", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ArrowRowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pgfeed.encoding._transcode.ArrowRows",
    .tp_basicsize = sizeof(ArrowRows),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Typed Arrow buffers of one table's row changes (see arrow_rows.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ArrowRows_init,
    .tp_dealloc = (destructor)ArrowRows_dealloc,
    .tp_methods = ArrowRows_methods,
    .tp_getset = ArrowRows_getset,
};

/*
 * Compiled form of encoding/transcode.py's generated encoders: one pgoutput Insert, Update or
 * Delete message (TupleData of 't'/'n' columns) -> a pgfeed.v1.Change or a change event's JSON,
 * written straight from the column texts.
 *
 * transcode.py is the specification: every rule here (which texts are accepted, what each kind
 * becomes) mirrors a line of its _JSON_CODE / _PROTO_CODE tables, and anything outside them
 * raises ValueError so the caller takes the reference path (RawChange.load). Both
 * implementations are held to the reference by tests/unit/encoding/test_transcode.py.
 *
 * The module is optional: without a C compiler the package installs without it and transcode.py
 * uses its generated Python functions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* value kinds, one byte per column: generated from the type registry (service/pgfeed/types) */
#include "_kinds.h"
/* protobuf field tags PB_<MESSAGE>_<FIELD>: generated from protos/pgfeed/v1/feed.proto */
#include "_proto_tags.h"

/* fallback: not a shape the fast path writes; the caller loads the change instead */
#define FALLBACK (-1)
#define ERROR (-2) /* a Python exception is set */

/* -- output buffer ---------------------------------------------------------------------------- */

typedef struct {
    unsigned char *p;
    Py_ssize_t len, cap;
    unsigned char stack[1024];
} Buf;

static void buf_init(Buf *b) { b->p = b->stack; b->len = 0; b->cap = sizeof b->stack; }
static void buf_free(Buf *b) { if (b->p != b->stack) PyMem_Free(b->p); }

static int buf_grow(Buf *b, Py_ssize_t n) {
    Py_ssize_t cap = b->cap * 2;
    while (cap < b->len + n) cap *= 2;
    unsigned char *p;
    if (b->p == b->stack) {
        p = PyMem_Malloc(cap);
        if (p != NULL) memcpy(p, b->stack, b->len);
    } else {
        p = PyMem_Realloc(b->p, cap);
    }
    if (p == NULL) { PyErr_NoMemory(); return ERROR; }
    b->p = p;
    b->cap = cap;
    return 0;
}

#define RESERVE(b, n) do { if ((b)->len + (Py_ssize_t)(n) > (b)->cap && buf_grow((b), (n)) < 0) \
                               return ERROR; } while (0)

static int put(Buf *b, const void *s, Py_ssize_t n) {
    RESERVE(b, n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

static int put1(Buf *b, unsigned char c) {
    RESERVE(b, 1);
    b->p[b->len++] = c;
    return 0;
}

#define PUT(b, s, n) do { if (put((b), (s), (n)) < 0) return ERROR; } while (0)
#define PUTS(b, lit) PUT(b, lit, sizeof(lit) - 1)
#define PUT1(b, c) do { if (put1((b), (c)) < 0) return ERROR; } while (0)
#define CHECK(x) do { int r_ = (x); if (r_ < 0) return r_; } while (0)

/* protobuf base-128 varint; negative int64 values arrive as their two's complement */
static int put_varint(Buf *b, uint64_t v) {
    RESERVE(b, 10);
    unsigned char *o = b->p + b->len;
    while (v >= 0x80) { *o++ = (unsigned char)(v | 0x80); v >>= 7; }
    *o++ = (unsigned char)v;
    b->len = o - b->p;
    return 0;
}

static int varint_size(uint64_t v) { int n = 1; while (v >= 0x80) { v >>= 7; n++; } return n; }

/* -- TupleData ---------------------------------------------------------------------------------- */

typedef struct { const unsigned char *p; Py_ssize_t n; } Col; /* n < 0: NULL */

#define UNCHANGED (-2) /* Col.n of an unchanged TOAST column ('u'), when the caller takes them */

/* pgoutput TupleData (Int16 column count, then per column 'n', or 't' Int32 length + text):
 * the column count must be the relation version's; 'u' (unchanged TOAST, unless ``allow_u``)
 * and 'b' (binary) columns are the reference path's. */
static int parse_tuple(const unsigned char *d, Py_ssize_t end, Py_ssize_t *pos, Py_ssize_t ncols,
                       Col *cols, int allow_u) {
    Py_ssize_t i = *pos;
    if (end - i < 2 || ((d[i] << 8) | d[i + 1]) != ncols) return FALLBACK;
    i += 2;
    for (Py_ssize_t c = 0; c < ncols; c++) {
        if (i >= end) return FALLBACK;
        if (d[i] == 't') {
            if (end - i < 5) return FALLBACK;
            uint32_t n = ((uint32_t)d[i + 1] << 24) | ((uint32_t)d[i + 2] << 16)
                         | ((uint32_t)d[i + 3] << 8) | d[i + 4];
            i += 5;
            if ((Py_ssize_t)n > end - i) return FALLBACK;
            cols[c].p = d + i;
            cols[c].n = n;
            i += n;
        } else if (d[i] == 'n') {
            cols[c].n = -1;
            i += 1;
        } else if (d[i] == 'u' && allow_u) {
            cols[c].n = UNCHANGED;
            i += 1;
        } else {
            return FALLBACK;
        }
    }
    *pos = i;
    return 0;
}

typedef struct {
    int op;        /* 0 insert, 1 update, 2 delete */
    int old_kind;  /* 0 (no old tuple), 'K' (key columns) or 'O' (whole old row) */
    Col *key_from; /* the tuple the key columns are read from */
} Layout;

/* Insert ('N' tuple), Update (optional 'K'/'O' tuple, then 'N') and Delete ('K' or 'O'): see
 * PostgreSQL's logicalrep_write_insert/update/delete (proto.c). */
static int parse_message(const unsigned char *d, Py_ssize_t len, Py_ssize_t ncols, Col *newc,
                         Col *oldc, Layout *out, int allow_u) {
    if (len < 6) return FALLBACK;
    unsigned char tag = d[0], marker = d[5];
    Py_ssize_t pos = 6;
    out->old_kind = 0;
    out->key_from = newc;
    if (tag == 'I') {
        out->op = 0;
        if (marker != 'N') return FALLBACK;
        CHECK(parse_tuple(d, len, &pos, ncols, newc, allow_u));
    } else if (tag == 'U') {
        out->op = 1;
        if (marker == 'N') {
            CHECK(parse_tuple(d, len, &pos, ncols, newc, allow_u));
        } else if (marker == 'K' || marker == 'O') {
            out->old_kind = marker;
            out->key_from = oldc;
            CHECK(parse_tuple(d, len, &pos, ncols, oldc, allow_u));
            if (pos >= len || d[pos] != 'N') return FALLBACK;
            pos += 1;
            CHECK(parse_tuple(d, len, &pos, ncols, newc, allow_u));
        } else {
            return FALLBACK;
        }
    } else if (tag == 'D') {
        out->op = 2;
        if (marker != 'K' && marker != 'O') return FALLBACK;
        out->old_kind = marker;
        out->key_from = oldc;
        CHECK(parse_tuple(d, len, &pos, ncols, oldc, allow_u));
    } else {
        return FALLBACK;
    }
    return pos == len ? 0 : FALLBACK;
}

/* -- text forms (DateStyle ISO) --------------------------------------------------------------- */

static int is_digits(const unsigned char *p, Py_ssize_t n) {
    if (n <= 0) return 0;
    for (Py_ssize_t i = 0; i < n; i++) if (p[i] < '0' || p[i] > '9') return 0;
    return 1;
}

static int64_t digits_value(const unsigned char *p, Py_ssize_t n) {
    int64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) v = v * 10 + (p[i] - '0');
    return v;
}

/* an int2/int4/int8 text: optional '-', then at most 19 digits that fit an int64 */
static int parse_int(const unsigned char *p, Py_ssize_t n, int64_t *out) {
    int neg = n > 0 && p[0] == '-';
    if (neg) { p++; n--; }
    if (!is_digits(p, n) || n > 19) return FALLBACK;
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) v = v * 10 + (uint64_t)(p[i] - '0');
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg) return FALLBACK;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* a float4/float8 text (digits, exponent, NaN, Infinity) as Python's float() reads it
 * (PyOS_string_to_double: an optional sign, then inf, infinity or nan in any case, or decimal
 * digits with an optional point and exponent; no spaces, underscores or hex), converted by
 * strtod_l in the C locale, correctly rounded as Python's own. No Python call: it runs without
 * the GIL (ArrowRows.scan). */
static locale_t c_numeric = (locale_t)0; /* made by the module's init */

static int parse_double(const unsigned char *t, Py_ssize_t n, double *out) {
    char text[64];
    if (n == 0 || n >= (Py_ssize_t)sizeof text || c_numeric == (locale_t)0) return FALLBACK;
    memcpy(text, t, n);
    text[n] = 0;
    const char *s = text;
    int negative = *s == '-';
    if (*s == '+' || *s == '-') s++;
    if (strcasecmp(s, "inf") == 0 || strcasecmp(s, "infinity") == 0) {
        *out = negative ? -HUGE_VAL : HUGE_VAL;
        return 0;
    }
    if (strcasecmp(s, "nan") == 0) {
        *out = copysign(NAN, negative ? -1.0 : 1.0);
        return 0;
    }
    const char *p = s;
    int digits = 0;
    while (*p >= '0' && *p <= '9') { p++; digits++; }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') { p++; digits++; }
    }
    if (digits == 0) return FALLBACK;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return FALLBACK;
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p != 0) return FALLBACK;
    char *end;
    double v = strtod_l(text, &end, c_numeric);
    if (end != text + n) return FALLBACK;
    *out = v;
    return 0;
}

/* PostgreSQL trims trailing zeros of a fraction; ISO 8601 as Python writes it has six digits or
 * none. A text of `base` characters has no fraction; base + 2 .. base + 7 one of 1..6 digits.
 * Returns the zeros to append, or FALLBACK for any other length (transcode.py's *_PAD). */
static int fraction_pad(Py_ssize_t n, Py_ssize_t base) {
    if (n == base || n == base + 7) return 0;
    if (n >= base + 2 && n < base + 7) return (int)(base + 7 - n);
    return FALLBACK;
}

static const char ZEROS[] = "000000";

/* date's ordinal (0001-01-01 is 1), as Python's date.toordinal; FALLBACK for no such date */
static int ordinal(int64_t y, int64_t m, int64_t d, int64_t *out) {
    static const int before[] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
    static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1 || y > 9999 || m < 1 || m > 12 || d < 1) return FALLBACK;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d > dim[m - 1] + (m == 2 && leap)) return FALLBACK;
    int64_t p = y - 1;
    *out = p * 365 + p / 4 - p / 100 + p / 400 + before[m - 1] + (m > 2 && leap) + d;
    return 0;
}

#define UNIX_DAY0 719163 /* date(1970, 1, 1).toordinal() */

/* ``YYYY-MM-DD HH:MM:SS[.f{1,6}]`` (timestamp_ok) -> a google.protobuf.Timestamp Value field
 * (transcode._stamp) */
static int put_stamp(Buf *b, unsigned char field, const unsigned char *t, Py_ssize_t n) {
    int64_t days;
    CHECK(ordinal(digits_value(t, 4), digits_value(t + 5, 2), digits_value(t + 8, 2), &days));
    int64_t seconds = (days - UNIX_DAY0) * 86400 + digits_value(t + 11, 2) * 3600
                      + digits_value(t + 14, 2) * 60 + digits_value(t + 17, 2);
    int64_t nanos = 0;
    if (n > 19) {
        if (t[19] != '.') return FALLBACK;
        Py_ssize_t k = n - 20;
        nanos = digits_value(t + 20, k);
        for (Py_ssize_t i = k; i < 9; i++) nanos *= 10;
    }
    int size = (seconds ? 1 + varint_size((uint64_t)seconds) : 0)
               + (nanos ? 1 + varint_size((uint64_t)nanos) : 0);
    PUT1(b, field);
    CHECK(put_varint(b, (uint64_t)size));
    if (seconds) { PUT1(b, PB_TIMESTAMP_SECONDS); CHECK(put_varint(b, (uint64_t)seconds)); }
    if (nanos) { PUT1(b, PB_TIMESTAMP_NANOS); CHECK(put_varint(b, (uint64_t)nanos)); }
    return 0;
}

/* Shapes of PostgreSQL's ISO output, checked character by character: a damaged value must take
 * the reference path, which decides what it is, rather than be written as a date or time. */
static int date_ok(const unsigned char *t) { /* YYYY-MM-DD, a real date */
    int64_t unused;
    return is_digits(t, 4) && t[4] == '-' && is_digits(t + 5, 2) && t[7] == '-'
           && is_digits(t + 8, 2)
           && ordinal(digits_value(t, 4), digits_value(t + 5, 2), digits_value(t + 8, 2),
                      &unused) == 0;
}

/* HH:MM:SS[.f{1,6}] of n characters; PostgreSQL trims a fraction's trailing zeros, so one ending
 * in '0' is not its output. '24:00:00' (valid SQL, not a Python time) is not transcoded. */
static int clock_ok(const unsigned char *t, Py_ssize_t n) {
    if (n < 8 || !is_digits(t, 2) || t[2] != ':' || !is_digits(t + 3, 2) || t[5] != ':'
        || !is_digits(t + 6, 2) || digits_value(t, 2) > 23 || digits_value(t + 3, 2) > 59
        || digits_value(t + 6, 2) > 59)
        return 0;
    if (n == 8) return 1;
    return n <= 15 && t[8] == '.' && is_digits(t + 9, n - 9) && t[n - 1] != '0';
}

/* the zeros to pad a time's fraction to six digits, or FALLBACK */
static int time_pad(const unsigned char *t, Py_ssize_t n) {
    if (!clock_ok(t, n)) return FALLBACK;
    return fraction_pad(n, 8);
}

/* YYYY-MM-DD HH:MM:SS[.f]: a year past 9999 moves the '-', BC ends in " BC" */
static int timestamp_ok(const unsigned char *t, Py_ssize_t n) {
    return n >= 19 && t[10] == ' ' && date_ok(t) && clock_ok(t + 11, n - 11);
}

/* the same with the session's time zone, UTC: "+00" */
static int timestamptz_ok(const unsigned char *t, Py_ssize_t n) {
    return n >= 22 && memcmp(t + n - 3, "+00", 3) == 0 && timestamp_ok(t, n - 3);
}

static int hex_nibble(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* bytea's hex output ``\x0a1b...`` -> the bytes, appended to b */
static int put_unhex(Buf *b, const unsigned char *t, Py_ssize_t n) {
    if (n < 2 || t[0] != '\\' || t[1] != 'x' || (n - 2) % 2) return FALLBACK;
    RESERVE(b, (n - 2) / 2);
    unsigned char *o = b->p + b->len;
    for (Py_ssize_t i = 2; i < n; i += 2) {
        int hi = hex_nibble(t[i]), lo = hex_nibble(t[i + 1]);
        if (hi < 0 || lo < 0) return FALLBACK;
        *o++ = (unsigned char)(hi << 4 | lo);
    }
    b->len = o - b->p;
    return 0;
}

/* numeric's output: -?digits[.digits], NaN, Infinity, -Infinity (never an exponent) */
static int numeric_ok(const unsigned char *t, Py_ssize_t n) {
    if ((n == 3 && memcmp(t, "NaN", 3) == 0) || (n == 8 && memcmp(t, "Infinity", 8) == 0)
        || (n == 9 && memcmp(t, "-Infinity", 9) == 0))
        return 1;
    if (n > 0 && t[0] == '-') { t++; n--; }
    Py_ssize_t i = 0;
    while (i < n && t[i] >= '0' && t[i] <= '9') i++;
    if (i == 0) return 0;
    if (i == n) return 1;
    return t[i] == '.' && is_digits(t + i + 1, n - i - 1);
}

/* money in the C/English locales' text (service/pgfeed/types/money.py SHAPE: -?$d{1,3}(,ddd)*.dd) ->
 * the plain amount ("-1234.56") in out; its length, or FALLBACK for any other text */
static Py_ssize_t money_plain(const unsigned char *t, Py_ssize_t n, unsigned char out[40]) {
    Py_ssize_t i = 0, k = 0, run = 0; /* run: digits in the current group */
    int commas = 0;
    if (i < n && t[i] == '-') out[k++] = t[i++];
    if (i >= n || t[i++] != '$') return FALLBACK;
    while (i < n && t[i] != '.') {
        unsigned char c = t[i++];
        if (c == ',') {
            if (run < 1 || run > 3 || (commas > 0 && run != 3)) return FALLBACK;
            commas++;
            run = 0;
        } else if (c >= '0' && c <= '9' && k < 34) {
            out[k++] = c;
            run++;
        } else {
            return FALLBACK;
        }
    }
    if (run < 1 || (commas > 0 ? run != 3 : run > 3)) return FALLBACK;
    if (n - i != 3 || t[i + 1] < '0' || t[i + 1] > '9' || t[i + 2] < '0' || t[i + 2] > '9')
        return FALLBACK;
    out[k++] = '.';
    out[k++] = t[i + 1];
    out[k++] = t[i + 2];
    return k;
}

/* -- protobuf Value ----------------------------------------------------------------------------- */

static int put_ld(Buf *b, unsigned char field, const unsigned char *s, Py_ssize_t n) {
    PUT1(b, field);
    CHECK(put_varint(b, (uint64_t)n));
    PUT(b, s, n);
    return 0;
}

/* Well-formed UTF-8 (Unicode's table 3-7: no overlong forms, no surrogates, nothing past
 * U+10FFFF), exactly what Python's strict decoder accepts; no Python call, so it runs without the
 * GIL (ArrowRows.scan). */
static int valid_utf8(const unsigned char *t, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = t[i];
        if (c < 0x80) { i++; continue; }
        Py_ssize_t len;
        unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;      /* overlong */
            else if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;      /* overlong */
            else if (c == 0xF4) hi = 0x8F; /* past U+10FFFF */
        } else {
            return FALLBACK;
        }
        if (n - i < len || t[i + 1] < lo || t[i + 1] > hi) return FALLBACK;
        for (Py_ssize_t k = 2; k < len; k++)
            if (t[i + k] < 0x80 || t[i + k] > 0xBF) return FALLBACK;
        i += len;
    }
    return 0;
}

/* one column's serialized pgfeed.v1.Value (transcode._PROTO_CODE) */
static int proto_value(Buf *b, int kind, Col c) {
    const unsigned char *t = c.p;
    Py_ssize_t n = c.n;
    if (n < 0) { /* null_value: NULL_VALUE (0) */
        static const unsigned char null_value[2] = {PB_VALUE_NULL_VALUE, 0};
        PUT(b, null_value, 2);
        return 0;
    }
    switch (kind) {
    case K_TEXT:
        CHECK(valid_utf8(t, n)); /* protobuf strings must be valid UTF-8 */
        return put_ld(b, PB_VALUE_STRING_VALUE, t, n);
    case K_NUMERIC:
        if (!numeric_ok(t, n)) return FALLBACK;
        return put_ld(b, PB_VALUE_NUMERIC_VALUE, t, n);
    case K_JSON: /* the document null too: json_value "null", never null_value (SQL NULL) */
        return put_ld(b, PB_VALUE_JSON_VALUE, t, n);
    case K_BOOL:
        if (n == 1 && (t[0] == 't' || t[0] == 'f')) {
            unsigned char out[2] = {PB_VALUE_BOOL_VALUE, t[0] == 't'};
            PUT(b, out, 2);
            return 0;
        }
        return FALLBACK;
    case K_INT: {
        int64_t v;
        CHECK(parse_int(t, n, &v));
        PUT1(b, PB_VALUE_INT_VALUE);
        return put_varint(b, (uint64_t)v);
    }
    case K_FLOAT: {
        double v;
        CHECK(parse_double(t, n, &v));
        unsigned char out[9] = {PB_VALUE_DOUBLE_VALUE};
        memcpy(out + 1, &v, 8); /* fixed64, little-endian (as struct's '<d') */
#if PY_BIG_ENDIAN
        for (int i = 0; i < 4; i++) { unsigned char x = out[1 + i]; out[1 + i] = out[8 - i]; out[8 - i] = x; }
#endif
        PUT(b, out, 9);
        return 0;
    }
    case K_BYTEA: {
        if (n < 2) return FALLBACK;
        PUT1(b, PB_VALUE_BYTES_VALUE);
        CHECK(put_varint(b, (uint64_t)((n - 2) / 2)));
        return put_unhex(b, t, n);
    }
    case K_DATE: {
        if (n != 10 || !date_ok(t)) return FALLBACK;
        unsigned char head[2] = {PB_VALUE_DATE_VALUE, 10}; /* the tag and the length */
        PUT(b, head, 2);
        PUT(b, t, n);
        return 0;
    }
    case K_TIME: {
        int pad = time_pad(t, n);
        CHECK(pad);
        PUT1(b, PB_VALUE_TIME_VALUE);
        CHECK(put_varint(b, (uint64_t)(n + pad)));
        PUT(b, t, n);
        PUT(b, ZEROS, pad);
        return 0;
    }
    case K_TIMESTAMP:
        if (!timestamp_ok(t, n)) return FALLBACK;
        return put_stamp(b, PB_VALUE_LOCAL_TIMESTAMP_VALUE, t, n);
    case K_TIMESTAMPTZ:
        if (!timestamptz_ok(t, n)) return FALLBACK;
        return put_stamp(b, PB_VALUE_TIMESTAMP_VALUE, t, n - 3);
    case K_MONEY: {
        unsigned char plain[40];
        Py_ssize_t k = money_plain(t, n, plain);
        if (k < 0) return FALLBACK;
        return put_ld(b, PB_VALUE_NUMERIC_VALUE, plain, k);
    }
    }
    return FALLBACK;
}

/* -- JSON value --------------------------------------------------------------------------------- */

static int put_quoted(Buf *b, const unsigned char *t, Py_ssize_t n) {
    RESERVE(b, n + 2);
    b->p[b->len++] = '"';
    memcpy(b->p + b->len, t, n);
    b->len += n;
    b->p[b->len++] = '"';
    return 0;
}

/* text that is ASCII and needs no JSON escape is its own string body */
static int plain_ascii(const unsigned char *t, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = t[i];
        if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') return 0;
    }
    return 1;
}

/* the rare cases go back to Python: ``fn(text) -> JSON bytes`` */
static int put_call(Buf *b, PyObject *fn, const unsigned char *t, Py_ssize_t n) {
    PyObject *arg = PyBytes_FromStringAndSize((const char *)t, n);
    if (arg == NULL) return ERROR;
    PyObject *r = PyObject_CallOneArg(fn, arg);
    Py_DECREF(arg);
    if (r == NULL) return ERROR;
    if (!PyBytes_Check(r)) { Py_DECREF(r); PyErr_SetString(PyExc_TypeError, "expected bytes"); return ERROR; }
    int rc = put(b, PyBytes_AS_STRING(r), PyBytes_GET_SIZE(r));
    Py_DECREF(r);
    return rc;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* raw bytes (at b->p + from, n bytes) -> base64 in place of them */
static int base64_in_place(Buf *b, Py_ssize_t from) {
    Py_ssize_t n = b->len - from, out_n = (n + 2) / 3 * 4;
    RESERVE(b, out_n);
    unsigned char *raw = b->p + from;
    /* the input moves past the output's area; writing front to back, the output (4 bytes per
     * 3 read) never reaches input still to be read */
    memmove(raw + out_n, raw, n);
    const unsigned char *in = raw + out_n;
    unsigned char *o = raw;
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *o++ = B64[v >> 18]; *o++ = B64[v >> 12 & 63]; *o++ = B64[v >> 6 & 63]; *o++ = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        *o++ = B64[v >> 18]; *o++ = B64[v >> 12 & 63]; *o++ = '='; *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        *o++ = B64[v >> 18]; *o++ = B64[v >> 12 & 63]; *o++ = B64[v >> 6 & 63]; *o++ = '=';
    }
    b->len = from + out_n;
    return 0;
}

typedef struct {
    PyObject *float_json; /* float text -> JSON number */
    PyObject *text_json;  /* text needing escapes (or not UTF-8: raises) -> JSON string */
} JsonHooks;

/* one column's JSON value (transcode._JSON_CODE) */
static int json_value(Buf *b, int kind, Col c, const JsonHooks *hooks) {
    const unsigned char *t = c.p;
    Py_ssize_t n = c.n;
    if (n < 0) { PUTS(b, "null"); return 0; }
    switch (kind) {
    case K_NUMERIC:
        if (!numeric_ok(t, n)) return FALLBACK;
        return put_quoted(b, t, n);
    case K_TEXT:
        if (plain_ascii(t, n)) return put_quoted(b, t, n);
        return put_call(b, hooks->text_json, t, n);
    case K_JSON:
        /* the document null needs the event's json_null list to stay apart from SQL NULL:
         * the reference path writes it */
        if (n == 4 && memcmp(t, "null", 4) == 0) return FALLBACK;
        /* a document that may nest deeper than a client's parser takes (orjson: 1024 levels)
         * is left to the reference path */
        if (n > 1000) {
            Py_ssize_t open = 0;
            for (Py_ssize_t i = 0; i < n; i++) open += t[i] == '[' || t[i] == '{';
            if (open > 500) return FALLBACK;
        }
        PUT(b, t, n);
        return 0;
    case K_BOOL:
        if (n == 1 && t[0] == 't') { PUTS(b, "true"); return 0; }
        if (n == 1 && t[0] == 'f') { PUTS(b, "false"); return 0; }
        return FALLBACK;
    case K_INT: {
        if (is_digits(t, n) && t[0] != '0') { PUT(b, t, n); return 0; } /* already canonical */
        int64_t v;
        CHECK(parse_int(t, n, &v));
        char text[24];
        int k = snprintf(text, sizeof text, "%lld", (long long)v);
        PUT(b, text, k);
        return 0;
    }
    case K_FLOAT:
        if (n == 0) return FALLBACK;
        if (t[n - 1] == 'y' || t[n - 1] == 'N') return put_quoted(b, t, n); /* (-)Infinity, NaN */
        return put_call(b, hooks->float_json, t, n);
    case K_BYTEA: {
        PUT1(b, '"');
        Py_ssize_t from = b->len;
        CHECK(put_unhex(b, t, n));
        CHECK(base64_in_place(b, from));
        PUT1(b, '"');
        return 0;
    }
    case K_DATE:
        if (n != 10 || !date_ok(t)) return FALLBACK;
        return put_quoted(b, t, n);
    case K_TIME: {
        int pad = time_pad(t, n);
        CHECK(pad);
        PUT1(b, '"');
        PUT(b, t, n);
        PUT(b, ZEROS, pad);
        PUT1(b, '"');
        return 0;
    }
    case K_TIMESTAMP:
    case K_TIMESTAMPTZ: {
        int tz = kind == K_TIMESTAMPTZ;
        if (tz ? !timestamptz_ok(t, n) : !timestamp_ok(t, n)) return FALLBACK;
        int pad = fraction_pad(n, tz ? 22 : 19);
        CHECK(pad);
        PUT1(b, '"');
        PUT(b, t, 10);
        PUT1(b, 'T');
        PUT(b, t + 11, n - 11 - (tz ? 3 : 0));
        PUT(b, ZEROS, pad);
        if (tz) PUTS(b, "+00:00");
        PUT1(b, '"');
        return 0;
    }
    case K_MONEY: {
        unsigned char plain[40];
        Py_ssize_t k = money_plain(t, n, plain);
        if (k < 0) return FALLBACK;
        return put_quoted(b, plain, k);
    }
    }
    return FALLBACK;
}

/* -- Encoder ------------------------------------------------------------------------------------ */

typedef struct { const char *p; Py_ssize_t n; } Bytes;

typedef struct {
    PyObject_HEAD
    Py_ssize_t ncols, nkeys;
    unsigned char *kinds;   /* per column */
    Py_ssize_t *keys;       /* key column indexes */
    Bytes *proto_names;     /* per column: map entry key part, PB_CHANGE_KEY_ENTRY_KEY len name
                               PB_CHANGE_KEY_ENTRY_VALUE */
    Bytes *json_names;      /* per column: '"name":' */
    Bytes proto_ops[3];     /* op, schema, table fields, per insert/update/delete */
    Bytes json_ops[3];      /* '"op":"insert","schema":…,"table":…,' */
    PyObject *refs;         /* the tuple holding every bytes object above */
    JsonHooks hooks;
} Encoder;

static PyObject *Unsupported; /* transcode.py's signal to take the reference path */

static int bytes_of(PyObject *o, Bytes *out) {
    if (!PyBytes_Check(o)) { PyErr_SetString(PyExc_TypeError, "expected bytes"); return -1; }
    out->p = PyBytes_AS_STRING(o);
    out->n = PyBytes_GET_SIZE(o);
    return 0;
}

static int bytes_seq(PyObject *tuple, Py_ssize_t n, Bytes *out) {
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != n) {
        PyErr_Format(PyExc_ValueError, "expected a tuple of %zd bytes", n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) if (bytes_of(PyTuple_GET_ITEM(tuple, i), &out[i]) < 0) return -1;
    return 0;
}

static void Encoder_dealloc(Encoder *self) {
    PyMem_Free(self->kinds);
    PyMem_Free(self->keys);
    PyMem_Free(self->proto_names);
    PyMem_Free(self->json_names);
    Py_XDECREF(self->refs);
    Py_XDECREF(self->hooks.float_json);
    Py_XDECREF(self->hooks.text_json);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Encoder(kinds, keys, proto_names, json_names, proto_ops, json_ops, float_json, text_json) */
static int Encoder_init(Encoder *self, PyObject *args, PyObject *kw) {
    PyObject *kinds, *keys, *proto_names, *json_names, *proto_ops, *json_ops, *float_json, *text_json;
    if (!PyArg_ParseTuple(args, "SO!O!O!O!O!OO:Encoder", &kinds, &PyTuple_Type, &keys,
                          &PyTuple_Type, &proto_names, &PyTuple_Type, &json_names,
                          &PyTuple_Type, &proto_ops, &PyTuple_Type, &json_ops, &float_json,
                          &text_json))
        return -1;
    if (self->refs != NULL) { PyErr_SetString(PyExc_TypeError, "Encoder is immutable"); return -1; }
    Py_ssize_t n = PyBytes_GET_SIZE(kinds), k = PyTuple_GET_SIZE(keys);
    self->ncols = n;
    self->nkeys = k;
    PyMem_Free(self->kinds);
    PyMem_Free(self->keys);
    PyMem_Free(self->proto_names);
    PyMem_Free(self->json_names);
    self->kinds = PyMem_Malloc(n + 1);
    self->keys = PyMem_Malloc(sizeof(Py_ssize_t) * (k + 1));
    self->proto_names = PyMem_Malloc(sizeof(Bytes) * (n + 1));
    self->json_names = PyMem_Malloc(sizeof(Bytes) * (n + 1));
    if (!self->kinds || !self->keys || !self->proto_names || !self->json_names) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        self->kinds[i] = (unsigned char)PyBytes_AS_STRING(kinds)[i];
        if (self->kinds[i] >= K_COUNT) { PyErr_SetString(PyExc_ValueError, "unknown kind"); return -1; }
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(keys, i));
        if (at == -1 && PyErr_Occurred()) return -1;
        if (at < 0 || at >= n) { PyErr_SetString(PyExc_ValueError, "key index out of range"); return -1; }
        self->keys[i] = at;
    }
    if (bytes_seq(proto_names, n, self->proto_names) < 0 || bytes_seq(json_names, n, self->json_names) < 0
        || bytes_seq(proto_ops, 3, self->proto_ops) < 0 || bytes_seq(json_ops, 3, self->json_ops) < 0)
        return -1;
    if (!PyCallable_Check(float_json) || !PyCallable_Check(text_json)) {
        PyErr_SetString(PyExc_TypeError, "float_json and text_json must be callable");
        return -1;
    }
    self->refs = PyTuple_Pack(5, kinds, proto_names, json_names, proto_ops, json_ops);
    if (self->refs == NULL) return -1;
    Py_INCREF(float_json);
    Py_INCREF(text_json);
    self->hooks.float_json = float_json;
    self->hooks.text_json = text_json;
    return 0;
}

typedef struct {
    Py_buffer view;
    uint64_t lsn;
    uint64_t seq;
    Col *newc, *oldc;
    Col stack[2 * 64];
    Layout layout;
} Call;

/* common argument handling: (data, lsn, seq, ...) -> parsed message; 0, FALLBACK or ERROR */
static int call_begin(Encoder *self, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want,
                      Call *c) {
    c->view.obj = NULL;
    c->newc = NULL;
    if (self->refs == NULL) { PyErr_SetString(PyExc_TypeError, "Encoder not initialised"); return ERROR; }
    if (nargs < 3 || nargs > want) {
        PyErr_Format(PyExc_TypeError, "expected 3 to %zd arguments, got %zd", want, nargs);
        return ERROR;
    }
    c->lsn = PyLong_AsUnsignedLongLong(args[1]);
    if (c->lsn == (uint64_t)-1 && PyErr_Occurred()) return ERROR;
    c->seq = PyLong_AsUnsignedLongLong(args[2]);
    if (c->seq == (uint64_t)-1 && PyErr_Occurred()) return ERROR;
    if (PyObject_GetBuffer(args[0], &c->view, PyBUF_SIMPLE) < 0) return ERROR;
    if (self->ncols <= 64) {
        c->newc = c->stack;
        c->oldc = c->stack + 64;
    } else {
        c->newc = PyMem_Malloc(sizeof(Col) * 2 * self->ncols);
        if (c->newc == NULL) { PyErr_NoMemory(); return ERROR; }
        c->oldc = c->newc + self->ncols;
    }
    return parse_message(c->view.buf, c->view.len, self->ncols, c->newc, c->oldc, &c->layout, 0);
}

static PyObject *call_end(Call *c, int rc, Buf *b) {
    if (c->newc != NULL && c->newc != c->stack) PyMem_Free(c->newc);
    if (c->view.obj != NULL) PyBuffer_Release(&c->view);
    PyObject *out = NULL;
    if (rc == FALLBACK) {
        if (PyErr_Occurred()) PyErr_Clear();
        PyErr_SetString(Unsupported, "not a shape the fast path writes");
    } else if (rc == 0) {
        out = PyBytes_FromStringAndSize((const char *)b->p, b->len);
    }
    buf_free(b);
    return out;
}

/* one map<string, Value> entry: field tag, entry length, key part, Value length, Value */
static int proto_entry(Buf *b, Buf *value, unsigned char field, Bytes name, int kind, Col col) {
    value->len = 0;
    CHECK(proto_value(value, kind, col));
    Py_ssize_t m = value->len;
    PUT1(b, field);
    CHECK(put_varint(b, (uint64_t)(name.n + varint_size((uint64_t)m) + m)));
    PUT(b, name.p, name.n);
    CHECK(put_varint(b, (uint64_t)m));
    PUT(b, value->p, m);
    return 0;
}

static int proto_change(Encoder *self, Call *c, Buf *b) {
    Layout *l = &c->layout;
    Buf value;
    buf_init(&value);
    int rc = 0;
    Bytes op = self->proto_ops[l->op];
    if (put(b, op.p, op.n) < 0) { rc = ERROR; goto done; }
    if (c->lsn && (put1(b, PB_CHANGE_LSN) < 0 || put_varint(b, c->lsn) < 0)) { rc = ERROR; goto done; }
    if (c->seq && (put1(b, PB_CHANGE_SEQ) < 0 || put_varint(b, c->seq) < 0)) { rc = ERROR; goto done; }
    for (Py_ssize_t i = 0; i < self->nkeys && rc == 0; i++) {
        Py_ssize_t at = self->keys[i];
        rc = proto_entry(b, &value, PB_CHANGE_KEY, self->proto_names[at], self->kinds[at], l->key_from[at]);
    }
    if (l->old_kind == 'O')
        for (Py_ssize_t i = 0; i < self->ncols && rc == 0; i++)
            rc = proto_entry(b, &value, PB_CHANGE_BEFORE, self->proto_names[i], self->kinds[i], c->oldc[i]);
    if (l->op != 2)
        for (Py_ssize_t i = 0; i < self->ncols && rc == 0; i++)
            rc = proto_entry(b, &value, PB_CHANGE_AFTER, self->proto_names[i], self->kinds[i], c->newc[i]);
done:
    buf_free(&value);
    return rc;
}

/* proto(data, lsn, seq[, _, _]) -> serialized pgfeed.v1.Change */
static PyObject *Encoder_proto(Encoder *self, PyObject *const *args, Py_ssize_t nargs) {
    Call c;
    Buf b;
    buf_init(&b);
    int rc = call_begin(self, args, nargs, 5, &c);
    if (rc == 0) rc = proto_change(self, &c, &b);
    return call_end(&c, rc, &b);
}

static int json_object(Encoder *self, Buf *b, const Col *cols, const Py_ssize_t *which,
                       Py_ssize_t n) {
    PUT1(b, '{');
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t at = which ? which[i] : i;
        if (i) PUT1(b, ',');
        PUT(b, self->json_names[at].p, self->json_names[at].n);
        CHECK(json_value(b, self->kinds[at], cols[at], &self->hooks));
    }
    PUT1(b, '}');
    return 0;
}

static int json_change(Encoder *self, Call *c, PyObject *middle, PyObject *tail, Buf *b) {
    Layout *l = &c->layout;
    Bytes mid, end;
    if (bytes_of(middle, &mid) < 0 || bytes_of(tail, &end) < 0) return ERROR;
    char head[80];
    int k = snprintf(head, sizeof head, "{\"lsn\":\"%X/%X\",\"seq\":%llu,",
                     (unsigned)(c->lsn >> 32), (unsigned)(c->lsn & 0xFFFFFFFFu),
                     (unsigned long long)c->seq);
    PUT(b, head, k);
    PUT(b, mid.p, mid.n);
    PUT(b, self->json_ops[l->op].p, self->json_ops[l->op].n);
    PUTS(b, "\"key\":");
    if (self->nkeys) CHECK(json_object(self, b, l->key_from, self->keys, self->nkeys));
    else PUTS(b, "null");
    PUT1(b, ',');
    if (l->old_kind == 'O') {
        PUTS(b, "\"before\":");
        CHECK(json_object(self, b, c->oldc, NULL, self->ncols));
        PUT1(b, ',');
    }
    if (l->op != 2) {
        PUTS(b, "\"after\":");
        CHECK(json_object(self, b, c->newc, NULL, self->ncols));
        PUT1(b, ',');
    }
    PUT(b, end.p, end.n);
    return 0;
}

/* json(data, lsn, seq, middle, tail) -> the change event's JSON bytes */
static PyObject *Encoder_json(Encoder *self, PyObject *const *args, Py_ssize_t nargs) {
    Call c;
    Buf b;
    buf_init(&b);
    int rc = call_begin(self, args, nargs, 5, &c);
    if (rc == 0 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "json() takes data, lsn, seq, middle, tail");
        rc = ERROR;
    }
    if (rc == 0) rc = json_change(self, &c, args[3], args[4], &b);
    return call_end(&c, rc, &b);
}

/* A run of a transaction's row frames (``decoding.runs.RowRun``): one call writes them all.
 * run(payload, pos, count, seq, json, middle, tail) -> (list of events, position after them)
 * Writes up to ``count`` consecutive frames (FRAME: lsn Int64, length Int32, message) from
 * ``pos``, the first one change ``seq``, as JSON events (``json`` true: with ``middle`` and
 * ``tail``, as json()) or protobuf Changes (as proto()); stops before the first frame these rules
 * refuse, whose position it returns (the caller takes that change by the reference path). */
static PyObject *Encoder_run(Encoder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (self->refs == NULL) { PyErr_SetString(PyExc_TypeError, "Encoder not initialised"); return NULL; }
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "run() takes payload, pos, count, seq, json, middle, tail");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), count = PyLong_AsSsize_t(args[2]);
    long long seq = PyLong_AsLongLong(args[3]);
    int json = PyObject_IsTrue(args[4]);
    if (PyErr_Occurred() || json < 0) return NULL;
    if (pos < 0 || count < 0 || seq < 0) { PyErr_SetString(PyExc_ValueError, "negative position"); return NULL; }
    Call c;
    c.view.obj = NULL;
    c.newc = NULL;
    if (PyObject_GetBuffer(args[0], &c.view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = PyList_New(0);
    Buf b;
    buf_init(&b);
    int rc = 0;
    if (out == NULL) { rc = ERROR; goto done; }
    if (self->ncols <= 64) {
        c.newc = c.stack;
        c.oldc = c.stack + 64;
    } else {
        c.newc = PyMem_Malloc(sizeof(Col) * 2 * self->ncols);
        if (c.newc == NULL) { PyErr_NoMemory(); rc = ERROR; goto done; }
        c.oldc = c.newc + self->ncols;
    }
    const unsigned char *d = c.view.buf;
    Py_ssize_t end = c.view.len;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (end - pos < 12) break;
        uint64_t lsn = 0;
        for (int k = 0; k < 8; k++) lsn = lsn << 8 | d[pos + k];
        Py_ssize_t length = (Py_ssize_t)((uint32_t)d[pos + 8] << 24 | (uint32_t)d[pos + 9] << 16
                                         | (uint32_t)d[pos + 10] << 8 | d[pos + 11]);
        if (length > end - pos - 12) break;
        rc = parse_message(d + pos + 12, length, self->ncols, c.newc, c.oldc, &c.layout, 0);
        if (rc == 0) {
            c.lsn = lsn;
            c.seq = (uint64_t)(seq + i);
            b.len = 0;
            rc = json ? json_change(self, &c, args[5], args[6], &b) : proto_change(self, &c, &b);
        }
        if (rc == FALLBACK) {
            if (PyErr_Occurred()) PyErr_Clear();
            rc = 0;
            break;
        }
        if (rc < 0) break;
        PyObject *event = PyBytes_FromStringAndSize((const char *)b.p, b.len);
        if (event == NULL || PyList_Append(out, event) < 0) { Py_XDECREF(event); rc = ERROR; break; }
        Py_DECREF(event);
        pos += 12 + length;
    }
done:
    if (c.newc != NULL && c.newc != c.stack) PyMem_Free(c.newc);
    PyBuffer_Release(&c.view);
    buf_free(&b);
    if (rc < 0) { Py_XDECREF(out); return NULL; }
    PyObject *result = Py_BuildValue("(Nn)", out, pos);
    return result;
}

static PyMethodDef Encoder_methods[] = {
    {"proto", (PyCFunction)(void (*)(void))Encoder_proto, METH_FASTCALL,
     "proto(data, lsn, seq[, middle, tail]) -> serialized pgfeed.v1.Change"},
    {"json", (PyCFunction)(void (*)(void))Encoder_json, METH_FASTCALL,
     "json(data, lsn, seq, middle, tail) -> change event JSON"},
    {"run", (PyCFunction)(void (*)(void))Encoder_run, METH_FASTCALL,
     "run(payload, pos, count, seq, json, middle, tail) -> (events, pos after them)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pgfeed.encoding._transcode.Encoder",
    .tp_basicsize = sizeof(Encoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One relation version's compiled encoders (see transcode.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Encoder_init,
    .tp_dealloc = (destructor)Encoder_dealloc,
    .tp_methods = Encoder_methods,
};

#include "_transcode_arrow.c" /* ArrowRows: typed Arrow columns from the same texts */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_transcode", "Compiled pgoutput -> JSON/protobuf transcoding.", -1, NULL,
};

PyMODINIT_FUNC PyInit__transcode(void) {
    if (c_numeric == (locale_t)0) c_numeric = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (PyType_Ready(&EncoderType) < 0 || PyType_Ready(&ArrowRowsType) < 0
        || PyType_Ready(&OwnedType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Unsupported = PyErr_NewException("pgfeed.encoding._transcode.Unsupported", PyExc_ValueError, NULL);
    if (Unsupported == NULL || PyModule_AddObjectRef(m, "Unsupported", Unsupported) < 0
        || PyModule_AddObjectRef(m, "Encoder", (PyObject *)&EncoderType) < 0
        || PyModule_AddObjectRef(m, "ArrowRows", (PyObject *)&ArrowRowsType) < 0
        || PyModule_AddStringConstant(m, "ARROW_ABI", ARROW_ABI_DIGEST) < 0
        || PyModule_AddStringConstant(m, "PROTO_TAGS", PROTO_TAGS_DIGEST) < 0
        || PyModule_AddIntConstant(m, "KINDS", K_COUNT) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *names = PyTuple_New(K_COUNT);
    if (names == NULL) { Py_DECREF(m); return NULL; }
    for (int i = 0; i < K_COUNT; i++) {
        PyObject *name = PyUnicode_FromString(KIND_NAMES[i]);
        if (name == NULL) { Py_DECREF(names); Py_DECREF(m); return NULL; }
        PyTuple_SET_ITEM(names, i, name);
    }
    int rc = PyModule_AddObjectRef(m, "KIND_NAMES", names);
    Py_DECREF(names);
    if (rc < 0) { Py_DECREF(m); return NULL; }
    return m;
}

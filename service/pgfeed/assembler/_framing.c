/* The stored-payload frame walk's compiled step (see framing.py, ``extent``): how far a run of
 * row frames of one relation goes, without a Python step a frame.
 *
 * A frame is FRAME = lsn (Int64), length (Int32), then the pgoutput message; a row message
 * (Insert 'I', Update 'U', Delete 'D') starts with its tag and its relation id (Int32). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* extent(payload, pos, end, relation_id, limit, tags) -> (pos, count)
 * From ``pos`` (a frame's start), the frames before ``end`` whose message is a row change of
 * ``relation_id`` with a tag in ``tags`` (bytes), at most ``limit`` of them: the position after
 * the last one taken and how many were taken. */
static PyObject *extent(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) { PyErr_SetString(PyExc_TypeError, "extent() takes 6 arguments"); return NULL; }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    unsigned long relation_id = PyLong_AsUnsignedLong(args[3]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred()) return NULL;
    if (!PyBytes_Check(args[5])) { PyErr_SetString(PyExc_TypeError, "tags: bytes"); return NULL; }
    const unsigned char *tags = (const unsigned char *)PyBytes_AS_STRING(args[5]);
    Py_ssize_t ntags = PyBytes_GET_SIZE(args[5]);
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *d = view.buf;
    if (end > view.len) end = view.len;
    Py_ssize_t count = 0;
    while (count < limit && pos >= 0 && end - pos >= 17) {
        const unsigned char *f = d + pos;
        Py_ssize_t length = (Py_ssize_t)((uint32_t)f[8] << 24 | (uint32_t)f[9] << 16
                                         | (uint32_t)f[10] << 8 | f[11]);
        if (length < 5 || length > end - pos - 12) break;
        const unsigned char *m = f + 12;
        int wanted = 0;
        for (Py_ssize_t i = 0; i < ntags; i++) wanted |= m[0] == tags[i];
        uint32_t relid = (uint32_t)m[1] << 24 | (uint32_t)m[2] << 16 | (uint32_t)m[3] << 8 | m[4];
        if (!wanted || relid != relation_id) break;
        pos += 12 + length;
        count++;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nn)", pos, count);
}

static PyMethodDef methods[] = {
    {"extent", (PyCFunction)(void (*)(void))extent, METH_FASTCALL,
     "extent(payload, pos, end, relation_id, limit, tags) -> (pos, count)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_framing", "Compiled steps of the stored-payload frame walk.", -1, methods,
};

PyMODINIT_FUNC PyInit__framing(void) { return PyModule_Create(&module); }

/*
 * bpe_ops._piece_merge: the encoder's per-piece merge replay (Tokenizer._merge_python), compiled.
 *
 * `PieceMerger(left, right, merged)` is built once per tokenizer from the merge table by rank:
 * merge r joins the ids left[r] and right[r] into merged[r]. `merge(ids)` replays the merges on one
 * piece's symbol ids and returns the new list. The table and the replay live in `_merge_table.h`
 * (shared with `_pcre2.c`, which encodes whole texts); this file is their Python face. Errors (a
 * non-int id, an id out of range, no memory) raise Python exceptions; nothing is kept between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_merge_table.h"

typedef struct {
    PyObject_HEAD
    int32_t *left, *right;              /* by rank, as given (`__reduce__` returns them) */
    MergeTable table;
} PieceMerger;

static int read_id(PyObject *item, int32_t *id)
{
    /* One id into *id; -1 with an exception set when it is no int or out of range. */
    long long v = PyLong_AsLongLong(item);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v >= ID_LIMIT) {
        PyErr_Format(PyExc_OverflowError, "PieceMerger: id %lld is outside 0..2**31 - 1", v);
        return -1;
    }
    *id = (int32_t)v;
    return 0;
}

/* ---- construction ------------------------------------------------------------------------------ */

static int32_t *id_array(PyObject *seq, Py_ssize_t n)
{
    /* The n ids of the fast sequence `seq` as a new array; NULL with an exception set. */
    int32_t *out = PyMem_Malloc(n ? (size_t)n * sizeof(int32_t) : 1);
    Py_ssize_t i;
    if (out == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (i = 0; i < n; i++)
        if (read_id(PySequence_Fast_GET_ITEM(seq, i), &out[i]) < 0) {
            PyMem_Free(out);
            return NULL;
        }
    return out;
}

static void merger_dealloc(PieceMerger *self)
{
    PyMem_Free(self->left);
    PyMem_Free(self->right);
    merge_table_free(&self->table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int merger_init(PieceMerger *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"left", "right", "merged", NULL};
    PyObject *left_arg, *right_arg, *merged_arg, *seqs[3] = {NULL, NULL, NULL};
    int32_t *merged = NULL;
    Py_ssize_t n;
    int ok = -1;

    if (self->table.slots != NULL) {
        PyErr_SetString(PyExc_TypeError, "PieceMerger is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:PieceMerger", kwlist,
                                     &left_arg, &right_arg, &merged_arg))
        return -1;
    if ((seqs[0] = PySequence_Fast(left_arg, "PieceMerger: left must be a sequence")) == NULL ||
        (seqs[1] = PySequence_Fast(right_arg, "PieceMerger: right must be a sequence")) == NULL ||
        (seqs[2] = PySequence_Fast(merged_arg, "PieceMerger: merged must be a sequence")) == NULL)
        goto done;
    n = PySequence_Fast_GET_SIZE(seqs[0]);
    if (PySequence_Fast_GET_SIZE(seqs[1]) != n || PySequence_Fast_GET_SIZE(seqs[2]) != n) {
        PyErr_SetString(PyExc_ValueError, "PieceMerger: left, right and merged differ in length");
        goto done;
    }
    if (n >= NO_RANK) {
        PyErr_SetString(PyExc_OverflowError, "PieceMerger: more than 2**31 - 2 merges");
        goto done;
    }
    if ((self->left = id_array(seqs[0], n)) == NULL ||
        (self->right = id_array(seqs[1], n)) == NULL ||
        (merged = id_array(seqs[2], n)) == NULL)
        goto done;
    if (merge_table_init(&self->table, self->left, self->right, merged, n) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    ok = 0;
done:
    Py_XDECREF(seqs[0]);
    Py_XDECREF(seqs[1]);
    Py_XDECREF(seqs[2]);
    PyMem_Free(merged);
    return ok;
}

/* ---- the replay, from Python --------------------------------------------------------------- */

static PyObject *merger_merge(PieceMerger *self, PyObject *ids)
{
    PyObject *seq, *result = NULL;
    int32_t small[SHORT_PIECE], *sym = small;
    uint32_t *links = NULL;
    int32_t *cur = NULL;
    uint64_t *keys = NULL;
    Py_ssize_t n, i;

    if (self->table.slots == NULL) {
        PyErr_SetString(PyExc_TypeError, "PieceMerger is not initialised");
        return NULL;
    }
    seq = PySequence_Fast(ids, "merge() takes a sequence of ids");
    if (seq == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n > SHORT_PIECE) {
        if ((uint64_t)n >= NONE) {
            PyErr_SetString(PyExc_OverflowError, "merge(): a piece of 2**32 or more symbols");
            goto done;
        }
        sym = PyMem_Malloc((size_t)n * sizeof(int32_t));
        links = PyMem_Malloc((size_t)n * 2 * sizeof(uint32_t));
        cur = PyMem_Malloc((size_t)n * sizeof(int32_t));
        keys = PyMem_Malloc((size_t)n * 3 * sizeof(uint64_t));
        if (sym == NULL || links == NULL || cur == NULL || keys == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    for (i = 0; i < n; i++)
        if (read_id(PySequence_Fast_GET_ITEM(seq, i), &sym[i]) < 0)
            goto done;
    if (n <= SHORT_PIECE) {
        n = merge_short(&self->table, sym, n);
    } else {
        /* No Python object is touched while merging: let other threads run. */
        Py_BEGIN_ALLOW_THREADS
        n = merge_long(&self->table, sym, n, links, links + n, cur, keys);
        Py_END_ALLOW_THREADS
    }
    result = PyList_New(n);
    if (result == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(sym[i]);
        if (v == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, i, v);
    }
done:
    if (sym != small)
        PyMem_Free(sym);
    PyMem_Free(links);
    PyMem_Free(cur);
    PyMem_Free(keys);
    Py_DECREF(seq);
    return result;
}

/* ---- pickling and the type --------------------------------------------------------------------- */

static PyObject *id_list(const int32_t *values, Py_ssize_t n)
{
    PyObject *out = PyList_New(n);
    Py_ssize_t i;
    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(values[i]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *merger_reduce(PieceMerger *self, PyObject *Py_UNUSED(ignored))
{
    /* Pickled as its constructor arguments (a Tokenizer is shipped to Beam workers pickled). */
    PyObject *left, *right, *merged, *result = NULL;
    if (self->table.slots == NULL) {
        PyErr_SetString(PyExc_TypeError, "PieceMerger is not initialised");
        return NULL;
    }
    left = id_list(self->left, self->table.nmerges);
    right = id_list(self->right, self->table.nmerges);
    merged = id_list(self->table.merged, self->table.nmerges);
    if (left != NULL && right != NULL && merged != NULL)
        result = Py_BuildValue("O(OOO)", (PyObject *)Py_TYPE(self), left, right, merged);
    Py_XDECREF(left);
    Py_XDECREF(right);
    Py_XDECREF(merged);
    return result;
}

static PyMethodDef merger_methods[] = {
    {"merge", (PyCFunction)merger_merge, METH_O,
     "merge(ids)\n--\n\n"
     "The ids after replaying the merges on one pre-token's symbol ids: lowest rank first,\n"
     "leftmost on ties, until no adjacent pair is a merge. A new list; `ids` is not changed."},
    {"__reduce__", (PyCFunction)merger_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}
};

static PyTypeObject PieceMergerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_ops._piece_merge.PieceMerger",
    .tp_basicsize = sizeof(PieceMerger),
    .tp_dealloc = (destructor)merger_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PieceMerger(left, right, merged)\n--\n\n"
              "The merge table by rank (merge r joins left[r] and right[r] into merged[r]; a repeated\n"
              "pair keeps its first rank), ready to replay on pre-tokens with merge().",
    .tp_methods = merger_methods,
    .tp_init = (initproc)merger_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_piece_merge",
    "The encoder's per-piece merge replay in C; Tokenizer._merge_python is its specification.", -1,
    NULL, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC
PyInit__piece_merge(void)
{
    PyObject *m;
    if (PyType_Ready(&PieceMergerType) < 0)
        return NULL;
    m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&PieceMergerType);
    if (PyModule_AddObject(m, "PieceMerger", (PyObject *)&PieceMergerType) < 0) {
        Py_DECREF(&PieceMergerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

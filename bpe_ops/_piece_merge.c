/*
 * bpe_ops._piece_merge: the encoder's per-piece merge replay (Tokenizer._merge_python), compiled.
 *
 * `PieceMerger(left, right, merged)` is built once per tokenizer from the merge table by rank:
 * merge r joins the ids left[r] and right[r] into merged[r]. `merge(ids)` replays the merges on one
 * piece's symbol ids and returns the new list. The table and the replay live in `_merge_table.h`
 * (shared with `_pcre2.c`, which encodes whole texts); this file is their Python face. Errors (a
 * non-int id, an id out of range, no memory) raise Python exceptions; nothing is kept between calls.
 *
 * `merge_dropout(ids, state, limit, always)` is BPE-dropout's replay (Tokenizer._merge_dropout_python
 * is its specification): the same heap, each popped key drawing splitmix64 from `state`
 * (bpe_ops/dropout.py) and skipped when the draw is below `limit`, or `always` (p = 1: a limit of
 * 2**64); it returns (ids, the new state). `merge_dropout_pieces` does it for every piece of a text
 * in one call, the stream going on from piece to piece.
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

    if (merge_table_ready(&self->table)) {
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
    {
        /* The merge map: megabytes touched for the first time and no Python object, so without the
         * GIL (a job builds it on a thread of its own while it starts). */
        int built;
        PyThreadState *saved = PyEval_SaveThread();
        built = merge_table_init(&self->table, self->left, self->right, merged, n) == 0;
        PyEval_RestoreThread(saved);
        if (!built) {
            PyErr_NoMemory();
            goto done;
        }
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

static PyObject *id_list(const int32_t *values, Py_ssize_t n);   /* below, with pickling */

typedef struct {
    int32_t *sym, *cur;
    uint32_t *links;                    /* next, then previous */
    uint64_t *keys;
} Scratch;

static int scratch_alloc(Scratch *s, Py_ssize_t n, size_t keys_per_symbol)
{
    /* Room for a heap replay of n >= 1 symbols; -1 with MemoryError set. `scratch_free` after. */
    s->sym = PyMem_Malloc((size_t)n * sizeof(int32_t));
    s->links = PyMem_Malloc((size_t)n * 2 * sizeof(uint32_t));
    s->cur = PyMem_Malloc((size_t)n * sizeof(int32_t));
    s->keys = PyMem_Malloc((size_t)n * keys_per_symbol * sizeof(uint64_t));
    if (s->sym == NULL || s->links == NULL || s->cur == NULL || s->keys == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void scratch_free(Scratch *s)
{
    PyMem_Free(s->sym);
    PyMem_Free(s->links);
    PyMem_Free(s->cur);
    PyMem_Free(s->keys);
}

static int read_ids(PyObject *seq, int32_t *sym, Py_ssize_t n)
{
    Py_ssize_t i;
    for (i = 0; i < n; i++)
        if (read_id(PySequence_Fast_GET_ITEM(seq, i), &sym[i]) < 0)
            return -1;
    return 0;
}

static PyObject *merger_merge(PieceMerger *self, PyObject *ids)
{
    PyObject *seq, *result = NULL;
    int32_t small[SHORT_PIECE], *sym = small;
    Scratch scratch = {NULL, NULL, NULL, NULL};
    Py_ssize_t n;

    if (!merge_table_ready(&self->table)) {
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
        if (scratch_alloc(&scratch, n, 3) < 0)
            goto done;
        sym = scratch.sym;
    }
    if (read_ids(seq, sym, n) < 0)
        goto done;
    if (n <= SHORT_PIECE) {
        n = merge_short(&self->table, sym, n);
    } else {
        /* No Python object is touched while merging: let other threads run. */
        Py_BEGIN_ALLOW_THREADS
        n = merge_long(&self->table, sym, n, scratch.links, scratch.links + n, scratch.cur, scratch.keys);
        Py_END_ALLOW_THREADS
    }
    result = id_list(sym, n);
done:
    scratch_free(&scratch);
    Py_DECREF(seq);
    return result;
}

/* ---- BPE-dropout -------------------------------------------------------------------------------- */

static inline uint64_t splitmix64_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static Py_ssize_t merge_dropout(const MergeTable *m, int32_t *sym, Py_ssize_t n, uint32_t *nxt, uint32_t *prv,
                                int32_t *cur, uint64_t *keys, uint64_t *skipped, uint64_t *state, uint64_t limit,
                                int always)
{
    /* merge_long's heap with a draw per popped key: a skipped key waits in `skipped` until the next
     * key that is not skipped (stale or not) puts them all back. `keys` and `skipped` have room for
     * 3n keys each (every key ever pushed). */
    size_t nkeys = merge_heap_start(m, sym, n, nxt, prv, cur, keys, 0), nskipped = 0;
    while (nkeys > 0) {
        uint64_t key = rank_heap_pop(NULL, keys, &nkeys);
        int32_t rank = (int32_t)(key >> 32);
        uint32_t p = (uint32_t)key;
        if (splitmix64_next(state) < limit || always) {
            skipped[nskipped++] = key;
            continue;
        }
        while (nskipped > 0) {
            keys[nkeys] = skipped[--nskipped];
            rank_heap_sift_up(NULL, keys, nkeys++);
        }
        if (cur[p] != rank)
            continue;                   /* stale: the pair at p changed since */
        merge_heap_apply(m, sym, nxt, prv, cur, keys, &nkeys, p, rank, 0);
    }
    return merge_heap_finish(sym, n, nxt);
}

static PyObject *ids_and_state(const int32_t *ids, Py_ssize_t n, uint64_t state)
{
    /* (the ids as a list, the stream's state): what the dropout replays return. */
    PyObject *list = id_list(ids, n);
    return list == NULL ? NULL : Py_BuildValue("(NK)", list, (unsigned long long)state);
}

static PyObject *merger_merge_dropout(PieceMerger *self, PyObject *args)
{
    PyObject *ids, *seq, *result = NULL;
    unsigned long long state, limit;
    int always;
    Scratch scratch = {NULL, NULL, NULL, NULL};
    uint64_t st;
    Py_ssize_t n;

    if (!merge_table_ready(&self->table)) {
        PyErr_SetString(PyExc_TypeError, "PieceMerger is not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OKKp:merge_dropout", &ids, &state, &limit, &always))
        return NULL;
    seq = PySequence_Fast(ids, "merge_dropout() takes a sequence of ids");
    if (seq == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    if ((uint64_t)n >= NONE / 3) {
        PyErr_SetString(PyExc_OverflowError, "merge_dropout(): a piece of 2**32 / 3 or more symbols");
        goto done;
    }
    /* Six keys per symbol: the heap's three, and as many set aside as skipped. */
    if (scratch_alloc(&scratch, n ? n : 1, 6) < 0 || read_ids(seq, scratch.sym, n) < 0)
        goto done;
    st = state;
    Py_BEGIN_ALLOW_THREADS
    n = merge_dropout(&self->table, scratch.sym, n, scratch.links, scratch.links + n, scratch.cur, scratch.keys,
                      scratch.keys + 3 * n, &st, limit, always);
    Py_END_ALLOW_THREADS
    result = ids_and_state(scratch.sym, n, st);
done:
    scratch_free(&scratch);
    Py_DECREF(seq);
    return result;
}

static PyObject *merger_merge_dropout_pieces(PieceMerger *self, PyObject *args)
{
    /* merge_dropout over the pieces of one text (each a bytes object, its symbols byte_ids[byte]),
     * one stream going on from piece to piece; their ids one after the other. */
    PyObject *pieces, *byte_ids_arg, *seq = NULL, *ids_seq = NULL, *result = NULL;
    unsigned long long state, limit;
    int always;
    int32_t byte_ids[256], *out = NULL;
    size_t nout = 0, out_cap = 0, scratch_n = 0;
    Scratch scratch = {NULL, NULL, NULL, NULL};
    uint64_t st;
    Py_ssize_t k, i, npieces;

    if (!merge_table_ready(&self->table)) {
        PyErr_SetString(PyExc_TypeError, "PieceMerger is not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOKKp:merge_dropout_pieces", &pieces, &byte_ids_arg, &state, &limit, &always))
        return NULL;
    ids_seq = PySequence_Fast(byte_ids_arg, "merge_dropout_pieces(): byte_ids must be a sequence");
    if (ids_seq == NULL)
        return NULL;
    if (PySequence_Fast_GET_SIZE(ids_seq) != 256) {
        PyErr_SetString(PyExc_ValueError, "merge_dropout_pieces(): byte_ids must hold 256 ids");
        goto done;
    }
    if (read_ids(ids_seq, byte_ids, 256) < 0)
        goto done;
    seq = PySequence_Fast(pieces, "merge_dropout_pieces() takes a sequence of bytes");
    if (seq == NULL)
        goto done;
    npieces = PySequence_Fast_GET_SIZE(seq);
    st = state;
    for (k = 0; k < npieces; k++) {
        PyObject *piece = PySequence_Fast_GET_ITEM(seq, k);
        const unsigned char *data;
        Py_ssize_t n;
        if (!PyBytes_Check(piece)) {
            PyErr_SetString(PyExc_TypeError, "merge_dropout_pieces(): every piece must be bytes");
            goto done;
        }
        data = (const unsigned char *)PyBytes_AS_STRING(piece);
        n = PyBytes_GET_SIZE(piece);
        if ((uint64_t)n >= NONE / 3) {
            PyErr_SetString(PyExc_OverflowError, "merge_dropout_pieces(): a piece of 2**32 / 3 or more bytes");
            goto done;
        }
        if ((size_t)n > scratch_n) {
            scratch_free(&scratch);
            scratch_n = (size_t)n > 2 * scratch_n ? (size_t)n : 2 * scratch_n;
            if (scratch_alloc(&scratch, (Py_ssize_t)scratch_n, 6) < 0)
                goto done;
        }
        for (i = 0; i < n; i++)
            scratch.sym[i] = byte_ids[data[i]];
        n = merge_dropout(&self->table, scratch.sym, n, scratch.links, scratch.links + n, scratch.cur, scratch.keys,
                          scratch.keys + 3 * n, &st, limit, always);
        if (tb_reserve((void **)&out, &out_cap, nout + (size_t)n, sizeof(int32_t), 256) < 0) {
            PyErr_NoMemory();
            goto done;
        }
        tb_copy(out + nout, scratch.sym, (size_t)n * sizeof(int32_t));
        nout += (size_t)n;
    }
    result = ids_and_state(out, (Py_ssize_t)nout, st);
done:
    scratch_free(&scratch);
    free(out);
    Py_XDECREF(seq);
    Py_DECREF(ids_seq);
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
    if (!merge_table_ready(&self->table)) {
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
    {"merge_dropout", (PyCFunction)merger_merge_dropout, METH_VARARGS,
     "merge_dropout(ids, state, limit, always)\n--\n\n"
     "BPE-dropout's replay of one pre-token: each popped candidate draws splitmix64 from `state`\n"
     "and is skipped when the draw is below `limit` or `always`. Returns (ids, new state)."},
    {"merge_dropout_pieces", (PyCFunction)merger_merge_dropout_pieces, METH_VARARGS,
     "merge_dropout_pieces(pieces, byte_ids, state, limit, always)\n--\n\n"
     "merge_dropout over each piece (bytes; its symbols byte_ids[b]) in turn, one stream for all.\n"
     "Returns (the ids of every piece, one after the other; new state)."},
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

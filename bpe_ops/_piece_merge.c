/*
 * bpe_ops._piece_merge: the encoder's per-piece merge replay (Tokenizer._merge_python), compiled.
 *
 * The specification is the pure-Python `Tokenizer._merge_python` in encoder.py: inside one
 * pre-token, repeatedly merge the adjacent pair of lowest merge rank, the leftmost one on ties,
 * until no adjacent pair is a merge. The tests run both and require identical ids.
 *
 * `PieceMerger(left, right, merged)` is built once per tokenizer from the merge table by rank:
 * merge r joins the ids left[r] and right[r] into merged[r]. It holds
 *   - an open-addressing hash map (linear probing) from the pair (left, right) to its lowest rank:
 *     a repeated pair keeps its first rank, as the Python dict built with setdefault does;
 *   - `merged` by rank.
 * `merge(ids)` replays the merges on one piece's symbol ids and returns the new list:
 *   - short pieces: the rank of every adjacent pair in an array; scan for the lowest (leftmost on
 *     ties), merge, shift the arrays left, recompute the two pairs next to the merge. Quadratic,
 *     but for the usual few symbols the fastest;
 *   - long pieces: the symbols form a doubly linked list over their original positions (so
 *     position order is text order) and a binary min-heap holds (rank, position) keys with lazy
 *     invalidation: `cur[p]` is the rank of the pair that starts at position p now, and a popped key
 *     whose rank is not `cur[p]` is stale and dropped. Every live pair has a key in the heap, so
 *     the least live key is exactly "lowest rank, leftmost"; each merge pushes the two pairs it
 *     creates. O(n log n) for any merge list, including lists where a merge ranks before the merges
 *     that make its parts (which the Python long-piece path, ranks in increasing order, cannot take).
 *
 * Ids are 0 <= id < 2**31 and ranks int32, so a pair packs into one 64-bit key and a map slot is
 * 16 bytes: the map's memory traffic is what a lookup costs. A heap key packs rank and position
 * into 64 bits, so a piece has fewer than 2**32 symbols. Errors (a non-int id, an id out of range,
 * no memory) raise Python exceptions; nothing is kept between calls.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The rank of "no merge": above every real rank, so the lowest-rank scans need no special case. */
#define NO_RANK INT32_MAX
/* Ids are below this; the key of an empty map slot is no pair of such ids. */
#define ID_LIMIT ((int64_t)1 << 31)
#define EMPTY UINT64_MAX
/* Pieces up to this many symbols take the array scan: measured with GPT-2's merges on English and
 * multilingual text, it is faster than the heap below about this size. */
#define SHORT_PIECE 64
/* The end of the linked list, and the predecessor of the first symbol. */
#define NONE UINT32_MAX

typedef struct {
    uint64_t key;        /* left << 32 | right, or EMPTY */
    int32_t rank;
} Slot;

typedef struct {
    PyObject_HEAD
    Py_ssize_t nmerges;
    int32_t *left, *right, *merged;     /* by rank, as given (`__reduce__` returns them) */
    Slot *slots;
    uint64_t mask;                      /* slots - 1, a power of two minus one */
    int shift;                          /* 64 - log2(slots): the hash is the product's top bits */
} PieceMerger;

/* ---- the pair map ------------------------------------------------------------------------------ */

static inline uint64_t pair_key(int32_t a, int32_t b)
{
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static inline int32_t rank_of(const PieceMerger *m, int32_t a, int32_t b)
{
    /* The lowest rank of the merge (a, b), or NO_RANK. Fibonacci hashing, linear probing. */
    uint64_t key = pair_key(a, b);
    uint64_t i = (key * 0x9E3779B97F4A7C15ULL) >> m->shift;
    for (;;) {
        const Slot *s = &m->slots[i];
        if (s->key == key)
            return s->rank;
        if (s->key == EMPTY)
            return NO_RANK;
        i = (i + 1) & m->mask;
    }
}

static void insert_first(PieceMerger *m, int32_t a, int32_t b, int32_t rank)
{
    /* Map (a, b) to `rank` unless it is already mapped: a repeated pair keeps its first rank. */
    uint64_t key = pair_key(a, b);
    uint64_t i = (key * 0x9E3779B97F4A7C15ULL) >> m->shift;
    for (;;) {
        Slot *s = &m->slots[i];
        if (s->key == EMPTY) {
            s->key = key;
            s->rank = rank;
            return;
        }
        if (s->key == key)
            return;
        i = (i + 1) & m->mask;
    }
}

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
    PyMem_Free(self->merged);
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int merger_init(PieceMerger *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"left", "right", "merged", NULL};
    PyObject *left_arg, *right_arg, *merged_arg, *seqs[3] = {NULL, NULL, NULL};
    Py_ssize_t n, size, r;
    int ok = -1;

    if (self->slots != NULL) {
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
        (self->merged = id_array(seqs[2], n)) == NULL)
        goto done;
    self->nmerges = n;
    /* At most half full, so probes stay short. */
    for (size = 16, self->shift = 60; size < 2 * n; size *= 2, self->shift--)
        ;
    self->slots = PyMem_Malloc((size_t)size * sizeof(Slot));
    if (self->slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (r = 0; r < size; r++)
        self->slots[r].key = EMPTY;
    self->mask = (uint64_t)size - 1;
    for (r = 0; r < n; r++)
        insert_first(self, self->left[r], self->right[r], (int32_t)r);
    ok = 0;
done:
    Py_XDECREF(seqs[0]);
    Py_XDECREF(seqs[1]);
    Py_XDECREF(seqs[2]);
    return ok;
}

/* ---- the replay -------------------------------------------------------------------------------- */

static Py_ssize_t merge_short(const PieceMerger *m, int32_t *sym, Py_ssize_t n)
{
    /* Merge sym[0..n) in place; the new length. n <= SHORT_PIECE. */
    int32_t rank[SHORT_PIECE];
    Py_ssize_t i, at;
    for (i = 0; i + 1 < n; i++)
        rank[i] = rank_of(m, sym[i], sym[i + 1]);
    while (n > 1) {
        int32_t best = NO_RANK;
        at = 0;
        for (i = 0; i + 1 < n; i++)
            if (rank[i] < best) {   /* strict: the leftmost of equal ranks stays */
                best = rank[i];
                at = i;
            }
        if (best == NO_RANK)
            break;
        sym[at] = m->merged[best];
        n--;
        memmove(&sym[at + 1], &sym[at + 2], (size_t)(n - at - 1) * sizeof(int32_t));
        if (at + 1 < n) {
            rank[at] = rank_of(m, sym[at], sym[at + 1]);
            memmove(&rank[at + 1], &rank[at + 2], (size_t)(n - at - 2) * sizeof(int32_t));
        }
        if (at > 0)
            rank[at - 1] = rank_of(m, sym[at - 1], sym[at]);
    }
    return n;
}

typedef struct {
    uint64_t *keys;      /* rank << 32 | position: the least key is the lowest rank, leftmost */
    Py_ssize_t size;
} Heap;

static void heap_down(Heap *h, Py_ssize_t i)
{
    uint64_t key = h->keys[i];
    Py_ssize_t child;
    while ((child = 2 * i + 1) < h->size) {
        if (child + 1 < h->size && h->keys[child + 1] < h->keys[child])
            child++;
        if (h->keys[child] >= key)
            break;
        h->keys[i] = h->keys[child];
        i = child;
    }
    h->keys[i] = key;
}

static void heap_push(Heap *h, int32_t rank, uint32_t pos)
{
    uint64_t key = (uint64_t)rank << 32 | pos;
    Py_ssize_t i = h->size++;
    while (i > 0 && h->keys[(i - 1) / 2] > key) {
        h->keys[i] = h->keys[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->keys[i] = key;
}

static Py_ssize_t merge_long(const PieceMerger *m, int32_t *sym, Py_ssize_t n, uint32_t *nxt,
                             uint32_t *prv, int32_t *cur, uint64_t *keys)
{
    /* Merge sym[0..n) (n >= 2, n < 2**32) in place; the new length. `keys` has room for 3n keys:
     * n - 1 initial pairs and two new pairs per merge, at most n - 1 merges. */
    Heap h = {keys, 0};
    Py_ssize_t i, out;
    uint32_t p, q, after;
    for (i = 0; i < n; i++) {
        nxt[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
        prv[i] = i > 0 ? (uint32_t)(i - 1) : NONE;
        cur[i] = i + 1 < n ? rank_of(m, sym[i], sym[i + 1]) : NO_RANK;
        if (cur[i] != NO_RANK)
            h.keys[h.size++] = (uint64_t)cur[i] << 32 | (uint64_t)i;
    }
    /* Filed in position order, a key per pair: heapify bottom-up. */
    for (i = h.size / 2 - 1; i >= 0; i--)
        heap_down(&h, i);
    while (h.size > 0) {
        uint64_t key = h.keys[0];
        int32_t rank = (int32_t)(key >> 32);
        h.keys[0] = h.keys[--h.size];
        if (h.size > 0)
            heap_down(&h, 0);
        p = (uint32_t)key;
        if (cur[p] != rank)
            continue;                   /* stale: the pair at p changed since */
        q = nxt[p];                     /* live pair, so q != NONE */
        sym[p] = m->merged[rank];
        after = nxt[q];
        nxt[p] = after;
        if (after != NONE)
            prv[after] = p;
        cur[q] = NO_RANK;               /* q is merged away */
        cur[p] = after != NONE ? rank_of(m, sym[p], sym[after]) : NO_RANK;
        if (cur[p] != NO_RANK)
            heap_push(&h, cur[p], p);
        if (prv[p] != NONE) {
            uint32_t before = prv[p];
            cur[before] = rank_of(m, sym[before], sym[p]);
            if (cur[before] != NO_RANK)
                heap_push(&h, cur[before], before);
        }
    }
    /* Compact the live symbols, in text order, to the front. Position 0 is never merged away. */
    out = 0;
    for (p = 0; p != NONE; p = nxt[p])
        sym[out++] = sym[p];
    return out;
}

static PyObject *merger_merge(PieceMerger *self, PyObject *ids)
{
    PyObject *seq, *result = NULL;
    int32_t small[SHORT_PIECE], *sym = small;
    uint32_t *links = NULL;
    int32_t *cur = NULL;
    uint64_t *keys = NULL;
    Py_ssize_t n, i;

    if (self->slots == NULL) {
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
        n = merge_short(self, sym, n);
    } else {
        /* No Python object is touched while merging: let other threads run. */
        Py_BEGIN_ALLOW_THREADS
        n = merge_long(self, sym, n, links, links + n, cur, keys);
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
    if (self->slots == NULL) {
        PyErr_SetString(PyExc_TypeError, "PieceMerger is not initialised");
        return NULL;
    }
    left = id_list(self->left, self->nmerges);
    right = id_list(self->right, self->nmerges);
    merged = id_list(self->merged, self->nmerges);
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

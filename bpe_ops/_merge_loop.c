/*
 * bpe_ops._merge_loop: the BPE merge loop of bpe_ops/trainer.py, compiled.
 *
 * The specification is the pure-Python twin `_merge_loop_python` in trainer.py; this file does the
 * same thing step for step, and the tests run both and require identical results. The setup
 * (symbolizing the pre-tokens, the alphabet, Hugging Face's ranks) stays in Python.
 *
 * The algorithm (incremental BPE, as in Hugging Face's BpeTrainer and rustbpe):
 *   - each distinct word is an array of int32 symbol ids with its count (an int64 weight);
 *   - a hash map from the pair (left, right) to a record holding the pair's live weighted count
 *     and `where`: the words the pair was ever created in (words that lost it since are skipped);
 *   - a binary max-heap of (count, pair) with lazy invalidation: whenever a pair's count changes a
 *     new entry is pushed, and a popped entry whose count is no longer the live one is dropped;
 *   - a merge rewrites only the words that contain the merged pair, left to right without overlap
 *     (`a a a` + (a, a) -> `aa a`), and applies the net change of each neighbouring pair once.
 * On equal counts the tie rule orders pairs by content: the tuple (left bytes, right bytes),
 * largest or smallest first (a memcmp; only needed on count ties), or Hugging Face's id order.
 *
 * Counts are int64. Every count, product and sum the loop computes is at most the total weighted
 * number of pairs, sum(count * (symbols - 1)), which is checked once up front: a table whose total
 * does not fit in int64 is refused with OverflowError instead of wrapping.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum tie_rule { TIE_LARGEST, TIE_SMALLEST, TIE_HF };

typedef struct {
    int32_t left, right;
    int64_t count;       /* live weighted count */
    int64_t before;      /* count when the current merge first touched the pair */
    int32_t stamp;       /* the merge that last touched the pair, -1 if none */
    int32_t *where;      /* word indices, possibly stale, without adjacent repeats */
    int32_t nwhere, capwhere;
} Pair;

typedef struct {
    uint64_t key;        /* left << 32 | right */
    int32_t rec;         /* index into pairs, -1 for an empty slot */
} Slot;

typedef struct {
    int64_t count;
    int32_t left, right;
} Entry;

typedef struct {
    /* words */
    int32_t *sym;        /* all words' symbols, one after another; merged in place */
    Py_ssize_t *start;
    int32_t *len;
    int64_t *weight;
    int32_t nwords;
    /* tokens: id -> bytes (a list owned here), bytes -> id; hf: id -> rank */
    PyObject *tokens, *token_ids;
    int32_t *rank;
    Py_ssize_t caprank;
    enum tie_rule tie;
    /* pair records, with a free list */
    Pair *pairs;
    int32_t npairs, cappairs;
    int32_t *free_recs;
    Py_ssize_t nfree, capfree;
    /* the map: open addressing, linear probing, backward-shift deletion */
    Slot *slots;
    uint64_t mask;
    Py_ssize_t used;     /* live pairs */
    /* the heap */
    Entry *heap;
    Py_ssize_t nheap, capheap;
    /* pairs touched by the current merge */
    int32_t *touched;
    Py_ssize_t ntouched, captouched;
} State;

static void *grow(void *array, Py_ssize_t *cap, Py_ssize_t need, size_t item)
{
    /* Make room for `need` items (amortised doubling); NULL, with MemoryError set, on failure. */
    Py_ssize_t n;
    void *bigger;
    if (need <= *cap)
        return array;
    n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    bigger = PyMem_Realloc(array, (size_t)n * item);
    if (bigger == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    *cap = n;
    return bigger;
}

/* ---- tie rules and heap order ---------------------------------------------------------------- */

static int bytes_cmp(State *s, int32_t x, int32_t y)
{
    /* Byte order of tokens x and y, a proper prefix first (bytes comparison in Python). */
    PyObject *bx, *by;
    Py_ssize_t lx, ly;
    int c;
    if (x == y)
        return 0;
    bx = PyList_GET_ITEM(s->tokens, x);
    by = PyList_GET_ITEM(s->tokens, y);
    lx = PyBytes_GET_SIZE(bx);
    ly = PyBytes_GET_SIZE(by);
    c = memcmp(PyBytes_AS_STRING(bx), PyBytes_AS_STRING(by), (size_t)(lx < ly ? lx : ly));
    if (c)
        return c;
    return (lx > ly) - (lx < ly);
}

static int tie_first(State *s, const Entry *a, const Entry *b)
{
    /* Whether pair a wins a count tie against pair b. */
    int c;
    if (s->tie == TIE_HF) {
        if (s->rank[a->left] != s->rank[b->left])
            return s->rank[a->left] < s->rank[b->left];
        return s->rank[a->right] < s->rank[b->right];
    }
    c = bytes_cmp(s, a->left, b->left);
    if (c == 0)
        c = bytes_cmp(s, a->right, b->right);
    return s->tie == TIE_LARGEST ? c > 0 : c < 0;
}

static int heap_first(State *s, const Entry *a, const Entry *b)
{
    if (a->count != b->count)
        return a->count > b->count;
    return tie_first(s, a, b);
}

static void sift_down(State *s, Py_ssize_t i)
{
    Entry item = s->heap[i];
    Py_ssize_t n = s->nheap, child;
    while ((child = 2 * i + 1) < n) {
        if (child + 1 < n && heap_first(s, &s->heap[child + 1], &s->heap[child]))
            child++;
        if (!heap_first(s, &s->heap[child], &item))
            break;
        s->heap[i] = s->heap[child];
        i = child;
    }
    s->heap[i] = item;
}

static int heap_push(State *s, int64_t count, int32_t left, int32_t right)
{
    Entry item = {count, left, right};
    Py_ssize_t i = s->nheap, parent;
    Entry *heap = grow(s->heap, &s->capheap, s->nheap + 1, sizeof(Entry));
    if (heap == NULL)
        return -1;
    s->heap = heap;
    s->nheap++;
    while (i > 0) {
        parent = (i - 1) / 2;
        if (!heap_first(s, &item, &heap[parent]))
            break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = item;
    return 0;
}

static Entry heap_pop(State *s)
{
    Entry top = s->heap[0];
    s->heap[0] = s->heap[--s->nheap];
    if (s->nheap)
        sift_down(s, 0);
    return top;
}

/* ---- the pair map ---------------------------------------------------------------------------- */

static uint64_t pair_key(int32_t left, int32_t right)
{
    return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

static uint64_t home(State *s, uint64_t key)
{
    /* murmur3's 64-bit finalizer: spreads both ids over all bits */
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ULL;
    key ^= key >> 33;
    return key & s->mask;
}

static int32_t find_pair(State *s, int32_t left, int32_t right)
{
    /* The record of a live pair, or -1. */
    uint64_t key = pair_key(left, right), i = home(s, key);
    while (s->slots[i].rec >= 0) {
        if (s->slots[i].key == key)
            return s->slots[i].rec;
        i = (i + 1) & s->mask;
    }
    return -1;
}

static int resize_map(State *s, uint64_t size)
{
    Slot *old = s->slots;
    uint64_t old_size = old ? s->mask + 1 : 0, j, i;
    Slot *slots = PyMem_Malloc((size_t)size * sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < size; i++)
        slots[i].rec = -1;
    s->slots = slots;
    s->mask = size - 1;
    for (j = 0; j < old_size; j++) {
        if (old[j].rec < 0)
            continue;
        i = home(s, old[j].key);
        while (slots[i].rec >= 0)
            i = (i + 1) & s->mask;
        slots[i] = old[j];
    }
    PyMem_Free(old);
    return 0;
}

static int32_t add_pair(State *s, int32_t left, int32_t right)
{
    /* The record of (left, right), created with count 0 if the pair is not live. -1 on error. */
    uint64_t key = pair_key(left, right), i;
    int32_t rec;
    Pair *p;
    if ((uint64_t)(s->used + 1) * 2 > s->mask + 1 && resize_map(s, 2 * (s->mask + 1)) < 0)
        return -1;
    for (i = home(s, key); s->slots[i].rec >= 0; i = (i + 1) & s->mask) {
        if (s->slots[i].key == key)
            return s->slots[i].rec;
    }
    if (s->nfree) {
        rec = s->free_recs[--s->nfree];
    } else {
        Py_ssize_t cap = s->cappairs;
        Pair *pairs;
        if (s->npairs == INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "more than 2**31 - 1 distinct pairs");
            return -1;
        }
        pairs = grow(s->pairs, &cap, (Py_ssize_t)s->npairs + 1, sizeof(Pair));
        if (pairs == NULL)
            return -1;
        if (cap > INT32_MAX)
            cap = INT32_MAX;
        s->pairs = pairs;
        s->cappairs = (int32_t)cap;
        rec = s->npairs++;
    }
    p = &s->pairs[rec];
    p->left = left;
    p->right = right;
    p->count = p->before = 0;
    p->stamp = -1;
    p->where = NULL;
    p->nwhere = p->capwhere = 0;
    s->slots[i].key = key;
    s->slots[i].rec = rec;
    s->used++;
    return rec;
}

static int drop_pair(State *s, int32_t rec)
{
    /* Remove a record from the map (shifting later slots of its probe run back) and free it. */
    Pair *p = &s->pairs[rec];
    uint64_t i = home(s, pair_key(p->left, p->right)), j, k;
    int32_t *free_recs;
    while (s->slots[i].rec != rec)
        i = (i + 1) & s->mask;
    for (j = i;;) {
        j = (j + 1) & s->mask;
        if (s->slots[j].rec < 0)
            break;
        k = home(s, s->slots[j].key);
        /* move slot j back to i unless its home lies cyclically in (i, j] */
        if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j))
            continue;
        s->slots[i] = s->slots[j];
        i = j;
    }
    s->slots[i].rec = -1;
    s->used--;
    PyMem_Free(p->where);
    p->where = NULL;
    p->nwhere = p->capwhere = 0;
    free_recs = grow(s->free_recs, &s->capfree, s->nfree + 1, sizeof(int32_t));
    if (free_recs == NULL)
        return -1;
    s->free_recs = free_recs;
    s->free_recs[s->nfree++] = rec;
    return 0;
}

static int add_where(State *s, int32_t rec, int32_t word)
{
    Pair *p = &s->pairs[rec];
    Py_ssize_t cap = p->capwhere;
    int32_t *where;
    if (p->nwhere && p->where[p->nwhere - 1] == word)
        return 0;                   /* the same word again, within one visit */
    if (p->nwhere == INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a pair is in more than 2**31 - 1 words");
        return -1;
    }
    where = grow(p->where, &cap, (Py_ssize_t)p->nwhere + 1, sizeof(int32_t));
    if (where == NULL)
        return -1;
    p->where = where;
    p->capwhere = cap > INT32_MAX ? INT32_MAX : (int32_t)cap;
    p->where[p->nwhere++] = word;
    return 0;
}

/* ---- one merge ------------------------------------------------------------------------------- */

typedef struct {
    int32_t left, right, new;   /* the pair being merged and the id of its result */
    int reused;                 /* the result was already a token (a duplicate merge) */
    int32_t stamp;              /* the merge number */
} Merge;

static int change(State *s, const Merge *m, int32_t left, int32_t right, int64_t delta,
                  int32_t word, int register_word)
{
    /* Add delta to a pair's count, remembering its count before this merge; the merged pair
       itself is skipped (it is dropped whole). */
    int32_t rec;
    Pair *p;
    Py_ssize_t cap = s->captouched;
    if (left == m->left && right == m->right)
        return 0;
    rec = add_pair(s, left, right);
    if (rec < 0)
        return -1;
    p = &s->pairs[rec];
    if (p->stamp != m->stamp) {
        int32_t *touched = grow(s->touched, &cap, s->ntouched + 1, sizeof(int32_t));
        if (touched == NULL)
            return -1;
        s->touched = touched;
        s->captouched = cap;
        s->touched[s->ntouched++] = rec;
        p->stamp = m->stamp;
        p->before = p->count;
    }
    p->count += delta;
    return register_word ? add_where(s, rec, word) : 0;
}

static int merge_word(State *s, const Merge *m, int32_t i, int64_t *saved)
{
    /* Replace the pair in word i, left to right without overlap, and update the neighbouring
       pairs (trainer.py's `_merge_pair` for one word). */
    int32_t *w = s->sym + s->start[i];
    int32_t n_old = s->len[i], j, k, p;
    int64_t n = s->weight[i];
    int diff_all = 0;
    for (j = 0; j + 1 < n_old; j++)
        if (w[j] == m->left && w[j + 1] == m->right)
            break;
    if (j + 1 >= n_old)
        return 0;                   /* an earlier merge took the pair away from this word */
    if (m->reused) {
        /* If `new` already is in the word, not all its occurrences come from this merge:
           diff all pairs of the word instead. */
        for (k = 0; k < n_old && !diff_all; k++)
            diff_all = w[k] == m->new;
        for (k = 0; diff_all && k + 1 < n_old; k++)
            if (change(s, m, w[k], w[k + 1], -n, i, 0) < 0)
                return -1;
    }
    for (k = j; j < n_old; k++) {   /* in place: the word only shrinks */
        if (j + 1 < n_old && w[j] == m->left && w[j + 1] == m->right) {
            w[k] = m->new;
            j += 2;
        } else {
            w[k] = w[j++];
        }
    }
    s->len[i] = k;
    *saved += n * (n_old - k);
    if (k == 1)
        return 0;                   /* the whole word became one token: no neighbours */
    if (diff_all) {
        for (p = 0; p + 1 < k; p++)
            if (change(s, m, w[p], w[p + 1], n, i, 1) < 0)
                return -1;
        return 0;
    }
    for (p = 0; p < k; p++) {
        if (w[p] != m->new)
            continue;
        if (p > 0) {
            int32_t before = w[p - 1];
            if (before == m->new) {  /* two merges side by side: `right left` became `new new` */
                if (change(s, m, m->right, m->left, -n, i, 0) < 0 ||
                    change(s, m, m->new, m->new, n, i, 1) < 0)
                    return -1;
            } else if (change(s, m, before, m->left, -n, i, 0) < 0 ||
                       change(s, m, before, m->new, n, i, 1) < 0) {
                return -1;
            }
        }
        if (p + 1 < k && w[p + 1] != m->new) {   /* (a following merge is handled as `before`) */
            int32_t after = w[p + 1];
            if (change(s, m, m->right, after, -n, i, 0) < 0 ||
                change(s, m, m->new, after, n, i, 1) < 0)
                return -1;
        }
    }
    return 0;
}

static int apply_merge(State *s, const Merge *m, int64_t min_frequency, int64_t *saved)
{
    /* Rewrite the words holding the pair, drop the pair, settle every changed pair. */
    int32_t rec = find_pair(s, m->left, m->right);
    int32_t *where = s->pairs[rec].where, nwhere = s->pairs[rec].nwhere, k;
    Py_ssize_t t;
    s->pairs[rec].where = NULL;     /* the list is ours now; the record goes */
    if (drop_pair(s, rec) < 0) {
        PyMem_Free(where);
        return -1;
    }
    s->ntouched = 0;
    *saved = 0;
    for (k = 0; k < nwhere; k++) {
        if (merge_word(s, m, where[k], saved) < 0) {
            PyMem_Free(where);
            return -1;
        }
    }
    PyMem_Free(where);
    for (t = 0; t < s->ntouched; t++) {
        Pair *p = &s->pairs[s->touched[t]];
        if (p->count == 0) {
            if (drop_pair(s, s->touched[t]) < 0)
                return -1;
        } else if (p->count != p->before && p->count >= min_frequency) {
            if (heap_push(s, p->count, p->left, p->right) < 0)
                return -1;
        }
    }
    return 0;
}

static int fresh_heap(State *s, int64_t min_frequency)
{
    /* One entry per live pair that can win; pairs below min_frequency get one if they rise. */
    uint64_t i;
    Py_ssize_t k;
    Entry *heap = grow(s->heap, &s->capheap, s->used ? s->used : 1, sizeof(Entry));
    if (heap == NULL)
        return -1;
    s->heap = heap;
    s->nheap = 0;
    for (i = 0; i <= s->mask; i++) {
        Pair *p;
        if (s->slots[i].rec < 0)
            continue;
        p = &s->pairs[s->slots[i].rec];
        if (p->count >= min_frequency) {
            Entry e = {p->count, p->left, p->right};
            heap[s->nheap++] = e;
        }
    }
    for (k = s->nheap / 2 - 1; k >= 0; k--)
        sift_down(s, k);
    return 0;
}

/* ---- setup ----------------------------------------------------------------------------------- */

static int add_token(State *s, PyObject *token, int32_t id)
{
    PyObject *key = PyLong_FromLong(id);
    int32_t *rank;
    Py_ssize_t cap = s->caprank;
    if (key == NULL)
        return -1;
    if (PyList_Append(s->tokens, token) < 0 || PyDict_SetItem(s->token_ids, token, key) < 0) {
        Py_DECREF(key);
        return -1;
    }
    Py_DECREF(key);
    rank = grow(s->rank, &cap, (Py_ssize_t)id + 1, sizeof(int32_t));
    if (rank == NULL)
        return -1;
    s->rank = rank;
    s->caprank = cap;
    s->rank[id] = id;               /* hf: new tokens rank by id, after the alphabet */
    return 0;
}

static int load_words(State *s, PyObject *words, PyObject *weights, Py_ssize_t nsymbols_max)
{
    /* Copy the symbol strings into int32 arrays and check that every count fits in int64. */
    Py_ssize_t nwords = PyList_GET_SIZE(words), total = 0, i, j;
    int64_t pair_weight = 0;
    if (PyList_GET_SIZE(weights) != nwords) {
        PyErr_SetString(PyExc_ValueError, "words and weights differ in length");
        return -1;
    }
    if (nwords > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2**31 - 1 distinct words");
        return -1;
    }
    for (i = 0; i < nwords; i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        if (!PyUnicode_Check(word)) {
            PyErr_SetString(PyExc_TypeError, "words must be str (a character per symbol id)");
            return -1;
        }
        if (PyUnicode_GET_LENGTH(word) > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a word of more than 2**31 - 1 symbols");
            return -1;
        }
        total += PyUnicode_GET_LENGTH(word);
    }
    s->nwords = (int32_t)nwords;
    s->sym = PyMem_Malloc((size_t)(total ? total : 1) * sizeof(int32_t));
    s->start = PyMem_Malloc((size_t)(nwords ? nwords : 1) * sizeof(Py_ssize_t));
    s->len = PyMem_Malloc((size_t)(nwords ? nwords : 1) * sizeof(int32_t));
    s->weight = PyMem_Malloc((size_t)(nwords ? nwords : 1) * sizeof(int64_t));
    if (!s->sym || !s->start || !s->len || !s->weight) {
        PyErr_NoMemory();
        return -1;
    }
    total = 0;
    for (i = 0; i < nwords; i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        int kind = PyUnicode_KIND(word);
        const void *data = PyUnicode_DATA(word);
        Py_ssize_t len = PyUnicode_GET_LENGTH(word);
        long long n = PyLong_AsLongLong(PyList_GET_ITEM(weights, i));
        if (n == -1 && PyErr_Occurred())
            return -1;
        if (n < 1) {
            PyErr_SetString(PyExc_ValueError, "word counts must be positive");
            return -1;
        }
        if (len > 1 && (n > INT64_MAX / (len - 1) || pair_weight > INT64_MAX - n * (len - 1))) {
            PyErr_SetString(PyExc_OverflowError,
                            "the pair counts do not fit in 64 bits (sum of count * (symbols - 1) "
                            "exceeds 2**63 - 1); use the pure-Python loop");
            return -1;
        }
        if (len > 1)
            pair_weight += n * (len - 1);
        s->start[i] = total;
        s->len[i] = (int32_t)len;
        s->weight[i] = n;
        for (j = 0; j < len; j++) {
            Py_UCS4 id = PyUnicode_READ(kind, data, j);
            if (id >= (Py_UCS4)nsymbols_max) {
                PyErr_Format(PyExc_ValueError, "symbol id %lu is not in the alphabet",
                             (unsigned long)id);
                return -1;
            }
            s->sym[total + j] = (int32_t)id;
        }
        total += len;
    }
    return 0;
}

static int count_pairs(State *s, int64_t min_frequency)
{
    int32_t i, j;
    if (resize_map(s, 1024) < 0)
        return -1;
    for (i = 0; i < s->nwords; i++) {
        const int32_t *w = s->sym + s->start[i];
        for (j = 0; j + 1 < s->len[i]; j++) {
            int32_t rec = add_pair(s, w[j], w[j + 1]);
            if (rec < 0 || add_where(s, rec, i) < 0)
                return -1;
            s->pairs[rec].count += s->weight[i];
        }
    }
    return fresh_heap(s, min_frequency);
}

static void free_state(State *s)
{
    int32_t i;
    for (i = 0; i < s->npairs; i++)
        PyMem_Free(s->pairs[i].where);
    PyMem_Free(s->pairs);
    PyMem_Free(s->free_recs);
    PyMem_Free(s->slots);
    PyMem_Free(s->heap);
    PyMem_Free(s->touched);
    PyMem_Free(s->sym);
    PyMem_Free(s->start);
    PyMem_Free(s->len);
    PyMem_Free(s->weight);
    PyMem_Free(s->rank);
    Py_XDECREF(s->tokens);
    Py_XDECREF(s->token_ids);
}

/* ---- the loop -------------------------------------------------------------------------------- */

static int new_token(State *s, Merge *m, int *duplicates, int32_t *new_tokens)
{
    /* The id of the merged bytes: an existing token's (a duplicate merge) or a new one. */
    PyObject *a = PyList_GET_ITEM(s->tokens, m->left), *b = PyList_GET_ITEM(s->tokens, m->right);
    Py_ssize_t la = PyBytes_GET_SIZE(a), lb = PyBytes_GET_SIZE(b);
    PyObject *merged = PyBytes_FromStringAndSize(NULL, la + lb), *id;
    int32_t next = (int32_t)PyList_GET_SIZE(s->tokens);
    if (merged == NULL)
        return -1;
    memcpy(PyBytes_AS_STRING(merged), PyBytes_AS_STRING(a), (size_t)la);
    memcpy(PyBytes_AS_STRING(merged) + la, PyBytes_AS_STRING(b), (size_t)lb);
    id = PyDict_GetItemWithError(s->token_ids, merged);    /* borrowed */
    if (id != NULL) {
        m->new = (int32_t)PyLong_AsLong(id);
        m->reused = 1;
        ++*duplicates;
    } else if (PyErr_Occurred() || add_token(s, merged, next) < 0) {
        Py_DECREF(merged);
        return -1;
    } else {
        m->new = next;
        m->reused = 0;
        ++*new_tokens;
    }
    Py_DECREF(merged);
    return 0;
}

static int append_int64(PyObject *list, int64_t value)
{
    PyObject *item = PyLong_FromLongLong(value);
    int rc;
    if (item == NULL)
        return -1;
    rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *
merge_loop(PyObject *module, PyObject *args)
{
    PyObject *words, *weights, *alphabet, *ranks, *progress;
    Py_ssize_t num_merges, i;
    long long min_frequency;
    const char *tie_break, *stop_reason = "vocab_size";
    State st;
    State *s = &st;
    PyObject *merges = NULL, *merge_counts = NULL, *tokens_saved = NULL, *result = NULL;
    int32_t new_tokens = 0;
    int tied = 0, duplicates = 0;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!O!O!nLsOO:merge_loop", &PyList_Type, &words, &PyList_Type,
                          &weights, &PyList_Type, &alphabet, &num_merges, &min_frequency,
                          &tie_break, &ranks, &progress))
        return NULL;
    memset(s, 0, sizeof(State));
    if (strcmp(tie_break, "largest") == 0) {
        s->tie = TIE_LARGEST;
    } else if (strcmp(tie_break, "smallest") == 0) {
        s->tie = TIE_SMALLEST;
    } else if (strcmp(tie_break, "hf") == 0) {
        s->tie = TIE_HF;
    } else {
        PyErr_Format(PyExc_ValueError, "unknown tie_break %s", tie_break);
        return NULL;
    }
    if (s->tie == TIE_HF &&
        !(PyList_Check(ranks) && PyList_GET_SIZE(ranks) == PyList_GET_SIZE(alphabet))) {
        PyErr_SetString(PyExc_ValueError, "tie_break 'hf' needs a rank per alphabet symbol");
        return NULL;
    }
    if (num_merges < 0 || num_merges > INT32_MAX - PyList_GET_SIZE(alphabet)) {
        PyErr_SetString(PyExc_ValueError, "num_merges out of range");
        return NULL;
    }

    s->tokens = PyList_New(0);
    s->token_ids = PyDict_New();
    merges = PyList_New(0);
    merge_counts = PyList_New(0);
    tokens_saved = PyList_New(0);
    if (!s->tokens || !s->token_ids || !merges || !merge_counts || !tokens_saved)
        goto done;
    for (i = 0; i < PyList_GET_SIZE(alphabet); i++) {
        PyObject *token = PyList_GET_ITEM(alphabet, i);
        if (!PyBytes_Check(token)) {
            PyErr_SetString(PyExc_TypeError, "the alphabet must be a list of bytes");
            goto done;
        }
        if (add_token(s, token, (int32_t)i) < 0)
            goto done;
        if (s->tie == TIE_HF) {
            long r = PyLong_AsLong(PyList_GET_ITEM(ranks, i));
            if (r == -1 && PyErr_Occurred())
                goto done;
            s->rank[i] = (int32_t)r;
        }
    }
    if (load_words(s, words, weights, PyList_GET_SIZE(alphabet)) < 0 ||
        count_pairs(s, (int64_t)min_frequency) < 0)
        goto done;

    while (new_tokens < num_merges) {
        Merge m;
        Entry best;
        PyObject *pair;
        int64_t saved;
        int found = 0;
        /* The best live pair: skip entries whose count is stale (lazy invalidation). */
        while (s->nheap && !found) {
            int32_t rec;
            best = heap_pop(s);
            rec = find_pair(s, best.left, best.right);
            found = rec >= 0 && s->pairs[rec].count == best.count;
        }
        if (!found) {
            /* Every pair at or above min_frequency has a live entry, so what is left is rarer. */
            stop_reason = s->used ? "min_frequency" : "no_pairs";
            break;
        }
        /* A tie: once stale entries (and copies of the winner) are dropped, the next live entry
           has the same count. */
        while (s->nheap) {
            Entry *top = &s->heap[0];
            if (!(top->left == best.left && top->right == best.right)) {
                int32_t rec = find_pair(s, top->left, top->right);
                if (rec >= 0 && s->pairs[rec].count == top->count)
                    break;
            }
            heap_pop(s);
        }
        if (s->nheap && s->heap[0].count == best.count)
            tied++;

        m.left = best.left;
        m.right = best.right;
        m.stamp = (int32_t)PyList_GET_SIZE(merges);
        if (new_token(s, &m, &duplicates, &new_tokens) < 0)
            goto done;
        pair = PyTuple_Pack(2, PyList_GET_ITEM(s->tokens, m.left),
                            PyList_GET_ITEM(s->tokens, m.right));
        if (pair == NULL)
            goto done;
        if (PyList_Append(merges, pair) < 0) {
            Py_DECREF(pair);
            goto done;
        }
        Py_DECREF(pair);            /* the merges list holds it */
        if (append_int64(merge_counts, best.count) < 0 ||
            apply_merge(s, &m, (int64_t)min_frequency, &saved) < 0 ||
            append_int64(tokens_saved, saved) < 0)
            goto done;
        if (s->nheap > 3 * s->used + 65536 && fresh_heap(s, (int64_t)min_frequency) < 0)
            goto done;              /* mostly stale entries; amortised O(1) per push */
        if (progress != Py_None) {
            PyObject *r = PyObject_CallFunction(progress, "nOL", PyList_GET_SIZE(merges), pair,
                                                (long long)best.count);
            if (r == NULL)
                goto done;
            Py_DECREF(r);
        }
        if (PyErr_CheckSignals() < 0)
            goto done;
    }
    result = Py_BuildValue("OOOiis", merges, merge_counts, tokens_saved, tied, duplicates,
                           stop_reason);
done:
    free_state(s);
    Py_XDECREF(merges);
    Py_XDECREF(merge_counts);
    Py_XDECREF(tokens_saved);
    return result;
}

static PyMethodDef methods[] = {
    {"merge_loop", merge_loop, METH_VARARGS,
     "merge_loop(words, weights, alphabet, num_merges, min_frequency, tie_break, hf_ranks, "
     "progress)\n--\n\n"
     "The compiled twin of trainer._merge_loop_python: same arguments, same result tuple\n"
     "(merges, merge_counts, tokens_saved, tied_merges, duplicate_merges, stop_reason)."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_merge_loop",
    "The BPE merge loop in C; trainer.py's pure-Python loop is its specification.", -1, methods,
    NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC
PyInit__merge_loop(void)
{
    return PyModule_Create(&module);
}

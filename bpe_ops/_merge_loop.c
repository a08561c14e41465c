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
 *   - a binary max-heap of (count, pair) with lazy invalidation: whenever a pair's count rises a
 *     new entry is pushed; a fall pushes nothing (the pair's entries are then above its count), and
 *     a popped entry above the live count goes back in with the live count, one below is dropped.
 *     Every live pair thus keeps an entry at or above its count, and the first entry popped whose
 *     count is live is the best pair: the same pair as pushing on every change, with about half
 *     the pushes and a smaller heap;
 *   - a merge rewrites only the words that contain the merged pair, left to right without overlap
 *     (`a a a` + (a, a) -> `aa a`), and applies the net change of each neighbouring pair once.
 * On equal counts the tie rule orders pairs by content: the tuple (left bytes, right bytes),
 * largest or smallest first (a memcmp; only needed on count ties), or Hugging Face's id order.
 *
 * Counts are int64. Every count, product and sum the loop computes is at most the total weighted
 * number of pairs, sum(count * (symbols - 1)), which is checked once up front: a table whose total
 * does not fit in int64 is refused with OverflowError instead of wrapping.
 *
 * The loop runs without the GIL: tokens live in a byte arena with a C map from bytes to id, the
 * merges in C arrays, and memory comes from PyMem_Raw*. Every ~50 ms it takes the GIL back to replay
 * the progress calls of the merges made since (one call per merge, in order, as the Python twin
 * makes them) and to check for Ctrl-C. Other threads (an import, a plot) run meanwhile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "_common.h"

/* The per-pair steps (find or add a pair, note a word) run millions of times per training: their
   common case is a few instructions, which a call's prologue would double. They are inlined, and
   their rare branches (a new record, a list that grows) are calls of their own. */
#if defined(__GNUC__)
#define HOT static inline __attribute__((always_inline))
#define COLD static __attribute__((noinline))
#else
#define HOT static inline
#define COLD static
#endif

enum tie_rule { TIE_LARGEST, TIE_SMALLEST, TIE_HF };

#define WHERE_INLINE 2          /* word indices a pair record holds without an allocation */

typedef struct {
    int32_t left, right;
    int64_t count;       /* live weighted count */
    int64_t before;      /* count when the current merge first touched the pair */
    int32_t stamp;       /* the merge that last touched the pair, -1 if none */
    /* where: word indices, possibly stale, without adjacent repeats. Most pairs are in one or two
       words: up to WHERE_INLINE indices live in the record itself (capwhere 0), in the room of the
       pointer, and only a longer list is allocated (capwhere its capacity). */
    union {
        int32_t *heap;
        int32_t inline_words[WHERE_INLINE];
    } where;
    int32_t nwhere, capwhere;
} Pair;

static inline int32_t *where_of(Pair *p)
{
    return p->capwhere ? p->where.heap : p->where.inline_words;
}

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
    /* tokens: id -> bytes (an arena: token t is tok_data[tok_start[t]:tok_start[t] + tok_size[t]]),
       bytes -> id (an open-addressing map of ids, -1 for empty); hf: id -> rank */
    uint8_t *tok_data;
    Py_ssize_t tok_used, cap_tok_data;
    Py_ssize_t *tok_start;
    int32_t *tok_size;
    Py_ssize_t cap_tok_start, cap_tok_size;
    int32_t ntokens;
    int32_t *tok_slots;
    uint64_t tok_mask;
    int32_t *rank;
    Py_ssize_t caprank;
    enum tie_rule tie;
    /* max_token_length (0: none): a pair is counted when both are base tokens (id < nbase) or
       their symbol lengths (symlen, by id) add up to less than it */
    int64_t max_length;
    int32_t nbase;
    int64_t *symlen;
    Py_ssize_t capsymlen;
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
    /* the merges made: (left, right) ids, the pair count, the tokens it saved */
    int32_t *log_left, *log_right;
    int64_t *log_count, *log_saved;
    Py_ssize_t nlog, cap_log_left, cap_log_right, cap_log_count, cap_log_saved;
    /* what went wrong, raised once the GIL is back: NULL (out of memory) or an OverflowError text */
    const char *overflow;
} State;

static void *grow(void *array, Py_ssize_t *cap, Py_ssize_t need, size_t item)
{
    /* `array` with room for `need` items (amortised doubling); NULL when out of memory (no GIL
       needed: the caller fails with -1 and the loop raises MemoryError once it holds the GIL). */
    size_t grown_cap = (size_t)*cap;
    if (tb_reserve_with(PyMem_RawRealloc, &array, &grown_cap, (size_t)need, item, 16) < 0)
        return NULL;
    *cap = (Py_ssize_t)grown_cap;
    return array;
}

static int overflow(State *s, const char *message)
{
    s->overflow = message;
    return -1;
}

static void raise_state_error(State *s)
{
    /* With the GIL: the exception of a step that failed without it. */
    if (PyErr_Occurred())
        return;
    if (s->overflow)
        PyErr_SetString(PyExc_OverflowError, s->overflow);
    else
        PyErr_NoMemory();
}

/* ---- tokens: an arena of bytes and a map from bytes to id -------------------------------------- */

static const uint8_t *token_bytes(const State *s, int32_t id)
{
    return s->tok_data + s->tok_start[id];
}

static uint64_t token_slot(const State *s, const uint8_t *b, Py_ssize_t n)
{
    /* The slot holding the id of bytes b[0..n), or the empty slot where it would go. */
    uint64_t i = tb_hash_bytes(b, (size_t)n) & s->tok_mask;
    for (;; i = (i + 1) & s->tok_mask) {
        int32_t t = s->tok_slots[i];
        if (t < 0 || (s->tok_size[t] == n && tb_equal(token_bytes(s, t), b, (size_t)n)))
            return i;
    }
}

static int resize_tokens(State *s, uint64_t size)
{
    int32_t *slots = PyMem_RawMalloc((size_t)size * sizeof(int32_t)), t;
    uint64_t i;
    if (slots == NULL)
        return -1;
    for (i = 0; i < size; i++)
        slots[i] = -1;
    PyMem_RawFree(s->tok_slots);
    s->tok_slots = slots;
    s->tok_mask = size - 1;
    for (t = 0; t < s->ntokens; t++)
        s->tok_slots[token_slot(s, token_bytes(s, t), s->tok_size[t])] = t;
    return 0;
}

static int32_t find_token(const State *s, const uint8_t *b, Py_ssize_t n)
{
    return s->tok_slots[token_slot(s, b, n)];
}

static int add_token(State *s, const uint8_t *a, Py_ssize_t na, const uint8_t *b, Py_ssize_t nb)
{
    /* Token number ntokens := a + b (b may be empty); -1 when out of memory. */
    int32_t id = s->ntokens, *size, *rank;
    int64_t *symlen;
    Py_ssize_t *start, cap;
    uint8_t *data;
    if (id == INT32_MAX)
        return overflow(s, "more than 2**31 - 1 tokens");
    if ((uint64_t)(id + 1) * 2 > s->tok_mask + 1 && resize_tokens(s, s->tok_slots ? 2 * (s->tok_mask + 1) : 1024) < 0)
        return -1;
    if ((data = grow(s->tok_data, &s->cap_tok_data, s->tok_used + na + nb, 1)) == NULL)
        return -1;
    s->tok_data = data;
    if ((start = grow(s->tok_start, &s->cap_tok_start, (Py_ssize_t)id + 1, sizeof(Py_ssize_t))) == NULL)
        return -1;
    s->tok_start = start;
    if ((size = grow(s->tok_size, &s->cap_tok_size, (Py_ssize_t)id + 1, sizeof(int32_t))) == NULL)
        return -1;
    s->tok_size = size;
    cap = s->caprank;
    if ((rank = grow(s->rank, &cap, (Py_ssize_t)id + 1, sizeof(int32_t))) == NULL)
        return -1;
    s->rank = rank;
    s->caprank = cap;
    if ((symlen = grow(s->symlen, &s->capsymlen, (Py_ssize_t)id + 1, sizeof(int64_t))) == NULL)
        return -1;
    s->symlen = symlen;
    s->symlen[id] = 1;              /* base tokens: set by the caller; merged ones: new_token */
    if (na + nb > INT32_MAX)
        return overflow(s, "a token of more than 2**31 - 1 bytes");
    tb_copy(data + s->tok_used, a, (size_t)na);
    tb_copy(data + s->tok_used + na, b, (size_t)nb);
    s->tok_start[id] = s->tok_used;
    s->tok_size[id] = (int32_t)(na + nb);
    s->tok_used += na + nb;
    s->rank[id] = id;               /* hf: new tokens rank by id, after the alphabet */
    s->tok_slots[token_slot(s, data + s->tok_start[id], na + nb)] = id;
    s->ntokens++;
    return 0;
}

/* ---- tie rules and heap order ---------------------------------------------------------------- */

static int bytes_cmp(State *s, int32_t x, int32_t y)
{
    /* Byte order of tokens x and y, a proper prefix first (bytes comparison in Python). */
    int32_t lx, ly;
    int c;
    if (x == y)
        return 0;
    lx = s->tok_size[x];
    ly = s->tok_size[y];
    c = tb_compare(token_bytes(s, x), token_bytes(s, y), (size_t)(lx < ly ? lx : ly));
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

/* The heap of (count, pair) entries: the most frequent first, ties by the tie rule. */
TB_HEAP(pair_heap, Entry, State *, heap_first)

static int heap_push(State *s, int64_t count, int32_t left, int32_t right)
{
    Entry item = {count, left, right};
    Entry *heap = grow(s->heap, &s->capheap, s->nheap + 1, sizeof(Entry));
    if (heap == NULL)
        return -1;
    s->heap = heap;
    heap[s->nheap] = item;
    pair_heap_sift_up(s, heap, (size_t)s->nheap++);
    return 0;
}

static Entry heap_pop(State *s)
{
    size_t n = (size_t)s->nheap;
    Entry top = pair_heap_pop(s, s->heap, &n);
    s->nheap = (Py_ssize_t)n;
    return top;
}

/* ---- the pair map ---------------------------------------------------------------------------- */

static uint64_t home(State *s, uint64_t key)
{
    return tb_mix64(key) & s->mask;
}

static int32_t find_pair(State *s, int32_t left, int32_t right)
{
    /* The record of a live pair, or -1. */
    uint64_t key = tb_pair_key(left, right), i = home(s, key);
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
    Slot *slots = PyMem_RawMalloc((size_t)size * sizeof(Slot));
    if (slots == NULL)
        return -1;
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
    PyMem_RawFree(old);
    return 0;
}

COLD int32_t new_pair(State *s, int32_t left, int32_t right, uint64_t key, uint64_t i)
{
    /* A record with count 0 for the pair (left, right) = key, not live, in the empty slot i. */
    int32_t rec;
    Pair *p;
    if (s->nfree) {
        rec = s->free_recs[--s->nfree];
    } else {
        Py_ssize_t cap = s->cappairs;
        Pair *pairs;
        if (s->npairs == INT32_MAX)
            return overflow(s, "more than 2**31 - 1 distinct pairs");
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
    p->where.heap = NULL;
    p->nwhere = p->capwhere = 0;
    s->slots[i].key = key;
    s->slots[i].rec = rec;
    s->used++;
    return rec;
}

HOT int32_t add_pair(State *s, int32_t left, int32_t right)
{
    /* The record of (left, right), created with count 0 if the pair is not live. -1 on error. */
    uint64_t key = tb_pair_key(left, right), i;
    if ((uint64_t)(s->used + 1) * 2 > s->mask + 1 && resize_map(s, 2 * (s->mask + 1)) < 0)
        return -1;
    for (i = home(s, key); s->slots[i].rec >= 0; i = (i + 1) & s->mask) {
        if (s->slots[i].key == key)
            return s->slots[i].rec;
    }
    return new_pair(s, left, right, key, i);
}

static int drop_pair(State *s, int32_t rec)
{
    /* Remove a record from the map (shifting later slots of its probe run back) and free it. */
    Pair *p = &s->pairs[rec];
    uint64_t i = home(s, tb_pair_key(p->left, p->right)), j, k;
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
    if (p->capwhere)
        PyMem_RawFree(p->where.heap);
    p->where.heap = NULL;
    p->nwhere = p->capwhere = 0;
    free_recs = grow(s->free_recs, &s->capfree, s->nfree + 1, sizeof(int32_t));
    if (free_recs == NULL)
        return -1;
    s->free_recs = free_recs;
    s->free_recs[s->nfree++] = rec;
    return 0;
}

COLD int add_where_grown(State *s, Pair *p, int32_t word)
{
    /* add_where when the list is full: it moves to memory of its own, or grows. */
    Py_ssize_t cap = p->capwhere;
    int32_t *where = where_of(p);
    if (p->nwhere == INT32_MAX)
        return overflow(s, "a pair is in more than 2**31 - 1 words");
    if (cap == 0) {
        int32_t inline_words[WHERE_INLINE];
        memcpy(inline_words, p->where.inline_words, sizeof(inline_words));
        where = grow(NULL, &cap, (Py_ssize_t)p->nwhere + 1, sizeof(int32_t));
        if (where == NULL)
            return -1;
        memcpy(where, inline_words, sizeof(inline_words));
    } else {
        where = grow(where, &cap, (Py_ssize_t)p->nwhere + 1, sizeof(int32_t));
        if (where == NULL)
            return -1;
    }
    p->where.heap = where;
    p->capwhere = cap > INT32_MAX ? INT32_MAX : (int32_t)cap;
    where[p->nwhere++] = word;
    return 0;
}

HOT int add_where(State *s, int32_t rec, int32_t word)
{
    Pair *p = &s->pairs[rec];
    int32_t *where = where_of(p);
    if (p->nwhere && where[p->nwhere - 1] == word)
        return 0;                   /* the same word again, within one visit */
    if (p->nwhere < (p->capwhere ? p->capwhere : WHERE_INLINE)) {
        where[p->nwhere++] = word;
        return 0;
    }
    return add_where_grown(s, p, word);
}

/* ---- one merge ------------------------------------------------------------------------------- */

typedef struct {
    int32_t left, right, new;   /* the pair being merged and the id of its result */
    int reused;                 /* the result was already a token (a duplicate merge) */
    int32_t stamp;              /* the merge number */
} Merge;

static int counted(const State *s, int32_t left, int32_t right)
{
    /* Whether the loop counts the pair at all (max_token_length; trainer.py's `counted`). */
    return s->max_length == 0 || (left < s->nbase && right < s->nbase) ||
           s->symlen[left] + s->symlen[right] < s->max_length;
}

HOT int change(State *s, const Merge *m, int32_t left, int32_t right, int64_t delta,
               int32_t word, int register_word)
{
    /* Add delta to a pair's count, remembering its count before this merge; the merged pair
       itself is skipped (it is dropped whole), and so is a pair never counted. */
    int32_t rec;
    Pair *p;
    Py_ssize_t cap = s->captouched;
    if ((left == m->left && right == m->right) || !counted(s, left, right))
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
    Pair *p = &s->pairs[rec];
    int32_t inline_words[WHERE_INLINE], *where, nwhere = p->nwhere, k;
    int owned = p->capwhere != 0;
    Py_ssize_t t;
    /* The list is ours now (an inline one copied: the record goes, and may be reused at once). */
    if (owned) {
        where = p->where.heap;
        p->where.heap = NULL;
        p->capwhere = 0;
    } else {
        memcpy(inline_words, p->where.inline_words, sizeof(inline_words));
        where = inline_words;
    }
    p->nwhere = 0;
    if (drop_pair(s, rec) < 0) {
        if (owned)
            PyMem_RawFree(where);
        return -1;
    }
    s->ntouched = 0;
    *saved = 0;
    for (k = 0; k < nwhere; k++) {
        if (merge_word(s, m, where[k], saved) < 0) {
            if (owned)
                PyMem_RawFree(where);
            return -1;
        }
    }
    if (owned)
        PyMem_RawFree(where);
    for (t = 0; t < s->ntouched; t++) {
        Pair *p = &s->pairs[s->touched[t]];
        if (p->count == 0) {
            if (drop_pair(s, s->touched[t]) < 0)
                return -1;
        } else if (p->count > p->before && p->count >= min_frequency) {   /* a fall: see settle */
            if (heap_push(s, p->count, p->left, p->right) < 0)
                return -1;
        }
    }
    return 0;
}

static int settle(State *s, const Entry *e, int64_t min_frequency, int *live)
{
    /* The popped entry e against its pair's live count: *live is 1 when e is exact. An entry above
       the count (the pair fell since) goes back in with the live count, if it can still win; a
       dead pair's entry, or one below the count (a higher one was pushed), is dropped. */
    int32_t rec = find_pair(s, e->left, e->right);
    int64_t count;
    *live = 0;
    if (rec < 0)
        return 0;
    count = s->pairs[rec].count;
    if (count == e->count)
        *live = 1;
    else if (count < e->count && count >= min_frequency)
        return heap_push(s, count, e->left, e->right);
    return 0;
}

static int fresh_heap(State *s, int64_t min_frequency)
{
    /* One entry per live pair that can win; pairs below min_frequency get one if they rise. */
    uint64_t i;
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
    pair_heap_heapify(s, heap, (size_t)s->nheap);
    return 0;
}

/* ---- setup (with the GIL) ------------------------------------------------------------------- */

static Py_ssize_t word_length(PyObject *word)
{
    return PyBytes_Check(word) ? PyBytes_GET_SIZE(word) : PyUnicode_GET_LENGTH(word);
}

static int load_words(State *s, PyObject *words, PyObject *weights, Py_ssize_t nsymbols_max)
{
    /* Copy the words into int32 arrays and check that every count fits in int64. A word is a str
     * (a character per symbol id, trainer._symbolize's form) or, in byte mode, the pre-token's
     * bytes themselves (byte b is symbol b): then words of one byte and zero counts are skipped
     * here, as _symbolize would have dropped them. */
    Py_ssize_t nwords = PyList_GET_SIZE(words), kept = 0, total = 0, i, j;
    int64_t pair_weight = 0;
    if (PyList_GET_SIZE(weights) != nwords) {
        PyErr_SetString(PyExc_ValueError, "words and weights differ in length");
        return -1;
    }
    for (i = 0; i < nwords; i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        if (!PyUnicode_Check(word) && !PyBytes_Check(word)) {
            PyErr_SetString(PyExc_TypeError, "words must be str (a character per symbol id) or bytes");
            return -1;
        }
        if (word_length(word) > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a word of more than 2**31 - 1 symbols");
            return -1;
        }
        if (PyBytes_Check(word) && PyBytes_GET_SIZE(word) < 2)
            continue;
        kept++;
        total += word_length(word);
    }
    if (kept > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2**31 - 1 distinct words");
        return -1;
    }
    s->sym = PyMem_RawMalloc((size_t)(total ? total : 1) * sizeof(int32_t));
    s->start = PyMem_RawMalloc((size_t)(kept ? kept : 1) * sizeof(Py_ssize_t));
    s->len = PyMem_RawMalloc((size_t)(kept ? kept : 1) * sizeof(int32_t));
    s->weight = PyMem_RawMalloc((size_t)(kept ? kept : 1) * sizeof(int64_t));
    if (!s->sym || !s->start || !s->len || !s->weight) {
        PyErr_NoMemory();
        return -1;
    }
    total = 0;
    s->nwords = 0;
    for (i = 0; i < nwords; i++) {
        PyObject *word = PyList_GET_ITEM(words, i);
        int is_bytes = PyBytes_Check(word);
        Py_ssize_t len = word_length(word);
        long long n;
        if (is_bytes && len < 2)
            continue;
        n = PyLong_AsLongLong(PyList_GET_ITEM(weights, i));
        if (n == -1 && PyErr_Occurred())
            return -1;
        if (is_bytes && n == 0)
            continue;
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
        s->start[s->nwords] = total;
        s->len[s->nwords] = (int32_t)len;
        s->weight[s->nwords] = n;
        if (is_bytes) {
            const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(word);
            if (nsymbols_max < 256) {
                PyErr_SetString(PyExc_ValueError, "bytes words need the 256-byte alphabet");
                return -1;
            }
            for (j = 0; j < len; j++)
                s->sym[total + j] = data[j];
        } else {
            int kind = PyUnicode_KIND(word);
            const void *data = PyUnicode_DATA(word);
            for (j = 0; j < len; j++) {
                Py_UCS4 id = PyUnicode_READ(kind, data, j);
                if (id >= (Py_UCS4)nsymbols_max) {
                    PyErr_Format(PyExc_ValueError, "symbol id %lu is not in the alphabet",
                                 (unsigned long)id);
                    return -1;
                }
                s->sym[total + j] = (int32_t)id;
            }
        }
        total += len;
        s->nwords++;
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
        if (s->pairs[i].capwhere)
            PyMem_RawFree(s->pairs[i].where.heap);
    PyMem_RawFree(s->pairs);
    PyMem_RawFree(s->free_recs);
    PyMem_RawFree(s->slots);
    PyMem_RawFree(s->heap);
    PyMem_RawFree(s->touched);
    PyMem_RawFree(s->sym);
    PyMem_RawFree(s->start);
    PyMem_RawFree(s->len);
    PyMem_RawFree(s->weight);
    PyMem_RawFree(s->rank);
    PyMem_RawFree(s->symlen);
    PyMem_RawFree(s->tok_data);
    PyMem_RawFree(s->tok_start);
    PyMem_RawFree(s->tok_size);
    PyMem_RawFree(s->tok_slots);
    PyMem_RawFree(s->log_left);
    PyMem_RawFree(s->log_right);
    PyMem_RawFree(s->log_count);
    PyMem_RawFree(s->log_saved);
}

/* ---- the loop (without the GIL) ---------------------------------------------------------------- */

static int new_token(State *s, Merge *m, int *duplicates, int32_t *new_tokens)
{
    /* The id of the merged bytes: an existing token's (a duplicate merge) or a new one. */
    int32_t na = s->tok_size[m->left], nb = s->tok_size[m->right], id;
    uint8_t *merged = PyMem_RawMalloc((size_t)na + (size_t)nb + 1);
    if (merged == NULL)
        return -1;
    tb_copy(merged, token_bytes(s, m->left), (size_t)na);
    tb_copy(merged + na, token_bytes(s, m->right), (size_t)nb);
    id = find_token(s, merged, (Py_ssize_t)na + nb);
    if (id >= 0) {
        m->new = id;
        m->reused = 1;
        ++*duplicates;
    } else {
        m->new = s->ntokens;
        m->reused = 0;
        if (add_token(s, merged, (Py_ssize_t)na + nb, NULL, 0) < 0) {
            PyMem_RawFree(merged);
            return -1;
        }
        s->symlen[m->new] = s->symlen[m->left] + s->symlen[m->right];
        ++*new_tokens;
    }
    PyMem_RawFree(merged);
    return 0;
}

static int log_merge(State *s, const Merge *m, int64_t count)
{
    Py_ssize_t need = s->nlog + 1;
    int32_t *left = grow(s->log_left, &s->cap_log_left, need, sizeof(int32_t)), *right;
    int64_t *counts, *saved;
    if (left == NULL)
        return -1;
    s->log_left = left;
    if ((right = grow(s->log_right, &s->cap_log_right, need, sizeof(int32_t))) == NULL)
        return -1;
    s->log_right = right;
    if ((counts = grow(s->log_count, &s->cap_log_count, need, sizeof(int64_t))) == NULL)
        return -1;
    s->log_count = counts;
    if ((saved = grow(s->log_saved, &s->cap_log_saved, need, sizeof(int64_t))) == NULL)
        return -1;
    s->log_saved = saved;
    left[s->nlog] = m->left;
    right[s->nlog] = m->right;
    counts[s->nlog] = count;
    saved[s->nlog] = 0;
    s->nlog++;
    return 0;
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- back in Python (with the GIL) -------------------------------------------------------------- */

static PyObject *token_object(State *s, PyObject *objects, int32_t id)
{
    /* The bytes object of a token (made once, then shared by every merge naming it); borrowed. */
    PyObject *b = PyList_GET_ITEM(objects, id);
    if (b == Py_None) {
        if ((b = PyBytes_FromStringAndSize((const char *)token_bytes(s, id), s->tok_size[id])) == NULL)
            return NULL;
        PyList_SET_ITEM(objects, id, b);
        Py_DECREF(Py_None);
    }
    return b;
}

static PyObject *merge_pair(State *s, PyObject *objects, Py_ssize_t k)
{
    PyObject *left = token_object(s, objects, s->log_left[k]), *right;
    if (left == NULL || (right = token_object(s, objects, s->log_right[k])) == NULL)
        return NULL;
    return PyTuple_Pack(2, left, right);
}

static int report(State *s, PyObject **objects, PyObject *progress, Py_ssize_t *reported)
{
    /* The progress calls of the merges made since the last report, in order; then Ctrl-C. */
    Py_ssize_t k, n;
    if (progress != Py_None) {
        /* token objects for every id so far (None until first needed) */
        n = PyList_GET_SIZE(*objects);
        for (; n < s->ntokens; n++)
            if (PyList_Append(*objects, Py_None) < 0)
                return -1;
        for (k = *reported; k < s->nlog; k++) {
            PyObject *pair = merge_pair(s, *objects, k), *r;
            if (pair == NULL)
                return -1;
            r = PyObject_CallFunction(progress, "nOL", k + 1, pair, (long long)s->log_count[k]);
            Py_DECREF(pair);
            if (r == NULL)
                return -1;
            Py_DECREF(r);
        }
    }
    *reported = s->nlog;
    return PyErr_CheckSignals();
}

static PyObject *results(State *s, PyObject **objects, int tied, int duplicates, const char *stop_reason)
{
    PyObject *merges = PyList_New(s->nlog), *counts = PyList_New(s->nlog), *saved = PyList_New(s->nlog);
    PyObject *out = NULL;
    Py_ssize_t k, n = PyList_GET_SIZE(*objects);
    if (merges == NULL || counts == NULL || saved == NULL)
        goto done;
    for (; n < s->ntokens; n++)
        if (PyList_Append(*objects, Py_None) < 0)
            goto done;
    for (k = 0; k < s->nlog; k++) {
        PyObject *pair = merge_pair(s, *objects, k), *count, *tokens;
        if (pair == NULL)
            goto done;
        PyList_SET_ITEM(merges, k, pair);
        if ((count = PyLong_FromLongLong(s->log_count[k])) == NULL)
            goto done;
        PyList_SET_ITEM(counts, k, count);
        if ((tokens = PyLong_FromLongLong(s->log_saved[k])) == NULL)
            goto done;
        PyList_SET_ITEM(saved, k, tokens);
    }
    out = Py_BuildValue("OOOiis", merges, counts, saved, tied, duplicates, stop_reason);
done:
    Py_XDECREF(merges);
    Py_XDECREF(counts);
    Py_XDECREF(saved);
    return out;
}

#define REPORT_EVERY 0.05       /* seconds between progress reports (and Ctrl-C checks) */

static PyObject *
merge_loop(PyObject *module, PyObject *args)
{
    PyObject *words, *weights, *alphabet, *ranks, *progress, *symbol_lengths = Py_None;
    Py_ssize_t num_merges, i, reported = 0, max_length = 0;
    long long min_frequency;
    const char *tie_break, *stop_reason = "vocab_size";
    State st;
    State *s = &st;
    PyObject *objects = NULL, *result = NULL;
    PyThreadState *released;
    int32_t new_tokens = 0;
    int tied = 0, duplicates = 0, rc = 0;
    double last;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!O!O!nLsOO|nO:merge_loop", &PyList_Type, &words, &PyList_Type,
                          &weights, &PyList_Type, &alphabet, &num_merges, &min_frequency,
                          &tie_break, &ranks, &progress, &max_length, &symbol_lengths))
        return NULL;
    memset(s, 0, sizeof(State));
    if (max_length < 0) {
        PyErr_SetString(PyExc_ValueError, "max_token_length must not be negative");
        return NULL;
    }
    if (symbol_lengths != Py_None &&
        !(PyList_Check(symbol_lengths) && PyList_GET_SIZE(symbol_lengths) == PyList_GET_SIZE(alphabet))) {
        PyErr_SetString(PyExc_ValueError, "symbol_lengths needs a length per alphabet symbol");
        return NULL;
    }
    s->max_length = max_length;
    s->nbase = (int32_t)PyList_GET_SIZE(alphabet);
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
    if ((objects = PyList_New(0)) == NULL)
        return NULL;
    for (i = 0; i < PyList_GET_SIZE(alphabet); i++) {
        PyObject *token = PyList_GET_ITEM(alphabet, i);
        if (!PyBytes_Check(token)) {
            PyErr_SetString(PyExc_TypeError, "the alphabet must be a list of bytes");
            goto done;
        }
        if (add_token(s, (const uint8_t *)PyBytes_AS_STRING(token), PyBytes_GET_SIZE(token), NULL, 0) < 0 ||
            PyList_Append(objects, token) < 0) {
            raise_state_error(s);
            goto done;
        }
        if (symbol_lengths != Py_None) {
            long long n = PyLong_AsLongLong(PyList_GET_ITEM(symbol_lengths, i));
            if (n == -1 && PyErr_Occurred())
                goto done;
            s->symlen[i] = n;
        }
        if (s->tie == TIE_HF) {
            long r = PyLong_AsLong(PyList_GET_ITEM(ranks, i));
            if (r == -1 && PyErr_Occurred())
                goto done;
            s->rank[i] = (int32_t)r;
        }
    }
    if (load_words(s, words, weights, PyList_GET_SIZE(alphabet)) < 0)
        goto done;

    released = PyEval_SaveThread();
    rc = count_pairs(s, (int64_t)min_frequency);
    last = seconds();
    while (rc == 0 && new_tokens < num_merges) {
        Merge m;
        Entry best;
        int64_t saved;
        int found = 0;
        /* The best live pair: settle entries whose count is stale (lazy invalidation). */
        while (s->nheap && !found) {
            best = heap_pop(s);
            if (settle(s, &best, (int64_t)min_frequency, &found) < 0) {
                rc = -1;
                break;
            }
        }
        if (rc < 0)
            break;
        if (!found) {
            /* Every pair at or above min_frequency has an entry at or above its count, so what
               is left is rarer. */
            stop_reason = s->used ? "min_frequency" : "no_pairs";
            break;
        }
        /* A tie: once stale entries are settled (and copies of the winner dropped), the next
           live entry has the same count. */
        while (s->nheap) {
            Entry top = s->heap[0];
            int live = 0;
            if (!(top.left == best.left && top.right == best.right)) {
                int32_t rec = find_pair(s, top.left, top.right);
                if (rec >= 0 && s->pairs[rec].count == top.count)
                    break;
            }
            heap_pop(s);
            if (!(top.left == best.left && top.right == best.right) &&
                settle(s, &top, (int64_t)min_frequency, &live) < 0) {
                rc = -1;
                break;
            }
        }
        if (rc < 0)
            break;
        if (s->nheap && s->heap[0].count == best.count)
            tied++;

        m.left = best.left;
        m.right = best.right;
        m.stamp = (int32_t)s->nlog;
        if (new_token(s, &m, &duplicates, &new_tokens) < 0 || log_merge(s, &m, best.count) < 0 ||
            apply_merge(s, &m, (int64_t)min_frequency, &saved) < 0) {
            rc = -1;
            break;
        }
        s->log_saved[s->nlog - 1] = saved;
        if (s->nheap > 3 * s->used + 65536 && fresh_heap(s, (int64_t)min_frequency) < 0) {
            rc = -1;                /* mostly stale entries; amortised O(1) per push */
            break;
        }
        if ((s->nlog & 63) == 0 && seconds() - last >= REPORT_EVERY) {
            PyEval_RestoreThread(released);
            rc = report(s, &objects, progress, &reported) < 0 ? -2 : 0;
            released = PyEval_SaveThread();
            last = seconds();
        }
    }
    PyEval_RestoreThread(released);
    if (rc == -1)
        raise_state_error(s);
    if (rc < 0 || report(s, &objects, progress, &reported) < 0)
        goto done;
    result = results(s, &objects, tied, duplicates, stop_reason);
done:
    free_state(s);
    Py_XDECREF(objects);
    return result;
}

static PyMethodDef methods[] = {
    {"merge_loop", merge_loop, METH_VARARGS,
     "merge_loop(words, weights, alphabet, num_merges, min_frequency, tie_break, hf_ranks, "
     "progress, max_token_length=0, symbol_lengths=None)\n--\n\n"
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

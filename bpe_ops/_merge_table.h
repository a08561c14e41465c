/*
 * The merge table and the per-piece merge replay, shared by the compiled modules that replay BPE
 * merges (`_piece_merge.c`: one piece at a time from Python; `_pcre2.c`: whole texts).
 *
 * The specification is the pure-Python `Tokenizer._merge_python` in encoder.py: inside one
 * pre-token, repeatedly merge the adjacent pair of lowest merge rank, the leftmost one on ties,
 * until no adjacent pair is a merge. The tests run both and require identical ids.
 *
 * A `MergeTable` holds
 *   - an open-addressing hash map (linear probing) from the pair (left, right) to its lowest rank:
 *     a repeated pair keeps its first rank, as the Python dict built with setdefault does;
 *   - `merged` by rank.
 * `merge_symbols` replays the merges on one piece's symbol ids in place:
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
 * into 64 bits, so a piece has fewer than 2**32 symbols. Nothing here touches Python objects, so
 * callers may run it without the GIL.
 */
#ifndef TOKENBEAM_MERGE_TABLE_H
#define TOKENBEAM_MERGE_TABLE_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_common.h"

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
    Py_ssize_t nmerges;
    int32_t *merged;                    /* by rank */
    Slot *slots;
    uint64_t mask;                      /* slots - 1, a power of two minus one */
    int shift;                          /* 64 - log2(slots): the hash is the product's top bits */
} MergeTable;

/* ---- the pair map ------------------------------------------------------------------------------ */

static inline int32_t rank_of(const MergeTable *m, int32_t a, int32_t b)
{
    /* The lowest rank of the merge (a, b), or NO_RANK. Fibonacci hashing, linear probing. */
    uint64_t key = tb_pair_key(a, b);
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

static void insert_first(MergeTable *m, int32_t a, int32_t b, int32_t rank)
{
    /* Map (a, b) to `rank` unless it is already mapped: a repeated pair keeps its first rank. */
    uint64_t key = tb_pair_key(a, b);
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

static int merge_table_init(MergeTable *m, const int32_t *left, const int32_t *right,
                            const int32_t *merged, Py_ssize_t n)
{
    /* Build the table of n merges (copies `merged`); -1 when out of memory. */
    Py_ssize_t size, r;
    memset(m, 0, sizeof(*m));
    /* At most half full, so probes stay short. */
    for (size = 16, m->shift = 60; size < 2 * n; size *= 2, m->shift--)
        ;
    m->slots = malloc((size_t)size * sizeof(Slot));
    m->merged = malloc(n ? (size_t)n * sizeof(int32_t) : 1);
    if (m->slots == NULL || m->merged == NULL) {
        free(m->slots);
        free(m->merged);
        m->slots = NULL;
        m->merged = NULL;
        return -1;
    }
    tb_copy(m->merged, merged, (size_t)n * sizeof(int32_t));
    for (r = 0; r < size; r++)
        m->slots[r].key = EMPTY;
    m->mask = (uint64_t)size - 1;
    m->nmerges = n;
    for (r = 0; r < n; r++)
        insert_first(m, left[r], right[r], (int32_t)r);
    return 0;
}

static void merge_table_free(MergeTable *m)
{
    free(m->slots);
    free(m->merged);
    m->slots = NULL;
    m->merged = NULL;
}

/* ---- the replay -------------------------------------------------------------------------------- */

static Py_ssize_t merge_short(const MergeTable *m, int32_t *sym, Py_ssize_t n)
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

static inline int key_less(void *ctx, const uint64_t *a, const uint64_t *b)
{
    (void)ctx;
    return *a < *b;
}

/* A min-heap of rank << 32 | position keys: the least key is the lowest rank, leftmost. */
TB_HEAP(rank_heap, uint64_t, void *, key_less)

static size_t merge_heap_start(const MergeTable *m, const int32_t *sym, Py_ssize_t n, uint32_t *nxt,
                               uint32_t *prv, int32_t *cur, uint64_t *keys)
{
    /* Link sym[0..n) and file a key per mergeable pair, in heap order; the number of keys. */
    size_t nkeys = 0;
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        nxt[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
        prv[i] = i > 0 ? (uint32_t)(i - 1) : NONE;
        cur[i] = i + 1 < n ? rank_of(m, sym[i], sym[i + 1]) : NO_RANK;
        if (cur[i] != NO_RANK)
            keys[nkeys++] = (uint64_t)cur[i] << 32 | (uint64_t)i;
    }
    /* Filed in position order, a key per pair: heapify bottom-up. */
    rank_heap_heapify(NULL, keys, nkeys);
    return nkeys;
}

static inline void merge_heap_apply(const MergeTable *m, int32_t *sym, uint32_t *nxt, uint32_t *prv, int32_t *cur,
                                    uint64_t *keys, size_t *nkeys, uint32_t p, int32_t rank)
{
    /* Apply merge `rank` to the live pair at p and push the keys of the two pairs it creates. */
    uint32_t q = nxt[p], after = nxt[q];
    sym[p] = m->merged[rank];
    nxt[p] = after;
    if (after != NONE)
        prv[after] = p;
    cur[q] = NO_RANK;               /* q is merged away */
    cur[p] = after != NONE ? rank_of(m, sym[p], sym[after]) : NO_RANK;
    if (cur[p] != NO_RANK) {
        keys[*nkeys] = (uint64_t)cur[p] << 32 | p;
        rank_heap_sift_up(NULL, keys, (*nkeys)++);
    }
    if (prv[p] != NONE) {
        uint32_t before = prv[p];
        cur[before] = rank_of(m, sym[before], sym[p]);
        if (cur[before] != NO_RANK) {
            keys[*nkeys] = (uint64_t)cur[before] << 32 | before;
            rank_heap_sift_up(NULL, keys, (*nkeys)++);
        }
    }
}

static Py_ssize_t merge_heap_finish(int32_t *sym, Py_ssize_t n, const uint32_t *nxt)
{
    /* Compact the live symbols, in text order, to the front; the new length. Position 0 is never
     * merged away. */
    Py_ssize_t out = 0;
    uint32_t p;
    for (p = 0; n > 0 && p != NONE; p = nxt[p])
        sym[out++] = sym[p];
    return out;
}

static Py_ssize_t merge_long(const MergeTable *m, int32_t *sym, Py_ssize_t n, uint32_t *nxt,
                             uint32_t *prv, int32_t *cur, uint64_t *keys)
{
    /* Merge sym[0..n) (n >= 2, n < 2**32) in place; the new length. `keys` has room for 3n keys:
     * n - 1 initial pairs and two new pairs per merge, at most n - 1 merges. */
    size_t nkeys = merge_heap_start(m, sym, n, nxt, prv, cur, keys);
    while (nkeys > 0) {
        uint64_t key = rank_heap_pop(NULL, keys, &nkeys);
        int32_t rank = (int32_t)(key >> 32);
        uint32_t p = (uint32_t)key;
        if (cur[p] != rank)
            continue;                   /* stale: the pair at p changed since */
        merge_heap_apply(m, sym, nxt, prv, cur, keys, &nkeys, p, rank);
    }
    return merge_heap_finish(sym, n, nxt);
}

static inline Py_ssize_t merge_symbols(const MergeTable *m, int32_t *sym, Py_ssize_t n)
{
    /* Replay the merges on sym[0..n) in place; the new length, or -1 when out of memory (a long
     * piece needs scratch space). n < 2**32. */
    uint32_t *links;
    int32_t *cur;
    uint64_t *keys;
    if (n <= SHORT_PIECE)
        return merge_short(m, sym, n);
    links = malloc((size_t)n * 2 * sizeof(uint32_t));
    cur = malloc((size_t)n * sizeof(int32_t));
    keys = malloc((size_t)n * 3 * sizeof(uint64_t));
    if (links != NULL && cur != NULL && keys != NULL)
        n = merge_long(m, sym, n, links, links + n, cur, keys);
    else
        n = -1;
    free(links);
    free(cur);
    free(keys);
    return n;
}

#endif

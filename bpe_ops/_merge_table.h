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
 * 16 bytes: the map's memory traffic is what a lookup costs. Where every id of the merges is below
 * 2**b - 1 for some b <= 21 and the ranks fit the 64 - 2b bits left (every published vocabulary),
 * pair and rank pack into one 8-byte slot instead: half the memory, so more of the map stays in a
 * core's cache. A heap key packs rank and position into 64 bits, so a piece has fewer than 2**32
 * symbols. Nothing here touches Python objects, so callers may run it without the GIL.
 *
 * The map holds each merge's *priority*, which orders the merges exactly as their ranks do. It is
 * the rank itself, except where the merged ids never decrease with the rank (a tiktoken rank
 * file's merges: every split of a token, the tokens in rank order): then it is
 * merged << tie_bits | (the merge's place among the merges making the same token), so that the
 * merged id is a shift of the priority and not a read of `merged` (a 100k-entry array read at
 * random, ~17% of a cold replay's time in perf). `merge_priority` gives a rank's priority.
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
/* Pieces up to this many symbols take the array scan: measured with a 131k-id vocabulary on
 * multilingual text (Han, Kana), 32 and 16 are about equal and 64 or 128 slower. */
#define SHORT_PIECE 32
/* The end of the linked list, and the predecessor of the first symbol. */
#define NONE UINT32_MAX

typedef struct {
    uint64_t key;        /* left << 32 | right, or EMPTY */
    int32_t rank;
} Slot;

/* The packed slot: (left << id_bits | right) << (64 - 2 id_bits) | priority; EMPTY is no pair of
 * ids below 2**id_bits - 1. At most PACK_ID_BITS bits an id. */
#define PACK_ID_BITS 21

typedef struct {
    Py_ssize_t nmerges;
    int32_t *merged;                    /* by rank */
    int64_t merged_offset;              /* merged[r] == r + merged_offset for every r, or -1 */
    int tie_bits;                       /* priority = merged << tie_bits | place, or -1: priority = rank */
    int32_t *priority;                  /* by rank, with tie_bits >= 0 (NULL otherwise) */
    Slot *slots;                        /* the wide map, or NULL when packed */
    uint64_t *packed;                   /* the packed map, or NULL when wide */
    uint64_t *filter;                   /* with `packed`: a Bloom filter of its pairs (FILTER_WORDS words) */
    int id_bits;                        /* with `packed`: the bits of an id in a key */
    int32_t id_limit;                   /* with `packed`: 2**id_bits - 1, above every id of a merge */
    int rank_bits;                      /* with `packed`: 64 - 2 id_bits, the bits of a priority */
    uint64_t rank_mask;                 /* with `packed`: 2**rank_bits - 1 */
    uint64_t mask;                      /* slots - 1, a power of two minus one */
    int shift;                          /* 64 - log2(slots): the hash is the product's top bits */
} MergeTable;

/* ---- the pair map ------------------------------------------------------------------------------ */

/* Most pairs looked up are no merge, and the map is megabytes: a lookup that misses every cache
 * waits on memory. A 256 KiB Bloom filter stays in a core's cache and answers most of those "no"s:
 * two bits per pair in one 64-bit word, about 2% false positives with 128k merges. */
#define FILTER_WORDS ((size_t)1 << 15)

static inline uint64_t packed_key(const MergeTable *m, int32_t a, int32_t b)
{
    /* The pair (a, b), both below m->id_limit, as the packed map keys it. */
    return (uint64_t)a << m->id_bits | (uint64_t)b;
}

static inline uint64_t pair_hash(uint64_t key)
{
    /* Fibonacci hashing: the map's slot is the top bits, the filter's word and bits lower ones. */
    return key * 0x9E3779B97F4A7C15ULL;
}

static inline uint64_t *filter_word(const MergeTable *m, uint64_t h)
{
    return &m->filter[(h >> 49) & (FILTER_WORDS - 1)];
}

static inline uint64_t filter_bits(uint64_t h)
{
    return (uint64_t)1 << ((h >> 12) & 63) | (uint64_t)1 << ((h >> 18) & 63);
}

static inline int32_t merged_of(const MergeTable *m, int32_t priority)
{
    /* The id the merge of this priority makes. Where the priority holds it, or where merged tokens
     * are numbered in merge order, no read of `merged`, whose 4 bytes per merge do not stay in a
     * core's cache. */
    if (m->tie_bits >= 0)
        return priority >> m->tie_bits;
    return m->merged_offset >= 0 ? (int32_t)(priority + m->merged_offset) : m->merged[priority];
}

static inline int32_t merge_priority(const MergeTable *m, Py_ssize_t rank)
{
    /* The priority the map holds for merge `rank` (the first of a repeated pair's ranks). */
    return m->tie_bits >= 0 ? m->priority[rank] : (int32_t)rank;
}

static inline int merge_table_ready(const MergeTable *m)
{
    return m->slots != NULL || m->packed != NULL;
}

static inline int32_t rank_of(const MergeTable *m, int32_t a, int32_t b)
{
    /* The lowest rank of the merge (a, b), or NO_RANK. Fibonacci hashing, linear probing. */
    uint64_t key, i, h;
    if (m->packed != NULL) {
        if (a >= m->id_limit || b >= m->id_limit)
            return NO_RANK;             /* in no merge: every merge's ids are below the limit */
        key = packed_key(m, a, b);
        h = pair_hash(key);
        if ((*filter_word(m, h) & filter_bits(h)) != filter_bits(h))
            return NO_RANK;
        i = h >> m->shift;
        for (;;) {
            uint64_t slot = m->packed[i];
            if (slot >> m->rank_bits == key)
                return (int32_t)(slot & m->rank_mask);
            if (slot == EMPTY)
                return NO_RANK;
            i = (i + 1) & m->mask;
        }
    }
    key = tb_pair_key(a, b);
    i = pair_hash(key) >> m->shift;
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
    /* Map (a, b) to `rank` (a priority) unless it is already mapped: a repeated pair keeps its first. */
    uint64_t key, i, h;
    if (m->packed != NULL) {
        key = packed_key(m, a, b);
        h = pair_hash(key);
        *filter_word(m, h) |= filter_bits(h);
        i = h >> m->shift;
        for (;;) {
            uint64_t *slot = &m->packed[i];
            if (*slot == EMPTY) {
                *slot = key << m->rank_bits | (uint64_t)rank;
                return;
            }
            if (*slot >> m->rank_bits == key)
                return;
            i = (i + 1) & m->mask;
        }
    }
    key = tb_pair_key(a, b);
    i = pair_hash(key) >> m->shift;
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

static void merge_table_free(MergeTable *m)
{
    free(m->slots);
    free(m->packed);
    free(m->filter);
    free(m->merged);
    free(m->priority);
    m->slots = NULL;
    m->packed = NULL;
    m->filter = NULL;
    m->merged = NULL;
    m->priority = NULL;
}

static int tie_bits_of(const int32_t *merged, Py_ssize_t n)
{
    /* The bits that number the merges making one token, where merged ids never decrease with the
     * rank (so the merges making one token are consecutive); -1 where they do decrease. */
    Py_ssize_t r, run = 1, longest = n > 0;
    int bits = 0;
    for (r = 1; r < n; r++) {
        if (merged[r] < merged[r - 1])
            return -1;
        run = merged[r] == merged[r - 1] ? run + 1 : 1;
        longest = run > longest ? run : longest;
    }
    while (((Py_ssize_t)1 << bits) < longest)
        bits++;
    return bits;
}

static int merge_table_init(MergeTable *m, const int32_t *left, const int32_t *right,
                            const int32_t *merged, Py_ssize_t n)
{
    /* Build the table of n merges (copies `merged`); -1 when out of memory. */
    Py_ssize_t size, r;
    int32_t top = 0, top_merged = 0;
    int64_t priorities;                 /* above every priority */
    int packed;
    memset(m, 0, sizeof(*m));
    for (r = 0; r < n; r++) {
        top = left[r] > top ? left[r] : top;
        top = right[r] > top ? right[r] : top;
        top_merged = merged[r] > top_merged ? merged[r] : top_merged;
    }
    for (m->id_bits = 8; m->id_bits < PACK_ID_BITS && top >= ((int32_t)1 << m->id_bits) - 1; m->id_bits++)
        ;
    m->id_limit = ((int32_t)1 << m->id_bits) - 1;
    m->rank_bits = 64 - 2 * m->id_bits;
    m->rank_mask = ((uint64_t)1 << m->rank_bits) - 1;
    m->tie_bits = tie_bits_of(merged, n);
    priorities = m->tie_bits >= 0 ? ((int64_t)top_merged + 1) << m->tie_bits : (int64_t)n;
    if (m->tie_bits >= 0 && (priorities >= NO_RANK || (top < m->id_limit && (uint64_t)priorities >= m->rank_mask &&
                                                       (uint64_t)n < m->rank_mask))) {
        m->tie_bits = -1;               /* too wide for an int32, or for a packed slot ranks fit: ranks */
        priorities = n;
    }
    packed = top < m->id_limit && (uint64_t)priorities < m->rank_mask;
    /* At most four fifths full. A replay reads the map at random, once or twice a merge, and waits
     * on memory for the reads a core's caches miss: the smaller the map, the fewer (cl100k's 100k
     * merges take 1 MiB at this bound, 2 MiB at half full). The probes stay short: a pair found
     * is a cache line or two from its first slot, and the lookups that walk on to an empty slot
     * (pairs that are no merge) mostly stop at the filter before the map. */
    for (size = 16, m->shift = 60; size * 4 < 5 * n; size *= 2, m->shift--)
        ;
    if (packed) {
        m->packed = tb_alloc_table((size_t)size * sizeof(uint64_t));
        m->filter = calloc(FILTER_WORDS, sizeof(uint64_t));
        if (m->filter == NULL) {
            merge_table_free(m);
            return -1;
        }
    } else
        m->slots = tb_alloc_table((size_t)size * sizeof(Slot));
    m->merged = malloc(n ? (size_t)n * sizeof(int32_t) : 1);
    if (m->tie_bits >= 0)
        m->priority = malloc(n ? (size_t)n * sizeof(int32_t) : 1);
    if (!merge_table_ready(m) || m->merged == NULL || (m->tie_bits >= 0 && m->priority == NULL)) {
        merge_table_free(m);
        return -1;
    }
    tb_copy(m->merged, merged, (size_t)n * sizeof(int32_t));
    for (r = 0; r < n && m->tie_bits >= 0; r++) {
        int32_t place = r > 0 && merged[r] == merged[r - 1] ? (m->priority[r - 1] & ((1 << m->tie_bits) - 1)) + 1 : 0;
        m->priority[r] = merged[r] << m->tie_bits | place;
    }
    m->merged_offset = n ? (int64_t)merged[0] : -1;
    for (r = 0; r < n && m->merged_offset >= 0; r++)
        if ((int64_t)merged[r] != r + m->merged_offset)
            m->merged_offset = -1;
    for (r = 0; r < size; r++)
        if (packed)
            m->packed[r] = EMPTY;
        else
            m->slots[r].key = EMPTY;
    m->mask = (uint64_t)size - 1;
    m->nmerges = n;
    for (r = 0; r < n; r++)
        insert_first(m, left[r], right[r], merge_priority(m, r));
    return 0;
}


/* ---- the replay -------------------------------------------------------------------------------- */

static inline void shift_down(int32_t *a, Py_ssize_t count)
{
    /* a[i] = a[i + 1] for i < count, in place, 16 bytes at a time (each load before the store that
     * overlaps it). A merge shifts a short piece's arrays by a few ids: a call to memmove for each
     * cost more than the copy. The empty asm hides the loop's counter from the compiler, which
     * would otherwise make the loop that call again. */
    Py_ssize_t i = 0;
    for (; i + 4 <= count; i += 4) {
        int32_t four[4];
        memcpy(four, a + i + 1, sizeof(four));
        memcpy(a + i, four, sizeof(four));
        __asm__("" : "+r"(i));
    }
    for (; i < count; i++) {
        a[i] = a[i + 1];
        __asm__("" : "+r"(i));
    }
}

static Py_ssize_t merge_short_ranked(const MergeTable *table, int32_t *sym, int32_t *rank, Py_ssize_t n)
{
    /* Merge sym[0..n) in place, given rank[i] = the rank of (sym[i], sym[i + 1]) for i < n - 1 (rank
     * is scratch afterwards); the new length. n <= SHORT_PIECE. */
    const MergeTable local = *table;    /* its fields stay in registers: no store to sym or rank
                                         * can change a copy of them */
    const MergeTable *m = &local;
    Py_ssize_t i, at;
    while (n > 1) {
        /* The lowest rank and its leftmost position in one pass of conditional moves. (Two passes,
         * the lowest and then a search for it, ended the search at a place that differs from merge
         * to merge: a mispredicted branch most times. A branch in one pass mispredicts too.) */
        int32_t best = rank[0];
        at = 0;
        for (i = 1; i + 1 < n; i++) {
            int lower = rank[i] < best;
            best = lower ? rank[i] : best;
            at = lower ? i : at;
        }
        if (best == NO_RANK)
            break;
        sym[at] = merged_of(m, best);
        n--;
        shift_down(&sym[at + 1], n - at - 1);
        if (at + 1 < n) {
            rank[at] = rank_of(m, sym[at], sym[at + 1]);
            shift_down(&rank[at + 1], n - at - 2);
        }
        if (at > 0)
            rank[at - 1] = rank_of(m, sym[at - 1], sym[at]);
    }
    return n;
}

static inline Py_ssize_t merge_short(const MergeTable *m, int32_t *sym, Py_ssize_t n)
{
    /* Merge sym[0..n) in place; the new length. n <= SHORT_PIECE. */
    int32_t rank[SHORT_PIECE];
    Py_ssize_t i;
    for (i = 0; i + 1 < n; i++)
        rank[i] = rank_of(m, sym[i], sym[i + 1]);
    return merge_short_ranked(m, sym, rank, n);
}

static inline int key_less(void *ctx, const uint64_t *a, const uint64_t *b)
{
    (void)ctx;
    return *a < *b;
}

/* A min-heap of rank << 32 | position keys: the least key is the lowest rank, leftmost. */
TB_HEAP(rank_heap, uint64_t, void *, key_less)

static size_t merge_heap_start(const MergeTable *m, const int32_t *sym, Py_ssize_t n, uint32_t *nxt,
                               uint32_t *prv, int32_t *cur, uint64_t *keys, int ranked)
{
    /* Link sym[0..n) and file a key per mergeable pair, in heap order; the number of keys. With
     * `ranked`, cur[0..n - 1) already holds the pairs' ranks. */
    size_t nkeys = 0;
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        nxt[i] = i + 1 < n ? (uint32_t)(i + 1) : NONE;
        prv[i] = i > 0 ? (uint32_t)(i - 1) : NONE;
        if (i + 1 == n)
            cur[i] = NO_RANK;
        else if (!ranked)
            cur[i] = rank_of(m, sym[i], sym[i + 1]);
        if (cur[i] != NO_RANK)
            keys[nkeys++] = (uint64_t)cur[i] << 32 | (uint64_t)i;
    }
    /* Filed in position order, a key per pair: heapify bottom-up. */
    rank_heap_heapify(NULL, keys, nkeys);
    return nkeys;
}

static inline void merge_heap_apply(const MergeTable *m, int32_t *sym, uint32_t *nxt, uint32_t *prv, int32_t *cur,
                                    uint64_t *keys, size_t *nkeys, uint32_t p, int32_t rank, int at_top)
{
    /* Apply merge `rank` to the live pair at p and file the keys of the two pairs it creates. With
     * `at_top`, p's key is still the heap's top: the new pair at p takes its place, one sift down
     * instead of a pop and a push (the same keys, so the same order of merges). */
    uint32_t q = nxt[p], after = nxt[q];
    sym[p] = merged_of(m, rank);
    nxt[p] = after;
    if (after != NONE)
        prv[after] = p;
    cur[q] = NO_RANK;               /* q is merged away */
    cur[p] = after != NONE ? rank_of(m, sym[p], sym[after]) : NO_RANK;
    if (cur[p] != NO_RANK && at_top) {
        keys[0] = (uint64_t)cur[p] << 32 | p;
        rank_heap_sift_down(NULL, keys, *nkeys, 0);
    } else if (at_top) {
        rank_heap_pop(NULL, keys, nkeys);
    } else if (cur[p] != NO_RANK) {
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

static Py_ssize_t merge_long_ranked(const MergeTable *m, int32_t *sym, Py_ssize_t n, uint32_t *nxt,
                                    uint32_t *prv, int32_t *cur, uint64_t *keys, int ranked)
{
    /* Merge sym[0..n) (n >= 2, n < 2**32) in place; the new length. `keys` has room for 3n keys:
     * n - 1 initial pairs and two new pairs per merge, at most n - 1 merges. With `ranked`,
     * cur[0..n - 1) holds the initial pairs' ranks. */
    size_t nkeys = merge_heap_start(m, sym, n, nxt, prv, cur, keys, ranked);
    while (nkeys > 0) {
        uint64_t key = keys[0];
        int32_t rank = (int32_t)(key >> 32);
        uint32_t p = (uint32_t)key;
        if (cur[p] != rank)
            rank_heap_pop(NULL, keys, &nkeys);      /* stale: the pair at p changed since */
        else
            merge_heap_apply(m, sym, nxt, prv, cur, keys, &nkeys, p, rank, 1);
    }
    return merge_heap_finish(sym, n, nxt);
}

static inline Py_ssize_t merge_long(const MergeTable *m, int32_t *sym, Py_ssize_t n, uint32_t *nxt,
                             uint32_t *prv, int32_t *cur, uint64_t *keys)
{
    return merge_long_ranked(m, sym, n, nxt, prv, cur, keys, 0);
}

/* A long piece's linked list and heap, kept between pieces by their owner. */
typedef struct {
    uint32_t *links;                    /* 2 per symbol */
    uint64_t *keys;                     /* 3 per symbol */
    size_t cap;                         /* symbols */
} MergeScratch;

static inline void merge_scratch_free(MergeScratch *s)
{
    free(s->links);
    free(s->keys);
    memset(s, 0, sizeof(*s));
}

static inline Py_ssize_t merge_symbols_ranked(const MergeTable *m, int32_t *sym, int32_t *rank, Py_ssize_t n,
                                              MergeScratch *scratch)
{
    /* Replay the merges on sym[0..n) in place, given rank[i] = the rank of (sym[i], sym[i + 1]) for
     * i < n - 1 (rank has room for n and is scratch afterwards); the new length, or -1 when out of
     * memory (a long piece needs scratch space). n < 2**32. */
    if (n <= SHORT_PIECE)
        return merge_short_ranked(m, sym, rank, n);
    if ((size_t)n > scratch->cap) {
        size_t cap = (size_t)n + (size_t)n / 2;
        merge_scratch_free(scratch);
        scratch->links = malloc(cap * 2 * sizeof(uint32_t));
        scratch->keys = malloc(cap * 3 * sizeof(uint64_t));
        if (scratch->links == NULL || scratch->keys == NULL) {
            merge_scratch_free(scratch);
            return -1;
        }
        scratch->cap = cap;
    }
    return merge_long_ranked(m, sym, n, scratch->links, scratch->links + n, rank, scratch->keys, 1);
}

#endif

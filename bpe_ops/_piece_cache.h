/*
 * A fixed-size map from piece bytes to token ids, laid out so that a lookup touches one cache line:
 * the encoder's cache of pieces it has merged, and the whole-token map of a tokenizer that ignores
 * merges (`_pcre2.c`'s TextEncoder, `_spm.c`). Touches no Python object.
 *
 * A slot is 32 bytes, two to a cache line. A key of up to 15 bytes is the slot's first 16 bytes
 * itself (its bytes, zero-padded, and its length in the last byte), so a lookup of a short piece
 * (nearly every piece of natural text) is two word compares, with no hash kept and no byte loop;
 * a longer key keeps its hash there and its bytes in an arena. Up to 3 ids sit inline (98% of
 * pieces have at most two), more in an arena. Half the bytes of a slot holding 24 key bytes and
 * 6 ids: the table is half the memory for the same room, and a probe that moves on to the next
 * slot finds it in the line it has read.
 *
 * The map never grows: it has room for `capacity` keys at most three quarters full, and its owner
 * empties it (the cache) or sizes it for every key (the whole-token map). Linear probing from an
 * even slot (the first line of a probe holds two candidates); a slot whose last key word is 0 is
 * empty (a key's length tag is never 0).
 *
 *   PieceCache c; piece_cache_init(&c, 2);
 *   PieceSlot *s = piece_cache_find(&c, key, 3, hash);      // !piece_slot_used(s): not there
 *   piece_cache_put(&c, s, key, 3, hash, ids, 2);           // piece_cache_ids(&c, s) == ids
 *
 * `hash` is the caller's hash of the key (any function, the same for every call on one map): it
 * picks the first slot, and tells long keys apart before their bytes are compared.
 */
#ifndef TOKENBEAM_PIECE_CACHE_H
#define TOKENBEAM_PIECE_CACHE_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_common.h"

#define PIECE_KEY_INLINE 15
#define PIECE_IDS_INLINE 3
/* The top byte of a slot's second key word: 1 + the length of a short key, this for a long one. */
#define PIECE_LONG_TAG 0xFFu

typedef struct {
    uint64_t key[2];     /* a short key: its bytes little-endian, then (1 + length) << 56;
                          * a long key: its hash, then PIECE_LONG_TAG << 56 | where it is in `keys` */
    uint32_t count;      /* ids */
    int32_t ids[PIECE_IDS_INLINE];  /* count <= PIECE_IDS_INLINE; else ids[1..2] hold (as a uint64_t)
                                     * where they start in `ids` */
} PieceSlot;

typedef struct {
    PieceSlot *slots;
    size_t mask, used, capacity;
    int shift;                           /* 64 - log2(slots): a hash's slot is its top bits */
    uint8_t *keys;                       /* long keys, each after its length (a size_t) */
    size_t keys_len, keys_cap;
    int32_t *ids;                        /* long id runs */
    size_t ids_len, ids_cap;
} PieceCache;

typedef char piece_slot_is_32_bytes[sizeof(PieceSlot) == 32 ? 1 : -1];

static inline int piece_slot_used(const PieceSlot *s)
{
    return s->key[1] != 0;
}

static inline size_t piece_slot_len(const PieceCache *c, const PieceSlot *s)
{
    size_t len;
    if (s->key[1] >> 56 != PIECE_LONG_TAG)
        return (size_t)(s->key[1] >> 56) - 1;
    memcpy(&len, c->keys + (s->key[1] & 0x00FFFFFFFFFFFFFFULL), sizeof(len));
    return len;
}

static inline const uint8_t *piece_cache_key(const PieceCache *c, const PieceSlot *s, uint8_t out[PIECE_KEY_INLINE])
{
    /* The key's bytes (piece_slot_len of them): a short key unpacked into `out`. */
    size_t i;
    if (s->key[1] >> 56 == PIECE_LONG_TAG)
        return c->keys + (s->key[1] & 0x00FFFFFFFFFFFFFFULL) + sizeof(size_t);
    for (i = 0; i < PIECE_KEY_INLINE; i++)
        out[i] = (uint8_t)(s->key[i >> 3] >> (8 * (i & 7)));
    return out;
}

static inline const int32_t *piece_cache_ids(const PieceCache *c, const PieceSlot *s)
{
    uint64_t at;
    if (s->count <= PIECE_IDS_INLINE)
        return s->ids;
    memcpy(&at, &s->ids[1], sizeof(at));
    return c->ids + at;
}

static inline void piece_short_key(const uint8_t *s, size_t n, uint64_t key[2])
{
    /* The two words of a key of n <= PIECE_KEY_INLINE bytes: little-endian, zero-padded, with
     * reads that stay inside s[0..n) (two overlapping ones where n allows, as tb_hash_bytes). */
    uint64_t lo = 0, hi = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n >= 8) {
        memcpy(&lo, s, 8);
        if (n > 8) {
            memcpy(&hi, s + n - 8, 8);
            hi >>= 8 * (16 - n);
        }
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        lo = (uint64_t)a | ((uint64_t)b >> (8 * (8 - n))) << 32;
    } else if (n) {
        lo = (uint64_t)s[0] | (n > 1 ? (uint64_t)s[1] << 8 : 0) | (n > 2 ? (uint64_t)s[2] << 16 : 0);
    }
#else
    size_t i;
    for (i = 0; i < n; i++) {
        if (i < 8)
            lo |= (uint64_t)s[i] << (8 * i);
        else
            hi |= (uint64_t)s[i] << (8 * (i - 8));
    }
#endif
    key[0] = lo;
    key[1] = hi | (uint64_t)(n + 1) << 56;
}

/* [n] -> the bits of the first 8 and of the next 8 bytes that a key of n bytes keeps. */
static const uint64_t PIECE_KEY_LOW[PIECE_KEY_INLINE + 1] = {
    0, 0xFFull, 0xFFFFull, 0xFFFFFFull, 0xFFFFFFFFull, 0xFFFFFFFFFFull, 0xFFFFFFFFFFFFull, 0xFFFFFFFFFFFFFFull,
    ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull};
static const uint64_t PIECE_KEY_HIGH[PIECE_KEY_INLINE + 1] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFFull, 0xFFFFull, 0xFFFFFFull, 0xFFFFFFFFull, 0xFFFFFFFFFFull, 0xFFFFFFFFFFFFull,
    0xFFFFFFFFFFFFFFull};

static inline void piece_short_key_read16(const uint8_t *s, size_t n, uint64_t key[2])
{
    /* piece_short_key's words where the 16 bytes s[0..16) may be read (a piece that is not at the
     * end of its text): two loads and two masks, with no branch on the length. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t lo, hi;
    memcpy(&lo, s, 8);
    memcpy(&hi, s + 8, 8);
    key[0] = lo & PIECE_KEY_LOW[n];
    key[1] = (hi & PIECE_KEY_HIGH[n]) | (uint64_t)(n + 1) << 56;
#else
    piece_short_key(s, n, key);
#endif
}

static inline uint64_t piece_short_hash(const uint64_t key[2])
{
    /* A hash of a short key's two words (cheaper than hashing its bytes again): Fibonacci hashing,
     * whose top bits (the slot, piece_cache_index) depend on every bit of both words. Two
     * multiplies: the murmur finish it had (two more shifts and a multiply) bought nothing a top-bits
     * slot needs and cost ~4% of a warm encode. */
    return (key[0] ^ key[1] * 0xC2B2AE3D27D4EB4FULL) * 0x9E3779B97F4A7C15ULL;
}

static inline uint64_t piece_cache_hash(const uint8_t *s, size_t n)
{
    /* A hash for these maps: of the packed words of a short key, else of the bytes. */
    uint64_t key[2];
    if (n > PIECE_KEY_INLINE)
        return tb_hash_bytes(s, n);
    piece_short_key(s, n, key);
    return piece_short_hash(key);
}

static inline int piece_cache_init(PieceCache *c, size_t capacity)
{
    /* An empty map with room for `capacity` keys (at least 1); -1 when out of memory. */
    size_t size = 64;
    void *slots;
    memset(c, 0, sizeof(*c));
    if (capacity == 0)
        capacity = 1;
    while (size / 4 * 3 < capacity)
        size *= 2;
    if ((slots = tb_alloc_table(size * sizeof(PieceSlot))) == NULL)
        return -1;
    memset(slots, 0, size * sizeof(PieceSlot));
    c->slots = slots;
    c->mask = size - 1;
    for (c->shift = 64; ((size_t)1 << (64 - c->shift)) < size; c->shift--)
        ;
    c->capacity = capacity;
    return 0;
}

static inline size_t piece_cache_bytes(size_t capacity)
{
    /* The bytes of the slots of a map with room for `capacity` keys (piece_cache_init's table). */
    size_t size = 64;
    if (capacity == 0)
        capacity = 1;
    while (size / 4 * 3 < capacity)
        size *= 2;
    return size * sizeof(PieceSlot);
}

static inline void piece_cache_free(PieceCache *c)
{
    free(c->slots);
    free(c->keys);
    free(c->ids);
    memset(c, 0, sizeof(*c));
}

static inline void piece_cache_clear(PieceCache *c)
{
    if (c->used)
        memset(c->slots, 0, (c->mask + 1) * sizeof(PieceSlot));
    c->used = c->keys_len = c->ids_len = 0;
}

static inline int piece_cache_full(const PieceCache *c)
{
    return c->used >= c->capacity;
}

static inline size_t piece_cache_index(const PieceCache *c, uint64_t hash)
{
    /* The first slot probed for `hash` (its top bits): an even one, the first of its cache line. */
    return (size_t)(hash >> c->shift) & ~(size_t)1;
}

static inline const void *piece_cache_line(const PieceCache *c, uint64_t hash)
{
    /* The cache line a lookup of `hash` reads first (to prefetch). */
    return &c->slots[piece_cache_index(c, hash)];
}

static inline PieceSlot *piece_cache_find_long(const PieceCache *c, const uint8_t *key, size_t len, uint64_t hash)
{
    size_t i = piece_cache_index(c, hash);
    for (;;) {
        PieceSlot *s = &c->slots[i];
        if (s->key[1] == 0)
            return s;
        if (s->key[0] == hash && s->key[1] >> 56 == PIECE_LONG_TAG) {
            const uint8_t *at = c->keys + (s->key[1] & 0x00FFFFFFFFFFFFFFULL);
            size_t n;
            memcpy(&n, at, sizeof(n));
            if (n == len && tb_equal(at + sizeof(n), key, len))
                return s;
        }
        i = (i + 1) & c->mask;
    }
}

static inline PieceSlot *piece_cache_find_short(const PieceCache *c, const uint64_t key[2], size_t i)
{
    /* piece_cache_find of a short key given as its words (piece_short_key), its first slot `i`
     * (piece_cache_index of its hash) given too. */
    for (;;) {
        PieceSlot *s = &c->slots[i];
        if ((s->key[0] == key[0] && s->key[1] == key[1]) || s->key[1] == 0)
            return s;
        i = (i + 1) & c->mask;
    }
}

static inline PieceSlot *piece_cache_find(const PieceCache *c, const uint8_t *key, size_t len, uint64_t hash)
{
    /* The slot of `key`, or the empty slot where it would go. */
    uint64_t k[2];
    if (len > PIECE_KEY_INLINE)
        return piece_cache_find_long(c, key, len, hash);
    piece_short_key(key, len, k);
    return piece_cache_find_short(c, k, piece_cache_index(c, hash));
}

static inline int piece_cache_put(PieceCache *c, PieceSlot *s, const uint8_t *key, size_t len, uint64_t hash,
                                  const int32_t *ids, size_t count)
{
    /* Fill the empty slot `s` (from piece_cache_find) with key -> ids; -1 when out of memory or
     * the map is full (the caller empties it first). */
    uint64_t k[2];
    if (piece_cache_full(c) || count > UINT32_MAX)
        return -1;
    if (len > PIECE_KEY_INLINE) {
        size_t at = c->keys_len;
        if (at > 0x00FFFFFFFFFFFFFFULL ||
            tb_reserve((void **)&c->keys, &c->keys_cap, at + sizeof(size_t) + len, 1, 4096) < 0)
            return -1;
        memcpy(c->keys + at, &len, sizeof(len));
        tb_copy(c->keys + at + sizeof(len), key, len);
        c->keys_len += sizeof(len) + len;
        k[0] = hash;
        k[1] = (uint64_t)PIECE_LONG_TAG << 56 | (uint64_t)at;
    } else {
        piece_short_key(key, len, k);
    }
    if (count > PIECE_IDS_INLINE) {
        uint64_t at = c->ids_len;
        if (tb_reserve((void **)&c->ids, &c->ids_cap, c->ids_len + count, sizeof(int32_t), 1024) < 0)
            return -1;
        tb_copy(c->ids + c->ids_len, ids, count * sizeof(int32_t));
        memcpy(&s->ids[1], &at, sizeof(at));
        c->ids_len += count;
    } else {
        tb_copy(s->ids, ids, count * sizeof(int32_t));
    }
    s->count = (uint32_t)count;
    s->key[0] = k[0];
    s->key[1] = k[1];
    c->used++;
    return 0;
}

#endif

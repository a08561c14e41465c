/*
 * A fixed-size map from piece bytes to token ids, laid out so that a lookup touches one cache line:
 * the encoder's cache of pieces it has merged, and the whole-token map of a tokenizer that ignores
 * merges (`_pcre2.c`'s TextEncoder). Touches no Python object.
 *
 * A slot is 64 bytes, aligned to a cache line: the key's hash, and the key and its ids inline when
 * they fit (up to 24 bytes and 6 ids: nearly every piece of natural text), else their place in an
 * arena. `ByteMap` (`_byte_map.h`) keeps every key in an arena and the ids in another, so a hit cost
 * three scattered memory reads; here it costs one.
 *
 * The map never grows: it has room for `capacity` keys at most half full, and its owner empties it
 * (the cache) or sizes it for every key (the whole-token map). Linear probing; hash 0 marks an
 * empty slot (bytemap_hash never returns 0).
 *
 *   PieceCache c; piece_cache_init(&c, 2);
 *   PieceSlot *s = piece_cache_find(&c, key, 3, hash);      // s->hash == 0: not there
 *   piece_cache_put(&c, s, key, 3, hash, ids, 2);           // piece_cache_ids(&c, s) == ids
 */
#ifndef TOKENBEAM_PIECE_CACHE_H
#define TOKENBEAM_PIECE_CACHE_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_common.h"

#define PIECE_KEY_INLINE 24
#define PIECE_IDS_INLINE 6

typedef struct {
    uint64_t hash;                       /* 0: an empty slot */
    uint32_t len, count;                 /* key bytes, ids */
    union {
        uint8_t bytes[PIECE_KEY_INLINE]; /* len <= PIECE_KEY_INLINE */
        size_t at;                       /* else: where the key starts in `keys` */
    } key;
    union {
        int32_t ids[PIECE_IDS_INLINE];   /* count <= PIECE_IDS_INLINE */
        size_t at;                       /* else: where the ids start in `ids` */
    } val;
} PieceSlot;

typedef struct {
    PieceSlot *slots;
    size_t mask, used, capacity;
    uint8_t *keys;                       /* long keys */
    size_t keys_len, keys_cap;
    int32_t *ids;                        /* long id runs */
    size_t ids_len, ids_cap;
} PieceCache;

static inline const uint8_t *piece_cache_key(const PieceCache *c, const PieceSlot *s)
{
    return s->len <= PIECE_KEY_INLINE ? s->key.bytes : c->keys + s->key.at;
}

static inline const int32_t *piece_cache_ids(const PieceCache *c, const PieceSlot *s)
{
    return s->count <= PIECE_IDS_INLINE ? s->val.ids : c->ids + s->val.at;
}

static inline int piece_cache_init(PieceCache *c, size_t capacity)
{
    /* An empty map with room for `capacity` keys (at least 1); -1 when out of memory. */
    size_t size = 64;
    void *slots;
    memset(c, 0, sizeof(*c));
    if (capacity == 0)
        capacity = 1;
    while (size < 2 * capacity)
        size *= 2;
    if ((slots = tb_alloc_table(size * sizeof(PieceSlot))) == NULL)
        return -1;
    memset(slots, 0, size * sizeof(PieceSlot));
    c->slots = slots;
    c->mask = size - 1;
    c->capacity = capacity;
    return 0;
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
    /* The first slot probed for `hash` (for a prefetch, say). */
    return (size_t)(hash >> 7) & c->mask;
}

static inline int piece_key_equal(const PieceCache *c, const PieceSlot *s, const uint8_t *key, size_t len)
{
    /* Whether the slot's key (of `len` bytes) is `key`: an inline key by 8-byte words, the last one
     * overlapping the one before (where a call to memcmp cost more than the compare, and a loop
     * byte by byte was a tenth of the encoder's instructions), a long one with memcmp. */
    const uint8_t *inline_key = s->key.bytes;
    uint64_t x, y, differ = 0;
    size_t i;
    if (len > PIECE_KEY_INLINE)
        return tb_equal(c->keys + s->key.at, key, len);
    if (len >= 8) {
        for (i = 0; i + 8 < len; i += 8) {
            memcpy(&x, inline_key + i, 8);
            memcpy(&y, key + i, 8);
            differ |= x ^ y;
        }
        memcpy(&x, inline_key + len - 8, 8);
        memcpy(&y, key + len - 8, 8);
        return (differ | (x ^ y)) == 0;
    }
    if (len >= 4) {
        uint32_t a, b, d, e;
        memcpy(&a, inline_key, 4);
        memcpy(&b, key, 4);
        memcpy(&d, inline_key + len - 4, 4);
        memcpy(&e, key + len - 4, 4);
        return ((a ^ b) | (d ^ e)) == 0;
    }
    for (i = 0; i < len; i++)
        differ |= (uint64_t)(inline_key[i] ^ key[i]);
    return differ == 0;
}

static inline PieceSlot *piece_cache_find(const PieceCache *c, const uint8_t *key, size_t len, uint64_t hash)
{
    /* The slot of `key`, or the empty slot where it would go. */
    size_t i = piece_cache_index(c, hash);
    for (;;) {
        PieceSlot *s = &c->slots[i];
        if (s->hash == 0 || (s->hash == hash && s->len == len && piece_key_equal(c, s, key, len)))
            return s;
        i = (i + 1) & c->mask;
    }
}

static inline int piece_cache_put(PieceCache *c, PieceSlot *s, const uint8_t *key, size_t len, uint64_t hash,
                                  const int32_t *ids, size_t count)
{
    /* Fill the empty slot `s` (from piece_cache_find) with key -> ids; -1 when out of memory or
     * the map is full (the caller empties it first). */
    if (piece_cache_full(c) || len > UINT32_MAX || count > UINT32_MAX)
        return -1;
    if (len > PIECE_KEY_INLINE) {
        if (tb_reserve((void **)&c->keys, &c->keys_cap, c->keys_len + len, 1, 4096) < 0)
            return -1;
        tb_copy(c->keys + c->keys_len, key, len);
        s->key.at = c->keys_len;
        c->keys_len += len;
    } else {
        tb_copy(s->key.bytes, key, len);
    }
    if (count > PIECE_IDS_INLINE) {
        if (tb_reserve((void **)&c->ids, &c->ids_cap, c->ids_len + count, sizeof(int32_t), 1024) < 0)
            return -1;
        tb_copy(c->ids + c->ids_len, ids, count * sizeof(int32_t));
        s->val.at = c->ids_len;
        c->ids_len += count;
    } else {
        tb_copy(s->val.ids, ids, count * sizeof(int32_t));
    }
    s->len = (uint32_t)len;
    s->count = (uint32_t)count;
    s->hash = hash;
    c->used++;
    return 0;
}

#endif

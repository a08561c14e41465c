/*
 * A byte-string hash map (piece bytes -> an int64 value), CRC-32 buckets and packed count-table
 * records: what the count tables of `_native.c` (CountTable) and the pre-token counter and encoder
 * cache of `_pcre2.c` share. Needs no PCRE2 and touches no Python object.
 *
 * A packed count table (bpe_ops/count_table.py is the specification) is a run of records: a
 * uint32 key length, the key bytes and an int64 count, both integers little-endian, in any order; a
 * key may appear more than once, and its counts add up.
 */
#ifndef TOKENBEAM_BYTE_MAP_H
#define TOKENBEAM_BYTE_MAP_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_common.h"

/* ---- the map ------------------------------------------------------------------------------------ */

/* Entries point into an arena of key bytes; the value is a count, or (the encoder cache) where a
 * piece's ids start in an id arena with how many there are. Open addressing, linear probing, at most
 * half full. */
typedef struct {
    uint64_t hash;               /* 0: an empty slot */
    uint32_t key_at, key_len;
    int64_t value;
} Entry;

typedef struct {
    Entry *slots;
    size_t mask, used;
    uint8_t *keys;               /* never NULL once initialised, so an empty key points somewhere */
    size_t keys_len, keys_cap;
} ByteMap;

/* The first size of the key arena. */
#define BYTEMAP_FIRST_KEYS 4096

static inline uint64_t bytemap_hash(const uint8_t *s, size_t n)
{
    /* The hash of a key in a ByteMap: never 0, which marks an empty slot. */
    return tb_hash_bytes(s, n) | 1;
}

static inline int bytemap_init(ByteMap *m, size_t capacity)
{
    /* An empty map with room for `capacity` keys before it grows; -1 when out of memory. */
    size_t size = 64;
    while (size < 2 * capacity)
        size *= 2;
    memset(m, 0, sizeof(*m));
    m->slots = calloc(size, sizeof(Entry));
    m->keys = malloc(BYTEMAP_FIRST_KEYS);
    if (m->slots == NULL || m->keys == NULL) {
        free(m->slots);
        free(m->keys);
        memset(m, 0, sizeof(*m));
        return -1;
    }
    m->mask = size - 1;
    m->keys_cap = BYTEMAP_FIRST_KEYS;
    return 0;
}

static inline void bytemap_free(ByteMap *m)
{
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof(*m));
}

static inline void bytemap_clear(ByteMap *m)
{
    memset(m->slots, 0, (m->mask + 1) * sizeof(Entry));
    m->used = 0;
    m->keys_len = 0;
}

static inline const uint8_t *entry_key(const ByteMap *m, const Entry *e)
{
    return m->keys + e->key_at;
}

static inline Entry *bytemap_find(const ByteMap *m, const uint8_t *key, size_t len, uint64_t hash)
{
    /* The entry of `key`, or the empty slot where it would go. */
    size_t i = (size_t)(hash >> 7) & m->mask;
    for (;;) {
        Entry *e = &m->slots[i];
        if (e->hash == 0 || (e->hash == hash && e->key_len == len && tb_equal(m->keys + e->key_at, key, len)))
            return e;
        i = (i + 1) & m->mask;
    }
}

static inline int bytemap_grow(ByteMap *m)
{
    /* Double the slots (rehash every entry); -1 when out of memory. */
    size_t size = 2 * (m->mask + 1), i;
    Entry *old = m->slots, *slots = calloc(size, sizeof(Entry));
    if (slots == NULL)
        return -1;
    m->slots = slots;
    for (i = 0; i <= m->mask; i++)
        if (old[i].hash) {
            size_t j = (size_t)(old[i].hash >> 7) & (size - 1);
            while (slots[j].hash)
                j = (j + 1) & (size - 1);
            slots[j] = old[i];
        }
    m->mask = size - 1;
    free(old);
    return 0;
}

static inline Entry *bytemap_insert(ByteMap *m, Entry *slot, const uint8_t *key, size_t len, uint64_t hash)
{
    /* Fill the empty `slot` (from bytemap_find) with `key`, value 0; NULL when out of memory. The
     * slots grow when half full, so the returned entry may not be `slot`. Key offsets are 32-bit:
     * the arena stops at 4 GiB. */
    if (m->keys_len + len > UINT32_MAX ||
        tb_reserve((void **)&m->keys, &m->keys_cap, m->keys_len + len, 1, BYTEMAP_FIRST_KEYS) < 0)
        return NULL;
    tb_copy(m->keys + m->keys_len, key, len);
    slot->hash = hash;
    slot->key_at = (uint32_t)m->keys_len;
    slot->key_len = (uint32_t)len;
    slot->value = 0;
    m->keys_len += len;
    if (++m->used * 2 > m->mask + 1) {
        if (bytemap_grow(m) < 0)
            return NULL;
        return bytemap_find(m, key, len, hash);
    }
    return slot;
}

static inline Entry *bytemap_entry(ByteMap *m, const uint8_t *key, size_t len, uint64_t hash)
{
    /* The entry of `key`, added with value 0 when missing; NULL when out of memory. */
    Entry *e = bytemap_find(m, key, len, hash);
    return e->hash ? e : bytemap_insert(m, e, key, len, hash);
}

static inline int bytemap_add_all(ByteMap *into, const ByteMap *from)
{
    /* into[k] += v for every (k, v) of `from` (count maps); -1 when out of memory. */
    size_t i;
    for (i = 0; i <= from->mask; i++) {
        const Entry *o = &from->slots[i];
        Entry *e;
        if (o->hash == 0)
            continue;
        if ((e = bytemap_entry(into, entry_key(from, o), o->key_len, o->hash)) == NULL)
            return -1;
        e->value += o->value;
    }
    return 0;
}

/* ---- CRC-32 buckets ------------------------------------------------------------------------------- */

static uint32_t crc32_table[256];

static inline void crc32_init(void)
{
    /* The CRC-32 of zlib (reflected polynomial 0xEDB88320), table-driven; call once at import. */
    uint32_t i, c;
    int k;
    for (i = 0; i < 256; i++) {
        for (c = i, k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc32_table[i] = c;
    }
}

static inline uint32_t crc32_of(const uint8_t *s, size_t n)
{
    /* zlib.crc32(s): the stable bucket the Python path computes (crc32_of("abc", 3) == 0x352441C2). */
    uint32_t c = 0xFFFFFFFFu;
    while (n--)
        c = crc32_table[(c ^ *s++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- packed records ---------------------------------------------------------------------------- */

typedef struct {
    uint8_t *data;
    size_t len, cap;
} Buffer;

static inline void put_le(uint8_t *out, uint64_t v, int n)
{
    int i;
    for (i = 0; i < n; i++)
        out[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t get_le(const uint8_t *in, int n)
{
    uint64_t v = 0;
    int i;
    for (i = 0; i < n; i++)
        v |= (uint64_t)in[i] << (8 * i);
    return v;
}

static inline int pack_record(Buffer *b, const uint8_t *key, uint32_t len, int64_t count)
{
    /* Append one record (key b"ab", count 258: 02 00 00 00 'a' 'b' 02 01 00 00 00 00 00 00); -1 when
     * out of memory. */
    if (tb_reserve((void **)&b->data, &b->cap, b->len + 12 + (size_t)len, 1, 256) < 0)
        return -1;
    put_le(b->data + b->len, len, 4);
    tb_copy(b->data + b->len + 4, key, len);
    put_le(b->data + b->len + 4 + len, (uint64_t)count, 8);
    b->len += 12 + (size_t)len;
    return 0;
}

#endif

/*
 * Small C helpers shared by the compiled modules (`_merge_loop.c`, `_merge_table.h`, `_byte_map.h`,
 * `_native.c`, `_pcre2.c`, `_split_scan.h`, `_char_start.h`): growable arrays, byte and UTF-8
 * reading, hashes, and a binary heap. Nothing here touches Python objects, so callers may use it
 * without the GIL.
 *
 * Everything is `static inline`: each module gets its own copy of what it uses and the compiler
 * warns about nothing it leaves out.
 */
#ifndef TOKENBEAM_COMMON_H
#define TOKENBEAM_COMMON_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* ---- large tables ------------------------------------------------------------------------------ */

/* Tables at least this big are placed on 2 MiB boundaries and offered to the kernel as huge pages. */
#define TB_HUGE_PAGE ((size_t)2 << 20)

static inline void *tb_alloc_table(size_t bytes)
{
    /* `bytes` of memory aligned to a cache line (free() releases it), or NULL. A table of megabytes
     * probed at random (the encoder's piece cache, the whole-token map, the merge map) touches a new
     * 4 KiB page on nearly every lookup, and the processor's page-table cache holds a few thousand
     * of them: on 2 MiB pages (Linux's transparent huge pages, where the system grants them on
     * request) the same lookups find their page cached. */
    void *p = NULL;
    size_t align = bytes >= TB_HUGE_PAGE ? TB_HUGE_PAGE : 64;
    if (posix_memalign(&p, align, bytes ? bytes : 1) != 0)
        return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == TB_HUGE_PAGE)
        (void)madvise(p, bytes - bytes % TB_HUGE_PAGE, MADV_HUGEPAGE);   /* advice: refused is fine */
#endif
    return p;
}

/* ---- growable arrays ---------------------------------------------------------------------------- */

typedef void *(*tb_resize_fn)(void *, size_t);

static inline int tb_reserve_with(tb_resize_fn resize, void **data, size_t *cap, size_t need, size_t item,
                                  size_t first)
{
    /* Room for `need` items of `item` bytes in *data (capacity *cap, doubled from `first`), resized
     * with `resize` (realloc, or PyMem_RawRealloc for memory Python's allocator owns); -1 when out
     * of memory or the size overflows, the array unchanged.
     *
     *   int32_t *ids = NULL; size_t cap = 0;
     *   tb_reserve((void **)&ids, &cap, 3, sizeof(int32_t), 16);   // cap == 16
     *   tb_reserve((void **)&ids, &cap, 17, sizeof(int32_t), 16);  // cap == 32
     */
    size_t grown_cap;
    void *grown;
    if (need <= *cap)
        return 0;
    grown_cap = *cap ? *cap : (first ? first : 1);
    while (grown_cap < need) {
        if (grown_cap > SIZE_MAX / 2)
            return -1;
        grown_cap *= 2;
    }
    if (item && grown_cap > SIZE_MAX / item)
        return -1;
    if ((grown = resize(*data, grown_cap * item)) == NULL)
        return -1;
    *data = grown;
    *cap = grown_cap;
    return 0;
}

static inline int tb_reserve(void **data, size_t *cap, size_t need, size_t item, size_t first)
{
    /* `tb_reserve_with`, with realloc. */
    return tb_reserve_with(realloc, data, cap, need, item, first);
}

/* memcpy and memcmp with a length of 0 may be given NULL (an empty arena, an empty key): the C
 * standard makes that undefined, so these skip the call. */
static inline void tb_copy(void *to, const void *from, size_t n)
{
    if (n)
        memcpy(to, from, n);
}

static inline int tb_equal(const void *a, const void *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

static inline int tb_compare(const void *a, const void *b, size_t n)
{
    return n ? memcmp(a, b, n) : 0;
}

static inline int tb_ascii(const uint8_t *s, size_t n)
{
    /* Whether s[0..n) is all ASCII: eight bytes at a time. */
    size_t i = 0;
    uint64_t any = 0, word;
    for (; i + 8 <= n; i += 8) {
        memcpy(&word, s + i, 8);
        any |= word;
    }
    for (; i < n; i++)
        any |= s[i];
    return (any & 0x8080808080808080ULL) == 0;
}

static inline uint32_t tb_bmp_code_point(const uint8_t *s, size_t p, size_t *next)
{
    /* The code point of the character at byte p of valid UTF-8, one of up to 3 bytes, and where
     * the next one starts. */
    uint8_t b = s[p];
    if (b < 0x80) {
        *next = p + 1;
        return b;
    }
    if (b < 0xE0) {
        *next = p + 2;
        return (b & 0x1Fu) << 6 | (s[p + 1] & 0x3Fu);
    }
    *next = p + 3;
    return (b & 0x0Fu) << 12 | (s[p + 1] & 0x3Fu) << 6 | (s[p + 2] & 0x3Fu);
}

/* ---- hashes -------------------------------------------------------------------------------------- */

static inline int tb_popcount64(uint64_t x)
{
    /* The set bits of x. Where the build targets a processor with POPCNT, that instruction; else
     * the bit-slicing sum inline (a dozen instructions), not libgcc's __popcountdi2, a call per use. */
#if defined(__POPCNT__)
    return __builtin_popcountll(x);
#else
    x -= (x >> 1) & 0x5555555555555555ULL;
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
    return (int)((x * 0x0101010101010101ULL) >> 56);
#endif
}

static inline uint64_t tb_mix64(uint64_t key)
{
    /* murmur3's 64-bit finalizer: every input bit reaches every output bit (for keys of two ids). */
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ULL;
    key ^= key >> 33;
    return key;
}

static inline uint64_t tb_hash_bytes(const uint8_t *s, size_t n)
{
    /* A multiply-xorshift hash over 8-byte words (the length is mixed in, so "" and "\0" differ). */
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xC2B2AE3D27D4EB4FULL), w;
    while (n >= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    if (n) {
        /* The last 1-7 bytes, little-endian, zero-padded (what memcpy into a zeroed word gives,
         * without a call to memcpy for a length the compiler cannot see): two overlapping 4-byte
         * reads from 4 bytes on, else byte by byte. */
        if (n >= 4) {
            uint32_t lo, hi;
            memcpy(&lo, s, 4);
            memcpy(&hi, s + n - 4, 4);
            w = (uint64_t)lo | ((uint64_t)hi >> (8 * (8 - n))) << 32;
        } else {
            w = (uint64_t)s[0] | (n > 1 ? (uint64_t)s[1] << 8 : 0) | (n > 2 ? (uint64_t)s[2] << 16 : 0);
        }
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 29;
    return h;
}

static inline uint64_t tb_pair_key(int32_t left, int32_t right)
{
    /* Two ids (0 <= id < 2**31) as one 64-bit key: left << 32 | right. */
    return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

/* ---- a binary heap --------------------------------------------------------------------------------- */

/* TB_HEAP(name, T, Ctx, first) defines a binary heap of T items kept in a caller's array, where
 * `first(ctx, a, b)` says whether *a comes out before *b:
 *   name_sift_down(ctx, items, n, i)   items[i] moved down to its place among items[0..n)
 *   name_sift_up(ctx, items, i)        items[i] moved up to its place (after it was appended)
 *   name_heapify(ctx, items, n)        items[0..n) put in heap order
 *   name_pop(ctx, items, &n)           the first item, removed
 * A macro, not a comparator pointer, so that `first` is inlined into the loops that are the merge
 * loop's hot path. A min-heap of uint64 keys:
 *
 *   static inline int key_less(void *ctx, const uint64_t *a, const uint64_t *b) { return *a < *b; }
 *   TB_HEAP(keys, uint64_t, void *, key_less)
 *   uint64_t k[3] = {5, 1, 3}; size_t n = 3;
 *   keys_heapify(NULL, k, n); keys_pop(NULL, k, &n);   // 1, and n == 2
 */
#define TB_HEAP(name, T, Ctx, first)                                                                \
    static inline void name##_sift_down(Ctx ctx, T *items, size_t n, size_t i)                      \
    {                                                                                               \
        T item = items[i];                                                                          \
        size_t child;                                                                               \
        while ((child = 2 * i + 1) < n) {                                                           \
            if (child + 1 < n && first(ctx, &items[child + 1], &items[child]))                      \
                child++;                                                                            \
            if (!first(ctx, &items[child], &item))                                                  \
                break;                                                                              \
            items[i] = items[child];                                                                \
            i = child;                                                                              \
        }                                                                                           \
        items[i] = item;                                                                            \
    }                                                                                               \
    static inline void name##_sift_up(Ctx ctx, T *items, size_t i)                                  \
    {                                                                                               \
        T item = items[i];                                                                          \
        while (i > 0 && first(ctx, &item, &items[(i - 1) / 2])) {                                   \
            items[i] = items[(i - 1) / 2];                                                          \
            i = (i - 1) / 2;                                                                        \
        }                                                                                           \
        items[i] = item;                                                                            \
    }                                                                                               \
    static inline void name##_heapify(Ctx ctx, T *items, size_t n)                                  \
    {                                                                                               \
        size_t i = n / 2;                                                                           \
        while (i-- > 0)                                                                             \
            name##_sift_down(ctx, items, n, i);                                                     \
    }                                                                                               \
    static inline T name##_pop(Ctx ctx, T *items, size_t *n)                                        \
    {                                                                                               \
        T top = items[0];                                                                           \
        items[0] = items[--*n];                                                                     \
        if (*n)                                                                                     \
            name##_sift_down(ctx, items, *n, 0);                                                    \
        return top;                                                                                 \
    }

#endif

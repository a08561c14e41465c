/*
 * The PCRE2 guard's lookup, shared by `_native.has_code_point_in` (the Python layer's check of a
 * str before PCRE2 splits it) and the compiled encoder (`_pcre2.c`, for a str whose UTF-8 it does
 * not write itself). The guard is a bitmap of 0x110000 bits, bit c (byte c >> 3, bit c & 7) set for
 * each code point c whose class PCRE2 and `regex` read differently; a text holding one is split by
 * `regex` instead. `fuzz_guard_bitmap.py` holds the lookup to a lookup of every character.
 */
#ifndef TOKENBEAM_GUARD_H
#define TOKENBEAM_GUARD_H
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define GUARD_BLOCK 32

static uint32_t lowest_code_point_in(const uint8_t *b, size_t nbytes)
{
    /* The lowest code point whose bit is set among the first nbytes of the bitmap, or 0x110000. */
    size_t i;
    for (i = 0; i < nbytes && b[i] == 0; i++)
        ;
    if (i == nbytes)
        return 0x110000;
    {
        uint32_t bit = 0;
        while (!(b[i] >> bit & 1))
            bit++;
        return (uint32_t)(i * 8 + bit);
    }
}

static inline int block_reaches(int kind, const void *data, size_t i, size_t end, uint32_t lowest)
{
    /* Whether a character of data[i..end) (a block of a str of 2 or 4 bytes a character) is at or
     * above `lowest` (> 0). With SSE2, a whole block is eight 16-byte compares (no unsigned 16-bit
     * maximum there, so a loop of maxima would go one character at a time). */
    size_t k;
    uint32_t top = 0;
#if defined(__SSE2__)
    if (end - i == GUARD_BLOCK && kind == PyUnicode_2BYTE_KIND) {
        const __m128i *v = (const __m128i *)((const Py_UCS2 *)data + i), below = _mm_set1_epi16((short)(lowest - 1));
        __m128i over = _mm_setzero_si128();
        for (k = 0; k < GUARD_BLOCK / 8; k++)       /* c - (lowest - 1), saturated: non-zero from lowest on */
            over = _mm_or_si128(over, _mm_subs_epu16(_mm_loadu_si128(v + k), below));
        return _mm_movemask_epi8(_mm_cmpeq_epi16(over, _mm_setzero_si128())) != 0xFFFF;
    }
    if (end - i == GUARD_BLOCK && kind == PyUnicode_4BYTE_KIND) {
        const __m128i *v = (const __m128i *)((const Py_UCS4 *)data + i), below = _mm_set1_epi32((int)(lowest - 1));
        __m128i over = _mm_setzero_si128();
        for (k = 0; k < GUARD_BLOCK / 4; k++)       /* code points are below 2**31: a signed compare */
            over = _mm_or_si128(over, _mm_cmpgt_epi32(_mm_loadu_si128(v + k), below));
        return _mm_movemask_epi8(over) != 0;
    }
#endif
    if (kind == PyUnicode_2BYTE_KIND)
        for (k = i; k < end; k++)
            top = ((const Py_UCS2 *)data)[k] > top ? ((const Py_UCS2 *)data)[k] : top;
    else
        for (k = i; k < end; k++)
            top = ((const Py_UCS4 *)data)[k] > top ? ((const Py_UCS4 *)data)[k] : top;
    return top >= lowest;
}

static int guarded_code_point_in(int kind, const void *data, size_t n, const uint8_t *b)
{
    /* Whether any code point c of a str's data (its PyUnicode `kind`, n characters) has bit c of the
     * guard `b` set: the PCRE2 guard's character-class search without a regex (whose first-byte
     * filter lets every character of a script through when a class member shares its UTF-8 lead
     * byte). Code points below the lowest one set cannot match: a text stored one byte per
     * character is answered without reading it when no bit below 256 is set, and a wider text is
     * read a block at a time, its characters looked up only in a block that reaches that lowest
     * code point (block_reaches). */
    size_t i, k;
    uint32_t lowest;
    int found = 0;
#define TB_LOOKUP(type, from, to)                                                                   \
    for (k = (from); k < (to) && !found; k++) {                                                    \
        uint32_t c = ((const type *)data)[k];                                                      \
        found = b[c >> 3] >> (c & 7) & 1;                                                          \
    }
#define TB_SCAN_BLOCKS(type)                                                                        \
    for (i = 0; i < n && !found; i += GUARD_BLOCK) {                                               \
        size_t end = n - i < GUARD_BLOCK ? n : i + GUARD_BLOCK;                                    \
        if (lowest == 0 || block_reaches(kind, data, i, end, lowest))                              \
            TB_LOOKUP(type, i, end)                                                                \
    }
    switch (kind) {
    case PyUnicode_1BYTE_KIND:
        if (lowest_code_point_in(b, 256 / 8) < 256)
            TB_LOOKUP(Py_UCS1, 0, n)
        break;
    case PyUnicode_2BYTE_KIND:
        lowest = lowest_code_point_in(b, 0x10000 / 8);
        if (lowest < 0x10000)
            TB_SCAN_BLOCKS(Py_UCS2)
        break;
    default:
        lowest = lowest_code_point_in(b, 0x110000 / 8);
        if (lowest < 0x110000)
            TB_SCAN_BLOCKS(Py_UCS4)
        break;
    }
#undef TB_SCAN_BLOCKS
#undef TB_LOOKUP
    return found;
}

static inline int guarded_utf8_in(const uint8_t *s, size_t n, const uint8_t *b, uint32_t lowest)
{
    /* Whether any code point c >= 0x80 of valid UTF-8 s[0..n) has bit c of the guard `b` set: the
     * check `_pcre2`'s text_utf8 makes of a str's characters as it writes their UTF-8, made of the
     * UTF-8 itself. `lowest`: lowest_code_point_in(b, 0x110000 / 8), below which no bit is set.
     * ASCII is skipped 32 bytes at a time (eight without SSE2), and a 2-byte sequence (below
     * U+0800) without a lookup where `lowest` is above it.
     *
     *   guard with bit 0xE9 set: "caf\xC3\xA9" -> 1 (U+00E9), "cafe" -> 0 */
    size_t at = 0;
    if (lowest >= 0x110000)
        return 0;
    while (at < n) {
        uint32_t c = s[at];
        if (c < 0x80) {
            /* ASCII: a block of it at once where one starts here (tried only at an ASCII byte: a
             * text in a script of its own goes from character to character below). */
#if defined(__SSE2__)
            if (n - at >= 32 && _mm_movemask_epi8(_mm_or_si128(_mm_loadu_si128((const __m128i *)(s + at)),
                                                               _mm_loadu_si128((const __m128i *)(s + at + 16)))) == 0) {
                at += 32;
                continue;
            }
#endif
            if (n - at >= 8) {
                uint64_t w;
                memcpy(&w, s + at, 8);
                if ((w & 0x8080808080808080ull) == 0) {
                    at += 8;
                    continue;
                }
            }
            at++;
            continue;
        }
        if (c < 0xE0) {
            at += 2;
            if (lowest >= 0x800)
                continue;
            c = (c & 0x1F) << 6 | (s[at - 1] & 0x3F);
        } else if (c < 0xF0) {
            c = (c & 0x0F) << 12 | (uint32_t)(s[at + 1] & 0x3F) << 6 | (s[at + 2] & 0x3F);
            at += 3;
        } else {
            c = (c & 0x07) << 18 | (uint32_t)(s[at + 1] & 0x3F) << 12 | (uint32_t)(s[at + 2] & 0x3F) << 6 |
                (s[at + 3] & 0x3F);
            at += 4;
        }
        if (c >= lowest && (b[c >> 3] >> (c & 7) & 1))
            return 1;
    }
    return 0;
}

#endif

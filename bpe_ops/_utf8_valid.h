/*
 * Whether bytes are UTF-8 as Python's strict decoder takes them (the Unicode standard's well-formed
 * UTF-8: no overlong form, no surrogate, nothing past U+10FFFF, no sequence cut short), 32 bytes at
 * a time with AVX2, for `_native`'s JSONL reader and `_pcre2`'s encoder of UTF-8 texts: `utf8_valid`
 * (at the end) is the specification, one character at a time, and hands its text over at the first
 * run of non-ASCII bytes.
 *
 * The check is the "lookup" method of Keiser and Lemire ("Validating UTF-8 in less than one
 * instruction per byte", 2021). Each byte is judged with the byte before it: three 16-entry tables,
 * indexed by the high nibble of the byte before, its low nibble and the high nibble of the byte
 * itself, each give the set of errors the pair could be (one bit per kind of error); the pair is
 * one of them where all three agree. Such a pair judgement sees all but one kind of error: a
 * continuation byte after a continuation byte is an error exactly where the byte two back does not
 * start a 3- or 4-byte sequence and the byte three back does not start a 4-byte one, which is
 * checked apart. A multi-byte sequence that starts in the last three bytes and has no room to end
 * there is cut short: checked at the end of the text, and before a block of ASCII.
 *
 * Worked example: "\xE0\x80" (an overlong U+0000 written in three bytes) is pair (E0, 80): the byte
 * before's high nibble E allows TOO_SHORT | OVERLONG_3 | SURROGATE, its low nibble 0 allows
 * CARRY | OVERLONG_3 | OVERLONG_2 | OVERLONG_4, the byte's high nibble 8 allows TOO_LONG |
 * OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE_1000 | OVERLONG_4: OVERLONG_3 is in all three.
 */
#ifndef TOKENBEAM_UTF8_VALID_H
#define TOKENBEAM_UTF8_VALID_H
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define UTF8_AVX2 1

/* The kinds of error a pair of bytes can be (a byte, and the byte before it). */
#define U8_TOO_SHORT 0x01       /* a lead byte, then no continuation: 11______ 0_______ or 11______ 11______ */
#define U8_TOO_LONG 0x02        /* ASCII, then a continuation: 0_______ 10______ */
#define U8_OVERLONG_3 0x04      /* 11100000 100_____ */
#define U8_TOO_LARGE 0x08       /* past U+10FFFF: 11110100 1001____, 11110100 101_____, 111101__ 1___, 11111___ */
#define U8_SURROGATE 0x10       /* 11101101 101_____ */
#define U8_OVERLONG_2 0x20      /* 1100000_ 10______ */
#define U8_TOO_LARGE_1000 0x40  /* past U+10FFFF, second byte 1000____: 11110101 and above */
#define U8_OVERLONG_4 0x40      /* 11110000 1000____ */
#define U8_TWO_CONTS 0x80       /* 10______ 10______: an error unless a 3- or 4-byte sequence goes on */
#define U8_CARRY (U8_TOO_SHORT | U8_TOO_LONG | U8_TWO_CONTS)    /* errors the low nibble before does not decide */

#define U8_TABLE(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p)                                                  \
    _mm256_setr_epi8((char)(a), (char)(b), (char)(c), (char)(d), (char)(e), (char)(f), (char)(g), (char)(h),      \
                     (char)(i), (char)(j), (char)(k), (char)(l), (char)(m), (char)(n), (char)(o), (char)(p),      \
                     (char)(a), (char)(b), (char)(c), (char)(d), (char)(e), (char)(f), (char)(g), (char)(h),      \
                     (char)(i), (char)(j), (char)(k), (char)(l), (char)(m), (char)(n), (char)(o), (char)(p))

/* The bytes `back` places before each byte of `block` (1 to 3), the first of them from the end of
 * `before`: AVX2's byte shift works within each 16-byte half, so the half that crosses comes first. */
#define U8_BEFORE(block, before, back) \
    _mm256_alignr_epi8((block), _mm256_permute2x128_si256((before), (block), 0x21), 16 - (back))

__attribute__((target("avx2"))) static inline __m256i utf8_block_errors(__m256i block, __m256i before)
{
    /* The errors of a 32-byte block, given the 32 bytes before it: zero where it is well formed
     * (a sequence it ends with may still be cut short: `utf8_block_unfinished`). */
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i before1 = U8_BEFORE(block, before, 1);
    const __m256i high_before = U8_TABLE(
        U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG, U8_TOO_LONG,
        U8_TWO_CONTS, U8_TWO_CONTS, U8_TWO_CONTS, U8_TWO_CONTS,                      /* 10__ continuation */
        U8_TOO_SHORT | U8_OVERLONG_2,                                                  /* 1100 */
        U8_TOO_SHORT,                                                                  /* 1101 */
        U8_TOO_SHORT | U8_OVERLONG_3 | U8_SURROGATE,                                   /* 1110 */
        U8_TOO_SHORT | U8_TOO_LARGE | U8_TOO_LARGE_1000 | U8_OVERLONG_4);              /* 1111 */
    const __m256i low_before = U8_TABLE(
        U8_CARRY | U8_OVERLONG_3 | U8_OVERLONG_2 | U8_OVERLONG_4,                      /* ____0000 */
        U8_CARRY | U8_OVERLONG_2,                                                      /* ____0001 */
        U8_CARRY, U8_CARRY,                                                            /* ____001_ */
        U8_CARRY | U8_TOO_LARGE,                                                       /* ____0100 */
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000, U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000,
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000,                                   /* ____0101 to 0111 */
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000, U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000,
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000, U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000,
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000,                                   /* ____1000 to 1100 */
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000 | U8_SURROGATE,                    /* ____1101 */
        U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000, U8_CARRY | U8_TOO_LARGE | U8_TOO_LARGE_1000);
    const __m256i high_byte = U8_TABLE(
        U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT,
        U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT,                        /* 0___ ASCII */
        U8_TOO_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_OVERLONG_3 | U8_TOO_LARGE_1000 | U8_OVERLONG_4, /* 1000 */
        U8_TOO_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_OVERLONG_3 | U8_TOO_LARGE,                      /* 1001 */
        U8_TOO_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_SURROGATE | U8_TOO_LARGE,                       /* 1010 */
        U8_TOO_LONG | U8_OVERLONG_2 | U8_TWO_CONTS | U8_SURROGATE | U8_TOO_LARGE,                       /* 1011 */
        U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT, U8_TOO_SHORT);                       /* 11__ a lead */
    const __m256i pair = _mm256_and_si256(
        _mm256_and_si256(_mm256_shuffle_epi8(high_before, _mm256_and_si256(_mm256_srli_epi16(before1, 4), nibble)),
                         _mm256_shuffle_epi8(low_before, _mm256_and_si256(before1, nibble))),
        _mm256_shuffle_epi8(high_byte, _mm256_and_si256(_mm256_srli_epi16(block, 4), nibble)));
    /* A continuation after a continuation is right where the byte two back is 111_____ or the byte
     * three back 1111____: their top bit after a saturating subtraction. */
    const __m256i third = _mm256_subs_epu8(U8_BEFORE(block, before, 2), _mm256_set1_epi8((char)(0xE0 - 0x80)));
    const __m256i fourth = _mm256_subs_epu8(U8_BEFORE(block, before, 3), _mm256_set1_epi8((char)(0xF0 - 0x80)));
    const __m256i goes_on = _mm256_and_si256(_mm256_or_si256(third, fourth), _mm256_set1_epi8((char)0x80));
    return _mm256_xor_si256(goes_on, pair);
}

__attribute__((target("avx2"))) static inline __m256i utf8_block_unfinished(__m256i block)
{
    /* Non-zero where the block's last three bytes start a sequence that needs more bytes than the
     * block has left: a lead byte last (11______), 3- or 4-byte lead second to last, 4-byte lead
     * third to last. */
    const __m256i most = _mm256_setr_epi8(
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, (char)(0xF0 - 1), (char)(0xE0 - 1), (char)(0xC0 - 1));
    return _mm256_subs_epu8(block, most);
}

__attribute__((target("avx2"))) static int utf8_valid_avx2(const uint8_t *s, size_t n)
{
    /* utf8_valid of s[0..n), 32 bytes at a time; the last block (fewer bytes) is read from a copy
     * padded with zeros (ASCII), so nothing past the text is read. */
    __m256i before = _mm256_setzero_si256(), errors = _mm256_setzero_si256(), unfinished = _mm256_setzero_si256();
    size_t at = 0;
    while (at < n) {
        __m256i block;
        if (n - at >= 32) {
            block = _mm256_loadu_si256((const __m256i *)(s + at));
        } else {
            uint8_t last[32] = {0};
            memcpy(last, s + at, n - at);
            block = _mm256_loadu_si256((const __m256i *)last);
        }
        at += 32;
        if (_mm256_movemask_epi8(block) == 0) {
            /* ASCII: well formed, and an error only if the block before left a sequence unfinished */
            errors = _mm256_or_si256(errors, unfinished);
            unfinished = _mm256_setzero_si256();
        } else {
            errors = _mm256_or_si256(errors, utf8_block_errors(block, before));
            unfinished = utf8_block_unfinished(block);
        }
        before = block;
        if ((at & 1023) == 0 && !_mm256_testz_si256(errors, errors))
            return 0;                   /* (an early answer for a long text, checked now and then) */
    }
    errors = _mm256_or_si256(errors, unfinished);
    return _mm256_testz_si256(errors, errors);
}

static int utf8_avx2(void)
{
    /* Whether this machine runs utf8_valid_avx2; asked once. */
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return known;
}
#endif

/* ---- the check ---------------------------------------------------------------------------------- */

static int utf8_valid(const uint8_t *s, size_t n)
{
    /* Whether s[0..n) is UTF-8 as Python's strict decoder takes it: no overlong form, surrogate or
     * code point past 0x10FFFF. ASCII is skipped 64 or 16 bytes at a time (eight without SSE2). This
     * is the specification of `utf8_valid_avx2`, which takes the rest of the text over at its first
     * 64 bytes that are not all ASCII, where the machine has AVX2 (a character at a time, a text in
     * a non-Latin script was read at a third of the speed of English). */
    size_t at = 0;
    while (at < n) {
        uint32_t c;
        int more, i;
#if defined(__SSE2__)
        if (n - at >= 64) {
            const __m128i *v = (const __m128i *)(s + at);
            if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(_mm_loadu_si128(v), _mm_loadu_si128(v + 1)),
                                               _mm_or_si128(_mm_loadu_si128(v + 2), _mm_loadu_si128(v + 3)))) == 0) {
                at += 64;
                continue;
            }
#if defined(UTF8_AVX2)
            if (utf8_avx2())
                return utf8_valid_avx2(s + at, n - at);     /* `at` starts a character: all before it was read */
#endif
        }
        if (n - at >= 16 && _mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(s + at))) == 0) {
            at += 16;
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
        c = s[at];
        if (c < 0x80) {
            at++;
            continue;
        }
        more = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
        if (more < 0 || n - at <= (size_t)more)
            return 0;
        c &= more == 1 ? 0x1F : more == 2 ? 0x0F : 0x07;
        for (i = 1; i <= more; i++) {
            if ((s[at + i] & 0xC0) != 0x80)
                return 0;
            c = (c << 6) | (s[at + i] & 0x3F);
        }
        if ((more == 2 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) || (more == 3 && (c < 0x10000 || c > 0x10FFFF)))
            return 0;
        at += (size_t)more + 1;
    }
    return 1;
}

#endif

/*
 * A record's measures in one pass over its UTF-8 (bpe_ops/stats.py's `batch_stats` and
 * `digit_runs_batch` are the specification): its whitespace words and its runs of ASCII digits by
 * length. Shared by `_native.measure_texts` and the encoder's `encode_measure_texts` (`_pcre2.c`),
 * which measures each text in the pass that encodes it. Include after Python.h.
 *
 *   separators_from(sep, table, len, wide, who)   the tables measure reads, from stats.py's
 *                                                 `_SPACE_CLASSES` (256 bytes) and `_WIDE_SPACES`
 *   measure(sep, m)                               m->words and m->runs of the bytes m->s[0..m->n)
 *   str_utf8_size(kind, data, n)                  the UTF-8 bytes of a str's data, without the copy
 */
#ifndef TOKENBEAM_MEASURE_H
#define TOKENBEAM_MEASURE_H
#include <stdint.h>
#include <string.h>
#include "_common.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define DIGIT_RUN_LENGTHS 5
#define MAX_WIDE 32
#define MAX_LEADS 8

typedef struct {
    const uint8_t *s;
    size_t n;
    int64_t words, runs[DIGIT_RUN_LENGTHS];
} Measured;

static inline size_t str_utf8_size(int kind, const void *data, size_t n)
{
    /* The UTF-8 bytes of a str's data (`kind` 1, 2 or 4, n characters), a lone surrogate counted as
     * the three bytes of its code point (as U+FFFD, which the pipelines write in its place): n and a
     * byte more for each character from U+0080, U+0800 and U+10000 on, in one pass the compiler
     * vectorises. */
    size_t i, more = 0;
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *s = data;
        for (i = 0; i < n; i++)
            more += s[i] >= 0x80;
    } else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *s = data;
        for (i = 0; i < n; i++)
            more += (size_t)(s[i] >= 0x80) + (s[i] >= 0x800);
    } else {
        const Py_UCS4 *s = data;
        for (i = 0; i < n; i++)
            more += (size_t)(s[i] >= 0x80) + (s[i] >= 0x800) + (s[i] >= 0x10000);
    }
    return n + more;
}

enum { KIND_WORD, KIND_SEPARATOR, KIND_DIGIT, KIND_WIDE_LEAD };      /* the order matters: see measure */

typedef struct {
    uint8_t separators[256];            /* [byte]: 1 an ASCII separator, 2 a wide separator's lead */
    uint8_t kinds[256];                 /* [byte]: its KIND_ (from separators, and ASCII digits) */
    uint8_t wide[MAX_WIDE][4];          /* the non-ASCII separators' UTF-8: length, then the bytes */
    uint32_t wide_code[MAX_WIDE];       /* ... their bytes as one little-endian word, */
    uint32_t wide_mask[MAX_WIDE];       /* ... and the bits of that word they fill */
    int nwide;
    uint8_t leads[MAX_LEADS];           /* the bytes beyond ASCII that may start a separator, */
    int nleads;                         /* ... how many (-1: more than MAX_LEADS) */
    int ascii_blocks;                   /* the ASCII separators are Python's (see ascii_block_starts) */
} Separators;

/* Eight bytes at a time: bytes as the lanes of a 64-bit word, each lane's high bit its answer. */
#define LANES_ONES 0x0101010101010101ull
#define LANES_HIGH 0x8080808080808080ull
#define LANES_AT_LEAST(v, c) (((v) + (0x80 - (c)) * LANES_ONES) & LANES_HIGH)   /* lanes below 0x80 */

static inline int ascii_block_starts(uint64_t v, int *in_word, int64_t *words)
{
    /* For eight bytes v (little-endian: the first byte lowest) all ASCII and no digit: add the
     * words that start in them to *words, set *in_word to whether the last is a word byte, and
     * return 1; else 0, nothing changed. The separators are Python's ASCII white space (what
     * `str.isspace` says of 0-127: 9-13, 28-31 and 32; `separators_from` checks the table says so).
     * A word starts at a word byte whose previous byte (the one before the block: *in_word) is not. */
    uint64_t space, word, starts;
    if (v & LANES_HIGH)
        return 0;
    if (LANES_AT_LEAST(v, '0') & ~LANES_AT_LEAST(v, '9' + 1))
        return 0;                       /* a digit: its run is measured byte by byte */
    space = (LANES_AT_LEAST(v, 9) & ~LANES_AT_LEAST(v, 14)) | (LANES_AT_LEAST(v, 28) & ~LANES_AT_LEAST(v, 33));
    word = ~space & LANES_HIGH;
    starts = word & ~(word << 8 | (uint64_t)(*in_word != 0) << 7);
    *words += (int64_t)(((starts >> 7) * LANES_ONES) >> 56);      /* the lanes' 0/1 summed in the top one */
    *in_word = (int)(word >> 63);
    return 1;
}

static inline void count_run(int64_t runs[DIGIT_RUN_LENGTHS], size_t run)
{
    runs[(run < DIGIT_RUN_LENGTHS ? run : DIGIT_RUN_LENGTHS) - 1]++;
}

#if defined(__SSE2__)
#define MEASURE_BLOCK 64

static inline uint64_t lanes_in(__m128i v, char lo, char hi)
{
    /* The bits of the bytes of v within lo..hi (ASCII bytes: a signed compare is an unsigned one). */
    return (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8((char)(lo - 1))),
                                                                _mm_cmplt_epi8(v, _mm_set1_epi8((char)(hi + 1)))));
}

static size_t separator_at(const Separators *sep, const uint8_t *s, size_t n, size_t i);

static inline int block64(const Separators *sep, const uint8_t *s, size_t n, int *in_word, size_t *run,
                          int64_t *words, int64_t runs[DIGIT_RUN_LENGTHS])
{
    /* The 64 bytes at s (n >= 64 bytes from s to the text's end) measured at once, where the
     * separators are Python's ASCII white space (9-13, 28-32, as in ascii_block_starts): add the
     * words that start in them to *words and the digit runs that end in them to runs, carry
     * *in_word (whether the last byte is a word byte) and *run (the length of the digit run reaching
     * the last byte, 0: none) on, and return 1. Bit k of each mask is byte k. A word starts at a word
     * byte (a digit is one) whose previous byte is not; a digit run ends at a byte that is no digit.
     * A byte beyond ASCII is a word byte unless it starts a separator (`leads`: a wide separator's
     * lead byte, rare) that `separator_at` matches there, as `measure` matches it. Returns 0, nothing changed,
     * where a wide separator would run past the block (it is measured byte by byte). */
    uint64_t high = 0, space = 0, digit = 0, word, starts;
    int k;
    for (k = 0; k < 4; k++) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(s + 16 * k));
        high |= (uint64_t)(uint16_t)_mm_movemask_epi8(v) << (16 * k);
        space |= (lanes_in(v, 9, 13) | lanes_in(v, 28, 32)) << (16 * k);
        digit |= lanes_in(v, '0', '9') << (16 * k);
    }
    if (high) {
        if (sep->nleads < 0)
            return 0;
        /* lanes_in read the bytes beyond ASCII as negative: none is in an ASCII range. */
        uint64_t leads = 0;
        for (k = 0; k < 4; k++) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(s + 16 * k));
            uint64_t here = 0;
            int w;
            for (w = 0; w < sep->nleads; w++)
                here |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)sep->leads[w])));
            leads |= here << (16 * k);
        }
        while (leads) {
            const size_t at = (size_t)__builtin_ctzll(leads);
            const size_t len = separator_at(sep, s, n, at);
            if (at + len > 64)
                return 0;
            if (len)
                space |= (len == 64 ? ~0ull : ((1ull << len) - 1)) << at;
            leads &= leads - 1;
        }
    }
    word = ~space;
    starts = word & ~(word << 1 | (uint64_t)(*in_word != 0));
    *words += tb_popcount64(starts);
    *in_word = (int)(word >> 63);
    if (*run || digit) {
        /* Each run of ones in `digit`, the one carried in first (it goes on at bit 0, or ended before it). */
        size_t at = 0;
        while (at < 64) {
            uint64_t rest = digit >> at;
            size_t ones;
            if (*run && !(rest & 1)) {
                count_run(runs, *run);
                *run = 0;
            }
            if (rest == 0)
                break;
            at += (size_t)__builtin_ctzll(rest);          /* the next digit */
            rest = digit >> at;
            ones = ~rest == 0 ? 64 - at : (size_t)__builtin_ctzll(~rest);
            *run += ones;
            at += ones;
            if (at < 64) {                                 /* ended inside the block */
                count_run(runs, *run);
                *run = 0;
            }
        }
    }
    return 1;
}
#endif

static size_t separator_at(const Separators *sep, const uint8_t *s, size_t n, size_t i)
{
    /* The length of the separator at s[i], or 0. The (up to) three bytes at s[i] are one word,
     * zero past the text's end (no separator's byte is zero), compared with each wide separator's
     * bytes under its mask: a curly quote, whose lead byte is that of the spaces U+2000-U+200A,
     * costs a few instructions per separator rather than a call to memcmp. */
    int k;
    uint32_t here;
    if (sep->separators[s[i]] == 1)
        return 1;
    if (sep->separators[s[i]] != 2)
        return 0;
    here = (uint32_t)s[i] | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) | (i + 2 < n ? (uint32_t)s[i + 2] << 16 : 0);
    for (k = 0; k < sep->nwide; k++)
        if ((here & sep->wide_mask[k]) == sep->wide_code[k])
            return sep->wide[k][0];
    return 0;
}

static void measure(const Separators *sep, Measured *m)
{
    /* Words start at a non-separator after a separator (or at the start); digit runs are counted
     * by length, 5 and more together. One table look-up per byte sorts it: a word byte or an ASCII
     * separator (the common case: counted without a branch on which, where the alternation of words
     * and spaces would mispredict), a digit, or a wide separator's lead byte (then matched against
     * the wide separators; no match is a word byte). */
    const uint8_t *s = m->s;
    const uint8_t *kind = sep->kinds;
    size_t i = 0, n = m->n, run = 0, block_end = 0;
    int64_t words = 0;
    int in_word = 0;
    while (i < n) {
        uint8_t b, k;
        size_t len = 1;
#if defined(__SSE2__)
        if (i >= block_end && sep->ascii_blocks && n - i >= MEASURE_BLOCK) {
            /* 64 bytes at a time; byte by byte up to the next 64 after a block it leaves. */
            if (block64(sep, s + i, n - i, &in_word, &run, &words, m->runs)) {
                i += MEASURE_BLOCK;
                continue;
            }
            block_end = i + MEASURE_BLOCK;
        }
#endif
        if (i >= block_end && sep->ascii_blocks && !run && n - i >= 8) {
            /* Most of a text in a Latin script is ASCII letters and spaces: eight bytes at a time,
             * and byte by byte up to the next eight after a block that holds anything else. */
            uint64_t v;
            memcpy(&v, s + i, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            if (ascii_block_starts(v, &in_word, &words)) {
                i += 8;
                continue;
            }
#endif
            block_end = i + 8;
        }
        b = s[i];
        k = kind[b];
        if (k <= KIND_SEPARATOR && !run) {
            words += (in_word | k) ^ 1;     /* a word byte after a separator (or at the start) */
            in_word = k ^ 1;
            i++;
            continue;
        }
        if (k == KIND_DIGIT) {
            run++;
            words += !in_word;
            in_word = 1;
            i++;
            continue;
        }
        if (run) {
            count_run(m->runs, run);
            run = 0;
        }
        if (k == KIND_WIDE_LEAD && (len = separator_at(sep, s, n, i)) == 0) {
            k = KIND_WORD;              /* a lead byte of no separator: part of a word */
            len = 1;
        }
        if (k == KIND_WORD) {
            words += !in_word;
            in_word = 1;
        } else {
            in_word = 0;                /* a wide separator holds no digit */
        }
        i += len;
    }
    if (run)
        count_run(m->runs, run);
    m->words += words;
}

static int separators_from(Separators *sep, const void *table, Py_ssize_t table_len, PyObject *wide,
                           const char *who)
{
    /* *sep from a 256-byte table (1 an ASCII separator, 2 a wide separator's lead) and a tuple of
     * the wide separators' UTF-8; -1 with ValueError for anything else. */
    Py_ssize_t k;
    memset(sep, 0, sizeof(*sep));
    if (table_len != 256 || !PyTuple_Check(wide) || PyTuple_GET_SIZE(wide) > MAX_WIDE) {
        PyErr_Format(PyExc_ValueError, "%s: separators must be 256 bytes and wide a tuple of at most 32 byte "
                                       "strings of 1-3 bytes", who);
        return -1;
    }
    memcpy(sep->separators, table, 256);
    for (k = 0; k < 256; k++)
        sep->kinds[k] = sep->separators[k] == 1 ? KIND_SEPARATOR : sep->separators[k] == 2 ? KIND_WIDE_LEAD
                        : k >= '0' && k <= '9' ? KIND_DIGIT : KIND_WORD;
    for (k = 0; k < PyTuple_GET_SIZE(wide); k++) {
        PyObject *w = PyTuple_GET_ITEM(wide, k);
        if (!PyBytes_Check(w) || PyBytes_GET_SIZE(w) < 1 || PyBytes_GET_SIZE(w) > 3 ||
            memchr(PyBytes_AS_STRING(w), 0, (size_t)PyBytes_GET_SIZE(w)) != NULL) {
            PyErr_Format(PyExc_ValueError, "%s: wide separators are byte strings of 1-3 bytes, none zero", who);
            return -1;
        }
        sep->wide[k][0] = (uint8_t)PyBytes_GET_SIZE(w);
        memcpy(sep->wide[k] + 1, PyBytes_AS_STRING(w), (size_t)PyBytes_GET_SIZE(w));
        for (int b = 0; b < sep->wide[k][0]; b++) {
            sep->wide_code[k] |= (uint32_t)sep->wide[k][1 + b] << (8 * b);
            sep->wide_mask[k] |= 0xFFu << (8 * b);
        }
    }
    sep->nwide = (int)PyTuple_GET_SIZE(wide);
    for (k = 128; k < 256; k++)
        if (sep->separators[k] != 0) {
            if (sep->nleads >= 0 && sep->nleads < MAX_LEADS)
                sep->leads[sep->nleads++] = (uint8_t)k;
            else
                sep->nleads = -1;       /* too many to match 64 bytes at a time: such blocks byte by byte */
        }
    sep->ascii_blocks = 1;
    for (k = 0; k < 128; k++)
        if (sep->separators[k] != ((k >= 9 && k <= 13) || (k >= 28 && k <= 32)))
            sep->ascii_blocks = 0;      /* another set of ASCII separators: byte by byte */
    return 0;
}

#endif

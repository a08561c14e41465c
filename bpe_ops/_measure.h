/*
 * A record's measures in one pass over its UTF-8 (bpe_ops/stats.py's `batch_stats` and
 * `digit_runs_batch` are the specification): its whitespace words and its runs of ASCII digits by
 * length. Shared by `_native.measure_texts` and the encoder's `encode_measure_texts` (`_pcre2.c`),
 * which measures each text in the pass that encodes it. Include after Python.h.
 *
 *   separators_from(sep, table, len, wide, who)   the tables measure reads, from stats.py's
 *                                                 `_SPACE_CLASSES` (256 bytes) and `_WIDE_SPACES`
 *   measure(sep, m)                               m->words and m->runs of the bytes m->s[0..m->n)
 */
#ifndef TOKENBEAM_MEASURE_H
#define TOKENBEAM_MEASURE_H
#include <stdint.h>
#include <string.h>

#define DIGIT_RUN_LENGTHS 5
#define MAX_WIDE 32

typedef struct {
    const uint8_t *s;
    size_t n;
    int64_t words, runs[DIGIT_RUN_LENGTHS];
} Measured;

enum { KIND_WORD, KIND_SEPARATOR, KIND_DIGIT, KIND_WIDE_LEAD };      /* the order matters: see measure */

typedef struct {
    uint8_t separators[256];            /* [byte]: 1 an ASCII separator, 2 a wide separator's lead */
    uint8_t kinds[256];                 /* [byte]: its KIND_ (from separators, and ASCII digits) */
    uint8_t wide[MAX_WIDE][4];          /* the non-ASCII separators' UTF-8: length, then the bytes */
    int nwide;
} Separators;

static size_t separator_at(const Separators *sep, const uint8_t *s, size_t n, size_t i)
{
    /* The length of the separator at s[i], or 0. */
    int k;
    if (sep->separators[s[i]] == 1)
        return 1;
    if (sep->separators[s[i]] != 2)
        return 0;
    for (k = 0; k < sep->nwide; k++) {
        size_t len = sep->wide[k][0];
        if (i + len <= n && memcmp(s + i, sep->wide[k] + 1, len) == 0)
            return len;
    }
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
    size_t i = 0, n = m->n, run = 0;
    int64_t words = 0;
    int in_word = 0;
    while (i < n) {
        uint8_t b = s[i], k = kind[b];
        size_t len = 1;
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
            m->runs[(run < DIGIT_RUN_LENGTHS ? run : DIGIT_RUN_LENGTHS) - 1]++;
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
        m->runs[(run < DIGIT_RUN_LENGTHS ? run : DIGIT_RUN_LENGTHS) - 1]++;
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
        if (!PyBytes_Check(w) || PyBytes_GET_SIZE(w) < 1 || PyBytes_GET_SIZE(w) > 3) {
            PyErr_Format(PyExc_ValueError, "%s: wide separators are byte strings of 1-3 bytes", who);
            return -1;
        }
        sep->wide[k][0] = (uint8_t)PyBytes_GET_SIZE(w);
        memcpy(sep->wide[k] + 1, PyBytes_AS_STRING(w), (size_t)PyBytes_GET_SIZE(w));
    }
    sep->nwide = (int)PyTuple_GET_SIZE(wide);
    return 0;
}

#endif

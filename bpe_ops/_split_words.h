/*
 * A hand-written splitter for DeepSeek's word regex (the last Split of the pre-tokenizer Sequence of
 * DeepSeek V2, V3 and R1), giving PCRE2's matches without running PCRE2 at every one: `_pcre2.c`'s
 * Sequence steps take it where `sequence_split` recognises the pattern. The specification is the
 * pattern run by PCRE2; the tests compare both on the corpora and on random text over every class
 * boundary.
 *
 * The alternatives, the first that matches wins, each greedy:
 *   A  [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+   an ASCII punctuation mark, ASCII letters after it
 *   B  [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+              a word, with one character before it that is
 *                                                        no letter, punctuation, symbol or line break
 *   C  ' '?[\p{P}\p{S}]+[\r\n]*                          punctuation and symbols, line breaks after them
 *   D  \s*[\r\n]+ | \s+(?!\S) | \s+                      whitespace, as in cl100k
 * No alternative starts at a character that is none of these (a digit or a control character not
 * before a word): it is left between matches. A piece that meets a character outside the Basic
 * Multilingual Plane is left to PCRE2 (word_piece says SCAN_PCRE2); everything else is decided by
 * the class of each character, from a table of the BMP that the caller fills from PCRE2's own
 * `\p{L}`, `\p{M}`, `\p{P}`, `\p{S}` and `\s`, checking that the ASCII characters fall where this
 * file assumes (A's marks are exactly the ASCII characters of \p{P} and \p{S}).
 *
 * Worked example: "Hello, wörld!\n\n 42x" -> "Hello", ",", " wörld", "!\n\n", " ", then "4" is no
 * match and "2x" a word with its prefix. Uses `_split_scan.h` (SCAN_PCRE2, scan_ascii_letters).
 */
#ifndef TOKENBEAM_SPLIT_WORDS_H
#define TOKENBEAM_SPLIT_WORDS_H
#include <stddef.h>
#include <stdint.h>

#include "_common.h"
#include "_split_scan.h"

/* A character's class for the word regex: exactly one per code point. */
enum {
    WD_OTHER,        /* none of the below (digits among them): may come before a word */
    WD_LETTER,       /* \p{L} */
    WD_MARK,         /* \p{M}: in a word, and may come before one */
    WD_PUNCT,        /* \p{P} or \p{S} */
    WD_SPACE,        /* U+0020: the optional space of ' ?[\p{P}\p{S}]+' */
    WD_NEWLINE,      /* \r or \n */
    WD_WHITE,        /* the rest of \s */
    WD_ASTRAL,       /* outside the BMP: not in the table */
    WD_END           /* past the end of the text */
};
#define WD_BIT(c) (1u << (c))
#define WD_WORD (WD_BIT(WD_LETTER) | WD_BIT(WD_MARK))
#define WD_PREFIX (WD_BIT(WD_OTHER) | WD_BIT(WD_MARK) | WD_BIT(WD_SPACE) | WD_BIT(WD_WHITE))
#define WD_WHITESPACE (WD_BIT(WD_SPACE) | WD_BIT(WD_NEWLINE) | WD_BIT(WD_WHITE))
/* word_piece's answer where no alternative starts at the character. */
#define WORD_NONE ((size_t)-2)

static inline int word_char(const uint8_t *classes, const uint8_t *s, size_t p, size_t *next)
{
    /* The class of the character at byte p and where the next one starts. */
    if (s[p] >= 0xF0) {
        *next = p + 4;
        return WD_ASTRAL;
    }
    return classes[tb_bmp_code_point(s, p, next)];
}

static inline size_t word_run(const uint8_t *classes, const uint8_t *s, size_t len, size_t p, unsigned mask)
{
    /* The end of the run from p of the classes in `mask`; SCAN_PCRE2 when it meets a character
     * outside the BMP. A run of letters skips its ASCII letters 8 at a time first. */
    size_t next;
    int c;
    if (mask & WD_BIT(WD_LETTER))
        p = scan_ascii_letters(s, len, p);
    while (p < len) {
        if (s[p] < 0x80) {
            if (!(mask & WD_BIT(classes[s[p]])))
                return p;
            p++;
            continue;
        }
        if ((c = word_char(classes, s, p, &next)) == WD_ASTRAL)
            return SCAN_PCRE2;
        if (!(mask & WD_BIT(c)))
            return p;
        p = next;
    }
    return p;
}

static inline size_t word_ascii_letters(const uint8_t *s, size_t len, size_t p)
{
    /* The end of the run of [A-Za-z] from p. */
    p = scan_ascii_letters(s, len, p);
    while (p < len && (uint8_t)((s[p] | 0x20) - 'a') < 26)
        p++;
    return p;
}

static size_t word_white(const uint8_t *classes, const uint8_t *s, size_t len, size_t i)
{
    /* The piece of a run of whitespace starting at i: `\s*[\r\n]+` up to the run's last line break,
     * else `\s+(?!\S)` (all but the last character, which a word may take), else `\s+`. */
    size_t p = i, last = i, after_newline = 0, next;
    int c;
    while (p < len) {
        if ((c = word_char(classes, s, p, &next)) == WD_ASTRAL)
            return SCAN_PCRE2;
        if (!(WD_WHITESPACE & WD_BIT(c)))
            break;
        if (c == WD_NEWLINE)
            after_newline = next;
        last = p;
        p = next;
    }
    if (after_newline)
        return after_newline;
    if (p == len || last == i)
        return p;
    return last;
}

static size_t word_piece(const uint8_t *classes, const uint8_t *s, size_t len, size_t i)
{
    /* The end of the match that starts at byte i < len, WORD_NONE where none starts there, or
     * SCAN_PCRE2. */
    size_t n1, n2 = 0, end;
    int c0 = word_char(classes, s, i, &n1), c1 = WD_END;
    if (c0 == WD_ASTRAL || (n1 < len && (c1 = word_char(classes, s, n1, &n2)) == WD_ASTRAL))
        return SCAN_PCRE2;
    if (c0 == WD_PUNCT && s[i] < 0x80 && n1 < len && (uint8_t)((s[n1] | 0x20) - 'a') < 26)
        return word_ascii_letters(s, len, n1 + 1);                                  /* A */
    if ((WD_PREFIX & WD_BIT(c0)) && (WD_WORD & WD_BIT(c1)))
        return word_run(classes, s, len, n2, WD_WORD);                              /* B */
    if (WD_WORD & WD_BIT(c0))
        return word_run(classes, s, len, n1, WD_WORD);                              /* B, no prefix */
    if (c0 == WD_PUNCT || (c0 == WD_SPACE && c1 == WD_PUNCT)) {                     /* C */
        end = word_run(classes, s, len, c0 == WD_PUNCT ? n1 : n2, WD_BIT(WD_PUNCT));
        while (end != SCAN_PCRE2 && end < len && (s[end] == '\r' || s[end] == '\n'))
            end++;
        return end;
    }
    if (WD_WHITESPACE & WD_BIT(c0))
        return word_white(classes, s, len, i);                                      /* D */
    return WORD_NONE;
}

/* ---- 64 bytes at a time: the whole chain's pieces of plain ASCII text ---------------------------------
 *
 * DeepSeek's chain splits the digits off first (\p{N}{1,3}: runs of three from each run's start),
 * then its runs of CJK, then each piece left by the word regex above. In a window of ASCII letters,
 * digits, whitespace and punctuation (and U+2010..U+2027, punctuation beyond ASCII), where each
 * piece starts follows from the classes of the bytes around it, as for the cl100k family
 * (`_split_scan.h`'s batch_starts, whose masks and rules this shares), with four differences:
 *   - a run of digits ends the word regex's subject: the whitespace before it is not cut before its
 *     last character (\s+(?!\S) meets the subject's end and takes the whole run);
 *   - no contractions: an apostrophe is punctuation as any other (A takes it with letters after it);
 *   - only an ASCII mark that starts a piece takes the letters after it (A); U+2010..U+2027 do not
 *     (B's optional first character is no punctuation, and C stops before letters);
 *   - DEL (0x7F) is no punctuation here (\p{Cc}, which B may take before a word): unsure.
 * A CJK character is beyond ASCII, so unsure, as is every other byte the window cannot read.
 * Worked example: "It's  a dog-eat-dog.\n\n  42x" -> "It", "'s", " ", " a", " dog", "-eat", "-dog",
 * ".\n\n", "  ", "42", "x" (the 64 bytes would go on). tests/bpe_ops/test_sequence_split_compiled.py
 * holds the chain to PCRE2 running each step. */
#ifdef SCAN_BATCH
static inline uint64_t words_batch_starts(const BatchClasses *b, int digits, uint64_t *unsure)
{
    /* Bit i set where byte i starts a piece (byte 0 among them); *unsure, the bytes whose bit may
     * be wrong (see batch_starts). `digits`: the digit step's longest run, 1 or 3. */
    const uint64_t after_punct = b->punct << 1, after_digit = b->digit << 1;
    const uint64_t before_other = (b->letter | b->punct) >> 1;        /* no digit: see above */
    uint64_t taken = spread_up(after_punct & b->newline, b->newline);
    uint64_t white = b->white & ~taken;
    uint64_t lines = spread_down(white & b->newline, white), tail = white & ~lines;
    uint64_t white_start = (white & ~(white << 1)) | (tail & lines << 1) | (tail & before_other);
    uint64_t punct_start = b->punct & ~(after_punct | b->space << 1);
    /* The byte after a punctuation character's first byte: a letter there follows an ASCII mark
     * (U+2010..U+2027 have two more bytes), which A takes with it. */
    uint64_t letter_start = b->letter & ~(b->letter << 1 | tail << 1 | punct_start << 1);
    uint64_t digit_start = digits == 1 ? b->digit : b->digit & ~after_digit;
    uint64_t odd = b->unsure | (uint64_t)1 << 63;
    if (digits == 3) {
        uint64_t fourth = b->digit & after_digit & b->digit << 2 & b->digit << 3;
        digit_start |= fourth;
        odd |= fourth << 1 & b->digit;
    }
    *unsure = odd | spread_down(white & odd >> 1, white);
    return white_start | punct_start | letter_start | digit_start | 1;
}

static inline uint64_t words_batch_del(const uint8_t *s)
{
    /* The DEL bytes (0x7F) of s[0..64). */
    const __m128i del = _mm_set1_epi8(0x7F);
    return batch_mask(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)s), del),
                      _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(s + 16)), del),
                      _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(s + 32)), del),
                      _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(s + 48)), del));
}

static inline size_t words_batch(const uint8_t *s, size_t pos, int digits, Span *out, size_t *n, size_t *retry)
{
    /* scan_batch for DeepSeek's chain: the sure pieces of s[pos..pos + 64) (a piece starts at pos)
     * appended to out[*n..] (room for 63 more); where the next piece starts (see batch_pieces). */
    BatchClasses b = batch_classes_at(s + pos);
    uint64_t del = words_batch_del(s + pos), unsure, starts;
    b.unsure |= del;        /* left in punct too: nothing after the first unsure byte is read */
    starts = words_batch_starts(&b, digits, &unsure);
    return batch_pieces(starts, unsure, b.unsure, pos, out, n, retry);
}
#endif

#endif

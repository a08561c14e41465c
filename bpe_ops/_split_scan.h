/*
 * A hand-written splitter for the split patterns real models use, giving PCRE2's pieces without
 * running PCRE2 on every piece (`_pcre2.c`'s Pattern takes it where its pattern is one of these).
 * The specification is the pattern itself, run by PCRE2: the tests compare both on every corpus and
 * on random text over every class boundary.
 *
 * Three families, read alternative by alternative (first that matches wins, each greedy):
 *   cl100k  (Llama 3, GPT-4, Qwen2):  contractions | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,D}
 *           | ' '?[^\s\p{L}\p{N}]+[\r\n]* | (\s+$) | \s*[\r\n]+ | \s+(?!\S) | \s+
 *           D is 3 (1 for Qwen2, 0 here for unbounded); `\s+$` (tiktoken's spelling) is optional;
 *           `\s*[\r\n]` and `\s` there give the same pieces as `\s*[\r\n]+` and `\s+`.
 *   gpt2:   contractions | ' '?\p{L}+ | ' '?\p{N}+ | ' '?[^\s\p{L}\p{N}]+ | \s+(?!\S) | \s+
 *   o200k   (GPT-4o, gpt-oss):  P?H*T+C? | P?H+T*C? | \p{N}{1,3} | ' '?[^\s\p{L}\p{N}]+[\r\n/]*
 *           | \s*[\r\n]+ | \s+(?!\S) | \s+, where P is [^\r\n\p{L}\p{N}], H the upper-case word
 *           class [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], T the lower-case one [\p{Ll}\p{Lm}\p{Lo}\p{M}], and
 *           C an optional contraction (a word followed by an apostrophe is left to PCRE2).
 * A piece that starts with an apostrophe is a contraction where the family has one there (cl100k
 * in any case, gpt2 in lower case; an o200k piece that starts with one is left to PCRE2), read
 * here where the characters after it are ASCII. A piece that meets a character outside the Basic
 * Multilingual Plane, or a contraction with a character beyond ASCII, is left to PCRE2: scan_piece
 * says SCAN_PCRE2 and the caller runs the pattern from there. Everything else is decided by the
 * class of each character, from a table of the 65,536 BMP code points that the caller fills from
 * PCRE2's own `\p{Lu}`, `\p{Ll}`, ..., `\p{M}`, `\p{N}` and `\s` (so both read Unicode alike).
 *
 * The text is valid UTF-8 (CPython's own encoding of a str), so a lead byte's continuation bytes
 * are there. Worked example, cl100k: "Hi  there\n\n 42!" -> "Hi", " ", " there", "\n\n", " ",
 * "42", "!" (the last space before a word joins the word; the run of spaces before it stays).
 */
#ifndef TOKENBEAM_SPLIT_SCAN_H
#define TOKENBEAM_SPLIT_SCAN_H
#include <stddef.h>
#include <stdint.h>

#include "_common.h"

/* A character's class: exactly one per code point. The letter classes are o200k's (which tells
 * cases apart); the other families read them together as \p{L}. */
enum {
    CH_OTHER,        /* none of the below: [^\s\p{L}\p{N}] */
    CH_UPPER,        /* \p{Lu}, \p{Lt} */
    CH_LOWER,        /* \p{Ll} */
    CH_CASELESS,     /* \p{Lm}, \p{Lo}: a letter in both of o200k's word classes */
    CH_MARK,         /* \p{M}: not a letter, but in both of o200k's word classes */
    CH_NUMBER,       /* \p{N} */
    CH_SPACE,        /* U+0020, the optional space of ' ?...' */
    CH_NEWLINE,      /* \r or \n */
    CH_WHITE,        /* the rest of \s */
    CH_QUOTE,        /* the apostrophe: a contraction may start here (CH_OTHER otherwise) */
    CH_SLASH,        /* '/': CH_OTHER, which o200k's ' ?[^\s\p{L}\p{N}]+[\r\n/]*' also takes after */
    CH_CLASSES
};
#define CH_END 16    /* past the end of the text */
#define CH_ASTRAL 17 /* outside the BMP: not in the table */
#define CH_BIT(c) (1u << (c))
#define LETTER_MASK (CH_BIT(CH_UPPER) | CH_BIT(CH_LOWER) | CH_BIT(CH_CASELESS))
#define WHITE_MASK (CH_BIT(CH_SPACE) | CH_BIT(CH_NEWLINE) | CH_BIT(CH_WHITE))
#define OTHER_MASK (CH_BIT(CH_OTHER) | CH_BIT(CH_QUOTE) | CH_BIT(CH_SLASH) | CH_BIT(CH_MARK))
/* o200k's word classes: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}]. */
#define HEAD_MASK (CH_BIT(CH_UPPER) | CH_BIT(CH_CASELESS) | CH_BIT(CH_MARK))
#define TAIL_MASK (CH_BIT(CH_LOWER) | CH_BIT(CH_CASELESS) | CH_BIT(CH_MARK))
/* [^\r\n\p{L}\p{N}]: the optional first character of a word. */
#define PREFIX_MASK ((WHITE_MASK & ~CH_BIT(CH_NEWLINE)) | OTHER_MASK)

/* A piece of the text: [start, end) in bytes. */
typedef struct {
    size_t start, end;
} Span;

enum { SCAN_OFF, SCAN_CL100K, SCAN_GPT2, SCAN_O200K };
/* scan_piece's answer when PCRE2 must decide the piece. */
#define SCAN_PCRE2 ((size_t)-1)

typedef struct {
    int family;                 /* SCAN_OFF: PCRE2 splits everything */
    int digits;                 /* cl100k, o200k: the longest run of \p{N} in one piece; 0: unbounded */
    int space_end;              /* cl100k: `\s+$` comes before the newline alternative */
    int batch;                  /* cl100k: runs of ASCII are split 64 bytes at a time (scan_batch) */
    const uint8_t *classes;     /* [code point], 65,536 entries */
} Scanner;

static inline int scan_char(const uint8_t *classes, const uint8_t *s, size_t p, size_t *next)
{
    /* The class of the character at byte p and where the next one starts. */
    if (s[p] >= 0xF0) {
        *next = p + 4;
        return CH_ASTRAL;
    }
    return classes[tb_bmp_code_point(s, p, next)];
}

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SCAN_SWAR 1
#define SWAR_ONES 0x0101010101010101ULL
#define SWAR_HIGH 0x8080808080808080ULL

static inline uint64_t swar_load(const uint8_t *s, size_t len, size_t p)
{
    /* The 8 bytes from p <= len, zeros past the end of the text (no piece's class runs over a zero
     * byte: U+0000 is CH_OTHER, which no run of letters or spaces takes). */
    uint64_t w = 0;
    size_t k;
    if (p + 8 <= len) {
        memcpy(&w, s + p, 8);           /* one load: a memcpy of a length not known is a call */
        return w;
    }
    for (k = 0; p + k < len; k++)
        w |= (uint64_t)s[p + k] << (8 * k);
    return w;
}

static inline uint64_t swar_not_letter(uint64_t w)
{
    /* The top bit of each byte of w that is no ASCII letter. A byte b below 0x80 is a letter when
     * b | 0x20 is in 'a'..'z'; adding 0x80 - 'a' and 0x80 - ('z' + 1) to each byte (no carry: every
     * byte is below 0x80 first) sets the top bit of those at least 'a' and of those past 'z'. */
    uint64_t folded = (w & ~SWAR_HIGH) | 0x20 * SWAR_ONES;
    return (~(folded + (0x80 - 'a') * SWAR_ONES) | (folded + (0x80 - 'z' - 1) * SWAR_ONES) | w) & SWAR_HIGH;
}

static inline size_t swar_end(size_t p, uint64_t marks, size_t len)
{
    /* The byte of the word at p that holds marks' lowest set bit (marks is not 0), not past the
     * text. */
    size_t end = p + (size_t)__builtin_ctzll(marks) / 8;
    return end < len ? end : len;
}
#endif

static inline size_t scan_ascii_letters(const uint8_t *s, size_t len, size_t p)
{
    /* The first byte from p <= len that is no ASCII letter (len at the end), 8 bytes at a time.
     * Worked example: "Hello, w" -> p + 5. */
#ifdef SCAN_SWAR
    for (;; p += 8) {
        uint64_t marks = swar_not_letter(swar_load(s, len, p));
        if (marks)
            return swar_end(p, marks, len);
    }
#else
    while (p < len && (unsigned)((s[p] | 0x20) - 'a') < 26)
        p++;
    return p;
#endif
}

static inline size_t scan_spaces(const uint8_t *s, size_t len, size_t p)
{
    /* The first byte from p <= len that is no U+0020 (len at the end), 8 bytes at a time: a byte
     * of w ^ 0x2020... is 0 exactly where w has a space. Indentation is long runs of them. */
#ifdef SCAN_SWAR
    for (;; p += 8) {
        uint64_t others = swar_load(s, len, p) ^ 0x20 * SWAR_ONES;
        if (others)
            return swar_end(p, others, len);
    }
#else
    while (p < len && s[p] == ' ')
        p++;
    return p;
#endif
}

static inline size_t scan_run(const uint8_t *classes, const uint8_t *s, size_t len, size_t p, unsigned mask,
                              size_t most)
{
    /* The end of the run of at most `most` characters from p whose classes are in `mask`; SCAN_PCRE2
     * when the run meets a character outside the BMP (whose class is not known here). A run of
     * letters skips its ASCII letters 8 at a time first (the table gives every one of them
     * CH_UPPER or CH_LOWER), then goes on character by character. */
    size_t next;
    if (most == SIZE_MAX && (mask & (CH_BIT(CH_UPPER) | CH_BIT(CH_LOWER))) == (CH_BIT(CH_UPPER) | CH_BIT(CH_LOWER)))
        p = scan_ascii_letters(s, len, p);
    while (p < len && most > 0) {
        int c;
        if (s[p] < 0x80) {              /* the common case, without the decoding */
            if (!(mask & CH_BIT(classes[s[p]])))
                return p;
            p++;
            most--;
            continue;
        }
        c = scan_char(classes, s, p, &next);
        if (c == CH_ASTRAL)
            return SCAN_PCRE2;
        if (!(mask & CH_BIT(c)))
            return p;
        p = next;
        most--;
    }
    return p;
}

static inline size_t scan_digits(const Scanner *sc, const uint8_t *s, size_t len, size_t after_first)
{
    /* `\p{N}{1,digits}` (`\p{N}+` for 0), its first digit ending at after_first. */
    return scan_run(sc->classes, s, len, after_first, CH_BIT(CH_NUMBER),
                    sc->digits ? (size_t)sc->digits - 1 : SIZE_MAX);
}

static inline size_t scan_other(const Scanner *sc, const uint8_t *s, size_t len, size_t from, unsigned after)
{
    /* `[^\s\p{L}\p{N}]+` from `from` (past the optional space of ' ?'), then the run of the
     * classes in `after`: [\r\n]* for cl100k, [\r\n/]* for o200k. */
    size_t end = scan_run(sc->classes, s, len, from, OTHER_MASK, SIZE_MAX);
    return end == SCAN_PCRE2 ? end : scan_run(sc->classes, s, len, end, after, SIZE_MAX);
}

static size_t scan_white(const Scanner *sc, const uint8_t *s, size_t len, size_t i)
{
    /* The piece of a run of whitespace starting at i, by the families' whitespace alternatives. */
    size_t p = i, last = i, after_newline = 0, next;
    int c;
    while (p < len) {
        if (s[p] == ' ') {              /* a run of spaces: indentation, mostly */
            p = scan_spaces(s, len, p + 1);
            last = p - 1;
            continue;
        }
        if (s[p] < 0x80) {              /* nearly every other run of whitespace: newlines */
            c = sc->classes[s[p]];
            next = p + 1;
        } else if ((c = scan_char(sc->classes, s, p, &next)) == CH_ASTRAL) {
            return SCAN_PCRE2;
        }
        if (!(WHITE_MASK & CH_BIT(c)))
            break;
        if (c == CH_NEWLINE)
            after_newline = next;
        last = p;
        p = next;
    }
    /* p: the run's end; last: where its last character starts. */
    if (sc->family != SCAN_GPT2) {
        if (sc->space_end && p == len)
            return len;                 /* \s+$ */
        if (after_newline)
            return after_newline;       /* \s*[\r\n]+: up to the run's last newline */
    }
    if (p == len || last == i)
        return p;                       /* \s+(?!\S) at the end; \s+ for a single character */
    return last;                        /* \s+(?!\S): all but the last, which joins what follows */
}

static size_t o200k_word(const uint8_t *cl, const uint8_t *s, size_t len, size_t at, int upper_first)
{
    /* The end of o200k's word from `at` (its optional first character already passed), or 0 when
     * it has none there: with `upper_first` H+T* (the second alternative), else H*T+, both greedy
     * and giving back as a regex engine would. SCAN_PCRE2 for a character outside the BMP. */
    size_t p = at, next, last_tail = 0;
    int c = CH_END;
    /* H*: the run of the upper-case class, noting the last character also in the lower-case one. */
    while (p < len) {
        c = scan_char(cl, s, p, &next);
        if (c == CH_ASTRAL)
            return SCAN_PCRE2;
        if (!(HEAD_MASK & CH_BIT(c)))
            break;
        if (TAIL_MASK & CH_BIT(c))
            last_tail = next;
        p = next;
    }
    if (p == len)
        c = CH_END;
    if (upper_first && p == at)
        return 0;                       /* H+ needs one */
    if (c == CH_LOWER)                  /* T+ (or T*) goes on from the end of H* */
        return scan_run(cl, s, len, p, TAIL_MASK, SIZE_MAX);
    if (upper_first)
        return p > at ? p : 0;          /* H+ with an empty T* */
    return last_tail;                   /* H* gives back to its last T character, T+ is that one */
}

static size_t scan_o200k(const Scanner *sc, const uint8_t *s, size_t len, size_t i, int c0, size_t n1, int c1,
                         size_t n2)
{
    /* scan_piece for o200k, the first two characters' classes given. */
    const uint8_t *cl = sc->classes;
    size_t end = 0, next;
    int alt;
    for (alt = 0; alt < 2 && end == 0; alt++) {
        /* Each word alternative with its optional first character, then without. */
        if (PREFIX_MASK & CH_BIT(c0))
            end = o200k_word(cl, s, len, n1, alt);
        if (end == 0)
            end = o200k_word(cl, s, len, i, alt);
        if (end == SCAN_PCRE2)
            return end;
    }
    if (end) {
        /* An apostrophe after the word may make it longer by a contraction: PCRE2 decides. */
        if (end < len && scan_char(cl, s, end, &next) == CH_QUOTE)
            return SCAN_PCRE2;
        return end;
    }
    if (c0 == CH_NUMBER)
        return scan_digits(sc, s, len, n1);
    if ((OTHER_MASK & CH_BIT(c0)) || (c0 == CH_SPACE && (OTHER_MASK & CH_BIT(c1))))
        return scan_other(sc, s, len, c0 != CH_SPACE ? n1 : n2, CH_BIT(CH_NEWLINE) | CH_BIT(CH_SLASH));
    return scan_white(sc, s, len, i);
}

static size_t scan_contraction(const uint8_t *s, size_t len, size_t i)
{
    /* The end of the contraction `'(?:[sdmt]|ll|ve|re)` at byte i (an apostrophe), in any case;
     * 0 where there is none. SCAN_PCRE2 where a character it reads is not ASCII: in caseless
     * matching U+017F (long s) is an 's', and PCRE2 knows such foldings. The cl100k family matches
     * it in any case, gpt2 in lower case only: its caller checks the case. */
    uint8_t a, b;
    if (i + 1 >= len)
        return 0;
    if ((a = s[i + 1]) >= 0x80)
        return SCAN_PCRE2;
    a |= 0x20;                  /* upper-case ASCII letters to lower case; no other byte becomes one */
    if (a == 's' || a == 'd' || a == 'm' || a == 't')
        return i + 2;
    if ((a != 'l' && a != 'v' && a != 'r') || i + 2 >= len)
        return 0;
    if ((b = s[i + 2]) >= 0x80)
        return SCAN_PCRE2;
    b |= 0x20;
    return (a == 'l' && b == 'l') || (a != 'l' && b == 'e') ? i + 3 : 0;
}

static int scan_lower_ascii(const uint8_t *s, size_t from, size_t end)
{
    /* Whether s[from..end) has no upper-case ASCII letter. */
    for (; from < end; from++)
        if (s[from] >= 'A' && s[from] <= 'Z')
            return 0;
    return 1;
}

static size_t scan_piece(const Scanner *sc, const uint8_t *s, size_t len, size_t i)
{
    /* The end of the piece that starts at byte i < len, or SCAN_PCRE2. */
    const uint8_t *cl = sc->classes;
    size_t n1, n2 = 0;
    int c0 = scan_char(cl, s, i, &n1), c1 = CH_END;
    if (c0 == CH_ASTRAL || (c0 == CH_QUOTE && sc->family == SCAN_O200K))
        return SCAN_PCRE2;
    if (c0 == CH_QUOTE) {
        /* The contraction is the first alternative; without one the apostrophe is [^\s\p{L}\p{N}]. */
        size_t end = scan_contraction(s, len, i);
        if (end == SCAN_PCRE2 || (end != 0 && (sc->family == SCAN_CL100K || scan_lower_ascii(s, i + 1, end))))
            return end;
    }
    if (n1 < len && (c1 = scan_char(cl, s, n1, &n2)) == CH_ASTRAL)
        return SCAN_PCRE2;
    if (sc->family == SCAN_CL100K) {
        if (LETTER_MASK & CH_BIT(c0))
            return scan_run(cl, s, len, n1, LETTER_MASK, SIZE_MAX);
        if ((LETTER_MASK & CH_BIT(c1)) && (PREFIX_MASK & CH_BIT(c0)))
            return scan_run(cl, s, len, n2, LETTER_MASK, SIZE_MAX);
        if (c0 == CH_NUMBER)
            return scan_digits(sc, s, len, n1);
        if ((OTHER_MASK & CH_BIT(c0)) || (c0 == CH_SPACE && (OTHER_MASK & CH_BIT(c1))))
            return scan_other(sc, s, len, c0 != CH_SPACE ? n1 : n2, CH_BIT(CH_NEWLINE));
        return scan_white(sc, s, len, i);
    }
    if (sc->family == SCAN_O200K)
        return scan_o200k(sc, s, len, i, c0, n1, c1, n2);
    /* gpt2 */
    if (c0 == CH_SPACE && c1 != CH_END && !(WHITE_MASK & CH_BIT(c1))) {
        c0 = c1;                        /* ' ?': the space joins what follows */
        n1 = n2;
    }
    if (LETTER_MASK & CH_BIT(c0))
        return scan_run(cl, s, len, n1, LETTER_MASK, SIZE_MAX);
    if (c0 == CH_NUMBER)
        return scan_run(cl, s, len, n1, CH_BIT(CH_NUMBER), SIZE_MAX);
    if (OTHER_MASK & CH_BIT(c0))
        return scan_run(cl, s, len, n1, OTHER_MASK, SIZE_MAX);
    return scan_white(sc, s, len, i);
}

static inline size_t scan_letters(const uint8_t *cl, const uint8_t *s, size_t len, size_t p)
{
    /* `\p{L}+` on from p: its ASCII letters 8 at a time, then, where a byte beyond ASCII stops
     * them, character by character. */
    p = scan_ascii_letters(s, len, p);
    return p < len && s[p] >= 0x80 ? scan_run(cl, s, len, p, LETTER_MASK, SIZE_MAX) : p;
}

static inline size_t scan_cl100k_ascii(const Scanner *sc, const uint8_t *s, size_t len, size_t i)
{
    /* scan_piece for the cl100k family where the piece's first two bytes are ASCII (but for an
     * apostrophe, whose contractions scan_piece reads): the class of a byte below 0x80 is the
     * table's entry for it, without decoding, and a run of ASCII bytes of one kind is read on
     * until a byte that ends it, a byte beyond ASCII handing the rest of the run to the general
     * scanners. Decides as scan_piece does, alternative by alternative. */
    const uint8_t *cl = sc->classes;
    uint8_t b0 = s[i], b1;
    int c0, c1;
    size_t p;
    /* The commonest pieces first: ' ' and a letter, a letter. */
    if (b0 == ' ') {
        if (i + 1 < len && (unsigned)((s[i + 1] | 0x20) - 'a') < 26)
            return scan_letters(cl, s, len, i + 2);
    } else if ((unsigned)((b0 | 0x20) - 'a') < 26) {
        return scan_letters(cl, s, len, i + 1);
    }
    if (b0 >= 0x80 || i + 1 >= len || (b1 = s[i + 1]) >= 0x80 || (c0 = cl[b0]) == CH_QUOTE)
        return scan_piece(sc, s, len, i);
    /* [^\r\n\p{L}\p{N}]?\p{L}+: every ASCII class but these two is in PREFIX_MASK. */
    if ((unsigned)((b1 | 0x20) - 'a') < 26 && c0 != CH_NEWLINE && c0 != CH_NUMBER)
        return scan_letters(cl, s, len, i + 2);
    c1 = cl[b1];
    switch (c0) {
    case CH_NUMBER:
        return scan_digits(sc, s, len, i + 1);
    case CH_SPACE:
        if (c1 == CH_SPACE) {
            /* \s+(?!\S): a run of spaces before a character that is no whitespace leaves it its
             * last one; any other end (whitespace beyond the spaces, the text's end) scan_white's. */
            p = scan_spaces(s, len, i + 2);
            if (p < len && s[p] < 0x80 && !(WHITE_MASK & CH_BIT(cl[s[p]])))
                return p - 1;
            return scan_white(sc, s, len, i);
        }
        if (!(OTHER_MASK & CH_BIT(c1)))
            return scan_white(sc, s, len, i);
        p = i + 2;                      /* ' ?[^\s\p{L}\p{N}]+[\r\n]*', its space taken */
        break;
    case CH_OTHER:
    case CH_SLASH:
        p = i + 1;
        break;
    default:                            /* CH_NEWLINE, CH_WHITE */
        return scan_white(sc, s, len, i);
    }
    /* [^\s\p{L}\p{N}]+[\r\n]* on from p: ASCII punctuation is CH_OTHER, CH_QUOTE or CH_SLASH. */
    while (p < len && s[p] < 0x80 && (OTHER_MASK & CH_BIT(cl[s[p]])))
        p++;
    if (p < len && s[p] >= 0x80)
        return scan_other(sc, s, len, p, CH_BIT(CH_NEWLINE));
    while (p < len && (s[p] == '\n' || s[p] == '\r'))
        p++;
    return p;
}

/* ---- 64 bytes at a time: the cl100k family's pieces of plain ASCII text ------------------------------
 *
 * Where the 64 bytes from a piece's start are ASCII letters, digits, whitespace and punctuation,
 * where each piece starts follows from the classes of the bytes around it, so it is found for all 64
 * at once with bit masks rather than by a branch per piece. Read from the pattern, alternative by
 * alternative, a byte starts a piece when it is:
 *   a letter:      after no letter, and after no space, tab or punctuation that starts a piece
 *                  ([^\r\n\p{L}\p{N}]?\p{L}+ takes one of them before the letters);
 *   punctuation:   after no punctuation and no space (' ?[^\s\p{L}\p{N}]+'); the newlines right after
 *                  a run of punctuation are its ([\r\n]*);
 *   a digit:       after no digit (\p{N}{1,3} takes nothing before it), or the first of every
 *                  `digits` of a run (with three: the 4th, and a 5th is left to the next window);
 *   whitespace:    the first of a run (what comes before it ends there); the first after the run's
 *                  last newline (\s*[\r\n]+ ends there); the last of a run before a letter, digit or
 *                  punctuation (\s+(?!\S) leaves it to what follows);
 *   any byte:      after a contraction ('s, 'd, 'm, 't, 'll, 've, 're in any case) whose apostrophe
 *                  starts a piece ('(?i:[sdmt]|ll|ve|re) is the first alternative).
 * U+2010..U+2027 (dashes, quotation marks, the ellipsis) are punctuation as ASCII's is. Everything
 * else is left to the byte-by-byte scanner (scan_piece): any other byte beyond ASCII, a control byte
 * that is no whitespace, and a run of whitespace that meets one of those or the window's end (its
 * last newline may be further on); the batch gives the pieces before the first such byte ("unsure")
 * and the scanner takes the next.
 * Worked example: "It was  a dog-eat-dog's.\n\n  (42)" -> "It", " was", " ", " a", " dog", "-eat",
 * "-dog", "'s", ".\n\n", " ", " (", "42", ")" (the 64 bytes would go on; bit i is byte i).
 * tests/bpe_ops/test_split_scan.py holds both to PCRE2 on real and generated text. */
#if defined(__SSE2__) && defined(SCAN_SWAR)
#include <emmintrin.h>
#define SCAN_BATCH 64

static inline uint64_t batch_mask(__m128i a, __m128i b, __m128i c, __m128i d)
{
    return (uint64_t)(uint16_t)_mm_movemask_epi8(a) | (uint64_t)(uint16_t)_mm_movemask_epi8(b) << 16 |
           (uint64_t)(uint16_t)_mm_movemask_epi8(c) << 32 | (uint64_t)(uint16_t)_mm_movemask_epi8(d) << 48;
}

static inline __m128i batch_in(__m128i v, char first, char last)
{
    /* The bytes of v in first..last (ASCII): one add moves the range to the bottom of the signed
     * bytes (first to -128), and one signed compare takes it, where two compares and an and did. */
    return _mm_cmplt_epi8(_mm_add_epi8(v, _mm_set1_epi8((char)(0x80 - first))),
                          _mm_set1_epi8((char)(0x80 + (last - first) + 1)));
}

typedef struct {
    uint64_t letter, digit, space, white, newline, quote, punct, unsure;  /* bit i: byte i of the 64 */
    uint64_t wide_punct;        /* the first byte of each character of U+2010..U+2027 */
    /* Where a contraction may follow: bit i set where bytes i + 1 (`short_contraction`: s, d, m or t)
     * or i + 1 and i + 2 (`long_contraction`: ll, ve or re) spell one, in either case; only looked
     * for in a window with an apostrophe (0 elsewhere). */
    uint64_t short_contraction, long_contraction;
} BatchClasses;

static inline void batch_contractions(BatchClasses *b, uint64_t s, uint64_t d, uint64_t m, uint64_t t,
                                      uint64_t l, uint64_t v, uint64_t r, uint64_t e)
{
    /* The contraction masks from the masks of the letters (either case) they are spelled with. */
    b->short_contraction = (s | d | m | t) >> 1;
    b->long_contraction = (l >> 1 & l >> 2) | ((v | r) >> 1 & e >> 2);
}

static inline BatchClasses batch_classes(const uint8_t *s)
{
    /* The classes of s[0..64), which are all readable: `white` is every whitespace byte (space, tab,
     * \n, \v, \f, \r), `space` the space, `newline` \r and \n; `punct` the rest of ASCII's printable
     * bytes and the three bytes of each of U+2010..U+2027 (dashes, quotation marks, the ellipsis:
     * most of what English text holds beyond ASCII), whose first bytes are `wide_punct`; `unsure`
     * every other control byte and byte beyond ASCII. Signed byte compares: a byte beyond ASCII is
     * negative, so below 0x20. */
    __m128i bytes[4], folded[4], letter[4], digit[4], space[4], white[4], newline[4], quote[4], low[4];
    uint64_t lead = 0, wide;
    BatchClasses b;
    int k;
    for (k = 0; k < 4; k++)
        bytes[k] = _mm_loadu_si128((const __m128i *)(s + 16 * k));
    for (k = 0; k < 4; k++) {
        __m128i v = bytes[k];
        folded[k] = _mm_or_si128(v, _mm_set1_epi8(0x20));
        letter[k] = batch_in(folded[k], 'a', 'z');
        digit[k] = batch_in(v, '0', '9');
        space[k] = _mm_cmpeq_epi8(v, _mm_set1_epi8(' '));
        white[k] = _mm_or_si128(space[k], batch_in(v, '\t', '\r'));
        newline[k] = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\r')));
        quote[k] = _mm_cmpeq_epi8(v, _mm_set1_epi8('\''));
        low[k] = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));
    }
    b.letter = batch_mask(letter[0], letter[1], letter[2], letter[3]);
    b.digit = batch_mask(digit[0], digit[1], digit[2], digit[3]);
    b.space = batch_mask(space[0], space[1], space[2], space[3]);
    b.white = batch_mask(white[0], white[1], white[2], white[3]);
    b.newline = batch_mask(newline[0], newline[1], newline[2], newline[3]);
    b.quote = batch_mask(quote[0], quote[1], quote[2], quote[3]);
    b.short_contraction = b.long_contraction = 0;
    if (b.quote) {
#define TB_FOLDED_IS(c)                                                                              \
    batch_mask(_mm_cmpeq_epi8(folded[0], _mm_set1_epi8(c)), _mm_cmpeq_epi8(folded[1], _mm_set1_epi8(c)), \
               _mm_cmpeq_epi8(folded[2], _mm_set1_epi8(c)), _mm_cmpeq_epi8(folded[3], _mm_set1_epi8(c)))
        batch_contractions(&b, TB_FOLDED_IS('s'), TB_FOLDED_IS('d'), TB_FOLDED_IS('m'), TB_FOLDED_IS('t'),
                           TB_FOLDED_IS('l'), TB_FOLDED_IS('v'), TB_FOLDED_IS('r'), TB_FOLDED_IS('e'));
#undef TB_FOLDED_IS
    }
    /* E2 80 90..A7: U+2010..U+2027, its three bytes in the window; looked for only in a window with
     * a byte beyond ASCII (its sign bit set), which most are not. */
    if (batch_mask(bytes[0], bytes[1], bytes[2], bytes[3])) {
        __m128i e2[4], x80[4], third[4];
        for (k = 0; k < 4; k++) {
            __m128i v = bytes[k];
            e2[k] = _mm_cmpeq_epi8(v, _mm_set1_epi8((char)0xE2));
            x80[k] = _mm_cmpeq_epi8(v, _mm_set1_epi8((char)0x80));
            third[k] = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8((char)0x8F)),
                                     _mm_cmplt_epi8(v, _mm_set1_epi8((char)0xA8)));
        }
        lead = batch_mask(e2[0], e2[1], e2[2], e2[3]) & batch_mask(x80[0], x80[1], x80[2], x80[3]) >> 1 &
               batch_mask(third[0], third[1], third[2], third[3]) >> 2;
    }
    wide = lead | lead << 1 | lead << 2;
    b.wide_punct = lead;
    b.unsure = batch_mask(low[0], low[1], low[2], low[3]) & ~b.white & ~wide;
    b.punct = ~(b.letter | b.digit | b.white | b.unsure);           /* the apostrophe among them */
    return b;
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define BATCH_WIDE 1               /* AVX2 and AVX-512BW readings, chosen at run time */

/* AddressSanitizer's stack for returns after use (detect_stack_use_after_return) does not keep the
 * 64-byte alignment this function's frame asks for (it crashed there in .ci/sanitize): under ASan it
 * is left uninstrumented, and its caller reads the window's first and last bytes where ASan sees
 * them (batch_window_readable). */
#if defined(__SANITIZE_ADDRESS__)
#define BATCH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BATCH_ASAN 1
#endif
#endif
#ifdef BATCH_ASAN
#define BATCH_UNINSTRUMENTED __attribute__((no_sanitize_address))
#else
#define BATCH_UNINSTRUMENTED
#endif

static inline void batch_window_readable(const uint8_t *s)
{
    /* Under ASan, an instrumented read of the first and the last byte of the 64 that
     * batch_classes_avx2 and batch_classes_avx512 load (a window past its text's end is reported
     * here). */
#ifdef BATCH_ASAN
    volatile uint8_t ends = (uint8_t)(s[0] ^ s[63]);
    (void)ends;
#else
    (void)s;
#endif
}

__attribute__((target("avx512f,avx512bw"))) BATCH_UNINSTRUMENTED static BatchClasses batch_classes_avx512(const uint8_t *s)
{
    /* batch_classes with AVX-512BW: each class one compare of the 64 bytes at once into a mask
     * register, which is the class's bit mask (no combining of four 16-byte masks). Unsigned byte
     * compares take each ASCII range after one subtraction. Not inlined: the caller runs on any x86-64. */
    const __m512i v = _mm512_loadu_si512((const void *)s);
    const __m512i folded = _mm512_or_si512(v, _mm512_set1_epi8(0x20));
    uint64_t lead = 0, wide, hi = _mm512_movepi8_mask(v);
    BatchClasses b;
    b.letter = _mm512_cmplt_epu8_mask(_mm512_sub_epi8(folded, _mm512_set1_epi8('a')), _mm512_set1_epi8(26));
    b.digit = _mm512_cmplt_epu8_mask(_mm512_sub_epi8(v, _mm512_set1_epi8('0')), _mm512_set1_epi8(10));
    b.space = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(' '));
    b.white = b.space | _mm512_cmplt_epu8_mask(_mm512_sub_epi8(v, _mm512_set1_epi8('\t')), _mm512_set1_epi8(5));
    b.newline = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\n')) | _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\r'));
    b.quote = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\''));
    b.short_contraction = b.long_contraction = 0;
    if (b.quote) {
#define TB_FOLDED_IS(c) _mm512_cmpeq_epi8_mask(folded, _mm512_set1_epi8(c))
        batch_contractions(&b, TB_FOLDED_IS('s'), TB_FOLDED_IS('d'), TB_FOLDED_IS('m'), TB_FOLDED_IS('t'),
                           TB_FOLDED_IS('l'), TB_FOLDED_IS('v'), TB_FOLDED_IS('r'), TB_FOLDED_IS('e'));
#undef TB_FOLDED_IS
    }
    if (hi)
        lead = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8((char)0xE2)) &
               _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8((char)0x80)) >> 1 &
               _mm512_cmplt_epu8_mask(_mm512_sub_epi8(v, _mm512_set1_epi8((char)0x90)), _mm512_set1_epi8(0x18)) >> 2;
    wide = lead | lead << 1 | lead << 2;
    b.wide_punct = lead;
    b.unsure = (hi | _mm512_cmplt_epu8_mask(v, _mm512_set1_epi8(0x20))) & ~b.white & ~wide;
    b.punct = ~(b.letter | b.digit | b.white | b.unsure);
    return b;
}

/* batch_in on 32 bytes: the bytes of v in first..last (ASCII), one add and one signed compare (a
 * macro: a function taking a 256-bit vector would need the AVX2 target itself). */
#define BATCH_IN_AVX2(v, first, last)                                            \
    _mm256_cmpgt_epi8(_mm256_set1_epi8((char)(0x80 + ((last) - (first)) + 1)), \
                      _mm256_add_epi8((v), _mm256_set1_epi8((char)(0x80 - (first)))))

/* Two 32-byte halves' masks as one 64-bit mask. */
#define BATCH_MASK_AVX2(lo, hi) \
    ((uint64_t)(uint32_t)_mm256_movemask_epi8(lo) | (uint64_t)(uint32_t)_mm256_movemask_epi8(hi) << 32)

__attribute__((target("avx2"))) BATCH_UNINSTRUMENTED static BatchClasses batch_classes_avx2(const uint8_t *s)
{
    /* batch_classes with AVX2, for processors without AVX-512BW (AMD's before Zen 4, most of
     * Intel's desktop and laptop ones): each class of the 64 bytes in two 32-byte compares and two
     * movemasks, where SSE2 takes four of each. Not inlined: the caller runs on any x86-64. */
    __m256i v[2], folded[2], letter[2], digit[2], space[2], white[2], newline[2], quote[2], low[2];
    uint64_t lead = 0, wide, hi;
    BatchClasses b;
    int k;
    for (k = 0; k < 2; k++)
        v[k] = _mm256_loadu_si256((const __m256i *)(s + 32 * k));
    for (k = 0; k < 2; k++) {
        folded[k] = _mm256_or_si256(v[k], _mm256_set1_epi8(0x20));
        letter[k] = BATCH_IN_AVX2(folded[k], 'a', 'z');
        digit[k] = BATCH_IN_AVX2(v[k], '0', '9');
        space[k] = _mm256_cmpeq_epi8(v[k], _mm256_set1_epi8(' '));
        white[k] = _mm256_or_si256(space[k], BATCH_IN_AVX2(v[k], '\t', '\r'));
        newline[k] = _mm256_or_si256(_mm256_cmpeq_epi8(v[k], _mm256_set1_epi8('\n')),
                                     _mm256_cmpeq_epi8(v[k], _mm256_set1_epi8('\r')));
        quote[k] = _mm256_cmpeq_epi8(v[k], _mm256_set1_epi8('\''));
        low[k] = _mm256_cmpgt_epi8(_mm256_set1_epi8(0x20), v[k]);    /* below 0x20, or beyond ASCII */
    }
    b.letter = BATCH_MASK_AVX2(letter[0], letter[1]);
    b.digit = BATCH_MASK_AVX2(digit[0], digit[1]);
    b.space = BATCH_MASK_AVX2(space[0], space[1]);
    b.white = BATCH_MASK_AVX2(white[0], white[1]);
    b.newline = BATCH_MASK_AVX2(newline[0], newline[1]);
    b.quote = BATCH_MASK_AVX2(quote[0], quote[1]);
    hi = BATCH_MASK_AVX2(v[0], v[1]);
    b.short_contraction = b.long_contraction = 0;
    if (b.quote) {
#define TB_FOLDED_IS(c) BATCH_MASK_AVX2(_mm256_cmpeq_epi8(folded[0], _mm256_set1_epi8(c)), \
                                        _mm256_cmpeq_epi8(folded[1], _mm256_set1_epi8(c)))
        batch_contractions(&b, TB_FOLDED_IS('s'), TB_FOLDED_IS('d'), TB_FOLDED_IS('m'), TB_FOLDED_IS('t'),
                           TB_FOLDED_IS('l'), TB_FOLDED_IS('v'), TB_FOLDED_IS('r'), TB_FOLDED_IS('e'));
#undef TB_FOLDED_IS
    }
    if (hi) {       /* E2 80 90..A7: U+2010..U+2027, as in batch_classes */
#define TB_IS(c) BATCH_MASK_AVX2(_mm256_cmpeq_epi8(v[0], _mm256_set1_epi8((char)(c))), \
                                 _mm256_cmpeq_epi8(v[1], _mm256_set1_epi8((char)(c))))
        __m256i third[2];
        for (k = 0; k < 2; k++)
            third[k] = _mm256_and_si256(_mm256_cmpgt_epi8(v[k], _mm256_set1_epi8((char)0x8F)),
                                        _mm256_cmpgt_epi8(_mm256_set1_epi8((char)0xA8), v[k]));
        lead = TB_IS(0xE2) & TB_IS(0x80) >> 1 & BATCH_MASK_AVX2(third[0], third[1]) >> 2;
#undef TB_IS
    }
    wide = lead | lead << 1 | lead << 2;
    b.wide_punct = lead;
    b.unsure = BATCH_MASK_AVX2(low[0], low[1]) & ~b.white & ~wide;
    b.punct = ~(b.letter | b.digit | b.white | b.unsure);
    return b;
}
#undef BATCH_MASK_AVX2
#undef BATCH_IN_AVX2

/* The instruction set the windows are classified with: the widest this processor has, unless
 * _pcre2.batch_isa chose a narrower one (the tests run each); BATCH_UNKNOWN: not asked yet. */
enum { BATCH_UNKNOWN = -1, BATCH_SSE2 = 0, BATCH_AVX2 = 1, BATCH_AVX512 = 2 };
static int batch_level = BATCH_UNKNOWN;
static const char *const batch_level_names[] = {"sse2", "avx2", "avx512"};      /* by level */

static inline int batch_level_found(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f"))
        return BATCH_AVX512;
    return __builtin_cpu_supports("avx2") ? BATCH_AVX2 : BATCH_SSE2;
}

static inline int batch_level_ready(void)
{
    if (batch_level == BATCH_UNKNOWN)
        batch_level = batch_level_found();
    return batch_level;
}
#endif

static inline uint64_t spread_up(uint64_t seeds, uint64_t runs)
{
    /* The bits of `runs` that a seed reaches going up through set bits of `runs` (seeds among them):
     * adding the seeds to the runs carries from each run's lowest seed through the rest of its run,
     * clearing those bits; a seed above another in its run adds to a set bit and a carry, so stays. */
    return seeds | (runs & ~(runs + seeds));
}

static inline uint64_t spread_down(uint64_t seeds, uint64_t runs)
{
    /* spread_up going down. */
    int shift;
    for (shift = 1; shift < 64; shift *= 2) {
        seeds |= seeds >> shift & runs;
        runs &= runs >> shift;
    }
    return seeds;
}

static inline uint64_t batch_starts(const BatchClasses *b, int digits, uint64_t *unsure)
{
    /* Bit i set where byte i starts a piece, byte 0 (a piece's start) included; *unsure: the bytes
     * whose bit may be wrong. Only the bits before the first unsure one are used, and a piece is
     * given only where a sure start ends it, so a rule may misread a byte just before an unsure one
     * when it then takes no byte for a start that is not one: a space or tab before an unsure byte
     * is never the last of its run before a letter, digit or punctuation. */
    const uint64_t after_punct = b->punct << 1, after_digit = b->digit << 1;
    const uint64_t before_other = (b->letter | b->digit | b->punct) >> 1;
    /* The newlines a run of punctuation takes, and the runs of whitespace left: the part up to each
     * one's last newline (`lines`), the rest (`tail`). */
    uint64_t taken = spread_up(after_punct & b->newline, b->newline);
    uint64_t white = b->white & ~taken;
    uint64_t lines = spread_down(white & b->newline, white), tail = white & ~lines;
    uint64_t white_start = (white & ~(white << 1)) | (tail & lines << 1) | (tail & before_other);
    uint64_t punct_start = b->punct & ~(after_punct | b->space << 1);
    /* The last byte of each punctuation character that starts a piece (a letter after it joins it). */
    uint64_t punct_started = (punct_start & ~b->wide_punct) | (punct_start & b->wide_punct) << 2;
    uint64_t letter_start = b->letter & ~(b->letter << 1 | tail << 1 | (after_punct & punct_started << 1));
    uint64_t digit_start = digits == 1 ? b->digit : b->digit & ~after_digit;
    /* An apostrophe that starts a piece takes a contraction after it ('(?i:[sdmt]|ll|ve|re), the
     * pattern's first alternative), and what follows starts the next piece; else it is punctuation
     * as any other. A contraction's letters past the window leave its piece unended there (no start
     * after it), so never given. */
    uint64_t quote_start = punct_start & b->quote;
    uint64_t after_contraction = (quote_start & b->short_contraction) << 2 | (quote_start & b->long_contraction) << 3;
    uint64_t odd = b->unsure | (uint64_t)1 << 63;
    if (digits == 3) {
        /* The 4th digit of a run starts a piece (\p{N}{1,3} took three); where the run goes on, the
         * 5th is left to the next window, which starts at the 4th and counts from there. */
        uint64_t fourth = b->digit & after_digit & b->digit << 2 & b->digit << 3;
        digit_start |= fourth;
        odd |= fourth << 1 & b->digit;
    }
    /* A run of whitespace that meets an unsure byte or the window's end may have a newline further on. */
    *unsure = odd | spread_down(white & odd >> 1, white);
    return white_start | punct_start | letter_start | digit_start | after_contraction | 1;
}

static inline BatchClasses batch_classes_at(const uint8_t *s)
{
    /* batch_classes of s[0..64), with the widest instruction set the processor has (batch_level). */
#ifdef BATCH_WIDE
    const int level = batch_level_ready();
    if (level == BATCH_SSE2)
        return batch_classes(s);
    batch_window_readable(s);
    return level == BATCH_AVX2 ? batch_classes_avx2(s) : batch_classes_avx512(s);
#else
    return batch_classes(s);
#endif
}

static inline size_t batch_pieces(uint64_t starts, uint64_t unsure, uint64_t any_unsure, size_t pos, Span *out,
                                  size_t *n, size_t *retry)
{
    /* The pieces of the window at pos that `starts` ends before its first `unsure` byte, appended
     * to out[*n..]: where the next piece starts. When there is none (pos returned), *retry is past
     * the window's last `any_unsure` byte (the byte-by-byte scanner reads up to there), else pos. */
    size_t start = 0, k = *n;
    /* The starts before the first unsure byte, but byte 0's: each ends the piece before it. */
    starts &= ((uint64_t)1 << __builtin_ctzll(unsure)) - 1;
    starts &= starts - 1;
    while (starts) {
        size_t end = (size_t)__builtin_ctzll(starts);
        out[k].start = pos + start;
        out[k].end = pos + end;
        k++;
        start = end;
        starts &= starts - 1;
    }
    *n = k;
    if (start == 0)
        *retry = any_unsure ? pos + 64 - (size_t)__builtin_clzll(any_unsure) : pos;
    return pos + start;
}

static inline size_t scan_batch(const uint8_t *s, size_t pos, int digits, Span *out, size_t *n, size_t *retry)
{
    /* The sure pieces of s[pos..pos + 64) (a piece starts at pos), appended to out[*n..] (room for
     * 63 more): where the next piece starts. When none is sure (pos returned), *retry is where a
     * batch may do better: past the window's last byte beyond ASCII or below 0x20 (the scanner
     * reads byte by byte up to there), else (an apostrophe, a long number) the next piece. */
    BatchClasses b = batch_classes_at(s + pos);
    uint64_t unsure, starts = batch_starts(&b, digits, &unsure);
    return batch_pieces(starts, unsure, b.unsure, pos, out, n, retry);
}

static int scan_batch_ready(const Scanner *sc)
{
    /* Whether scan_batch can split for `sc`: the cl100k family with runs of digits it knows, and a
     * class table that reads ASCII as it does (letters, digits and the space as theirs, every other
     * printable byte as punctuation). */
    const uint8_t *classes = sc->classes;
    int b;
    if (sc->family != SCAN_CL100K || (sc->digits != 0 && sc->digits != 1 && sc->digits != 3))
        return 0;
    for (b = 0x20; b < 0x80; b++) {
        int c = classes[b], letter = ((b | 0x20) >= 'a' && (b | 0x20) <= 'z'), digit = b >= '0' && b <= '9';
        if (letter ? c != CH_UPPER && c != CH_LOWER
                   : digit ? c != CH_NUMBER
                           : b == ' ' ? c != CH_SPACE
                                      : !(OTHER_MASK & CH_BIT(c)) || c == CH_MARK)
            return 0;
    }
    for (b = 0x2010; b <= 0x2027; b++)      /* punctuation, no apostrophe */
        if (classes[b] != CH_OTHER)
            return 0;
    /* Whitespace below 0x20: tab, \v, \f white; \n and \r newlines. */
    for (b = '\t'; b <= '\r'; b++)
        if (classes[b] != (b == '\n' || b == '\r' ? CH_NEWLINE : CH_WHITE))
            return 0;
    return 1;
}
#endif

static inline size_t scan_next_piece(const Scanner *sc, const uint8_t *s, size_t len, size_t i)
{
    /* The end of the piece that starts at byte i < len, or SCAN_PCRE2: scan_piece, the cl100k
     * family's pieces of ASCII read inline (most pieces of Latin text and code are). */
    if (sc->family == SCAN_CL100K)
        return scan_cl100k_ascii(sc, s, len, i);
    return scan_piece(sc, s, len, i);
}

#endif

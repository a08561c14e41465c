/*
 * bpe_ops._pcre2: PCRE2 (JIT) splitting, pre-token counting and whole-text encoding, in C.
 *
 * The Python layer (pretokenize.Pcre2Pattern, encoder.Tokenizer) is the specification and decides
 * when this module may run: only patterns and texts on which PCRE2 and the `regex` package give the
 * same pieces (tests compare them on every code point and on real corpora). Everything here works
 * on the text's UTF-8 bytes, which CPython keeps with the string.
 *
 *   Pattern(pattern, scan)      a compiled pattern (UTF and UCP modes, JIT when available; `scan`:
 *                               the hand-written splitter of `_split_scan.h` for most pieces);
 *     .findall(text)            the matched pieces, as `regex.findall` gives them (no groups);
 *     .search(text)             whether the pattern matches anywhere.
 *   PieceCounter(pattern)       counts pre-tokens by their UTF-8 bytes: .add(text), .to_dict(),
 *                               .drain_packed(n) (n packed tables, bucketed by crc32).
 *   TextEncoder(pattern, left, right, merged, byte_ids, whole_tokens, cache_size)
 *     .encode(text)             the token ids of a text holding no special tokens: split, look each
 *                               piece up in a bounded byte-keyed cache, replay the merges of a miss
 *                               (`_merge_table.h`) from its characters' symbols (`_char_start.h`).
 *                               Text between matches is a piece too, as in `Tokenizer._split`.
 *                               With `steps`, a Sequence of Split pre-tokenizers splits instead
 *                               (each a Pattern, a behavior and invert; `hf_components` specifies),
 *                               a step that is one class repeated or DeepSeek's word regex without
 *                               running PCRE2 at every match (`sequence_split.step_reading`).
 *     .encode_texts_bytes(texts)    a list of texts in one call without the GIL: all their ids and
 *                               each one's count (-1: the caller encodes that text alone).
 *     .encode_measure_texts(texts, separators, wide)
 *                               the same, and each text's UTF-8 bytes, words and digit runs measured
 *                               in the pass that encodes it (`_measure.h`; stats.measure_batch
 *                               specifies them).
 *     .encode_measure_utf8(data, offsets, separators, wide)
 *                               the same of texts given as UTF-8 (one buffer and their offsets in
 *                               it), as a reader holds them: no str made or read (`utf8_texts`).
 *   sequence_pieces(encoder, text)  the pieces those steps make of a text, before any merge.
 *
 * What needs no PCRE2 (CountTable, utf8_length, add_counts) is in bpe_ops._native, so that it
 * stays usable where libpcre2-8 is missing; the byte map and packed records both use are in
 * `_byte_map.h`.
 *
 * A text this module cannot take raises `Fallback` and the caller uses the `regex` path: a lone
 * surrogate (not UTF-8), a PCRE2 match limit, an empty match (whose next position the engines
 * choose by different rules), or an encoder already busy in another thread. Nothing is counted or
 * cached for a text that falls back part way.
 *
 * PCRE2 is loaded at import with dlopen from its runtime library (libpcre2-8, which Linux
 * distributions ship for grep and friends), so building needs no PCRE2 headers; import fails with
 * ImportError where the library is missing, and the callers fall back to `regex`. The constants
 * below are PCRE2's published ABI values (pcre2.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "_byte_map.h"
#include "_guard.h"
#include "_merge_table.h"
#include "_piece_cache.h"
#include "_char_start.h"
#include "_split_scan.h"
#include "_split_words.h"
#include "_measure.h"
#include "_utf8_valid.h"

/* ---- PCRE2, loaded at import ------------------------------------------------------------------- */

#define PCRE2_UCP 0x00020000u
#define PCRE2_UTF 0x00080000u
#define PCRE2_NO_UTF_CHECK 0x40000000u
#define PCRE2_JIT_COMPLETE 0x00000001u
#define PCRE2_ERROR_NOMATCH (-1)
#define PCRE2_INFO_CAPTURECOUNT 4
#define PCRE2_CONFIG_UNICODE_VERSION 10
#define PCRE2_CONFIG_VERSION 11
/* The JIT stack grows to this; the default 32 KiB fails on long runs of `\s+(?!\S)` backtracking. */
#define JIT_STACK_MAX (8u << 20)

typedef struct pcre2_code pcre2_code;
typedef struct pcre2_match_data pcre2_match_data;
typedef struct pcre2_match_context pcre2_match_context;
typedef struct pcre2_jit_stack pcre2_jit_stack;

static struct {
    pcre2_code *(*compile)(const uint8_t *, size_t, uint32_t, int *, size_t *, void *);
    int (*jit_compile)(pcre2_code *, uint32_t);
    void (*code_free)(pcre2_code *);
    int (*pattern_info)(const pcre2_code *, uint32_t, void *);
    pcre2_match_data *(*match_data_create_from_pattern)(const pcre2_code *, void *);
    void (*match_data_free)(pcre2_match_data *);
    size_t *(*get_ovector_pointer)(pcre2_match_data *);
    int (*match)(const pcre2_code *, const uint8_t *, size_t, size_t, uint32_t, pcre2_match_data *,
                 pcre2_match_context *);
    pcre2_match_context *(*match_context_create)(void *);
    void (*match_context_free)(pcre2_match_context *);
    pcre2_jit_stack *(*jit_stack_create)(size_t, size_t, void *);
    void (*jit_stack_free)(pcre2_jit_stack *);
    void (*jit_stack_assign)(pcre2_match_context *, void *, void *);
    int (*get_error_message)(int, uint8_t *, size_t);
    int (*config)(uint32_t, void *);
} P;

static int load_pcre2(void)
{
    /* Fill P from the first libpcre2-8 found; -1 with ImportError set when there is none. */
    static const char *names[] = {"libpcre2-8.so.0", "libpcre2-8.so", "libpcre2-8.0.dylib",
                                  "libpcre2-8.dylib", NULL};
    static const char *symbols[] = {
        "pcre2_compile_8", "pcre2_jit_compile_8", "pcre2_code_free_8", "pcre2_pattern_info_8",
        "pcre2_match_data_create_from_pattern_8", "pcre2_match_data_free_8",
        "pcre2_get_ovector_pointer_8", "pcre2_match_8", "pcre2_match_context_create_8",
        "pcre2_match_context_free_8", "pcre2_jit_stack_create_8", "pcre2_jit_stack_free_8",
        "pcre2_jit_stack_assign_8", "pcre2_get_error_message_8", "pcre2_config_8"};
    void **slots = (void **)&P;
    void *lib = NULL;
    size_t i;
    for (i = 0; names[i] != NULL && lib == NULL; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        PyErr_SetString(PyExc_ImportError, "the PCRE2 library (libpcre2-8) is not installed");
        return -1;
    }
    for (i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++)
        if ((slots[i] = dlsym(lib, symbols[i])) == NULL) {
            PyErr_Format(PyExc_ImportError, "libpcre2-8 lacks %s", symbols[i]);
            return -1;
        }
    return 0;
}

static PyObject *Fallback;       /* the exception that sends a text to the `regex` path */
static PyObject *Pcre2Error;     /* a pattern PCRE2 refuses */

/* ---- Pattern ----------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *pattern;           /* the pattern text, as given */
    pcre2_code *code;            /* immutable: shared by every matcher of this pattern */
    int groups, jit;
    struct Matcher *matcher;     /* for the calls made with the GIL held (findall, search) */
    Scanner scan;                /* the hand-written splitter of this pattern's family, or SCAN_OFF */
    PyObject *scan_arg;          /* as given, for pickling; None when off */
} Pattern;

/* The per-user state of a match: PCRE2's match data and a JIT stack. One per thread of use. */
typedef struct Matcher {
    pcre2_match_data *data;
    pcre2_match_context *context;
    pcre2_jit_stack *stack;
} Matcher;

static void matcher_free(Matcher *m)
{
    if (m == NULL)
        return;
    if (m->data)
        P.match_data_free(m->data);
    if (m->context)
        P.match_context_free(m->context);
    if (m->stack)
        P.jit_stack_free(m->stack);
    free(m);
}

static Matcher *matcher_new(const Pattern *pat)
{
    Matcher *m = calloc(1, sizeof(Matcher));
    if (m == NULL)
        return (Matcher *)PyErr_NoMemory();
    m->data = P.match_data_create_from_pattern(pat->code, NULL);
    m->context = P.match_context_create(NULL);
    if (pat->jit) {
        m->stack = P.jit_stack_create(32u << 10, JIT_STACK_MAX, NULL);
        if (m->stack != NULL && m->context != NULL)
            P.jit_stack_assign(m->context, NULL, m->stack);
    }
    if (m->data == NULL || m->context == NULL || (pat->jit && m->stack == NULL)) {
        matcher_free(m);
        return (Matcher *)PyErr_NoMemory();
    }
    return m;
}

/* Outcomes of splitting a text, beside 0 (done). */
enum { SPLIT_NOMEM = -1, SPLIT_EMPTY_MATCH = -2, SPLIT_LIMIT = -3 };

typedef struct {
    Span *spans;
    size_t n, cap;
} Spans;

static int spans_push(Spans *s, size_t start, size_t end)
{
    if (tb_reserve((void **)&s->spans, &s->cap, s->n + 1, sizeof(Span), 256) < 0)
        return SPLIT_NOMEM;
    s->spans[s->n].start = start;
    s->spans[s->n].end = end;
    s->n++;
    return 0;
}

/* How far ahead of a window scan_pieces fetches the text: the windows read it a line at a time, which
 * the processor's own prefetcher does not run far enough ahead of (~5% of a cold encode of code). */
#define TEXT_AHEAD 384

static size_t scan_pieces(const Scanner *scanner, const uint8_t *text, size_t len, size_t pos, Spans *out,
                          size_t limit)
{
    /* The scanner's pieces from pos into `out`, up to the text's end, the first piece it leaves to
     * PCRE2, or `out` holding `limit` pieces (or a window's more): where it stopped (SIZE_MAX when
     * out of memory). The loop keeps the scanner and the
     * spans' end in locals, which stores into the spans would otherwise make the compiler reload
     * on every piece. */
    const Scanner sc = *scanner;
    Span *spans = out->spans;
    size_t n = out->n, cap = out->cap, end, retry = 0;
    while (pos < len && n < limit) {
#ifdef SCAN_BATCH
        /* Runs of plain ASCII 64 bytes at a time; after a window without a sure piece, byte by
         * byte up to where it said a window may do better. */
        if (sc.batch && pos >= retry && len - pos >= SCAN_BATCH) {
            size_t next;
            if (cap - n < SCAN_BATCH) {
                out->n = n;
                if (tb_reserve((void **)&out->spans, &out->cap, n + SCAN_BATCH, sizeof(Span), 256) < 0)
                    return SIZE_MAX;
                spans = out->spans;
                cap = out->cap;
            }
            if (len - pos > TEXT_AHEAD)     /* the text a few windows on (a text another job's run evicted) */
                __builtin_prefetch(text + pos + TEXT_AHEAD);
            if ((next = scan_batch(text, pos, sc.digits, spans, &n, &retry)) != pos) {
                pos = next;
                continue;
            }
        }
#endif
        /* The scanner's piece is the match PCRE2 finds at pos; where it cannot tell, PCRE2. */
        if (sc.family == SCAN_CL100K) {
            if ((end = scan_cl100k_ascii(&sc, text, len, pos)) == SCAN_PCRE2)
                break;
        } else if ((end = scan_piece(&sc, text, len, pos)) == SCAN_PCRE2) {
            break;
        }
        if (n == cap) {
            out->n = n;
            if (tb_reserve((void **)&out->spans, &out->cap, n + 1, sizeof(Span), 256) < 0)
                return SIZE_MAX;
            spans = out->spans;
            cap = out->cap;
        }
        spans[n].start = pos;
        spans[n].end = end;
        n++;
        pos = end;
    }
    out->n = n;
    return pos;
}

/* split_text_part's `at` once the text is done. */
#define SPLIT_DONE SIZE_MAX

static int split_text_part(const Pattern *pat, Matcher *m, const uint8_t *text, size_t len, int gaps,
                           Spans *out, size_t *at, size_t limit)
{
    /* The pieces of text[*at..len) into `out` (emptied first), as split_text finds them, until
     * `out` holds `limit` of them (a few more where the scanner reads a window at once): *at is
     * then where the next part starts, a piece's start (every call sees the whole text, so a
     * piece's lookahead past a part's end is read), or SPLIT_DONE after the text's last piece. */
    size_t pos = *at, *ov = P.get_ovector_pointer(m->data);
    int rc;
    out->n = 0;
    /* pos == len is tried too: a pattern may match the empty string at the end. */
    while (pos <= len) {
        if (out->n >= limit) {
            *at = pos;
            return 0;
        }
        if (pat->scan.family != SCAN_OFF && pos < len) {
            if ((pos = scan_pieces(&pat->scan, text, len, pos, out, limit)) == SIZE_MAX)
                return SPLIT_NOMEM;
            if (pos == len)
                break;                  /* no scanned pattern matches the empty string */
            if (out->n >= limit)
                continue;
        }
        rc = P.match(pat->code, text, len, pos, PCRE2_NO_UTF_CHECK, m->data, m->context);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return SPLIT_LIMIT;
        if (ov[1] == ov[0])
            return SPLIT_EMPTY_MATCH;
        if (gaps && ov[0] > pos && spans_push(out, pos, ov[0]) < 0)
            return SPLIT_NOMEM;
        if (spans_push(out, ov[0], ov[1]) < 0)
            return SPLIT_NOMEM;
        pos = ov[1];
    }
    if (gaps && pos < len && spans_push(out, pos, len) < 0)
        return SPLIT_NOMEM;
    *at = SPLIT_DONE;
    return 0;
}

static int split_text(const Pattern *pat, Matcher *m, const uint8_t *text, size_t len, int gaps,
                      Spans *out)
{
    /* The pieces of text[0..len) into `out` (emptied first): every match, and with `gaps` the text
     * between matches too. Touches no Python object (callers may drop the GIL). */
    size_t at = 0;
    return split_text_part(pat, m, text, len, gaps, out, &at, SIZE_MAX);
}

static int split_failed(int rc)
{
    /* Set the exception for a failed split; always -1. */
    if (rc == SPLIT_NOMEM)
        PyErr_NoMemory();
    else if (rc == SPLIT_EMPTY_MATCH)
        PyErr_SetString(Fallback, "the pattern matched an empty string");
    else
        PyErr_SetString(Fallback, "a PCRE2 match limit was reached");
    return -1;
}

static const uint8_t *utf8_of(PyObject *text, Py_ssize_t *len)
{
    /* The UTF-8 bytes of a str (kept by CPython with the string); Fallback for a lone surrogate. */
    const char *s;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "expected str, got %.100s", Py_TYPE(text)->tp_name);
        return NULL;
    }
    s = PyUnicode_AsUTF8AndSize(text, len);
    if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
        PyErr_Clear();
        PyErr_SetString(Fallback, "the text holds a lone surrogate, which is not UTF-8");
    }
    return (const uint8_t *)s;
}

/* ---- the scanner's character classes ------------------------------------------------------------ */

/* [code point] -> CH_*, for the BMP; built once per process (with the GIL held) from PCRE2's own
 * classes, so the scanner reads Unicode as the pattern does. */
static uint8_t *scan_classes;

static size_t utf8_put(uint8_t *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (uint8_t)(0xE0 | cp >> 12);
    out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
}

static int mark_class(const char *cls, const uint8_t *every, size_t n, uint8_t *classes, uint8_t value)
{
    /* classes[cp] = value for every code point of `every` (the BMP's, in order, as UTF-8) that the
     * PCRE2 class `cls` matches; -1 when PCRE2 fails or a code point is in two classes. */
    int error, rc = 0;
    size_t offset, pos = 0, *ov;
    pcre2_code *code = P.compile((const uint8_t *)cls, strlen(cls), PCRE2_UTF | PCRE2_UCP, &error, &offset, NULL);
    pcre2_match_data *data = code ? P.match_data_create_from_pattern(code, NULL) : NULL;
    if (data == NULL) {
        if (code)
            P.code_free(code);
        return -1;
    }
    P.jit_compile(code, PCRE2_JIT_COMPLETE);
    ov = P.get_ovector_pointer(data);
    while (pos < n && (rc = P.match(code, every, n, pos, PCRE2_NO_UTF_CHECK, data, NULL)) >= 0) {
        size_t p = ov[0], next;
        if (ov[1] == ov[0]) {
            rc = -1;
            break;
        }
        while (p < ov[1]) {
            uint32_t cp = tb_bmp_code_point(every, p, &next);
            if (classes[cp] != CH_OTHER)
                rc = -1;
            classes[cp] = value;
            p = next;
        }
        if (rc < 0)
            break;
        pos = ov[1];
    }
    P.match_data_free(data);
    P.code_free(code);
    return rc < 0 && rc != PCRE2_ERROR_NOMATCH ? -1 : 0;
}

static uint8_t *classify_bmp(const char *const *patterns, const uint8_t *values, size_t count, int *failed)
{
    /* A new table of the BMP, [code point] -> values[i] where the PCRE2 class patterns[i] matches the
     * code point, 0 where none does. NULL when out of memory (*failed untouched: memory may come
     * back), or with *failed set when PCRE2 fails or a code point is in two classes. */
    uint8_t *every = malloc(3 * 0x10000), *classes = calloc(0x10000, 1);
    size_t n = 0, i;
    uint32_t cp;
    if (every == NULL || classes == NULL) {
        free(every);
        free(classes);
        return NULL;
    }
    for (cp = 0; cp < 0x10000; cp++)
        if (cp < 0xD800 || cp > 0xDFFF)       /* surrogates are not UTF-8: never in a text */
            n += utf8_put(every + n, cp);
    for (i = 0; i < count && !*failed; i++)
        *failed = mark_class(patterns[i], every, n, classes, values[i]) < 0;
    free(every);
    if (*failed) {
        free(classes);
        return NULL;
    }
    return classes;
}

static const uint8_t *build_scan_classes(void)
{
    /* The class table (see scan_classes), or NULL when it cannot be built: the scanner is then off. */
    static const char *const patterns[] = {"[\\p{Lu}\\p{Lt}]+", "\\p{Ll}+", "[\\p{Lm}\\p{Lo}]+", "\\p{M}+",
                                           "\\p{N}+", "\\s+"};
    static const uint8_t values[] = {CH_UPPER, CH_LOWER, CH_CASELESS, CH_MARK, CH_NUMBER, CH_WHITE};
    static int failed;
    uint8_t *classes;
    if (scan_classes != NULL || failed)
        return scan_classes;
    if ((classes = classify_bmp(patterns, values, sizeof(values), &failed)) == NULL)
        return NULL;                          /* CH_OTHER == 0 for the rest */
    failed = classes[' '] != CH_WHITE || classes['\r'] != CH_WHITE || classes['\n'] != CH_WHITE ||
             classes['\''] != CH_OTHER || classes['/'] != CH_OTHER;
    if (failed) {
        free(classes);
        return NULL;
    }
    classes[' '] = CH_SPACE;
    classes['\r'] = classes['\n'] = CH_NEWLINE;
    classes['\''] = CH_QUOTE;
    classes['/'] = CH_SLASH;
    scan_classes = classes;
    return scan_classes;
}

static int scanner_of(PyObject *arg, Scanner *sc)
{
    /* Read Pattern's `scan` argument: None, or (family, digits, space_end) with family "cl100k",
     * "gpt2" or "o200k". -1 with an exception set when it is malformed. */
    const char *family;
    int digits, space_end;
    memset(sc, 0, sizeof(*sc));
    if (arg == Py_None)
        return 0;
    if (!PyArg_ParseTuple(arg, "sip:scan", &family, &digits, &space_end))
        return -1;
    if ((strcmp(family, "cl100k") != 0 && strcmp(family, "gpt2") != 0 && strcmp(family, "o200k") != 0) ||
        digits < 0) {
        PyErr_SetString(PyExc_ValueError, "scan must be None or (\"cl100k\", \"gpt2\" or \"o200k\", digits >= 0, "
                                          "space_end)");
        return -1;
    }
    if ((sc->classes = build_scan_classes()) == NULL)
        return 0;                             /* PCRE2 alone: the same pieces, slower */
    sc->family = strcmp(family, "cl100k") == 0 ? SCAN_CL100K : strcmp(family, "gpt2") == 0 ? SCAN_GPT2 : SCAN_O200K;
    sc->digits = digits;
    sc->space_end = space_end;
#ifdef SCAN_BATCH
    sc->batch = scan_batch_ready(sc);
#endif
    return 0;
}

static int pattern_init(Pattern *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"pattern", "scan", NULL};
    PyObject *pattern, *scan = Py_None;
    const char *s;
    Py_ssize_t n;
    int error;
    size_t offset;
    uint32_t groups;

    if (self->code != NULL) {
        PyErr_SetString(PyExc_TypeError, "Pattern is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "U|O:Pattern", kwlist, &pattern, &scan) ||
        scanner_of(scan, &self->scan) < 0)
        return -1;
    if ((s = PyUnicode_AsUTF8AndSize(pattern, &n)) == NULL)
        return -1;
    self->code = P.compile((const uint8_t *)s, (size_t)n, PCRE2_UTF | PCRE2_UCP, &error, &offset, NULL);
    if (self->code == NULL) {
        uint8_t message[256];
        P.get_error_message(error, message, sizeof(message));
        PyErr_Format(Pcre2Error, "PCRE2 refuses the pattern at byte %zu: %s", offset, message);
        return -1;
    }
    P.pattern_info(self->code, PCRE2_INFO_CAPTURECOUNT, &groups);
    self->groups = (int)groups;
    /* Without JIT (a build without it, or no executable memory) the interpreter gives the same matches. */
    self->jit = P.jit_compile(self->code, PCRE2_JIT_COMPLETE) == 0;
    if ((self->matcher = matcher_new(self)) == NULL)
        return -1;
    Py_INCREF(pattern);
    self->pattern = pattern;
    Py_INCREF(scan);
    self->scan_arg = scan;
    return 0;
}

static void pattern_dealloc(Pattern *self)
{
    matcher_free(self->matcher);
    if (self->code)
        P.code_free(self->code);
    Py_XDECREF(self->pattern);
    Py_XDECREF(self->scan_arg);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int pattern_ready(const Pattern *self)
{
    if (self->code == NULL) {
        PyErr_SetString(PyExc_TypeError, "Pattern is not initialised");
        return -1;
    }
    return 0;
}

static PyObject *pattern_findall(Pattern *self, PyObject *text)
{
    Py_ssize_t len;
    const uint8_t *s;
    Spans spans = {NULL, 0, 0};
    PyObject *out = NULL;
    size_t i;
    int rc;

    if (pattern_ready(self) < 0 || (s = utf8_of(text, &len)) == NULL)
        return NULL;
    if ((rc = split_text(self, self->matcher, s, (size_t)len, 0, &spans)) < 0) {
        split_failed(rc);
        goto done;
    }
    if ((out = PyList_New((Py_ssize_t)spans.n)) == NULL)
        goto done;
    for (i = 0; i < spans.n; i++) {
        PyObject *piece = PyUnicode_DecodeUTF8((const char *)s + spans.spans[i].start,
                                               (Py_ssize_t)(spans.spans[i].end - spans.spans[i].start), NULL);
        if (piece == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, piece);
    }
done:
    free(spans.spans);
    return out;
}

static PyObject *pattern_search(Pattern *self, PyObject *text)
{
    Py_ssize_t len;
    const uint8_t *s;
    int rc;
    if (pattern_ready(self) < 0 || (s = utf8_of(text, &len)) == NULL)
        return NULL;
    rc = P.match(self->code, s, (size_t)len, 0, PCRE2_NO_UTF_CHECK, self->matcher->data, self->matcher->context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        PyErr_SetString(Fallback, "a PCRE2 match limit was reached");
        return NULL;
    }
    return PyBool_FromLong(rc >= 0);
}

static PyObject *pattern_reduce(Pattern *self, PyObject *Py_UNUSED(ignored))
{
    if (pattern_ready(self) < 0)
        return NULL;
    return Py_BuildValue("O(OO)", (PyObject *)Py_TYPE(self), self->pattern, self->scan_arg);
}

static PyObject *pattern_get_pattern(Pattern *self, void *closure)
{
    if (pattern_ready(self) < 0)
        return NULL;
    Py_INCREF(self->pattern);
    return self->pattern;
}

static PyObject *pattern_get_groups(Pattern *self, void *closure)
{
    return PyLong_FromLong(self->groups);
}

static PyObject *pattern_get_jit(Pattern *self, void *closure)
{
    return PyBool_FromLong(self->jit);
}

static PyObject *pattern_get_scans(Pattern *self, void *closure)
{
    return PyBool_FromLong(self->scan.family != SCAN_OFF);
}

static PyMethodDef pattern_methods[] = {
    {"findall", (PyCFunction)pattern_findall, METH_O,
     "findall(text)\n--\n\nThe matched pieces of text, left to right (whole matches)."},
    {"search", (PyCFunction)pattern_search, METH_O,
     "search(text)\n--\n\nWhether the pattern matches anywhere in text."},
    {"__reduce__", (PyCFunction)pattern_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}
};

static PyGetSetDef pattern_getset[] = {
    {"pattern", (getter)pattern_get_pattern, NULL, "the pattern text", NULL},
    {"groups", (getter)pattern_get_groups, NULL, "the number of capturing groups", NULL},
    {"jit", (getter)pattern_get_jit, NULL, "whether PCRE2's JIT compiled the pattern", NULL},
    {"scans", (getter)pattern_get_scans, NULL, "whether the hand-written splitter (_split_scan.h) takes most pieces", NULL},
    {NULL, NULL, NULL, NULL, NULL}
};

static PyTypeObject PatternType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_ops._pcre2.Pattern",
    .tp_basicsize = sizeof(Pattern),
    .tp_dealloc = (destructor)pattern_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Pattern(pattern, scan=None)\n--\n\nA PCRE2 pattern in UTF and UCP modes, JIT-compiled when possible. "
              "scan=(family, digits, space_end) says the pattern is one the hand-written splitter of "
              "_split_scan.h reads (family \"cl100k\", \"gpt2\" or \"o200k\"): it then finds most pieces, PCRE2 the rest.",
    .tp_methods = pattern_methods,
    .tp_getset = pattern_getset,
    .tp_init = (initproc)pattern_init,
    .tp_new = PyType_GenericNew,
};

static Pattern *as_pattern(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, &PatternType)) {
        PyErr_Format(PyExc_TypeError, "expected a Pattern, got %.100s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (pattern_ready((Pattern *)obj) < 0)
        return NULL;
    return (Pattern *)obj;
}

/* ---- PieceCounter ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    Pattern *pattern;
    Matcher *matcher;            /* this counter's own: it counts without the GIL */
    ByteMap counts;
    Spans spans;                 /* reused between texts */
    int64_t pieces;              /* pre-tokens counted, all texts */
    int busy;                    /* set (with the GIL held) while a call runs without it */
} PieceCounter;

static int counter_init(PieceCounter *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"pattern", NULL};
    PyObject *pattern;
    if (self->pattern != NULL) {
        PyErr_SetString(PyExc_TypeError, "PieceCounter is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:PieceCounter", kwlist, &pattern) ||
        as_pattern(pattern) == NULL)
        return -1;
    if (bytemap_init(&self->counts, 1024) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    if ((self->matcher = matcher_new((Pattern *)pattern)) == NULL)
        return -1;
    Py_INCREF(pattern);
    self->pattern = (Pattern *)pattern;
    return 0;
}

static void counter_dealloc(PieceCounter *self)
{
    matcher_free(self->matcher);
    bytemap_free(&self->counts);
    free(self->spans.spans);
    Py_XDECREF(self->pattern);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int count_text(PieceCounter *self, const uint8_t *s, size_t len)
{
    /* Split s[0..len) and count its pieces; nothing is counted when the split fails. Touches no
     * Python object. */
    size_t i;
    int rc;
    if ((rc = split_text(self->pattern, self->matcher, s, len, 0, &self->spans)) < 0)
        return rc;
    for (i = 0; i < self->spans.n; i++) {
        const uint8_t *key = s + self->spans.spans[i].start;
        size_t n = self->spans.spans[i].end - self->spans.spans[i].start;
        uint64_t hash = bytemap_hash(key, n);
        Entry *e = bytemap_entry(&self->counts, key, n, hash);
        if (e == NULL)
            return SPLIT_NOMEM;     /* the pieces before it stay counted: the caller raises MemoryError */
        e->value++;
    }
    self->pieces += (int64_t)self->spans.n;
    return 0;
}

static PyObject *counter_add(PieceCounter *self, PyObject *text)
{
    /* Count the pre-tokens of one text; a text that falls back is not counted at all. */
    Py_ssize_t len;
    const uint8_t *s;
    int rc;
    if (self->pattern == NULL) {
        PyErr_SetString(PyExc_TypeError, "PieceCounter is not initialised");
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(Fallback, "this PieceCounter is counting in another thread");
        return NULL;
    }
    if ((s = utf8_of(text, &len)) == NULL)
        return NULL;
    self->busy = 1;
    /* Only this counter's own buffers are touched while counting: let other threads run. */
    Py_BEGIN_ALLOW_THREADS
    rc = count_text(self, s, (size_t)len);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc < 0)
        return split_failed(rc), NULL;
    Py_RETURN_NONE;
}

static PyObject *counter_to_dict(PieceCounter *self, PyObject *Py_UNUSED(ignored))
{
    /* {pre-token UTF-8 bytes: count}. */
    PyObject *out = PyDict_New();
    size_t i;
    if (out == NULL || self->pattern == NULL)
        return out;
    for (i = 0; i <= self->counts.mask; i++) {
        const Entry *e = &self->counts.slots[i];
        PyObject *key, *value;
        int rc;
        if (e->hash == 0)
            continue;
        key = PyBytes_FromStringAndSize((const char *)entry_key(&self->counts, e), e->key_len);
        value = PyLong_FromLongLong(e->value);
        rc = key && value ? PyDict_SetItem(out, key, value) : -1;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *counter_absorb(PieceCounter *self, PyObject *arg)
{
    /* Add the counts of another PieceCounter to this one and empty it (both idle: no thread is
     * counting with either). */
    PieceCounter *other;
    if (!PyObject_TypeCheck(arg, Py_TYPE(self))) {
        PyErr_SetString(PyExc_TypeError, "absorb() takes a PieceCounter");
        return NULL;
    }
    other = (PieceCounter *)arg;
    if (self->pattern == NULL || other->pattern == NULL || other == self) {
        PyErr_SetString(PyExc_ValueError, "absorb() takes another initialised PieceCounter");
        return NULL;
    }
    if (self->busy || other->busy) {
        PyErr_SetString(PyExc_RuntimeError, "absorb(): a counter is counting in another thread");
        return NULL;
    }
    if (bytemap_add_all(&self->counts, &other->counts) < 0)
        return PyErr_NoMemory();
    self->pieces += other->pieces;
    other->pieces = 0;
    bytemap_clear(&other->counts);
    Py_RETURN_NONE;
}

static PyObject *counter_to_dicts(PieceCounter *self, PyObject *arg)
{
    /* The counts split into n dicts {pre-token UTF-8 bytes: count}: dict i holds the pre-tokens p
     * with zlib.crc32(p) % n == i (stable across processes and runs, unlike Python's hash). */
    Py_ssize_t n = PyLong_AsSsize_t(arg), b;
    PyObject *out;
    size_t i;
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "to_dicts(n): n must be at least 1");
        return NULL;
    }
    if ((out = PyList_New(n)) == NULL)
        return NULL;
    for (b = 0; b < n; b++) {
        PyObject *d = PyDict_New();
        if (d == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, b, d);
    }
    if (self->pattern == NULL)
        return out;
    for (i = 0; i <= self->counts.mask; i++) {
        const Entry *e = &self->counts.slots[i];
        const uint8_t *key_bytes;
        PyObject *key, *value;
        int rc;
        if (e->hash == 0)
            continue;
        key_bytes = entry_key(&self->counts, e);
        key = PyBytes_FromStringAndSize((const char *)key_bytes, e->key_len);
        value = PyLong_FromLongLong(e->value);
        rc = key && value ? PyDict_SetItem(PyList_GET_ITEM(out, crc32_of(key_bytes, e->key_len) % (uint64_t)n),
                                           key, value) : -1;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static Py_ssize_t counter_len(PieceCounter *self)
{
    return (Py_ssize_t)self->counts.used;
}

static PyObject *counter_get_pieces(PieceCounter *self, void *closure)
{
    return PyLong_FromLongLong(self->pieces);
}

static PyObject *counter_drain_packed(PieceCounter *self, PyObject *arg)
{
    /* The counts as n packed tables (table i: the pre-tokens p with zlib.crc32(p) % n == i); the
     * counter starts over empty, its memory given back. */
    Py_ssize_t n = PyLong_AsSsize_t(arg), b;
    Buffer *buffers;
    PyObject *out = NULL;
    size_t i;
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "drain_packed(n): n must be at least 1");
        return NULL;
    }
    if (self->pattern == NULL) {
        PyErr_SetString(PyExc_TypeError, "PieceCounter is not initialised");
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "drain_packed(): the counter is counting in another thread");
        return NULL;
    }
    if ((buffers = calloc((size_t)n, sizeof(Buffer))) == NULL)
        return PyErr_NoMemory();
    for (i = 0; i <= self->counts.mask; i++) {
        const Entry *e = &self->counts.slots[i];
        const uint8_t *key;
        if (e->hash == 0)
            continue;
        key = entry_key(&self->counts, e);
        if (pack_record(&buffers[crc32_of(key, e->key_len) % (uint64_t)n], key, e->key_len, e->value) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if ((out = PyList_New(n)) == NULL)
        goto done;
    for (b = 0; b < n; b++) {
        PyObject *table = PyBytes_FromStringAndSize((const char *)buffers[b].data, (Py_ssize_t)buffers[b].len);
        if (table == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, b, table);
    }
    bytemap_free(&self->counts);
    self->pieces = 0;
    if (bytemap_init(&self->counts, 1024) < 0) {
        Py_CLEAR(out);
        PyErr_NoMemory();
    }
done:
    for (b = 0; b < n; b++)
        free(buffers[b].data);
    free(buffers);
    return out;
}

static PyMethodDef counter_methods[] = {
    {"add", (PyCFunction)counter_add, METH_O,
     "add(text)\n--\n\nCount the pre-tokens of text (Fallback: nothing of it is counted)."},
    {"to_dict", (PyCFunction)counter_to_dict, METH_NOARGS,
     "to_dict()\n--\n\nThe counts as {pre-token UTF-8 bytes: count}."},
    {"absorb", (PyCFunction)counter_absorb, METH_O,
     "absorb(other)\n--\n\nAdd the counts of another PieceCounter to this one, and empty the other."},
    {"to_dicts", (PyCFunction)counter_to_dicts, METH_O,
     "to_dicts(n)\n--\n\nThe counts as n dicts; dict i holds the pre-tokens p with zlib.crc32(p) % n == i."},
    {"drain_packed", (PyCFunction)counter_drain_packed, METH_O,
     "drain_packed(n)\n--\n\nThe counts as n packed tables (table i: the pre-tokens p with zlib.crc32(p) % n "
     "== i); the counter starts over empty."},
    {NULL, NULL, 0, NULL}
};

static PyGetSetDef counter_getset[] = {
    {"pieces", (getter)counter_get_pieces, NULL, "pre-tokens counted, repeats included", NULL},
    {NULL, NULL, NULL, NULL, NULL}
};

static PySequenceMethods counter_as_sequence = {.sq_length = (lenfunc)counter_len};

static PyTypeObject PieceCounterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_ops._pcre2.PieceCounter",
    .tp_basicsize = sizeof(PieceCounter),
    .tp_dealloc = (destructor)counter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PieceCounter(pattern)\n--\n\nCounts of the pre-tokens of many texts, by their UTF-8 bytes.",
    .tp_methods = counter_methods,
    .tp_getset = counter_getset,
    .tp_as_sequence = &counter_as_sequence,
    .tp_init = (initproc)counter_init,
    .tp_new = PyType_GenericNew,
};

/* ---- TextEncoder ------------------------------------------------------------------------------- */

/* Pieces longer than this many bytes are not cached: they rarely repeat and would pin memory. */
#define MAX_CACHED_BYTES 1024
/* The cache is emptied when its keys or ids outgrow these, whatever its entry count. */
#define CACHE_KEY_BYTES (16u << 20)
#define CACHE_IDS (4u << 20)
/* How many pieces ahead of the one being encoded its cache slot is prefetched. The common loop of
 * encode_spans makes each piece's probe and fetches its slot FETCH_FAR ahead, once (a second fetch
 * PREFETCH_AHEAD ahead into the core's own cache cost ~3% of a warm encode and bought nothing cold).
 * 32 pieces: where the cache's lines are out of the core's caches (another job ran between, as in
 * bench_race's cold runs) 16 was too near, ~5% slower on code; warm, 16 and 32 are alike. The
 * other loop fetches PREFETCH_AHEAD ahead, from two tables. */
#define PREFETCH_AHEAD 8
#define FETCH_FAR (4 * PREFETCH_AHEAD)
/* How many ids ahead encode() fetches an id's int (half as far: its place in the table of ints). */
#define INTS_AHEAD 16

typedef struct {
    int32_t *ids;
    size_t n, cap;
} Ids;

static int ids_reserve(Ids *v, size_t more)
{
    return tb_reserve((void **)&v->ids, &v->cap, v->n + more, sizeof(int32_t), 1024);
}

/* A piece as the cache looks it up: a short one's key words (piece_short_key), its hash, and the
 * cache slot its lookup starts from (the cache's slots stay in place while a text is encoded). */
struct PieceProbe {
    uint64_t key[2];
    uint64_t hash;
    size_t slot;
};

/* A Sequence of Split steps read as one chain (see chain_pieces): runs of one-character classes
 * split off in turn, then DeepSeek's word regex over each piece left. */
#define CHAIN_LEADS 4
typedef struct Chain {
    int on;                      /* the steps are such a chain: chain_pieces splits the text */
    int nlead;
    const struct ClassBits *lead[CHAIN_LEADS];      /* the classes split off first, in step order */
    size_t hi[CHAIN_LEADS];      /* the most characters of each in one piece (SIZE_MAX: no bound) */
    uint8_t lead_ascii[128];     /* [c]: 1 + the index of the class holding ASCII c; 0: none does */
    uint8_t pass[256];           /* [byte]: 1 where no lead class's character starts with it */
    const struct ClassBits *skip;/* a lead class holding every lead ASCII character (skip_outside) */
    const uint8_t *words;        /* the word regex's classes (`_split_words.h`) */
    int batch_digits;            /* words_batch splits runs of ASCII, with this many digits at most
                                  * in a piece (1 or 3); 0: the chain is not one it reads */
} Chain;

typedef struct {
    PyObject_HEAD
    Pattern *pattern;
    Matcher *matcher;            /* this encoder's own: it matches without the GIL */
    PyObject *tables_of;         /* NULL, or the encoder whose tables (table, byte_rank, whole, the
                                  * edges of chars) these are, read-only: a fork() holds it */
    MergeTable table;
    int32_t byte_ids[256];
    int32_t *byte_rank;          /* [a << 8 | b]: the rank of the pair of bytes a, b; a piece's first ranks */
    CharStart chars;             /* characters' own merges, made once (`_char_start.h`) */
    Ids rank;                    /* a piece's pair ranks, scratch */
    MergeScratch long_piece;     /* a long piece's list and heap, scratch */
    PieceCache whole;            /* ignore_merges: a piece that is a token is that token */
    int has_whole;
    int seeded;                  /* the cache holds every entry of `whole` (see cache_reset) */
    PieceCache cache;            /* piece bytes -> its ids; emptied when full */
    size_t cache_size;           /* entries; 0: no cache */
    Spans spans;
    Ids out;
    struct SplitStep *steps;     /* a Sequence of Split pre-tokenizers, run in place of `pattern`'s
                                  * one split (see split_steps); NULL: that split */
    Py_ssize_t nsteps;
    Spans next, matches;         /* split_steps' scratch */
    Chain chain;                 /* the steps as one chain, where they are one (chain_ready) */
    struct Marked *marked;
    size_t marked_cap;
    PyObject *guard;             /* NULL, or bytes: 0x110000 bits, set for the code points that send a
                                  * text to the `regex` path (the steps' patterns' disagreements) */
    uint8_t *utf8;               /* a non-ASCII text's UTF-8, scratch (see text_utf8) */
    size_t utf8_cap;
    PyObject **ints;             /* [id]: the Python int of an id, made on its first use by encode() */
    size_t nints;                /* ids below this have a place in `ints` */
    int busy;                    /* set (with the GIL held) from the start of an encode until its
                                  * ids are read out (see encoder_run) */
} TextEncoder;

/* ---- a Sequence of Split pre-tokenizers ----------------------------------------------------------
 *
 * `hf_components._regex_split` and `_split` are the specification: each step splits every piece of
 * the step before (the piece alone is the subject its pattern sees) into its matches and the text
 * between them, flips which is which with `invert`, and keeps or joins them by its behavior. Spans
 * here are never empty: an empty match falls back (split_text), as for the one-pattern split. */

enum { ISOLATED, REMOVED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS };
static const char *const BEHAVIOR_NAMES[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                                             "Contiguous", NULL};

/* A character class read from PCRE2 once per process: which code points its pattern matches. */
typedef struct ClassBits {
    char *atom;                  /* the class as the step's pattern spells it (see class_bits) */
    uint8_t *bits;               /* 0x110000 bits: bit c (byte c >> 3, bit c & 7) for code point c */
    uint8_t ascii[128];          /* [c]: 1 for the ASCII characters of the class */
    int has_ascii;               /* whether any ASCII character is in the class */
    int ascii_range;             /* whether they are one range, ascii_first..ascii_last (digits, say) */
    uint8_t ascii_first, ascii_last;
    uint8_t pass[256];           /* [byte]: 1 where no character of the class starts with it (ASCII
                                  * outside the class, a continuation byte, the lead byte of code
                                  * points all outside it): passed without decoding */
} ClassBits;

typedef struct SplitStep {
    Pattern *pattern;
    Matcher *matcher;            /* the encoder's own */
    int behavior, invert;
    const ClassBits *run;        /* NULL, or the step's pattern is this class repeated run_lo to run_hi
                                  * times (0: no bound), split by class_run_split instead of PCRE2 */
    size_t run_lo, run_hi;
    const uint8_t *words;        /* NULL, or the step's pattern is DeepSeek's word regex, split by
                                  * words_split with these classes (`_split_words.h`) */
} SplitStep;

/* A span of a piece, [start, end) in bytes from the piece's start, and whether it counts as a match. */
typedef struct Marked {
    size_t start, end;
    int is_match;
} Marked;

static int keep_spans(int behavior, const Marked *m, size_t n, size_t base, Spans *out)
{
    /* Append to `out` the pieces `_split` keeps of one piece's marked spans (at byte `base` of the text). */
    size_t k, first = out->n;
    int previous = 0;
    Span *last;
    for (k = 0; k < n; k++) {
        /* MergedWithNext is MergedWithPrevious read from the end: its pieces are reversed below. */
        const Marked *s = behavior == MERGED_WITH_NEXT ? &m[n - 1 - k] : &m[k];
        last = out->n > first ? &out->spans[out->n - 1] : NULL;
        if (behavior == REMOVED && s->is_match)
            continue;
        if (last != NULL && behavior == MERGED_WITH_PREVIOUS && s->is_match && !previous)
            last->end = base + s->end;
        else if (last != NULL && behavior == MERGED_WITH_NEXT && s->is_match && !previous)
            last->start = base + s->start;
        else if (last != NULL && behavior == CONTIGUOUS && s->is_match == previous)
            last->end = base + s->end;
        else if (spans_push(out, base + s->start, base + s->end) < 0)
            return SPLIT_NOMEM;
        previous = s->is_match;
    }
    if (behavior == MERGED_WITH_NEXT && out->n > first)
        for (k = 0; first + k < out->n - 1 - k; k++) {
            Span t = out->spans[first + k];
            out->spans[first + k] = out->spans[out->n - 1 - k];
            out->spans[out->n - 1 - k] = t;
        }
    return 0;
}

/* Classes met so far, kept for the life of the process (an encoder, its forks and the next
 * encoder of the same file share them); at most CLASS_BITS_KEPT, past which steps run on PCRE2. */
#define CLASS_BITS_KEPT 64
static ClassBits class_bits_kept[CLASS_BITS_KEPT];
static size_t class_bits_count;

static uint32_t code_point_at(const uint8_t *s, size_t p, size_t *next)
{
    /* The code point of the character at byte p of valid UTF-8, and where the next one starts. */
    uint8_t b = s[p];
    if (b < 0xF0)
        return tb_bmp_code_point(s, p, next);
    *next = p + 4;
    return (b & 0x07u) << 18 | (s[p + 1] & 0x3Fu) << 12 | (s[p + 2] & 0x3Fu) << 6 | (s[p + 3] & 0x3Fu);
}

static inline int class_has(const uint8_t *bits, uint32_t c)
{
    return bits[c >> 3] >> (c & 7) & 1;
}

static const ClassBits *class_bits(const char *atom)
{
    /* The code points the one-character class `atom` matches, by PCRE2 (UTF, UCP) over every code
     * point but the surrogates; the same atom's table again once built. NULL where it cannot be
     * built (PCRE2 refuses the class, no memory, CLASS_BITS_KEPT reached): the step keeps PCRE2. */
    ClassBits *kept;
    uint8_t *every, *bits;
    size_t i, n = 0, pos = 0, *ov, at = strlen(atom);
    char *pattern;
    pcre2_code *code = NULL;
    pcre2_match_data *data = NULL;
    int error, rc = 0;
    uint32_t cp;
    for (i = 0; i < class_bits_count; i++)
        if (strcmp(class_bits_kept[i].atom, atom) == 0)
            return &class_bits_kept[i];
    if (class_bits_count == CLASS_BITS_KEPT)
        return NULL;
    every = malloc(4 * 0x110000);
    bits = calloc(0x110000 / 8, 1);
    pattern = malloc(at + 7);
    if (every == NULL || bits == NULL || pattern == NULL)
        goto failed;
    /* Runs of the class, not single characters: one match call per run instead of per character;
     * possessive, so that a run of thousands (a script's block) keeps no backtracking frames. */
    memcpy(pattern, "(?:", 3);
    memcpy(pattern + 3, atom, at);
    memcpy(pattern + 3 + at, ")++", 4);
    code = P.compile((const uint8_t *)pattern, at + 6, PCRE2_UTF | PCRE2_UCP, &error, &pos, NULL);
    if (code == NULL || (data = P.match_data_create_from_pattern(code, NULL)) == NULL)
        goto failed;
    P.jit_compile(code, PCRE2_JIT_COMPLETE);
    for (cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;                         /* surrogates are not UTF-8: never in a text */
        if (cp < 0x10000) {
            n += utf8_put(every + n, cp);
        } else {
            every[n++] = (uint8_t)(0xF0 | cp >> 18);
            every[n++] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
            every[n++] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
            every[n++] = (uint8_t)(0x80 | (cp & 0x3F));
        }
    }
    ov = P.get_ovector_pointer(data);
    pos = 0;
    while (pos < n && (rc = P.match(code, every, n, pos, PCRE2_NO_UTF_CHECK, data, NULL)) >= 0) {
        size_t p = ov[0], next;
        if (ov[1] == ov[0])
            goto failed;                      /* not a class: it matched no character */
        while (p < ov[1]) {
            uint32_t c = code_point_at(every, p, &next);
            bits[c >> 3] |= (uint8_t)(1u << (c & 7));
            p = next;
        }
        pos = ov[1];
    }
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        goto failed;
    P.match_data_free(data);
    P.code_free(code);
    free(every);
    memcpy(pattern, atom, at + 1);
    kept = &class_bits_kept[class_bits_count++];
    kept->atom = pattern;
    kept->bits = bits;
    for (kept->has_ascii = 0, i = 0; i < 128; i++) {
        if ((kept->ascii[i] = (uint8_t)class_has(bits, (uint32_t)i)) && !kept->has_ascii)
            kept->ascii_first = (uint8_t)i;
        kept->has_ascii |= kept->ascii[i];
    }
    for (i = kept->ascii_first; i < 128 && kept->ascii[i]; i++)
        kept->ascii_last = (uint8_t)i;
    for (kept->ascii_range = kept->has_ascii; i < 128; i++)
        kept->ascii_range &= !kept->ascii[i];
    for (i = 0; i < 256; i++) {
        /* The lead byte i starts code points first..first + count - 1 (bits[] in whole bytes). */
        size_t first = i < 0xC2 || i > 0xF4 ? 0 : i < 0xE0 ? (i & 0x1F) << 6 : i < 0xF0 ? (i & 0x0F) << 12 : (i & 0x07) << 18;
        size_t count = i < 0xC2 || i > 0xF4 ? 0 : i < 0xE0 ? 64 : i < 0xF0 ? 4096 : 0x40000, k;
        kept->pass[i] = i < 0x80 ? !kept->ascii[i] : 1;
        for (k = first / 8; k < (first + count) / 8 && k < 0x110000 / 8; k++)
            kept->pass[i] &= bits[k] == 0;
    }
    return kept;
failed:
    if (data)
        P.match_data_free(data);
    if (code)
        P.code_free(code);
    free(every);
    free(bits);
    free(pattern);
    return NULL;
}

static size_t skip_outside(const ClassBits *run, const uint8_t *s, size_t len, size_t p)
{
    /* A byte from p up to which every byte is ASCII outside the class: the first that is not, or
     * one within 7 bytes of the end. 8 bytes at a time where the class's ASCII characters are none
     * or one range; else p. For a byte x below 0x80, (x | 0x80) - c keeps its top bit exactly
     * when x >= c, and no byte borrows from the next. */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t first = ones * run->ascii_first, past = ones * ((unsigned)run->ascii_last + 1);
    if (run->has_ascii && !run->ascii_range)
        return p;
    while (p + 8 <= len) {
        uint64_t w, stop;
        memcpy(&w, s + p, 8);
        stop = w & high;
        if (run->has_ascii)
            stop |= ((w | high) - first) & ~((w | high) - past) & high;
        if (stop)
            return p + (size_t)__builtin_ctzll(stop) / 8;
        p += 8;
    }
#else
    (void)run;
    (void)s;
    (void)len;
#endif
    return p;
}

static int class_run_split(const SplitStep *step, const uint8_t *s, size_t len, Spans *out)
{
    /* What split_text makes of s[0..len) for a pattern that is one class repeated lo to hi times,
     * greedy: each run of the class is cut into matches of hi characters, and a last part of fewer
     * than lo characters is no match. `out` is emptied first. */
    const ClassBits *run = step->run;
    size_t p = 0, next, hi = step->run_hi ? step->run_hi : SIZE_MAX;
    out->n = 0;
    while (p < len) {
        size_t start, chars = 0;
        /* To the next character that may be in the class: ASCII outside it 8 bytes at a time where
         * skip_outside can, characters whose lead byte rules them out without decoding. */
        for (;;) {
            size_t q = p = skip_outside(run, s, len, p);
            while (q < len && s[q] >= 0x80 && run->pass[s[q]])
                q++;
            if (q == p)
                break;
            p = q;
        }
        while (p < len && run->pass[s[p]])
            p++;
        if (p >= len)
            break;
        if (!class_has(run->bits, code_point_at(s, p, &next))) {
            p = next;
            continue;
        }
        start = p;
        do {
            p = next;
            if (++chars == hi) {
                if (spans_push(out, start, p) < 0)
                    return SPLIT_NOMEM;
                start = p;
                chars = 0;
            }
        } while (p < len && class_has(run->bits, code_point_at(s, p, &next)));
        if (chars >= step->run_lo && chars > 0 && spans_push(out, start, p) < 0)
            return SPLIT_NOMEM;
    }
    return 0;
}

/* DeepSeek's word classes of the BMP, [code point] -> WD_*; built once per process from PCRE2's own
 * classes (see build_word_classes). */
static uint8_t *word_classes;

static const uint8_t *build_word_classes(void)
{
    /* The class table (see word_classes), or NULL when it cannot be built or PCRE2's classes do not
     * fall where `_split_words.h` assumes: the step then runs on PCRE2. */
    static const char ascii_marks[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
    static const char *const patterns[] = {"\\p{L}+", "\\p{M}+", "[\\p{P}\\p{S}]+", "\\s+"};
    static const uint8_t values[] = {WD_LETTER, WD_MARK, WD_PUNCT, WD_WHITE};
    static int failed;
    uint8_t *classes;
    uint32_t cp;
    if (word_classes != NULL || failed)
        return word_classes;
    if ((classes = classify_bmp(patterns, values, sizeof(values), &failed)) == NULL)
        return NULL;                          /* WD_OTHER == 0 for the rest */
    failed = classes[' '] != WD_WHITE || classes['\r'] != WD_WHITE || classes['\n'] != WD_WHITE;
    for (cp = 0; cp < 128 && !failed; cp++) {
        int letter = (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z', mark = cp != 0 && strchr(ascii_marks, (int)cp) != NULL;
        failed = (classes[cp] == WD_LETTER) != letter || (classes[cp] == WD_PUNCT) != mark;
    }
    if (failed) {
        free(classes);
        return NULL;
    }
    classes[' '] = WD_SPACE;
    classes['\r'] = classes['\n'] = WD_NEWLINE;
    word_classes = classes;
    return word_classes;
}

static int word_next(const SplitStep *step, const uint8_t *s, size_t from, size_t end, size_t p, Span *match)
{
    /* The first match of DeepSeek's word regex at or after byte p of the subject s[from..end):
     * word_piece's, PCRE2's from where word_piece cannot decide. 1 with *match set, 0 where there is
     * none, or SPLIT_LIMIT or SPLIT_EMPTY_MATCH. */
    size_t next, *ov;
    int rc;
    while (p < end) {
        size_t e = word_piece(step->words, s, end, p);
        if (e == WORD_NONE) {
            code_point_at(s, p, &next);
            p = next;
            continue;
        }
        if (e != SCAN_PCRE2) {
            *match = (Span){p, e};
            return 1;
        }
        rc = P.match(step->pattern->code, s + from, end - from, p - from, PCRE2_NO_UTF_CHECK, step->matcher->data,
                     step->matcher->context);
        ov = P.get_ovector_pointer(step->matcher->data);
        if (rc == PCRE2_ERROR_NOMATCH)
            return 0;
        if (rc < 0)
            return SPLIT_LIMIT;
        if (ov[1] == ov[0])
            return SPLIT_EMPTY_MATCH;
        *match = (Span){from + ov[0], from + ov[1]};
        return 1;
    }
    return 0;
}

static int words_split(const SplitStep *step, const uint8_t *s, size_t len, Spans *out)
{
    /* What split_text makes of s[0..len) for DeepSeek's word regex (word_next's matches). `out` is
     * emptied first. */
    Span match;
    int rc;
    out->n = 0;
    for (match.end = 0; (rc = word_next(step, s, 0, len, match.end, &match)) == 1;)
        if (spans_push(out, match.start, match.end) < 0)
            return SPLIT_NOMEM;
    return rc;
}

static int step_pieces(const SplitStep *step, const uint8_t *text, Span piece, Spans *matches,
                       Marked **marked, size_t *marked_cap, Spans *out)
{
    /* Append to `out` the pieces one step makes of one piece. Touches no Python object. */
    size_t len = piece.end - piece.start, at = 0, k, n = 0;
    Marked *m;
    int rc = step->run != NULL     ? class_run_split(step, text + piece.start, len, matches)
             : step->words != NULL ? words_split(step, text + piece.start, len, matches)
                                   : split_text(step->pattern, step->matcher, text + piece.start, len, 0, matches);
    if (rc < 0)
        return rc;
    if (step->behavior == ISOLATED) {
        /* Every span is a piece, match or not: no marks to read. */
        Span *to;
        if (tb_reserve((void **)&out->spans, &out->cap, out->n + 2 * matches->n + 1, sizeof(Span), 256) < 0)
            return SPLIT_NOMEM;
        to = out->spans + out->n;
        for (k = 0; k < matches->n; k++) {
            const Span *match = &matches->spans[k];
            if (match->start > at)
                *to++ = (Span){piece.start + at, piece.start + match->start};
            *to++ = (Span){piece.start + match->start, piece.start + match->end};
            at = match->end;
        }
        if (at < len)
            *to++ = (Span){piece.start + at, piece.end};
        out->n = (size_t)(to - out->spans);
        return 0;
    }
    if (tb_reserve((void **)marked, marked_cap, 2 * matches->n + 1, sizeof(Marked), 256) < 0)
        return SPLIT_NOMEM;
    m = *marked;
    for (k = 0; k < matches->n; k++) {
        const Span *match = &matches->spans[k];
        if (match->start > at)
            m[n++] = (Marked){at, match->start, step->invert};
        m[n++] = (Marked){match->start, match->end, !step->invert};
        at = match->end;
    }
    if (at < len)
        m[n++] = (Marked){at, len, step->invert};
    return keep_spans(step->behavior, m, n, piece.start, out);
}

/* ---- the steps as one chain -------------------------------------------------------------------------
 *
 * DeepSeek's Sequence (V2, V3, R1) splits off runs of digits (\p{N}{1,3}), then runs of CJK, then
 * splits each piece left with its word regex, every step Isolated. Where each class split off is a
 * run of one character class (any count of at most hi, from one: class_run_split) and no two of
 * them share a character, the steps give, in one pass over the text: each run of a class, cut
 * every hi characters from its start, and each stretch between such runs (a "gap"), every one of
 * them split by the word regex as its own subject. A class's run holds no character of another, so
 * no later class step cuts it, and a later class's run lies inside one gap of the earlier ones.
 * split_steps, step after step, is the specification (`_pcre2.sequence_pieces(..., chained=False)`).
 * Worked example: "ab 1234日本・x" -> gap "ab " -> "ab", " "; digits "123", "4"; CJK "日本・" -> "日本",
 * "・"; gap "x". */

static void chain_ready(Chain *c, const SplitStep *steps, Py_ssize_t n)
{
    /* Fill `c` from the steps; c->on stays 0 where they are not such a chain. */
    const SplitStep *last = n > 0 ? &steps[n - 1] : NULL;
    Py_ssize_t i, j;
    size_t k;
    int b, with_ascii = 0;
    memset(c, 0, sizeof(*c));
    if (n < 2 || n - 1 > CHAIN_LEADS || last->words == NULL || last->behavior != ISOLATED || last->invert)
        return;
    for (i = 0; i < n - 1; i++) {
        const SplitStep *st = &steps[i];
        if (st->run == NULL || st->run_lo != 1 || st->behavior != ISOLATED || st->invert)
            return;
        c->lead[i] = st->run;
        c->hi[i] = st->run_hi ? st->run_hi : SIZE_MAX;
        for (j = 0; j < i; j++)
            for (k = 0; k < 0x110000 / 8; k++)
                if (c->lead[i]->bits[k] & c->lead[j]->bits[k])
                    return;                   /* two classes share a character */
    }
    c->nlead = (int)(n - 1);
    c->words = last->words;
    for (b = 0; b < 256; b++) {
        c->pass[b] = 1;
        for (i = 0; i < c->nlead; i++)
            c->pass[b] &= c->lead[i]->pass[b];
    }
    for (b = 0; b < 128; b++)
        for (i = 0; i < c->nlead; i++)
            if (c->lead[i]->ascii[b])
                c->lead_ascii[b] = (uint8_t)(i + 1);
    for (i = 0; i < c->nlead; i++)
        if (c->lead[i]->has_ascii) {
            with_ascii++;
            c->skip = c->lead[i];
        }
    if (with_ascii == 0)
        c->skip = c->lead[0];                 /* no ASCII in any: stop at bytes beyond ASCII only */
    else if (with_ascii > 1 || !c->skip->ascii_range)
        c->skip = NULL;
#ifdef SCAN_BATCH
    /* words_batch reads the ASCII digits as the only lead class's ASCII characters, \t, \v and \f as
     * whitespace, and U+2010..U+2027 as punctuation of no lead class. */
    if (with_ascii == 1 && c->skip != NULL && c->skip->ascii_first == '0' && c->skip->ascii_last == '9') {
        Py_ssize_t digit = c->lead_ascii['0'] - 1;
        uint32_t cp;
        int ok = (c->hi[digit] == 1 || c->hi[digit] == 3) && c->words['\t'] == WD_WHITE &&
                 c->words['\v'] == WD_WHITE && c->words['\f'] == WD_WHITE;
        for (cp = 0x2010; cp <= 0x2027 && ok; cp++) {
            ok = c->words[cp] == WD_PUNCT;
            for (i = 0; i < c->nlead && ok; i++)
                ok = !class_has(c->lead[i]->bits, cp);
        }
        c->batch_digits = ok ? (int)c->hi[digit] : 0;
    }
#endif
    c->on = 1;
}

static inline int chain_class_at(const Chain *c, const uint8_t *s, size_t p, size_t *next)
{
    /* 1 + the index of the lead class of the character at byte p (0: none), and where the next
     * character starts. */
    uint32_t cp;
    int i;
    if (s[p] < 0x80) {
        *next = p + 1;
        return c->lead_ascii[s[p]];
    }
    cp = code_point_at(s, p, next);
    if (c->pass[s[p]])
        return 0;
    for (i = 0; i < c->nlead; i++)
        if (class_has(c->lead[i]->bits, cp))
            return i + 1;
    return 0;
}

static size_t chain_gap_end(const Chain *c, const uint8_t *s, size_t len, size_t p)
{
    /* The first byte from p that starts a character of a lead class; len when none does. */
    size_t next;
    while (p < len) {
        if (c->skip != NULL)
            p = skip_outside(c->skip, s, len, p);
        while (p < len && s[p] >= 0x80 && c->pass[s[p]])
            p++;
        if (p >= len)
            break;
        if (chain_class_at(c, s, p, &next))
            return p;
        p = next;
    }
    return len;
}

static int chain_words(const TextEncoder *self, const uint8_t *s, size_t end, size_t *pos, Spans *out)
{
    /* The word regex's next match from *pos in a subject ending at `end`, appended to `out` after
     * the text before it (a piece of its own: Isolated); *pos = where it ends (end: no match, the
     * rest one piece). *pos is a piece's start, and the regex looks neither behind nor at the
     * subject's start, so where the subject starts before it does not matter. */
    Span match = {end, end};
    int rc = word_next(&self->steps[self->nsteps - 1], s, *pos, end, *pos, &match);
    if (rc < 0)
        return rc;
    if ((match.start > *pos && spans_push(out, *pos, match.start) < 0) ||
        (match.end > match.start && spans_push(out, match.start, match.end) < 0))
        return SPLIT_NOMEM;
    *pos = match.end;
    return 0;
}

static int chain_pieces(TextEncoder *self, const uint8_t *s, size_t len, size_t *at, size_t limit)
{
    /* The chain's pieces of text s[0..len) from *at (a piece's start), appended to self->spans up to
     * the text's end or `limit` of them (a window's or a run's more): *at = where it stopped,
     * SPLIT_DONE at the end. */
    const Chain *c = &self->chain;
    Spans *out = &self->spans;
    size_t pos = *at, gap_end = 0, next;    /* gap_end: the gap's end, while pos is before it */
    int rc;
#ifdef SCAN_BATCH
    size_t retry = 0;
#endif
    while (pos < len && out->n < limit) {
        int k;
#ifdef SCAN_BATCH
        if (c->batch_digits && pos >= retry && len - pos >= SCAN_BATCH) {
            if (tb_reserve((void **)&out->spans, &out->cap, out->n + SCAN_BATCH, sizeof(Span), 256) < 0)
                return SPLIT_NOMEM;
            if (len - pos > TEXT_AHEAD)
                __builtin_prefetch(s + pos + TEXT_AHEAD);
            if ((next = words_batch(s, pos, c->batch_digits, out->spans, &out->n, &retry)) != pos) {
                pos = next;
                continue;
            }
        }
#endif
        if ((k = chain_class_at(c, s, pos, &next)) != 0) {
            /* A run of a lead class, hi characters at most: the word regex splits it as a subject. */
            size_t end = next, chars = 1, after;
            while (end < len && chars < c->hi[k - 1] && chain_class_at(c, s, end, &after) == k) {
                end = after;
                chars++;
            }
            while (pos < end)
                if ((rc = chain_words(self, s, end, &pos, out)) < 0)
                    return rc;
            continue;
        }
        if (pos >= gap_end)
            gap_end = chain_gap_end(c, s, len, pos);
        if ((rc = chain_words(self, s, gap_end, &pos, out)) < 0)
            return rc;
    }
    *at = pos < len ? pos : SPLIT_DONE;
    return 0;
}

static int read_steps(PyObject *arg, SplitStep **steps, Py_ssize_t *nsteps)
{
    /* TextEncoder's `steps`: None, or a sequence of (Pattern, behavior name, invert[, reading]), the
     * reading None, ("run", class, lo, hi) where the pattern is that one-character class repeated lo
     * to hi times (hi 0: no bound), or ("deepseek",) where it is DeepSeek's word regex
     * (`sequence_split.step_reading`). -1 with an exception set; what was read before is left in
     * *steps for the caller to free. */
    PyObject *seq;
    Py_ssize_t i;
    *steps = NULL;
    *nsteps = 0;
    if (arg == Py_None)
        return 0;
    if ((seq = PySequence_Fast(arg, "TextEncoder: steps must be a sequence or None")) == NULL)
        return -1;
    if ((*steps = calloc((size_t)PySequence_Fast_GET_SIZE(seq) + 1, sizeof(SplitStep))) == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory(), -1;
    }
    for (i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *pattern, *reading = Py_None;
        const char *name, *kind, *atom;
        Py_ssize_t lo, hi;
        int invert, b;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "Osp|O:step", &pattern, &name, &invert, &reading) ||
            as_pattern(pattern) == NULL)
            break;
        /* A reading that cannot be built (its table) leaves the step to PCRE2, with the same pieces. */
        if (PyTuple_Check(reading) && PyTuple_GET_SIZE(reading) == 4 &&
            PyArg_ParseTuple(reading, "ssnn:reading", &kind, &atom, &lo, &hi) && strcmp(kind, "run") == 0 &&
            lo >= 1 && hi >= 0 && (hi == 0 || hi >= lo)) {
            (*steps)[i].run = class_bits(atom);
            (*steps)[i].run_lo = (size_t)lo;
            (*steps)[i].run_hi = (size_t)hi;
        } else if (PyTuple_Check(reading) && PyTuple_GET_SIZE(reading) == 1 &&
                   PyArg_ParseTuple(reading, "s:reading", &kind) && strcmp(kind, "deepseek") == 0) {
            (*steps)[i].words = build_word_classes();
        } else if (reading != Py_None) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "TextEncoder: a step's reading must be None, (\"run\", class, "
                                                  "lo >= 1, hi >= lo or 0) or (\"deepseek\",)");
            break;
        }
        for (b = 0; BEHAVIOR_NAMES[b] != NULL && strcmp(BEHAVIOR_NAMES[b], name) != 0; b++)
            ;
        if (BEHAVIOR_NAMES[b] == NULL) {
            PyErr_Format(PyExc_ValueError, "TextEncoder: unknown Split behavior %.100s", name);
            break;
        }
        if (((*steps)[i].matcher = matcher_new((Pattern *)pattern)) == NULL)
            break;
        Py_INCREF(pattern);
        (*steps)[i].pattern = (Pattern *)pattern;
        (*steps)[i].behavior = b;
        (*steps)[i].invert = invert;
        *nsteps = i + 1;
    }
    i = PySequence_Fast_GET_SIZE(seq);
    Py_DECREF(seq);
    return *nsteps == i ? 0 : -1;
}

static void steps_free(SplitStep *steps, Py_ssize_t n)
{
    Py_ssize_t i;
    if (steps == NULL)
        return;
    for (i = 0; i < n; i++) {
        matcher_free(steps[i].matcher);
        Py_XDECREF(steps[i].pattern);
    }
    free(steps);
}

static int read_ids(PyObject *obj, const char *what, int32_t **out, Py_ssize_t *n)
{
    /* A sequence of ids in 0..2**31 - 1 as a new malloc'ed array; -1 with an exception set. */
    PyObject *seq = PySequence_Fast(obj, what);
    Py_ssize_t i;
    if (seq == NULL)
        return -1;
    *n = PySequence_Fast_GET_SIZE(seq);
    if ((*out = malloc(*n ? (size_t)*n * sizeof(int32_t) : 1)) == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < *n; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred())
            break;
        if (v < 0 || v >= ID_LIMIT) {
            PyErr_Format(PyExc_OverflowError, "TextEncoder: id %lld is outside 0..2**31 - 1", v);
            break;
        }
        (*out)[i] = (int32_t)v;
    }
    Py_DECREF(seq);
    if (i < *n) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

static int cache_init(TextEncoder *self);

typedef struct {
    const uint8_t *bytes;               /* a whole token's bytes (the dict's key, kept alive by it) */
    size_t len;
    int32_t id;
} WholeToken;

static int read_whole_tokens(PyObject *whole, WholeToken **out, Py_ssize_t *n)
{
    /* The {token bytes: id} map used when a tokenizer ignores merges for whole-token pieces, read
     * into a malloc'ed array (its bytes the dict's own) so that its table is built without the GIL
     * (`fill_whole`); -1 with an exception set. */
    PyObject *key, *value;
    Py_ssize_t pos = 0, k = 0;
    if (!PyDict_Check(whole)) {
        PyErr_SetString(PyExc_TypeError, "TextEncoder: whole_tokens must be a dict or None");
        return -1;
    }
    *n = PyDict_Size(whole);
    if ((*out = malloc((size_t)(*n ? *n : 1) * sizeof(WholeToken))) == NULL)
        return PyErr_NoMemory(), -1;
    while (k < *n && PyDict_Next(whole, &pos, &key, &value)) {
        long long id;
        if (!PyBytes_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "TextEncoder: whole_tokens keys must be bytes");
            return -1;
        }
        id = PyLong_AsLongLong(value);
        if (id == -1 && PyErr_Occurred())
            return -1;
        if (id < 0 || id >= ID_LIMIT) {
            PyErr_Format(PyExc_OverflowError, "TextEncoder: id %lld is outside 0..2**31 - 1", id);
            return -1;
        }
        (*out)[k].bytes = (const uint8_t *)PyBytes_AS_STRING(key);
        (*out)[k].len = (size_t)PyBytes_GET_SIZE(key);
        (*out)[k].id = (int32_t)id;
        k++;
    }
    *n = k;
    return 0;
}

static int fill_whole(TextEncoder *self, const WholeToken *tokens, Py_ssize_t n)
{
    /* The whole-token map of `tokens` (the first of two equal keys kept); no Python object is
     * touched: built without the GIL. -1 when out of memory. */
    Py_ssize_t k;
    if (piece_cache_init(&self->whole, (size_t)n) < 0)
        return -1;
    self->has_whole = 1;
    for (k = 0; k < n; k++) {
        const uint64_t hash = piece_cache_hash(tokens[k].bytes, tokens[k].len);
        PieceSlot *e = piece_cache_find(&self->whole, tokens[k].bytes, tokens[k].len, hash);
        if (!piece_slot_used(e) &&
            piece_cache_put(&self->whole, e, tokens[k].bytes, tokens[k].len, hash, &tokens[k].id, 1) < 0)
            return -1;
    }
    return 0;
}

static int encoder_build(TextEncoder *self, const int32_t *left, const int32_t *right, const int32_t *merged,
                         Py_ssize_t n, const int32_t *byte_ids, const WholeToken *whole, Py_ssize_t nwhole)
{
    /* The encoder's tables from the merges (rank r joins left[r] and right[r] into merged[r]), the
     * 256 byte ids and the whole tokens (NULL: none); then its empty cache, seeded. Touches no Python
     * object: run without the GIL, since most of it is the first touch of tens of MB (fresh pages
     * cost a VM's host ~1 ms per MB), which a thread building it in the background overlaps with the
     * caller's own work. -1 when out of memory. */
    Py_ssize_t i;
    for (i = 0; i < 256; i++) {
        self->byte_ids[i] = byte_ids[i];
        self->nints = (size_t)byte_ids[i] >= self->nints ? (size_t)byte_ids[i] + 1 : self->nints;
    }
    for (i = 0; i < n; i++)
        self->nints = (size_t)merged[i] >= self->nints ? (size_t)merged[i] + 1 : self->nints;
    if (merge_table_init(&self->table, left, right, merged, n) < 0 ||
        (self->byte_rank = malloc(256 * 256 * sizeof(int32_t))) == NULL ||
        char_start_init(&self->chars, &self->table, left, right, merged, n, self->nints, self->byte_ids) < 0)
        return -1;
    /* Every piece starts as bytes: its first pair ranks come from this 256 KiB table, which stays
     * in a core's cache, instead of the merge table's scattered slots. */
    for (i = 0; i < 256 * 256; i++)
        self->byte_rank[i] = rank_of(&self->table, self->byte_ids[i >> 8], self->byte_ids[i & 255]);
    if (whole != NULL && fill_whole(self, whole, nwhole) < 0)
        return -1;
    return cache_init(self);
}

static int encoder_init(TextEncoder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"pattern", "left", "right", "merged", "byte_ids", "whole_tokens",
                             "cache_size", "steps", "guard", NULL};
    PyObject *pattern, *left_arg, *right_arg, *merged_arg, *byte_ids_arg, *whole = Py_None;
    PyObject *steps = Py_None, *guard = Py_None;
    Py_ssize_t cache_size = 100000, n, nr, nm, nb;
    int32_t *left = NULL, *right = NULL, *merged = NULL, *byte_ids = NULL;
    WholeToken *whole_tokens = NULL;
    Py_ssize_t nwhole = 0;
    int ok = -1, built;

    if (self->pattern != NULL) {
        PyErr_SetString(PyExc_TypeError, "TextEncoder is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|OnOO:TextEncoder", kwlist, &pattern, &left_arg,
                                     &right_arg, &merged_arg, &byte_ids_arg, &whole, &cache_size, &steps,
                                     &guard) ||
        as_pattern(pattern) == NULL)
        return -1;
    if (guard != Py_None && !(PyBytes_Check(guard) && PyBytes_GET_SIZE(guard) == 0x110000 / 8)) {
        PyErr_SetString(PyExc_ValueError, "TextEncoder: guard must be None or 0x110000 / 8 bytes");
        return -1;
    }
    if (read_steps(steps, &self->steps, &self->nsteps) < 0)
        return -1;           /* the steps read so far are freed with the encoder */
    if (self->steps != NULL)
        chain_ready(&self->chain, self->steps, self->nsteps);
    if (guard != Py_None) {
        Py_INCREF(guard);
        self->guard = guard;
    }
    if (read_ids(left_arg, "TextEncoder: left must be a sequence", &left, &n) < 0 ||
        read_ids(right_arg, "TextEncoder: right must be a sequence", &right, &nr) < 0 ||
        read_ids(merged_arg, "TextEncoder: merged must be a sequence", &merged, &nm) < 0 ||
        read_ids(byte_ids_arg, "TextEncoder: byte_ids must be a sequence", &byte_ids, &nb) < 0)
        goto done;
    if (nr != n || nm != n || nb != 256 || n >= NO_RANK) {
        PyErr_SetString(PyExc_ValueError, "TextEncoder: left, right and merged must have one length "
                                          "(below 2**31 - 1) and byte_ids 256 ids");
        goto done;
    }
    if (whole != Py_None && read_whole_tokens(whole, &whole_tokens, &nwhole) < 0)
        goto done;
    self->cache_size = cache_size > 0 ? (size_t)cache_size : 0;
    {
        PyThreadState *saved = PyEval_SaveThread();
        built = encoder_build(self, left, right, merged, n, byte_ids, whole_tokens, nwhole);  /* NULL: no whole tokens */
        PyEval_RestoreThread(saved);
    }
    if (built < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if ((self->matcher = matcher_new((Pattern *)pattern)) == NULL)
        goto done;
    Py_INCREF(pattern);
    self->pattern = (Pattern *)pattern;
    ok = 0;
done:
    free(left);
    free(right);
    free(merged);
    free(byte_ids);
    free(whole_tokens);
    return ok;
}

static void encoder_dealloc(TextEncoder *self)
{
    matcher_free(self->matcher);
    if (self->tables_of == NULL) {
        merge_table_free(&self->table);
        free(self->byte_rank);
        char_start_free(&self->chars);
        piece_cache_free(&self->whole);
    } else {
        free(self->chars.chars);            /* filled as this encoder meets characters: its own */
        Py_DECREF(self->tables_of);
    }
    free(self->rank.ids);
    merge_scratch_free(&self->long_piece);
    piece_cache_free(&self->cache);
    free(self->spans.spans);
    steps_free(self->steps, self->nsteps);
    free(self->next.spans);
    free(self->matches.spans);
    free(self->marked);
    Py_XDECREF(self->guard);
    free(self->utf8);
    free(self->out.ids);
    if (self->ints != NULL) {
        size_t k;
        for (k = 0; k < self->nints; k++)
            Py_XDECREF(self->ints[k]);
        free(self->ints);
    }
    Py_XDECREF(self->pattern);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int cache_seed(TextEncoder *self)
{
    /* Put every whole token into the empty cache, so that one lookup answers both "merged before"
     * and "a token": a piece that is a token (most words) is found by the one probe every piece
     * makes, and no piece probes (or prefetches) a second table. The cache has room for them
     * beside `cache_size` merged pieces. -1 when out of memory (the cache is then left empty and
     * `whole` probed). */
    size_t k;
    self->seeded = 0;
    if (!self->has_whole || !self->cache_size)
        return 0;
    for (k = 0; k <= self->whole.mask; k++) {
        const PieceSlot *w = &self->whole.slots[k];
        uint8_t unpacked[PIECE_KEY_INLINE];
        const uint8_t *key;
        size_t len;
        uint64_t hash;
        if (!piece_slot_used(w))
            continue;
        key = piece_cache_key(&self->whole, w, unpacked);
        len = piece_slot_len(&self->whole, w);
        hash = piece_cache_hash(key, len);
        if (piece_cache_put(&self->cache, piece_cache_find(&self->cache, key, len, hash), key, len, hash,
                            w->ids, 1) < 0) {
            piece_cache_clear(&self->cache);
            return -1;
        }
    }
    self->seeded = 1;
    return 0;
}

static int cache_init(TextEncoder *self)
{
    /* An empty cache (seeded with the whole tokens), room for cache_size merged pieces beside them. */
    size_t room = (self->cache_size ? self->cache_size : 1) + (self->has_whole ? self->whole.used : 0);
    if (piece_cache_init(&self->cache, room) < 0)
        return -1;
    return cache_seed(self);
}

static void cache_reset(TextEncoder *self)
{
    /* Empty the cache of merged pieces, the whole tokens kept (else probed in `whole`). */
    piece_cache_clear(&self->cache);
    (void)cache_seed(self);
}

static int encode_piece(TextEncoder *self, const uint8_t *piece, size_t len, const struct PieceProbe *probe,
                        PieceSlot *missed)
{
    /* Append the ids of one piece (its probe given: piece_cache_hash, and the key words of a short
     * piece) to self->out: from the cache, else by replaying the merges (and caching a short
     * piece). `missed`: NULL, or the empty cache slot the caller's lookup of the piece ended on.
     * -1 when out of memory. */
    PieceSlot *e = missed;
    int32_t *sym;
    Py_ssize_t n;
    size_t i;
    const uint64_t hash = probe->hash;

    if (self->cache_size && e == NULL) {
        e = len <= PIECE_KEY_INLINE ? piece_cache_find_short(&self->cache, probe->key, probe->slot)
                                    : piece_cache_find_long(&self->cache, piece, len, hash);
        if (piece_slot_used(e)) {
            int32_t *to;
            if (ids_reserve(&self->out, e->count) < 0)
                return -1;
            to = self->out.ids + self->out.n;
            if (e->count <= PIECE_IDS_INLINE) {     /* mostly one or two ids: no call to memcpy */
                for (i = 0; i < e->count; i++)
                    to[i] = e->ids[i];
            } else {
                tb_copy(to, piece_cache_ids(&self->cache, e), e->count * sizeof(int32_t));
            }
            self->out.n += e->count;
            return 0;
        }
    }
    if (ids_reserve(&self->out, len) < 0)
        return -1;
    sym = self->out.ids + self->out.n;
    n = -1;
    if (self->has_whole && !self->seeded) {
        const PieceSlot *w = piece_cache_find(&self->whole, piece, len, hash);
        if (piece_slot_used(w)) {
            sym[0] = w->ids[0];
            n = 1;
        }
    }
    if (n < 0) {
        int32_t *rank;
        self->rank.n = 0;
        if (ids_reserve(&self->rank, len) < 0)
            return -1;
        rank = self->rank.ids;
        if (self->chars.chars != NULL && !tb_ascii(piece, len)) {
            n = (Py_ssize_t)char_start_symbols(&self->chars, &self->table, self->byte_ids, self->byte_rank, piece,
                                               len, sym, rank);
        } else {
            for (i = 0; i < len; i++)
                sym[i] = self->byte_ids[piece[i]];
            for (i = 0; i + 1 < len; i++)
                rank[i] = self->byte_rank[(size_t)piece[i] << 8 | piece[i + 1]];
            n = (Py_ssize_t)len;
        }
        if ((n = merge_symbols_ranked(&self->table, sym, rank, n, &self->long_piece)) < 0)
            return -1;
    }
    self->out.n += (size_t)n;
    if (e == NULL || len > MAX_CACHED_BYTES)
        return 0;
    if (piece_cache_full(&self->cache) || self->cache.keys_len + len > CACHE_KEY_BYTES ||
        self->cache.ids_len + (size_t)n > CACHE_IDS) {
        /* Full: start over. Cheaper than tracking age, and a hot piece is back after one miss. */
        cache_reset(self);
        e = piece_cache_find(&self->cache, piece, len, hash);
        if (piece_slot_used(e))
            return 0;           /* a whole token, seeded again */
    }
    return piece_cache_put(&self->cache, e, piece, len, hash, sym, (size_t)n);
}

static int split_steps(TextEncoder *self, const uint8_t *s, size_t len)
{
    /* self->spans = the pieces of text s[0..len) after every step, in order (`hf_components.pre_tokenizer`). */
    Py_ssize_t i;
    size_t k;
    int rc;
    self->spans.n = 0;
    if (len > 0 && spans_push(&self->spans, 0, len) < 0)
        return SPLIT_NOMEM;
    for (i = 0; i < self->nsteps; i++) {
        Spans done;
        self->next.n = 0;
        for (k = 0; k < self->spans.n; k++)
            if ((rc = step_pieces(&self->steps[i], s, self->spans.spans[k], &self->matches, &self->marked,
                                  &self->marked_cap, &self->next)) < 0)
                return rc;
        done = self->spans;
        self->spans = self->next;
        self->next = done;
    }
    return 0;
}

static inline void probe_piece(const PieceCache *cache, const uint8_t *s, size_t len, const Span *span,
                               struct PieceProbe *probe)
{
    /* The key words (a short piece) and hash of the piece `span` of text s[0..len), and its first
     * slot in `cache`. */
    const uint8_t *piece = s + span->start;
    size_t n = span->end - span->start;
    if (n <= PIECE_KEY_INLINE) {
        if (len - span->start >= 16)     /* a piece 16 bytes or more before the text's end */
            piece_short_key_read16(piece, n, probe->key);
        else
            piece_short_key(piece, n, probe->key);
        probe->hash = piece_short_hash(probe->key);
    } else {
        probe->hash = tb_hash_bytes(piece, n);
    }
    probe->slot = piece_cache_index(cache, probe->hash);
}

/* Probes are made FETCH_FAR pieces ahead of the piece encoded, into a ring of this many (a power of
 * two above FETCH_FAR): a few kilobytes that stay in the core's cache, where an array of every
 * piece's probe grew with the text (32 bytes a piece) and faulted in fresh pages on an encoder's
 * first long texts. */
#define PROBE_RING 64
typedef char probe_ring_holds_fetch_far[PROBE_RING > FETCH_FAR && !(PROBE_RING & (PROBE_RING - 1)) ? 1 : -1];

static int encode_spans(TextEncoder *self, const uint8_t *s, size_t len)
{
    /* Append the ids of the pieces self->spans of text s[0..len) to self->out. */
    size_t i;
    size_t count;
    const Span *spans;
    PieceSlot *slots;           /* the cache's: they never move (a full cache is emptied in place) */
    struct PieceProbe ring[PROBE_RING];
    spans = self->spans.spans;
    count = self->spans.n;
    slots = self->cache.slots;
    /* Each piece's key and hash FETCH_FAR pieces ahead, so that the cache slot of a piece a few
     * ahead is fetched from memory while this one is encoded: the lookups are mostly misses in the
     * core's caches, and waiting for them one at a time was a third of the encoder's time. */
    for (i = 0; i < count && i < FETCH_FAR; i++) {
        probe_piece(&self->cache, s, len, &spans[i], &ring[i]);
        __builtin_prefetch(&slots[ring[i].slot]);
    }
    if (self->cache_size && !(self->has_whole && !self->seeded)) {
        /* The common case: one table to fetch ahead from, and a short piece found in it with at
         * most PIECE_IDS_INLINE ids (nearly every piece) appended here, its inline ids copied
         * whole rather than `count` of them, with no check of the room left: out has room for
         * every piece's, reserved before the loop and after each piece encode_piece appends. The
         * output's end and the table are kept in locals (encode_piece, which changes the output,
         * stores and reloads it): stores through `self` would make the compiler reload them for
         * every piece. The table's slots and size never change (a full cache is emptied in place). */
        const size_t mask = self->cache.mask;
        int32_t *ids;
        size_t n;
        if (ids_reserve(&self->out, PIECE_IDS_INLINE * count) < 0)
            return SPLIT_NOMEM;
        ids = self->out.ids;
        n = self->out.n;
        for (i = 0; i < count; i++) {
            const struct PieceProbe *probe = &ring[i % PROBE_RING];
            PieceSlot *e = NULL;        /* a short piece's slot: its ids, or where they go */
            if (i + FETCH_FAR < count) {
                struct PieceProbe *far = &ring[(i + FETCH_FAR) % PROBE_RING];
                probe_piece(&self->cache, s, len, &spans[i + FETCH_FAR], far);
                __builtin_prefetch(&slots[far->slot]);
            }
            if (spans[i].end - spans[i].start <= PIECE_KEY_INLINE) {
                /* piece_cache_find_short, with the table in locals */
                e = &slots[probe->slot];
                while (!(e->key[0] == probe->key[0] && e->key[1] == probe->key[1]) && e->key[1] != 0)
                    e = &slots[(size_t)(e - slots + 1) & mask];
                if (piece_slot_used(e) && e->count <= PIECE_IDS_INLINE) {
                    ids[n] = e->ids[0];
                    ids[n + 1] = e->ids[1];
                    ids[n + 2] = e->ids[2];
                    n += e->count;
                    continue;
                }
                if (piece_slot_used(e))
                    e = NULL;           /* found, with more ids than a slot holds: encode_piece copies them */
            }
            self->out.n = n;
            if (encode_piece(self, s + spans[i].start, spans[i].end - spans[i].start, probe, e) < 0 ||
                ids_reserve(&self->out, PIECE_IDS_INLINE * (count - i)) < 0)
                return SPLIT_NOMEM;
            ids = self->out.ids;
            n = self->out.n;
        }
        self->out.n = n;
        return 0;
    }
    for (i = 0; i < count; i++) {
        if (i + FETCH_FAR < count)
            probe_piece(&self->cache, s, len, &spans[i + FETCH_FAR], &ring[(i + FETCH_FAR) % PROBE_RING]);
        if (i + PREFETCH_AHEAD < count) {
            const struct PieceProbe *ahead = &ring[(i + PREFETCH_AHEAD) % PROBE_RING];
            if (self->cache_size)
                __builtin_prefetch(&slots[ahead->slot]);
            if (self->has_whole && !self->seeded)
                __builtin_prefetch(piece_cache_line(&self->whole, ahead->hash));
        }
        if (encode_piece(self, s + spans[i].start, spans[i].end - spans[i].start, &ring[i % PROBE_RING], NULL) < 0)
            return SPLIT_NOMEM;
    }
    return 0;
}

/* The pieces encode_text splits off at a time: their spans (16 bytes each) stay in a core's cache
 * between the split that writes them and the lookups that read them, where a whole text's (7 MB
 * for 2 MB of prose) went out to memory and back and pushed the cache's and the merges' lines out
 * on the way. */
#define SPLIT_PART 2048

static int encode_text(TextEncoder *self, const uint8_t *s, size_t len)
{
    /* self->out = the ids of text s[0..len). Touches no Python object. */
    size_t at = 0;
    int rc;
    self->out.n = 0;
    if (self->chain.on) {
        do {
            self->spans.n = 0;
            if ((rc = chain_pieces(self, s, len, &at, SPLIT_PART)) < 0 || (rc = encode_spans(self, s, len)) < 0)
                return rc;
        } while (at != SPLIT_DONE);
        return 0;
    }
    if (self->steps != NULL)
        return (rc = split_steps(self, s, len)) < 0 ? rc : encode_spans(self, s, len);
    do {
        if ((rc = split_text_part(self->pattern, self->matcher, s, len, 1, &self->spans, &at, SPLIT_PART)) < 0 ||
            (rc = encode_spans(self, s, len)) < 0)
            return rc;
    } while (at != SPLIT_DONE);
    return 0;
}

enum { TEXT_GUARDED = 1, TEXT_SURROGATE = 2, TEXT_NOT_UTF8 = 3 };

/* Eight characters at data[i..i + 8) (i + 8 <= the str's length) of a str's `kind` written to out
 * as their bytes when all eight are ASCII: 1, else 0 and nothing written. Most characters of a
 * non-ASCII text in a Latin script are ASCII, and their UTF-8 is their low bytes: one test and one
 * store for eight characters instead of a branch and a store for each. Little-endian only (the
 * data's byte order is the machine's); elsewhere every character goes one by one. */
static inline int ascii_eight(int kind, const void *data, size_t i, uint8_t *out)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v[4];
    int k;
    if (kind == PyUnicode_1BYTE_KIND) {
        memcpy(v, (const Py_UCS1 *)data + i, 8);
        if (v[0] & 0x8080808080808080ull)
            return 0;
        memcpy(out, v, 8);
        return 1;
    }
    if (kind == PyUnicode_2BYTE_KIND) {
        memcpy(v, (const Py_UCS2 *)data + i, 16);
        if ((v[0] | v[1]) & 0xFF80FF80FF80FF80ull)
            return 0;
        for (k = 0; k < 2; k++) {
            /* Four 16-bit characters below 0x80 to their low bytes, c0 | c1 << 8 | c2 << 16 | c3 << 24. */
            uint64_t x = (v[k] | v[k] >> 8) & 0x0000FFFF0000FFFFull;
            uint32_t four = (uint32_t)(x | x >> 16);
            memcpy(out + 4 * k, &four, 4);
        }
        return 1;
    }
    memcpy(v, (const Py_UCS4 *)data + i, 32);
    if ((v[0] | v[1] | v[2] | v[3]) & 0xFFFFFF80FFFFFF80ull)
        return 0;
    for (k = 0; k < 4; k++) {
        uint16_t two = (uint16_t)(v[k] | v[k] >> 24);      /* two 32-bit characters to their low bytes */
        memcpy(out + 2 * k, &two, 2);
    }
    return 1;
#else
    (void)kind, (void)data, (void)i, (void)out;
    return 0;
#endif
}

static int text_utf8(TextEncoder *self, int kind, const void *data, size_t n, const uint8_t *guard,
                     size_t *len)
{
    /* A non-ASCII str's data (`kind`, n characters) as UTF-8 in self->utf8, its length in *len:
     * 0, TEXT_GUARDED for a code point with its bit set in `guard` (NULL: none), TEXT_SURROGATE for
     * a lone surrogate (not UTF-8), SPLIT_NOMEM. It touches no Python object: it runs without the
     * GIL, where PyUnicode_AsUTF8AndSize held it for the whole conversion (and kept a copy of the
     * UTF-8 with the str for as long as the str lived). */
    size_t i, w = 0, need = n * (kind == PyUnicode_1BYTE_KIND ? 2 : kind == PyUnicode_2BYTE_KIND ? 3 : 4);
    uint8_t *out;
    if (need > self->utf8_cap) {
        uint8_t *grown = realloc(self->utf8, need);
        if (grown == NULL)
            return SPLIT_NOMEM;
        self->utf8 = grown;
        self->utf8_cap = need;
    }
    out = self->utf8;
    /* One loop per kind, so that reading a character is one load; runs of ASCII eight characters
     * at a time (ascii_eight). */
#define TEXT_UTF8_LOOP(CHAR)                                                                       \
    for (i = 0; i < n; i++) {                                                                      \
        Py_UCS4 c;                                                                                 \
        while (n - i >= 8 && ascii_eight(kind, data, i, out + w)) {                                \
            i += 8;                                                                                \
            w += 8;                                                                                \
        }                                                                                          \
        if (i >= n)                                                                                \
            break;                                                                                 \
        c = ((const CHAR *)data)[i];                                                               \
        if (c < 0x80) {                                                                            \
            out[w++] = (uint8_t)c;                                                                 \
            continue;                                                                              \
        }                                                                                          \
        if (guard != NULL && (guard[c >> 3] >> (c & 7) & 1))                                       \
            return TEXT_GUARDED;                                                                   \
        if (c < 0x800) {                                                                           \
            out[w++] = (uint8_t)(0xC0 | c >> 6);                                                   \
            out[w++] = (uint8_t)(0x80 | (c & 0x3F));                                               \
        } else if (c < 0x10000) {                                                                  \
            if (c >= 0xD800 && c <= 0xDFFF)                                                        \
                return TEXT_SURROGATE;                                                             \
            out[w++] = (uint8_t)(0xE0 | c >> 12);                                                  \
            out[w++] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));                                        \
            out[w++] = (uint8_t)(0x80 | (c & 0x3F));                                               \
        } else {                                                                                   \
            out[w++] = (uint8_t)(0xF0 | c >> 18);                                                  \
            out[w++] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));                                       \
            out[w++] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));                                       \
            out[w++] = (uint8_t)(0x80 | (c & 0x3F));                                               \
        }                                                                                          \
    }
    if (kind == PyUnicode_1BYTE_KIND) {
        TEXT_UTF8_LOOP(Py_UCS1)
    } else if (kind == PyUnicode_2BYTE_KIND) {
        TEXT_UTF8_LOOP(Py_UCS2)
    } else {
        TEXT_UTF8_LOOP(Py_UCS4)
    }
#undef TEXT_UTF8_LOOP
    *len = w;
    return 0;
}

static const uint8_t *kept_utf8(PyObject *text, size_t *len)
{
    /* The UTF-8 CPython keeps with a non-ASCII str once asked for it (PyUnicode_AsUTF8AndSize, how
     * most C extensions read a str: a text another engine read first has it), or NULL: then the
     * encoder makes its own (text_utf8), and leaves none with the str. A str that has it holds no
     * lone surrogate. Read with the GIL held; it lives as long as the str. The fields are those of
     * CPython's compact str up to 3.14; a later CPython is not assumed to keep them (NULL). */
#if PY_VERSION_HEX < 0x030F0000
    if (PyUnicode_CheckExact(text) && PyUnicode_IS_COMPACT(text) && !PyUnicode_IS_ASCII(text)) {
        const PyCompactUnicodeObject *compact = (const PyCompactUnicodeObject *)text;
        if (compact->utf8 != NULL) {
            *len = (size_t)compact->utf8_length;
            return (const uint8_t *)compact->utf8;
        }
    }
#else
    (void)text;
    (void)len;
#endif
    return NULL;
}

static int text_source(TextEncoder *self, int kind, const void *data, size_t n, const uint8_t *kept, size_t kept_len,
                       const uint8_t *guard, const uint8_t **s, size_t *len)
{
    /* The UTF-8 to encode of a str (`kind` 0: ASCII, data its own UTF-8; `kept`: its kept_utf8 or
     * NULL) in *s and *len: its own bytes, the UTF-8 kept with it (checked against the guard), or
     * made in self->utf8. 0 or text_utf8's codes. */
    if (kind == 0) {
        *s = data;
        *len = n;
        return 0;
    }
    if (kept != NULL) {
        *s = kept;
        *len = kept_len;
        return guard != NULL && guarded_code_point_in(kind, data, n, guard) ? TEXT_GUARDED : 0;
    }
    {
        int rc = text_utf8(self, kind, data, n, guard, len);
        *s = self->utf8;            /* after text_utf8, which may have moved it */
        return rc;
    }
}

static int encoder_free(TextEncoder *self)
{
    /* 0 when the encoder may take a text: initialised, not busy; -1 with an exception set. */
    if (self->pattern == NULL) {
        PyErr_SetString(PyExc_TypeError, "TextEncoder is not initialised");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(Fallback, "this TextEncoder is busy with another text");
        return -1;
    }
    return 0;
}

static int encoder_free_for(TextEncoder *self, PyObject *text)
{
    /* 0 when the encoder may take `text`: initialised, not busy, a str; -1 with an exception set. */
    if (encoder_free(self) < 0)
        return -1;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "expected str, got %.100s", Py_TYPE(text)->tp_name);
        return -1;
    }
    return 0;
}

static int text_failed(int rc)
{
    /* -1 with the exception for a failed text_utf8 or encode_text (rc), set. */
    if (rc == TEXT_GUARDED) {
        PyErr_SetString(Fallback, "the text holds a character the split patterns' engines classify differently");
        return -1;
    }
    if (rc == TEXT_SURROGATE) {
        PyErr_SetString(Fallback, "the text holds a lone surrogate, which is not UTF-8");
        return -1;
    }
    return split_failed(rc);
}

static int encoder_run(TextEncoder *self, PyObject *text)
{
    /* self->out = the ids of text, the encoder left busy: the caller reads them out, then calls
     * encoder_done. Python code may run while it reads (an allocation may start the garbage
     * collector, whose callbacks and finalizers may let another thread in), and an encode from it
     * must find the encoder busy rather than overwrite self->out. -1 with an exception set
     * (Fallback among them: the encoder busy, a character its split patterns' engines classify
     * differently, a lone surrogate), the encoder not busy. */
    const uint8_t *s = NULL, *guard = NULL, *kept = NULL;
    const void *data;
    size_t len = 0, kept_len = 0, n;
    int kind = 0, rc;

    if (encoder_free_for(self, text) < 0)
        return -1;
    data = PyUnicode_DATA(text);
    n = (size_t)PyUnicode_GET_LENGTH(text);
    if (!PyUnicode_IS_ASCII(text)) {     /* ASCII: its own bytes are its UTF-8 (and no guarded code point is ASCII) */
        kind = PyUnicode_KIND(text);
        guard = self->guard != NULL ? (const uint8_t *)PyBytes_AS_STRING(self->guard) : NULL;
        kept = kept_utf8(text, &kept_len);
    }
    self->busy = 1;
    /* Only this encoder's own buffers (and the str, immutable, held by the caller) are touched
     * while encoding: let other threads run. */
    Py_BEGIN_ALLOW_THREADS
    rc = text_source(self, kind, data, n, kept, kept_len, guard, &s, &len);
    if (rc == 0)
        rc = encode_text(self, s, len);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        if (rc == SPLIT_NOMEM)      /* the cache may hold a half-made entry: drop it all */
            cache_reset(self);
        self->busy = 0;
        return text_failed(rc);
    }
    return 0;
}

static const uint8_t *encoder_take(TextEncoder *self, PyObject *text, Py_ssize_t *len)
{
    /* encoder_run's start with the GIL held, for sequence_pieces: the UTF-8 of text (its own bytes,
     * the UTF-8 kept with it, or the encoder's scratch), the encoder made busy; NULL with an
     * exception set, not busy. */
    const uint8_t *s, *kept = NULL;
    size_t got, kept_len = 0;
    int rc, kind = 0;
    if (encoder_free_for(self, text) < 0)
        return NULL;
    if (!PyUnicode_IS_ASCII(text)) {
        kind = PyUnicode_KIND(text);
        kept = kept_utf8(text, &kept_len);
    }
    rc = text_source(self, kind, PyUnicode_DATA(text), (size_t)PyUnicode_GET_LENGTH(text), kept, kept_len,
                     self->guard != NULL ? (const uint8_t *)PyBytes_AS_STRING(self->guard) : NULL, &s, &got);
    if (rc != 0) {
        text_failed(rc);
        return NULL;
    }
    *len = (Py_ssize_t)got;
    self->busy = 1;
    return s;
}

static PyObject *encoder_done(TextEncoder *self, PyObject *result)
{
    /* What encoder_run's caller made of self->out (NULL with an exception set), the encoder free again. */
    self->busy = 0;
    return result;
}

static PyObject *encoder_int(TextEncoder *self, size_t id)
{
    /* A new reference to the int of `id`, made on its first use (NULL with an exception set). */
    PyObject *v;
    if (self->ints == NULL || id >= self->nints)
        return PyLong_FromSize_t(id);
    if ((v = self->ints[id]) == NULL && (v = self->ints[id] = PyLong_FromSize_t(id)) == NULL)
        return NULL;
    Py_INCREF(v);
    return v;
}

static PyObject *encoder_encode(TextEncoder *self, PyObject *text)
{
    /* The ids as a list. Each id's int is made once and shared by every list after: making a new
     * int per id was a quarter of encoding Han text. */
    PyObject *out, **items, **ints;
    const int32_t *ids;
    size_t i, n, nints;
    if (encoder_run(self, text) < 0)
        return NULL;
    if ((out = PyList_New((Py_ssize_t)self->out.n)) == NULL)
        return encoder_done(self, NULL);
    if (self->ints == NULL && self->nints > 0)
        self->ints = calloc(self->nints, sizeof(PyObject *));     /* NULL: a new int per id, below */
    /* Read into locals: the calls that make an int would make the compiler read them again. */
    items = ((PyListObject *)out)->ob_item;
    ints = self->ints;
    nints = ints != NULL ? self->nints : 0;
    ids = self->out.ids;
    n = self->out.n;
    for (i = 0; i < n; i++) {
        size_t id = (size_t)ids[i];
        PyObject *v;
        if (i + INTS_AHEAD < n) {
            /* An id's place in `ints` and then its int, whose count is written, fetched ahead: a
             * rarer id's are in no core's cache, and a list waited on each in turn. */
            size_t far = (size_t)ids[i + INTS_AHEAD], near = (size_t)ids[i + INTS_AHEAD / 2];
            if (far < nints)
                __builtin_prefetch(&ints[far]);
            if (near < nints && ints[near] != NULL)
                __builtin_prefetch(ints[near], 1);
        }
        if (id < nints && (v = ints[id]) != NULL) {
            Py_INCREF(v);
        } else if ((v = encoder_int(self, id)) == NULL) {
            Py_DECREF(out);
            return encoder_done(self, NULL);
        }
        items[i] = v;
    }
    return encoder_done(self, out);
}

static PyObject *encoder_encode_bytes(TextEncoder *self, PyObject *text)
{
    /* The ids as native 32-bit unsigned integers, one bytes object: no Python int per id. */
    if (encoder_run(self, text) < 0)
        return NULL;
    return encoder_done(self, PyBytes_FromStringAndSize((const char *)self->out.ids,
                                                        (Py_ssize_t)(self->out.n * sizeof(int32_t))));
}

struct TextRef {
    PyObject *text;              /* a reference of our own: the list may change while the GIL is out */
    const void *data;            /* the str's characters */
    size_t n;                    /* its characters */
    int kind;                    /* 0: ASCII (data is its UTF-8); else its PyUnicode kind */
    const uint8_t *kept;         /* its kept_utf8, or NULL */
    size_t kept_len;
};

/* The measures encode_measure_texts gives each text: its UTF-8 bytes, its words, its digit runs. */
#define TEXT_MEASURES (2 + DIGIT_RUN_LENGTHS)

/* Texts given as UTF-8: text k is data[offsets[k]..offsets[k + 1]). */
typedef struct {
    const uint8_t *data;
    const int64_t *offsets;
    size_t n;
} Utf8Texts;

static int utf8_text_source(const Utf8Texts *texts, size_t k, const uint8_t *guard, uint32_t guard_lowest,
                            const uint8_t **s, size_t *len)
{
    /* Text k of `texts` in *s and *len: 0, TEXT_NOT_UTF8 when it is not UTF-8 as Python's strict
     * decoder takes it (the splitters read valid UTF-8 only), TEXT_GUARDED as text_utf8 judges a str. */
    *s = texts->data + texts->offsets[k];
    *len = (size_t)(texts->offsets[k + 1] - texts->offsets[k]);
    if (!utf8_valid(*s, *len))
        return TEXT_NOT_UTF8;
    return guard != NULL && guarded_utf8_in(*s, *len, guard, guard_lowest) ? TEXT_GUARDED : 0;
}

static PyObject *encode_texts(TextEncoder *self, PyObject *texts, const Utf8Texts *utf8, const Separators *sep)
{
    /* (ids, counts) for a list of str, or for `utf8` (texts NULL): every text's ids, one after the
     * other, as native uint32 values in one bytes object, and each text's count of them as native
     * int64 values, -1 for a text that must take the `regex` path (encode would raise Fallback for
     * it: the caller encodes it apart; and a text of `utf8` that is not UTF-8). The GIL is dropped
     * once for the whole list: a short record was a hand-over of the GIL each, between its thread
     * and the one reading the shard. With `sep`, a third item: each text's TEXT_MEASURES int64
     * (`measure` over the UTF-8 it was encoded from, while it is in the cache), the first -1 for a
     * text handed back. */
    struct TextRef *refs = NULL;
    uint32_t *ids = NULL;
    int64_t *counts = NULL, *measures = NULL;
    size_t cap = 0, total = 0, k, n, held = 0;
    const uint8_t *guard;
    uint32_t guard_lowest = 0x110000;
    int rc = 0;
    PyObject *result = NULL, *ids_bytes = NULL, *counts_bytes = NULL, *measures_bytes = NULL;

    if (utf8 == NULL && !PyList_CheckExact(texts)) {
        PyErr_SetString(PyExc_TypeError, "encode_texts_bytes: expected a list of str");
        return NULL;
    }
    if (encoder_free(self) < 0)
        return NULL;
    n = utf8 != NULL ? utf8->n : (size_t)PyList_GET_SIZE(texts);
    if ((refs = malloc((n ? n : 1) * sizeof(*refs))) == NULL || (counts = malloc((n ? n : 1) * sizeof(*counts))) == NULL ||
        (sep != NULL && (measures = calloc((n ? n : 1) * TEXT_MEASURES, sizeof(int64_t))) == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    for (k = 0; k < n && utf8 == NULL; k++) {
        PyObject *text = PyList_GET_ITEM(texts, (Py_ssize_t)k);
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "expected str, got %.100s", Py_TYPE(text)->tp_name);
            goto done;
        }
        refs[k].text = Py_NewRef(text);
        held = k + 1;
        refs[k].data = PyUnicode_DATA(text);
        refs[k].n = (size_t)PyUnicode_GET_LENGTH(text);
        refs[k].kind = PyUnicode_IS_ASCII(text) ? 0 : PyUnicode_KIND(text);
        refs[k].kept = refs[k].kind ? kept_utf8(text, &refs[k].kept_len) : NULL;
    }
    /* The ids go straight into the bytes object handed back, made before the GIL is dropped with
     * room for as many ids as the texts have UTF-8 bytes (a byte-level token is at least one byte)
     * and cut to its size after: a buffer of their own, copied into a bytes made after, would copy
     * every id once more with the GIL held. The bytes are counted (`str_utf8_size`), not bounded by
     * the str's kind: 3 bytes a character for a mostly-ASCII str with one character beyond U+00FF
     * is room for 12 times its ids, which the heap keeps once the object is cut to size. */
    {
        size_t bound = utf8 != NULL ? (size_t)(utf8->offsets[n] - utf8->offsets[0]) : 0;
        for (k = 0; k < n && utf8 == NULL; k++)
            bound += refs[k].kind == 0 ? refs[k].n
                     : refs[k].kept != NULL ? refs[k].kept_len : str_utf8_size(refs[k].kind, refs[k].data, refs[k].n);
        if (bound > 0) {
            if (bound > (size_t)PY_SSIZE_T_MAX / sizeof(uint32_t)) {
                PyErr_NoMemory();
                goto done;
            }
            if ((ids_bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(bound * sizeof(uint32_t)))) == NULL)
                goto done;
            cap = bound;
        }
    }
    guard = self->guard != NULL ? (const uint8_t *)PyBytes_AS_STRING(self->guard) : NULL;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    if (utf8 != NULL && guard != NULL)
        guard_lowest = lowest_code_point_in(guard, 0x110000 / 8);
    for (k = 0; k < n && rc == 0; k++) {
        size_t len;
        const uint8_t *s;
        int got = utf8 != NULL ? utf8_text_source(utf8, k, guard, guard_lowest, &s, &len)
                               : text_source(self, refs[k].kind, refs[k].data, refs[k].n, refs[k].kept, refs[k].kept_len,
                                             guard, &s, &len);
        if (got == 0)
            got = encode_text(self, s, len);
        if (got == SPLIT_NOMEM) {
            rc = SPLIT_NOMEM;
            break;
        }
        if (got != 0) {                  /* guarded, a lone surrogate, not UTF-8, an empty match, a limit */
            counts[k] = -1;
            if (measures != NULL)
                measures[k * TEXT_MEASURES] = -1;
            continue;
        }
        counts[k] = (int64_t)self->out.n;
        if (measures != NULL) {
            Measured m = {s, len, 0, {0}};
            measure(sep, &m);
            measures[k * TEXT_MEASURES] = (int64_t)len;
            measures[k * TEXT_MEASURES + 1] = m.words;
            memcpy(measures + k * TEXT_MEASURES + 2, m.runs, sizeof(m.runs));
        }
        if (self->out.n == 0)            /* an empty text: nothing to copy (and no buffer yet, maybe) */
            continue;
        if (total + self->out.n > cap) {
            /* More ids than UTF-8 bytes (no byte-level vocabulary gives that; should one): the ids
             * go on in a buffer of their own, those already in the bytes object copied there first. */
            size_t want = (total + self->out.n) * 2 + 1024;
            uint32_t *grown = realloc(ids, want * sizeof(uint32_t));
            if (grown == NULL) {
                rc = SPLIT_NOMEM;
                break;
            }
            if (ids == NULL && total > 0)
                memcpy(grown, PyBytes_AS_STRING(ids_bytes), total * sizeof(uint32_t));
            ids = grown;
            cap = want;
        }
        memcpy((ids != NULL ? ids : (uint32_t *)PyBytes_AS_STRING(ids_bytes)) + total, self->out.ids,
               self->out.n * sizeof(uint32_t));
        total += self->out.n;
    }
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc == SPLIT_NOMEM) {
        cache_reset(self);               /* the cache may hold a half-made entry: drop it all */
        PyErr_NoMemory();
        goto done;
    }
    if (ids != NULL) {                   /* the ids outgrew the bytes object: a new one of the buffer */
        Py_XDECREF(ids_bytes);
        ids_bytes = PyBytes_FromStringAndSize((const char *)ids, (Py_ssize_t)(total * sizeof(uint32_t)));
    } else if (ids_bytes == NULL) {     /* no text had a byte */
        ids_bytes = PyBytes_FromStringAndSize(NULL, 0);
    } else if (PyBytes_GET_SIZE(ids_bytes) != (Py_ssize_t)(total * sizeof(uint32_t))) {
        _PyBytes_Resize(&ids_bytes, (Py_ssize_t)(total * sizeof(uint32_t)));     /* NULL if it fails */
    }
    if (ids_bytes == NULL ||
        (counts_bytes = PyBytes_FromStringAndSize((const char *)counts, (Py_ssize_t)(n * sizeof(int64_t)))) == NULL)
        goto done;
    if (measures == NULL)
        result = PyTuple_Pack(2, ids_bytes, counts_bytes);
    else if ((measures_bytes = PyBytes_FromStringAndSize((const char *)measures,
                                                         (Py_ssize_t)(n * TEXT_MEASURES * sizeof(int64_t)))) != NULL)
        result = PyTuple_Pack(3, ids_bytes, counts_bytes, measures_bytes);
done:
    Py_XDECREF(ids_bytes);
    Py_XDECREF(counts_bytes);
    Py_XDECREF(measures_bytes);
    for (k = 0; k < held; k++)
        Py_DECREF(refs[k].text);
    free(refs);
    free(ids);
    free(counts);
    free(measures);
    return result;
}

static PyObject *encoder_encode_texts_bytes(TextEncoder *self, PyObject *texts)
{
    return encode_texts(self, texts, NULL, NULL);
}

static PyObject *encoder_encode_measure_texts(TextEncoder *self, PyObject *args)
{
    PyObject *texts, *wide;
    Py_buffer table;
    Separators sep;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "Oy*O:encode_measure_texts", &texts, &table, &wide))
        return NULL;
    if (separators_from(&sep, table.buf, table.len, wide, "encode_measure_texts") == 0)
        result = encode_texts(self, texts, NULL, &sep);
    PyBuffer_Release(&table);
    return result;
}

static PyObject *encoder_encode_measure_utf8(TextEncoder *self, PyObject *args)
{
    /* encode_measure_texts of texts given as UTF-8: one buffer of their bytes and int64 offsets, text
     * k data[offsets[k]:offsets[k + 1]] (the offsets ascending, within data). No str is made or read:
     * a reader that holds its texts' UTF-8 (a JSONL line's, an Arrow column's) hands it over as it is. */
    Py_buffer data, offsets, table;
    PyObject *wide, *result = NULL;
    Separators sep;
    Utf8Texts utf8;
    size_t k, n;
    if (!PyArg_ParseTuple(args, "y*y*y*O:encode_measure_utf8", &data, &offsets, &table, &wide))
        return NULL;
    n = (size_t)offsets.len / sizeof(int64_t);
    utf8.data = data.buf;
    utf8.offsets = offsets.buf;
    utf8.n = n > 0 ? n - 1 : 0;
    if (offsets.len % (Py_ssize_t)sizeof(int64_t) != 0 || n == 0 || ((uintptr_t)offsets.buf & 7) != 0) {
        PyErr_SetString(PyExc_ValueError, "encode_measure_utf8: offsets must be aligned int64, one more than the texts");
        goto done;
    }
    for (k = 0; k < n; k++)
        if (utf8.offsets[k] < (k ? utf8.offsets[k - 1] : 0) || utf8.offsets[k] > (int64_t)data.len) {
            PyErr_SetString(PyExc_ValueError, "encode_measure_utf8: offsets must ascend from 0 or above and stay within data");
            goto done;
        }
    if (separators_from(&sep, table.buf, table.len, wide, "encode_measure_utf8") == 0)
        result = encode_texts(self, NULL, &utf8, &sep);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&table);
    return result;
}

static PyObject *encoder_fork(TextEncoder *self, PyObject *Py_UNUSED(ignored))
{
    /* A new encoder on this one's tables, shared read-only, with its own cache, scratch and
     * character entries: what another thread encodes with, side by side, at the cost of a cache
     * instead of a build (~100 ms and ~40 MB with 200k ids). */
    TextEncoder *fork;
    if (self->pattern == NULL) {
        PyErr_SetString(PyExc_TypeError, "TextEncoder is not initialised");
        return NULL;
    }
    if ((fork = (TextEncoder *)Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0)) == NULL)
        return NULL;
    fork->tables_of = self->tables_of != NULL ? self->tables_of : (PyObject *)self;
    Py_INCREF(fork->tables_of);
    fork->table = self->table;
    memcpy(fork->byte_ids, self->byte_ids, sizeof(self->byte_ids));
    fork->byte_rank = self->byte_rank;
    fork->chars = self->chars;
    fork->chars.chars = NULL;
    fork->whole = self->whole;
    fork->has_whole = self->has_whole;
    fork->cache_size = self->cache_size;
    fork->nints = self->nints;
    {
        /* Its own character entries and cache (seeded): tens of MB touched first, without the GIL. */
        PyThreadState *saved = PyEval_SaveThread();
        int failed = (self->chars.chars != NULL && (fork->chars.chars = calloc(CHAR_LIMIT, sizeof(CharEntry))) == NULL) ||
                     cache_init(fork) < 0;
        PyEval_RestoreThread(saved);
        if (failed) {
            Py_DECREF(fork);
            return PyErr_NoMemory();
        }
    }
    if ((fork->matcher = matcher_new(self->pattern)) == NULL) {
        Py_DECREF(fork);
        return NULL;
    }
    if (self->steps != NULL) {
        Py_ssize_t i;
        if ((fork->steps = calloc((size_t)self->nsteps + 1, sizeof(SplitStep))) == NULL) {
            Py_DECREF(fork);
            return PyErr_NoMemory();
        }
        for (; fork->nsteps < self->nsteps; fork->nsteps++) {
            i = fork->nsteps;
            fork->steps[i] = self->steps[i];
            Py_INCREF(fork->steps[i].pattern);
            if ((fork->steps[i].matcher = matcher_new(self->steps[i].pattern)) == NULL) {
                fork->nsteps++;
                Py_DECREF(fork);
                return NULL;
            }
        }
    }
    Py_XINCREF(self->guard);
    fork->guard = self->guard;
    fork->chain = self->chain;
    Py_INCREF(self->pattern);
    fork->pattern = self->pattern;
    return (PyObject *)fork;
}

static Py_ssize_t encoder_len(TextEncoder *self)
{
    /* The merged pieces cached (the seeded whole tokens not counted). */
    return (Py_ssize_t)(self->cache.used - (self->seeded ? self->whole.used : 0));
}

static PyMethodDef encoder_methods[] = {
    {"encode", (PyCFunction)encoder_encode, METH_O,
     "encode(text)\n--\n\nThe token ids of text (no special tokens are recognised); Fallback when\n"
     "the text must take the `regex` path."},
    {"encode_bytes", (PyCFunction)encoder_encode_bytes, METH_O,
     "encode_bytes(text)\n--\n\n`encode`, as native uint32 values in one bytes object (array('I').frombytes takes it)."},
    {"encode_measure_utf8", (PyCFunction)encoder_encode_measure_utf8, METH_VARARGS,
     "encode_measure_utf8(data, offsets, separators, wide)\n--\n\nencode_measure_texts of texts given as UTF-8: "
     "text k is data[offsets[k]:offsets[k + 1]] (offsets: native int64, one more than the texts, ascending); "
     "a text that is not UTF-8 is handed back (-1), as a guarded one is."},
    {"encode_measure_texts", (PyCFunction)encoder_encode_measure_texts, METH_VARARGS,
     "encode_measure_texts(texts, separators, wide)\n--\n\n(ids, counts, measures): encode_texts_bytes's two, and each "
     "text's UTF-8 bytes, words and five digit-run counts (7 native int64 a text, the first -1 for a text handed "
     "back), measured in the same pass (stats.measure_batch is the specification)."},
    {"encode_texts_bytes", (PyCFunction)encoder_encode_texts_bytes, METH_O,
     "encode_texts_bytes(texts)\n--\n\n(ids, counts) of a list of str: every text's ids as native uint32 values\n"
     "in one bytes object, and each text's count of them as native int64 values (-1: the text must take\n"
     "the `regex` path, as encode's Fallback says); the GIL dropped once for the whole list."},
    {"fork", (PyCFunction)encoder_fork, METH_NOARGS,
     "fork()\n--\n\nA new encoder sharing this one's merge tables (read-only) with its own cache: for another\n"
     "thread, which then encodes beside this one without building the tables again."},
    {NULL, NULL, 0, NULL}
};

static PyObject *encoder_get_starts_from_characters(TextEncoder *self, void *closure)
{
    return PyBool_FromLong(self->chars.chars != NULL);
}

static PyObject *encoder_get_chained(TextEncoder *self, void *closure)
{
    return PyBool_FromLong(self->chain.on);
}

static PyObject *encoder_get_chain_batch(TextEncoder *self, void *closure)
{
    return PyBool_FromLong(self->chain.batch_digits != 0);
}

static PyGetSetDef encoder_getset[] = {
    {"chained", (getter)encoder_get_chained, NULL,
     "whether `steps` split the text in one pass (runs of classes, then DeepSeek's word regex: chain_pieces)", NULL},
    {"chain_batch", (getter)encoder_get_chain_batch, NULL,
     "whether that pass splits runs of ASCII 64 bytes at a time (words_batch)", NULL},
    {"starts_from_characters", (getter)encoder_get_starts_from_characters, NULL,
     "whether a piece's characters start merged where that is exact (_char_start.h)", NULL},
    {NULL, NULL, NULL, NULL, NULL}
};

static PySequenceMethods encoder_as_sequence = {.sq_length = (lenfunc)encoder_len};

static PyTypeObject TextEncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_ops._pcre2.TextEncoder",
    .tp_basicsize = sizeof(TextEncoder),
    .tp_dealloc = (destructor)encoder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "TextEncoder(pattern, left, right, merged, byte_ids, whole_tokens=None, cache_size=100000,\n"
              "            steps=None, guard=None)\n--\n\n"
              "Whole-text byte-level BPE encoding: PCRE2 split, a byte-keyed piece cache, the merge\n"
              "replay of _merge_table.h from characters merged once (_char_start.h). len() is the\n"
              "number of cached pieces. `steps`, (Pattern, behavior, invert) triples, split as a Sequence\n"
              "of Hugging Face Split pre-tokenizers instead of `pattern`; a text holding a code point whose\n"
              "bit is set in `guard` (0x110000 bits) raises Fallback.",
    .tp_methods = encoder_methods,
    .tp_getset = encoder_getset,
    .tp_as_sequence = &encoder_as_sequence,
    .tp_init = (initproc)encoder_init,
    .tp_new = PyType_GenericNew,
};

/* ---- the module -------------------------------------------------------------------------------- */

static PyObject *library_version(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    char version[64] = "", unicode[64] = "";
    P.config(PCRE2_CONFIG_VERSION, version);
    P.config(PCRE2_CONFIG_UNICODE_VERSION, unicode);
    return Py_BuildValue("(ss)", version, unicode);
}

static PyObject *batch_isas(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    /* The instruction sets this processor can classify windows with, narrowest first: what
     * batch_isa takes here (the tests and the fuzz target run each). */
#ifdef BATCH_WIDE
    const int widest = batch_level_found();
    PyObject *list = PyList_New(widest + 1);
    int level;
    if (list == NULL)
        return NULL;
    for (level = BATCH_SSE2; level <= widest; level++) {
        PyObject *name = PyUnicode_FromString(batch_level_names[level]);
        if (name == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, level, name);
    }
    return list;
#else
    return Py_BuildValue("[s]", "sse2");
#endif
}

static PyObject *batch_isa(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* The instruction set scan_batch classifies bytes with ("avx512", "avx2" or "sse2"), after
     * switching to `name` if given (one this processor has): the tests hold each reading to PCRE2. */
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|z:batch_isa", &name))
        return NULL;
#ifdef BATCH_WIDE
    if (name != NULL) {
        int level;
        for (level = BATCH_SSE2; level <= BATCH_AVX512 && strcmp(name, batch_level_names[level]) != 0; level++)
            ;
        if (level > BATCH_AVX512) {
            PyErr_Format(PyExc_ValueError, "batch_isa: %s is none of avx512, avx2, sse2", name);
            return NULL;
        }
        if (level > batch_level_found()) {
            PyErr_Format(PyExc_ValueError, "batch_isa: this processor has no %s",
                         level == BATCH_AVX2 ? "AVX2" : "AVX-512BW");
            return NULL;
        }
        batch_level = level;
    }
    return PyUnicode_FromString(batch_level_names[batch_level_ready()]);
#else
    if (name != NULL && strcmp(name, "sse2") != 0) {
        PyErr_Format(PyExc_ValueError, "batch_isa: this build classifies with SSE2 only, not %s", name);
        return NULL;
    }
    return PyUnicode_FromString("sse2");
#endif
}

static PyObject *sequence_pieces(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* The pieces an encoder's steps make of a text, before any merge (what the tests hold to
     * `hf_components.pre_tokenizer`): split_steps, with encode's guard and Fallback. */
    TextEncoder *encoder;
    PyObject *text, *out;
    const uint8_t *s;
    Py_ssize_t len;
    size_t k, at = 0;
    int rc, chained = 1;
    if (!PyArg_ParseTuple(args, "O!U|p:sequence_pieces", &TextEncoderType, &encoder, &text, &chained))
        return NULL;
    if (encoder->steps == NULL) {
        PyErr_SetString(PyExc_ValueError, "sequence_pieces: the encoder has no steps");
        return NULL;
    }
    if ((s = encoder_take(encoder, text, &len)) == NULL)
        return NULL;
    /* busy until the pieces are read out: making their strs may let another thread in */
    encoder->spans.n = 0;
    if ((rc = chained && encoder->chain.on ? chain_pieces(encoder, s, (size_t)len, &at, SIZE_MAX)
                                           : split_steps(encoder, s, (size_t)len)) < 0)
        return encoder_done(encoder, (split_failed(rc), NULL));
    if ((out = PyList_New((Py_ssize_t)encoder->spans.n)) == NULL)
        return encoder_done(encoder, NULL);
    for (k = 0; k < encoder->spans.n; k++) {
        const Span *span = &encoder->spans.spans[k];
        PyObject *piece = PyUnicode_DecodeUTF8((const char *)s + span->start, (Py_ssize_t)(span->end - span->start),
                                               "strict");
        if (piece == NULL) {
            Py_DECREF(out);
            return encoder_done(encoder, NULL);
        }
        PyList_SET_ITEM(out, (Py_ssize_t)k, piece);
    }
    return encoder_done(encoder, out);
}

static PyMethodDef module_methods[] = {
    {"batch_isas", batch_isas, METH_NOARGS,
     "batch_isas()\n--\n\nThe instruction sets batch_isa can switch to on this processor, narrowest first."},
    {"batch_isa", batch_isa, METH_VARARGS,
     "batch_isa(name=None)\n--\n\nThe instruction set the 64-byte splitter classifies with (\"avx512\", \"avx2\" or \"sse2\"), "
     "switched to `name` first if given."},
    {"library_version", library_version, METH_NOARGS,
     "library_version()\n--\n\n(PCRE2 version, its Unicode version), as the loaded library reports them."},
    {"sequence_pieces", sequence_pieces, METH_VARARGS,
     "sequence_pieces(encoder, text, chained=True)\n--\n\nThe pieces (str) the Split steps of a TextEncoder made with\n"
     "`steps` cut text into, before any merge; Fallback where encode would raise it. `chained`: as encode splits\n"
     "(in one pass where the steps are a chain, see `TextEncoder.chained`); False: step after step."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pcre2",
    "PCRE2 splitting, pre-token counting and whole-text encoding in C; the Python layer is its specification.",
    -1, module_methods, NULL, NULL, NULL, NULL
};

static int add_native_utf8_length(PyObject *m)
{
    /* `utf8_length` lives in bpe_ops._native; named here too for callers that still import it
     * from this module. A build without _native only lacks the name. */
    PyObject *native = PyImport_ImportModule("bpe_ops._native"), *f;
    int rc;
    if (native == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ImportError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    f = PyObject_GetAttrString(native, "utf8_length");
    Py_DECREF(native);
    if (f == NULL)
        return -1;
    rc = PyModule_AddObjectRef(m, "utf8_length", f);
    Py_DECREF(f);
    return rc;
}

PyMODINIT_FUNC
PyInit__pcre2(void)
{
    PyObject *m;
    PyTypeObject *types[] = {&PatternType, &PieceCounterType, &TextEncoderType};
    size_t i;
    if (load_pcre2() < 0)
        return NULL;
    crc32_init();
    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    if ((m = PyModule_Create(&module)) == NULL)
        return NULL;
    Fallback = PyErr_NewExceptionWithDoc("bpe_ops._pcre2.Fallback",
                                         "This text must take the `regex` path.", PyExc_RuntimeError, NULL);
    Pcre2Error = PyErr_NewExceptionWithDoc("bpe_ops._pcre2.Pcre2Error",
                                           "PCRE2 refuses the pattern.", PyExc_ValueError, NULL);
    if (Fallback == NULL || Pcre2Error == NULL ||
        PyModule_AddObjectRef(m, "Fallback", Fallback) < 0 ||
        PyModule_AddObjectRef(m, "Pcre2Error", Pcre2Error) < 0 ||
        PyModule_AddObjectRef(m, "Pattern", (PyObject *)&PatternType) < 0 ||
        PyModule_AddObjectRef(m, "PieceCounter", (PyObject *)&PieceCounterType) < 0 ||
        PyModule_AddObjectRef(m, "TextEncoder", (PyObject *)&TextEncoderType) < 0 ||
        add_native_utf8_length(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/*
 * bpe_ops._pcre2: PCRE2 (JIT) splitting, pre-token counting and whole-text encoding, in C.
 *
 * The Python layer (pretokenize.Pcre2Pattern, encoder.Tokenizer) is the specification and decides
 * when this module may run: only patterns and texts on which PCRE2 and the `regex` package give the
 * same pieces (tests compare them on every code point and on real corpora). Everything here works
 * on the text's UTF-8 bytes, which CPython keeps with the string.
 *
 *   Pattern(pattern)            a compiled pattern (UTF and UCP modes, JIT when available);
 *     .findall(text)            the matched pieces, as `regex.findall` gives them (no groups);
 *     .search(text)             whether the pattern matches anywhere.
 *   PieceCounter(pattern)       counts pre-tokens by their UTF-8 bytes: .add(text), .to_dict(),
 *                               .drain_packed(n) (n packed tables, bucketed by crc32).
 *   CountTable(packed)          a sum of packed count tables (bpe_ops/count_table.py): .add_packed,
 *                               .absorb, .packed(), .columns(min_count) (sorted, Arrow-ready).
 *   TextEncoder(pattern, left, right, merged, byte_ids, whole_tokens, cache_size)
 *     .encode(text)             the token ids of a text holding no special tokens: split, look each
 *                               piece up in a bounded byte-keyed cache, replay the merges of a miss
 *                               (`_merge_table.h`). Text between matches is a piece too, as in
 *                               `Tokenizer._split`.
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

#include "_merge_table.h"

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

/* A piece of the text: [start, end) in bytes. */
typedef struct {
    size_t start, end;
} Span;

/* Outcomes of splitting a text, beside 0 (done). */
enum { SPLIT_NOMEM = -1, SPLIT_EMPTY_MATCH = -2, SPLIT_LIMIT = -3 };

typedef struct {
    Span *spans;
    size_t n, cap;
} Spans;

static int spans_push(Spans *s, size_t start, size_t end)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        Span *grown = realloc(s->spans, cap * sizeof(Span));
        if (grown == NULL)
            return SPLIT_NOMEM;
        s->spans = grown;
        s->cap = cap;
    }
    s->spans[s->n].start = start;
    s->spans[s->n].end = end;
    s->n++;
    return 0;
}

static int split_text(const Pattern *pat, Matcher *m, const uint8_t *text, size_t len, int gaps,
                      Spans *out)
{
    /* The pieces of text[0..len) into `out` (emptied first): every match, and with `gaps` the text
     * between matches too. Touches no Python object (callers may drop the GIL). */
    size_t pos = 0, *ov = P.get_ovector_pointer(m->data);
    int rc;
    out->n = 0;
    /* pos == len is tried too: a pattern may match the empty string at the end. */
    while (pos <= len) {
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
    return 0;
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

static int pattern_init(Pattern *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"pattern", NULL};
    PyObject *pattern;
    const char *s;
    Py_ssize_t n;
    int error;
    size_t offset;
    uint32_t groups;

    if (self->code != NULL) {
        PyErr_SetString(PyExc_TypeError, "Pattern is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "U:Pattern", kwlist, &pattern))
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
    return 0;
}

static void pattern_dealloc(Pattern *self)
{
    matcher_free(self->matcher);
    if (self->code)
        P.code_free(self->code);
    Py_XDECREF(self->pattern);
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
    return Py_BuildValue("O(O)", (PyObject *)Py_TYPE(self), self->pattern);
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
    {NULL, NULL, NULL, NULL, NULL}
};

static PyTypeObject PatternType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_ops._pcre2.Pattern",
    .tp_basicsize = sizeof(Pattern),
    .tp_dealloc = (destructor)pattern_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Pattern(pattern)\n--\n\nA PCRE2 pattern in UTF and UCP modes, JIT-compiled when possible.",
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

/* ---- growable arrays ---------------------------------------------------------------------------- */

static int reserve(void **data, size_t *cap, size_t need, size_t item, size_t first)
{
    /* Room for `need` items of `item` bytes in *data (capacity *cap, doubled from `first`); -1 when
     * out of memory, the array unchanged. */
    if (need > *cap) {
        size_t grown_cap = *cap ? *cap : first;
        void *grown;
        while (grown_cap < need)
            grown_cap *= 2;
        if ((grown = realloc(*data, grown_cap * item)) == NULL)
            return -1;
        *data = grown;
        *cap = grown_cap;
    }
    return 0;
}

/* ---- a byte-string hash map: piece bytes -> a value -------------------------------------------- */

/* Entries point into an arena of key bytes; the value is a count, or where a piece's ids start in
 * the id arena with how many there are. Open addressing, linear probing, at most half full. */
typedef struct {
    uint64_t hash;               /* 0: an empty slot */
    uint32_t key_at, key_len;
    int64_t value;               /* PieceCounter: the count; TextEncoder: ids_at << 32 | n_ids */
} Entry;

typedef struct {
    Entry *slots;
    size_t mask, used;
    uint8_t *keys;
    size_t keys_len, keys_cap;
} ByteMap;

static uint64_t hash_bytes(const uint8_t *s, size_t n)
{
    /* A multiply-xorshift hash over 8-byte words; never 0 (0 marks an empty slot). */
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xC2B2AE3D27D4EB4FULL), w;
    while (n >= 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    if (n) {
        w = 0;
        memcpy(&w, s, n);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 29;
    return h | 1;
}

static int bytemap_init(ByteMap *m, size_t capacity)
{
    size_t size = 64;
    while (size < 2 * capacity)
        size *= 2;
    memset(m, 0, sizeof(*m));
    if ((m->slots = calloc(size, sizeof(Entry))) == NULL)
        return -1;
    m->mask = size - 1;
    return 0;
}

static void bytemap_free(ByteMap *m)
{
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof(*m));
}

static void bytemap_clear(ByteMap *m)
{
    memset(m->slots, 0, (m->mask + 1) * sizeof(Entry));
    m->used = 0;
    m->keys_len = 0;
}

static Entry *bytemap_find(const ByteMap *m, const uint8_t *key, size_t len, uint64_t hash)
{
    /* The entry of `key`, or the empty slot where it would go. */
    size_t i = (size_t)(hash >> 7) & m->mask;
    for (;;) {
        Entry *e = &m->slots[i];
        if (e->hash == 0 || (e->hash == hash && e->key_len == len && memcmp(m->keys + e->key_at, key, len) == 0))
            return e;
        i = (i + 1) & m->mask;
    }
}

static int bytemap_grow(ByteMap *m)
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

static Entry *bytemap_insert(ByteMap *m, Entry *slot, const uint8_t *key, size_t len, uint64_t hash)
{
    /* Fill the empty `slot` (from bytemap_find) with `key`, value 0; NULL when out of memory. The
     * slots grow when half full, so the returned entry may not be `slot`. */
    if (m->keys_len + len > m->keys_cap) {
        size_t cap = m->keys_cap ? m->keys_cap : 4096;
        uint8_t *grown;
        while (cap < m->keys_len + len)
            cap *= 2;
        if (cap > UINT32_MAX || (grown = realloc(m->keys, cap)) == NULL)
            return NULL;
        m->keys = grown;
        m->keys_cap = cap;
    }
    memcpy(m->keys + m->keys_len, key, len);
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

static Entry *bytemap_entry(ByteMap *m, const uint8_t *key, size_t len, uint64_t hash)
{
    /* The entry of `key`, added with value 0 when missing; NULL when out of memory. */
    Entry *e = bytemap_find(m, key, len, hash);
    return e->hash ? e : bytemap_insert(m, e, key, len, hash);
}

static int bytemap_add_all(ByteMap *into, const ByteMap *from)
{
    /* into[k] += v for every (k, v) of `from` (count maps); -1 when out of memory. */
    size_t i;
    for (i = 0; i <= from->mask; i++) {
        const Entry *o = &from->slots[i];
        Entry *e;
        if (o->hash == 0)
            continue;
        if ((e = bytemap_entry(into, from->keys + o->key_at, o->key_len, o->hash)) == NULL)
            return -1;
        e->value += o->value;
    }
    return 0;
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
        uint64_t hash = hash_bytes(key, n);
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
        key = PyBytes_FromStringAndSize((const char *)self->counts.keys + e->key_at, e->key_len);
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

static uint32_t crc32_table[256];

static void crc32_init(void)
{
    /* The CRC-32 of zlib (reflected polynomial 0xEDB88320), table-driven. */
    uint32_t i, c;
    int k;
    for (i = 0; i < 256; i++) {
        for (c = i, k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc32_table[i] = c;
    }
}

static uint32_t crc32_of(const uint8_t *s, size_t n)
{
    /* zlib.crc32(s): the same stable bucket the Python path computes. */
    uint32_t c = 0xFFFFFFFFu;
    while (n--)
        c = crc32_table[(c ^ *s++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
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
        key_bytes = self->counts.keys + e->key_at;
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

static PyObject *counter_drain_packed(PieceCounter *self, PyObject *arg);

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

typedef struct {
    int32_t *ids;
    size_t n, cap;
} Ids;

static int ids_reserve(Ids *v, size_t more)
{
    return reserve((void **)&v->ids, &v->cap, v->n + more, sizeof(int32_t), 1024);
}

typedef struct {
    PyObject_HEAD
    Pattern *pattern;
    Matcher *matcher;            /* this encoder's own: it matches without the GIL */
    MergeTable table;
    int32_t byte_ids[256];
    ByteMap whole;               /* ignore_merges: a piece that is a token is that token; else empty */
    int has_whole;
    ByteMap cache;               /* piece bytes -> ids_at << 32 | n_ids in cache_ids */
    Ids cache_ids;
    size_t cache_size;           /* entries; the cache is emptied when it holds this many */
    Spans spans;
    Ids out;
    int busy;                    /* set (with the GIL held) while a call runs without it */
} TextEncoder;

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

static int encoder_fill_whole(TextEncoder *self, PyObject *whole)
{
    /* The {token bytes: id} map used when a tokenizer ignores merges for whole-token pieces. */
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    if (!PyDict_Check(whole)) {
        PyErr_SetString(PyExc_TypeError, "TextEncoder: whole_tokens must be a dict or None");
        return -1;
    }
    if (bytemap_init(&self->whole, (size_t)PyDict_Size(whole)) < 0)
        return PyErr_NoMemory(), -1;
    self->has_whole = 1;
    while (PyDict_Next(whole, &pos, &key, &value)) {
        long long id;
        const uint8_t *s;
        size_t n;
        uint64_t hash;
        Entry *e;
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
        s = (const uint8_t *)PyBytes_AS_STRING(key);
        n = (size_t)PyBytes_GET_SIZE(key);
        hash = hash_bytes(s, n);
        if ((e = bytemap_entry(&self->whole, s, n, hash)) == NULL)
            return PyErr_NoMemory(), -1;
        e->value = id;
    }
    return 0;
}

static int encoder_init(TextEncoder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"pattern", "left", "right", "merged", "byte_ids", "whole_tokens",
                             "cache_size", NULL};
    PyObject *pattern, *left_arg, *right_arg, *merged_arg, *byte_ids_arg, *whole = Py_None;
    Py_ssize_t cache_size = 100000, n, nr, nm, nb, i;
    int32_t *left = NULL, *right = NULL, *merged = NULL, *byte_ids = NULL;
    int ok = -1;

    if (self->pattern != NULL) {
        PyErr_SetString(PyExc_TypeError, "TextEncoder is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|On:TextEncoder", kwlist, &pattern, &left_arg,
                                     &right_arg, &merged_arg, &byte_ids_arg, &whole, &cache_size) ||
        as_pattern(pattern) == NULL)
        return -1;
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
    for (i = 0; i < 256; i++)
        self->byte_ids[i] = byte_ids[i];
    if (merge_table_init(&self->table, left, right, merged, n) < 0 ||
        bytemap_init(&self->cache, cache_size > 0 ? (size_t)cache_size : 1) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    self->cache_size = cache_size > 0 ? (size_t)cache_size : 0;
    if (whole != Py_None && encoder_fill_whole(self, whole) < 0)
        goto done;
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
    return ok;
}

static void encoder_dealloc(TextEncoder *self)
{
    matcher_free(self->matcher);
    merge_table_free(&self->table);
    bytemap_free(&self->whole);
    bytemap_free(&self->cache);
    free(self->cache_ids.ids);
    free(self->spans.spans);
    free(self->out.ids);
    Py_XDECREF(self->pattern);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int encode_piece(TextEncoder *self, const uint8_t *piece, size_t len)
{
    /* Append the ids of one piece to self->out: from the cache, else by replaying the merges (and
     * caching a short piece). -1 when out of memory. */
    uint64_t hash = hash_bytes(piece, len);
    Entry *e = NULL;
    int32_t *sym;
    Py_ssize_t n;
    size_t i;

    if (self->cache_size) {
        e = bytemap_find(&self->cache, piece, len, hash);
        if (e->hash) {
            uint32_t at = (uint32_t)(e->value >> 32), count = (uint32_t)e->value;
            if (ids_reserve(&self->out, count) < 0)
                return -1;
            memcpy(self->out.ids + self->out.n, self->cache_ids.ids + at, count * sizeof(int32_t));
            self->out.n += count;
            return 0;
        }
    }
    if (ids_reserve(&self->out, len) < 0)
        return -1;
    sym = self->out.ids + self->out.n;
    n = -1;
    if (self->has_whole) {
        const Entry *w = bytemap_find(&self->whole, piece, len, hash);
        if (w->hash) {
            sym[0] = (int32_t)w->value;
            n = 1;
        }
    }
    if (n < 0) {
        for (i = 0; i < len; i++)
            sym[i] = self->byte_ids[piece[i]];
        if ((n = merge_symbols(&self->table, sym, (Py_ssize_t)len)) < 0)
            return -1;
    }
    self->out.n += (size_t)n;
    if (e == NULL || len > MAX_CACHED_BYTES)
        return 0;
    if (self->cache.used >= self->cache_size || self->cache.keys_len + len > CACHE_KEY_BYTES ||
        self->cache_ids.n + (size_t)n > CACHE_IDS) {
        /* Full: start over. Cheaper than tracking age, and a hot piece is back after one miss. */
        bytemap_clear(&self->cache);
        self->cache_ids.n = 0;
        e = bytemap_find(&self->cache, piece, len, hash);
    }
    if (ids_reserve(&self->cache_ids, (size_t)n) < 0 ||
        (e = bytemap_insert(&self->cache, e, piece, len, hash)) == NULL)
        return -1;
    memcpy(self->cache_ids.ids + self->cache_ids.n, self->out.ids + self->out.n - n, (size_t)n * sizeof(int32_t));
    e->value = (int64_t)self->cache_ids.n << 32 | (uint32_t)n;
    self->cache_ids.n += (size_t)n;
    return 0;
}

static int encode_text(TextEncoder *self, const uint8_t *s, size_t len)
{
    /* self->out = the ids of text s[0..len). Touches no Python object. */
    size_t i;
    int rc;
    self->out.n = 0;
    if ((rc = split_text(self->pattern, self->matcher, s, len, 1, &self->spans)) < 0)
        return rc;
    for (i = 0; i < self->spans.n; i++)
        if (encode_piece(self, s + self->spans.spans[i].start,
                         self->spans.spans[i].end - self->spans.spans[i].start) < 0)
            return SPLIT_NOMEM;
    return 0;
}

static int encoder_run(TextEncoder *self, PyObject *text)
{
    /* self->out = the ids of text; -1 with an exception set (Fallback among them). */
    Py_ssize_t len;
    const uint8_t *s;
    int rc;

    if (self->pattern == NULL) {
        PyErr_SetString(PyExc_TypeError, "TextEncoder is not initialised");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(Fallback, "this TextEncoder is encoding in another thread");
        return -1;
    }
    if ((s = utf8_of(text, &len)) == NULL)
        return -1;
    self->busy = 1;
    /* Only this encoder's own buffers are touched while encoding: let other threads run. */
    Py_BEGIN_ALLOW_THREADS
    rc = encode_text(self, s, (size_t)len);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc < 0) {
        if (rc == SPLIT_NOMEM) {    /* the cache may hold a half-made entry: drop it all */
            bytemap_clear(&self->cache);
            self->cache_ids.n = 0;
        }
        return split_failed(rc);
    }
    return 0;
}

static PyObject *encoder_encode(TextEncoder *self, PyObject *text)
{
    PyObject *out;
    size_t i;
    if (encoder_run(self, text) < 0 || (out = PyList_New((Py_ssize_t)self->out.n)) == NULL)
        return NULL;
    for (i = 0; i < self->out.n; i++) {
        PyObject *v = PyLong_FromLong(self->out.ids[i]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    return out;
}

static PyObject *encoder_encode_bytes(TextEncoder *self, PyObject *text)
{
    /* The ids as native 32-bit unsigned integers, one bytes object: no Python int per id. */
    if (encoder_run(self, text) < 0)
        return NULL;
    return PyBytes_FromStringAndSize((const char *)self->out.ids, (Py_ssize_t)(self->out.n * sizeof(int32_t)));
}

static Py_ssize_t encoder_len(TextEncoder *self)
{
    return (Py_ssize_t)self->cache.used;
}

static PyMethodDef encoder_methods[] = {
    {"encode", (PyCFunction)encoder_encode, METH_O,
     "encode(text)\n--\n\nThe token ids of text (no special tokens are recognised); Fallback when\n"
     "the text must take the `regex` path."},
    {"encode_bytes", (PyCFunction)encoder_encode_bytes, METH_O,
     "encode_bytes(text)\n--\n\n`encode`, as native uint32 values in one bytes object (array('I').frombytes takes it)."},
    {NULL, NULL, 0, NULL}
};

static PySequenceMethods encoder_as_sequence = {.sq_length = (lenfunc)encoder_len};

static PyTypeObject TextEncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_ops._pcre2.TextEncoder",
    .tp_basicsize = sizeof(TextEncoder),
    .tp_dealloc = (destructor)encoder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "TextEncoder(pattern, left, right, merged, byte_ids, whole_tokens=None, cache_size=100000)\n--\n\n"
              "Whole-text byte-level BPE encoding: PCRE2 split, a byte-keyed piece cache, the merge\n"
              "replay of _merge_table.h. len() is the number of cached pieces.",
    .tp_methods = encoder_methods,
    .tp_as_sequence = &encoder_as_sequence,
    .tp_init = (initproc)encoder_init,
    .tp_new = PyType_GenericNew,
};

/* ---- the module -------------------------------------------------------------------------------- */

/* ---- packed count tables ---------------------------------------------------------------------- */

/* How count tables travel between processes (bpe_ops/count_table.py is the specification): records
 * of a uint32 key length, the key bytes and an int64 count, both integers little-endian, in any
 * order; a key may appear more than once, and its counts add up. */

typedef struct {
    uint8_t *data;
    size_t len, cap;
} Buffer;

static int buffer_reserve(Buffer *b, size_t more)
{
    return reserve((void **)&b->data, &b->cap, b->len + more, 1, 256);
}

static void put_le(uint8_t *out, uint64_t v, int n)
{
    int i;
    for (i = 0; i < n; i++)
        out[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *in, int n)
{
    uint64_t v = 0;
    int i;
    for (i = 0; i < n; i++)
        v |= (uint64_t)in[i] << (8 * i);
    return v;
}

static int pack_record(Buffer *b, const uint8_t *key, uint32_t len, int64_t count)
{
    if (buffer_reserve(b, 12 + (size_t)len) < 0)
        return -1;
    put_le(b->data + b->len, len, 4);
    memcpy(b->data + b->len + 4, key, len);
    put_le(b->data + b->len + 4 + len, (uint64_t)count, 8);
    b->len += 12 + (size_t)len;
    return 0;
}

static int unpack_into(ByteMap *m, const uint8_t *s, size_t n)
{
    /* Add the records of a packed table to m: 0, -1 out of memory, -2 a malformed table (nothing is
     * added then: it is checked whole first). */
    size_t at = 0;
    while (at < n) {
        uint64_t len;
        if (n - at < 12 || (len = get_le(s + at, 4)) > n - at - 12)
            return -2;
        at += 12 + (size_t)len;
    }
    for (at = 0; at < n;) {
        size_t len = (size_t)get_le(s + at, 4);
        const uint8_t *key = s + at + 4;
        Entry *e = bytemap_entry(m, key, len, hash_bytes(key, len));
        if (e == NULL)
            return -1;
        e->value += (int64_t)get_le(key + len, 8);
        at += 12 + len;
    }
    return 0;
}

static PyObject *packed_bytes(const ByteMap *m)
{
    /* Every entry of m as one packed table. */
    Buffer b = {NULL, 0, 0};
    PyObject *out;
    size_t i;
    for (i = 0; i <= m->mask; i++) {
        const Entry *e = &m->slots[i];
        if (e->hash && pack_record(&b, m->keys + e->key_at, e->key_len, e->value) < 0) {
            free(b.data);
            return PyErr_NoMemory();
        }
    }
    out = PyBytes_FromStringAndSize((const char *)b.data, (Py_ssize_t)b.len);
    free(b.data);
    return out;
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
        key = self->counts.keys + e->key_at;
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

/* A sum of packed count tables, kept in C: what the counting pipeline's combine holds per bucket
 * instead of a dict of Python objects. */
typedef struct {
    PyObject_HEAD
    ByteMap counts;
    int ready;
} CountTable;

static int table_init(CountTable *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"packed", NULL};
    Py_buffer packed = {NULL, NULL};
    int rc = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|y*:CountTable", kwlist, &packed))
        return -1;
    if (self->ready)
        bytemap_free(&self->counts);
    self->ready = 0;
    if (bytemap_init(&self->counts, 1024) < 0) {
        PyErr_NoMemory();
        rc = -1;
    } else {
        self->ready = 1;
        if (packed.buf != NULL) {
            int r = unpack_into(&self->counts, packed.buf, (size_t)packed.len);
            if (r == -1)
                PyErr_NoMemory();
            else if (r == -2)
                PyErr_SetString(PyExc_ValueError, "not a packed count table");
            rc = r < 0 ? -1 : 0;
        }
    }
    if (packed.buf != NULL)
        PyBuffer_Release(&packed);
    return rc;
}

static void table_dealloc(CountTable *self)
{
    if (self->ready)
        bytemap_free(&self->counts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int table_ready(CountTable *self)
{
    if (!self->ready)
        PyErr_SetString(PyExc_TypeError, "CountTable is not initialised");
    return self->ready;
}

static PyObject *table_add_packed(CountTable *self, PyObject *arg)
{
    Py_buffer packed;
    int r;
    if (!table_ready(self) || PyObject_GetBuffer(arg, &packed, PyBUF_SIMPLE) < 0)
        return NULL;
    r = unpack_into(&self->counts, packed.buf, (size_t)packed.len);
    PyBuffer_Release(&packed);
    if (r == -1)
        return PyErr_NoMemory();
    if (r == -2) {
        PyErr_SetString(PyExc_ValueError, "not a packed count table");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *table_absorb(CountTable *self, PyObject *arg)
{
    /* Add another CountTable's counts to this one and empty it. */
    CountTable *other;
    if (!PyObject_TypeCheck(arg, Py_TYPE(self))) {
        PyErr_SetString(PyExc_TypeError, "absorb() takes a CountTable");
        return NULL;
    }
    other = (CountTable *)arg;
    if (!table_ready(self) || !table_ready(other))
        return NULL;
    if (other == self) {
        PyErr_SetString(PyExc_ValueError, "absorb() takes another CountTable");
        return NULL;
    }
    if (bytemap_add_all(&self->counts, &other->counts) < 0)
        return PyErr_NoMemory();
    bytemap_free(&other->counts);
    if (bytemap_init(&other->counts, 1024) < 0) {
        other->ready = 0;
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

static PyObject *table_packed(CountTable *self, PyObject *Py_UNUSED(ignored))
{
    return table_ready(self) ? packed_bytes(&self->counts) : NULL;
}

static const uint8_t *sort_keys;     /* table_columns' qsort context (the GIL is held throughout) */

static int entry_key_order(const void *a, const void *b)
{
    const Entry *x = *(const Entry *const *)a, *y = *(const Entry *const *)b;
    uint32_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(sort_keys + x->key_at, sort_keys + y->key_at, n);
    return c ? c : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

static PyObject *table_columns(CountTable *self, PyObject *args)
{
    /* (rows, offsets, data, counts) of the entries counted at least min_count times, in byte order
     * of their keys: Arrow binary offsets (int32, rows + 1 of them; int64 for large_binary with
     * `large`) and data, and the counts (int64), all in this machine's byte order, ready to wrap as
     * Arrow buffers. OverflowError when the keys pass 2 GiB without `large`. */
    long long min_count = 1;
    int large = 0;
    const Entry **rows;
    size_t n = 0, i, data_len = 0, width;
    PyObject *offsets = NULL, *data = NULL, *counts = NULL, *out = NULL;
    if (!PyArg_ParseTuple(args, "|Lp:columns", &min_count, &large) || !table_ready(self))
        return NULL;
    if ((rows = malloc((self->counts.used + 1) * sizeof(Entry *))) == NULL)
        return PyErr_NoMemory();
    for (i = 0; i <= self->counts.mask; i++) {
        const Entry *e = &self->counts.slots[i];
        if (e->hash && e->value >= min_count) {
            rows[n++] = e;
            data_len += e->key_len;
        }
    }
    if (!large && data_len > INT32_MAX) {
        free(rows);
        PyErr_SetString(PyExc_OverflowError, "the keys pass 2 GiB: ask for large (int64) offsets");
        return NULL;
    }
    sort_keys = self->counts.keys;
    qsort(rows, n, sizeof(Entry *), entry_key_order);
    width = large ? sizeof(int64_t) : sizeof(int32_t);
    offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n + 1) * width));
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)data_len);
    counts = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int64_t)));
    if (offsets && data && counts) {
        int64_t *count = (int64_t *)PyBytes_AS_STRING(counts), end = 0;
        uint8_t *at = (uint8_t *)PyBytes_AS_STRING(data);
        char *offset = PyBytes_AS_STRING(offsets);
        for (i = 0; i <= n; i++) {
            int32_t narrow = (int32_t)end;
            if (large)
                memcpy(offset + i * width, &end, width);
            else
                memcpy(offset + i * width, &narrow, width);
            if (i == n)
                break;
            memcpy(at + end, self->counts.keys + rows[i]->key_at, rows[i]->key_len);
            end += rows[i]->key_len;
            count[i] = rows[i]->value;
        }
        out = Py_BuildValue("nOOO", (Py_ssize_t)n, offsets, data, counts);
    }
    free(rows);
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    Py_XDECREF(counts);
    return out;
}

static PyObject *table_reduce(CountTable *self, PyObject *Py_UNUSED(ignored))
{
    /* Pickled as its packed table: how Beam moves an accumulator between workers. */
    PyObject *packed = table_packed(self, NULL), *out;
    if (packed == NULL)
        return NULL;
    out = Py_BuildValue("O(O)", (PyObject *)Py_TYPE(self), packed);
    Py_DECREF(packed);
    return out;
}

static Py_ssize_t table_len(CountTable *self)
{
    return self->ready ? (Py_ssize_t)self->counts.used : 0;
}

static PyMethodDef table_methods[] = {
    {"add_packed", (PyCFunction)table_add_packed, METH_O,
     "add_packed(packed)\n--\n\nAdd the counts of a packed table (ValueError when it is malformed)."},
    {"absorb", (PyCFunction)table_absorb, METH_O,
     "absorb(other)\n--\n\nAdd the counts of another CountTable to this one, and empty the other."},
    {"packed", (PyCFunction)table_packed, METH_NOARGS, "packed()\n--\n\nThe counts as one packed table."},
    {"columns", (PyCFunction)table_columns, METH_VARARGS,
     "columns(min_count=1, large=False)\n--\n\n(rows, offsets, data, counts) of the keys counted at least "
     "min_count times, in byte order: Arrow binary (int32; large_binary, int64, with large) offsets and data, "
     "and int64 counts, in native byte order."},
    {"__reduce__", (PyCFunction)table_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}
};

static PySequenceMethods table_as_sequence = {.sq_length = (lenfunc)table_len};

static PyTypeObject CountTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_ops._pcre2.CountTable",
    .tp_basicsize = sizeof(CountTable),
    .tp_dealloc = (destructor)table_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "CountTable(packed=b'')\n--\n\nA sum of packed count tables (bpe_ops/count_table.py), in C.",
    .tp_methods = table_methods,
    .tp_as_sequence = &table_as_sequence,
    .tp_init = (initproc)table_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *utf8_length(PyObject *Py_UNUSED(module), PyObject *text)
{
    /* len(text.encode("utf-8")) without the copy; a lone surrogate counts 3 bytes, as U+FFFD (what
     * the pipelines write in its place) does. */
    Py_ssize_t n, i, bytes;
    int kind;
    const void *data;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "utf8_length() takes a str");
        return NULL;
    }
    n = PyUnicode_GET_LENGTH(text);
    kind = PyUnicode_KIND(text);
    data = PyUnicode_DATA(text);
    bytes = n;
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *c = data;
        for (i = 0; i < n; i++)
            bytes += c[i] >= 0x80;
    } else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *c = data;
        for (i = 0; i < n; i++)
            bytes += (c[i] >= 0x80) + (c[i] >= 0x800);
    } else {
        const Py_UCS4 *c = data;
        for (i = 0; i < n; i++)
            bytes += (c[i] >= 0x80) + (c[i] >= 0x800) + (c[i] >= 0x10000);
    }
    return PyLong_FromSsize_t(bytes);
}

static PyObject *library_version(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    char version[64] = "", unicode[64] = "";
    P.config(PCRE2_CONFIG_VERSION, version);
    P.config(PCRE2_CONFIG_UNICODE_VERSION, unicode);
    return Py_BuildValue("(ss)", version, unicode);
}

static PyObject *add_counts(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* into[k] = into.get(k, 0) + v for every (k, v) of counts: the sum of two count tables. */
    PyObject *into, *counts, *key, *value;
    Py_ssize_t pos = 0;
    if (!PyArg_ParseTuple(args, "O!O!:add_counts", &PyDict_Type, &into, &PyDict_Type, &counts))
        return NULL;
    if (PyDict_GET_SIZE(into) == 0) {   /* nothing to add to: a copy, without a sum per key */
        if (PyDict_Update(into, counts) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    while (PyDict_Next(counts, &pos, &key, &value)) {
        PyObject *old = PyDict_GetItemWithError(into, key), *sum;
        int rc;
        if (old == NULL) {
            if (PyErr_Occurred() || PyDict_SetItem(into, key, value) < 0)
                return NULL;
            continue;
        }
        if ((sum = PyNumber_Add(old, value)) == NULL)
            return NULL;
        rc = PyDict_SetItem(into, key, sum);
        Py_DECREF(sum);
        if (rc < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"add_counts", add_counts, METH_VARARGS,
     "add_counts(into, counts)\n--\n\nAdd the count table `counts` into the dict `into`, key by key."},
    {"utf8_length", utf8_length, METH_O,
     "utf8_length(text)\n--\n\nlen(text.encode('utf-8')) without the copy; a lone surrogate counts 3 bytes."},
    {"library_version", library_version, METH_NOARGS,
     "library_version()\n--\n\n(PCRE2 version, its Unicode version), as the loaded library reports them."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pcre2",
    "PCRE2 splitting, pre-token counting and whole-text encoding in C; the Python layer is its specification.",
    -1, module_methods, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC
PyInit__pcre2(void)
{
    PyObject *m;
    PyTypeObject *types[] = {&PatternType, &PieceCounterType, &TextEncoderType, &CountTableType};
    size_t i;
    if (load_pcre2() < 0)
        return NULL;
    crc32_init();
    for (i = 0; i < 4; i++)
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
        PyModule_AddObjectRef(m, "CountTable", (PyObject *)&CountTableType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

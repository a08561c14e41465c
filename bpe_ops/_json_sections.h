/*
 * The two big sections of a canonical byte-level tokenizer.json, `model.vocab` and `model.merges`,
 * written from the token table in one pass (`_native.byte_level_sections`). The specification is
 * bpe_ops/json_sections.py's `byte_level_sections_python`: each token spelled in GPT-2's byte
 * alphabet and quoted as `json.dumps(..., ensure_ascii=False)` quotes it, one entry per line at the
 * depth of `model.vocab`. A token's spelling is a pure function of its bytes, so a table of 256
 * quoted spellings (made from the alphabet Python hands in) spells every token by lookups.
 *
 * Worked example (pad "  ", end "\n"): tokens {0: b"a", 1: b"b", 2: b"ab"}, ids [0, 1, 2], one merge
 * (0, 1) -> vocab "{\n  \"a\": 0,\n  \"b\": 1,\n  \"ab\": 2\n}", merges "[\n  [\"a\", \"b\"]\n]".
 */
#ifndef TOKENBEAM_JSON_SECTIONS_H
#define TOKENBEAM_JSON_SECTIONS_H
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_common.h"

typedef struct {
    uint8_t len;
    char bytes[7];      /* the UTF-8 of one character as JSON writes it inside a string */
} QuotedByte;

typedef struct {
    char *data;
    size_t len, cap;
} TextOut;

static int text_put(TextOut *t, const char *s, size_t n)
{
    if (tb_reserve((void **)&t->data, &t->cap, t->len + n, 1, 1 << 16) < 0)
        return -1;
    memcpy(t->data + t->len, s, n);
    t->len += n;
    return 0;
}

static int quoted_bytes_of(PyObject *alphabet, QuotedByte table[256])
{
    /* table[b]: character b of `alphabet` (a str of 256 characters) as json.dumps writes it inside a
     * string without ensure_ascii: '"' and '\\' escaped, \b \f \n \r \t by name, other control
     * characters as \u00xx, everything else as its UTF-8. */
    int b;
    if (!PyUnicode_Check(alphabet) || PyUnicode_GET_LENGTH(alphabet) != 256) {
        PyErr_SetString(PyExc_ValueError, "the byte alphabet must be a str of 256 characters");
        return -1;
    }
    for (b = 0; b < 256; b++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(alphabet, b);
        QuotedByte *q = &table[b];
        const char *named = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f"
                          : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
        if (named != NULL) {
            q->len = 2;
            memcpy(q->bytes, named, 2);
        } else if (c < 0x20) {
            q->len = 6;
            snprintf(q->bytes, sizeof q->bytes, "\\u%04x", (unsigned)c);
        } else if (c >= 0xD800 && c < 0xE000) {
            PyErr_SetString(PyExc_ValueError, "the byte alphabet holds a surrogate");
            return -1;
        } else if (c < 0x80) {
            q->len = 1;
            q->bytes[0] = (char)c;
        } else if (c < 0x800) {
            q->len = 2;
            q->bytes[0] = (char)(0xC0 | c >> 6);
            q->bytes[1] = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            q->len = 3;
            q->bytes[0] = (char)(0xE0 | c >> 12);
            q->bytes[1] = (char)(0x80 | (c >> 6 & 0x3F));
            q->bytes[2] = (char)(0x80 | (c & 0x3F));
        } else {
            q->len = 4;
            q->bytes[0] = (char)(0xF0 | c >> 18);
            q->bytes[1] = (char)(0x80 | (c >> 12 & 0x3F));
            q->bytes[2] = (char)(0x80 | (c >> 6 & 0x3F));
            q->bytes[3] = (char)(0x80 | (c & 0x3F));
        }
    }
    return 0;
}

typedef struct {
    /* The tokens by id: spelled[id] (len[id] bytes; a NULL pointer where there is no token) for ids
     * up to `count`, read from the dict once, so that a merge's two halves cost two array reads
     * instead of two dict lookups scattered over memory. */
    const uint8_t **bytes;
    Py_ssize_t *len;
    size_t count;
} TokenIndex;

static int token_index_build(TokenIndex *x, PyObject *tokens)
{
    /* 0; 1 when a key is not an int in 0..4 * len(tokens) + 1024 (the index would be mostly empty:
     * the caller writes the sections another way); -1 with an exception set. */
    PyObject *key, *value;
    Py_ssize_t pos = 0, n = PyDict_GET_SIZE(tokens);
    x->count = (size_t)n * 4 + 1024;
    x->bytes = calloc(x->count, sizeof *x->bytes);
    x->len = calloc(x->count, sizeof *x->len);
    if (x->bytes == NULL || x->len == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    while (PyDict_Next(tokens, &pos, &key, &value)) {
        long long id = PyLong_Check(key) ? PyLong_AsLongLong(key) : -1;
        if (id == -1 && PyErr_Occurred())
            PyErr_Clear();                  /* beyond a long long: not an id of this index either */
        if (id < 0 || (unsigned long long)id >= x->count)
            return 1;
        if (!PyBytes_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "a token must be bytes");
            return -1;
        }
        x->bytes[id] = (const uint8_t *)PyBytes_AS_STRING(value);
        x->len[id] = PyBytes_GET_SIZE(value);
    }
    return 0;
}

static void token_index_free(TokenIndex *x)
{
    free(x->bytes);
    free(x->len);
}

static int put_quoted_token(TextOut *t, const QuotedByte table[256], const TokenIndex *x, PyObject *id_obj)
{
    /* '"' + the spelling of the token `id_obj` + '"'; -1 with an exception set when there is none. */
    long long id = PyLong_AsLongLong(id_obj);
    const uint8_t *s;
    Py_ssize_t i, n;
    if (id == -1 && PyErr_Occurred())
        return -1;
    if (id < 0 || (unsigned long long)id >= x->count || x->bytes[id] == NULL) {
        PyErr_SetObject(PyExc_KeyError, id_obj);
        return -1;
    }
    s = x->bytes[id];
    n = x->len[id];
    /* room for the longest spelling of every byte, and for the last fixed-size copy below */
    if (tb_reserve((void **)&t->data, &t->cap, t->len + 2 + (size_t)n * 6 + sizeof table[0].bytes, 1, 1 << 16) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    t->data[t->len++] = '"';
    for (i = 0; i < n; i++) {
        const QuotedByte *q = &table[s[i]];
        memcpy(t->data + t->len, q->bytes, sizeof q->bytes);     /* all of it: a fixed-size copy */
        t->len += q->len;
    }
    t->data[t->len++] = '"';
    return 0;
}

static PyObject *text_str(TextOut *t)
{
    PyObject *s = PyUnicode_DecodeUTF8(t->data != NULL ? t->data : "", (Py_ssize_t)t->len, "strict");
    free(t->data);
    t->data = NULL;
    return s;
}

static PyObject *byte_level_sections(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* (vocab_text, merges_text): see the top of this file; None when the token ids are too sparse
     * to index by id. */
    PyObject *tokens, *ids, *left, *right, *alphabet, *pad_obj, *end_obj, *vocab = NULL, *merges = NULL;
    PyObject *ids_fast = NULL, *left_fast = NULL, *right_fast = NULL;
    QuotedByte table[256];
    TextOut v = {0}, m = {0};
    TokenIndex index = {0};
    const char *pad, *end;
    Py_ssize_t pad_len, end_len, i, n;
    char number[32];

    if (!PyArg_ParseTuple(args, "O!OOOUUU:byte_level_sections", &PyDict_Type, &tokens, &ids, &left, &right,
                          &alphabet, &pad_obj, &end_obj))
        return NULL;
    if (quoted_bytes_of(alphabet, table) < 0 || (pad = PyUnicode_AsUTF8AndSize(pad_obj, &pad_len)) == NULL ||
        (end = PyUnicode_AsUTF8AndSize(end_obj, &end_len)) == NULL)
        return NULL;
    switch (token_index_build(&index, tokens)) {
    case 0:
        break;
    case 1:
        token_index_free(&index);
        Py_RETURN_NONE;
    default:
        goto done;
    }
    if ((ids_fast = PySequence_Fast(ids, "ids must be a sequence")) == NULL ||
        (left_fast = PySequence_Fast(left, "left must be a sequence")) == NULL ||
        (right_fast = PySequence_Fast(right, "right must be a sequence")) == NULL)
        goto done;
    if (PySequence_Fast_GET_SIZE(left_fast) != PySequence_Fast_GET_SIZE(right_fast)) {
        PyErr_SetString(PyExc_ValueError, "left and right differ in length");
        goto done;
    }

    n = PySequence_Fast_GET_SIZE(ids_fast);
    if (text_put(&v, n ? "{\n" : "{}", 2) < 0)
        goto nomem;
    for (i = 0; i < n; i++) {
        PyObject *id = PySequence_Fast_GET_ITEM(ids_fast, i);
        long long value = PyLong_AsLongLong(id);
        int len;
        if (value == -1 && PyErr_Occurred())
            goto done;
        len = snprintf(number, sizeof number, ": %lld", value);
        if ((i > 0 && text_put(&v, ",\n", 2) < 0) || text_put(&v, pad, (size_t)pad_len) < 0)
            goto nomem;
        if (put_quoted_token(&v, table, &index, id) < 0)
            goto done;
        if (text_put(&v, number, (size_t)len) < 0)
            goto nomem;
    }
    if (n && (text_put(&v, end, (size_t)end_len) < 0 || text_put(&v, "}", 1) < 0))
        goto nomem;

    n = PySequence_Fast_GET_SIZE(left_fast);
    if (text_put(&m, n ? "[\n" : "[]", 2) < 0)
        goto nomem;
    for (i = 0; i < n; i++) {
        if ((i > 0 && text_put(&m, ",\n", 2) < 0) || text_put(&m, pad, (size_t)pad_len) < 0 ||
            text_put(&m, "[", 1) < 0)
            goto nomem;
        if (put_quoted_token(&m, table, &index, PySequence_Fast_GET_ITEM(left_fast, i)) < 0)
            goto done;
        if (text_put(&m, ", ", 2) < 0)
            goto nomem;
        if (put_quoted_token(&m, table, &index, PySequence_Fast_GET_ITEM(right_fast, i)) < 0)
            goto done;
        if (text_put(&m, "]", 1) < 0)
            goto nomem;
    }
    if (n && (text_put(&m, end, (size_t)end_len) < 0 || text_put(&m, "]", 1) < 0))
        goto nomem;

    if ((vocab = text_str(&v)) != NULL && (merges = text_str(&m)) != NULL) {
        PyObject *result = PyTuple_Pack(2, vocab, merges);
        Py_DECREF(vocab);
        Py_DECREF(merges);
        vocab = merges = NULL;
        Py_DECREF(ids_fast);
        Py_DECREF(left_fast);
        Py_DECREF(right_fast);
        token_index_free(&index);
        return result;
    }
    goto done;
nomem:
    PyErr_NoMemory();
done:
    Py_XDECREF(vocab);
    Py_XDECREF(merges);
    free(v.data);
    free(m.data);
    token_index_free(&index);
    Py_XDECREF(ids_fast);
    Py_XDECREF(left_fast);
    Py_XDECREF(right_fast);
    return NULL;
}

#endif

/*
 * bpe_ops._native: the compiled helpers that need no PCRE2, so they import wherever the module is
 * built, with or without libpcre2-8 (bpe_ops._pcre2 holds the splitting).
 *
 *   CountTable(packed=b"")      a sum of packed count tables (bpe_ops/count_table.py is the
 *                               specification): .add_packed, .absorb, .packed(), .columns(min_count,
 *                               large) (sorted, Arrow-ready), .count_values() (every count, for
 *                               a histogram), pickled as its packed table.
 *   utf8_length(text)           len(text.encode("utf-8")) without the copy, a lone surrogate as 3
 *                               bytes (bpe_ops/stats.py's `_utf8_length_python` is the specification).
 *   add_counts(into, counts)    into[k] = into.get(k, 0) + v for two dicts (pretokenize.add_counts).
 *   crc32(data)                 zlib.crc32 of bytes, the bucket function of the packed tables.
 *   measure_texts(texts, separators, wide)
 *                               each text's UTF-8 bytes, whitespace words and ASCII digit runs in
 *                               one pass, without the GIL (bpe_ops/stats.py's `measure_batch`).
 *   calibrate_ids(id_arrays, rows, mask, classes, raw, cells, counts=None)
 *                               a batch's calibration counts in one pass without the GIL
 *                               (bpe_ops/stats.py's `calibrate_ids` over `_id_runs` is the specification).
 *   calibrate_flat(ids, ends, rows, mask, classes, raw, cells, counts=None)
 *                               the same of records whose ids are one flat buffer (`FlatIds`).
 *   merge_ids(merges, vocab)    a tokenizer.json's merges as three int64 id columns (left, right,
 *                               merged) looked up in vocab, or None (bpe_ops/merge_ids.py's
 *                               `merge_ids_python` is the specification).
 *   model_spans(data)           the byte spans of model.vocab's and model.merges' values in a
 *                               tokenizer.json, or None (bpe_ops/json_merges.py: json.loads is the
 *                               specification, as for the next two).
 *   vocab_text(data, start, end)
 *                               json.loads of the vocab object in data[start:end], or None.
 *   merge_text_ids(data, start, end, vocab)
 *                               merge_ids of the JSON merges array in data[start:end], or None
 *                               (bpe_ops/json_merges.py's `merge_text_ids_python`).
 *   jsonl_text_id(line, text_key, id_key)
 *                               the string members text_key and id_key of a JSONL line as (text, id),
 *                               or None for anything else (sources.jsonl_record: json.loads is the
 *                               specification, and reads every line this leaves).
 *   jsonl_lines_fields(pieces, text_key, id_key)
 *                               jsonl_text_id over a batch of (offset, piece) pairs of a JSONL stream in
 *                               one pass without the GIL: None for a blank piece, True for one Python
 *                               reads (sources._read_jsonl is the specification).
 *   jsonl_block(data, end, text_key, id_key, limit)
 *                               jsonl_lines_fields of the lines of data[:end] (a block of whole lines,
 *                               no object per line made for them): (texts, ids, odd) columns, the
 *                               str objects filled without the GIL.
 *   id_hashes(ids)              each record id's 16-byte BLAKE2b, concatenated (tokenize_shard.id_hashes
 *                               is the specification: hashlib's).
 *   ranks_ascend(left, right, merged)
 *                               merging.ranks_ascend(merging.first_ranks(left, right), left, right,
 *                               merged) of three int64 columns, or None for an id outside 0..2**32-1
 *                               (merging.py's `ranks_ascend_of` runs the specification then).
 *   byte_level_sections(tokens, ids, left, right, alphabet, pad, end)
 *                               the vocab and merges sections of a canonical byte-level tokenizer.json
 *                               (bpe_ops/json_sections.py's `byte_level_sections_python`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_byte_map.h"
#include "_guard.h"
#include "_json_scan.h"
#include "_json_sections.h"
#include "_measure.h"
#include "_utf8_valid.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Work over fewer bytes than this keeps the GIL. A thread that lets go of it waits, to take it back,
 * until the thread running Python is made to let go (up to sys.getswitchinterval(), 5 ms): far
 * longer than such work takes, and the tokenize threads each make several such calls per chunk. */
#define GIL_FREE_BYTES ((size_t)1 << 16)

static PyThreadState *release_gil_for(size_t bytes)
{
    /* The GIL released when `bytes` of work are worth it (restore_gil takes it back), else NULL. */
    return bytes >= GIL_FREE_BYTES ? PyEval_SaveThread() : NULL;
}

static void restore_gil(PyThreadState *saved)
{
    if (saved != NULL)
        PyEval_RestoreThread(saved);
}

/* ---- packed count tables ---------------------------------------------------------------------- */

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
        Entry *e = bytemap_entry(m, key, len, bytemap_hash(key, len));
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
        if (e->hash && pack_record(&b, entry_key(m, e), e->key_len, e->value) < 0) {
            free(b.data);
            return PyErr_NoMemory();
        }
    }
    out = PyBytes_FromStringAndSize((const char *)b.data, (Py_ssize_t)b.len);
    free(b.data);
    return out;
}

/* ---- CountTable ------------------------------------------------------------------------------ */

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
    int c = tb_compare(sort_keys + x->key_at, sort_keys + y->key_at, n);
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
            tb_copy(at + end, entry_key(&self->counts, rows[i]), rows[i]->key_len);
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

static PyObject *table_count_values(CountTable *self, PyObject *Py_UNUSED(ignored))
{
    /* The count of every entry (int64, native byte order, in no particular order): what a histogram
     * of counts needs, without sorting the keys as `columns` does. */
    PyObject *out;
    int64_t *value;
    size_t i;
    if (!table_ready(self))
        return NULL;
    if ((out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(self->counts.used * sizeof(int64_t)))) == NULL)
        return NULL;
    value = (int64_t *)PyBytes_AS_STRING(out);
    for (i = 0; i <= self->counts.mask; i++)
        if (self->counts.slots[i].hash)
            *value++ = self->counts.slots[i].value;
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
    {"count_values", (PyCFunction)table_count_values, METH_NOARGS,
     "count_values()\n--\n\nThe count of every key as int64 in native byte order, in no particular order."},
    {"__reduce__", (PyCFunction)table_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}
};

static PySequenceMethods table_as_sequence = {.sq_length = (lenfunc)table_len};

static PyTypeObject CountTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_ops._native.CountTable",
    .tp_basicsize = sizeof(CountTable),
    .tp_dealloc = (destructor)table_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "CountTable(packed=b'')\n--\n\nA sum of packed count tables (bpe_ops/count_table.py), in C.",
    .tp_methods = table_methods,
    .tp_as_sequence = &table_as_sequence,
    .tp_init = (initproc)table_init,
    .tp_new = PyType_GenericNew,
};

/* ---- functions --------------------------------------------------------------------------------- */

static PyObject *utf8_length(PyObject *Py_UNUSED(module), PyObject *text)
{
    /* len(text.encode("utf-8")) without the copy; a lone surrogate counts 3 bytes, as U+FFFD (what
     * the pipelines write in its place) does. */
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "utf8_length() takes a str");
        return NULL;
    }
    return PyLong_FromSize_t(str_utf8_size(PyUnicode_KIND(text), PyUnicode_DATA(text),
                                           (size_t)PyUnicode_GET_LENGTH(text)));
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

static PyObject *crc32(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer data;
    uint32_t c;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    c = crc32_of(data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

static const char *utf8_surrogatepass(PyObject *text, Py_ssize_t *len, PyObject **encoded)
{
    /* str(...).encode("utf-8", "surrogatepass") of a str, as bytes and a length: its own UTF-8 (kept
     * by CPython with the str), or for a lone surrogate a new bytes object in *encoded, which the
     * caller releases (else *encoded is NULL). NULL with an exception set on failure. */
    const char *s;
    *encoded = NULL;
    if ((s = PyUnicode_AsUTF8AndSize(text, len)) != NULL || !PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
        return s;
    PyErr_Clear();
    if ((*encoded = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass")) == NULL)
        return NULL;
    *len = PyBytes_GET_SIZE(*encoded);
    return PyBytes_AS_STRING(*encoded);
}

static PyObject *record_groups(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* Each record id's stats.record_group, as native int32 values in one bytes object: zlib.crc32 of
     * its UTF-8 (a lone surrogate as its surrogatepass bytes) modulo `groups`. What the encoding
     * threads' calibration computes per record, without a bytes object and a call per id. */
    PyObject *ids, *seq, *out = NULL;
    long groups;
    Py_ssize_t n, i;
    int32_t *to;
    if (!PyArg_ParseTuple(args, "Ol:record_groups", &ids, &groups))
        return NULL;
    if (groups <= 0 || groups > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "record_groups: groups must be a positive int32");
        return NULL;
    }
    if ((seq = PySequence_Fast(ids, "record_groups: expected a sequence of str")) == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    if ((out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int32_t))) == NULL)
        goto done;
    to = (int32_t *)PyBytes_AS_STRING(out);
    for (i = 0; i < n; i++) {
        PyObject *id = PySequence_Fast_GET_ITEM(seq, i), *encoded = NULL;
        const char *s;
        Py_ssize_t len;
        if (!PyUnicode_Check(id)) {
            PyErr_Format(PyExc_TypeError, "record_groups: expected str, got %.100s", Py_TYPE(id)->tp_name);
            Py_CLEAR(out);
            goto done;
        }
        if ((s = utf8_surrogatepass(id, &len, &encoded)) == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        to[i] = (int32_t)(crc32_of((const uint8_t *)s, (size_t)len) % (uint32_t)groups);
        Py_XDECREF(encoded);
    }
done:
    Py_DECREF(seq);
    return out;
}

static PyObject *has_code_point_in(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* Whether any code point c of `text` has bit c of `bits` set (bits[c >> 3] >> (c & 7) & 1): see
     * guarded_code_point_in. */
    PyObject *text;
    Py_buffer bits;
    int found;
    if (!PyArg_ParseTuple(args, "Uy*:has_code_point_in", &text, &bits))
        return NULL;
    if (bits.len != 0x110000 / 8) {
        PyBuffer_Release(&bits);
        PyErr_SetString(PyExc_ValueError, "has_code_point_in(): bits must be 0x110000 / 8 bytes");
        return NULL;
    }
    found = guarded_code_point_in(PyUnicode_KIND(text), PyUnicode_DATA(text), (size_t)PyUnicode_GET_LENGTH(text),
                                  bits.buf);
    PyBuffer_Release(&bits);
    return PyBool_FromLong(found);
}

/* ---- per-record measures ---------------------------------------------------------------------- */

static PyObject *measure_texts(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* (n_bytes list, n_words list, digit runs as n x 5 native int64 in a bytearray). A text with a
     * lone surrogate is read as its surrogatepass encoding (3 bytes each, as utf8_length counts). */
    PyObject *texts, *wide, *seq = NULL, *keep = NULL, *bytes_out = NULL, *words_out = NULL, *runs = NULL,
             *result = NULL;
    Py_buffer table;
    Separators sep;
    Measured *m = NULL;
    Py_ssize_t n, i;
    if (!PyArg_ParseTuple(args, "Oy*O:measure_texts", &texts, &table, &wide))
        return NULL;
    if (separators_from(&sep, table.buf, table.len, wide, "measure_texts") < 0)
        goto done;
    if ((seq = PySequence_Fast(texts, "measure_texts: texts must be a sequence")) == NULL ||
        (keep = PyList_New(0)) == NULL)
        goto done;
    n = PySequence_Fast_GET_SIZE(seq);
    if ((m = calloc(n ? (size_t)n : 1, sizeof(Measured))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject *text = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t len;
        const char *s;
        if (!PyUnicode_Check(text)) {
            PyErr_Format(PyExc_TypeError, "measure_texts: expected str, got %.100s", Py_TYPE(text)->tp_name);
            goto done;
        }
        PyObject *encoded;
        if ((s = utf8_surrogatepass(text, &len, &encoded)) == NULL)
            goto done;
        if (encoded != NULL) {          /* kept (by `keep`) until the measures are taken */
            int appended = PyList_Append(keep, encoded);
            Py_DECREF(encoded);
            if (appended < 0)
                goto done;
        }
        m[i].s = (const uint8_t *)s;
        m[i].n = (size_t)len;
    }
    {
        size_t bytes = 0;
        PyThreadState *saved;
        for (i = 0; i < n; i++)
            bytes += m[i].n;
        saved = release_gil_for(bytes);
        for (i = 0; i < n; i++)
            measure(&sep, &m[i]);
        restore_gil(saved);
    }
    if ((bytes_out = PyList_New(n)) == NULL || (words_out = PyList_New(n)) == NULL ||
        (runs = PyByteArray_FromStringAndSize(NULL, n * DIGIT_RUN_LENGTHS * (Py_ssize_t)sizeof(int64_t))) == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        PyObject *a = PyLong_FromSize_t(m[i].n), *b = PyLong_FromLongLong(m[i].words);
        if (a == NULL || b == NULL) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            goto done;
        }
        PyList_SET_ITEM(bytes_out, i, a);
        PyList_SET_ITEM(words_out, i, b);
        memcpy(PyByteArray_AS_STRING(runs) + i * DIGIT_RUN_LENGTHS * sizeof(int64_t), m[i].runs, sizeof(m[i].runs));
    }
    result = PyTuple_Pack(3, bytes_out, words_out, runs);
done:
    PyBuffer_Release(&table);
    free(m);
    Py_XDECREF(seq);
    Py_XDECREF(keep);
    Py_XDECREF(bytes_out);
    Py_XDECREF(words_out);
    Py_XDECREF(runs);
    return result;
}

/* ---- calibration counts of a batch's token ids ------------------------------------------------ */

#define CALIBRATE_AHEAD 32      /* ids between the one counted and the one whose cells are fetched */

typedef struct {
    const uint32_t *ids;                /* one record's ids */
    Py_ssize_t len;
} IdRun;

typedef struct {
    Py_buffer rows, mask, classes, raw, cells, counts;
    uint64_t fold;                      /* the folded classes' F, or 0 for a class table */
    int narrow;                         /* counts (and cells) uint32: a thread's tallies */
} CalibrationTables;

static int calibration_tables(PyObject *classes_arg, CalibrationTables *t, Py_ssize_t n, const char *who)
{
    /* Checks the tables a calibration of n records reads and writes (rows, mask, raw, cells and counts
     * already taken as buffers), takes `classes` (a table, or the folded classes' power of two): 0,
     * or -1 with an exception set. */
    Py_ssize_t vocab = t->mask.len;
    if (PyLong_Check(classes_arg)) {
        long long f = PyLong_AsLongLong(classes_arg);
        if (f == -1 && PyErr_Occurred())
            return -1;
        if (f <= 0 || f > (1LL << 40) || (f & (f - 1)) != 0) {
            PyErr_Format(PyExc_ValueError, "%s: folded classes need a power of two", who);
            return -1;
        }
        t->fold = (uint64_t)f;
        if ((uint64_t)vocab <= 2 * t->fold)
            t->fold = (uint64_t)1 << 62;    /* every id its own class */
    } else if (PyObject_GetBuffer(classes_arg, &t->classes, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    t->narrow = t->counts.buf != NULL && t->counts.len == vocab * (Py_ssize_t)sizeof(uint32_t) &&
                t->counts.len != vocab * (Py_ssize_t)sizeof(int64_t);
    if ((!t->fold && t->classes.len != vocab * (Py_ssize_t)sizeof(int32_t)) ||
        t->rows.len != n * (Py_ssize_t)sizeof(int32_t) || t->raw.len != n * (Py_ssize_t)sizeof(int64_t) ||
        (t->counts.buf != NULL && !t->narrow && t->counts.len != vocab * (Py_ssize_t)sizeof(int64_t)) ||
        t->cells.len % (t->narrow ? (Py_ssize_t)sizeof(uint32_t) : (Py_ssize_t)sizeof(int64_t)) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: classes must be int32 per id of mask, rows int32 and raw int64 per "
                                       "record, counts int64 (or uint32, with uint32 cells) per id of mask", who);
        return -1;
    }
    return 0;
}

static void calibration_release(CalibrationTables *t)
{
    PyBuffer_Release(&t->rows);
    PyBuffer_Release(&t->mask);
    if (t->classes.buf != NULL)
        PyBuffer_Release(&t->classes);
    PyBuffer_Release(&t->raw);
    PyBuffer_Release(&t->cells);
    if (t->counts.buf != NULL)
        PyBuffer_Release(&t->counts);
}

static int calibrate_narrow(const IdRun *runs, Py_ssize_t n, const CalibrationTables *t)
{
    /* The counting of calibrate_runs into uint32 counts and cells (a thread's tallies: their caller
     * keeps every counter below 2**32, `stats.Tallies`), the ids already checked: half the memory
     * read at random of int64 tables, and nothing tracked. 0, or 2 at a cell outside cells (what
     * was counted before it stays counted). */
    const uint64_t fold = t->fold, ncells = (uint64_t)t->cells.len / sizeof(uint32_t);
    const uint8_t *is_raw = t->mask.buf;
    const int32_t *class_of = t->classes.buf, *row_of = t->rows.buf;
    int64_t *raw_out = t->raw.buf;
    uint32_t *cell = t->cells.buf, *count = t->counts.buf;
    Py_ssize_t i, k;
    for (i = 0; i < n; i++) {
        const uint32_t *v = runs[i].ids;
        const Py_ssize_t len = runs[i].len;
        const int64_t row = row_of[i];
        int64_t r = 0;
        for (k = 0; k < len; k++) {
            const uint32_t id = v[k];
            const uint64_t at = (uint64_t)(row + (fold ? (int64_t)(id < fold ? id : fold + (id & (fold - 1)))
                                                       : (int64_t)class_of[id]));
            if (k + CALIBRATE_AHEAD < len) {
                /* The id counts and the mask, read at random, are out of the cache after the encoder
                 * ran: fetched ahead, their misses overlap (the cells, a row of a few KB per record,
                 * stay in it). */
                __builtin_prefetch(count + v[k + CALIBRATE_AHEAD], 1);
                __builtin_prefetch(is_raw + v[k + CALIBRATE_AHEAD], 0);
            }
            if (at >= ncells) {
                raw_out[i] += r;
                return 2;
            }
            r += is_raw[id] != 0;
            cell[at]++;
            count[id]++;
        }
        raw_out[i] += r;
    }
    return 0;
}

static PyObject *calibrate_runs(const IdRun *runs, Py_ssize_t n, Py_ssize_t total, CalibrationTables *t)
{
    /* The counting shared by calibrate_ids and calibrate_flat: record i's ids are runs[i] (total ids
     * in all). Returns the bytes of the cells counted from zero (b"" for uint32 tables), or NULL with
     * an exception set. */
    Py_ssize_t i, vocab = t->mask.len, ncells = t->cells.len / (Py_ssize_t)sizeof(int64_t), touched = 0;
    const uint64_t fold = t->fold;
    int64_t *first;                     /* the cells counted from zero, in order */
    int bad = 0;
    PyObject *result;
    if ((first = malloc(t->narrow ? 1 : (size_t)(total < ncells ? total : ncells) * sizeof(int64_t) + 1)) == NULL)
        return PyErr_NoMemory();
    {
        PyThreadState *saved = release_gil_for((size_t)total * 4);    /* about a byte's work per id byte */
        const uint8_t *is_raw = t->mask.buf;
        const int32_t *class_of = t->classes.buf, *row_of = t->rows.buf;
        int64_t *raw_out = t->raw.buf, *cell = t->cells.buf, *count = t->counts.buf;
        /* Checked first: an id outside the vocabulary raises before anything is counted. */
        for (i = 0; i < n && !bad; i++) {
            const uint32_t *v = runs[i].ids;
            Py_ssize_t k, len = runs[i].len;
            uint32_t largest = 0;       /* (a maximum with no early exit: the compiler vectorises it) */
            for (k = 0; k < len; k++)
                largest = v[k] > largest ? v[k] : largest;
            bad = len > 0 && largest >= (uint64_t)vocab;
        }
        /* One pass per record reads each id once for its three tables (the id counts in the same
         * pass: a second pass would read the ids and the class table again). A cell outside cells
         * stops the pass there (a caller's error: what was counted before it stays counted). */
        if (t->narrow && !bad)
            bad = calibrate_narrow(runs, n, t);
        for (i = 0; i < n && !bad && !t->narrow; i++) {
            const uint32_t *v = runs[i].ids;
            Py_ssize_t k, len = runs[i].len;
            const int64_t row = row_of[i];
            int64_t r = 0;
            for (k = 0; k < len; k++) {
                const uint32_t id = v[k];
                const int64_t at = row + (fold ? (id < fold ? (int64_t)id : (int64_t)(fold + (id & (fold - 1))))
                                               : class_of[id]);
                if (k + CALIBRATE_AHEAD < len) {
                    /* The tables are read at random (ids in text order) and, between two batches, the
                     * encoder has pushed them out of the cache: fetched ahead, their misses overlap. */
                    const uint32_t ahead = v[k + CALIBRATE_AHEAD];
                    const int64_t later = row + (fold ? (ahead < fold ? (int64_t)ahead
                                                                      : (int64_t)(fold + (ahead & (fold - 1))))
                                                      : 0);
                    if (fold && (uint64_t)later < (uint64_t)ncells)
                        __builtin_prefetch(cell + later, 1);
                    __builtin_prefetch(is_raw + ahead, 0);
                    if (count != NULL)
                        __builtin_prefetch(count + ahead, 1);
                }
                if ((uint64_t)at >= (uint64_t)ncells) {
                    bad = 2;
                    break;
                }
                r += is_raw[id] != 0;
                if (cell[at]++ == 0)
                    first[touched++] = at;
                if (count != NULL)
                    count[id]++;
            }
            raw_out[i] += r;
        }
        restore_gil(saved);
    }
    if (bad) {
        PyErr_Format(PyExc_ValueError, bad == 1 ? "token id outside the vocabulary (size %zd)"
                                                : "calibrate_ids: a cell outside cells (vocabulary of %zd ids)", vocab);
        result = NULL;
    } else {
        result = PyBytes_FromStringAndSize((const char *)first, touched * (Py_ssize_t)sizeof(int64_t));
    }
    free(first);
    return result;
}

static PyObject *calibrate_ids(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* For each record i of a batch (its ids a uint32 buffer): raw[i] += the ids with mask[id] set,
     * cells[rows[i] + classes[id]] += 1 for each id; in one pass over the ids without the GIL (the
     * numpy specification, stats.calibrate_ids, makes five passes and temporaries). Returns the
     * indexes of the cells that were zero and are no longer (int64, in the order first counted), so
     * a caller reusing one zeroed table reads out and clears only those. With `counts` (int64 per id
     * of the vocabulary), counts[id] += 1 for each id too, in the same pass: the token-id frequencies
     * of a caller that keeps cells and counts across batches. With `counts` uint32 (4 bytes per id),
     * cells are uint32 too and nothing is tracked (returns b""): a thread's tallies, whose caller
     * keeps every counter below 2**32 (stats.Tallies). `classes` is an int32 class per id, or
     * an int F (a power of two), the folded classes: id below F or in a vocabulary of at most 2F ids,
     * the id itself; above, F + id mod F. Computed, that class costs no table that the encoder
     * running between two batches pushes out of the cache. Raises ValueError at an id outside the
     * vocabulary (len(mask)), before anything is added, or at a cell outside cells (rows that do not
     * fit the table: a caller's error). */
    PyObject *arrays, *classes_arg, *seq = NULL, *result = NULL;
    CalibrationTables t = {0};
    Py_buffer *ids = NULL;
    IdRun *runs = NULL;
    Py_ssize_t n, i, got = 0, total = 0;
    if (!PyArg_ParseTuple(args, "Oy*y*Ow*w*|w*:calibrate_ids", &arrays, &t.rows, &t.mask, &classes_arg, &t.raw,
                          &t.cells, &t.counts))
        return NULL;
    if ((seq = PySequence_Fast(arrays, "calibrate_ids: id_arrays must be a sequence")) == NULL)
        goto done;
    n = PySequence_Fast_GET_SIZE(seq);
    if (calibration_tables(classes_arg, &t, n, "calibrate_ids") < 0)
        goto done;
    if ((ids = calloc(n ? (size_t)n : 1, sizeof(Py_buffer))) == NULL ||
        (runs = calloc(n ? (size_t)n : 1, sizeof(IdRun))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (got = 0; got < n; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &ids[got], PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        if (ids[got].itemsize != 4 || ids[got].format == NULL || strchr("IL", ids[got].format[0]) == NULL ||
            ids[got].format[1] != '\0') {
            PyBuffer_Release(&ids[got]);
            PyErr_SetString(PyExc_TypeError, "calibrate_ids: each record's ids must be a uint32 buffer");
            goto done;
        }
        runs[got].ids = ids[got].buf;
        runs[got].len = ids[got].len / 4;
        total += runs[got].len;
    }
    result = calibrate_runs(runs, n, total, &t);
done:
    for (i = 0; i < got; i++)
        PyBuffer_Release(&ids[i]);
    free(ids);
    free(runs);
    Py_XDECREF(seq);
    calibration_release(&t);
    return result;
}

static PyObject *calibrate_flat(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* calibrate_ids of a batch whose ids are one flat uint32 buffer, record i's the ids from ends[i - 1]
     * (0 for the first) to ends[i] (int64, non-decreasing, the last at most the buffer's ids): the
     * same counts, with no buffer per record. */
    PyObject *classes_arg, *result = NULL;
    CalibrationTables t = {0};
    Py_buffer flat = {0}, ends = {0};
    IdRun *runs = NULL;
    Py_ssize_t n, i, at = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*y*Ow*w*|w*:calibrate_flat", &flat, &ends, &t.rows, &t.mask, &classes_arg,
                          &t.raw, &t.cells, &t.counts))
        return NULL;
    n = ends.len / (Py_ssize_t)sizeof(int64_t);
    if (flat.len % 4 != 0 || ends.len % (Py_ssize_t)sizeof(int64_t) != 0) {
        PyErr_SetString(PyExc_ValueError, "calibrate_flat: ids must be uint32 and ends int64");
        goto done;
    }
    if (calibration_tables(classes_arg, &t, n, "calibrate_flat") < 0)
        goto done;
    if ((runs = calloc(n ? (size_t)n : 1, sizeof(IdRun))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        int64_t end = ((const int64_t *)ends.buf)[i];
        if (end < at || end > flat.len / 4) {
            PyErr_SetString(PyExc_ValueError, "calibrate_flat: ends must rise from 0 to at most the ids held");
            goto done;
        }
        runs[i].ids = (const uint32_t *)flat.buf + at;
        runs[i].len = (Py_ssize_t)(end - at);
        at = (Py_ssize_t)end;
    }
    result = calibrate_runs(runs, n, at, &t);
done:
    free(runs);
    PyBuffer_Release(&flat);
    PyBuffer_Release(&ends);
    calibration_release(&t);
    return result;
}

/* ---- a Parquet data page of a list column ------------------------------------------------------ */

#define LIST_PAGE_MAX ((int64_t)0x7FFFFFFF)   /* a page's size is an i32 in its header */

typedef struct {
    uint8_t *out;
    int value;                          /* the run being counted: its level and length */
    uint64_t count;
} LevelRuns;

static void level_run_flush(LevelRuns *r)
{
    /* The run counted so far, as an RLE run of the hybrid encoding: its length shifted left once
     * (a zero low bit: a repeated run), in a varint, then the level in one byte (levels here have
     * a bit width of at most 8). */
    uint64_t header = r->count << 1;
    if (r->count == 0)
        return;
    while (header > 0x7F) {
        *r->out++ = (uint8_t)(header | 0x80);
        header >>= 7;
    }
    *r->out++ = (uint8_t)header;
    *r->out++ = (uint8_t)r->value;
    r->count = 0;
}

static void level_run_add(LevelRuns *r, int value, uint64_t count)
{
    if (count == 0)
        return;
    if (r->count && r->value != value)
        level_run_flush(r);
    r->value = value;
    r->count += count;
}

static void put_u32le(uint8_t *at, uint32_t v)
{
    at[0] = (uint8_t)v;
    at[1] = (uint8_t)(v >> 8);
    at[2] = (uint8_t)(v >> 16);
    at[3] = (uint8_t)(v >> 24);
}

static PyObject *list_page(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* The body of a Parquet data page (version 1, uncompressed) of a required list<int32> column
     * holding records first..last-1: record i's ids run from ends[i - 1] (0 for the first record) to
     * ends[i] in `ids` (uint32). The body is the repetition levels, the definition levels (each an
     * RLE-hybrid run list after its length, a u32) and the ids as PLAIN int32. A record of n > 0 ids
     * has repetition levels 0 then n - 1 ones and n definition levels of 2; an empty record one level
     * 0 of each. Equal neighbouring levels are one run. The Python specification: schemas.token_pages.
     * page_body_spec. Raises ValueError when the records or ends are out of range, OverflowError
     * when the page would not fit an i32. */
    Py_buffer ids = {0}, ends = {0};
    Py_ssize_t first, last, n_records, i;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*nn:list_page", &ids, &ends, &first, &last))
        return NULL;
    n_records = ends.len / (Py_ssize_t)sizeof(int64_t);
    if (ids.len % 4 != 0 || ends.len % (Py_ssize_t)sizeof(int64_t) != 0 || first < 0 || last < first ||
        last > n_records) {
        PyErr_SetString(PyExc_ValueError, "list_page: ids must be uint32, ends int64, first <= last <= len(ends)");
        goto done;
    }
    {
        const int64_t *end = ends.buf;
        const int64_t begin = first ? end[first - 1] : 0, stop = last > first ? end[last - 1] : begin;
        const Py_ssize_t records = last - first;
        int64_t bound, at = begin;
        uint8_t *base;
        if (begin < 0 || begin > ids.len / 4) {
            PyErr_SetString(PyExc_ValueError, "list_page: ends must rise within the ids held");
            goto done;
        }
        for (i = first; i < last; i++) {
            if (end[i] < at || end[i] > ids.len / 4) {
                PyErr_SetString(PyExc_ValueError, "list_page: ends must rise within the ids held");
                goto done;
            }
            at = end[i];
        }
        /* Each record adds at most two runs to the repetition levels and one to the definition
         * levels, each run at most 11 bytes (a ten-byte varint and the level). */
        bound = 8 + 33 * (int64_t)records + 4 * (stop - begin);
        if (stop - begin > LIST_PAGE_MAX / 4) {
            PyErr_SetString(PyExc_OverflowError, "list_page: the page would pass 2 GiB");
            goto done;
        }
        if ((result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound)) == NULL)
            goto done;
        base = (uint8_t *)PyBytes_AS_STRING(result);
        {
            PyThreadState *saved = release_gil_for((size_t)(stop - begin) * 4);
            LevelRuns runs = {base + 4, 0, 0};
            uint8_t *defs;
            int64_t previous = begin;
            for (i = first; i < last; i++) {
                const int64_t n = end[i] - previous;
                level_run_add(&runs, 0, 1);
                if (n > 1)
                    level_run_add(&runs, 1, (uint64_t)(n - 1));
                previous = end[i];
            }
            level_run_flush(&runs);
            put_u32le(base, (uint32_t)(runs.out - base - 4));
            defs = runs.out;
            runs.out = defs + 4;
            previous = begin;
            for (i = first; i < last; i++) {
                const int64_t n = end[i] - previous;
                level_run_add(&runs, n ? 2 : 0, n ? (uint64_t)n : 1);
                previous = end[i];
            }
            level_run_flush(&runs);
            put_u32le(defs, (uint32_t)(runs.out - defs - 4));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            if (stop > begin)
                memcpy(runs.out, (const uint32_t *)ids.buf + begin, (size_t)(stop - begin) * 4);
            runs.out += (stop - begin) * 4;
#else
            for (at = begin; at < stop; at++, runs.out += 4)
                put_u32le(runs.out, ((const uint32_t *)ids.buf)[at]);
#endif
            restore_gil(saved);
            if (runs.out - base > LIST_PAGE_MAX) {
                Py_CLEAR(result);
                PyErr_SetString(PyExc_OverflowError, "list_page: the page would pass 2 GiB");
                goto done;
            }
            if (_PyBytes_Resize(&result, (Py_ssize_t)(runs.out - base)) < 0)
                goto done;
        }
    }
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&ends);
    return result;
}

/* ---- a JSONL record's text and id ------------------------------------------------------------ */

#define BYTES_ONES 0x0101010101010101ull
#define BYTES_HIGHS 0x8080808080808080ull

static inline int plain_string_bytes(uint64_t v)
{
    /* Whether none of eight bytes ends a JSON string, starts an escape or is a control character
     * ('"', '\\', < 0x20): each is a has-zero or has-less-than test over the whole word. */
    uint64_t quote = v ^ (BYTES_ONES * '"'), slash = v ^ (BYTES_ONES * '\\');
    uint64_t found = ((quote - BYTES_ONES) & ~quote) | ((slash - BYTES_ONES) & ~slash) | ((v - BYTES_ONES * 0x20) & ~v);
    return (found & BYTES_HIGHS) == 0;
}

static ptrdiff_t json_string_utf8(const uint8_t *s, size_t n, size_t at, uint8_t *out, size_t *len)
{
    /* The JSON string at `at` (on its '"') unescaped into `out` (room for n - at bytes: an escape is
     * never shorter than its UTF-8) as UTF-8, its length in *len; returns the offset after the
     * closing '"', -1 for what is not a strict JSON string (a raw control character, a bad escape,
     * no end), -2 for an escaped surrogate that is not half of a pair (json.loads keeps it in the
     * str, as a lone surrogate). The raw bytes are copied as they are: the caller checked them. */
    size_t w = 0;
    at++;
    for (;;) {
        uint32_t c;
        int e;
#if defined(__SSE2__)
        /* Sixteen bytes at a time: each is stored as it is, and the first that ends the run (a '"',
         * a '\\' or a control character) is found from the mask of their compares: the bytes before
         * it are kept, it is read below. `out` has room for the rest of the line, which holds the
         * sixteen bytes. */
        while (n - at >= 16) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(s + at));
            const __m128i special = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                _mm_cmpeq_epi8(_mm_max_epu8(v, _mm_set1_epi8(0x1F)), _mm_set1_epi8(0x1F)));
            const unsigned found = (unsigned)_mm_movemask_epi8(special);
            _mm_storeu_si128((__m128i *)(out + w), v);
            if (found != 0) {
                const unsigned plain = (unsigned)__builtin_ctz(found);
                w += plain;
                at += plain;
                break;
            }
            w += 16;
            at += 16;
        }
        /* (a run ended by what was found above goes straight to it; the last bytes, eight at a time) */
        while (n - at < 16 && n - at >= 8) {
#else
        while (n - at >= 8) {
#endif
            uint64_t v;
            memcpy(&v, s + at, 8);
            if (!plain_string_bytes(v))
                break;
            memcpy(out + w, &v, 8);
            w += 8;
            at += 8;
        }
        if (at >= n)
            return -1;
        c = s[at];
        if (c == '"') {
            *len = w;
            return (ptrdiff_t)(at + 1);
        }
        if (c < 0x20)
            return -1;
        if (c != '\\') {
            out[w++] = (uint8_t)c;
            at++;
            continue;
        }
        if (n - at < 2)
            return -1;
        switch (s[at + 1]) {
        case 'u': {
            long u = json_hex4(s, n, at + 2), low;
            if (u < 0)
                return -1;
            if (u >= 0xD800 && u <= 0xDFFF) {
                if (u >= 0xDC00 || n - at < 12 || s[at + 6] != '\\' || s[at + 7] != 'u' ||
                    (low = json_hex4(s, n, at + 8)) < 0xDC00 || low > 0xDFFF)
                    return -2;
                u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
                at += 6;
            }
            c = (uint32_t)u;
            at += 4;
            break;
        }
        default:
            if ((e = json_short_escape(s[at + 1])) < 0)
                return -1;
            c = (uint32_t)e;
        }
        at += 2;
        if (c < 0x80) {
            out[w++] = (uint8_t)c;
        } else if (c < 0x800) {
            out[w++] = (uint8_t)(0xC0 | c >> 6);
            out[w++] = (uint8_t)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            out[w++] = (uint8_t)(0xE0 | c >> 12);
            out[w++] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
            out[w++] = (uint8_t)(0x80 | (c & 0x3F));
        } else {
            out[w++] = (uint8_t)(0xF0 | c >> 18);
            out[w++] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
            out[w++] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
            out[w++] = (uint8_t)(0x80 | (c & 0x3F));
        }
    }
}

typedef struct {
    uint8_t *text, *id;                  /* the unescaped UTF-8 of the text and id members (malloc'd) */
    size_t text_n, id_n;
    int have_text, have_id;
    int lent;                            /* text and id are the caller's, each room for the whole line */
} LineFields;

static int jsonl_scan(const uint8_t *s, size_t n, const char *text_key, size_t text_len, const char *id_key,
                      size_t id_len, LineFields *f)
{
    /* `jsonl_text_id`'s reading of one line into *f, touching no Python object (it runs without the
     * GIL): 1 when the line is one it reads, 0 when json.loads must read it, -1 when out of memory. */
    size_t at;
    if (!utf8_valid(s, n))
        return 0;
    at = json_space(s, n, 0);
    if (at >= n || s[at] != '{')
        return 0;
    at = json_space(s, n, at + 1);
    if (at < n && s[at] == '}')
        return 0;                                            /* no text member */
    for (;;) {
        size_t key_at = at + 1, key_len;
        ptrdiff_t end;
        int is_text, is_id, r;
        if ((end = json_string_end(s, n, at)) < 0)
            return 0;
        key_len = (size_t)end - 1 - key_at;
        if (memchr(s + key_at, '\\', key_len) != NULL)
            return 0;
        at = json_space(s, n, (size_t)end);
        if (at >= n || s[at] != ':')
            return 0;
        at = json_space(s, n, at + 1);
        is_text = key_len == text_len && memcmp(s + key_at, text_key, key_len) == 0;
        is_id = id_key != NULL && key_len == id_len && memcmp(s + key_at, id_key, key_len) == 0;
        if (is_text || is_id) {                              /* a repeated key: the last one counts */
            uint8_t **out = is_text ? &f->text : &f->id;
            size_t got;
            if (at >= n || s[at] != '"')
                return 0;
            if (*out == NULL && (*out = malloc(n - at)) == NULL)
                return -1;
            if ((end = json_string_utf8(s, n, at, *out, &got)) < 0)
                return 0;
            if (is_text)
                f->text_n = got, f->have_text = 1;
            if (is_id) {
                if (is_text) {                               /* one member is both: its bytes once more */
                    if (!f->lent) {
                        free(f->id);
                        if ((f->id = malloc(got + 1)) == NULL)
                            return -1;
                    }
                    memcpy(f->id, f->text, got);
                }
                f->id_n = got, f->have_id = 1;
            }
        } else if ((end = json_value_end(s, n, at)) < 0) {
            return 0;
        }
        at = (size_t)end;
        if ((r = json_next(s, n, &at, '}')) < 0)
            return 0;
        if (r == 0)
            break;
    }
    return json_space(s, n, at + 1) == n && f->have_text;
}

/* Lines at least this long are read without the GIL: the encoding threads run their Python meanwhile. */
#define JSONL_FREE_THREADS_BYTES 4096

static Py_UCS4 utf8_extent(const uint8_t *s, size_t n, size_t *chars)
{
    /* The characters of valid UTF-8 (in *chars: its bytes less its continuation bytes) and the
     * largest code point of its str's kind: 0x7F, 0xFF, 0xFFFF or 0x10FFFF, read from the largest
     * lead byte (0xC4 starts U+0100, 0xF0 U+10000), so that the str made for it is in CPython's
     * canonical (smallest) kind. With SSE2, sixteen bytes at a time: their largest byte and their
     * continuation bytes (0x80..0xBF) counted in byte lanes, summed before a lane can overflow. */
    size_t i = 0, conts = 0;
    uint8_t top = 0;
#if defined(__SSE2__)
    {
        __m128i tops = _mm_setzero_si128();
        uint8_t lanes[16];
        int k;
        while (n - i >= 16) {
            __m128i counted = _mm_setzero_si128();
            size_t stop = i + 16 * 255 < n ? i + 16 * 255 : n;    /* a byte lane counts up to 255 */
            for (; stop - i >= 16; i += 16) {
                const __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
                tops = _mm_max_epu8(tops, v);
                /* a continuation byte is 10xxxxxx: its compare is -1, subtracted to count it */
                counted = _mm_sub_epi8(counted, _mm_cmpeq_epi8(_mm_and_si128(v, _mm_set1_epi8((char)0xC0)),
                                                               _mm_set1_epi8((char)0x80)));
            }
            counted = _mm_sad_epu8(counted, _mm_setzero_si128());
            conts += (size_t)_mm_cvtsi128_si32(counted) + (size_t)_mm_cvtsi128_si32(_mm_srli_si128(counted, 8));
        }
        _mm_storeu_si128((__m128i *)lanes, tops);
        for (k = 0; k < 16; k++)
            top = lanes[k] > top ? lanes[k] : top;
    }
#endif
    for (; i < n; i++) {
        conts += (s[i] & 0xC0) == 0x80;
        top = s[i] > top ? s[i] : top;
    }
    *chars = n - conts;
    return top < 0x80 ? 0x7F : top < 0xC4 ? 0xFF : top < 0xF0 ? 0xFFFF : 0x10FFFF;
}

static void utf8_fill(const uint8_t *s, size_t n, int kind, void *data)
{
    /* Valid UTF-8 decoded into a str's data of `kind` (made by utf8_extent's figures, so every code
     * point fits): touches no Python object, so it runs without the GIL on a str not yet shared.
     * Runs of ASCII are copied (widened) sixteen bytes at a time with SSE2, else eight: most of a
     * Latin-script text is ASCII, and a single curly quote makes the whole text a str of two-byte
     * characters. */
    size_t i = 0, k = 0;
    if (kind == PyUnicode_1BYTE_KIND) {
        Py_UCS1 *out = data;
        while (i < n) {
            uint8_t c = s[i];
#if defined(__SSE2__)
            if (n - i >= 16) {
                const __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
                if (_mm_movemask_epi8(v) == 0) {
                    _mm_storeu_si128((__m128i *)(out + k), v);
                    i += 16;
                    k += 16;
                    continue;
                }
            }
#endif
            if (n - i >= 8) {
                uint64_t v;
                memcpy(&v, s + i, 8);
                if ((v & 0x8080808080808080ull) == 0) {
                    memcpy(out + k, &v, 8);
                    i += 8;
                    k += 8;
                    continue;
                }
            }
            if (c < 0x80) {
                out[k++] = c;
                i++;
            } else {
                out[k++] = (Py_UCS1)((c & 0x1F) << 6 | (s[i + 1] & 0x3F));
                i += 2;
            }
        }
        return;
    }
    while (i < n) {
        uint32_t c = s[i];
#if defined(__SSE2__)
        if (kind == PyUnicode_2BYTE_KIND && n - i >= 16) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
            if (_mm_movemask_epi8(v) == 0) {            /* sixteen ASCII bytes, widened to 16 bits */
                _mm_storeu_si128((__m128i *)((Py_UCS2 *)data + k), _mm_unpacklo_epi8(v, _mm_setzero_si128()));
                _mm_storeu_si128((__m128i *)((Py_UCS2 *)data + k + 8), _mm_unpackhi_epi8(v, _mm_setzero_si128()));
                i += 16;
                k += 16;
                continue;
            }
        }
#endif
        if (n - i >= 8) {
            uint64_t v;
            memcpy(&v, s + i, 8);
            if ((v & 0x8080808080808080ull) == 0) {
                int j;
                if (kind == PyUnicode_2BYTE_KIND)
                    for (j = 0; j < 8; j++)
                        ((Py_UCS2 *)data)[k + j] = s[i + j];
                else
                    for (j = 0; j < 8; j++)
                        ((Py_UCS4 *)data)[k + j] = s[i + j];
                i += 8;
                k += 8;
                continue;
            }
        }
        if (c < 0x80) {
            i += 1;
        } else if (c < 0xE0) {
            c = (c & 0x1F) << 6 | (s[i + 1] & 0x3F);
            i += 2;
        } else if (c < 0xF0) {
            c = (c & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
            i += 3;
        } else {
            c = (c & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3F) << 12 | (uint32_t)(s[i + 2] & 0x3F) << 6 |
                (s[i + 3] & 0x3F);
            i += 4;
        }
        if (kind == PyUnicode_2BYTE_KIND)
            ((Py_UCS2 *)data)[k++] = (Py_UCS2)c;
        else
            ((Py_UCS4 *)data)[k++] = c;
    }
}

static PyObject *long_text_str(const uint8_t *s, size_t n)
{
    /* The str of a long line's text (valid UTF-8, no surrogate: jsonl_scan's), sized with the GIL
     * and filled without it: the decoding of a long text was most of the reading thread's time
     * holding the GIL, which the encoding threads wait for between their compiled calls. */
    size_t chars;
    Py_UCS4 top;
    PyObject *text;
    Py_BEGIN_ALLOW_THREADS
    top = utf8_extent(s, n, &chars);
    Py_END_ALLOW_THREADS
    if ((text = PyUnicode_New((Py_ssize_t)chars, top)) == NULL)
        return NULL;
    if (top == 0x7F) {
        memcpy(PyUnicode_DATA(text), s, n);
        return text;
    }
    {
        int kind = PyUnicode_KIND(text);
        void *data = PyUnicode_DATA(text);
        Py_BEGIN_ALLOW_THREADS
        utf8_fill(s, n, kind, data);
        Py_END_ALLOW_THREADS
    }
    return text;
}

static PyObject *line_fields_tuple(const LineFields *f)
{
    /* (text, id) of a line jsonl_scan read, id None when it has none. */
    PyObject *text, *id, *pair;
    text = f->text_n >= JSONL_FREE_THREADS_BYTES
           ? long_text_str(f->text, f->text_n)
           : PyUnicode_DecodeUTF8((const char *)f->text, (Py_ssize_t)f->text_n, "strict");
    if (text == NULL)
        return NULL;
    id = !f->have_id ? Py_NewRef(Py_None) : PyUnicode_DecodeUTF8((const char *)f->id, (Py_ssize_t)f->id_n, "strict");
    pair = id == NULL ? NULL : PyTuple_Pack(2, text, id);
    Py_DECREF(text);
    Py_XDECREF(id);
    return pair;
}

static PyObject *jsonl_text_id(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* A JSONL line (bytes) -> (text, id): the string values of its members `text_key` and `id_key`
     * (id None when the line has no such member, or id_key is None), as json.loads of the line
     * decoded from UTF-8 reads them; or None whenever the line is anything else, or anything that
     * json.loads would have to judge: invalid UTF-8, not one strict JSON object (NaN, Infinity,
     * extra data, ...), no text member, a text or id that is not a string, a key written with an
     * escape, an escaped lone surrogate. The caller then reads the line with json.loads. */
    const uint8_t *s;
    Py_ssize_t n, text_len, id_len = -1;
    const char *text_key, *id_key = NULL;
    LineFields f = {0};
    int read;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y#s#z#:jsonl_text_id", &s, &n, &text_key, &text_len, &id_key, &id_len))
        return NULL;
    if (n >= JSONL_FREE_THREADS_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        read = jsonl_scan(s, (size_t)n, text_key, (size_t)text_len, id_key, (size_t)id_len, &f);
        Py_END_ALLOW_THREADS
    } else {
        read = jsonl_scan(s, (size_t)n, text_key, (size_t)text_len, id_key, (size_t)id_len, &f);
    }
    if (read < 0) {
        PyErr_NoMemory();
        goto done;
    }
    if (read == 0)
        goto done;
    result = line_fields_tuple(&f);
done:
    free(f.text);
    free(f.id);
    if (result == NULL && !PyErr_Occurred())
        result = Py_NewRef(Py_None);
    return result;
}

static int line_prepared(const uint8_t **s, size_t *n)
{
    /* A JSONL piece as `sources._read_jsonl` reads it: without a CR ending it, without a UTF-8 BOM
     * starting it; 0 when what is left is blank (only the bytes bytes.strip() drops: it takes no row). */
    size_t i;
    if (*n && (*s)[*n - 1] == '\r')
        (*n)--;
    if (*n >= 3 && (*s)[0] == 0xEF && (*s)[1] == 0xBB && (*s)[2] == 0xBF) {
        *s += 3;
        *n -= 3;
    }
    for (i = 0; i < *n; i++) {
        uint8_t c = (*s)[i];
        if (!(c == ' ' || (c >= '\t' && c <= '\r')))
            return 1;
    }
    return 0;
}

enum { LINE_BLANK, LINE_READ, LINE_PYTHON };

static PyObject *jsonl_lines_fields(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* A batch of a JSONL stream's pieces, [(offset, piece), ...] as `sources._split_stream` gives
     * them (a piece: the bytes between two LFs, or anything else: an Oversized), read in one pass
     * (without the GIL when it holds long lines): for each piece None when it is blank, (text, id) when
     * `jsonl_text_id` reads it (after its CR and BOM are dropped), or True when Python must read
     * it (`sources.jsonl_record`, `too_large`). */
    PyObject *pieces, *seq = NULL, *result = NULL, **held = NULL;
    const char *text_key, *id_key = NULL;
    Py_ssize_t n = 0, i, text_len, id_len = -1;
    LineFields *f = NULL;
    const uint8_t **starts = NULL;
    size_t *lengths = NULL;
    int *status = NULL, failed = 0;
    size_t long_bytes = 0;
    PyThreadState *saved;
    if (!PyArg_ParseTuple(args, "Os#z#:jsonl_lines_fields", &pieces, &text_key, &text_len, &id_key, &id_len))
        return NULL;
    if ((seq = PySequence_Fast(pieces, "jsonl_lines_fields: pieces must be a sequence")) == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    f = calloc(n ? (size_t)n : 1, sizeof(LineFields));
    starts = calloc(n ? (size_t)n : 1, sizeof(*starts));
    lengths = calloc(n ? (size_t)n : 1, sizeof(*lengths));
    status = calloc(n ? (size_t)n : 1, sizeof(*status));
    held = calloc(n ? (size_t)n : 1, sizeof(*held));
    if (f == NULL || starts == NULL || lengths == NULL || status == NULL || held == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *piece;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "jsonl_lines_fields: pieces are (offset, piece) pairs");
            goto done;
        }
        piece = PyTuple_GET_ITEM(item, 1);
        if (!PyBytes_CheckExact(piece)) {
            status[i] = LINE_PYTHON;
            continue;
        }
        held[i] = Py_NewRef(piece);          /* the bytes stay whatever happens to the list meanwhile */
        starts[i] = (const uint8_t *)PyBytes_AS_STRING(piece);
        lengths[i] = (size_t)PyBytes_GET_SIZE(piece);
        status[i] = LINE_READ;
        if (lengths[i] >= JSONL_FREE_THREADS_BYTES)
            long_bytes += lengths[i];
    }
    /* Long lines are read without the GIL, as jsonl_text_id reads them; short ones keep it: the
     * reading thread, which takes them, would then wait to take it back from the encoding threads. */
    saved = release_gil_for(long_bytes);
    for (i = 0; i < n && !failed; i++) {
        int read;
        if (status[i] != LINE_READ)
            continue;
        if (!line_prepared(&starts[i], &lengths[i])) {
            status[i] = LINE_BLANK;
            continue;
        }
        read = jsonl_scan(starts[i], lengths[i], text_key, (size_t)text_len, id_key, (size_t)id_len, &f[i]);
        if (read < 0)
            failed = 1;
        else if (read == 0)
            status[i] = LINE_PYTHON;
    }
    restore_gil(saved);
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    if ((result = PyList_New(n)) == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        PyObject *out;
        if (status[i] == LINE_BLANK) {
            out = Py_NewRef(Py_None);
        } else if (status[i] == LINE_PYTHON) {
            out = Py_NewRef(Py_True);
        } else {
            if ((out = line_fields_tuple(&f[i])) == NULL) {
                Py_CLEAR(result);
                goto done;
            }
        }
        PyList_SET_ITEM(result, i, out);
    }
done:
    for (i = 0; i < n; i++) {
        if (f != NULL) {
            free(f[i].text);
            free(f[i].id);
        }
        if (held != NULL)
            Py_XDECREF(held[i]);
    }
    free(f);
    free(starts);
    free(lengths);
    free(status);
    free(held);
    Py_DECREF(seq);
    return result;
}

/* ---- a block of JSONL lines ------------------------------------------------------------------- */

typedef struct {
    size_t at, n;                       /* the line's bytes in the block (without its LF) */
    int status;                         /* LINE_BLANK, LINE_READ, LINE_PYTHON, or LINE_OVERSIZED */
    size_t text_at, id_at;              /* where its text's and id's unescaped bytes are in the arenas */
    LineFields f;
    size_t text_chars, id_chars;        /* their characters and largest code point's str kind */
    Py_UCS4 text_top, id_top;
} BlockLine;

enum { LINE_OVERSIZED = LINE_PYTHON + 1 };

static PyObject *new_str_of(size_t chars, Py_UCS4 top)
{
    return PyUnicode_New((Py_ssize_t)chars, top);
}

static void fill_str(PyObject *str, const uint8_t *s, size_t n)
{
    /* A str made by new_str_of for valid UTF-8 s[0..n): its characters, without the GIL (the str is
     * not yet shared). */
    if (PyUnicode_KIND(str) == PyUnicode_1BYTE_KIND && PyUnicode_IS_ASCII(str))
        memcpy(PyUnicode_DATA(str), s, n);
    else
        utf8_fill(s, n, PyUnicode_KIND(str), PyUnicode_DATA(str));
}

static PyObject *jsonl_block(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* The lines of data[begin:end] (separated by LF; data[end] is the LF after the last, or end is
     * len(data); begin, 0 if not given, where the first starts: a caller reading a stream hands its
     * reads as they are), as `sources._read_jsonl` reads a batch of them, in three columns: texts, the str
     * text of each line that is a row (a blank line is none: after its CR and BOM are dropped it holds
     * only white space), None where Python must read the row; ids, the str id of each row (None where
     * it has none), or None when id_key is None; odd, (row, offset of the line in data, its bytes)
     * for each row Python reads (`jsonl_record` judges anything jsonl_text_id leaves), or (row,
     * offset, its length) for a line longer than `limit` bytes (-1: no limit), which is never held.
     * The lines are read without the GIL, into one buffer for all texts and one for all ids, and their
     * str objects filled without it: the GIL is held only to make the objects. With `utf8` true, texts
     * is instead (buffer, offsets, chars): the texts' UTF-8 in one bytes object, row k's at
     * buffer[offsets[k]:offsets[k + 1]] (empty for a row Python reads), and each row's characters,
     * both native int64 (`bpe_ops.utf8_texts.Utf8Texts`): no str is made of any text. */
    const uint8_t *data;
    Py_ssize_t size, end, text_len, id_len = -1, limit, begin = 0;
    const char *text_key, *id_key = NULL;
    BlockLine *lines = NULL;
    size_t *ends = NULL;                /* each line's end: the offset of its LF, or end */
    uint8_t *texts_arena = NULL, *ids_arena = NULL;
    PyObject **text_objs = NULL, **id_objs = NULL;
    PyObject *texts = NULL, *ids = NULL, *odd = NULL, *result = NULL, *arena_bytes = NULL;
    size_t count = 0, k, rows = 0, at, text_used = 0, id_used = 0;
    int failed = 0, utf8 = 0;
    int64_t *offsets = NULL, *chars = NULL;
    size_t text_end = 0;                /* with utf8: where the texts of the rows listed so far end */
    PyThreadState *saved;
    if (!PyArg_ParseTuple(args, "y#ns#z#n|np:jsonl_block", &data, &size, &end, &text_key, &text_len, &id_key, &id_len,
                          &limit, &begin, &utf8))
        return NULL;
    if (end < 0 || end > size || begin < 0 || begin > end) {
        PyErr_SetString(PyExc_ValueError, "jsonl_block: begin and end must be within data, begin first");
        return NULL;
    }
    /* The lines: one more than the LFs before end, each line's end found once (its LF, or end). */
    {
        size_t room = 64;
        if ((ends = malloc(room * sizeof(size_t))) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (at = (size_t)begin;; at = ends[count++] + 1) {
            const uint8_t *lf = at < (size_t)end ? memchr(data + at, '\n', (size_t)end - at) : NULL;
            if (count == room) {
                size_t *grown = realloc(ends, (room *= 2) * sizeof(size_t));
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                ends = grown;
            }
            if (lf == NULL) {
                ends[count++] = (size_t)end;
                break;
            }
            ends[count] = (size_t)(lf - data);
        }
    }
    if (utf8) {
        /* The texts' buffer is the bytes object handed back, cut to size after. */
        if ((arena_bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(end - begin) + 1)) == NULL)
            goto done;
        texts_arena = (uint8_t *)PyBytes_AS_STRING(arena_bytes);
    }
    if ((lines = calloc(count, sizeof(BlockLine))) == NULL ||
        (!utf8 && (texts_arena = malloc((size_t)(end - begin) + 1)) == NULL) ||
        (id_key != NULL && (ids_arena = malloc((size_t)(end - begin) + 1)) == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    saved = release_gil_for((size_t)(end - begin));
    for (k = 0, at = (size_t)begin; k < count; k++) {
        size_t stop = ends[k];
        BlockLine *line = &lines[k];
        const uint8_t *s = data + at;
        size_t n = stop - at;
        int read;
        line->at = at;
        line->n = n;
        at = stop + 1;
        if (limit >= 0 && n > (size_t)limit) {
            line->status = LINE_OVERSIZED;
            rows++;
            continue;
        }
        if (!line_prepared(&s, &n)) {
            line->status = LINE_BLANK;
            continue;
        }
        rows++;
        line->text_at = text_used;
        line->id_at = id_used;
        line->f.lent = 1;
        line->f.text = texts_arena + text_used;
        line->f.id = ids_arena != NULL ? ids_arena + id_used : NULL;
        read = jsonl_scan(s, n, text_key, (size_t)text_len, id_key, (size_t)id_len, &line->f);
        if (read < 0) {
            failed = 1;
            break;
        }
        if (read == 0) {
            line->status = LINE_PYTHON;
            continue;
        }
        line->status = LINE_READ;
        text_used += line->f.text_n;
        line->text_top = utf8_extent(line->f.text, line->f.text_n, &line->text_chars);
        if (line->f.have_id) {
            id_used += line->f.id_n;
            line->id_top = utf8_extent(line->f.id, line->f.id_n, &line->id_chars);
        }
    }
    restore_gil(saved);
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    /* The str objects, made with the GIL, filled without it, then listed with it. */
    if ((text_objs = calloc(count, sizeof(PyObject *))) == NULL || (id_objs = calloc(count, sizeof(PyObject *))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (k = 0; k < count; k++) {
        BlockLine *line = &lines[k];
        if (line->status != LINE_READ)
            continue;
        if ((!utf8 && (text_objs[k] = new_str_of(line->text_chars, line->text_top)) == NULL) ||
            (line->f.have_id && (id_objs[k] = new_str_of(line->id_chars, line->id_top)) == NULL))
            goto done;
    }
    saved = release_gil_for(text_used + id_used);
    for (k = 0; k < count; k++) {
        BlockLine *line = &lines[k];
        if (line->status != LINE_READ)
            continue;
        if (text_objs[k] != NULL)
            fill_str(text_objs[k], texts_arena + line->text_at, line->f.text_n);
        if (id_objs[k] != NULL)
            fill_str(id_objs[k], ids_arena + line->id_at, line->f.id_n);
    }
    restore_gil(saved);
    if ((!utf8 && (texts = PyList_New((Py_ssize_t)rows)) == NULL) || (odd = PyList_New(0)) == NULL ||
        (id_key != NULL && (ids = PyList_New((Py_ssize_t)rows)) == NULL))
        goto done;
    if (utf8 && ((offsets = malloc((rows + 1) * sizeof(int64_t))) == NULL ||
                 (chars = malloc((rows ? rows : 1) * sizeof(int64_t))) == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    for (k = 0, rows = 0; k < count; k++) {
        BlockLine *line = &lines[k];
        PyObject *entry;
        if (line->status == LINE_BLANK)
            continue;
        if (utf8) {
            /* The texts lie in the buffer one after the other, in row order; a row Python reads
             * holds no bytes there (an empty text, never encoded: it is read apart). */
            int read = line->status == LINE_READ;
            offsets[rows] = (int64_t)(read ? line->text_at : text_end);
            chars[rows] = read ? (int64_t)line->text_chars : 0;
            if (read)
                text_end = line->text_at + line->f.text_n;
        }
        if (line->status == LINE_READ) {
            if (!utf8) {
                PyList_SET_ITEM(texts, (Py_ssize_t)rows, text_objs[k]);
                text_objs[k] = NULL;
            }
            if (ids != NULL) {
                PyList_SET_ITEM(ids, (Py_ssize_t)rows, id_objs[k] != NULL ? id_objs[k] : Py_NewRef(Py_None));
                id_objs[k] = NULL;
            }
            rows++;
            continue;
        }
        if (!utf8)
            PyList_SET_ITEM(texts, (Py_ssize_t)rows, Py_NewRef(Py_None));
        if (ids != NULL)
            PyList_SET_ITEM(ids, (Py_ssize_t)rows, Py_NewRef(Py_None));
        entry = line->status == LINE_OVERSIZED
                ? Py_BuildValue("(nnn)", (Py_ssize_t)rows, (Py_ssize_t)line->at, (Py_ssize_t)line->n)
                : Py_BuildValue("(nny#)", (Py_ssize_t)rows, (Py_ssize_t)line->at, (const char *)data + line->at,
                                (Py_ssize_t)line->n);
        rows++;
        if (entry == NULL || PyList_Append(odd, entry) < 0) {
            Py_XDECREF(entry);
            goto done;
        }
        Py_DECREF(entry);
    }
    if (utf8) {
        PyObject *offsets_bytes, *chars_bytes;
        offsets[rows] = (int64_t)text_end;
        if (_PyBytes_Resize(&arena_bytes, (Py_ssize_t)text_used) < 0)
            goto done;                  /* (arena_bytes is NULL then) */
        offsets_bytes = PyBytes_FromStringAndSize((const char *)offsets, (Py_ssize_t)((rows + 1) * sizeof(int64_t)));
        chars_bytes = PyBytes_FromStringAndSize((const char *)chars, (Py_ssize_t)(rows * sizeof(int64_t)));
        if (offsets_bytes != NULL && chars_bytes != NULL)
            texts = PyTuple_Pack(3, arena_bytes, offsets_bytes, chars_bytes);
        Py_XDECREF(offsets_bytes);
        Py_XDECREF(chars_bytes);
        if (texts == NULL)
            goto done;
    }
    result = PyTuple_Pack(3, texts, ids != NULL ? ids : Py_None, odd);
done:
    if (text_objs != NULL)
        for (k = 0; k < count; k++) {
            Py_XDECREF(text_objs[k]);
            if (id_objs != NULL)
                Py_XDECREF(id_objs[k]);
        }
    free(text_objs);
    free(id_objs);
    free(lines);
    free(ends);
    if (!utf8)
        free(texts_arena);              /* else arena_bytes's own */
    Py_XDECREF(arena_bytes);
    free(offsets);
    free(chars);
    free(ids_arena);
    Py_XDECREF(texts);
    Py_XDECREF(ids);
    Py_XDECREF(odd);
    return result;
}

/* ---- record ids' hashes ------------------------------------------------------------------------ */

/* BLAKE2b (RFC 7693) with a 16-byte digest and no key: hashlib.blake2b(data, digest_size=16), the
 * hash `tokenize_shard.id_hashes` specifies, computed here without a Python call per id. */
static const uint64_t BLAKE2B_IV[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL};

static const uint8_t BLAKE2B_SIGMA[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

static inline uint64_t rotr64(uint64_t x, int n)
{
    return x >> n | x << (64 - n);
}

#define BLAKE2B_G(a, b, c, d, x, y)        \
    do {                                   \
        a = a + b + (x);                   \
        d = rotr64(d ^ a, 32);             \
        c = c + d;                         \
        b = rotr64(b ^ c, 24);             \
        a = a + b + (y);                   \
        d = rotr64(d ^ a, 16);             \
        c = c + d;                         \
        b = rotr64(b ^ c, 63);             \
    } while (0)

static void blake2b_compress(uint64_t h[8], const uint8_t block[128], uint64_t counted, int last)
{
    uint64_t m[16], v[16];
    int i, r;
    for (i = 0; i < 16; i++)
        m[i] = get_le(block + 8 * i, 8);
    for (i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = BLAKE2B_IV[i];
    }
    v[12] ^= counted;                      /* the byte counter's high word stays 0: ids are short */
    if (last)
        v[14] = ~v[14];
    for (r = 0; r < 12; r++) {
        const uint8_t *s = BLAKE2B_SIGMA[r];
        BLAKE2B_G(v[0], v[4], v[8], v[12], m[s[0]], m[s[1]]);
        BLAKE2B_G(v[1], v[5], v[9], v[13], m[s[2]], m[s[3]]);
        BLAKE2B_G(v[2], v[6], v[10], v[14], m[s[4]], m[s[5]]);
        BLAKE2B_G(v[3], v[7], v[11], v[15], m[s[6]], m[s[7]]);
        BLAKE2B_G(v[0], v[5], v[10], v[15], m[s[8]], m[s[9]]);
        BLAKE2B_G(v[1], v[6], v[11], v[12], m[s[10]], m[s[11]]);
        BLAKE2B_G(v[2], v[7], v[8], v[13], m[s[12]], m[s[13]]);
        BLAKE2B_G(v[3], v[4], v[9], v[14], m[s[14]], m[s[15]]);
    }
    for (i = 0; i < 8; i++)
        h[i] ^= v[i] ^ v[i + 8];
}

static void blake2b_16(const uint8_t *data, size_t n, uint8_t out[16])
{
    uint64_t h[8];
    uint8_t block[128];
    size_t done = 0;
    int i;
    memcpy(h, BLAKE2B_IV, sizeof(h));
    h[0] ^= 0x01010000ULL ^ 16;            /* digest length 16, no key, fanout and depth 1 */
    while (n - done > 128) {
        blake2b_compress(h, data + done, done + 128, 0);
        done += 128;
    }
    memset(block, 0, sizeof(block));
    if (n > done)
        memcpy(block, data + done, n - done);
    blake2b_compress(h, block, n, 1);
    for (i = 0; i < 2; i++) {
        int k;
        for (k = 0; k < 8; k++)
            out[8 * i + k] = (uint8_t)(h[i] >> (8 * k));
    }
}

static PyObject *id_hashes(PyObject *Py_UNUSED(module), PyObject *ids)
{
    /* Each id's hashlib.blake2b(str(id).encode("utf-8", "surrogatepass"), digest_size=16).digest(),
     * one after the other in one bytes object. Each id's UTF-8 is found with the GIL held (an id's
     * str, or the bytes of a lone surrogate's, is kept until the end); the hashing, a compression of
     * 128 bytes or more per id, runs without it for a row group's thousands of ids: the thread
     * reading the shard takes the GIL meanwhile. */
    PyObject *seq, *out = NULL, **held = NULL;
    const char **texts = NULL;
    Py_ssize_t n, i, kept = 0, *lens = NULL;
    uint8_t *to;
    if ((seq = PySequence_Fast(ids, "id_hashes: expected a sequence of ids")) == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    if ((out = PyBytes_FromStringAndSize(NULL, n * 16)) == NULL)
        goto done;
    if ((texts = malloc((size_t)(n ? n : 1) * sizeof(*texts))) == NULL ||
        (lens = malloc((size_t)(n ? n : 1) * sizeof(*lens))) == NULL ||
        (held = malloc((size_t)(n ? 2 * n : 1) * sizeof(*held))) == NULL) {
        PyErr_NoMemory();
        Py_CLEAR(out);
        goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject *id = PySequence_Fast_GET_ITEM(seq, i), *text;
        if (PyUnicode_CheckExact(id))
            text = Py_NewRef(id);
        else if ((text = PyObject_Str(id)) == NULL)
            goto fail;
        PyObject *encoded;
        held[kept++] = text;
        if ((texts[i] = utf8_surrogatepass(text, &lens[i], &encoded)) == NULL)
            goto fail;
        if (encoded != NULL)                /* a lone surrogate's bytes: kept too */
            held[kept++] = encoded;
    }
    to = (uint8_t *)PyBytes_AS_STRING(out);
    {
        PyThreadState *saved = release_gil_for((size_t)n * 128);
        for (i = 0; i < n; i++)
            blake2b_16((const uint8_t *)texts[i], (size_t)lens[i], to + 16 * i);
        restore_gil(saved);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    for (i = 0; i < kept; i++)
        Py_DECREF(held[i]);
    free(held);
    free(texts);
    free(lens);
    Py_DECREF(seq);
    return out;
}

/* ---- a tokenizer.json's merges as id columns ---------------------------------------------------- */

static int vocab_id(PyObject *vocab, PyObject *token, int64_t *out)
{
    /* 1 with vocab[token] in *out when it is there and a plain int that fits, 0 when not, -1 on error. */
    PyObject *id = PyDict_GetItemWithError(vocab, token);     /* borrowed */
    long long v;
    if (id == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyLong_CheckExact(id))
        return 0;
    v = PyLong_AsLongLong(id);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = (int64_t)v;
    return 1;
}

static int merge_halves(PyObject *merge, int string_form, PyObject **a, PyObject **b)
{
    /* New references to a merge's halves: 1, or 0 when it is not in the form the first merge has
     * ("a b" with one space, or ["a", "b"]), -1 on error. */
    *a = *b = NULL;
    if (string_form) {
        Py_ssize_t n, at;
        if (!PyUnicode_CheckExact(merge))
            return 0;
        n = PyUnicode_GET_LENGTH(merge);
        at = PyUnicode_FindChar(merge, ' ', 0, n, 1);
        if (at == -2)
            return -1;
        if (at < 0 || PyUnicode_FindChar(merge, ' ', at + 1, n, 1) != -1)
            return 0;
        *a = PyUnicode_Substring(merge, 0, at);
        *b = PyUnicode_Substring(merge, at + 1, n);
    } else {
        if (!PyList_CheckExact(merge) || PyList_GET_SIZE(merge) != 2)
            return 0;
        *a = PyList_GET_ITEM(merge, 0);
        *b = PyList_GET_ITEM(merge, 1);
        if (!PyUnicode_CheckExact(*a) || !PyUnicode_CheckExact(*b)) {
            *a = *b = NULL;
            return 0;
        }
        Py_INCREF(*a);
        Py_INCREF(*b);
    }
    if (*a == NULL || *b == NULL) {
        Py_CLEAR(*a);
        Py_CLEAR(*b);
        return -1;
    }
    return 1;
}

static int is_join(PyObject *key, PyObject *a, PyObject *b)
{
    /* Whether the str `key` holds the characters of a then those of b (all three ready str). */
    Py_ssize_t la = PyUnicode_GET_LENGTH(a), lb = PyUnicode_GET_LENGTH(b), i;
    int kind = PyUnicode_KIND(key);
    const char *data = PyUnicode_DATA(key);
    if (PyUnicode_GET_LENGTH(key) != la + lb)
        return 0;
    if (PyUnicode_KIND(a) == kind && PyUnicode_KIND(b) == kind)
        return memcmp(data, PyUnicode_DATA(a), (size_t)la * kind) == 0
            && memcmp(data + (size_t)la * kind, PyUnicode_DATA(b), (size_t)lb * kind) == 0;
    for (i = 0; i < la; i++)
        if (PyUnicode_READ(kind, data, i) != PyUnicode_READ_CHAR(a, i))
            return 0;
    for (i = 0; i < lb; i++)
        if (PyUnicode_READ(kind, data, la + i) != PyUnicode_READ_CHAR(b, i))
            return 0;
    return 1;
}

static PyObject **tokens_by_id(PyObject *vocab, Py_ssize_t *count)
{
    /* New references to vocab's str keys by their id (a plain int below *count, set here; NULL
     * where no such key), for `merge_ids` to guess a join's id; NULL on error. Any key of an id
     * will do: the vocab maps it to that id. */
    Py_ssize_t n = PyDict_GET_SIZE(vocab), at = 0, k;
    PyObject *key, *value, **keys;
    *count = 2 * n + 1024;
    if ((keys = PyMem_Calloc((size_t)*count, sizeof(PyObject *))) == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    while (PyDict_Next(vocab, &at, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || !PyLong_CheckExact(value))
            continue;
        k = PyLong_AsSsize_t(value);
        if (k == -1 && PyErr_Occurred())
            PyErr_Clear();
        else if (k >= 0 && k < *count && keys[k] == NULL)
            keys[k] = Py_NewRef(key);
    }
    return keys;
}

static PyObject *merge_ids(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* (left, right, merged), each the native int64 ids of one side of every merge as bytes, or None
     * when a merge is not in the first one's form or a half or product is not a plain int of vocab. */
    /* A file's merges mostly make tokens of consecutive ids (a tiktoken-made file's, several
     * merges the same token), and the dict lookup of a join is a cache miss or three in a large
     * vocab: the tokens of the last join's id and the next are compared with the halves first
     * (`tokens_by_id`); a join is built and looked up only when neither is it. */
    PyObject *merges, *vocab, *columns[3] = {NULL, NULL, NULL}, *result = NULL, **by_id = NULL;
    Py_ssize_t n, k, ids = 0;
    int64_t next = 0;
    int string_form, c;
    int64_t *out[3];
    if (!PyArg_ParseTuple(args, "O!O!:merge_ids", &PyList_Type, &merges, &PyDict_Type, &vocab))
        return NULL;
    n = PyList_GET_SIZE(merges);
    string_form = n > 0 && PyUnicode_CheckExact(PyList_GET_ITEM(merges, 0));
    for (c = 0; c < 3; c++) {
        if ((columns[c] = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t))) == NULL)
            goto done;
        out[c] = (int64_t *)PyBytes_AS_STRING(columns[c]);
    }
    if (n > 0 && (by_id = tokens_by_id(vocab, &ids)) == NULL)
        goto done;
    for (k = 0; k < n; k++) {
        PyObject *a, *b, *ab;
        int got = merge_halves(PyList_GET_ITEM(merges, k), string_form, &a, &b);
        if (got == 1) {
            got = vocab_id(vocab, a, &out[0][k]);
            if (got == 1)
                got = vocab_id(vocab, b, &out[1][k]);
            if (got == 1) {
                if (next > 0 && by_id[next - 1] != NULL && is_join(by_id[next - 1], a, b))
                    out[2][k] = next - 1;
                else if (next < ids && by_id[next] != NULL && is_join(by_id[next], a, b))
                    out[2][k] = next;
                else if ((ab = PyUnicode_Concat(a, b)) == NULL)
                    got = -1;
                else {
                    got = vocab_id(vocab, ab, &out[2][k]);
                    Py_DECREF(ab);
                }
                if (got == 1)          /* the next guess: the token after this join's */
                    next = out[2][k] >= 0 && out[2][k] < ids ? out[2][k] + 1 : ids;
            }
            Py_DECREF(a);
            Py_DECREF(b);
        }
        if (got < 0)
            goto done;
        if (got == 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    result = PyTuple_Pack(3, columns[0], columns[1], columns[2]);
done:
    for (c = 0; c < 3; c++)
        Py_XDECREF(columns[c]);
    if (by_id != NULL) {
        for (k = 0; k < ids; k++)
            Py_XDECREF(by_id[k]);
        PyMem_Free(by_id);
    }
    return result;
}

/* ---- a tokenizer.json's merges read from its text ------------------------------------------------ */

static ptrdiff_t model_members(const uint8_t *s, size_t n, size_t at, size_t span[4])
{
    /* `at` on the model object's '{': the offset after its '}', with the spans of its "vocab" and
     * "merges" values in span[0:2] and span[2:4]; -1 when malformed, when either is missing or
     * there twice, or when any key is escaped (it might spell one of them). */
    int found = 0, more;
    ptrdiff_t got;
    if (at >= n || s[at] != '{')
        return -1;
    at = json_space(s, n, at + 1);
    if (at < n && s[at] == '}')
        return -1;
    for (;;) {
        int which;
        if ((got = json_string_end(s, n, at)) < 0 || memchr(s + at, '\\', (size_t)got - at) != NULL)
            return -1;
        which = (size_t)got - at == 7 && memcmp(s + at + 1, "vocab", 5) == 0 ? 1
              : (size_t)got - at == 8 && memcmp(s + at + 1, "merges", 6) == 0 ? 2 : 0;
        at = json_space(s, n, (size_t)got);
        if (at >= n || s[at] != ':')
            return -1;
        at = json_space(s, n, at + 1);
        if ((got = json_value_end(s, n, at)) < 0 || (found & which))
            return -1;                                       /* json.loads keeps the last: not ours */
        if (which) {
            found |= which;
            span[2 * (which - 1)] = at, span[2 * (which - 1) + 1] = (size_t)got;
        }
        at = (size_t)got;
        if ((more = json_next(s, n, &at, '}')) > 0)
            continue;
        return more == 0 && found == 3 ? (ptrdiff_t)(at + 1) : -1;
    }
}

static PyObject *model_spans(PyObject *Py_UNUSED(module), PyObject *arg)
{
    /* (vocab_start, vocab_end, merges_start, merges_end) of model.vocab's and model.merges' values
     * when the whole text is one strict JSON object (see _json_scan.h) with one unescaped "model"
     * key, an object holding each once, unescaped; else None. */
    Py_buffer view;
    const uint8_t *s;
    size_t n, at, span[4] = {0, 0, 0, 0};
    int model = 0;
    ptrdiff_t got;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    s = view.buf, n = (size_t)view.len, at = json_space(s, n, 0);
    if (at >= n || s[at] != '{')
        goto none;
    at = json_space(s, n, at + 1);
    if (at < n && s[at] == '}')
        goto none;
    for (;;) {
        int is_model, more;
        if ((got = json_string_end(s, n, at)) < 0 || memchr(s + at, '\\', (size_t)got - at) != NULL)
            goto none;
        is_model = (size_t)got - at == 7 && memcmp(s + at + 1, "model", 5) == 0;
        at = json_space(s, n, (size_t)got);
        if (at >= n || s[at] != ':' || (is_model && model))
            goto none;
        at = json_space(s, n, at + 1);
        got = is_model ? model_members(s, n, at, span) : json_value_end(s, n, at);
        if (got < 0)
            goto none;
        model |= is_model;
        at = (size_t)got;
        if ((more = json_next(s, n, &at, '}')) > 0)
            continue;
        if (more < 0 || !model || json_space(s, n, at + 1) != n)
            goto none;
        break;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnnn)", (Py_ssize_t)span[0], (Py_ssize_t)span[1], (Py_ssize_t)span[2],
                         (Py_ssize_t)span[3]);
none:
    PyBuffer_Release(&view);
    return Py_NewRef(Py_None);
}

static PyObject *vocab_text(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* json.loads of the JSON object spelled in data[start:end] (one value with whitespace about it)
     * when every value is an integer of at most 18 digits: the same dict (keys in the same order, a
     * repeated key's last value), without json's key memo or its number parsing; else None (also
     * for a string that is not UTF-8 or escapes a lone surrogate). */
    Py_buffer view;
    PyObject *dict = NULL, *key = NULL, *value = NULL;
    Py_ssize_t first, last;
    const uint8_t *s;
    size_t n, at;
    uint32_t *chars = NULL;
    if (!PyArg_ParseTuple(args, "y*nn:vocab_text", &view, &first, &last))
        return NULL;
    if (first < 0 || last < first || last > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "vocab_text: the span is not inside the data");
        return NULL;
    }
    s = view.buf, n = (size_t)last, at = json_space(s, n, (size_t)first);
    if ((dict = PyDict_New()) == NULL)
        goto fail;
    if (at >= n || s[at] != '{')
        goto declined;
    at = json_space(s, n, at + 1);
    if (at < n && s[at] == '}')
        goto closed;
    for (;;) {
        ptrdiff_t end = json_string_end(s, n, at);
        size_t digits;
        long long v = 0;
        int negative, more;
        if (end < 0)
            goto declined;
        if (memchr(s + at + 1, '\\', (size_t)end - at - 2) == NULL) {
            key = PyUnicode_DecodeUTF8((const char *)s + at + 1, (Py_ssize_t)((size_t)end - at - 2), "strict");
            if (key == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    goto fail;
                PyErr_Clear();
                goto declined;
            }
        } else {
            size_t len;
            if (chars == NULL && (chars = PyMem_Malloc(((size_t)(last - first) + 1) * sizeof(uint32_t))) == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            if (json_string_chars(s, n, at, chars, &len) < 0)
                goto declined;
            if ((key = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, chars, (Py_ssize_t)len)) == NULL)
                goto fail;
        }
        at = json_space(s, n, (size_t)end);
        if (at >= n || s[at] != ':')
            goto declined;
        at = json_space(s, n, at + 1);
        negative = at < n && s[at] == '-';
        at += (size_t)negative;
        for (digits = 0; at < n && s[at] >= '0' && s[at] <= '9' && digits < 18; at++, digits++)
            v = v * 10 + (s[at] - '0');
        if (digits == 0 || (digits > 1 && s[at - digits] == '0')
            || (at < n && (s[at] == '.' || s[at] == 'e' || s[at] == 'E' || (s[at] >= '0' && s[at] <= '9'))))
            goto declined;
        if ((value = PyLong_FromLongLong(negative ? -v : v)) == NULL || PyDict_SetItem(dict, key, value) < 0)
            goto fail;
        Py_CLEAR(key);
        Py_CLEAR(value);
        if ((more = json_next(s, n, &at, '}')) > 0)
            continue;
        if (more == 0)
            break;
        goto declined;
    }
closed:
    if (json_space(s, n, at + 1) != n)
        goto declined;
    PyMem_Free(chars);
    PyBuffer_Release(&view);
    return dict;
declined:
    Py_CLEAR(dict);
    dict = Py_NewRef(Py_None);
fail:
    Py_XDECREF(key);
    Py_XDECREF(value);
    PyMem_Free(chars);
    PyBuffer_Release(&view);
    if (PyErr_Occurred()) {
        Py_XDECREF(dict);
        return NULL;
    }
    return dict;
}

typedef struct {
    int64_t *at;
    size_t used, room;
} Column;

static int column_push(Column *c, int64_t v)
{
    if (c->used == c->room) {
        size_t room = c->room ? 2 * c->room : 1024;
        int64_t *grown = PyMem_Realloc(c->at, room * sizeof(int64_t));
        if (grown == NULL)
            return -1;
        c->at = grown, c->room = room;
    }
    c->at[c->used++] = v;
    return 0;
}

/* The vocab as an open-addressing table over its keys' code points: one slot and the key's
 * characters per lookup where a dict takes its index, entry, key and int (cache misses in a large
 * vocab), and no str made of a merge half to look it up. */
typedef struct {
    PyObject *key;              /* borrowed from the vocab; NULL: an empty slot */
    int64_t id;
    uint32_t tag;               /* the hash's low bits */
    uint32_t plain;             /* the value is a plain int of 64 bits (else a lookup finds no id) */
} Slot;

typedef struct {
    Slot *slots;
    uint64_t mask;
    int shift;
    PyObject **by_id;           /* a key of each id below `ids` (borrowed), for guessing joins */
    Py_ssize_t ids;
} VocabTable;

static inline uint64_t chars_hash(uint64_t h, const uint32_t *c, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001B3ULL;
    return h;
}
#define CHARS_SEED 0xCBF29CE484222325ULL

static int key_is(PyObject *key, const uint32_t *c, size_t n)
{
    int kind = PyUnicode_KIND(key);
    const void *data = PyUnicode_DATA(key);
    size_t i;
    if ((size_t)PyUnicode_GET_LENGTH(key) != n)
        return 0;
    if (kind == PyUnicode_4BYTE_KIND)
        return memcmp(data, c, n * 4) == 0;
    for (i = 0; i < n; i++)
        if (PyUnicode_READ(kind, data, i) != c[i])
            return 0;
    return 1;
}

static void vocab_table_free(VocabTable *t)
{
    PyMem_Free(t->slots);
    PyMem_Free(t->by_id);
}

static int vocab_table_build(VocabTable *t, PyObject *vocab)
{
    /* 1, or 0 when a key is not a str (a lookup by str could meet it), -1 on error. */
    Py_ssize_t n = PyDict_GET_SIZE(vocab), at = 0, size = 16;
    PyObject *key, *value;
    uint32_t *chars = NULL;
    size_t room = 0;
    int bits = 4;
    memset(t, 0, sizeof *t);
    while (size < 2 * n)
        size *= 2, bits++;
    t->mask = (uint64_t)size - 1, t->shift = 64 - bits, t->ids = 2 * n + 1024;
    t->slots = PyMem_Calloc((size_t)size, sizeof(Slot));
    t->by_id = PyMem_Calloc((size_t)t->ids, sizeof(PyObject *));
    if (t->slots == NULL || t->by_id == NULL)
        goto nomem;
    while (PyDict_Next(vocab, &at, &key, &value)) {
        Py_ssize_t len, i;
        int kind;
        const void *data;
        uint64_t h, s;
        long long id = 0;
        int plain = PyLong_CheckExact(value);
        if (!PyUnicode_CheckExact(key)) {
            PyMem_Free(chars);
            return 0;
        }
        if (plain) {
            id = PyLong_AsLongLong(value);
            if (id == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                plain = 0;
            }
        }
        len = PyUnicode_GET_LENGTH(key), kind = PyUnicode_KIND(key), data = PyUnicode_DATA(key);
        if ((size_t)len > room) {
            uint32_t *grown = PyMem_Realloc(chars, ((size_t)len + 64) * 4);
            if (grown == NULL)
                goto nomem;
            chars = grown, room = (size_t)len + 64;
        }
        for (i = 0; i < len; i++)
            chars[i] = PyUnicode_READ(kind, data, i);
        h = chars_hash(CHARS_SEED, chars, (size_t)len);
        for (s = (h * 0x9E3779B97F4A7C15ULL) >> t->shift; t->slots[s].key != NULL; s = (s + 1) & t->mask)
            ;
        t->slots[s].key = key, t->slots[s].id = id, t->slots[s].tag = (uint32_t)h, t->slots[s].plain = (uint32_t)plain;
        if (plain && id >= 0 && id < t->ids && t->by_id[id] == NULL)
            t->by_id[id] = key;
    }
    PyMem_Free(chars);
    return 1;
nomem:
    PyMem_Free(chars);
    vocab_table_free(t);
    PyErr_NoMemory();
    return -1;
}

static int vocab_table_id(const VocabTable *t, uint64_t h, const uint32_t *c, size_t n, int64_t *id)
{
    /* 1 with the id of the token of code points c[0:n] (hash h), or 0 when it is not in the vocab
     * or its value is not a plain int of 64 bits: `vocab_id` without the str. */
    uint64_t s;
    for (s = (h * 0x9E3779B97F4A7C15ULL) >> t->shift; t->slots[s].key != NULL; s = (s + 1) & t->mask)
        if (t->slots[s].tag == (uint32_t)h && key_is(t->slots[s].key, c, n)) {
            *id = t->slots[s].id;
            return (int)t->slots[s].plain;
        }
    return 0;
}

static PyObject *merge_text_ids(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* `merge_ids` of the merges array spelled in data[start:end] (one value with whitespace about
     * it), with no Python object per merge: None when it is not an array of merges all in one form
     * ("a b" or ["a", "b"]), a half or a join is not a plain int of vocab (or a vocab key is not a
     * str), or a string is not UTF-8 or escapes a lone surrogate. The join is guessed first as in
     * `merge_ids`. */
    Py_buffer view;
    PyObject *vocab, *result = NULL, *columns[3] = {NULL, NULL, NULL};
    Py_ssize_t first, last;
    const uint8_t *s;
    size_t n, at, room;
    uint32_t *chars = NULL;
    Column out[3] = {{NULL, 0, 0}, {NULL, 0, 0}, {NULL, 0, 0}};
    VocabTable table;
    int64_t next = 0, id[3] = {0, 0, 0};
    int string_form = -1, c, built;
    if (!PyArg_ParseTuple(args, "y*nnO!:merge_text_ids", &view, &first, &last, &PyDict_Type, &vocab))
        return NULL;
    if (first < 0 || last < first || last > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "merge_text_ids: the span is not inside the data");
        return NULL;
    }
    if ((built = vocab_table_build(&table, vocab)) <= 0) {
        PyBuffer_Release(&view);
        return built < 0 ? NULL : Py_NewRef(Py_None);
    }
    s = view.buf, n = (size_t)last, at = json_space(s, n, (size_t)first), room = (size_t)(last - first) + 1;
    if ((chars = PyMem_Malloc(room * sizeof(uint32_t))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (at >= n || s[at] != '[')
        goto declined;
    at = json_space(s, n, at + 1);
    if (at < n && s[at] == ']')
        goto closed;
    for (;;) {
        size_t la, lb, i;
        ptrdiff_t end;
        uint64_t ha, hb;
        int form = at < n && s[at] == '"', more;
        if (string_form < 0)
            string_form = form;
        if (form != string_form)
            goto declined;
        if (form) {                                          /* "a b": split at its one space */
            size_t len, spaces = 0;
            if ((end = json_string_chars(s, n, at, chars, &len)) < 0)
                goto declined;
            at = (size_t)end, la = 0;
            for (i = 0; i < len; i++)
                if (chars[i] == ' ')
                    spaces++, la = i;
            if (spaces != 1)
                goto declined;
            memmove(chars + la, chars + la + 1, (len - la - 1) * sizeof(uint32_t));
            lb = len - la - 1;
        } else {                                             /* ["a", "b"] */
            if (at >= n || s[at] != '[')
                goto declined;
            at = json_space(s, n, at + 1);
            if ((end = json_string_chars(s, n, at, chars, &la)) < 0)
                goto declined;
            at = json_space(s, n, (size_t)end);
            if (at >= n || s[at] != ',')
                goto declined;
            at = json_space(s, n, at + 1);
            if ((end = json_string_chars(s, n, at, chars + la, &lb)) < 0)
                goto declined;
            at = json_space(s, n, (size_t)end);
            if (at >= n || s[at] != ']')
                goto declined;
            at++;
        }
        ha = chars_hash(CHARS_SEED, chars, la);
        hb = chars_hash(CHARS_SEED, chars + la, lb);
        if (!vocab_table_id(&table, ha, chars, la, &id[0]) || !vocab_table_id(&table, hb, chars + la, lb, &id[1]))
            goto declined;
        if (next > 0 && table.by_id[next - 1] != NULL && key_is(table.by_id[next - 1], chars, la + lb))
            id[2] = next - 1;
        else if (next < table.ids && table.by_id[next] != NULL && key_is(table.by_id[next], chars, la + lb))
            id[2] = next;
        else if (!vocab_table_id(&table, chars_hash(ha, chars + la, lb), chars, la + lb, &id[2]))
            goto declined;
        next = id[2] >= 0 && id[2] < table.ids ? id[2] + 1 : table.ids;
        for (c = 0; c < 3; c++)
            if (column_push(&out[c], id[c]) < 0) {
                PyErr_NoMemory();
                goto done;
            }
        if ((more = json_next(s, n, &at, ']')) > 0)
            continue;
        if (more == 0)
            break;
        goto declined;
    }
closed:
    if (json_space(s, n, at + 1) != n)
        goto declined;
    for (c = 0; c < 3; c++)
        if ((columns[c] = PyBytes_FromStringAndSize((const char *)out[c].at,
                                                    (Py_ssize_t)(out[c].used * sizeof(int64_t)))) == NULL)
            goto done;
    result = PyTuple_Pack(3, columns[0], columns[1], columns[2]);
    goto done;
declined:
    result = Py_NewRef(Py_None);
done:
    for (c = 0; c < 3; c++) {
        Py_XDECREF(columns[c]);
        PyMem_Free(out[c].at);
    }
    vocab_table_free(&table);
    PyMem_Free(chars);
    PyBuffer_Release(&view);
    return result;
}

/* ---- whether merge ranks ascend ------------------------------------------------------------------ */

static size_t slot_of(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & mask;
}

static PyObject *ranks_ascend(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* Every live merge (the first of its pair) ranks after the last live merge making either of its
     * parts: one table of pairs (their first rank), one of products (their last live rank). */
    Py_buffer views[3];
    const int64_t *left, *right, *merged;
    int64_t *pairs = NULL, *makers = NULL;
    uint8_t *live = NULL;
    size_t n, size = 2, mask, r, i;
    PyObject *result = NULL;
    int held = 0, ascend = 1;
    if (!PyArg_ParseTuple(args, "y*y*y*:ranks_ascend", &views[0], &views[1], &views[2]))
        return NULL;
    held = 3;
    if (views[0].len != views[1].len || views[0].len != views[2].len || views[0].len % 8 != 0) {
        PyErr_SetString(PyExc_ValueError, "ranks_ascend() takes three int64 columns of one length");
        goto done;
    }
    left = views[0].buf, right = views[1].buf, merged = views[2].buf;
    n = (size_t)views[0].len / 8;
    for (r = 0; r < n; r++)
        if ((uint64_t)left[r] > 0xFFFFFFFFu || (uint64_t)right[r] > 0xFFFFFFFFu || (uint64_t)merged[r] > 0xFFFFFFFFu) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    while (size < 2 * n)
        size *= 2;
    mask = size - 1;
    pairs = malloc(size * sizeof *pairs);
    makers = malloc(size * sizeof *makers);
    live = malloc(n ? n : 1);
    if (pairs == NULL || makers == NULL || live == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memset(pairs, 0xFF, size * sizeof *pairs);      /* -1: empty */
    memset(makers, 0xFF, size * sizeof *makers);
    for (r = 0; r < n; r++) {                        /* a pair's later copies are not live */
        uint64_t key = ((uint64_t)left[r] << 32) | (uint64_t)right[r];
        for (i = slot_of(key, mask); pairs[i] >= 0; i = (i + 1) & mask)
            if (left[pairs[i]] == left[r] && right[pairs[i]] == right[r])
                break;
        live[r] = pairs[i] < 0;
        if (live[r])
            pairs[i] = (int64_t)r;
    }
    for (r = 0; r < n; r++) {                        /* the last live rank making each product */
        if (!live[r])
            continue;
        for (i = slot_of((uint64_t)merged[r], mask); makers[i] >= 0; i = (i + 1) & mask)
            if (merged[makers[i]] == merged[r])
                break;
        makers[i] = (int64_t)r;
    }
    for (r = 0; r < n && ascend; r++) {
        int side;
        if (!live[r])
            continue;
        for (side = 0; side < 2 && ascend; side++) {
            int64_t part = side ? right[r] : left[r];
            for (i = slot_of((uint64_t)part, mask); makers[i] >= 0; i = (i + 1) & mask)
                if (merged[makers[i]] == part) {
                    ascend = makers[i] < (int64_t)r;
                    break;
                }
        }
    }
    result = PyBool_FromLong(ascend);
done:
    free(pairs);
    free(makers);
    free(live);
    while (held > 0)
        PyBuffer_Release(&views[--held]);
    return result;
}

static PyMethodDef module_methods[] = {
    {"add_counts", add_counts, METH_VARARGS,
     "add_counts(into, counts)\n--\n\nAdd the count table `counts` into the dict `into`, key by key."},
    {"utf8_length", utf8_length, METH_O,
     "utf8_length(text)\n--\n\nlen(text.encode('utf-8')) without the copy; a lone surrogate counts 3 bytes."},
    {"has_code_point_in", has_code_point_in, METH_VARARGS,
     "has_code_point_in(text, bits)\n--\n\nWhether a code point c of text has bit c of the 0x110000-bit map bits set."},
    {"measure_texts", measure_texts, METH_VARARGS,
     "measure_texts(texts, separators, wide)\n--\n\nEach text's UTF-8 bytes, whitespace words and ASCII digit "
     "runs (n x 5 int64 in a bytearray), in one pass without the GIL."},
    {"jsonl_block", jsonl_block, METH_VARARGS,
     "jsonl_block(data, end, text_key, id_key, limit, begin=0, utf8=False)\n--\n\nThe lines of data[begin:end] as "
     "(texts, ids, odd) columns (texts as (UTF-8, offsets, characters) with utf8): see sources._read_jsonl."},
    {"calibrate_ids", calibrate_ids, METH_VARARGS,
     "calibrate_ids(id_arrays, rows, mask, classes, raw, cells, counts=None)\n--\n\nEach record's raw-byte tokens into raw and its "
     "ids' (group row + class) cells into cells (classes: a table, or the folded classes' power of two), in one pass without the GIL; the int64 indexes of the cells counted "
     "from zero (bytes; b\"\" with uint32 counts and cells): see stats.calibrate_ids."},
    {"list_page", list_page, METH_VARARGS,
     "list_page(ids, ends, first, last)\n--\n\nThe body of a Parquet data page (v1, uncompressed) of a required "
     "list<int32> column holding records first..last-1 (ids uint32, ends int64)."},
    {"calibrate_flat", calibrate_flat, METH_VARARGS,
     "calibrate_flat(ids, ends, rows, mask, classes, raw, cells, counts=None)\n--\n\ncalibrate_ids of records whose ids "
     "are one uint32 buffer, record i's ending at ends[i] (int64)."},
    {"merge_ids", merge_ids, METH_VARARGS,
     "merge_ids(merges, vocab)\n--\n\nA tokenizer.json's merges as (left, right, merged) int64 id columns "
     "(bytes), or None: see bpe_ops/merge_ids.py."},
    {"model_spans", model_spans, METH_O,
     "model_spans(data)\n--\n\n(vocab_start, vocab_end, merges_start, merges_end) of model.vocab's and model.merges' "
     "values in a tokenizer.json's bytes, or None: see bpe_ops/json_merges.py."},
    {"vocab_text", vocab_text, METH_VARARGS,
     "vocab_text(data, start, end)\n--\n\njson.loads of the vocab object spelled in data[start:end], or None: see "
     "bpe_ops/json_merges.py."},
    {"merge_text_ids", merge_text_ids, METH_VARARGS,
     "merge_text_ids(data, start, end, vocab)\n--\n\nmerge_ids of the merges array spelled in data[start:end], "
     "or None: see bpe_ops/json_merges.py."},
    {"ranks_ascend", ranks_ascend, METH_VARARGS,
     "ranks_ascend(left, right, merged)\n--\n\nmerging.ranks_ascend of three int64 id columns, or None for "
     "an id outside 0..2**32-1: see merging.ranks_ascend_of."},
    {"byte_level_sections", byte_level_sections, METH_VARARGS,
     "byte_level_sections(tokens, ids, left, right, alphabet, pad, end)\n--\n\nThe vocab and merges sections of a "
     "canonical byte-level tokenizer.json: see bpe_ops/json_sections.py."},
    {"jsonl_text_id", jsonl_text_id, METH_VARARGS,
     "jsonl_text_id(line, text_key, id_key)\n--\n\nThe string members text_key and id_key of a JSONL line "
     "(bytes) as (text, id), id None when absent; None for anything json.loads must judge "
     "(see sources.jsonl_record)."},
    {"jsonl_lines_fields", jsonl_lines_fields, METH_VARARGS,
     "jsonl_lines_fields(pieces, text_key, id_key)\n--\n\nA batch of (offset, piece) JSONL pieces read in one "
     "pass without the GIL: per piece None (blank), (text, id) (as jsonl_text_id reads it once its CR and BOM "
     "are dropped) or True (for Python to read: see sources._read_jsonl)."},
    {"id_hashes", id_hashes, METH_O,
     "id_hashes(ids)\n--\n\nEach id's hashlib.blake2b(str(id).encode('utf-8', 'surrogatepass'), digest_size=16) "
     "digest, one after the other (tokenize_shard.id_hashes)."},
    {"record_groups", record_groups, METH_VARARGS,
     "record_groups(ids, groups)\n--\n\nEach record id's stats.record_group (zlib.crc32 of its UTF-8, surrogatepass, "
     "modulo groups) as native int32 values in one bytes object."},
    {"crc32", crc32, METH_O,
     "crc32(data)\n--\n\nzlib.crc32(data): the bucket of a pre-token in the packed tables."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "Count tables, UTF-8 lengths and count sums in C, needing no PCRE2; the Python layer is their specification.",
    -1, module_methods, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC
PyInit__native(void)
{
    PyObject *m;
    crc32_init();
    if (PyType_Ready(&CountTableType) < 0 || (m = PyModule_Create(&module)) == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "CountTable", (PyObject *)&CountTableType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

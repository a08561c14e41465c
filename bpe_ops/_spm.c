/*
 * bpe_ops._spm: piece mode's per-word work, compiled: SentencePiece-style BPE over a text's
 * pre-tokens. bpe_ops/sentencepiece_bpe.py is the specification (`PieceModel.symbols`, `.segments`)
 * with `.word_ids`; the tests require identical ids.
 *
 * `SpmEncoder(...)` (built by `sentencepiece_bpe.compiled_encoder`) encodes a list of pre-tokens:
 *   - with `whole` (ignore_merges), a pre-token that is a piece is that piece's id;
 *   - else the pre-token is cut between every two characters of the vocabulary u, v that no merge
 *     joins (no merge (a, b) has `a` ending with u and `b` starting with v): no merge spans such a
 *     cut (the argument of sentencepiece_bpe.py, which holds at any such place), so each segment
 *     merges on its own. `PieceModel.segments` cuts at a few of these places only (a set lookup per
 *     character costs Python more than it saves); here the pair set is a bit table for ASCII and
 *     a small hash set, and the finer segments repeat more across words and merge in fewer steps
 *     (measured: a quarter faster cold on English, the same warm);
 *   - where every byte is a piece and no merge takes one (`isolated_bytes`: Llama's layout), also on
 *     both sides of a run of characters outside the vocabulary: their symbols are their bytes, which
 *     no merge joins to anything, and the run's ids are those bytes' pieces, with no cache lookup
 *     (a newline is such a character there: without this cut, lines were one segment each);
 *   - a segment's ids come from a cache keyed by its UTF-8; on a miss, its first symbols (a
 *     character's piece; else its bytes' `<0xNN>` pieces when all are there; else the unknown
 *     token, a run fused with `fuse_unk`; a byte run does not end an unknown run) are merged by the
 *     shared replay of `_merge_table.h` and cached.
 * With `space` (Metaspace's replacement, U+2581), ' ' reads as that character everywhere (its piece,
 * its pairs: in the direct tables, where the mark's own code point would need the hash maps), and
 * `encode_text(text, prepend)` takes the whole text as Metaspace with split=false makes it one
 * pre-token (bpe_ops/hf_components.py `_metaspace`): no Python str of the replaced text, no UTF-8
 * copy of it; the prepended mark is a ' ' before a copy of the text.
 * The ids come back as a list, or as the bytes of native uint32s (for an `array("I")`, with no
 * Python int per id). The GIL is held throughout (the cache is the encoder's own), so threads may
 * share one encoder; `fork()` returns it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_merge_table.h"
#include "_piece_cache.h"

/* Code points below this are looked up in a table, the rest in a hash map. */
#define DIRECT_CHARS 0x800
/* Segments of up to this many bytes are cached (the Python cache keeps up to 256 characters). */
#define MAX_CACHED_BYTES 1024
#define EMPTY_CP UINT32_MAX

typedef struct {
    int32_t id;                         /* the character's piece, or -1 */
} CharInfo;

typedef struct {
    int32_t *ids;
    size_t len, cap;
} IdBuffer;

typedef struct {
    uint32_t cp;                        /* EMPTY_CP: an empty slot */
    CharInfo info;
} CharSlot;

typedef struct {
    PyObject_HEAD
    CharInfo direct[DIRECT_CHARS];
    CharSlot *slots;                    /* the other characters of the vocabulary */
    uint64_t mask;
    uint64_t *pairs;                    /* the joined pairs u << 32 | v (EMPTY: an empty slot) ... */
    uint64_t pairs_mask;
    uint64_t ascii_pairs[128][2];       /* ... and of two ASCII characters, a bit: no hash for most text */
    int32_t byte_ids[256];              /* -1: no such piece (or no byte fallback) */
    int32_t unk_id;                     /* -1: none */
    int fuse_unk;
    int isolated_bytes;                 /* every byte is a piece and no merge takes one: see cut_word */
    uint32_t space_cp;                  /* Metaspace's replacement, read as ' ' (EMPTY_CP: none) */
    PyObject *space_str;                /* the same as a str, made once (the getter is asked per text) */
    MergeTable table;
    PieceCache whole;                   /* ignore_merges: every piece -> its id */
    int has_whole;
    PieceCache cache;
    size_t cache_size;
    MergeScratch scratch;
    int32_t *sym, *rank;
    size_t sym_cap;
    PyObject **ints;                    /* [id]: the Python int of an id, made on its first use */
    size_t nints;
} SpmEncoder;

/* A segment to encode: its bytes and their hash, or (whole >= 0) a pre-token that is a piece. */
typedef struct {
    const uint8_t *s;
    size_t n;
    uint64_t hash;
    int32_t whole;                      /* or BYTE_RUN: characters outside the vocabulary, as bytes */
} Segment;

#define BYTE_RUN (-2)

typedef struct {
    Segment *items;
    size_t len, cap;
} Segments;

/* Segments are cut and hashed first, then encoded, so that the cache slot of a segment this many
 * ahead is fetched from memory while this one is encoded (the cache is megabytes: most lookups miss
 * the core's caches, and waiting for them one at a time was half the time of a warm encoder). */
#define PREFETCH_AHEAD 8

static const CharInfo UNKNOWN_CHAR = {-1};

/* ---- characters ---------------------------------------------------------------------------------- */

static inline uint32_t decode_char(const uint8_t *s, size_t n, size_t p, size_t *next)
{
    /* The code point at byte p of UTF-8 (surrogates encoded as 3 bytes, as "surrogatepass" does), and
     * where the next one starts. A truncated sequence (never in text from Python) ends at n. */
    uint8_t b = s[p];
    uint32_t cp;
    size_t len, i;
    if (b < 0x80) {
        *next = p + 1;
        return b;
    }
    if (b < 0xE0) {
        len = 2;
        cp = b & 0x1Fu;
    } else if (b < 0xF0) {
        len = 3;
        cp = b & 0x0Fu;
    } else {
        len = 4;
        cp = b & 0x07u;
    }
    for (i = 1; i < len && p + i < n; i++)
        cp = cp << 6 | (s[p + i] & 0x3Fu);
    *next = p + i;
    return cp;
}

static inline uint32_t read_char(const SpmEncoder *self, const uint8_t *s, size_t n, size_t p, size_t *next)
{
    /* decode_char, with the space mode's replacement read as ' ' (whose entries it takes, see
     * set_space): the text path's spaces and a pre-token's marks are then one character, looked
     * up in the direct tables. */
    uint32_t cp;
    if (s[p] < 0x80) {
        *next = p + 1;
        return s[p];
    }
    cp = decode_char(s, n, p, next);
    return cp == self->space_cp ? 0x20 : cp;
}

static inline uint64_t cp_slot(const SpmEncoder *self, uint32_t cp)
{
    return (tb_mix64(cp) >> 7) & self->mask;
}

static inline const CharInfo *char_info(const SpmEncoder *self, uint32_t cp)
{
    uint64_t i;
    if (cp < DIRECT_CHARS)
        return &self->direct[cp];
    for (i = cp_slot(self, cp);; i = (i + 1) & self->mask) {
        if (self->slots[i].cp == cp)
            return &self->slots[i].info;
        if (self->slots[i].cp == EMPTY_CP)
            return &UNKNOWN_CHAR;
    }
}

static CharInfo *char_entry(SpmEncoder *self, uint32_t cp)
{
    /* The entry of cp, made (unknown) if new. The map has room for every character given. */
    uint64_t i;
    if (cp < DIRECT_CHARS)
        return &self->direct[cp];
    for (i = cp_slot(self, cp);; i = (i + 1) & self->mask) {
        if (self->slots[i].cp == cp)
            return &self->slots[i].info;
        if (self->slots[i].cp == EMPTY_CP) {
            self->slots[i].cp = cp;
            self->slots[i].info = UNKNOWN_CHAR;
            return &self->slots[i].info;
        }
    }
}

static inline uint64_t pair_slot(const SpmEncoder *self, uint64_t key)
{
    return (tb_mix64(key) >> 7) & self->pairs_mask;
}

static inline int joined(const SpmEncoder *self, uint32_t u, uint32_t v)
{
    /* Whether some merge (a, b) has `a` ending with u and `b` starting with v. */
    uint64_t key = (uint64_t)u << 32 | v, i;
    if ((u | v) < 128)
        return (int)(self->ascii_pairs[u][v >> 6] >> (v & 63) & 1);
    for (i = pair_slot(self, key);; i = (i + 1) & self->pairs_mask) {
        if (self->pairs[i] == key)
            return 1;
        if (self->pairs[i] == EMPTY)
            return 0;
    }
}

static void add_pair(SpmEncoder *self, uint32_t u, uint32_t v)
{
    /* The pair set has room for every pair given. In space mode the replacement is ' '. */
    uint64_t key, i;
    u = u == self->space_cp ? 0x20 : u;
    v = v == self->space_cp ? 0x20 : v;
    key = (uint64_t)u << 32 | v;
    if ((u | v) < 128) {
        self->ascii_pairs[u][v >> 6] |= (uint64_t)1 << (v & 63);
        return;
    }
    for (i = pair_slot(self, key); self->pairs[i] != EMPTY; i = (i + 1) & self->pairs_mask)
        if (self->pairs[i] == key)
            return;
    self->pairs[i] = key;
}

/* ---- one segment ------------------------------------------------------------------------------- */

static inline int emit(IdBuffer *out, const int32_t *ids, size_t n)
{
    if (tb_reserve((void **)&out->ids, &out->cap, out->len + n, sizeof(int32_t), 1024) < 0)
        return -1;
    tb_copy(out->ids + out->len, ids, n * sizeof(int32_t));
    out->len += n;
    return 0;
}

static Py_ssize_t first_symbols(const SpmEncoder *self, const uint8_t *s, size_t n, int32_t *sym)
{
    /* `PieceModel.symbols` of s[0..n) into sym (room for n); their count. */
    Py_ssize_t count = 0;
    int32_t unk = -1;
    size_t p = 0, next, q;
    while (p < n) {
        uint32_t cp = read_char(self, s, n, p, &next);
        int32_t id = char_info(self, cp)->id;
        if (id >= 0) {
            if (unk >= 0) {
                sym[count++] = unk;
                unk = -1;
            }
            sym[count++] = id;
        } else {
            int all_bytes = 1;
            for (q = p; q < next && all_bytes; q++)
                all_bytes = self->byte_ids[s[q]] >= 0;
            if (all_bytes) {
                for (q = p; q < next; q++)
                    sym[count++] = self->byte_ids[s[q]];
            } else if (self->unk_id >= 0) {
                if (unk >= 0 && !self->fuse_unk)
                    sym[count++] = unk;
                unk = self->unk_id;
            }
        }
        p = next;
    }
    if (unk >= 0)
        sym[count++] = unk;
    return count;
}

static Py_ssize_t merged_segment(SpmEncoder *self, const uint8_t *s, size_t n)
{
    /* The merged ids of s[0..n) in self->sym; their count, or -1 when out of memory. */
    Py_ssize_t m, i;
    int32_t *rank;
    if (n > self->sym_cap) {
        if (tb_reserve((void **)&self->sym, &self->sym_cap, n, sizeof(int32_t), 256) < 0 ||
            (rank = realloc(self->rank, self->sym_cap * sizeof(int32_t))) == NULL)
            return -1;
        self->rank = rank;
    }
    m = first_symbols(self, s, n, self->sym);
    if (m <= SHORT_PIECE)
        return merge_short(&self->table, self->sym, m);
    for (i = 0; i + 1 < m; i++)
        self->rank[i] = rank_of(&self->table, self->sym[i], self->sym[i + 1]);
    return merge_symbols_ranked(&self->table, self->sym, self->rank, m, &self->scratch);
}

static inline uint64_t key_hash(const uint8_t *s, size_t n)
{
    uint64_t h = tb_hash_bytes(s, n);
    return h ? h : 1;                   /* 0 marks an empty slot */
}

static int cache_put(SpmEncoder *self, const uint8_t *s, size_t n, uint64_t hash, const int32_t *ids, size_t count);

static int cached_ids(SpmEncoder *self, const uint8_t *s, size_t n, uint64_t hash, IdBuffer *out)
{
    /* The ids of s[0..n) (its hash given; 0: not cached) onto out: from the cache, else merged and
     * cached. -1 when out of memory. */
    PieceSlot *slot = NULL;
    Py_ssize_t count;
    if (hash != 0) {
        slot = piece_cache_find(&self->cache, s, n, hash);
        if (piece_slot_used(slot))
            return emit(out, piece_cache_ids(&self->cache, slot), slot->count);
    }
    if ((count = merged_segment(self, s, n)) < 0)
        return -1;
    if (slot != NULL && cache_put(self, s, n, hash, self->sym, (size_t)count) < 0)
        return -1;
    return emit(out, self->sym, (size_t)count);
}

static int cache_put(SpmEncoder *self, const uint8_t *s, size_t n, uint64_t hash, const int32_t *ids, size_t count)
{
    /* Cache s[0..n) -> ids unless it is there. -1 when out of memory. */
    PieceSlot *slot = piece_cache_find(&self->cache, s, n, hash);
    if (piece_slot_used(slot))
        return 0;
    if (piece_cache_full(&self->cache)) {
        /* Full: start over. Cheaper than tracking age, and a hot segment is back after one miss. */
        piece_cache_clear(&self->cache);
        slot = piece_cache_find(&self->cache, s, n, hash);
    }
    return piece_cache_put(&self->cache, slot, s, n, hash, ids, count);
}

static int encode_segment(SpmEncoder *self, const Segment *seg, IdBuffer *out)
{
    /* A segment's ids onto out; -1 when out of memory. */
    size_t i;
    if (seg->whole >= 0)
        return emit(out, &seg->whole, 1);
    if (seg->whole == BYTE_RUN) {
        if (tb_reserve((void **)&out->ids, &out->cap, out->len + seg->n, sizeof(int32_t), 1024) < 0)
            return -1;
        for (i = 0; i < seg->n; i++)
            out->ids[out->len++] = self->byte_ids[seg->s[i]];
        return 0;
    }
    return cached_ids(self, seg->s, seg->n, seg->hash, out);
}

/* ---- one pre-token ----------------------------------------------------------------------------- */

static inline int push(Segments *segs, const uint8_t *s, size_t n, uint64_t hash, int32_t whole)
{
    if (tb_reserve((void **)&segs->items, &segs->cap, segs->len + 1, sizeof(Segment), 256) < 0)
        return -1;
    segs->items[segs->len++] = (Segment){s, n, hash, whole};
    return 0;
}

static inline int push_segment(const SpmEncoder *self, Segments *segs, const uint8_t *s, size_t n)
{
    /* A segment, hashed when it is cached (hash 0: it is not). */
    return push(segs, s, n, self->cache_size > 0 && n <= MAX_CACHED_BYTES ? key_hash(s, n) : 0, -1);
}

static inline int push_run(const SpmEncoder *self, Segments *segs, const uint8_t *s, size_t n, int known)
{
    /* A run of characters of the vocabulary (a segment), or of characters outside it (their bytes). */
    return known ? push_segment(self, segs, s, n) : push(segs, s, n, 0, BYTE_RUN);
}

static int cut_word(const SpmEncoder *self, const uint8_t *s, size_t n, Segments *segs)
{
    /* The segments of one pre-token: the whole word if it is a piece (ignore_merges), else cut
     * between two characters of the vocabulary that no merge joins; with `isolated_bytes`, also
     * on both sides of each run of characters outside the vocabulary: their symbols are bytes that
     * no merge takes (and never the unknown token), so no merge spans the cut, and the run's ids
     * are its bytes' pieces. -1 when out of memory. */
    size_t start = 0, p = 0, next;
    uint32_t prev_cp = 0;
    int prev_known = 0;
    const int bytes_apart = self->isolated_bytes;      /* runs outside the vocabulary cut off */
    if (self->has_whole) {
        const PieceSlot *slot = piece_cache_find(&self->whole, s, n, key_hash(s, n));
        if (piece_slot_used(slot))
            return push(segs, s, n, 0, slot->ids[0]);
    }
    while (p < n) {
        uint32_t cp = read_char(self, s, n, p, &next);
        int known = char_info(self, cp)->id >= 0;
        if (p > 0 && (known && prev_known ? !joined(self, prev_cp, cp) : bytes_apart && known != prev_known)) {
            /* Without bytes_apart a segment may hold characters outside the vocabulary. */
            if (push_run(self, segs, s + start, p - start, prev_known || !bytes_apart) < 0)
                return -1;
            start = p;
        }
        prev_known = known;
        prev_cp = cp;
        p = next;
    }
    return n > start ? push_run(self, segs, s + start, n - start, prev_known || !bytes_apart) : 0;
}

static int encode_segments(SpmEncoder *self, const Segments *segs, IdBuffer *out)
{
    /* Every segment's ids into out, in order; -1 when out of memory (the cache then emptied: it may
     * hold a half-made entry). Touches no Python object. */
    size_t i;
    for (i = 0; i < segs->len; i++) {
        if (i + PREFETCH_AHEAD < segs->len && segs->items[i + PREFETCH_AHEAD].hash != 0)
            __builtin_prefetch(piece_cache_line(&self->cache, segs->items[i + PREFETCH_AHEAD].hash));
        if (encode_segment(self, &segs->items[i], out) < 0) {
            piece_cache_clear(&self->cache);
            return -1;
        }
    }
    return 0;
}

static const char *utf8_of(PyObject *text, PyObject **encoded, Py_ssize_t *len)
{
    /* The UTF-8 of the str `text` (*len bytes): its own, or, when it holds a lone surrogate, that of
     * a new bytes object *encoded (surrogatepass) the caller releases. NULL with an exception. */
    const char *data = PyUnicode_AsUTF8AndSize(text, len);
    *encoded = NULL;
    if (data != NULL)
        return data;
    PyErr_Clear();
    if ((*encoded = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass")) == NULL)
        return NULL;
    *len = PyBytes_GET_SIZE(*encoded);
    return PyBytes_AS_STRING(*encoded);
}

static int encode_words(SpmEncoder *self, PyObject *words, IdBuffer *out)
{
    /* The ids of every pre-token of the sequence `words` (str each) into out; -1 with an exception.
     * The words' UTF-8 is read first (a lone surrogate's as "surrogatepass" gives it, as the
     * specification does: those bytes are kept in `held` while they are cut and encoded). */
    PyObject *seq = PySequence_Fast(words, "SpmEncoder: the pre-tokens must be a sequence of str");
    PyObject *held = NULL;
    Segments segs = {NULL, 0, 0};
    Py_ssize_t k, n;
    int ok = -1;
    if (seq == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(seq);
    for (k = 0; k < n; k++) {
        PyObject *word = PySequence_Fast_GET_ITEM(seq, k), *encoded;
        const char *data;
        Py_ssize_t len;
        if (!PyUnicode_Check(word)) {
            PyErr_SetString(PyExc_TypeError, "SpmEncoder: every pre-token must be a str");
            goto done;
        }
        if ((data = utf8_of(word, &encoded, &len)) == NULL)
            goto done;
        if (encoded != NULL) {          /* kept until the segments pointing into it are encoded */
            int kept = (held != NULL || (held = PyList_New(0)) != NULL) && PyList_Append(held, encoded) == 0;
            Py_DECREF(encoded);
            if (!kept)
                goto done;
        }
        if ((size_t)len >= UINT32_MAX / 4) {
            PyErr_SetString(PyExc_OverflowError, "SpmEncoder: a pre-token of 2**30 or more bytes");
            goto done;
        }
        if (cut_word(self, (const uint8_t *)data, (size_t)len, &segs) < 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (encode_segments(self, &segs, out) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    ok = 0;
done:
    free(segs.items);
    Py_XDECREF(held);
    Py_DECREF(seq);
    return ok;
}

static int encode_text(SpmEncoder *self, PyObject *text, int prepend, IdBuffer *out)
{
    /* Metaspace (split=false) and the pre-token's ids in one: the text, its spaces read as the
     * replacement (space mode), with one prepended when `prepend` and the text starts with neither;
     * an empty text has none. -1 with an exception. */
    PyObject *held = NULL;
    Segments segs = {NULL, 0, 0};
    const char *data;
    uint8_t *joined_text = NULL;
    const uint8_t *s;
    Py_ssize_t len;
    size_t n, mark_len = 0;
    int ok = -1;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "SpmEncoder: the text must be a str");
        return -1;
    }
    if ((data = utf8_of(text, &held, &len)) == NULL)
        return -1;
    s = (const uint8_t *)data;
    n = (size_t)len;
    if (n == 0) {
        ok = 0;
        goto done;
    }
    if (prepend && s[0] != ' ') {
        size_t next;
        if (decode_char(s, n, 0, &next) != self->space_cp)
            mark_len = 1;
    }
    if (n + mark_len >= UINT32_MAX / 4) {
        PyErr_SetString(PyExc_OverflowError, "SpmEncoder: a pre-token of 2**30 or more bytes");
        goto done;
    }
    if (mark_len) {
        /* The prepended replacement, as the ' ' that reads as it. */
        if ((joined_text = malloc(n + 1)) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        joined_text[0] = ' ';
        memcpy(joined_text + 1, s, n);
        s = joined_text;
        n++;
    }
    if (tb_reserve((void **)&out->ids, &out->cap, n / 4 + 16, sizeof(int32_t), 1024) < 0 ||
        cut_word(self, s, n, &segs) < 0 || encode_segments(self, &segs, out) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    ok = 0;
done:
    free(segs.items);
    free(joined_text);
    Py_XDECREF(held);
    return ok;
}

/* ---- from Python ------------------------------------------------------------------------------- */

static PyObject *id_list(SpmEncoder *self, const IdBuffer *out)
{
    /* The ids as a list. Each id's int is made once and shared by every list after (as the
     * byte-level TextEncoder does): a new int per id would cost more than the encoding. */
    PyObject *list = PyList_New((Py_ssize_t)out->len);
    size_t i;
    if (list == NULL)
        return NULL;
    for (i = 0; i < out->len; i++) {
        size_t id = (size_t)out->ids[i];
        PyObject *v;
        if (id >= self->nints) {
            size_t grown = id + 1 > 2 * self->nints ? id + 1 : 2 * self->nints;
            PyObject **ints = realloc(self->ints, grown * sizeof(PyObject *));
            if (ints == NULL) {
                Py_DECREF(list);
                return PyErr_NoMemory();
            }
            memset(ints + self->nints, 0, (grown - self->nints) * sizeof(PyObject *));
            self->ints = ints;
            self->nints = grown;
        }
        if ((v = self->ints[id]) == NULL && (v = self->ints[id] = PyLong_FromSize_t(id)) == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        Py_INCREF(v);
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    return list;
}

static PyObject *id_bytes(SpmEncoder *self, const IdBuffer *out)
{
    (void)self;
    /* Ids are 0 <= id < 2**31: their int32 bytes are their uint32 bytes. */
    return PyBytes_FromStringAndSize((const char *)out->ids, (Py_ssize_t)(out->len * sizeof(int32_t)));
}

static PyObject *encoded(SpmEncoder *self, PyObject *words, int text, int prepend,
                         PyObject *(*result)(SpmEncoder *, const IdBuffer *))
{
    /* The output buffer is the call's own: building the result may run other threads' code.
     * `text`: words is one text for encode_text, else a sequence of pre-tokens. */
    IdBuffer out = {NULL, 0, 0};
    PyObject *value = NULL;
    if (!merge_table_ready(&self->table)) {
        PyErr_SetString(PyExc_TypeError, "SpmEncoder is not initialised");
        return NULL;
    }
    if (text && self->space_cp == EMPTY_CP) {
        PyErr_SetString(PyExc_TypeError, "SpmEncoder: encode_text needs the space mode (space=...)");
        return NULL;
    }
    if ((text ? encode_text(self, words, prepend, &out) : encode_words(self, words, &out)) == 0)
        value = result(self, &out);
    free(out.ids);
    return value;
}

static PyObject *spm_encode_words(SpmEncoder *self, PyObject *words)
{
    return encoded(self, words, 0, 0, id_list);
}

static PyObject *spm_encode_words_bytes(SpmEncoder *self, PyObject *words)
{
    return encoded(self, words, 0, 0, id_bytes);
}

static PyObject *text_call(SpmEncoder *self, PyObject *args, PyObject *(*result)(SpmEncoder *, const IdBuffer *))
{
    PyObject *text;
    int prepend;
    if (!PyArg_ParseTuple(args, "Up:encode_text", &text, &prepend))
        return NULL;
    return encoded(self, text, 1, prepend, result);
}

static PyObject *spm_encode_text(SpmEncoder *self, PyObject *args)
{
    return text_call(self, args, id_list);
}

static PyObject *spm_encode_text_bytes(SpmEncoder *self, PyObject *args)
{
    return text_call(self, args, id_bytes);
}

static PyObject *spm_fork(SpmEncoder *self, PyObject *Py_UNUSED(ignored))
{
    Py_INCREF(self);
    return (PyObject *)self;
}

/* ---- construction ------------------------------------------------------------------------------ */

static int read_id(PyObject *item, int32_t *id, int none_ok)
{
    /* One id (None: -1, where allowed) into *id; -1 with an exception set. */
    long long v;
    if (item == Py_None && none_ok) {
        *id = -1;
        return 0;
    }
    v = PyLong_AsLongLong(item);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v >= ID_LIMIT) {
        PyErr_Format(PyExc_OverflowError, "SpmEncoder: id %lld is outside 0..2**31 - 1", v);
        return -1;
    }
    *id = (int32_t)v;
    return 0;
}

static int read_ids(PyObject *arg, int32_t **out, Py_ssize_t *n, int none_ok)
{
    /* A sequence of ids as a new malloc'd array; -1 with an exception set. */
    PyObject *seq = PySequence_Fast(arg, "SpmEncoder: ids must be a sequence");
    Py_ssize_t i;
    if (seq == NULL)
        return -1;
    *n = PySequence_Fast_GET_SIZE(seq);
    *out = malloc(*n ? (size_t)*n * sizeof(int32_t) : 1);
    if (*out == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < *n; i++)
        if (read_id(PySequence_Fast_GET_ITEM(seq, i), &(*out)[i], none_ok) < 0) {
            Py_DECREF(seq);
            return -1;
        }
    Py_DECREF(seq);
    return 0;
}

static int one_char(PyObject *key, uint32_t *cp)
{
    if (!PyUnicode_Check(key) || PyUnicode_GET_LENGTH(key) != 1) {
        PyErr_SetString(PyExc_ValueError, "SpmEncoder: chars and joiners are keyed by single characters");
        return -1;
    }
    *cp = PyUnicode_READ_CHAR(key, 0);
    return 0;
}

static int set_chars(SpmEncoder *self, PyObject *chars, PyObject *joiners)
{
    /* The character map {char: id}, and the joined pairs: {v: str of the characters u that some
     * merge joins to v}. */
    Py_ssize_t pos = 0, size = 64, npairs = 0, i;
    PyObject *key, *value;
    for (i = 0; i < DIRECT_CHARS; i++)
        self->direct[i] = UNKNOWN_CHAR;
    while (size < 2 * PyDict_Size(chars))
        size *= 2;
    self->slots = malloc((size_t)size * sizeof(CharSlot));
    while (PyDict_Next(joiners, &pos, &key, &value)) {
        if (!PyUnicode_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "SpmEncoder: joiners' values must be str");
            return -1;
        }
        npairs += PyUnicode_GET_LENGTH(value);
    }
    for (self->pairs_mask = 63; self->pairs_mask < (uint64_t)(2 * npairs); self->pairs_mask = self->pairs_mask * 2 + 1)
        ;
    self->pairs = malloc((self->pairs_mask + 1) * sizeof(uint64_t));
    if (self->slots == NULL || self->pairs == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < size; i++)
        self->slots[i].cp = EMPTY_CP;
    self->mask = (uint64_t)size - 1;
    for (i = 0; i <= (Py_ssize_t)self->pairs_mask; i++)
        self->pairs[i] = EMPTY;
    pos = 0;
    while (PyDict_Next(chars, &pos, &key, &value)) {
        uint32_t cp;
        if (one_char(key, &cp) < 0 || read_id(value, &char_entry(self, cp)->id, 0) < 0)
            return -1;
    }
    pos = 0;
    while (PyDict_Next(joiners, &pos, &key, &value)) {
        uint32_t v;
        Py_ssize_t k, n = PyUnicode_GET_LENGTH(value);
        if (one_char(key, &v) < 0)
            return -1;
        for (k = 0; k < n; k++)
            add_pair(self, PyUnicode_READ_CHAR(value, k), v);
    }
    return 0;
}

static int set_whole(SpmEncoder *self, PyObject *whole)
{
    /* ignore_merges' map of every piece (its UTF-8, surrogates passed) to its id. */
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    if (piece_cache_init(&self->whole, (size_t)PyDict_Size(whole)) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    self->has_whole = 1;
    while (PyDict_Next(whole, &pos, &key, &value)) {
        PyObject *data;
        PieceSlot *slot;
        int32_t id;
        uint64_t h;
        if (!PyUnicode_Check(key)) {
            PyErr_SetString(PyExc_TypeError, "SpmEncoder: whole must map str to ids");
            return -1;
        }
        if (read_id(value, &id, 0) < 0 || (data = PyUnicode_AsEncodedString(key, "utf-8", "surrogatepass")) == NULL)
            return -1;
        h = key_hash((const uint8_t *)PyBytes_AS_STRING(data), (size_t)PyBytes_GET_SIZE(data));
        slot = piece_cache_find(&self->whole, (const uint8_t *)PyBytes_AS_STRING(data), (size_t)PyBytes_GET_SIZE(data), h);
        if (!piece_slot_used(slot) && piece_cache_put(&self->whole, slot, (const uint8_t *)PyBytes_AS_STRING(data),
                                               (size_t)PyBytes_GET_SIZE(data), h, &id, 1) < 0) {
            Py_DECREF(data);
            PyErr_NoMemory();
            return -1;
        }
        Py_DECREF(data);
    }
    return 0;
}

static int compare_ids(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int bytes_isolated(const int32_t *byte_ids, const int32_t *left, const int32_t *right, Py_ssize_t n)
{
    /* Whether every byte is a piece and no merge takes a byte piece (left or right): then a
     * character outside the vocabulary is its bytes, which stay apart (see cut_word). */
    int32_t sorted[256];
    Py_ssize_t r;
    int b;
    for (b = 0; b < 256; b++)
        if ((sorted[b] = byte_ids[b]) < 0)
            return 0;
    qsort(sorted, 256, sizeof(int32_t), compare_ids);
    for (r = 0; r < n; r++)
        if (bsearch(&left[r], sorted, 256, sizeof(int32_t), compare_ids) != NULL ||
            bsearch(&right[r], sorted, 256, sizeof(int32_t), compare_ids) != NULL)
            return 0;
    return 1;
}

static void spm_dealloc(SpmEncoder *self)
{
    free(self->slots);
    free(self->pairs);
    merge_table_free(&self->table);
    if (self->has_whole)
        piece_cache_free(&self->whole);
    piece_cache_free(&self->cache);
    merge_scratch_free(&self->scratch);
    free(self->sym);
    free(self->rank);
    Py_XDECREF(self->space_str);
    if (self->ints != NULL) {
        size_t k;
        for (k = 0; k < self->nints; k++)
            Py_XDECREF(self->ints[k]);
        free(self->ints);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int spm_init(SpmEncoder *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"chars", "byte_ids", "unk_id", "fuse_unk", "joiners", "left", "right", "merged",
                             "whole", "cache_size", "space", NULL};
    PyObject *chars, *byte_ids, *unk, *joiners, *left_arg, *right_arg, *merged_arg, *whole, *space = Py_None;
    int fuse_unk, ok = -1;
    Py_ssize_t cache_size, n, nl, nr, nm;
    int32_t *bytes = NULL, *left = NULL, *right = NULL, *merged = NULL;

    if (self->slots != NULL) {
        PyErr_SetString(PyExc_TypeError, "SpmEncoder is already initialised");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOpO!OOOOn|O:SpmEncoder", kwlist, &PyDict_Type, &chars,
                                     &byte_ids, &unk, &fuse_unk, &PyDict_Type, &joiners, &left_arg, &right_arg,
                                     &merged_arg, &whole, &cache_size, &space))
        return -1;
    self->space_cp = EMPTY_CP;
    if (space != Py_None && (one_char(space, &self->space_cp) < 0 || self->space_cp < 0x80)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "SpmEncoder: space must be a character outside ASCII");
        return -1;
    }
    if (space != Py_None && whole != Py_None) {
        PyErr_SetString(PyExc_ValueError, "SpmEncoder: space and whole (ignore_merges) do not go together");
        return -1;
    }
    if (whole != Py_None && !PyDict_Check(whole)) {
        PyErr_SetString(PyExc_TypeError, "SpmEncoder: whole must be a dict or None");
        return -1;
    }
    if (read_id(unk, &self->unk_id, 1) < 0 || read_ids(byte_ids, &bytes, &n, 1) < 0)
        goto done;
    if (n != 256) {
        PyErr_SetString(PyExc_ValueError, "SpmEncoder: byte_ids must hold 256 ids");
        goto done;
    }
    memcpy(self->byte_ids, bytes, sizeof(self->byte_ids));
    self->fuse_unk = fuse_unk;
    if (read_ids(left_arg, &left, &nl, 0) < 0 || read_ids(right_arg, &right, &nr, 0) < 0 ||
        read_ids(merged_arg, &merged, &nm, 0) < 0)
        goto done;
    if (nl != nr || nl != nm) {
        PyErr_SetString(PyExc_ValueError, "SpmEncoder: left, right and merged differ in length");
        goto done;
    }
    if (nl >= NO_RANK) {
        PyErr_SetString(PyExc_OverflowError, "SpmEncoder: more than 2**31 - 2 merges");
        goto done;
    }
    if (set_chars(self, chars, joiners) < 0 || (whole != Py_None && set_whole(self, whole) < 0))
        goto done;
    if (self->space_cp != EMPTY_CP) {
        /* ' ' is the replacement (set_chars entered its pairs under ' '): its piece too. */
        CharInfo mark = *char_info(self, self->space_cp);
        if (mark.id < 0) {
            PyErr_SetString(PyExc_ValueError, "SpmEncoder: space must be a piece of the vocabulary");
            goto done;
        }
        self->direct[0x20] = mark;
    }
    self->isolated_bytes = bytes_isolated(self->byte_ids, left, right, nl);
    {
        /* The merge map and the cache: megabytes touched for the first time and no Python object,
         * so without the GIL (a job builds its encoder on a thread of its own while it starts). */
        int built;
        PyThreadState *saved = PyEval_SaveThread();
        built = merge_table_init(&self->table, left, right, merged, nl) == 0 &&
                piece_cache_init(&self->cache, cache_size > 0 ? (size_t)cache_size : 1) == 0;
        PyEval_RestoreThread(saved);
        if (!built) {
            PyErr_NoMemory();
            goto done;
        }
    }
    self->cache_size = cache_size > 0 ? (size_t)cache_size : 0;
    if (self->space_cp != EMPTY_CP && (self->space_str = PyUnicode_FromOrdinal((int)self->space_cp)) == NULL)
        goto done;
    ok = 0;
done:
    free(bytes);
    free(left);
    free(right);
    free(merged);
    return ok;
}

static PyMethodDef spm_methods[] = {
    {"encode_words", (PyCFunction)spm_encode_words, METH_O,
     "encode_words(words)\n--\n\nThe ids of the pre-tokens `words` (str each), one after the other, as a list."},
    {"encode_words_bytes", (PyCFunction)spm_encode_words_bytes, METH_O,
     "encode_words_bytes(words)\n--\n\n`encode_words` as the bytes of native uint32s."},
    {"encode_text", (PyCFunction)spm_encode_text, METH_VARARGS,
     "encode_text(text, prepend)\n--\n\nThe ids of `text` under Metaspace (split=false) with the encoder's `space`:\n"
     "`encode_words` of [text with each ' ' the replacement, and one prepended when `prepend` and it does not\n"
     "start with it] ([] for an empty text)."},
    {"encode_text_bytes", (PyCFunction)spm_encode_text_bytes, METH_VARARGS,
     "encode_text_bytes(text, prepend)\n--\n\n`encode_text` as the bytes of native uint32s."},
    {"fork", (PyCFunction)spm_fork, METH_NOARGS,
     "fork()\n--\n\nThis encoder: it holds the GIL while it works, so threads share it safely."},
    {NULL, NULL, 0, NULL}
};

static PyObject *spm_space(SpmEncoder *self, void *Py_UNUSED(closure))
{
    if (self->space_str == NULL || !merge_table_ready(&self->table))
        Py_RETURN_NONE;
    Py_INCREF(self->space_str);
    return self->space_str;
}

static PyGetSetDef spm_getset[] = {
    {"space", (getter)spm_space, NULL, "The replacement ' ' reads as (encode_text), or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL}
};

static PyTypeObject SpmEncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "bpe_ops._spm.SpmEncoder",
    .tp_basicsize = sizeof(SpmEncoder),
    .tp_dealloc = (destructor)spm_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SpmEncoder(chars, byte_ids, unk_id, fuse_unk, joiners, left, right, merged, whole, cache_size, space=None)\n--\n\n"
              "Piece mode's encoder of pre-tokens (see bpe_ops.sentencepiece_bpe.compiled_encoder).",
    .tp_methods = spm_methods,
    .tp_getset = spm_getset,
    .tp_init = (initproc)spm_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spm",
    "SentencePiece-style BPE over pre-tokens in C; bpe_ops/sentencepiece_bpe.py is its specification.", -1,
    NULL, NULL, NULL, NULL, NULL
};

PyMODINIT_FUNC
PyInit__spm(void)
{
    PyObject *m;
    if (PyType_Ready(&SpmEncoderType) < 0)
        return NULL;
    m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SpmEncoderType);
    if (PyModule_AddObject(m, "SpmEncoder", (PyObject *)&SpmEncoderType) < 0) {
        Py_DECREF(&SpmEncoderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

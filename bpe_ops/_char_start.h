/*
 * A piece's first symbols with its characters' own merges already made, where that is exact: the
 * start of the whole-text encoder's merge replay (`_pcre2.c`'s TextEncoder).
 *
 * A byte-level piece starts as bytes, and in CJK text most of its merges only assemble each
 * character's two or three UTF-8 bytes: about three in four of a Kana piece's merges, each a heap
 * step with two pair lookups. A character's own merges, made alone, are the same wherever it
 * stands, so they are worked out once per character and remembered; where it stands decides only
 * how many of them may be made before the replay starts.
 *
 * Why it is exact, for any merge list (the argument in full is char_start.py's, the Python
 * specification this file is tested against). Let c make its own merges r_1, r_2 alone and be E_k
 * after k of them. Starting from E_s gives the replay's ids when, with R = max(r_1..r_s): (a) for
 * each k <= s, no merge joining E_{k-1}'s edge symbols to c's neighbours ranks below r_k, so the
 * replay from bytes touches nothing of c before its merge k; (b) none joining E_s's edge symbols to
 * them ranks below R, so what the replay does elsewhere first still comes first; (c) E_s's own next
 * merge ranks above R. A merge (x, v) ranks at least min_right[v] (any x) and edge[byte before
 * c][c's first byte] (any x ending in that byte, any v starting with c's first byte); (last, y)
 * likewise. So each s of a character has one need per side, worked out once: the edge rank with
 * the neighbour's byte must be above it. The rule depends only on the neighbours' bytes, so every
 * character of a piece starts so at once. Where the ranks ascend (every merge ranks after the
 * merges making its parts), (b) and (c) always hold.
 *
 * Worked example: merges (E3, 81) rank 0, (' ', E3) rank 1, (E3 81, AE) rank 2; 'の' is E3 81 AE.
 * In "aの" nothing merges 'a' + E3 or AE + anything: 'の' starts as one symbol. In " の" merge 0
 * ranks below the bound of (' ', E3), 1, so it is made: ' ' | E3 81 | AE; no merge (x, E3 81)
 * exists, so merge 2 is made too: ' ' | 'の'. Had (' ', E3) ranked 0 and (E3, 81) 1, " の" would
 * start as its bytes, since the replay joins the space and E3 first; "aの" would still start
 * from 'の'.
 *
 * Only characters of two or three bytes (U+0080-U+FFFF) are remembered, 36 bytes each, filled on
 * first sight; ASCII bytes and four-byte characters stay bytes. Touches no Python object.
 */
#ifndef TOKENBEAM_CHAR_START_H
#define TOKENBEAM_CHAR_START_H
#include <stdint.h>
#include <stdlib.h>

#include "_merge_table.h"

#define CHAR_LIMIT 0x10000

typedef struct {
    uint8_t len;                /* the character's bytes, 2 or 3; 0: not worked out yet */
    uint8_t steps;              /* the merges it makes alone, 0..len - 1 */
    uint8_t exact;              /* bit s - 1: making its first s merges may be exact (condition (c)) */
    int32_t need_left[2];       /* [s - 1]: exact after a neighbour on the left where edge[...] is above */
    int32_t need_right[2];      /* ... and on the right */
    int32_t after1[2];          /* its len - 1 symbols after merge 1 */
    int32_t after1_rank;        /* three bytes: the rank of (after1[0], after1[1]) */
    int32_t after2;             /* three bytes: its symbol after merge 2 */
} CharEntry;

typedef struct {
    CharEntry *chars;           /* [code point], or NULL: pieces start as bytes */
    int32_t *min_left;          /* [id]: the lowest rank of a merge (id, x), NO_RANK for none */
    int32_t *min_right;         /* [id]: the lowest rank of a merge (x, id) */
    int32_t *edge;              /* [x << 8 | y]: the lowest rank of a merge (a, b), a ending in byte x, b
                                 * starting with byte y */
    size_t nids;                /* ids below this have a place in min_left and min_right */
} CharStart;

static void char_start_free(CharStart *cs)
{
    free(cs->chars);
    free(cs->min_left);
    free(cs->min_right);
    free(cs->edge);
    memset(cs, 0, sizeof(*cs));
}

static int char_start_init(CharStart *cs, const MergeTable *m, const int32_t *left, const int32_t *right,
                           const int32_t *merged, Py_ssize_t n, size_t nids, const int32_t *byte_ids)
{
    /* Ready cs for the merges by rank (in the table m; every id below nids; byte b is byte_ids[b]);
     * -1 when out of memory. Only a pair's first rank is live: a repeated pair's later copies never
     * apply. A symbol's first and last bytes come from the merges that make it: one pass where the
     * ranks ascend, more where a merge ranks before the merge making its part. */
    int16_t *first_byte = NULL, *last_byte = NULL;      /* [id]; -1: no symbol the replay makes */
    Py_ssize_t r;
    size_t i, size = nids ? nids : 1;
    int grown;
    memset(cs, 0, sizeof(*cs));
    cs->nids = nids;
    cs->min_left = malloc(size * sizeof(int32_t));
    cs->min_right = malloc(size * sizeof(int32_t));
    cs->edge = malloc(256 * 256 * sizeof(int32_t));
    first_byte = malloc(size * sizeof(int16_t));
    last_byte = malloc(size * sizeof(int16_t));
    if (cs->min_left == NULL || cs->min_right == NULL || cs->edge == NULL || first_byte == NULL ||
        last_byte == NULL)
        goto nomem;
    for (i = 0; i < nids; i++) {
        cs->min_left[i] = cs->min_right[i] = NO_RANK;
        first_byte[i] = last_byte[i] = -1;
    }
    for (i = 0; i < 256 * 256; i++)
        cs->edge[i] = NO_RANK;
    for (i = 0; i < 256; i++)
        first_byte[byte_ids[i]] = last_byte[byte_ids[i]] = (int16_t)i;
    for (r = 0; r < n; r++) {
        int32_t a = left[r], b = right[r];
        if (rank_of(m, a, b) != merge_priority(m, r) || (size_t)a >= nids || (size_t)b >= nids)
            continue;       /* a repeated pair, or a part that is no symbol: it never applies */
        if (cs->min_left[a] == NO_RANK)
            cs->min_left[a] = merge_priority(m, r);
        if (cs->min_right[b] == NO_RANK)
            cs->min_right[b] = merge_priority(m, r);
    }
    do {
        grown = 0;
        for (r = 0; r < n; r++) {
            int32_t a = left[r], b = right[r], c = merged[r];
            if ((size_t)a >= nids || (size_t)b >= nids || (size_t)c >= nids || first_byte[c] >= 0 ||
                first_byte[a] < 0 || first_byte[b] < 0 || rank_of(m, a, b) != merge_priority(m, r))
                continue;
            first_byte[c] = first_byte[a];
            last_byte[c] = last_byte[b];
            grown = 1;
        }
    } while (grown);
    for (r = 0; r < n; r++) {
        int32_t a = left[r], b = right[r];
        size_t at;
        if ((size_t)a >= nids || (size_t)b >= nids || first_byte[a] < 0 || first_byte[b] < 0 ||
            rank_of(m, a, b) != merge_priority(m, r))
            continue;
        at = (size_t)last_byte[a] << 8 | (size_t)first_byte[b];
        if (cs->edge[at] == NO_RANK)
            cs->edge[at] = merge_priority(m, r);
    }
    if ((cs->chars = calloc(CHAR_LIMIT, sizeof(CharEntry))) == NULL)
        goto nomem;
    free(first_byte);
    free(last_byte);
    return 0;
nomem:
    free(first_byte);
    free(last_byte);
    char_start_free(cs);
    return -1;
}

static inline int32_t edge_rank(const int32_t *min, size_t nids, int32_t id)
{
    return (size_t)id < nids ? min[id] : NO_RANK;
}

static inline int32_t need_of(int32_t need, int32_t min_rank, int32_t bound)
{
    /* `need` raised to `bound` unless min_rank (the lowest rank of any merge joining this edge
     * symbol to a neighbour) is above it already: then the edge rank must be above `bound`. */
    return min_rank <= bound && bound > need ? bound : need;
}

static void char_fill(const CharStart *cs, const MergeTable *m, const int32_t *byte_ids, const int32_t *byte_rank,
                      const uint8_t *bytes, int len, CharEntry *e)
{
    /* e = the merges of the len-byte character `bytes` made alone, lowest rank first, and for each
     * number s of them what makes starting from its symbols after s exact (char_start.py's
     * `bounds`): conditions (a) and (b) as edge ranks to exceed, (c) in `exact`. */
    int32_t sym[3], pair[2], first[3], last[3], r[2];
    int i, n = len, s, k, steps;
    for (i = 0; i < len; i++)
        sym[i] = byte_ids[bytes[i]];
    for (i = 0; i + 1 < len; i++)
        pair[i] = byte_rank[(size_t)bytes[i] << 8 | bytes[i + 1]];
    first[0] = sym[0];
    last[0] = sym[len - 1];
    for (s = 0; n > 1; s++) {
        int at = n == 3 && pair[1] < pair[0] ? 1 : 0;
        if (pair[at] == NO_RANK)
            break;
        r[s] = pair[at];
        sym[at] = merged_of(m, pair[at]);
        if (at == 0 && n == 3)
            sym[1] = sym[2];
        n--;
        if (n == 2)
            pair[0] = rank_of(m, sym[0], sym[1]);
        first[s + 1] = sym[0];
        last[s + 1] = sym[n - 1];
        if (s == 0) {
            e->after1[0] = sym[0];
            e->after1[1] = n == 2 ? sym[1] : -1;
            e->after1_rank = n == 2 ? pair[0] : NO_RANK;
        } else
            e->after2 = sym[0];
    }
    steps = s;
    e->exact = 0;
    for (s = 1; s <= steps; s++) {
        int32_t top = s == 2 && r[1] > r[0] ? r[1] : r[0], nl = -1, nr = -1;
        if (s < steps && r[s] < top)
            continue;       /* (c): its next own merge would come before what it waits for */
        for (k = 1; k <= s; k++) {          /* (a) */
            nl = need_of(nl, edge_rank(cs->min_right, cs->nids, first[k - 1]), r[k - 1]);
            nr = need_of(nr, edge_rank(cs->min_left, cs->nids, last[k - 1]), r[k - 1]);
        }
        nl = need_of(nl, edge_rank(cs->min_right, cs->nids, first[s]), top);       /* (b) */
        nr = need_of(nr, edge_rank(cs->min_left, cs->nids, last[s]), top);
        e->need_left[s - 1] = nl;
        e->need_right[s - 1] = nr;
        e->exact |= (uint8_t)(1 << (s - 1));
    }
    e->steps = (uint8_t)steps;
    e->len = (uint8_t)len;
}

static inline void push_byte(const MergeTable *m, const int32_t *byte_ids, const int32_t *byte_rank, uint8_t b,
                             int32_t *sym, int32_t *rank, size_t *n, int *prev_byte)
{
    /* Append byte b as a symbol; the pair it closes ranks from byte_rank while both are bytes. */
    int32_t id = byte_ids[b];
    if (*n > 0)
        rank[*n - 1] = *prev_byte >= 0 ? byte_rank[(size_t)*prev_byte << 8 | b] : rank_of(m, sym[*n - 1], id);
    sym[(*n)++] = id;
    *prev_byte = b;
}

static size_t char_start_symbols(const CharStart *cs, const MergeTable *m, const int32_t *byte_ids,
                                 const int32_t *byte_rank, const uint8_t *piece, size_t len, int32_t *sym,
                                 int32_t *rank)
{
    /* sym = the first symbols of piece[0..len) (valid UTF-8, whole characters, as the encoder's
     * pieces are) and rank[i] = the rank of (sym[i], sym[i + 1]); the number of symbols (at most
     * len). cs->chars must not be NULL. */
    size_t i = 0, n = 0;
    int prev_byte = -1;             /* sym[n - 1]'s byte while it is one */
    while (i < len) {
        size_t next;
        int k, s, j;
        const int32_t *out;
        CharEntry *e;
        if (piece[i] < 0x80) {
            push_byte(m, byte_ids, byte_rank, piece[i++], sym, rank, &n, &prev_byte);
            continue;
        }
        if (piece[i] >= 0xF0) {     /* four bytes: not remembered, they stay bytes */
            for (j = 0; j < 4; j++)
                push_byte(m, byte_ids, byte_rank, piece[i + j], sym, rank, &n, &prev_byte);
            i += 4;
            continue;
        }
        e = &cs->chars[tb_bmp_code_point(piece, i, &next)];
        k = (int)(next - i);
        if (e->len == 0)
            char_fill(cs, m, byte_ids, byte_rank, piece + i, k, e);
        /* The most own merges that are exact here: the edge ranks with the neighbours (none at a
         * piece's edge) above what they need. */
        for (s = e->steps; s > 0; s--) {
            if (!(e->exact >> (s - 1) & 1))
                continue;
            if (i > 0 && cs->edge[(size_t)piece[i - 1] << 8 | piece[i]] <= e->need_left[s - 1])
                continue;
            if (i + (size_t)k < len && cs->edge[(size_t)piece[i + k - 1] << 8 | piece[i + k]] <= e->need_right[s - 1])
                continue;
            break;
        }
        if (s == 0) {
            for (j = 0; j < k; j++)
                push_byte(m, byte_ids, byte_rank, piece[i + j], sym, rank, &n, &prev_byte);
        } else {
            /* After s merges: one symbol, or two (three bytes, one merge). */
            out = s == 1 ? e->after1 : &e->after2;
            if (n > 0)
                rank[n - 1] = rank_of(m, sym[n - 1], out[0]);
            sym[n++] = out[0];
            if (k - s == 2) {
                rank[n - 1] = e->after1_rank;
                sym[n++] = out[1];
            }
            prev_byte = -1;
        }
        i += (size_t)k;
    }
    return n;
}

#endif

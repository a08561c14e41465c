/*
 * A piece's first symbols with its characters' own merges already made, where that is exact: the
 * start of the whole-text encoder's merge replay (`_pcre2.c`'s TextEncoder).
 *
 * A byte-level piece starts as bytes, and in CJK text most of its merges only assemble each
 * character's two or three UTF-8 bytes: about three in four of a Kana piece's merges, each a heap
 * step with two pair lookups. Those merges are the same in every piece the character is in, unless
 * a merge across the character's edge comes first; so they are worked out once per character and
 * remembered.
 *
 * Why it is exact. Take merges whose ranks ascend (every merge ranks after every merge that makes
 * one of its parts: then each merge creates only pairs of higher rank, and the replay makes its
 * merges in ascending rank). Replay a character c alone, and make its next merge (rank r) only while
 * r is below every rank of a merge that could join c's current edge symbols to a neighbour: below
 * min_right[first symbol] (merges (x, first)) and min_left[last symbol] (merges (last, x)). In any
 * piece, the pairs across c's edges then rank above r while c waits for merge r, so the replay
 * makes r at c before anything joins c to its neighbours, and what happens elsewhere in the piece
 * meanwhile touches none of c's symbols: starting the replay from c's symbols after these merges
 * gives the same result. Where the ranks do not ascend, nothing is remembered and pieces start as
 * bytes.
 *
 * Worked example: merges (E3, 81) rank 0, (' ', E3) rank 1, (E3 81, AE) rank 2; 'の' is E3 81 AE.
 * Merge 0 ranks below min_right[E3] = 1 (and no merge (AE, x) exists): E3 81 | AE. Merge 2, with the
 * new edge E3 81 (no merge (x, E3 81)): 'の', one symbol, in every piece. Had (' ', E3) ranked 0 and
 * (E3, 81) 1, 'の' would start as its bytes: in " の" the space takes E3 first.
 *
 * Only characters of two or three bytes (U+0080-U+FFFF) are remembered, 24 bytes each, filled on
 * first sight; ASCII bytes and four-byte characters stay bytes. Touches no Python object.
 */
#ifndef TOKENBEAM_CHAR_START_H
#define TOKENBEAM_CHAR_START_H
#include <stdint.h>
#include <stdlib.h>

#include "_merge_table.h"

#define CHAR_LIMIT 0x10000

typedef struct {
    int32_t ids[3];
    int32_t rank[2];            /* rank[i]: the rank of (ids[i], ids[i + 1]) */
    uint8_t n;                  /* 0: not worked out yet */
} CharEntry;

typedef struct {
    CharEntry *chars;           /* [code point], or NULL: the ranks do not ascend, pieces start as bytes */
    int32_t *min_left;          /* [id]: the lowest rank of a merge (id, x), NO_RANK for none */
    int32_t *min_right;         /* [id]: the lowest rank of a merge (x, id) */
    size_t nids;                /* ids below this have a place in min_left and min_right */
} CharStart;

static void char_start_free(CharStart *cs)
{
    free(cs->chars);
    free(cs->min_left);
    free(cs->min_right);
    memset(cs, 0, sizeof(*cs));
}

static int char_start_init(CharStart *cs, const MergeTable *m, const int32_t *left, const int32_t *right,
                           const int32_t *merged, Py_ssize_t n, size_t nids)
{
    /* Ready cs for the merges by rank (in the table m; every id below nids); -1 when out of memory.
     * cs->chars stays NULL when the ranks do not ascend. Only a pair's first rank is live: a repeated
     * pair's later copies never apply. */
    int32_t *last_maker;
    Py_ssize_t r;
    size_t i;
    memset(cs, 0, sizeof(*cs));
    cs->nids = nids;
    cs->min_left = malloc((nids ? nids : 1) * sizeof(int32_t));
    cs->min_right = malloc((nids ? nids : 1) * sizeof(int32_t));
    last_maker = malloc((nids ? nids : 1) * sizeof(int32_t));
    if (cs->min_left == NULL || cs->min_right == NULL || last_maker == NULL) {
        free(last_maker);
        char_start_free(cs);
        return -1;
    }
    for (i = 0; i < nids; i++) {
        cs->min_left[i] = cs->min_right[i] = NO_RANK;
        last_maker[i] = -1;
    }
    for (r = 0; r < n; r++)
        if (rank_of(m, left[r], right[r]) == r)     /* not a repeated pair, which never applies */
            last_maker[merged[r]] = (int32_t)r;
    for (r = 0; r < n; r++) {
        if (rank_of(m, left[r], right[r]) != r || (size_t)left[r] >= nids || (size_t)right[r] >= nids)
            continue;       /* a repeated pair, or a part that is no symbol: it never applies */
        if (last_maker[left[r]] >= r || last_maker[right[r]] >= r)
            break;          /* a part made (again) at or after this rank: the ranks do not ascend */
        if (cs->min_left[left[r]] == NO_RANK)
            cs->min_left[left[r]] = (int32_t)r;
        if (cs->min_right[right[r]] == NO_RANK)
            cs->min_right[right[r]] = (int32_t)r;
    }
    free(last_maker);
    if (r == n && (cs->chars = calloc(CHAR_LIMIT, sizeof(CharEntry))) == NULL) {
        char_start_free(cs);
        return -1;
    }
    return 0;
}

static inline int32_t edge_rank(const int32_t *min, size_t nids, int32_t id)
{
    return (size_t)id < nids ? min[id] : NO_RANK;
}

static void char_fill(const CharStart *cs, const MergeTable *m, const int32_t *byte_ids, const uint8_t *bytes,
                      int k, CharEntry *e)
{
    /* e = the symbols of the k-byte character `bytes` after the merges that are safe (see the top). */
    int i, n = k;
    for (i = 0; i < k; i++)
        e->ids[i] = byte_ids[bytes[i]];
    for (;;) {
        int at = 0;
        for (i = 0; i + 1 < n; i++)
            e->rank[i] = rank_of(m, e->ids[i], e->ids[i + 1]);
        if (n < 2)
            break;
        for (i = 1; i + 1 < n; i++)
            at = e->rank[i] < e->rank[at] ? i : at;
        if (e->rank[at] == NO_RANK || e->rank[at] >= edge_rank(cs->min_right, cs->nids, e->ids[0]) ||
            e->rank[at] >= edge_rank(cs->min_left, cs->nids, e->ids[n - 1]))
            break;
        e->ids[at] = merged_of(m, e->rank[at]);
        for (i = at + 1; i + 1 < n; i++)
            e->ids[i] = e->ids[i + 1];
        n--;
    }
    e->n = (uint8_t)n;
}

static inline int char_length(const uint8_t *s, size_t left, uint32_t *cp)
{
    /* The length of the two- or three-byte UTF-8 character at s (left bytes remain) and its code
     * point; 0 for anything else (ASCII, four bytes, not UTF-8): those stay bytes. */
    if (s[0] >= 0xC2 && s[0] <= 0xDF && left >= 2 && (s[1] & 0xC0) == 0x80) {
        *cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
        return 2;
    }
    if (s[0] >= 0xE0 && s[0] <= 0xEF && left >= 3 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80) {
        *cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        return *cp >= 0x800 ? 3 : 0;       /* an overlong form would share a code point */
    }
    return 0;
}

static size_t char_start_symbols(const CharStart *cs, const MergeTable *m, const int32_t *byte_ids,
                                 const int32_t *byte_rank, const uint8_t *piece, size_t len, int32_t *sym,
                                 int32_t *rank)
{
    /* sym = the first symbols of piece[0..len) and rank[i] = the rank of (sym[i], sym[i + 1]); the
     * number of symbols (at most len). cs->chars must not be NULL. */
    size_t i = 0, n = 0;
    int prev_byte = -1;             /* sym[n - 1]'s byte while it is one, for byte_rank */
    while (i < len) {
        uint32_t cp;
        int k = piece[i] < 0x80 ? 0 : char_length(piece + i, len - i, &cp);
        if (k == 0) {
            int32_t id = byte_ids[piece[i]];
            if (n > 0)
                rank[n - 1] = prev_byte >= 0 ? byte_rank[(size_t)prev_byte << 8 | piece[i]]
                                             : rank_of(m, sym[n - 1], id);
            sym[n++] = id;
            prev_byte = piece[i++];
        } else {
            CharEntry *e = &cs->chars[cp];
            int j;
            if (e->n == 0)
                char_fill(cs, m, byte_ids, piece + i, k, e);
            if (n > 0)
                rank[n - 1] = rank_of(m, sym[n - 1], e->ids[0]);
            for (j = 0; j < e->n; j++) {
                sym[n + j] = e->ids[j];
                if (j + 1 < e->n)
                    rank[n + j] = e->rank[j];
            }
            n += e->n;
            i += (size_t)k;
            prev_byte = -1;
        }
    }
    return n;
}

#endif

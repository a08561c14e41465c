"""The merge replay of byte-pair encoding, as plain functions over explicit tables.

A merge table is four parallel facts about each merge rank r: it joins the symbol ids `left[r]` and
`right[r]` into `merged[r]`; `ranks` maps a pair `(id_a, id_b)` to its lowest rank. The replay of
one pre-token repeatedly merges the adjacent pair of lowest rank, leftmost first on ties, until no
adjacent pair is a merge. The Tokenizer (bpe_ops/encoder.py) builds the tables once and calls these
functions; `bpe_ops._piece_merge` is the compiled twin of `merge_python` and `merge_dropout_python`,
and the tests hold them to these.

A worked example: merge 0 joins a (97) and b (98) into 256, merge 1 joins 256 and c (99) into 257.

>>> left, right, merged = [97, 256], [98, 99], [256, 257]
>>> ranks = first_ranks(left, right)
>>> ranks
{(256, 99): 1, (97, 98): 0}
>>> merge_python(list(b"abcab"), ranks, left, right, merged)
[257, 256]
"""
from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from heapq import heapify, heappop, heappush
from itertools import repeat
from operator import lt
from typing import Iterable, Protocol

try:
    from . import _piece_merge       # the compiled twin of merge_python (optional)
except ImportError:
    _piece_merge = None
try:
    from ._native import ranks_ascend as _compiled_ranks_ascend     # ranks_ascend_of's twin (optional)
except ImportError:
    _compiled_ranks_ascend = None

# Pieces up to this many symbols use the simple scan, longer ones the rank buckets: measured on
# English and base64 pieces with GPT-2's merges, the scan is faster below about 100 symbols.
SHORT_PIECE = 100
# The rank of "no merge": above every real rank.
NO_MERGE = 1 << 62
# Symbol ids that no merge involves: a merged-away position, and the ends of a long piece.
DEAD, OUTSIDE = -1, -2

Ranks = dict[tuple[int, int], int]


class SkipStream(Protocol):
    """What the dropout replay draws from (bpe_ops.dropout.DropoutStream)."""

    def skip(self) -> bool: ...


# ---- building the tables ------------------------------------------------------------------------

def byte_pairs(merges: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`[(bytes(a), bytes(b)) for a, b in merges]`, a side at a time; ValueError for a merge that is
    not a pair.

    >>> byte_pairs([(b"a", bytearray(b"b"))])
    [(b'a', b'b')]
    """
    merges = list(merges)
    if any(len(m) != 2 for m in merges):
        raise ValueError(f"a merge is a pair of tokens, got {next(m for m in merges if len(m) != 2)!r}")
    return list(zip(*(map(bytes, side) for side in zip(*merges)))) if merges else []


def invert(tokens: dict[int, bytes]) -> dict[bytes, int]:
    """`{token: id}` of `{id: token}`; ValueError when a token appears twice.

    >>> invert({0: b"a", 1: b"b"})
    {b'a': 0, b'b': 1}
    """
    out: dict[bytes, int] = {}
    for i, t in tokens.items():
        if t in out:
            raise ValueError(f"the vocab holds {t!r} twice (ids {out[t]} and {i})")
        out[t] = i
    return out


def first_ranks(left: list[int], right: list[int]) -> Ranks:
    """`(id_a, id_b) -> rank`, a repeated pair keeping its first rank: filled from the last rank to
    the first, so the lowest rank is written last.

    >>> first_ranks([97, 97], [98, 98])
    {(97, 98): 0}
    """
    n = len(left)
    return dict(zip(zip(reversed(left), reversed(right)), range(n - 1, -1, -1)))


def ranks_ascend(ranks: Ranks, left: list[int], right: list[int], merged: list[int]) -> bool:
    """Whether every merge ranks after every merge that makes one of its two parts (true of any
    trained merge list; `merge_long` needs it).

    >>> ranks_ascend(first_ranks([97, 256], [98, 99]), [97, 256], [98, 99], [256, 257])
    True
    >>> ranks_ascend(first_ranks([256, 97], [99, 98]), [256, 97], [99, 98], [257, 256])
    False
    """
    live = sorted(ranks.values())     # a repeated pair's later copies never apply
    last_maker = dict(zip(map(merged.__getitem__, live), live)).get   # the last wins
    return all(all(map(lt, map(last_maker, map(side.__getitem__, live), repeat(-1)), live))
               for side in (left, right))


def ranks_ascend_of(left, right, merged) -> bool:
    """`ranks_ascend(first_ranks(left, right), left, right, merged)`, which is its specification: in
    C (`bpe_ops._native.ranks_ascend`, two hash tables of ids, no dict of pairs) when the columns are
    `array("q")` of ids below 2**32, as a large file's tables are.

    >>> from array import array
    >>> ranks_ascend_of(array("q", [97, 256]), array("q", [98, 99]), array("q", [256, 257]))
    True
    >>> ranks_ascend_of([256, 97], [99, 98], [257, 256])
    False
    """
    if _compiled_ranks_ascend is not None and all(type(c) is array and c.typecode == "q" for c in (left, right, merged)):
        got = _compiled_ranks_ascend(left, right, merged)
        if got is not None:
            return got
    return ranks_ascend(first_ranks(left, right), left, right, merged)


def build_merge_table(merges: list[tuple[bytes, bytes]], tokens: dict[int, bytes], token_ids: dict[bytes, int],
                      extend: bool) -> tuple[Ranks, list[int], list[int], list[int]]:
    """`(ranks, left, right, merged)` of byte merges over a vocabulary. When `extend`, a merge
    making a token the vocabulary lacks gives it the next free id, added to `tokens` and
    `token_ids`; otherwise that is a ValueError, as is a merge of a token that neither the vocabulary
    nor an earlier merge holds.

    Every step runs over whole lists (map over dict lookups), which is exact when every part and
    every product of a merge is already a token; otherwise `_build_in_order` goes merge by merge.

    >>> tokens = {b: bytes([b]) for b in range(256)}
    >>> ranks, left, right, merged = build_merge_table([(b"a", b"b"), (b"ab", b"c")], tokens, invert(tokens), True)
    >>> left, right, merged, tokens[257]
    ([97, 256], [98, 99], [256, 257], b'abc')
    """
    get = token_ids.get
    left = list(map(get, [a for a, _ in merges]))
    right = list(map(get, [b for _, b in merges]))
    merged = list(map(get, [a + b for a, b in merges]))
    if None in left or None in right or None in merged:
        return _build_in_order(merges, tokens, token_ids, extend)
    return first_ranks(left, right), left, right, merged


def _build_in_order(merges: list[tuple[bytes, bytes]], tokens: dict[int, bytes], token_ids: dict[bytes, int],
                    extend: bool) -> tuple[Ranks, list[int], list[int], list[int]]:
    """`build_merge_table` one merge at a time: a merge may use the token an earlier one made."""
    ranks: Ranks = {}
    left: list[int] = []
    right: list[int] = []
    merged: list[int] = []
    next_id = max(tokens) + 1
    for rank, (a, b) in enumerate(merges):
        ia, ib = token_ids.get(a), token_ids.get(b)
        if ia is None or ib is None:
            raise ValueError(f"merge {rank} ({a!r}, {b!r}) uses a token that is neither in the vocab "
                             f"nor made by an earlier merge")
        new_id = token_ids.get(a + b)
        if new_id is None:
            if not extend:
                raise ValueError(f"merge {rank} ({a!r}, {b!r}) makes {a + b!r}, which is not in the vocab")
            new_id, next_id = next_id, next_id + 1
            tokens[new_id] = a + b
            token_ids[a + b] = new_id
        ranks.setdefault((ia, ib), rank)     # a repeated pair keeps its first (lowest) rank
        left.append(ia)
        right.append(ib)
        merged.append(new_id)
    return ranks, left, right, merged


def piece_merger(left: list[int], right: list[int], merged: list[int], token_ids: Iterable[int]):
    """The compiled merger of this merge table (`bpe_ops._piece_merge.PieceMerger`), or None: not
    built, or a token id outside 0..2**31 - 1 (the C merger packs two ids in 64 bits; Python takes
    any int)."""
    if _piece_merge is None:
        return None
    if not (0 <= min(token_ids, default=0) and max(token_ids, default=0) < 2**31):
        return None
    return _piece_merge.PieceMerger(left, right, merged)


# ---- first symbols ------------------------------------------------------------------------------

def byte_ids_of(token_ids: dict[bytes, int]) -> list[int]:
    """The id of each byte 0..255 in a byte-level vocab; ValueError naming the missing ones.

    >>> byte_ids_of({bytes([b]): b + 1 for b in range(256)})[:3]
    [1, 2, 3]
    """
    byte_ids = list(map(token_ids.get, map(bytes, zip(range(256)))))
    if None in byte_ids:
        missing = [b for b in range(256) if byte_ids[b] is None]
        raise ValueError(f"a byte-level vocab must hold all 256 single bytes; missing: "
                         f"{', '.join(f'0x{b:02x}' for b in missing)}")
    return byte_ids


def byte_symbols(data: bytes, byte_ids: list[int], identity: bool) -> list[int]:
    """Byte mode's first symbols: the id of each byte (`identity`: the ids are the bytes).

    >>> byte_symbols(b"ab", list(range(256)), True), byte_symbols(b"ab", list(range(255, -1, -1)), False)
    ([97, 98], [158, 157])
    """
    return list(data) if identity else list(map(byte_ids.__getitem__, data))


def classic_symbols(word: str, token_ids: dict[bytes, int], end_of_word: int) -> list[int]:
    """Classic mode's first symbols: a word's characters as symbol ids, then the end-of-word symbol;
    ValueError for a character the vocabulary lacks.

    >>> classic_symbols("ab", {b"a": 0, b"b": 1, b"</w>": 2}, 2)
    [0, 1, 2]
    """
    get = token_ids.get
    symbols = []
    for ch in word:
        i = get(ch.encode("utf-8", "surrogatepass"))
        if i is None:
            raise ValueError(f"character {ch!r} (U+{ord(ch):04X}) is not in the classic vocabulary")
        symbols.append(i)
    symbols.append(end_of_word)
    return symbols


# ---- the replay ---------------------------------------------------------------------------------

def merge_python(ids: list[int], ranks: Ranks, left: list[int], right: list[int], merged: list[int],
                 ascend: bool = True) -> list[int]:
    """Apply the merges to one pre-token's symbol ids (changed in place), lowest rank first,
    leftmost on ties: the specification of the compiled `PieceMerger.merge`.

    Short pieces keep the rank of every adjacent pair in a list and update only the two pairs next
    to each merge; min/index then run in C. Long pieces take `merge_long` when the ranks `ascend`
    (see `ranks_ascend`); the quadratic scan is the exact fallback for a table that does not.

    >>> merge_python(list(b"aab"), {(97, 98): 0, (97, 256): 1}, [97, 97], [98, 256], [256, 257])
    [257]
    """
    if len(ids) > SHORT_PIECE and ascend:
        return merge_long(ids, ranks, left, right, merged)
    get, none = ranks.get, NO_MERGE
    pair_ranks = list(map(get, zip(ids, ids[1:]), repeat(none)))
    while pair_ranks:
        rank = min(pair_ranks)
        if rank == none:
            break
        i = pair_ranks.index(rank)
        new_id = ids[i] = merged[rank]
        del ids[i + 1]
        if i + 1 < len(ids):
            pair_ranks[i] = get((new_id, ids[i + 1]), none)
            del pair_ranks[i + 1]
        else:
            del pair_ranks[i]
        if i:
            pair_ranks[i - 1] = get((ids[i - 1], new_id), none)
    return ids


def merge_long(ids: list[int], ranks: Ranks, left: list[int], right: list[int], merged: list[int]) -> list[int]:
    """`merge_python` for long pieces, near-linear: one bucket of positions per merge rank.

    When every merge ranks after the merges that make its two parts, a merge at rank r only creates
    pairs of higher rank. So the ranks can be taken in increasing order, each once: pop the lowest
    rank that has a bucket, apply it at its positions left to right (skipping stale ones), and file
    the pairs it creates under their ranks. The symbols form a linked list over the original
    positions, so position order is text order and a merge is O(1).

    >>> merge_long(list(b"ab" * 3), {(97, 98): 0, (256, 256): 1}, [97, 256], [98, 256], [256, 257])
    [257, 256]
    """
    get = ranks.get
    n = len(ids)
    # Initial buckets without a Python loop over positions: sort the positions by their pair's
    # rank (stable, so each bucket comes out in text order) and cut at each distinct rank.
    pair_ranks = list(map(get, zip(ids, ids[1:]), repeat(NO_MERGE)))
    by_rank = sorted(range(n - 1), key=pair_ranks.__getitem__)
    pair_ranks = list(map(pair_ranks.__getitem__, by_rank))
    order = sorted(set(pair_ranks))
    if not order:
        return ids
    if order[-1] == NO_MERGE:
        order.pop()
    buckets = {r: by_rank[bisect_left(pair_ranks, r):bisect_right(pair_ranks, r)] for r in order}
    ids.append(OUTSIDE)           # ids[n] (after the end) and ids[-1] (before the start)
    nxt = list(range(1, n + 2))
    prv = list(range(-1, n))

    def file(rank: int | None, position: int) -> None:
        if rank is not None:
            bucket = buckets.get(rank)
            if bucket is None:
                buckets[rank] = [position]
                heappush(order, rank)
            else:
                bucket.append(position)

    while order:
        rank = heappop(order)
        positions = buckets.pop(rank)
        positions.sort()          # filed by several earlier ranks, so not necessarily in order
        a, b = left[rank], right[rank]
        new_id = merged[rank]
        for i in positions:
            if ids[i] != a:
                continue
            j = nxt[i]
            if ids[j] != b:
                continue
            ids[i] = new_id
            ids[j] = DEAD
            k = nxt[i] = nxt[j]
            prv[k] = i
            # File the two pairs the merge created: (new, right) at i, (left, new) at p.
            file(get((new_id, ids[k])), i)
            p = prv[i]
            file(get((ids[p], new_id)), p)
    del ids[n]
    return list(filter(DEAD.__ne__, ids))


def merge_dropout_python(ids: list[int], ranks: Ranks, merged: list[int], stream: SkipStream) -> list[int]:
    """`merge_python` with BPE-dropout, as Hugging Face's `Word::merge_all` with a dropout: the
    specification of the compiled `PieceMerger.merge_dropout`. Candidate merges wait in a heap by
    (rank, position); each one popped draws from `stream`, and a skipped one is set aside until the
    next draw that is not a skip puts them all back (a popped candidate that is no longer valid
    still draws). The merge stops when the heap is empty, so a skipped merge may never be applied.

    With a stream that never skips this is `merge_python`; with one that always skips, the symbols
    come back unmerged.

    >>> class Never:
    ...     def skip(self): return False
    >>> class Always:
    ...     def skip(self): return True
    >>> ranks, merged = {(97, 98): 0, (256, 99): 1}, [256, 257]
    >>> merge_dropout_python(list(b"abc"), ranks, merged, Never()), merge_dropout_python(list(b"abc"), ranks, merged, Always())
    ([257], [97, 98, 99])
    """
    get = ranks.get
    n = len(ids)
    heap = [(r, i) for i, r in enumerate(map(get, zip(ids, ids[1:]))) if r is not None]
    heapify(heap)
    skipped: list[tuple[int, int]] = []
    nxt = list(range(1, n + 1))     # n: past the end
    prv = list(range(-1, n - 1))    # -1: before the start
    skip = stream.skip
    while heap:
        top = heappop(heap)
        if skip():
            skipped.append(top)
            continue
        for entry in skipped:
            heappush(heap, entry)
        skipped.clear()
        rank, i = top
        j = nxt[i]
        if ids[i] == DEAD or j == n or get((ids[i], ids[j])) != rank:
            continue                # merged away, at the end, or its pair changed
        new_id = ids[i] = merged[rank]
        ids[j] = DEAD
        k = nxt[i] = nxt[j]
        if k < n:
            prv[k] = i
            r = get((new_id, ids[k]))
            if r is not None:
                heappush(heap, (r, i))
        p = prv[i]
        if p >= 0:
            r = get((ids[p], new_id))
            if r is not None:
                heappush(heap, (r, p))
    return list(filter(DEAD.__ne__, ids))

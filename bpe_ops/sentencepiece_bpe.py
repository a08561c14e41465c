"""SentencePiece-style BPE: merges over characters, then byte fallback or an unknown token.

This is the model of the tokenizer.json files that `transformers` converts from SentencePiece BPE
models (Llama 2, Mistral 7B, Gemma) and that `tokenizers` builds with `models.BPE(byte_fallback=True)`.
It differs from byte-level BPE only in its first symbols; the merge replay is the same
(`merging.merge_python`: lowest merge rank first, leftmost on ties), so the encoder runs it, compiled
where built. Written from `tokenizers`' `BPE::merge_word` and `Word::merge_all` (models/bpe/):

  - each character of a pre-token is its piece when the vocabulary holds it;
  - otherwise, with `byte_fallback`, its UTF-8 bytes as the pieces `<0xNN>` (if all of them are in the
    vocabulary); otherwise the unknown token, consecutive unknown characters fused into one when
    `fuse_unk` (a fused run is emitted when the next known character or byte run arrives; a byte
    run does not flush it, as in `tokenizers`);
  - then the merges, pair by pair, by rank.

A pre-token may be a whole sentence (Metaspace with `split=false`, SentencePiece's own layout), so
`segments` cuts it where no merge can ever join the two characters: a merge joins tokens A and B
only if some merge `(a, b)` has `a` ending with A's last character and `b` starting with B's first.
Cut there, the pieces merge independently (no pair spans the cut, and within a piece the order of
merges is the same), so each is a short, cacheable word and the cost is linear in the length.
The compiled twin (bpe_ops/_spm.c, `compiled_encoder`) cuts at every such place, and also around a
character outside the vocabulary where its bytes' pieces are in no merge; given `text_space`, it
takes a Metaspace (split=false) text whole, its spaces read as the mark.

    >>> model = PieceModel({"▁": 0, "a": 1, "b": 2, "▁a": 3, "<0xC3>": 4, "<0xA9>": 5, "<unk>": 6},
    ...                    [("▁", "a")], byte_fallback=True, unk_id=6)
    >>> model.symbols("▁aé")
    [0, 1, 4, 5]
    >>> model.segments("▁ab" * 30)[:3]      # longer than UNCUT_CHARS: cut
    ['▁a', 'b', '▁a']
    >>> merge_heap([0, 1, 2], {(0, 1): (0, 3)})
    [3, 2]
"""
from __future__ import annotations

import re
from heapq import heapify, heappop, heappush
from typing import Any, Callable, Iterable, Mapping

try:
    from . import _spm                  # the compiled twin of this module (optional)
except ImportError:                     # pragma: no cover - the extension is optional
    _spm = None

# Pre-tokens up to this many characters are cached whole: cutting them costs more than it saves.
UNCUT_CHARS = 64


def byte_piece(byte: int) -> str:
    """The piece of one byte in a byte-fallback vocabulary, as `tokenizers` spells it: `<0x0A>`."""
    return f"<0x{byte:02X}>"


def byte_of_piece(piece: str) -> int | None:
    """The byte a `<0xNN>` piece stands for (hex digits of either case, as the ByteFallback decoder
    reads them), else None."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">") and piece.isascii():
        digits = piece[3:5]
        if all(c in "0123456789abcdefABCDEF" for c in digits):
            return int(digits, 16)
    return None


class PieceModel:
    """The first symbols of a pre-token, and where it may be cut (see the module docstring).

    `piece_ids` is the model's whole vocabulary {piece: id}; `merges` its merges as piece pairs;
    `unk_id` the unknown token's id (None: none)."""

    def __init__(self, piece_ids: Mapping[str, int], merges: Iterable[tuple[str, str]], *,
                 byte_fallback: bool, unk_id: int | None, fuse_unk: bool = False):
        self.piece_ids = dict(piece_ids)
        self.byte_fallback = byte_fallback
        self.unk_id = unk_id
        self.fuse_unk = fuse_unk
        get = self.piece_ids.get
        self.byte_ids = [get(byte_piece(b)) for b in range(256)]
        known = frozenset(p for p in self.piece_ids if len(p) == 1)
        self._known = known
        # A set: of a large vocabulary's merges, most share their (last, first) characters with another.
        self._joiners, self._candidates = _cut_candidates(known, {(a[-1], b[0]) for a, b in merges if a and b})

    def symbols(self, word: str) -> list[int]:
        """`BPE::merge_word` before the merges: the ids of the pieces the characters are."""
        get, out, unk = self.piece_ids.get, [], None
        for ch in word:
            i = get(ch)
            if i is not None:
                if unk is not None:
                    out.append(unk)
                    unk = None
                out.append(i)
                continue
            if self.byte_fallback:
                ids = [self.byte_ids[b] for b in ch.encode("utf-8", "surrogatepass")]
                if None not in ids:
                    out.extend(ids)
                    continue
            if self.unk_id is not None:
                if unk is not None and not self.fuse_unk:
                    out.append(unk)
                unk = self.unk_id
        if unk is not None:
            out.append(unk)
        return out

    def segments(self, word: str) -> list[str]:
        """`word` cut before characters that no merge joins to the character before them (both
        characters of the vocabulary); the pieces' merged ids, concatenated, are the word's."""
        if len(word) <= UNCUT_CHARS or self._candidates is None:
            return [word]
        known, joiners = self._known, self._joiners
        at = [0]
        for m in self._candidates.finditer(word, 1):
            i = m.start()
            before = word[i - 1]
            if before in known and before not in joiners.get(word[i], ()):
                at.append(i)
        at.append(len(word))
        return [word[s:e] for s, e in zip(at, at[1:])]

    def word_ids(self, word: str, merge: Callable[[list[int]], list[int]], *, ignore_merges: bool,
                 segments: Any) -> tuple[int, ...]:
        """The ids of one pre-token (the encoder's cache miss): the whole word when it is a piece and
        `ignore_merges`; else its `segments`, each merged from its first symbols by `merge` and kept
        apart in the cache `segments` (a `piece_cache.PieceCache`: a segment is not a whole word for
        `ignore_merges`).

        >>> model = PieceModel({"▁": 0, "a": 1, "▁a": 2}, [("▁", "a")], byte_fallback=False, unk_id=None)
        >>> model.word_ids("▁a", lambda ids: ids, ignore_merges=True, segments={})
        (2,)
        >>> model.word_ids("▁a", lambda ids: ids, ignore_merges=False, segments={})   # no merge here
        (0, 1)
        """
        if ignore_merges:
            whole = self.piece_ids.get(word)
            if whole is not None:
                return (whole,)
        if len(word) <= UNCUT_CHARS:
            return tuple(merge(self.symbols(word)))
        out: list[int] = []
        for segment in self.segments(word):
            ids = segments.get(segment)
            if ids is None:
                ids = segments.remember(segment, tuple(merge(self.symbols(segment))))
            out.extend(ids)
        return tuple(out)


# A character is a cut candidate when at most this many characters join it from the left (a
# space mark, punctuation, most ideographs): cutting at some of the safe places only is exact, and
# checking every character would cost more than the merges it saves.
MAX_JOINERS = 8


def _cut_candidates(known: frozenset, joined: Iterable[tuple[str, str]]) -> tuple[dict, "re.Pattern | None"]:
    """{v: the characters u that some merge joins to v (the last character of its left half, the
    first of its right)}, and a pattern matching the candidates (None: none).
    Next to a character outside the vocabulary nothing is cut: its symbols are bytes or the
    unknown token, which merges or fusion may join."""
    joiners: dict[str, set] = {}
    for u, v in joined:
        joiners.setdefault(v, set()).add(u)
    candidates = sorted(v for v in known if len(joiners.get(v, ())) <= MAX_JOINERS)
    joiners = {v: frozenset(u) for v, u in joiners.items()}
    if not candidates:
        return joiners, None
    return (joiners,
            re.compile(f"[{''.join(map(re.escape, candidates))}]"))


def text_space(model: PieceModel, metaspace: tuple[str, str] | None, *, ignore_merges: bool) -> str | None:
    """The replacement the compiled encoder reads spaces as (its `encode_text`), or None: the
    pre-tokenizer is not one Metaspace without split (`metaspace`: `hf_components.metaspace_alone`),
    the replacement is not a piece, or `ignore_merges` (its whole-word lookup wants the marks).

    >>> model = PieceModel({"▁": 0, "a": 1}, [], byte_fallback=False, unk_id=None)
    >>> text_space(model, ("▁", "first"), ignore_merges=False), text_space(model, None, ignore_merges=False)
    ('▁', None)
    """
    if metaspace is None or ignore_merges or metaspace[0] not in model._known or metaspace[0].isascii():
        return None
    return metaspace[0]


def compiled_encoder(model: PieceModel, left: list[int], right: list[int], merged: list[int], *,
                     ignore_merges: bool, cache_size: int, space: str | None = None):
    """The compiled encoder of this model (`bpe_ops._spm.SpmEncoder`), or None where it is not built.

    Its `encode_words(pre_tokens)` is `PieceModel.word_ids` of each pre-token, the ids one after the
    other, as a list (`encode_words_bytes`: as native uint32 bytes, for an `array("I")`). The merges
    are by rank: merge r joins left[r] and right[r] into merged[r]; up to `cache_size` segments are
    cached (0: none). With `space` (see `text_space`), `encode_text(text, prepend)` is
    `encode_words` of Metaspace's pre-token (split=false): the text with each " " as `space`, one
    `space` prepended when `prepend` and the text starts with neither; [] for "" (and
    `encode_text_bytes` likewise); a " " in a pre-token is then read as `space` too."""
    if _spm is None:
        return None
    return _spm.SpmEncoder(
        {p: i for p, i in model.piece_ids.items() if len(p) == 1},
        model.byte_ids if model.byte_fallback else [None] * 256,
        model.unk_id, model.fuse_unk,
        {v: "".join(sorted(u)) for v, u in model._joiners.items()},
        left, right, merged,
        dict(model.piece_ids) if ignore_merges else None,
        cache_size, space)


def merge_heap(symbols: list[int], merges: Mapping[tuple[int, int], tuple[int, int]]) -> list[int]:
    """`Word::merge_all` of `tokenizers`: the specification the encoder's merge replay is held to.

    `merges` maps a pair of ids to (rank, new id). A min-heap of (rank, position) holds every
    mergeable adjacent pair; the lowest is applied unless stale (its left symbol was merged away,
    or the pair there no longer makes the same token), and the pairs it creates are pushed. The
    symbols are a linked list over their first positions, so each merge is O(log n)."""
    n = len(symbols)
    ids = list(symbols)
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    alive = [True] * n
    heap = []
    for i in range(n - 1):
        found = merges.get((ids[i], ids[i + 1]))
        if found is not None:
            heap.append((found[0], i, found[1]))
    heapify(heap)
    while heap:
        rank, i, new_id = heappop(heap)
        if not alive[i] or nxt[i] >= n:
            continue
        j = nxt[i]
        found = merges.get((ids[i], ids[j]))
        if found is None or found[1] != new_id:
            continue
        ids[i] = new_id
        alive[j] = False
        k = nxt[i] = nxt[j]
        if k < n:
            prv[k] = i
        p = prv[i]
        if p >= 0:
            found = merges.get((ids[p], new_id))
            if found is not None:
                heappush(heap, (found[0], p, found[1]))
        if k < n:
            found = merges.get((new_id, ids[k]))
            if found is not None:
                heappush(heap, (found[0], i, found[1]))
    return [s for s, keep in zip(ids, alive) if keep]

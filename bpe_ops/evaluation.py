"""What `tokenbeam evaluate` measures of a tokenizer on a text: exact, mergeable tallies, the pieces
of a word type, and the tokenizer of a merge list cut to a size.

Two tallies, both integer counts that merge exactly (any order, any runner):

- `TokenTally`, over records encoded whole: records, tokens, UTF-8 bytes, characters, words,
  raw-byte tokens, the set of ids used. Its figures have the definitions of stats.json
  (bpe_ops/stats.py, schemas/stats.py): bytes per token = bytes / tokens, tokens per word =
  tokens / words (whitespace words, `str.split`), raw-byte share = single-byte tokens / tokens,
  utilisation = ids used / vocabulary size.
- `WordTally`, over word *types* (distinct whitespace words) with their occurrence counts: a word
  type's pieces are the tokens of the word as it stands in running text after a space, `" " +
  word` encoded alone, not counting the tokens made only of whitespace (a tokenizer that splits the
  space off gives it a token of its own; one that glues it to the word does not). A word type is
  kept whole when that is one piece. Per type: pieces per word type (the mean over types) and the
  share of types kept whole; weighted by occurrences: pieces per word and the share of word
  occurrences kept whole.

    >>> from bpe_ops import Tokenizer
    >>> tok = Tokenizer([(b"a", b"b")], pattern="gpt2")           # one merge: 'ab' (id 256)
    >>> tally = TokenTally(tok.vocab_size, raw_byte_ids(tok))
    >>> tally.add_texts(["ab ab", "abc"], [tok.encode_array("ab ab"), tok.encode_array("abc")])
    >>> f = tally.figures()                  # 'ab' ' ' 'ab' | 'ab' 'c': 5 tokens, 8 bytes, 3 words
    >>> f["bytes_per_token"], f["raw_byte_share"], f["used_ids"]
    (1.6, 0.4, 3)
    >>> words = WordTally()                  # " ab" -> ' ' 'ab': 1 piece; " abc" -> ' ' 'ab' 'c': 2
    >>> for word, count in (("ab", 2), ("abc", 1)):
    ...     words.add(word_pieces(tok, [word])[0], count)
    >>> words.figures()["pieces_per_word_type"], words.figures()["words_kept_whole"]
    (1.5, 0.6666666666666666)
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from .specials import is_base
from .stats import WORD_COUNT_CHUNK, _ratio, batch_stats, record_ids_view, single_byte_ids

__all__ = ["TokenTally", "WordTally", "iter_words", "word_pieces", "whitespace_ids", "truncated",
           "merge_count_for_vocab_size", "raw_byte_ids", "id_mask", "evaluate_texts"]


def iter_words(text: str, chunk: int = WORD_COUNT_CHUNK) -> Iterator[str]:
    """The whitespace-separated words of `text` (`str.split()`), split a chunk at a time so that a
    long record costs no list of all its words; a word cut by a chunk boundary comes out whole.
    As many words as `bpe_ops.stats.count_words` counts.

    >>> list(iter_words("a bc  d", chunk=3))
    ['a', 'bc', 'd']
    """
    if len(text) <= chunk:
        yield from text.split()
        return
    carry = ""
    for start in range(0, len(text), chunk):
        piece = text[start:start + chunk]
        words = piece.split()
        if carry and words and not piece[0].isspace():
            words[0] = carry + words[0]
        elif carry:
            yield carry
        carry = ""
        if words and not piece[-1].isspace():
            carry = words.pop()
        yield from words
    if carry:
        yield carry


def whitespace_ids(vocab: Mapping[int, bytes]) -> tuple[int, ...]:
    """The ids of tokens made only of whitespace (`' '`, `'\\n\\n'`, `'  '`), sorted."""
    return tuple(sorted(i for i, b in vocab.items() if b and b.decode("utf-8", "replace").isspace()))


def raw_byte_ids(tok) -> tuple[int, ...]:
    """The ids standing for one raw byte, as stats.json counts them: the tokenizer's own
    `raw_byte_ids` where it defines them (a byte-fallback vocabulary's `<0xNN>` pieces), else its
    single-byte tokens."""
    own = getattr(tok, "raw_byte_ids", None)
    return tuple(sorted(own)) if own is not None else single_byte_ids(tok.vocab)


def id_mask(ids: Iterable[int], size: int) -> np.ndarray:
    """A bool per id below `size`, True for `ids`."""
    mask = np.zeros(size, dtype=bool)
    mask[[i for i in ids if i < size]] = True
    return mask


@lru_cache(maxsize=64)
def _shared_mask(ids: tuple[int, ...], size: int) -> np.ndarray:
    """`id_mask`, one read-only copy per tokenizer for all its tallies (a group's among them)."""
    mask = id_mask(ids, size)
    mask.flags.writeable = False
    return mask


def word_pieces(tok, words: Sequence[str], space_mask: np.ndarray | None = None) -> list[int]:
    """The pieces of each word type: the tokens of `" " + word` that are not whitespace only (see
    the module docstring). `space_mask` (a bool per id, from `whitespace_ids`) saves recomputing it.
    """
    if space_mask is None:
        space_mask = id_mask(whitespace_ids(tok.vocab), tok.vocab_size)
    arrays = tok.encode_arrays([" " + w for w in words])
    lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    if not lengths.sum():
        return [0] * len(words)
    flat = np.frombuffer(b"".join(arrays), dtype=np.uint32)       # one buffer, no array per word
    owners = np.repeat(np.arange(len(arrays)), lengths)
    spaces = np.bincount(owners[space_mask[flat]], minlength=len(arrays))
    return (lengths - spaces).tolist()


class TokenTally:
    """Records encoded whole by one tokenizer (one group of them): exact counts, merged by `merge`."""

    def __init__(self, vocab_size: int, raw_byte_ids: Iterable[int]):
        self.vocab_size = vocab_size
        self.raw_byte_ids = tuple(sorted(set(raw_byte_ids)))
        self.records = self.tokens = self.bytes = self.chars = self.words = self.raw_byte_tokens = 0
        # The ids seen, sorted: a group of a few records holds a few ids, not a flag per id of the vocabulary.
        self.used = np.zeros(0, dtype=np.uint32)

    def add_batch(self, n_tokens: Sequence[int], n_bytes: Sequence[int], n_chars: Sequence[int],
                  n_words: Sequence[int], id_arrays: Sequence) -> None:
        """A batch of records as `batch_stats` columns and their token ids."""
        self.records += len(n_tokens)
        self.tokens += sum(n_tokens)
        self.bytes += sum(n_bytes)
        self.chars += sum(n_chars)
        self.words += sum(n_words)
        arrays = [record_ids_view(a) for a in id_arrays if len(a)]
        if not arrays:
            return
        flat = np.concatenate(arrays)
        if int(flat.max()) >= self.vocab_size:
            raise ValueError(f"token id {int(flat.max())} outside the vocabulary (size {self.vocab_size})")
        self.raw_byte_tokens += int(_shared_mask(self.raw_byte_ids, self.vocab_size)[flat].sum())
        self.used = np.union1d(self.used, flat).astype(np.uint32)

    def add_texts(self, texts: Sequence[str], id_arrays: Sequence) -> None:
        """A batch of records from their texts and token ids."""
        self.add_batch(*batch_stats(texts, id_arrays), id_arrays)

    def merge(self, other: "TokenTally") -> "TokenTally":
        if other.vocab_size != self.vocab_size or other.raw_byte_ids != self.raw_byte_ids:
            raise ValueError("cannot merge the tallies of different tokenizers")
        for name in ("records", "tokens", "bytes", "chars", "words", "raw_byte_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.used = np.union1d(self.used, other.used).astype(np.uint32)
        return self

    def figures(self) -> dict:
        """The counts and the ratios of stats.json's definitions (None where a count is zero)."""
        used = len(self.used)
        return {"records": self.records, "tokens": self.tokens, "bytes": self.bytes, "chars": self.chars,
                "words": self.words, "bytes_per_token": _ratio(self.bytes, self.tokens),
                "tokens_per_char": _ratio(self.tokens, self.chars),
                "tokens_per_word": _ratio(self.tokens, self.words),
                "raw_byte_tokens": self.raw_byte_tokens, "raw_byte_share": _ratio(self.raw_byte_tokens, self.tokens),
                "used_ids": used, "vocab_size": self.vocab_size, "vocab_utilisation": used / self.vocab_size}


class WordTally:
    """Word types with their pieces and occurrence counts (see the module docstring)."""

    def __init__(self):
        self.types = self.occurrences = 0
        self.type_pieces = self.occurrence_pieces = 0       # sums of pieces over types / occurrences
        self.whole_types = self.whole_occurrences = 0

    def add(self, pieces: int, count: int) -> None:
        """One word type of `pieces` pieces, seen `count` times."""
        self.types += 1
        self.occurrences += count
        self.type_pieces += pieces
        self.occurrence_pieces += pieces * count
        if pieces == 1:
            self.whole_types += 1
            self.whole_occurrences += count

    def add_many(self, pieces: np.ndarray, counts: np.ndarray) -> None:
        """`add(pieces[i], counts[i])` for every i, as whole-array sums."""
        whole = pieces == 1
        self.types += len(pieces)
        self.occurrences += int(counts.sum())
        self.type_pieces += int(pieces.sum())
        self.occurrence_pieces += int((pieces * counts).sum())
        self.whole_types += int(whole.sum())
        self.whole_occurrences += int(counts[whole].sum())

    def merge(self, other: "WordTally") -> "WordTally":
        for name, value in other.__dict__.items():
            setattr(self, name, getattr(self, name) + value)
        return self

    def figures(self) -> dict:
        return {"word_types": self.types, "word_occurrences": self.occurrences,
                "pieces_per_word_type": _ratio(self.type_pieces, self.types),
                "word_types_kept_whole": _ratio(self.whole_types, self.types),
                "pieces_per_word": _ratio(self.occurrence_pieces, self.occurrences),
                "words_kept_whole": _ratio(self.whole_occurrences, self.occurrences)}


def evaluate_texts(tokenizers: Mapping[str, object], texts: Iterable[str],
                   groups: Iterable[str] | None = None) -> dict[tuple[str, str | None], dict]:
    """The figures of every tokenizer on `texts`, for the whole (group None) and per group: the
    specification of the evaluate pipeline, in memory. `{(name, group): figures}`."""
    texts = list(texts)
    groups = [None] * len(texts) if groups is None else list(groups)
    scopes = [None] + sorted({g for g in groups if g is not None})
    words: dict[str | None, dict[str, int]] = {s: {} for s in scopes}
    for text, group in zip(texts, groups):
        for scope in {None, group}:
            counts = words[scope]
            for w in iter_words(text):
                counts[w] = counts.get(w, 0) + 1
    out = {}
    for name, tok in tokenizers.items():
        arrays = tok.encode_arrays(texts)
        for scope in scopes:
            picked = [i for i, g in enumerate(groups) if scope is None or g == scope]
            tally = TokenTally(tok.vocab_size, raw_byte_ids(tok))
            tally.add_texts([texts[i] for i in picked], [arrays[i] for i in picked])
            word_tally = WordTally()
            types = sorted(words[scope])
            for word, pieces in zip(types, word_pieces(tok, types)):
                word_tally.add(pieces, words[scope][word])
            out[(name, scope)] = {**tally.figures(), **word_tally.figures()}
    return out


# ---- truncation -------------------------------------------------------------------------------

def merge_count_for_vocab_size(tok, vocab_size: int) -> int:
    """The merges that make a vocabulary of `vocab_size` ids from `tok`'s: its alphabet, then merges,
    then its special tokens (as `train_bpe` counts them). ValueError when out of range."""
    alphabet = len(_alphabet(tok))
    merges = vocab_size - alphabet - len(tok.special_tokens)
    if merges < 0:
        raise ValueError(f"vocabulary size {vocab_size:,} is below the {alphabet:,} base symbols and "
                         f"{len(tok.special_tokens)} special tokens")
    return merges


def _alphabet(tok) -> dict[int, bytes]:
    special_ids = set(tok.special_tokens.values())
    return {i: b for i, b in tok.vocab.items() if i not in special_ids and is_base(tok.mode, b)}


def truncated(tok, n_merges: int):
    """The tokenizer of `tok`'s first `n_merges` merges: the same split, normalizer and special
    tokens (numbered after the last merge, as `train_bpe` numbers them), ids renumbered (bytes 0..255
    in byte mode): what `train_bpe` would have made with that many merges. ValueError for a tokenizer that is not a merge list, or past its merges.

    >>> from bpe_ops import Tokenizer
    >>> tok = Tokenizer([(b"a", b"b"), (b"ab", b"c")], pattern="gpt2")
    >>> truncated(tok, 1).encode("abc")
    [256, 99]
    """
    from .encoder import Tokenizer
    from .trainer import vocab_from_merges

    merges = getattr(tok, "merges", None)
    if merges is None:
        raise ValueError("only a BPE merge list can be cut to a size; this tokenizer has none")
    if tok.mode not in ("byte", "classic"):
        raise ValueError(f"cutting is supported for byte-level and classic BPE, not for {tok.mode}-mode tokenizers")
    if not 0 <= n_merges <= len(merges):
        raise ValueError(f"{n_merges:,} merges asked for, the tokenizer has {len(merges):,}")
    if any(not entry.get("special", True) for entry in tok.added_tokens_spec or ()):
        raise ValueError("a tokenizer with non-special added tokens cannot be cut to a size: those "
                         "tokens would change what its merges make")
    specials = sorted(tok.special_tokens, key=tok.special_tokens.get)
    kept = merges[:n_merges]
    if tok.mode == "classic":
        alphabet = [b for _, b in sorted(_alphabet(tok).items())]        # in their id order, as trained
        return Tokenizer(kept, special_tokens=specials, vocab=vocab_from_merges(alphabet, kept), mode="classic",
                         implementation=tok.implementation)
    return Tokenizer(kept, pattern=tok.pattern, special_tokens=specials, ignore_merges=tok.ignore_merges,
                     normalizer=tok.normalizer_spec, pre_tokenizer=tok.pre_tokenizer_spec,
                     implementation=tok.implementation)

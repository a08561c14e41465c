"""Byte-pair encoding the obvious way: a short reference that the tests use as their oracle.

Production never imports this module (bpe_ops/encoder.py and bpe_ops/merging.py are the fast
versions: rank tables over integer ids, caches, compiled twins). Here every symbol is its bytes and
every step is the textbook one, quadratic and slow, so that it can be read in a minute and trusted:

  1. split the text into pre-tokens with the tokenizer's regex (the text between two matches is a
     pre-token too, so no byte is ever dropped);
  2. in each pre-token, start from its bytes (byte level) or its characters (piece mode) and
     repeatedly merge the adjacent pair that comes first in the merge list, leftmost on ties, until
     no adjacent pair is in the list;
  3. look each resulting token up in the vocabulary.

>>> merges = [(b"a", b"b"), (b"ab", b"c")]
>>> merge([b"a", b"b", b"c", b"a", b"b"], ranks_of(merges))
[b'abc', b'ab']
>>> encode_ordinary("abc ab", merges, r"\\w+| ")
[257, 32, 256]
"""
from __future__ import annotations

from typing import Iterable, Mapping

import regex


def ranks_of(merges: Iterable[tuple[bytes, bytes]]) -> dict[tuple[bytes, bytes], int]:
    """`(left, right) -> rank`: a merge's place in the list (a repeated pair keeps its first place).

    >>> ranks_of([(b"a", b"b"), (b"c", b"d"), (b"a", b"b")])
    {(b'a', b'b'): 0, (b'c', b'd'): 1}
    """
    ranks: dict[tuple[bytes, bytes], int] = {}
    for rank, pair in enumerate(merges):
        ranks.setdefault(pair, rank)
    return ranks


def merge(parts: list[bytes], ranks: Mapping[tuple[bytes, bytes], int]) -> list[bytes]:
    """Merge the adjacent pair of lowest rank (leftmost on ties) until no pair is a merge.

    >>> merge([b"a", b"a", b"a"], {(b"a", b"a"): 0})
    [b'aa', b'a']
    """
    parts = list(parts)
    while len(parts) > 1:
        pairs = [(ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
        candidates = [(rank, i) for rank, i in pairs if rank is not None]
        if not candidates:
            break
        _, i = min(candidates)
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return parts


def split(text: str, pattern: str) -> list[str]:
    """The pre-tokens of `text`: every match of `pattern`, and every stretch between matches.

    >>> split("ab, cd", r"\\w+")
    ['ab', ', ', 'cd']
    """
    pieces, at = [], 0
    for match in regex.finditer(pattern, text):
        if match.start() > at:
            pieces.append(text[at:match.start()])
        if match.end() > match.start():
            pieces.append(match.group())
        at = match.end()
    if at < len(text):
        pieces.append(text[at:])
    return pieces


def encode_ordinary(text: str, merges: Iterable[tuple[bytes, bytes]], pattern: str,
                    vocab: Mapping[int, bytes] | None = None, ignore_merges: bool = False) -> list[int]:
    """Byte-level BPE ids of `text` (no special tokens). Without `vocab`, byte b is id b and merge
    r makes id 256 + r; with it, a token's id is its id there. With `ignore_merges`, a whole
    pre-token that is a token is that token (as tiktoken does).

    >>> encode_ordinary("aab", [(b"a", b"b"), (b"a", b"ab")], r"\\w+")
    [257]
    """
    merges = list(merges)
    token_ids = ({bytes([b]): b for b in range(256)} | {a + b: 256 + r for r, (a, b) in enumerate(merges)}
                 if vocab is None else {token: i for i, token in vocab.items()})
    ranks = ranks_of(merges)
    ids: list[int] = []
    for piece in split(text, pattern):
        data = piece.encode("utf-8", "surrogatepass")
        if ignore_merges and data in token_ids:
            ids.append(token_ids[data])
        else:
            ids.extend(token_ids[token] for token in merge([bytes([b]) for b in data], ranks))
    return ids


def piece_symbols(word: str, pieces: Mapping[str, int], byte_fallback: bool) -> list[str]:
    """Piece mode's first symbols (SentencePiece): each character that is a piece; otherwise its
    UTF-8 bytes as `<0xNN>` pieces with `byte_fallback`, else the character itself (an unknown,
    which no merge joins).

    >>> piece_symbols("aé", {"a": 0, "<0xC3>": 1, "<0xA9>": 2}, byte_fallback=True)
    ['a', '<0xC3>', '<0xA9>']
    """
    symbols: list[str] = []
    for ch in word:
        if ch in pieces or not byte_fallback:
            symbols.append(ch)
        else:
            symbols.extend(f"<0x{b:02X}>" for b in ch.encode("utf-8"))
    return symbols

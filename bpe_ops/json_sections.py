"""The two big sections of a canonical byte-level tokenizer.json: `model.vocab` and `model.merges`.

They are nearly all of the file (a 128k vocabulary has ~128k entries in each), and the launcher of
every job writes them to take the tokenizer's SHA-256: `byte_level_sections` writes both in C
(`_native.byte_level_sections`) and `byte_level_sections_python` is its specification. Each token is
spelled in GPT-2's byte alphabet and quoted as `json.dumps(..., ensure_ascii=False)` quotes it; the
vocab lists the ordinary tokens by id, the merges name their two halves' tokens, one entry per line.

>>> tokens = {0: b"a", 1: b" ", 2: b'"', 3: b"a "}
>>> vocab, merges = byte_level_sections(tokens, [0, 1, 2, 3], [0], [1], pad="  ", end="\\n")
>>> print(vocab)
{
  "a": 0,
  "Ġ": 1,
  "\\"": 2,
  "aĠ": 3
}
>>> print(merges)
[
  ["a", "Ġ"]
]
>>> (vocab, merges) == byte_level_sections_python(tokens, [0, 1, 2, 3], [0], [1], pad="  ", end="\\n")
True
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from .pretokenize import byte_alphabet, tokens_to_unicode

try:
    from ._native import byte_level_sections as _byte_level_sections
except ImportError:            # not built: the specification writes them
    _byte_level_sections = None

# What `json.dumps(s, ensure_ascii=False)` returns for a str s (C-accelerated where available).
quote = json.encoder.encode_basestring


def byte_level_sections(tokens: Mapping[int, bytes], ids: Sequence[int], left: Sequence[int],
                        right: Sequence[int], pad: str, end: str) -> tuple[str, str]:
    """(vocab text, merges text): `ids`' tokens with their ids, then merge r as [tokens[left[r]],
    tokens[right[r]]]; each entry on its own line after `pad`, each section closed on a line after
    `end`. `tokens` maps every id named to its bytes."""
    if _byte_level_sections is not None and type(tokens) is dict:
        written = _byte_level_sections(tokens, ids, left, right, byte_alphabet(), pad, end)
        if written is not None:            # None: ids too sparse for its index by id
            return written
    return byte_level_sections_python(tokens, ids, left, right, pad, end)


def byte_level_sections_python(tokens: Mapping[int, bytes], ids: Sequence[int], left: Sequence[int],
                               right: Sequence[int], pad: str, end: str) -> tuple[str, str]:
    """The specification of `byte_level_sections`: each token spelled and quoted once."""
    named = sorted({*ids, *left, *right})
    spelled = dict(zip(named, map(quote, tokens_to_unicode([tokens[i] for i in named]))))
    vocab = ("{\n" + ",\n".join([f"{pad}{spelled[i]}: {i}" for i in ids]) + end + "}" if ids else "{}")
    merges = ("[\n" + ",\n".join([f"{pad}[{spelled[a]}, {spelled[b]}]" for a, b in zip(left, right)]) + end + "]"
              if len(left) else "[]")
    return vocab, merges

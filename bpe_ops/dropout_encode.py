"""Encoding with BPE-dropout: each pre-token's merges replayed with skips drawn from the record's
stream (bpe_ops/dropout.py), in text order, so that the same seed and record id give the same ids.

There is no cache on this path (a piece's ids vary from draw to draw), and no whole-piece lookup
under `ignore_merges` (as Hugging Face's BPE with dropout). The replay of one pre-token is
`merging.merge_dropout_python`, or its compiled twin `PieceMerger.merge_dropout` (`merge_compiled`),
which takes the stream's state and hands back where it left it; byte mode gives the compiled merger
all of a text's pieces in one call. A worked example (merge 0 joins a and b, merge 1 ab and c):

>>> from functools import partial
>>> from bpe_ops.merging import merge_dropout_python
>>> replay = partial(merge_dropout_python, ranks={(97, 98): 0, (256, 99): 1}, merged=[256, 257])
>>> merge_one, symbols = (lambda ids, stream: replay(ids, stream=stream)), (lambda piece: list(piece.encode()))
>>> encode_pieces(["abc", "ab"], stream_of("byte", 0.5, 3, "doc-7"), symbols=symbols, merge_one=merge_one)
[256, 99, 97, 98]
>>> encode_pieces(["abc", "ab"], stream_of("byte", 1.0, 3, "doc-7"), symbols=symbols, merge_one=merge_one)
[97, 98, 99, 97, 98]
>>> stream_of("byte", 0.0, 3, "doc-7") is None          # p = 0: the deterministic encoding
True
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .dropout import DROPOUT_MODES, MASK, DropoutStream, check_dropout
from .pretokenize import to_utf8


def stream_of(mode: str, dropout: float | None, seed: int | None, record_id: str | int) -> DropoutStream | None:
    """The record's `DropoutStream`, or None for p = 0 (the deterministic encoding); ValueError for a
    seed without a dropout, or a mode with no dropout replay."""
    if dropout is None:
        raise ValueError("seed is the seed of BPE-dropout: pass dropout=p with it")
    if mode not in DROPOUT_MODES:
        raise ValueError(f"BPE-dropout supports byte-level and classic BPE, not {mode} mode")
    p = check_dropout(dropout)
    return DropoutStream(p, seed, record_id) if p else None


def encode_pieces(pieces: Sequence[str], stream: DropoutStream, *, symbols: Callable[[str], list[int]],
                  merge_one: Callable[[list[int], DropoutStream], list[int]], merger: Any = None,
                  byte_ids: list[int] | None = None) -> list[int]:
    """The ids of `pieces` in order, each piece's first `symbols` replayed by `merge_one(ids, stream)`;
    with a compiled `merger` and the `byte_ids` (byte mode), every piece in one compiled call."""
    if merger is not None and byte_ids is not None:
        out, stream.state = merger.merge_dropout_pieces(list(map(to_utf8, pieces)), byte_ids, stream.state,
                                                        min(stream.limit, MASK), stream.limit > MASK)
        return out
    out: list[int] = []
    for piece in pieces:
        out += merge_one(symbols(piece), stream)
    return out


def merge_compiled(merger: Any, ids: list[int], stream: DropoutStream) -> list[int]:
    """The compiled replay of one pre-token (`merging.merge_dropout_python`'s twin); the stream goes
    on from where the compiled replay left it."""
    ids, stream.state = merger.merge_dropout(ids, stream.state, min(stream.limit, MASK), stream.limit > MASK)
    return ids

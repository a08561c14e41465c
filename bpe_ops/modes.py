"""The three tokenizer modes and the options each one takes.

byte     byte-level BPE (GPT-2 and after): bytes are the first symbols, a regex or a Hugging Face
         pre-tokenizer chain splits;
classic  the textbook algorithm: whitespace-separated words, characters and an end-of-word `</w>`;
piece    SentencePiece-style BPE: characters first, with byte fallback and/or an unknown token.

`check_options` refuses what a mode does not take, before anything is built:

>>> check_options("byte", "gpt4", None, hf_components=False, piece_options=False)
>>> check_options("classic", "gpt4", None, hf_components=False, piece_options=False)
Traceback (most recent call last):
...
ValueError: classic mode needs a vocab: its alphabet is not implied by the merges
>>> model = piece_model_of({0: b"a", 1: b"b", 2: b"ab"}, [(b"a", b"b")], None, False, False)
>>> model.piece_ids
{'a': 0, 'b': 1, 'ab': 2}
"""
from __future__ import annotations

from typing import Any

from .pretokenize import resolve_pattern
from .sentencepiece_bpe import PieceModel

MODES = ("byte", "classic", "piece")


def check_options(mode: str, pattern: str, vocab: dict[int, bytes] | None, *, hf_components: bool,
                  piece_options: bool) -> None:
    """ValueError for options the mode does not take (`hf_components`: a normalizer, pre-tokenizer
    or added tokens; `piece_options`: a decoder, byte_fallback, unk_token or fuse_unk)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "classic" and resolve_pattern(pattern) not in (resolve_pattern("classic"), resolve_pattern("gpt4")):
        raise ValueError(f"classic mode always splits on whitespace; pattern {pattern!r} does not apply")
    if mode == "classic" and vocab is None:
        raise ValueError("classic mode needs a vocab: its alphabet is not implied by the merges")
    if mode == "classic" and hf_components:
        raise ValueError("classic mode takes no Hugging Face normalizer, pre-tokenizer or added tokens")
    if mode == "piece" and vocab is None:
        raise ValueError("piece mode needs a vocab of pieces")
    if mode != "piece" and piece_options:
        raise ValueError("decoder, byte_fallback, unk_token and fuse_unk are piece-mode options")


def piece_model_of(tokens: dict[int, bytes], merges: list[tuple[bytes, bytes]], unk_token: str | None,
                   byte_fallback: bool, fuse_unk: bool) -> PieceModel:
    """Piece mode's model of the vocab (pieces are their UTF-8) and merges."""
    pieces = {t.decode("utf-8", "surrogatepass"): i for i, t in tokens.items()}
    if unk_token is not None and unk_token not in pieces:
        raise ValueError(f"unk_token {unk_token!r} is not in the vocab")
    as_text = [(a.decode("utf-8", "surrogatepass"), b.decode("utf-8", "surrogatepass")) for a, b in merges]
    return PieceModel(pieces, as_text, byte_fallback=byte_fallback, unk_id=pieces.get(unk_token), fuse_unk=fuse_unk)


def sorted_keys(value: Any) -> Any:
    """A JSON value with every object's keys in sorted order (a file's components are kept so: they
    are part of the canonical file).

    >>> sorted_keys({"b": [{"d": 1, "c": 2}], "a": 0})
    {'a': 0, 'b': [{'c': 2, 'd': 1}]}
    """
    if isinstance(value, dict):
        return {k: sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(v) for v in value]
    return value

"""The compiled whole-text encoder of a tokenizer: split, cache and merge replay in one C call.

Where the split runs on PCRE2 (see `pretokenize.Pcre2Pattern`) and the merge replay is compiled
(`merging.piece_merger`), byte mode encodes every text PCRE2 may split with `bpe_ops._pcre2`'s
`TextEncoder` (a byte-keyed cache, the same replay); a pre-tokenizer chain runs there too where it is
all Splits PCRE2 may run (bpe_ops/sequence_split.py). Piece mode's encoder is
`sentencepiece_bpe.compiled_encoder` (bpe_ops/_spm.c), which takes pre-tokens. Classic mode, or
a tokenizer with none of these, has none: `build` gives None and the Tokenizer's Python path (the
specification) encodes. The Tokenizer builds it on first use (its tables cost 50 ms at 131k ids).

>>> from bpe_ops import Tokenizer
>>> from bpe_ops.implementation import Implementation
>>> build(Tokenizer([(b"a", b"b")], implementation=Implementation(compiled=False))) is None
True
>>> encoder = build(Tokenizer([(b"a", b"b")]))
>>> encoder is None or encoder.encode("abab") == [256, 256]
True
"""
from __future__ import annotations

from typing import Any

from . import sequence_split
from .pretokenize import Pcre2Pattern
from .sentencepiece_bpe import compiled_encoder as compiled_piece_encoder, text_space

try:
    from ._pcre2 import Fallback, TextEncoder   # optional: PCRE2 and C
except ImportError:
    Fallback = TextEncoder = None


def piece_text_space(tok: Any) -> str | None:
    """Piece mode: the Metaspace replacement the compiled encoder reads spaces as, so that its
    `encode_text` takes the whole text (see `sentencepiece_bpe.text_space`); else None."""
    if tok.mode != "piece":
        return None
    return text_space(tok._piece_model, tok._metaspace, ignore_merges=tok.ignore_merges)


def seeded_tokens(tok: Any) -> int:
    """How many whole tokens the compiled encoder of `tok` puts into its piece cache before any text
    (where merges are ignored, a piece that is a token is found by the lookup every piece makes):
    its cache holds them beside `cache_size` merged pieces."""
    return len(tok._token_ids) if tok.mode == "byte" and tok.ignore_merges else 0


def cache_size_for(tok: Any, entries: int) -> int:
    """The `cache_size` (merged pieces) at which the compiled encoder's cache holds `entries` entries
    in all, the whole tokens it seeds counted: what sizes its table (and each thread's memory).

    >>> from bpe_ops import Tokenizer
    >>> cache_size_for(Tokenizer([(b"a", b"b")]), 1000)
    1000
    """
    return max(entries - seeded_tokens(tok), 1)


def build(tok: Any) -> Any:
    """The compiled whole-text encoder of `tok`, or None: classic mode, the split not on PCRE2, no
    compiled merger (see `merging.piece_merger`)."""
    if tok.mode == "piece" and tok._merger is not None:
        return compiled_piece_encoder(tok._piece_model, tok._left, tok._right, tok._merged,
                                      ignore_merges=tok.ignore_merges, cache_size=tok.cache_size,
                                      space=piece_text_space(tok))
    if tok.mode != "byte" or tok._merger is None or not isinstance(tok._regex, Pcre2Pattern):
        return None
    # One split: the pattern's own guard, so that the encoder can judge every text itself (its
    # `encode_texts_bytes`); a Sequence: its steps and their guard.
    steps = (sequence_split.encoder_steps(tok.pre_tokenizer_spec, tok._regex.cache_dir)
             if tok._pre_tokenize is not None else {"guard": tok._regex.guard_bits})
    if steps is None:
        return None
    return TextEncoder(tok._regex.compiled, tok._left, tok._right, tok._merged, tok._byte_ids,
                       tok._token_ids if tok.ignore_merges else None, tok.cache_size, **steps)

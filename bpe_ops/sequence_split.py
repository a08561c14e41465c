"""The compiled encoder's reading of a `Sequence` of Split pre-tokenizers (Qwen-style files: digits,
CJK runs and a word regex split in turn before `ByteLevel(use_regex=false)`).

`hf_components` is the specification; `_pcre2.TextEncoder(steps=...)` runs the same steps in C. Each
step's pattern must run on PCRE2 (`pretokenize.Pcre2Pattern`); the characters any of them would
split differently from `regex` form one guard, and a text holding one takes the Python path.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import chain

import regex

from . import hf_components
from .pretokenize import Pcre2Pattern, _code_point_bits


def encoder_steps(pre_tokenizer: dict, cache_dir: str | None = None) -> dict | None:
    """`TextEncoder`'s `steps` and `guard` for a tokenizer.json `pre_tokenizer`, or None where the
    compiled encoder cannot run it: a step that is not a Split (see `hf_components.split_steps`), a
    behavior C does not know, or a pattern PCRE2 may not run."""
    steps = hf_components.split_steps(pre_tokenizer)
    if not steps or any(behavior not in hf_components.BEHAVIORS for _, behavior, _ in steps):
        return None
    patterns = [_pcre2_pattern(text, cache_dir) for text, _, _ in steps]
    if None in patterns:
        return None
    guard = list(chain.from_iterable(p.guard for p in patterns))
    return {"steps": [(p.compiled, behavior, invert) for p, (_, behavior, invert) in zip(patterns, steps)],
            "guard": _code_point_bits(guard) if guard else None}


@lru_cache(maxsize=64)
def _pcre2_pattern(text: str, cache_dir: str | None) -> Pcre2Pattern | None:
    return Pcre2Pattern.build(regex.compile(text), cache_dir)

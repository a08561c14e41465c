"""The compiled encoder's reading of a `Sequence` of Split pre-tokenizers (Qwen-style files: digits,
CJK runs and a word regex split in turn before `ByteLevel(use_regex=false)`).

`hf_components` is the specification; `_pcre2.TextEncoder(steps=...)` runs the same steps in C. Each
step's pattern must run on PCRE2 (`pretokenize.Pcre2Pattern`); the characters any of them would
split differently from `regex` form one guard, and a text holding one takes the Python path. Where a
step's pattern is one character class repeated, or DeepSeek's word regex, C splits by tables read
from PCRE2 instead of running it at every match (`step_reading`): the same pieces, which the tests
compare on every code point (`_pcre2.sequence_pieces`).
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
    return {"steps": [(p.compiled, behavior, invert, step_reading(text))
                      for p, (text, behavior, invert) in zip(patterns, steps)],
            "guard": _code_point_bits(guard) if guard else None}


# DeepSeek's word regex (V2, V3, R1: the last Split of their Sequence), as `hf_components` reads it.
DEEPSEEK_WORDS = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                  "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")


def step_reading(pattern: str) -> tuple | None:
    """How the compiled encoder may split by `pattern` without running PCRE2 at every match:
    `("run", class, lo, hi)` for one character class repeated (`class_run`), `("deepseek",)` for
    DeepSeek's word regex (`_split_words.h`), None for PCRE2 alone. Each gives PCRE2's pieces."""
    if pattern == DEEPSEEK_WORDS:
        return ("deepseek",)
    run = class_run(pattern)
    return ("run", *run) if run else None


# One character class as the portable syntax spells it (see `pretokenize._PORTABLE_SYNTAX`): a set,
# a Unicode class, an escape or a plain character; then a greedy count of at least one.
_CLASS_RUN = regex.compile(
    r"(?P<atom>\[\^?(?!(?P<posix>[:.=])[^\]]*(?P=posix)\])(?:\\[pP]\{\w+\}|\\[sSrnt]|\\[^\w\s]|[^\\\[\]])+\]"
    r"|\\[pP]\{\w+\}|\\[sSrnt]|\\[^\w\s]|[^\\\[\](){}|*+?.^$])"
    r"(?:(?P<plus>\+)|\{(?P<lo>[0-9]{1,5})(?:(?P<comma>,)(?P<hi>[0-9]{0,5}))?\})?")


def class_run(pattern: str) -> tuple[str, int, int] | None:
    r"""`(class, lo, hi)` where `pattern` is one character class repeated lo to hi times, greedy (hi 0:
    no bound), else None. The compiled step then finds the class's runs from a table of the code
    points PCRE2 puts in it (made once per process) instead of running PCRE2 on every piece: a class
    that does not occur in a piece costs a scan of its bytes, eight ASCII bytes at a time where the
    class holds no ASCII character.

    >>> class_run(r"\p{N}{1,3}"), class_run("[一-龥]+"), class_run(r"\s"), class_run(r"\s+(?!\S)")
    (('\\p{N}', 1, 3), ('[一-龥]', 1, 0), ('\\s', 1, 1), None)
    """
    m = _CLASS_RUN.fullmatch(pattern)
    if m is None:
        return None
    if m["plus"]:
        return m["atom"], 1, 0
    if m["lo"] is None:
        return m["atom"], 1, 1
    lo = int(m["lo"])
    hi = lo if m["comma"] is None else int(m["hi"]) if m["hi"] else 0
    if lo < 1 or (hi and hi < lo):
        return None
    return m["atom"], lo, hi


@lru_cache(maxsize=64)
def _pcre2_pattern(text: str, cache_dir: str | None) -> Pcre2Pattern | None:
    return Pcre2Pattern.build(regex.compile(text), cache_dir)

"""What training does to text before counting it: Unicode normalization, lowercasing, digit splitting.

Each option is written as the Hugging Face component that does the same when encoding, so one
description serves the pre-token counter (training), our encoder and Hugging Face `tokenizers`
loading the tokenizer.json, and they cannot drift apart:

  - `normalize` (NFC, NFKC, NFD, NFKD) and `lowercase` become the `normalizer`: `{"type": "NFKC"}`,
    `{"type": "Lowercase"}`, or a Sequence of both (normalized first, then lowercased);
  - `split_digits` (every digit, `\\p{N}`, a pre-token of its own) or `digit_group` K (a run of digits
    cut into pre-tokens of K digits from the left, the last one shorter) change the split. Each named
    pattern has one alternative that matches digits (gpt2: ` ?\\p{N}+`, gpt4 and o200k: `\\p{N}{1,3}`);
    the rule replaces it, which keeps one Split regex: tiktoken can run it and so can the compiled
    encoder. Any other regex keeps its own pieces and gets a second step, `Split(\\p{N}{1,K})`, that
    cuts each piece further: a pre-tokenizer Sequence, which no single tiktoken pattern reproduces.

>>> rules = text_rules("gpt4", normalize="NFKC", split_digits=True)
>>> rules.normalizer, r"|\\p{N}|" in rules.pattern, rules.pre_tokenizer
({'type': 'NFKC'}, True, None)
>>> text_rules(r"\\S+|\\s+", digit_group=3).pre_tokenizer["pretokenizers"][1]["pattern"]
{'Regex': '\\\\p{N}{1,3}'}
"""
from __future__ import annotations

from dataclasses import dataclass

from .pretokenize import pattern_name, resolve_pattern
from .regex_dialect import to_oniguruma

NORMAL_FORMS = ("NFC", "NFD", "NFKC", "NFKD")
# The one alternative of each named pattern that matches digits (with its `|` on both sides).
_DIGIT_ALTERNATIVE = {"gpt2": r"| ?\p{N}+|", "gpt4": r"|\p{N}{1,3}|", "o200k": r"|\p{N}{1,3}|"}


@dataclass(frozen=True)
class TextRules:
    """How text is split and normalized: the split pattern (a name or a regex, as `Tokenizer` takes
    it), and the tokenizer.json normalizer and pre-tokenizer (None: none, or the single Split of
    `pattern`)."""
    pattern: str
    normalizer: dict | None = None
    pre_tokenizer: dict | None = None


def digit_regex(group: int) -> str:
    """The regex of one digit pre-token: `\\p{N}`, or up to `group` digits."""
    return r"\p{N}" if group == 1 else r"\p{N}{1,%d}" % group


def text_rules(pattern: str = "gpt4", *, normalize: str | None = None, lowercase: bool = False,
               split_digits: bool = False, digit_group: int | None = None) -> TextRules:
    """The rules of these options (see the module docstring); ValueError for contradictory or
    impossible ones. `pattern` is a name or a regex."""
    if split_digits and digit_group is not None:
        raise ValueError("split_digits and digit_group exclude each other (split_digits is digit_group=1)")
    if digit_group is not None and (isinstance(digit_group, bool) or not isinstance(digit_group, int)
                                    or digit_group < 1):
        raise ValueError(f"digit_group must be an integer of at least 1, not {digit_group!r}")
    if normalize is not None and normalize not in NORMAL_FORMS:
        raise ValueError(f"normalize must be one of {', '.join(NORMAL_FORMS)}, not {normalize!r}")
    regex = resolve_pattern(pattern)
    name = pattern_name(regex)
    group = 1 if split_digits else digit_group
    if name == "classic" and (normalize or lowercase or group):
        raise ValueError("classic mode takes no normalization or digit rule (it has no tokenizer.json to record "
                         "them in)")
    steps = [{"type": normalize}] if normalize else []
    if lowercase:
        steps.append({"type": "Lowercase"})
    normalizer = steps[0] if len(steps) == 1 else {"type": "Sequence", "normalizers": steps} if steps else None
    if group is None:
        return TextRules(pattern, normalizer)
    if name in _DIGIT_ALTERNATIVE:
        return TextRules(regex.replace(_DIGIT_ALTERNATIVE[name], f"|{digit_regex(group)}|"), normalizer)
    pre_tokenizer = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": to_oniguruma(regex)}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": digit_regex(group)}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ]}
    return TextRules(pattern, normalizer, pre_tokenizer)

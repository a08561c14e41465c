"""Pre-tokenization: split text into the pieces that BPE merges never cross.

Named patterns follow the peers exactly (tiktoken's `gpt2`, `cl100k` as `gpt4`, `o200k`), so that a
tokenizer.json recording the pattern encodes identically in Hugging Face `tokenizers` and tiktoken.
`classic` is the textbook setting: whitespace-separated words whose symbols are characters, with an
end-of-word marker `</w>` appended to every word.

Special tokens split the text *before* the pattern applies, so no pre-token ever spans one.
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache
from typing import Iterable, Iterator, Sequence

import regex

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# tiktoken's cl100k_base pattern as it ships today (with `\s++$`), spelled `\p{N}{1,3}` where tiktoken
# writes `\p{N}{1,3}+`: the same matches in Python's `regex` and Rust (the `+` is possessive there and,
# ending its alternative, changes nothing), but Hugging Face's Oniguruma reads `{1,3}+` as "one or more
# runs of 1-3 digits", so the tiktoken spelling splits every long number differently once loaded there.
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
CLASSIC_PATTERN = r"""\S+"""
END_OF_WORD = "</w>"

PATTERNS = {
    "gpt2": GPT2_PATTERN,
    "gpt4": GPT4_PATTERN,
    "o200k": O200K_PATTERN,
    "classic": CLASSIC_PATTERN,
}


def resolve_pattern(pattern: str) -> str:
    """A pattern name (`gpt2`, `gpt4`, `o200k`, `classic`) -> its regex; any other string is a regex."""
    return PATTERNS.get(pattern, pattern)


def pattern_name(regex_str: str) -> str | None:
    """The name of a known pattern regex, or None."""
    for name, pat in PATTERNS.items():
        if pat == regex_str:
            return name
    return None


@lru_cache(maxsize=64)
def compile_pattern(pattern: str) -> "regex.Pattern[str]":
    """Compile a named pattern or a raw regex (cached; the `regex` package, for `\\p{L}`)."""
    try:
        return regex.compile(resolve_pattern(pattern))
    except regex.error as exc:
        raise ValueError(f"invalid split pattern {pattern!r}: {exc}") from None


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table used by byte-level tokenizer files.

    Printable bytes (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) map to themselves; the other 68 bytes map to
    U+0100 upwards in byte order (so the space byte becomes `Ġ`).
    """
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    """Inverse of `bytes_to_unicode`."""
    return {c: b for b, c in bytes_to_unicode().items()}


def token_to_unicode(token: bytes) -> str:
    """Token bytes -> their GPT-2 alphabet spelling (as in vocab.json / tokenizer.json)."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in token)


def unicode_to_token(text: str) -> bytes:
    """GPT-2 alphabet spelling -> token bytes; KeyError names a character outside the alphabet."""
    table = unicode_to_bytes()
    return bytes(table[c] for c in text)


@lru_cache(maxsize=64)
def _special_regex(special_tokens: tuple[str, ...]) -> "regex.Pattern[str] | None":
    if not special_tokens:
        return None
    # Longest first, so a special token that contains another one wins.
    alternatives = sorted(set(special_tokens), key=lambda s: (-len(s), s))
    return regex.compile("(" + "|".join(regex.escape(s) for s in alternatives) + ")")


def split_on_special(text: str, special_tokens: Sequence[str]) -> Iterator[tuple[str, bool]]:
    """Yield `(segment, is_special)` in order; special segments are exactly a listed token."""
    pat = _special_regex(tuple(special_tokens))
    if pat is None:
        if text:
            yield text, False
        return
    pos = 0
    for m in pat.finditer(text):
        if m.start() > pos:
            yield text[pos:m.start()], False
        yield m.group(0), True
        pos = m.end()
    if pos < len(text):
        yield text[pos:], False


def pretokenize(text: str, pattern: str = "gpt4", special_tokens: Sequence[str] = ()) -> list[str]:
    """The pre-tokens of `text` as strings, special tokens removed (the training view).

    Special tokens split the text first; the pattern then applies to each piece between them.
    """
    findall = compile_pattern(pattern).findall
    if not special_tokens:
        return findall(text)
    out: list[str] = []
    for segment, is_special in split_on_special(text, special_tokens):
        if not is_special:
            out.extend(findall(segment))
    return out


def count_pretokens(texts: Iterable[str], pattern: str = "gpt4",
                    special_tokens: Sequence[str] = (), counter: Counter | None = None) -> Counter:
    """Count the pre-tokens of `texts` as `{pretoken UTF-8 bytes: count}` (the trainer's input).

    Counting happens on strings (cheap) and is converted to bytes once at the end. Lone surrogates
    cannot be encoded to UTF-8; they are replaced with U+FFFD, as the pipelines do on decode.
    """
    findall = compile_pattern(pattern).findall
    by_str: Counter = Counter()
    for text in texts:
        if special_tokens:
            for segment, is_special in split_on_special(text, special_tokens):
                if not is_special:
                    by_str.update(findall(segment))
        else:
            by_str.update(findall(text))
    out = counter if counter is not None else Counter()
    for piece, n in by_str.items():
        out[to_utf8(piece)] += n
    return out


_SURROGATE = regex.compile("[\ud800-\udfff]")


def to_utf8(s: str) -> bytes:
    """UTF-8 bytes of `s`; a lone surrogate (not encodable) becomes U+FFFD, one per surrogate."""
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", s).encode("utf-8")

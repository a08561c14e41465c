"""Pre-tokenization: split text into the pieces that BPE merges never cross.

Named patterns follow the peers exactly (tiktoken's `gpt2`, `cl100k` as `gpt4`, `o200k`), so that a
tokenizer.json recording the pattern encodes identically in Hugging Face `tokenizers` and tiktoken.
`classic` is the textbook setting: whitespace-separated words whose symbols are characters, with an
end-of-word marker `</w>` appended to every word.

Special tokens split the text *before* the pattern applies, so no pre-token ever spans one.

Splitting is the ceiling of encoding and counting, and the `regex` package splits at 4-6 MB/s. Where
the compiled module `bpe_ops._pcre2` is built and the system's PCRE2 library (libpcre2-8) is
installed, PCRE2 with its JIT splits the named patterns 3-4x faster, with the same pieces: it runs
only patterns written in the syntax both engines read alike and only texts free of the characters
their Unicode tables classify differently (see `Pcre2Pattern`); everything else stays on `regex`.
The patterns of `SCANNED_PATTERNS` (those of GPT-2, cl100k / Llama 3, Qwen2 and o200k) are split by
a hand-written scanner in C (`_split_scan.h`) that leaves PCRE2 only the pieces it cannot decide, with
PCRE2's pieces: about twice as fast again.
`Implementation(engine="regex")` (bpe_ops/implementation.py) turns PCRE2 off.
"""
from __future__ import annotations

import codecs
import hashlib
import json
import os
import tempfile
import zlib
from array import array
from collections import Counter
from functools import lru_cache
from itertools import accumulate, chain
from typing import Iterable, Iterator, Mapping, Sequence

import regex

from . import hf_components
from .count_table import pack_counts
from .patterns import (CLASSIC_PATTERN, GPT2_PATTERN, GPT4_PATTERN, HF_GPT2_PATTERN, LLAMA3_PATTERN,  # noqa: F401
                       O200K_PATTERN, PATTERN_ALIASES, PATTERNS, QWEN2_PATTERN, TIKTOKEN_CL100K_PATTERN,
                       TIKTOKEN_R50K_PATTERN)
from .implementation import DEFAULT, ENGINE_VARIABLE, ENGINES as ENGINE_CHOICES, Implementation  # noqa: F401

try:
    from . import _native        # compiled count sums (optional; needs no PCRE2)
except ImportError:
    _native = None

# Patterns that `_split_scan.h` splits by hand, PCRE2 taking only the pieces it cannot decide (a
# contraction, a character beyond the BMP): (family, longest digit run or 0, `\s+$` first). The same
# pieces as PCRE2 (tests/bpe_ops/test_split_scan.py), several times faster: the split was a third of encoding.
SCANNED_PATTERNS = {
    GPT2_PATTERN: ("gpt2", 0, False),
    HF_GPT2_PATTERN: ("gpt2", 0, False),
    GPT4_PATTERN: ("cl100k", 3, True),
    LLAMA3_PATTERN: ("cl100k", 3, False),
    QWEN2_PATTERN: ("cl100k", 1, False),
    O200K_PATTERN: ("o200k", 3, False),
    TIKTOKEN_CL100K_PATTERN: ("cl100k", 3, True),
    TIKTOKEN_R50K_PATTERN: ("gpt2", 0, False),
}
END_OF_WORD = "</w>"

# SuperBPE's phase two (see `superword_pattern`): at most this many pre-tokens per unit by default.
SUPERWORD_MAX_WORDS = 4


# A pattern spelled like a name (letters, digits, `_`, `-`) is taken for a misspelt name, not a regex.
_NAME_LIKE = regex.compile(r"[A-Za-z0-9_-]+")


def resolve_pattern(pattern: str) -> str:
    """A pattern name (`gpt2`, `gpt4`, `o200k`, `classic`, in any case) -> its regex; any other string
    is a regex, except a bare word, which is taken for a misspelt name:

    >>> resolve_pattern("GPT2") == GPT2_PATTERN and resolve_pattern(r"\\S+") == r"\\S+"
    True
    >>> resolve_pattern("gpt5")
    Traceback (most recent call last):
    ValueError: unknown pattern name 'gpt5': known names are gpt2, gpt4, o200k, classic
    """
    named = PATTERNS.get(PATTERN_ALIASES.get(pattern.lower(), pattern.lower()))
    if named is not None:
        return named
    if _NAME_LIKE.fullmatch(pattern):
        raise ValueError(f"unknown pattern name {pattern!r}: known names are {', '.join(PATTERNS)}")
    return pattern


def pattern_name(regex_str: str) -> str | None:
    """The name of a known pattern regex, or None."""
    for name, pat in PATTERNS.items():
        if pat == regex_str:
            return name
    return None


def superword_pattern(pattern: str = "gpt4", max_words: int = SUPERWORD_MAX_WORDS) -> str:
    r"""The split regex of SuperBPE's phase two (superword units) built on `pattern` (a name or a regex):
    runs of up to `max_words` consecutive pre-tokens of `pattern`, joined only where a single space
    stands between two non-space characters (the space starts the next pre-token). So a unit never
    holds a newline or a run of spaces that its pre-tokens did not, and BPE merges inside a unit may
    bridge words.

    Each step is one pre-token exactly as `pattern` finds it (an atomic group: never another way of
    matching it), so the units are unions of the pre-tokens, the same in every engine that reads the
    syntax (`regex`, PCRE2, Hugging Face's Oniguruma, tiktoken's fancy-regex):

    >>> regex.findall(superword_pattern("gpt4", 3), "Hello, world. The end of it.\n the  cat")
    ['Hello', ', world', '. The end', ' of it', '.\n', ' the', ' ', ' cat']
    """
    if not isinstance(max_words, int) or max_words < 2:
        raise ValueError(f"superword units join at least 2 pre-tokens, not {max_words!r}")
    base = resolve_pattern(pattern)
    if base == CLASSIC_PATTERN:
        raise ValueError("classic mode drops whitespace, so it has no superword units")
    return rf"(?>{base})(?:(?<=\S)(?= \S)(?>{base})(?<=\S)){{0,{max_words - 1}}}"


def compile_pattern(pattern: str, implementation: Implementation = DEFAULT) -> "regex.Pattern[str] | Pcre2Pattern":
    """Compile a named pattern or a raw regex (cached) into an object with `findall`, `finditer`,
    `groups` and `pattern`: a `Pcre2Pattern` where `implementation.engine` is "auto", PCRE2 is
    installed and it splits identically, else the `regex` package's compiled pattern (`regex`, not
    `re`, for `\\p{L}`)."""
    return _compile(resolve_pattern(pattern), implementation.engine == "auto", implementation.cache_dir)


def regex_engine(pattern: str = "gpt4", implementation: Implementation = DEFAULT) -> str:
    """The engine that splits with `pattern` in this process: `"pcre2"` or `"regex"`."""
    return "pcre2" if isinstance(compile_pattern(pattern, implementation), Pcre2Pattern) else "regex"


# Short texts of every kind a corpus holds, each probing one thing a split pattern might skip.
COVERAGE_PROBES = (
    "a b",
    "Hello, world! It's 3:45pm; (ok?) [x] {y} <z> @#$%^&*_+=|\\/~`\"'",
    "0123456789 3.14 1,000,000 -42",
    "tab\there  two  spaces \n\nnewlines\r\nCRLF\rCR \x0b\x0c trailing   ",
    "no-break\u00a0space, ideographic\u3000space, line\u2028separator",
    "Ça va? Déjà vu, naïve café, Œuvre, Łódź, straße",
    "Привет, мир! Ёжик",
    "Καλημέρα κόσμε; ΑΒΓ",
    "你好，世界。日本語のテキスト、한국어",
    "مرحبا بالعالم ١٢٣",
    "नमस्ते दुनिया ०१२",
    "👍🏽 👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈 ❤\ufe0f",
    "e\u0301 a\u0308\u0304 \u0301 Z\u0351\u0362",
    "zero\u200bwidth \ufeffBOM soft\u00adhyphen \x00\x1f\x7f",
)


def pattern_coverage_gap(pattern: str) -> str | None:
    """None when `pattern` (a name or a regex) matches every character of `COVERAGE_PROBES`, else one
    line naming the first text it leaves unmatched: training counts only what the pattern matches,
    so such a pattern would learn nothing of that text. Matched with `regex` (the specification).
    `classic` leaves whitespace unmatched by design.

    >>> pattern_coverage_gap("gpt4") is None
    True
    >>> pattern_coverage_gap(r"\\p{L}+")
    "the pattern leaves ' ' unmatched in 'a b'"
    """
    compiled = _compile(resolve_pattern(pattern), False, None)
    for probe in COVERAGE_PROBES:
        pos = 0
        for m in compiled.finditer(probe):
            if m.start() > pos:
                return f"the pattern leaves {probe[pos:m.start()]!r} unmatched in {probe!r}"
            pos = max(pos, m.end())
        if pos < len(probe):
            return f"the pattern leaves {probe[pos:]!r} unmatched in {probe!r}"
    return None


@lru_cache(maxsize=64)
def _compile(regex_str: str, accelerate: bool, cache_dir: str | None) -> "regex.Pattern[str] | Pcre2Pattern":
    try:
        compiled = regex.compile(regex_str)
    except regex.error as exc:
        raise ValueError(f"invalid split pattern {regex_str!r}: {exc}") from None
    return (accelerate and Pcre2Pattern.build(compiled, cache_dir)) or compiled


# ---- the optional PCRE2 accelerator -------------------------------------------------------------

# Syntax that PCRE2 (UTF and UCP modes, LF newlines) and `regex` read alike. Left out on purpose:
# `\w` `\d` `\b` (defined differently), `\Z` (PCRE2 allows a final newline), `{,n}` (a literal in
# PCRE2 10.42), POSIX classes, `(?i)` outside a group of plain words, escapes like `\x41`. Lookbehind
# is in: both engines look at the subject's characters before the match, and one PCRE2 cannot compile
# (a lookbehind of variable length) stays on `regex`.
_PORTABLE_SYNTAX = regex.compile(r"""(?:
      \[\^?(?!([:.=])[^\]]*\1\])                # a whole set, not a POSIX class ([:x:], [.x.], [=x=]) ...
        (?:\\[pP]\{\w+\}|\\[sSrnt]|\\[^\w\s]|[^\\\[\]])+\]   # ... where `{}()|*+?$.` are literals
    | \\[pP]\{\w+\} | \\[sS]                # Unicode classes: their tables are compared below
    | \(\?i:[A-Za-z'|\[\]]*\)                  # case-insensitive plain words: letters compared below
    | \\[rnt] | \\[^\w\s]                       # controls, escaped punctuation
    | \((?![*?]) | \(\?(?:[:=!>]|<[=!]) | [)|]  # groups (atomic too), lookaround, alternation
    | [*+?][+?]? | \{\d+(?:,\d*)?\}[+?]?        # quantifiers: greedy, lazy or possessive
    | \[\^?(?![:.=]) | \]                       # sets, without POSIX classes
    | [$^.-]                                   # anchors (LF newlines in both), any character, ranges
    | [^\\()\[\]{}|*+?$^.-]                     # literal characters
)*""", regex.VERBOSE)
_CLASS_ESCAPE = regex.compile(r"\\[pP](\{\w+\})|\\[sS]")
_CASELESS_GROUP = regex.compile(r"\(\?i:([^)]*)\)")
# The classes of the two engines differ where their Unicode tables do (PCRE2 10.42 lacks the ~15,000
# characters Unicode assigned after version 14; `regex` 2026 has them) and on a few old choices
# (U+180E is `\s` in PCRE2 only). Per class: the (first, last) ranges of the disagreement.
_DISAGREEMENT: dict[str, tuple[tuple[str, str], ...]] = {}
_FLIP = bytes([1, 0]) + bytes(254)    # translate table: 0 <-> 1
_DISAGREEMENT_FORMAT = 1              # in the cache key: raise it when `_compute_disagreement` changes


class Pcre2Pattern:
    """A split pattern that PCRE2 runs wherever it gives the same pieces as `regex`, else `regex`.

    Built only for patterns in the portable syntax above, without capturing groups (which change
    what `findall` returns). Both engines classify characters with their own Unicode tables, so the
    classes the pattern uses (`\\p{..}`, `\\s`, the letters of its case-insensitive words) are
    compared on every code point once per process; a text holding a character they disagree on (its
    `guard`), a lone surrogate (PCRE2 takes UTF-8 only), an empty match or a PCRE2 match limit is
    split by `regex`. ASCII texts skip the guard: a pattern whose classes disagree on an ASCII
    character is not accelerated at all. `compiled` is the `bpe_ops._pcre2.Pattern`, which the
    encoder and the pre-token counter run directly.
    """

    __slots__ = ("pattern", "groups", "guard", "guard_bits", "compiled", "cache_dir", "_regex", "_guard_search")

    def __init__(self, compiled: "regex.Pattern[str]", pcre_pattern, guard: Sequence[tuple[str, str]],
                 cache_dir: str | None = None):
        self.pattern = compiled.pattern
        self.cache_dir = cache_dir
        self.groups = compiled.groups
        self.guard = tuple(guard)            # (first, last) character ranges
        self.compiled = pcre_pattern
        self._regex = compiled
        # The guard as a bitmap (bit c for code point c), for the compiled encoder's own check (a
        # lone surrogate it checks by itself); None where no code point is guarded.
        self.guard_bits = _code_point_bits(self.guard) if self.guard else None
        if _native is not None:
            # A bitmap lookup per character: PCRE2's search for the same class slowed every script
            # whose UTF-8 lead byte a guard character shares (Devanagari text 60 MB/s, others 650).
            bits = _code_point_bits(self.guard + (("\ud800", "\udfff"),))   # lone surrogates: not UTF-8
            self._guard_search = lambda text: _native.has_code_point_in(text, bits)
        else:
            # A guard that never matches still encodes the text, so a lone surrogate is still caught.
            ranges = "".join(f"\\x{{{ord(a):x}}}-\\x{{{ord(b):x}}}" for a, b in guard)
            self._guard_search = _pcre2_compile(f"[{ranges}]" if ranges else "(?!)").search

    @classmethod
    def build(cls, compiled: "regex.Pattern[str]", cache_dir: str | None = None) -> "Pcre2Pattern | None":
        """The accelerated pattern, or None: no PCRE2, syntax not portable, capturing groups, PCRE2
        refusing the pattern, or the engines disagreeing on an ASCII character. `cache_dir` keeps
        the engines' disagreement on disk (see `_cached_disagreement`)."""
        pcre2 = _pcre2_module()
        if pcre2 is None or compiled.groups or not _PORTABLE_SYNTAX.fullmatch(compiled.pattern):
            return None
        try:
            pcre_pattern = _pcre2_compile(compiled.pattern)
        except pcre2.Pcre2Error:
            return None
        guard = _disagreement(_compared_classes(compiled.pattern), cache_dir)
        if guard and guard[0][0] < "\x80":
            return None
        return cls(compiled, pcre_pattern, guard, cache_dir)

    def pcre2_splits(self, text: str) -> bool:
        """Whether PCRE2 may split `text`: no character the engines classify differently, no lone
        surrogate (PCRE2 takes UTF-8 only)."""
        if text.isascii():
            return True
        try:
            return not self._guard_search(text)
        except _pcre2_module().Fallback:
            return False

    def findall(self, text: str) -> list:
        if self.pcre2_splits(text):
            try:
                return self.compiled.findall(text)
            except _pcre2_module().Fallback:     # an empty match or a PCRE2 limit; `regex` has none
                pass
        return self._regex.findall(text)

    def finditer(self, text: str) -> Iterable:
        """`regex`'s match objects (character offsets): only the slow paths need them."""
        return self._regex.finditer(text)

    def __reduce__(self):
        # Pickled (with a Tokenizer, say) as its regex: compiled again, guard included, on unpickling.
        return _compile, (self.pattern, True, self.cache_dir)

    def __repr__(self) -> str:
        return f"Pcre2Pattern({self.pattern!r})"


@lru_cache(maxsize=1)
def _pcre2_module():
    """The compiled `bpe_ops._pcre2` module, or None when it is not built or libpcre2-8 is missing
    (it is optional)."""
    try:
        from . import _pcre2
    except ImportError:
        return None
    return _pcre2


def _code_point_bits(ranges: Iterable[tuple[str, str]]) -> bytes:
    """The map of the code points in `ranges` ((first, last) characters) for
    `_native.has_code_point_in`: bit c (byte c >> 3, bit c & 7) is set for each code point c.

    >>> _code_point_bits([("\\x00", "\\x02"), ("\\x09", "\\x09")])[:2]
    b'\\x07\\x02'
    """
    bits = 0
    for first, last in ranges:
        bits |= ((1 << (ord(last) - ord(first) + 1)) - 1) << ord(first)
    return bits.to_bytes(0x110000 // 8, "little")


def _pcre2_compile(pattern: str):
    """PCRE2 in UTF mode with Unicode properties for `\\s` and friends (UCP), JIT-compiled, with LF
    as the only newline (a build may default to another), so `$` and `.` mean what they mean in
    `regex`; with the hand-written splitter where the pattern is one of `SCANNED_PATTERNS`."""
    return _pcre2_module().Pattern("(*LF)" + pattern, SCANNED_PATTERNS.get(pattern))


def _compared_classes(pattern: str) -> tuple[str, ...]:
    """The character classes whose Unicode tables decide how `pattern` splits, in a spelling both
    engines read: `\\p{X}` and `\\s` (a complement disagrees exactly where its class does) and
    `(?i:x)` for each letter of a case-insensitive group."""
    classes = {r"\p" + m.group(1) if m.group(1) else r"\s" for m in _CLASS_ESCAPE.finditer(pattern)}
    letters = {c.lower() for words in _CASELESS_GROUP.findall(pattern) for c in words if c.isalpha()}
    return tuple(sorted(classes | {f"(?i:{c})" for c in letters}))


def _disagreement(classes: Sequence[str], cache_dir: str | None = None) -> list[tuple[str, str]]:
    """Sorted `(first, last)` character ranges that one engine puts in one of `classes` and the
    other does not (computed once per process; with a `cache_dir`, once per machine and library
    versions, see `_cached_disagreement`)."""
    for cls in classes:
        if cls not in _DISAGREEMENT:
            _DISAGREEMENT[cls] = _cached_disagreement(cls, cache_dir) if cache_dir else _compute_disagreement(cls)
    _every_code_point.cache_clear()          # 4 MB kept only while the classes are compared
    return sorted(set(chain.from_iterable(_DISAGREEMENT[c] for c in classes)))


@lru_cache(maxsize=1)
def _every_code_point() -> str:
    """Every code point in order but the surrogates, which PCRE2 cannot take (a text holding one
    goes to `regex`): made once for all the classes `_disagreement` compares (making it costs as much
    as comparing one class)."""
    return array("I", chain(range(0xD800), range(0xE000, 0x110000))).tobytes().decode("utf-32-le")


def _compute_disagreement(cls: str) -> tuple[tuple[str, str], ...]:
    """The ranges of one class, computed: both engines run over every code point."""
    # A run of matched characters sits at the index of its first character.
    every = _every_code_point()
    marks = bytearray(len(every))        # 1 where exactly one engine matched
    for findall in (regex.compile(cls + "+").findall, _pcre2_compile(cls + "+").findall):
        for run in findall(every):
            i = ord(run[0]) - (0x800 if run[0] >= "\ue000" else 0)
            marks[i:i + len(run)] = marks[i:i + len(run)].translate(_FLIP)
    return tuple((every[i], every[j - 1]) for i, j in _runs_of_ones(marks))


def _cached_disagreement(cls: str, folder: str) -> tuple[tuple[str, str], ...]:
    """`_compute_disagreement`, kept on disk in `folder` under the versions that decide it: the
    `regex` package's, and PCRE2's own with its Unicode tables'. A file that is missing, unreadable
    or for other versions is computed again; a cache that cannot be written is only slower."""
    key = json.dumps([_DISAGREEMENT_FORMAT, cls, regex.__version__, *_pcre2_module().library_version()])
    path = os.path.join(folder, f"pcre2-disagreement-{hashlib.sha256(key.encode()).hexdigest()[:24]}.json")
    try:
        with open(path, encoding="utf-8") as f:
            cached = json.load(f)
        if cached["key"] == key:
            return tuple((chr(a), chr(b)) for a, b in cached["ranges"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    ranges = _compute_disagreement(cls)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".pcre2-disagreement-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": key, "ranges": [[ord(a), ord(b)] for a, b in ranges]}, f)
        os.replace(tmp, path)            # whole or not at all, whoever else writes it meanwhile
    except OSError:
        pass
    return ranges


def _runs_of_ones(marks: bytearray) -> Iterator[tuple[int, int]]:
    """`(start, end)` of each run of 1s in a 0/1 bytearray (`find` is memchr: fast on long zeros)."""
    start = marks.find(1)
    while start >= 0:
        end = marks.find(0, start)
        if end < 0:
            end = len(marks)
        yield start, end
        start = marks.find(1, end)


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
    """Token bytes -> their GPT-2 alphabet spelling (as in vocab.json / tokenizer.json): each byte
    read as the Latin-1 character of its value, then translated (one C call per token)."""
    return token.decode("latin-1").translate(_byte_spelling())


def tokens_to_unicode(tokens: Sequence[bytes]) -> list[str]:
    """`token_to_unicode` of every token: one charmap decode of all of them joined, then one slice
    per token (each byte is spelled by one character)."""
    tokens = list(tokens)
    text = codecs.charmap_decode(b"".join(tokens), "strict", byte_alphabet())[0]
    ends = list(accumulate(map(len, tokens)))
    return list(map(text.__getitem__, map(slice, [0, *ends[:-1]], ends)))


@lru_cache(maxsize=1)
def byte_alphabet() -> str:
    """The charmap codec's decoding table: byte b -> its GPT-2 spelling."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in range(256))


@lru_cache(maxsize=1)
def _byte_spelling() -> dict[int, str]:
    """`str.translate` table from each Latin-1 character (a byte's value) to its GPT-2 spelling."""
    return {b: c for b, c in bytes_to_unicode().items() if chr(b) != c}


def unicode_to_token(text: str) -> bytes:
    """GPT-2 alphabet spelling -> token bytes; KeyError names a character outside the alphabet.

    One `translate` and one Latin-1 encode per token: every character of the alphabet becomes the
    Latin-1 character of its byte, every character below U+0100 outside it becomes U+FFFF, so a
    character outside the alphabet always fails the encode and the slow path names it."""
    try:
        return text.translate(_byte_reading()).encode("latin-1")
    except UnicodeEncodeError:
        table = unicode_to_bytes()
        return bytes(table[c] for c in text)


def unicode_to_tokens(texts: Sequence[str]) -> list[bytes]:
    """`unicode_to_token` of every string, for a whole vocabulary at once: one charmap encode of all
    the strings joined (a C codec that knows exactly the 256 characters of the alphabet), then one
    slice per token. Every character of the alphabet stands for one byte, so the string lengths are
    the token lengths. KeyError names a character outside the alphabet, as `unicode_to_token` does."""
    texts = list(texts)
    try:
        blob = unicode_to_blob(texts)
    except UnicodeEncodeError:
        return [unicode_to_token(t) for t in texts]     # raises the KeyError naming the character
    ends = list(accumulate(map(len, texts)))
    return list(map(blob.__getitem__, map(slice, [0, *ends[:-1]], ends)))


def unicode_to_blob(texts: Sequence[str]) -> bytes:
    """The bytes of every GPT-2-spelled string, joined: one charmap encode (UnicodeEncodeError for a
    character outside the alphabet)."""
    return codecs.charmap_encode("".join(texts), "strict", _byte_encoding_map())[0]


@lru_cache(maxsize=1)
def _byte_encoding_map():
    """The charmap codec's encoding table: GPT-2 spelling of byte b -> b, nothing else."""
    return codecs.charmap_build(byte_alphabet())


@lru_cache(maxsize=1)
def _byte_reading() -> dict[int, str]:
    """`str.translate` table: GPT-2 spelling -> the Latin-1 character of its byte (see above)."""
    table = {ord(c): chr(b) for c, b in unicode_to_bytes().items()}
    for code in range(256):
        table.setdefault(code, "\uffff")
    return table


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


def split_with_gaps(compiled: "regex.Pattern[str] | Pcre2Pattern", text: str, matches_everything: bool) -> list[str]:
    """The pre-tokens of `text`: the matches of `compiled`, and the text between them as pieces too (as
    Hugging Face's `Split(behavior="Isolated")` does), so no character is ever dropped. The named
    patterns match every character (`matches_everything`), so only a custom regex needs the check
    (and the slower path when it has capturing groups, which change what findall returns).

    >>> split_with_gaps(compile_pattern(r"[a-z]+"), "ab, cd", False)
    ['ab', ', ', 'cd']
    """
    if not compiled.groups:
        pieces = compiled.findall(text)
        if matches_everything or sum(map(len, pieces)) == len(text):
            return pieces
    pieces, pos = [], 0
    for m in compiled.finditer(text):
        if m.start() > pos:
            pieces.append(text[pos:m.start()])
        if m.end() > m.start():
            pieces.append(m.group())
        pos = m.end()
    if pos < len(text):
        pieces.append(text[pos:])
    return pieces


def pretokenize(text: str, pattern: str = "gpt4", special_tokens: Sequence[str] = (), *,
                implementation: Implementation = DEFAULT) -> list[str]:
    """The pre-tokens of `text` as strings, special tokens removed (the training view).

    Special tokens split the text first; the pattern then applies to each piece between them.
    """
    findall = compile_pattern(pattern, implementation).findall
    if not special_tokens:
        return findall(text)
    out: list[str] = []
    for segment, is_special in split_on_special(text, special_tokens):
        if not is_special:
            out.extend(findall(segment))
    return out


class PretokenCounter:
    """Counts of the pre-tokens of many texts, by their UTF-8 bytes (the trainer's input).

    Special tokens split each text first and are not counted. A Hugging Face `normalizer` and
    `pre_tokenizer` (tokenizer.json components, see bpe_ops/text_rules.py and hf_components.py)
    apply as the Tokenizer holding them applies them: each segment between special tokens is
    normalized, then split by the pre-tokenizer chain instead of `pattern` (on `regex`).

    With PCRE2, a compiled counter splits and counts each text on its UTF-8 bytes; a text PCRE2 may
    not split (see `Pcre2Pattern`) is counted on strings with `regex`, as everything is without
    PCRE2, and converted to bytes once in `drain`. Lone surrogates cannot be encoded to UTF-8; they
    become U+FFFD, as the pipelines do on decode.
    """

    def __init__(self, pattern: str = "gpt4", special_tokens: Sequence[str] = (), *,
                 normalizer: dict | None = None, pre_tokenizer: dict | None = None,
                 implementation: Implementation = DEFAULT):
        self._compiled = compile_pattern(pattern, implementation)
        self._special_tokens = tuple(special_tokens)
        self._components = json.dumps([normalizer, pre_tokenizer], sort_keys=True)
        self._normalize = hf_components.normalizer(normalizer)
        self._pre_tokenize = hf_components.pre_tokenizer(pre_tokenizer) if pre_tokenizer else None
        self._pcre2 = (_pcre2_module() if isinstance(self._compiled, Pcre2Pattern) and self._pre_tokenize is None
                       else None)
        self._fast = self._pcre2.PieceCounter(self._compiled.compiled) if self._pcre2 else None
        self._by_str: Counter = Counter()

    def add(self, text: str) -> None:
        if not self._special_tokens:
            self._add_segment(text)
            return
        for segment, is_special in split_on_special(text, self._special_tokens):
            if not is_special:
                self._add_segment(segment)

    def _add_segment(self, segment: str) -> None:
        if self._normalize is not None:
            segment = self._normalize(segment)
        if self._pre_tokenize is not None:
            self._by_str.update(self._pre_tokenize(segment))
            return
        if self._fast is not None and self._compiled.pcre2_splits(segment):
            try:
                self._fast.add(segment)
                return
            except self._pcre2.Fallback:      # nothing of the segment was counted: `regex` below
                pass
        self._by_str.update(self._compiled.findall(segment))

    def __len__(self) -> int:
        """Distinct pre-tokens held (a piece counted by both paths counts twice until `drain`)."""
        return len(self._by_str) + (len(self._fast) if self._fast is not None else 0)

    def absorb(self, other: "PretokenCounter") -> None:
        """Add the counts of `other` (same pattern and special tokens) to this counter; `other` is
        left empty. Neither may be counting in another thread meanwhile."""
        if ((other._compiled, other._special_tokens, other._components)
                != (self._compiled, self._special_tokens, self._components)):
            raise ValueError("absorb() takes a counter of the same pattern, special tokens and components")
        if self._fast is not None:           # the same compiled pattern: both have one, or neither
            self._fast.absorb(other._fast)
        self._by_str.update(other._by_str)
        other._by_str.clear()

    def drain(self) -> dict[bytes, int]:
        """The counts so far as `{pre-token UTF-8 bytes: count}`; the counter starts over empty."""
        return self.drain_buckets(1)[0]

    def drain_buckets(self, n: int) -> list[dict[bytes, int]]:
        """`drain`, split into n tables: table i holds the pre-tokens p with `zlib.crc32(p) % n == i`
        (a bucket stable across processes and runs, unlike Python's salted hash)."""
        if self._fast is not None:
            buckets = self._fast.to_dicts(n)
            self._fast = self._pcre2.PieceCounter(self._compiled.compiled)
        else:
            buckets = [{} for _ in range(n)]
        for bucket, extra in zip(buckets, self._drain_by_str(n)):
            add_counts(bucket, extra)
        return buckets

    def drain_packed(self, n: int) -> list[bytes]:
        """`drain_buckets` as packed tables (bpe_ops/count_table.py): with the compiled counter, the
        counts go from C to bytes without a Python object per pre-token."""
        tables = self._fast.drain_packed(n) if self._fast is not None else [b""] * n
        # Packed tables add up when concatenated: the pieces counted on strings go after.
        return [table + pack_counts(extra) if extra else table
                for table, extra in zip(tables, self._drain_by_str(n))]

    def _drain_by_str(self, n: int) -> list[dict[bytes, int]]:
        """The pieces counted on strings (the `regex` path), by bucket as bytes; cleared."""
        buckets: list[dict[bytes, int]] = [{} for _ in range(n)]
        for piece, count in self._by_str.items():
            key = to_utf8(piece)
            bucket = buckets[zlib.crc32(key) % n]
            bucket[key] = bucket.get(key, 0) + count
        self._by_str.clear()
        return buckets

    @property
    def pieces(self) -> int:
        """Pre-tokens counted since the last drain, repeats included."""
        return (self._fast.pieces if self._fast is not None else 0) + sum(self._by_str.values())


def add_counts(into: dict, counts: Mapping) -> None:
    """`into[k] += v` for every `(k, v)` of `counts` (missing keys start at 0): the sum of two count
    tables, in C where `bpe_ops._native` is built."""
    if _native is not None and type(into) is dict and type(counts) is dict:
        _native.add_counts(into, counts)
        return
    get = into.get
    for key, n in counts.items():
        into[key] = get(key, 0) + n


def count_pretokens(texts: Iterable[str], pattern: str = "gpt4",
                    special_tokens: Sequence[str] = (), counter: Counter | None = None, *,
                    normalizer: dict | None = None, pre_tokenizer: dict | None = None,
                    implementation: Implementation = DEFAULT) -> Counter:
    """Count the pre-tokens of `texts` as `{pretoken UTF-8 bytes: count}` (see `PretokenCounter`),
    added to `counter` when given."""
    counting = PretokenCounter(pattern, special_tokens, normalizer=normalizer, pre_tokenizer=pre_tokenizer,
                               implementation=implementation)
    for text in texts:
        counting.add(text)
    out = counter if counter is not None else Counter()
    counts = counting.drain()
    if out:
        add_counts(out, counts)
    else:
        out.update(counts)
    return out


_SURROGATE = regex.compile("[\ud800-\udfff]")


def to_utf8(s: str) -> bytes:
    """UTF-8 bytes of `s`; a lone surrogate (not encodable) becomes U+FFFD, one per surrogate."""
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", s).encode("utf-8")

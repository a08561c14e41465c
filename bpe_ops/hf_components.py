"""Hugging Face `tokenizers` normalizers and pre-tokenizers, as plain Python functions on strings.

Byte-level BPE files written by others may normalize the text first (NFC, Lowercase, Replace, ...) and
split it with a `Sequence` of several pre-tokenizers (Splits with any behaviour, Digits, ByteLevel)
instead of the single `Split(regex)` the encoder's fast path runs. This module is the specification of
those components, written from `tokenizers`' Rust sources (normalizers/*.rs, pre_tokenizers/*.rs,
`NormalizedString::split`) and held to `tokenizers` itself by tests/bpe_ops/test_hf_components.py:

  - a normalizer is `str -> str`;
  - a pre-tokenizer step maps every piece to its sub-pieces; empty pieces are dropped, as HF does.

Only components whose behaviour is reproduced exactly are built; `check_*` name anything else, so the
file is refused in one line. Python's `unicodedata` (Unicode 14 in CPython 3.11) and Rust's tables
may disagree on characters assigned since: such text is rare, and is what the tests cannot vouch for.
"""
from __future__ import annotations

import unicodedata
from typing import Callable

import regex

from .patterns import GPT2_PATTERN
from .regex_dialect import from_oniguruma

Normalizer = Callable[[str], str]
Step = Callable[[str, bool], list]   # (piece, at_start) -> [(sub-piece, begins the piece)]

NORMALIZERS = ("NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "StripAccents", "Replace", "Prepend",
               "Sequence")
PRE_TOKENIZERS = ("Split", "Digits", "ByteLevel", "Metaspace", "Sequence")
BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")

# Rust's `char::is_whitespace` (the Unicode White_Space property), which HF's Strip uses; Python's
# str.strip() also strips U+001C..U+001F.
_WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
                "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


class Unsupported(ValueError):
    """A component this module does not reproduce; the message names it."""


class Malformed(ValueError):
    """A component whose JSON does not have the shape `tokenizers` writes (a field of the wrong type);
    the message names the field by its path in the file."""


# ---- the shape of the components ------------------------------------------------------------------
#
# Each component's fields and their JSON types, checked once when a file is read (`check_shape`), so
# that the functions below may trust them. An absent field takes the default the functions give it;
# an unknown field is ignored (HF writes some the reproduction does not need); an unknown `type` is
# left to the functions, which refuse it as Unsupported.
_PATTERN = "pattern"                 # {"String": str} or {"Regex": str}
_CHILDREN = {"normalizers": "normalizer", "pretokenizers": "pre_tokenizer", "decoders": "decoder"}
_METASPACE = {"replacement": str, "prepend_scheme": str, "split": bool, "add_prefix_space": bool}
_BYTE_LEVEL = {"add_prefix_space": bool, "use_regex": bool, "trim_offsets": bool}
FIELDS = {
    "normalizer": {"Strip": {"strip_left": bool, "strip_right": bool},
                   "Replace": {"pattern": _PATTERN, "content": str}, "Prepend": {"prepend": str},
                   "Sequence": {"normalizers": list}},
    "pre_tokenizer": {"Split": {"pattern": _PATTERN, "behavior": str, "invert": bool},
                      "Digits": {"individual_digits": bool}, "ByteLevel": _BYTE_LEVEL, "Metaspace": _METASPACE,
                      "Sequence": {"pretokenizers": list}},
    "decoder": {"Replace": {"pattern": _PATTERN, "content": str}, "Strip": {"content": str, "start": int, "stop": int},
                "Metaspace": _METASPACE, "ByteLevel": _BYTE_LEVEL, "Sequence": {"decoders": list}},
}
JSON_NAMES = {bool: "true or false", int: "an integer", str: "a string", list: "a list", dict: "an object"}


def json_type(value) -> str:
    """The JSON name of a parsed value's type, for messages: `a string`, `null`, ..."""
    if value is None:
        return "null"
    if isinstance(value, float):
        return "a number"
    return next((name for t, name in JSON_NAMES.items() if isinstance(value, t)), type(value).__name__)


def is_json(value, kind) -> bool:
    """Whether a parsed JSON value is of `kind` (bool, int, str, list or dict); a boolean is never an integer."""
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def check_shape(spec, role: str, where: str) -> None:
    """Malformed unless `spec` (a `normalizer`, `pre_tokenizer` or `decoder` of a tokenizer.json, found
    at `where`) and each of its steps is an object with a string `type` and fields of their JSON types."""
    if not isinstance(spec, dict):
        raise Malformed(f"{where} must be an object, got {json_type(spec)}")
    kind = spec.get("type")
    if not is_json(kind, str):
        raise Malformed(f"{where}.type must be a string, got {json_type(kind)}")
    for field, expected in FIELDS[role].get(kind, {}).items():
        if field not in spec:
            continue
        value, at = spec[field], f"{where}.{field}"
        if expected == _PATTERN:
            if not (isinstance(value, dict) and len(value) == 1 and
                    any(is_json(value.get(k), str) for k in ("String", "Regex"))):
                raise Malformed(f'{at} must be {{"String": text}} or {{"Regex": text}}, got {value!r:.80}')
        elif not is_json(value, expected):
            raise Malformed(f"{at} must be {JSON_NAMES[expected]}, got {json_type(value)}")
        elif expected is list:
            for k, child in enumerate(value):
                check_shape(child, _CHILDREN[field], f"{at}[{k}]")


# ---- normalizers --------------------------------------------------------------------------------

def normalizer(spec: dict | None) -> Normalizer | None:
    """The function of a tokenizer.json `normalizer` (None: none, or an empty Sequence)."""
    if spec is None:
        return None
    kind = spec.get("type")
    if kind == "Sequence":
        steps = [f for f in map(normalizer, spec.get("normalizers") or []) if f is not None]
        if not steps:
            return None
        if len(steps) == 1:
            return steps[0]

        def sequence(text: str) -> str:
            for step in steps:
                text = step(text)
            return text
        return sequence
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        return lambda text, form=kind: unicodedata.normalize(form, text)
    if kind == "Lowercase":
        return lowercase
    if kind == "Strip":
        left, right = bool(spec.get("strip_left", True)), bool(spec.get("strip_right", True))
        if left and right:
            return lambda text: text.strip(_WHITE_SPACE)
        if left:
            return lambda text: text.lstrip(_WHITE_SPACE)
        if right:
            return lambda text: text.rstrip(_WHITE_SPACE)
        return lambda text: text
    if kind == "StripAccents":
        return strip_accents
    if kind == "Replace":
        pattern, content = _pattern(spec.get("pattern"), "Replace"), spec.get("content", "")
        if not isinstance(content, str):
            raise Unsupported(f"normalizer Replace content {content!r}")
        return lambda text: pattern.sub(lambda _: content, text)
    if kind == "Prepend":
        prefix = spec.get("prepend", "")
        return lambda text: prefix + text if text else text
    if kind == "Precompiled":
        raise Unsupported("normalizer Precompiled (a SentencePiece precompiled_charsmap, e.g. nmt_nfkc, compiled "
                          "into a trie; not implemented)")
    raise Unsupported(f"normalizer {kind}")


def start_kept(spec: dict | None) -> Callable[[str], bool] | None:
    """Whether a text's first character survives the normalizer (HF then still counts the text as
    starting at offset 0, which Metaspace's `prepend_scheme="first"` asks): a function of the text, or
    None when no step can delete a leading character (only Strip, StripAccents and a Replace with
    empty content can)."""
    steps = _flat_normalizers(spec)
    deleting = [k for k, step in enumerate(steps)
                if step.get("type") in ("Strip", "StripAccents") or (step.get("type") == "Replace"
                                                                     and step.get("content", "") == "")]
    if not deleting:
        return None
    functions = [normalizer(step) for step in steps]

    def kept(text: str) -> bool:
        for step, function in zip(steps, functions):
            if not text:
                return True
            kind = step["type"]
            if kind == "Strip" and step.get("strip_left", True) and text[0] in _WHITE_SPACE:
                return False
            if kind == "StripAccents" and unicodedata.category(text[0])[0] == "M":
                return False
            if kind == "Replace" and step.get("content", "") == "":
                first = next(_pattern(step.get("pattern"), "Replace").finditer(text), None)
                if first is not None and first.start() == 0 and first.end() > 0:
                    return False
            text = function(text)
        return True
    return kept


def _flat_normalizers(spec: dict | None) -> list:
    if spec is None:
        return []
    if spec.get("type") == "Sequence":
        return [s for child in spec.get("normalizers") or [] for s in _flat_normalizers(child)]
    return [spec]


def lowercase(text: str) -> str:
    """HF's Lowercase: every character lowercased on its own (Rust `char::to_lowercase`). Python's
    `str.lower` agrees except for one context rule: a final capital sigma becomes `ς` there, `σ` here."""
    if "\u03a3" not in text:
        return text.lower()
    return "".join([c.lower() for c in text])


def strip_accents(text: str) -> str:
    """HF's StripAccents: drop every combining mark (General_Category M*)."""
    if text.isascii():
        return text
    category = unicodedata.category
    return "".join([c for c in text if category(c)[0] != "M"])


# ---- pre-tokenizers -----------------------------------------------------------------------------

def pre_tokenizer(spec: dict) -> Callable[..., list]:
    """The function `(text, at_start=True) -> pieces` of a tokenizer.json `pre_tokenizer` (Sequence
    or one step). `at_start` says whether the text begins the original text (HF's
    `offsets_original().0 == 0`): Metaspace's `prepend_scheme="first"` prepends only there, so a
    segment after an added token gets no prefix. A piece keeps it when it begins its parent."""
    steps = _steps(spec)

    def run(text: str, at_start: bool = True) -> list:
        pieces = [(text, at_start)] if text else []
        for step in steps:
            out: list = []
            for piece, first in pieces:
                out.extend([(sub, first and begins) for sub, begins in step(piece, first)])
            pieces = out
        return [piece for piece, _ in pieces]
    return run


def _steps(spec: dict) -> list:
    kind = spec.get("type")
    if kind == "Sequence":
        return [s for child in spec.get("pretokenizers") or [] for s in _steps(child)]
    if kind == "Split":
        behavior = spec.get("behavior", "Isolated")
        if behavior not in BEHAVIORS:
            raise Unsupported(f"Split behavior {behavior!r}")
        pattern = _pattern(spec.get("pattern"), "Split")
        return [_regex_split(pattern, behavior, bool(spec.get("invert", False)))]
    if kind == "Digits":
        behavior = "Isolated" if spec.get("individual_digits", False) else "Contiguous"
        return [lambda piece, at_start: _split(piece, _numeric_spans(piece), behavior)]
    if kind == "ByteLevel":
        steps = []
        if spec.get("add_prefix_space", True):
            steps.append(lambda piece, at_start: [(piece if piece.startswith(" ") else " " + piece, True)])
        if spec.get("use_regex", True):
            steps.append(_regex_split(regex.compile(GPT2_PATTERN), "Isolated", False))
        return steps
    if kind == "Metaspace":
        return [_metaspace(spec)]
    raise Unsupported(f"pre-tokenizer {kind}")


def split_steps(spec: dict) -> list[tuple[str, str, bool]] | None:
    """A pre-tokenizer as the Split steps `_steps` runs, each `(regex, behavior, invert)` with the
    regex as `_pattern` reads it (for the compiled encoder, `bpe_ops.sequence_split`); None when a
    step is not a Split: Digits, Metaspace, a ByteLevel that adds a prefix space."""
    kind = spec.get("type")
    if kind == "Sequence":
        children = [split_steps(child) for child in spec.get("pretokenizers") or []]
        return None if None in children else [s for child in children for s in child]
    if kind == "Split":
        pattern = spec.get("pattern") or {}
        if isinstance(pattern.get("Regex"), str):
            text = from_oniguruma(pattern["Regex"])
        elif isinstance(pattern.get("String"), str):
            text = regex.escape(pattern["String"])
        else:
            return None
        return [(text, spec.get("behavior", "Isolated"), bool(spec.get("invert", False)))]
    if kind == "ByteLevel" and not spec.get("add_prefix_space", True):
        return [(GPT2_PATTERN, "Isolated", False)] if spec.get("use_regex", True) else []
    return None


PREPEND_SCHEMES = ("always", "first", "never")


def metaspace_options(spec: dict) -> tuple[str, str, bool]:
    """(replacement, prepend_scheme, split) of a Metaspace component, with HF's defaults: files
    written before `prepend_scheme` existed say `add_prefix_space` (true: always, false: never)."""
    replacement = spec.get("replacement", "\u2581")
    if not isinstance(replacement, str) or len(replacement) != 1:
        raise Unsupported(f"Metaspace replacement {replacement!r} (one character)")
    scheme = spec.get("prepend_scheme")
    if scheme is None:
        scheme = "always" if spec.get("add_prefix_space", True) else "never"
    if scheme not in PREPEND_SCHEMES:
        raise Unsupported(f"Metaspace prepend_scheme {scheme!r}")
    return replacement, scheme, bool(spec.get("split", True))


def metaspace_alone(spec: dict | None) -> tuple[str, str] | None:
    """(replacement, prepend_scheme) when the pre-tokenizer is one Metaspace that does not split (alone,
    or alone in a Sequence): the whole text is then one pre-token, its spaces the replacement, which a
    compiled encoder may do as it reads the text. None for any other pre-tokenizer.

    >>> metaspace_alone({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False})
    ('▁', 'first')
    >>> metaspace_alone({"type": "Metaspace", "split": True}) is None
    True
    """
    if spec and spec.get("type") == "Sequence" and len(spec.get("pretokenizers") or []) == 1:
        spec = spec["pretokenizers"][0]
    if not spec or spec.get("type") != "Metaspace":
        return None
    replacement, scheme, split = metaspace_options(spec)
    return None if split else (replacement, scheme)


def _metaspace(spec: dict) -> Step:
    """HF's Metaspace: every space becomes the replacement, which is prepended (always; or only at
    the start of the original text: first) unless the piece starts with it; with `split`, the
    piece is cut before each replacement (`MergedWithNext`)."""
    replacement, scheme, split = metaspace_options(spec)
    at_replacement = _regex_split(regex.compile(regex.escape(replacement)), "MergedWithNext", False)

    def step(piece: str, at_start: bool) -> list:
        piece = piece.replace(" ", replacement)
        if not piece.startswith(replacement) and (scheme == "always" or (scheme == "first" and at_start)):
            piece = replacement + piece
        return at_replacement(piece, at_start) if split else [(piece, True)]
    return step


def _pattern(spec, owner: str) -> "regex.Pattern[str]":
    """A component's `{"String": s}` (a literal) or `{"Regex": r}` pattern, `r` read as Hugging Face
    reads it (Oniguruma's syntax, see `regex_dialect`)."""
    if isinstance(spec, dict) and isinstance(spec.get("String"), str):
        return regex.compile(regex.escape(spec["String"]))
    if isinstance(spec, dict) and isinstance(spec.get("Regex"), str):
        try:
            return regex.compile(from_oniguruma(spec["Regex"]))
        except (regex.error, ValueError) as exc:
            raise Unsupported(f"{owner} regex {spec['Regex']!r} ({exc})") from None
    raise Unsupported(f"{owner} pattern {spec!r}")


def _regex_split(pattern: "regex.Pattern[str]", behavior: str, invert: bool) -> Step:
    def step(piece: str, at_start: bool = True) -> list:
        spans, at = [], 0
        for m in pattern.finditer(piece):
            start, end = m.span()
            if at != start:
                spans.append((at, start, False))
            spans.append((start, end, True))
            at = end
        if at != len(piece):
            spans.append((at, len(piece), False))
        if invert:
            spans = [(s, e, not is_match) for s, e, is_match in spans]
        return _split(piece, spans, behavior)
    return step


def _numeric_spans(piece: str) -> list:
    """HF's char-predicate pattern with `char::is_numeric` (Nd, Nl, No): each numeric character is
    a match of its own, the runs between them non-matches."""
    category = unicodedata.category
    spans, at = [], 0
    for i, c in enumerate(piece):
        if category(c) in ("Nd", "Nl", "No"):
            if at < i:
                spans.append((at, i, False))
            spans.append((i, i + 1, True))
            at = i + 1
    if at < len(piece):
        spans.append((at, len(piece), False))
    return spans


def _split(piece: str, spans: list, behavior: str) -> list:
    """`NormalizedString::split`: spans (start, end, is_match) covering the piece -> its pieces, each
    as (text, whether it begins the piece)."""
    if behavior == "Isolated":
        kept = [(s, e) for s, e, _ in spans]
    elif behavior == "Removed":
        kept = [(s, e) for s, e, is_match in spans if not is_match]
    elif behavior == "MergedWithPrevious":
        kept, previous = [], False
        for s, e, is_match in spans:
            if is_match and not previous and kept:
                kept[-1] = (kept[-1][0], e)
            else:
                kept.append((s, e))
            previous = is_match
    elif behavior == "MergedWithNext":
        kept, previous = [], False
        for s, e, is_match in reversed(spans):
            if is_match and not previous and kept:
                kept[-1] = (s, kept[-1][1])
            else:
                kept.append((s, e))
            previous = is_match
        kept.reverse()
    elif behavior == "Contiguous":
        kept, previous = [], False
        for s, e, is_match in spans:
            if is_match == previous and kept:
                kept[-1] = (kept[-1][0], e)
            else:
                kept.append((s, e))
            previous = is_match
    else:
        raise Unsupported(f"Split behavior {behavior!r}")
    return [(piece[s:e], s == 0) for s, e in kept if e > s]


# ---- added tokens -------------------------------------------------------------------------------

ADDED_TOKEN_FLAGS = ("special", "single_word", "lstrip", "rstrip", "normalized")
# `\w` and `\s` of Rust's regex crate, which HF's single_word, lstrip and rstrip use.
_WORD_AT_END = regex.compile(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]\Z")
_WORD_AT_START = regex.compile(r"[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}]")
_SPACE_AT_END = regex.compile(r"\p{White_Space}*\Z")
_SPACE_AT_START = regex.compile(r"\p{White_Space}*")


def needs_added_vocabulary(entries) -> bool:
    """Whether a file's `added_tokens` need HF's matching rather than plain special tokens: any token
    that is not special (HF matches it in every text), strips spaces, must be a single word, or is
    matched on normalized text."""
    return any(not e.get("special", False) or e.get("single_word") or e.get("lstrip") or e.get("rstrip")
               or e.get("normalized", not e.get("special", False)) for e in entries)


class AddedVocabulary:
    """HF's `AddedVocabulary::extract_and_normalize`: tokens with `normalized=false` are found in the
    raw text, then each remaining segment is normalized and the `normalized=true` tokens (their
    content normalized too) are found in it. Matching is leftmost-longest (a longest-first regex
    alternation); `single_word` drops a match next to a word character; `lstrip`/`rstrip` take the
    whitespace beside the match into the token.

    Special tokens are found only when allowed (tokenbeam's contract: HF's `encode_special_tokens=True`
    when none are, its default when all are); tokens with `special=false` always, as in HF."""

    def __init__(self, entries: list, normalize: Normalizer | None):
        self.entries = [{"id": int(e["id"]), "content": str(e["content"]),
                         **{f: bool(e.get(f, not e.get("special", False) if f == "normalized" else False))
                            for f in ADDED_TOKEN_FLAGS}} for e in entries]
        self.normalize = normalize
        self.always = any(not e["special"] for e in self.entries)

    def active(self, allowed: frozenset) -> bool:
        return self.always or any(e["content"] in allowed for e in self.entries)

    def split(self, text: str, allowed: frozenset) -> list:
        """`(segment, None)` for normalized text to pre-tokenize, `(content, id)` for a token."""
        live = [e for e in self.entries if e["content"] and (not e["special"] or e["content"] in allowed)]
        raw = _matcher([e for e in live if not e["normalized"]], None)
        normalized = _matcher([e for e in live if e["normalized"]], self.normalize)
        out = []
        for segment, token in _extract(text, raw):
            if token is not None:
                out.append((segment, token))
                continue
            if self.normalize is not None:
                segment = self.normalize(segment)
            out.extend(_extract(segment, normalized))
        return [(s, t) for s, t in out if t is not None or s]


def _matcher(entries: list, normalize: Normalizer | None):
    if not entries:
        return None
    by_content = {}
    for e in entries:
        content = normalize(e["content"]) if normalize is not None else e["content"]
        by_content.setdefault(content, e)
    alternatives = sorted((c for c in by_content if c), key=lambda c: (-len(c), c))
    if not alternatives:
        return None
    return regex.compile("|".join(map(regex.escape, alternatives))), by_content


def _extract(sentence: str, matcher) -> list:
    """HF's `find_matches` + `split_with_indices` on one segment."""
    if matcher is None or not sentence:
        return [(sentence, None)]
    pattern, by_content = matcher
    out, start_offset = [], 0
    for m in pattern.finditer(sentence):
        start, stop = m.span()
        e = by_content[m.group()]
        if e["single_word"]:
            start_space = start == 0 or not _WORD_AT_END.search(sentence, 0, start)
            stop_space = stop == len(sentence) or not _WORD_AT_START.match(sentence, stop)
            if not (start_space and stop_space):
                continue
        if e["lstrip"]:
            start = max(_SPACE_AT_END.search(sentence, 0, start).start(), start_offset)
        if e["rstrip"]:
            stop = _SPACE_AT_START.match(sentence, stop).end()
        if start_offset < start:
            out.append((sentence[start_offset:start], None))
        out.append((sentence[start:stop], e["id"]))
        start_offset = stop
    if start_offset < len(sentence):
        out.append((sentence[start_offset:], None))
    return out

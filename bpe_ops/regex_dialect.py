r"""One split regex, two readings: Hugging Face's Oniguruma and tiktoken's (Python `regex`, PCRE2).

A tokenizer.json is read by Hugging Face `tokenizers`, which compiles its regexes with Oniguruma in
Ruby syntax; a `.tiktoken` rank file's pattern is read by tiktoken (fancy-regex), which agrees with
Python's `regex` package, the engine this project splits with. The same text means different things
in a few places:

| text        | Oniguruma (Ruby syntax)                    | `regex` / tiktoken                    |
|-------------|--------------------------------------------|---------------------------------------|
| `X{1,3}+`   | `(?:X{1,3})+`: one or more runs of 1-3 X   | possessive `X{1,3}`: at most 3 X      |
| `$` / `^`   | at the end / start of any line             | at the end (or before a final `\n`) / start of the text |
| `(?m)`      | `.` matches a newline                      | `^` and `$` match at lines            |
| `\h`        | a hexadecimal digit                        | not a hexadecimal digit               |
| `(?:a\|1*+){2}` | an empty round ends the repetition       | an empty round counts as one          |

So tiktoken's cl100k pattern (`\p{N}{1,3}+`), which `transformers`' TikTokenConverter copies into
tokenizer.json as it is, makes "1999" one pre-token in Hugging Face and "199" + "9" in tiktoken.

`from_oniguruma` rewrites a tokenizer.json regex into a `regex` pattern that matches as Oniguruma
does; `to_oniguruma` rewrites a `regex` pattern (ours, or a `--pattern`) into text Oniguruma reads
as `regex` does, for writing tokenizer.json. Both leave a pattern unchanged where nothing in it
reads differently, so the named patterns keep their text. A counted repetition (`{n}`, `{n,m}`) of
something that can match empty has no faithful rewrite either way: Oniguruma ends such a loop at its
first empty round, `regex` may take an empty round and go on. Both refuse it (ValueError) rather
than split otherwise than the file's own library; no published tokenizer's regex has one.


>>> from_oniguruma(r"\p{N}{1,3}+| ?\p{L}+")
'\\p{N}+| ?\\p{L}+'
>>> from_oniguruma(r"a{2}+")
'(?:a{2})+'
>>> to_oniguruma(r"\p{N}{1,3}+| ?\p{L}+")
'(?>\\p{N}{1,3})| ?\\p{L}+'
>>> from_oniguruma(r"\s+$"), from_oniguruma(r"\s++$")
('\\s+(?=\\n|$)', '\\s++$')
"""
from __future__ import annotations

import json

import regex

__all__ = ["from_oniguruma", "to_oniguruma", "reads_differently", "regexes_read_differently"]

# `{n}`, `{n,}`, `{,m}`, `{n,m}`: an interval, in both engines.
_INTERVAL = regex.compile(r"\{(?=\d|,\d)(\d*)(?:(,)\d*)?\}")
_INLINE_FLAGS = regex.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")
_HEX = "0-9a-fA-F"


def from_oniguruma(pattern: str) -> str:
    """The `regex` pattern that splits as Oniguruma (Ruby syntax) reads `pattern`; ValueError for a
    construct whose Oniguruma meaning has no rewrite here (`\\H` in a set, set intersections)."""
    return _rewrite(pattern, _FROM_ONIGURUMA)


def to_oniguruma(pattern: str) -> str:
    """Text that Oniguruma (Ruby syntax) reads as `regex` reads `pattern`, for a tokenizer.json."""
    return _rewrite(pattern, _TO_ONIGURUMA)


def reads_differently(oniguruma_pattern: str) -> bool:
    """Whether tiktoken (`regex`) would read this tokenizer.json regex otherwise than Hugging Face.

    >>> reads_differently(r"\\p{N}{1,3}+"), reads_differently(r"\\p{N}{1,3}")
    (True, False)
    """
    return from_oniguruma(oniguruma_pattern) != oniguruma_pattern


# A `"Regex": "..."` member of a tokenizer.json. An unescaped quote only ever delimits a JSON string,
# so no token of the vocabulary can look like one.
_FILE_REGEX = regex.compile(rb'"Regex"\s*:\s*("(?:[^"\\]|\\.)*")')


def regexes_read_differently(tokenizer_json: bytes) -> list[str]:
    r"""The regexes of a tokenizer.json's text that tiktoken would read otherwise than Hugging Face,
    found without parsing the whole file (a 200k vocabulary takes a JSON parse of ~0.3 s).

    >>> regexes_read_differently(b'{"pre_tokenizer": {"pattern": {"Regex": "\\\\p{N}{1,3}+"}}}')
    ['\\p{N}{1,3}+']
    """
    found = []
    for m in _FILE_REGEX.finditer(tokenizer_json):
        try:
            pattern = json.loads(m.group(1))
            if reads_differently(pattern):
                found.append(pattern)
        except ValueError:                 # not a JSON string, or no rewrite: the load says why
            continue
    return found


# How each construct is rewritten, by direction.
_FROM_ONIGURUMA = "from"
_TO_ONIGURUMA = "to"


def _rewrite(pattern: str, direction: str) -> str:
    """Walk `pattern` once, keeping it as a list of units: each atom (a character, an escape, a set,
    a whole group) is one unit, so that a quantifier can apply to, or wrap, the unit before it."""
    units: list[str] = []
    single: list[bool] = []          # per unit: one character's matcher (so `(?:X{1,m})+` is `X+`)
    nullable: list[bool] = []        # per unit: it can match the empty string
    group_starts: list[int] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            text, i = _escape(pattern, i, direction)
            units.append(text)
            single.append(not text.startswith(("\\A", "\\z", "\\Z", "\\b", "\\B", "\\G", "\\k", "\\g"))
                          and not text[1:2].isdigit())
            nullable.append(not single[-1])          # an anchor, or a back-reference to what may be empty
        elif c == "[":
            text, i = _set(pattern, i, direction)
            units.append(text)
            single.append(True)
            nullable.append(False)
        elif c == "(":
            flags = _INLINE_FLAGS.match(pattern, i)
            if flags:
                text = "(?" + _flags(flags.group(1), direction) + (
                    "-" + _flags(flags.group(2), direction) if flags.group(2) else "") + flags.group(3)
                i = flags.end()
                if text in ("(?)", "(?-)"):
                    continue                                  # every flag it set was dropped
                if text.endswith(")"):
                    units.append(text)
                    single.append(False)
                    nullable.append(True)
                    continue
                group_starts.append(len(units))
                units.append(text)
                single.append(False)
                nullable.append(True)
                continue
            opener = regex.match(r"\((?:\?(?:[:=!>]|<[=!]|<\w+>|P<\w+>|'\w+'))?", pattern, pos=i).group()
            group_starts.append(len(units))
            units.append(opener)
            single.append(False)
            nullable.append(True)
            i += len(opener)
        elif c == ")":
            start = group_starts.pop() if group_starts else None
            if start is None:
                raise ValueError(f"unbalanced ')' in {pattern!r}")
            empty = _group_nullable(units[start], units[start + 1:], nullable[start + 1:])
            units[start:] = ["".join(units[start:]) + ")"]
            single[start:] = [False]
            nullable[start:] = [empty]
            i += 1
        elif c == "{" and _INTERVAL.match(pattern, i) and units:
            interval = _INTERVAL.match(pattern, i)
            if nullable[-1]:
                raise ValueError(f"{units[-1]}{interval.group()} repeats something that can match empty a "
                                 f"counted number of times, which Oniguruma and `regex` read differently")
            nullable[-1] = interval.group(1) in ("", "0")
            i = interval.end()
            then = pattern[i] if i < n else ""
            if then == "+" and direction == _FROM_ONIGURUMA:
                # Oniguruma: the interval, then `+` repeating it.
                i += 1
                low, comma = interval.group(1), interval.group(2)
                if single[-1] and low in ("", "0", "1") and (comma or low != "0"):
                    # `(?:X{1,m})+` is `X+` and `(?:X{0,m})+` is `X*`: the same lengths, longest first.
                    units[-1] += "+" if low == "1" else "*"
                else:
                    units[-1] = f"(?:{units[-1]}{interval.group()})+"
                single[-1] = False
                continue
            if then == "+" and direction == _TO_ONIGURUMA:
                i += 1                                         # `regex`: a possessive interval
                units[-1] = f"(?>{units[-1]}{interval.group()})"
            else:
                units[-1] += interval.group()
            single[-1] = False
        elif c in "*+?":
            quantifier = regex.match(r"[*+?][+?]?", pattern[i:]).group()
            i += len(quantifier)
            if units:
                units[-1] += quantifier
                single[-1] = False
                nullable[-1] = nullable[-1] or quantifier[0] != "+"
            else:
                units.append(quantifier)
                single.append(False)
                nullable.append(True)
        elif c in "^$":
            units.append(_anchor(c, units, direction))
            single.append(False)
            nullable.append(True)
            i += 1
        else:
            units.append(c)
            single.append(c != "|")
            nullable.append(c == "|")
            i += 1
    if group_starts:
        raise ValueError(f"unbalanced '(' in {pattern!r}")
    return "".join(units)


def _group_nullable(opener: str, inner: list[str], nullable: list[bool]) -> bool:
    """Whether a group can match the empty string: a lookaround always does, any other group when
    one of its branches is all units that can.

    >>> _group_nullable("(?:", ["a", "|", "b*"], [False, True, True]), _group_nullable("(?:", ["a", "b*"], [False, True])
    (True, False)
    """
    if opener.startswith(("(?=", "(?!", "(?<=", "(?<!")):
        return True
    branch_empty = True
    for unit, empty in zip(inner, nullable):
        if unit == "|":
            if branch_empty:
                return True
            branch_empty = True
        else:
            branch_empty = branch_empty and empty
    return branch_empty


def _anchor(c: str, units: list[str], direction: str) -> str:
    """`^` / `$`: line anchors in Oniguruma, text anchors in `regex` (where `$` also matches before a
    final newline). After a possessive whitespace run the next character is never a newline, so there
    `$` means the end of the text in both readings (cl100k's `\\s++$` keeps its text)."""
    if c == "$" and units and units[-1] in ("\\s++", "\\s*+"):
        return "$"
    if direction == _FROM_ONIGURUMA:
        # A line starts after every newline but a final one: Oniguruma finds no line after it.
        return "(?=\\n|$)" if c == "$" else "(?:\\A|(?<=\\n)(?!\\z))"
    return "(?=\\n?\\z)" if c == "$" else "\\A"


def _flags(flags: str, direction: str) -> str:
    """Inline flags: Oniguruma's `m` is `regex`'s `s` (dot matches newline); `regex`'s `m` (line
    anchors) is Oniguruma's default, rewritten per anchor instead."""
    if direction == _FROM_ONIGURUMA:
        if "s" in flags:
            raise ValueError("inline flag (?s) is not Oniguruma (Ruby) syntax")
        return flags.replace("m", "s")
    if "m" in flags:
        raise ValueError("inline flag (?m) has no Oniguruma spelling here; use explicit (?=\\n|$) anchors")
    return flags.replace("s", "m")


def _escape(pattern: str, i: int, direction: str) -> tuple[str, int]:
    """The escape at `pattern[i]` (a backslash) as one unit, and the index after it."""
    m = regex.match(r"\\(?:[pP](?:\{\^?\w+\}|\w)|x\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{4}|"
                    r"[kg]<\w+>|.)", pattern[i:], flags=regex.DOTALL)
    if m is None:
        raise ValueError(f"a trailing backslash in {pattern!r}")
    text = m.group()
    if direction == _FROM_ONIGURUMA and text in ("\\h", "\\H"):
        text = f"[{_HEX}]" if text == "\\h" else f"[^{_HEX}]"
    return text, i + len(m.group())


def _set(pattern: str, i: int, direction: str) -> tuple[str, int]:
    """The set `[...]` starting at `pattern[i]` (nested sets included) as one unit."""
    out, depth, j, n = [], 0, i, len(pattern)
    while j < n:
        c = pattern[j]
        if c == "\\":
            text, j = _escape(pattern, j, _TO_ONIGURUMA)      # no rewrite of a class escape yet
            if direction == _FROM_ONIGURUMA and text == "\\h":
                text = _HEX
            elif direction == _FROM_ONIGURUMA and text == "\\H":
                raise ValueError(f"\\H inside a set has no `regex` spelling: {pattern!r}")
            out.append(text)
            continue
        posix = regex.match(r"\[:\^?\w+:\]", pattern[j:]) if depth else None
        if posix:                                              # `[:alpha:]` inside a set
            out.append(posix.group())
            j += len(posix.group())
            continue
        if c == "[":
            start = j
            out.append(c)
            j += 1
            if j < n and pattern[j] == "^":
                out.append("^")
                j += 1
            if j < n and pattern[j] == "]" and start == i:   # a leading `]` is a literal
                out.append("]")
                j += 1
            if start != i and direction == _FROM_ONIGURUMA:
                raise ValueError(f"a nested set has no `regex` (version 0) spelling: {pattern!r}")
            depth += 1
            continue
        if c == "&" and pattern.startswith("&&", j) and direction == _FROM_ONIGURUMA:
            raise ValueError(f"a set intersection (&&) has no `regex` (version 0) spelling: {pattern!r}")
        out.append(c)
        j += 1
        if c == "]":
            depth -= 1
            if depth == 0:
                return "".join(out), j
    raise ValueError(f"an unterminated set in {pattern!r}")

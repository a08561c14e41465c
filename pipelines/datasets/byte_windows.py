"""A bounded window of bytes of an uncompressed JSONL or text-line shard, read without reading its
records through: the record text that starts in the window, one piece per record it touches.

`tokenbeam estimate` draws windows at uniform offsets and counts what each holds. A count that
grows along a record's text (tokens, words) is taken for a piece as `f(context + text) - f(context)`,
where `context` is the record's text just before the piece (up to `margin` bytes of it, empty at the
record's start): summed over the pieces of a record this telescopes to the record's own count,
exactly for words, bytes and characters, and for tokens wherever the tokenizer's pre-tokens fall the
same with and without the text before `context` (a regex split re-synchronises within a word).

- A character belongs to the window when its raw bytes (a UTF-8 sequence, or a JSON escape such as
  `\\u00e9`, a surrogate pair taken as one) start in it, so pieces cut at any byte tile the text.
- A line lying wholly in the window is read as the shard's reader reads it (`line_record`): exact,
  a rejected record or a blank line included.
- A piece of a longer line is decoded from its raw bytes. JSON structure is followed from the
  line's start when the bytes read hold it. Otherwise it is followed from the first unescaped quote,
  and a string whose key lies before the bytes read is taken to be the text field unless the text
  field's key follows it on the line (so a long string of another top-level field would be counted
  as text, and such a line is taken to be a valid record). Where the bytes read begin inside a run
  of backslashes (whose parity tells what follows it), more is read before the window.

>>> import io
>>> from pipelines.datasets.sources import Shard, SourceOptions
>>> data = b'{"id": 1, "text": "caf\\\\u00e9 au lait"}\\n{"text": "second one"}\\n'
>>> shard, options = Shard("x.jsonl", "x.jsonl", len(data)), SourceOptions()
>>> pieces, read = window_pieces(io.BytesIO(data), shard, options, 20, 52, margin=8)
>>> [(p.context, p.text, p.starts_record) for p in pieces]
[('c', 'af\\xe9 au lait', False), ('', 'sec', True)]
>>> pieces, read = window_pieces(io.BytesIO(data), shard, options, 0, 62)
>>> [p.whole.text for p in pieces], read
(['caf\\xe9 au lait', 'second one'], 62)
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import BinaryIO

from schemas.records import INVALID_UTF8
from pipelines.datasets.sources import (BOM, CHUNK_SIZE, COMPRESSION_EXTENSIONS, Oversized, Record, Rejected, Shard,
                                        SourceOptions, jsonl_record, shard_format, too_large, utf8_detail)

MARGIN = 128                  # bytes read before a window: the text that gives its first piece context
TAIL = 16                     # bytes read after it: an escape or a UTF-8 sequence cut at its end

_WS = re.compile(rb"[ \t\r]*")
_STRING_BODY = re.compile(rb'(?:[^"\\\n]|\\[^\n])*')          # up to an unescaped quote or the line's end
_STRUCTURE = re.compile(rb"[\s\d,.:eE+\-\[\]{}truefalsn]*")    # what may lie between strings
_SCALAR = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_NESTED = re.compile(rb'"(?:[^"\\\n]|\\[^\n])*"|[\[\]{}]|\n')
_ESCAPE = re.compile(rb"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[^\n])")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW_SURROGATE = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_UNKNOWN = object()           # the key of a string that began before the bytes read


@dataclass(frozen=True)
class Piece:
    """What a window holds of one record: a whole line's record (`whole`, with `is_whole`), or the
    text of a longer line whose raw bytes start in the window and the text just before it."""
    context: str = ""
    text: str = ""
    starts_record: bool = False
    is_whole: bool = False
    whole: Record | Rejected | None = None
    field_seen: bool = False      # the text field's key was read (always, for a text line)


def window_pieces(f: BinaryIO, shard: Shard, options: SourceOptions, start: int, end: int,
                  margin: int = MARGIN) -> tuple[list[Piece], int]:
    """The pieces of record text in bytes [start, end) of the shard (open as `f`, seekable), and how
    many bytes were read for them (from `margin` before `start` to `TAIL` after `end`)."""
    jsonl = shard_format(shard, options) == "jsonl"
    while True:
        lo, hi = max(0, start - margin), min(shard.size, end + TAIL)
        f.seek(lo)
        raw = f.read(hi - lo)
        hi = lo + len(raw)
        a, b = start - lo, min(end, hi) - lo
        nl = raw.rfind(b"\n", 0, a)
        line = nl + 1 if nl >= 0 else (0 if lo == 0 else None)   # the line's start; None: before the bytes read
        if line is not None or not jsonl or _first_character(raw) < a:
            break
        margin *= 4           # inside a run of backslashes longer than the margin: read further back
    pieces = []
    while a < b:
        e = raw.find(b"\n", a)
        line_end = e + 1 if e >= 0 else (len(raw) if hi == shard.size else None)
        if line is not None and line >= a and line_end is not None and line_end <= b:
            pieces.append(Piece(is_whole=True, whole=line_record(raw[line:line_end], lo + line, shard, options)))
        else:
            cut = b if line_end is None else min(b, line_end)
            span = (_json_text if jsonl else _line_text)(raw, line, line_end, lo, options)
            context, text = _piece(raw, span, a, cut, margin, jsonl)
            pieces.append(Piece(context, text, starts_record=line is not None and line >= a,
                                field_seen=span is not None and span[3]))
        if line_end is None or line_end >= b:
            break
        line = a = line_end
    return pieces, len(raw)


def _piece(raw: bytes, span, a: int, b: int, margin: int, jsonl: bool) -> tuple[str, str]:
    """The text of the record's characters starting in raw[a:b], and the text before it (from up to
    `margin` bytes before a). `span` is (first, end, unit, seen): where the text's raw bytes begin
    and end (None: past the bytes read) in `raw`, a position known to start a character, and
    whether the text field's key was read."""
    if span is None:
        return "", ""
    first, last, unit, _ = span
    last = len(raw) if last is None else last
    lo_, hi_ = max(a, first), min(b, last)
    if lo_ >= hi_:
        return "", ""
    begin = _snap(raw, lo_, unit, last, jsonl)
    stop = _snap(raw, hi_, unit, last, jsonl)
    context_from = _snap(raw, max(first, a - margin), unit, last, jsonl)
    return _decode(raw[context_from:begin], jsonl), _decode(raw[begin:stop], jsonl)


def _snap(raw: bytes, x: int, unit: int, last: int, jsonl: bool) -> int:
    """`x`, moved forward out of the JSON escape or UTF-8 sequence it falls inside (one that begins
    before x belongs to the text before x); `unit` is a position known to begin a character."""
    if jsonl:
        for m in _ESCAPE.finditer(raw, unit, min(len(raw), x + 12)):
            if m.start() >= x:
                break
            if m.end() > x:
                x = m.end()
                break
    while x < last and 0x80 <= raw[x] < 0xC0:
        x += 1
    return min(x, last)


def _decode(raw: bytes, jsonl: bool) -> str:
    text = raw.decode("utf-8", errors="replace")
    if jsonl and "\\" in text:
        try:
            text = json.loads('"' + text + '"', strict=False)
        except ValueError:
            pass
        text = _LONE_SURROGATE.sub("\ufffd", text)
    return text


def _line_text(raw: bytes, line: int | None, line_end: int | None, lo: int, options):
    """A text line's text span: the line without its newline, one CR before it or a BOM at byte 0."""
    first = 0 if line is None else line + (3 if lo + line == 0 and raw.startswith(b"\xef\xbb\xbf") else 0)
    last = None
    if line_end is not None:
        last = line_end - (raw[line_end - 1:line_end] == b"\n")
        last -= raw[last - 1:last] == b"\r" and last > first
    if line is None:
        first = _snap(raw, first, 0, len(raw) if last is None else last, False)
    return first, last, first, True


def _json_text(raw: bytes, line: int | None, line_end: int | None, lo: int, options):
    """The raw span of the line's text field's string (between its quotes), or None if the bytes
    read show none."""
    spans: list = []
    if line is not None:
        i = line + (3 if lo + line == 0 and raw.startswith(b"\xef\xbb\xbf", line) else 0)
        i = _WS.match(raw, i).end()
        if i < len(raw) and raw[i] == ord("{"):
            _string_values(raw, i + 1, "key", None, spans)
    else:
        _resume(raw, spans)
    named = [s for s in spans if s[0] == options.text_field]
    if named:
        return named[0][1], named[0][2], named[0][1], True
    unknown = [s for s in spans if s[0] is _UNKNOWN]
    return (unknown[0][1], unknown[0][2], unknown[0][1], False) if unknown else None


def _resume(raw: bytes, spans: list) -> None:
    """Follow a line's JSON from inside it: from the first byte known to begin a character up to the
    first unescaped quote, then each reading of that quote in turn (the end of a key or of a value
    we were in, or the start of a key or a value), keeping the first under which the rest of the
    bytes read parse as JSON."""
    s = _first_character(raw)
    if s >= len(raw) or raw[s] == ord("\n"):
        return
    q = _STRING_BODY.match(raw, s).end()
    if q >= len(raw) or raw[q] == ord("\\"):                # a string past the bytes read
        spans.append((_UNKNOWN, s, None))
        return
    if raw[q] != ord('"'):
        return                                               # the line ended: s was after its last string
    k = _WS.match(raw, q + 1).end()
    if raw[k:k + 1] == b":":                                 # we were in a key
        readings = [([], k + 1, "value", _UNKNOWN)]
    else:                                                    # or in a value
        readings = [([(_UNKNOWN, s, q)], q + 1, "after", None)]
    if _STRUCTURE.fullmatch(raw, s, q):                      # or between strings
        readings += [([], q, "value", _UNKNOWN), ([], q, "key", None)]
    for found, i, state, key in readings:
        if _string_values(raw, i, state, key, found):
            spans.extend(found)
            return
    spans.extend(readings[0][0])


def _first_character(raw: bytes) -> int:
    """The first position of raw that surely begins a character (`_starts_character`), or len(raw)."""
    s = 6
    while s < len(raw) and not _starts_character(raw, s):
        s += 1
    return s


def _starts_character(raw: bytes, y: int) -> bool:
    r"""Whether raw[y], inside a JSON string, surely begins a character (or an escape) other than a
    quote: not a UTF-8 continuation byte, not escaped by the backslash before it (a run of them of
    odd length), not one of the 4 hex digits of a `\u` escape nor the low half of a surrogate
    pair; False where a run of backslashes reaches the start of the bytes read.

    >>> [_starts_character(b'ab\\\\u0041zz', y) for y in (2, 3, 4, 5, 9)]
    [True, False, True, True, True]
    >>> [_starts_character(b'abc\\u0041zz', y) for y in (5, 8, 9)]
    [False, False, True]
    """
    if raw[y] in b'"\n' or 0x80 <= raw[y] < 0xC0:
        return False

    def escapes(p):                    # raw[p] is a backslash that begins an escape
        run = 0
        while p - run >= 0 and raw[p - run] == 0x5C:
            run += 1
        return None if p - run < 0 else run % 2 == 1
    if y >= 1 and raw[y - 1] == 0x5C and escapes(y - 1) is not False:
        return False
    for p in range(max(0, y - 5), y - 1):
        if raw[p] == 0x5C and raw[p + 1] == ord("u") and escapes(p) is not False:
            return False
    # an escape begins here, unless it is the low half of a surrogate pair
    return not (_LOW_SURROGATE.match(raw, y) and y >= 6 and _HIGH_SURROGATE.match(raw, y - 6))


def _string_values(raw: bytes, i: int, state: str, key, spans: list) -> bool:
    """Append (key, first, end) for each top-level string value of a JSON object line read from
    raw[i] in `state` ("key", "value" or "after" a value); end is None past the bytes read. Whether
    the bytes parsed as JSON up to the line's end or the end of the bytes read."""
    n = len(raw)
    while True:
        i = _WS.match(raw, i).end()
        if i >= n:
            return True
        c = raw[i]
        if c == ord("\n"):
            return state == "end"
        if state == "key":
            if c == ord("}"):
                i, state = i + 1, "end"
                continue
            if c != ord('"'):
                return False
            j = _STRING_BODY.match(raw, i + 1).end()
            if j >= n or raw[j] == ord("\\"):
                return True
            if raw[j] != ord('"'):
                return False
            try:
                key = json.loads(raw[i:j + 1].decode("utf-8", errors="replace"))
            except ValueError:
                return False
            i = _WS.match(raw, j + 1).end()
            if i >= n:
                return True
            if raw[i] != ord(":"):
                return False
            i, state = i + 1, "value"
        elif state == "value":
            if c == ord('"'):
                j = _STRING_BODY.match(raw, i + 1).end()
                closed = j < n and raw[j] == ord('"')
                spans.append((key, i + 1, j if closed else None))
                if not closed:
                    return j >= n or raw[j] == ord("\\")
                i = j + 1
            elif c in b"{[":
                depth = 0
                for m in _NESTED.finditer(raw, i):
                    token = m.group()
                    if token == b"\n":
                        return False
                    depth += token in (b"{", b"[")
                    depth -= token in (b"}", b"]")
                    if depth == 0:
                        i = m.end()
                        break
                else:
                    return True
            else:
                m = _SCALAR.match(raw, i)
                if not m:
                    return False
                i = m.end()
            state = "after"
        elif state == "after":
            if c == ord(","):
                i, state = i + 1, "key"
            elif c == ord("}"):
                i, state = i + 1, "end"
            else:
                return False
        else:
            return False


# ---------------------------------------------------------------------------- one record by offset

def offset_readable(shard: Shard, options: SourceOptions) -> bool:
    """Whether any byte of the shard can be read on its own, so a record can be found from an offset:
    an uncompressed JSONL file, or a text file of one record per line."""
    fmt = shard_format(shard, options)
    plain = not shard.relpath.lower().endswith(COMPRESSION_EXTENSIONS)
    return plain and (fmt == "jsonl" or (fmt == "txt" and options.text_unit == "line" and options.separator is None))


def record_at(f: BinaryIO, shard: Shard, options: SourceOptions, offset: int) -> tuple[int, Record | Rejected | None]:
    """The line of an `offset_readable` shard (open as `f`, seekable) that holds byte `offset`: its
    length in bytes with its newline, and its record as the shard's reader would give it (a Rejected
    record, or None for a blank line, which is no record). The row number is unknown here: 0."""
    start = _line_start(f, offset)
    f.seek(start)
    limit = options.max_record_bytes
    parts, length = [], 0
    while True:
        chunk = f.read(CHUNK_SIZE)
        if not chunk:
            break
        end = chunk.find(b"\n")
        piece = chunk if end < 0 else chunk[:end + 1]
        length += len(piece)
        if limit is None or length <= limit + 2:          # + the line's CRLF
            parts.append(piece)
        if end >= 0:
            break
    return length, line_record(b"".join(parts), start, shard, options)


def line_record(line: bytes, start: int, shard: Shard, options: SourceOptions) -> Record | Rejected | None:
    """The record of one whole line of an `offset_readable` shard (its bytes from `start`, with or
    without its newline), as the shard's reader would give it: a Rejected record, or None for a
    blank line. The row number is unknown here: 0."""
    raw = line.rstrip(b"\n").removesuffix(b"\r")
    if start == 0 and raw.startswith(BOM):
        raw = raw[len(BOM):]
    limit = options.max_record_bytes
    if limit is not None and len(raw) > limit:
        return too_large(Oversized(start, len(raw)), shard, 0, options)
    if not raw.strip():
        return None
    if shard_format(shard, options) == "jsonl":
        return jsonl_record(raw, start, 0, shard, options)
    try:
        text, repaired = _decode(raw, options)
    except UnicodeDecodeError as exc:
        return Rejected(shard.url, 0, INVALID_UTF8, utf8_detail(exc, f"at byte {start + exc.start} of the file"))
    return Record(f"{shard.relpath}:?", text, 0, repaired)


def _line_start(f: BinaryIO, offset: int) -> int:
    """The offset of the first byte of the line holding byte `offset`: just after the last newline
    before it, or 0."""
    end = offset
    while end > 0:
        begin = max(0, end - CHUNK_SIZE)
        f.seek(begin)
        found = f.read(end - begin).rfind(b"\n")
        if found >= 0:
            return begin + found + 1
        end = begin
    return 0

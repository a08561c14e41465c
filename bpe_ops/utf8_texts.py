"""Texts held as their UTF-8: one buffer and each text's offsets in it, no Python str per text.

A reader that has its texts' UTF-8 in hand (a JSONL line's string once unescaped, an Arrow string
column) keeps them this way, and the compiled encoder reads them as they are
(`TextEncoder.encode_measure_utf8`): making a str of each text, and the encoder making the str's
UTF-8 again, were two passes over every byte of a non-ASCII text for nothing. A text is made a str
only when something asks for it (`texts[k]`), which is what any other reader of the texts sees.

    >>> texts = Utf8Texts.of(["héllo", "", "wörld"])
    >>> len(texts), texts[0], list(texts[1:]), texts.chars.tolist()
    (3, 'héllo', ['', 'wörld'], [5, 0, 5])
    >>> texts.offsets.tolist(), bytes(texts.data)
    ([0, 6, 6, 12], b'h\\xc3\\xa9llow\\xc3\\xb6rld')
    >>> list(Utf8Texts.joined([texts[2:], texts[:1]])), Utf8Texts.joined([texts[2:], texts[:1]]).offsets.tolist()
    (['wörld', 'héllo'], [0, 6, 12])
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Utf8Texts(Sequence):
    """Texts as UTF-8: text k is `data[offsets[k]:offsets[k + 1]]`, with `chars[k]` characters.

    Args:
        data: a buffer holding the texts' bytes (bytes, an Arrow buffer: anything with the buffer
            protocol), valid UTF-8 (the reader has checked it; the encoder checks again and hands a
            text that is not back to its caller, whose `texts[k]` then raises).
        offsets: int64, one more than the texts, ascending: where each text starts in `data`, then
            where the last ends.
        chars: each text's characters (int64), or None to count them here on first use.
    """

    __slots__ = ("data", "offsets", "_chars")

    def __init__(self, data, offsets: np.ndarray, chars: np.ndarray | None = None):
        self.data = data
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        self._chars = None if chars is None else np.asarray(chars, dtype=np.int64)

    @classmethod
    def of(cls, texts: Sequence[str]) -> "Utf8Texts":
        """str texts as UTF-8 (a test's and a caller's way in; readers build theirs from what they read)."""
        encoded = [t.encode("utf-8") for t in texts]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        return cls(b"".join(encoded), offsets, np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))

    @classmethod
    def joined(cls, parts: Sequence["Utf8Texts"]) -> "Utf8Texts":
        """The texts of `parts`, in order, in one new buffer (one copy of their bytes)."""
        if len(parts) == 1:
            return parts[0]
        views = [memoryview(p.data)[p.offsets[0]:p.offsets[-1]] if len(p) else b"" for p in parts]
        offsets = np.zeros(sum(map(len, parts)) + 1, dtype=np.int64)
        at = base = 0
        for part in parts:
            n = len(part)
            offsets[at + 1:at + n + 1] = part.offsets[1:] - part.offsets[0] + base
            base += int(part.offsets[-1] - part.offsets[0])
            at += n
        return cls(b"".join(views), offsets, np.concatenate([p.chars for p in parts]) if parts else None)

    @property
    def chars(self) -> np.ndarray:
        """Each text's characters (int64): its bytes that are not UTF-8 continuation bytes."""
        if self._chars is None:
            # Only these texts' bytes (a slice's, not its whole buffer's): a running count of the
            # bytes that start a character, read at each offset.
            first, last = (int(self.offsets[0]), int(self.offsets[-1])) if len(self.offsets) else (0, 0)
            raw = np.frombuffer(self.data, dtype=np.uint8)[first:last]
            starts = np.zeros(len(raw) + 1, dtype=np.int64)
            np.cumsum((raw & 0xC0) != 0x80, out=starts[1:])
            self._chars = np.diff(starts[self.offsets - first])
        return self._chars

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, at):
        if isinstance(at, slice):
            start, stop, step = at.indices(len(self))
            if step != 1:
                raise ValueError("texts as UTF-8 are sliced with step 1")
            stop = max(start, stop)
            return Utf8Texts(self.data, self.offsets[start:stop + 1],
                             None if self._chars is None else self._chars[start:stop])
        if at < 0:
            at += len(self)
        if not 0 <= at < len(self):
            raise IndexError("text index out of range")
        return str(memoryview(self.data)[self.offsets[at]:self.offsets[at + 1]], "utf-8")

    def __iter__(self):
        view, offsets = memoryview(self.data), self.offsets.tolist()
        return (str(view[a:b], "utf-8") for a, b in zip(offsets, offsets[1:]))

    def __repr__(self) -> str:
        return f"Utf8Texts({list(self)!r})"

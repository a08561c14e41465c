"""Fuzz target: the hand-written splitter (`bpe_ops/_split_scan.h`, the cl100k family's 64-byte
windows among it) against its specification, PCRE2 running the same pattern alone. The first byte
picks a pattern of `SCANNED_PATTERNS`; the rest is the text, either each byte a piece of a mostly
ASCII alphabet (long runs of plain text with the bytes the windows leave to the scanner among them)
or, for an input whose second byte is odd, the bytes as UTF-8 (invalid ones as U+FFFD); the second
byte's next bits pick the instruction set the windows classify with (`_pcre2.batch_isa`: SSE2, and
AVX2 and AVX-512BW where the processor has them). A finding is any difference in pieces. Run from the worktree:

    mkdir -p /tmp/fuzz-split_scan && python3 tests/fuzz/fuzz_split_scan.py -max_total_time=600 \
        /tmp/fuzz-split_scan

(new corpus entries go to the first folder, crashing inputs to ./crash-*).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from bpe_ops import pretokenize
    from bpe_ops.pretokenize import SCANNED_PATTERNS

PATTERNS = sorted(SCANNED_PATTERNS)
# What each byte of a text of pieces stands for: mostly plain ASCII (whole windows of it), and the
# characters the windows leave to the byte-by-byte scanner.
ALPHABET = ["e", "t", "a", "Th", "is", "ing", "Z", "q", " ", " ", " ", "  ", "    ", ".", ",", "-", "(", ")",
            "?!", "_", "$", '"', "/", "'", "'s", "'T", "'ll", "'Re", "'ve", "'d", "'M", "'x", "0", "7", "12",
            "199", "2024", "123456", "\n", "\r\n", "\t", " \n", "\n    ", "\x0b", "\x0c", "\x00", "\x7f", "é",
            "ß", "中", "ア", "😀", "\xa0", "\u3000", "٣", "½", "\u0301", "’", "\u2028", "ſ", "Ⅻ", "ǅ", "A B", "x" * 70]
_COMPILED: dict = {}
_PCRE2 = pretokenize._pcre2_module()
_ISAS = _PCRE2.batch_isas()      # the processor's widest last


def _pieces(pattern: str, text: str, scan: bool) -> list[str]:
    key = (pattern, scan)
    if key not in _COMPILED:
        _COMPILED[key] = pretokenize._pcre2_module().Pattern("(*LF)" + pattern,
                                                             SCANNED_PATTERNS[pattern] if scan else None)
    return _COMPILED[key].findall(text)


def _kinds(pieces: list[str]) -> int:
    """A branch per kind of piece and of neighbouring pieces (its first and last characters' kinds,
    its length), so that libFuzzer, which sees this module's branches and not the C splitter's, keeps
    the inputs that split into pieces of a kind not seen before."""
    seen = 0
    before = ""
    for piece in pieces:
        first, last = piece[0], piece[-1]
        if first == "'":
            seen |= 1 if len(piece) <= 3 else 2
        elif first.isalpha():
            seen |= 4 if last.isalpha() else 8
        elif first.isdigit():
            seen |= 16 if len(piece) < 3 else 32
        elif first == " ":
            if len(piece) == 1:
                seen |= 64
            elif last == " ":
                seen |= 128
            elif last.isalpha():
                seen |= 256
            else:
                seen |= 512
        elif first in "\r\n":
            seen |= 1024 if last in "\r\n" else 2048
        elif first.isspace():
            seen |= 4096 if piece.strip() else 8192
        elif last in "\r\n":
            seen |= 16384
        elif last.isalpha():
            seen |= 32768
        elif ord(first) > 0x7F:
            seen |= 65536
        else:
            seen |= 131072
        if before.isspace() and first.isspace():
            seen |= 262144
        before = last
    return seen


def check(data: bytes) -> None:
    if len(data) < 2:
        return
    pattern, body = PATTERNS[data[0] % len(PATTERNS)], data[1:]
    if body[0] % 2:
        text = body[1:].decode("utf-8", "replace")
    else:
        text = "".join(ALPHABET[b % len(ALPHABET)] for b in body[1:])
    _PCRE2.batch_isa(_ISAS[(body[0] >> 1) % len(_ISAS)])
    try:
        scanned, expected = _pieces(pattern, text, True), _pieces(pattern, text, False)
    finally:
        _PCRE2.batch_isa(_ISAS[-1])
    if scanned != expected:
        raise AssertionError(f"{pattern!r} on {text!r}: scanned {scanned}, PCRE2 {expected}")
    _kinds(scanned)


if __name__ == "__main__":
    import atheris

    _kinds = atheris.instrument_func(_kinds)
    harness.fuzz(atheris.instrument_func(check))

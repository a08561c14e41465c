"""Fuzz target: the hand-written splitter (`bpe_ops/_split_scan.h`, the cl100k family's 64-byte
windows among it) against its specification, PCRE2 running the same pattern alone. The first byte
picks a pattern of `SCANNED_PATTERNS`; the rest is the text, either each byte a piece of a mostly
ASCII alphabet (long runs of plain text with the bytes the windows leave to the scanner among them)
or, for an input whose second byte is odd, the bytes as UTF-8 (invalid ones as U+FFFD). A finding is
any difference in pieces. Run from the worktree:

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


def _pieces(pattern: str, text: str, scan: bool) -> list[str]:
    key = (pattern, scan)
    if key not in _COMPILED:
        _COMPILED[key] = pretokenize._pcre2_module().Pattern("(*LF)" + pattern,
                                                             SCANNED_PATTERNS[pattern] if scan else None)
    return _COMPILED[key].findall(text)


def check(data: bytes) -> None:
    if len(data) < 2:
        return
    pattern, body = PATTERNS[data[0] % len(PATTERNS)], data[1:]
    if body[0] % 2:
        text = body[1:].decode("utf-8", "replace")
    else:
        text = "".join(ALPHABET[b % len(ALPHABET)] for b in body[1:])
    scanned, expected = _pieces(pattern, text, True), _pieces(pattern, text, False)
    if scanned != expected:
        raise AssertionError(f"{pattern!r} on {text!r}: scanned {scanned}, PCRE2 {expected}")


if __name__ == "__main__":
    harness.fuzz(check)

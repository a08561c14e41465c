"""Fuzz target: the PCRE2 guard's bitmap lookup (`_native.has_code_point_in`, which skips blocks of
characters below the lowest guarded code point) must say what a lookup of every character says
(the specification here), for any guarded set, texts of each width Python stores, and every
position of a guarded character. Run from the worktree:

    mkdir -p /tmp/fuzz-guard_bitmap && python3 tests/fuzz/fuzz_guard_bitmap.py -max_total_time=300 \
        /tmp/fuzz-guard_bitmap

(new corpus entries go to the first folder, crashing inputs to ./crash-*)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from bpe_ops import _native

WIDEST = (0x7F, 0xFF, 0xFFFF, 0x10FFFF)


def check(data: bytes) -> None:
    if len(data) < 2:
        return
    # Header: how many guarded code points (3 bytes each) follow, and the widest character of the text;
    # the rest are the text's code points, 3 bytes each.
    count, widest = data[0] % 8, WIDEST[data[1] % len(WIDEST)]
    points = [int.from_bytes(data[k:k + 3], "little") % 0x110000 for k in range(2, len(data) - 2, 3)]
    guarded, text = points[:count], "".join(chr(min(c, widest)) for c in points[count:])
    bits = bytearray(0x110000 // 8)
    for c in guarded:
        bits[c >> 3] |= 1 << (c & 7)
    expected = any(bits[ord(c) >> 3] >> (ord(c) & 7) & 1 for c in text)
    if _native.has_code_point_in(text, bytes(bits)) != expected:
        raise AssertionError(f"bitmap lookup wrong for guarded {guarded!r} in {text!r}")


if __name__ == "__main__":
    import atheris

    # The lookup is C, unseen by the fuzzer: the check's own branches (guarded set, width, answer) guide it.
    harness.fuzz(atheris.instrument_func(check))

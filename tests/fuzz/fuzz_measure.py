"""Fuzz target: a batch's measures taken in C (`_native.measure_texts` through `stats.measure_batch`,
and the encoder's `encode_measure_texts`, which measures each text in the pass that encodes it) must
equal their Python specification (`record_stats` and `digit_runs`): UTF-8 bytes, whitespace words and
runs of ASCII digits, over texts mostly of ASCII letters and white space (which the C measures eight
bytes at a time), digits, wide separators and their look-alikes, and lone surrogates. And the input's
own bytes given as UTF-8 (`encode_measure_utf8`, any bytes) must encode and measure as their str does,
a text that is not UTF-8 handed back. Run from the worktree:

    mkdir -p /tmp/fuzz-measure && python3 tests/fuzz/fuzz_measure.py -max_total_time=600 /tmp/fuzz-measure

(new corpus entries go to the first folder, crashing inputs to ./crash-*)."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from bpe_ops import stats
    from bpe_ops.trainer import train_bpe

# What a byte of the input stands for: mostly the bytes themselves (ASCII), and below 0x20 and above
# 0x7e some characters the measures treat apart. A byte 0xff ends a text.
SPECIAL = ["\u3000", "\u00a0", "\u2003", "\u2019", "\u00e9", "\ud800", "\U0001f600", "\u0085", "\u1680",
           "\u202f", "\u200b", "\u00c2", "\u3001", "\u0663"]


def texts_of(data: bytes) -> list[str]:
    texts, chars = [], []
    for b in data:
        if b == 0xFF:
            texts.append("".join(chars))
            chars = []
        elif b >= 0x7F:
            chars.append(SPECIAL[b % len(SPECIAL)])
        else:
            chars.append(chr(b))
    texts.append("".join(chars))
    return texts


_TOKENIZER = None


def tokenizer():
    """A small byte-level tokenizer: its encoder's measures are checked beside `measure_texts`'."""
    global _TOKENIZER
    if _TOKENIZER is None:
        _TOKENIZER = train_bpe(["the quick brown fox 12 jumps over the lazy dog\t\n"] * 3, 300)
    return _TOKENIZER


def check(data: bytes) -> None:
    texts = texts_of(data)
    id_lists = [[0] * (len(t) % 4) for t in texts]
    spec = ([list(col) for col in zip(*(stats.record_stats(t, ids) for t, ids in zip(texts, id_lists)))],
            [list(stats.digit_runs(t)) for t in texts])
    got, runs = stats.measure_batch(texts, id_lists)
    if ([list(col) for col in got], runs.tolist()) != spec:
        raise AssertionError(f"the compiled measures differ from the specification on {texts!r}")
    check_utf8(data)
    arrays, measured = tokenizer().encode_measured_in_thread(texts, *stats.MEASURE_SEPARATORS)
    if measured is not None:
        got, runs = stats.measure_batch(texts, arrays, measured)
        want, want_runs = stats.measure_batch(texts, arrays)
        if [c.tolist() for c in got] != [c.tolist() for c in want] or runs.tolist() != want_runs.tolist():
            raise AssertionError(f"the measures taken while encoding differ on {texts!r}")


def check_utf8(data: bytes) -> None:
    """The input's bytes as texts given as UTF-8 (split at 0xFF, any bytes: `encode_measure_utf8`):
    a text that is UTF-8 gets the ids, count and measures its str gets from `encode_measure_texts`;
    any other is handed back (-1) and adds no id."""
    encoder = tokenizer()._text_encoder
    if encoder is None:
        return
    raw = data.split(b"\xff")
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in raw])]).astype(np.int64)
    ids, counts, table = encoder.encode_measure_utf8(b"".join(raw), offsets, *stats.MEASURE_SEPARATORS)
    decoded = []
    for r in raw:
        try:
            decoded.append(r.decode("utf-8"))
        except UnicodeDecodeError:
            decoded.append(None)
    # The str of each text that is UTF-8; an empty one for any other (no id, its row set to -1 below).
    want_ids, want_counts, want_table = encoder.encode_measure_texts([t or "" for t in decoded],
                                                                     *stats.MEASURE_SEPARATORS)
    invalid = np.array([t is None for t in decoded])
    want_counts = np.where(invalid, -1, np.frombuffer(want_counts, np.int64))
    table = np.frombuffer(table, np.int64).reshape(-1, 7)
    want_table = np.frombuffer(want_table, np.int64).reshape(-1, 7)
    if (ids != want_ids or np.frombuffer(counts, np.int64).tolist() != want_counts.tolist()
            or table[~invalid].tolist() != want_table[~invalid].tolist() or (table[invalid, 0] != -1).any()):
        raise AssertionError(f"the texts given as UTF-8 encode differently from their str on {raw!r}")


if __name__ == "__main__":
    if stats._MEASURE_TEXTS is None:
        sys.exit("fuzz_measure: bpe_ops._native is not built")
    harness.fuzz(check)

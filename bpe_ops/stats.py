"""Per-record statistics and the mergeable, exact dataset summary behind `stats.json`.

A `Summary` holds only integer counts and exact tables (tokens per record -> records, token id ->
occurrences, ...), never floats or samples, so merging summaries is exact, associative and
commutative: the tokenize pipeline can use it as the accumulator of a Beam CombineFn and get the same
`stats.json` on any runner, whatever the bundle split or shard order. Floats (means, ratios) are
computed once, when `schemas.stats.stats_json` lays the summary out as stats.json (the layout, its
fixed histogram bins and its version live there; bpe_ops imports no schemas).

What calibrated drift verdicts need (the record is the sampling unit) is kept the same way, for the
records whose token ids and record id are given (`add_batch(..., record_ids=, id_arrays=)`):

- moments: per-record sums and sums of products of tokens, bytes, chars, words and raw-byte tokens
  (`MOMENT_VARIABLES`): enough for the delta-method variance of any ratio of two of them;
- random groups: every record falls in group `record_group(record id)` (crc32 of its UTF-8 id mod
  `REPLICATE_GROUPS`: stable across processes, unlike Python's salted `hash`), and each group keeps
  its records, tokens, tokens-per-record and bytes-per-token tables and token counts per id class
  (`id_classes`: ids below `EXACT_ID_CLASSES` each their own class, higher ids folded). Each group
  is a replicate of the whole sample, from which the spread of PSI and Jensen-Shannon divergence
  under "no drift" is estimated;
- number formats: how many ASCII digit runs of each length (1, 2, 3, 4, 5 or more digits) each
  group's records hold (`digit_runs`), given with the batch (`add_batch(..., digit_runs=)`): a
  change in how numbers are written (thousands separators, digit grouping, zero padding) moves this
  histogram a lot even where it barely moves any token figure.
"""
from __future__ import annotations

import re
import threading
import zlib
from array import array
from bisect import bisect_right
from collections import Counter
from functools import partial
from operator import add, mul
from typing import Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from .flat_ids import FlatIds
from .pretokenize import to_utf8
from .utf8_texts import Utf8Texts

MOMENT_VARIABLES = ("tokens", "bytes", "chars", "words", "raw_byte_tokens")
# Upper triangle (i <= j) of the products of MOMENT_VARIABLES, row by row.
MOMENT_PAIRS = tuple((i, j) for i in range(len(MOMENT_VARIABLES)) for j in range(i, len(MOMENT_VARIABLES)))

# 32 random groups: enough replicates for a stable spread (the split-half null of pipelines/drift.py
# draws from C(32, 16) halves per side), few enough that a small sample still puts a record or
# more in most groups and that K copies of the per-group tables stay small.
REPLICATE_GROUPS = 32
DIGIT_RUN_LENGTHS = 5            # runs of 1, 2, 3, 4 and 5+ digits
_DIGIT_RUN = re.compile(r"[0-9]+")
_DIGIT_RUN_BYTES = re.compile(rb"[0-9]+")
_DIGIT_FLAGS = bytes(48 <= b <= 57 for b in range(256))
# Token-id classes kept per group. Dense per-id counts for each group would be groups x vocabulary
# (6.4 M counts for a 200k vocabulary): too big for stats.json and for pickling every shard's
# summary. A top-N set of the data's own most frequent ids cannot be used either: it differs from
# shard to shard, so the merge would no longer be exact. Classes are fixed by the id alone: BPE ids
# are in merge order, so the first ids (bytes and early merges) carry most tokens of in-domain text
# and keep a class each; later merges are folded by id modulo FOLDED_ID_CLASSES, which keeps part
# of a shift into late merges visible where a single "other" bin would hide it.
EXACT_ID_CLASSES = 2048
FOLDED_ID_CLASSES = 2048


def digit_runs(text: str | bytes) -> tuple[int, ...]:
    """How many runs of ASCII digits of each length a text holds: (1, 2, 3, 4, 5+ digits). Bytes
    are read the same way (a record rebuilt from its token ids).

    >>> digit_runs("In 1865, 3 of 65536 cases"), digit_runs(b"65,536")
    ((1, 0, 0, 1, 1), (0, 1, 1, 0, 0))
    """
    pattern = _DIGIT_RUN_BYTES if isinstance(text, bytes) else _DIGIT_RUN
    counts = [0] * DIGIT_RUN_LENGTHS
    for run in pattern.findall(text):
        counts[min(len(run), DIGIT_RUN_LENGTHS) - 1] += 1
    return tuple(counts)


def digit_runs_batch(texts: Sequence[str | bytes]) -> np.ndarray:
    """`digit_runs` of every text of a batch as an (n, 5) array, in one numpy pass over the joined
    batch instead of a regex scan per record (several times faster on long records).

    >>> digit_runs_batch(["In 1865, 3 of 65536", b"65,536", ""]).tolist()
    [[1, 0, 0, 1, 1], [0, 1, 1, 0, 0], [0, 0, 0, 0, 0]]
    """
    out = np.zeros((len(texts), DIGIT_RUN_LENGTHS), dtype=np.int64)
    if not len(texts):
        return out
    blobs = [t.encode("utf-8", "surrogatepass") if isinstance(t, str) else bytes(t) for t in texts]
    # One flag byte per text byte (1 for an ASCII digit), a 0 between texts ending any run: two
    # copies of the batch's bytes at most, whatever the record sizes.
    flags = np.frombuffer(b"\x00".join(blobs).translate(_DIGIT_FLAGS), dtype=np.bool_)
    if not flags.any():
        return out
    changes = np.flatnonzero(flags[1:] != flags[:-1]) + 1
    starts, ends = changes[flags[changes]], changes[~flags[changes]]
    if flags[0]:
        starts = np.concatenate(([0], starts))
    if flags[-1]:
        ends = np.concatenate((ends, [len(flags)]))
    text_ends = np.cumsum([len(b) + 1 for b in blobs])
    owners = np.searchsorted(text_ends, starts, side="right")
    np.add.at(out, (owners, np.minimum(ends - starts, DIGIT_RUN_LENGTHS) - 1), 1)
    return out


def record_group(record_id: str, groups: int = REPLICATE_GROUPS) -> int:
    """The random group of a record: crc32 of its UTF-8 id modulo `groups` (lone surrogates kept as
    their surrogatepass bytes). Stable across processes and machines, unlike `hash(str)`.

    >>> record_group("man/man1/ls.1")
    17
    """
    return zlib.crc32(record_id.encode("utf-8", "surrogatepass")) % groups


def record_groups(record_ids: Sequence[str], groups: int = REPLICATE_GROUPS) -> np.ndarray:
    """`record_group` of each id, as int32: in one compiled call where `_native` is built (no bytes
    object and call per id: the encoding threads hold the GIL for it), else id by id.

    >>> record_groups(["man/man1/ls.1", "r:12"]).tolist()
    [17, 31]
    """
    if _RECORD_GROUPS is not None:
        try:
            return np.frombuffer(_RECORD_GROUPS(record_ids, groups), dtype=np.int32)
        except TypeError:           # an id that is not a str: record_group says what it makes of it
            pass
    return np.array([record_group(r, groups) for r in record_ids], dtype=np.int32)


def id_class_count(vocab_size: int) -> int:
    """How many token-id classes a vocabulary has: every id its own class up to
    EXACT_ID_CLASSES + FOLDED_ID_CLASSES ids (4,096), that many classes above."""
    return min(vocab_size, EXACT_ID_CLASSES + FOLDED_ID_CLASSES)


def id_classes(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """The class of each token id: the id itself below EXACT_ID_CLASSES (or for a vocabulary of at
    most 4,096 ids), else EXACT_ID_CLASSES + (id - EXACT_ID_CLASSES) mod FOLDED_ID_CLASSES.

    >>> id_classes(np.array([5, 2048, 4096, 6144]), 8192).tolist()
    [5, 2048, 2048, 2048]
    """
    ids = np.asarray(ids, dtype=np.int64)
    if vocab_size <= EXACT_ID_CLASSES + FOLDED_ID_CLASSES:
        return ids
    return np.where(ids < EXACT_ID_CLASSES, ids, EXACT_ID_CLASSES + (ids - EXACT_ID_CLASSES) % FOLDED_ID_CLASSES)


def folded_classes(ids: np.ndarray, fold: int, vocab_size: int) -> np.ndarray:
    """The classes `calibrate_ids` gives ids when told the int `fold` (F, a power of two) for classes:
    each id its own class below F or in a vocabulary of at most 2F ids, else F + id mod F. With F =
    EXACT_ID_CLASSES = FOLDED_ID_CLASSES (`ID_CLASS_FOLD`) these are `id_classes`, computed where a
    table would be read.

    >>> folded_classes(np.array([5, 2048, 4096, 6145]), 2048, 8192).tolist()
    [5, 2048, 2048, 2049]
    """
    ids = np.asarray(ids, dtype=np.int64)
    if fold <= 0 or fold & (fold - 1):
        raise ValueError("calibrate_ids: folded classes need a power of two")
    if vocab_size <= 2 * fold:
        return ids
    return np.where(np.less(ids, fold), ids, fold + ids % fold)


# The folded classes' F for `calibrate_ids` when `id_classes` can be computed that way, else None.
ID_CLASS_FOLD = EXACT_ID_CLASSES if EXACT_ID_CLASSES == FOLDED_ID_CLASSES else None

_CLASS_TABLES: dict[int, np.ndarray] = {}


def id_class_table(vocab_size: int) -> np.ndarray:
    """`id_classes` of every id of the vocabulary, as one int32 lookup table (cached per size):
    `id_class_table(v)[ids]` is `id_classes(ids, v)` in one gather over a table that stays in
    cache, instead of four passes of int64 arithmetic over the ids.

    >>> id_class_table(8192)[[5, 2048, 4096, 6144]].tolist()
    [5, 2048, 2048, 2048]
    """
    table = _CLASS_TABLES.get(vocab_size)
    if table is None:
        table = _CLASS_TABLES[vocab_size] = id_classes(np.arange(vocab_size), vocab_size).astype(np.int32)
    return table


def length_key(n_tokens: int) -> int:
    """A record length rounded down to three significant bits (0..7 exact; 8, 10, 12, 14, 16, 20,
    ...): what the random groups keep of tokens per record. Every edge of the stats.json histogram
    (0, 1, 2**k and 3 * 2**(k-1)) has three significant bits or fewer, so binning the rounded value
    gives the same bin as binning the exact one.

    >>> [length_key(n) for n in (7, 9, 13, 1000)]
    [7, 8, 12, 896]
    """
    shift = max(0, n_tokens.bit_length() - 3)
    return n_tokens >> shift << shift


def single_byte_ids(vocab: Mapping[int, bytes]) -> tuple[int, ...]:
    """The ids of a vocabulary's single-byte tokens (the raw-byte tokens of byte-level BPE), sorted.
    The lengths of all tokens are taken in one pass at C speed (a 131k vocabulary in milliseconds)."""
    ids = np.fromiter(vocab.keys(), dtype=np.int64, count=len(vocab))
    lengths = np.fromiter(map(len, vocab.values()), dtype=np.int64, count=len(vocab))
    return tuple(np.sort(ids[lengths == 1]).tolist())


CALIBRATION_CHUNK = 1 << 20     # token ids of one record calibrated at a time


def record_ids_view(ids) -> np.ndarray:
    """One record's token ids as a numpy array without a copy where they are a uint32 `array`.

    >>> record_ids_view(array("I", [3, 4])).tolist()
    [3, 4]
    """
    if isinstance(ids, array) and ids.typecode == "I":
        return np.frombuffer(ids, dtype=np.uint32) if len(ids) else np.zeros(0, dtype=np.uint32)
    return np.asarray(ids, dtype=np.int64).reshape(-1)


def _id_runs(id_arrays: Sequence, n_tokens: Sequence[int], chunk: int = CALIBRATION_CHUNK):
    """The ids of a batch in runs of at most `chunk` ids: (record index of each id, the ids). Short
    records share a run (one numpy pass for many records), a long one is cut into several, so no run
    costs more than `chunk` ids of memory however long a record is.

    >>> [(o.tolist(), f.tolist()) for o, f in _id_runs([[1, 2], [3], [4, 5, 6]], [2, 1, 3], chunk=3)]
    [([0, 0, 1], [1, 2, 3]), ([2, 2, 2], [4, 5, 6])]
    """
    owners, pieces, held = [], [], 0
    for i, (ids, length) in enumerate(zip(id_arrays, n_tokens)):
        ids = record_ids_view(ids)
        if len(ids) != length:
            raise ValueError(f"a record's id array holds {len(ids)} ids, its n_tokens says {length}")
        for start in range(0, len(ids), chunk):
            piece = ids[start:start + chunk]
            if held + len(piece) > chunk and pieces:
                yield np.repeat(np.asarray(owners, dtype=np.int64), [len(p) for p in pieces]), np.concatenate(pieces)
                owners, pieces, held = [], [], 0
            owners.append(i)
            pieces.append(piece)
            held += len(piece)
    if held:
        yield np.repeat(np.asarray(owners, dtype=np.int64), [len(p) for p in pieces]), np.concatenate(pieces)


def calibrate_ids(runs, rows: np.ndarray, mask: np.ndarray, classes: np.ndarray, raw: np.ndarray,
                  cells: np.ndarray, counts: np.ndarray | None = None) -> bytes:
    """The calibration counts of a batch's ids, given in `_id_runs` runs (record index of each id,
    the ids): `raw[i]` += the ids of record i with `mask[id]` set, `cells[rows[i] + classes[id]]` += 1
    per id, and `counts[id]` += 1 per id when `counts` is given; returns the indexes of the cells that
    were zero and are no longer (int64 bytes, ascending), or b"" when `counts` and `cells` are uint32
    (a thread's `Tallies`, whose caller keeps each counter below 2**32). `classes` is a class per id
    (`id_class_table`), or an int F, a power of two: the folded classes (`folded_classes`). The
    specification of `_native.calibrate_ids` (which takes each record's uint32 ids, makes one pass
    without the GIL and gives the same indexes in the order it first counted them). ValueError for
    an id outside the vocabulary (`len(mask)`).

    >>> raw, cells = np.zeros(2, np.int64), np.zeros(6, np.int64)
    >>> new = calibrate_ids(_id_runs([[0, 2], [2]], [2, 1]), np.array([0, 3]), np.array([1, 0, 0], np.uint8),
    ...                     np.array([0, 1, 2], np.int32), raw, cells)
    >>> raw.tolist(), cells.tolist(), np.frombuffer(new, np.int64).tolist()
    ([1, 0], [1, 0, 1, 0, 0, 1], [0, 2, 5])
    """
    narrow = counts is not None and counts.dtype == np.uint32     # a thread's tallies: cells uint32 too
    zero = np.equal(cells, 0)      # np.equal, not `==`: the fuzz target's instrumented `==` leaks its array
    for owners, flat in runs:
        if int(flat.min()) < 0 or int(flat.max()) >= len(mask):
            raise ValueError(f"token id outside the vocabulary (size {len(mask)})")
        raw += np.bincount(owners[mask[flat].astype(bool)], minlength=len(raw))
        of_ids = folded_classes(flat, classes, len(mask)) if isinstance(classes, int) else classes[flat]
        np.add(cells, np.bincount(rows[owners] + of_ids, minlength=len(cells)), out=cells, casting="unsafe")
        if counts is not None:
            np.add(counts, np.bincount(flat, minlength=len(counts)), out=counts, casting="unsafe")
    if narrow:
        return b""
    return np.flatnonzero(zero & np.not_equal(cells, 0)).astype(np.int64).tobytes()


WORD_COUNT_CHUNK = 1 << 20      # characters split at a time: a long record is never split whole


def count_words(text: str, chunk: int = WORD_COUNT_CHUNK) -> int:
    """Whitespace-separated words (Python's `str.split()`: any Unicode whitespace separates), counted
    a chunk at a time so that a long record costs no list of all its words; a word cut by a chunk
    boundary is counted once.

    >>> count_words("a bc  d"), count_words("a bc  d", chunk=2)
    (3, 3)
    """
    if len(text) <= chunk:
        return len(text.split())
    words, previous_ends_in_word = 0, False
    for start in range(0, len(text), chunk):
        piece = text[start:start + chunk]
        words += len(piece.split())
        if previous_ends_in_word and not piece[0].isspace():
            words -= 1                 # one word across the boundary, counted in both pieces
        previous_ends_in_word = not piece[-1].isspace()
    return words


# What `str.split()` separates on (`str.isspace`, Python 3.11): ASCII 9-13, 28-31 and 32, and
# these non-ASCII characters (`tests/bpe_ops/test_stats.py` checks the list against every code point).
UNICODE_SPACES = "\x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
# The UTF-8 encodings of the non-ASCII separators (2 or 3 bytes each).
_WIDE_SPACES = tuple(c.encode() for c in UNICODE_SPACES)
# Per byte of UTF-8: 1 an ASCII separator, 2 the lead byte of a non-ASCII separator's encoding.
_SPACE_CLASSES = bytes(1 if b < 128 and chr(b).isspace() else 2 if b in {w[0] for w in _WIDE_SPACES} else 0
                       for b in range(256))


def count_words_batch(texts: Sequence[str]) -> list[int]:
    """`count_words` of every text of a batch, in numpy passes over the joined UTF-8 of the batch
    (most of them without the GIL) instead of one `str.split` per record: a word starts at every
    non-separator byte that follows a separator (or starts a text). Continuation bytes belong to
    their character; a non-ASCII separator is found from its lead byte and marked whole. Memory:
    a few copies of the batch's bytes, whatever the record sizes.

    >>> count_words_batch(["a bc  d", "", "x\u3000y\u00a0z \u00e9", "\x1ca\x1fb"])
    [3, 0, 4, 2]
    """
    if not len(texts):
        return []
    blobs = [t.encode("utf-8", "surrogatepass") for t in texts]
    # Each text followed by a separator (it ends the text's last word), and two more bytes so that
    # a lead byte at the very end can be read with the two after it.
    data = b" ".join(blobs) + b"   "
    classes = np.frombuffer(data.translate(_SPACE_CLASSES), dtype=np.uint8)
    space = classes == 1
    leads = np.flatnonzero(classes == 2)
    if len(leads):
        raw = np.frombuffer(data, dtype=np.uint8)
        following = [raw[leads + k] for k in range(3)]        # each lead byte and the two after it
        for sep in _WIDE_SPACES:
            at = leads[np.logical_and.reduce([following[k] == sep[k] for k in range(len(sep))])]
            for k in range(len(sep)):
                space[at + k] = True
    starts = ~space
    starts[1:] &= space[:-1]
    offsets = np.zeros(len(blobs), dtype=np.int64)
    np.cumsum([len(b) + 1 for b in blobs[:-1]], out=offsets[1:])
    return np.add.reduceat(starts, offsets, dtype=np.int64).tolist()


def utf8_length(text: str) -> int:
    """UTF-8 bytes of `text` as the pipelines write it: each lone surrogate counts as U+FFFD (3 bytes).
    An ASCII string (`str.isascii` is O(1)) is its own length; others are counted without an encoded
    copy where `bpe_ops._pcre2` is built (`_utf8_length_python` is the specification)."""
    return len(text) if text.isascii() else _utf8_length(text)


def _utf8_length_python(text: str) -> int:
    return len(to_utf8(text))


def _compiled_utf8_length():
    try:
        from ._native import utf8_length     # needs no PCRE2
    except ImportError:
        return _utf8_length_python
    return utf8_length


_utf8_length = _compiled_utf8_length()


def record_stats(text: str, ids: Sequence[int]) -> tuple[int, int, int, int]:
    """`(n_tokens, n_bytes, n_chars, n_words)` of one record.

    n_bytes counts UTF-8 bytes with each lone surrogate as U+FFFD (3 bytes), as the pipelines
    write text; n_chars counts code points.
    """
    return len(ids), utf8_length(text), len(text), count_words(text)


def batch_stats(texts: Sequence[str], id_lists: Sequence[Sequence[int]]
                ) -> tuple[list[int], list[int], list[int], list[int]]:
    """`record_stats` of every record of a batch, as four columns `(n_tokens, n_bytes, n_chars,
    n_words)`: the same figures, with the per-record work left to builtins mapped over the batch."""
    return (list(map(len, id_lists)), list(map(utf8_length, texts)), list(map(len, texts)),
            count_words_batch(texts))


def measure_batch(texts: Sequence[str], id_arrays: Sequence[Sequence[int]],
                  measured: bytes | None = None) -> tuple[tuple, np.ndarray]:
    """`(batch_stats(texts, id_arrays), digit_runs_batch(texts))`, the same figures, each column an
    int64 array (the pipeline adds them to its row groups and summary with no Python int per record).
    Where `bpe_ops._native` is built, one pass over each text's UTF-8 in C without the GIL, which the
    tokenize pipeline's encoding threads otherwise held for the numpy passes of those two.
    `measured`: the texts' measures taken as they were encoded (`Tokenizer.encode_measured_in_thread`:
    per text, 7 native int64, its UTF-8 bytes, words and digit runs; -1 bytes for a text it left).

    >>> stats, runs = measure_batch(["In 1865,\u3000 3 of 65536"], [[1, 2, 3]])
    >>> [column.tolist() for column in stats], runs.tolist()
    ([[3], [22], [20], [5]], [[1, 0, 0, 1, 1]])
    """
    n = len(texts)
    chars = texts.chars if isinstance(texts, Utf8Texts) else np.fromiter(map(len, texts), dtype=np.int64, count=n)
    if measured is not None:
        table = np.frombuffer(measured, dtype=np.int64).reshape(n, 2 + DIGIT_RUN_LENGTHS)
        if n == 0 or table[:, 0].min() >= 0:
            return (id_count_column(id_arrays), table[:, 0].copy(), chars, table[:, 1].copy()), \
                np.ascontiguousarray(table[:, 2:])
    if isinstance(texts, Utf8Texts):
        texts = list(texts)             # the passes below read str
    if _MEASURE_TEXTS is None:
        return tuple(map(count_column, batch_stats(texts, id_arrays))), digit_runs_batch(texts)
    n_bytes, n_words, runs = _MEASURE_TEXTS(texts, _SPACE_CLASSES, _WIDE_SPACES)
    stats = (id_count_column(id_arrays), count_column(n_bytes), chars, count_column(n_words))
    return stats, np.frombuffer(runs, dtype=np.int64).reshape(n, DIGIT_RUN_LENGTHS)


def id_count_column(id_arrays: Sequence[Sequence[int]] | FlatIds) -> np.ndarray:
    """How many ids each record has, as an int64 array: a `FlatIds` batch's counts as they are (no
    copy), else each record's length.

    >>> id_count_column([[1, 2], []]).tolist(), id_count_column(FlatIds.of([[1, 2], []])).tolist()
    ([2, 0], [2, 0])
    """
    if isinstance(id_arrays, FlatIds):
        return id_arrays.counts.astype(np.int64, copy=False)
    return np.fromiter(map(len, id_arrays), dtype=np.int64, count=len(id_arrays))


def _native_function(name: str):
    """`bpe_ops._native`'s function `name` (it needs no PCRE2), or None where it is not built (then
    the Python specification beside each use computes the same)."""
    try:
        from . import _native
    except ImportError:
        return None
    return getattr(_native, name, None)


def _measure_texts():
    """The compiled `_native.measure_texts`, or None where bpe_ops._native is not built."""
    return _native_function("measure_texts")


def _calibrate_ids():
    """The compiled `_native.calibrate_ids`, or None where bpe_ops._native is not built (then
    `Summary.batch_calibration`'s numpy passes, its specification, count the same cells)."""
    return _native_function("calibrate_ids")


# Looked up once, not per batch.
_MEASURE_TEXTS = _measure_texts()
_RECORD_GROUPS = _native_function("record_groups")
_CALIBRATE_IDS = _calibrate_ids()
_CALIBRATE_FLAT = _native_function("calibrate_flat")    # the same, over a FlatIds batch's one buffer
MEASURE_SEPARATORS = (_SPACE_CLASSES, _WIDE_SPACES)     # the word separators the compiled measures read
_SCRATCH = threading.local()


def _scratch_cells(size: int) -> np.ndarray:
    """This thread's table of `size` int64 zeros, reused from batch to batch (its user leaves it zero)."""
    cells = getattr(_SCRATCH, "cells", None)
    if cells is None or len(cells) != size:
        cells = _SCRATCH.cells = np.zeros(size, dtype=np.int64)
    return cells


def token_label(token: bytes) -> str:
    """A readable, unambiguous label for token bytes: `repr` of the text when the bytes are valid
    UTF-8 (`' the'`, `'é'`, `'\\n'`), else `repr` of the bytes (`b'\\xe2\\x80'`, a partial character)."""
    try:
        return repr(token.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(token)


def nearest_rank(table: Mapping[int, int], percent: int) -> int | None:
    """Exact nearest-rank quantile of the values of a `{value: count}` table.

    The p-th percentile is the smallest value v such that at least ceil(p/100 * N) of the N values
    are <= v (so p50 of [1, 2, 3, 4] is 2, p100 is the maximum). Integer arithmetic: no rounding.
    None for an empty table.
    """
    n = sum(table.values())
    if n == 0:
        return None
    rank = max(1, -(-percent * n // 100))
    seen = 0
    for value in sorted(table):
        seen += table[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable: rank <= n")


def bin_counts(table: Mapping[int, int], edges: Sequence[int]) -> list[int]:
    """Counts of a `{value: count}` table in bins [edges[i], edges[i+1]); the last bin is open."""
    counts = [0] * len(edges)
    for value, n in table.items():
        counts[bisect_right(edges, value) - 1] += n
    return counts


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def _group_sums(group: np.ndarray, values: np.ndarray) -> tuple[list, list, list]:
    """The groups present, each one's record count and sum of `values` (int64, exact below 2**63).

    >>> _group_sums(np.array([3, 1, 3]), np.array([10, 20, 30]))
    ([1, 3], [1, 2], [20, 40])
    """
    small = len(group) and int(group.min()) >= 0 and int(group.max()) < 256
    # Stable, so each group's values keep their order; on one byte a group numpy sorts by radix.
    order = np.argsort(group.astype(np.uint8) if small else group, kind="stable")
    ordered = group[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sums = np.add.reduceat(values[order], starts) if len(values) else values
    return ordered[starts].tolist(), np.diff(np.r_[starts, len(group)]).tolist(), sums.tolist()


def _add_pairs(tables: list[dict[int, int]], group: np.ndarray, keys: np.ndarray) -> None:
    """tables[g][key] += 1 for each (g, key) pair of the two columns (keys >= 0, below 2**55), a dict
    update per distinct pair."""
    if not len(group):
        return
    pairs, counts = np.unique(group << 55 | keys, return_counts=True)
    for pair, count in zip(pairs.tolist(), counts.tolist()):
        table = tables[pair >> 55]
        key = pair & ((1 << 55) - 1)
        table[key] = table.get(key, 0) + count


def _tally(table: dict[int, int], values: Iterable[int]) -> None:
    """Add one occurrence of each of `values` (ints, or an int64 array) to a `{value: count}` table:
    a dict update per distinct value.

    >>> t = {2: 1}; _tally(t, np.array([2, 5, 2])); t
    {2: 3, 5: 1}
    """
    if isinstance(values, np.ndarray):
        distinct, counts = np.unique(values, return_counts=True)
        pairs = zip(distinct.tolist(), counts.tolist())
    else:
        pairs = Counter(values).items()
    for value, n in pairs:
        table[value] = table.get(value, 0) + n


def count_column(values: Sequence[int]) -> np.ndarray:
    """A column of per-record counts as int64 (an int64 array as it is): counts of one record's
    tokens, bytes, characters or words are far below 2**63, where a larger value raises OverflowError.

    >>> count_column([3, 0]).dtype, count_column(np.arange(2)).tolist()
    (dtype('int64'), [0, 1])
    """
    return np.asarray(values, dtype=np.int64)


def exact_sum(column: np.ndarray) -> int:
    """The sum of a column of non-negative int64 counts as a Python int: summed in int64 where no
    partial sum can pass 2**63, else in Python ints.

    >>> exact_sum(np.array([2**62, 2**62, 2**62]))
    13835058055282163712
    """
    if not len(column):
        return 0
    if int(column.max()) * len(column) < 1 << 63:
        return int(column.sum())
    return sum(column.tolist())


def _error_key(error: dict) -> tuple:
    return error["source"], error["rows_read"], error["reason"], error["detail"]


class BatchCalibration(NamedTuple):
    """`Summary.batch_calibration` of a batch of `records` records: each record's random group and
    raw-byte tokens, and the batch's token counts per (group, id class), sparse: the flat indexes of
    the cells of the group x class table that hold counts (each once) and those counts."""
    records: int
    vocab_size: int
    groups: np.ndarray                          # int64, a record each
    raw_byte_tokens: np.ndarray                 # int64, a record each
    cells: tuple[np.ndarray, np.ndarray]

    @classmethod
    def joined(cls, calibrations: Sequence["BatchCalibration"]) -> "BatchCalibration":
        """The calibration of consecutive batches as one batch: their records in order, the counts of
        a cell two of them hold added (each cell still once).

        >>> a = BatchCalibration(1, 9, np.array([3]), np.array([0]), (np.array([4]), np.array([2])))
        >>> b = BatchCalibration(2, 9, np.array([5, 3]), np.array([1, 0]), (np.array([7, 4]), np.array([1, 1])))
        >>> j = BatchCalibration.joined([a, b])
        >>> j.records, j.groups.tolist(), j.raw_byte_tokens.tolist(), j.cells[0].tolist(), j.cells[1].tolist()
        (3, [3, 5, 3], [0, 1, 0], [4, 7], [3, 1])
        """
        if len({c.vocab_size for c in calibrations}) != 1:
            raise ValueError("calibrations of different vocabularies cannot be joined")
        if len(calibrations) == 1:
            return calibrations[0]
        used = np.concatenate([c.cells[0] for c in calibrations]).astype(np.int64, copy=False)
        counts = np.concatenate([c.cells[1] for c in calibrations]).astype(np.int64, copy=False)
        if len(used):
            used, where = np.unique(used, return_inverse=True)
            counts = _summed(where, counts, len(used))
        return cls(sum(c.records for c in calibrations), calibrations[0].vocab_size,
                   np.concatenate([c.groups for c in calibrations]),
                   np.concatenate([c.raw_byte_tokens for c in calibrations]), (used, counts))


def _summed(where: np.ndarray, counts: np.ndarray, n: int) -> np.ndarray:
    """`counts` added per index `where` into n int64 cells (exact: no float weights)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, where, counts)
    return out


class Tallies:
    """Token-id counts and group x id-class counts of any number of batches, kept where they are
    counted and added to a Summary once (`Summary.add_tallies`): a thread calibrating batch after
    batch (`Summary.batch_calibration(..., tallies=)`) counts each id into these two dense tables in
    the pass that reads it, instead of handing each batch's cells back to be added (and its ids to
    be counted again) by the thread that keeps the summary. Sums: the same totals in any order.

    >>> s = Summary(300, raw_byte_ids=range(256))
    >>> t = s.tallies()
    >>> _ = s.batch_calibration([2], ["r"], [array("I", [7, 7])], tallies=t)
    >>> int(t.id_counts[7]), int(t.cells.sum())
    (2, 2)
    >>> s.add_batch([2], [2], [2], [1], record_ids=["r"], id_arrays=[array("I", [7, 7])],
    ...             calibration=s.batch_calibration([2], ["r"], [array("I", [7, 7])], tallies=t))
    >>> s.add_tallies(t); int(s.id_counts[7]), int(s.group_classes.sum()), int(t.id_counts.sum())
    (4, 4, 0)
    """

    # Counted in uint32: the calibration pass reads these tables at random, once per id, and at half
    # the size of int64 (a 128k vocabulary's counts: 512 KB) more of them stay in the cache between
    # two batches. No counter passes 2**32 - 1: a batch that could take one past it first moves the
    # counts into int64 totals (`make_room`).
    LIMIT = (1 << 32) - 1

    def __init__(self, vocab_size: int, cells: int):
        self.id_counts = np.zeros(vocab_size, dtype=np.uint32)
        self.cells = np.zeros(cells, dtype=np.uint32)
        self.counted = 0        # ids counted since the tables were last zeroed: no counter holds more
        self.moved: tuple[np.ndarray, np.ndarray] | None = None     # int64 totals, once counts moved there
        self.used = False       # anything counted since the last `clear`

    def make_room(self, ids: int) -> None:
        """Before a batch of `ids` ids is counted: move the counts to the int64 totals if it could take
        a counter past LIMIT.

        >>> t = Tallies(3, 2); t.id_counts[1] = t.cells[0] = t.LIMIT; t.counted = t.LIMIT
        >>> t.make_room(1); t.totals()[0].tolist(), t.id_counts.tolist(), t.counted
        ([0, 4294967295, 0], [0, 0, 0], 1)
        """
        if ids > self.LIMIT:
            raise ValueError(f"a batch of {ids:,} token ids: tallies count at most {self.LIMIT:,} at a time")
        if self.counted + ids > self.LIMIT:
            if self.moved is None:
                self.moved = (np.zeros(len(self.id_counts), np.int64), np.zeros(len(self.cells), np.int64))
            moved_ids, moved_cells = self.moved
            moved_ids += self.id_counts
            moved_cells += self.cells
            self.id_counts[:] = 0
            self.cells[:] = 0
            self.counted = 0
        self.counted += ids

    def totals(self) -> tuple[np.ndarray, np.ndarray]:
        """The id counts and cells counted, int64."""
        if self.moved is None:
            return self.id_counts.astype(np.int64), self.cells.astype(np.int64)
        return self.moved[0] + self.id_counts, self.moved[1] + self.cells

    def clear(self) -> None:
        if self.used:
            self.id_counts[:] = 0
            self.cells[:] = 0
            self.counted = 0
            self.moved = None
            self.used = False


class Summary:
    """The exact, mergeable summary of a tokenized dataset (the accumulator behind stats.json).

    Per record, `add(ids, n_bytes, n_chars, n_words)` counts every token id and keeps exact tables of
    tokens per record and of bytes per token per record (in quarters of a byte). Cost per token is
    one list-index increment: measured ~80 ns/id in CPython 3.11, 2.5x cheaper than
    `Counter.update(ids)` (~210 ns/id). A caller that already holds the ids of a batch as an array
    can count them itself (e.g. numpy.bincount over an Arrow column, ~2 ns/id), then call
    `add_batch(n_tokens, n_bytes, n_chars, n_words)` with the batch's columns (or `add(n_tokens,
    ...)` per record) and `add_id_counts({id: count})` or `add_dense_id_counts` once per batch.

    Token id frequencies are dense (`list` of length vocab_size, index = id): the fastest hot path,
    and the layout stats.json uses. Pickling compresses them (zero runs vanish), so a per-shard
    summary of a 200k vocabulary ships in kilobytes.

    Calibration (what drift's variances need, see the module docstring) is kept for the records
    given with their record id and token ids: `add_batch(..., record_ids=ids, id_arrays=arrays)`
    or `add(ids, ..., record_id=rid)`. It needs the single-byte ids: `Summary(vocab_size,
    raw_byte_ids=single_byte_ids(tok.vocab))`. `calibrated` counts those records; stats.json
    is only fit for drift when it equals `records`.

    >>> s = Summary(259, raw_byte_ids=range(256))
    >>> s.add_batch([2, 1], [4, 1], [4, 1], [1, 1], record_ids=["a", "b"], id_arrays=[[104, 257], [33]])
    >>> s.add_id_counts({104: 1, 257: 1, 33: 1})
    >>> s.calibrated, s.moment_sums, s.moment_product("tokens", "raw_byte_tokens")
    (2, [3, 5, 5, 2, 2], 3)
    """

    def __init__(self, vocab_size: int, *, raw_byte_ids: Iterable[int] | None = None):
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        self.vocab_size = vocab_size
        self.raw_byte_ids = None if raw_byte_ids is None else tuple(sorted(set(raw_byte_ids)))
        self.records = 0
        self.tokens = 0
        self.bytes = 0
        self.chars = 0
        self.words = 0
        self.repaired = 0
        self.id_counts = np.zeros(vocab_size, dtype=np.int64)   # by token id
        self.tokens_per_record: dict[int, int] = {}       # n_tokens -> records
        self.quarter_bytes_per_token: dict[int, int] = {}  # floor(4 * n_bytes / n_tokens) -> records
        self.rejected: dict[str, int] = {}                 # reason -> records
        self.shards: set[str] = set()
        self.shard_errors: list[dict] = []                 # file-level problems, in _error_key order
        # Calibration: moments over the calibrated records, and REPLICATE_GROUPS random groups.
        self.calibrated = 0
        self.moment_sums = [0] * len(MOMENT_VARIABLES)     # sum over records of each variable
        self.moment_products = [0] * len(MOMENT_PAIRS)     # sum over records of x_i * x_j, i <= j
        self.group_records = [0] * REPLICATE_GROUPS
        self.group_tokens = [0] * REPLICATE_GROUPS
        self.group_lengths: list[dict[int, int]] = [{} for _ in range(REPLICATE_GROUPS)]   # length_key -> records
        self.group_quarters: list[dict[int, int]] = [{} for _ in range(REPLICATE_GROUPS)]  # quarters -> records
        self.group_classes = np.zeros((REPLICATE_GROUPS, id_class_count(vocab_size)), dtype=np.int64)
        # Number formats, for the calibrated records given with their digit runs.
        self.digit_run_records = 0
        self.group_digit_runs = np.zeros((REPLICATE_GROUPS, DIGIT_RUN_LENGTHS), dtype=np.int64)
        self._raw_mask = None

    # ---- accumulate -------------------------------------------------------------------------

    def add(self, ids_or_n_tokens: Sequence[int] | int, n_bytes: int, n_chars: int, n_words: int,
            *, record_id: str | None = None, digit_runs: Sequence[int] | None = None) -> None:
        """Add one written record: its token ids (counted here) or just its token count (when the
        ids are counted in bulk with `add_id_counts`), and its UTF-8 bytes, characters and words.
        With `record_id` (and ids) the record is calibrated too."""
        if isinstance(ids_or_n_tokens, int):
            if record_id is not None:
                raise ValueError("a calibrated record needs its token ids, not just their number")
            n_tokens = ids_or_n_tokens
        else:
            ids = np.asarray(ids_or_n_tokens, dtype=np.int64)
            if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
                raise ValueError(f"token id outside the vocabulary (size {self.vocab_size})")
            np.add.at(self.id_counts, ids, 1)
            n_tokens = len(ids_or_n_tokens)
        self.records += 1
        self.tokens += n_tokens
        self.bytes += n_bytes
        self.chars += n_chars
        self.words += n_words
        tpr = self.tokens_per_record
        tpr[n_tokens] = tpr.get(n_tokens, 0) + 1
        if n_tokens:
            quarters = 4 * n_bytes // n_tokens
            bpt = self.quarter_bytes_per_token
            bpt[quarters] = bpt.get(quarters, 0) + 1
        if record_id is not None:
            self._calibrate([n_tokens], [n_bytes], [n_chars], [n_words], [record_id], [ids_or_n_tokens],
                            None if digit_runs is None else [digit_runs])
        elif digit_runs is not None:
            raise ValueError("digit runs are kept for calibrated records: pass record_id too")

    def add_batch(self, n_tokens: Sequence[int], n_bytes: Sequence[int], n_chars: Sequence[int],
                  n_words: Sequence[int], *, record_ids: Sequence[str] | None = None,
                  id_arrays: Sequence | None = None, digit_runs: Sequence[Sequence[int]] | None = None,
                  calibration: "BatchCalibration | None" = None) -> None:
        """`add(n_tokens[i], n_bytes[i], n_chars[i], n_words[i])` for every record of a batch given as
        columns (ints, or int64 arrays as `measure_batch` makes them; ids counted in bulk with
        `add_id_counts` or `add_dense_id_counts`): the same tables, in numpy passes over the columns
        (no Python int per record for array columns). `record_ids` and `id_arrays` (each record's id
        and token ids, EOS included, as `array('I')`, lists or numpy arrays) calibrate the batch; the
        ids are not counted into the id frequencies here. `digit_runs` (each record's `digit_runs(text)`) adds the
        number formats of a calibrated batch. `calibration`, this batch's `batch_calibration` made
        beforehand (in another thread, say), spares reading the ids again here: with it, `id_arrays`
        may be left out."""
        n_tokens, n_bytes, n_chars, n_words = map(count_column, (n_tokens, n_bytes, n_chars, n_words))
        self.records += len(n_tokens)
        self.tokens += exact_sum(n_tokens)
        self.bytes += exact_sum(n_bytes)
        self.chars += exact_sum(n_chars)
        self.words += exact_sum(n_words)
        _tally(self.tokens_per_record, n_tokens)
        some = n_tokens > 0
        if len(n_bytes) and int(n_bytes.max()) < 1 << 60:     # 4 * bytes fits int64
            _tally(self.quarter_bytes_per_token, 4 * n_bytes[some] // n_tokens[some])
        else:
            quarters = [4 * b // t for t, b in zip(n_tokens.tolist(), n_bytes.tolist()) if t]
            _tally(self.quarter_bytes_per_token, quarters)
        if record_ids is None and id_arrays is None:
            if digit_runs is not None:
                raise ValueError("digit runs are kept for calibrated records: pass record_ids and id_arrays too")
            return
        if record_ids is None or id_arrays is None and calibration is None:
            raise ValueError("record_ids and id_arrays calibrate a batch together: pass both or neither")
        if len(record_ids) != len(n_tokens) or id_arrays is not None and len(id_arrays) != len(n_tokens):
            raise ValueError(f"{len(n_tokens)} records but {len(record_ids)} record ids and "
                             f"{len(n_tokens) if id_arrays is None else len(id_arrays)} id arrays")
        if digit_runs is not None and len(digit_runs) != len(n_tokens):
            raise ValueError(f"{len(n_tokens)} records but {len(digit_runs)} digit-run counts")
        self._calibrate(n_tokens, n_bytes, n_chars, n_words, record_ids, id_arrays, digit_runs, calibration)

    def _raw_byte_mask(self) -> np.ndarray:
        if self.raw_byte_ids is None:
            raise ValueError("calibration counts raw-byte tokens per record: build the Summary with "
                             "raw_byte_ids=single_byte_ids(tokenizer.vocab)")
        if self._raw_mask is None:
            mask = np.zeros(self.vocab_size, dtype=bool)
            mask[[i for i in self.raw_byte_ids if i < self.vocab_size]] = True
            self._raw_mask = mask
        return self._raw_mask

    def tallies(self) -> Tallies:
        """Empty `Tallies` for batches of this summary's vocabulary."""
        return Tallies(self.vocab_size, self.group_classes.size)

    def add_tallies(self, tallies: Tallies) -> None:
        """Add the id counts and group x class counts `tallies` hold (batches calibrated with
        `tallies=` and added with their calibration), and empty them."""
        if len(tallies.id_counts) != self.vocab_size or len(tallies.cells) != self.group_classes.size:
            raise ValueError(f"tallies of a {len(tallies.id_counts)}-id vocabulary for a {self.vocab_size}-id one")
        if not tallies.used:
            return
        id_counts, cells = (tallies.id_counts, tallies.cells) if tallies.moved is None else tallies.totals()
        self.id_counts += id_counts
        if not self.group_classes.flags.c_contiguous:
            self.group_classes = np.ascontiguousarray(self.group_classes)
        self.group_classes.reshape(-1)[:] += cells
        tallies.clear()

    def batch_calibration(self, n_tokens: Sequence[int], record_ids: Sequence[str],
                          id_arrays: Sequence, tallies: Tallies | None = None) -> "BatchCalibration":
        """What calibrating a batch takes from its record ids and token ids (each record's random
        group and raw-byte tokens, the batch's group x id-class counts), computed without changing
        the summary: another thread may make it (the compiled pass drops the GIL) while this
        summary takes other batches; `add_batch(..., calibration=)` adds it. Ids given as uint32
        `array`s (the pipelines') are counted by `_native.calibrate_ids` in one pass; others by
        `calibrate_ids` (its specification), a record, and a bounded chunk of it, at a time
        (`CALIBRATION_CHUNK`), so a long record costs no per-token array of its own size. With
        `tallies`, the batch's group x class counts and its token-id counts are added to them, not
        returned (its calibration holds no cells; `add_tallies` adds them). Raises ValueError for an
        id outside the vocabulary."""
        n = len(n_tokens)
        if len(id_arrays) != n:
            raise ValueError(f"{len(id_arrays)} id arrays for {n} records")
        group_of = record_groups(record_ids)
        groups = group_of.astype(np.int64)
        classes = self.group_classes.shape[1]
        mask = self._raw_byte_mask()
        table = id_class_table(self.vocab_size)
        # Counted into this thread's zeroed table, then read out sparse and zeroed again: a batch
        # touches a few thousand of its cells; a fresh table each batch would fault in 2 MB of pages
        # and cost the summary a pass over all of them.
        cells = _scratch_cells(self.group_classes.size) if tallies is None else tallies.cells
        raw = np.zeros(n, dtype=np.int64)
        # Each record's first cell: its group's row of the group x class table.
        row_of = group_of * np.int32(classes)
        flat = isinstance(id_arrays, FlatIds) and _CALIBRATE_FLAT is not None
        compiled = flat or _CALIBRATE_IDS is not None and all(isinstance(a, array) and a.typecode == "I"
                                                                for a in id_arrays)
        if flat:
            if not np.array_equal(id_arrays.counts, np.asarray(n_tokens, dtype=np.int64)):
                raise ValueError("the records' id counts and their n_tokens disagree")
            # One flat buffer: its records' ends say where each one's ids stop (no buffer per record).
            calibrate, runs = partial(_CALIBRATE_FLAT, id_arrays.ids), id_arrays.ends
        elif compiled:
            for ids, length in zip(id_arrays, n_tokens):
                if len(ids) != length:
                    raise ValueError(f"a record's id array holds {len(ids)} ids, its n_tokens says {length}")
            calibrate, runs = _CALIBRATE_IDS, id_arrays
        else:
            calibrate, runs = calibrate_ids, _id_runs(id_arrays, n_tokens)
        # The compiled pass computes the classes rather than read a table the encoder, running between
        # two batches, has pushed out of the cache.
        if compiled and ID_CLASS_FOLD is not None:
            table = ID_CLASS_FOLD
        if tallies is not None:
            tallies.used = True     # (a batch that raises here fails its shard, whose tallies are dropped)
            tallies.make_room(int(np.sum(n_tokens, dtype=np.int64)))
            calibrate(runs, row_of, mask.view(np.uint8), table, raw, cells, tallies.id_counts)
            empty = np.zeros(0, dtype=np.int64)
            return BatchCalibration(n, self.vocab_size, groups, raw, (empty, empty))
        used = None
        try:
            used = np.frombuffer(calibrate(runs, row_of, mask.view(np.uint8), table, raw, cells), dtype=np.int64)
            counts = cells[used]
        finally:
            if used is None:
                cells[:] = 0        # failed part way (an id outside the vocabulary): zero the whole table
            else:
                cells[used] = 0
        return BatchCalibration(n, self.vocab_size, groups, raw, (used, counts))

    def _calibrate(self, n_tokens, n_bytes, n_chars, n_words, record_ids, id_arrays: Sequence,
                   digit_runs: Sequence[Sequence[int]] | None = None,
                   calibration: "BatchCalibration | None" = None) -> None:
        """Moments and random groups of records already counted in the plain tables (their token
        ids read by `batch_calibration`, unless given it)."""
        n = len(n_tokens)
        if calibration is None:
            calibration = self.batch_calibration(n_tokens, record_ids, id_arrays)
        elif calibration.records != n or calibration.vocab_size != self.vocab_size:
            raise ValueError(f"a calibration of {calibration.records} records of a {calibration.vocab_size}-id "
                             f"vocabulary for {n} records of a {self.vocab_size}-id one")
        groups, raw, cells = calibration.groups, calibration.raw_byte_tokens, calibration.cells
        group_of = np.asarray(groups, dtype=np.int64)
        used, counts = cells
        if not self.group_classes.flags.c_contiguous:        # reshape would copy, and the add be lost
            self.group_classes = np.ascontiguousarray(self.group_classes)
        self.group_classes.reshape(-1)[used] += counts        # each cell once: a plain add, not ufunc.at
        if digit_runs is not None:
            runs = np.asarray(digit_runs, dtype=np.int64).reshape(n, DIGIT_RUN_LENGTHS)
            np.add.at(self.group_digit_runs, group_of, runs)
            self.digit_run_records += n
        columns = tuple(map(count_column, (n_tokens, n_bytes, n_chars, n_words, raw)))
        for v, column in enumerate(columns):
            self.moment_sums[v] += exact_sum(column)
        if not self._add_group_columns(group_of, columns):
            self._add_group_records(group_of.tolist(), tuple(column.tolist() for column in columns))
        self.calibrated += n

    def _add_group_records(self, groups: Sequence[int], columns: tuple) -> None:
        """The moment products and the random groups' tables of a batch, record by record, in
        Python ints (exact however large: bytes squared of a 1 GB record passes int64): the
        specification of `_add_group_columns`."""
        for k, (i, j) in enumerate(MOMENT_PAIRS):
            self.moment_products[k] += sum(map(mul, columns[i], columns[j]))
        for g, t, b in zip(groups, columns[0], columns[1]):
            self.group_records[g] += 1
            self.group_tokens[g] += t
            key = length_key(t)
            self.group_lengths[g][key] = self.group_lengths[g].get(key, 0) + 1
            if t:
                q = 4 * b // t
                self.group_quarters[g][q] = self.group_quarters[g].get(q, 0) + 1

    def _add_group_columns(self, groups: Sequence[int], columns: tuple) -> bool:
        """`_add_group_records` in numpy passes over the batch's columns (the tables' dicts updated
        once per distinct group and value, not once per record), when every sum fits int64 exactly;
        False, with nothing added, when one might not (then the caller takes the Python ints)."""
        n = len(groups)
        if n < 64:              # a few records: the passes would cost more than the loop
            return False
        table = np.stack([count_column(c) for c in columns], axis=1)     # records x variables (all >= 0)
        top = int(table.max())
        # Every product, every sum of n of them, and 4 * bytes, below 2**62: exact in int64.
        if top >= 1 << 30 or top * top * n >= 1 << 62:
            return False
        products = table.T @ table
        for k, (i, j) in enumerate(MOMENT_PAIRS):
            self.moment_products[k] += int(products[i, j])
        group = np.asarray(groups, dtype=np.int64)
        tokens, data = table[:, 0], table[:, 1]
        for g, records, sums in zip(*_group_sums(group, tokens)):
            self.group_records[g] += records
            self.group_tokens[g] += sums
        _, bits = np.frexp(tokens.astype(np.float64))           # bit lengths (tokens < 2**30: exact)
        shift = np.maximum(bits.astype(np.int64) - 3, 0)
        _add_pairs(self.group_lengths, group, tokens >> shift << shift)
        some = tokens > 0
        _add_pairs(self.group_quarters, group[some], 4 * data[some] // tokens[some])
        return True

    def moment_product(self, a: str, b: str) -> int:
        """Sum over calibrated records of variable `a` times variable `b` (names of MOMENT_VARIABLES)."""
        i, j = sorted((MOMENT_VARIABLES.index(a), MOMENT_VARIABLES.index(b)))
        return self.moment_products[MOMENT_PAIRS.index((i, j))]
    def add_id_counts(self, counts: Mapping[int, int]) -> None:
        """Add `{token id: occurrences}` counted elsewhere (pair with `add(n_tokens, ...)`)."""
        ids = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        bad = ids[(ids < 0) | (ids >= self.vocab_size)]
        if len(bad):
            raise ValueError(f"token id {int(bad[0])} outside the vocabulary (size {self.vocab_size})")
        np.add.at(self.id_counts, ids, np.fromiter(counts.values(), dtype=np.int64, count=len(counts)))

    def add_dense_id_counts(self, counts: Sequence[int]) -> None:
        """Add `counts[i]` occurrences of every id i (dense, as `numpy.bincount(ids, minlength=
        vocab_size)` gives them): one pass over the vocabulary, however many ids are used."""
        if len(counts) != self.vocab_size:
            raise ValueError(f"token id {len(counts) - 1} outside the vocabulary (size {self.vocab_size})"
                             if len(counts) > self.vocab_size else
                             f"{len(counts)} id counts for a vocabulary of {self.vocab_size} ids")
        self.id_counts += np.asarray(counts, dtype=np.int64)

    def add_repaired(self, n: int = 1) -> None:
        """Count `n` written records whose invalid UTF-8 was replaced with U+FFFD."""
        self.repaired += n

    def add_rejected(self, reason: str, n: int = 1) -> None:
        """Count `n` records that were not written, by reason."""
        self.rejected[reason] = self.rejected.get(reason, 0) + n

    def add_shard(self, name: str) -> None:
        """Record that shard `name` contributed to this summary."""
        self.shards.add(name)

    def add_shard_error(self, source: str, rows_read: int, reason: str, detail: str) -> None:
        """Record that shard `source` could not be read past its first `rows_read` rows (a truncated
        or unreadable file): the records before stay counted, the rest of the file is lost."""
        self.shard_errors.append({"source": source, "rows_read": rows_read, "reason": reason, "detail": detail})
        self.shard_errors.sort(key=_error_key)

    def add_text(self, text: str, ids: Sequence[int], *, record_id: str | None = None) -> None:
        """Add one record from its text and token ids (`record_stats` + `add`); calibrated with
        `record_id` (number formats included)."""
        _, n_bytes, n_chars, n_words = record_stats(text, ids)
        self.add(ids, n_bytes, n_chars, n_words, record_id=record_id,
                 digit_runs=None if record_id is None else digit_runs(text))

    def rejected_by_reason(self) -> dict[str, int]:
        """`{reason: records}` of the rejected records, sorted by reason."""
        return dict(sorted(self.rejected.items()))

    def merge(self, other: "Summary") -> "Summary":
        """Add `other` into this summary and return it. Exact: any merge order or tree gives the
        same counts, so the same `to_json`."""
        if other.vocab_size != self.vocab_size:
            raise ValueError(f"cannot merge summaries of vocabularies of {self.vocab_size} "
                             f"and {other.vocab_size} ids")
        self.records += other.records
        self.tokens += other.tokens
        self.bytes += other.bytes
        self.chars += other.chars
        self.words += other.words
        self.repaired += other.repaired
        self.id_counts += other.id_counts
        for mine, theirs in ((self.tokens_per_record, other.tokens_per_record),
                             (self.quarter_bytes_per_token, other.quarter_bytes_per_token),
                             (self.rejected, other.rejected)):
            for key, n in theirs.items():
                mine[key] = mine.get(key, 0) + n
        self.shards |= other.shards
        # Sorted on every field: the same list whatever the merge order.
        self.shard_errors = sorted(self.shard_errors + other.shard_errors, key=_error_key)
        self._merge_calibration(other)
        return self

    def _merge_calibration(self, other: "Summary") -> None:
        # An empty accumulator (Beam's create_accumulator) may not know the raw-byte ids: it takes them.
        if self.raw_byte_ids is None:
            self.raw_byte_ids, self._raw_mask = other.raw_byte_ids, None
        elif other.raw_byte_ids is not None and other.raw_byte_ids != self.raw_byte_ids:
            raise ValueError("cannot merge summaries made with different raw-byte ids (different tokenizers?)")
        self.calibrated += other.calibrated
        self.moment_sums = list(map(add, self.moment_sums, other.moment_sums))
        self.moment_products = list(map(add, self.moment_products, other.moment_products))
        self.group_records = list(map(add, self.group_records, other.group_records))
        self.group_tokens = list(map(add, self.group_tokens, other.group_tokens))
        for mine_list, theirs_list in ((self.group_lengths, other.group_lengths),
                                       (self.group_quarters, other.group_quarters)):
            for mine, theirs in zip(mine_list, theirs_list):
                for key, n in theirs.items():
                    mine[key] = mine.get(key, 0) + n
        # In place where this summary's tables are its own to change (a fresh table per merge is a
        # megabyte of new pages for every shard a combine adds).
        self.group_classes = _added(self.group_classes, other.group_classes)
        self.digit_run_records += other.digit_run_records
        self.group_digit_runs = _added(self.group_digit_runs, other.group_digit_runs)

    @classmethod
    def merged(cls, summaries: Iterable["Summary"], vocab_size: int) -> "Summary":
        """A new summary holding the sum of `summaries` (which are left unchanged)."""
        total = cls(vocab_size)
        for s in summaries:
            total.merge(s)
        return total

    # ---- pickling: the dense id counts and group classes as their non-zero cells, compressed --

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        # Only the non-zero cells of the dense id counts and group classes, in the narrowest integer
        # types that hold them: Beam pickles each summary several times on its way through the
        # pipeline, and zlib over the wide arrays of a 131k vocabulary cost ~11 ms a pickle (0.7 s
        # of a 52 MB run).
        state["id_counts"] = (len(self.id_counts), _pack_sparse(self.id_counts))
        state["group_classes"] = (self.group_classes.shape, _pack_sparse(self.group_classes.reshape(-1)))
        state["_raw_mask"] = None
        return state

    def pickled_size_estimate(self) -> int:
        """About how many bytes this summary pickles to, found without pickling it: ~4 bytes per
        non-zero cell of its dense tables (a gap and a count, each narrowed) and 4 KB for the rest.
        For a figure that only informs (a runner's element-size metrics), at a tenth of a pickle's cost.

        >>> s = Summary(1000); s.add([1, 2, 2], 3, 3, 1); 4096 <= s.pickled_size_estimate() < 5000
        True
        """
        return 4096 + 4 * (int(np.count_nonzero(self.id_counts)) + int(np.count_nonzero(self.group_classes)))

    def __setstate__(self, state: dict) -> None:
        size, packed = state["id_counts"]
        shape, cells = state["group_classes"]
        self.__dict__.update(state)
        self.id_counts = _unpack_sparse(packed, size)
        self.group_classes = _unpack_sparse(cells, shape[0] * shape[1]).reshape(shape)


def _added(mine: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """`mine + theirs`, added into `mine` (a summary's own table) when it is a writable int64 array
    of the same shape."""
    if mine.flags.writeable and mine.dtype == np.int64 and mine.shape == theirs.shape:
        mine += theirs
        return mine
    return mine + theirs


def _narrow(values: np.ndarray) -> np.ndarray:
    """The values as uint8/16/32/64, whichever is the narrowest that holds the largest."""
    top = int(values.max()) if len(values) else 0
    for kind in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(kind).max:
            return values.astype(kind)
    return values.astype(np.uint64)


def _pack_sparse(dense: np.ndarray) -> tuple:
    """A mostly-zero non-negative vector as (gaps between its non-zero positions, their values),
    each in its narrowest integer type.

    >>> _unpack_sparse(_pack_sparse(np.array([0, 3, 0, 0, 70000])), 5).tolist()
    [0, 3, 0, 0, 70000]
    """
    at = np.flatnonzero(dense != 0)      # a bool mask's nonzero is ~10x faster than an int64 array's
    gaps = np.diff(at, prepend=0) if len(at) else at
    return _narrow(gaps), _narrow(dense[at])


def _unpack_sparse(packed: tuple, size: int) -> np.ndarray:
    """The int64 vector `_pack_sparse` packed (its values are counts: they fit int64)."""
    gaps, values = packed
    dense = np.zeros(size, dtype=np.int64)
    dense[np.cumsum(gaps, dtype=np.int64)] = values
    return dense

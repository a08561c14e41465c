"""Threads sharing one Tokenizer get exactly the ids one thread gets, on every encoding path.

Each case has THREADS threads encode the same real texts (tiny/ and multi/) through one shared
tokenizer at once, each starting at a different text, for ROUNDS rounds, while the interpreter
switches threads every microsecond (`sys.setswitchinterval`): any two bytecodes of one thread may
then have another thread's work between them. Every id list is compared with a single-threaded run.
Caches are small, so pieces are evicted while other threads look them up.
"""
import gc
import json
import random
import sys
import threading
import time
from array import array
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from bpe_ops import Tokenizer, formats, load, text_encoder, train_bpe
from bpe_ops.text_encoder import Fallback as _Fallback, TextEncoder as _TextEncoder
from bpe_ops.implementation import Implementation
from bpe_ops.stats import MEASURE_SEPARATORS, batch_stats, measure_batch
from bpe_ops.utf8_texts import Utf8Texts
from tests.conftest import ROOT, read_jsonl_texts

pytestmark = pytest.mark.slow

THREADS = 8
ROUNDS = 2
SMALL_CACHE = 48                 # entries: full after a few sentences, so eviction runs all along
CUSTOM_PATTERN = r" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
PURE = Implementation(compiled=False, engine="regex")
COMPILED = Implementation()
needs_text_encoder = pytest.mark.skipif(_TextEncoder is None, reason="bpe_ops._pcre2 not built (optional)")


@contextmanager
def switching_every_microsecond():
    """Threads switch as often as the interpreter can: races show up in a few rounds."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


def run_at_once(work, n: int = THREADS) -> list:
    """`work(k)` in n threads started together; the exceptions they raised (none when all is well)."""
    start = threading.Barrier(n)
    errors: list = []

    def run(k: int) -> None:
        try:
            start.wait()
            work(k)
        except BaseException as exc:       # noqa: B036 - reported by the test, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    with switching_every_microsecond():
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return errors


def encoded_by_threads(encode, texts: list[str], expected: list) -> None:
    """THREADS threads call `encode(index, text)` on every text, ROUNDS times, each from another
    starting text, and get `expected` every time."""
    wrong: list = []

    def work(k: int) -> None:
        for _ in range(ROUNDS):
            for step in range(len(texts)):
                i = (step + k * len(texts) // THREADS) % len(texts)
                if encode(i, texts[i]) != expected[i]:
                    wrong.append((k, i))

    errors = run_at_once(work)
    assert not errors, f"{len(errors)} threads failed, first: {errors[0]!r}"
    assert not wrong, f"{len(wrong)} id lists differ from one thread's, first (thread, text): {wrong[0]}"


@pytest.fixture(scope="module")
def texts(corpora) -> list[str]:
    """Real text of two kinds (~60k characters): tiny/'s first English records and the first 2,000
    characters of every 60th multi/ record (many scripts: pieces PCRE2 leaves to `regex`, long
    pieces, digits)."""
    multi = read_jsonl_texts(corpora / "multi")[::60]
    return read_jsonl_texts(corpora / "tiny", limit=8) + [t[:2000] for t in multi]


@pytest.fixture(scope="module")
def files(corpora, tmp_path_factory) -> dict:
    """tokenizer.json files: two trained on tiny/, one splitting with a regex (gpt4), one with a
    custom regex and split digits, which the file states as a Sequence of Split pre-tokenizers (the
    Python chain); and a SentencePiece-style file (piece mode) whose Metaspace splits words, so
    that they are cached (a whole text is too long to be)."""
    folder = tmp_path_factory.mktemp("threads")
    tiny = read_jsonl_texts(corpora / "tiny")
    piece = json.loads((ROOT / "tests" / "data" / "sentencepiece" / "llama.json").read_text(encoding="utf-8"))
    piece["pre_tokenizer"]["split"] = True
    (folder / "piece.json").write_text(json.dumps(piece), encoding="utf-8")
    return {"regex": train_bpe(tiny, 1500).save(folder / "regex"),
            "chain": train_bpe(tiny, 1500, pattern=CUSTOM_PATTERN, split_digits=True).save(folder / "chain"),
            "piece": folder / "piece.json"}


def small_cache_tokenizer(path, implementation: Implementation) -> Tokenizer:
    """The tokenizer of a file (as `Tokenizer.from_file` reads it) with a small piece cache."""
    return Tokenizer(**formats.read_tokenizer_json(path), cache_size=SMALL_CACHE, implementation=implementation)


def plain(tok: Tokenizer, i: int, text: str) -> list[int]:
    return tok.encode(text)


def dropout(tok: Tokenizer, i: int, text: str) -> list[int]:
    return tok.encode(text, dropout=0.1, seed=11, record_id=i)   # deterministic per record id


def as_array(tok: Tokenizer, i: int, text: str) -> list[int]:
    return list(tok.encode_array(text))                           # the shared compiled encoder


def in_thread(tok: Tokenizer, i: int, text: str) -> list[int]:
    return list(tok.encode_arrays_in_thread([text])[0])           # each thread's fork of it


def in_thread_beside_others(tok: Tokenizer, i: int, text: str) -> list[int]:
    """Each thread's fork taking a list in one call, the text also after one it hands back."""
    got = tok.encode_arrays_in_thread([text, "a\ud800b", text])
    assert list(got[0]) == list(got[2])
    return list(got[2])


def in_thread_flat(tok: Tokenizer, i: int, text: str) -> list[int]:
    """Each thread's fork handing a list's ids back as one FlatIds batch, beside a text it hands back."""
    flat, _ = tok.encode_flat_measured_in_thread([text, "a\ud800b", text], *MEASURE_SEPARATORS)
    assert len(flat) == 3 and flat[0].tolist() == flat[2].tolist()
    return flat[2].tolist()


CASES = {
    # name: (file, implementation, how each text is encoded); dropout in Python (no cache: every
    # piece merged) takes every third text
    "compiled": ("regex", COMPILED, plain),
    "compiled-encode-array": ("regex", COMPILED, as_array),
    "compiled-thread-forks": ("regex", COMPILED, in_thread),
    "compiled-thread-lists": ("regex", COMPILED, in_thread_beside_others),
    "compiled-thread-flat": ("regex", COMPILED, in_thread_flat),
    "pure-python-thread-flat": ("regex", PURE, in_thread_flat),
    "pure-python": ("regex", PURE, plain),
    "pure-python-thread-path": ("regex", PURE, in_thread),
    "chain-compiled-merge": ("chain", COMPILED, plain),
    "chain-pure-python": ("chain", PURE, plain),
    "chain-thread-path": ("chain", COMPILED, in_thread),
    "piece-compiled-merge": ("piece", COMPILED, plain),
    "piece-pure-python": ("piece", PURE, plain),
    "dropout-compiled": ("regex", COMPILED, dropout),
    "dropout-pure-python": ("regex", PURE, dropout, 3),
    "dropout-chain": ("chain", PURE, dropout, 3),
}


@pytest.mark.parametrize("case", CASES)
def test_threads_sharing_a_tokenizer_get_the_ids_of_one_thread(case, files, texts):
    name, implementation, encode, *every = CASES[case]
    texts = texts[::every[0]] if every else texts
    if implementation.compiled and _TextEncoder is None and encode in (as_array, in_thread):
        pytest.skip("bpe_ops._pcre2 not built (optional)")
    one = small_cache_tokenizer(files[name], implementation)
    expected = [encode(one, i, t) for i, t in enumerate(texts)]
    tok = small_cache_tokenizer(files[name], implementation)
    encoded_by_threads(lambda i, text: encode(tok, i, text), texts, expected)


@needs_text_encoder
def test_forks_made_while_their_parent_encodes_get_the_same_ids(files, texts):
    """One thread encodes with the compiled encoder while the others fork it, again and again, and
    encode with their forks (and forks of forks): the forks share its tables, never its buffers."""
    tok = small_cache_tokenizer(files["regex"], COMPILED)
    parent = tok._text_encoder
    expected = [parent.encode(t) for t in texts]
    wrong: list = []

    def work(k: int) -> None:
        for _ in range(ROUNDS):
            mine = parent if k == 0 else parent.fork()
            if k % 2:
                mine = mine.fork()
            if [mine.encode(t) for t in texts] != expected:
                wrong.append(k)

    errors = run_at_once(work)
    assert not errors and not wrong, (errors[:1], wrong)


@needs_text_encoder
def test_encode_arrays_from_threads_with_several_thread_counts(files, texts):
    """Callers in several threads share `encode_arrays`' pool while asking for different numbers of
    threads: each gets the ids in order, and every pool replaced on the way is shut down (its
    threads end) rather than left behind."""
    tok = small_cache_tokenizer(files["regex"], COMPILED)
    batch = texts * 2                          # enough texts for encode_arrays to use its threads
    expected = tok.encode_arrays(batch, 1)
    wrong: list = []
    pools: list = []

    def work(k: int) -> None:
        for r in range(ROUNDS):
            if tok.encode_arrays(batch, 2 + (k + r) % 3) != expected:
                wrong.append(k)
            pools.append(tok._threads.pool)

    errors = run_at_once(work, 4)
    assert not errors and not wrong, (errors[:1], wrong)
    replaced = {id(p): p for p in pools if p is not tok._threads.pool}.values()
    assert replaced, "the pool was never replaced: the test proves nothing"
    for pool in replaced:
        with pytest.raises(RuntimeError, match="shutdown"):
            pool.submit(int)


@needs_text_encoder
def test_a_list_encoded_in_one_call_gets_each_text_its_own_ids(files, texts):
    """`encode_arrays_in_thread` hands a byte-level tokenizer's texts to its compiled encoder in one
    call (`encode_texts_bytes`, the GIL dropped once): each text gets the ids `encode` gives it
    alone, whatever its str kind; a text the encoder hands back (a character the split engines
    classify differently, a lone surrogate) is encoded alone, in its place."""
    tok = Tokenizer.from_file(files["regex"])
    assert tok._texts_in_one_call() and tok._regex.guard, "no guarded character: the test proves less"
    guarded = tok._regex.guard[0][0]
    batch = texts + ["", " ", "caf\u00e9 \u00ff", "\u65e5\u672c \u2014 ok", "x\U0001f600y", "a\ud800b",
                     f"word{guarded}word", "plain"]
    assert [list(a) for a in tok.encode_arrays_in_thread(batch)] == [tok.encode(t) for t in batch]
    encoder = tok._text_encoder.fork()
    ids, counts = encoder.encode_texts_bytes(batch)
    counts = memoryview(counts).cast("q").tolist()
    assert [i for i, n in enumerate(counts) if n < 0] == [len(texts) + 5, len(texts) + 6]
    assert 4 * sum(n for n in counts if n > 0) == len(ids)
    assert encoder.encode_texts_bytes([]) == (b"", b"")
    fresh = tok._text_encoder.fork()                # an empty text first, before any id was written
    assert fresh.encode_texts_bytes(["", "", "a"])[1] == bytes(array("q", [0, 0, len(tok.encode("a"))]))
    with pytest.raises(TypeError, match="expected str"):
        encoder.encode_texts_bytes(["a", b"b"])
    with pytest.raises(TypeError, match="list"):
        encoder.encode_texts_bytes(("a",))
    assert list(encoder.encode_texts_bytes(["a b"])[1]) != []      # still usable after the errors


@needs_text_encoder
@pytest.mark.parametrize("wide", ["\u00e9", "\u20ac", "\U0001f600"])
def test_a_list_encoded_in_one_call_reserves_room_for_its_utf8_bytes_not_its_str_kind(files, wide):
    """The bytes object `encode_texts_bytes` fills is made with room for one id per UTF-8 byte of
    the texts (the most a byte-level vocabulary gives), counted, not bounded by the str's kind:
    a megabyte of ASCII with one character beyond it (a str of 1, 2 or 4 bytes a character) reserves
    about 4 MB, not the 8, 12 or 16 MB of 2, 3 or 4 bytes a character (tracemalloc sees the peak)."""
    import tracemalloc

    tok = Tokenizer.from_file(files["regex"])
    text = ("the cat sat on the mat. " * 43_000)[:1_000_000] + wide
    utf8 = len(text.encode("utf-8"))
    encoder = tok._text_encoder.fork()
    encoder.encode_texts_bytes(["warm the cache"])
    tracemalloc.start()
    try:
        ids, counts = encoder.encode_texts_bytes([text, text[:1000]])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 4 * (utf8 + 1000) <= peak < 4 * (utf8 + 1000) + (1 << 20)
    assert list(array("I", ids)) == tok.encode(text) + tok.encode(text[:1000])
    assert memoryview(counts).cast("q").tolist() == [len(tok.encode(text)), len(tok.encode(text[:1000]))]


@needs_text_encoder
def test_the_measures_taken_while_encoding_equal_the_measures_of_the_texts(files, texts):
    """`encode_measure_texts` measures each text (UTF-8 bytes, words, digit runs) in the pass that
    encodes it; `measure_batch` given those gives what it gives measuring the texts itself (the
    specification), across str kinds, wide spaces, digits and empty texts; a text handed back (a
    guarded character, a lone surrogate) has its measures left to the specification."""
    tok = Tokenizer.from_file(files["regex"])
    guarded = tok._regex.guard[0][0]
    batch = texts + ["", " ", "In 1865,\u3000 3 of 65536", "caf\u00e9 \u00ff 12345678 9",
                     "\u65e5\u672c\u2003\u2014 ok 42", "x\U0001f600y 7", "tab\tnew\nline\u00a0nbsp", "0"]
    for arrays, measured in (tok.encode_measured_in_thread(batch, *MEASURE_SEPARATORS),
                             tok.encode_measured_in_thread(batch + ["a\ud800b 12", f"w{guarded}w 3"],
                                                           *MEASURE_SEPARATORS)):
        texts_of = batch if len(arrays) == len(batch) else batch + ["a\ud800b 12", f"w{guarded}w 3"]
        assert [list(a) for a in arrays] == [tok.encode(t) for t in texts_of]
        assert measured is not None
        stats, runs = measure_batch(texts_of, arrays, measured)
        spec_stats, spec_runs = measure_batch(texts_of, arrays)
        assert [c.tolist() for c in stats] == [c.tolist() for c in spec_stats] == list(batch_stats(texts_of, arrays))
        assert runs.tolist() == spec_runs.tolist()
    table = memoryview(tok.encode_measured_in_thread(batch, *MEASURE_SEPARATORS)[1]).cast("q").tolist()
    assert table[7 * len(texts) + 7 * 2: 7 * len(texts) + 7 * 3] == [22, 5, 1, 0, 0, 1, 1]   # "In 1865,..."
    handed = memoryview(tok._text_encoder.fork().encode_measure_texts(["a\ud800b", "ok"], *MEASURE_SEPARATORS)[2])
    assert handed.cast("q").tolist()[0] == -1 and handed.cast("q").tolist()[7:9] == [2, 1]
    with pytest.raises(ValueError, match="256 bytes"):
        tok._text_encoder.fork().encode_measure_texts(["a"], b"x", ())


@needs_text_encoder
def test_texts_given_as_utf8_encode_and_measure_as_their_str_objects(files, texts):
    """`Utf8Texts` (a reader's UTF-8 and offsets, no str each) go to the compiled encoder as they are
    (`encode_measure_utf8`): the same ids, counts and measures as the same texts as str, a slice of
    a buffer (offsets not from 0) included; a guarded text and bytes that are not UTF-8 (cut short,
    overlong, a surrogate, past U+10FFFF, 0xFF) are handed back (-1) and nothing else; offsets that
    do not ascend within the buffer are refused before anything is read."""
    tok = Tokenizer.from_file(files["regex"])
    assert tok.reads_utf8()
    guarded = tok._regex.guard[0][0]
    batch = texts + ["", " ", "caf\u00e9 \u00ff 12", "\u65e5\u672c\u2003ok 42", "x\U0001f600y", f"w{guarded}w 3", "0"]
    flat, measured = tok.encode_flat_measured_in_thread(Utf8Texts.of(batch), *MEASURE_SEPARATORS)
    want, want_measured = tok.encode_flat_measured_in_thread(batch, *MEASURE_SEPARATORS)
    assert [ids.tolist() for ids in flat] == [ids.tolist() for ids in want] == [tok.encode(t) for t in batch]
    assert measured == want_measured is not None
    part = Utf8Texts.of(batch)[len(texts) - 3:]
    assert part.offsets[0] > 0
    assert ([ids.tolist() for ids in tok.encode_flat_measured_in_thread(part, *MEASURE_SEPARATORS)[0]]
            == [tok.encode(t) for t in batch[len(texts) - 3:]])
    assert (measure_batch(Utf8Texts.of(batch), flat, measured)[0][2].tolist()
            == measure_batch(batch, want, want_measured)[0][2].tolist() == [len(t) for t in batch])

    not_utf8 = [b"ab\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"x\xffy", b"\xe2\x82"]
    raw = [b"plain", f"w{guarded}w".encode()] + not_utf8 + ["caf\u00e9".encode()]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in raw])]).astype(np.int64)
    encoder = tok._text_encoder.fork()
    ids, counts, table = encoder.encode_measure_utf8(b"".join(raw), offsets, *MEASURE_SEPARATORS)
    counts = np.frombuffer(counts, dtype=np.int64).tolist()
    assert [i for i, n in enumerate(counts) if n < 0] == list(range(1, 2 + len(not_utf8)))
    assert np.frombuffer(ids, dtype=np.uint32).tolist() == tok.encode("plain") + tok.encode("caf\u00e9")
    assert np.frombuffer(table, dtype=np.int64)[::7].tolist() == [5] + [-1] * (1 + len(not_utf8)) + [5]
    for data, bad in ((b"abc", [0, 2, 1]), (b"abc", [0, 4]), (b"abc", [-1, 2]), (b"abc", [])):
        with pytest.raises(ValueError, match="offsets"):
            encoder.encode_measure_utf8(data, np.array(bad, dtype=np.int64), *MEASURE_SEPARATORS)
    assert np.frombuffer(encoder.encode_measure_utf8(b"", np.zeros(1, np.int64), *MEASURE_SEPARATORS)[1],
                         dtype=np.int64).tolist() == []


@needs_text_encoder
def test_texts_given_as_utf8_are_judged_by_the_guard_as_their_str_objects(files):
    """The guard's check of UTF-8 (`guarded_utf8_in`: ASCII skipped a block at a time, 2-byte
    characters unread where no code point below U+0800 is guarded) hands back exactly the texts the
    check of a str hands back: guarded code points of every UTF-8 length placed anywhere among
    characters of every length, and the ids and measures of the others the same."""
    tok = Tokenizer.from_file(files["regex"])
    bits = np.unpackbits(np.frombuffer(tok._regex.guard_bits, np.uint8), bitorder="little")
    # Up to ~20 guarded code points of each UTF-8 length the guard holds (which ones it holds depends
    # on the installed `regex` and PCRE2: their Unicode versions).
    by_length: dict[int, list[str]] = {}
    for code in np.flatnonzero(bits).tolist():
        by_length.setdefault(len(chr(code).encode()), []).append(chr(code))
    assert len(by_length) >= 2, f"guarded code points of one UTF-8 length only ({set(by_length)}): proves less"
    guarded = [c for chars in by_length.values() for c in chars[::max(1, len(chars) // 20)]]
    plain = ["a", " ", "\u00e9", "\u4e00", "\U0001f600", "\u0800", "\u07ff", "7"]
    rng = random.Random(5)
    batch = []
    for k in range(3000):
        text = "".join(rng.choice(plain) for _ in range(rng.randrange(70)))
        if k % 2:
            at = rng.randrange(len(text) + 1)
            text = text[:at] + rng.choice(guarded) + text[at:]
        batch.append(text)
    held = Utf8Texts.of(batch)
    encoder = tok._text_encoder.fork()
    got = encoder.encode_measure_utf8(held.data, held.offsets, *MEASURE_SEPARATORS)
    assert got == encoder.encode_measure_texts(batch, *MEASURE_SEPARATORS)
    assert (np.frombuffer(got[1], np.int64) < 0).sum() == 1500


@pytest.mark.parametrize("name", ["chain", "piece"])
def test_texts_given_as_utf8_to_a_tokenizer_that_reads_str_get_the_ids_of_their_str(files, texts, name):
    """A tokenizer whose texts are not encoded in one compiled call (a Sequence chain, pieces) does
    not read UTF-8 (`reads_utf8` is false, so readers keep str for it) and, given `Utf8Texts` all the
    same, encodes each text's str."""
    tok = Tokenizer.from_file(files[name])
    assert not tok.reads_utf8()
    batch = texts[:20] + ["", "caf\u00e9"]
    flat, _ = tok.encode_flat_measured_in_thread(Utf8Texts.of(batch), *MEASURE_SEPARATORS)
    assert [ids.tolist() for ids in flat] == [tok.encode(t) for t in batch]


@pytest.mark.parametrize("name", ["regex", "chain", "piece"])
def test_a_batch_encoded_flat_is_the_batch_encoded_text_by_text(files, texts, name):
    """`encode_flat_measured_in_thread` gives each text the ids `encode` gives it, as one FlatIds batch
    (ids and counts), and the measures `encode_measured_in_thread` takes; with texts handed back (a
    lone surrogate, a guarded character), empty texts, and an empty batch; on each file's path (one
    compiled call, the Python chain, SentencePiece-style pieces)."""
    tok = Tokenizer.from_file(files[name])
    guard = getattr(getattr(tok, "_regex", None), "guard", None)
    odd = ["", "a\ud800b 12", "x"] + ([f"w{guard[0][0]}w 3"] if guard else [])
    for batch in (texts[:40], texts[:40] + odd, odd, []):
        flat, measured = tok.encode_flat_measured_in_thread(batch, *MEASURE_SEPARATORS)
        arrays, measured_apart = tok.encode_measured_in_thread(batch, *MEASURE_SEPARATORS)
        assert len(flat) == len(batch) and flat.counts.tolist() == [len(tok.encode(t)) for t in batch]
        assert [ids.tolist() for ids in flat] == [tok.encode(t) for t in batch] == [list(a) for a in arrays]
        assert measured == measured_apart
        assert ([c.tolist() for c in measure_batch(batch, flat, measured)[0]]
                == [c.tolist() for c in measure_batch(batch, arrays)[0]])


@needs_text_encoder
def test_threads_starting_while_their_encoders_are_prepared_take_one_each(files, texts):
    """A job prepares its threads' encoders on a thread of its own (`Tokenizer.prepare_threads`)
    while its encoding threads start: every thread gets an encoder of its own (the shared one, or a
    fork made ahead or by itself: never one another thread has), no more forks are made than
    threads need, and every id is the one thread's."""
    for _ in range(ROUNDS):
        tok = small_cache_tokenizer(files["regex"], COMPILED)
        expected = [list(tok.encode_arrays_in_thread([t])[0]) for t in texts]
        tok = small_cache_tokenizer(files["regex"], COMPILED)
        forks: list = []

        class Counted:
            """The tokenizer's compiled encoder, its forks counted."""

            def __init__(self, encoder):
                self.encoder = encoder

            def fork(self):
                forks.append(1)
                return self.encoder.fork()

            def __getattr__(self, name):
                return getattr(self.encoder, name)

        tok._text_encoder = Counted(tok._text_encoder)
        taken: dict = {}
        preparing = threading.Thread(target=tok.prepare_threads, args=(THREADS,))

        def work(k: int) -> None:
            if k == 0:
                preparing.start()
            taken[k] = tok._threads.thread_encoder(lambda: tok._text_encoder)
            flat, _ = tok.encode_flat_measured_in_thread(texts, *MEASURE_SEPARATORS)
            assert [a.tolist() for a in flat.arrays()] == expected

        assert not run_at_once(work)
        preparing.join()
        assert len(set(map(id, taken.values()))) == THREADS
        assert len(forks) == THREADS - 1 and not tok._threads._spare


def test_a_fork_that_fails_while_prepared_is_made_by_the_thread_that_waited_for_it():
    """`EncoderThreads.prepare` forks ahead for the threads to come; a fork that fails there (out
    of memory) raises there and leaves no thread waiting for it: the thread makes its own."""
    from bpe_ops.threads import EncoderThreads

    class Parent:
        fail = True

        def fork(self):
            if Parent.fail:
                Parent.fail = False
                raise MemoryError
            return object()

    threads, parent = EncoderThreads(), Parent()
    with pytest.raises(MemoryError):
        threads.prepare(lambda: parent, 2)
    assert threads.thread_encoder(lambda: parent) is parent
    other = threading.Thread(target=lambda: taken.append(threads.thread_encoder(lambda: parent)))
    taken: list = []
    other.start()
    other.join(5)
    assert len(taken) == 1 and taken[0] is not parent and not threads._spare


@needs_text_encoder
def test_threads_asking_at_once_for_the_compiled_encoder_build_it_once(files, monkeypatch):
    """The compiled encoder is built on first use; threads that all use it first at the same time
    share one build (each build is ~100 ms and ~40 MB with 200k ids)."""
    tok = small_cache_tokenizer(files["regex"], COMPILED)
    builds: list = []
    build = text_encoder.build

    def counted_build(t):
        builds.append(1)
        time.sleep(0.05)                       # lets the other threads get here meanwhile
        return build(t)

    monkeypatch.setattr(text_encoder, "build", counted_build)
    seen: list = []
    errors = run_at_once(lambda k: seen.append(tok._text_encoder))
    assert not errors
    assert len(builds) == 1 and len(set(map(id, seen))) == 1


@needs_text_encoder
def test_an_encoder_reentered_while_it_hands_out_ids_keeps_them(files, texts):
    """The compiled encoder's ids are read out of its buffer after it takes the GIL back. Python
    code that runs then (a garbage-collector callback here; a finalizer, or another thread it lets
    in, elsewhere) and encodes with the same encoder must find it busy, not overwrite that buffer."""
    tok = small_cache_tokenizer(files["regex"], COMPILED)
    encode = tok._text_encoder.encode
    first, other = texts[0], texts[1][:200]      # other's ids fit where first's are: no crash
    expected = encode(first)
    reentered: list = []

    def encode_other(phase, info):
        try:
            reentered.append(encode(other))
        except _Fallback as exc:               # the encoder is busy: what is wanted
            reentered.append(exc)

    got: list = []
    threshold = gc.get_threshold()
    gc.callbacks.append(encode_other)
    gc.set_threshold(1)                        # a collection at nearly every new container...
    try:
        for _ in range(200):                   # (past the lists the interpreter keeps for reuse)
            got.append(encode(first))          # ... kept, so that each list encode makes counts
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(encode_other)
    assert all(ids == expected for ids in got), "another text's ids were written over this one's"
    assert any(isinstance(r, _Fallback) for r in reentered), \
        "no collection ran while the encoder handed out ids: the test proves nothing"


class SwitchingDict(dict):
    """A dict that lets other threads run after its size is read and after an iterator over it is
    made: switches the interpreter may make there, made every time."""

    def __len__(self) -> int:
        size = super().__len__()
        time.sleep(0)
        return size

    def __iter__(self):
        keys = super().__iter__()
        time.sleep(0)
        return keys


def test_threads_loading_tokenizers_at_once_keep_the_tables_of_the_last_files(files, tmp_path, monkeypatch):
    """`from_file` keeps the tables of the files this process loaded last: threads loading three
    files at once (more than it keeps) each get their tokenizer, and it keeps no more."""
    monkeypatch.setattr(load, "_TABLES", SwitchingDict())
    again = tmp_path / "tokenizer.json"         # the same tokenizer, another file (bytes) to keep
    again.write_bytes(Path(files["regex"]).read_bytes() + b"\n")
    paths = [files["regex"], files["chain"], again]
    sample = "Threads load 3 files at once, and each encodes this."
    expected = [Tokenizer.from_file(p).encode(sample) for p in paths]
    wrong: list = []
    together = threading.Barrier(THREADS)

    def work(k: int) -> None:
        try:
            for r in range(12):
                i = (k + r) % len(paths)
                together.wait()                # each round's loads start at once
                if Tokenizer.from_file(paths[i]).encode(sample) != expected[i]:
                    wrong.append((k, i))
        except BaseException:
            together.abort()                   # the other threads stop waiting for this one
            raise

    errors = [e for e in run_at_once(work) if not isinstance(e, threading.BrokenBarrierError)]
    assert not errors and not wrong, (errors[:1], wrong[:1])
    assert len(load._TABLES) <= load._TABLES_KEPT

"""The compiled PCRE2 module (`bpe_ops._pcre2`) against its specification, the Python layer:
`TextEncoder.encode` gives the ids of the Python encoder (regex split, per-piece merge) on real
documents in every named pattern, on hostile texts, on random texts, with a tiny cache, with
`ignore_merges`, from several threads and after pickling; `PieceCounter` gives `regex`'s counts;
texts it must not take fall back whole."""
import ctypes
import os
import pickle
import threading
import weakref
from collections import Counter

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_ops import Implementation, Tokenizer, pretokenize, text_encoder
from bpe_ops.stats import MEASURE_SEPARATORS
from tests.conftest import read_jsonl_texts
from tests.fuzz.harness import keeping_utf8
from tests.bpe_ops.test_pretokenize import ADVERSARIAL

pcre2 = pretokenize._pcre2_module()
pytestmark = pytest.mark.skipif(pcre2 is None and os.environ.get("TOKENBEAM_REQUIRE_PCRE2") != "1",
                                reason="bpe_ops._pcre2 not built or libpcre2-8 missing (optional accelerator)")


PYTHON = Implementation(compiled=False, engine="regex")
_python_twins: "weakref.WeakKeyDictionary[Tokenizer, Tokenizer]" = weakref.WeakKeyDictionary()


def python_twin(tok: Tokenizer) -> Tokenizer:
    """The same tokenizer on the Python path (the `regex` split, the cache, the Python merge)."""
    twin = _python_twins.get(tok)
    if twin is None:
        specials = set(tok.special_tokens.values())
        twin = _python_twins[tok] = Tokenizer(
            tok.merges, pattern=tok.pattern, vocab={i: b for i, b in tok.vocab.items() if i not in specials},
            special_tokens=tok.special_tokens, ignore_merges=tok.ignore_merges, implementation=PYTHON)
    return twin


def python_ids(tok: Tokenizer, text: str) -> list[int]:
    """The specification: the same tokenizer's ids on the Python path."""
    return python_twin(tok).encode(text)


@pytest.fixture(scope="module")
def gpt2_merges(gpt2_files):
    return Tokenizer.from_gpt2_files(*gpt2_files).merges


def byte_tokenizer(merges, pattern: str, **kwargs) -> Tokenizer:
    tok = Tokenizer(merges, pattern=pattern, **kwargs)
    assert tok._text_encoder is not None, "the compiled whole-text encoder should be in use"
    return tok


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", "o200k"])
def test_whole_text_encoder_equals_the_python_encoder_on_real_text(pattern, gpt2_merges, corpora):
    tok = byte_tokenizer(gpt2_merges, pattern)
    texts = (read_jsonl_texts(corpora / "multi", limit=150) + read_jsonl_texts(corpora / "code", limit=60)
             + [t for t in ADVERSARIAL if len(t) < 20_000])
    for text in texts:
        assert tok.encode(text) == python_ids(tok, text), repr(text[:60])
    # The comparison above is the compiled encoder's: it took (and cached) nearly all of it.
    assert len(tok._text_encoder) > 1000


def test_gaps_between_matches_are_pieces_too(gpt2_merges, corpora):
    """A custom pattern that skips characters: the text between matches is encoded, never dropped."""
    tok = byte_tokenizer(gpt2_merges[:3000], r"\p{L}+| ?\p{N}+")
    texts = read_jsonl_texts(corpora / "multi", limit=60) + ["  12 ab, cd!!", "!!", "ab", "1 2 3 ..."]
    for text in texts:
        ids = tok.encode(text)
        assert ids == python_ids(tok, text)
        assert tok.decode(ids) == text


@pytest.mark.parametrize("pattern", ["gpt4", r"\p{L}+| ?\p{N}+"])
def test_a_long_text_split_and_encoded_in_parts_gives_the_ids_of_one_split(gpt2_merges, pattern):
    """The encoder splits a text and looks its pieces up some 2,048 pieces at a time (`_pcre2.c`,
    SPLIT_PART): every part's split sees the whole text, so the pieces are one split's. A run of
    whitespace whose lookahead reaches past a part's end, a piece PCRE2 takes, a gap between matches,
    digits and a text ending in whitespace, each at every place around the 2,048th and 4,096th piece,
    give the Python path's ids."""
    tok = byte_tokenizer(gpt2_merges, pattern)
    tails = ["   \n\n  y z", "é中 1234 ümlaut", " !!!\n\n x", ", 12345 , ab", "x  \t "]
    texts = ["x" + " x" * m + tail + " x" * 2100 + tail
             for m in range(2036, 2054) for tail in tails]
    assert [tok.encode(t) for t in texts] == [python_ids(tok, t) for t in texts]
    assert all(len(tok._split(t)) > 4096 for t in texts)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab \n\t'1é中😀\u0301\r.Ś"), max_size=60))
def test_random_texts(gpt2_tokenizers, text):
    for tok in gpt2_tokenizers:
        assert tok.encode(text) == python_ids(tok, text)


@pytest.mark.parametrize("wide", ["\u00e9", "\u2019", "\U0001f600"])    # a str of 1, 2 and 4 bytes a character
def test_ascii_runs_of_a_wide_str_around_its_other_characters(gpt2_tokenizers, wide):
    """The encoder writes a non-ASCII str's UTF-8 itself, its ASCII eight characters at a time: every
    run length around the ninth, the wide character at every place of a run, and runs to the end
    give the ids of the Python path (a byte off by one, or a run written past its end, changes them)."""
    tok = gpt2_tokenizers[0]
    runs = "The quick brown fox jumps, 1234 over"
    texts = [wide + runs[:n] for n in range(20)] + [runs[:n] + wide for n in range(20)]
    texts += [runs[:k] + wide + runs[k:k + 17] + wide * 2 + runs[:k] for k in range(18)]
    texts += [(runs[:7] + wide) * 5, wide + "\n" * 9 + " " * 8 + wide]
    assert [tok.encode(t) for t in texts] == [python_ids(tok, t) for t in texts]
    assert [list(a) for a in tok.encode_arrays_in_thread(texts)] == [python_ids(tok, t) for t in texts]


@st.composite
def rank_files(draw):
    """A tiktoken-style vocabulary over a few letters, its tokens ranked in any order, and texts of
    those letters: a token made by several splits gives several merges making one id (ties)."""
    letters = draw(st.sampled_from(["ab", "abc", "abcd"]))
    tokens = [bytes([b]) for b in range(256)]
    pool = [c.encode() for c in letters]
    for _ in range(draw(st.integers(3, 24))):
        token = draw(st.sampled_from(pool)) + draw(st.sampled_from(pool))
        if token not in tokens and len(token) <= 8:
            tokens.append(token)
            pool.append(token)
    made = draw(st.permutations(tokens[256:]))
    texts = draw(st.lists(st.text(alphabet=letters + " ", min_size=1, max_size=40), min_size=1, max_size=8))
    return {t: i for i, t in enumerate(tokens[:256] + list(made))}, texts


@settings(max_examples=150, deadline=None)
@given(rank_files())
def test_rank_files_with_tied_merges_encode_as_the_python_path(tmp_path_factory, case):
    """A rank file's merges are every split of every token, tokens in rank order: the compiled pair
    map then keys each merge to the id it makes and its place among that id's splits (no read of
    `merged` per step) and must order the merges exactly as their ranks, whatever the ranks' order."""
    import base64
    ranks, texts = case
    path = tmp_path_factory.mktemp("ranks") / "r.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()), encoding="ascii")
    tok = Tokenizer.from_tiktoken(str(path), r"[a-d]+|\s+")
    merged = [ranks[a + b] for a, b in tok.merges]
    assert merged == sorted(merged)                 # the ordering the compiled map's priorities need
    assert [tok.encode(t) for t in texts] == [python_ids(tok, t) for t in texts]
    assert [list(a) for a in tok.encode_arrays_in_thread(texts)] == [python_ids(tok, t) for t in texts]


@pytest.fixture(scope="module")
def gpt2_tokenizers(gpt2_merges):
    # A cache of 3 entries is emptied all the time: eviction never changes an id.
    return [byte_tokenizer(gpt2_merges, "gpt4"), byte_tokenizer(gpt2_merges, "o200k", cache_size=3)]


# Characters of one, two and three UTF-8 bytes, which share lead and continuation bytes.
CHAR_ALPHABET = "の こ中文。é ьa\n" + "\u0301\u00e8"


@st.composite
def merges_learned_from_a_text(draw):
    """Merges as training makes them (each joins two adjacent symbols of a sample text, so the ranks
    ascend), but in an order the draw picks: across characters' edges (a space and a lead byte, one
    character's last byte and the next one's first) as often as inside them. Returns the merges and
    the sample."""
    text = draw(st.text(alphabet=st.sampled_from(CHAR_ALPHABET), min_size=2, max_size=30))
    symbols = [bytes([b]) for b in text.encode()]
    merges = []
    for _ in range(draw(st.integers(0, 40))):
        if len(symbols) < 2:
            break
        i = draw(st.integers(0, len(symbols) - 2))
        pair = (symbols[i], symbols[i + 1])
        merges.append(pair)
        out = []
        for s in symbols:
            if out and (out[-1], s) == pair:
                out[-1] = pair[0] + pair[1]
            else:
                out.append(s)
        symbols = out
    return merges, text


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(merges_learned_from_a_text(), st.text(alphabet=st.sampled_from(CHAR_ALPHABET), max_size=40))
def test_characters_merged_first_give_the_ids_of_bytes_merged_first(learned, other):
    """_char_start.h starts a piece from its characters' own merges where no merge across their
    edges can come first; the Python path starts from bytes. Merge lists that join space + lead byte
    or one character's tail to the next one's head before (or after) the characters' own merges
    must give the same ids either way."""
    merges, sample = learned
    for pattern in ("gpt4", r"[^\n]+"):
        tok = byte_tokenizer(list(dict.fromkeys(merges)), pattern)
        assert tok._text_encoder.starts_from_characters
        for text in (sample, other, sample + other, other + " " + sample):
            assert tok.encode(text) == python_ids(tok, text)


def test_the_worked_example_of_char_start():
    """_char_start.h's example: whether 'の' (E3 81 AE) starts merged depends on its neighbour."""
    no = "\u306e".encode()
    first = [(no[:1], no[1:2]), (b" ", no[:1]), (no[:2], no[2:])]       # (E3, 81), (' ', E3), (E3 81, AE)
    tok = byte_tokenizer(first, r"[\s\S]+")
    assert tok._text_encoder.starts_from_characters
    assert tok.encode(" \u306e") == [ord(" "), 258] == python_ids(tok, " \u306e")
    assert tok.encode("a\u306e") == [ord("a"), 258] == python_ids(tok, "a\u306e")
    space_first = [first[1], first[0], first[2]]                          # (' ', E3) ranks first
    tok = byte_tokenizer(space_first, r"[\s\S]+")
    assert tok.encode(" \u306e") == [256, 0x81, 0xAE] == python_ids(tok, " \u306e")
    assert tok.encode("a\u306e") == [ord("a"), 258] == python_ids(tok, "a\u306e")


def test_characters_start_merged_where_the_ranks_do_not_ascend(gpt2_merges, corpora):
    """A merge ranked before the merge that makes its part: characters still start merged where
    conditions (a)-(c) of char_start.py hold, and the ids are the replay's from bytes."""
    merges = [("\u306e".encode()[:2] + b"x", b"y")] + [(b"\xe3", b"\x81"), ("\u306e".encode()[:2], b"x")]
    vocab = {b: bytes([b]) for b in range(256)}
    vocab.update({256: merges[0][0] + b"y", 257: b"\xe3\x81", 258: merges[0][0]})
    tok = Tokenizer(merges, pattern="gpt4", vocab=vocab)
    assert not tok._ranks_ascend and tok._text_encoder.starts_from_characters
    for text in ("\u306exy \u306e", "x\u306e\u306ey", "\u306e"):
        assert tok.encode(text) == python_ids(tok, text)
    gpt2 = byte_tokenizer(gpt2_merges, "gpt4")
    assert gpt2._text_encoder.starts_from_characters
    for text in read_jsonl_texts(corpora / "multi", limit=200):
        assert gpt2.encode(text) == python_ids(gpt2, text)


def test_tiny_cache_and_long_pieces(gpt2_merges, corpora):
    tok = byte_tokenizer(gpt2_merges, "gpt2", cache_size=2)
    texts = read_jsonl_texts(corpora / "code", limit=30) + ["a" * 5000, "x" + "ab" * 3000, "\u00e9" * 4000]
    for text in texts:
        assert tok.encode(text) == python_ids(tok, text)
    assert len(tok._text_encoder) <= 2


def test_ignore_merges_with_a_tiny_cache(gpt2_merges, corpora):
    """The whole tokens sit in the cache beside the merged pieces: emptied all the time, it keeps
    them, and never changes an id."""
    tok = byte_tokenizer(gpt2_merges, "gpt4", ignore_merges=True, cache_size=2)
    texts = read_jsonl_texts(corpora / "en", limit=30) + ["a" * 5000, " the the cat" * 50, "\u00e9" * 400]
    for text in texts:
        assert tok.encode(text) == python_ids(tok, text)
    assert len(tok._text_encoder) <= 2


def test_ignore_merges_takes_whole_tokens(gpt2_files):
    """Llama-3 style: a piece that is itself a token is that token, even where the merges would
    not make it. Here the vocabulary holds ' zzzz' but no merge makes it."""
    base = Tokenizer.from_gpt2_files(*gpt2_files)
    vocab = {i: b for i, b in base.vocab.items() if i not in base.special_tokens.values()}
    vocab[max(vocab) + 1] = b" zzzz"
    tok = Tokenizer(base.merges, pattern="gpt4", vocab=vocab, ignore_merges=True)
    assert tok._text_encoder is not None
    for text in ("a zzzz b", " zzzz", "zzzz zzzzz", "hello world zzzz!"):
        assert tok.encode(text) == python_ids(tok, text)
    assert tok.encode(" zzzz") == [max(vocab)]


def test_threads_share_one_tokenizer(gpt2_merges, corpora):
    """The encoder drops the GIL while it works; a second thread meeting it busy takes the Python
    path. Either way, every thread gets the ids."""
    tok = byte_tokenizer(gpt2_merges, "gpt4")
    texts = read_jsonl_texts(corpora / "multi", limit=80)
    expected = [python_ids(tok, t) for t in texts]
    results: dict[int, list] = {}

    def work(k: int) -> None:
        results[k] = [tok.encode(t) for t in texts * 3]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[k] == expected * 3 for k in range(4))


def test_forks_share_the_tables_and_encode_side_by_side(gpt2_merges, corpora):
    """fork() shares the merge tables read-only and keeps its own cache and character entries: forks
    encode at once in several threads (without the GIL), outlive the encoder they came from, and
    fork again."""
    tok = byte_tokenizer(gpt2_merges, "gpt4", ignore_merges=True)
    texts = read_jsonl_texts(corpora / "multi", limit=60)
    expected = [python_ids(tok, t) for t in texts]
    parent = text_encoder.build(tok)
    forks = [parent.fork() for _ in range(3)]
    forks.append(forks[0].fork())
    del parent
    assert all(f.starts_from_characters and len(f) == 0 for f in forks)
    results: dict[int, list] = {}

    def work(k: int) -> None:
        results[k] = [forks[k].encode(t) for t in texts * 2]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(forks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[k] == expected * 2 for k in range(len(forks)))
    assert all(len(f) > 0 for f in forks)         # each filled its own cache


def test_encode_arrays_threads_use_forks(gpt2_merges, corpora):
    tok = byte_tokenizer(gpt2_merges, "gpt4")
    texts = read_jsonl_texts(corpora / "multi", limit=40)
    assert [list(a) for a in tok.encode_arrays(texts, num_threads=2)] == [python_ids(tok, t) for t in texts]


def test_pickled_tokenizer_rebuilds_its_encoder(gpt2_merges):
    tok = byte_tokenizer(gpt2_merges, "gpt4")
    back = pickle.loads(pickle.dumps(tok))
    assert back._text_encoder is not None and back._text_encoder is not tok._text_encoder
    assert back.encode("pickled, then encoded: 12345 ok") == tok.encode("pickled, then encoded: 12345 ok")


WIDTHS = ["caf\u00e9 na\u00efve, 1999 ok " * 3,                    # one byte a character
          "The \u2019quoted\u2019 \u043f\u0440\u0438\u0432\u0435\u0442 \u4e2d\u6587\u3002 " * 3,  # two
          "emoji \U0001f600\U0001f3fd and \U00020000 " * 3]      # four


def test_a_str_that_keeps_its_utf8_encodes_as_one_that_does_not(gpt2_tokenizers, corpora):
    """The encoder reads the UTF-8 a str keeps instead of writing its own: every width, real text of
    every script, through each entry (one text, a list at once, measured in the same pass)."""
    texts = WIDTHS + read_jsonl_texts(corpora / "multi", limit=60) + [t for t in ADVERSARIAL if len(t) < 20_000]
    for tok in gpt2_tokenizers:
        kept = [keeping_utf8(t)[0] for t in texts]
        expected = [python_ids(tok, t) for t in texts]
        assert [tok.encode(t) for t in kept] == expected
        assert [list(a) for a in tok.encode_arrays_in_thread(kept)] == expected
        arrays, measured = tok.encode_measured_in_thread(kept, *MEASURE_SEPARATORS)
        assert [list(a) for a in arrays] == expected
        assert measured is not None and measured == tok.encode_measured_in_thread(texts, *MEASURE_SEPARATORS)[1]


def test_the_kept_utf8_is_what_the_encoder_reads(gpt2_tokenizers):
    """White-box: change the kept UTF-8 of a private str ("é", C3 A9, to "è", C3 A8) and the ids
    are the changed text's. Were the kept UTF-8 not read (or read at a wrong length), they would
    be the str's own."""
    tok = gpt2_tokenizers[0]
    text, address, size = keeping_utf8("caf\u00e9 au lait " * 4)
    assert size == len(text.encode("utf-8"))
    at = text.encode("utf-8").index(b"\xa9")
    ctypes.memmove(address + at, b"\xa8", 1)
    try:
        assert tok.encode(text) == python_ids(tok, text.replace("\u00e9", "\u00e8", 1))
        assert tok.encode(text) != python_ids(tok, text)
    finally:
        ctypes.memmove(address + at, b"\xa9", 1)
    assert tok.encode(text) == python_ids(tok, text)


def test_a_guarded_character_falls_back_with_the_utf8_kept(gpt2_merges):
    """A str that keeps its UTF-8 is still checked against the guard: each guarded range's ends, in
    a text of each width, send it to `regex`, which gives the Python path's ids."""
    tok = byte_tokenizer(gpt2_merges, "gpt4")
    if not tok._regex.guard:
        pytest.skip("these PCRE2 and regex versions classify every character alike: nothing to guard")
    for first, last in tok._regex.guard[:40] + tok._regex.guard[-5:]:
        for c in {first, last}:
            for text in (f"ab {c} cd" + "x" * 40, "\u4e2d" * 33 + c, "\U0001f600 " * 20 + c + "!"):
                kept = keeping_utf8(text)[0]
                with pytest.raises(pcre2.Fallback, match="classify differently"):
                    tok._text_encoder.encode(kept)
                assert tok.encode(kept) == python_ids(tok, text)
                assert [list(a) for a in tok.encode_arrays_in_thread([kept, "ok"])] == [python_ids(tok, text), tok.encode("ok")]


def test_texts_pcre2_must_not_split_fall_back_whole(gpt2_merges):
    tok = byte_tokenizer(gpt2_merges, "gpt4")
    with pytest.raises(pcre2.Fallback, match="surrogate"):
        tok._text_encoder.encode("x\ud800 y")
    assert tok.encode("x\ud800 y") == python_ids(tok, "x\ud800 y")
    empty = byte_tokenizer(gpt2_merges[:100], r"a*")       # matches the empty string everywhere
    with pytest.raises(pcre2.Fallback, match="empty"):
        empty._text_encoder.encode("baab")
    assert empty.encode("baab") == python_ids(empty, "baab")


def test_piece_counter_counts_like_regex(corpora):
    texts = read_jsonl_texts(corpora / "multi", limit=100) + [t for t in ADVERSARIAL if len(t) < 20_000]
    for name in ("gpt2", "gpt4", "o200k"):
        reference = regex.compile(pretokenize.PATTERNS[name])
        expected = Counter(pretokenize.to_utf8(p) for t in texts for p in reference.findall(t))
        assert pretokenize.count_pretokens(texts, name) == expected, name


def test_piece_counter_counts_nothing_of_a_text_that_falls_back():
    counter = pcre2.PieceCounter(pcre2.Pattern("(*LF)a|(?<=b)c*"))
    counter.add("aa")
    with pytest.raises(pcre2.Fallback):
        counter.add("aab")        # matches "a", "a", then "" after the "b": an empty match
    assert counter.to_dict() == {b"a": 2} and counter.pieces == 2 and len(counter) == 1


def test_errors_are_python_exceptions():
    with pytest.raises(pcre2.Pcre2Error, match="refuses"):
        pcre2.Pattern("(unclosed")
    pattern = pcre2.Pattern(r"\p{L}+")
    with pytest.raises(TypeError):
        pattern.findall(b"bytes")
    with pytest.raises(TypeError):
        pcre2.PieceCounter("not a pattern")
    with pytest.raises(ValueError, match="byte_ids"):
        pcre2.TextEncoder(pattern, [97], [98], [256], list(range(255)))
    with pytest.raises(OverflowError):
        pcre2.TextEncoder(pattern, [97], [98], [2**31], list(range(256)))
    assert pickle.loads(pickle.dumps(pattern)).findall("ab cd") == ["ab", "cd"]
    version, unicode_version = pcre2.library_version()
    assert version[:2].isdigit() and unicode_version[:2].isdigit()


def test_drained_buckets_are_zlib_crc32_buckets_on_both_paths(corpora):
    """The compiled counter and the `regex` fallback (a lone surrogate) fill the same stable buckets."""
    import zlib
    texts = read_jsonl_texts(corpora / "multi", limit=40) + ["x\ud800 y it's", "it's 12345 x"]
    counting = pretokenize.PretokenCounter("gpt4", special_tokens=["<|endoftext|>"])
    for text in texts:
        counting.add(text + "<|endoftext|>" + text[:10])
    buckets = counting.drain_buckets(7)
    reference = regex.compile(pretokenize.GPT4_PATTERN)
    expected = Counter(pretokenize.to_utf8(p) for t in texts for s in (t, t[:10]) for p in reference.findall(s))
    assert [dict(b) for b in buckets] == [{p: n for p, n in expected.items() if zlib.crc32(p) % 7 == i}
                                          for i in range(7)]
    assert len(counting) == 0 and counting.drain() == {}


def test_add_counts_sums_tables():
    into = {b"a": 1, b"b": 2**40}
    pretokenize.add_counts(into, {b"b": 3, b"c": 4})
    assert into == {b"a": 1, b"b": 2**40 + 3, b"c": 4}
    plain = Counter({b"a": 1})
    pretokenize.add_counts(plain, {b"a": 2})
    assert plain == Counter({b"a": 3})


def test_encode_array_gives_the_ids_as_uint32_on_every_path(gpt2_merges, corpora):
    from array import array
    tok = byte_tokenizer(gpt2_merges, "gpt4")
    tok_special = Tokenizer(gpt2_merges, pattern="gpt4", special_tokens=["<|endoftext|>"])
    texts = read_jsonl_texts(corpora / "multi", limit=40) + ["x\ud800 y", "", "a" * 3000]
    for text in texts:
        out = tok.encode_array(text)
        assert isinstance(out, array) and out.typecode == "I" and list(out) == tok.encode(text)
    mixed = "one<|endoftext|>two"
    assert list(tok_special.encode_array(mixed, allowed_special="all")) == tok_special.encode(mixed, "all")
    assert list(tok_special.encode_array(mixed)) == tok_special.encode(mixed)


def test_encode_arrays_in_threads_equals_one_thread(gpt2_merges, corpora):
    """Threads each take an encoder of their own; the ids and their order do not depend on them."""
    tok = byte_tokenizer(gpt2_merges, "gpt4")
    texts = read_jsonl_texts(corpora / "multi", limit=200) + ["x\ud800 y"] * 3 + [""] * 40
    one = tok.encode_arrays(texts, 1)
    assert [list(a) for a in one] == [tok.encode(t) for t in texts]
    assert tok.encode_arrays(texts, 3) == one == tok.encode_arrays(texts, 2)
    back = pickle.loads(pickle.dumps(tok))          # the pool and the thread encoders are not pickled
    assert back.encode_arrays(texts, 2) == one


def test_absorbed_counters_count_like_one(corpora):
    """Counts split over several counters (threads) and absorbed into one equal one counter's."""
    texts = read_jsonl_texts(corpora / "multi", limit=60) + ["x\ud800 y it's"]
    whole = pretokenize.PretokenCounter("gpt4")
    parts = [pretokenize.PretokenCounter("gpt4") for _ in range(3)]
    for i, text in enumerate(texts):
        whole.add(text)
        parts[i % 3].add(text)
    for part in parts[1:]:
        parts[0].absorb(part)
        assert len(part) == 0
    assert parts[0].drain() == whole.drain()
    with pytest.raises(ValueError, match="same pattern"):
        parts[0].absorb(pretokenize.PretokenCounter("gpt2"))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=()), max_size=40))
def test_utf8_length_counts_like_encoding_with_surrogates_as_replacement(text):
    from bpe_ops import _native, stats
    assert _native.utf8_length(text) == stats._utf8_length_python(text) == stats.utf8_length(text)


def test_utf8_length_on_real_text_of_every_script(corpora):
    from bpe_ops import _native, stats
    texts = read_jsonl_texts(corpora / "multi") + ["\ud800", "a\udfffb", "\U0010ffff", "\u07ff\u0800"]
    assert [_native.utf8_length(t) for t in texts] == [stats._utf8_length_python(t) for t in texts]
    with pytest.raises(TypeError):
        _native.utf8_length(b"bytes")
    # Still named in _pcre2 for callers that import it from there (bpe_ops/stats.py).
    assert pcre2.utf8_length is _native.utf8_length


def test_the_engines_disagreement_is_cached_on_disk_under_the_library_versions(tmp_path, monkeypatch):
    """Comparing the engines on every code point costs ~20-40 ms a class, in every process; it is
    kept on disk under regex's and PCRE2's versions, and a bad or foreign file is computed again."""
    folder = str(tmp_path / "cache")
    cls = r"\p{L}"
    computed = pretokenize._compute_disagreement(cls)
    assert pretokenize._cached_disagreement(cls, folder) == computed           # computed, then written
    [written] = (tmp_path / "cache").glob("pcre2-disagreement-*.json")
    monkeypatch.setattr(pretokenize, "_compute_disagreement", lambda c: pytest.fail("not read from the cache"))
    assert pretokenize._cached_disagreement(cls, folder) == computed           # read back
    monkeypatch.undo()
    for bad in ("not json", '{"key": "other versions", "ranges": [[65, 90]]}', '{"ranges": 3}'):
        written.write_text(bad)
        assert pretokenize._cached_disagreement(cls, folder) == computed
    blocked = tmp_path / "a file"
    blocked.write_text("")
    assert pretokenize._cached_disagreement(cls, str(blocked / "cache")) == computed   # cannot be made: only slower


def test_the_cache_folder_comes_from_the_implementation_not_the_environment(tmp_path, monkeypatch):
    """`Implementation(cache_dir=...)` decides where the disagreement is kept; TOKENBEAM_CACHE_DIR
    is only read by `from_environment` (the CLI's edge)."""
    from bpe_ops.implementation import Implementation, from_environment
    monkeypatch.setenv("TOKENBEAM_CACHE_DIR", str(tmp_path / "ignored"))
    monkeypatch.setattr(pretokenize, "_DISAGREEMENT", {})
    pretokenize._compile.cache_clear()
    try:
        implementation = from_environment({"TOKENBEAM_CACHE_DIR": str(tmp_path / "chosen")})
        assert implementation == Implementation(cache_dir=str(tmp_path / "chosen"))
        compiled = pretokenize.compile_pattern("gpt4", implementation)
        assert isinstance(compiled, pretokenize.Pcre2Pattern)
        assert list((tmp_path / "chosen").glob("pcre2-disagreement-*.json"))
        assert not (tmp_path / "ignored").exists()
        back = pickle.loads(pickle.dumps(compiled))         # the folder travels with the pattern
        assert back.cache_dir == str(tmp_path / "chosen") and back.findall("a b") == ["a", " b"]
    finally:
        pretokenize._compile.cache_clear()

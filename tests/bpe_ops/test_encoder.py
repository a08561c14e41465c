"""The encoder against slow references: in-order merge replay and a tiny textbook trainer written
here, and bpe_ops/_educational.py's lowest-rank-first replay (on hand-written merges and on GPT-2's
merges over real documents); plus round trips, special tokens, long pieces and the cache."""
import base64
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_ops import Tokenizer, _educational
from bpe_ops.pretokenize import pretokenize
from tests.conftest import read_jsonl_texts

# A merge list written by hand: overlapping runs (a a, aa a, aa aa), two routes to the same bytes
# (ab c and a bc both make "abc"), spaces, and the UTF-8 bytes of "é" (c3 a9) and "中" (e4 b8 ad).
HAND_MERGES = [
    (b"a", b"a"), (b"a", b"b"), (b"b", b"c"), (b"aa", b"a"), (b"aa", b"aa"), (b"ab", b"c"),
    (b"a", b"bc"), (b" ", b"a"), (b" a", b"b"), (b"\xc3", b"\xa9"), (b"\xc3\xa9", b"a"),
    (b"\xe4", b"\xb8"), (b"\xe4\xb8", b"\xad"), (b"c", b"c"), (b"abc", b"abc"), (b"\n", b"\n"),
    (b"aaaa", b"aaaa"), (b"b", b"a"), (b"ba", b"b"), (b"c", b"a"),
]
ALPHABET = "aaabbc é中\n"


def apply_merge(parts: list[bytes], pair: tuple[bytes, bytes]) -> list[bytes]:
    """One textbook pass: replace every occurrence of `pair`, left to right, without overlap."""
    out, i = [], 0
    while i < len(parts):
        if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(parts[i])
            i += 1
    return out


def replay(merges, data: bytes) -> list[bytes]:
    """Textbook BPE encoding: apply each merge in order to every occurrence, left to right."""
    parts = [bytes([b]) for b in data]
    for pair in merges:
        parts = apply_merge(parts, pair)
    return parts


def replay_fast(merges, data: bytes) -> list[bytes]:
    """`replay` for megabytes: symbols are written as 4-byte units (a zero byte, then three non-zero
    digits), so `bytes.replace` can only match whole symbols and does the same left-to-right,
    non-overlapping pass in C."""
    def unit(i):
        return bytes([0, 1 + i // 255 ** 2, 1 + i // 255 % 255, 1 + i % 255])
    tokens = [bytes([b]) for b in range(256)]
    index = {t: i for i, t in enumerate(tokens)}
    seq = b"".join(map(unit, data))
    for a, b in merges:
        if a + b not in index:
            index[a + b] = len(tokens)
            tokens.append(a + b)
        seq = seq.replace(unit(index[a]) + unit(index[b]), unit(index[a + b]))
    return [tokens[(seq[k + 1] - 1) * 255 ** 2 + (seq[k + 2] - 1) * 255 + seq[k + 3] - 1]
            for k in range(0, len(seq), 4)]


def lowest_rank_first(merges, data: bytes) -> list[bytes]:
    """The definition the encoder implements: merge the adjacent pair of lowest rank, leftmost first."""
    return _educational.merge([bytes([b]) for b in data], _educational.ranks_of(merges))


def default_ids(merges) -> dict[bytes, int]:
    """Ids when no vocab is given: bytes 0..255, then each new concatenation in merge order."""
    ids = {bytes([b]): b for b in range(256)}
    for a, b in merges:
        ids.setdefault(a + b, len(ids))
    return ids


def reference_encode(merges, text: str, pattern: str) -> list[int]:
    ids = default_ids(merges)
    return [ids[t] for piece in pretokenize(text, pattern) for t in replay(merges, piece.encode("utf-8"))]


def train_slow(data: bytes, num_merges: int) -> list[tuple[bytes, bytes]]:
    """Textbook trainer on one symbol sequence: recount all pairs, merge the most frequent (ties: the
    greatest pair), repeat."""
    parts = [bytes([b]) for b in data]
    merges = []
    for _ in range(num_merges):
        counts = {}
        for p in zip(parts, parts[1:]):
            counts[p] = counts.get(p, 0) + 1
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], p))
        merges.append(best)
        parts = apply_merge(parts, best)
    return merges


texts = st.text(alphabet=ALPHABET, max_size=300)
no_surrogates = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", "o200k"])
@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_encode_equals_in_order_replay(pattern, text):
    tok = Tokenizer(HAND_MERGES, pattern=pattern)
    assert tok.encode(text) == reference_encode(HAND_MERGES, text, pattern)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=0, max_size=600), alphabet_bytes=st.sampled_from([b"abc", b"aab \xc3\xa9", b"ab"]))
def test_one_long_piece_equals_replay(data, alphabet_bytes):
    # Random byte strings over a few bytes, as one pre-token (pattern `[\s\S]+`), so pieces longer
    # than the short-piece limit take the long-piece path.
    text = bytes(alphabet_bytes[b % len(alphabet_bytes)] for b in data).decode("utf-8", "replace")
    tok = Tokenizer(HAND_MERGES, pattern=r"[\s\S]+")
    ids = default_ids(HAND_MERGES)
    expected = [ids[t] for t in replay(HAND_MERGES, text.encode("utf-8"))] if text else []
    assert tok.encode(text) == expected


def test_merges_that_rank_before_their_parts_follow_lowest_rank_first():
    # ("ab", "a") and ("ab", "c") rank before ("a", "b"), which makes their left part: in-order
    # replay and the lowest-rank-first rule differ ("abab" -> aba b, not ab ab), and the encoder
    # must follow the rule on long pieces too.
    merges = [(b"ab", b"a"), (b"ab", b"c"), (b"a", b"b"), (b"b", b"c"), (b"c", b"a")]
    vocab = {b: bytes([b]) for b in range(256)}
    vocab.update({256: b"aba", 257: b"abc", 258: b"ab", 259: b"bc", 260: b"ca"})
    tok = Tokenizer(merges, pattern=r"[\s\S]+", vocab=vocab)
    ids = {t: i for i, t in vocab.items()}
    rng = random.Random(7)
    for length in (5, 50, 500):
        text = "".join(rng.choice("abc") for _ in range(length))
        expected = [ids[t] for t in lowest_rank_first(merges, text.encode())]
        assert tok.encode(text) == expected


@settings(max_examples=100, deadline=None)
@given(train=st.text(alphabet="abc", min_size=2, max_size=80), num_merges=st.integers(1, 40),
       text=st.text(alphabet="abc", min_size=101, max_size=400))
def test_trained_merges_on_long_pieces_equal_replay(train, num_merges, text):
    # Merge lists trained on tiny alphabets often make the same bytes by two routes, which is when
    # the order of positions inside the long-piece algorithm matters.
    merges = train_slow(train.encode(), num_merges)
    tok = Tokenizer(merges, pattern=r"[\s\S]+")
    ids = default_ids(merges)
    assert tok.encode(text) == [ids[t] for t in replay(merges, text.encode())]


@settings(max_examples=300, deadline=None)
@given(text=no_surrogates)
def test_round_trip(text):
    for pattern in ("gpt2", "gpt4", "o200k"):
        tok = Tokenizer(HAND_MERGES, pattern=pattern)
        assert tok.decode(tok.encode(text)) == text


def test_custom_pattern_keeps_the_text_between_matches():
    tok = Tokenizer(HAND_MERGES, pattern=r"\d+")
    text = "ab 12 ca\n\n 3abc"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    # Merges never cross a piece boundary: the pieces are "ab ", "12", " ca\n\n ", "3", "abc".
    assert ids == [i for piece in ["ab ", "12", " ca\n\n ", "3", "abc"] for i in tok.encode(piece)]
    # Capturing groups do not change the pieces.
    assert Tokenizer(HAND_MERGES, pattern=r"(\d)+").encode(text) == ids


def test_lone_surrogate_becomes_replacement_character():
    tok = Tokenizer(HAND_MERGES)
    assert tok.decode(tok.encode("a\ud800b")) == "a\ufffdb"


def test_special_tokens_are_text_unless_allowed():
    specials = ["<|eot|>", "<|pad|>"]
    tok = Tokenizer(HAND_MERGES, special_tokens=specials)
    n_tokens = len(default_ids(HAND_MERGES))   # bytes and merge results
    assert tok.special_tokens == {"<|eot|>": n_tokens, "<|pad|>": n_tokens + 1}
    assert tok.vocab_size == n_tokens + 2
    text = "ab<|eot|>c<|pad|>"
    plain = tok.encode(text)
    assert not set(plain) & set(tok.special_tokens.values())
    assert tok.decode(plain) == text
    assert tok.encode(text, allowed_special={"<|eot|>"}) == (
        tok.encode("ab") + [tok.special_tokens["<|eot|>"]] + tok.encode("c<|pad|>"))
    assert tok.encode(text, allowed_special="all") == (
        tok.encode("ab") + [n_tokens] + tok.encode("c") + [n_tokens + 1])
    assert tok.decode(tok.encode(text, allowed_special="all")) == text
    with pytest.raises(ValueError, match="<|nope|>"):
        tok.encode(text, allowed_special={"<|nope|>"})


def test_special_tokens_with_explicit_ids():
    tok = Tokenizer(HAND_MERGES, special_tokens={"<s>": 1000, "</s>": 1001})
    assert tok.encode("<s>x</s>", allowed_special="all")[0] == 1000
    assert tok.vocab[1001] == b"</s>"
    assert tok.vocab_size == 1002
    with pytest.raises(ValueError):
        Tokenizer(HAND_MERGES, special_tokens={"<s>": 97})   # 97 is the byte "a"


def test_raw_byte_ids_are_the_single_byte_entries_of_the_vocab(tmp_path):
    # The byte-level shortcut (the 256 byte tokens and the special tokens) against the whole vocab
    # read (`single_byte_ids`): bytes in shuffled ids, one-byte special tokens, a reloaded file.
    from bpe_ops.stats import single_byte_ids

    perm = list(range(256))
    random.Random(7).shuffle(perm)
    vocab = {perm[b]: bytes([b]) for b in range(256)}
    vocab.update({i: t for i, t in Tokenizer(HAND_MERGES).vocab.items() if i >= 256})
    shuffled = Tokenizer(HAND_MERGES, vocab=vocab, special_tokens={"|": 280, "<s>": 281})
    with_specials = Tokenizer(HAND_MERGES, special_tokens={"<s>": 280, "|": 281, "~": 282})
    assert len(with_specials.raw_byte_ids) == 258 and with_specials.raw_byte_ids[-2:] == (281, 282)
    for i, tok in enumerate((Tokenizer(HAND_MERGES), shuffled, with_specials)):
        assert tok.raw_byte_ids == single_byte_ids(tok.vocab)
        tok.save(str(tmp_path / str(i)))
        loaded = Tokenizer.from_file(str(tmp_path / str(i) / "tokenizer.json"))
        assert loaded.raw_byte_ids == single_byte_ids(loaded.vocab) == tok.raw_byte_ids


def test_a_merge_to_an_existing_token_reuses_its_id():
    tok = Tokenizer(HAND_MERGES)
    abc = [i for i, t in tok.vocab.items() if t == b"abc"]
    assert len(abc) == 1
    assert len(tok.vocab) == 256 + len(HAND_MERGES) - 1   # ("a", "bc") made no new id
    assert tok.encode("abc") == abc


def test_any_byte_to_id_assignment():
    # A foreign vocab: the 256 bytes in shuffled ids, the merge results after them.
    rng = random.Random(3)
    perm = list(range(256))
    rng.shuffle(perm)
    plain = Tokenizer(HAND_MERGES)
    vocab = {perm[b]: bytes([b]) for b in range(256)}
    vocab.update({i: t for i, t in plain.vocab.items() if i >= 256})
    tok = Tokenizer(HAND_MERGES, vocab=vocab)
    relabel = {i: (perm[i] if i < 256 else i) for i in plain.vocab}
    text = "aab abc é中 bab cc\n\n"
    assert tok.encode(text) == [relabel[i] for i in plain.encode(text)]
    assert tok.decode(tok.encode(text)) == text


def test_vocab_without_every_byte_is_refused():
    vocab = {b: bytes([b]) for b in range(1, 256) if b != 0x41}
    with pytest.raises(ValueError, match="0x00, 0x41"):
        Tokenizer([], vocab=vocab)


def test_ignore_merges_emits_a_whole_pretoken_that_is_a_token():
    # Replay turns "abc" into [a, bc] (("a", "bc") is no merge); "abc" itself is a token via ab+c.
    merges = [(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")]
    vocab = {b: bytes([b]) for b in range(256)} | {256: b"bc", 257: b"ab", 258: b"abc"}
    assert Tokenizer(merges, vocab=vocab).encode("abc") == [ord("a"), 256]
    assert Tokenizer(merges, vocab=vocab, ignore_merges=True).encode("abc") == [258]


def test_decode_errors_and_token_bytes():
    tok = Tokenizer(HAND_MERGES)
    with pytest.raises(ValueError, match="99999"):
        tok.decode([97, 99999])
    with pytest.raises(ValueError, match="-1"):
        tok.token_bytes(-1)
    assert tok.token_bytes(256) == b"aa"
    assert tok.decode_bytes([0xC3]) == b"\xc3"
    assert tok.decode([0xC3]) == "\ufffd"


def test_one_megabyte_of_one_letter():
    tok = Tokenizer(HAND_MERGES, pattern=r"[\s\S]+")
    eight = next(i for i, t in tok.vocab.items() if t == b"a" * 8)
    # "aaaaaaaa" is the longest run token; a run of 8k letters becomes k of them.
    assert tok.encode("a" * 1_000_000) == [eight] * 125_000
    # Lengths that are no multiple of 8, against both references.
    ids = default_ids(HAND_MERGES)
    for run in ("a" * 5_003, "a" * 20_006 + "b"):
        assert tok.encode(run) == [ids[t] for t in replay(HAND_MERGES, run.encode())]
    run = "a" * 1_003
    assert tok.encode(run) == [ids[t] for t in lowest_rank_first(HAND_MERGES, run.encode())]


@pytest.fixture(scope="module")
def base64_tokenizer():
    rng = random.Random(11)
    sample = base64.b64encode(rng.randbytes(3_000))
    merges = train_slow(sample, 200)
    return Tokenizer(merges, pattern=r"[\s\S]+"), merges


def test_base64_pieces_against_the_references(base64_tokenizer):
    tok, merges = base64_tokenizer
    rng = random.Random(12)
    ids = default_ids(merges)
    for size in (10, 150, 3_000):
        blob = base64.b64encode(rng.randbytes(size))
        expected = replay(merges, blob)
        assert replay_fast(merges, blob) == expected
        assert tok.encode(blob.decode()) == [ids[t] for t in expected]


def test_one_megabyte_of_random_base64(base64_tokenizer):
    tok, merges = base64_tokenizer
    blob = base64.b64encode(random.Random(13).randbytes(750_000))
    assert len(blob) == 1_000_000
    ids = tok.encode(blob.decode())
    by_token = default_ids(merges)
    assert ids == [by_token[t] for t in replay_fast(merges, blob)]
    assert tok.decode(ids) == blob.decode()


def test_cache_is_bounded_and_does_not_change_results():
    words = [f"w{i}x" for i in range(2_000)]
    text = " ".join(words * 2)
    small = Tokenizer(HAND_MERGES, cache_size=50)
    none = Tokenizer(HAND_MERGES, cache_size=0)
    ids = small.encode(text)
    assert len(small._cache) <= 50
    assert len(none._cache) == 0
    assert ids == none.encode(text) == reference_encode(HAND_MERGES, text, "gpt4")
    assert small.encode_batch([text, "aab"]) == [ids, none.encode("aab")]


def test_classic_mode():
    # Textbook setting: characters plus a separate end-of-word symbol. Expected pieces by hand:
    # "lowest" -> l o w e s t </w> -> (e s) (es t) (est </w>) (l o) (lo w) -> low est</w>
    # "newer"  -> no merge applies -> n e w e r </w>
    symbols = ["d", "e", "i", "l", "n", "o", "r", "s", "t", "w", "</w>"]
    merges = [(b"e", b"s"), (b"es", b"t"), (b"est", b"</w>"), (b"l", b"o"), (b"lo", b"w")]
    vocab = {i: s.encode() for i, s in enumerate(symbols)}
    vocab.update({11: b"es", 12: b"est", 13: b"est</w>", 14: b"lo", 15: b"low"})
    tok = Tokenizer(merges, pattern="classic", vocab=vocab, mode="classic")
    ids = tok.encode("lowest  newer\n")
    by_token = {t: i for i, t in vocab.items()}
    assert ids == [by_token[t] for t in (b"low", b"est</w>", b"n", b"e", b"w", b"e", b"r", b"</w>")]
    assert tok.decode(ids) == "lowest newer"
    with pytest.raises(ValueError, match="'x'"):
        tok.encode("wow wxw")
    with pytest.raises(ValueError, match="classic"):
        tok.save("/nonexistent-dir-never-created")


@pytest.mark.parametrize("corpus", ["en", "code", "multi"])
def test_gpt2_encodes_real_documents_as_the_textbook_reference(gpt2_files, corpora, corpus):
    """The whole encoder (compiled split, cache, merge) against bpe_ops/_educational.py's textbook
    encoding with GPT-2's merges, vocabulary and pattern."""
    tok = Tokenizer.from_gpt2_files(*gpt2_files)
    vocab = {i: b for i, b in tok.vocab.items() if i not in tok.special_tokens.values()}
    texts = read_jsonl_texts(corpora / corpus, limit=25)
    assert [tok.encode(text) for text in texts] == [
        _educational.encode_ordinary(text, tok.merges, tok.pattern, vocab) for text in texts]


def test_ignore_merges_follows_the_textbook_reference():
    """A whole pre-token that is a token is that token (tiktoken's rule), else the merges apply."""
    vocab = {b: bytes([b]) for b in range(256)} | {256: b"ab", 257: b"abc", 258: b" abcab"}
    tok = Tokenizer([(b"a", b"b"), (b"ab", b"c")], pattern="gpt4", vocab=vocab, ignore_merges=True)
    text = "abc abcab abcabc"
    assert tok.encode(text) == _educational.encode_ordinary(text, tok.merges, tok.pattern, vocab, ignore_merges=True)
    assert tok.encode(" abcab") == [258]


def test_production_code_never_imports_the_textbook_reference():
    """bpe_ops/_educational.py is the tests' oracle: no module of the product may come to rely on it."""
    root = Path(__file__).resolve().parents[2]
    sources = [*root.joinpath("bpe_ops").glob("*.py"), *root.joinpath("pipelines").rglob("*.py"),
               *root.joinpath("schemas").rglob("*.py")]
    importing = re.compile(r"^\s*(from|import)\s[^#\n]*_educational", re.MULTILINE)
    assert len(sources) > 10
    assert [p.name for p in sources if p.name != "_educational.py" and importing.search(p.read_text())] == []

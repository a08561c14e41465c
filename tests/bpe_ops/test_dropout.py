"""BPE-dropout (bpe_ops/dropout.py, Tokenizer.encode(..., dropout=p, seed=s, record_id=r)): known
answers at p = 0 and p = 1, the random stream pinned, reproducibility per (seed, record id), round
trips, refusals, and the distribution of segmentations against Hugging Face's BPE(dropout=p)."""
import json
from collections import Counter

import pytest

from bpe_ops import Tokenizer, _educational, formats, merging
from bpe_ops.implementation import Implementation
from bpe_ops.dropout import GOLDEN, DropoutStream, splitmix64, stream_key, threshold
from tests.conftest import read_jsonl_texts
from tests.bpe_ops.test_encoder import HAND_MERGES


class Never:
    """A stream that never skips."""
    def skip(self):
        return False


@pytest.fixture(scope="module")
def gpt2(gpt2_files):
    return Tokenizer.from_gpt2_files(*gpt2_files)


class Table:
    """A tokenizer's merge table, built from its public merges and vocab by `merging`'s functions."""
    def __init__(self, tok: Tokenizer):
        self.tokens = dict(tok.vocab)
        self.token_ids = merging.invert(self.tokens)
        self.ranks, _, _, self.merged = merging.build_merge_table(tok.merges, self.tokens, self.token_ids, extend=False)
        self.reference_ranks = _educational.ranks_of(tok.merges)

    def symbols(self, piece: str) -> list[int]:
        return [self.token_ids[bytes([b])] for b in piece.encode("utf-8")]

    def dropout_python(self, symbols: list[int], stream) -> list[int]:
        return merging.merge_dropout_python(list(symbols), self.ranks, self.merged, stream)

    def reference(self, piece: str) -> list[int]:
        """The textbook merge of the piece (bpe_ops/_educational.py), as ids."""
        parts = _educational.merge([bytes([b]) for b in piece.encode("utf-8")], self.reference_ranks)
        return [self.token_ids[part] for part in parts]


@pytest.fixture(scope="module")
def english(corpora):
    return read_jsonl_texts(corpora / "tiny")[:200]


def test_splitmix64_known_answers():
    # The reference generator's first outputs from state 0 (Vigna's splitmix64.c).
    state, out = 0, []
    for _ in range(3):
        state = (state + GOLDEN) % 2**64
        out.append(splitmix64(state))
    assert out == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


def test_stream_is_a_function_of_seed_and_record_id():
    def draws(p, seed, record_id, n=64):
        stream = DropoutStream(p, seed, record_id)
        return [stream.skip() for _ in range(n)]
    assert draws(0.5, 7, "doc-1") == draws(0.5, 7, "doc-1")
    assert draws(0.5, 7, "doc-1") != draws(0.5, 7, "doc-2")
    assert draws(0.5, 7, "doc-1") != draws(0.5, 8, "doc-1")
    assert stream_key(7, "doc-1") == stream_key(7, "doc-1") != stream_key(7, "doc-1 ")
    assert not any(draws(0.0, 1, "x", 10_000)) and all(draws(1.0, 1, "x", 10_000))
    assert threshold(0.5) == 2**63 and threshold(1.0) == 2**64 and threshold(0.0) == 0


def test_skip_rate_is_p():
    # 100,000 draws at p: the count is binomial, sd = sqrt(n p (1 - p)) <= 158; 5 sd bounds it.
    for p in (0.05, 0.3, 0.9):
        stream = DropoutStream(p, 11, "rate")
        n = 100_000
        skips = sum(stream.skip() for _ in range(n))
        assert abs(skips - n * p) < 5 * (n * p * (1 - p)) ** 0.5, (p, skips)


def test_merge_dropout_that_never_skips_is_the_plain_merge(gpt2, english):
    table = Table(gpt2)
    pieces = {piece for text in english for piece in _educational.split(text, gpt2.pattern)}
    pieces |= {"a" * 300, "ab" * 200 + "c"}              # long pieces
    assert len(pieces) > 5_000
    for piece in pieces:
        assert table.dropout_python(table.symbols(piece), Never()) == table.reference(piece), piece


def test_merge_dropout_that_never_skips_follows_lowest_rank_first_on_a_hand_merge_list():
    table = Table(Tokenizer(HAND_MERGES, pattern=r"\S+|\s+"))
    for word in ["aaaaaaaaa", "abcabc", "ababcbc", "aé中aabc", "cacacab", "aaaabaaaa"]:
        assert table.dropout_python(table.symbols(word), Never()) == table.reference(word), word


@pytest.mark.slow
@pytest.mark.skipif(merging._piece_merge is None, reason="bpe_ops._piece_merge is not built")
def test_compiled_dropout_replay_equals_the_python_one(gpt2, gpt2_files, english, corpora):
    """The C twin draws the same stream and makes the same ids, piece after piece (the stream goes
    on across pieces), on every piece of the tiny corpus and long pieces, at several p."""
    table = Table(gpt2)
    pieces = [piece for text in english[:60] for piece in _educational.split(text, gpt2.pattern)]
    pieces += ["a" * 300, "ab" * 200 + "c", "x"]
    for p in (0.05, 0.1, 0.3, 0.5, 0.9, 1.0):
        compiled, python = DropoutStream(p, 1, "c"), DropoutStream(p, 1, "c")
        for piece in pieces:
            symbols = table.symbols(piece)
            assert gpt2._merge_dropout(list(symbols), compiled) == table.dropout_python(symbols, python)
            assert compiled.state == python.state, (p, piece)

    # Whole texts (the compiled path takes all of a text's pieces in one call; GPT-2's byte ids are
    # not the bytes): the same ids as the pure-Python tokenizer.
    pure = Tokenizer.from_gpt2_files(*gpt2_files, implementation=Implementation(compiled=False))
    assert pure._merger is None and gpt2.token_bytes(ord("a")) != b"a"
    texts = english[:20] + read_jsonl_texts(corpora / "multi")[:10] + read_jsonl_texts(corpora / "code")[:10] + [
        "", "\ud800 lone", "a" * 500]
    for p in (0.1, 0.5, 1.0):
        for i, text in enumerate(texts):
            assert gpt2.encode(text, dropout=p, seed=9, record_id=i) == pure.encode(text, dropout=p, seed=9, record_id=i)


def test_p0_is_the_deterministic_encoding_and_p1_gives_the_bytes(gpt2, english):
    for i, text in enumerate(english[:50]):
        assert gpt2.encode(text, dropout=0.0, seed=i, record_id=i) == gpt2.encode(text)
        as_bytes = gpt2.encode(text, dropout=1.0, seed=i, record_id=i)
        assert list(map(gpt2.token_bytes, as_bytes)) == [bytes([b]) for b in text.encode()]
    tok = Tokenizer(HAND_MERGES)
    assert tok.encode("aaaa abc", dropout=1, seed=0) == list(b"aaaa abc")
    assert tok.encode("aaaa abc") == [260, 32, 261] == tok.encode("aaaa abc", dropout=0, seed=1)


def test_known_answer_at_p_half():
    # Pinned: this stream, this hand merge list (a change of the generator or the merge order shows here).
    tok = Tokenizer(HAND_MERGES)
    assert [tok.decode_bytes([i]) for i in tok.encode("aaaaaaaa abcabc")] == [b"aaaaaaaa", b" ", b"abcabc"]
    got = [tok.decode_bytes([i]) for i in tok.encode("aaaaaaaa abcabc", dropout=0.5, seed=3, record_id="r")]
    assert got == [b"aa", b"aaa", b"aaa", b" ", b"ab", b"c", b"ab", b"c"]


def test_reproducible_and_round_trips(gpt2, corpora):
    texts = (read_jsonl_texts(corpora / "multi")[:20] + read_jsonl_texts(corpora / "code")[:20]
             + ["", " ", "\x00\uffff", "🙂" * 20])
    for i, text in enumerate(texts):
        ids = gpt2.encode(text, dropout=0.2, seed=5, record_id=f"r{i}")
        assert ids == gpt2.encode(text, dropout=0.2, seed=5, record_id=f"r{i}")
        assert gpt2.decode(ids) == text
    # A lone surrogate is encoded as U+FFFD, with or without dropout.
    assert gpt2.decode_bytes(gpt2.encode("\ud800 x", dropout=0.5, seed=0)) == gpt2.decode_bytes(gpt2.encode("\ud800 x"))
    long = " ".join(texts[:5])
    assert gpt2.encode(long, dropout=0.2, seed=5, record_id="a") != gpt2.encode(long, dropout=0.2, seed=5, record_id="b")
    # Unseeded: fresh randomness on every call.
    assert len({tuple(gpt2.encode(long, dropout=0.2)) for _ in range(3)}) == 3


def test_special_tokens_stay_whole_and_classic_mode_drops_out():
    tok = Tokenizer(HAND_MERGES, special_tokens=["<|end|>"])
    ids = tok.encode("abc<|end|>abc", allowed_special="all", dropout=1.0, seed=0)
    assert ids == [97, 98, 99, tok.special_tokens["<|end|>"], 97, 98, 99]
    vocab = {i: c.encode() for i, c in enumerate(["a", "b", "c", "</w>", "ab", "abc", "abc</w>"])}
    classic = Tokenizer([(b"a", b"b"), (b"ab", b"c"), (b"abc", b"</w>")], mode="classic", vocab=vocab)
    assert classic.encode("abc abc") == [6, 6]
    assert classic.encode("abc abc", dropout=1.0, seed=0) == [0, 1, 2, 3, 0, 1, 2, 3]
    assert classic.decode(classic.encode("abc abc", dropout=0.5, seed=0)) == "abc abc"


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), float("inf"), "0.1", True, None])
def test_dropout_outside_0_1_is_refused(bad):
    tok = Tokenizer(HAND_MERGES)
    with pytest.raises(ValueError, match="dropout must be a probability between 0 and 1"):
        tok.encode("abc", dropout=bad, seed=0) if bad is not None else tok.encode("abc", dropout="x")


def test_a_mode_without_a_dropout_replay_is_refused():
    tok = Tokenizer(HAND_MERGES)
    tok.mode = "piece"          # SentencePiece-style BPE has no dropout replay here
    with pytest.raises(ValueError, match="BPE-dropout supports byte-level and classic BPE, not piece mode"):
        tok.encode("abc", dropout=0.1, seed=0)


def test_seed_without_dropout_and_bad_seeds_are_refused():
    tok = Tokenizer(HAND_MERGES)
    with pytest.raises(ValueError, match="pass dropout=p with it"):
        tok.encode("abc", seed=1)
    for seed in (-1, 1.5, "1"):
        with pytest.raises(ValueError, match="seed must be a non-negative integer"):
            tok.encode("abc", dropout=0.1, seed=seed)


# ---- against Hugging Face's BPE(dropout=p) ---------------------------------------------------------

WORDS = [" international", " understanding", " responsibility", " tokenization", " extraordinary",
         " nevertheless", " characteristics", " unbelievable"]
DRAWS = 3_000
LEVEL = 0.001          # the family-wise level: Bonferroni over words and probabilities


def hf_with_dropout(tok: Tokenizer, p: float):
    import tokenizers
    data = json.loads(formats.tokenizer_json_text(tok))
    data["model"]["dropout"] = p
    return tokenizers.Tokenizer.from_str(json.dumps(data))


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_segmentations_are_distributed_as_hugging_faces(gpt2, p):
    """For each word, DRAWS segmentations from ours (one record id each) and from HF's unseeded
    dropout: a chi-square test of homogeneity on the segmentations (those seen fewer than 20 times
    in all pooled into one class) must not reject at LEVEL / (words x probabilities)."""
    from scipy import stats as scipy_stats
    hf = hf_with_dropout(gpt2, p)
    level = LEVEL / (len(WORDS) * 2)
    for word in WORDS:
        ours = Counter(tuple(gpt2.encode(word, dropout=p, seed=2024, record_id=i)) for i in range(DRAWS))
        theirs = Counter(tuple(e.ids) for e in hf.encode_batch([word] * DRAWS))
        frequent = [s for s in set(ours) | set(theirs) if ours[s] + theirs[s] >= 20]
        rows = [[side[s] for s in frequent] + [DRAWS - sum(side[s] for s in frequent)] for side in (ours, theirs)]
        rows = [list(col) for col in zip(*(c for c in zip(*rows) if sum(c)))]     # no empty class
        assert len(rows[0]) >= 2, word            # the test has something to compare
        _, p_value, _, _ = scipy_stats.chi2_contingency(rows)
        assert p_value > level, (word, p, p_value, ours.most_common(5), theirs.most_common(5))

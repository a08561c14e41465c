"""The BPE trainer: the textbook examples, and the fast incremental loop against a slow reference.

Every training test runs twice: with the pure-Python loop and with its compiled twin
(`bpe_ops._merge_loop`), so both meet the same expectations; the real-corpus tests also require the
two to give identical results, progress calls included.
"""
import random
import shutil
import sysconfig
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpe_ops import pretokenize, train_bpe, trainer
from bpe_ops.implementation import Implementation
from bpe_ops.trainer import learn_merges, vocab_from_merges
from tests.conftest import read_jsonl_texts

IMPLEMENTATIONS = ["python", "c"]
TIE_BREAKS = ["largest", "smallest", "hf"]


def has_compiler() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None


def implementation(name: str) -> Implementation:
    """The Implementation that runs one loop: "python" (compiled=False) or "c".

    Without the built extension the "c" runs fail where a C compiler exists (the build is broken or
    was skipped) and skip where none does (the pure-Python loop is then the product).
    """
    if name == "c" and trainer._merge_loop is None:
        msg = "bpe_ops._merge_loop is not built (python setup.py build_ext --inplace)"
        if has_compiler():
            pytest.fail(msg)
        pytest.skip(msg + " and there is no C compiler")
    return Implementation(compiled=name == "c")


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request) -> Implementation:
    """The test runs once per loop, passing this to learn_merges and train_bpe."""
    return implementation(request.param)


TEXTBOOK = ("low low low low low lower lower newest newest newest newest newest newest "
            "widest widest widest new new newer")
TEXTBOOK_2 = " ".join(["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3)


def reference_merges(counts, num_merges, min_frequency=2, tie_break="largest", mode="byte", max_token_length=None):
    """The textbook algorithm, as plainly as possible: recount every pair before each merge.

    Symbols are their bytes; a merge whose result already is a token is still made but adds no
    token (Hugging Face's rule); `num_merges` counts new tokens. With `max_token_length` L, a pair
    is counted only when both are base symbols or their lengths (in base symbols; `</w>` counts
    none) add up to less than L (Hugging Face's rule too).
    """
    if mode == "byte":
        alphabet = [bytes([b]) for b in range(256)]
        # Hugging Face orders the byte alphabet by each byte's GPT-2 unicode character.
        hf_order = sorted(alphabet, key=pretokenize.token_to_unicode)
        words = [([bytes([b]) for b in w], n) for w, n in counts.items() if n > 0]
    else:
        chars = sorted({c for w in counts for c in w.decode()})
        alphabet = [c.encode() for c in chars] + [b"</w>"]
        hf_order = list(alphabet)
        words = [([c.encode() for c in w.decode()] + [b"</w>"], n) for w, n in counts.items() if n > 0]
    initial_tokens = sum(len(symbols) * n for symbols, n in words)
    tokens = list(alphabet)
    length = {t: int(t != b"</w>" or mode == "byte") for t in alphabet}

    def counted(pair):
        return (max_token_length is None or (pair[0] in alphabet and pair[1] in alphabet)
                or length[pair[0]] + length[pair[1]] < max_token_length)
    merges, merge_counts, tokens_saved, tied, duplicates = [], [], [], 0, 0
    stop_reason = "vocab_size"
    while len(tokens) - len(alphabet) < num_merges:
        pairs = Counter()
        for symbols, n in words:
            for pair in zip(symbols, symbols[1:]):
                if counted(pair):
                    pairs[pair] += n
        if not pairs:
            stop_reason = "no_pairs"
            break
        best = max(pairs.values())
        if best < min_frequency:
            stop_reason = "min_frequency"
            break
        candidates = [pair for pair, count in pairs.items() if count == best]
        if tie_break == "largest":
            pair = max(candidates)
        elif tie_break == "smallest":
            pair = min(candidates)
        else:
            hf_ids = hf_order + tokens[len(alphabet):]
            pair = min(candidates, key=lambda p: (hf_ids.index(p[0]), hf_ids.index(p[1])))
        tied += len(candidates) > 1
        merged = pair[0] + pair[1]
        if merged in tokens:
            duplicates += 1
        else:
            tokens.append(merged)
            length[merged] = length[pair[0]] + length[pair[1]]
        merges.append(pair)
        merge_counts.append(best)
        new_words = []
        saved = 0
        for symbols, n in words:
            out, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
                    out.append(merged)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            new_words.append((out, n))
            saved += n * (len(symbols) - len(out))
        words = new_words
        tokens_saved.append(saved)
    return dict(merges=merges, merge_counts=merge_counts, tied_merges=tied,
                duplicate_merges=duplicates, stop_reason=stop_reason, initial_tokens=initial_tokens,
                tokens_saved=tokens_saved)


def summary(result):
    return dict(merges=result.merges, merge_counts=result.merge_counts, tied_merges=result.tied_merges,
                duplicate_merges=result.duplicate_merges, stop_reason=result.stop_reason,
                initial_tokens=result.initial_tokens, tokens_saved=result.tokens_saved)


def pieces(tok, word):
    return [tok.vocab[i].decode() for i in tok.encode(word)]


def as_pairs(text):
    """"w e, t </w>" -> [(b"w", b"e"), (b"t", b"</w>")]"""
    return [tuple(s.encode() for s in merge.split(" ")) for merge in text.split(", ")]


# ---- the textbook ----------------------------------------------------------------------------


def test_textbook_largest(impl):
    counts = pretokenize.count_pretokens([TEXTBOOK], "classic")
    result = learn_merges(counts, 10, mode="classic", tie_break="largest", implementation=impl)
    assert result.merges == as_pairs(
        "w e, t </w>, s t</w>, n e, w </w>, ne we, l o, newe st</w>, lo w</w>, w i")
    alphabet_size = len(set(TEXTBOOK.replace(" ", ""))) + 1          # characters and </w>
    tok = train_bpe([TEXTBOOK], vocab_size=alphabet_size + 10, pattern="classic", tie_break="largest",
                    implementation=impl)
    assert tok.merges == result.merges
    assert pieces(tok, "lowest") == ["lo", "we", "st</w>"]
    assert pieces(tok, "newer") == ["newe", "r", "</w>"]
    assert pieces(tok, "wider") == ["wi", "d", "e", "r", "</w>"]
    assert pieces(tok, "slow") == ["s", "low</w>"]


def test_textbook_smallest(impl):
    counts = pretokenize.count_pretokens([TEXTBOOK_2], "classic")
    result = learn_merges(counts, 5, mode="classic", tie_break="smallest", implementation=impl)
    assert result.merges == as_pairs("e s, es t, est </w>, l o, lo w")
    alphabet_size = len(set(TEXTBOOK_2.replace(" ", ""))) + 1
    tok = train_bpe(TEXTBOOK_2, vocab_size=alphabet_size + 5, pattern="classic", tie_break="smallest",
                    implementation=impl)
    assert pieces(tok, "lowest") == ["low", "est</w>"]


# ---- the fast loop equals the reference ---------------------------------------------------------

BYTE_PIECES = [b"a", b"b", b"aa", b" ", "é".encode(), "€".encode(), "😀".encode(), b"\x00", b"\xff"]
# Literal "</w>" text makes duplicates: merging < / w > rebuilds the end-of-word marker's bytes.
CLASSIC_PIECES = ["a", "b", "aa", "é", "😀", "</w>", "<", "w", ">"]
COUNT = st.one_of(st.integers(1, 6), st.integers(2**40, 2**40 + 3))


def corpus(pieces):
    word = st.lists(st.sampled_from(pieces), min_size=1, max_size=8).map(lambda ps: ps[0][:0].join(ps))
    return st.dictionaries(word, COUNT, min_size=1, max_size=10)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(counts=corpus(BYTE_PIECES), num_merges=st.integers(0, 40), min_frequency=st.integers(0, 3),
       tie_break=st.sampled_from(["largest", "smallest", "hf"]))
def test_byte_mode_equals_reference(impl, counts, num_merges, min_frequency, tie_break):
    result = learn_merges(counts, num_merges, min_frequency=min_frequency, tie_break=tie_break, implementation=impl)
    assert summary(result) == reference_merges(counts, num_merges, min_frequency, tie_break)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(counts=corpus(CLASSIC_PIECES).map(lambda c: {w.encode(): n for w, n in c.items()}),
       num_merges=st.integers(0, 40), min_frequency=st.integers(0, 3),
       tie_break=st.sampled_from(["largest", "smallest", "hf"]))
def test_classic_mode_equals_reference(impl, counts, num_merges, min_frequency, tie_break):
    result = learn_merges(counts, num_merges, min_frequency=min_frequency, tie_break=tie_break,
                          mode="classic", implementation=impl)
    assert summary(result) == reference_merges(counts, num_merges, min_frequency, tie_break, "classic")


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(counts=corpus(BYTE_PIECES), num_merges=st.integers(0, 40), max_token_length=st.integers(1, 7),
       tie_break=st.sampled_from(["largest", "hf"]))
def test_max_token_length_equals_reference(impl, counts, num_merges, max_token_length, tie_break):
    result = learn_merges(counts, num_merges, tie_break=tie_break, max_token_length=max_token_length,
                          implementation=impl)
    assert summary(result) == reference_merges(counts, num_merges, 2, tie_break, max_token_length=max_token_length)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(counts=corpus(CLASSIC_PIECES).map(lambda c: {w.encode(): n for w, n in c.items()}),
       num_merges=st.integers(0, 40), max_token_length=st.integers(1, 7))
def test_max_token_length_equals_reference_in_classic_mode(impl, counts, num_merges, max_token_length):
    result = learn_merges(counts, num_merges, mode="classic", max_token_length=max_token_length,
                          implementation=impl)
    assert summary(result) == reference_merges(counts, num_merges, 2, "largest", "classic", max_token_length)


def test_max_token_length_below_one_raises(impl):
    with pytest.raises(ValueError, match="max_token_length must be at least 1"):
        learn_merges({b"abab": 3}, 5, max_token_length=0, implementation=impl)


def test_duplicate_merges_reuse_the_token(impl):
    # "<", "/", "w", ">" merge into the bytes of the end-of-word marker: a token that already exists.
    counts = {b"a</w>": 5, b"</w>b": 4}
    result = learn_merges(counts, 20, min_frequency=1, mode="classic", implementation=impl)
    assert summary(result) == reference_merges(counts, 20, 1, "largest", "classic")
    assert result.duplicate_merges >= 1
    made = [left + right for left, right in result.merges]
    assert b"</w>" in made
    alphabet = sorted({c.encode() for w in counts for c in w.decode()}) + [b"</w>"]
    vocab = vocab_from_merges(alphabet, result.merges)
    assert len(vocab) == len(alphabet) + len(result.merges) - result.duplicate_merges
    assert sorted(vocab.values()) == sorted(set(alphabet) | set(made))


def test_largest_compares_pairs_not_concatenations(impl):
    # After (a, b), the pairs (ab, b) and (a, c) tie at 3. As pairs, (ab, b) > (a, c) since
    # "ab" > "a"; as concatenations "abb" < "ac".
    counts = {b"ab": 10, b"abb": 3, b"ac": 3}
    assert learn_merges(counts, 2, tie_break="largest", implementation=impl).merges == [(b"a", b"b"), (b"ab", b"b")]
    assert learn_merges(counts, 2, tie_break="smallest", implementation=impl).merges == [(b"a", b"b"), (b"a", b"c")]


def test_hf_tie_break_orders_bytes_by_their_gpt2_character(impl):
    # " " (0x20) is below "!" (0x21) as a byte, but its GPT-2 character "Ġ" (U+0120) is above "!".
    counts = {b" a": 2, b"!a": 2}
    assert learn_merges(counts, 1, tie_break="smallest", implementation=impl).merges == [(b" ", b"a")]
    assert learn_merges(counts, 1, tie_break="hf", implementation=impl).merges == [(b"!", b"a")]
    assert learn_merges(counts, 1, tie_break="largest", implementation=impl).merges == [(b"!", b"a")]
    assert learn_merges(counts, 1, implementation=impl).tied_merges == 1


# ---- stop rules, counts, determinism ------------------------------------------------------------


def test_min_frequency_stops_the_loop(impl):
    counts = {b"ab": 3, b"cd": 1}
    result = learn_merges(counts, 10, min_frequency=2, implementation=impl)
    assert (result.merges, result.merge_counts) == ([(b"a", b"b")], [3])
    assert result.stop_reason == "min_frequency"
    result = learn_merges(counts, 10, min_frequency=1, implementation=impl)
    assert result.merges == [(b"a", b"b"), (b"c", b"d")]
    assert result.stop_reason == "no_pairs"
    result = learn_merges(counts, 1, min_frequency=1, implementation=impl)
    assert result.stop_reason == "vocab_size"
    assert learn_merges(counts, 10, min_frequency=4, implementation=impl).merges == []


def test_counts_beyond_32_bits(impl):
    big = 2**41
    # (a, b) totals 2**42 + 2: a 32-bit count would wrap to 2 and lose to (c, d).
    counts = {b"ab": big + 1, b"xab": big + 1, b"cd": 10}
    result = learn_merges(counts, 3, implementation=impl)
    assert result.merges[0] == (b"a", b"b")
    assert result.merge_counts == [2 * big + 2, big + 1, 10]
    assert result.initial_tokens == 2 * (big + 1) + 3 * (big + 1) + 2 * 10


def test_counts_beyond_64_bits(impl):
    # (a, b) totals 2**63 + 2, past int64: the compiled loop is not used, the result stays exact.
    big = 2**62
    counts = {b"ab": big + 1, b"xab": big + 1, b"cd": 10}
    result = learn_merges(counts, 3, implementation=impl)
    assert result.merge_counts[0] == 2**63 + 2
    assert summary(result) == reference_merges(counts, 3)


def test_result_does_not_depend_on_count_order(impl, corpora):
    texts = read_jsonl_texts(corpora / "tiny")
    counts = pretokenize.count_pretokens(texts, "gpt4")
    items = list(counts.items())
    shuffled = dict(random.Random(7).sample(items, len(items)))
    backwards = dict(reversed(items))
    for tie_break in ("largest", "smallest", "hf"):
        expected = summary(learn_merges(counts, 400, tie_break=tie_break, implementation=impl))
        assert expected["tied_merges"] > 0      # so the tie rule, not the order, decided
        assert summary(learn_merges(shuffled, 400, tie_break=tie_break, implementation=impl)) == expected
        assert summary(learn_merges(backwards, 400, tie_break=tie_break, implementation=impl)) == expected


def test_tokens_saved_is_the_compression_curve(impl, corpora):
    # Encoding the training pre-tokens with the learned merges gives exactly
    # initial_tokens - sum(tokens_saved) tokens; the pair counts overstate it on runs like "    ".
    texts = read_jsonl_texts(corpora / "tiny", limit=10)
    counts = pretokenize.count_pretokens(texts, "gpt4")
    tok = train_bpe(counts, vocab_size=256 + 300, implementation=impl)
    result = tok.training
    assert result.initial_tokens == sum(len(p) * n for p, n in counts.items())
    encoded = sum(len(tok.encode(p.decode("utf-8"))) * n for p, n in counts.items())
    assert encoded == result.initial_tokens - sum(result.tokens_saved)
    assert all(saved <= count for saved, count in zip(result.tokens_saved, result.merge_counts))
    assert result.merges[0] == (b" ", b" ") and result.tokens_saved[0] < result.merge_counts[0]


# ---- train_bpe ---------------------------------------------------------------------------------


def test_train_bpe_vocab_ids_and_specials(impl, corpora):
    texts = read_jsonl_texts(corpora / "tiny", limit=10)
    calls = []
    tok = train_bpe(texts, vocab_size=600, special_tokens=["<|endoftext|>", "<|pad|>"],
                    progress=lambda done, pair, count: calls.append((done, pair, count)), implementation=impl)
    result = tok.training
    assert result.stop_reason == "vocab_size"
    assert len(result.merges) == 600 - 256 - 2
    assert len(tok.vocab) == 600
    assert tok.vocab[tok.special_tokens["<|endoftext|>"]] == b"<|endoftext|>"
    assert [tok.special_tokens["<|endoftext|>"], tok.special_tokens["<|pad|>"]] == [598, 599]
    assert [tok.vocab[b] for b in range(256)] == [bytes([b]) for b in range(256)]
    assert [tok.vocab[256 + i] for i in range(len(result.merges))] == [a + b for a, b in result.merges]
    assert calls == [(i + 1, pair, count) for i, (pair, count)
                     in enumerate(zip(result.merges, result.merge_counts))]
    # Texts and their counts train the same tokenizer.
    counts = pretokenize.count_pretokens(texts, "gpt4", ["<|endoftext|>", "<|pad|>"])
    same = train_bpe(counts, vocab_size=600, special_tokens=["<|endoftext|>", "<|pad|>"], implementation=impl)
    assert same.merges == tok.merges


def test_vocab_size_too_small_raises(impl):
    with pytest.raises(ValueError, match="vocab_size 255") as err:
        train_bpe(["hello"], vocab_size=255, implementation=impl)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError):
        train_bpe(["hello"], vocab_size=256, special_tokens=["<|endoftext|>"], implementation=impl)
    assert train_bpe(["hello hello"], vocab_size=256, implementation=impl).merges == []
    with pytest.raises(ValueError):
        train_bpe(["low lower"], vocab_size=5, pattern="classic", implementation=impl)    # 6 symbols: e l o r w </w>


def test_bad_arguments_raise(impl):
    with pytest.raises(ValueError, match="tie_break"):
        learn_merges({b"ab": 2}, 1, tie_break="random", implementation=impl)
    with pytest.raises(ValueError, match="mode"):
        learn_merges({b"ab": 2}, 1, mode="unigram", implementation=impl)
    with pytest.raises(ValueError, match="negative"):
        learn_merges({b"ab": -2}, 1, implementation=impl)


# ---- the compiled loop and its pure-Python twin ------------------------------------------------


@pytest.fixture(scope="module")
def real_counts(corpora):
    """Pre-token counts of tiny and some multilingual text (many scripts, multi-byte symbols)."""
    texts = read_jsonl_texts(corpora / "tiny") + read_jsonl_texts(corpora / "multi", limit=60)
    return {pattern: pretokenize.count_pretokens(texts, pattern) for pattern in ("gpt4", "classic")}


@pytest.mark.parametrize("tie_break", TIE_BREAKS)
@pytest.mark.parametrize("pattern, min_frequency", [("gpt4", 2), ("classic", 40)])
def test_compiled_loop_equals_python_on_real_text(real_counts, tie_break, pattern, min_frequency):
    counts = real_counts[pattern]
    mode = "classic" if pattern == "classic" else "byte"
    runs = {}
    for impl in IMPLEMENTATIONS:
        calls = []
        result = learn_merges(counts, 2500, min_frequency=min_frequency, tie_break=tie_break,
                              mode=mode, progress=lambda *call: calls.append(call),
                              implementation=implementation(impl))
        runs[impl] = (result, calls)
    (python, python_calls), (compiled, compiled_calls) = runs["python"], runs["c"]
    assert python.tied_merges > 100          # the tie rule decided many merges
    assert compiled == python                # every field of the TrainResult
    assert compiled_calls == python_calls
    assert len(python_calls) == len(python.merges) > 1000


def test_learn_merges_picks_the_loop(monkeypatch):
    """The compiled loop unless the implementation asks for Python or the extension is absent; the
    environment is not read (TOKENBEAM_PURE_PYTHON is the CLI's to map)."""
    calls = []

    class Spy:
        @staticmethod
        def merge_loop(*args):
            calls.append(args)
            return trainer._merge_loop_python(*args)

    counts = {b"abab": 3, b"ba": 2}
    expected = reference_merges(counts, 5)
    monkeypatch.setattr(trainer, "_merge_loop", Spy)
    monkeypatch.setenv("TOKENBEAM_PURE_PYTHON", "1")
    assert summary(learn_merges(counts, 5)) == expected
    assert len(calls) == 1                   # the default: compiled, whatever the environment says
    assert summary(learn_merges(counts, 5, implementation=Implementation(compiled=False))) == expected
    assert len(calls) == 1                   # the argument forced the Python twin
    tok = train_bpe({b"abab": 3, b"ba": 2}, 256 + 2, implementation=Implementation(compiled=False))
    assert len(calls) == 1 and tok.implementation == Implementation(compiled=False)
    monkeypatch.setattr(trainer, "_merge_loop", None)    # no compiler: the extension is absent
    assert summary(learn_merges(counts, 5)) == expected


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_byte_mode_words_may_be_the_pre_tokens_themselves(impl, corpora):
    """Both loops take byte-mode pre-tokens as bytes (byte b is symbol b), skipping single bytes and
    zero counts, with the same result as their symbolized strings."""
    counts = dict(pretokenize.count_pretokens(read_jsonl_texts(corpora / "tiny", limit=10), "gpt4"))
    counts.update({b"x": 7, b"zero count": 0})
    alphabet = [bytes([b]) for b in range(256)]
    words, weights, _ = trainer._symbolize(counts, "byte", alphabet)
    loop = trainer._merge_loop.merge_loop if implementation(impl).compiled else trainer._merge_loop_python
    as_bytes = loop(list(counts), list(counts.values()), alphabet, 300, 2, "largest", None, None)
    as_str = loop(words, weights, alphabet, 300, 2, "largest", None, None)
    assert as_bytes == as_str and len(as_bytes[0]) == 300


def test_compiled_loop_refuses_counts_beyond_64_bits():
    implementation("c")                      # skips (or fails) without the extension
    merge_loop = trainer._merge_loop.merge_loop
    alphabet = [bytes([b]) for b in range(256)]
    args = (alphabet, 5, 2, "largest", None, None)
    # (a, b) would count 2**63 + 2; one count alone may fit while the sum does not.
    with pytest.raises(OverflowError, match="64 bits"):
        merge_loop(["ab", "xab"], [2**62 + 1, 2**62 + 1], *args)
    with pytest.raises(OverflowError):
        merge_loop(["ab"], [2**64], *args)
    assert merge_loop(["ab", "xab"], [2**61, 2**61], *args)[1][0] == 2**62


def test_progress_errors_stop_the_loop(impl):
    def progress(done, pair, count):
        if done == 3:
            raise KeyError("stop here")

    with pytest.raises(KeyError, match="stop here"):
        learn_merges({b"abcdefgh": 5}, 6, progress=progress, implementation=impl)

"""Digit and normalization options of training (`train_bpe(split_digits=, digit_group=, normalize=,
lowercase=)`), held to the oracles: every tokenizer.json we write loads in Hugging Face `tokenizers`,
and every tokenizer.tiktoken in tiktoken, and both encode held-out text of corpora/{en,code,multi}
exactly as our `Tokenizer.from_file` does.

Training reads the first records of each corpus (about 0.9 MB); the held-out text is the last shard
of each, which training never sees.
"""
import base64
import json
import unicodedata

import pytest
import regex
import tiktoken
from hypothesis import given, settings, strategies as st
from tokenizers import Tokenizer as HFTokenizer

from bpe_ops import Tokenizer, formats, hf_components, pretokenize, train_bpe
from bpe_ops.text_rules import text_rules

pytestmark = pytest.mark.slow

CORPORA = ("en", "code", "multi")
VOCAB_SIZE = 2048
DIGIT = regex.compile(r"\p{N}")


def first_texts(folder, max_bytes):
    texts, size = [], 0
    for shard in sorted(folder.glob("*.jsonl"))[:-1]:
        with open(shard, encoding="utf-8") as f:
            for line in f:
                texts.append(json.loads(line)["text"])
                size += len(texts[-1].encode("utf-8"))
                if size >= max_bytes:
                    return texts
    return texts


def held_out_texts(folder, limit):
    with open(sorted(folder.glob("*.jsonl"))[-1], encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(limit), f)]


@pytest.fixture(scope="module")
def training_texts(corpora):
    return [t for name in CORPORA for t in first_texts(corpora / name, 300_000)]


@pytest.fixture(scope="module")
def held_out(corpora):
    texts = [t for name in CORPORA for t in held_out_texts(corpora / name, 40)]
    assert sum(len(DIGIT.findall(t)) for t in texts) > 10_000     # numbers to split
    assert any(unicodedata.normalize("NFKC", t) != t for t in texts)   # text NFKC changes
    return texts


def trained(training_texts, tmp_path, **options):
    tok = train_bpe(training_texts, vocab_size=VOCAB_SIZE, **options)
    tok.save(tmp_path)
    return Tokenizer.from_file(tmp_path / "tokenizer.json")


def assert_same_ids(ours, theirs, texts, who):
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    assert len(ours) == len(theirs) == len(texts) and not bad, \
        f"{who}: {len(bad)} of {len(texts)} texts differ, first {texts[bad[0]][:80]!r}"


def hf_ids(folder, texts):
    hf = HFTokenizer.from_file(str(folder / "tokenizer.json"))
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


def tiktoken_encoding(folder, pattern):
    ranks = {}
    for line in (folder / "tokenizer.tiktoken").read_text(encoding="ascii").splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding("trained", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})


def digits_in(token: bytes) -> int:
    return len(DIGIT.findall(token.decode("utf-8", "ignore")))


@pytest.mark.parametrize("pattern, options, most_digits", [
    ("gpt4", {"split_digits": True}, 1),
    ("o200k", {"split_digits": True}, 1),
    ("gpt2", {"digit_group": 2}, 2),
    (r"\S+|\s+", {"split_digits": True}, 1),            # a custom regex: a pre-tokenizer chain
])
def test_digit_rules_encode_identically_everywhere(training_texts, held_out, tmp_path, pattern, options,
                                                   most_digits):
    tok = trained(training_texts, tmp_path, pattern=pattern, **options)
    # No learned token holds more digits than the rule allows; without it, some do.
    assert max(map(digits_in, tok.vocab.values())) == most_digits
    ours = tok.encode_batch(held_out)
    assert_same_ids(ours, hf_ids(tmp_path, held_out), held_out, "Hugging Face tokenizers")
    assert [tok.decode(ids) for ids in ours] == held_out
    recipe = formats.tiktoken_recipe(tok)
    if pattern.startswith("\\"):
        # No single regex splits as Split(regex) + Split(digits): no rank file, said so.
        assert not recipe["written"] and not (tmp_path / "tokenizer.tiktoken").exists()
        assert "no tokenizer.tiktoken" in recipe["note"]
    else:
        assert recipe == {"written": True, "pattern": tok.pattern, "identical": True, "note": recipe["note"]}
        enc = tiktoken_encoding(tmp_path, recipe["pattern"])
        assert_same_ids(ours, enc.encode_ordinary_batch(held_out), held_out, "tiktoken")


def test_without_digit_rules_tokens_hold_several_digits(training_texts, tmp_path):
    tok = train_bpe(training_texts, vocab_size=VOCAB_SIZE, pattern="gpt4")
    assert max(map(digits_in, tok.vocab.values())) == 3


@pytest.mark.parametrize("normalize, lowercase", [("NFKC", False), ("NFC", True), ("NFD", False), ("NFKD", True),
                                                  (None, True)])
def test_normalization_round_trips_through_hugging_face(training_texts, held_out, tmp_path, normalize, lowercase):
    tok = trained(training_texts, tmp_path, pattern="gpt4", normalize=normalize, lowercase=lowercase,
                  split_digits=normalize == "NFKC")
    spec = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))["normalizer"]
    steps = [{"type": normalize}] * bool(normalize) + [{"type": "Lowercase"}] * lowercase
    assert spec == (steps[0] if len(steps) == 1 else {"normalizers": steps, "type": "Sequence"})
    ours = tok.encode_batch(held_out)
    assert_same_ids(ours, hf_ids(tmp_path, held_out), held_out, "Hugging Face tokenizers")
    normalize_text = hf_components.normalizer(spec)
    assert [tok.decode(ids) for ids in ours] == list(map(normalize_text, held_out))
    # tiktoken has no normalizer: the rank file gives the same ids on text normalized first.
    recipe = formats.tiktoken_recipe(tok)
    assert recipe["written"] and not recipe["identical"] and "normalized" in recipe["note"]
    enc = tiktoken_encoding(tmp_path, recipe["pattern"])
    assert_same_ids(ours, enc.encode_ordinary_batch(list(map(normalize_text, held_out))), held_out, "tiktoken")


def test_training_counts_normalized_text(training_texts):
    """The counts are those of the normalized text: a tokenizer trained with NFKC + lowercase has the
    merges of one trained on text normalized beforehand."""
    ours = train_bpe(training_texts, vocab_size=1024, normalize="NFKC", lowercase=True)
    normalized = [hf_components.lowercase(unicodedata.normalize("NFKC", t)) for t in training_texts]
    assert ours.merges == train_bpe(normalized, vocab_size=1024).merges


@pytest.mark.parametrize("name, groups", [("gpt4", (1, 3)), ("o200k", (1, 3)), ("gpt2", (1, 2, 5))])
def test_folded_digit_rule_equals_the_chain(held_out, name, groups):
    """For a named pattern the digit rule replaces the pattern's own digit alternative: the one
    regex splits exactly as the pattern followed by Split(\\p{N}{1,K}) does wherever the chain groups
    digits from the left of the run too (gpt2 keeps whole runs; gpt4 and o200k cut them into threes,
    so the chain's pairs of K=2 would restart at every third digit, where the rule's do not)."""
    for group in groups:
        folded = pretokenize.compile_pattern(text_rules(name, digit_group=group).pattern).findall
        chain = hf_components.pre_tokenizer(text_rules(f"(?:{pretokenize.PATTERNS[name]})",
                                                       digit_group=group).pre_tokenizer)
        for text in held_out:
            assert folded(text) == chain(text), (name, group, text[:80])


def test_digit_group_beyond_three_regroups_named_patterns(tmp_path):
    tok = train_bpe(["1234567 12345678"] * 20, vocab_size=256 + 30, pattern="gpt4", digit_group=4)
    assert [tok.decode([i]) for i in tok.encode("123456789")] == ["1234", "5678", "9"]


@pytest.mark.parametrize("options, message", [
    ({"split_digits": True, "digit_group": 2}, "split_digits and digit_group exclude each other"),
    ({"digit_group": 0}, "digit_group must be an integer of at least 1"),
    ({"normalize": "NFX"}, "normalize must be one of NFC, NFD, NFKC, NFKD"),
    ({"normalize": "NFC", "pattern": "classic"}, "classic mode takes no normalization"),
])
def test_bad_options_raise(options, message):
    with pytest.raises(ValueError, match=message):
        train_bpe(["a b"], vocab_size=300, **options)


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.sampled_from(list("0123456789 \t\n\r aZé.,'s-/") + ["١", "²", "Ⅻ", "\u00a0", "’"]),
                    max_size=40),
       name_and_group=st.sampled_from([("gpt4", 1), ("gpt4", 3), ("o200k", 1), ("o200k", 3), ("gpt2", 1),
                                       ("gpt2", 2), ("gpt2", 4)]))
def test_folded_digit_rule_equals_the_chain_on_any_text(text, name_and_group):
    name, group = name_and_group
    folded = pretokenize.compile_pattern(text_rules(name, digit_group=group).pattern).findall
    chain = hf_components.pre_tokenizer(text_rules(f"(?:{pretokenize.PATTERNS[name]})",
                                                   digit_group=group).pre_tokenizer)
    assert folded(text) == chain(text)

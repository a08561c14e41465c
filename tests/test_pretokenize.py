"""Pre-tokenization: our named patterns split real text exactly as Hugging Face's Split(Regex) does
(Oniguruma), special tokens split first, and the byte <-> unicode table is GPT-2's."""
import pytest
from tokenizers import Regex, pre_tokenizers

from bpe_ops import pretokenize
from tests.conftest import read_jsonl_texts


@pytest.mark.parametrize("name", ["gpt2", "gpt4", "o200k"])
def test_named_patterns_split_like_hf_on_real_text(name, corpora):
    hf = pre_tokenizers.Split(Regex(pretokenize.PATTERNS[name]), behavior="isolated")
    texts = read_jsonl_texts(corpora / "multi") + read_jsonl_texts(corpora / "code")[:200]
    texts.append("x = 4294967295\n\n\n  \t end   \r\n 12345678 ok's YOU'LL ")
    for text in texts:
        assert pretokenize.pretokenize(text, name) == [p for p, _ in hf.pre_tokenize_str(text)]


def test_long_numbers_are_split_in_threes_by_gpt4():
    assert pretokenize.pretokenize("4294967295", "gpt4") == ["429", "496", "729", "5"]
    assert pretokenize.pretokenize("4294967295", "gpt2") == ["4294967295"]


def test_special_tokens_split_first_and_are_removed():
    text = "a<|endoftext|>b <|fim|><|endoftext|>c"
    assert pretokenize.pretokenize(text, "gpt2", ["<|endoftext|>", "<|fim|>"]) == ["a", "b", " ", "c"]
    assert list(pretokenize.split_on_special("x<|a|>", ["<|a|>", "<|a|>y"])) == [("x", False), ("<|a|>", True)]
    # The longest special token wins where two overlap.
    assert list(pretokenize.split_on_special("<|a|>y", ["<|a|>", "<|a|>y"])) == [("<|a|>y", True)]


def test_classic_pattern_is_whitespace_words():
    assert pretokenize.pretokenize(" low  lower\tnewest\n", "classic") == ["low", "lower", "newest"]


def test_byte_table_is_gpt2s():
    table = pretokenize.bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("!")] == "!"
    assert pretokenize.unicode_to_token("Ġhello") == b" hello"
    assert pretokenize.token_to_unicode(bytes(range(256))) == "".join(table[b] for b in range(256))


def test_count_pretokens_counts_bytes_and_repairs_lone_surrogates():
    counts = pretokenize.count_pretokens(["the cat the", "x\ud800"], "gpt2")
    assert counts[b"the"] == 1 and counts[b" the"] == 1 and counts[b" cat"] == 1
    assert counts[b"x"] == 1 and counts["\ufffd".encode()] == 1


def test_bad_pattern_is_a_value_error():
    with pytest.raises(ValueError, match="invalid split pattern"):
        pretokenize.compile_pattern("(unclosed")

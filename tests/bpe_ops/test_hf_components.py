"""Byte-level files with Hugging Face normalizers and pre-tokenizer chains (bpe_ops/hf_components.py):
every configuration below gives the ids `tokenizers` gives, on documents of tiny/, multi/ and code/
and on hostile texts, through `encode`, `encode_arrays` (what the pipeline calls), the table
cache, and a re-saved file (which HF loads and encodes the same)."""
import json
import pickle

import pytest
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from bpe_ops import Implementation, Tokenizer, load, saving
from tests.conftest import read_jsonl_texts

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
HOSTILE = [
    "", " ", "  leading and trailing  ", "\n\nnew\nlines\r\n\r\n", "tabs\t\tand\u00a0nbsp\u3000ideographic",
    "ΟΔΟΣ ΟΔΟΣ. Σ σ ς ΣΑΣ", "İstanbul ǅ ẞ ß ﬁ ŉ", "e\u0301 a\u0308\u0304 \u0301 Z\u0351\u0362 Å Å",
    "👍🏽 👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈", "1234567890 ١٢٣ ०१२ ½ ² Ⅻ 3.14", "x" * 3000,
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ ㌀ ﷺ", "zero\u200bwidth \ufeffBOM soft\u00adhyphen", "a  b   c    d",
]


def split(pattern, behavior="isolated", invert=False):
    return pre_tokenizers.Split(Regex(pattern), behavior=behavior, invert=invert)


def byte_level(add_prefix_space=False, use_regex=False):
    return pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=use_regex)


CONFIGS = {
    "nfc": (normalizers.NFC(), None),
    "nfkc+lowercase": (normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]), None),
    "nfd+strip_accents+lowercase": (normalizers.Sequence(
        [normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()]), None),
    "nfkd": (normalizers.NFKD(), None),
    "replace+prepend+strip": (normalizers.Sequence([
        normalizers.Strip(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Replace("e", "E"),
        normalizers.Prepend("<>")]), None),
    "strip_left": (normalizers.Strip(left=True, right=False), None),
    "digits_then_split": (None, [pre_tokenizers.Digits(individual_digits=True), split(LLAMA3), byte_level()]),
    "two_splits": (None, [split(r"\s*[\r\n]+"), split(LLAMA3), byte_level()]),
    "removed": (None, [split(r"\s+", "removed"), byte_level(use_regex=True)]),
    "merged_with_previous": (None, [split(r"[.,;:!?]", "merged_with_previous"), byte_level(use_regex=True)]),
    "merged_with_next": (None, [split(r" ", "merged_with_next"), split(LLAMA3), byte_level()]),
    "contiguous": (None, [split(r"[^\w\s]", "contiguous"), byte_level(use_regex=True)]),
    "inverted": (None, [split(r"\p{L}+|\p{N}+", "isolated", invert=True), byte_level()]),
    "inverted_removed": (None, [split(r"\s+", "removed", invert=True), byte_level()]),
    "digits_contiguous": (None, [pre_tokenizers.Digits(individual_digits=False), byte_level(use_regex=True)]),
    "prefix_space_gpt2": (None, [byte_level(add_prefix_space=True, use_regex=True)]),
    "prefix_space_after_split": (None, [split(LLAMA3), byte_level(add_prefix_space=True)]),
    "string_split": (None, [pre_tokenizers.Split(" ", behavior="merged_with_next"), byte_level()]),
    "nfc+digits+lowercase": (normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()]),
                             [pre_tokenizers.Digits(individual_digits=True), byte_level(use_regex=True)]),
}


@pytest.fixture(scope="module")
def documents(corpora):
    """tiny/, the first 150 documents of multi/ (every script of its first shard) and 40 of code/:
    HF needs ~20 s per configuration for all of multi/ and code/ on 2 cores (the chains run in
    Python here too); `benchmarks/bench_bpe.py`-style full runs gave identical ids on all of them."""
    docs = (read_jsonl_texts(corpora / "tiny") + read_jsonl_texts(corpora / "multi", limit=150)
            + read_jsonl_texts(corpora / "code", limit=40))
    return docs + HOSTILE


@pytest.fixture(scope="module")
def base(corpora, tmp_path_factory):
    """One BPE model (trained on tiny/ with a Llama-3 split), reused under every configuration."""
    hf = HFTokenizer(models.BPE(ignore_merges=True))
    hf.pre_tokenizer = pre_tokenizers.Sequence([split(LLAMA3), byte_level()])
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(read_jsonl_texts(corpora / "tiny"), trainers.BpeTrainer(
        vocab_size=3000, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return json.loads(hf.to_str())


def configured(base, name, folder):
    norm, pre = CONFIGS[name]
    hf = HFTokenizer.from_str(json.dumps(base))
    if norm is not None:
        hf.normalizer = norm
    if pre is not None:
        hf.pre_tokenizer = pre_tokenizers.Sequence(pre) if len(pre) > 1 else pre[0]
    path = folder / f"{name}.json"
    hf.save(str(path))
    return HFTokenizer.from_file(str(path)), path


def hf_ids(hf, texts):
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_configuration_encodes_like_hf(base, name, documents, tmp_path):
    hf, path = configured(base, name, tmp_path)
    expected = hf_ids(hf, documents)
    tok = Tokenizer.from_file(path)
    assert tok.encode_batch(documents) == expected
    assert [list(a) for a in tok.encode_arrays(documents, num_threads=2)] == expected
    # The Python merge, the `regex` engine, and a load from the disk cache.
    python = Tokenizer.from_file(path, implementation=Implementation(compiled=False, engine="regex"))
    assert python.encode_batch(documents[:60] + HOSTILE) == expected[:60] + expected[-len(HOSTILE):]
    impl = Implementation(cache_dir=str(tmp_path / "cache"))
    Tokenizer.from_file(path, implementation=impl)
    load._TABLES.clear()
    cached = Tokenizer.from_file(path, implementation=impl)
    assert cached._tables is not None and cached.encode_batch(documents) == expected
    assert pickle.loads(pickle.dumps(tok)).encode_batch(HOSTILE) == expected[-len(HOSTILE):]


@pytest.mark.parametrize("name", ["nfkc+lowercase", "two_splits", "prefix_space_gpt2", "nfc+digits+lowercase"])
def test_resaved_file_keeps_its_components(base, name, documents, tmp_path):
    hf, path = configured(base, name, tmp_path)
    tok = Tokenizer.from_file(path)
    saved = tok.save(tmp_path / "ours")
    again = HFTokenizer.from_file(saved)
    assert hf_ids(again, documents) == hf_ids(hf, documents) == Tokenizer.from_file(saved).encode_batch(documents)
    assert Tokenizer.from_file(saved).sha256 == tok.sha256
    # Components are part of what the sha256 identifies.
    plain = Tokenizer.from_file(configured(base, "nfc", tmp_path)[1])
    assert plain.sha256 != tok.sha256


def test_files_without_components_keep_their_sha256(base, tmp_path):
    """The fast path's shape (one Split + ByteLevel, no normalizer) is written as before."""
    hf = HFTokenizer.from_str(json.dumps(base))
    path = tmp_path / "plain.json"
    hf.save(str(path))
    tok = Tokenizer.from_file(path)
    assert tok.normalizer_spec is None and tok.pre_tokenizer_spec is None and tok._text_encoder is not None
    doc = json.loads(saving.json_text(tok))
    assert doc["normalizer"] is None and doc["pre_tokenizer"]["pretokenizers"][0]["pattern"] == {"Regex": LLAMA3}


def test_special_tokens_split_before_normalizing(base, tmp_path):
    hf, path = configured(base, "nfkc+lowercase", tmp_path)
    tok = Tokenizer.from_file(path)
    text = "HELLO<|endoftext|>WORLD"
    # Allowed: the special token is matched on the raw text and each side normalized, as HF does
    # for an added token with normalized=false. Not allowed: the string is text (our contract).
    assert tok.encode(text, allowed_special="all") == hf.encode(text, add_special_tokens=False).ids
    assert tok.encode(text) == tok.encode("hello<|endoftext|>world")
    assert tok.special_tokens["<|endoftext|>"] not in tok.encode(text)

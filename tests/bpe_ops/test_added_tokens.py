"""Added tokens with Hugging Face's semantics (special and not; normalized, lstrip, rstrip,
single_word), and where tokenbeam's contract differs, both sides tested against `tokenizers`:

  - tokens with `special: false` are found in every text, as HF finds them;
  - special tokens are text unless allowed: `encode(text)` is HF with `encode_special_tokens=True`,
    `encode(text, allowed_special="all")` is HF's default.
"""
import json

import pytest
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from bpe_ops import Implementation, Tokenizer, load
from tests.conftest import read_jsonl_texts

pytestmark = pytest.mark.oracle

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
ADDED = [
    AddedToken("<user>", special=False),                                   # normalized (the default)
    AddedToken("<SYS>", special=False, normalized=False, lstrip=True, rstrip=True),
    AddedToken("cat", special=False, single_word=True, normalized=False),
    AddedToken("HeLLo", special=False, normalized=True),                   # matched after lowercasing
]
SPECIAL = [
    AddedToken("<|endoftext|>", special=True, normalized=False),
    AddedToken("<|sep|>", special=True, normalized=False, lstrip=True, rstrip=True),
    AddedToken("<|w|>", special=True, normalized=False, single_word=True),
]
PROBES = [
    "plain text with nothing added", "<user> hi <user><user>x<user>", "  <SYS>  hello   <SYS>\n\nend <SYS>",
    "cat cats concat cat. _cat cat_ (cat) 猫cat éCAT cat", "HeLLo HELLO hello hELLo", "<USER> <User>",
    "a<|endoftext|>b <|endoftext|> <|endoftext|><|endoftext|>", "x  <|sep|>  y<|sep|>z", "<|w|> a<|w|> <|w|>b <|w|>",
    "mixed <user>cat<|sep|> <SYS>HeLLo<|endoftext|>", "<|endoftext", "<<user>>", "", "   ", "cat",
]


@pytest.fixture(scope="module")
def hf_file(corpora, tmp_path_factory):
    texts = read_jsonl_texts(corpora / "tiny")
    hf = HFTokenizer(models.BPE(ignore_merges=True))
    hf.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=2000, show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf.add_tokens(ADDED)
    hf.add_special_tokens(SPECIAL)
    path = tmp_path_factory.mktemp("added") / "tokenizer.json"
    hf.save(str(path))
    return path


@pytest.fixture(scope="module")
def texts(corpora):
    docs = read_jsonl_texts(corpora / "tiny") + read_jsonl_texts(corpora / "multi", limit=60)
    # The added strings spliced into real text, in every position.
    spliced = [d[:200] + " <user> " + d[200:400] + "<|sep|>" + d[400:600] + " cat " + d[600:800] + "<SYS>"
               + d[800:1000] + "<|endoftext|>" + d[1000:1200] for d in docs[:40]]
    return docs + spliced + PROBES


def hf_ids(path, texts, encode_special_tokens):
    hf = HFTokenizer.from_file(str(path))
    hf.encode_special_tokens = encode_special_tokens
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


@pytest.mark.parametrize("compiled", [True, False])
def test_special_tokens_as_text_is_hf_with_encode_special_tokens(hf_file, texts, compiled):
    tok = Tokenizer.from_file(hf_file, implementation=Implementation(compiled=compiled))
    assert tok._added is not None and tok._added.always
    expected = hf_ids(hf_file, texts, encode_special_tokens=True)
    assert tok.encode_batch(texts) == expected
    assert [list(a) for a in tok.encode_arrays(texts, num_threads=2)] == expected


def test_allowed_special_tokens_is_hf_default(hf_file, texts):
    tok = Tokenizer.from_file(hf_file)
    expected = hf_ids(hf_file, texts, encode_special_tokens=False)
    assert [tok.encode(t, allowed_special="all") for t in texts] == expected


def test_one_allowed_special_token(hf_file):
    tok = Tokenizer.from_file(hf_file)
    text = "a<|endoftext|>b<|sep|>c"
    ids = tok.encode(text, allowed_special={"<|sep|>"})
    assert tok.special_tokens["<|sep|>"] in ids and tok.special_tokens["<|endoftext|>"] not in ids


def test_added_tokens_survive_save_cache_and_pickle(hf_file, texts, tmp_path):
    import pickle
    tok = Tokenizer.from_file(hf_file)
    expected = tok.encode_batch(texts)
    saved = tok.save(tmp_path / "ours")
    assert hf_ids(saved, texts, encode_special_tokens=True) == expected
    doc = json.loads(open(saved, encoding="utf-8").read())
    assert {t["content"]: (t["special"], t["lstrip"], t["normalized"]) for t in doc["added_tokens"]}["<SYS>"] == \
        (False, True, False)
    impl = Implementation(cache_dir=str(tmp_path / "cache"))
    Tokenizer.from_file(hf_file, implementation=impl)
    load._TABLES.clear()
    cached = Tokenizer.from_file(hf_file, implementation=impl)
    assert cached._tables is not None and cached.encode_batch(texts) == expected
    assert pickle.loads(pickle.dumps(tok)).encode_batch(texts) == expected
    assert Tokenizer.from_file(saved).sha256 == tok.sha256

"""tokenizer.json / .tiktoken / vocab.json + merges.txt: what we write loads in the peers and in
ourselves, what others wrote (byte-level BPE trained here with Hugging Face `tokenizers`) encodes as
they do, and everything else is refused in one line."""
import base64
import hashlib
import json

import pytest
import tiktoken
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers
from tokenizers import Tokenizer as HFTokenizer

from bpe_ops import Tokenizer
from bpe_ops.pretokenize import token_to_unicode
from tests.conftest import read_jsonl_texts

pytestmark = pytest.mark.oracle

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = "<|endoftext|>"
UNREACHABLE = "zqxj"


@pytest.fixture(scope="module")
def texts(corpora):
    """Real documents: the tiny corpus (prose, several languages, code), none holding SPECIAL."""
    docs = read_jsonl_texts(corpora / "tiny")
    assert all(SPECIAL not in d for d in docs)
    return docs


def hf_train(texts, pre_tokenizer, model=None, vocab_size=800):
    hf = HFTokenizer(model or models.BPE())
    hf.pre_tokenizer = pre_tokenizer
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[SPECIAL], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator(texts, trainer)
    return hf


@pytest.fixture(scope="module")
def gpt2_style(texts, tmp_path_factory):
    """A GPT-2-style tokenizer.json: ByteLevel pre-tokenizer with its built-in regex."""
    hf = hf_train(texts, pre_tokenizers.ByteLevel(add_prefix_space=False))
    path = tmp_path_factory.mktemp("gpt2_style") / "tokenizer.json"
    hf.save(str(path))
    return hf, path


@pytest.fixture(scope="module")
def llama3_style(texts, tmp_path_factory):
    """A Llama-3-style tokenizer.json: Split(regex) + ByteLevel(use_regex=false), ignore_merges,
    a BOS template post-processor, and a token no merge makes (UNREACHABLE), which only
    ignore_merges can emit."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    hf = hf_train(texts, pre, model=models.BPE(ignore_merges=True))
    hf.post_processor = processors.TemplateProcessing(
        single=f"{SPECIAL} $A", special_tokens=[(SPECIAL, hf.token_to_id(SPECIAL))])
    doc = json.loads(hf.to_str())
    assert doc["model"]["ignore_merges"] is True and doc["pre_tokenizer"]["type"] == "Sequence"
    doc["model"]["vocab"][token_to_unicode(UNREACHABLE.encode())] = hf.get_vocab_size()
    path = tmp_path_factory.mktemp("llama3_style") / "tokenizer.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return HFTokenizer.from_file(str(path)), path


def hf_ids(hf, texts):
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


def test_gpt2_style_file_encodes_like_hf(gpt2_style, texts):
    hf, path = gpt2_style
    tok = Tokenizer.from_file(path)
    assert tok.pattern_name == "gpt2"
    assert tok.special_tokens == {SPECIAL: hf.token_to_id(SPECIAL)}
    assert tok.encode_batch(texts) == hf_ids(hf, texts)
    assert [tok.decode(ids) for ids in tok.encode_batch(texts)] == texts


def test_llama3_style_file_encodes_like_hf(llama3_style, texts):
    hf, path = llama3_style
    tok = Tokenizer.from_file(path.parent)          # a directory holding tokenizer.json
    assert tok.pattern == LLAMA3_PATTERN
    texts = texts + [f"{UNREACHABLE} and {UNREACHABLE}s"]
    assert tok.encode_batch(texts) == hf_ids(hf, texts)
    assert tok.encode(UNREACHABLE) == [hf.get_vocab_size() - 1]


def test_our_file_round_trips_and_loads_in_hf_and_tiktoken(llama3_style, texts, tmp_path):
    # Re-save a foreign tokenizer (ids in HF's order, ignore_merges) and load it everywhere.
    tok = Tokenizer.from_file(llama3_style[1])
    texts = texts + [f"{UNREACHABLE} and {UNREACHABLE}s"]
    json_path = tok.save(tmp_path / "ours")
    again = Tokenizer.from_file(json_path)
    ids = tok.encode_batch(texts)
    assert again.encode_batch(texts) == ids
    assert (again.merges, again.vocab, again.special_tokens) == (tok.merges, tok.vocab, tok.special_tokens)
    assert hf_ids(HFTokenizer.from_file(json_path), texts) == ids
    # Byte-identical when written again, and the sha256 is the file's.
    again.save(tmp_path / "again")
    data = (tmp_path / "ours" / "tokenizer.json").read_bytes()
    assert (tmp_path / "again" / "tokenizer.json").read_bytes() == data
    assert tok.sha256 == again.sha256 == hashlib.sha256(data).hexdigest()


def test_tiktoken_file_gives_our_ids(gpt2_style, texts, tmp_path):
    tok = Tokenizer.from_file(gpt2_style[1])
    tok.save(tmp_path)
    ranks = {}
    for line in (tmp_path / "tokenizer.tiktoken").read_text(encoding="ascii").splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    assert len(ranks) == len(tok.vocab) - len(tok.special_tokens)
    enc = tiktoken.Encoding("ours", pat_str=tok.pattern, mergeable_ranks=ranks, special_tokens=tok.special_tokens)
    assert enc.encode_ordinary_batch(texts) == tok.encode_batch(texts)


def test_merges_in_string_form_load_the_same(gpt2_style, texts, tmp_path):
    doc = json.loads(gpt2_style[1].read_text(encoding="utf-8"))
    assert isinstance(doc["model"]["merges"][0], list)
    doc["model"]["merges"] = [" ".join(pair) for pair in doc["model"]["merges"]]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    pair_form = Tokenizer.from_file(gpt2_style[1])
    string_form = Tokenizer.from_file(path)
    assert string_form.merges == pair_form.merges
    assert string_form.encode_batch(texts) == pair_form.encode_batch(texts)


def test_vocab_json_and_merges_txt(gpt2_style, texts, tmp_path):
    hf = gpt2_style[0]
    vocab_json, merges_txt = hf.model.save(str(tmp_path))
    with open(merges_txt, encoding="utf-8") as f:
        assert f.readline().startswith("#version")
    tok = Tokenizer.from_gpt2_files(vocab_json, merges_txt)
    assert tok.special_tokens == {SPECIAL: hf.token_to_id(SPECIAL)}
    assert tok.encode_batch(texts) == hf_ids(hf, texts)
    # The same merges without the header line.
    headerless = tmp_path / "headerless.txt"
    with open(merges_txt, encoding="utf-8") as f:
        headerless.write_text("".join(f.readlines()[1:]), encoding="utf-8")
    assert Tokenizer.from_gpt2_files(vocab_json, headerless).merges == tok.merges


def _byte_vocab_json(path, extra):
    vocab = {token_to_unicode(bytes([b])): b for b in range(256)}
    vocab.update({token_to_unicode(t): 256 + k for k, t in enumerate(extra)})
    path.write_text(json.dumps(vocab), encoding="utf-8")
    return path


@pytest.mark.parametrize("header", ["", "#version: 0.2\n"])
def test_a_merge_line_may_start_with_hash(tmp_path, header):
    vocab_json = _byte_vocab_json(tmp_path / "vocab.json", [b"##", b"###"])
    merges_txt = tmp_path / "merges.txt"
    merges_txt.write_text(header + "# #\n## #\n", encoding="utf-8")
    tok = Tokenizer.from_gpt2_files(vocab_json, merges_txt)
    assert tok.merges == [(b"#", b"#"), (b"##", b"#")]
    assert tok.encode("##") == [256]
    # "#####": (# #) twice, left first -> ## ## #; then (## #) -> ## ###.
    assert tok.encode("#####") == [256, 257]


def _one_line_error(path, *needles):
    with pytest.raises(ValueError) as info:
        Tokenizer.from_file(path)
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message
    return message


def _save_hf(hf, path):
    hf.save(str(path))
    return path


def test_refuses_wordpiece_and_unigram(tmp_path):
    wordpiece = HFTokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer()
    _one_line_error(_save_hf(wordpiece, tmp_path / "wp.json"), "WordPiece", "supported: byte-level BPE")
    unigram = HFTokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0), ("b", -2.0)], unk_id=0))
    _one_line_error(_save_hf(unigram, tmp_path / "uni.json"), "Unigram")


def test_refuses_normalizers_and_pre_tokenizers_it_does_not_reproduce_and_byte_fallback(gpt2_style, tmp_path):
    hf = HFTokenizer.from_file(str(gpt2_style[1]))
    hf.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.BertNormalizer()])
    _one_line_error(_save_hf(hf, tmp_path / "norm.json"), "normalizer BertNormalizer")

    doc = json.loads(gpt2_style[1].read_text(encoding="utf-8"))
    doc["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "AAAA"}
    (tmp_path / "precompiled.json").write_text(json.dumps(doc), encoding="utf-8")
    _one_line_error(tmp_path / "precompiled.json", "normalizer Precompiled")

    doc = json.loads(gpt2_style[1].read_text(encoding="utf-8"))
    doc["model"]["byte_fallback"] = True
    (tmp_path / "fallback.json").write_text(json.dumps(doc), encoding="utf-8")
    _one_line_error(tmp_path / "fallback.json", "byte_fallback")

    doc = json.loads(gpt2_style[1].read_text(encoding="utf-8"))
    doc["pre_tokenizer"] = {"type": "Whitespace"}
    (tmp_path / "ws.json").write_text(json.dumps(doc), encoding="utf-8")
    _one_line_error(tmp_path / "ws.json", "pre-tokenizer Whitespace")

    # A step after ByteLevel would see HF's byte alphabet, not the text.
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        {"type": "Digits", "individual_digits": True}]}
    (tmp_path / "late.json").write_text(json.dumps(doc), encoding="utf-8")
    HFTokenizer.from_file(str(tmp_path / "late.json"))        # a valid file that HF loads
    _one_line_error(tmp_path / "late.json", "ends with one ByteLevel")


def test_refuses_truncated_json(gpt2_style, tmp_path):
    data = gpt2_style[1].read_bytes()
    path = tmp_path / "truncated.json"
    path.write_bytes(data[: len(data) // 2])
    _one_line_error(path, str(path), "invalid JSON")


def test_classic_tokenizers_are_not_saved(tmp_path):
    vocab = {0: b"a", 1: b"</w>", 2: b"a</w>"}
    tok = Tokenizer([(b"a", b"</w>")], pattern="classic", vocab=vocab, mode="classic")
    with pytest.raises(ValueError, match="end-of-word"):
        tok.save(tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_vocab_id_that_is_a_json_object_or_list_is_named_briefly():
    """A dict or list is no id: named by its kind, not hashed (TypeError) nor printed whole."""
    from bpe_ops.formats import _id_problem

    assert _id_problem({"a": 0, "b": {"x": 1}}, {}) == "malformed id {'x': 1} for token 'b' (ids are non-negative integers)"
    assert _id_problem({"a": 0, "b": list(range(40))}, {}) == (
        "malformed id (a JSON list) for token 'b' (ids are non-negative integers)")

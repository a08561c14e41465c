"""Piece mode's compiled encoder (bpe_ops/_spm.c) gives the ids of its specification (the pure-Python
piece mode: bpe_ops/sentencepiece_bpe.py with `PieceModel.word_ids`) and of Hugging Face
`tokenizers`, on generated texts (every script, emoji, characters outside the vocabulary, runs of
spaces, `▁` in the input, lone surrogates, empty) and real documents, for every converted file of
tests/data/sentencepiece (llama, llama-legacy, gemma, unk, and llama32k: a 32k SentencePiece BPE with
byte fallback trained on en + multi + code, converted by transformers' LlamaTokenizer) and layouts
of llama32k that split, strip or prepend; and sentencepiece's own ids on held-out documents."""
import json
import pickle
import shutil
import sys
import sysconfig
from pathlib import Path

import pytest
import sentencepiece as spm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from bpe_ops import Implementation, Tokenizer
from bpe_ops import sentencepiece_bpe

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

_spm = sentencepiece_bpe._spm

DATA = Path(__file__).resolve().parents[1] / "data" / "sentencepiece"
FILES = ["llama", "llama-legacy", "gemma", "unk", "llama32k"]
PARTIAL = ["partial-bytes-fused", "partial-bytes-unfused"]
SMALL = PARTIAL + ["whole-words", "byte-merges"]
# llama32k in other layouts: pre-tokens split at every space mark, a normalizer that strips (the
# start of a text may then be gone, which Metaspace's prepend_scheme "first" asks about), the legacy
# normalizer with no pre-tokenizer.
LAYOUTS = {
    "llama32k-split": {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                         "split": True}},
    "llama32k-strip": {"normalizer": {"type": "Strip", "strip_left": True, "strip_right": True}},
    "llama32k-legacy": {"normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None},
    # the compiled encoder's whole-text path (encode_text) under each prepend scheme, and in a Sequence
    "llama32k-always": {"pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                                          "split": False}},
    "llama32k-never": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": False}]}},
}
TEXTS = ["", " ", "   ", "\u2581", "\u2581\u2581x\u2581", "  two  spaces  ", "a\tb\nc\r\n", "héllo wörld",
         "日本語のテキスト、句読点。", "ꙮ 𓀀𓀁 ☃ ᚠᛇᚻ ⵣ ߞ", "👍🏽 👨\u200d👩\u200d👧\u200d👦", "\x00\x01\x7f",
         "<s>x</s> <unk>", "<tool>x <tool> y", "<start_of_turn>user\nhi<end_of_turn>", "x" * 3000,
         "ab " * 700, "=" * 2000 + "\u2581" * 50, "lone \ud800 surrogate \udfff", "\u2581" * 300]


@pytest.fixture(scope="module", autouse=True)
def compiled():
    """Fail where a C compiler exists but the extension is not built; skip where there is none (the
    Python piece mode is then the product)."""
    if _spm is None:
        msg = "bpe_ops._spm is not built (python setup.py build_ext --inplace)"
        if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]):
            pytest.fail(msg)
        pytest.skip(msg + " and there is no C compiler")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    folder = tmp_path_factory.mktemp("layouts")
    out = {name: DATA / f"{name}.json" for name in FILES}
    base = json.loads((DATA / "llama32k.json").read_text(encoding="utf-8"))
    for name, changes in LAYOUTS.items():
        out[name] = folder / f"{name}.json"
        out[name].write_text(json.dumps({**base, **changes}, ensure_ascii=False), encoding="utf-8")
    for fuse in (True, False):
        out[f"partial-bytes-{'fused' if fuse else 'unfused'}"] = partial_bytes_file(folder, fuse)
    out["whole-words"] = whole_words_file(folder)
    out["byte-merges"] = byte_merges_file(folder)
    return out


def partial_bytes_file(folder: Path, fuse_unk: bool) -> Path:
    """A byte-fallback vocabulary that lacks most `<0xNN>` pieces, with an unknown token: a character
    is its bytes only when all of them are pieces (日: E6 97 A5), else the unknown token (本, ☃), and a
    byte run does not end a run of unknown characters."""
    return small_file(folder / f"partial-bytes-{fuse_unk}.json", models.BPE(
        SMALL_VOCAB, SMALL_MERGES, byte_fallback=True, unk_token="<unk>", fuse_unk=fuse_unk),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False))


def whole_words_file(folder: Path) -> Path:
    """`ignore_merges`: a pre-token that is a piece ("abc", "\u2581c") is that piece, though the
    merges would not make it."""
    return small_file(folder / "whole-words.json", models.BPE(
        SMALL_VOCAB, SMALL_MERGES, byte_fallback=True, unk_token="<unk>", ignore_merges=True),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True))


def byte_merges_file(folder: Path) -> Path:
    """Every byte a piece, and merges that take byte pieces (\\n then a, a then \\n, two bytes of 日):
    the compiled encoder may then not cut around characters outside the vocabulary."""
    vocab = {**{f"<0x{b:02X}>": b for b in range(256)}, "<unk>": 256, "\u2581": 257, "a": 258, "b": 259,
             "\u2581a": 260, "<0x0A>a": 261, "a<0x0A>": 262, "<0xE6><0x97>": 263}
    merges = [("\u2581", "a"), ("<0x0A>", "a"), ("a", "<0x0A>"), ("<0xE6>", "<0x97>")]
    return small_file(folder / "byte-merges.json", models.BPE(vocab, merges, byte_fallback=True, unk_token="<unk>"),
                      pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False))


SMALL_VOCAB = {"<unk>": 0, "\u2581": 1, "a": 2, "b": 3, "c": 4, "é": 5, "\u2581a": 6, "ab": 7,
               "<0xE6>": 8, "<0x97>": 9, "<0xA5>": 10, "<0x20>": 11, "abc": 12, "\u2581c": 13}
SMALL_MERGES = [("\u2581", "a"), ("a", "b")]


def small_file(path: Path, model, pre_tokenizer) -> Path:
    hf = HFTokenizer(model)
    hf.pre_tokenizer = pre_tokenizer
    hf.decoder = decoders.Metaspace(prepend_scheme="first")
    hf.save(str(path))
    return path


_tokenizers: dict = {}


def loaded(path: Path, cache_size: int | None = None):
    """(compiled, specification, HF) of a file, loaded once per test session; `cache_size` set before
    the encoders are built."""
    key = (str(path), cache_size)
    if key not in _tokenizers:
        compiled = Tokenizer.from_file(path)
        spec = Tokenizer.from_file(path, implementation=Implementation(compiled=False))
        if cache_size is not None:
            compiled.cache_size = spec.cache_size = cache_size
        hf = HFTokenizer.from_file(str(path))
        hf.encode_special_tokens = True
        _tokenizers[key] = compiled, spec, hf
    return _tokenizers[key]


def has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)


def assert_same_ids(path: Path, texts: list[str], cache_size: int | None = None) -> None:
    compiled, spec, hf = loaded(path, cache_size)
    want = [spec.encode(t) for t in texts]
    assert [compiled.encode(t) for t in texts] == want
    assert [a.tolist() for a in compiled.encode_arrays(texts)] == want
    plain = [(t, w) for t, w in zip(texts, want) if not has_surrogate(t)]
    assert [e.ids for e in hf.encode_batch([t for t, _ in plain], add_special_tokens=False)] == [w for _, w in plain]


def test_piece_mode_encodes_with_the_compiled_encoder_and_the_python_one_without_it(paths):
    compiled, spec, _ = loaded(paths["llama32k"])
    assert isinstance(compiled._text_encoder, _spm.SpmEncoder)
    assert spec._text_encoder is None


def test_without_the_extension_piece_mode_encodes_in_python(paths, monkeypatch):
    monkeypatch.setattr(sentencepiece_bpe, "_spm", None)          # no compiler: the extension is absent
    tok = Tokenizer.from_file(paths["llama32k"])
    assert tok._text_encoder is None
    _, spec, _ = loaded(paths["llama32k"])
    assert tok.encode_batch(TEXTS) == [spec.encode(t) for t in TEXTS]


@pytest.mark.parametrize("name", FILES + list(LAYOUTS) + SMALL)
def test_compiled_ids_equal_the_specification_and_hf_on_hostile_texts(paths, name):
    assert_same_ids(paths[name], TEXTS)


@pytest.mark.parametrize("name", PARTIAL)
def test_unknown_characters_around_byte_runs_encode_like_hf(paths, name):
    texts = ["本日", "本本日本", "☃日☃☃ab", "日本", "ab本c日日☃", "é本é"]
    assert_same_ids(paths[name], texts)
    compiled, _, _ = loaded(paths[name])
    assert 0 in compiled.encode("本日") and 8 in compiled.encode("本日")       # both kinds are met


def test_merges_that_take_byte_pieces_join_them_across_characters_outside_the_vocabulary(paths):
    texts = ["a\na", "\na\n", "b\nb", "日a\n日", " a\n\na a"]
    assert_same_ids(paths["byte-merges"], texts)
    compiled, _, _ = loaded(paths["byte-merges"])
    assert compiled.encode("b\na\n") == [257, 259, 261, 10] and compiled.encode("b日") == [257, 259, 263, 0xA5]


@pytest.mark.parametrize("name", ["llama32k", "llama32k-always", "llama32k-never"])
def test_a_text_after_an_allowed_special_token_gets_no_first_mark(paths, name):
    """Metaspace's prepend_scheme "first" prepends at the start of the original text only: the text
    after an allowed "<s>" does not start it (the compiled encode_text is told so)."""
    compiled, spec, hf = loaded(paths[name])
    hf_specials = HFTokenizer.from_file(str(paths[name]))
    for text in ["<s>a b", "x<s> y", "<s><s>  z ", "a</s>b<s>", "<s>"]:
        want = spec.encode(text, allowed_special="all")
        assert compiled.encode(text, allowed_special="all") == want
        assert hf_specials.encode(text, add_special_tokens=False).ids == want


def test_the_text_path_is_the_pre_token_path(paths):
    """encode_text(text, prepend) is encode_words of Metaspace's one pre-token, for either prepend."""
    compiled, _, _ = loaded(paths["llama32k"])
    encoder = compiled._text_encoder
    assert encoder.space == "\u2581"
    for text in TEXTS:
        for prepend in (True, False):
            marked = text.replace(" ", "\u2581")
            if prepend and marked and not marked.startswith("\u2581"):
                marked = "\u2581" + marked
            want = encoder.encode_words([marked] if marked else [])
            assert encoder.encode_text(text, prepend) == want
            assert encoder.encode_text_bytes(text, prepend) == encoder.encode_words_bytes([marked] if marked else [])


def test_only_a_lone_metaspace_without_split_takes_the_text_path(paths):
    for name, space in [("llama32k", "\u2581"), ("llama32k-never", "\u2581"), ("llama32k-split", None),
                        ("llama32k-legacy", None), ("unk", None), ("whole-words", None)]:
        compiled, _, _ = loaded(paths[name])
        assert compiled._text_encoder.space == space, name


def test_a_pre_token_that_is_a_piece_is_that_piece_under_ignore_merges(paths):
    texts = ["abc", "abc abc c", "ab abcabc", " c", "abcé"]
    assert_same_ids(paths["whole-words"], texts)
    compiled, _, _ = loaded(paths["whole-words"])
    assert compiled.encode("abc c") == [12, 13]


@pytest.mark.parametrize("name", FILES + list(LAYOUTS))
def test_compiled_ids_equal_the_specification_and_hf_on_held_out_documents(paths, name, corpora):
    docs = []
    for shard, limit in (("en/en-011-of-012.jsonl", 8), ("multi/multi-003-of-004.jsonl", 20),
                         ("code/code-005-of-006.jsonl", 6)):
        with open(corpora / shard, encoding="utf-8") as f:
            docs.extend(json.loads(line)["text"] for _, line in zip(range(limit), f))
    assert_same_ids(paths[name], docs)


FRAGMENTS = st.sampled_from([" ", "  ", "\u2581", "\u2581\u2581", "\t", "\n", "<s>", "<unk>", "<tool>", "the", " of",
                             "é", "e\u0301", "日本", "👍🏽", "𓀀", "\ud800", "ꙮ", "12345", "==", "\x00"])
EDGES = st.sampled_from(["", " ", "  ", "\u2581", " \u2581", "\n", "日"])
TEXT = st.tuples(EDGES, st.lists(st.one_of(FRAGMENTS, st.text(max_size=12), st.characters(exclude_categories=()),
                                           st.text(alphabet=" \u2581abc\n日", max_size=20)), max_size=30).map("".join),
                 EDGES).map("".join)


@pytest.mark.parametrize("name", FILES + ["llama32k-split", "llama32k-always", "llama32k-never"] + SMALL)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(TEXT, min_size=1, max_size=4))
def test_generated_texts_encode_like_the_specification_and_hf(paths, name, texts):
    assert_same_ids(paths[name], texts)


@pytest.mark.parametrize("cache_size", [0, 2])
def test_a_small_or_no_cache_gives_the_same_ids(paths, cache_size, corpora):
    with open(corpora / "en/en-011-of-012.jsonl", encoding="utf-8") as f:
        docs = [json.loads(line)["text"][:20_000] for _, line in zip(range(3), f)]
    for name in ("llama32k", "unk"):
        assert_same_ids(paths[name], docs + TEXTS, cache_size)


def test_converted_32k_model_gives_sentencepiece_ids_on_held_out_documents(corpora):
    """SentencePiece's own ids: every held-out document (the model never saw these shards) and the
    texts on which the converted layout agrees with SentencePiece (see test_sentencepiece_bpe.py)."""
    sp = spm.SentencePieceProcessor(model_file=str(DATA / "llama32k.model"))
    compiled, _, _ = loaded(DATA / "llama32k.json")
    docs = []
    for shard, limit in (("en/en-010-of-012.jsonl", 25), ("multi/multi-002-of-004.jsonl", 60),
                         ("code/code-004-of-006.jsonl", 15)):
        with open(corpora / shard, encoding="utf-8") as f:
            docs.extend(json.loads(line)["text"] for _, line in zip(range(limit), f))
    docs += ["héllo wörld", "日本語のテキスト、句読点。", "👍🏽 ok", "a\tb\nc", "x" * 3000]
    assert [compiled.encode(d) for d in docs] == sp.encode(docs)


def test_threads_and_pickles_encode_alike(paths):
    compiled, spec, _ = loaded(paths["llama32k"])
    texts = TEXTS * 40
    want = [spec.encode(t) for t in texts]
    assert [a.tolist() for a in compiled.encode_arrays(texts, num_threads=2)] == want
    assert pickle.loads(pickle.dumps(compiled)).encode_batch(TEXTS) == want[:len(TEXTS)]


def test_the_encoder_refuses_malformed_tables():
    model = sentencepiece_bpe.PieceModel({"a": 0, "b": 1, "ab": 2}, [("a", "b")], byte_fallback=False, unk_id=None)
    encoder = sentencepiece_bpe.compiled_encoder(model, [0], [1], [2], ignore_merges=False, cache_size=10)
    assert encoder.encode_words(["ab", "ba", "", "abab"]) == [2, 1, 0, 2, 2]
    assert encoder.encode_words_bytes(["ab", "b"]) == (2).to_bytes(4, sys.byteorder) + (1).to_bytes(4, sys.byteorder)
    with pytest.raises(TypeError):
        encoder.encode_words(["ab", 3])
    with pytest.raises(ValueError, match="256"):
        _spm.SpmEncoder({}, [None] * 3, None, False, {}, [], [], [], None, 0)
    with pytest.raises(ValueError, match="single characters"):
        _spm.SpmEncoder({"ab": 1}, [None] * 256, None, False, {}, [], [], [], None, 0)
    with pytest.raises(OverflowError):
        _spm.SpmEncoder({}, [None] * 256, -1, False, {}, [], [], [], None, 0)
    with pytest.raises(TypeError, match="space"):
        encoder.encode_text("ab", True)
    with pytest.raises(ValueError, match="piece"):          # the mark must be a piece
        _spm.SpmEncoder({"a": 0}, [None] * 256, None, False, {}, [], [], [], None, 0, "\u2581")
    with pytest.raises(ValueError, match="outside ASCII"):
        _spm.SpmEncoder({"a": 0}, [None] * 256, None, False, {}, [], [], [], None, 0, "a")
    with pytest.raises(ValueError, match="whole"):
        _spm.SpmEncoder({"\u2581": 0}, [None] * 256, None, False, {}, [], [], [], {"\u2581": 0}, 0, "\u2581")
    marked = _spm.SpmEncoder({"\u2581": 0, "a": 1}, [None] * 256, None, False, {}, [], [], [], None, 4, "\u2581")
    assert marked.encode_text("a a", True) == [0, 1, 0, 1] and marked.encode_text("", True) == []
    with pytest.raises(TypeError):
        marked.encode_text(b"a", True)

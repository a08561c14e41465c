"""SentencePiece-style BPE files (bpe_ops/sentencepiece_bpe.py, mode "piece" of the Tokenizer): the ids
Hugging Face `tokenizers` gives, on held-out documents of en/, multi/ and code/ and on hostile texts,
for (a) files `tokenizers` builds (BPE with byte_fallback or unk_token, Metaspace, normalizers) and
(b) SentencePiece BPE models converted by `transformers` (tests/data/sentencepiece, made by its
make_files.py), also checked against `sentencepiece` itself; decode as HF decodes; refusals in one
line; the tokenize pipeline writes the same ids."""
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sentencepiece as spm
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from bpe_ops import Implementation, Tokenizer
from bpe_ops.sentencepiece_bpe import PieceModel, byte_piece, merge_heap
from pipelines import tokenize
from tests.conftest import ROOT, read_jsonl_texts

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

DATA = Path(__file__).resolve().parents[1] / "data" / "sentencepiece"
CONVERTED = ["llama", "llama-legacy", "gemma", "unk"]
HOSTILE = [
    "", " ", "  ", "  leading and trailing  ", "a  b   c    d", "\n", "\n\nnew\nlines\r\n\r\n", "tabs\t\tand\t\t\tmore",
    "ꙮ 𓀀𓀁 ☃ ᚠᛇᚻ ⵣ ߞ", "ΟΔΟΣ ǅ İstanbul ẞ ﬁ", "e\u0301 a\u0308\u0304 \u0301 Z\u0351\u0362 Å Å",
    "👍🏽 👨\u200d👩\u200d👧\u200d👦 🏳\ufe0f\u200d🌈", "1234567890 ١٢٣ ½ Ⅻ 3.14", "ｆｕｌｌｗｉｄｔｈ ㌀ ﷺ",
    "zero\u200bwidth \ufeffBOM", "\u2581already \u2581marked", "\u2581", "x<s>y </s> <unk>", "<tool>x <tool> y",
    "<start_of_turn>user\nhi<end_of_turn>", "x" * 5000, "ab " * 3000, "日本語のテキスト、句読点。" * 50,
]


@pytest.fixture(scope="module")
def documents(corpora):
    """Held-out documents (the converted models were trained on the first shards): 60 of multi's last
    shard, 12 of code's, 20 of en's (~1 MB), then the hostile texts. benchmarks/bench_sentencepiece.py
    checks every document of the held-out shards."""
    docs = []
    for folder, shard, limit in (("multi", "multi-003-of-004.jsonl", 60), ("code", "code-005-of-006.jsonl", 12),
                                 ("en", "en-011-of-012.jsonl", 20)):
        with open(corpora / folder / shard, encoding="utf-8") as f:
            docs.extend(json.loads(line)["text"] for _, line in zip(range(limit), f))
    return docs + HOSTILE


def hf_ids(hf, texts):
    hf.encode_special_tokens = True       # our contract: special-token strings in data are text
    return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]


def with_byte_pieces(hf) -> dict:
    """The file of a trained HF model with the 256 `<0xNN>` pieces added to its vocab (HF's trainer
    does not add them)."""
    doc = json.loads(hf.to_str())
    vocab = doc["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(byte_piece(b), len(vocab))
    return doc


def metaspace(scheme="first", split=True):
    return pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=split)


LLAMA_DECODER = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
BUILT = {
    # name: (model options, normalizer, pre-tokenizer, decoder)
    "first_split": ({}, None, metaspace("first"), decoders.Metaspace(prepend_scheme="first")),
    "always_whole": ({}, None, metaspace("always", split=False), decoders.Metaspace(prepend_scheme="always")),
    "never_split": ({}, None, metaspace("never"), decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])),
    "nfkc_lowercase_digits": ({}, normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]),
                              pre_tokenizers.Sequence([metaspace("first"), pre_tokenizers.Digits(individual_digits=True)]),
                              decoders.Metaspace()),
    "strip_then_first": ({}, normalizers.Sequence([normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]),
                         metaspace("first", split=False), LLAMA_DECODER),
    "legacy_layout": ({}, normalizers.Sequence([normalizers.NFD(), normalizers.Prepend("\u2581"),
                                                normalizers.Replace(" ", "\u2581")]), None, LLAMA_DECODER),
    "unk_fused": ({"unk_token": "<unk>", "fuse_unk": True, "byte_fallback": False}, None, metaspace("first"),
                  decoders.Metaspace()),
    "unk_unfused": ({"unk_token": "<unk>", "fuse_unk": False, "byte_fallback": False}, None, metaspace("always"),
                    decoders.Metaspace()),
}


@pytest.fixture(scope="module")
def built(corpora, tmp_path_factory):
    """Each BUILT configuration trained by HF's BpeTrainer on tiny/ (a small alphabet for the unk
    ones, so that unknown characters are common), written to a file."""
    folder = tmp_path_factory.mktemp("built")
    texts = read_jsonl_texts(corpora / "tiny")
    paths = {}
    for name, (options, normalizer, pre_tokenizer, decoder) in BUILT.items():
        options = {"byte_fallback": True, **options}
        hf = HFTokenizer(models.BPE(**options))
        if normalizer is not None:
            hf.normalizer = normalizer
        if pre_tokenizer is not None:
            hf.pre_tokenizer = pre_tokenizer
        hf.decoder = decoder
        hf.train_from_iterator(texts, trainers.BpeTrainer(
            vocab_size=2500, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"],
            limit_alphabet=120 if "unk_token" in options else 1000))
        paths[name] = folder / f"{name}.json"
        doc = with_byte_pieces(hf) if options["byte_fallback"] else json.loads(hf.to_str())
        paths[name].write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return paths


def check_like_hf(path, documents, tmp_path):
    hf = HFTokenizer.from_file(str(path))
    expected = hf_ids(hf, documents)
    tok = Tokenizer.from_file(path)
    assert tok.mode == "piece"
    assert tok.encode_batch(documents) == expected
    assert [list(a) for a in tok.encode_arrays(documents, num_threads=2)] == expected
    # The Python merge (the compiled merger's specification) on a part of them.
    python = Tokenizer.from_file(path, implementation=Implementation(compiled=False, engine="regex"))
    assert python.encode_batch(documents[:30] + HOSTILE) == expected[:30] + expected[-len(HOSTILE):]
    assert pickle.loads(pickle.dumps(tok)).encode_batch(HOSTILE) == expected[-len(HOSTILE):]
    # Decoding is HF's decoder chain.
    assert [tok.decode(ids) for ids in expected] == [hf.decode(ids, skip_special_tokens=False) for ids in expected]
    # Special tokens allowed: HF's default.
    special = ["x<s>y </s>", "<s>", "a <s> b<s>", "</s> lead"]
    hf.encode_special_tokens = False
    assert [tok.encode(t, allowed_special="all") for t in special] == [
        e.ids for e in hf.encode_batch(special, add_special_tokens=False)]
    # A re-saved file loads in HF and encodes the same; its sha256 is stable.
    saved = tok.save(tmp_path / "resaved")
    assert hf_ids(HFTokenizer.from_file(saved), documents[-len(HOSTILE):]) == expected[-len(HOSTILE):]
    assert Tokenizer.from_file(saved).sha256 == tok.sha256
    return tok, expected


@pytest.mark.parametrize("name", sorted(BUILT))
def test_hf_built_files_encode_like_hf(built, name, documents, tmp_path):
    tok, expected = check_like_hf(built[name], documents, tmp_path)
    ids = {i for e in expected for i in e}
    if BUILT[name][0].get("unk_token"):
        assert tok.special_tokens["<unk>"] in ids          # the texts do meet unknown characters
    else:
        assert ids & set(tok.raw_byte_ids)                 # ... and byte fallback


# Texts on which transformers' conversion gives other ids than SentencePiece itself, by design of
# the converted layout: Metaspace does not prefix a text that already starts with "▁"; the
# non-legacy converters drop the leading spaces SentencePiece keeps; HF finds added tokens inside
# words. Every other text gives SentencePiece's ids.
DIFFERS_FROM_SENTENCEPIECE = {
    "llama": {" ", "  ", "  leading and trailing  ", "\u2581already \u2581marked", "\u2581"},
    "llama-legacy": set(),
    "gemma": set(),
    "unk": {"  leading and trailing  ", "\u2581already \u2581marked", "\u2581", "<tool>x <tool> y"},
}


@pytest.mark.parametrize("name", CONVERTED)
def test_converted_sentencepiece_files_encode_like_hf_and_sentencepiece(name, documents, tmp_path):
    tok, expected = check_like_hf(DATA / f"{name}.json", documents, tmp_path)
    sp = spm.SentencePieceProcessor(model_file=str(DATA / f"{name.split('-')[0]}.model"))
    sp_ids = sp.encode(documents)
    differ = {t for t, a, b in zip(documents, sp_ids, expected) if a != b}
    assert differ == DIFFERS_FROM_SENTENCEPIECE[name]


def test_merge_replay_is_the_heap_specification():
    """The encoder's merge replay (compiled, and the Python scan and rank buckets) equals
    `merge_heap`, HF's `Word::merge_all`, on the words of real text, long ones included."""
    tok = Tokenizer.from_file(DATA / "llama.json")
    python = Tokenizer.from_file(DATA / "llama.json", implementation=Implementation(compiled=False))
    pairs = {}
    for rank, (a, b, m) in enumerate(zip(tok._left, tok._right, tok._merged)):
        pairs.setdefault((a, b), (rank, m))
    model = tok._piece_model
    text = (ROOT / "sample" / "sample-000-of-002.jsonl").read_text(encoding="utf-8")
    words = [w for w in ("\u2581" + text.replace(" ", "\u2581")).split("\n") if w][:400]
    words += ["\u2581" + text[:20_000].replace(" ", "\u2581")]
    for word in words:
        symbols = model.symbols(word)
        want = merge_heap(symbols, pairs)
        assert tok._merge(list(symbols)) == want
        assert python._merge_python(list(symbols)) == want
        # Cut where no merge joins, the pieces merge to the same ids.
        assert [i for s in model.segments(word) for i in merge_heap(model.symbols(s), pairs)] == want


def test_first_symbols_byte_fallback_and_unknown():
    pieces = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, byte_piece(0xC3): 4, byte_piece(0xA9): 5}
    model = PieceModel(pieces, [("a", "b")], byte_fallback=True, unk_id=0, fuse_unk=True)
    assert model.symbols("aé") == [1, 4, 5]            # é is C3 A9
    assert model.symbols("a☃☃b") == [1, 0, 2]          # bytes missing: unknown, fused
    unfused = PieceModel(pieces, [("a", "b")], byte_fallback=False, unk_id=0, fuse_unk=False)
    assert unfused.symbols("aéé") == [1, 0, 0]
    # As in tokenizers: a pending fused unknown is emitted after a byte run, not before it.
    assert model.symbols("☃é") == [4, 5, 0]
    for fuse in (True, False):
        hf = HFTokenizer(models.BPE(pieces, [("a", "b")], unk_token="<unk>", fuse_unk=fuse, byte_fallback=True))
        ours = PieceModel(pieces, [("a", "b")], byte_fallback=True, unk_id=0, fuse_unk=fuse)
        for text in ("☃é", "a☃☃b", "ab☃é☃", "éé☃☃☃a"):
            pairs = {(1, 2): (0, 3)}
            assert merge_heap(ours.symbols(text), pairs) == hf.encode(text, add_special_tokens=False).ids


def test_raw_byte_share_counts_fallback_pieces():
    tok = Tokenizer.from_file(DATA / "llama.json")
    assert len(tok.raw_byte_ids) == 256
    assert [tok.vocab[i] for i in tok.raw_byte_ids[:2]] == [b"<0x00>", b"<0x01>"]
    ids = tok.encode("ꙮ")                                # U+A66E, not a piece: three bytes
    assert [tok.vocab[i] for i in ids][-3:] == [b"<0xEA>", b"<0x99>", b"<0xAE>"]


def _variant(tmp_path, name, change):
    doc = json.loads((DATA / "llama.json").read_text(encoding="utf-8"))
    change(doc)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


REFUSED = {
    "precompiled": (lambda d: d.update(normalizer={"type": "Precompiled", "precompiled_charsmap": "AAAA"}),
                    "normalizer Precompiled (a SentencePiece precompiled_charsmap"),
    "whitespace": (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "pre-tokenizer Whitespace"),
    "bytelevel": (lambda d: d.update(pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False}),
                  "byte_fallback in a byte-level file"),
    "ctc_decoder": (lambda d: d.update(decoder={"type": "CTC"}), "decoder CTC"),
    "dropout": (lambda d: d["model"].update(dropout=0.1), "BPE dropout 0.1"),
    "no_unk": (lambda d: d["model"].update(byte_fallback=False, unk_token=None), "without unk_token"),
    "unk_missing": (lambda d: d["model"].update(unk_token="<nope>"), "unk_token '<nope>' is not in the vocab"),
    "suffix": (lambda d: d["model"].update(end_of_word_suffix="</w>"), "end_of_word_suffix"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unsupported_components_are_refused_in_one_line(name, tmp_path):
    change, needle = REFUSED[name]
    with pytest.raises(ValueError) as info:
        Tokenizer.from_file(_variant(tmp_path, name, change))
    assert "\n" not in str(info.value) and needle in str(info.value)


def test_cli_refuses_precompiled_in_one_line(tmp_path):
    path = _variant(tmp_path, "precompiled", REFUSED["precompiled"][0])
    (tmp_path / "in.txt").write_text("hello\n", encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "pipelines.tokenize", "--tokenizer", str(path), "--input",
                             str(tmp_path / "in.txt"), "--output", str(tmp_path / "out")],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("tokenbeam: error: ") and "normalizer Precompiled" in result.stderr


def test_tokenize_pipeline_writes_hf_ids(documents, tmp_path):
    path = DATA / "llama.json"
    records = documents[:40] + [t for t in HOSTILE if t]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"id": str(k), "text": t}) + "\n" for k, t in enumerate(records)),
                      encoding="utf-8")
    out = tmp_path / "out"
    stats = tokenize.run(["--tokenizer", str(path), "--input", str(source), "--output", str(out)])
    table = pq.read_table(out / "in.parquet")
    expected = hf_ids(HFTokenizer.from_file(str(path)), records)
    assert table.column("token_ids").to_pylist() == expected
    assert stats["records"] == len(records)
    fallback = set(Tokenizer.from_file(path).raw_byte_ids)
    written = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    raw = sum(i in fallback for ids in expected for i in ids)
    assert raw > 0 and written["raw_byte_tokens"]["count"] == raw
    assert written["bytes"] == sum(len(t.encode("utf-8")) for t in records)

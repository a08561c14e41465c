"""A `Sequence` of Split pre-tokenizers runs compiled (`_pcre2.TextEncoder(steps=...)`, built by
`bpe_ops.sequence_split`): the ids equal the Python specification's (`hf_components`) and Hugging
Face `tokenizers`' on generated texts (digits of several scripts, CJK runs and their punctuation,
mixed scripts, whitespace) and on real documents, for every Split behavior and `invert`."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer

from bpe_ops import Implementation, Tokenizer
from bpe_ops._pcre2 import Fallback
from tests.conftest import read_jsonl_texts

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

# DeepSeek-V3's chain: digit runs, CJK runs, then a word regex, before ByteLevel(use_regex=false).
DIGITS = r"\p{N}{1,3}"
CJK = "[一-龥぀-ゟ゠-ヿ]+"
WORD = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
        "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def split(pattern, behavior="Isolated", invert=False):
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert}


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
GPT2_BYTE_LEVEL = {**BYTE_LEVEL, "use_regex": True}
CHAINS = {
    "deepseek": [split(DIGITS), split(CJK), split(WORD), BYTE_LEVEL],
    "digits_then_words": [split(r"\p{N}"), split(LLAMA3), BYTE_LEVEL],
    "removed": [split(r"\s+", "Removed"), GPT2_BYTE_LEVEL],
    "inverted": [split(r"\p{L}+|\p{N}+", invert=True), BYTE_LEVEL],
    "inverted_removed": [split(r"\s+", "Removed", invert=True), BYTE_LEVEL],
    "merged_with_previous": [split(r"[.,;:!?]", "MergedWithPrevious"), GPT2_BYTE_LEVEL],
    "merged_with_next": [split(" ", "MergedWithNext"), split(LLAMA3), BYTE_LEVEL],
    "contiguous": [split(r"[.,;:!?]", "Contiguous"), GPT2_BYTE_LEVEL],
    "cjk_removed_then_words": [split(CJK, "Removed"), split(DIGITS, "MergedWithNext"), split(LLAMA3), BYTE_LEVEL],
}
# Characters from every class the chains tell apart.
ALPHABET = ("abcXYZ'sltvemdr" "0123456789" "٠١٢३४५½²Ⅻ" "日本語中文字龥一" "ぁあのゟ" "゠アカヿー" "。、「」〃"
            "한국어" "Привет" "ΣσςΑ" "é\u0301\u0308" " \t\n\r\u00a0\u3000\u2028" ".,;:!?()[]{}<>/\\\"#$%&*+-=@^_`|~"
            "👍🏽\u200d" "\U00020000\U0002a6dfऀक")


@pytest.fixture(scope="module")
def files(gpt2_files, tmp_path_factory):
    """GPT-2's vocabulary and merges under each chain, as tokenizer.json files: {name: path}."""
    folder = tmp_path_factory.mktemp("chains")
    base = json.loads(open(Tokenizer.from_gpt2_files(*gpt2_files).save(folder / "base"), encoding="utf-8").read())
    paths = {}
    for name, steps in CHAINS.items():
        doc = {**base, "pre_tokenizer": {"type": "Sequence", "pretokenizers": steps}}
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def engines(files):
    """{name: (compiled, pure Python, HF)} for each chain."""
    pure = Implementation(compiled=False, engine="regex")
    return {name: (Tokenizer.from_file(path), Tokenizer.from_file(path, implementation=pure),
                   HFTokenizer.from_file(str(path))) for name, path in files.items()}


def compiled_ids(tok, text):
    """The compiled encoder's ids, or None where it sends the text to the Python path."""
    try:
        return tok._text_encoder.encode(text)
    except Fallback:
        return None


def test_every_chain_of_splits_gets_the_compiled_encoder(engines):
    for name, (tok, _, _) in engines.items():
        assert tok._text_encoder is not None, name


@pytest.mark.parametrize("name", sorted(CHAINS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=ALPHABET, max_size=60))
def test_generated_texts_encode_like_python_and_hf(engines, name, text):
    tok, pure, hf = engines[name]
    expected = hf.encode(text, add_special_tokens=False).ids
    assert pure.encode(text) == expected
    assert tok.encode(text) == expected
    compiled = compiled_ids(tok, text)
    assert compiled is None or compiled == expected


def test_compiled_encoder_takes_texts_of_every_script(engines):
    """The guard sends only texts with a character the engines classify differently to Python:
    none of these."""
    tok = engines["deepseek"][0]
    for text in ("Hello 12345 world", "日本語のテキスト、カタカナ。", "Привет 123 мир", "x=[a{b}]|c;\n\n\tdef f():"):
        assert compiled_ids(tok, text) == engines["deepseek"][2].encode(text, add_special_tokens=False).ids


def test_real_documents_encode_like_hf(engines, corpora):
    docs = read_jsonl_texts(corpora / "multi", limit=60) + read_jsonl_texts(corpora / "code", limit=20)
    for name in ("deepseek", "removed", "inverted"):
        tok, _, hf = engines[name]
        expected = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
        assert tok.encode_batch(docs) == expected, name
        assert [list(a) for a in tok.encode_arrays(docs, num_threads=2)] == expected, name
        # Most documents take the compiled path (the rest: a character of the guard).
        assert sum(compiled_ids(tok, d) == ids for d, ids in zip(docs, expected)) >= 0.7 * len(docs)


def test_forked_encoder_splits_like_its_parent(engines):
    tok, _, hf = engines["deepseek"]
    fork = tok._text_encoder.fork()
    text = "Numbers 1234567 and 日本語 text, with {braces}."
    assert fork.encode(text) == tok._text_encoder.encode(text) == hf.encode(text, add_special_tokens=False).ids


def test_a_chain_with_a_step_c_does_not_run_keeps_the_python_path(files, tmp_path):
    doc = json.loads(files["deepseek"].read_text(encoding="utf-8"))
    doc["pre_tokenizer"]["pretokenizers"][0] = {"type": "Digits", "individual_digits": True}
    path = tmp_path / "digits.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    tok = Tokenizer.from_file(path)
    assert tok._text_encoder is None
    text = "a 2024 b 日本"
    assert tok.encode(text) == HFTokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids

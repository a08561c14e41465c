"""A `Sequence` of Split pre-tokenizers runs compiled (`_pcre2.TextEncoder(steps=...)`, built by
`bpe_ops.sequence_split`): the ids equal the Python specification's (`hf_components`) and Hugging
Face `tokenizers`' on generated texts (digits of several scripts, CJK runs and their punctuation,
mixed scripts, whitespace) and on real documents, for every Split behavior and `invert`. The steps
split without PCRE2 where they can (`sequence_split.step_reading`: a class repeated, DeepSeek's word
regex): their pieces equal PCRE2's and the specification's on every code point and on generated
text over the classes' boundaries."""
import json
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer

from bpe_ops import Implementation, Tokenizer, hf_components, sequence_split
from bpe_ops._pcre2 import Fallback, TextEncoder, sequence_pieces
from tests.conftest import read_jsonl_texts

oracle = [pytest.mark.oracle, pytest.mark.slow]

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


@pytest.mark.oracle
@pytest.mark.slow
def test_every_chain_of_splits_gets_the_compiled_encoder(engines):
    for name, (tok, _, _) in engines.items():
        assert tok._text_encoder is not None, name
    # DeepSeek-V3's file, its patterns spelled as the file spells them, is split in one pass, its
    # plain ASCII 64 bytes at a time; chains of other kinds step by step.
    deepseek = engines["deepseek"][0]._text_encoder
    assert deepseek.chained and deepseek.chain_batch
    assert not any(tok._text_encoder.chained for name, (tok, _, _) in engines.items() if name != "deepseek")


@pytest.mark.oracle
@pytest.mark.slow
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


@pytest.mark.oracle
@pytest.mark.slow
def test_compiled_encoder_takes_texts_of_every_script(engines):
    """The guard sends only texts with a character the engines classify differently to Python:
    none of these."""
    tok = engines["deepseek"][0]
    for text in ("Hello 12345 world", "日本語のテキスト、カタカナ。", "Привет 123 мир", "x=[a{b}]|c;\n\n\tdef f():",
                 "2024年3月15日に1,234,567円（税込）を支払った。Version 3.10.12 — ٢٠٢٤ और १२३४५ 第12章",
                 "東京タワー333m、ＡＢＣ１２３ (full width) 'quoted' x2 — ½ + ² = ?"):
        assert compiled_ids(tok, text) == engines["deepseek"][2].encode(text, add_special_tokens=False).ids


@pytest.mark.oracle
@pytest.mark.slow
def test_real_documents_encode_like_hf(engines, corpora):
    docs = (read_jsonl_texts(corpora / "multi", limit=60) + read_jsonl_texts(corpora / "code", limit=20) +
            read_jsonl_texts(corpora / "en", limit=20))
    for name in ("deepseek", "removed", "inverted"):
        tok, _, hf = engines[name]
        expected = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
        assert tok.encode_batch(docs) == expected, name
        assert [list(a) for a in tok.encode_arrays(docs, num_threads=2)] == expected, name
        # Most documents take the compiled path (the rest: a character of the guard).
        assert sum(compiled_ids(tok, d) == ids for d, ids in zip(docs, expected)) >= 0.7 * len(docs)


@pytest.mark.oracle
@pytest.mark.slow
def test_forked_encoder_splits_like_its_parent(engines):
    tok, _, hf = engines["deepseek"]
    fork = tok._text_encoder.fork()
    text = "Numbers 1234567 and 日本語 text, with {braces}."
    assert fork.encode(text) == tok._text_encoder.encode(text) == hf.encode(text, add_special_tokens=False).ids


@pytest.mark.oracle
@pytest.mark.slow
def test_a_chain_with_a_step_c_does_not_run_keeps_the_python_path(files, tmp_path):
    doc = json.loads(files["deepseek"].read_text(encoding="utf-8"))
    doc["pre_tokenizer"]["pretokenizers"][0] = {"type": "Digits", "individual_digits": True}
    path = tmp_path / "digits.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    tok = Tokenizer.from_file(path)
    assert tok._text_encoder is None
    text = "a 2024 b 日本"
    assert tok.encode(text) == HFTokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids


# ---- the steps' readings: the same pieces as PCRE2 and the specification, without the vocabulary ----

BYTE_LEVEL_PLAIN = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}
# Patterns read as a class repeated, with one that is not (PCRE2 alone).
RUNS = [DIGITS, r"\p{N}", CJK, r"\s+", r"\s", " ", r"[.,;:!?]", r"[^a-z]+", r"\P{L}{2,}", r"\p{N}{2,3}",
        r"[\s\p{M}]{2}", r"\p{Lu}+", "\U0001F44D+", r"\.{3}"]
# Characters of every class the readings tell apart, from each UTF-8 length, and a few beyond the BMP.
BOUNDARY = (ALPHABET + "\x00\x0b\x0c\x1f\x7f\x85\u180e\u2029\ufeff\u200b\u00ad\u0300\u20ac\u00a9\u00b5"
            "\U0001D400\U0001D7CE\U0001F600\U00010400\U000E0001" + "ABCxyz\"#$'()*+,-./:;<=>?@[\\]^_`{|}~")


def bare_encoder(steps: dict, readings: bool = True) -> TextEncoder:
    """A TextEncoder of `encoder_steps`' steps with no merges (the pieces are what is compared);
    without `readings`, every step runs on PCRE2."""
    chosen = steps["steps"] if readings else [step[:3] for step in steps["steps"]]
    return TextEncoder(chosen[0][0], [], [], [], list(range(256)), None, 64, steps=chosen, guard=steps["guard"])


def chain(*patterns, behavior="Isolated", invert=False) -> dict:
    return {"type": "Sequence", "pretokenizers": [split(p, behavior, invert) for p in patterns] + [BYTE_LEVEL_PLAIN]}


def pieces(encoder, text):
    try:
        return sequence_pieces(encoder, text)
    except Fallback:
        return None


@pytest.mark.parametrize("pattern, reading", [
    (DIGITS, ("run", r"\p{N}", 1, 3)), (CJK, ("run", "[一-龥぀-ゟ゠-ヿ]", 1, 0)), (r"\s", ("run", r"\s", 1, 1)),
    (" ", ("run", " ", 1, 1)), (r"x{2,}", ("run", "x", 2, 0)), (r"\P{L}{2}", ("run", r"\P{L}", 2, 2)),
    (r"[^\]a-z]+", ("run", r"[^\]a-z]", 1, 0)), (WORD, ("deepseek",)),
    (r"\p{L}+|\p{N}+", None), (r"\p{N}{1,3}+", None), (r"x{3,2}", None), (r"x{0,2}", None), (r"x*", None),
    (r"[[:alpha:]]+", None), (r"\s+(?!\S)", None), ("^ ", None), (r"(?i:x)+", None), (LLAMA3, None),
])
def test_step_reading_names_what_runs_without_pcre2(pattern, reading):
    assert sequence_split.step_reading(pattern) == reading


def test_deepseek_chain_is_read_step_by_step():
    steps = sequence_split.encoder_steps(chain(DIGITS, CJK, WORD))
    assert [step[3] for step in steps["steps"]] == [("run", r"\p{N}", 1, 3), ("run", "[一-龥぀-ゟ゠-ヿ]", 1, 0),
                                                     ("deepseek",)]


@lru_cache(maxsize=1)
def every_code_point_texts() -> tuple[str, ...]:
    """Every code point but the surrogates, alone and then (one in 13) in contexts that start, end
    and join runs."""
    every = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    return ("".join(every),) + tuple("".join(context.format(c, c) for c in every[::13])
                                     for context in ("a{}", "{}a", " {}x", "{}{} ", "1{}\n", ".{}é", "\n{}\t{}"))


@pytest.mark.parametrize("pattern", RUNS + [WORD])
def test_every_code_point_splits_as_pcre2_splits(pattern):
    """The reading's pieces are PCRE2's on every code point (behind the digit and CJK steps for
    DeepSeek's word regex, as in its chain)."""
    steps = sequence_split.encoder_steps(chain(DIGITS, CJK, WORD) if pattern == WORD else chain(pattern))
    assert steps is not None and steps["steps"][-1][3] is not None
    steps["guard"] = None                # PCRE2 is the reference here, on every character
    fast, plain = bare_encoder(steps), bare_encoder(steps, readings=False)
    for text in every_code_point_texts():
        assert sequence_pieces(fast, text) == sequence_pieces(plain, text), (pattern, text[:4])


@pytest.mark.parametrize("behavior", hf_components.BEHAVIORS)
@pytest.mark.parametrize("invert", [False, True])
@settings(max_examples=120, deadline=None)
@given(text=st.text(alphabet=BOUNDARY, max_size=50), picks=st.lists(st.integers(0, len(RUNS)), min_size=1, max_size=3))
def test_generated_texts_split_like_pcre2_and_the_specification(behavior, invert, text, picks):
    """Chains of one to three steps drawn from RUNS and DeepSeek's word regex (index len(RUNS)),
    the last with the behavior and invert given."""
    patterns = [(RUNS + [WORD])[k] for k in picks]
    spec = {"type": "Sequence", "pretokenizers": [split(p) for p in patterns[:-1]] +
            [split(patterns[-1], behavior, invert), BYTE_LEVEL_PLAIN]}
    steps = sequence_split.encoder_steps(spec)
    fast, plain = bare_encoder(steps), bare_encoder(steps, readings=False)
    got = pieces(fast, text)
    assert got == pieces(plain, text)
    if got is not None:
        assert got == hf_components.pre_tokenizer(spec)(text)


def test_a_class_pcre2_cannot_read_keeps_pcre2():
    """A reading whose class PCRE2 refuses leaves the step to PCRE2: the same pieces."""
    steps = sequence_split.encoder_steps(chain(r"\p{N}+"))
    pattern = steps["steps"][0][0]
    broken = TextEncoder(pattern, [], [], [], list(range(256)), steps=[(pattern, "Isolated", False, ("run", "[z-a]", 1, 0))])
    assert sequence_pieces(broken, "ab 123 c") == ["ab ", "123", " c"]
    with pytest.raises(ValueError):
        TextEncoder(pattern, [], [], [], list(range(256)), steps=[(pattern, "Isolated", False, ("run", "x", 0, 1))])
    with pytest.raises(ValueError):
        TextEncoder(pattern, [], [], [], list(range(256)), steps=[(pattern, "Isolated", False, ("words",))])


def test_long_runs_split_like_regex():
    """Long runs: a CJK block, 100,000 digits, whitespace of several kinds."""
    text = "".join(map(chr, range(0x4E00, 0x9FA6))) + "7" * 100_000 + " \t\n\u3000" * 5000 + "end"
    spec = chain(DIGITS, CJK, WORD)
    got = sequence_pieces(bare_encoder(sequence_split.encoder_steps(spec)), text)
    assert got[0] == text[:0x9FA6 - 0x4E00] and got[1:33335] == ["777"] * 33333 + ["7"]
    assert got == hf_components.pre_tokenizer(spec)(text)


# ---- the steps as one chain (`_pcre2.c`'s chain_pieces): the pieces of the steps run one by one ----

@lru_cache(maxsize=None)
def chain_encoders(patterns: tuple, last_behavior: str = "Isolated") -> tuple[TextEncoder, TextEncoder]:
    """(the steps with their readings, the steps on PCRE2 alone) for Isolated Splits by `patterns`
    (the last with `last_behavior`); the guard off, PCRE2 being the reference on every character."""
    spec = {"type": "Sequence", "pretokenizers": [split(p) for p in patterns[:-1]] +
            [split(patterns[-1], last_behavior), BYTE_LEVEL_PLAIN]}
    steps = sequence_split.encoder_steps(spec)
    steps["guard"] = None
    return bare_encoder(steps), bare_encoder(steps, readings=False)


@lru_cache(maxsize=None)
def python_chain(patterns: tuple):
    """The Python specification's pre-tokenizer for Isolated Splits by `patterns`, and the guard:
    the code points its `regex` reads otherwise than PCRE2 (None: none)."""
    return hf_components.pre_tokenizer(chain(*patterns)), sequence_split.encoder_steps(chain(*patterns))["guard"]


def split_every_way(patterns: tuple, text: str) -> list[str]:
    """The chain's pieces of `text`, checked equal step by step (with the readings), on PCRE2 and
    by the Python specification (where its `regex` reads every character as PCRE2 does)."""
    encoder, plain = chain_encoders(patterns)
    chained = sequence_pieces(encoder, text)
    assert chained == sequence_pieces(encoder, text, False), text[:80]
    assert chained == sequence_pieces(plain, text), text[:80]
    python, guard = python_chain(patterns)
    if guard is None or not any(guard[ord(c) >> 3] >> (ord(c) & 7) & 1 for c in set(text)):
        assert chained == python(text), text[:80]
    return chained


DEEPSEEK = (DIGITS, CJK, WORD)


@pytest.mark.parametrize("patterns, last_behavior, chained, batch", [
    (DEEPSEEK, "Isolated", True, True),
    ((r"\p{N}", WORD), "Isolated", True, True),
    ((CJK, WORD), "Isolated", True, False),              # digits are the word regex's: no window reads them
    ((r"\p{N}+", CJK, WORD), "Isolated", True, False),   # runs of digits unbounded
    ((r"\p{Nd}{1,3}", r"\p{N}", WORD), "Isolated", False, False),   # two classes share the digits
    ((r"\p{N}{2,3}", WORD), "Isolated", False, False),   # a run of one digit is no match
    ((DIGITS, LLAMA3), "Isolated", False, False),        # not DeepSeek's word regex
    (DEEPSEEK, "Removed", False, False),
    ((WORD,), "Isolated", False, False),                 # nothing split off first
])
def test_which_chains_split_in_one_pass(patterns, last_behavior, chained, batch):
    encoder, plain = chain_encoders(patterns, last_behavior)
    assert (encoder.chained, encoder.chain_batch) == (chained, batch)
    assert not plain.chained


def test_the_chain_in_one_pass_gives_each_steps_pieces():
    assert split_every_way(DEEPSEEK, "It's  a dog-eat-dog.\n\n  42x") == [
        "It", "'s", " ", " a", " dog", "-eat", "-dog", ".\n\n", "  ", "42", "x"]
    assert split_every_way(DEEPSEEK, "ab 1234日本・x") == ["ab", " ", "123", "4", "日本", "・", "x"]
    # The same, 64-byte windows' worth at a time: a window reads the ASCII, the scanner the rest.
    text = ("The year 2024: 1234567 items,  each\t\t(x-y)\n\n  \"quoted\" — ‘a’… \x7fdel\x00 " * 9 +
            "東京タワー333m、ＡＢＣ１２３ ١٢٣٤ 😀x\u3000\u2028.\n")
    assert split_every_way(DEEPSEEK, text) == hf_components.pre_tokenizer(chain(*DEEPSEEK))(text)


# Pieces whose order changes where the chain cuts: letters, whitespace of each kind, punctuation
# (ASCII, U+2010..U+2027 and beyond), digits of several scripts, DEL and control bytes, CJK, marks,
# characters beyond the BMP.
CHAIN_PIECES = ["a", "Hello", "x", " ", "  ", "   ", ".", ",", "-", "(", "?!", "_", "'", "'s", "1", "12", "123",
                "1234", "12345", "\n", "\r\n", "\t", " \n", "\x0b", "\x0c", "\x00", "\x1f", "\x7f", "é", "中",
                "日本", "・", "ー", "😀", "𝟙", "\xa0", "٣", "—", "’", "“", "…", "\u2028", "\u3000", "\u0301", "ab"]


@pytest.mark.parametrize("patterns", [DEEPSEEK, (r"\p{N}", WORD)])
# The instruction set is the test's, the same for all its examples.
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(CHAIN_PIECES), min_size=20, max_size=200),
       plain=st.lists(st.sampled_from(CHAIN_PIECES[:21]), max_size=60))
def test_long_mostly_ascii_texts_split_as_the_steps_do(patterns, isa, parts, plain):
    # A long plain stretch first (whole windows of sure pieces), then the mixture.
    split_every_way(patterns, "".join(plain) * 3 + "".join(parts))


def test_every_four_characters_at_every_place_of_a_window(isa):
    # Every sequence of four of these characters after prefixes that put it at different places of
    # the 64-byte window, plain text around it (one text of many, NUL apart: a NUL is a byte the
    # window leaves to the scanner, so each starts the windows afresh).
    symbols = ["a", "B", " ", ".", "'", "1", "\n", "\t", "é", "—", "\x7f", "中"]
    prefixes = ["", "Ab", " cd,", "ef. gh", "The big   dog's 1 ", "x" * 40 + " y", "Ok " * 19]
    sequences = ["".join((a, b, c, d)) for a in symbols for b in symbols for c in symbols for d in symbols]
    for prefix in prefixes:
        for k in range(0, len(sequences), 500):
            split_every_way(DEEPSEEK, "\x00".join(prefix + seq + "xy z. " + "w" * 60 for seq in sequences[k:k + 500]))


def test_runs_of_whitespace_and_digits_across_a_windows_end(isa):
    # A run of whitespace is split by its last newline, which may lie past the window or past a byte
    # it cannot read, and is not cut before digits; runs of digits go on across the window's end.
    runs = [" \n  \n ", "\n\n", "\n \n", "  \n", "\t\n\t", "\r\n \r\n", " \n \xa0\n ", "\n  \xa0 x", "\n \x1f\n",
            "  \t  ", ".\n \n", "a \n", "  12", "\n  123456789", " 1234 ", "12\n\n 34", "-1234x"]
    for run in runs:
        for k in range(40, 70):
            for text in ("a" * k + run + "b" * 80, "a b" * (k // 3) + "c" * (k % 3) + run + ". " * 40):
                split_every_way(DEEPSEEK, text)


def test_real_documents_split_in_one_pass_as_step_by_step(corpora):
    for corpus in ("en", "code", "multi"):
        for text in read_jsonl_texts(corpora / corpus, limit=40):
            split_every_way(DEEPSEEK, text)

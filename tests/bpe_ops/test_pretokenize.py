"""Pre-tokenization: our named patterns split real text exactly as Hugging Face's Split(Regex) does
(Oniguruma), special tokens split first, and the byte <-> unicode table is GPT-2's. The optional PCRE2
accelerator gives the pieces of `regex` on real text, every code point and adversarial strings."""
import os
import pickle
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import regex
from tokenizers import Regex, pre_tokenizers

from bpe_ops import pretokenize, saving
from bpe_ops.implementation import DEFAULT, Implementation, from_environment
from tests.conftest import read_jsonl_texts

pytestmark = pytest.mark.slow


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


# ---- the optional PCRE2 accelerator: the same pieces as `regex`, everywhere --------------------

PCRE2_MISSING = pretokenize._pcre2_module() is None
needs_pcre2 = pytest.mark.skipif(PCRE2_MISSING and os.environ.get("TOKENBEAM_REQUIRE_PCRE2") != "1",
                                 reason="bpe_ops._pcre2 not built or libpcre2-8 missing (optional accelerator)")
HAS_PCRE2 = not PCRE2_MISSING
NAMES = ["gpt2", "gpt4", "o200k", "classic"]
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
TIKTOKEN_CL100K = pretokenize.GPT4_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}{1,3}+")
ADVERSARIAL = [
    "", " ", "\n", "x\ud800 y", "\udfff", "a\ud83d\ude00b", "  \udc00  \n",   # lone surrogates
    "a\x00b\x00 \x00\x00 1\x00",                                                # NUL
    "line\r\nnext\r\n\r\n  \r\n\r", "a\rb\r\r\n c\n\r",                          # CR, LF, CRLF
    "end   ", "end \n", "end\n\n", "  \n  ", "x\t\n \n", "x \n\n", "\n \n\t ",  # trailing white space, \s++$
    "e\u0301te\u0301 \u0301abc a\u0301\u0302\u0303 b", "नमस्ते दुनिया", "مَرْحَبًا بِكُمْ", "한국어 각",  # marks
    "👩\u200d👩\u200d👧\u200d👦 family 🏳️\u200d🌈 1️⃣ 👍🏽!", "\u200d\u200c\ufeff",       # emoji ZWJ, joiners
    "it's IT'S it'ſ 'LL 'Ll 'K 'Re 'rE 'vE 'D's'", "Straße 'ß ǅemal ǈ",            # case folding
    "\u00a0\u2003x\u3000\u180e\u2028y\u2029\x85\x0b\x0c\x1c\x1f z \u180e",      # Unicode white space
    "4294967295 ١٢٣٤٥ ⅫⅣ ½ ²³ 12٣4",                                          # digits of all kinds
    "\u0295 \U00011f00\U00011f01 \U0001e4d0 \U0002ebf0 \u0c5c \u088f",          # guarded: newer Unicode
    "\uffff\ufffe \U0010ffff\U000e0001 \ue000",                                # non-characters, private use
    " " * 100_000, "a" * 100_000, "1" * 100_001, "!" * 50_000, "\n" * 50_000 + " ", "é" * 50_000,
    "  x" * 30_000, "'s" * 20_000, "\u0301" * 20_000, " \r\n" * 20_000, "ab\u0301" * 30_000,  # long runs
]


def pcre2_pieces(pattern: str, text: str) -> list:
    """PCRE2's own split, without the guard (the flags `pretokenize` uses, written out here)."""
    from bpe_ops import _pcre2
    return _pcre2.Pattern("(*LF)" + pattern).findall(text)


@needs_pcre2
@pytest.mark.parametrize("name", NAMES)
def test_pcre2_splits_every_document_like_regex(name, corpora):
    texts = read_jsonl_texts(corpora / "multi") + read_jsonl_texts(corpora / "code")
    fast, reference = pretokenize.compile_pattern(name), regex.compile(pretokenize.PATTERNS[name])
    assert pretokenize.regex_engine(name) == "pcre2"
    assert [fast.findall(t) for t in texts] == [reference.findall(t) for t in texts]
    # The comparison above is PCRE2's work, not the guard's fallback: PCRE2 took nearly every text.
    assert sum(map(fast.pcre2_splits, texts)) >= 0.95 * len(texts)


@needs_pcre2
@pytest.mark.parametrize("name", NAMES)
def test_pcre2_splits_adversarial_text_like_regex(name):
    fast, reference = pretokenize.compile_pattern(name), regex.compile(pretokenize.PATTERNS[name])
    for text in ADVERSARIAL:
        assert fast.findall(text) == reference.findall(text), repr(text[:40])
        assert ([(m.start(), m.end(), m.group()) for m in fast.finditer(text)]
                == [(m.start(), m.end(), m.group()) for m in reference.finditer(text)]), repr(text[:40])
    # Lone surrogates cannot reach PCRE2 (UTF-8 only): those texts went to `regex`.
    assert not fast.pcre2_splits("x\ud800 y") and fast.pcre2_splits("x y é")


@needs_pcre2
@pytest.mark.parametrize("name", NAMES)
def test_pcre2_splits_every_code_point_like_regex(name):
    """Every code point but the surrogates, 16 at a time between a letter and an apostrophe, a digit
    and a newline: PCRE2 where it takes the text, `regex` where the guard sends it, always `regex`'s
    pieces."""
    fast, reference = pretokenize.compile_pattern(name), regex.compile(pretokenize.PATTERNS[name])
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    chunks = ["".join(map(chr, points[i:i + 16])) for i in range(0, len(points), 16)]
    texts = [f"x{c}'s 1\n " for c in chunks]
    taken = [t for t in texts if fast.pcre2_splits(t)]
    assert len(taken) >= 0.95 * len(texts)
    assert [fast.findall(t) for t in texts] == [reference.findall(t) for t in texts]


@needs_pcre2
def test_the_guard_is_needed_and_holds_exactly_what_the_engines_disagree_on():
    """Texts made of each guarded character split differently by bare PCRE2 somewhere (so the guard
    is not decoration), and the accelerated pattern still gives `regex`'s pieces on them."""
    fast = pretokenize.compile_pattern("o200k")
    reference = regex.compile(pretokenize.O200K_PATTERN)
    if not fast.guard:
        pytest.skip("these PCRE2 and regex versions classify every character alike: nothing to guard")
    texts = [f"a{first}b {first}1 {last}{last}" for first, last in fast.guard]
    assert not any(map(fast.pcre2_splits, texts))
    assert any(pcre2_pieces(pretokenize.O200K_PATTERN, t) != reference.findall(t) for t in texts)
    assert [fast.findall(t) for t in texts] == [reference.findall(t) for t in texts]


@needs_pcre2
def test_the_guard_bitmap_finds_exactly_the_guarded_characters(corpora):
    """The guard's bitmap lookup (`_native.has_code_point_in`) says what PCRE2's search of the same
    character class says, on every character next to a guarded range's ends, on a lone surrogate,
    on characters of each width Python stores (1, 2, 4 bytes) and on real multilingual documents."""
    from bpe_ops import _native
    fast = pretokenize.compile_pattern("o200k")
    ranges = fast.guard + (("\ud800", "\udfff"),)
    bits = pretokenize._code_point_bits(ranges)
    members = "".join(f"\\x{{{ord(a):x}}}-\\x{{{ord(b):x}}}" for a, b in fast.guard)
    guarded = pretokenize._pcre2_compile(f"[{members}]" if members else "(?!)")
    edges = {c for a, b in ranges for c in (ord(a) - 1, ord(a), ord(b), ord(b) + 1) if 0 <= c < 0x110000}
    for c in sorted(edges | {0, 0x7F, 0xFF, 0x100, 0xFFFF, 0x10000, 0x10FFFF}):
        inside = any(ord(a) <= c <= ord(b) for a, b in ranges)
        for text in (chr(c), "ab " + chr(c), "\u00e9" + chr(c), "\U0001f600" + chr(c) + "x"):
            assert _native.has_code_point_in(text, bits) == inside, hex(c)
            if not 0xD800 <= c <= 0xDFFF:
                assert bool(guarded.search(text)) == inside, hex(c)
    for text in read_jsonl_texts(corpora / "multi")[:300]:
        assert _native.has_code_point_in(text, bits) == bool(guarded.search(text))
    assert fast.pcre2_splits("abc \u0915\u093f") and not fast.pcre2_splits("a\ud800")
    with pytest.raises(ValueError):
        _native.has_code_point_in("a", b"\x00")


@needs_pcre2
def test_custom_patterns_use_pcre2_only_in_the_portable_syntax(corpora):
    for pattern in (LLAMA3_PATTERN, TIKTOKEN_CL100K, r"\S+|\s+", r"[a[b]+|\p{Han}+|.", r"(?<=a)b|.",
                    r"(?>a|ab)c|."):
        assert pretokenize.regex_engine(pattern) == "pcre2", pattern
    # (a lookbehind of variable length: PCRE2 10.42 refuses it, `regex` takes it)
    for pattern in (r"\w+", r"\d+", r"\bx", r"a\Z", "x{,3}", "[[:alpha:]]", "(?i)abc", r"(?i:\p{Lu})",
                    r"\x41", r"(?<=a+)b", r"(?P<w>a)", r"\p{Script=Han}", r"(?i:[a-z]+)"):
        assert pretokenize.regex_engine(pattern) == "regex", pattern
    texts = read_jsonl_texts(corpora / "multi")[:100] + ADVERSARIAL
    for pattern in (LLAMA3_PATTERN, TIKTOKEN_CL100K, r"[a[b]+|\p{Han}+|.", r"(?<=\S) \p{L}+|(?>a|ab)c|[\s\S]"):
        fast, reference = pretokenize.compile_pattern(pattern), regex.compile(pattern)
        assert [fast.findall(t) for t in texts] == [reference.findall(t) for t in texts], pattern


@needs_pcre2
def test_capturing_groups_and_empty_matches_behave_as_in_regex():
    for pattern, text in ((r"(a)(b)?|(c)", "abacx"), (r"x*", "axxb"), (r"\s*", "a  b \n"), (r"(?=a)|a", "aa"),
                          (r"\s*$", "a \n"), (r"(\p{L})\p{L}*", "héllo wörld ok")):
        fast, reference = pretokenize.compile_pattern(pattern), regex.compile(pattern)
        assert fast.groups == reference.groups
        assert fast.findall(text) == reference.findall(text), pattern
        assert ([m.span() for m in fast.finditer(text)] == [m.span() for m in reference.finditer(text)]), pattern


@needs_pcre2
def test_encoder_gives_the_same_ids_with_either_engine(gpt2_files, corpora, monkeypatch):
    from bpe_ops import Tokenizer
    texts = read_jsonl_texts(corpora / "multi")[:40] + read_jsonl_texts(corpora / "code")[:20] + ADVERSARIAL[:-11]
    fast = Tokenizer.from_gpt2_files(*gpt2_files)
    merges = fast.merges[:5000]
    # Gaps between matches take the finditer path of the encoder.
    custom = Tokenizer(merges, pattern=r"\p{L}+| ?\p{N}+")
    monkeypatch.setenv(pretokenize.ENGINE_VARIABLE, "regex")      # not read: the argument decides
    assert isinstance(Tokenizer(merges, pattern="gpt2")._regex, pretokenize.Pcre2Pattern)
    regex_only = Implementation(engine="regex")
    slow = Tokenizer.from_gpt2_files(*gpt2_files, implementation=regex_only)
    custom_slow = Tokenizer(merges, pattern=r"\p{L}+| ?\p{N}+", implementation=regex_only)
    assert isinstance(fast._regex, pretokenize.Pcre2Pattern) and isinstance(slow._regex, regex.Pattern)
    assert isinstance(custom._regex, pretokenize.Pcre2Pattern)
    assert fast.encode_batch(texts) == slow.encode_batch(texts)
    assert custom.encode_batch(texts) == custom_slow.encode_batch(texts)


@needs_pcre2
def test_count_pretokens_and_pickling_with_pcre2(corpora):
    texts = read_jsonl_texts(corpora / "tiny")
    counts = pretokenize.count_pretokens(texts + ["x\ud800"], "gpt4")
    reference = regex.compile(pretokenize.GPT4_PATTERN)
    expected = Counter(pretokenize.to_utf8(p) for t in texts + ["x\ud800"] for p in reference.findall(t))
    assert counts == expected
    fast = pretokenize.compile_pattern("gpt4")
    back = pickle.loads(pickle.dumps(fast))
    assert isinstance(back, pretokenize.Pcre2Pattern) and back.findall(texts[0]) == fast.findall(texts[0])


def test_engine_choice_argument_and_fallback(monkeypatch):
    """`Implementation(engine="regex")` keeps `regex`; without PCRE2 `regex` is used (runs with or
    without it). The environment is not read here."""
    monkeypatch.setenv(pretokenize.ENGINE_VARIABLE, "regex")
    assert pretokenize.regex_engine("gpt4") == ("pcre2" if HAS_PCRE2 else "regex")
    regex_only = Implementation(engine="regex")
    assert isinstance(pretokenize.compile_pattern("gpt4", regex_only), regex.Pattern)
    assert pretokenize.regex_engine("gpt4", regex_only) == "regex"
    counter = pretokenize.PretokenCounter("gpt4", implementation=regex_only)
    assert counter._fast is None
    counter.add("it's 12345")
    assert counter.drain() == {b"it": 1, b"'s": 1, b" ": 1, b"123": 1, b"45": 1}
    with pytest.raises(ValueError, match="engine"):
        Implementation(engine="pcre")
    monkeypatch.setattr(pretokenize, "_pcre2_module", lambda: None)
    pretokenize._compile.cache_clear()
    try:
        compiled = pretokenize.compile_pattern("gpt4")
        assert isinstance(compiled, regex.Pattern) and compiled.findall("it's 12345") == ["it", "'s", " ", "123", "45"]
    finally:
        pretokenize._compile.cache_clear()


def test_from_environment_maps_the_old_variables():
    assert from_environment({}) == DEFAULT == Implementation(compiled=True, engine="auto", cache_dir=None)
    assert from_environment({"TOKENBEAM_PURE_PYTHON": "1"}).compiled is False
    assert from_environment({"TOKENBEAM_PURE_PYTHON": "0"}).compiled is True
    assert from_environment({"TOKENBEAM_REGEX": "regex"}).engine == "regex"
    assert from_environment({"TOKENBEAM_REGEX": ""}).engine == "auto"
    with pytest.raises(ValueError, match="TOKENBEAM_REGEX"):
        from_environment({"TOKENBEAM_REGEX": "pcre"})
    assert from_environment({"TOKENBEAM_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"}).cache_dir == "/c"
    assert from_environment({"XDG_CACHE_HOME": "/x", "HOME": "/h"}).cache_dir == os.path.join("/x", "tokenbeam")
    assert from_environment({"HOME": "/h"}).cache_dir == os.path.join("/h", ".cache", "tokenbeam")
    with pytest.raises(AttributeError):
        DEFAULT.compiled = False                      # frozen: one DEFAULT for everyone


def test_bpe_ops_reads_no_environment_variable():
    """Choices come as arguments; only `from_environment` (called by the CLI) looks at variables."""
    import pathlib
    package = pathlib.Path(pretokenize.__file__).parent
    readers = [path.name for path in package.glob("*.py")
               if regex.search(r"os\.environ[.\[]|getenv\(|expanduser\(", path.read_text(encoding="utf-8"))]
    assert readers == []


# ---- pattern names and coverage ------------------------------------------------------------------

@pytest.mark.parametrize("spelling, name", [("GPT4", "gpt4"), ("Gpt2", "gpt2"), ("O200K", "o200k"),
                                            ("CLASSIC", "classic"), ("gpt4", "gpt4")])
def test_pattern_names_are_case_insensitive(spelling, name):
    assert pretokenize.resolve_pattern(spelling) == pretokenize.PATTERNS[name]
    assert pretokenize.compile_pattern(spelling).pattern == pretokenize.PATTERNS[name]
    assert pretokenize.pretokenize("It's 12345", spelling) == pretokenize.pretokenize("It's 12345", name)


@pytest.mark.parametrize("word", ["gpt5", "GPT-4", "cl100k_bas", "o200k2", "abc", "x", "42"])
def test_an_unknown_bare_word_is_a_misspelt_name_not_a_regex(word):
    with pytest.raises(ValueError, match=rf"unknown pattern name '{word}': known names are gpt2, gpt4, o200k, classic$"):
        pretokenize.resolve_pattern(word)
    with pytest.raises(ValueError, match="unknown pattern name"):
        pretokenize.compile_pattern(word)
    with pytest.raises(ValueError, match="unknown pattern name"):
        pretokenize.PretokenCounter(word)


@pytest.mark.parametrize("alias, name", [("cl100k", "gpt4"), ("CL100K_BASE", "gpt4"), ("o200k_base", "o200k"),
                                         ("r50k_base", "gpt2"), ("p50k_base", "gpt2")])
def test_tiktoken_encoding_names_are_aliases_of_their_patterns(alias, name):
    assert pretokenize.resolve_pattern(alias) == pretokenize.resolve_pattern(name)


def test_regexes_that_are_not_bare_words_stay_regexes():
    for pattern in (r"\S+", "a|b", "gpt4+", "(?:gpt4)", " gpt4", "[a-z]+"):
        assert pretokenize.resolve_pattern(pattern) == pattern
    assert pretokenize.pretokenize("gpt4 gpt44", "(?:gpt4)") == ["gpt4", "gpt4"]


def test_a_tokenizer_file_splitting_on_a_bare_word_still_loads(tmp_path):
    """A tokenizer.json whose Split regex is a bare word (a literal) is not read as a name."""
    import json
    from bpe_ops import Tokenizer
    tok = Tokenizer([(b"a", b"b")], pattern="gpt2")
    doc = json.loads(saving.json_text(tok))
    doc["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": "gpt4"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(doc), encoding="utf-8")
    loaded = Tokenizer.from_file(tmp_path)
    assert loaded.pattern == "(?:gpt4)" and loaded.pattern_name is None
    assert loaded.decode(loaded.encode("x gpt4 y")) == "x gpt4 y"


@pytest.mark.parametrize("name", ["gpt2", "gpt4", "o200k", "GPT4", LLAMA3_PATTERN, TIKTOKEN_CL100K, r"\S+|\s+",
                                  r"(?s)."])
def test_patterns_that_match_everything_have_no_coverage_gap(name):
    assert pretokenize.pattern_coverage_gap(name) is None


@pytest.mark.parametrize("pattern, gap, probe", [
    (r"\p{L}+", " ", "a b"),
    (r"\S+", " ", "a b"),
    ("classic", " ", "a b"),                                     # whitespace is dropped by design
    (r"\p{L}+|\s+", ",", None),
    (".", "\n\n", None),                                         # `.` stops at a newline
    (r"[\p{L}\p{N}\p{P}\p{S}]+| ", "\t", None),
    (r"[\p{L}\p{N}\p{P}\p{S}\s]+", "\u094d", "नमस्ते दुनिया ०१२"),     # a combining mark (virama)
    (r"[\p{L}\p{N}\p{P}\p{S}\p{M}\s]+", "\u200d", None),         # the joiner of an emoji sequence
    (r"[ -~\s]+", "Ç", None),
    (r"[\x00-\u024f\s]+", "Привет", None),
])
def test_a_pattern_that_leaves_text_unmatched_is_described_in_one_line(pattern, gap, probe):
    found = pretokenize.pattern_coverage_gap(pattern)
    assert found is not None and "\n" not in found
    assert found.startswith(f"the pattern leaves {gap!r} unmatched in "), found
    if probe is not None:
        assert found == f"the pattern leaves {gap!r} unmatched in {probe!r}"


def test_the_coverage_probes_hold_every_kind_of_text():
    probes = "".join(pretokenize.COVERAGE_PROBES)
    for needle in ("\r\n", "\t", "\u00e9", "\u0436", "\u03b1", "\u4e16", "\u0645", "\u0928", "\u200d", "\u0301",
                   "\U0001f44d", "0123456789"):
        assert needle in probes, repr(needle)
    with pytest.raises(ValueError, match="invalid split pattern"):
        pretokenize.pattern_coverage_gap("(unclosed")
    with pytest.raises(ValueError, match="unknown pattern name"):
        pretokenize.pattern_coverage_gap("gpt5")


@needs_pcre2
@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 0x10FFFF), max_size=6), st.lists(st.integers(0, 0x10FFFF), max_size=120),
       st.sampled_from([0, 0x7F, 0xFF, 0xFFFF, 0x10FFFF]))
def test_the_guard_bitmap_lookup_equals_a_lookup_per_character(guarded, text_points, widest):
    # Any set of guarded code points (low ones too: a text of one byte per character is then read)
    # and texts of each width Python stores, longer than a block, the guarded character anywhere.
    from bpe_ops import _native
    bits = bytearray(0x110000 // 8)
    for c in guarded:
        bits[c >> 3] |= 1 << (c & 7)
    text = "".join(chr(min(c, widest)) for c in text_points)
    expected = any(bits[ord(c) >> 3] >> (ord(c) & 7) & 1 for c in text)
    assert _native.has_code_point_in(text, bytes(bits)) == expected
    for c in guarded[:2]:
        for at in (0, len(text) // 2, len(text)):
            assert _native.has_code_point_in(text[:at] + chr(c) + text[at:], bytes(bits))


@needs_pcre2
@pytest.mark.parametrize("lowest", [0, 1, 0x80, 0x100, 0x7FF, 0x800, 0x8000, 0xFFFF, 0x10000, 0x10FFFF])
def test_the_guard_lookup_finds_its_lowest_code_point_in_every_place_of_a_block(lowest):
    """Blocks of 32 characters are read 16 bytes at a time (SSE2): the lowest guarded code point at
    every place of two blocks and a tail is found, and the code point just below it (above it, for
    0) nowhere."""
    from bpe_ops import _native
    bits = bytearray(0x110000 // 8)
    bits[lowest >> 3] |= 1 << (lowest & 7)
    plain = chr(lowest - 1 if lowest else 1) * 70
    assert not _native.has_code_point_in(plain, bytes(bits))
    for at in range(70):
        assert _native.has_code_point_in(plain[:at] + chr(lowest) + plain[at + 1:], bytes(bits)), at

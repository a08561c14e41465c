"""The hand-written splitter (`bpe_ops/_split_scan.h`) against its specification, PCRE2 running the
same pattern: identical pieces for every pattern of `SCANNED_PATTERNS` on real documents of every
corpus, on every code point of the Basic Multilingual Plane beside every class of character, and
on random texts over the class boundaries (whitespace of each kind before letters, digits,
punctuation, apostrophes and contractions in every case, characters beyond the BMP)."""
import inspect
import os
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpe_ops import pretokenize
from bpe_ops.pretokenize import SCANNED_PATTERNS, _pcre2_compile
from tests.bpe_ops.conftest import batch_isas
from tests.conftest import read_jsonl_texts

pcre2 = pretokenize._pcre2_module()
pytestmark = [pytest.mark.skipif(pcre2 is None and os.environ.get("TOKENBEAM_REQUIRE_PCRE2") != "1",
                                 reason="bpe_ops._pcre2 not built or libpcre2-8 missing (optional accelerator)"),
              pytest.mark.slow]

PATTERNS = sorted(SCANNED_PATTERNS)
# Every kind of character the scanned patterns tell apart, and the pairs where they part ways.
PIECES = [" ", "  ", "\n", "\r\n", "\r", "\t", "\x0b", "\x0c", "\x85", "\xa0", "\u2028", "\u3000", "\u200b",
          "a", "Z", "é", "ж", "中", "ア", "한", "ß", "1", "42", "1234", "٣", "½", "Ⅻ", "'", "'s", "'S", "'ſ", "'t",
          "'ll", "'LL", "'re", "'Ve", "'d", "'M", "’s", "!", ".", "-", "$", "_", "\x00", "😀", "𝐀", "𝟙",
          "\u0301", "\u093f", "\U000e0001", "A", "AB", "Ab", "aB", "ǅ", "ʰ", "\u0301\u0301", "/", "\n/",
          "a'", "A'S", "x's", "é'Ll"]


def pieces(pattern: str, text: str, scan: bool) -> list[str]:
    compiled = pcre2.Pattern("(*LF)" + pattern, SCANNED_PATTERNS[pattern] if scan else None)
    assert compiled.scans == scan
    return compiled.findall(text)


def test_the_scanned_patterns_scan_and_the_rest_do_not():
    for pattern in PATTERNS:
        compiled = _pcre2_compile(pattern)
        assert compiled.scans
        assert pickle.loads(pickle.dumps(compiled)).scans
    assert not _pcre2_compile(r"\S+").scans


def test_worked_example():
    # The docstring of _split_scan.h: the last space before a word joins it, newlines end a run.
    text = "Hi  there\n\n 42!"
    expected = ["Hi", " ", " there", "\n\n", " ", "42", "!"]
    assert pieces(pretokenize.LLAMA3_PATTERN, text, True) == expected
    assert pieces(pretokenize.LLAMA3_PATTERN, text, False) == expected
    # gpt2: no newline alternative, digits run on, the space joins what follows.
    assert pieces(pretokenize.GPT2_PATTERN, text, True) == ["Hi", " ", " there", "\n\n", " 42", "!"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_real_documents(pattern, corpora, isa):
    texts = []
    for folder in ("multi", "code", "en", "tiny"):
        texts += read_jsonl_texts(corpora / folder, limit=400)
    assert len(texts) > 1000
    differ = [t[:60] for t in texts if pieces(pattern, t, True) != pieces(pattern, t, False)]
    assert differ == []


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_bmp_code_point_beside_every_class(pattern):
    code_points = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF]
    for k, context in enumerate(PIECES):
        # Each code point alone, doubled, and between `context` and its neighbours.
        text = "".join(f"{c}{context}{c}{c} {c}" for c in code_points[k::7])
        assert pieces(pattern, text, True) == pieces(pattern, text, False), repr(context)


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=16))
def test_random_texts(pattern, parts):
    text = "".join(parts)
    assert pieces(pattern, text, True) == pieces(pattern, text, False)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_ascii_letter_runs_of_every_length_before_every_character(pattern):
    # A run of letters skips ASCII letters 8 bytes at a time: runs of 1 to 25 letters (across one to
    # three 8-byte words, ending inside one or at the text's end) before every ASCII character (the
    # neighbours of the letters' ranges among them: '@', '[', '`', '{') and a few beyond ASCII.
    letters = "HelloWorldAbcXyzQuickBrownFoxZa"
    after = [chr(b) for b in range(128)] + ["é", "ß", "中", "😀", "́", " "]
    for start in ("", " ", "'", "1", "é"):
        for n in range(1, 26):
            texts = [start + letters[:n] + c + letters[n:] for c in after] + [start + letters[:n]]
            for text in texts:
                assert pieces(pattern, text, True) == pieces(pattern, text, False), repr(text)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_ascii_runs_of_spaces_and_punctuation_before_every_character(pattern):
    # Runs of spaces are skipped 8 bytes at a time and the cl100k family reads runs of ASCII
    # punctuation and digits byte by byte until a byte beyond ASCII hands them on: runs of 1 to 19
    # (across one to three 8-byte words, ending inside one or at the text's end), after every kind
    # of first character, before every ASCII character and a few beyond it (whitespace among them).
    after = [chr(b) for b in range(128)] + ["é", "ß", "中", "😀", "́", "\xa0", "\u3000", "\u2028", "٣", "’"]
    for run in (" ", "\t ", " \n", ".,", "-/", "'", "12"):
        for start in ("", "a", " ", "\n", "1", "é", ".", "'"):
            for n in range(1, 20):
                body = (run * n)[:n]
                # Each before every character, one text (a NUL, punctuation to every family, apart),
                # and at the text's end.
                for text in ("\x00".join(start + body + c + "x" for c in after), start + body):
                    assert pieces(pattern, text, True) == pieces(pattern, text, False), repr(text)


# The cl100k family splits runs of plain ASCII (and U+2010..U+2027) 64 bytes at a time (`scan_batch`),
# leaving the bytes it cannot read (beyond ASCII, control bytes, an apostrophe that may start a
# contraction, a 4th digit) to the byte-by-byte scanner. Its pieces: mostly ASCII, the odd byte among
# them, in texts long enough to fill many windows at every alignment.
ASCII_PIECES = ["a", "Hello", "world", "x", " ", "  ", "   ", "    ", ".", ",", "-", "(", ")", "?!", "_", "$",
                '"', "'", "'s", "'S", "'t", "'ll", "'LL", "'re", "'Ve", "'d", "'m", "'x", "1", "12", "123", "1234",
                "12345", "\n", "\r\n", "\t", " \n", "\x0b", "\x00", "\x7f", "é", "中", "😀", "\xa0", "٣",
                "—", "’", "“", "”", "…", "\u200f", "\u2028", "\u2030", "\u2000"]
CL100K_FAMILY = [p for p in PATTERNS if SCANNED_PATTERNS[p][0] == "cl100k"]


def test_the_windows_classify_with_the_widest_instruction_set_there_is():
    isas = batch_isas()
    assert pcre2.batch_isa() == isas[-1]
    with pytest.raises(ValueError, match="none of"):
        pcre2.batch_isa("neon")


@pytest.mark.parametrize("pattern", CL100K_FAMILY)
# The instruction set is the test's, the same for all its examples.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(ASCII_PIECES), min_size=20, max_size=160),
       st.lists(st.sampled_from(ASCII_PIECES[:14]), max_size=60))
def test_long_mostly_ascii_texts(pattern, isa, parts, plain):
    # A long plain stretch first (whole windows of sure pieces), then the mixture.
    text = "".join(plain) * 3 + "".join(parts)
    assert pieces(pattern, text, True) == pieces(pattern, text, False)


@pytest.mark.parametrize("pattern", CL100K_FAMILY)
def test_every_four_characters_at_every_place_of_a_window(pattern, isa):
    # Every sequence of four of these characters, after prefixes that put it at different places of
    # the 64-byte window, with plain text around it (one text of many, NUL apart: a NUL is a byte the
    # window leaves to the scanner, so each starts the windows afresh).
    symbols = ["a", "B", " ", ".", "'", "s", "l", "1", "\n", "\t", "é", "—"]
    prefixes = ["", "Ab", " cd,", "ef. gh", "The big   dog's 1 ", "x" * 40 + " y", "Ok " * 19]
    sequences = ["".join((a, b, c, d)) for a in symbols for b in symbols for c in symbols for d in symbols]
    for prefix in prefixes:
        for k in range(0, len(sequences), 500):
            text = "\x00".join(prefix + seq + "xy z. " + "w" * 60 for seq in sequences[k:k + 500])
            assert pieces(pattern, text, True) == pieces(pattern, text, False), (prefix, k)


@pytest.mark.parametrize("pattern", CL100K_FAMILY)
def test_runs_of_whitespace_across_a_windows_end_or_an_unsure_byte(pattern, isa):
    # A run of whitespace is split by its last newline, which may lie past the window or past a byte
    # the window cannot read (U+00A0 is whitespace too; \x1f is a control byte): runs of every shape
    # at every place around the first window's end (a text's first piece starts it).
    runs = [" \n  \n ", "\n\n", "\n \n", "  \n", "\t\n\t", "\r\n \r\n", " \n \xa0\n ", "\n  \xa0 x", "\n  \xa0\n",
            "\n \x1f\n", "  \t  ", ".\n \n", "a \n"]
    for run in runs:
        for k in range(40, 70):
            for text in ("a" * k + run + "b" * 80, "a b" * (k // 3) + "c" * (k % 3) + run + ". " * 40):
                assert pieces(pattern, text, True) == pieces(pattern, text, False), (run, k)


def test_tiktokens_own_spellings_scan():
    # `Tokenizer.from_tiktoken` callers pass tiktoken's `pat_str` as tiktoken ships it (cl100k_base's
    # possessive `\p{N}{1,3}+`, r50k_base's `\s++$`): the scanner takes those too, else PCRE2 split
    # every piece.
    openai_public = pytest.importorskip("tiktoken_ext.openai_public")
    source = inspect.getsource(openai_public)
    assert openai_public.r50k_pat_str == pretokenize.TIKTOKEN_R50K_PATTERN
    assert f'r"""{pretokenize.TIKTOKEN_CL100K_PATTERN}"""' in source
    for pattern in (pretokenize.TIKTOKEN_CL100K_PATTERN, pretokenize.TIKTOKEN_R50K_PATTERN):
        assert _pcre2_compile(pattern).scans
    text = "I'm sure they'LL say 'twas he's—DON'T, it'ſ 'x'"
    expected = ["I", "'m", " sure", " they", "'LL", " say", " '", "twas", " he", "'s", "—DON", "'T", ",", " it",
                "'ſ", " '", "x", "'"]
    assert pieces(pretokenize.TIKTOKEN_CL100K_PATTERN, text, True) == expected
    assert pieces(pretokenize.TIKTOKEN_CL100K_PATTERN, text, False) == expected

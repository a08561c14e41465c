"""A tokenizer.json's regexes split as Hugging Face (Oniguruma) reads them, a `.tiktoken`'s pattern as
tiktoken reads it, and a tokenizer.json we write reads in Hugging Face as our pattern does in `regex`
(bpe_ops/regex_dialect.py). Hugging Face `tokenizers` is the oracle throughout."""
import json

import pytest
import regex
import tiktoken
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from tokenizers import Regex
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import pre_tokenizers

from bpe_ops import Tokenizer, hf_components, train_bpe
from bpe_ops.pretokenize import GPT2_PATTERN, GPT4_PATTERN, LLAMA3_PATTERN, O200K_PATTERN
from bpe_ops.regex_dialect import from_oniguruma, reads_differently, to_oniguruma

pytestmark = [pytest.mark.oracle, pytest.mark.slow]

# tiktoken's cl100k_base pattern as tiktoken ships it, which transformers' TikTokenConverter copies into
# tokenizer.json unchanged: `\p{N}{1,3}+` is possessive in tiktoken and a repetition in Oniguruma.
TIKTOKEN_CL100K = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                   r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")


def hf_pieces(pattern: str, text: str) -> list[str]:
    split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    return [piece for piece, _ in split.pre_tokenize_str(text)]


def hf_pieces_or_none(pattern: str, text: str) -> list[str] | None:
    """HF's pieces, or None where Oniguruma gives up on the text (its backtracking limit, "retry-limit-
    in-match over", which HF turns into a panic): then there is no answer to compare with."""
    try:
        return hf_pieces(pattern, text)
    except BaseException as exc:    # pyo3's PanicException derives from BaseException
        if type(exc).__name__ != "PanicException" or "retry-limit" not in str(exc):
            raise
        return None


def hf_compiles(pattern: str) -> bool:
    try:
        Regex(pattern)
    except Exception:               # tokenizers raises a bare Exception for an Oniguruma error
        return False
    return True


def never_empty(pattern: str, text: str) -> bool:
    """Whether no match of `pattern` in `text` is empty. After an empty match Oniguruma resumes one
    character on and `regex` at the same place: a split difference of its own, not of the dialect."""
    return all(m.end() > m.start() for m in regex.finditer(pattern, text))


def regex_pieces(pattern: str, text: str) -> list[str]:
    """`text` split as HF's isolated Split does, by the `regex` reading of `pattern` (hf_components'
    split, the specification of HF's, on an already-translated pattern)."""
    step = hf_components._regex_split(regex.compile(pattern), "Isolated", False)
    return [piece for piece, _ in step(text, True)]


def test_the_tiktoken_cl100k_spelling_splits_long_numbers_as_hugging_face_does():
    text = "In 1999 there were 12345678 of them, 42 left.\n  "
    assert hf_pieces(TIKTOKEN_CL100K, text) != regex_pieces(TIKTOKEN_CL100K, text)   # the two readings differ
    assert regex_pieces(from_oniguruma(TIKTOKEN_CL100K), text) == hf_pieces(TIKTOKEN_CL100K, text)
    assert "1999" in regex_pieces(from_oniguruma(TIKTOKEN_CL100K), text)
    assert reads_differently(TIKTOKEN_CL100K)


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN, LLAMA3_PATTERN])
def test_the_named_patterns_read_alike_in_both_dialects_and_keep_their_text(pattern):
    assert from_oniguruma(pattern) == pattern and to_oniguruma(pattern) == pattern
    assert not reads_differently(pattern)


# Random patterns over the constructs the two readings share or differ on, and texts over a small
# alphabet that exercises them (letters, digits, spaces, newlines, a non-Latin letter).
ATOMS = ["a", "b", "1", " ", r"\d", r"\s", r"\S", r"\p{L}", r"\p{N}", "[ab]", r"[^\s]", "[a1 ]", ".", r"\n",
         r"\h", "[\\h ]"]
QUANTIFIERS = ["", "", "*", "+", "?", "*?", "+?", "??", "*+", "++", "?+", "{2}", "{1,3}", "{2,}", "{,2}", "{1,3}+",
               "{2}+", "{2,}+", "{0,2}+", "{1,2}?"]


@st.composite
def patterns(draw, depth=0):
    def item():
        kind = draw(st.integers(0, 9))
        if kind == 0 and depth < 2:
            inner = draw(patterns(depth + 1))
            return "(?:" + inner + ")" + draw(st.sampled_from(QUANTIFIERS))
        if kind == 1:
            return draw(st.sampled_from(["^", "$", r"(?!\S)", r"(?=\n)"]))
        return draw(st.sampled_from(ATOMS)) + draw(st.sampled_from(QUANTIFIERS))
    branches = ["".join(item() for _ in range(draw(st.integers(1, 3)))) for _ in range(draw(st.integers(1, 3)))]
    return "|".join(branches)


texts = st.text(alphabet="ab1 2\n\tcé中F", max_size=24)


def rewritten(rewrite, pattern: str) -> str | None:
    """`rewrite(pattern)`, or None where it is refused for a counted repetition of something that can
    match empty (the one refusal these patterns can draw; test_a_counted_repetition_... shows why)."""
    try:
        return rewrite(pattern)
    except ValueError as exc:
        assert "can match empty" in str(exc)
        return None


@settings(max_examples=400, deadline=None)
@given(patterns(), texts)
@example(r"(?:a|\d|1*+){2}+1a*", "212")            # refused: Oniguruma finds no match, `regex` finds "21"
@example(r"(?:a|b){2}+1a*", "ab1ba1")
def test_a_tokenizer_json_regex_splits_as_hugging_face_reads_it(pattern, text):
    ours = rewritten(from_oniguruma, pattern)
    assume(ours is not None and hf_compiles(pattern) and never_empty(ours, text))
    expected = hf_pieces_or_none(pattern, text)
    assume(expected is not None)
    assert regex_pieces(ours, text) == expected


@settings(max_examples=400, deadline=None)
@given(patterns(), texts)
@example(r"(?:a|\d|1*+){2}1", "212")
def test_a_pattern_we_write_reads_in_hugging_face_as_it_does_in_regex(pattern, text):
    pattern = pattern.replace(r"\h", "h")          # `\h` has no meaning of its own in `regex`
    theirs = rewritten(to_oniguruma, pattern)
    assume(theirs is not None and hf_compiles(theirs) and never_empty(pattern, text))
    expected = hf_pieces_or_none(theirs, text)
    assume(expected is not None)
    assert expected == regex_pieces(pattern, text)


def test_a_counted_repetition_of_what_can_match_empty_is_refused_because_the_engines_disagree():
    # Oniguruma ends the loop at the empty round (no match in "212"); `regex` counts it and finds "21".
    pattern = r"(?:a|\d|1*+){2}1"
    assert hf_pieces(pattern, "212") == ["212"] and regex_pieces(pattern, "212") == ["21", "2"]
    for refused in (pattern, r"(?:a?){2}", r"(?:a|){1,3}", r"(?=a){2}", r"(?:(?:ab){0,2}){2}+", r"\b{2}"):
        for rewrite in (from_oniguruma, to_oniguruma):
            with pytest.raises(ValueError, match="can match empty"):
                rewrite(refused)
    # What cannot match empty is kept, counted or not; an uncounted repetition of what can is kept too.
    for kept in (r"(?:a|b){2}", r"(?:a?b){1,3}", r"(?:a|b?)+", r"(?:a?)*", r"\p{N}{1,3}+", r"(?:a{0,2}b){2}"):
        assert from_oniguruma(kept) and to_oniguruma(kept)


def test_the_inline_m_flag_is_dotall_in_oniguruma():
    assert hf_pieces("(?m)a.b", "a\nb axb") == regex_pieces(from_oniguruma("(?m)a.b"), "a\nb axb") == ["a\nb", " ", "axb"]


def test_constructs_without_a_spelling_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="intersection"):
        from_oniguruma("[a-z&&[^aeiou]]")
    with pytest.raises(ValueError, match="unbalanced"):
        from_oniguruma("(ab")


def _hf_file(tmp_path, pattern: str, texts: list[str]):
    """A byte-level BPE tokenizer.json written by Hugging Face itself with Split(pattern), trained on texts."""
    from tokenizers import models, trainers
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    from tokenizers import decoders
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                      show_progress=False))
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    return hf, path


def test_a_converted_cl100k_file_encodes_as_hugging_face_encodes_it(tmp_path):
    texts = ["The years 1999, 2000 and 123456789 passed. It's   fine.\n\n", "x = 31415926 + 27;\n"] * 20
    hf, path = _hf_file(tmp_path, TIKTOKEN_CL100K, texts)
    ours = Tokenizer.from_file(path)
    for text in texts + ["phone 5551234567 and 12", "99999999999999999999"]:
        assert ours.encode(text) == hf.encode(text).ids
    # Saved again, the file still encodes as Hugging Face does, in Hugging Face and in ours.
    ours.save(tmp_path / "again")
    again = HFTokenizer.from_file(str(tmp_path / "again" / "tokenizer.json"))
    for text in texts:
        assert again.encode(text).ids == hf.encode(text).ids == Tokenizer.from_file(tmp_path / "again").encode(text)


def test_a_possessive_pattern_we_train_with_loads_in_hugging_face_unchanged(tmp_path):
    pattern = r" ?\p{L}+| ?\p{N}{1,3}+|\s+(?!\S)|\s+|[^\s\p{L}\p{N}]+"
    texts = ["In 1999 there were 12345678 of them and 42 more  left."] * 30
    ours = train_bpe(texts, vocab_size=300, pattern=pattern)
    ours.save(tmp_path / "tok")
    hf = HFTokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json"))
    for text in texts + ["7777777 and 1234"]:
        assert hf.encode(text).ids == ours.encode(text)
    doc = json.loads((tmp_path / "tok" / "tokenizer.json").read_text())
    assert "(?>" in json.dumps(doc["pre_tokenizer"])           # the possessive interval, spelled for Oniguruma


def test_a_tiktoken_file_keeps_the_tiktoken_reading_of_its_pattern(tmp_path):
    texts = ["In 1999 there were 12345678 of them, 42 left."] * 30
    ours = train_bpe(texts, vocab_size=300, pattern=GPT4_PATTERN)
    ours.save(tmp_path / "tok")
    rank_file = next((tmp_path / "tok").glob("*.tiktoken"))
    loaded = Tokenizer.from_tiktoken(rank_file, TIKTOKEN_CL100K)
    ranks = {token: rank for rank, token in sorted(ours.vocab.items()) if rank < 256 + len(ours.merges)}
    enc = tiktoken.Encoding("t", pat_str=TIKTOKEN_CL100K, mergeable_ranks=ranks, special_tokens={})
    for text in texts + ["12345678"]:
        assert loaded.encode(text) == enc.encode_ordinary(text)


def test_a_file_with_a_refused_regex_fails_to_load_with_one_line_naming_it(tmp_path):
    import subprocess
    import sys
    _hf_file(tmp_path, r"(?:a|\d|1*+){2}1| ?\p{L}+|\s+", ["ab 12 ba 211"] * 10)
    run = subprocess.run([sys.executable, "-m", "pipelines.cli", "encode", "--tokenizer", str(tmp_path / "tokenizer.json"),
                          "a 212"], capture_output=True, text=True)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "can match empty" in run.stderr


def test_loading_such_a_file_says_once_that_it_encodes_as_hugging_face_reads_it(tmp_path):
    import subprocess
    import sys
    texts = ["The years 1999 and 2000."] * 10
    _hf_file(tmp_path, TIKTOKEN_CL100K, texts)
    run = subprocess.run([sys.executable, "-m", "pipelines.cli", "encode", "--tokenizer", str(tmp_path / "tokenizer.json"),
                          "In 1999"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if line.startswith("tokenbeam: warning:")]
    assert len(warnings) == 1 and "Hugging Face" in warnings[0] and r"\\p{N}{1,3}+" in warnings[0]
    _hf_file(tmp_path, GPT4_PATTERN, texts)                     # a pattern both read alike: no warning
    run = subprocess.run([sys.executable, "-m", "pipelines.cli", "encode", "--tokenizer", str(tmp_path / "tokenizer.json"),
                          "In 1999"], capture_output=True, text=True)
    assert run.returncode == 0 and "warning" not in run.stderr


def test_the_worked_examples_in_the_module_hold():
    import doctest

    import bpe_ops.regex_dialect
    failed, attempted = doctest.testmod(bpe_ops.regex_dialect)
    assert attempted >= 6 and failed == 0

"""SuperBPE training (Liu et al., 2025): phase one inside pre-tokens up to a transition vocabulary size,
phase two over superword units whose merges may bridge words.

Known answers on tiny corpora; the training ends exactly where the encoder does on every unit; the
compiled loop equals the Python one in phase two; the files load in Hugging Face `tokenizers` and
tiktoken and encode held-out documents of en, code and multi identically; the pipeline equals the
library, reuses its counts for both phases, and refuses what it cannot do in one line.
"""
import base64
import json
import subprocess
import sys

import pytest
import regex

from bpe_ops import Tokenizer, pretokenize, saving, train_bpe, trainer
from bpe_ops.implementation import Implementation
from pipelines import train
from pipelines.core.errors import UserError
from schemas.reports import SUPERWORD_KEYS
from tests.conftest import ROOT, read_jsonl_texts
from tests.bpe_ops.test_trainer import IMPLEMENTATIONS, implementation

pytestmark = pytest.mark.slow

TIE_BREAKS = ["largest", "smallest", "hf"]


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request) -> Implementation:
    return implementation(request.param)


def test_phase_two_makes_the_superword_token(impl):
    """`in the end` x4 and `in the box` x3: phase one makes the 10 merges that build `in`, ` the`,
    ` end`, ` box` (then plain BPE has no pair left); phase two sees each text as one unit
    `in| the| end` / `in| the| box`, whose most frequent pair (7) is (`in`, ` the`), then (4)
    (`in the`, ` end`)."""
    texts = ["in the end"] * 4 + ["in the box"] * 3
    plain = train_bpe(texts, 268, implementation=impl)
    assert len(plain.merges) == 10 and plain.training.stop_reason == "no_pairs"
    tok = train_bpe(texts, 268, superword_transition=266, implementation=impl)
    assert tok.merges[:10] == plain.merges
    assert tok.merges[10:] == [(b"in", b" the"), (b"in the", b" end")]
    assert tok.training.phase_one_merges == 10 and tok.training.merge_counts[10:] == [7, 4]
    assert tok.pattern == pretokenize.superword_pattern("gpt4")
    assert [tok.decode([i]) for i in tok.encode("in the box")] == ["in the", " box"]
    # At most 4 pre-tokens a unit: `in the end in` + ` the box` (there is no ` in` token).
    assert [tok.decode([i]) for i in tok.encode("in the end in the box")] == ["in the end", " ", "in", " the", " box"]


def test_units_are_runs_of_pre_tokens_joined_at_single_spaces(corpora):
    """Known answer, then on real text: every unit is a union of whole pre-tokens, joined only where
    one space stands between two non-space characters, at most W of them; PCRE2 and `regex` agree."""
    units = regex.findall(pretokenize.superword_pattern("gpt4", 3), "Hello, world. The end of it.\n the  cat 12345")
    assert units == ["Hello", ", world", ". The end", " of it", ".\n", " the", " ", " cat", " ", "123", "45"]
    texts = (read_jsonl_texts(corpora / "en", limit=150) + read_jsonl_texts(corpora / "code", limit=60)
             + read_jsonl_texts(corpora / "multi", limit=150))
    for base in ("gpt4", "o200k", "gpt2"):
        pattern = pretokenize.superword_pattern(base, 4)
        fast, slow, pieces = pretokenize.compile_pattern(pattern), regex.compile(pattern), regex.compile(
            pretokenize.resolve_pattern(base))
        assert isinstance(fast, pretokenize.Pcre2Pattern), base
        for text in texts:
            found = slow.findall(text)
            assert fast.findall(text) == found
            pre = iter(pieces.findall(text))
            for unit in found:
                parts = [next(pre)]
                while len("".join(parts)) < len(unit):
                    parts.append(next(pre))
                assert "".join(parts) == unit and len(parts) <= 4
                assert all(p[0] == " " and p[1:2].strip() and prev[-1:].strip() for prev, p in zip(parts, parts[1:]))


def test_superword_pattern_refuses_what_cannot_work():
    with pytest.raises(ValueError, match="classic"):
        pretokenize.superword_pattern("classic")
    with pytest.raises(ValueError, match="at least 2"):
        pretokenize.superword_pattern("gpt4", 1)


def final_unit_tokens(tok, units):
    """What the encoder makes of the training units: their weighted number of tokens."""
    return sum(n * len(tok.encode(unit.decode("utf-8"))) for unit, n in units.items())


def test_training_ends_where_the_encoder_does(impl, sample):
    """The loop's state after the last merge (initial tokens minus the tokens each merge saved) is the
    encoder's segmentation of every training unit, so training optimised what the encoder will do."""
    texts = read_jsonl_texts(sample)
    tok = train_bpe(texts, 3000, superword_transition=2000, implementation=impl)
    result = tok.training
    units = pretokenize.count_pretokens(texts, tok.pattern)
    assert result.superword_initial_tokens - sum(result.tokens_saved[result.phase_one_merges:]) == \
        final_unit_tokens(tok, units)
    assert result.stop_reason == "vocab_size" and tok.vocab_size == 3000


def test_phase_two_starts_from_the_encoders_replay_over_whole_units(impl):
    """Where phase one's merges act across a joint of two pre-tokens (`x y` is one pre-token of this
    pattern, so (`x`, ` `) is a phase-one merge, yet `ax y` splits into `ax`, ` y`), phase two starts
    from the replay over the whole unit (`a`, `x y`), as the encoder will, not from the pre-tokens."""
    pattern = r"x y|[a-z]+| ?[a-z]+|\s"
    texts = ["x y"] * 9 + ["ax y"] * 5 + ["ax yb"] * 2
    tok = train_bpe(texts, 272, pattern=pattern, superword_transition=262, implementation=impl)
    phase_one = Tokenizer(tok.merges[:tok.training.phase_one_merges], pattern=pattern)
    units = pretokenize.count_pretokens(texts, tok.pattern)
    assert units[b"ax y"] == 5
    apart = [phase_one.decode([i]) for i in phase_one.encode("ax y")]
    whole = [phase_one.decode([i]) for i in Tokenizer(phase_one.merges, pattern=r"[\s\S]+").encode("ax y")]
    assert apart == ["ax", " y"] and whole == ["a", "x y"]
    words, weights, _ = trainer.superword_start(units, phase_one.merges, impl)
    starts = {"".join(phase_one.decode([ord(c)]) for c in w): [phase_one.decode([ord(c)]) for c in w] for w in words}
    assert starts["ax y"] == ["a", "x y"]
    result = tok.training
    assert result.superword_initial_tokens - sum(result.tokens_saved[result.phase_one_merges:]) == \
        final_unit_tokens(tok, units)


@pytest.mark.parametrize("tie_break", TIE_BREAKS)
def test_compiled_phase_two_equals_python(sample, tie_break):
    texts = read_jsonl_texts(sample)
    runs = []
    for name in IMPLEMENTATIONS:
        calls = []
        tok = train_bpe(texts, 4096, superword_transition=2500, tie_break=tie_break, implementation=implementation(name),
                        progress=lambda done, pair, count: calls.append((done, pair, count)))
        runs.append((tok.merges, tok.training, calls))
    assert runs[0] == runs[1]
    assert runs[0][2][-1][0] == len(runs[0][0])        # progress counts both phases


def test_count_tables_in_and_bad_arguments(impl, sample):
    texts = read_jsonl_texts(sample)
    counts = pretokenize.count_pretokens(texts)
    units = pretokenize.count_pretokens(texts, pretokenize.superword_pattern("gpt4", 3))
    from_texts = train_bpe(texts, 1500, superword_transition=1000, superword_max_words=3, implementation=impl)
    from_counts = train_bpe(counts, 1500, superword_transition=1000, superword_max_words=3, superword_counts=units,
                            implementation=impl)
    assert from_counts.merges == from_texts.merges and from_counts.pattern == from_texts.pattern
    with pytest.raises(ValueError, match="superword_counts"):
        train_bpe(counts, 1500, superword_transition=1000)
    for transition in (255, 1500, 1600):
        with pytest.raises(ValueError, match="superword_transition"):
            train_bpe(counts, 1500, superword_transition=transition, superword_counts=units)
    with pytest.raises(ValueError, match="classic"):
        train_bpe(["a b"], 300, pattern="classic", superword_transition=280)


@pytest.fixture(scope="module")
def oracle_tokenizer(corpora, tmp_path_factory):
    """A SuperBPE tokenizer trained on the first files of en, code and multi, saved."""
    texts = []
    for folder, shard in (("en", "en-000-of-012"), ("code", "code-000-of-006"), ("multi", "multi-000-of-004")):
        with open(corpora / folder / f"{shard}.jsonl", encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f]
    tok = train_bpe(texts, 8192, superword_transition=6000)
    assert tok.training.stop_reason == "vocab_size"
    assert any(b" " in a + b and not (a + b).isspace() for a, b in tok.merges[tok.training.phase_one_merges:])
    directory = tmp_path_factory.mktemp("superbpe")
    tok.save(directory)
    return directory


@pytest.mark.parametrize("held_out", ["en/en-011-of-012", "code/code-005-of-006", "multi/multi-003-of-004"])
def test_files_encode_identically_in_hf_and_tiktoken(oracle_tokenizer, corpora, held_out):
    """Every document of a held-out file: our encoder (from tokenizer.json), Hugging Face `tokenizers`
    (tokenizer.json) and tiktoken (tokenizer.tiktoken with the recorded pattern) give the same ids."""
    tokenizers = pytest.importorskip("tokenizers")
    tiktoken = pytest.importorskip("tiktoken")
    with open(corpora / f"{held_out}.jsonl", encoding="utf-8") as f:
        documents = [json.loads(line)["text"] for line in f]
    ours = Tokenizer.from_file(oracle_tokenizer / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(oracle_tokenizer / "tokenizer.json"))
    with open(oracle_tokenizer / "tokenizer.tiktoken", encoding="ascii") as f:
        ranks = {base64.b64decode(token): int(rank) for token, rank in map(str.split, f)}
    tik = tiktoken.Encoding("superbpe", pat_str=ours.pattern, mergeable_ranks=ranks, special_tokens={})
    mine = ours.encode_batch(documents)
    assert [e.ids for e in hf.encode_batch(documents, add_special_tokens=False)] == mine
    assert tik.encode_ordinary_batch(documents) == mine
    assert [ours.decode(ids) for ids in mine] == documents


def run_train(*argv):
    return train.run([str(a) for a in argv])


def test_pipeline_equals_train_bpe_and_reuses_both_phases_counts(sample, tmp_path):
    first = tmp_path / "first"
    report = run_train("--input", sample / "*.jsonl", "--output", first, "--vocab-size", 2048,
                       "--superword-transition", 1600)
    expected = train_bpe(read_jsonl_texts(sample), 2048, superword_transition=1600)
    assert report["tokenizer_sha256"] == expected.sha256
    section = report["superword"]
    assert tuple(section) == SUPERWORD_KEYS and section["transition"] == 1600 and section["max_words"] == 4
    assert report["tiktoken"]["identical"] is True
    assert section["phase_one_merges"] == expected.training.phase_one_merges
    assert section["units"] == sum(pretokenize.count_pretokens(read_jsonl_texts(sample), expected.pattern).values())
    assert section["unique_units_after_pruning"] == len(train.load_counts(str(first / "counts" / "superword")))
    assert [p.get("phase") for p in report["compression_curve"]][-1] == 2
    again = run_train("--counts", first, "--output", tmp_path / "again", "--vocab-size", 2048,
                      "--superword-transition", 1600)
    assert again["tokenizer_sha256"] == expected.sha256
    other = run_train("--counts", first / "counts", "--output", tmp_path / "other", "--vocab-size", 2500,
                      "--superword-transition", 1700)
    assert other["tokenizer_sha256"] == train_bpe(read_jsonl_texts(sample), 2500, superword_transition=1700).sha256
    plain = run_train("--counts", first, "--output", tmp_path / "plain", "--vocab-size", 2048)
    assert plain["tokenizer_sha256"] == train_bpe(read_jsonl_texts(sample), 2048).sha256 and plain["superword"] is None
    with pytest.raises(UserError, match="--superword-max-words 3"):
        run_train("--counts", first, "--output", tmp_path / "w3", "--vocab-size", 2048,
                  "--superword-transition", 1600, "--superword-max-words", 3)
    plain_run = tmp_path / "plain-run"
    run_train("--input", sample / "*.jsonl", "--output", plain_run, "--vocab-size", 300)
    assert not (plain_run / "counts" / "superword").exists()
    with pytest.raises(UserError, match="without --superword-transition"):
        run_train("--counts", plain_run, "--output", tmp_path / "x", "--vocab-size", 2048,
                  "--superword-transition", 1600)


@pytest.mark.parametrize("args, words", [
    (["--vocab-size", 300, "--superword-transition", 300], "below --vocab-size"),
    (["--vocab-size", 300, "--superword-transition", 200], "at least 256"),
    (["--vocab-size", 300, "--superword-transition", 280, "--pattern", "classic"], "classic"),
    (["--vocab-size", 300, "--superword-transition", 280, "--superword-max-words", 1], "at least 2"),
    (["--vocab-size", 300, "--superword-max-words", 3], "only applies"),
    (["--vocab-size", 300, "--superword-transition", 280, "--max-token-length", 8], "--max-token-length"),
    (["--vocab-size", 300, "--superword-transition", 280, "--pattern", r"\S+|\s+", "--split-digits"], "named"),
])
def test_bad_superword_flags_are_one_line_and_exit_2(tmp_path, args, words):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"text": "hello world"}) + "\n")
    result = subprocess.run([sys.executable, "-m", "pipelines.train", "--input", str(good), "--output",
                             str(tmp_path / "out"), *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    lines = [l for l in result.stderr.splitlines() if l.startswith("tokenbeam: error:")]
    assert result.returncode == 2 and len(lines) == 1 and words in lines[0], result.stderr


def test_text_rules_apply_inside_the_units(sample):
    """Digit rules of a named pattern and normalization carry into phase two: no learned token holds
    two digits with split_digits, and the files still encode identically in HF and tiktoken; what
    cannot be one split regex (a digit rule on a custom regex) and max_token_length are refused."""
    tokenizers = pytest.importorskip("tokenizers")
    tiktoken = pytest.importorskip("tiktoken")
    texts = read_jsonl_texts(sample) + ["In 2024 there were 12345 cases, in 1999 only 678."] * 20
    tok = train_bpe(texts, 3000, superword_transition=2000, split_digits=True, lowercase=True)
    assert not any(sum(c.isdigit() for c in (a + b).decode("utf-8", "replace")) > 1 for a, b in tok.merges)
    assert any(b" " in (a + b).strip() for a, b in tok.merges[tok.training.phase_one_merges:])
    hf = tokenizers.Tokenizer.from_str(saving.json_text(tok))
    tik = tiktoken.Encoding("s", pat_str=tok.pattern, mergeable_ranks={t: i for i, t in tok.vocab.items()},
                            special_tokens={})
    probe = texts[:40] + ["THE YEAR 2024 and 1999"]
    assert [e.ids for e in hf.encode_batch(probe, add_special_tokens=False)] == tok.encode_batch(probe)
    assert tik.encode_ordinary_batch([t.lower() for t in probe]) == tok.encode_batch(probe)
    for refused in ({"max_token_length": 8}, {"pattern": r"\S+|\s+", "split_digits": True}):
        with pytest.raises(ValueError, match="superword_transition takes neither"):
            train_bpe(texts[:5], 600, superword_transition=500, **refused)

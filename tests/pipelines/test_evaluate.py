"""`tokenbeam evaluate`: known answers, equality with tokenize's stats.json, a merge
list cut to several sizes, the shard accounting and one-line refusals."""
import gzip
import json
import random
import subprocess
import sys

import pytest

from bpe_ops import Tokenizer, train_bpe
from bpe_ops.evaluation import evaluate_texts, iter_words, truncated, word_pieces
from bpe_ops.stats import count_words
from pipelines import evaluate, tokenize
from pipelines.core import folders
from pipelines.steps import evaluate_report, evaluate_steps
from pipelines.core.errors import IncompleteRun
from schemas.evaluate import validate_evaluate
from tests.conftest import ROOT
from schemas.accounts import account_of

pytestmark = pytest.mark.slow

# Two merges under GPT-2's split: 'ab' (256), 'abc' (257).
#   x: "ab abc"  -> 'ab' | ' ' 'abc'        3 tokens, 6 bytes, 2 words, 1 raw byte (' ')
#   y: "abc abd" -> 'abc' | ' ' 'ab' 'd'    4 tokens, 7 bytes, 2 words, 2 raw bytes (' ', 'd')
# Word types (pieces of ' ' + word, the space token not counted): ab 1, abc 1 (x2), abd 2 ('ab' 'd').
RECORDS = [{"id": "r1", "text": "ab abc", "g": "x"}, {"id": "r2", "text": "abc abd", "g": "y"}]
WHOLE = {"records": 2, "tokens": 7, "bytes": 13, "chars": 13, "words": 4, "bytes_per_token": 13 / 7,
         "tokens_per_word": 7 / 4, "raw_byte_tokens": 3, "raw_byte_share": 3 / 7, "used_ids": 4,
         "vocab_size": 258, "vocab_utilisation": 4 / 258, "word_types": 3, "word_occurrences": 4,
         "pieces_per_word_type": 4 / 3, "word_types_kept_whole": 2 / 3, "pieces_per_word": 5 / 4,
         "words_kept_whole": 3 / 4}
GROUP_X = {"tokens": 3, "bytes_per_token": 2.0, "tokens_per_word": 1.5, "raw_byte_share": 1 / 3,
           "word_types": 2, "pieces_per_word_type": 1.0, "words_kept_whole": 1.0}
GROUP_Y = {"tokens": 4, "bytes_per_token": 1.75, "tokens_per_word": 2.0, "raw_byte_share": 0.5,
           "word_types": 2, "pieces_per_word_type": 1.5, "word_types_kept_whole": 0.5, "words_kept_whole": 0.5}
# The first merge only: x 'ab' | ' ' 'ab' 'c' (4), y 'ab' 'c' | ' ' 'ab' 'd' (5); ab 1, abc 2, abd 2.
CUT_TO_ONE = {"tokens": 9, "used_ids": 4, "vocab_size": 257, "pieces_per_word_type": 5 / 3,
              "word_types_kept_whole": 1 / 3, "words_kept_whole": 1 / 4}


def small_tokenizer():
    return Tokenizer([(b"a", b"b"), (b"ab", b"c")], pattern="gpt2")


def write_shards(folder, records, shards=2):
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(shards):
        with open(folder / f"s{k}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records[k::shards])
    return str(folder / "*.jsonl")


def row(report, tokenizer, group=None):
    (found,) = [r for r in report["rows"] if r["tokenizer"] == tokenizer and r["group"] == group]
    return found


def assert_figures(actual: dict, expected: dict):
    for key, value in expected.items():
        assert actual[key] == pytest.approx(value), key


def test_known_answers_from_the_pipeline_and_the_specification(tmp_path):
    tok_dir = tmp_path / "small"
    small_tokenizer().save(tok_dir)
    inputs = write_shards(tmp_path / "in", RECORDS)
    report = evaluate.run(["--tokenizer", str(tok_dir), "--name", "small", "--merges", "1",
                           "--tokenizer", str(tok_dir / "tokenizer.tiktoken"), "--pattern", "gpt2",
                           "--input", inputs, "--output", str(tmp_path / "out"), "--group-field", "g"])
    validate_evaluate(report)
    assert [t["name"] for t in report["tokenizers"]] == ["small@1", "small", "tokenizer"]
    for group in (None, "x", "y"):       # the rank file with its --pattern is the same tokenizer
        assert {**row(report, "tokenizer", group), "tokenizer": "small"} == row(report, "small", group)
    assert_figures(row(report, "small"), WHOLE)
    assert_figures(row(report, "small", "x"), GROUP_X)
    assert_figures(row(report, "small", "y"), GROUP_Y)
    assert_figures(row(report, "small@1"), CUT_TO_ONE)
    assert (tmp_path / "out" / "_SUCCESS").exists() and (tmp_path / "out" / "evaluate.md").exists()
    # The in-memory specification gives the same rows.
    tok = small_tokenizer()
    spec = evaluate_texts({"small": tok, "small@1": truncated(tok, 1)}, [r["text"] for r in RECORDS],
                          [r["g"] for r in RECORDS])
    assert len(spec) == 6
    for (name, group), figures in spec.items():
        assert {k: row(report, name, group)[k] for k in figures} == figures


def test_the_same_rows_on_two_worker_processes(tmp_path, sample):
    """Worker processes (tokenizers loaded and cut in each, tallies pickled between them) give the
    rows of the in-process run."""
    tok_dir = tmp_path / "small"
    small_tokenizer().save(tok_dir)
    records = [dict(json.loads(line), g="ab"[i % 2]) for i, line in
               enumerate((sample / "sample-000-of-002.jsonl").read_text().splitlines())]
    args = ["--tokenizer", str(tok_dir), "--merges", "1", "--input", write_shards(tmp_path / "in", records, 4),
            "--group-field", "g"]
    one = evaluate.run(args + ["--output", str(tmp_path / "one")])
    two = evaluate.run(args + ["--output", str(tmp_path / "two"), "--direct_running_mode", "multi_processing",
                               "--direct_num_workers", "2"])
    assert one["rows"] == two["rows"] and len(one["rows"]) == 6 and one["records"] == len(records)


def test_without_matplotlib_the_report_is_written_and_the_picture_skipped(tmp_path, monkeypatch, capsys):
    small_tokenizer().save(tmp_path / "small")
    monkeypatch.setattr(evaluate_report, "plot_available", lambda: False)
    report = evaluate.run(["--tokenizer", str(tmp_path / "small"), "--input", write_shards(tmp_path / "in", RECORDS),
                           "--output", str(tmp_path / "out")])
    assert row(report, "small")["tokens"] == 7
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [folders.MARKER, "_SUCCESS", "evaluate.json",
                                                                    "evaluate.md"]
    assert "evaluate.png skipped (install the plot extra" in capsys.readouterr().err


def test_figures_equal_tokenize_stats_json_and_cut_sizes_fall(tmp_path, corpora, gpt2_files):
    """On tiny/ with GPT-2: every figure evaluate shares with stats.json (whole and per language) is
    stats.json's; GPT-2's merge list cut to 1..2000 merges gives pieces per word that fall with size."""
    tok_dir = tmp_path / "gpt2"
    Tokenizer.from_gpt2_files(*gpt2_files).save(tok_dir)
    inputs = str(corpora / "tiny" / "*.jsonl")
    stats = tokenize.run(["--tokenizer", str(tok_dir), "--input", inputs, "--output", str(tmp_path / "tokens"),
                          "--group-field", "lang"])
    report = evaluate.run(["--tokenizer", str(tok_dir), "--merges", "1,200,500,1000,2000", "--input", inputs,
                           "--output", str(tmp_path / "eval"), "--group-field", "lang"])
    sides = [(None, stats)] + [(g, json.loads((tmp_path / "tokens" / e["file"]).read_text()))
                               for g, e in stats["groups"].items()]
    assert len(sides) > 5
    for group, s in sides:
        r = row(report, "gpt2", group)
        assert (r["records"], r["tokens"], r["bytes"], r["chars"], r["words"]) == (
            s["records"], s["tokens"], s["bytes"], s["chars"], s["words"]), group
        assert r["bytes_per_token"] == s["bytes_per_token"]["overall"]
        assert r["tokens_per_word"] == s["tokens_per_word"]
        assert (r["raw_byte_tokens"], r["raw_byte_share"]) == (s["raw_byte_tokens"]["count"], s["raw_byte_tokens"]["share"])
        assert (r["used_ids"], r["vocab_utilisation"]) == (s["vocabulary"]["used_ids"], s["vocabulary"]["utilisation"])
    sizes = [row(report, name) for name in ("gpt2@1", "gpt2@200", "gpt2@500", "gpt2@1000", "gpt2@2000", "gpt2")]
    for small, large in zip(sizes, sizes[1:]):
        assert large["pieces_per_word_type"] < small["pieces_per_word_type"]
        assert large["pieces_per_word"] < small["pieces_per_word"]
        assert large["word_types_kept_whole"] > small["word_types_kept_whole"]
        assert large["bytes_per_token"] > small["bytes_per_token"]
    assert [r["vocab_size"] for r in sizes] == [258, 457, 757, 1257, 2257, 50257]
    assert "| 2000 | 2,257 |" in (tmp_path / "eval" / "evaluate.md").read_text()


def test_a_cut_merge_list_is_the_tokenizer_of_that_size(gpt2_files, corpora):
    """GPT-2 cut to all its merges splits text into the same pieces as GPT-2 (ids renumbered: bytes
    0..255); cut to k merges it knows the tokens of the first k merges only."""
    gpt2 = Tokenizer.from_gpt2_files(*gpt2_files)
    whole = truncated(gpt2, len(gpt2.merges))
    text = (corpora / "tiny" / "tiny-000-of-002.jsonl").read_text(encoding="utf-8")[:20_000]
    assert [gpt2.decode_bytes([i]) for i in gpt2.encode(text)] == [whole.decode_bytes([i]) for i in whole.encode(text)]
    small = truncated(gpt2, 300)
    assert small.vocab_size == 256 + 300 + 1 and small.special_tokens == {"<|endoftext|>": 556}
    assert set(small.vocab.values()) - {b"<|endoftext|>"} <= set(gpt2.vocab.values())
    with pytest.raises(ValueError, match="merge list"):
        truncated(object(), 3)
    with pytest.raises(ValueError, match="50,000"):
        truncated(gpt2, 50_001)


@pytest.mark.parametrize("pattern", ["gpt4", "classic"])
def test_a_cut_merge_list_is_a_shorter_training(sample, pattern):
    """The merge loop is greedy, so the first k merges of a training are the training of k merges:
    the cut tokenizer is the one train_bpe makes at that size (same ids, same special-token id)."""
    texts = [json.loads(line)["text"] for line in (sample / "sample-000-of-002.jsonl").read_text().splitlines()]
    big = train_bpe(texts, vocab_size=700, pattern=pattern, special_tokens=["<|e|>"])
    small = train_bpe(texts, vocab_size=550, pattern=pattern, special_tokens=["<|e|>"])
    cut = truncated(big, len(small.merges))
    assert len(small.merges) == len(big.merges) - 150
    assert (cut.merges, cut.vocab, cut.special_tokens) == (small.merges, small.vocab, small.special_tokens)
    assert [cut.encode(t) for t in texts[:40]] == [small.encode(t) for t in texts[:40]]
    if pattern != "classic":             # (a classic tokenizer has no file, so no sha256)
        assert cut.sha256 == small.sha256


def test_words_and_their_pieces():
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choice("ab \n\u3000é") for _ in range(rng.randrange(0, 40)))
        for chunk in (1, 2, 3, 7, 100):
            assert list(iter_words(text, chunk)) == text.split()
            assert len(list(iter_words(text, chunk))) == count_words(text, chunk)
    # The space is its own token here, glued to the word there: one piece either way.
    tok = small_tokenizer()
    assert word_pieces(tok, ["abc", "abd", "ab", "x"]) == [1, 2, 1, 1]


def test_unreadable_shard_is_exit_3_unless_allowed(tmp_path, sample):
    tok_dir = tmp_path / "small"
    small_tokenizer().save(tok_dir)
    inputs = write_shards(tmp_path / "in", RECORDS + [{"id": "r3", "text": 5}])
    (tmp_path / "in" / "bad.jsonl.gz").write_bytes(gzip.compress(b'{"text": "ab"}\n' * 50)[:30])
    args = ["--tokenizer", str(tok_dir), "--input", inputs, "--input", str(tmp_path / "in" / "*.gz"),
            "--output", str(tmp_path / "out")]
    result = run_cli(*args)
    assert result.returncode == 3, result.stderr
    assert "could not be read" in error_line(result) and not (tmp_path / "out" / "_SUCCESS").exists()
    report = json.loads((tmp_path / "out" / "evaluate.json").read_text())
    (error,) = report["shard_errors"]        # the rows before the cut are read and counted
    account = account_of(report)
    assert report["records"] == account.records_written == 2 + error["rows_read"] and account.records_rejected == 1
    assert account.records_read == report["records"] + 1 and report["account"]["shards"] == {"read": 3, "failed": 1}
    assert len((tmp_path / "out" / "rejected" / "s0.jsonl").read_text().splitlines()) == 1
    result = run_cli(*args, "--allow-shard-errors")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "_SUCCESS").exists()
    # A rerun without the bad inputs leaves no rejected file of the last run behind.
    result = run_cli("--tokenizer", tok_dir, "--input", str(tmp_path / "in" / "s1.jsonl"), "--output", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "out" / "rejected").exists()


def test_a_group_field_of_ids_is_refused_in_one_line(tmp_path, monkeypatch):
    small_tokenizer().save(tmp_path / "small")
    monkeypatch.setattr(evaluate_steps, "MAX_GROUPS", 1)
    with pytest.raises(IncompleteRun, match="--group-field id: more than 1 values in s0.jsonl; a group field names"):
        evaluate.run(["--tokenizer", str(tmp_path / "small"), "--input", write_shards(tmp_path / "in", RECORDS * 2, 1),
                      "--output", str(tmp_path / "out"), "--group-field", "id"])
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_group_values_stay_in_their_markdown_cell():
    lines = evaluate_report.markdown_table((("records", "records", "int"),), [{"key": "a|b\nc", "records": 3}], ("group", "key"))
    assert lines[-1] == "| a\\|b c | 3 |"


def test_another_commands_output_folder_is_refused(tmp_path):
    small_tokenizer().save(tmp_path / "small")
    inputs = write_shards(tmp_path / "in", RECORDS)
    tokenize.run(["--tokenizer", str(tmp_path / "small"), "--input", inputs, "--output", str(tmp_path / "tokens")])
    manifest = (tmp_path / "tokens" / "_SUCCESS").read_bytes()
    result = run_cli("--tokenizer", tmp_path / "small", "--input", inputs, "--output", tmp_path / "tokens")
    assert result.returncode == 2 and "holds the output of `tokenbeam tokenize`" in error_line(result)
    assert (tmp_path / "tokens" / "_SUCCESS").read_bytes() == manifest      # tokenize's, untouched


def run_cli(*argv):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "evaluate", *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def error_line(result) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("tokenbeam: error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("argv, message", [
    (["--merges", "3", "--tokenizer", "{tok}"], "applies to the --tokenizer before it"),
    (["--tokenizer", "{tok}", "--merges", "3,x"], "comma-separated list"),
    (["--tokenizer", "{tok}", "--merges", "1", "--vocab-sizes", "300"], "give one"),
    (["--tokenizer", "{tok}", "--name", "a", "--name", "b"], "given twice"),
    (["--tokenizer", "{tok}", "--merges", "3"], "3 merges asked for, the tokenizer has 2"),
    (["--tokenizer", "{tok}", "--vocab-sizes", "100"], "below the 256 base symbols"),
    (["--tokenizer", "{tok}", "--tokenizer", "{tok}"], "two tokenizers are named"),
    (["--tokenizer", "{tok}", "--pattern", "gpt2"], "tiktoken rank files only"),
    (["--tokenizer", "{tok}", "--bogus"], "unknown option --bogus"),
    (["--output", "{out}"], "no tokenizer"),
])
def test_bad_inputs_are_one_line_exit_2(tmp_path, argv, message):
    small_tokenizer().save(tmp_path / "small")
    inputs = write_shards(tmp_path / "in", RECORDS)
    fill = {"tok": str(tmp_path / "small"), "out": str(tmp_path / "out")}
    argv = [a.format(**fill) for a in argv]
    if "--output" not in argv:
        argv += ["--output", fill["out"]]
    result = run_cli(*argv, "--input", inputs)
    assert result.returncode == 2, result.stderr
    assert message in error_line(result)


def test_the_worked_examples_in_the_docstrings_hold():
    import doctest

    import bpe_ops.evaluation

    failed, attempted = doctest.testmod(bpe_ops.evaluation)
    assert failed == 0 and attempted >= 10

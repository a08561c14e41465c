"""Nothing silently wrong: every ordinary mistake of a new user ends in a correct result or
a non-zero exit with one clear line. Each test is one row of the issue's probe tables, on the in-repo
`sample/` (no ../shared needed)."""
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import tokenize, train
from pipelines.core.errors import EXIT_INCOMPLETE, EXIT_USAGE, IncompleteRun, UserError
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

RUN_TIMEOUT = 300


def cli(*argv, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *map(str, argv)], cwd=cwd, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT)


def one_error_line(result, code: int) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("tokenbeam: error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def tokenizer_json(trained_tokenizer):
    return trained_tokenizer("sample", 400, "--special-token", "<|endoftext|>") / "tokenizer.json"


@pytest.fixture()
def shards(tmp_path, sample):
    """The sample cut into five JSONL shards of a folder of their own."""
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [line for f in sorted(sample.glob("*.jsonl")) for line in f.read_text(encoding="utf-8").splitlines()]
    for i in range(5):
        (folder / f"s-{i}.jsonl").write_text("\n".join(lines[i::5]) + "\n", encoding="utf-8")
    return sorted(folder.glob("*.jsonl"))


def parquet_ids(path: Path) -> list[str]:
    return pq.read_table(path, columns=["id"]).column("id").to_pylist()


def records_in(paths) -> int:
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in paths)


# ---------------------------------------------------------------------------- the command line

def test_an_unquoted_glob_reads_every_file_it_expanded_to(tmp_path, shards, tokenizer_json):
    """`--input in/*.jsonl` unquoted: the shell passes five paths; all five are inputs."""
    result = cli("tokenize", "--tokenizer", tokenizer_json, "--input", *shards, "--output", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").glob("*.parquet")) == [f"s-{i}.parquet" for i in range(5)]
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["records"] == records_in(shards)


def test_bare_inputs_mix_with_beam_flags_and_train_reads_them_all(tmp_path, shards):
    """Beam's `--flag value` pairs are told apart from bare inputs, in train's counting process too."""
    report = train.run(["--input", str(shards[0]), *map(str, shards[1:3]), "--direct_num_workers", "1",
                        str(shards[3]), "--output", str(tmp_path / "tok"), "--vocab-size", "300"])
    assert report["account"]["shards"]["read"] == 4 and report["account"]["records"]["read"] == records_in(shards[:4])
    assert sorted(report["inputs"]) == sorted(map(str, shards[:4]))


@pytest.mark.parametrize("command, flag, meant", [
    ("train", "--min_count", "--min-count"),
    ("tokenize", "--text_field", "--text-field"),
    ("tokenize", "--keep-fields", "--keep-field"),
    ("tokenize", "--temp-location", "--temp_location"),      # Beam's flags are spelled with underscores
])
def test_a_mistyped_flag_is_refused_with_the_flag_meant(tmp_path, sample, tokenizer_json, command, flag, meant):
    first = ["--tokenizer", tokenizer_json] if command == "tokenize" else ["--vocab-size", 300]
    result = cli(command, *first, "--input", sample / "*.jsonl", "--output", tmp_path / "out", flag, "5")
    line = one_error_line(result, EXIT_USAGE)
    assert f"unknown option {flag}" in line and f"did you mean {meant}?" in line
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_an_unknown_flag_without_a_near_name_is_refused(tmp_path, sample, tokenizer_json):
    line = one_error_line(cli("tokenize", "--tokenizer", tokenizer_json, "--input", sample / "*.jsonl",
                              "--output", tmp_path / "out", "--frobnicate"), EXIT_USAGE)
    assert "unknown option --frobnicate" in line


def test_flags_are_not_abbreviated(tmp_path, sample):
    """`--vocab 300` is not taken for `--vocab-size` (a prefix could as well be one of Beam's flags)."""
    line = one_error_line(cli("train", "--vocab", 300, "--input", sample / "*.jsonl", "--output", tmp_path / "o"),
                          EXIT_USAGE)
    assert "--vocab-size" in line


def test_counts_mode_refuses_what_it_would_ignore(tmp_path, sample):
    train.run(["--input", str(sample / "*.jsonl"), "--output", str(tmp_path / "a"), "--vocab-size", "300"])
    with pytest.raises(UserError, match="unknown option --runner"):
        train.run(["--counts", str(tmp_path / "a"), "--output", str(tmp_path / "b"), "--vocab-size", "300",
                   "--runner", "DirectRunner"])
    with pytest.raises(UserError, match="unexpected argument"):
        train.run(["--counts", str(tmp_path / "a"), "--output", str(tmp_path / "b"), "--vocab-size", "300",
                   str(sample / "sample-000-of-002.jsonl")])


@pytest.mark.parametrize("pattern, ok", [("GPT4", True), ("O200K", True), ("gpt5", False), (r"\p{L}+", False)])
def test_pattern_names_are_case_insensitive_and_a_bad_one_is_refused(tmp_path, sample, pattern, ok):
    result = cli("train", "--input", sample / "sample-001-of-002.jsonl", "--output", tmp_path / "o",
                 "--vocab-size", 300, "--pattern", pattern)
    if ok:
        assert result.returncode == 0, result.stderr
    else:
        line = one_error_line(result, EXIT_USAGE)
        assert ("known names" in line) if pattern == "gpt5" else ("unmatched" in line or "skips" in line)


def test_output_that_is_a_file_or_memory_is_refused(tmp_path, sample, tokenizer_json):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    line = one_error_line(cli("tokenize", "--tokenizer", tokenizer_json, "--input", sample / "*.jsonl",
                              "--output", blocker), EXIT_USAGE)
    assert "is a file" in line
    with pytest.raises(UserError, match="memory://"):
        tokenize.run(["--tokenizer", str(tokenizer_json), "--input", str(sample / "*.jsonl"), "--output", "memory://x"])


def test_beam_commands_do_not_print_the_apitools_warning(tmp_path, sample, tokenizer_json):
    result = cli("tokenize", "--help")
    assert result.returncode == 0 and "usage: tokenbeam tokenize" in result.stdout
    assert "apitools" not in result.stderr + result.stdout
    # Nor do the local runner's worker processes, which import Beam on their own.
    result = cli("tokenize", "--tokenizer", tokenizer_json, "--input", sample / "*.jsonl", "--output", tmp_path / "o",
                 "--direct_running_mode", "multi_processing", "--direct_num_workers", 2)
    assert result.returncode == 0, result.stderr
    assert "apitools" not in result.stderr and "tokenized sample-00" in result.stderr     # a worker's line


# ---------------------------------------------------------------------------- exit codes

def test_records_without_the_text_field_are_a_failed_run_with_a_hint(tmp_path, sample, tokenizer_json):
    result = cli("tokenize", "--tokenizer", tokenizer_json, "--input", sample / "*.jsonl", "--output",
                 tmp_path / "out", "--text-field", "body")
    line = one_error_line(result, EXIT_INCOMPLETE)
    assert "nothing was written" in line and "--text-field" in line
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    rejected = [json.loads(x) for f in (tmp_path / "out" / "rejected").glob("*.jsonl") for x in f.read_text().splitlines()]
    assert len(rejected) == records_in(sample.glob("*.jsonl"))
    assert all(r["reason"] == "missing_text_field" and "fields: id, text" in r["detail"] for r in rejected)
    with pytest.raises(IncompleteRun, match="is --text-field right"):
        train.run(["--input", str(sample / "*.jsonl"), "--output", str(tmp_path / "t"), "--vocab-size", "300",
                   "--text-field", "body"])
    assert not (tmp_path / "t" / "tokenizer.json").exists() and not (tmp_path / "t" / "_SUCCESS").exists()


@pytest.fixture()
def broken_inputs(tmp_path, shards):
    """Two good shards, gzip data named .jsonl, and a Parquet shard without the text column."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(shards[0], folder / "good-0.jsonl")
    shutil.copy(shards[1], folder / "good-1.jsonl")
    (folder / "zipped.jsonl").write_bytes(gzip.compress(shards[2].read_bytes()))
    pq.write_table(pa.table({"body": ["a b", "c d"]}), folder / "no-text.parquet")
    return folder


def test_unreadable_shards_fail_the_run_and_are_listed(tmp_path, broken_inputs, tokenizer_json, shards):
    out = tmp_path / "out"
    result = cli("tokenize", "--tokenizer", tokenizer_json, "--input", broken_inputs / "*", "--output", out)
    line = one_error_line(result, EXIT_INCOMPLETE)
    assert "2 of 4 shard(s) could not be read" in line and "--allow-shard-errors" in line
    assert not (out / "_SUCCESS").exists()
    stats = json.loads((out / "stats.json").read_text())
    assert {e["reason"] for e in stats["shard_errors"]} == {"wrong_format", "missing_text_column"}
    assert stats["records"] == records_in(shards[:2])
    listed = {json.loads(x)["reason"] for f in (out / "rejected").glob("*.jsonl") for x in f.read_text().splitlines()}
    assert listed == {"wrong_format", "missing_text_column"}
    # Allowed, the same run is complete: exit 0 and _SUCCESS, the failures still reported.
    allowed = cli("tokenize", "--tokenizer", tokenizer_json, "--input", broken_inputs / "*", "--output", out,
                  "--allow-shard-errors")
    assert allowed.returncode == 0, allowed.stderr
    assert "warning:" in allowed.stderr and json.loads((out / "_SUCCESS").read_text())["account"]["shards"]["failed"] == 2


def test_train_refuses_to_train_on_part_of_the_corpus(tmp_path, broken_inputs):
    out = tmp_path / "tok"
    with pytest.raises(IncompleteRun, match="2 of 4 shard"):
        train.run(["--input", str(broken_inputs / "*"), "--output", str(out), "--vocab-size", "300"])
    report = json.loads((out / "train_report.json").read_text())
    assert report["complete"] is False and report["account"]["shards"]["failed"] == 2
    assert not (out / "tokenizer.json").exists() and not (out / "_SUCCESS").exists()
    report = train.run(["--input", str(broken_inputs / "*"), "--output", str(out), "--vocab-size", "300",
                        "--allow-shard-errors"])
    assert report["complete"] is True and report["account"]["shards"]["failed"] == 2 and (out / "_SUCCESS").exists()
    assert json.loads((out / "_SUCCESS").read_text())["account"] == report["account"]


# ---------------------------------------------------------------------------- reruns

@pytest.mark.parametrize("change", [["--text-field", "id"], ["--keep-field", "id2"], ["--eos-token", "<|endoftext|>"],
                                    ["--invalid-utf8", "reject"], ["--max-record-bytes", "1M"]])
def test_a_rerun_with_another_option_redoes_every_shard(tmp_path, shards, tokenizer_json, change):
    args = ["--tokenizer", str(tokenizer_json), "--input", str(shards[0].parent / "*.jsonl"), "--output",
            str(tmp_path / "out")]
    if change[0] == "--keep-field":
        for s in shards:      # a field to keep (not `id`: that name is one of the columns tokenbeam writes)
            s.write_text("".join(json.dumps(dict(json.loads(x), id2=1)) + "\n" for x in s.read_text().splitlines()))
    first = tokenize.run(args)
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").glob("*.parquet")}
    second = tokenize.run(args + change)
    after = {p.name: p.read_bytes() for p in (tmp_path / "out").glob("*.parquet")}
    assert set(before) == set(after) and all(before[n] != after[n] for n in before), "a shard was reused"
    if change[0] == "--eos-token":
        assert second["tokens"] == first["tokens"] + first["records"]
    if change[0] == "--keep-field":
        assert pq.read_table(tmp_path / "out" / "s-0.parquet").column("id2").to_pylist()[0] == 1


def test_a_rerun_with_the_same_options_reuses_and_a_changed_input_is_redone(tmp_path, shards, tokenizer_json):
    args = ["--tokenizer", str(tokenizer_json), "--input", str(shards[0].parent / "*.jsonl"), "--output",
            str(tmp_path / "out")]
    tokenize.run(args)
    written = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").glob("*.parquet")}
    lines = shards[1].read_text().splitlines()
    shards[1].write_text("\n".join(lines[:-1]) + "\n")      # one record fewer, same name
    stats = tokenize.run(args)
    rewritten = [p.name for p in (tmp_path / "out").glob("*.parquet") if p.stat().st_mtime_ns != written[p.name]]
    assert rewritten == ["s-1.parquet"]
    assert len(parquet_ids(tmp_path / "out" / "s-1.parquet")) == len(lines) - 1
    assert stats["records"] == records_in(shards)


def test_a_rerun_with_other_inputs_leaves_only_their_outputs(tmp_path, shards, tokenizer_json):
    out = tmp_path / "out"
    tokenize.run(["--tokenizer", str(tokenizer_json), "--output", str(out), "--input", str(shards[0].parent / "*")])
    (out / "rejected").mkdir(exist_ok=True)
    (out / "rejected" / "s-4.jsonl").write_text("{}\n")       # as a run that rejected a record would leave
    stats = tokenize.run(["--tokenizer", str(tokenizer_json), "--output", str(out), "--input", str(shards[0]),
                          "--input", str(shards[1])])
    assert sorted(p.name for p in out.glob("*.parquet")) == ["s-0.parquet", "s-1.parquet"]
    assert list((out / "rejected").glob("*")) == []        # s-4 is no input any more
    assert stats["records"] == records_in(shards[:2]) and stats["account"]["shards"]["read"] == 2
    assert json.loads((out / "_SUCCESS").read_text())["account"]["records"]["written"] == records_in(shards[:2])


def test_a_folder_with_foreign_parquet_is_refused(tmp_path, shards, tokenizer_json):
    out = tmp_path / "out"
    out.mkdir()
    pq.write_table(pa.table({"x": [1]}), out / "mine.parquet")
    with pytest.raises(UserError, match="did not write.*mine.parquet"):
        tokenize.run(["--tokenizer", str(tokenizer_json), "--output", str(out), "--input", str(shards[0])])
    assert (out / "mine.parquet").exists()


def test_train_rerun_after_fixing_a_record_lists_nothing_stale(tmp_path, shards):
    bad = shards[0].read_text() + '{"id": "bad", "text": 5}\n'
    shards[0].write_text(bad)
    args = ["--input", str(shards[0].parent / "*.jsonl"), "--output", str(tmp_path / "tok"), "--vocab-size", "300"]
    assert train.run(args)["account"]["records"]["rejected"] == 1
    assert (tmp_path / "tok" / "rejected" / "s-0.jsonl").exists()
    shards[0].write_text(bad.replace('"text": 5', '"text": "five"'))
    report = train.run(args)
    assert report["account"]["records"]["rejected"] == 0
    assert list((tmp_path / "tok" / "rejected").glob("*")) == []


def test_a_failed_train_rerun_leaves_no_earlier_tokenizer(tmp_path, shards):
    out = tmp_path / "tok"
    train.run(["--input", str(shards[0]), "--output", str(out), "--vocab-size", "300"])
    assert (out / "tokenizer.json").exists() and (out / "_SUCCESS").exists()
    with pytest.raises(IncompleteRun):
        train.run(["--input", str(shards[0]), "--output", str(out), "--vocab-size", "300", "--text-field", "nope"])
    assert not (out / "tokenizer.json").exists() and not (out / "_SUCCESS").exists()


# ---------------------------------------------------------------------------- record size

def test_a_record_above_the_bound_is_rejected_in_both_pipelines(tmp_path, shards, tokenizer_json):
    big = {"id": "huge", "text": "word " * 4000}      # 20 KB
    shards[0].write_text(shards[0].read_text() + json.dumps(big) + "\n")
    args = ["--input", str(shards[0]), "--max-record-bytes", "16K"]
    stats = tokenize.run(["--tokenizer", str(tokenizer_json), "--output", str(tmp_path / "out"), *args])
    assert stats["account"]["records"]["rejected_by_reason"] == {"record_too_large": 1}
    (line,) = (tmp_path / "out" / "rejected" / "s-0.jsonl").read_text().splitlines()
    assert json.loads(line)["reason"] == "record_too_large" and "16,384" in json.loads(line)["detail"]
    assert "huge" not in parquet_ids(tmp_path / "out" / "s-0.parquet")
    report = train.run(["--output", str(tmp_path / "tok"), "--vocab-size", "300", *args])
    assert report["account"]["records"]["rejected_by_reason"] == {"record_too_large": 1}
    with pytest.raises(UserError, match="not a size"):
        tokenize.run(["--tokenizer", str(tokenizer_json), "--output", str(tmp_path / "o2"), *args[:2],
                      "--max-record-bytes", "lots"])


def test_a_tiktoken_rank_file_tokenizes_like_its_tokenizer_json(tmp_path, sample, tokenizer_json):
    """`--tokenizer FILE.tiktoken --pattern ... --special-token TOKEN=ID` gives the ids of the
    tokenizer.json it was written beside; without --pattern it is refused in one line."""
    rank_file = tokenizer_json.parent / "tokenizer.tiktoken"
    args = ["--input", str(sample / "*.jsonl")]
    tokenize.run(["--tokenizer", str(tokenizer_json), "--output", str(tmp_path / "json"), *args,
                  "--eos-token", "<|endoftext|>"])
    tokenize.run(["--tokenizer", str(rank_file), "--pattern", "gpt4", "--special-token", "<|endoftext|>=399",
                  "--output", str(tmp_path / "ranks"), *args, "--eos-token", "<|endoftext|>"])
    for name in ("sample-000-of-002.parquet", "sample-001-of-002.parquet"):
        a = pq.read_table(tmp_path / "json" / name, columns=["token_ids"]).column("token_ids").to_pylist()
        b = pq.read_table(tmp_path / "ranks" / name, columns=["token_ids"]).column("token_ids").to_pylist()
        assert a == b and a[0][-1] == 399
    line = one_error_line(cli("tokenize", "--tokenizer", rank_file, "--output", tmp_path / "o", *args), EXIT_USAGE)
    assert "--pattern" in line
    line = one_error_line(cli("tokenize", "--tokenizer", rank_file, "--pattern", "gpt4", "--special-token", "x",
                              "--output", tmp_path / "o", *args), EXIT_USAGE)
    assert "TOKEN=ID" in line


def test_beam_asks_for_ipython_only_once_it_is_loaded(monkeypatch):
    """The patched check answers no without importing IPython, and defers to Beam's own check when
    IPython is loaded (a notebook or IPython shell)."""
    import types

    import pipelines.core.beam_options  # noqa: F401  (applies the patch)
    from apache_beam import pipeline as beam_pipeline
    from apache_beam.utils import interactive_utils

    check = interactive_utils.is_in_ipython
    assert check is beam_pipeline.is_in_ipython and check.asks_only_when_loaded
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert check() is False and "IPython" not in sys.modules
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: object()          # as inside an IPython session
    monkeypatch.setitem(sys.modules, "IPython", fake)
    assert check() is True

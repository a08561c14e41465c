"""The corners of the command line: help and version, misspelt flags, tokenizer folders, record ids
that are not strings, an unreadable shard said once, quiet and bounded progress, empty special tokens."""
import json
import subprocess
import sys
from importlib import metadata

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.core.errors import EXIT_INCOMPLETE, EXIT_USAGE, UserError
from pipelines.datasets.sources import Record, Shard, SourceOptions, read_shard
from pipelines.datasets.tokenizer_files import load_tokenizer
from tests.conftest import ROOT
from tests.pipelines.test_cli_strict import cli, one_error_line

pytestmark = pytest.mark.slow

COMMANDS = ("train", "tokenize", "pack", "evaluate", "drift", "stats", "estimate", "encode")
MODULES = ("train", "tokenize", "pack", "evaluate", "drift", "stats_cmd", "estimate")


def python_m(module, *argv):
    return subprocess.run([sys.executable, "-m", module, *map(str, argv)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def tokenizer_dir(trained_tokenizer):
    return trained_tokenizer("sample", 300)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_prints_its_help_and_exits_0_without_beams_warning(command):
    result = cli(command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: tokenbeam") and "--help" in result.stdout
    assert result.stderr == ""


def test_the_command_list_prints_and_exits_0():
    # A `%` in any command's help line is argparse's format character: the whole list would fail.
    result = cli("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: tokenbeam")
    assert all(f"    {command} " in result.stdout for command in COMMANDS)


@pytest.mark.parametrize("module", MODULES)
def test_every_pipeline_module_prints_its_help_and_exits_0_without_beams_warning(module):
    result = python_m(f"pipelines.{module}", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: tokenbeam")
    assert result.stderr == ""


def test_version_prints_the_installed_version():
    result = cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"tokenbeam {metadata.version('tokenbeam')}"


def test_no_command_and_an_unknown_top_level_flag_are_one_line_each():
    assert "did you mean --version?" in one_error_line(cli("--versoin"), EXIT_USAGE)
    assert "encode" not in one_error_line(cli("--frobnicate"), EXIT_USAGE)


@pytest.mark.parametrize("argv, meant", [
    (("stats", "x.parquet", "--tokenizr", "t"), "--tokenizer"),
    (("stats", "x.parquet", "--tokenizer", "t", "--outptu", "o"), "--output"),
    (("encode", "--tokenizr", "t", "hello"), "--tokenizer"),
    (("drift", "a.json", "b.json", "--levle", "0.1"), "--level"),
    (("tokenize", "--tokenizr", "t", "--output", "o", "--input", "i"), "--tokenizer"),
    (("train", "--outptu", "o", "--vocab-size", "300", "--input", "i"), "--output"),
    (("train", "--vocab", "300", "--output", "o", "--input", "i"), "--vocab-size"),
    (("evaluate", "--tokenizer", "t", "--outptu", "o", "--input", "i"), "--output"),
    (("pack", "--inptu", "i", "--output", "o", "--seq-len", "8"), "--input"),
])
def test_a_misspelt_flag_is_named_with_the_flag_meant_in_every_command(argv, meant):
    """Even when the flag it misspells is a required one, whose absence argparse would report first."""
    line = one_error_line(cli(*argv), EXIT_USAGE)
    misspelt = next(a for a in argv if a.startswith("--") and not meant == a and a not in (
        "--output", "--vocab-size", "--input", "--tokenizer", "--seq-len"))
    assert f"unknown option {misspelt}: did you mean {meant}?" in line


def test_a_tokenizer_folder_without_tokenizer_json_says_what_it_lacks(tmp_path, tokenizer_dir):
    with pytest.raises(UserError, match="the folder holds no tokenizer.json"):
        load_tokenizer(str(tmp_path))
    assert load_tokenizer(str(tokenizer_dir)).vocab_size == 300        # a folder holding one is taken
    with pytest.raises(UserError, match="no such file"):
        load_tokenizer(str(tmp_path / "missing.json"))
    for argv in (("encode", "--tokenizer", tmp_path, "hi"),
                 ("stats", tmp_path / "x.parquet", "--tokenizer", tmp_path),
                 ("tokenize", "--tokenizer", tmp_path, "--input", ROOT / "sample" / "*.jsonl", "--output",
                  tmp_path / "out")):
        (tmp_path / "x.parquet").write_bytes(b"")
        assert "holds no tokenizer.json" in one_error_line(cli(*argv), EXIT_USAGE)
    result = cli("encode", "--tokenizer", tokenizer_dir, "hi")
    assert result.returncode == 0, result.stderr


def test_an_id_that_is_no_string_is_its_compact_json_text(tmp_path):
    rows = [{"id": "a b", "text": "x"}, {"id": ["a", 1], "text": "x"}, {"id": {"k": [1, 2]}, "text": "x"},
            {"id": 12, "text": "x"}, {"id": 1.5, "text": "x"}, {"id": True, "text": "x"}, {"id": None, "text": "x"},
            {"text": "x"}, {"id": "é", "text": "x"}]
    path = tmp_path / "ids.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    shard = Shard(str(path), "ids.jsonl", path.stat().st_size)
    ids = [r.id for r in read_shard(shard, SourceOptions()) if isinstance(r, Record)]
    assert ids == ["a b", '["a",1]', '{"k":[1,2]}', "12", "1.5", "true", "ids.jsonl:6", "ids.jsonl:7", "é"]
    table = pa.table({"id": pa.array([3, None], pa.int64()), "text": ["x", "y"]})
    pq.write_table(table, tmp_path / "ids.parquet")
    shard = Shard(str(tmp_path / "ids.parquet"), "ids.parquet", 1)
    assert [r.id for r in read_shard(shard, SourceOptions())] == ["3", "ids.parquet:1"]


@pytest.mark.parametrize("command", ["tokenize", "train"])
def test_an_unreadable_shard_is_described_once(tmp_path, sample, tokenizer_dir, command):
    first = ("--tokenizer", tokenizer_dir) if command == "tokenize" else ("--vocab-size", 300)
    result = cli(command, *first, "--input", sample / "sample-000-of-002.jsonl", "--format", "parquet",
                 "--output", tmp_path / "out")
    one_error_line(result, EXIT_INCOMPLETE)
    assert result.stderr.count("Parquet magic bytes not found") == 1, result.stderr


def test_quiet_prints_nothing_on_success_and_warnings_still(tmp_path, sample, tokenizer_dir):
    result = cli("tokenize", "--tokenizer", tokenizer_dir, "--input", sample / "*.jsonl", "--output", tmp_path / "a",
                 "--quiet")
    assert result.returncode == 0 and result.stderr == ""
    result = cli("tokenize", "--tokenizer", tokenizer_dir, "--input", sample / "sample-000-of-002.jsonl",
                 "--input", sample / "sample-001-of-002.jsonl", "--format", "parquet", "--allow-shard-errors",
                 "--output", tmp_path / "b", "--quiet")
    assert [line.split(":")[1] for line in result.stderr.splitlines()] == [" warning", " warning", " error"]


def test_progress_over_many_shards_is_a_bounded_summary(tmp_path, tokenizer_dir):
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(300):
        (folder / f"s-{i:04d}.jsonl").write_text(json.dumps({"text": f"record {i}"}) + "\n", encoding="utf-8")
    result = cli("tokenize", "--tokenizer", tokenizer_dir, "--input", folder / "*.jsonl", "--output", tmp_path / "o")
    assert result.returncode == 0, result.stderr
    assert "done: 300 records read" in result.stderr
    assert len(result.stderr.splitlines()) < 30, result.stderr


@pytest.mark.parametrize("token", ["", " ", "\n\t"])
def test_an_empty_or_blank_special_token_is_refused(tmp_path, sample, token):
    line = one_error_line(cli("train", "--input", sample / "*.jsonl", "--output", tmp_path / "t", "--vocab-size",
                              300, "--special-token", token), EXIT_USAGE)
    assert "must not be empty or only whitespace" in line
    line = one_error_line(cli("encode", "--tokenizer", "x.tiktoken", "--pattern", "gpt2", "--special-token",
                              f"{token}=5", "hi"), EXIT_USAGE)
    assert "must not be empty or only whitespace" in line


def test_a_run_that_succeeds_exits_0_every_time(tmp_path, sample, tokenizer_dir):
    # Native threads meeting their libraries' static destructors at interpreter exit used to end most
    # such runs with "terminate called without an active exception" and exit code 134.
    for k in range(3):
        result = cli("tokenize", "--tokenizer", tokenizer_dir, "--input", sample / "*.jsonl", "--output",
                     tmp_path / f"run{k}", "--keep-field", "source", "--group-field", "source", "--quiet")
        assert (result.returncode, result.stderr) == (0, "")


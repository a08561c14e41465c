"""One input finder (pipelines/core/inputs.py) for every command: the same lines for the same mistakes, and
a folder naming the files each command reads."""
import pytest

from pipelines import cli, stats_cmd
from pipelines.core.inputs import InputError, Sought, find_files


def error_line(capsys, *argv) -> str:
    assert cli.main([str(a) for a in argv]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    return line


def test_a_glob_matching_nothing_is_the_same_line_in_every_command(tmp_path, capsys):
    nothing = tmp_path / "nowhere" / "*.x"
    (tmp_path / "a.json").write_text("{}")
    lines = [error_line(capsys, "stats", nothing, "--tokenizer", tmp_path),
             error_line(capsys, "drift", tmp_path / "a.json", nothing),
             error_line(capsys, "estimate", "--tokenizer", tmp_path, "--input", nothing)]
    assert lines[:2] == [f"tokenbeam: error: {nothing} matched no files"] * 2, lines
    assert lines[2] == f"tokenbeam: error: --input '{nothing}' matched no files"


def test_a_missing_file_and_a_glob_for_one_file_are_told_apart(tmp_path):
    one = Sought("--baseline", in_folder="stats.json", many=False)
    with pytest.raises(InputError, match="--baseline '.*missing.json': no such file"):
        find_files([str(tmp_path / "missing.json")], one)
    with pytest.raises(InputError, match=r"must name one file, not a glob"):
        find_files([str(tmp_path / "*.json")], one)
    with pytest.raises(InputError, match="is a folder without a stats.json"):
        find_files([str(tmp_path)], one)


def test_a_folder_names_its_token_parquet_below_it_but_not_rejected_or_hidden_files(tmp_path):
    for name in ("a.parquet", "sub/b.parquet", "rejected/c.parquet", ".d.parquet.tmp-0", ".e.parquet", "f.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert stats_cmd.expand_globs([str(tmp_path)]) == [str(tmp_path / "a.parquet"), str(tmp_path / "sub/b.parquet")]
    (tmp_path / "empty").mkdir()
    with pytest.raises(stats_cmd.StatsError, match=r"empty is a folder without a \*\.parquet file"):
        stats_cmd.expand_globs([str(tmp_path / "empty")])


def test_a_file_found_twice_is_listed_once_and_the_list_is_sorted(tmp_path):
    for name in ("b.jsonl", "a.jsonl"):
        (tmp_path / name).write_text("{}\n")
    found = find_files([str(tmp_path / "*.jsonl"), str(tmp_path / "a.jsonl")])
    assert [f.url for f in found] == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]

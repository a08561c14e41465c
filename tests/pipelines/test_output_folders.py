"""One policy for every command's folders: a command never writes over another command's output
(exit 2, one line, nothing touched), and never reads a tokenize output whose run did not finish
(no `_SUCCESS`), as if it were the whole dataset."""
import json
import shutil
from pathlib import Path

import pytest

from pipelines import cli

from pipelines.core import folders

pytestmark = pytest.mark.slow

TINY = "tiny/*.jsonl"


def run(capsys, *argv) -> tuple[int, list[str]]:
    """`tokenbeam ARGV` in this process: its exit code and its `tokenbeam: error` lines."""
    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, [line for line in err.splitlines() if line.startswith("tokenbeam: error")]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def made(tmp_path_factory, corpora):
    """A train, a tokenize (with a rejected record, so it has a rejected/ folder) and a pack output."""
    base = tmp_path_factory.mktemp("folders")
    data = base / "data"
    data.mkdir()
    lines = (corpora / "tiny" / "tiny-000-of-002.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (data / "a.jsonl").write_text("".join(lines) + "not json\n", encoding="utf-8")
    (data / "b.jsonl").write_text((corpora / "tiny" / "tiny-001-of-002.jsonl").read_text(encoding="utf-8"),
                                  encoding="utf-8")
    assert cli.main(["train", "--input", str(corpora / TINY), "--output", str(base / "tok"), "--vocab-size", "400",
                     "--special-token", "<|endoftext|>"]) == 0
    assert cli.main(["tokenize", "--tokenizer", str(base / "tok"), "--input", str(data / "*.jsonl"),
                     "--output", str(base / "tokens"), "--eos-token", "<|endoftext|>"]) == 0
    assert (base / "tokens" / "rejected").is_dir()
    assert cli.main(["pack", "--input", str(base / "tokens"), "--output", str(base / "packed"),
                     "--seq-len", "64"]) == 0
    return base


@pytest.fixture
def unfinished(made, tmp_path) -> Path:
    """A tokenize output whose run did not finish: some shards written, no `_SUCCESS`."""
    folder = tmp_path / "unfinished"
    shutil.copytree(made / "tokens", folder)
    (folder / "_SUCCESS").unlink()
    (folder / "b.parquet").unlink()
    return folder


@pytest.mark.parametrize("command,owner", [("train", "tokens"), ("tokenize", "tok"), ("pack", "tokens"),
                                           ("evaluate", "packed"), ("tokenize", "packed"), ("evaluate", "tok")])
def test_a_command_refuses_another_commands_output_folder_and_touches_nothing(
        command, owner, capsys, made, corpora, tmp_path):
    folder = tmp_path / owner
    shutil.copytree(made / owner, folder)
    before = snapshot(folder)
    argv = {"train": ["--input", corpora / TINY, "--vocab-size", 300],
            "tokenize": ["--tokenizer", made / "tok", "--input", corpora / TINY],
            "pack": ["--input", made / "tokens", "--seq-len", 64],
            "evaluate": ["--tokenizer", made / "tok", "--input", corpora / TINY]}[command]
    code, errors = run(capsys, command, *argv, "--output", folder)
    assert code == 2 and len(errors) == 1, errors
    assert "holds the output of `tokenbeam" in errors[0] and "would delete or overwrite" in errors[0]
    assert snapshot(folder) == before


def test_a_folder_made_before_owner_marks_is_recognised_by_its_files(capsys, made, corpora, tmp_path):
    folder = tmp_path / "tokens"
    shutil.copytree(made / "tokens", folder)
    (folder / folders.MARKER).unlink()
    before = snapshot(folder)
    code, errors = run(capsys, "train", "--input", corpora / TINY, "--vocab-size", 300, "--output", folder)
    assert code == 2 and "`tokenbeam tokenize` (stats.json)" in errors[0]
    assert snapshot(folder) == before


def test_each_command_marks_its_folder_and_reruns_into_it(capsys, made):
    for name, command in (("tok", "train"), ("tokens", "tokenize"), ("packed", "pack")):
        assert json.loads((made / name / folders.MARKER).read_text()) == {"command": command}
    code, errors = run(capsys, "pack", "--input", made / "tokens", "--output", made / "packed", "--seq-len", 64)
    assert code == 0, errors


def test_pack_refuses_a_tokenize_output_without_success(capsys, unfinished, tmp_path):
    for given in (unfinished, unfinished / "*.parquet"):
        code, errors = run(capsys, "pack", "--input", given, "--output", tmp_path / "p", "--seq-len", 64)
        assert code == 2 and len(errors) == 1 and "did not finish" in errors[0], errors
        assert not (tmp_path / "p" / "_SUCCESS").exists()


def test_an_unfinished_folder_made_before_owner_marks_is_refused_too(capsys, unfinished, tmp_path):
    (unfinished / folders.MARKER).unlink()
    code, errors = run(capsys, "pack", "--input", unfinished, "--output", tmp_path / "p", "--seq-len", 64)
    assert code == 2 and "did not finish" in errors[0]


def test_pack_refuses_a_pack_output_as_input(capsys, made, tmp_path):
    code, errors = run(capsys, "pack", "--input", made / "packed", "--output", tmp_path / "p", "--seq-len", 64)
    assert code == 2 and "is the output of `tokenbeam pack`" in errors[0]


def test_stats_refuses_the_parquet_of_an_unfinished_run(capsys, made, unfinished, tmp_path):
    code, errors = run(capsys, "stats", unfinished / "*.parquet", "--tokenizer", made / "tok",
                       "--output", tmp_path / "s.json")
    assert code == 2 and "did not finish" in errors[0]
    assert not (tmp_path / "s.json").exists()


def test_drift_refuses_the_stats_of_an_unfinished_run(capsys, made, unfinished):
    code, errors = run(capsys, "drift", made / "tokens" / "stats.json", unfinished / "stats.json")
    assert code == 2 and "did not finish" in errors[0]
    code, errors = run(capsys, "drift", made / "tokens" / "stats.json", made / "tokens" / "stats.json")
    assert code == 0, errors


def test_stats_into_an_existing_folder_writes_stats_json_there(capsys, made, tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    code, errors = run(capsys, "stats", made / "tokens" / "*.parquet", "--tokenizer", made / "tok", "--output", folder)
    assert code == 0, errors
    written = json.loads((folder / "stats.json").read_text())
    assert written["records"] == json.loads((made / "tokens" / "stats.json").read_text())["records"]
    assert [p.name for p in folder.iterdir()] == ["stats.json"]


@pytest.mark.parametrize("owner", ["tok", "packed"])
def test_stats_refuses_to_write_into_another_commands_output(capsys, made, owner, tmp_path):
    folder = tmp_path / owner
    shutil.copytree(made / owner, folder)
    before = snapshot(folder)
    code, errors = run(capsys, "stats", made / "tokens" / "*.parquet", "--tokenizer", made / "tok", "--output", folder)
    assert code == 2 and "inside the output of" in errors[0]
    assert snapshot(folder) == before

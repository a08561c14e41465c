"""Whether a run is complete is one verdict (pipelines/datasets/outcome.py): train, tokenize and evaluate give the
same one, with the same hint, on inputs whose text is not where --text-field says."""
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import evaluate, tokenize, train
from pipelines.core.errors import IncompleteRun

pytestmark = pytest.mark.slow

NOTHING = {"train": "nothing to train on", "tokenize": "nothing was written", "evaluate": "nothing was evaluated"}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, sample):
    out = tmp_path_factory.mktemp("tok")
    train.run(["--input", str(sample / "*.jsonl"), "--output", str(out), "--vocab-size", "300", "--quiet"])
    return out


@pytest.fixture()
def without_text_column(tmp_path):
    """One Parquet shard whose text is in `body`, not in the `text` column looked for."""
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(pa.table({"body": ["a b", "c d"]}), folder / "no-text.parquet")
    return str(folder / "*.parquet")


def verdicts(tmp_path, tokenizer_dir, inputs, *extra) -> dict[str, str]:
    """Each command's one-line verdict on the inputs."""
    argv = {"train": ["--vocab-size", "300"], "tokenize": ["--tokenizer", str(tokenizer_dir)],
            "evaluate": ["--tokenizer", str(tokenizer_dir)]}
    found = {}
    for name, module in (("train", train), ("tokenize", tokenize), ("evaluate", evaluate)):
        with pytest.raises(IncompleteRun) as failed:
            module.run([*argv[name], "--input", inputs, "--output", str(tmp_path / name), "--quiet", *extra])
        found[name] = str(failed.value)
    return found


def test_a_missing_text_column_gets_the_same_verdict_and_hint_from_every_command(tmp_path, tokenizer_dir,
                                                                                 without_text_column):
    found = verdicts(tmp_path, tokenizer_dir, without_text_column, "--allow-shard-errors")
    tails = {name: line.removeprefix(NOTHING[name]) for name, line in found.items()}
    assert all(found[name].startswith(NOTHING[name]) for name in found), found
    assert len({tail.removesuffix("; no _SUCCESS") for tail in tails.values()}) == 1, found
    assert "(is --text-field right?)" in tails["train"]


def test_an_unreadable_shard_is_named_alike_by_every_command(tmp_path, tokenizer_dir, without_text_column):
    found = verdicts(tmp_path, tokenizer_dir, without_text_column)
    firsts = {line.split("(listed in rejected/, first: ")[1].split(");")[0] for line in found.values()}
    assert len(firsts) == 1 and "missing_text_column" in firsts.pop(), found
    assert all(line.startswith("1 of 1 shard(s) could not be read, and their records were not") for line in found.values())

"""The README's main job, end to end through the real command line, on the in-repo `sample/` (so a fresh
clone without ../shared runs it): `train` a 2,048-id tokenizer on the sample, `tokenize` the sample
with it, then check that every record is in the token Parquet exactly once and decodes back to its
text, and that stats.json and _SUCCESS account for all of them.

Only the documented flags (--input, --output, --vocab-size, --tokenizer) are used."""
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from bpe_ops import Tokenizer
from tests.conftest import ROOT


def cli(*argv):
    """`python -m pipelines.cli ...` from the repository (where the README runs it)."""
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def sample_records(sample):
    """{id: text} of every record of the sample, and the number of lines it has."""
    records, lines = {}, 0
    for shard in sorted(sample.glob("*.jsonl")):
        for line in shard.read_text(encoding="utf-8").splitlines():
            lines += 1
            rec = json.loads(line)
            assert rec["id"] not in records, f"duplicate id {rec['id']} in the sample"
            records[rec["id"]] = rec["text"]
    return records, lines


@pytest.fixture(scope="module")
def job(tmp_path_factory, sample):
    """The README's two commands, with the sample's glob as given there (relative to the repository)."""
    assert (ROOT / "sample") == sample
    tmp = tmp_path_factory.mktemp("e2e")
    train = cli("train", "--input", "sample/*.jsonl", "--output", tmp / "tok", "--vocab-size", 2048)
    assert train.returncode == 0, f"train failed:\n{train.stdout[-3000:]}\n{train.stderr[-3000:]}"
    tokenize = cli("tokenize", "--tokenizer", tmp / "tok" / "tokenizer.json", "--input", "sample/*.jsonl",
                   "--output", tmp / "tokens")
    assert tokenize.returncode == 0, f"tokenize failed:\n{tokenize.stdout[-3000:]}\n{tokenize.stderr[-3000:]}"
    return tmp


def test_train_writes_a_2048_id_tokenizer(job):
    tok = Tokenizer.from_file(str(job / "tok" / "tokenizer.json"))
    assert len(tok.merges) == 2048 - 256
    assert (job / "tok" / "tokenizer.tiktoken").exists() and (job / "tok" / "train_report.json").exists()


def test_every_record_is_written_once_and_decodes_to_its_text(job, sample):
    records, _ = sample_records(sample)
    tok = Tokenizer.from_file(str(job / "tok" / "tokenizer.json"))
    parquet = sorted((job / "tokens").glob("*.parquet"))
    assert [p.name for p in parquet] == [s.with_suffix(".parquet").name for s in sorted(sample.glob("*.jsonl"))]
    seen = []
    for path in parquet:
        table = pq.read_table(path)
        ids, token_ids = table.column("id").to_pylist(), table.column("token_ids").to_pylist()
        assert table.column("n_tokens").to_pylist() == [len(t) for t in token_ids]
        for rid, got in zip(ids, token_ids):
            assert tok.decode(got) == records[rid], f"{path.name} {rid} does not decode to its text"
        seen += ids
    assert sorted(seen) == sorted(records) and len(seen) == len(set(seen))


def test_stats_and_success_account_for_every_record(job, sample):
    _, lines = sample_records(sample)
    stats = json.loads((job / "tokens" / "stats.json").read_text())
    assert stats["records"] == lines
    tokens = sum(sum(pq.read_table(p).column("n_tokens").to_pylist()) for p in (job / "tokens").glob("*.parquet"))
    assert stats["tokens"] == tokens > 0
    assert (job / "tokens" / "_SUCCESS").is_file()

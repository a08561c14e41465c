"""The Beam tokenize pipeline: ids equal the oracles on real text, every record accounted for, the
same bytes on every runner, readable by pyarrow / DuckDB / Hugging Face datasets."""
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from bpe_ops import Tokenizer
from pipelines import tokenize
from tests.conftest import ROOT
from schemas.accounts import account_of

pytestmark = pytest.mark.slow


def run_tokenize(*argv):
    return tokenize.run([str(a) for a in argv])


def read_rows(out_dir):
    """{parquet file name: table} for every token file of a run."""
    return {p.name: pq.read_table(p) for p in sorted(out_dir.rglob("*.parquet"))}


@pytest.fixture(scope="module")
def trained(trained_tokenizer):
    """A tokenizer trained by the train pipeline on the in-repo sample."""
    return trained_tokenizer("sample", 1500, "--special-token", "<|endoftext|>") / "tokenizer.json"


@pytest.fixture(scope="module")
def gpt2_json(tmp_path_factory, gpt2_files):
    """The real GPT-2 tokenizer, converted from vocab.json + merges.txt to tokenizer.json."""
    out = tmp_path_factory.mktemp("gpt2")
    return Tokenizer.from_gpt2_files(*gpt2_files).save(str(out))


@pytest.mark.parametrize("which", ["trained", "gpt2"])
def test_token_ids_equal_hf_tokenizers_on_multi_and_code(which, trained, gpt2_json, corpora, tmp_path):
    from tokenizers import Tokenizer as HFTokenizer
    tokenizer_json = {"trained": trained, "gpt2": gpt2_json}[which]
    out = tmp_path / "tokens"
    stats = run_tokenize("--tokenizer", tokenizer_json, "--input", corpora / "multi" / "*.jsonl",
                         "--input", corpora / "code" / "*.jsonl", "--output", out, "--eos-token", "<|endoftext|>")
    hf = HFTokenizer.from_file(str(tokenizer_json))
    ours = Tokenizer.from_file(str(tokenizer_json))
    eos = ours.special_tokens["<|endoftext|>"]
    texts = {}
    for folder in ("multi", "code"):
        for shard in sorted((corpora / folder).glob("*.jsonl")):
            for line in shard.read_text(encoding="utf-8").splitlines():
                rec = json.loads(line)
                texts[rec["id"]] = rec["text"]
    rows = 0
    for name, table in read_rows(out).items():
        ids, token_ids = table.column("id").to_pylist(), table.column("token_ids").to_pylist()
        hf_ids = [e.ids for e in hf.encode_batch([texts[i] for i in ids], add_special_tokens=False)]
        for rid, got, want in zip(ids, token_ids, hf_ids):
            assert got[-1] == eos
            assert got[:-1] == want, f"{name} {rid}"
            assert ours.decode(got[:-1]) == texts[rid]
        rows += len(ids)
    assert rows == len(texts) == stats["records"]


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory, sample, trained):
    """The two sample/ shards tokenized in_memory with 3 encoding threads, multi_processing x2 with 1, and
    rerun into the same folder."""
    inputs = [sample / "sample-000-of-002.jsonl", sample / "sample-001-of-002.jsonl"]
    runs = {}
    for mode, extra in (("in_memory", ["--direct_running_mode", "in_memory", "--encode-threads", "3"]),
                        ("multi_processing", ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2",
                                              "--encode-threads", "1"])):
        out = tmp_path_factory.mktemp(mode)
        args = ["--tokenizer", trained, "--output", out, *sum((["--input", i] for i in inputs), []), *extra]
        runs[mode] = (out, run_tokenize(*args), args)
    return runs


def test_parquet_bytes_identical_across_runners_and_rerun(sample_runs):
    (a, _, args), (b, _, _) = sample_runs["in_memory"], sample_runs["multi_processing"]
    first = {p.name: p.read_bytes() for p in a.glob("*.parquet")}
    assert sorted(first) == ["sample-000-of-002.parquet", "sample-001-of-002.parquet"]
    assert first == {p.name: p.read_bytes() for p in b.glob("*.parquet")}
    stats_before = json.loads((a / "stats.json").read_text())
    run_tokenize(*args)                                   # rerun: every shard is complete -> skipped
    assert first == {p.name: p.read_bytes() for p in a.glob("*.parquet")}
    stats_after = json.loads((a / "stats.json").read_text())
    stats_before.pop("timing"), stats_after.pop("timing")
    assert stats_before == stats_after


def test_stats_agree_with_rows_and_manifest(sample_runs):
    out, stats, _ = sample_runs["in_memory"]
    tables = read_rows(out)
    assert stats["tokens"] == sum(sum(t.column("n_tokens").to_pylist()) for t in tables.values())
    assert stats["records"] == sum(t.num_rows for t in tables.values())
    manifest = json.loads((out / "_SUCCESS").read_text())
    for shard in manifest["shards"]:
        account = account_of(shard)
        assert account.records_read == account.records_written + account.records_rejected
        assert pq.read_metadata(out / shard["output"]).num_rows == account.records_written
    for name, table in tables.items():
        n_bytes = table.column("n_bytes").to_pylist()
        assert all(b > 0 for b in n_bytes)
        assert table.column("n_tokens").to_pylist() == [len(x) for x in table.column("token_ids").to_pylist()]
    meta = pq.read_metadata(next(iter(out.glob("*.parquet")))).metadata
    assert meta[b"tokenbeam.vocab_size"] == b"1500"
    assert pq.read_schema(next(iter(out.glob("*.parquet")))).field("token_ids").type.value_type == "uint16"


def test_rows_keep_input_order_and_statistics(sample_runs, sample):
    out, _, _ = sample_runs["in_memory"]
    table = pq.read_table(out / "sample-000-of-002.parquet")
    records = [json.loads(l) for l in (sample / "sample-000-of-002.jsonl").read_text(encoding="utf-8").splitlines()]
    assert table.column("id").to_pylist() == [r["id"] for r in records]
    assert table.column("n_chars").to_pylist() == [len(r["text"]) for r in records]
    assert table.column("n_bytes").to_pylist() == [len(r["text"].encode()) for r in records]
    assert table.column("n_words").to_pylist() == [len(r["text"].split()) for r in records]


def test_readable_by_duckdb_and_datasets(sample_runs):
    import duckdb
    from datasets import load_dataset
    out, stats, _ = sample_runs["in_memory"]
    total = duckdb.sql(f"SELECT sum(n_tokens) FROM '{out}/*.parquet'").fetchall()[0][0]
    assert total == stats["tokens"]
    ds = load_dataset("parquet", data_files=sorted(str(p) for p in out.glob("*.parquet")), split="train",
                      cache_dir=str(out.parent / "hf-cache"))
    assert len(ds) == stats["records"]
    assert sum(ds["n_tokens"]) == stats["tokens"]


def test_rejected_records_are_listed_and_counted(tmp_path, trained):
    shard = tmp_path / "in" / "bad.jsonl"
    shard.parent.mkdir()
    shard.write_bytes(b'{"id": "a", "text": "fine", "meta": {"k": [1, 2]}}\nnot json\n{"id": "c", "text": 5}\n{"id": "d"}\n'
                      b'{"id": "e", "text": "caf\xc3\xa9 ok"}\n')
    out = tmp_path / "out"
    stats = run_tokenize("--tokenizer", trained, "--input", shard, "--output", out, "--keep-field", "meta")
    rows = pq.read_table(out / "bad.parquet")
    assert rows.column("id").to_pylist() == ["a", "e"]
    assert rows.column("meta").to_pylist() == ['{"k":[1,2]}', None]
    rejected = [json.loads(l) for l in (out / "rejected" / "bad.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in rejected] == ["bad_json", "text_not_a_string", "missing_text_field"]
    assert stats["records"] == 2
    assert stats["account"]["records"] == {"read": 5, "written": 2, "rejected": 3, "repaired": 0, "rejected_by_reason": {
        "bad_json": 1, "missing_text_field": 1, "text_not_a_string": 1}}
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert manifest["account"] == stats["account"] and manifest["version"] == 2


def test_outputs_keep_relative_paths_of_several_folders(tmp_path, trained):
    for sub in ("x", "y"):
        (tmp_path / "in" / sub).mkdir(parents=True)
        (tmp_path / "in" / sub / "part.txt").write_text("one line\nanother line\n")
    out = tmp_path / "out"
    run_tokenize("--tokenizer", trained, "--input", tmp_path / "in" / "*" / "*.txt", "--output", out)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet")) == ["x/part.parquet", "y/part.parquet"]
    assert pq.read_table(out / "x" / "part.parquet").column("id").to_pylist() == ["x/part.txt:0", "x/part.txt:1"]


def test_rerun_redoes_a_shard_made_with_another_tokenizer(tmp_path, trained, gpt2_json):
    src = tmp_path / "in.txt"
    src.write_text("Hello world\nSecond line\n")
    out = tmp_path / "out"
    run_tokenize("--tokenizer", gpt2_json, "--input", src, "--output", out)
    gpt2_ids = pq.read_table(out / "in.parquet").column("token_ids").to_pylist()
    run_tokenize("--tokenizer", trained, "--input", src, "--output", out)
    ours = Tokenizer.from_file(str(trained))
    assert pq.read_table(out / "in.parquet").column("token_ids").to_pylist() == [
        ours.encode("Hello world"), ours.encode("Second line")] != gpt2_ids
    assert json.loads((out / "_SUCCESS").read_text())["tokenizer_sha256"] == ours.sha256


def test_cli_errors_are_one_line(tmp_path, trained):
    src = tmp_path / "in.txt"
    src.write_text("x\n")
    cases = [
        (["--tokenizer", tmp_path / "missing.json", "--input", src], "missing.json"),
        (["--tokenizer", trained, "--input", src, "--eos-token", "<eos>"], "<eos>"),
        (["--tokenizer", trained, "--input", tmp_path / "none*.txt"], "none"),
        (["--tokenizer", trained, "--input", src, "--keep-field", "n_tokens"], "n_tokens"),
        (["--tokenizer", trained, "--input", src, "--encode-threads", "0"], "--encode-threads"),
    ]
    for args, word in cases:
        result = subprocess.run([sys.executable, "-m", "pipelines.tokenize", *map(str, args), "--output",
                                 str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 2, result.stderr
        errors = [l for l in result.stderr.splitlines() if l.startswith("tokenbeam: error:")]
        assert len(errors) == 1 and word in errors[0] and "Traceback" not in result.stderr


def warnings_of(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("tokenbeam: warning:")]


def test_a_field_no_record_has_is_a_warning(tmp_path, capsys, sample, trained):
    """A misspelt --keep-field gives an all-null column and a misspelt --group-field one group (none):
    legal, but not what was meant."""
    run_tokenize("--tokenizer", trained, "--input", sample / "*.jsonl", "--output", tmp_path / "typo",
                 "--keep-field", "sourc", "--group-field", "langs")
    warned = warnings_of(capsys)
    assert any(w.startswith("tokenbeam: warning: --keep-field sourc: no record has this field") for w in warned), warned
    assert any("--group-field langs: no record has this field" in w and "(none)" in w for w in warned), warned
    first = json.loads(next(sample.glob("*.jsonl")).open(encoding="utf-8").readline())
    real = next(k for k in first if k not in ("id", "text"))
    run_tokenize("--tokenizer", trained, "--input", sample / "*.jsonl", "--output", tmp_path / "right",
                 "--keep-field", real, "--group-field", real)
    assert warnings_of(capsys) == []


@pytest.mark.parametrize("command", ["tokenize", "train", "evaluate"])
def test_most_records_rejected_is_a_warning_that_names_the_reason(command, tmp_path, capsys, trained):
    from pipelines import cli

    shard = tmp_path / "in.jsonl"
    shard.write_text("".join(json.dumps({"id": str(i), "text": ("long text " * 200 if i % 10 else f"short {i}")}) + "\n"
                             for i in range(50)))
    given = {"tokenize": ["--tokenizer", trained], "train": ["--vocab-size", 260, "--min-frequency", 1],
             "evaluate": ["--tokenizer", trained]}[command]
    code = cli.main([str(a) for a in (command, *given, "--input", shard, "--output", tmp_path / "o",
                                      "--max-record-bytes", "1K")])
    assert code == 0
    (warned,) = warnings_of(capsys)
    assert "45 of 50 records (90.0%) were rejected: 45 record_too_large (is --max-record-bytes right?)" in warned


def test_repeated_ids_are_counted_exactly_across_shards_and_reruns(tmp_path, capsys, trained):
    """Ten records with one id, and one id in two shards: 12 records share 2 ids, counted over the
    whole dataset (not per shard), on a fresh run and on a rerun that reuses every shard."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text("".join(json.dumps({"id": "same" if i < 10 else f"a{i}", "text": f"text {i}"}) + "\n"
                                            for i in range(30)))
    (folder / "b.jsonl").write_text("".join(json.dumps({"id": "a20" if i < 2 else f"b{i}", "text": f"more {i}"}) + "\n"
                                            for i in range(5)))
    out = tmp_path / "o"
    for _ in range(2):
        run_tokenize("--tokenizer", trained, "--input", folder / "*.jsonl", "--output", out)
        (warned,) = warnings_of(capsys)
        assert "13 records share 2 id(s) (--id-field id)" in warned, warned
        assert json.loads((out / "_SUCCESS").read_text())["repeated_ids"] == {"records": 13, "ids": 2}
    (folder / "b.jsonl").write_text("".join(json.dumps({"id": f"b{i}", "text": f"more {i}"}) + "\n" for i in range(5)))
    run_tokenize("--tokenizer", trained, "--input", folder / "*.jsonl", "--output", out)
    (warned,) = warnings_of(capsys)
    assert "10 records share 1 id(s)" in warned

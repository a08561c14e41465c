"""`tokenbeam tokenize --dropout P --seed S`: each record's ids are `Tokenizer.encode(text, dropout=P,
seed=S, record_id=its id)`, byte-identical whatever the runner, worker count and input order;
stats.json says so; a rerun with another P or S redoes every shard; P = 0 is the deterministic run;
drift, --baseline and `tokenbeam stats` refuse to mix dropout and its absence."""
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from bpe_ops import Tokenizer
from pipelines.monitoring import drift_judging
from pipelines import stats_cmd
from tests.conftest import ROOT
from tests.system.test_determinism import stats_without_timing
from tests.pipelines.test_tokenize_pipeline import read_rows, run_tokenize, trained  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow


def parquet_bytes(out):
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.parquet"))}


@pytest.fixture(scope="module")
def inputs(sample):
    return [sample / "sample-000-of-002.jsonl", sample / "sample-001-of-002.jsonl"]


def flags(inputs):
    return sum((["--input", i] for i in inputs), [])


@pytest.fixture(scope="module")
def runs(tmp_path_factory, inputs, trained):  # noqa: F811
    """The sample with --dropout 0.1 --seed 7 in_memory, and again multi_processing x2 with the inputs
    reversed; and without dropout."""
    out = {}
    for name, extra, order in (("in_memory", ["--direct_running_mode", "in_memory"], inputs),
                               ("multi_processing", ["--direct_running_mode", "multi_processing",
                                                     "--direct_num_workers", "2"], inputs[::-1]),
                               ("deterministic", [], inputs)):
        folder = tmp_path_factory.mktemp(name)
        dropout = [] if name == "deterministic" else ["--dropout", "0.1", "--seed", "7"]
        stats = run_tokenize("--tokenizer", trained, "--output", folder, *flags(order), *dropout, *extra)
        out[name] = (folder, stats)
    return out


def test_same_bytes_on_every_runner_and_input_order(runs):
    (a, _), (b, _) = runs["in_memory"], runs["multi_processing"]
    assert len(parquet_bytes(a)) == 2 and parquet_bytes(a) == parquet_bytes(b)
    assert stats_without_timing(a) == stats_without_timing(b)


def test_rows_are_the_library_encoding_of_each_record(runs, trained, inputs):  # noqa: F811
    tok = Tokenizer.from_file(str(trained))
    texts = {json.loads(line)["id"]: json.loads(line)["text"] for i in inputs for line in i.open(encoding="utf-8")}
    folder, stats = runs["in_memory"]
    rows = 0
    for table in read_rows(folder).values():
        for rid, ids in zip(table.column("id").to_pylist(), table.column("token_ids").to_pylist()):
            assert ids == tok.encode(texts[rid], dropout=0.1, seed=7, record_id=rid)
            assert tok.decode(ids) == texts[rid]
            rows += 1
    assert rows == len(texts) == stats["records"]
    # Dropout segments finer: more tokens for the same bytes.
    deterministic = runs["deterministic"][1]
    assert stats["bytes"] == deterministic["bytes"] and stats["tokens"] > deterministic["tokens"]


def test_stats_json_says_dropout_was_on(runs):
    assert runs["in_memory"][1]["dropout"] == {"p": 0.1, "seed": 7}
    assert "dropout" not in runs["deterministic"][1]


def test_rerun_with_another_seed_or_p_redoes_every_shard(tmp_path, runs, inputs, trained):  # noqa: F811
    folder = tmp_path / "out"
    base = ["--tokenizer", trained, "--output", folder, *flags(inputs)]
    run_tokenize(*base, "--dropout", "0.1", "--seed", "7")
    first = parquet_bytes(folder)
    assert first == parquet_bytes(runs["in_memory"][0])
    written = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.parquet")}
    run_tokenize(*base, "--dropout", "0.1", "--seed", "7")
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.parquet")} == written    # reused, not rewritten
    assert parquet_bytes(folder) == first
    for other in (["--dropout", "0.1", "--seed", "8"], ["--dropout", "0.2", "--seed", "7"]):
        stats = run_tokenize(*base, *other)
        assert all(parquet_bytes(folder)[n] != first[n] for n in first)
        assert stats["dropout"] == {"p": float(other[1]), "seed": int(other[3])}


def test_p0_is_the_deterministic_run_and_p1_gives_bytes(tmp_path, runs, inputs, trained):  # noqa: F811
    stats = run_tokenize("--tokenizer", trained, "--output", tmp_path / "p0", *flags(inputs), "--dropout", "0")
    assert parquet_bytes(tmp_path / "p0") == parquet_bytes(runs["deterministic"][0]) and "dropout" not in stats
    stats = run_tokenize("--tokenizer", trained, "--output", tmp_path / "p1", *flags(inputs), "--dropout", "1")
    for table in read_rows(tmp_path / "p1").values():
        assert table.column("n_tokens").to_pylist() == table.column("n_bytes").to_pylist()
    assert stats["tokens"] == stats["bytes"] and stats["dropout"] == {"p": 1.0, "seed": 0}


def test_drift_refuses_dropout_against_none_but_takes_another_seed(tmp_path, runs, inputs, trained):  # noqa: F811
    dropout, plain = runs["in_memory"][0] / "stats.json", runs["deterministic"][0] / "stats.json"
    with pytest.raises(ValueError, match="with BPE-dropout p=0.1 .* not a drift question"):
        drift_judging.compare(json.loads(plain.read_text()), json.loads(dropout.read_text()))
    reseeded = tmp_path / "seed8"
    run_tokenize("--tokenizer", trained, "--output", reseeded, *flags(inputs), "--dropout", "0.1", "--seed", "8")
    report = drift_judging.compare(json.loads(dropout.read_text()), json.loads((reseeded / "stats.json").read_text()))
    # Another seed is another draw from the same distribution: judged, and no drift.
    assert report.judged and not report.drift, report.flagged
    # `tokenbeam stats` rebuilds the same stats.json from the Parquet, dropout included; it refuses a mix.
    rebuilt = tmp_path / "rebuilt.json"
    assert stats_cmd.main([str(runs["in_memory"][0] / "*.parquet"), "--tokenizer", str(trained),
                           "--output", str(rebuilt)]) == 0
    assert json.loads(rebuilt.read_text())["dropout"] == {"p": 0.1, "seed": 7}
    mixed = [str(runs["in_memory"][0] / "sample-000-of-002.parquet"),
             str(runs["deterministic"][0] / "sample-001-of-002.parquet")]
    assert stats_cmd.main([*mixed, "--tokenizer", str(trained), "--output", str(tmp_path / "mixed.json")]) == 2


def test_usage_errors_are_one_line(tmp_path, runs, trained):  # noqa: F811
    src = tmp_path / "in.txt"
    src.write_text("some text\n")
    plain = runs["deterministic"][0] / "stats.json"
    cases = [
        (["tokenize", "--input", src, "--dropout", "1.5"], "--dropout must be a probability between 0 and 1"),
        (["tokenize", "--input", src, "--dropout", "-0.1"], "--dropout must be a probability between 0 and 1"),
        (["tokenize", "--input", src, "--dropout", "often"], "--dropout must be a probability between 0 and 1"),
        (["tokenize", "--input", src, "--seed", "3"], "--seed is the seed of BPE-dropout: it needs --dropout P"),
        (["tokenize", "--input", src, "--dropout", "0.1", "--seed", "-2"], "--seed must be a non-negative integer"),
        (["tokenize", "--input", src, "--dropout", "0.1", "--baseline", plain], "not a drift question"),
        (["drift", plain, runs["in_memory"][0] / "stats.json"], "not a drift question"),
        (["cli", "encode", "--tokenizer", trained, "--seed", "1", "x"], "--seed is the seed of BPE-dropout"),
        (["cli", "encode", "--tokenizer", trained, "--dropout", "2", "x"], "--dropout must be a probability"),
    ]
    for args, message in cases:
        module, *rest = args
        if module == "tokenize":
            rest += ["--tokenizer", trained, "--output", tmp_path / "out"]
        result = subprocess.run([sys.executable, "-m", f"pipelines.{module}", *map(str, rest)], cwd=ROOT,
                                capture_output=True, text=True, timeout=300)
        errors = [line for line in result.stderr.splitlines() if line.startswith("tokenbeam: error:")]
        assert result.returncode == 2 and len(errors) == 1 and message in errors[0], (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_encode_command_shows_a_dropout_segmentation(trained):  # noqa: F811
    def pieces(*flags):
        result = subprocess.run([sys.executable, "-m", "pipelines.cli", "encode", "--tokenizer", str(trained), *flags,
                                 "Unbelievable tokenization"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()
    assert pieces("--dropout", "1")[0] == "25 tokens, 25 bytes"
    assert pieces("--dropout", "0.5", "--seed", "4") == pieces("--dropout", "0.5", "--seed", "4")
    tok = Tokenizer.from_file(str(trained))
    ids = tok.encode("Unbelievable tokenization", dropout=0.5, seed=4)
    assert pieces("--dropout", "0.5", "--seed", "4")[1:] == [f"{i}\t{tok.decode_bytes([i])!r}" for i in ids]

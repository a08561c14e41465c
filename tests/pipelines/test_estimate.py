"""`tokenbeam estimate` (pipelines/estimate.py, bpe_ops/sample_estimate.py): a dataset's tokens from a
sample, whose 95% interval holds the exact count that tokenize writes in nearly every seeded run, read
from a few percent of the bytes."""
import doctest
import gzip
import json
import random
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import bpe_ops.sample_estimate
from bpe_ops import Tokenizer
from bpe_ops.stats import count_words, utf8_length
from pipelines import estimate
from pipelines.datasets.shards import expand
from pipelines.datasets.byte_windows import record_at
from pipelines.datasets.sources import Record, SourceOptions, read_shard

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gpt2(gpt2_files, tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpt2")
    Tokenizer.from_gpt2_files(*gpt2_files).save(folder)
    return Tokenizer.from_file(folder / "tokenizer.json"), folder / "tokenizer.json"


def exact(tok, shards, options):
    """Tokens, words, text bytes of every record the shards' reader gives: what tokenize writes."""
    tokens = words = size = 0
    for shard in shards:
        for item in read_shard(shard, options):
            if isinstance(item, Record):
                tokens += len(tok.encode(item.text))
                words += count_words(item.text)
                size += utf8_length(item.text)
    return tokens, words, size


def run_estimate(tok, shards, options, seed, share=0.005):
    sampler = estimate.Sampler(tok, options, random.Random(seed))
    plain = [s for s in shards if estimate_by_offset(s, options)]
    through = [s for s in shards if not estimate_by_offset(s, options)]
    strata = ([sampler.by_offset(plain, share, [])] if plain else []) + \
             ([sampler.read_through(through, share, [])] if through else [])
    return estimate.Estimate(strata), strata


def estimate_by_offset(shard, options):
    from pipelines.datasets.byte_windows import offset_readable
    return offset_readable(shard, options)


@pytest.mark.parametrize("corpus", ["en", "code", "multi"])
def test_the_interval_holds_the_exact_count_in_nearly_every_seeded_run(corpora, gpt2, corpus):
    # Measured (1000 windows of 128 bytes, one per stratum): tokens covered in 100 / 96 / 98 of 100 runs
    # on en / code / multi, words 98 / 99 / 97, bytes per token 98 / 96 / 100, tokens per word 98 / 99 /
    # 98; read 0.5% / 1.7% / 3.4%. Whole lines (30 drawn) covered 88-92 on code and read 4-13%.
    tok, _ = gpt2
    options = SourceOptions()
    shards = expand([str(corpora / corpus / "*.jsonl")], options)
    tokens, words, size = exact(tok, shards, options)
    covered = {"tokens": 0, "words": 0, "bytes per token": 0, "tokens per word": 0}
    read = []
    for seed in range(100):
        est, strata = run_estimate(tok, shards, options, seed)
        covered["tokens"] += est.total("tokens").low <= tokens <= est.total("tokens").high
        covered["words"] += est.total("words").low <= words <= est.total("words").high
        bpt, tpw = est.ratio("bytes", "tokens"), est.ratio("tokens", "words")
        covered["bytes per token"] += bpt.low <= size / tokens <= bpt.high
        covered["tokens per word"] += tpw.low <= tokens / words <= tpw.high
        read.append(sum(s.bytes_read for s in strata) / sum(s.size for s in shards))
    assert min(covered.values()) >= 95, covered
    assert max(read) <= 0.04


def test_the_exact_count_is_what_tokenize_writes(sample, gpt2, tmp_path):
    tok, path = gpt2
    run = subprocess.run([sys.executable, "-m", "pipelines.cli", "tokenize", "--tokenizer", str(path),
                          "--input", str(sample / "*.jsonl"), "--output", str(tmp_path / "out")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    options = SourceOptions()
    tokens, words, _ = exact(tok, expand([str(sample / "*.jsonl")], options), options)
    assert stats["tokens"] == tokens and stats["words"] == words


def test_files_read_through_with_the_whole_sample_give_the_exact_figures(corpora, gpt2, tmp_path):
    tok, _ = gpt2
    rows = [json.loads(line) for shard in sorted((corpora / "tiny").glob("*.jsonl")) for line in shard.open()]
    with gzip.open(tmp_path / "a.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows[:20])
    pq.write_table(pa.table({"id": [r["id"] for r in rows[20:]], "text": [r["text"] for r in rows[20:]]}),
                   tmp_path / "b.parquet")
    options = SourceOptions()
    shards = expand([str(tmp_path / "*")], options)
    est, strata = run_estimate(tok, shards, options, seed=1, share=1.0)
    tokens = sum(len(tok.encode(r["text"])) for r in rows)
    assert est.total("tokens").value == pytest.approx(tokens) and est.total("records").value == pytest.approx(len(rows))
    assert est.total("tokens").low == pytest.approx(tokens)          # every record kept: no sampling error


def test_few_records_read_through_are_sampled_without_replacement_and_covered(corpora, gpt2, tmp_path):
    tok, _ = gpt2
    rows = [json.loads(line) for shard in sorted((corpora / "tiny").glob("*.jsonl")) for line in shard.open()]
    with gzip.open(tmp_path / "a.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    options = SourceOptions()
    shards = expand([str(tmp_path / "*")], options)
    tokens = sum(len(tok.encode(r["text"])) for r in rows)
    covered = 0
    for seed in range(100):
        est, strata = run_estimate(tok, shards, options, seed)      # 0.5% of 40 records keeps none by chance
        assert strata[0].population == len(rows) and len(strata[0].draws) == estimate.MIN_RECORDS
        covered += est.total("tokens").low <= tokens <= est.total("tokens").high
    assert covered >= 90


def test_a_line_is_found_from_any_of_its_bytes(tmp_path):
    lines = [b'{"id": "a", "text": "first"}', b"", b'{"id": "b", "text": "second line"}\r', b"   ",
             b'{"id": "c", "text": 3}', b'{"id": "d", "text": "no newline at the end"}']
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines))
    options = SourceOptions()
    (shard,) = expand([str(path)], options)
    expected = {"first": None, "second line": None, "no newline at the end": None}
    starts, at = [], 0
    data = path.read_bytes()
    for line in data.split(b"\n"):
        starts.append((at, at + len(line) + 1))
        at += len(line) + 1
    with open(path, "rb") as f:
        for k, (begin, end) in enumerate(starts):
            for offset in range(begin, min(end, len(data))):
                length, item = record_at(f, shard, options, offset)
                assert length == min(end, len(data)) - begin
                if k in (1, 3):
                    assert item is None                               # a blank line is no record
                elif k == 4:
                    assert not isinstance(item, Record)                # "text" is no string: rejected
                else:
                    assert isinstance(item, Record) and item.text in expected


def cli(*args):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "estimate", *map(str, args)],
                          capture_output=True, text=True)


def test_the_command_prints_the_figures_and_writes_them_as_json(corpora, gpt2, tmp_path):
    _, path = gpt2
    run = cli("--tokenizer", path, "--input", corpora / "multi" / "*.jsonl", "--seed", 7, "--output", tmp_path / "e.json")
    assert run.returncode == 0, run.stderr
    assert "tokens" in run.stdout and "bytes per token" in run.stdout and "95%" in run.stdout
    report = json.loads((tmp_path / "e.json").read_text())
    tokens = report["totals"]["tokens"]
    assert tokens["low"] < tokens["value"] < tokens["high"] and report["draws"] >= estimate.MIN_DRAWS
    assert report["bytes_read"] < report["input_bytes"] / 5


def test_mistakes_end_in_one_line(corpora, gpt2, tmp_path):
    _, path = gpt2
    for args, code, words in [
        (["--input", corpora / "tiny" / "*.jsonl", "--sample", "0"], 2, "above 0"),
        (["--input", corpora / "tiny" / "*.jsonl", "--sample", "150%"], 2, "at most 100%"),
        (["--input", corpora / "tiny" / "*.jsonl", "--text-field", "body"], 2, "--text-field"),
        (["--input", tmp_path / "none" / "*.jsonl"], 2, "matched no files"),
        (["--input", corpora / "tiny" / "*.jsonl", "--smaple", "1%"], 2, "did you mean --sample"),
    ]:
        run = cli("--tokenizer", path, *args)
        assert run.returncode == code and len(run.stderr.strip().splitlines()) == 1 and words in run.stderr, run.stderr


def test_an_unreadable_input_fails_the_estimate_unless_allowed(corpora, gpt2, tmp_path):
    _, path = gpt2
    (tmp_path / "good.jsonl").write_bytes((corpora / "tiny" / "tiny-000-of-002.jsonl").read_bytes())
    (tmp_path / "bad.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    run = cli("--tokenizer", path, "--input", tmp_path / "*")
    assert run.returncode == 3 and "bad.jsonl.gz" in run.stderr and "Traceback" not in run.stderr
    run = cli("--tokenizer", path, "--input", tmp_path / "*", "--allow-shard-errors")
    assert run.returncode == 0 and "warning" in run.stderr and "tokens" in run.stdout


def test_the_worked_examples_in_the_estimator_hold():
    failed, attempted = doctest.testmod(bpe_ops.sample_estimate)
    assert attempted >= 5 and failed == 0


class PunctuationTokenizer:
    """A stand-in tokenizer: a token per run of word characters and per other non-space character."""

    @staticmethod
    def encode(text):
        return re.findall(r"\w+|[^\w\s]", text)


def test_windows_cover_a_rare_dense_kind_of_line_that_whole_lines_missed(tmp_path, monkeypatch):
    # 5% of the bytes are in 5 long lines of escaped punctuation holding ~20% of the tokens. Thirty
    # whole lines drawn by offset missed all five in a fifth of the runs, with a narrow interval
    # below the truth: the old estimator covered 88 of these 100 seeds. 300 windows, one per stratum
    # (fewer than the command's minimum, to keep the test short), hold ~15 windows of them.
    monkeypatch.setattr(estimate, "MIN_DRAWS", 300)
    rng = random.Random(5)
    vocabulary = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    texts = [" ".join(rng.choice(vocabulary) for _ in range(rng.randrange(150, 350))) for _ in range(600)]
    texts += ['{"k": [1, 2], "v": (3, 4)};\n' * 350 for _ in range(5)]
    rng.shuffle(texts)
    path = tmp_path / "x.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts)))
    tok = PunctuationTokenizer()
    options = SourceOptions()
    shards = expand([str(path)], options)
    tokens = sum(len(tok.encode(t)) for t in texts)
    words = sum(count_words(t) for t in texts)
    covered = {"tokens": 0, "tokens per word": 0}
    for seed in range(100):
        est, _ = run_estimate(tok, shards, options, seed)
        covered["tokens"] += est.total("tokens").low <= tokens <= est.total("tokens").high
        tpw = est.ratio("tokens", "words")
        covered["tokens per word"] += tpw.low <= tokens / words <= tpw.high
    assert min(covered.values()) >= 95, covered

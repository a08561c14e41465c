"""The Beam training pipeline: determinism across runners, exactness against train_bpe, accounting,
clear errors. Runs on the in-repo `sample/` (two shards, ~320 KB of real English) so each run takes a
few seconds and needs nothing from ../shared."""
import json
import subprocess
import sys

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from bpe_ops import pretokenize, train_bpe
from bpe_ops.count_table import CountTable, pack_counts, unpack_counts
from pipelines import train
from pipelines.steps import train_count
from pipelines.core.errors import UserError
from pipelines.datasets.sources import SourceOptions, expand_inputs
from schemas.reports import TRAIN_REPORT_KEYS
from tests.conftest import ROOT, read_jsonl_texts
from schemas.accounts import account_of

pytestmark = pytest.mark.slow


def run_train(*argv):
    return train.run([str(a) for a in argv])


def test_count_shard_pretokens_dofn_counts_exactly(tmp_path):
    shard_file = tmp_path / "a.jsonl"
    texts = ["the cat sat on the mat", "the end", "a <|endoftext|> b"]
    shard_file.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts) + "not json\n")
    shards = expand_inputs([str(shard_file)])
    expected = pretokenize.count_pretokens(texts, "gpt2", ["<|endoftext|>"])
    with TestPipeline(runner=FnApiRunner()) as p:
        counted = (p | beam.Create(shards)
                   | beam.ParDo(train_count.CountShardPretokens(SourceOptions(), "gpt2", ("<|endoftext|>",),
                                                                str(tmp_path)))
                   .with_outputs(train_count.CountShardPretokens.TOTALS, main="counts"))
        summed = (counted.counts | beam.CombinePerKey(train_count.SumCounts())
                  | beam.FlatMap(lambda kv: [(kv[0], p, n) for p, n in unpack_counts(kv[1].packed()).items()]))
        assert_that(summed, equal_to([(train_count.count_bucket(p), p, n) for p, n in expected.items()]),
                    label="counts")
        totals = counted[train_count.CountShardPretokens.TOTALS] | beam.CombineGlobally(train_count.MergeTotals())
        assert_that(totals | beam.Map(lambda t: (t["account"].shards_read, t["account"].records_read,
                                                 t["account"].records_written, t["account"].records_rejected,
                                                 t["pretokens"])),
                    equal_to([(1, 4, 3, 1, sum(expected.values()))]), label="totals")
    rejected = (tmp_path / "rejected" / "a.jsonl").read_text().splitlines()
    assert len(rejected) == 1 and json.loads(rejected[0])["reason"] == "bad_json"


def test_one_counter_per_bundle_counts_many_shards_and_flushes_when_full(tmp_path, monkeypatch):
    """Shards of one bundle share the counter (drained once, when the bundle ends); a counter that
    fills up mid-bundle is drained early, and the sums are the same either way."""
    texts = {f"s{k}.jsonl": [f"shard {k} says hello {'x' * k}", "the same words again", f"{k} {k * 7}"]
             for k in range(5)}
    for name, rows in texts.items():
        (tmp_path / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    shards = expand_inputs([str(tmp_path / "*.jsonl")])
    expected = pretokenize.count_pretokens([t for rows in texts.values() for t in rows], "gpt4", [])
    for flush in (train_count.LOCAL_COUNTER_FLUSH, 3):
        monkeypatch.setattr(train_count, "LOCAL_COUNTER_FLUSH", flush)
        with TestPipeline(runner=FnApiRunner()) as p:
            counted = (p | beam.Create(shards)
                       | beam.ParDo(train_count.CountShardPretokens(SourceOptions(), "gpt4", (), str(tmp_path),
                                                                    threads=2))
                       .with_outputs(train_count.CountShardPretokens.TOTALS, main="counts"))
            summed = (counted.counts | beam.CombinePerKey(train_count.SumCounts())
                      | beam.FlatMap(lambda kv: list(unpack_counts(kv[1].packed()).items())))
            assert_that(summed, equal_to(list(expected.items())), label="counts")
            totals = counted[train_count.CountShardPretokens.TOTALS] | beam.CombineGlobally(train_count.MergeTotals())
            assert_that(totals | beam.Map(lambda t: (t["account"].shards_read, t["account"].records_written,
                                                     t["pretokens"])),
                        equal_to([(5, 15, sum(expected.values()))]), label="totals")


def test_a_bucket_past_2_gib_of_pre_tokens_is_written_with_64_bit_offsets(tmp_path):
    """Arrow's binary arrays stop at 2 GiB; a bucket that holds more (only a huge corpus gets there,
    so the table here says it does) is written as large_binary and reads back the same."""
    counts = {b"the": 5, b" cat": 2, b"\xff": 1, b"zz": 9}

    class HugeTable(CountTable):
        def columns(self, min_count=1, large=False):
            if not large:
                raise OverflowError("the keys pass 2 GiB")
            return super().columns(min_count, large)

    counts_dir = tmp_path / "counts"
    [totals] = list(train_count.WriteCountsBucket(str(counts_dir), 2).process((3, HugeTable(pack_counts(counts)))))
    written = pq.ParquetFile(counts_dir / "part-00003-of-00016.parquet").read()
    assert written.schema.field("pretoken").type == pa.large_binary()
    assert train.load_counts(str(counts_dir)) == {b"the": 5, b" cat": 2, b"zz": 9}
    assert (totals["unique_pretokens_before_pruning"], totals["unique_pretokens_after_pruning"]) == (4, 3)


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory, sample):
    """The same training three ways: in_memory with 3 counting threads, multi_processing x2 workers
    with 1, shuffled input order."""
    shards = sorted(str(p) for p in sample.glob("*.jsonl"))
    base = ["--vocab-size", 700, "--pattern", "gpt4"]
    out = {}
    out["in_memory"] = tmp_path_factory.mktemp("in_memory")
    run_train("--input", shards[0], "--input", shards[1], "--output", out["in_memory"], *base,
              "--direct_running_mode", "in_memory", "--count-threads", 3)
    out["multi_processing"] = tmp_path_factory.mktemp("multi")
    run_train("--input", str(sample / "*.jsonl"), "--output", out["multi_processing"], *base,
              "--direct_running_mode", "multi_processing", "--direct_num_workers", 2, "--count-threads", 1)
    out["shuffled"] = tmp_path_factory.mktemp("shuffled")
    run_train("--input", shards[1], "--input", shards[0], "--output", out["shuffled"], *base)
    return out


def test_tokenizer_json_is_byte_identical_across_runners_and_shard_order(sample_runs):
    files = {name: (d / "tokenizer.json").read_bytes() for name, d in sample_runs.items()}
    assert files["in_memory"] == files["multi_processing"] == files["shuffled"]
    assert len(json.loads(files["in_memory"])["model"]["merges"]) == 700 - 256


def test_pipeline_merges_equal_train_bpe_on_the_same_records(sample_runs, sample):
    from bpe_ops import Tokenizer
    texts = read_jsonl_texts(sample)
    direct = train_bpe(texts, vocab_size=700, pattern="gpt4")
    assert Tokenizer.from_file(sample_runs["in_memory"] / "tokenizer.json").merges == direct.merges


def test_train_report_accounts_for_every_record(sample_runs, sample):
    report = json.loads((sample_runs["in_memory"] / "train_report.json").read_text())
    assert set(TRAIN_REPORT_KEYS) <= set(report)
    n_docs = len(read_jsonl_texts(sample))
    account = account_of(report)
    assert account.records_read == account.records_written + account.records_rejected == n_docs
    assert report["bytes"] == sum(len(t.encode()) for t in read_jsonl_texts(sample))
    assert report["merges"] == 700 - 256 and report["stop_reason"] == "vocab_size"
    curve = report["compression_curve"]
    assert curve[0]["tokens_per_byte"] == pytest.approx(1.0)
    assert all(a["tokens_per_byte"] >= b["tokens_per_byte"] for a, b in zip(curve, curve[1:]))
    assert (sample_runs["in_memory"] / "tokenizer.tiktoken").exists()
    # Each process's own peak: the counting process holds Beam (over 100 MB just imported).
    peaks = report["peak_rss_mb_by_process"]
    assert set(peaks) == {"launcher", "counting"} and peaks["counting"] > 100
    assert report["peak_rss_mb"] == max(peaks.values())
    assert (sample_runs["in_memory"] / "compression_curve.png").stat().st_size > 1000


def test_counts_resume_trains_a_new_vocabulary_without_the_corpus(sample_runs, tmp_path, sample):
    out = tmp_path / "resumed"
    run_train("--counts", sample_runs["in_memory"], "--output", out, "--vocab-size", 900)
    texts = read_jsonl_texts(sample)
    from bpe_ops import Tokenizer
    assert Tokenizer.from_file(out / "tokenizer.json").merges == train_bpe(texts, vocab_size=900).merges


def test_text_file_with_special_tokens_matches_train_bpe(tmp_path, sample):
    texts = read_jsonl_texts(sample)
    joined = "<|endoftext|>".join(texts)
    (tmp_path / "corpus.txt").write_text(joined, encoding="utf-8")
    out = tmp_path / "out"
    run_train("--input", tmp_path / "corpus.txt", "--output", out, "--vocab-size", 600, "--text-unit", "file",
              "--special-token", "<|endoftext|>", "--pattern", "gpt2")
    from bpe_ops import Tokenizer
    ours = Tokenizer.from_file(out / "tokenizer.json")
    direct = train_bpe([joined], vocab_size=600, pattern="gpt2", special_tokens=["<|endoftext|>"])
    assert ours.merges == direct.merges
    assert not any(b"<|endoftext|>" in a + b for a, b in ours.merges)
    assert ours.special_tokens == {"<|endoftext|>": 599}


def test_min_count_prunes_rare_pretokens(tmp_path, sample):
    out = tmp_path / "pruned"
    report = run_train("--input", sample / "*.jsonl", "--output", out, "--vocab-size", 400,
                       "--min-count", 3)
    counts = train.load_counts(str(out / "counts"))
    assert min(counts.values()) >= 3
    assert report["unique_pretokens_after_pruning"] == len(counts) < report["unique_pretokens_before_pruning"]
    full = pretokenize.count_pretokens(read_jsonl_texts(sample), "gpt4")
    assert counts == {k: v for k, v in full.items() if v >= 3}


def cli(*argv, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pipelines.train", *map(str, argv)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case", ["missing_input", "empty_corpus", "vocab_too_small", "multi_threading",
                                  "bad_pattern", "no_threads", "unknown_runner", "bad_beam_value", "memory_url"])
def test_bad_input_is_one_clear_line_not_a_traceback(tmp_path, case):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"text": "hello world"}) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    args = {
        "missing_input": ["--input", tmp_path / "nope*.jsonl", "--vocab-size", 300],
        "empty_corpus": ["--input", empty, "--vocab-size", 300],
        "vocab_too_small": ["--input", good, "--vocab-size", 100],
        "multi_threading": ["--input", good, "--vocab-size", 300, "--direct_running_mode", "multi_threading"],
        "bad_pattern": ["--input", good, "--vocab-size", 300, "--pattern", "(unclosed"],
        "no_threads": ["--input", good, "--vocab-size", 300, "--count-threads", 0],
        "unknown_runner": ["--input", good, "--vocab-size", 300, "--runner", "NoSuchRunner"],
        "bad_beam_value": ["--input", good, "--vocab-size", 300, "--direct_num_workers", "two"],
        "memory_url": ["--input", "memory://corpus/*.jsonl", "--vocab-size", 300],
    }[case]
    result = cli(*args, "--output", tmp_path / "out")
    assert result.returncode != 0
    lines = [l for l in result.stderr.splitlines() if l.startswith("tokenbeam: error:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    expected_word = {"missing_input": "nope", "empty_corpus": "nothing to train", "vocab_too_small": "too small",
                     "multi_threading": "multi_threading", "bad_pattern": "pattern",
                     "no_threads": "--count-threads", "unknown_runner": "NoSuchRunner",
                     "bad_beam_value": "--direct_num_workers", "memory_url": "memory://"}[case]
    assert expected_word in lines[0]


def test_the_launcher_never_imports_beam_and_passes_the_counting_errors_on(tmp_path, sample):
    """Counting runs in a process of its own: the launcher (which holds the merge loop's tables) never
    imports Beam, and the counting process's one-line errors reach a caller of `train.run` as the
    same UserError, not as an exit code."""
    n_records = len(read_jsonl_texts(sample))
    code = ("import sys; from pipelines import train; report = train.run(sys.argv[1:]); "
            f"assert report['account']['records']['read'] == {n_records}, report['account']; "
            "assert 'apache_beam' not in sys.modules, 'the launcher imported Beam'")
    result = subprocess.run([sys.executable, "-c", code, "--input", str(sample / "*.jsonl"),
                             "--output", str(tmp_path / "out"), "--vocab-size", "300"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    with pytest.raises(UserError, match="nope.*matched no files"):
        train.run(["--input", str(tmp_path / "nope" / "*.jsonl"), "--output", str(tmp_path / "out2"),
                   "--vocab-size", "300"])


def test_launcher_starts_counting_before_heavy_imports():
    """Everything the launcher does before it starts the counting process (importing the command,
    parsing its flags) imports no pyarrow or fsspec: those imports take it half a second, which the
    counting process, importing Beam meanwhile, would wait for. They come after, beside Beam's."""
    code = ("import sys; from pipelines import train; from pipelines.core.command import build_parser; "
            "build_parser(train.COMMAND).parse_known_args(['--input', 'x', '--output', 'y', '--vocab-size', '300']); "
            "heavy = sorted(m for m in ('pyarrow', 'fsspec', 'apache_beam') if m in sys.modules); "
            "assert not heavy, heavy")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


# ---- text options: --normalize, --lowercase, --split-digits, --digit-group, --max-token-length -------

def tokenize_like_hf(tokenizer_json, corpora, out):
    """Tokenize corpora/tiny with the pipeline; assert every record's ids are Hugging Face's; return
    {record id: (raw text, decoded ids)}."""
    from tokenizers import Tokenizer as HFTokenizer

    from bpe_ops import Tokenizer
    from pipelines import tokenize
    tokenize.run(["--tokenizer", str(tokenizer_json), "--input", str(corpora / "tiny" / "*.jsonl"), "--output", str(out)])
    texts = {}
    for shard in sorted((corpora / "tiny").glob("*.jsonl")):
        for line in shard.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            texts[rec["id"]] = rec["text"]
    hf, ours, decoded = HFTokenizer.from_file(str(tokenizer_json)), Tokenizer.from_file(tokenizer_json), {}
    for part in sorted(out.glob("*.parquet")):
        table = pq.read_table(part)
        ids, token_ids = table.column("id").to_pylist(), table.column("token_ids").to_pylist()
        want = [e.ids for e in hf.encode_batch([texts[i] for i in ids], add_special_tokens=False)]
        assert token_ids == want, part.name
        decoded.update((i, (texts[i], ours.decode(t))) for i, t in zip(ids, token_ids))
    assert len(decoded) == len(texts) == 40
    return decoded


def test_text_options_count_train_and_tokenize_as_hugging_face_does(tmp_path, sample, corpora):
    from bpe_ops import Tokenizer, hf_components
    out = tmp_path / "tok"
    flags = ["--normalize", "nfkc", "--lowercase", "--split-digits", "--max-token-length", 10]
    report = run_train("--input", sample / "*.jsonl", "--output", out, "--vocab-size", 800, *flags)
    options = {"normalize": "NFKC", "lowercase": True, "split_digits": True, "digit_group": None}
    assert report["text_options"] == options and report["max_token_length"] == 10
    assert json.loads((out / "counts" / "_totals.json").read_text())["text_options"] == options
    assert report["normalizer"] == {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    assert report["tiktoken"]["written"] and not report["tiktoken"]["identical"]
    tok = Tokenizer.from_file(out / "tokenizer.json")
    direct = train_bpe(read_jsonl_texts(sample), vocab_size=800, max_token_length=10, **options)
    assert tok.merges == direct.merges and tok.normalizer_spec == direct.normalizer_spec
    assert max(len(a + b) for a, b in tok.merges) <= 9
    decoded = tokenize_like_hf(out / "tokenizer.json", corpora, tmp_path / "tokens")
    normalize = hf_components.normalizer(tok.normalizer_spec)
    assert all(normalize(raw) == back for raw, back in decoded.values())
    assert sum(raw != back for raw, back in decoded.values()) > 30        # lowercasing changed them
    # The same options reuse the counts; other ones are refused in one line.
    again = run_train("--counts", out, "--output", tmp_path / "again", "--vocab-size", 800, *flags)
    assert again["tokenizer_sha256"] == report["tokenizer_sha256"]
    same_rule = [f if f != "--split-digits" else "--digit-group 1" for f in map(str, flags)]
    again = run_train("--counts", out, "--output", tmp_path / "same", "--vocab-size", 800, *" ".join(same_rule).split())
    assert again["tokenizer_sha256"] == report["tokenizer_sha256"]
    result = cli("--counts", out, "--output", tmp_path / "other", "--vocab-size", 800, "--split-digits")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = [l for l in result.stderr.splitlines() if l.startswith("tokenbeam: error:")]
    assert "made with --normalize NFKC --lowercase --split-digits, not --split-digits" in line
    assert not (tmp_path / "other").exists()                  # refused before anything was written


def test_counts_made_before_text_options_are_counts_without_them(sample_runs, tmp_path):
    counts = tmp_path / "old" / "counts"
    counts.mkdir(parents=True)
    for f in (sample_runs["in_memory"] / "counts").iterdir():
        data = f.read_bytes()
        if f.name == "_totals.json":
            data = json.dumps({k: v for k, v in json.loads(data).items() if k != "text_options"}).encode()
        (counts / f.name).write_bytes(data)
    run_train("--counts", counts.parent, "--output", tmp_path / "a", "--vocab-size", 700)
    with pytest.raises(UserError, match="made with no text options, not --normalize NFC"):
        run_train("--counts", counts.parent, "--output", tmp_path / "b", "--vocab-size", 700, "--normalize", "NFC")


def test_digit_rule_on_a_custom_pattern_writes_no_rank_file(tmp_path, sample, corpora, capfd):
    out = tmp_path / "tok"
    report = run_train("--input", sample / "*.jsonl", "--output", out, "--vocab-size", 600,
                       "--pattern", r"\S+|\s+", "--digit-group", 2)
    assert not report["tiktoken"]["written"] and not (out / "tokenizer.tiktoken").exists()
    assert "tokenizer.tiktoken" not in json.loads((out / "_SUCCESS").read_text())["files"]
    assert "warning: no tokenizer.tiktoken" in capfd.readouterr().err
    assert [s["type"] for s in report["pre_tokenizer"]["pretokenizers"]] == ["Split", "Split", "ByteLevel"]
    decoded = tokenize_like_hf(out / "tokenizer.json", corpora, tmp_path / "tokens")
    assert all(raw == back for raw, back in decoded.values())


@pytest.mark.parametrize("flags, expected", [
    (["--split-digits", "--digit-group", "2"], "--split-digits and --digit-group exclude each other"),
    (["--digit-group", "0"], "--digit-group must be at least 1, got 0"),
    (["--digit-group", "two"], "--digit-group: invalid int value"),
    (["--max-token-length", "-3"], "--max-token-length must be at least 1, got -3"),
    (["--normalize", "NFX"], "--normalize: invalid choice: 'NFX'"),
    (["--pattern", "classic", "--lowercase"], "classic mode takes no normalization or digit rule"),
])
def test_bad_text_options_are_one_clear_line(tmp_path, flags, expected):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"text": "hello world 2024"}) + "\n")
    result = cli("--input", good, "--output", tmp_path / "out", "--vocab-size", 300, *flags)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = [l for l in result.stderr.splitlines() if l.startswith("tokenbeam: error:")]
    assert expected in line
    assert not (tmp_path / "out").exists()

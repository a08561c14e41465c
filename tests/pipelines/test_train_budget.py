"""`train --max-unique N`: the counting pipeline keeps exactly the N most frequent pre-tokens (ties at
the cut chosen by content), the same files on any runner and shard order, and reports exactly what
share of the occurrences it kept. Runs on ../shared/corpora/tiny (two shards, ~8,000 unique
pre-tokens) so each training takes a few seconds."""
import json
import random
import subprocess
import sys
import zlib

import pyarrow.parquet as pq
import pytest

from bpe_ops.count_table import budget_cut
from pipelines import train
from pipelines.steps.train_count import N_COUNT_BUCKETS, count_bucket
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

BUDGET = 1000
BASE = ["--vocab-size", 400, "--pattern", "gpt4"]


@pytest.fixture(scope="module")
def tiny(corpora):
    return corpora / "tiny"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny):
    """No budget; a budget of 1,000 in one process; the same with the shards reversed on two worker
    processes; a budget above the unique count."""
    shards = sorted(str(p) for p in tiny.glob("*.jsonl"))
    out = {name: tmp_path_factory.mktemp(name) for name in ("none", "budget", "budget_reversed", "above")}
    train.run([str(a) for a in ["--input", shards[0], "--input", shards[1], "--output", out["none"], *BASE]])
    train.run([str(a) for a in ["--input", shards[0], "--input", shards[1], "--output", out["budget"], *BASE,
                                "--max-unique", "1K", "--direct_running_mode", "in_memory"]])
    train.run([str(a) for a in ["--input", shards[1], "--input", shards[0], "--output", out["budget_reversed"],
                                *BASE, "--max-unique", BUDGET, "--direct_running_mode", "multi_processing",
                                "--direct_num_workers", 2, "--count-threads", 1]])
    train.run([str(a) for a in ["--input", shards[0], "--input", shards[1], "--output", out["above"], *BASE,
                                "--max-unique", "1M"]])
    return out


def count_files(run) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run / "counts").glob("*.parquet"))}


def report(run) -> dict:
    return json.loads((run / "train_report.json").read_text())


def test_the_budget_gives_the_same_files_whatever_the_workers_and_shard_order(runs):
    assert count_files(runs["budget"]) == count_files(runs["budget_reversed"])
    assert (runs["budget"] / "tokenizer.json").read_bytes() == (runs["budget_reversed"] / "tokenizer.json").read_bytes()
    assert (runs["budget"] / "tokenizer.json").read_bytes() != (runs["none"] / "tokenizer.json").read_bytes()


def test_exactly_the_budget_of_most_frequent_pre_tokens_is_kept_with_ties_chosen_by_content(runs):
    full = train.load_counts(str(runs["none"] / "counts"))
    kept = train.load_counts(str(runs["budget"] / "counts"))
    # The global order the budget promises: count (high first), then bucket, CRC-32 and bytes.
    ranked = sorted(full, key=lambda k: (-full[k], count_bucket(k), zlib.crc32(k), k))
    assert kept == {k: full[k] for k in ranked[:BUDGET]}
    threshold = full[ranked[BUDGET - 1]]
    assert full[ranked[BUDGET]] == threshold       # the cut falls inside a count: ties were broken
    budget = report(runs["budget"])["budget"]
    assert budget["threshold"] == threshold and 0 < budget["ties_kept"] < budget["ties_at_threshold"]
    assert budget["ties_at_threshold"] == sum(1 for n in full.values() if n == threshold)


def test_the_reported_share_of_occurrences_is_exact(runs):
    full = train.load_counts(str(runs["none"] / "counts"))
    kept = train.load_counts(str(runs["budget"] / "counts"))
    r = report(runs["budget"])
    budget = r["budget"]
    assert budget["pretokens"] == r["pretokens"] == sum(full.values())
    assert budget["pretokens_kept"] == sum(kept.values())
    assert budget["share_kept"] == sum(kept.values()) / sum(full.values())
    assert (budget["unique_before"], budget["unique_after"]) == (len(full), BUDGET)
    assert r["unique_pretokens_after_pruning"] == BUDGET and r["version"] == 3


def test_the_histogram_of_counts_is_exact(runs):
    full = train.load_counts(str(runs["none"] / "counts"))
    for name in ("none", "budget"):       # of every pre-token counted, with or without a budget
        written = json.loads((runs[name] / "counts" / "histogram.json").read_text())
        direct = {}
        for n in full.values():
            direct[n] = direct.get(n, 0) + 1
        assert written["histogram"] == sorted(map(list, direct.items()))
        assert (written["unique"], written["pretokens"]) == (len(full), sum(full.values()))


def test_a_budget_above_the_unique_count_changes_nothing(runs):
    assert count_files(runs["above"]) == count_files(runs["none"])
    assert (runs["above"] / "tokenizer.json").read_bytes() == (runs["none"] / "tokenizer.json").read_bytes()
    budget = report(runs["above"])["budget"]
    assert budget["share_kept"] == 1.0 and budget["unique_after"] == budget["unique_before"]
    assert report(runs["none"])["budget"] is None


def brute_force(histograms, n, min_count):
    """Every pre-token as (count, bucket, rank in the bucket's tie order); the n largest counts first."""
    items = [(count, bucket, i) for bucket, h in histograms.items() for count, m in h.items() if count >= min_count
             for i in range(m)]
    return sorted(items, key=lambda t: (-t[0], t[1], t[2]))[:n]


def test_budget_cut_keeps_the_n_most_frequent_on_random_histograms():
    rng = random.Random(7)
    for _ in range(300):
        histograms = {b: {rng.choice([1, 2, 3, 5, 8, 40]): rng.randint(0, 6) for _ in range(rng.randint(0, 4))}
                      for b in rng.sample(range(N_COUNT_BUCKETS), rng.randint(1, 5))}
        n, min_count = rng.randint(1, 60), rng.choice([1, 1, 2])
        cut = budget_cut(histograms, n, min_count)
        chosen = brute_force(histograms, n, min_count)
        kept = [(count, bucket, i) for bucket, h in histograms.items() for count, m in h.items()
                if count > cut["threshold"] or (count == cut["threshold"] and count >= min_count)
                for i in range(m if count > cut["threshold"] else cut["ties_kept_by_bucket"].get(bucket, m))]
        assert sorted(kept) == sorted(chosen)
        assert cut["unique_after"] == len(chosen) and cut["pretokens_kept"] == sum(c for c, _, _ in chosen)


def cli(*argv):
    return subprocess.run([sys.executable, "-m", "pipelines.train", *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("value, message", [("0", "must be at least 1"), ("lots", "not a count"),
                                            ("-3", "must not be negative")])
def test_a_bad_budget_is_one_clear_line(tmp_path, tiny, value, message):
    result = cli("--input", tiny / "*.jsonl", "--output", tmp_path / "out", *BASE, "--max-unique", value)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("tokenbeam: error: ") and message in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_budget_on_counts_written_earlier_keeps_what_counting_with_it_kept(runs, tmp_path):
    out = tmp_path / "from_counts"
    r = train.run([str(a) for a in ["--counts", runs["none"], "--output", out, *BASE, "--max-unique", BUDGET]])
    assert (out / "tokenizer.json").read_bytes() == (runs["budget"] / "tokenizer.json").read_bytes()
    assert r["budget"] == report(runs["budget"])["budget"]

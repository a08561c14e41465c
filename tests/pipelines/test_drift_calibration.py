"""Calibration of `tokenbeam drift`, small and fast: the full table is benchmarks/bench_drift_calibration.py.

A 2,048-id tokenizer is trained on one English shard, held-out English documents are encoded
once, and samples are summarised in-process the way the tokenize pipeline does it. Seeded,
so the counts below are the same on every run.
"""
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_drift_calibration as calib  # noqa: E402

from bpe_ops import train_bpe  # noqa: E402
from pipelines.monitoring import drift_judging  # noqa: E402
from schemas.stats import validate_stats  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(corpora):
    texts = [t for _, t in calib.read_docs(corpora / "en", slice(0, 1))]
    tok = train_bpe(texts, vocab_size=2048, pattern="gpt4")
    english_docs = calib.read_docs(corpora / "en", slice(4, 6))[:320]
    english = calib.Encoded(tok, english_docs)
    others = {"python code": calib.Encoded(tok, calib.read_docs(corpora / "code", slice(0, 1))[:120]),
              "upper-cased English": calib.Encoded(tok, [(i, t.upper()) for i, t in english_docs], "#shifted"),
              "thousands separators": calib.Encoded(
                  tok, [(i, calib.thousands_separators(t)) for i, t in english_docs], "#shifted")}
    return calib.Sampler(tok), english, others


@pytest.mark.parametrize("n, repeats", [(30, 30), (100, 20)])
def test_false_alarm_rate_on_same_distribution_splits(setup, n, repeats):
    sampler, english, _ = setup
    rate, fired = calib.false_alarm_rate(sampler, english, n, repeats, seed=n)
    # The level is 5% family-wise; a few seeded alarms in a few dozen comparisons are within it
    # (at 30 comparisons, 3 alarms has probability ~19% under an exact 5% rate).
    assert rate <= 0.1, (rate, fired)


@pytest.mark.parametrize("n, m", [(240, 30), (30, 240)])
def test_unequal_sizes_do_not_pass_noise_for_drift(setup, n, m):
    """A small side rarely holds the few long or odd records of a large one: its own variance alone
    would make noise look like drift (the pooled no-drift variance is what prevents it)."""
    sampler, english, _ = setup
    rate, fired = calib.false_alarm_rate(sampler, english, n, 30, seed=n + m, m=m)
    assert rate <= 0.1, (rate, fired)


@pytest.mark.parametrize("shift", ["python code", "upper-cased English"])
def test_constructed_shifts_are_flagged(setup, shift):
    sampler, english, others = setup
    rate, fired, reports = calib.detection_rate(sampler, shift, 60, 4, 7, english, others)
    assert rate == 1.0, fired
    assert all(r.section_flagged(drift_judging.TOKENIZATION) for r in reports)      # the tokenizer's fit moved


def test_thousands_separators_are_a_data_change_flagged_by_number_formats(setup):
    sampler, english, others = setup
    rate, fired, reports = calib.detection_rate(sampler, "thousands separators", 60, 4, 7, english, others)
    assert rate == 1.0, fired
    assert all(r.metric("psi_digit_runs").verdict == "significant" for r in reports)


def test_samples_are_valid_stats_json(setup):
    sampler, english, _ = setup
    a, b = calib.disjoint_split(english, 25, random.Random(0))
    for stats in (sampler.stats(a), sampler.stats(b)):
        validate_stats(stats)
        assert stats["moments"]["records"] == stats["records"] == 25

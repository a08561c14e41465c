"""Statistics per event-time window (pipelines/statistics/windows.py): parsing, the per-shard partial summaries,
the windowed merge under TestStream (on-time, early, late and empty windows) on the
BundleBasedDirectRunner, and a batch run on FnApiRunner that writes real window files."""
import json
import random
from array import array

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_stream import TestStream
from apache_beam.testing.util import assert_that, equal_to, equal_to_per_window
from apache_beam.transforms.window import IntervalWindow, TimestampedValue
from apache_beam.utils.timestamp import Timestamp

from bpe_ops.stats import Summary
from pipelines.statistics.summaries import MergeSummaries
from pipelines.statistics.windows import (
    MergePerWindow, WindowedSummaries, WindowStats, WriteWindowStats, format_utc,
    merged_windows, parse_duration, parse_timestamp, window_file_name,
)
from pipelines.monitoring.drift_judging import load_stats
from schemas.stats import TokenizerFacts, stats_json

VOCAB = 16
FACTS = TokenizerFacts(VOCAB, "0" * 64, {i: bytes([97 + i]) for i in range(VOCAB)})
T0 = 1796119200          # 2026-12-01T10:00:00Z


# ---------------------------------------------------------------------------- parsing

@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("1h", 3600), ("1d", 86400), ("2w", 1209600),
                                           ("1h30m", 5400), (" 1H ", 3600), ("0.5s", 0.5), ("1 h 30 m", 5400)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "90", "1x", "h", "-1h", "0s", "1.h", "1h-", "one hour"])
def test_parse_duration_refuses_in_one_line(text):
    with pytest.raises(ValueError) as info:
        parse_duration(text)
    message = str(info.value)
    assert "\n" not in message and repr(text) in message
    if text == "90":
        assert "add a unit" in message


@pytest.mark.parametrize("value, seconds", [
    ("2026-12-01T10:00:00Z", T0), ("2026-12-01T10:00:00z", T0), ("2026-12-01T11:00:00+01:00", T0),
    ("2026-12-01T10:00:00", T0), ("2026-12-01 10:00:00", T0), ("2026-12-01", T0 - 36000),
    ("2026-12-01T10:00:00.250Z", T0 + 0.25), (T0, T0), (float(T0), T0), (str(T0), T0), (f" {T0}.5 ", T0 + 0.5),
    ("1.7e9", 1.7e9), (0, 0.0), ("1969-07-20T20:17:40Z", -14182940),
])
def test_parse_timestamp(value, seconds):
    assert parse_timestamp(value) == seconds


@pytest.mark.parametrize("value", [None, True, False, "", "  ", "yesterday", "2026-13-01", "2026-12-01T25:00Z",
                                   float("nan"), float("inf"), "nan", "inf", T0 * 1000, str(T0 * 1000),
                                   "0001-01-01T00:00:00Z", "9999-12-31", -1e10, [T0], {"t": T0}])
def test_parse_timestamp_unusable_is_none(value):
    assert parse_timestamp(value) is None


def test_file_names_are_utc_starts():
    assert window_file_name(T0 * 10**6) == "2026-12-01T10:00:00Z.stats.json"
    assert format_utc(T0 * 10**6 + 250_000) == "2026-12-01T10:00:00.250000Z"
    assert format_utc(-10**6) == "1969-12-31T23:59:59Z"


# ---------------------------------------------------------------------------- per shard

def records(n, seed):
    """n records as columns: token counts, bytes, chars, words and id arrays (ids < VOCAB)."""
    rng = random.Random(seed)
    ids = [array("I", [rng.randrange(VOCAB) for _ in range(rng.randrange(0, 6))]) for _ in range(n)]
    n_tokens = [len(a) for a in ids]
    n_bytes = [t * 2 + rng.randrange(3) for t in n_tokens]
    return n_tokens, n_bytes, list(n_bytes), [max(1, b // 4) for b in n_bytes], ids


def test_windowed_summaries_split_a_batch_by_window_and_keep_untimed_apart():
    n_tokens, n_bytes, n_chars, n_words, ids = records(6, seed=1)
    stamps = [f"2026-12-01T10:{m:02d}:00Z" for m in (5, 59)] + [T0 + 3600, None, "soon", T0 + 7200 + 1]
    w = WindowedSummaries(VOCAB, parse_duration("1h"))
    w.add_batch(stamps, n_tokens, n_bytes, n_chars, n_words, ids)
    got = {format_utc(tv.timestamp.micros): tv.value for tv in w.elements()}
    assert list(got) == ["2026-12-01T10:00:00Z", "2026-12-01T11:00:00Z", "2026-12-01T12:00:00Z"]
    expect = {"2026-12-01T10:00:00Z": [0, 1], "2026-12-01T11:00:00Z": [2], "2026-12-01T12:00:00Z": [5]}
    for start, rows in expect.items():
        s = got[start]
        assert (s.records, s.tokens, s.bytes) == (len(rows), sum(n_tokens[i] for i in rows), sum(n_bytes[i] for i in rows))
        assert sum(s.id_counts) == s.tokens
    assert w.untimed.records == 2 and w.untimed.tokens == n_tokens[3] + n_tokens[4]
    assert w.timed_records + w.untimed.records == 6


@pytest.mark.parametrize("calibrated", [False, True])
def test_windowed_summaries_equal_one_summary_per_window_whatever_the_batching(calibrated):
    """Batches that fall in one window, batches spread over many, sparse and dense id counting:
    each window's Summary equals the one built record by record (calibration included)."""
    n_tokens, n_bytes, n_chars, n_words, ids = records(300, seed=2)
    rids = [f"r{i}" for i in range(300)]
    rng = random.Random(3)
    stamps = [T0 + rng.randrange(0, 4 * 900) if rng.random() > 0.1 else None for _ in range(300)]
    raw = FACTS.raw_byte_ids if calibrated else None
    w = WindowedSummaries(VOCAB, 900, raw_byte_ids=raw)
    for lo, hi in ((0, 1), (1, 50), (50, 300)):
        w.add_batch(stamps[lo:hi], n_tokens[lo:hi], n_bytes[lo:hi], n_chars[lo:hi], n_words[lo:hi], ids[lo:hi],
                    record_ids=rids[lo:hi] if calibrated else None)
    want: dict = {}
    for i, t in enumerate(stamps):
        key = None if t is None else (t - t % 900) * 10**6
        s = want.setdefault(key, Summary(VOCAB, raw_byte_ids=raw))
        s.add(list(ids[i]), n_bytes[i], n_chars[i], n_words[i], record_id=rids[i] if calibrated else None)
    got = {tv.timestamp.micros: tv.value for tv in w.elements()}
    got[None] = w.untimed
    assert sorted(got, key=str) == sorted(want, key=str)
    for key in want:
        assert got[key].calibrated == (got[key].records if calibrated else 0)
        assert stats_json(got[key], FACTS) == stats_json(want[key], FACTS), key


def test_windowed_summaries_check_columns():
    w = WindowedSummaries(VOCAB, 60)
    with pytest.raises(ValueError, match="different lengths"):
        w.add_batch([T0], [1, 2], [1, 2], [1, 2], [1, 1], [[1], [2]])
    with pytest.raises(ValueError):
        WindowedSummaries(VOCAB, 0)


def test_merge_of_nothing_is_a_valid_empty_summary_and_writes_no_file(tmp_path):
    fn = MergeSummaries(VOCAB)
    empty = fn.extract_output(fn.merge_accumulators([fn.create_accumulator(), fn.create_accumulator()]))
    assert empty.records == 0 and stats_json(empty, FACTS)["records"] == 0
    assert fn.extract_output(fn.merge_accumulators([])).records == 0
    writer = WriteWindowStats(str(tmp_path), FACTS)
    assert list(writer.process(empty, win=IntervalWindow(T0, T0 + 60))) == []
    assert not (tmp_path / "windows").exists()


# ---------------------------------------------------------------------------- TestStream

def part(n, tokens_each=1):
    """A partial Summary of n records of `tokens_each` tokens (id 3), 2 bytes per token."""
    s = Summary(VOCAB)
    s.add_batch([tokens_each] * n, [2 * tokens_each] * n, [2 * tokens_each] * n, [1] * n)
    s.add_id_counts({3: n * tokens_each})
    return s


def at(n, seconds):
    return TimestampedValue(part(n), T0 + seconds)


def window(start, seconds=10):
    return IntervalWindow(T0 + start, T0 + start + seconds)


def streaming_pipeline():
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    return beam.Pipeline(runner="DirectRunner", options=options)   # the BundleBasedDirectRunner


def panes(summaries):
    """Each merged pane as (records, tokens, timing): what equal_to_per_window compares."""
    return summaries | "Panes" >> beam.Map(
        lambda s, pane=beam.DoFn.PaneInfoParam: (s.records, s.tokens, pane.timing))


ON_TIME, EARLY, LATE = 1, 0, 2       # beam.utils.windowed_value.PaneInfoTiming


def test_on_time_windows_merge_exactly_and_an_empty_window_has_no_pane():
    stream = (TestStream().advance_watermark_to(T0)
              .add_elements([at(2, 1), at(3, 5)])          # window [0, 10)
              .add_elements([at(4, 9.999)])                # still [0, 10)
              .add_elements([at(1, 20), at(6, 29)])        # [20, 30); [10, 20) stays empty
              .advance_watermark_to_infinity())
    with streaming_pipeline() as p:
        merged = p | stream | MergePerWindow(VOCAB, 10)
        assert_that(panes(merged), equal_to_per_window({
            window(0): [(9, 9, ON_TIME)], window(20): [(7, 7, ON_TIME)], window(10): []}), reify_windows=True)


def test_late_data_within_allowed_lateness_fires_an_accumulated_late_pane_later_data_is_dropped():
    stream = (TestStream().advance_watermark_to(T0)
              .add_elements([at(2, 1)])
              .advance_watermark_to(T0 + 15)                # [0, 10) fires on time with 2 records
              .add_elements([at(3, 5)])                     # late, within 30 s: late pane, 2 + 3
              .add_elements([at(5, 12)])                    # on time for [10, 20)
              .advance_watermark_to(T0 + 45)                # [0, 10) expires at 10 + 30
              .add_elements([at(7, 2)])                     # too late: dropped from the windows
              .advance_watermark_to_infinity())
    with streaming_pipeline() as p:
        merged = p | stream | MergePerWindow(VOCAB, 10, allowed_lateness=30)
        assert_that(panes(merged), equal_to_per_window({
            window(0): [(2, 2, ON_TIME), (5, 5, LATE)], window(10): [(5, 5, ON_TIME)]}), reify_windows=True)


def test_late_data_without_allowed_lateness_is_dropped():
    stream = (TestStream().advance_watermark_to(T0).add_elements([at(2, 1)])
              .advance_watermark_to(T0 + 15).add_elements([at(3, 5)]).advance_watermark_to_infinity())
    with streaming_pipeline() as p:
        merged = p | stream | MergePerWindow(VOCAB, 10)
        assert_that(panes(merged), equal_to_per_window({window(0): [(2, 2, ON_TIME)]}), reify_windows=True)


def test_early_panes_accumulate_and_the_on_time_pane_holds_everything():
    stream = (TestStream().advance_watermark_to(T0)
              .add_elements([at(2, 1)]).add_elements([at(3, 2)])
              .advance_watermark_to(T0 + 5).add_elements([at(1, 12)])
              .advance_watermark_to_infinity())
    with streaming_pipeline() as p:
        merged = p | stream | MergePerWindow(VOCAB, 10, early_count=1)
        assert_that(panes(merged), equal_to_per_window({
            window(0): [(2, 2, EARLY), (5, 5, EARLY), (5, 5, ON_TIME)],
            window(10): [(1, 1, EARLY), (1, 1, ON_TIME)]}), reify_windows=True)


def test_streamed_window_files_end_with_the_late_pane(tmp_path):
    """WindowStats under TestStream: each pane rewrites its window's file, so the file left is the
    last pane's, the merge of on-time and late data."""
    stream = (TestStream().advance_watermark_to(T0)
              .add_elements([at(2, 1), at(4, 15)])
              .advance_watermark_to(T0 + 25)                # both windows fire on time
              .add_elements([at(3, 5)])                     # late for [0, 10): rewrites its file
              .advance_watermark_to_infinity())
    with streaming_pipeline() as p:
        urls = p | stream | WindowStats(VOCAB, 10, str(tmp_path), FACTS, allowed_lateness=60)
        assert_that(urls | beam.Map(lambda u: u.rsplit("/", 1)[1]), equal_to(
            ["2026-12-01T10:00:00Z.stats.json", "2026-12-01T10:00:10Z.stats.json", "2026-12-01T10:00:00Z.stats.json"]))
    files = sorted(p.name for p in (tmp_path / "windows").iterdir())
    assert files == ["2026-12-01T10:00:00Z.stats.json", "2026-12-01T10:00:10Z.stats.json"]
    first = load_stats(tmp_path / "windows" / files[0])
    assert first["records"] == 5 and first["window"] == {
        "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T10:00:10Z", "seconds": 10.0}
    assert load_stats(tmp_path / "windows" / files[1])["records"] == 4


# ---------------------------------------------------------------------------- batch, FnApiRunner

class FakeTokenizeShard(beam.DoFn):
    """Stands in for the tokenize DoFn: the shard's overall Summary on the main output, its partial
    summaries per window on the 'windows' output (as the real DoFn will emit them)."""

    def __init__(self, window_seconds):
        self.window_seconds = window_seconds

    def process(self, shard):
        seed, stamps = shard
        n_tokens, n_bytes, n_chars, n_words, ids = records(len(stamps), seed)
        overall = Summary(VOCAB)
        windowed = WindowedSummaries(VOCAB, self.window_seconds)
        for lo in range(0, len(stamps), 7):       # batches, as the DoFn encodes them
            hi = lo + 7
            overall.add_batch(n_tokens[lo:hi], n_bytes[lo:hi], n_chars[lo:hi], n_words[lo:hi])
            overall.add_id_counts({i: c for i, c in enumerate(
                [sum(a.count(i) for a in ids[lo:hi]) for i in range(VOCAB)]) if c})
            windowed.add_batch(stamps[lo:hi], n_tokens[lo:hi], n_bytes[lo:hi], n_chars[lo:hi], n_words[lo:hi],
                               ids[lo:hi])
        yield overall
        for element in windowed.elements():
            yield beam.pvalue.TaggedOutput("windows", element)
        yield beam.pvalue.TaggedOutput("untimed", windowed.untimed.records)


def test_batch_run_on_fnapirunner_writes_one_file_per_window_summing_to_the_total(tmp_path):
    rng = random.Random(7)
    day = 86400
    # Four shards of records spread over three days (ISO strings, epoch numbers, junk and gaps).
    shards = []
    for seed in range(4):
        stamps = []
        for _ in range(rng.randrange(20, 60)):
            t = T0 - T0 % day + rng.choice([0, 1, 2]) * day + rng.randrange(day)
            stamps.append(rng.choice([t, str(t), format_utc(t * 10**6), None, "n/a"]))
        shards.append((seed, stamps))
    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = (p | beam.Create(shards) | beam.ParDo(FakeTokenizeShard(day)).with_outputs("windows", "untimed",
                                                                                        main="overall"))
        urls = out.windows | WindowStats(VOCAB, parse_duration("1d"), str(tmp_path), FACTS, extra={"run": "test"})
        assert_that(urls | "Names" >> beam.Map(lambda u: u.rsplit("/", 1)[1]), equal_to(
            [window_file_name((T0 - T0 % day + k * day) * 10**6) for k in range(3)]), label="OnePanePerWindow")
        overall = out.overall | "Total" >> beam.CombineGlobally(MergeSummaries(VOCAB))
        untimed = out.untimed | "Untimed" >> beam.CombineGlobally(sum)
        (overall | "WriteTotal" >> beam.Map(
            lambda s, u: (tmp_path / "total.json").write_text(json.dumps([s.records, s.tokens, u])),
            beam.pvalue.AsSingleton(untimed)))
    total_records, total_tokens, untimed_records = json.loads((tmp_path / "total.json").read_text())
    files = sorted((tmp_path / "windows").iterdir())
    assert [f.name for f in files] == ["2026-12-01T00:00:00Z.stats.json", "2026-12-02T00:00:00Z.stats.json",
                                       "2026-12-03T00:00:00Z.stats.json"]
    stats = [load_stats(f) for f in files]
    assert all(s["run"] == "test" and s["window"]["seconds"] == day for s in stats)
    assert [s["window"]["end"] for s in stats] == ["2026-12-02T00:00:00Z", "2026-12-03T00:00:00Z",
                                                   "2026-12-04T00:00:00Z"]
    assert untimed_records > 0
    assert sum(s["records"] for s in stats) + untimed_records == total_records
    assert sum(s["tokens"] for s in stats) == total_tokens - _untimed_tokens(shards)


def _untimed_tokens(shards):
    """Tokens of the records without a usable timestamp, computed apart from the pipeline."""
    total = 0
    for seed, stamps in shards:
        n_tokens = records(len(stamps), seed)[0]
        total += sum(t for t, s in zip(n_tokens, stamps) if parse_timestamp(s) is None)
    return total


def test_merged_windows_without_beam_agrees_with_windowed_summaries():
    w = WindowedSummaries(VOCAB, 60)
    n_tokens, n_bytes, n_chars, n_words, ids = records(40, seed=9)
    w.add_batch([T0 + 7 * i for i in range(40)], n_tokens, n_bytes, n_chars, n_words, ids)
    merged = merged_windows(list(w.elements()) + list(w.elements()), VOCAB, 60)
    assert [m.records for m in merged.values()] == [2 * s.records for s in w.windows.values()]
    assert list(merged) == sorted(w.windows)
    assert isinstance(next(iter(w.elements())).timestamp, Timestamp)

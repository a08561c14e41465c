"""Statistics per event-time window: `tokenize --timestamp-field F --window DURATION`.

Each record's timestamp (ISO-8601 or epoch seconds, read from its field) puts it in one fixed window
of DURATION; every window gets a `stats.json` of its own, `OUTPUT/windows/<UTC start>.stats.json`,
which `tokenbeam drift BASELINE 'OUTPUT/windows/*.stats.json'` judges one by one. Windows are a side
product: every record, timed or not, is still counted once in the dataset's `stats.json`.

Three pieces, used in this order:

1. `parse_duration` and `parse_timestamp` read the command-line duration and a record's field.
2. `WindowedSummaries`, inside the tokenize DoFn, keeps one partial `Summary` per window start for
   the shard it is tokenizing (and one for the records without a usable timestamp), and hands them
   out as timestamped elements at the end of the shard.
3. `WindowStats`, the one composite transform shared by batch and streaming runs, takes those
   partial summaries: fixed event-time windows -> exact merge per window -> one atomically written
   file per window (and per pane: an early or late pane rewrites its window's file).

Worked example (batch, 1-hour windows)::

    windowed = WindowedSummaries(vocab_size=256, window_seconds=parse_duration("1h"))
    windowed.add_batch(["2026-12-01T10:15:00Z", 1796124000, None],      # 10:15, 11:20, untimed
                       n_tokens=[3, 2, 1], n_bytes=[9, 4, 1], n_chars=[9, 4, 1], n_words=[2, 1, 1],
                       id_arrays=[[104, 105, 33], [111, 107], [33]])
    list(windowed.elements())   # TimestampedValue(Summary of 1 record, 2026-12-01T10:00:00Z),
                                # TimestampedValue(Summary of 1 record, 2026-12-01T11:00:00Z)
    windowed.untimed.records    # 1

    (partial_summaries          # from TokenizeShard's "windows" output, one per shard and window
     | "WindowStats" >> WindowStats(256, 3600, "runs/tokens", facts))
    # -> runs/tokens/windows/2026-12-01T10:00:00Z.stats.json, .../2026-12-01T11:00:00Z.stats.json

Late data (streaming): with `allowed_lateness=L`, a partial summary that arrives after its window
closed but less than L behind the watermark fires a late pane; panes accumulate, so that pane
rewrites the window's file with the merge of everything the window received, early, on time and
late. Data later than L is dropped from the windows by Beam (it stays in `stats.json` and in its
shard's Parquet). In batch runs nothing is late: every window fires once, when the input ends.
"""
from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Iterable, Iterator, Mapping, Sequence

from pipelines.core.beam_options import beam  # first: it hides Beam's import-time apitools warning
from apache_beam.transforms import trigger, window
from apache_beam.utils.timestamp import Duration, Timestamp

from bpe_ops.stats import Summary
from pipelines.statistics.summaries import MergeSummaries, count_ids

__all__ = ["parse_duration", "parse_timestamp", "format_utc", "window_start_micros", "window_file_name",
           "WindowedSummaries", "MergePerWindow", "WindowStats", "WriteWindowStats",
           "merged_windows",
           "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "WINDOWS_FOLDER"]

WINDOWS_FOLDER = "windows"
# Timestamps outside [1900, 2200) are taken as unusable rather than trusted: they are nearly always a
# unit mistake (epoch milliseconds read as seconds lands in the year 55,000) or a placeholder
# (0001-01-01), and each would make a window of its own.
EARLIEST_TIMESTAMP = -2208988800.0     # 1900-01-01T00:00:00Z
LATEST_TIMESTAMP = 7258118400.0        # 2200-01-01T00:00:00Z

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


# ---------------------------------------------------------------------------- parsing

def parse_duration(text: str) -> float:
    """Seconds in a duration written as number+unit parts: `90s`, `15m`, `1h`, `1d`, `2w`, `1h30m`,
    `0.5s`. ValueError with one line naming the value otherwise (the CLI turns it into a UserError).

    >>> parse_duration("15m"), parse_duration("1h30m"), parse_duration("1d")
    (900.0, 5400.0, 86400.0)
    """
    raw = text
    text = re.sub(r"\s+", "", str(text)).lower()
    if not _DURATION.fullmatch(text):
        hint = " (add a unit: s, m, h, d or w)" if _NUMBER.fullmatch(text) else ""
        raise ValueError(f"invalid duration {raw!r}{hint}: use a number and a unit, e.g. 90s, 15m, 1h, 1d")
    seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION_PART.findall(text))
    if seconds <= 0:
        raise ValueError(f"invalid duration {raw!r}: it must be longer than zero")
    return seconds


def parse_timestamp(value) -> float | None:
    """A record's timestamp as epoch seconds (UTC), or None when it is missing or unusable.

    Accepts epoch seconds (int, float, or a numeric string) and ISO-8601 strings: `2026-12-01T10:00:00Z`,
    `2026-12-01T11:00:00+01:00`, `2026-12-01 10:00:00.250`, `2026-12-01` (a naive time is UTC).
    Anything else is None: other types, booleans, NaN, unparsable text, and times outside
    [1900, 2200), which are unit mistakes (epoch milliseconds) or placeholders, not real times.

    >>> parse_timestamp("2026-12-01T10:00:00Z"), parse_timestamp(1796119200), parse_timestamp(1796119200000)
    (1796119200.0, 1796119200.0, None)
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if _NUMBER.fullmatch(text):
            seconds = float(text)
        else:
            seconds = _parse_iso(text)
            if seconds is None:
                return None
    else:
        return None
    if not math.isfinite(seconds) or not EARLIEST_TIMESTAMP <= seconds < LATEST_TIMESTAMP:
        return None
    return seconds


def _parse_iso(text: str) -> float | None:
    if text[-1:] in ("Z", "z"):          # Python 3.10's fromisoformat does not read the Z suffix
        text = text[:-1] + "+00:00"
    try:
        moment = _dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    # Exact: whole microseconds from the epoch, then seconds (timestamp() would round through floats).
    return (moment - _EPOCH) // _dt.timedelta(microseconds=1) / 1e6


def format_utc(micros: int) -> str:
    """Epoch microseconds as `2026-12-01T10:00:00Z` (with `.250000` only when not whole seconds)."""
    moment = _EPOCH + _dt.timedelta(microseconds=micros)
    fraction = f".{moment.microsecond:06d}" if moment.microsecond else ""
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"


def window_start_micros(seconds: float, window_micros: int) -> int:
    """The start of the fixed window holding `seconds`, in epoch microseconds, as Beam's
    `FixedWindows(size)` computes it (offset 0; integer arithmetic, so both agree exactly)."""
    micros = round(seconds * 1e6)
    return micros - micros % window_micros


def window_file_name(start_micros: int) -> str:
    """`2026-12-01T10:00:00Z.stats.json`: the file of the window starting at `start_micros`."""
    return format_utc(start_micros) + ".stats.json"


def _window_micros(window_seconds: float) -> int:
    micros = Duration.of(window_seconds).micros
    if micros <= 0:
        raise ValueError(f"window length must be positive, got {window_seconds!r} s")
    return micros


# ---------------------------------------------------------------------------- per shard

class WindowedSummaries:
    """The per-window partial summaries of one shard, filled batch by batch inside the tokenize DoFn.

    `add_batch` takes the same columns the DoFn gives `Summary.add_batch` plus each record's raw
    timestamp and token ids; records go to the Summary of their window's start, or to `untimed`.
    Given `record_ids` (and `raw_byte_ids` here, as for the DoFn's own Summary), each window's
    Summary is calibrated like the shard's, so a window's stats.json is fit for drift verdicts.
    `elements()` hands out one `TimestampedValue(summary, window start)` per window, for
    `WindowStats`. The shard's overall Summary is kept by the DoFn as before: these are extra.

    >>> w = WindowedSummaries(256, 3600)
    >>> w.add_batch(["2026-12-01T10:15:00Z", "junk"], [2, 1], [2, 1], [2, 1], [1, 1], [[104, 105], [33]])
    >>> [(format_utc(tv.timestamp.micros), tv.value.records) for tv in w.elements()], w.untimed.records
    ([('2026-12-01T10:00:00Z', 1)], 1)
    """

    def __init__(self, vocab_size: int, window_seconds: float, *, raw_byte_ids: Iterable[int] | None = None):
        self.vocab_size = vocab_size
        self.window_micros = _window_micros(window_seconds)
        self.raw_byte_ids = None if raw_byte_ids is None else tuple(raw_byte_ids)
        self.windows: dict[int, Summary] = {}      # window start (epoch micros) -> Summary
        self.untimed = self._summary()

    def _summary(self) -> Summary:
        return Summary(self.vocab_size, raw_byte_ids=self.raw_byte_ids)

    def add_batch(self, timestamps: Sequence, n_tokens: Sequence[int], n_bytes: Sequence[int],
                  n_chars: Sequence[int], n_words: Sequence[int], id_arrays: Sequence[Sequence[int]],
                  record_ids: Sequence[str] | None = None, digit_runs: Sequence | None = None) -> None:
        """Add a batch of written records given as columns. `timestamps` holds each record's raw field
        value (anything `parse_timestamp` reads; None when the record has no such field) or its epoch
        seconds; `id_arrays` each record's token ids (uint32 `array`s, numpy arrays or lists), EOS
        included; `record_ids` each record's id, to calibrate the windows' summaries (and
        `digit_runs`, each record's `bpe_ops.stats.digit_runs`, their number formats)."""
        n = len(n_tokens)
        if not (len(timestamps) == len(n_bytes) == len(n_chars) == len(n_words) == len(id_arrays) == n) or (
                record_ids is not None and len(record_ids) != n):
            raise ValueError("add_batch columns have different lengths")
        groups: dict[int | None, list[int]] = {}
        for i, value in enumerate(timestamps):
            seconds = parse_timestamp(value)
            key = None if seconds is None else window_start_micros(seconds, self.window_micros)
            groups.setdefault(key, []).append(i)
        for key, rows in groups.items():
            if key is None:
                summary = self.untimed
            else:
                summary = self.windows.get(key)
                if summary is None:
                    summary = self.windows[key] = self._summary()
            if len(rows) == n:        # the usual case: the whole batch falls in one window
                columns = (n_tokens, n_bytes, n_chars, n_words)
                ids, rids, runs = id_arrays, record_ids, digit_runs
            else:
                columns = tuple([column[i] for i in rows] for column in (n_tokens, n_bytes, n_chars, n_words))
                ids = [id_arrays[i] for i in rows]
                rids = None if record_ids is None else [record_ids[i] for i in rows]
                runs = None if digit_runs is None else [digit_runs[i] for i in rows]
            if rids is None:
                summary.add_batch(*columns)
            else:
                summary.add_batch(*columns, record_ids=rids, id_arrays=ids, digit_runs=runs)
            count_ids(summary, ids)

    def elements(self) -> Iterator[beam.window.TimestampedValue]:
        """One `TimestampedValue(Summary, window start)` per window with records, oldest first."""
        for start in sorted(self.windows):
            yield beam.window.TimestampedValue(self.windows[start], Timestamp(micros=start))

    @property
    def timed_records(self) -> int:
        return sum(s.records for s in self.windows.values())


# ---------------------------------------------------------------------------- the transform

class WriteWindowStats(beam.DoFn):
    """Write one pane of one window as `OUTPUT/windows/<UTC start>.stats.json`, atomically; emits the
    URL written. A pane with no records writes nothing (the window's file, if any, stays)."""

    def __init__(self, output: str, tokenizer_facts, extra: Mapping | None = None):
        self.output = output
        self.tokenizer_facts = tokenizer_facts
        self.extra = dict(extra or {})

    def process(self, summary, win=beam.DoFn.WindowParam):
        if summary.records == 0:
            return
        yield write_window_stats(self.output, win.start.micros, win.end.micros, summary, self.tokenizer_facts,
                                 self.extra)


def write_window_stats(output: str, start_micros: int, end_micros: int, summary: Summary, tokenizer_facts,
                       extra: Mapping | None = None) -> str:
    """Write the window [start, end) as `OUTPUT/windows/<UTC start>.stats.json`, atomically; returns
    its URL."""
    from pipelines.core.files import join, write_text_atomic, writing
    from schemas.stats import dump_stats, stats_json

    extra = {**(extra or {}), "window": {"start": format_utc(start_micros), "end": format_utc(end_micros),
                                         "seconds": (end_micros - start_micros) / 1e6}}
    url = join(output, WINDOWS_FOLDER, window_file_name(start_micros))
    text = dump_stats(stats_json(summary, tokenizer_facts, extra))
    with writing(url):
        write_text_atomic(url, text)
    return url


class WindowStats(beam.PTransform):
    """Timestamped partial Summaries -> one `stats.json` per fixed event-time window.

    The same transform serves batch and streaming runs:

    - batch (no `early_count`, no `allowed_lateness`): each window fires once, when the input ends;
    - streaming: `early_count=n` fires a provisional pane after every n partial summaries in a window
      (a partial summary is one shard's records of that window), so the window's file appears and
      grows while the stream runs (on Dataflow; the local FnApiRunner fires every pane when the
      stream ends); the on-time pane at the watermark rewrites it, and each late pane
      within `allowed_lateness` seconds rewrites it again. Panes accumulate: every file written is
      the exact merge of all that its window has received so far.

    Input: `TimestampedValue(Summary, t)` elements, e.g. from `WindowedSummaries.elements()`, in any
    windowing (they are re-windowed here). Output: the URLs written, one per pane that had records::

        urls = (summaries
                | "WindowStats" >> WindowStats(facts.vocab_size, parse_duration("1h"), "runs/tokens", facts,
                                               extra={"tokenizer": "runs/tok/tokenizer.json"}))
    """

    def __init__(self, vocab_size: int, window_seconds: float, output: str, tokenizer_facts,
                 allowed_lateness: float = 0, early_count: int | None = None, extra: Mapping | None = None):
        super().__init__()
        _window_micros(window_seconds)
        if allowed_lateness < 0:
            raise ValueError(f"allowed_lateness must not be negative, got {allowed_lateness!r}")
        if early_count is not None and early_count < 1:
            raise ValueError(f"early_count must be at least 1, got {early_count!r}")
        if extra and "window" in extra:
            raise ValueError("extra may not hold a 'window' key: WindowStats writes it")
        self.vocab_size = vocab_size
        self.window_seconds = window_seconds
        self.output = output
        self.tokenizer_facts = tokenizer_facts
        self.allowed_lateness = allowed_lateness
        self.early_count = early_count
        self.extra = dict(extra or {})

    def expand(self, summaries):
        return (summaries
                | "MergePerWindow" >> MergePerWindow(self.vocab_size, self.window_seconds,
                                                     self.allowed_lateness, self.early_count)
                | "WriteWindowStats" >> beam.ParDo(WriteWindowStats(self.output, self.tokenizer_facts, self.extra)))


class MergePerWindow(beam.PTransform):
    """Timestamped partial Summaries -> one merged Summary per fixed window and pane (the windowing and
    combining half of `WindowStats`, apart so that tests can look at the panes themselves)."""

    def __init__(self, vocab_size: int, window_seconds: float, allowed_lateness: float = 0,
                 early_count: int | None = None):
        super().__init__()
        self.vocab_size = vocab_size
        self.window_seconds = window_seconds
        self.allowed_lateness = allowed_lateness
        self.early_count = early_count

    def expand(self, summaries):
        fire = trigger.AfterWatermark(
            early=trigger.AfterCount(self.early_count) if self.early_count else None,
            late=trigger.AfterCount(1) if self.allowed_lateness else None)
        return (summaries
                | "FixedWindows" >> beam.WindowInto(
                    window.FixedWindows(self.window_seconds), trigger=fire,
                    accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                    allowed_lateness=Duration.of(self.allowed_lateness))
                | "Merge" >> beam.CombineGlobally(MergeSummaries(self.vocab_size)).without_defaults())


def merged_windows(summaries: Iterable[beam.window.TimestampedValue], vocab_size: int,
                   window_seconds: float) -> dict[int, Summary]:
    """Without Beam: the merged Summary per window start (epoch micros) of timestamped partial
    summaries, as `WindowStats` combines them in a batch run (for tests and `tokenbeam stats`)."""
    window_micros = _window_micros(window_seconds)
    out: dict[int, Summary] = {}
    for tv in summaries:
        start = tv.timestamp.micros - tv.timestamp.micros % window_micros
        out.setdefault(start, Summary(vocab_size)).merge(tv.value)
    return dict(sorted(out.items()))

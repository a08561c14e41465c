"""Watch mode's source: every new file matching the input globs, once, as it lands (`tokenize --watch`).

`WatchShards` is an unbounded PTransform that polls the globs and emits each matching file exactly
once, as a `pipelines.datasets.sources.Shard`, on the local FnApiRunner (with `--streaming`) and on streaming
runners such as Dataflow. It is `apache_beam.io.watch.Watch` (a splittable DoFn that remembers the
files it has emitted) with three things of ours around it:

- a poll function that sleeps until its next slot itself: FnApiRunner resumes a deferred poll at
  once, whatever `poll_interval` says, so a poll that did not wait would list the folder in a busy
  loop;
- only complete files: a file is emitted once its size (and modification time, where the
  filesystem gives one) is the same in two listings one poll interval apart, and names that
  writers use for unfinished files are never emitted: those starting with `.` and those containing
  `.tmp-` (what `open_atomic` and most writers use). Writing a shard under such a name and renaming
  it when complete is the safe way to feed a watched folder; the size check is for writers that
  cannot, and a writer that pauses longer than the poll interval mid-file defeats it;
- stopping: after `stop_after` seconds in all, after `stop_when_idle` seconds without a new file,
  or when a `StopSignal` is set (by `install_stop_handlers` on SIGINT/SIGTERM, or by creating its
  sentinel file from anywhere). The source then ends; the shards already emitted are processed
  to the end and the pipeline finishes normally, so its final steps (stats.json, _SUCCESS) run.

`relpath` of each shard is relative to the fixed folder of the globs (the part before the first
wildcard; for several globs, the deepest folder holding all of theirs), so a shard's name does not
change as more files arrive. For one glob over one folder (`corpus/*.jsonl`) that is the name a
batch run over the same files gives it.

Worked example (the files already there are emitted too, then each new one as it lands)::

    stop = StopSignal(sentinel="runs/tokens/_STOP")
    restore = install_stop_handlers(stop)               # Ctrl-C: finish the shards in flight, then end
    with beam.Pipeline(options=PipelineOptions(["--streaming"])) as p:
        shards = p | "WatchShards" >> WatchShards(["incoming/*.jsonl.gz"], poll_interval=2,
                                                  stop_when_idle=parse_duration("1h"), stop=stop)
        shards | "TokenizeShard" >> beam.ParDo(...)
    restore()

Event time: the emitted shards carry no event time of their own (a file's arrival says nothing about
when its records happened). With `watermark_delay=None` (the default) the source holds the
watermark back until it stops, so downstream event-time windows close when the watch ends, and
early panes (`WindowStats(early_count=...)`) show them filling meanwhile. With `watermark_delay=D`
the watermark trails the wall clock by D seconds: a window closes D seconds after its end, and
records older than that are late for it (see `WindowStats(allowed_lateness=...)`). On the local
FnApiRunner the watermark (and so every window, early panes included) only moves when the watch
ends; on Dataflow panes fire while it runs.

Whole-run results (stats.json, the _SUCCESS manifest): Beam refuses a GroupByKey, so a
`CombineGlobally` or `ToList`, on an unbounded PCollection in the global window with the default
trigger. `WholeRun()` re-windows such a PCollection to fire once, when the watch has ended and
everything before it is done; add `.without_defaults()` to the CombineGlobally after it.
"""
from __future__ import annotations

import logging
import os
import posixpath
import signal
import sys
import threading
import time
import uuid
from typing import Callable, Sequence

from pipelines.core.beam_options import beam  # first: it hides Beam's import-time apitools warning
from apache_beam import coders
from apache_beam.io.watch import PollResult, TerminationCondition, Watch
from apache_beam.transforms import trigger, window
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Duration, Timestamp

from pipelines.core.files import filesystem
from pipelines.core.inputs import GLOB_CHARS, file_version
from pipelines.datasets.sources import Shard

__all__ = ["WatchShards", "WholeRun", "StopSignal", "install_stop_handlers", "fixed_folder", "is_temporary_name"]

_LOGGER = logging.getLogger(__name__)
# How often a wait re-checks a sentinel file (the in-process Event wakes a wait at once).
_SENTINEL_CHECK_SECONDS = 0.25
_EVENTS: dict[str, threading.Event] = {}     # StopSignal token -> its Event in this process
_EVENTS_LOCK = threading.Lock()


# ---------------------------------------------------------------------------- stopping

class StopSignal:
    """A request to stop watching, visible to the poll function wherever it runs.

    In the launcher's process (the local runner's default in-process mode) it is a threading.Event,
    which also wakes a poll that is waiting. Pickled into worker processes, it is its `sentinel`:
    an fsspec URL or path whose existence means "stop" (`touch OUTPUT/_STOP` works from a shell).

    >>> stop = StopSignal()
    >>> stop.is_set(), stop.set(), stop.is_set()
    (False, None, True)
    """

    def __init__(self, sentinel: str | None = None):
        self.sentinel = sentinel
        self.token = uuid.uuid4().hex

    def _event(self) -> threading.Event:
        with _EVENTS_LOCK:
            return _EVENTS.setdefault(self.token, threading.Event())

    def set(self) -> None:
        """Request the stop: set the Event and create the sentinel (if any)."""
        self._event().set()
        if self.sentinel:
            fs, path = filesystem(self.sentinel)
            parent = posixpath.dirname(path)
            if parent:
                fs.makedirs(parent, exist_ok=True)
            fs.touch(path)

    def is_set(self) -> bool:
        if self._event().is_set():
            return True
        if self.sentinel:
            try:
                fs, path = filesystem(self.sentinel)
                return fs.exists(path)
            except OSError:
                return False
        return False

    def clear(self) -> None:
        """Forget an earlier request (and remove a sentinel left by an earlier run)."""
        self._event().clear()
        if self.sentinel:
            fs, path = filesystem(self.sentinel)
            if fs.exists(path):
                fs.rm(path)

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, returning early (True) when the stop is requested."""
        deadline = time.monotonic() + seconds
        event = self._event()
        while True:
            if self.is_set():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if event.wait(min(left, _SENTINEL_CHECK_SECONDS) if self.sentinel else left):
                return True

    def __getstate__(self):
        return {"sentinel": self.sentinel, "token": self.token}

    def __setstate__(self, state):
        self.__dict__.update(state)


def install_stop_handlers(stop: StopSignal, signals=(signal.SIGINT, signal.SIGTERM),
                          say: Callable[[str], None] | None = None) -> Callable[[], None]:
    """Make SIGINT/SIGTERM set `stop` (the watch ends, the shards in flight finish, the pipeline ends
    normally); a second signal gets the signal's old behaviour, for when that takes too long.
    Call from the main thread; returns a function that puts the old handlers back."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    previous = {s: signal.getsignal(s) for s in signals}

    def restore():
        for s, handler in previous.items():
            signal.signal(s, handler)

    def handler(signum, frame):
        if stop.is_set():            # the second request: do what the signal did before
            restore()
            old = previous[signum]
            if callable(old):
                old(signum, frame)
            elif old == signal.SIG_DFL:
                signal.raise_signal(signum)
            return
        say(f"{signal.Signals(signum).name}: no new shards; finishing the shards in flight "
            f"(again to stop at once)")
        stop.set()

    for s in signals:
        signal.signal(s, handler)
    return restore


class _StopWhen(TerminationCondition):
    """Watch's termination: total time, idle time (since the last new file, or the start), or the
    stop signal. Its state, (start, last new file), travels with the restriction, so it holds on any
    worker and across checkpoints."""

    def __init__(self, stop_after: float | None, stop_when_idle: float | None, stop: StopSignal | None):
        self.stop_after = None if stop_after is None else Duration.of(stop_after)
        self.stop_when_idle = None if stop_when_idle is None else Duration.of(stop_when_idle)
        self.stop = stop

    def for_new_input(self, now, element):
        return now, now

    def on_seen_new_output(self, now, state):
        return state[0], now

    def can_stop_polling(self, now, state):
        start, last_new = state
        return ((self.stop_after is not None and now - start >= self.stop_after)
                or (self.stop_when_idle is not None and now - last_new >= self.stop_when_idle)
                or (self.stop is not None and self.stop.is_set()))

    def state_coder(self):
        return coders.TupleCoder([coders.TimestampCoder(), coders.TimestampCoder()])


# ---------------------------------------------------------------------------- listing

def is_temporary_name(name: str) -> bool:
    """True for names of files still being written: hidden (`.x`) or `open_atomic`-style `.tmp-`."""
    base = posixpath.basename(name)
    return base.startswith(".") or ".tmp-" in base


def fixed_folder(pattern: str) -> str:
    """The folder part of a glob before its first wildcard, as an fsspec path:
    `corpus/2026-*/en-*.jsonl` -> `<abs>/corpus`; a literal file's own folder."""
    _, path = filesystem(pattern)
    cut = min((i for i in (path.find(c) for c in GLOB_CHARS) if i >= 0), default=len(path))
    return posixpath.dirname(path[:cut])


def _common_folder(folders: Sequence[str]) -> list[str]:
    parts = [[c for c in f.split("/") if c] for f in folders]
    return os.path.commonprefix(parts)


def _shard_url(shard: Shard) -> str:
    return shard.url


class _PollShards:
    """Watch's poll function: list the globs, wait until the next slot, list again, and return the
    complete files (same size and mtime in both listings, not a temporary name).

    The previous listing is kept between calls in this instance (when the runner reuses it, each
    call then waits one interval instead of two); a fresh instance lists twice."""

    def __init__(self, patterns: Sequence[str], poll_interval: float, stop: StopSignal | None,
                 watermark_delay: float | None):
        self.patterns = tuple(patterns)
        self.poll_interval = poll_interval
        self.stop = stop
        self.watermark_delay = watermark_delay
        self.base = _common_folder([fixed_folder(p) for p in self.patterns])
        self._previous = None             # (listing, monotonic time of the listing)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_previous"] = None
        return state

    def _wait(self, seconds: float) -> bool:
        if self.stop is not None:
            return self.stop.wait(seconds)
        time.sleep(max(0.0, seconds))
        return False

    def list(self) -> dict[str, tuple[tuple, Shard]]:
        """{url: (signature, Shard)} of the matching files now; a listing that fails (a network
        error) counts as empty, so it only delays files, never loses or duplicates one."""
        found = {}
        for pattern in self.patterns:
            try:
                fs, path = filesystem(pattern)
                fs.invalidate_cache()          # object-store listings are cached otherwise
                infos = fs.glob(path, detail=True)
            except OSError as exc:
                _LOGGER.warning("listing %s failed: %s", pattern, exc)
                continue
            with_protocol = "://" in pattern
            for p, info in infos.items():
                if info.get("type") == "directory" or is_temporary_name(p):
                    continue
                url = fs.unstrip_protocol(p) if with_protocol else p
                parts = [c for c in p.split("/") if c]
                relpath = "/".join(parts[len(self.base):])
                size = info.get("size") or 0
                mtime = info.get("mtime") or info.get("LastModified") or info.get("updated")
                found.setdefault(url, ((size, str(mtime)), Shard(url, relpath, size, file_version(info))))
        return found

    def __call__(self, element) -> PollResult:
        cached = self._previous
        if cached is None:
            before, listed_at = self.list(), time.monotonic()
        else:
            before, listed_at = cached
        stopping = (self.stop is not None and self.stop.is_set()) or self._wait(
            listed_at + self.poll_interval - time.monotonic())
        if stopping:
            # Nothing new once a stop is requested: the termination check that follows this poll ends
            # the watch, and only the shards already emitted are finished.
            return self._result([])
        now = self.list()
        self._previous = (now, time.monotonic())
        complete = [shard for url, (signature, shard) in sorted(now.items())
                    if url in before and before[url][0] == signature]
        return self._result(complete)

    def _result(self, shards) -> PollResult:
        if self.watermark_delay is None:
            at = MIN_TIMESTAMP
        else:
            at = Timestamp.of(time.time() - self.watermark_delay)
        return PollResult.incomplete([TimestampedValue(s, at) for s in shards]).with_watermark(at)


# ---------------------------------------------------------------------------- the transform

class WatchShards(beam.PTransform):
    """Unbounded source: each file matching `patterns` (fsspec globs), once, as a `Shard`, when it is
    complete; ends after `stop_after` s, `stop_when_idle` s without a new file, or on `stop`.

    Needs a streaming pipeline (`--streaming`; FnApiRunner runs it locally). With none of the three
    stop conditions it runs until the job is cancelled. See the module docstring for what
    "complete" means, the names skipped, relpaths and event time.
    """

    def __init__(self, patterns: Sequence[str] | str, poll_interval: float, stop_after: float | None = None,
                 stop_when_idle: float | None = None, stop: StopSignal | None = None,
                 watermark_delay: float | None = None):
        super().__init__()
        patterns = [patterns] if isinstance(patterns, str) else list(patterns)
        if not patterns:
            raise ValueError("no input pattern to watch")
        if poll_interval <= 0:
            raise ValueError(f"poll interval must be positive, got {poll_interval!r}")
        for name, value in (("stop_after", stop_after), ("stop_when_idle", stop_when_idle)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        for pattern in patterns:
            fs, path = filesystem(pattern)
            if not any(c in path for c in GLOB_CHARS) and fs.isdir(path):
                raise ValueError(f"--input {pattern!r} is a folder; pass a glob such as "
                                 f"'{pattern.rstrip('/')}/*.jsonl'")
        self.patterns = patterns
        self.poll_interval = poll_interval
        self.stop_after = stop_after
        self.stop_when_idle = stop_when_idle
        self.stop = stop
        self.watermark_delay = watermark_delay

    def expand(self, pbegin):
        poll = _PollShards(self.patterns, self.poll_interval, self.stop, self.watermark_delay)
        return (pbegin
                | "Patterns" >> beam.Create([tuple(self.patterns)])
                | "PollForShards" >> Watch(poll, poll_interval=self.poll_interval,
                                           termination=_StopWhen(self.stop_after, self.stop_when_idle, self.stop),
                                           output_coder=coders.PickleCoder(), output_key_fn=_shard_url,
                                           output_key_coder=coders.StrUtf8Coder())
                | "Shards" >> beam.Values())


class WholeRun(beam.PTransform):
    """Re-window a PCollection of a watched (unbounded) pipeline into one pane that fires when the
    input has ended, so a whole-run combine (`CombineGlobally(...).without_defaults()`, a manifest
    list, a singleton side input) works in streaming as in batch. A no-op in meaning on a bounded
    PCollection, so the same pipeline code serves both::

        stats = (summaries | "WholeRun" >> WholeRun()
                 | "CombineStats" >> beam.CombineGlobally(MergeSummaries(vocab_size)).without_defaults())
    """

    def expand(self, pcoll):
        return pcoll | "FireAtEnd" >> beam.WindowInto(window.GlobalWindows(), trigger=trigger.AfterWatermark(),
                                                      accumulation_mode=trigger.AccumulationMode.DISCARDING)

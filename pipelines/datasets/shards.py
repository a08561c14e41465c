"""The one shard loop both pipelines share: the input flags, matching the shards, and reading one
shard into records with its accounting and its `rejected/` file.

    for record in (reader := ShardReader(shard, source_options, output, fail_fast)):
        ...                             # every record handed out must be written (or counted)
    account = reader.finish()           # writes rejected/<shard>.jsonl, or removes a stale one

A bad row becomes a line of `rejected/<shard>.jsonl` with its reason; a shard that cannot be read
(to the end) becomes a line there too, with the row it was lost from, and a shard error in the
account, which the pipelines report and which makes the run's exit code say so. `--fail-fast`
turns the first of either into a one-line failure instead.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter

from schemas.accounts import Account
from schemas.records import DEFAULT_MAX_RECORD_BYTES, RUNS, RecordRun, Rejected, ShardError, rejected_to_json
from pipelines.core.errors import PROGRESS_SECONDS, ShardFailure, UserError, say, warn
from pipelines.core.files import join, remove, write_text_atomic, writing

REJECTED_DIR = "rejected"
REPAIRED = attrgetter("repaired")        # whether a Record's invalid UTF-8 was replaced
SIZE_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
COUNT_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


def byte_size(text: str) -> int:
    """`--max-record-bytes` values: a number of bytes with an optional K, M or G (binary) suffix;
    0 means no bound. `byte_size("16M")` -> 16777216."""
    return scaled_number(text, text.strip().lower().removesuffix("b").removesuffix("i"), SIZE_SUFFIXES,
                         "a size", "bytes, or a number with K, M or G")


DEFAULT_SPLIT_SIZE = 64 << 20
MIN_SPLIT_SIZE = 4 << 10


def split_size(text: str) -> int:
    """`--split-size` values: a size as for `byte_size`, at least MIN_SPLIT_SIZE; `0` or `off`
    turns splitting off (returns 0)."""
    if text.strip().lower() in ("0", "off"):
        return 0
    n = byte_size(text)
    if n < MIN_SPLIT_SIZE:
        raise argparse.ArgumentTypeError(f"too small: {text!r} (at least {MIN_SPLIT_SIZE >> 10}K; 0 or off "
                                         f"reads every file whole)")
    return n


def unique_count(text: str) -> int:
    """`--max-unique` values: a positive number with an optional K, M or G (decimal: these are
    pre-tokens, not bytes) suffix. `unique_count("1.5M")` -> 1500000."""
    n = scaled_number(text, text.strip().lower(), COUNT_SUFFIXES, "a count", "a whole number, or a number with K, M or G")
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return n


def scaled_number(text: str, value: str, scale: dict[str, int], what: str, how: str) -> int:
    """`value` (`text` lowercased, unit stripped) as a number with an optional suffix of `scale`;
    argparse's error when it is not one, or negative."""
    number, suffix = (value[:-1], value[-1]) if value and value[-1] in "kmg" else (value, "")
    try:
        n = int(float(number) * scale[suffix])
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not {what}: {text!r} ({how})") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return n


def add_source_arguments(parser: argparse.ArgumentParser, split: bool = False) -> None:
    """The input flags both pipelines take (DESIGN.md section 5, Sources); `split`: also
    `--split-size`, for the commands that read large files in parts (train, tokenize)."""
    parser.add_argument("--input", action="append", default=[], metavar="GLOB",
                        help="input shards: a path or glob, local or any fsspec URL (repeatable); arguments "
                             "after the options are inputs too, so a glob the shell expanded reads every file")
    parser.add_argument("--format", default="auto", choices=["auto", "jsonl", "txt", "parquet"],
                        help="input format; auto picks by extension (.jsonl .json .txt .parquet, +.gz .zst .bz2)")
    parser.add_argument("--text-field", default="text", help="JSONL key / Parquet column holding the text")
    parser.add_argument("--id-field", default="id",
                        help="JSONL key / Parquet column holding the record id (missing -> <shard>:<row>)")
    parser.add_argument("--text-unit", default="line", choices=["line", "file"],
                        help="txt: each line is a record (default) or each file is one record")
    parser.add_argument("--separator", default=None, metavar="STR",
                        help="txt: split each file into records on STR (e.g. '<|endoftext|>')")
    parser.add_argument("--invalid-utf8", default="replace", choices=["replace", "reject"],
                        help="undecodable bytes: decode with U+FFFD and count it (default), or reject the record")
    parser.add_argument("--max-record-bytes", type=byte_size, default=DEFAULT_MAX_RECORD_BYTES, metavar="SIZE",
                        help=f"reject a record above SIZE bytes before holding it (default "
                             f"{DEFAULT_MAX_RECORD_BYTES >> 20}M; K/M/G suffixes; 0 = no bound)")
    if split:
        parser.add_argument("--split-size", type=split_size, default=DEFAULT_SPLIT_SIZE, metavar="SIZE",
                            help=f"read a file larger than SIZE as parts of about SIZE bytes, spread over the "
                                 f"workers (default {DEFAULT_SPLIT_SIZE >> 20}M; K/M/G suffixes; 0 or off: every "
                                 f"file whole); Parquet by row groups, multi-frame zstd by frames, gzip and bzip2 whole")
    parser.add_argument("--fail-fast", action="store_true",
                        help="stop at the first rejected record or unreadable file, naming shard and row "
                             "(default: set them aside, report them, and go on)")
    parser.add_argument("--allow-shard-errors", action="store_true",
                        help="a shard that cannot be read is a warning, not a failed run (exit 0, _SUCCESS)")


def source_options(args: argparse.Namespace, keep_fields: tuple[str, ...] = (), extra_fields: tuple[str, ...] = ()):
    """The SourceOptions of the parsed flags; a contradiction is a UserError."""
    from pipelines.core.inputs import InputError
    from pipelines.datasets.sources import SourceOptions

    try:
        return SourceOptions(format=args.format, text_field=args.text_field, id_field=args.id_field or None,
                             text_unit=args.text_unit, separator=args.separator,
                             invalid_utf8=args.invalid_utf8, keep_fields=tuple(keep_fields),
                             extra_fields=tuple(extra_fields),
                             max_record_bytes=args.max_record_bytes or None)
    except InputError as exc:
        raise UserError(str(exc)) from None


def expand(inputs: list[str], options, allow_empty: bool = False) -> list:
    """Match the input shards once, at launch, and check each one's format against the options, so
    that nothing matching, an unknown extension or a txt-only flag on JSONL fails before any work."""
    from pipelines.core.inputs import InputError
    from pipelines.datasets.sources import expand_inputs, output_name, shard_format

    if not inputs:
        raise UserError("no input: give --input GLOB (or the files after the options)")
    memory = [url for url in inputs if url.startswith("memory://")]
    if memory:
        raise UserError(f"memory:// inputs live inside one process, which Beam's workers do not share: "
                        f"{', '.join(memory)}")
    try:
        try:
            shards = expand_inputs(inputs)
        except InputError as exc:
            if not (allow_empty and "matched no files" in str(exc)):
                raise
            shards = []       # --watch: the files are yet to come
        for shard in shards:
            shard_format(shard, options)
    except InputError as exc:
        raise UserError(str(exc)) from None
    # `a.jsonl` and `a.txt.gz` would both write `a.parquet` (and rejected/a.jsonl): one would be lost.
    claimed: dict[str, str] = {}
    for shard in shards:
        other = claimed.setdefault(output_name(shard.relpath), shard.url)
        if other != shard.url:
            raise UserError(f"inputs {other} and {shard.url} would both write {output_name(shard.relpath)}; "
                            f"rename one of them")
    return shards


def rejected_url(output: str, shard) -> str:
    """Where a shard's rejected records go: `OUTPUT/rejected/<shard name>.jsonl` (with its part's
    label for a part of a file)."""
    return join(output, REJECTED_DIR, shard.output_name(".jsonl"))


def plan(shards: list, options, size: int) -> tuple[list, dict[str, str]]:
    """The run's work units (`parts.plan_parts`): the shards, large files cut into parts of about
    `size` bytes (0: none). Returns them with {relpath: why read whole} for large files that are not."""
    from pipelines.datasets.parts import plan_parts

    try:
        return plan_parts(shards, options, size)
    except OSError as exc:
        raise UserError(f"cannot plan the parts of the inputs: {exc}") from None


def parts_said(shards: list, units: list) -> str:
    """`, read as 12 parts` for the launch line when large files were split, else ""."""
    return "" if len(units) == len(shards) else f", read as {len(units)} parts (--split-size)"


def first_rows(p, units: list, options):
    """A Beam side input of pipeline `p` for the tokenize and count DoFns: {(url, part index): rows
    it holds} for the byte-range parts whose rows must be counted before the later parts of their
    file are numbered (a first pass over the bytes, spread like the parts, that neither decodes
    nor parses; a file's last part is never needed), or None when no part needs it. Whole files and
    Parquet parts know their first row already."""
    from pipelines.core.beam_options import beam

    counted = [u for u in units if u.part is not None and u.part.first_row is None and u.part.index < u.part.count - 1]
    if not counted:
        return None
    return beam.pvalue.AsDict(p
                              | "PartsToCount" >> beam.Create(counted)
                              | "SpreadPartsToCount" >> beam.Reshuffle()
                              | "CountPartRows" >> beam.Map(part_rows, options))


def part_rows(unit, options) -> tuple[tuple[str, int], int]:
    from pipelines.datasets.parts import count_rows

    return (unit.url, unit.part.index), count_rows(unit, options)


def numbered(shard, rows: dict | None):
    """The shard with its part's first row number set from `first_rows`' counts."""
    from pipelines.datasets.parts import with_first_row

    return shard if rows is None else with_first_row(shard, rows)


def describe_shard_error(error: dict) -> str:
    """One line for a shard error ({source, rows_read, reason, detail}): which file, what is wrong,
    what was kept."""
    kept = (f"its first {error['rows_read']:,} rows were read, the rest is lost" if error["rows_read"]
            else "nothing could be read from it")
    return f"{error['source']}: {error['reason']} ({error['detail']}); {kept}"


def warn_mostly_rejected(account: Account) -> None:
    """Most records rejected is a legal run that is probably not what was meant (a --max-record-bytes
    in the wrong unit, a wrong --text-field): say so, with the reasons (of the run's `Account`)."""
    records_read, rejected_by_reason, rejected = account.records_read, account.reasons(), account.records_rejected
    if records_read and rejected * 2 > records_read:
        reasons = ", ".join(f"{n:,} {reason}" for reason, n in sorted(rejected_by_reason.items(), key=lambda kv: -kv[1]))
        hint = " (is --max-record-bytes right?)" if "record_too_large" in rejected_by_reason else ""
        warn(f"{rejected:,} of {records_read:,} records ({rejected / records_read:.1%}) were rejected: {reasons}"
             f"{hint}; see rejected/")


def warn_shard_errors(errors: list[dict], allowed: bool) -> None:
    """A warning line for each shard that could not be read, said once: unless `allowed`
    (--allow-shard-errors), the run fails with an error line naming the first, so that one gets no
    warning of its own."""
    for error in errors if allowed else errors[1:]:
        warn(describe_shard_error(error))


def fail_fast_failure(item: Rejected | ShardError) -> ShardFailure:
    """The one-line failure `--fail-fast` raises for the first rejected record or unreadable shard."""
    if isinstance(item, Rejected):
        return ShardFailure(f"--fail-fast: {item.source} row {item.row}: rejected, {item.reason}: {item.detail}")
    return ShardFailure(f"--fail-fast: {item.source} row {item.rows_read}: unreadable from here, "
                        f"{item.reason}: {item.detail}")


@dataclass
class ShardAccount:
    """What reading one shard came to: rows read = records handed out + rejected; the shard errors
    (at most one: the rest of the file could not be read) with the rows read before each."""
    relpath: str
    records_read: int = 0
    records: int = 0
    repaired: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    shard_errors: list[dict] = field(default_factory=list)

    @property
    def rejected(self) -> int:
        return sum(self.rejected_by_reason.values())

    def account(self, shards: int = 1) -> Account:
        """This shard's `schemas.accounts.Account` (`shards` 0 for a split file's later parts)."""
        return Account.of_shard(self.records_read, self.records, self.rejected_by_reason, self.repaired,
                                self.shard_errors, shards=shards)


class ShardReader:
    """Iterate over one shard's good records; set aside and account for everything else.

    `finish()` (call it once the records are consumed) writes the shard's rejected lines to
    `OUTPUT/rejected/<shard>.jsonl`, or removes that file when an earlier run left one and this run
    rejected nothing, and returns the `ShardAccount`.
    """

    def __init__(self, shard, source_options, output: str, fail_fast: bool = False, check=None):
        self.shard = shard
        self.check = check      # record -> (reason, detail) when the caller cannot use it, else None
        self.source_options = source_options
        self.output = output
        self.fail_fast = fail_fast
        self.account = ShardAccount(shard.relpath)
        self.rejected_lines: list[str] = []

    def __iter__(self):
        from pipelines.datasets.sources import read_shard

        for item in read_shard(self.shard, self.source_options, progress=bytes_read().add):
            record = self._take(item)
            if record is not None:
                yield record

    def batches(self, utf8: bool = False):
        """The good records in runs, in file order: those one read of a JSONL shard completes, or
        one batch of a Parquet shard's rows (`read_shard(batched=True)`: a `RecordRun`, columns with
        no object per record, where the compiled pass or Arrow read them, else a list), one at a
        time for text shards; everything else set aside and accounted for as `__iter__` does. A
        reader of short records pays its per-record steps a run at a time. With `utf8`, a run's texts
        may be the UTF-8 read (`Utf8Texts`), for an encoder that reads them so."""
        from pipelines.datasets.sources import read_shard

        account = self.account
        for item in read_shard(self.shard, self.source_options, progress=bytes_read().add, batched=True, utf8=utf8):
            if type(item) in RUNS and self.check is None:
                account.records_read += len(item)
                account.records += len(item)
                account.repaired += item.repaired if type(item) is RecordRun else sum(map(REPAIRED, item))
                yield item
                continue
            kept = [record for record in map(self._take, item if type(item) in RUNS else (item,))
                    if record is not None]
            if kept:
                yield kept

    def _take(self, item):
        """A record read (a Record, Rejected or ShardError): the Record to use, else None, what was
        set aside counted (and listed) or, with fail_fast, raised."""
        from pipelines.datasets.sources import Record

        account = self.account
        refused = self.check(item) if self.check is not None and isinstance(item, Record) else None
        if refused is not None:
            item = Rejected(self.shard.url, item.row, *refused, item.id)
        if isinstance(item, Record):
            account.records_read += 1
            account.records += 1
            account.repaired += item.repaired
            return item
        if self.fail_fast:
            raise fail_fast_failure(item)
        self.rejected_lines.append(json.dumps(rejected_to_json(item), ensure_ascii=False))
        if isinstance(item, Rejected):
            account.records_read += 1
            reasons = account.rejected_by_reason
            reasons[item.reason] = reasons.get(item.reason, 0) + 1
        else:   # ShardError: the rest of the file is unreadable; the rows before it stay
            error = {"source": item.source, "rows_read": item.rows_read, "reason": item.reason,
                     "detail": item.detail}
            account.shard_errors.append(error)
        return None

    def finish(self) -> ShardAccount:
        url = rejected_url(self.output, self.shard)
        with writing(url):
            if self.rejected_lines:
                write_text_atomic(url, "\n".join(self.rejected_lines) + "\n")
            else:
                remove(url)
        self.account.rejected_by_reason = dict(sorted(self.account.rejected_by_reason.items()))
        return self.account


# --- progress by bytes read -------------------------------------------------------------------------
# A worker counts the bytes it reads (inside a file too) into a Beam counter and, when the launcher
# shares its machine (the local runners), into a file of its own in the launcher's progress folder,
# which the launcher sums into one line for the whole job. A worker elsewhere (Dataflow, a cluster)
# says and logs its own figures instead.

PROGRESS_DIR_VARIABLE = "TOKENBEAM_PROGRESS_DIR"     # inherited by the local runner's worker processes
PROGRESS_WRITE_SECONDS = 1.0


class BytesRead:
    """The bytes this process has read from the inputs."""

    def __init__(self):
        self.lock = threading.Lock()
        self.total = 0
        self.started = time.monotonic()
        self.shown = self.started      # when it was last written or said
        self.counter = None

    def add(self, n: int) -> None:
        if not n:
            return
        if self.counter is None:
            from pipelines.core.beam_options import beam
            self.counter = beam.metrics.Metrics.counter("tokenbeam", "bytes_read")
        self.counter.inc(n)       # outside a DoFn call Beam drops it
        with self.lock:
            self.total += n
            now = time.monotonic()
            folder = os.environ.get(PROGRESS_DIR_VARIABLE)
            if now - self.shown < (PROGRESS_WRITE_SECONDS if folder else PROGRESS_SECONDS):
                return
            self.shown = now
            total = self.total
        if folder:
            self.write(folder, total)
        else:
            line = (f"this worker has read {total / 1e6:,.1f} MB of input, "
                    f"{total / 1e6 / max(now - self.started, 1e-9):.1f} MB/s")
            logging.getLogger("tokenbeam").info(line)
            say(line)

    @staticmethod
    def write(folder: str, total: int) -> None:
        path = os.path.join(folder, str(os.getpid()))
        try:
            with open(path + ".tmp", "w") as f:
                f.write(str(total))
            os.replace(path + ".tmp", path)
        except OSError:           # the run has ended and the folder is gone
            pass


_BYTES_READ: BytesRead | None = None
_BYTES_READ_LOCK = threading.Lock()


def bytes_read() -> BytesRead:
    """This process's count of bytes read (one for the process: every DoFn thread adds to it)."""
    global _BYTES_READ
    with _BYTES_READ_LOCK:
        if _BYTES_READ is None:
            _BYTES_READ = BytesRead()
        return _BYTES_READ


def progress_line(done: int, total: int, seconds: float) -> str:
    """`read 123.4 of 520.0 MB (23.7%), 45.1 MB/s, about 0:08 left`."""
    done = min(done, total)
    rate = done / max(seconds, 1e-9)
    left = (total - done) / rate if rate > 0 else None
    eta = f"about {int(left // 60)}:{int(left % 60):02d} left" if left is not None else "estimating time left"
    return (f"read {done / 1e6:,.1f} of {total / 1e6:,.1f} MB ({done / max(total, 1):.1%}), "
            f"{rate / 1e6:.1f} MB/s, {eta}")


@contextmanager
def job_progress(shards: list, unbounded: bool = False):
    """Around a pipeline run over `shards`: every PROGRESS_SECONDS, one line of the bytes the whole
    job has read, its rate and the time left, summed from the files the workers on this machine
    write (none under `--quiet`, nor for an `unbounded` run, whose total is unknown)."""
    global _BYTES_READ
    if unbounded:
        yield
        return
    total = sum(s.size for s in shards)
    folder = tempfile.mkdtemp(prefix="tokenbeam-progress-")
    saved = os.environ.get(PROGRESS_DIR_VARIABLE)
    os.environ[PROGRESS_DIR_VARIABLE] = folder
    with _BYTES_READ_LOCK:
        _BYTES_READ = None          # this process's count starts with the run
    stop = threading.Event()
    started = time.monotonic()

    def report():
        last = None
        while not stop.wait(PROGRESS_SECONDS):
            done = read_so_far(folder)
            if done and done != last:
                say(progress_line(done, total, time.monotonic() - started))
                last = done

    reporter = threading.Thread(target=report, name="tokenbeam-progress", daemon=True)
    reporter.start()
    try:
        yield
    finally:
        stop.set()
        reporter.join()
        if saved is None:
            os.environ.pop(PROGRESS_DIR_VARIABLE, None)
        else:
            os.environ[PROGRESS_DIR_VARIABLE] = saved
        shutil.rmtree(folder, ignore_errors=True)


def read_so_far(folder: str) -> int:
    total = 0
    for name in os.listdir(folder):
        if not name.endswith(".tmp"):
            try:
                with open(os.path.join(folder, name)) as f:
                    total += int(f.read() or 0)
            except (OSError, ValueError):
                pass
    return total

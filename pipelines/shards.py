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
from dataclasses import dataclass, field

from schemas.records import Rejected, ShardError, rejected_to_json
from pipelines.errors import ShardFailure, UserError, warn
from pipelines.files import join, remove, write_text_atomic, writing

REJECTED_DIR = "rejected"
SIZE_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
COUNT_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}


def byte_size(text: str) -> int:
    """`--max-record-bytes` values: a number of bytes with an optional K, M or G (binary) suffix;
    0 means no bound. `byte_size("16M")` -> 16777216."""
    return scaled_number(text, text.strip().lower().removesuffix("b").removesuffix("i"), SIZE_SUFFIXES,
                         "a size", "bytes, or a number with K, M or G")


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


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The input flags both pipelines take (DESIGN.md section 5, Sources)."""
    from pipelines.sources import DEFAULT_MAX_RECORD_BYTES

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
    parser.add_argument("--fail-fast", action="store_true",
                        help="stop at the first rejected record or unreadable file, naming shard and row "
                             "(default: set them aside, report them, and go on)")
    parser.add_argument("--allow-shard-errors", action="store_true",
                        help="a shard that cannot be read is a warning, not a failed run (exit 0, _SUCCESS)")


def source_options(args: argparse.Namespace, keep_fields: tuple[str, ...] = (), extra_fields: tuple[str, ...] = ()):
    """The SourceOptions of the parsed flags; a contradiction is a UserError."""
    from pipelines.inputs import InputError
    from pipelines.sources import SourceOptions

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
    from pipelines.inputs import InputError
    from pipelines.sources import expand_inputs, output_name, shard_format

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


def rejected_url(output: str, relpath: str) -> str:
    """Where a shard's rejected records go: `OUTPUT/rejected/<shard name>.jsonl`."""
    from pipelines.sources import output_name

    return join(output, REJECTED_DIR, output_name(relpath, ".jsonl"))


def describe_shard_error(error: dict) -> str:
    """One line for a shard error ({source, rows_read, reason, detail}): which file, what is wrong,
    what was kept."""
    kept = (f"its first {error['rows_read']:,} rows were read, the rest is lost" if error["rows_read"]
            else "nothing could be read from it")
    return f"{error['source']}: {error['reason']} ({error['detail']}); {kept}"


def warn_mostly_rejected(records_read: int, rejected_by_reason: dict[str, int]) -> None:
    """Most records rejected is a legal run that is probably not what was meant (a --max-record-bytes
    in the wrong unit, a wrong --text-field): say so, with the reasons."""
    rejected = sum(rejected_by_reason.values())
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
        from pipelines.sources import Record, read_shard

        account = self.account
        for item in read_shard(self.shard, self.source_options):
            refused = self.check(item) if self.check is not None and isinstance(item, Record) else None
            if refused is not None:
                item = Rejected(self.shard.url, item.row, *refused, item.id)
            if isinstance(item, Record):
                account.records_read += 1
                account.records += 1
                account.repaired += item.repaired
                yield item
                continue
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

    def finish(self) -> ShardAccount:
        url = rejected_url(self.output, self.shard.relpath)
        with writing(url):
            if self.rejected_lines:
                write_text_atomic(url, "\n".join(self.rejected_lines) + "\n")
            else:
                remove(url)
        self.account.rejected_by_reason = dict(sorted(self.account.rejected_by_reason.items()))
        return self.account

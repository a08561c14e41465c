"""What both pipelines share: the command-line surface, Beam options and fsspec file helpers.

The tool's own flags are parsed with argparse; everything else goes to Beam's `PipelineOptions`
unchanged (the way Beam's `wordcount` example does it).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import io
import logging
import os
import re
import tempfile
import json
import posixpath
import sys
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import fsspec


class UserError(Exception):
    """An error the user can fix; the CLI prints its one-line message (no traceback) and exits 2."""


class ShardFailure(Exception):
    """A failure inside a Beam worker that the user must see as one line: `--fail-fast` meeting a bad
    record or file, an output that cannot be written. Beam re-raises a DoFn's exception with the step
    name appended (in process) or as the text of the worker's traceback (worker processes, Dataflow),
    so the message carries a marker that `pipeline_failures` finds in either form."""
    MARK = "[tokenbeam] "

    def __init__(self, message: str):
        super().__init__(message if message.startswith(self.MARK) else self.MARK + message)


_FAILURE_LINE = re.compile(re.escape(ShardFailure.MARK) + r"(.*?)(?: \[while running '[^']*'\])*$", re.M)
_WORKER_DIED = "Channel closed prematurely"     # what the local runner raises when a worker dies


class _HideShardFailures(logging.Filter):
    """Drop Beam's log record of a ShardFailure (a traceback): the user gets its one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return ShardFailure.MARK not in record.getMessage()


@contextlib.contextmanager
def pipeline_failures(output: str) -> Iterator[None]:
    """Run a Beam pipeline inside this block: a ShardFailure raised in a worker, or a worker process
    that died, becomes a one-line UserError; anything else is a bug and keeps its traceback.
    TOKENBEAM_DEBUG=1 keeps Beam's own log of the failure."""
    hide = _HideShardFailures()
    loggers = [] if os.environ.get("TOKENBEAM_DEBUG") == "1" else [
        logging.getLogger(name) for name in ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker")]
    for logger in loggers:
        logger.addFilter(hide)
    try:
        yield
    except Exception as exc:
        found = _FAILURE_LINE.search(str(exc))
        if found:
            raise UserError(found.group(1)) from exc
        if _WORKER_DIED in str(exc):
            raise UserError(f"a Beam worker process died during the run ({_WORKER_DIED.lower()}); the files "
                            f"already under {output} are complete: rerun the same command to do the rest") from exc
        raise
    finally:
        for logger in loggers:
            logger.removeFilter(hide)


@contextlib.contextmanager
def writing(url: str) -> Iterator[None]:
    """Inside a worker: an OSError while writing `url` (a read-only or full filesystem, a file where a
    folder should be) becomes a ShardFailure naming it."""
    try:
        yield
    except OSError as exc:
        raise ShardFailure(f"cannot write {url}: {os_error_reason(exc)}") from exc


def os_error_reason(exc: OSError) -> str:
    """`No space left on device`-style text of an OSError, with the path it names if any."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{reason} ({exc.filename})" if exc.filename and exc.strerror else reason


# --- paths and files (any fsspec URL) ----------------------------------------------------------

def join(base: str, *parts: str) -> str:
    """Join URL/path parts with '/', keeping the scheme of `base` (`s3://b/x` + `y` -> `s3://b/x/y`)."""
    return posixpath.join(base.rstrip("/") or "/", *parts) if "://" not in base else "/".join(
        [base.rstrip("/")] + [p.strip("/") for p in parts])


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of `url` and the path inside it. (fsspec is imported on first use:
    `tokenbeam train` starts its counting process before it needs a file.)"""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def makedirs(url: str) -> None:
    fs, path = filesystem(url)
    fs.makedirs(path, exist_ok=True)


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


@contextlib.contextmanager
def open_atomic(url: str, mode: str = "wb") -> Iterator:
    """Open `url` for writing under a temporary name and rename it into place when the block succeeds.

    A crash mid-write leaves only a hidden `.NAME.tmp-*` file, never a file that looks complete under
    its final name. On object stores the rename is a copy + delete, so a worker killed in between (a
    retried bundle on Dataflow) can leave the temporary next to the final file: its name ends in
    `.tmp-*`, not in the final extension, so the globs that read outputs (`counts/*.parquet`) skip it.
    """
    fs, path = filesystem(url)
    parent, name = posixpath.split(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    tmp = posixpath.join(parent, f".{name}.tmp-{uuid.uuid4().hex}")
    try:
        with fs.open(tmp, mode) as f:
            yield f
        fs.mv(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm(tmp)
        raise


_TEMPORARY = re.compile(r"\..+\.tmp-[0-9a-f]{32}")     # open_atomic's temporary names


def remove_stale_temporaries(output: str) -> int:
    """Remove the temporaries that a killed worker left under `output` (open_atomic cleans up after
    itself otherwise). Called by the launcher before a run starts, when no worker of this run can be
    writing one; returns how many were removed."""
    fs, path = filesystem(output)
    if not fs.exists(path):
        return 0
    stale = [f for f in fs.find(path) if _TEMPORARY.fullmatch(posixpath.basename(f))]
    for f in stale:
        fs.rm(f)
    return len(stale)


def write_text_atomic(url: str, text: str) -> None:
    with open_atomic(url, "wb") as f:
        f.write(text.encode("utf-8"))


def read_json(url: str) -> dict:
    fs, path = filesystem(url)
    with fs.open(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


@dataclass(frozen=True)
class TokenizerRef:
    """A tokenizer as the launcher identified it: where it is, its `sha256` (of the canonical
    tokenizer.json text, which takes 0.4-1.6 s to build at 32k ids: the launcher computes it once and
    the workers take it from here) and the SHA-256 of the file's raw bytes (milliseconds), by which
    each worker checks that it loaded the very file the launcher hashed."""
    url: str
    sha256: str
    file_sha256: str


def identify_tokenizer(url: str):
    """Load the tokenizer at `url` (launcher side): `(Tokenizer, TokenizerRef)`; UserError when unusable."""
    tok = load_tokenizer(url)
    return tok, TokenizerRef(url, tok.sha256, tokenizer_file_sha256(url))


def load_identified_tokenizer(ref: TokenizerRef):
    """Load the tokenizer `ref` names (worker side); UserError when unusable or no longer the file the
    launcher identified (the sha256 that goes into every output would be false)."""
    tok = load_tokenizer(ref.url)
    # Hashed after loading: a file replaced before the load still differs from the launcher's.
    if tokenizer_file_sha256(ref.url) != ref.file_sha256:
        raise UserError(f"tokenizer {ref.url} changed since the run started; rerun the command")
    return tok


def tokenizer_file_sha256(url: str) -> str:
    """Hex SHA-256 of the raw bytes of the tokenizer.json at `url` (or in the folder `url`)."""
    fs, path = filesystem(url)
    try:
        if fs.isdir(path):
            path = path.rstrip("/") + "/tokenizer.json"
        with fs.open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as exc:
        raise UserError(f"cannot use tokenizer {url}: {os_error_reason(exc)}") from None


def settle_heap() -> None:
    """Collect garbage once, then freeze every object left (`gc.freeze`), for a process whose objects
    live to its end (a Beam worker process: Beam's modules, the loaded tokenizer). Every full
    collection and the interpreter's exit would walk them again: a process that imported Beam took
    ~1 s to exit, 0.3 s once frozen, and the local runner stops its workers one after another.
    Not for a library caller's process: a frozen object dropped later in a reference cycle is never
    freed."""
    gc.collect()
    gc.freeze()


def load_tokenizer(url: str):
    """Load a tokenizer.json (or a folder holding one) from any fsspec URL; UserError when unusable."""
    from bpe_ops import Tokenizer

    try:
        if "://" not in url or url.startswith("file://"):
            return Tokenizer.from_file(url[len("file://"):] if url.startswith("file://") else url)
        fs, path = filesystem(url)
        if fs.isdir(path):
            path = path.rstrip("/") + "/tokenizer.json"
        with tempfile.TemporaryDirectory() as tmp:
            local = os.path.join(tmp, "tokenizer.json")
            fs.get(path, local)
            return Tokenizer.from_file(local)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot use tokenizer {url}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    except (TypeError, KeyError, AttributeError, IndexError, OverflowError) as exc:
        # A file of the right shape with a value of the wrong type (an id written as a string...).
        raise UserError(f"cannot use tokenizer {url}: malformed tokenizer.json "
                        f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


# --- Beam options -------------------------------------------------------------------------------

SUPPORTED_RUNNING_MODES = ("in_memory", "multi_processing")


def pipeline_options(beam_args: list[str]):
    """Beam `PipelineOptions` from the arguments argparse did not claim, plus the runner to use.

    Without `--runner`, the local FnApiRunner is pinned: Beam 2.77's DirectRunner would first try to
    download a Prism binary. `multi_threading` is refused: it lost records in our measurements.
    """
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

    options = PipelineOptions(beam_args)
    # Beam parses its flags with argparse on first use: a bad value prints usage and exits. Keep
    # argparse's own line and make it ours.
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            direct = options.view_as(DirectOptions)
    except SystemExit:
        lines = said.getvalue().strip().splitlines() or ["invalid Beam options"]
        raise UserError(lines[-1].split("error: ", 1)[-1]) from None
    if direct.direct_running_mode not in SUPPORTED_RUNNING_MODES:
        raise UserError(
            f"--direct_running_mode={direct.direct_running_mode} is not supported: Beam's multi_threading "
            f"mode lost records in our measurements; use in_memory or multi_processing")
    runner = None
    named = options.view_as(StandardOptions).runner
    if named is None:
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner
        runner = FnApiRunner()
    else:
        from apache_beam.runners.runner import create_runner
        try:
            create_runner(named)         # what the pipeline will do; an unknown name fails here, in one line
        except (ValueError, ImportError) as exc:
            raise UserError(f"--runner {named}: {str(exc).splitlines()[0]}") from None
    return options, runner


def one_local_worker(options, runner) -> bool:
    """Whether the whole pipeline runs in this process (the pinned local runner in `in_memory` mode):
    there, spreading the shards over workers (a Reshuffle) is a stage (~0.2-0.3 s) for nothing."""
    from apache_beam.options.pipeline_options import DirectOptions

    return runner is not None and options.view_as(DirectOptions).direct_running_mode == "in_memory"


def local_cores_per_worker(options, runner) -> int:
    """The cores each worker may use for its own threads: on the pinned local runner, this machine's
    cores shared among its worker processes (all of them in one process in `in_memory` mode); on any
    other runner 1, since its workers already run one per core."""
    from apache_beam.options.pipeline_options import DirectOptions

    if runner is None:
        return 1
    direct = options.view_as(DirectOptions)
    cores = os.cpu_count() or 1
    # multi_processing with --direct_num_workers 0 (Beam: one worker per core) or unset (Beam: 1).
    workers = (direct.direct_num_workers or cores) if direct.direct_running_mode == "multi_processing" else 1
    return max(1, cores // workers)


def check_worker_paths(options, urls) -> None:
    """Refuse local paths on Dataflow, before the job is submitted: its workers run on other machines,
    so a local input would be unreadable there and a local output written to each worker's own disk
    and lost. (Flink and Spark clusters may share a mounted disk, so they are left to the user.)"""
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner or ""
    local = [url for url in urls if "://" not in url or url.startswith("file://")]
    if "dataflow" in runner.lower() and local:
        raise UserError(f"--runner {runner} runs on remote workers, which cannot see local paths "
                        f"({', '.join(local)}): use gs:// (or another object store) URLs")


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The input flags both pipelines take (DESIGN.md section 5, Sources)."""
    parser.add_argument("--input", action="append", required=True, metavar="GLOB",
                        help="input shards: a path or glob, local or any fsspec URL (repeatable)")
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
    parser.add_argument("--fail-fast", action="store_true",
                        help="stop at the first rejected record or unreadable file, naming shard and row "
                             "(default: set them aside, report them, and go on)")


def source_options(args: argparse.Namespace, keep_fields: tuple[str, ...] = ()):
    """The SourceOptions of the parsed flags; a contradiction is a UserError."""
    from pipelines.sources import InputError, SourceOptions

    try:
        return SourceOptions(format=args.format, text_field=args.text_field, id_field=args.id_field or None,
                             text_unit=args.text_unit, separator=args.separator,
                             invalid_utf8=args.invalid_utf8, keep_fields=tuple(keep_fields))
    except InputError as exc:
        raise UserError(str(exc)) from None


def expand(args: argparse.Namespace, options) -> list:
    """Match the input shards once, at launch, and check each one's format against the options, so
    that nothing matching, an unknown extension or a txt-only flag on JSONL fails before any work."""
    from pipelines.sources import InputError, expand_inputs, output_name, shard_format

    try:
        shards = expand_inputs(args.input)
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


def fail_fast_failure(item) -> ShardFailure:
    """The one-line failure `--fail-fast` raises for the first rejected record (`sources.Rejected`)
    or unreadable rest of a shard (`sources.ShardError`)."""
    from schemas.records import Rejected

    if isinstance(item, Rejected):
        return ShardFailure(f"--fail-fast: {item.source} row {item.row}: rejected, {item.reason}: {item.detail}")
    return ShardFailure(f"--fail-fast: {item.source} row {item.rows_read}: unreadable from here, "
                        f"{item.reason}: {item.detail}")


def shard_error_record(error) -> dict:
    """A `sources.ShardError` as the record reports keep: {source, rows_read, reason, detail}."""
    return {"source": error.source, "rows_read": error.rows_read, "reason": error.reason, "detail": error.detail}


def describe_shard_error(error: dict) -> str:
    """One line for a shard error ({source, rows_read, reason, detail}): which file, what is wrong,
    what was kept."""
    kept = (f"its first {error['rows_read']:,} rows were read, the rest is lost" if error["rows_read"]
            else "nothing could be read from it")
    return f"{error['source']}: {error['reason']} ({error['detail']}); {kept}"


def say(message: str) -> None:
    """A progress/summary line on stderr (stdout stays clean for machine-readable output)."""
    print(message, file=sys.stderr, flush=True)

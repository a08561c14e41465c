"""What both pipelines share: the command-line surface, Beam options and fsspec file helpers.

The tool's own flags are parsed with argparse; everything else goes to Beam's `PipelineOptions`
unchanged (the way Beam's `wordcount` example does it).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import json
import posixpath
import sys
import uuid
from typing import Iterator

import fsspec


class UserError(Exception):
    """An error the user can fix; the CLI prints its one-line message (no traceback) and exits 2."""


# --- paths and files (any fsspec URL) ----------------------------------------------------------

def join(base: str, *parts: str) -> str:
    """Join URL/path parts with '/', keeping the scheme of `base` (`s3://b/x` + `y` -> `s3://b/x/y`)."""
    return posixpath.join(base.rstrip("/") or "/", *parts) if "://" not in base else "/".join(
        [base.rstrip("/")] + [p.strip("/") for p in parts])


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of `url` and the path inside it."""
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

    A crash mid-write leaves only a `.tmp-*` file, never a file that looks complete under its final
    name. On object stores the rename is a copy + delete, which is still all-or-nothing for readers.
    """
    fs, path = filesystem(url)
    parent = posixpath.dirname(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{posixpath.basename(path)}" if parent else f".tmp-{uuid.uuid4().hex}"
    try:
        with fs.open(tmp, mode) as f:
            yield f
        fs.mv(tmp, path)
    except BaseException:
        with contextlib.suppress(Exception):
            fs.rm(tmp)
        raise


def write_text_atomic(url: str, text: str) -> None:
    with open_atomic(url, "wb") as f:
        f.write(text.encode("utf-8"))


def read_json(url: str) -> dict:
    with fsspec.open(url, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


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


# --- Beam options -------------------------------------------------------------------------------

SUPPORTED_RUNNING_MODES = ("in_memory", "multi_processing")


def pipeline_options(beam_args: list[str]):
    """Beam `PipelineOptions` from the arguments argparse did not claim, plus the runner to use.

    Without `--runner`, the local FnApiRunner is pinned: Beam 2.77's DirectRunner would first try to
    download a Prism binary. `multi_threading` is refused: it lost records in our measurements.
    """
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

    options = PipelineOptions(beam_args)
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode not in SUPPORTED_RUNNING_MODES:
        raise UserError(
            f"--direct_running_mode={direct.direct_running_mode} is not supported: Beam's multi_threading "
            f"mode lost records in our measurements; use in_memory or multi_processing")
    runner = None
    if options.view_as(StandardOptions).runner is None:
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner
        runner = FnApiRunner()
    return options, runner


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
    from pipelines.sources import InputError, expand_inputs, shard_format

    try:
        shards = expand_inputs(args.input)
        for shard in shards:
            shard_format(shard, options)
    except InputError as exc:
        raise UserError(str(exc)) from None
    return shards


def say(message: str) -> None:
    """A progress/summary line on stderr (stdout stays clean for machine-readable output)."""
    print(message, file=sys.stderr, flush=True)

"""`tokenbeam stats 'runs/tokens/*.parquet' --tokenizer T`: rebuild stats.json from token Parquet files.

Reads the columns `id`, `token_ids` (list<uint16|uint32>), `n_tokens`, `n_bytes`, `n_chars`, `n_words` with
pyarrow through fsspec, one record batch at a time (memory bounded by the batch, not the file), and
feeds the same `Summary` the tokenize pipeline uses, so the result equals the pipeline's stats.json
apart from `timing`. Token ids are counted per batch with numpy's bincount over the flat Arrow
values (no Python object per token). When a file's footer carries the tokenize pipeline's shard
record, its rejected and repaired counts and shard name are restored too. Every record is calibrated
(record id and token ids go to `Summary.add_batch`), so the result is fit for `tokenbeam drift`:
this is how a stats.json of an older version is brought up to date.

`--group-field NAME` rebuilds the per-group statistics (`groups/<value>.stats.json` beside the
output, and the `groups` index in it) from a kept column NAME (`tokenize --keep-field NAME`) or from
the `group` column of files tokenized with `--group-field NAME`; `--window DURATION` rebuilds the
per-window statistics (`windows/<UTC start>.stats.json`) from the `event_time` column of files
tokenized with `--timestamp-field`. Both replace what those folders held.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from bpe_ops.dropout import Dropout
from bpe_ops.stats import Summary
from schemas.stats import TokenizerFacts, dump_stats, stats_json
from pipelines.core import command
from pipelines.core.command import Command, add_quiet_argument
from pipelines.core.errors import UserError, say, set_quiet, shard_done
from pipelines.core.files import isdir, join, write_text_atomic
from pipelines.core.inputs import InputError, Sought, find_files
from pipelines.core.folders import check_finished, owner
from pipelines.statistics.breakdowns import Breakdowns, StatsError, Windowing, add_file
from pipelines.datasets.tokenizer_files import load_tokenizer


TOKEN_FILES = Sought(flag="", in_folder="*.parquet")    # the positional GLOBs: a folder names its token Parquet


def expand_globs(globs: list[str]) -> list[str]:
    """Every file matching the globs (local or fsspec URLs; a folder means its *.parquet), sorted."""
    try:
        return [found.url for found in find_files(globs, TOKEN_FILES)]
    except InputError as exc:
        raise StatsError(str(exc)) from None


def one_dropout(dropouts: dict) -> Dropout | None:
    """The one BPE-dropout setting of all the files (`add_file`'s `dropouts`); StatsError when they differ:
    one stats.json cannot describe data encoded two ways."""
    settings = {json.dumps(d, sort_keys=True): url for url, d in dropouts.items()}
    if len(settings) > 1:
        (a, url_a), (b, url_b) = list(settings.items())[:2]
        raise StatsError(f"the files were encoded with different BPE-dropout settings: {url_a} "
                         f"({a.replace('null', 'no dropout')}), {url_b} ({b.replace('null', 'no dropout')})")
    setting = next(iter(dropouts.values()), None)
    return Dropout(**setting) if setting else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quiet_argument(parser)
    parser.add_argument("inputs", nargs="+", metavar="GLOB", help="token Parquet files (paths, globs, fsspec URLs)")
    parser.add_argument("--tokenizer", required=True, help="the tokenizer.json they were made with (or its folder)")
    parser.add_argument("--output", default="stats.json", help="where to write stats.json (default: %(default)s)")
    parser.add_argument("--group-field", metavar="NAME",
                        help="also rebuild per-group statistics (groups/ beside --output) from a kept column NAME "
                             "or the group column of files tokenized with --group-field NAME")
    parser.add_argument("--window", metavar="DURATION",
                        help="also rebuild per-window statistics (windows/ beside --output) from the event_time "
                             "column (files tokenized with --timestamp-field): 15m, 1h, 1d, ...")


def stats_output(url: str) -> str:
    """Where `--output URL` writes: URL, or URL/stats.json when URL is a folder. The folder must not
    be another command's than tokenize's (whose stats.json this rebuilds)."""
    if isdir(url):
        url = join(url, "stats.json")
    folder = url.rsplit("/", 1)[0] if "/" in url else "."
    found = owner(folder)
    if found is not None and found[0] != "tokenize":
        raise UserError(f"--output {url} is inside the output of `tokenbeam {found[0]}` ({found[1]}); give a "
                        f"path outside it")
    return url


def rebuild(argv: list[str]) -> int:
    """Run `tokenbeam stats ARGV`: 0 when written; UserError otherwise."""
    return command.run(COMMAND, argv)


def rebuild_parsed(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    from pipelines.statistics.windows import parse_duration

    started = time.time()
    set_quiet(args.quiet)
    try:
        window_seconds = None if args.window is None else parse_duration(args.window)
        if args.group_field == "":
            raise StatsError("--group-field must not be empty")
        urls = expand_globs(args.inputs)    # before loading the tokenizer: a typo fails at once
        for folder in sorted({url.rsplit("/", 1)[0] if "/" in url else "." for url in urls}):
            check_finished(folder, "input", "stats")
        args.output = stats_output(args.output)
        tok = load_tokenizer(args.tokenizer)
        facts = TokenizerFacts.of(tok)
        summary = Summary(tok.vocab_size, raw_byte_ids=facts.raw_byte_ids)
        breakdowns = None
        if args.group_field is not None or window_seconds is not None:
            windowing = None if window_seconds is None else Windowing(None, window_seconds)
            breakdowns = Breakdowns(windowing, args.group_field).summaries(tok.vocab_size, facts.raw_byte_ids)
        dropouts: dict = {}
        for url in urls:
            rows = add_file(summary, url, tok.sha256, breakdowns, tok.decode_bytes, dropouts)
            shard_done(f"read {url}: {rows:,} rows")
        facts = TokenizerFacts.of(tok, dropout=one_dropout(dropouts))
        output_dir = args.output.rsplit("/", 1)[0] if "/" in args.output else "."
        groups = breakdowns.write(output_dir, facts, args.tokenizer) if breakdowns is not None else None
        extra = {"inputs": args.inputs, "tokenizer": args.tokenizer, "timing": {
            "started_at": started, "elapsed_seconds": round(time.time() - started, 3)}}
        if groups is not None:
            extra["groups"] = groups
        stats = stats_json(summary, facts, extra)
        write_text_atomic(args.output, dump_stats(stats))
    except (StatsError, OSError, ValueError) as exc:
        raise UserError(str(exc).splitlines()[0]) from None
    say(f"{stats['records']:,} records, {stats['tokens']:,} tokens -> {args.output}"
        + (f"; {len(groups):,} group(s)" if groups is not None else ""))
    return 0


COMMAND = Command(name="stats", help="rebuild stats.json from existing token Parquet files",
                  usage="tokenbeam stats GLOB [GLOB ...] --tokenizer T [options]", description=__doc__.split("\n")[0],
                  add_arguments=add_arguments, run=rebuild_parsed,
                  leftovers="stats takes token Parquet files and its own options")


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.stats_cmd ARGV` (the same as `tokenbeam stats ARGV`): 0 when written, 2 with one
    line `tokenbeam: error: ...` otherwise."""
    return command.main(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())

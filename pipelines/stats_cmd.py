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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from schemas import tables
from bpe_ops.dropout import Dropout
from bpe_ops.stats import Summary, digit_runs_batch
from schemas.stats import TokenizerFacts, dump_stats, stats_json
from pipelines import command
from pipelines.command import Command, add_quiet_argument
from pipelines.errors import UserError, say, set_quiet, shard_done
from pipelines.files import isdir, join, open_read, remove_tree, write_text_atomic
from pipelines.inputs import InputError, Sought, find_files
from pipelines.folders import check_finished, owner
from pipelines.tokenizer_files import load_tokenizer

COLUMNS = ("id", "token_ids", "n_tokens", "n_bytes", "n_chars", "n_words")
STAT_COLUMNS = COLUMNS[2:]
BATCH_ROWS = 8_192


class StatsError(Exception):
    """A problem with the inputs; `main` prints its one-line message and exits 2."""


TOKEN_FILES = Sought(flag="", in_folder="*.parquet")    # the positional GLOBs: a folder names its token Parquet


def expand_globs(globs: list[str]) -> list[str]:
    """Every file matching the globs (local or fsspec URLs; a folder means its *.parquet), sorted."""
    try:
        return [found.url for found in find_files(globs, TOKEN_FILES)]
    except InputError as exc:
        raise StatsError(str(exc)) from None


class Breakdowns:
    """Per-group and per-window summaries fed from token Parquet (each None unless asked): those
    `tokenbeam stats` rebuilds beside the dataset's, or a reused shard's partials in tokenize."""

    def __init__(self, group_field: str | None, grouped=None, windowed=None):
        self.group_field = group_field
        self.grouped = grouped
        self.windowed = windowed

    @classmethod
    def new(cls, vocab_size: int, raw_byte_ids, group_field: str | None, window_seconds: float | None):
        from pipelines.groups import GroupedSummaries
        from pipelines.windows import WindowedSummaries

        return cls(group_field,
                   None if group_field is None else GroupedSummaries(vocab_size, raw_byte_ids=raw_byte_ids),
                   None if window_seconds is None else WindowedSummaries(vocab_size, window_seconds,
                                                                         raw_byte_ids=raw_byte_ids))

    def columns(self, pf: pq.ParquetFile, footer_entry: dict, url: str) -> list[str]:
        """The columns this file must give the breakdowns; UserError when it lacks one."""
        names = pf.schema_arrow.names
        wanted = []
        if self.windowed:
            if tables.EVENT_TIME_COLUMN not in names:
                raise UserError(f"{url} has no {tables.EVENT_TIME_COLUMN} column for --window: tokenize with "
                                f"--timestamp-field to have one")
            wanted.append(tables.EVENT_TIME_COLUMN)
        if self.grouped:
            wanted.append(self.group_column(names, footer_entry, url))
        return wanted

    def group_column(self, names: list[str], footer_entry: dict, url: str) -> str:
        field = self.group_field
        if field in names and field not in RESERVED_COLUMNS:
            return field                             # a kept field: the record's value (or its JSON text)
        read_fields = footer_entry.get("fingerprint", {}).get("source_options", {}).get("extra_fields", ())
        if tables.GROUP_COLUMN in names and field in read_fields:
            return tables.GROUP_COLUMN               # tokenized with --group-field FIELD: the group's name
        raise UserError(f"{url} holds no field {field!r} to group by: tokenize with --keep-field {field} "
                        f"or --group-field {field}")

    def add_batch(self, batch: pa.RecordBatch, columns: list, id_arrays: list, runs: list | None) -> None:
        from pipelines.groups import NO_GROUP

        record_ids = batch.column("id").to_pylist()
        if self.windowed:
            micros = batch.column(tables.EVENT_TIME_COLUMN).cast(pa.int64()).to_pylist()
            self.windowed.add_batch([None if m is None else m / 1e6 for m in micros], *columns, id_arrays,
                                    record_ids=record_ids, digit_runs=runs)
        if self.grouped:
            name = batch.schema.names[-1]
            values = batch.column(name).to_pylist()
            if name == tables.GROUP_COLUMN:
                values = [None if v == NO_GROUP else v for v in values]
            elif tables.kept_column_is_json(batch.schema.field(name)):
                values = [None if v is None else json.loads(v) for v in values]
            self.grouped.add_batch(values, *columns, id_arrays, record_ids=record_ids, digit_runs=runs)

    def write(self, output_dir: str, facts, tokenizer_url: str) -> dict | None:
        """Write the group and window files (replacing the folders); returns the `groups` index."""
        from pipelines.groups import GROUPS_FOLDER, write_group_stats
        from pipelines.windows import WINDOWS_FOLDER, write_window_stats

        index = None
        if self.grouped:
            remove_tree(join(output_dir, GROUPS_FOLDER))
            index = {value: write_group_stats(output_dir, value, summary, facts, self.group_field)
                     for value, summary in self.grouped.elements()}
        if self.windowed:
            remove_tree(join(output_dir, WINDOWS_FOLDER))
            for tv in self.windowed.elements():
                start = tv.timestamp.micros
                write_window_stats(output_dir, start, start + self.windowed.window_micros, tv.value, facts,
                                   {"tokenizer": tokenizer_url})
            say(f"{len(self.windowed.windows):,} window(s) -> {join(output_dir, WINDOWS_FOLDER)}/; "
                f"{self.windowed.untimed.records:,} untimed record(s), in stats.json only")
        return index


RESERVED_COLUMNS = {"id", "token_ids", *tables.STAT_COLUMNS, tables.EVENT_TIME_COLUMN, tables.GROUP_COLUMN}


def add_batch(summary: Summary, batch: pa.RecordBatch, where: str, breakdowns: Breakdowns | None = None,
              decode_bytes=None) -> None:
    """Add one record batch: id frequencies and per-record figures, a column at a time; each record
    calibrated with its id and token ids (views into the flat id buffer, no copy per record) and,
    given the tokenizer's `decode_bytes`, with the number formats of its text decoded from them."""
    ids = batch.column("token_ids")
    n_tokens = batch.column("n_tokens")
    for name in COLUMNS:
        if batch.column(name).null_count:
            raise StatsError(f"{where}: column {name} holds a null (tokenize writes none)")
    if not pc.all(pc.equal(pc.list_value_length(ids), n_tokens)).as_py():
        raise StatsError(f"{where}: n_tokens disagrees with the length of token_ids")
    for name in STAT_COLUMNS:
        if len(batch) and pc.min(batch.column(name)).as_py() < 0:
            raise StatsError(f"{where}: column {name} holds a negative count")
    flat = ids.flatten().to_numpy(zero_copy_only=False)
    if len(flat):
        if int(flat.max()) >= summary.vocab_size or int(flat.min()) < 0:
            bad = int(flat.max()) if int(flat.max()) >= summary.vocab_size else int(flat.min())
            raise StatsError(f"{where}: token id {bad} outside the tokenizer's "
                             f"{summary.vocab_size} ids (wrong --tokenizer?)")
        counts = np.bincount(flat, minlength=summary.vocab_size)
        used = np.flatnonzero(counts)
        summary.add_id_counts(dict(zip(used.tolist(), counts[used].tolist())))
    columns = [batch.column(c).to_pylist() for c in STAT_COLUMNS]
    if summary.raw_byte_ids is None:
        # A Summary made without the tokenizer's single-byte ids cannot be calibrated; its stats.json
        # says so (moments.records < records) and `tokenbeam drift` refuses it with that message.
        summary.add_batch(*columns)
        return
    bounds = np.cumsum(columns[0])[:-1]
    id_arrays = np.split(flat, bounds) if len(columns[0]) else []
    runs = None if decode_bytes is None else digit_runs_batch([decode_bytes(a.tolist()) for a in id_arrays])
    summary.add_batch(*columns, record_ids=batch.column("id").to_pylist(), id_arrays=id_arrays, digit_runs=runs)
    if breakdowns is not None:
        breakdowns.add_batch(batch, columns, id_arrays, runs)


def add_file(summary: Summary, url: str, sha256: str, breakdowns: Breakdowns | None = None,
             decode_bytes=None, dropouts: dict | None = None) -> int:
    """Add one token Parquet file; returns its rows (`decode_bytes`: see `add_batch`). `dropouts`
    collects `{url: the BPE-dropout {p, seed} its footer says the file was encoded with, or None}`."""
    rows = 0
    try:
        with open_read(url) as f:
            pf = pq.ParquetFile(f)
            meta = tables.file_metadata(pf.schema_arrow.metadata)
            written_with = meta.get(tables.TOKENIZER_SHA256_KEY)
            if written_with is not None and written_with != sha256:
                raise StatsError(f"{url} was written with tokenizer {written_with[:12]}..., "
                                 f"not the given one ({sha256[:12]}...)")
            check_columns(pf.schema_arrow, url)
            shard = tables.shard_record(tables.file_metadata(pf.metadata.metadata))
            extra_columns = breakdowns.columns(pf, shard, url) if breakdowns is not None else []
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=list(COLUMNS) + extra_columns):
                add_batch(summary, batch, url, breakdowns, decode_bytes)
                rows += batch.num_rows
    except (pa.ArrowException, OSError) as exc:
        raise StatsError(f"cannot read {url}: {str(exc).splitlines()[0]}") from None
    except ValueError as exc:     # a value the checks refused (a footer, a kept field's JSON text...)
        raise StatsError(f"{url}: {str(exc).splitlines()[0]}") from None
    if dropouts is not None:
        dropouts[url] = shard.get("fingerprint", {}).get("dropout")
    for reason, n in shard.get("rejected_by_reason", {}).items():
        summary.add_rejected(reason, n)
    summary.add_repaired(shard.get("repaired", 0))
    for error in shard.get("shard_errors", ()):
        summary.add_shard_error(error["source"], error["rows_read"], error["reason"], error["detail"])
    summary.add_shard(shard.get("relpath", url.rsplit("/", 1)[-1]))
    return rows


def check_columns(schema: pa.Schema, url: str) -> None:
    """StatsError unless the file has the token columns, each once, with types their readers can take."""
    repeated = tables.repeated_column(schema.names)
    if repeated is not None:
        raise StatsError(f"{url} holds the column {repeated!r} twice (not a tokenbeam token file?)")
    missing = [c for c in COLUMNS if c not in schema.names]
    if missing:
        raise StatsError(f"{url} lacks the column {missing[0]!r} (not a tokenbeam token file?)")
    id_type = schema.field("token_ids").type
    if not (pa.types.is_list(id_type) and pa.types.is_integer(id_type.value_type)):
        raise StatsError(f"{url}: token_ids is {id_type}, expected a list of integers")
    if not pa.types.is_string(schema.field("id").type):
        raise StatsError(f"{url}: id is {schema.field('id').type}, expected strings")
    for name in STAT_COLUMNS:
        if not pa.types.is_integer(schema.field(name).type):
            raise StatsError(f"{url}: {name} is {schema.field(name).type}, expected integers")


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
    from pipelines.windows import parse_duration

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
            breakdowns = Breakdowns.new(tok.vocab_size, facts.raw_byte_ids, args.group_field, window_seconds)
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

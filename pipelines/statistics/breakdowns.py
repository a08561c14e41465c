"""The statistics kept besides the dataset's summary, per event-time window (`--window`) and per group
(`--group-field`), for every command that makes them: one `Breakdowns` (what is kept) and its
`BreakdownSummaries` (one shard's or one rebuild's partial summaries), fed from freshly encoded
records (`tokenize`) or from token Parquet read back (`tokenbeam stats`, and a shard a rerun of
tokenize reuses: `add_file`).

    breakdowns = Breakdowns(Windowing("ts", 3600.0), group_field="lang")
    partials = breakdowns.summaries(vocab_size, raw_byte_ids)
    partials.add_batch(fields, stats, id_arrays, record_ids)     # tokenize, batch by batch
    partials.windowed.elements(), partials.grouped.elements()     # -> WindowStats, GroupStats
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bpe_ops.stats import Summary, digit_runs_batch
from pipelines.core.errors import UserError, say
from pipelines.core.files import join, open_read, remove_tree
from pipelines.statistics.groups import GROUPS_FOLDER, NO_GROUP, GroupedSummaries, write_group_stats
from pipelines.statistics.windows import WINDOWS_FOLDER, WindowedSummaries, write_window_stats
from schemas import tables


@dataclass(frozen=True)
class Windowing:
    """`--timestamp-field F --window DURATION`: which field dates a record (None when the records come
    from token Parquet, dated by its event_time column), and the window length in seconds."""
    field: str | None
    seconds: float


@dataclass(frozen=True)
class Breakdowns:
    """The statistics kept besides the dataset's: per event-time window (`--window`) and per group
    (`--group-field`)."""
    windowing: Windowing | None = None
    group_field: str | None = None

    def summaries(self, vocab_size: int, raw_byte_ids) -> "BreakdownSummaries":
        return BreakdownSummaries(self, vocab_size, raw_byte_ids)


class BreakdownSummaries:
    """The partial summaries per window and per group (each None unless asked), calibrated like the
    dataset's own Summary: fed batch by batch from encoded records (`add_batch`) or from token
    Parquet (`parquet_columns`, then `add_parquet_batch`), and written as files by `write`."""

    def __init__(self, breakdowns: Breakdowns, vocab_size: int, raw_byte_ids):
        self.breakdowns = breakdowns
        windowing = breakdowns.windowing
        self.windowed = windowing and WindowedSummaries(vocab_size, windowing.seconds, raw_byte_ids=raw_byte_ids)
        self.grouped = breakdowns.group_field and GroupedSummaries(vocab_size, raw_byte_ids=raw_byte_ids)

    @property
    def group_field(self) -> str | None:
        return self.breakdowns.group_field

    def add_batch(self, fields: list[dict], stats, id_arrays, record_ids, digit_runs=None) -> None:
        """A batch of encoded records, with the fields read beside their text."""
        if self.windowed:
            field = self.breakdowns.windowing.field
            self.windowed.add_batch([f.get(field) for f in fields], *stats, id_arrays, record_ids=record_ids,
                                    digit_runs=digit_runs)
        if self.grouped:
            self.grouped.add_batch([f.get(self.group_field) for f in fields], *stats, id_arrays,
                                   record_ids=record_ids, digit_runs=digit_runs)

    def parquet_columns(self, pf: pq.ParquetFile, footer_entry: dict, url: str) -> list[str]:
        """The columns a token Parquet file must give the breakdowns; UserError when it lacks one."""
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

    def add_parquet_batch(self, batch: pa.RecordBatch, columns: list, id_arrays: list, runs: list | None) -> None:
        """A record batch of token Parquet read with `parquet_columns` last, and its per-record figures."""
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


# The columns of a token file that are tokenbeam's own, never a kept field to group by.
RESERVED_COLUMNS = {"id", "token_ids", *tables.STAT_COLUMNS, tables.EVENT_TIME_COLUMN, tables.GROUP_COLUMN}


# ---- token Parquet read back into summaries (`tokenbeam stats`, and a shard a rerun reuses) ----------

COLUMNS = ("id", "token_ids", "n_tokens", "n_bytes", "n_chars", "n_words")
STAT_COLUMNS = COLUMNS[2:]
BATCH_ROWS = 8_192


class StatsError(Exception):
    """A token Parquet file that cannot be read back into summaries (its one-line message names it;
    `tokenbeam stats` prints it and exits 2)."""


def add_record_batch(summary: Summary, batch: pa.RecordBatch, where: str,
                     breakdowns: BreakdownSummaries | None = None, decode_bytes=None) -> None:
    """Add one record batch: id frequencies and per-record figures, a column at a time; each record
    calibrated with its id and token ids (views into the flat id buffer, no copy per record) and,
    given the tokenizer's `decode_bytes`, with the number formats of its text decoded from them."""
    import pyarrow.compute as pc    # here: read-back only; a tokenize job's start does without its import

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
        used = np.flatnonzero(counts != 0)
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
        breakdowns.add_parquet_batch(batch, columns, id_arrays, runs)


def add_file(summary: Summary, url: str, sha256: str, breakdowns: BreakdownSummaries | None = None,
             decode_bytes=None, dropouts: dict | None = None) -> int:
    """Add one token Parquet file; returns its rows (`decode_bytes`: see `add_record_batch`). `dropouts`
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
            extra_columns = breakdowns.parquet_columns(pf, shard, url) if breakdowns is not None else []
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=list(COLUMNS) + extra_columns):
                add_record_batch(summary, batch, url, breakdowns, decode_bytes)
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

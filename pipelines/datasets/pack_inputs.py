"""The inputs of `tokenbeam pack`: token Parquet files of `tokenbeam tokenize`, checked by the launcher
from their footers (no rows read), and the row groups that are the pipeline's units of work.

`find_inputs(["tokens/"])` gives every `tokens/*.parquet` as a `TokenFile` (sorted by URL, one
tokenizer and one `--eos-token` among them) and the sha256 of `tokens/stats.json`; `read_units` turns
them into `(url, row group, first row, unit number)` tuples, which the steps read with `read_row_group`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import posixpath

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.core.errors import ShardFailure, UserError, warn
from pipelines.core.files import filesystem, isdir, isfile, join, read_bytes, read_json
from pipelines.core.folders import check_finished
from pipelines.datasets.outcome import repeated_ids_line
from schemas import pack as layout
from schemas import tables


@dataclasses.dataclass(frozen=True)
class TokenFile:
    """One token Parquet input as the launcher read it from its footer (no rows are read):
    where it is, its version, its row groups' rows and ids, its tokenizer and EOS."""
    url: str
    size: int
    version: str
    rows: tuple[int, ...]             # rows per row group
    ids: tuple[int, ...]              # ids per row group
    tokenizer_sha256: str
    vocab_size: int
    eos_token: str | None             # the --eos-token tokenize ended each record with, if any
    footer_sha256: str                # of the shard record tokenize left in the footer ("" if none)


def read_token_file(shard) -> TokenFile:
    """Check that `shard` is a token Parquet file of `tokenbeam tokenize` and read its footer."""
    fs, path = filesystem(shard.url)
    try:
        with fs.open(path, "rb") as f:
            pf = pq.ParquetFile(f)
            schema = pf.schema_arrow
            meta = tables.file_metadata(schema.metadata)
            footer = tables.file_metadata(pf.metadata.metadata)
            groups = [pf.metadata.row_group(i) for i in range(pf.metadata.num_row_groups)]
            columns = [pf.metadata.schema.column(i).path for i in range(pf.metadata.num_columns)]
    except Exception as exc:      # noqa: BLE001  (any reader error means: not a Parquet file we can read)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{shard.url} is not a readable Parquet file ({reason})") from None
    if meta.get("tokenbeam.schema") != "tokens":
        what = f"a tokenbeam {meta['tokenbeam.schema']!r} file" if "tokenbeam.schema" in meta else "not tokenbeam's"
        raise UserError(f"{shard.url} is not a token Parquet of `tokenbeam tokenize` ({what}); pack reads "
                        f"the output of tokenize")
    if meta.get("tokenbeam.schema_version") not in tables.READABLE_TOKENS_SCHEMA_VERSIONS:
        raise UserError(f"{shard.url}: token Parquet layout version {meta.get('tokenbeam.schema_version')}, "
                        f"this tokenbeam reads versions {', '.join(tables.READABLE_TOKENS_SCHEMA_VERSIONS)}; "
                        f"rerun tokenize")
    if tables.repeated_column(schema.names) is not None:
        raise UserError(f"{shard.url} holds the column {tables.repeated_column(schema.names)!r} twice; pack reads "
                        f"the output of tokenize")
    missing = [k for k in (tables.TOKENIZER_SHA256_KEY, tables.VOCAB_SIZE_KEY) if k not in meta]
    ids_type = schema.field("token_ids").type if "token_ids" in schema.names else None
    if missing or "id" not in schema.names or ids_type is None or not pa.types.is_list(ids_type) or \
            ids_type.value_type not in (pa.uint16(), pa.uint32()):
        lacks = missing[0] if missing else "the id and token_ids columns"
        raise UserError(f"{shard.url} is not a complete token Parquet (it lacks {lacks}); pack reads the "
                        f"output of tokenize")
    if schema.field("token_ids").nullable:
        raise UserError(f"{shard.url}: token_ids may hold nulls (tokenize writes none); pack reads the output "
                        f"of tokenize")
    try:
        vocab_size = tables.vocab_size_of(meta)
        eos_token = tables.shard_record(footer).get("fingerprint", {}).get("eos_token")
    except ValueError as exc:
        raise UserError(f"{shard.url}: {exc}") from None
    if ids_type.value_type != tables.token_id_type(vocab_size):
        raise UserError(f"{shard.url}: token_ids is {ids_type}, not the type of a {vocab_size:,}-id vocabulary")
    ids_column = next(i for i, path in enumerate(columns) if path.startswith("token_ids"))
    shard_record = footer.get(tables.SHARD_KEY)
    return TokenFile(shard.url, shard.size, shard.version, tuple(g.num_rows for g in groups),
                     tuple(g.column(ids_column).num_values for g in groups), meta[tables.TOKENIZER_SHA256_KEY],
                     vocab_size, eos_token,
                     hashlib.sha256(shard_record.encode()).hexdigest() if shard_record else "")


def warn_repeated_ids(folder: str) -> None:
    """Records sharing an id hash to the same split: repeat tokenize's warning where it matters."""
    success = join(folder, layout.SUCCESS)
    try:
        repeated = read_json(success).get("repeated_ids")
    except (OSError, ValueError, AttributeError):
        return
    if repeated:
        warn(repeated_ids_line(repeated, f"in {folder}"))


def find_inputs(inputs: list[str]) -> tuple[list[TokenFile], dict[str, str | None]]:
    """Every token Parquet the inputs name (a folder means the `*.parquet` under it, `rejected/` and
    hidden files aside), sorted by URL, each checked; and the sha256 of the `stats.json` beside
    each input (None where there is none)."""
    from pipelines.core.inputs import InputError, Sought
    from pipelines.datasets.sources import expand_inputs

    if not inputs:
        raise UserError("no input: give --input TOKENS_DIR (or token Parquet files or globs)")
    stats: dict[str, str | None] = {}
    checked: set[str] = set()
    for pattern in inputs:
        folder = pattern if isdir(pattern) else posixpath.dirname(pattern.split("*")[0].split("?")[0].split("[")[0])
        if folder not in checked:          # once per folder (a shell-expanded glob names it per file)
            checked.add(folder)
            check_finished(folder or ".", "--input", "pack")
            warn_repeated_ids(folder or ".")
        stats_url = join(folder or ".", "stats.json")
        stats[stats_url] = hashlib.sha256(read_bytes(stats_url)).hexdigest() if isfile(stats_url) else None
    try:
        shards = expand_inputs(inputs, Sought("--input", in_folder="*.parquet"))
    except InputError as exc:
        raise UserError(str(exc)) from None
    files = [read_token_file(s) for s in shards]
    first = files[0]
    for f in files[1:]:
        if f.tokenizer_sha256 != first.tokenizer_sha256:
            raise UserError(f"the inputs come from different tokenizers: {first.url} ({first.tokenizer_sha256[:12]}...) "
                            f"and {f.url} ({f.tokenizer_sha256[:12]}...); pack one tokenizer's output at a time")
        if f.eos_token != first.eos_token:
            raise UserError(f"the inputs were tokenized with different --eos-token: {first.url} ({first.eos_token}) "
                            f"and {f.url} ({f.eos_token})")
    return files, stats


def first_record_last_id(files: list[TokenFile]) -> int | None:
    """The last id of the first non-empty record: the EOS of inputs tokenized with --eos-token."""
    for f in files:
        fs, path = filesystem(f.url)
        with fs.open(path, "rb") as stream:
            pf = pq.ParquetFile(stream)
            for i in range(pf.metadata.num_row_groups):
                try:
                    ids = pf.read_row_group(i, columns=["token_ids"]).column("token_ids").combine_chunks()
                except pa.ArrowException as exc:
                    raise UserError(f"{f.url}: row group {i} cannot be read ({str(exc).splitlines()[0]})") from None
                lengths = ids.value_lengths().to_numpy(zero_copy_only=False)
                nonempty = np.flatnonzero(lengths)
                if len(nonempty):
                    return int(ids[int(nonempty[0])].values[-1].as_py())
    return None


def read_units(files: list[TokenFile]) -> list[tuple[str, int, int, int]]:
    """The work: `(url, row group, its first row in the sorted inputs, unit number)` for every row group.

    >>> a = TokenFile("a.parquet", 100, "1", (2, 3), (20, 30), "ab" * 32, 1000, None, "")
    >>> read_units([a, dataclasses.replace(a, url="b.parquet", rows=(4,), ids=(40,))])
    [('a.parquet', 0, 0, 0), ('a.parquet', 1, 2, 1), ('b.parquet', 0, 5, 2)]
    """
    units, row = [], 0
    for f in files:
        for group, n in enumerate(f.rows):
            units.append((f.url, group, row, len(units)))
            row += n
    return units


def read_row_group(url: str, group: int, columns: list[str]) -> pa.Table:
    """`columns` of one row group of a token Parquet the launcher checked; ShardFailure (a worker's
    error, said in one line) when the file has gone or broken since."""
    fs, path = filesystem(url)
    try:
        with fs.open(path, "rb") as f:
            return pq.ParquetFile(f).read_row_group(group, columns=columns)
    except Exception as exc:  # noqa: BLE001  (the launcher read this file: now it is gone or broken)
        raise ShardFailure(f"cannot read {url} row group {group}: {str(exc).splitlines()[0]}") from exc


def warn_if_text_token(token: int, flag: str, first: TokenFile) -> None:
    """A separator must be told apart from text: warn when the id occurs inside the first row group's
    records (an ordinary text token, not a special one)."""
    if not first.rows:
        return
    lists = read_row_group(first.url, 0, ["token_ids"]).column("token_ids").combine_chunks()
    inside = int(np.count_nonzero(lists.flatten().to_numpy(zero_copy_only=False) == token))
    if inside:
        warn(f"{flag} {token} is an ordinary text token: it occurs {inside:,} time(s) inside the records of "
             f"{first.url}'s first row group, so the separator cannot be told apart from text (use a special token)")

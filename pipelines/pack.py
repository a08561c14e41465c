"""`tokenbeam pack`: token Parquet -> shuffled, split, fixed-length sequences for pretraining.

    row groups -> SpillDocuments (per row group: id, ids, two hashes of (seed, id), train /
    validation by the split hash; the documents written to spill files, one Arrow batch per (split,
    bucket)) -> GroupByKey((split, bucket)) of references -> PackBucket (read the bucket's batches,
    sort them by the order hash, lay the documents at the bucket's offset in the split's stream, cut
    at file boundaries, the pieces to a spill file) -> GroupByKey((split, file)) of references ->
    WriteFile (read the file's pieces; rows of seq_len ids: Parquet, Megatron .bin + .idx, flat .bin)
    -> pack.json -> _SUCCESS (written last); the spill files are removed when the run ends.

The order is a function of the seed and the record ids only: a document's place is its order hash
(buckets are ranges of the hash), so the output is the same bytes whatever the runner, the number
of workers, the number of buckets, the spill files or the order of the input files. Each split's
stream is [BOS] ids [EOS] per document, back to back; every bucket learns where its documents start
in the stream from the buckets' sizes (a small side input), so no step ever holds more than one
bucket, one output file or SPILL_BYTES of documents. The shuffles carry only references to spill
files under `OUTPUT/.pack-spill/` (names in open_atomic's temporary style), so what a runner holds
for them does not grow with the token ids: Beam's local FnApiRunner keeps every GroupByKey's input
in its own memory.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import posixpath
import sys
import time
import uuid
from typing import Any, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.beam_options import beam, check_worker_paths, one_local_worker, pipeline_options, split_beam_args
from pipelines import command
from pipelines.command import Command, add_quiet_argument, option_strings
from pipelines.errors import IncompleteRun, UserError, pipeline_failures, say, set_quiet, warn
from pipelines.files import (filesystem, inside, isdir, isfile, join, names_in, open_atomic, read_bytes, read_json,
                             remove, remove_tree, remove_stale_temporaries, write_text_atomic, writing)
from pipelines.folders import check_finished, claim_output, mark_output
from pipelines.outcome import repeated_ids_line
from pipelines.shards import byte_size
from schemas import pack as layout
from schemas import tables
from schemas.accounts import ACCOUNT_KEY

BUCKET_TOKENS = 1 << 22          # ids per shuffle bucket: what one PackBucket call holds
SPILL_BYTES = 1 << 25            # documents one SpillDocuments holds (Arrow bytes) before it writes them out
SPILL_FOLDER = layout.SPILL_FOLDER  # under --output: the shuffles' files, removed when the run ends
DEFAULT_MAX_TOKENS_PER_FILE = "16M"
DEFAULT_SEED = 1234
ROW_GROUP_ROWS = 1_024           # packed rows per Parquet row group: readers stream them
HASH_BITS = 63                   # hashes are non-negative int64, which Beam's coders carry as varints
TRAIN, VALIDATION = layout.SPLITS


# --- the inputs -----------------------------------------------------------------------------------

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
        what = f"a tokenbeam '{meta['tokenbeam.schema']}' file" if "tokenbeam.schema" in meta else "not tokenbeam's"
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
    from pipelines.inputs import InputError, Sought
    from pipelines.sources import expand_inputs

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


# --- what shapes the output -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PackOptions:
    """Everything the workers need, decided by the launcher (ids, not token names)."""
    seq_len: int
    seed: int
    shuffle: bool
    eos_id: int | None               # the separator after each document, if pack adds one
    bos_id: int | None
    pad_id: int | None
    tail: str
    formats: tuple[str, ...]
    tokens_per_file: int             # a multiple of seq_len
    vocab_size: int
    tokenizer_sha256: str
    buckets: int                     # per split; shapes only the grouping, never the output

    @property
    def dtype(self) -> np.dtype:
        return layout.id_dtype(self.vocab_size)

    def separators(self) -> int:
        return (self.eos_id is not None) + (self.bos_id is not None)


def seed_key(seed: int) -> bytes:
    return seed.to_bytes(16, "little")


def record_hashes(record_id: str, key: bytes) -> tuple[int, int]:
    """(order hash, split hash) of a record id under a seed: two independent 63-bit numbers.

    `record_hashes("doc-1", seed_key(1234))` is the same on every machine, Python and run (no
    Python `hash()`, which PYTHONHASHSEED changes).
    """
    digest = hashlib.blake2b(record_id.encode("utf-8", "surrogatepass"), digest_size=16, key=key).digest()
    return int.from_bytes(digest[:8], "big") >> 1, int.from_bytes(digest[8:], "big") >> 1


# --- the pipeline ---------------------------------------------------------------------------------
#
# Both shuffles go through files: a step writes the token ids to spill files under the output's hidden
# SPILL_FOLDER and hands the GroupByKey only small references (a file name, a place in it, counts), so
# what any runner holds for a shuffle is a few dozen bytes per (bucket, spill file), never token ids.

def spill_name(kind: str, ext: str) -> str:
    """A new spill file's name, in open_atomic's temporary style (`.NAME.tmp-<32 hex>`), so a killed
    run's leftovers are stale temporaries for the next run (`remove_stale_temporaries`) and no glob
    that reads outputs ever sees them. `spill_name("docs", ".arrow")` -> `.docs-1f2e....arrow.tmp-9c0d...`."""
    return f".{kind}-{uuid.uuid4().hex[:16]}{ext}.tmp-{uuid.uuid4().hex}"


def spill_url(output: str, name: str) -> str:
    return join(output, SPILL_FOLDER, name)


def remove_spill_files(output: str) -> None:
    """Remove the spill folder: after a run (its spill files are all read by then), and before one
    (a killed run's)."""
    try:
        remove_tree(join(output, SPILL_FOLDER))
    except OSError as exc:
        warn(f"could not remove the spill files under {join(output, SPILL_FOLDER)}: {exc}")


def read_row_group(url: str, group: int, columns: list[str]) -> pa.Table:
    fs, path = filesystem(url)
    try:
        with fs.open(path, "rb") as f:
            return pq.ParquetFile(f).read_row_group(group, columns=columns)
    except Exception as exc:  # noqa: BLE001  (the launcher read this file: now it is gone or broken)
        from pipelines.errors import ShardFailure
        raise ShardFailure(f"cannot read {url} row group {group}: {str(exc).splitlines()[0]}") from exc


class SplitHashes(beam.DoFn):
    """One row group -> the split hash of each of its records (read from the id column alone): what
    `--validation-records K` takes its threshold from, before any document is read."""

    def __init__(self, seed: int):
        self.seed = seed

    def process(self, unit):
        url, group, _, _ = unit
        key = seed_key(self.seed)
        for record_id in read_row_group(url, group, ["id"]).column("id").to_pylist():
            yield record_hashes(record_id, key)[1]


def spill_schema(dtype: np.dtype) -> pa.Schema:
    """A spilled document: its order (the order hash, or its row with --no-shuffle), id and ids."""
    return pa.schema([("order", pa.int64()), ("id", pa.string()), ("token_ids", pa.list_(pa.from_numpy_dtype(dtype)))])


# Keyed for a GroupByKey: the type says so.
@beam.typehints.with_output_types(Tuple[Any, Any])
class SpillDocuments(beam.DoFn):
    """Row groups of token Parquet -> their documents in spill files; emits one small reference per
    (split, bucket) and spill file: `((split, bucket), (file name, batch, documents, stream ids))`.

    Each record gets its two hashes of (seed, id): shuffled, `order` is the order hash and the bucket
    its range (`order * buckets >> 63`), so buckets in order are the hash order; with `--no-shuffle`
    `order` is the record's row in the sorted inputs and the bucket its row group. The split is
    validation when the split hash is below `threshold`. Documents gather in memory until they hold
    `spill_bytes` (or the bundle ends), then go to one Arrow IPC file, in (split, bucket) order, a
    bucket's documents from each row group one record batch. Example: row group 0 of `a.parquet`
    holding `("doc-1", [5, 6, 7])`, EOS added, gives `(("train", b), (".docs-....arrow.tmp-...", 0, 1,
    1, 4))` and the record in batch 0.
    """

    def __init__(self, options: PackOptions, output: str, spill_bytes: int):
        self.options = options
        self.output = output
        self.spill_bytes = spill_bytes

    def setup(self):
        self.key = seed_key(self.options.seed)
        self.schema = spill_schema(self.options.dtype)
        self.records = beam.metrics.Metrics.counter("tokenbeam", "records")
        self.spilled = beam.metrics.Metrics.counter("tokenbeam", "spill_files")

    def start_bundle(self):
        self.pending, self.pending_bytes = [], 0

    def process(self, unit, threshold):
        url, group, first_row, unit_index = unit
        table = read_row_group(url, group, ["id", "token_ids"])
        o = self.options
        ids = table.column("token_ids").combine_chunks()
        if ids.type != self.schema.field("token_ids").type:
            ids = ids.cast(self.schema.field("token_ids").type)
        record_ids = table.column("id").to_pylist()
        n = len(record_ids)
        order = np.empty(n, np.int64)
        bucket = np.empty(n, np.int64)
        validation = np.empty(n, np.int8)
        for row, record_id in enumerate(record_ids):
            h, split_hash = record_hashes(record_id, self.key)
            if o.shuffle:
                order[row], bucket[row] = h, (h * o.buckets) >> HASH_BITS
            else:
                order[row], bucket[row] = first_row + row, unit_index
            validation[row] = split_hash < threshold
        docs = pa.Table.from_arrays([pa.array(order), table.column("id").combine_chunks().cast(pa.string()), ids],
                                    schema=self.schema)
        self.pending.append((docs, validation, bucket))
        self.pending_bytes += docs.nbytes
        self.records.inc(n)
        if self.pending_bytes >= self.spill_bytes:
            yield from self.spill()

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindows

        for element in self.spill():
            yield GlobalWindows.windowed_value(element)

    def spill(self):
        """The pending documents -> one spill file, in (split, bucket) order; their references. Each
        pending row group is sorted by key in turn (one copy at a time), and a key's documents are
        its slices of them: batches `first .. first + count - 1` of the file, written without
        gathering them."""
        if not self.pending:
            return
        o = self.options
        chunks = []          # per pending row group: its documents by key, its keys' row ranges
        while self.pending:
            docs, validation, bucket = self.pending.pop(0)
            if not len(docs):
                continue
            by_key = np.lexsort((bucket, validation))
            keys = validation[by_key].astype(np.int64) << 62 | bucket[by_key]
            cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
            bounds = [0, *cuts.tolist(), len(keys)]
            lengths = np.diff(np.asarray(docs.column("token_ids").chunk(0).offsets))[by_key]
            batch = docs.take(pa.array(by_key)).combine_chunks().to_batches()[0]
            chunks.append((batch, {int(keys[a]): (a, b, int(lengths[a:b].sum())) for a, b in zip(bounds, bounds[1:])}))
        self.pending_bytes = 0
        if not chunks:
            return
        name = spill_name("docs", ".arrow")
        url = spill_url(self.output, name)
        refs, index = [], 0
        with writing(url), open_atomic(url) as f, pa.ipc.new_file(f, self.schema) as writer:
            for key in sorted(set().union(*(ranges for _, ranges in chunks))):
                first, documents, ids = index, 0, 0
                for batch, ranges in chunks:
                    if key in ranges:
                        a, b, n = ranges[key]
                        writer.write_batch(batch.slice(a, b - a))
                        index += 1
                        documents += b - a
                        ids += n
                split = VALIDATION if key >> 62 else TRAIN
                refs.append(((split, key & ((1 << 62) - 1)), (name, first, index - first, documents,
                                                              ids + documents * o.separators())))
        self.spilled.inc()
        yield from refs


def read_spilled(output: str, refs) -> pa.Table:
    """The documents of one bucket: its batch of each spill file that holds some (refs as SpillDocuments
    emits them), as one table."""
    batches = []
    for name, first, count, _, _ in sorted(refs):
        fs, path = filesystem(spill_url(output, name))
        with fs.open(path, "rb") as f:
            reader = pa.ipc.open_file(f)
            batches += [reader.get_batch(i) for i in range(first, first + count)]
    return pa.Table.from_batches(batches)


def document_order(table: pa.Table, dtype: np.dtype) -> np.ndarray:
    """The rows of `table` (spilled documents) in pack order: by (order, id, ids as bytes). The order
    hash decides all but repeated record ids, whose content then decides, so even duplicates land in
    one order. Example: orders [9, 2, 9] with ids "b", "a", "a" -> [1, 2, 0]."""
    order = table.column("order").to_numpy()
    rows = np.argsort(order, kind="stable")
    ranked = order[rows]
    ties = np.flatnonzero(ranked[1:] == ranked[:-1])
    if len(ties):
        ids = table.column("id")
        lists = table.column("token_ids")
        def key(row):
            return ids[row].as_py(), np.asarray(lists[row].values.to_numpy(zero_copy_only=False), dtype).tobytes()
        # Runs of equal order: [first, last] positions in `rows`.
        starts = ties[np.concatenate([[True], ties[1:] != ties[:-1] + 1])]
        ends = ties[np.concatenate([ties[1:] != ties[:-1] + 1, [True]])] + 1
        for a, b in zip(starts, ends):
            rows[a:b + 1] = sorted(rows[a:b + 1].tolist(), key=key)
    return rows


def lay_out(lists: pa.ListArray, options: PackOptions) -> tuple[np.ndarray, np.ndarray]:
    """Documents (a list array, in order) -> their stream `[BOS] ids [EOS]` back to back, and each
    document's first position in it. Example, BOS 1, EOS 0: [[5, 6], [], [7]] -> [1 5 6 0 1 0 1 7 0],
    starts [0 4 6]."""
    o = options
    offsets = lists.offsets.to_numpy().astype(np.int64)
    lengths = np.diff(offsets)
    flat = lists.values.slice(offsets[0], offsets[-1] - offsets[0]).to_numpy(zero_copy_only=False)
    flat = np.asarray(flat, o.dtype)
    sizes = lengths + o.separators()
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    if not o.separators():
        return flat, starts
    stream = np.empty(int(sizes.sum()), o.dtype)
    bos = int(o.bos_id is not None)
    if o.bos_id is not None:
        stream[starts] = o.bos_id
    if o.eos_id is not None:
        stream[starts + bos + lengths] = o.eos_id
    stream[np.arange(len(flat), dtype=np.int64) + np.repeat(starts + bos - (offsets[:-1] - offsets[0]), lengths)] = flat
    return stream, starts


def stream_layout(sizes: dict, options: PackOptions) -> dict:
    """Per split, each bucket's first position in the split's stream and the stream's length: the
    prefix sums of the bucket sizes in bucket order. With `--tail drop` the stream ends at the last
    full row (`end`); otherwise at its length.

    Example: sizes {("train", 0): 5, ("train", 2): 3}, seq_len 4, drop -> {"train": {"offsets":
    {0: 0, 2: 5}, "length": 8, "end": 8}}.
    """
    out: dict = {}
    for split in layout.SPLITS:
        offsets, length = {}, 0
        for (s, bucket), n in sorted(sizes.items()):
            if s == split:
                offsets[bucket] = length
                length += n
        end = length - length % options.seq_len if options.tail == "drop" else length
        out[split] = {"offsets": offsets, "length": length, "end": end}
    return out


def stream_files(end: int, options: PackOptions) -> int:
    """How many files a split's stream of `end` ids fills (each `tokens_per_file` ids but the last)."""
    return -(-end // options.tokens_per_file)


# Keyed for a GroupByKey: the type says so (Beam would infer a union with the tagged output).
@beam.typehints.with_output_types(Tuple[Any, Any])
class PackBucket(beam.DoFn):
    """A bucket's documents (read from its spill files) in order, laid at the bucket's offset in its
    split's stream, cut at the file boundaries, the pieces written to one spill file: emits
    `((split, file), (start, spill file, byte offset, ids bytes, doc starts bytes))` per piece.

    Documents sort by (order, id, ids): the order hash, then, for a repeated record id, its content,
    so even duplicates land in one order. Example, seq_len 4, EOS 0, a bucket at offset 4 holding
    [8 9]: the piece at 4 of ids [8 9 0] and doc starts [4] (int64). Also emits the bucket's figures
    on STATS.
    """
    STATS = "stats"

    def __init__(self, options: PackOptions, output: str):
        self.options = options
        self.output = output

    def process(self, element, stream):
        (split, bucket), refs = element
        o = self.options
        docs = read_spilled(self.output, refs)
        docs = docs.take(pa.array(document_order(docs, o.dtype)))
        ids, starts = lay_out(docs.column("token_ids").combine_chunks(), o)
        del docs
        sizes = np.diff(np.append(starts, len(ids)))
        start = stream[split]["offsets"][bucket]
        end = stream[split]["end"]
        starts += start
        position = start + len(ids)
        split_docs = int(np.count_nonzero((sizes > 0) & (starts // o.seq_len != (starts + sizes - 1) // o.seq_len)))
        yield beam.pvalue.TaggedOutput(self.STATS, {split: {"documents": len(starts), "documents_split": split_docs,
                                                            "separators": len(starts) * o.separators()}})
        # Cut at the file boundaries; ids past the stream's end (the dropped tail) go nowhere.
        stop = min(position, end)
        cut = start
        pieces = []
        while cut < stop:
            file_index = cut // o.tokens_per_file
            upto = min(stop, (file_index + 1) * o.tokens_per_file)
            pieces.append((file_index, cut, ids[cut - start:upto - start], starts[(starts >= cut) & (starts < upto)]))
            cut = upto
        if not pieces:
            return
        name = spill_name(f"{split}-{bucket}", ".bin")
        url = spill_url(self.output, name)
        refs, offset = [], 0
        with writing(url), open_atomic(url) as f:
            for file_index, cut, piece, in_piece in pieces:
                f.write(piece.tobytes())
                f.write(in_piece.tobytes())
                refs.append(((split, file_index), (cut, name, offset, piece.nbytes, in_piece.nbytes)))
                offset += piece.nbytes + in_piece.nbytes
        yield from refs


class WriteFile(beam.DoFn):
    """The pieces of one output file (read from PackBucket's spill files) -> its rows, in each format
    asked for; emits the file's entry.

    Example, seq_len 4, the stream [5 6 7 0 8 9 0] with documents at 0 and 4, `--tail pad`, pad 0:
    Parquet rows `[5 6 7 0]` (doc_starts [0], n_tokens 4) and `[8 9 0 0]` (doc_starts [0],
    n_tokens 3); Megatron sequences [5 6 7 0] and [8 9 0]; the flat file 5 6 7 0 8 9 0.
    """

    def __init__(self, options: PackOptions, output: str):
        self.options = options
        self.output = output

    def setup(self):
        self.rows_written = beam.metrics.Metrics.counter("tokenbeam", "rows")
        self.tokens_written = beam.metrics.Metrics.counter("tokenbeam", "tokens")

    def read_pieces(self, refs) -> tuple[np.ndarray, np.ndarray]:
        """The file's ids and document starts, read from the pieces' spill files into one array each."""
        o = self.options
        ids = np.empty(sum(r[3] for r in refs) // o.dtype.itemsize, o.dtype)
        starts = np.empty(sum(r[4] for r in refs) // 8, np.int64)
        at_id = at_start = 0
        for _, name, offset, n_ids, n_starts in refs:
            fs, path = filesystem(spill_url(self.output, name))
            with fs.open(path, "rb") as f:
                f.seek(offset)
                data = f.read(n_ids + n_starts)
            if len(data) != n_ids + n_starts:
                raise RuntimeError(f"spill file {name} is short: {len(data)} bytes at {offset}, not {n_ids + n_starts}")
            ids[at_id:at_id + n_ids // o.dtype.itemsize] = np.frombuffer(data, o.dtype, n_ids // o.dtype.itemsize)
            starts[at_start:at_start + n_starts // 8] = np.frombuffer(data, np.int64, n_starts // 8, n_ids)
            at_id += n_ids // o.dtype.itemsize
            at_start += n_starts // 8
            del data
        return ids, starts

    def process(self, element, stream):
        (split, file_index), refs = element
        o = self.options
        refs = sorted(refs)
        first = file_index * o.tokens_per_file
        if refs[0][0] != first:
            raise RuntimeError(f"{split} file {file_index}: the stream starts at {refs[0][0]}, not {first}")
        for (a, _, _, n_ids, _), (b, _, _, _, _) in zip(refs, refs[1:]):
            if a + n_ids // o.dtype.itemsize != b:
                raise RuntimeError(f"{split} file {file_index}: a gap or overlap in the stream at {b}")
        ids, starts = self.read_pieces(refs)
        starts -= first
        count = stream_files(stream[split]["end"], o)
        names = {}
        for fmt in o.formats:
            folder = join(self.output, layout.format_folder(split, fmt))
            name = layout.part_name(file_index, count, ".parquet" if fmt == "parquet" else "")
            url = join(folder, name)
            with writing(url):
                if fmt == "parquet":
                    self.write_parquet(url, ids, starts, first // o.seq_len, split, file_index)
                    names[fmt] = [f"{layout.format_folder(split, fmt)}/{name}"]
                elif fmt == "megatron":
                    self.write_megatron(url, ids, starts)
                    names[fmt] = [f"{layout.format_folder(split, fmt)}/{name}{ext}" for ext in (".bin", ".idx")]
                else:
                    with open_atomic(url + ".bin") as f:
                        f.write(ids.tobytes())
                    names[fmt] = [f"{layout.format_folder(split, fmt)}/{name}.bin"]
        rows = -(-len(ids) // o.seq_len)
        self.rows_written.inc(rows)
        self.tokens_written.inc(len(ids))
        yield {"split": split, "index": file_index, "tokens": len(ids), "rows": rows, "files": names}

    def write_parquet(self, url, ids, starts, first_row, split, file_index):
        o = self.options
        n_rows = -(-len(ids) // o.seq_len)
        short = n_rows * o.seq_len - len(ids)       # only the split's last row can be short
        n_tokens = np.full(n_rows, o.seq_len, np.int32)
        if short:
            n_tokens[-1] = o.seq_len - short
            if o.tail == "pad":
                ids = np.concatenate([ids, np.full(short, o.pad_id, o.dtype)])
        row_offsets = np.minimum(np.arange(n_rows + 1, dtype=np.int64) * o.seq_len, len(ids)).astype(np.int32)
        start_rows = starts // o.seq_len
        start_offsets = np.searchsorted(start_rows, np.arange(n_rows + 1), side="left").astype(np.int32)
        schema = layout.packed_schema(o.vocab_size, {tables.TOKENIZER_SHA256_KEY: o.tokenizer_sha256,
                                                     tables.VOCAB_SIZE_KEY: str(o.vocab_size),
                                                     "tokenbeam.seq_len": str(o.seq_len)})
        id_type = schema.field("input_ids").type
        table = pa.Table.from_arrays([
            pa.ListArray.from_arrays(pa.array(row_offsets), pa.array(ids)).cast(id_type),
            pa.ListArray.from_arrays(pa.array(start_offsets), pa.array((starts % o.seq_len).astype(np.int32))),
            pa.array(n_tokens), pa.array(np.arange(first_row, first_row + n_rows, dtype=np.int64))], schema=schema)
        with open_atomic(url) as f, pq.ParquetWriter(f, schema, compression="zstd", use_dictionary=False,
                                                     write_statistics=False) as writer:
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
            writer.add_key_value_metadata({layout.PACK_FILE_KEY: json.dumps(
                {"split": split, "index": file_index, "first_row": int(first_row), "rows": n_rows}, sort_keys=True)})

    def write_megatron(self, url, ids, starts):
        """One Megatron sequence per document (a document cut by a file boundary: one piece in each)."""
        dtype = layout.megatron_dtype(self.options.vocab_size)
        bounds = np.unique(np.concatenate([[0], starts, [len(ids)]]))
        with open_atomic(url + ".bin") as f:
            f.write(ids.astype(dtype, copy=False).tobytes())
        with open_atomic(url + ".idx") as f:
            f.write(layout.megatron_index(np.diff(bounds), dtype))


class SumFigures(beam.CombineFn):
    """Sum nested dicts of counts: `{"train": {"documents": 2}}` + `{"train": {"documents": 3}}` ->
    `{"train": {"documents": 5}}` (exact, associative and commutative: right on any runner)."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, figures):
        for split, values in figures.items():
            into = acc.setdefault(split, {})
            for k, v in values.items():
                into[k] = into.get(k, 0) + v
        return acc

    def merge_accumulators(self, accs):
        out = {}
        for acc in accs:
            self.add_input(out, acc)
        return out

    def extract_output(self, acc):
        return acc


def split_figures(split: str, stream: dict, docs: dict, files: list[dict], options: PackOptions) -> dict:
    """The pack.json figures of one split."""
    length, end = stream["length"], stream["end"]
    rows = -(-end // options.seq_len)
    padding = rows * options.seq_len - end if options.tail == "pad" else 0
    by_format = {fmt: [name for f in sorted(files, key=lambda f: f["index"]) for name in f["files"][fmt]]
                 for fmt in options.formats}
    return {"documents": docs.get("documents", 0), "tokens": end, "separators": docs.get("separators", 0),
            "rows": rows, "documents_split": docs.get("documents_split", 0), "padding_tokens": padding,
            "padding_share": round(padding / (rows * options.seq_len), 6) if rows else 0.0,
            "tokens_dropped": length - end, "files": by_format}


def write_pack_json(files: list[dict], stream: dict, figures: dict, options: PackOptions, output: str,
                    header: dict, started_at: float) -> dict:
    """pack.json (and each split's bin.json), then _SUCCESS, when every file is written."""
    splits = {}
    for split in layout.SPLITS:
        mine = [f for f in files if f["split"] == split]
        if split == VALIDATION and not stream[split]["length"] and not figures.get(split):
            continue
        splits[split] = split_figures(split, stream[split], figures.get(split, {}), mine, options)
        expected = stream_files(stream[split]["end"], options)
        if len(mine) != expected:
            raise RuntimeError(f"{split}: {len(mine)} files written, {expected} expected")
        if "bin" in options.formats and mine:
            entries = [{"name": posixpath.basename(f["files"]["bin"][0]), "tokens": f["tokens"]}
                       for f in sorted(mine, key=lambda f: f["index"])]
            url = join(output, layout.format_folder(split, "bin"), layout.BIN_JSON)
            # The EOS in the stream: pack's own, or the one tokenize already ended each record with.
            eos_id = options.eos_id if options.eos_id is not None else header["options"].get("inputs_end_with")
            meta = layout.bin_json(options.dtype, entries, options.tokenizer_sha256, options.vocab_size,
                                   eos_id, options.bos_id)
            with writing(url):
                write_text_atomic(url, json.dumps(meta, indent=1, sort_keys=True) + "\n")
            splits[split]["files"]["bin"].append(f"{layout.format_folder(split, 'bin')}/{layout.BIN_JSON}")
    manifest = dict(header, splits=splits, timing={"started_at": started_at,
                                                   "elapsed_seconds": round(time.time() - started_at, 3)})
    if splits.get(TRAIN, {}).get("rows"):
        for name, text in ((layout.PACK_JSON, json.dumps(manifest, indent=1, sort_keys=True) + "\n"),
                           (layout.SUCCESS, json.dumps({"pack": layout.PACK_JSON, "fingerprint": header["fingerprint"]},
                                                       sort_keys=True) + "\n")):
            url = join(output, name)
            with writing(url):
                write_text_atomic(url, text)
    else:
        url = join(output, layout.PACK_JSON)
        with writing(url):
            write_text_atomic(url, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def read_units(files: list[TokenFile]) -> list[tuple[str, int, int, int]]:
    """The work: `(url, row group, its first row in the sorted inputs, unit number)` for every row group."""
    units, row = [], 0
    for f in files:
        for group, n in enumerate(f.rows):
            units.append((f.url, group, row, len(units)))
            row += n
    return units


def shuffle() -> beam.PTransform:
    """The pipeline's two shuffles: a GroupByKey of references to spill files (a test wraps it to
    check that no element carries token ids)."""
    return beam.GroupByKey()


def build_pack_pipeline(p, files: list[TokenFile], options: PackOptions, output: str, threshold: int | None,
                        validation_records: int, header: dict, started_at: float, spread: bool = True):
    """The pack pipeline; `threshold` is the split hash below which a record is validation, or None
    to take it from the `validation_records` smallest split hashes."""
    units = p | "RowGroups" >> beam.Create(read_units(files))
    if spread:
        units = units | "SpreadRowGroups" >> beam.Reshuffle()
    if threshold is None:
        threshold_pc = (units | "SplitHashes" >> beam.ParDo(SplitHashes(options.seed))
                        | "SmallestSplitHashes" >> beam.combiners.Top.Smallest(validation_records)
                        | "Threshold" >> beam.Map(lambda hs: hs[-1] + 1 if hs else 0))
    else:
        threshold_pc = p | "FixedThreshold" >> beam.Create([threshold])
    spilled = units | "SpillDocuments" >> beam.ParDo(SpillDocuments(options, output, SPILL_BYTES),
                                                      beam.pvalue.AsSingleton(threshold_pc))
    stream = (spilled
              | "SpillSizes" >> beam.Map(lambda ref: (ref[0], ref[1][4]))
              | "BucketSizes" >> beam.CombinePerKey(sum)
              | "AllSizes" >> beam.combiners.ToDict()
              | "StreamLayout" >> beam.Map(stream_layout, options))
    stream_side = beam.pvalue.AsSingleton(stream)
    packed = (spilled
              | "Buckets" >> shuffle()
              | "PackBucket" >> beam.ParDo(PackBucket(options, output), stream_side).with_outputs(
                  PackBucket.STATS, main="pieces"))
    figures = packed[PackBucket.STATS] | "SumFigures" >> beam.CombineGlobally(SumFigures())
    entries = (packed.pieces
               | "Files" >> shuffle()
               | "WriteFile" >> beam.ParDo(WriteFile(options, output), stream_side)
               | "AllFiles" >> beam.combiners.ToList())
    entries | "WritePackJson" >> beam.Map(write_pack_json, stream_side, beam.pvalue.AsSingleton(figures),
                                          options, output, header, started_at)


# --- the output folder ----------------------------------------------------------------------------

def done_before(output: str, fingerprint: str) -> dict | None:
    """pack.json of an earlier complete run with this fingerprint whose files are all there, or None."""
    fs, root = filesystem(output)
    try:
        if not fs.isfile(posixpath.join(root, layout.SUCCESS)):
            return None
        manifest = layout.upgrade_pack_json(read_json(join(output, layout.PACK_JSON)))
    except (OSError, ValueError):
        return None
    if manifest.get("fingerprint") != fingerprint:
        return None
    names = [n for s in manifest.get("splits", {}).values() for group in s["files"].values() for n in group]
    return manifest if all(fs.isfile(posixpath.join(root, n)) for n in names) else None


def clear_outputs(output: str, inputs: list[TokenFile]) -> None:
    """Remove an earlier run's outputs (`_SUCCESS` first, so a failed run never leaves one vouching for
    it); refuse a folder holding anything pack does not write (say, the token Parquet itself)."""
    ours = {layout.PACK_JSON, layout.SUCCESS, *layout.SPLITS}
    foreign = [name for name in names_in(output) if name not in ours and not name.startswith(".")]
    if foreign:
        raise UserError(f"--output {output} holds files tokenbeam pack did not write ({', '.join(foreign[:3])}"
                        f"{', ...' if len(foreign) > 3 else ''}); give an empty folder or an earlier pack output")
    remove(join(output, layout.SUCCESS))
    remove(join(output, layout.PACK_JSON))
    for split in layout.SPLITS:
        remove_tree(join(output, split))


# --- command line -------------------------------------------------------------------------------

def token_id(text: str, flag: str, vocab_size: int, tok) -> int:
    """`--eos-token` and friends: an id (`0`), or a special token's name with `--tokenizer`."""
    if text.isdigit():
        value = int(text)
        if value >= vocab_size:
            raise UserError(f"{flag} {value} is not an id of the inputs' vocabulary (ids 0 to {vocab_size - 1:,})")
        if tok is not None and value not in set(tok.special_tokens.values()):
            raise UserError(f"{flag} {value} is not a special token of --tokenizer (it has: "
                            f"{', '.join(f'{k}={v}' for k, v in sorted(tok.special_tokens.items())) or 'none'})")
        return value
    if tok is None:
        raise UserError(f"{flag} {text!r} is a token name: give its id, or --tokenizer to look it up")
    if text not in tok.special_tokens:
        raise UserError(f"{flag} {text!r} is not a special token of --tokenizer (it has: "
                        f"{', '.join(sorted(tok.special_tokens)) or 'none'})")
    return tok.special_tokens[text]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quiet_argument(parser)
    parser.add_argument("--input", action="append", default=[], metavar="TOKENS",
                        help="the output folder of `tokenbeam tokenize`, or token Parquet files or globs (repeatable; "
                             "arguments after the options are inputs too)")
    parser.add_argument("--output", required=True, help="output folder (local or fsspec URL)")
    # Checked after the leftover flags, so `--seq_len 4` is told the flag it meant, not that --seq-len is missing.
    parser.add_argument("--seq-len", type=int, default=None, metavar="N", help="ids per packed row (at least 2; required)")
    parser.add_argument("--eos-token", default=None, metavar="ID|NAME",
                        help="separator after each document: an id, or a special token's name with --tokenizer "
                             "(default: the --eos-token the inputs were tokenized with; one of --eos-token and "
                             "--bos-token is needed)")
    parser.add_argument("--bos-token", default=None, metavar="ID|NAME", help="put this id before each document")
    parser.add_argument("--tokenizer", default=None,
                        help="the inputs' tokenizer.json, to name tokens and to check the inputs were made with it")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="shuffle and split seed (default %(default)s)")
    parser.add_argument("--no-shuffle", action="store_true", help="keep the inputs' order (files by name, rows in order)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--validation-fraction", type=float, default=None, metavar="F",
                       help="share of records held out into validation/, by a hash of (seed, id) (default 0)")
    group.add_argument("--validation-records", type=int, default=None, metavar="K",
                       help="hold out the K records of smallest hash instead")
    parser.add_argument("--tail", default="drop", choices=layout.TAILS,
                        help="the last partial row of each split: drop it (default), pad it with --pad-token "
                             "(n_tokens marks the padding), or keep it short")
    parser.add_argument("--pad-token", default=None, metavar="ID|NAME", help="padding id for --tail pad (default: the EOS)")
    parser.add_argument("--format", action="append", default=[], choices=layout.FORMATS, dest="formats",
                        help="output format (repeatable; default parquet): parquet rows, megatron .bin+.idx, flat bin")
    parser.add_argument("--max-tokens-per-file", type=byte_size, default=byte_size(DEFAULT_MAX_TOKENS_PER_FILE),
                        metavar="N", help=f"ids per output file, rounded down to whole rows (default "
                                          f"{DEFAULT_MAX_TOKENS_PER_FILE}, K/M/G are powers of 2)")


def run(argv: list[str]) -> dict:
    """Run `tokenbeam pack ARGV`; returns pack.json's content. UserError for bad usage, IncompleteRun
    when the output is not complete."""
    return command.run(COMMAND, argv)


def check_numbers(args) -> None:
    if args.seq_len is None:
        raise UserError("--seq-len N is required (see `tokenbeam pack --help`)")
    if args.seq_len < 2:
        raise UserError(f"--seq-len must be at least 2 (a row of one id teaches nothing), got {args.seq_len}")
    if args.validation_fraction is not None and not 0 <= args.validation_fraction < 1:
        raise UserError(f"--validation-fraction must be in [0, 1), got {args.validation_fraction}")
    if args.validation_records is not None and args.validation_records < 0:
        raise UserError(f"--validation-records must not be negative, got {args.validation_records}")
    if args.max_tokens_per_file < args.seq_len:
        raise UserError(f"--max-tokens-per-file {args.max_tokens_per_file} is less than one row of --seq-len "
                        f"{args.seq_len}")
    if args.pad_token is not None and args.tail != "pad":
        raise UserError(f"--pad-token only applies with --tail pad (--tail is {args.tail})")


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


def decide(args, files: list[TokenFile]) -> tuple[PackOptions, dict]:
    """The launcher's decisions: ids for the tokens, the buckets, and what the output records of them."""
    from pipelines.tokenizer_files import load_tokenizer

    first = files[0]
    tok = None
    if args.tokenizer:
        tok = load_tokenizer(args.tokenizer)
        if tok.sha256 != first.tokenizer_sha256:
            raise UserError(f"--tokenizer {args.tokenizer} ({tok.sha256[:12]}...) is not the tokenizer of the inputs "
                            f"({first.tokenizer_sha256[:12]}..., e.g. {first.url})")
    vocab = first.vocab_size
    eos_id = token_id(args.eos_token, "--eos-token", vocab, tok) if args.eos_token is not None else None
    bos_id = token_id(args.bos_token, "--bos-token", vocab, tok) if args.bos_token is not None else None
    ended_with = None
    if first.eos_token is not None:
        # tokenize already ended every record with its EOS: pack adds no second one.
        ended_with = first_record_last_id(files)
        if tok is not None and ended_with != tok.special_tokens.get(first.eos_token, ended_with):
            raise UserError(f"the inputs say they end with {first.eos_token!r}, but their records end with id {ended_with}")
        if eos_id is not None and eos_id != ended_with:
            raise UserError(f"the inputs already end every record with {first.eos_token!r} (id {ended_with}); "
                            f"--eos-token {args.eos_token} would add a second, different separator")
        say(f"the inputs end every record with {first.eos_token!r} (id {ended_with}): no EOS added")
        eos_id = None
    elif eos_id is None and bos_id is None:
        raise UserError("no separator between documents: give --eos-token ID (or NAME with --tokenizer), or "
                        "--bos-token; the inputs were tokenized without --eos-token")
    for flag, chosen in (("--eos-token", eos_id), ("--bos-token", bos_id)):
        if chosen is not None:
            warn_if_text_token(chosen, flag, files[0])
    pad_id = None
    if args.tail == "pad":
        pad_id = token_id(args.pad_token, "--pad-token", vocab, tok) if args.pad_token is not None else \
            (eos_id if eos_id is not None else ended_with if ended_with is not None else bos_id)
    formats = tuple(dict.fromkeys(args.formats or ["parquet"]))
    tokens = sum(sum(f.ids) for f in files)
    options = PackOptions(seq_len=args.seq_len, seed=args.seed, shuffle=not args.no_shuffle, eos_id=eos_id,
                          bos_id=bos_id, pad_id=pad_id, tail=args.tail, formats=formats,
                          tokens_per_file=args.max_tokens_per_file // args.seq_len * args.seq_len,
                          vocab_size=vocab, tokenizer_sha256=first.tokenizer_sha256,
                          buckets=max(1, math.ceil(tokens / BUCKET_TOKENS)))
    shaping = {k: v for k, v in dataclasses.asdict(options).items() if k != "buckets"}
    shaping.update(validation_fraction=args.validation_fraction, validation_records=args.validation_records,
                   inputs_end_with=ended_with)
    return options, shaping


def run_parsed(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> dict:
    started_at = time.time()
    set_quiet(args.quiet)
    beam_args, bare = split_beam_args(rest, option_strings(parser))
    check_numbers(args)
    files, stats_digests = find_inputs(list(args.input) + bare)
    records = sum(sum(f.rows) for f in files)
    if args.validation_records is not None and args.validation_records >= records:
        raise UserError(f"--validation-records {args.validation_records} leaves no record for train "
                        f"(the inputs hold {records:,})")
    options, shaping = decide(args, files)
    threshold = None if args.validation_records else round((args.validation_fraction or 0) * (1 << HASH_BITS))
    beam_options, runner = pipeline_options(beam_args)
    check_worker_paths(beam_options, [*[f.url for f in files], args.output])
    inputs = [{"url": f.url, "size": f.size, "version": f.version, "rows": sum(f.rows),
               "tokenize_footer_sha256": f.footer_sha256} for f in files]
    fingerprint = hashlib.sha256(json.dumps({"layout": list(layout.FINGERPRINT_LAYOUT),
                                             "options": shaping, "inputs": inputs}, sort_keys=True).encode()).hexdigest()
    claim_output(args.output, "pack")
    if any(inside(f.url, args.output) for f in files):
        raise UserError(f"--output {args.output} holds the inputs; give another folder")
    earlier = done_before(args.output, fingerprint)
    if earlier is not None:
        say(f"skipped: {args.output} is complete from an earlier run with the same inputs and options")
        return earlier
    clear_outputs(args.output, files)
    mark_output(args.output, "pack")
    remove_spill_files(args.output)                 # a killed run's
    remove_stale_temporaries(args.output)
    say(f"pack: {len(files)} file(s), {records:,} records, {sum(sum(f.ids) for f in files):,} ids -> rows of "
        f"{options.seq_len}, {options.buckets} bucket(s) -> {args.output}")
    header = {"version": layout.PACK_JSON_VERSION, "tokenizer_sha256": options.tokenizer_sha256,
              "vocab_size": options.vocab_size, "id_dtype": options.dtype.name, "seq_len": options.seq_len,
              "options": shaping, "inputs": {"list": inputs}, ACCOUNT_KEY: layout.pack_account(len(files), records).to_json(),
              "inputs_stats_sha256": stats_digests, "fingerprint": fingerprint}
    try:
        with pipeline_failures(args.output), beam.Pipeline(runner=runner, options=beam_options) as p:
            build_pack_pipeline(p, files, options, args.output, threshold, args.validation_records or 0, header,
                                started_at, spread=not one_local_worker(beam_options, runner))
    finally:
        remove_spill_files(args.output)             # whether the run succeeded or not
    manifest = read_json(join(args.output, layout.PACK_JSON))
    for split, s in manifest["splits"].items():
        say(f"{split}: {s['documents']:,} documents, {s['rows']:,} rows, {s['tokens']:,} ids "
            f"({s['documents_split']:,} documents split across rows, {s['padding_tokens']:,} padding, "
            f"{s['tokens_dropped']:,} dropped)")
    if not manifest["splits"][TRAIN]["rows"]:
        raise IncompleteRun(f"nothing was packed: train holds {manifest['splits'][TRAIN]['tokens_dropped']:,} ids, "
                            f"less than one row of {options.seq_len} (try --tail keep or pad); no _SUCCESS")
    elapsed = time.time() - started_at
    say(f"done in {elapsed:.1f}s ({manifest['splits'][TRAIN]['tokens'] / 1e6 / max(elapsed, 1e-9):.2f} M ids/s) "
        f"-> {args.output}")
    if VALIDATION in manifest["splits"] and not manifest["splits"][VALIDATION]["rows"]:
        warn("validation holds less than one row: all of it was dropped (try --tail keep or pad)")
    return manifest


COMMAND = Command(name="pack", help="pack token Parquet into shuffled fixed-length sequences (Beam)",
                  usage="tokenbeam pack --input TOKENS_DIR --output DIR --seq-len N [options] [INPUT ...]",
                  description=__doc__.split("\n")[0], add_arguments=add_arguments, run=run_parsed, beam=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.pack ARGV` (the same as `tokenbeam pack ARGV`)."""
    return command.main(COMMAND, argv)


if __name__ == "__main__":
    import gc

    code = main()
    gc.freeze()       # the process exits next: spare the interpreter's final walk over Beam's objects
    sys.exit(code)

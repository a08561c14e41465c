"""The steps of `tokenbeam pack`, each readable and testable alone; pack.py chains them into the job.

1. Hashing: `record_hashes` gives each record id its order hash and split hash under the seed.
2. Spilling: `SpillDocuments` reads a row group, tells each record its split and bucket, and writes
   the documents to a spill file, handing the shuffle only references (`SplitHashes` first finds the
   threshold for `--validation-records`).
3. Packing: `PackBucket` reads one bucket's documents, puts them in order (`document_order`), lays them
   out as a stream (`lay_out`) at the bucket's offset (`stream_layout`), and cuts it at the file
   boundaries into pieces in a second spill file.
4. Writing: `WriteFile` reads one output file's pieces and writes it in each format (pack_output.py).
5. Counting: `SumFigures` adds the buckets' figures for pack.json.

Both shuffles go through files: a step writes the token ids to spill files under the output's hidden
SPILL_FOLDER and hands the GroupByKey only small references (a file name, a place in it, counts), so
what any runner holds for a shuffle is a few dozen bytes per (bucket, spill file), never token ids.
"""
from __future__ import annotations

import hashlib
import uuid
from typing import Any, Tuple

import numpy as np
import pyarrow as pa

from pipelines.core.beam_options import beam
from pipelines.core.errors import warn
from pipelines.core.files import filesystem, join, open_atomic, remove_tree, writing
from pipelines.datasets.pack_inputs import read_row_group
from pipelines.steps.pack_output import (TRAIN, VALIDATION, PackOptions, stream_files, write_flat, write_megatron,
                                   write_parquet)
from schemas import pack as layout

SPILL_FOLDER = layout.SPILL_FOLDER  # under --output: the shuffles' files, removed when the run ends
HASH_BITS = 63                   # hashes are non-negative int64, which Beam's coders carry as varints


# --- hashing --------------------------------------------------------------------------------------

def seed_key(seed: int) -> bytes:
    return seed.to_bytes(16, "little")


def record_hashes(record_id: str, key: bytes) -> tuple[int, int]:
    """(order hash, split hash) of a record id under a seed: two independent 63-bit numbers.

    `record_hashes("doc-1", seed_key(1234))` is the same on every machine, Python and run (no
    Python `hash()`, which PYTHONHASHSEED changes).
    """
    digest = hashlib.blake2b(record_id.encode("utf-8", "surrogatepass"), digest_size=16, key=key).digest()
    return int.from_bytes(digest[:8], "big") >> 1, int.from_bytes(digest[8:], "big") >> 1


# --- spill files ----------------------------------------------------------------------------------

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


# --- the steps ------------------------------------------------------------------------------------

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


def read_pieces(output: str, refs, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """One file's ids and document starts, read from the pieces' spill files (refs as PackBucket emits
    them, in stream order) into one array each."""
    ids = np.empty(sum(r[3] for r in refs) // dtype.itemsize, dtype)
    starts = np.empty(sum(r[4] for r in refs) // 8, np.int64)
    at_id = at_start = 0
    for _, name, offset, n_ids, n_starts in refs:
        fs, path = filesystem(spill_url(output, name))
        with fs.open(path, "rb") as f:
            f.seek(offset)
            data = f.read(n_ids + n_starts)
        if len(data) != n_ids + n_starts:
            raise RuntimeError(f"spill file {name} is short: {len(data)} bytes at {offset}, not {n_ids + n_starts}")
        ids[at_id:at_id + n_ids // dtype.itemsize] = np.frombuffer(data, dtype, n_ids // dtype.itemsize)
        starts[at_start:at_start + n_starts // 8] = np.frombuffer(data, np.int64, n_starts // 8, n_ids)
        at_id += n_ids // dtype.itemsize
        at_start += n_starts // 8
        del data
    return ids, starts


def check_pieces(refs, first: int, itemsize: int, where: str) -> None:
    """The pieces of one file (sorted) must start at its first position and follow one another with no
    gap or overlap: RuntimeError otherwise (a bug, never bad input).

    >>> check_pieces([(8, "a", 0, 8, 8), (12, "b", 0, 4, 0)], 8, 2, "train file 1")
    >>> check_pieces([(8, "a", 0, 8, 8), (13, "b", 0, 4, 0)], 8, 2, "train file 1")
    Traceback (most recent call last):
    RuntimeError: train file 1: a gap or overlap in the stream at 13
    """
    if refs[0][0] != first:
        raise RuntimeError(f"{where}: the stream starts at {refs[0][0]}, not {first}")
    for (a, _, _, n_ids, _), (b, _, _, _, _) in zip(refs, refs[1:]):
        if a + n_ids // itemsize != b:
            raise RuntimeError(f"{where}: a gap or overlap in the stream at {b}")


class WriteFile(beam.DoFn):
    """The pieces of one output file (read from PackBucket's spill files) -> its rows, in each format
    asked for (pack_output.py); emits the file's entry.

    Example, seq_len 4, the stream [5 6 7 0 8 9 0] with documents at 0 and 4, `--tail pad`, pad 0:
    Parquet rows `[5 6 7 0]` (doc_starts [0], n_tokens 4) and `[8 9 0 0]` (doc_starts [0],
    n_tokens 3); Megatron sequences [5 6 7 0] and [8 9 0]; the flat file 5 6 7 0 8 9 0. The entry:
    `{"split": "train", "index": 0, "tokens": 7, "rows": 2, "files": {"parquet": [...], ...}}`.
    """

    def __init__(self, options: PackOptions, output: str):
        self.options = options
        self.output = output

    def setup(self):
        self.rows_written = beam.metrics.Metrics.counter("tokenbeam", "rows")
        self.tokens_written = beam.metrics.Metrics.counter("tokenbeam", "tokens")

    def process(self, element, stream):
        (split, file_index), refs = element
        o = self.options
        refs = sorted(refs)
        first = file_index * o.tokens_per_file
        check_pieces(refs, first, o.dtype.itemsize, f"{split} file {file_index}")
        ids, starts = read_pieces(self.output, refs, o.dtype)
        starts -= first
        count = stream_files(stream[split]["end"], o)
        names = {}
        for fmt in o.formats:
            folder = layout.format_folder(split, fmt)
            name = layout.part_name(file_index, count, ".parquet" if fmt == "parquet" else "")
            url = join(self.output, folder, name)
            with writing(url):
                if fmt == "parquet":
                    self.write_parquet(url, ids, starts, first // o.seq_len, split, file_index)
                    names[fmt] = [f"{folder}/{name}"]
                elif fmt == "megatron":
                    self.write_megatron(url, ids, starts)
                    names[fmt] = [f"{folder}/{name}{ext}" for ext in (".bin", ".idx")]
                else:
                    write_flat(url, ids)
                    names[fmt] = [f"{folder}/{name}.bin"]
        rows = -(-len(ids) // o.seq_len)
        self.rows_written.inc(rows)
        self.tokens_written.inc(len(ids))
        yield {"split": split, "index": file_index, "tokens": len(ids), "rows": rows, "files": names}

    # The writers, as methods: a test swaps one for a failing one.
    def write_parquet(self, url, ids, starts, first_row, split, file_index):
        write_parquet(url, ids, starts, first_row, split, file_index, self.options)

    def write_megatron(self, url, ids, starts):
        write_megatron(url, ids, starts, self.options.vocab_size)


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

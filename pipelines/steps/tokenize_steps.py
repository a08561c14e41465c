"""The steps of tokenizing one shard, each readable alone; `TokenizeShard` (tokenize.py) runs them.

1. Reading: `shards.ShardReader` gives the shard's records in file order and lists the rejected ones.
2. Encoding: `ChunkEncoder` turns chunks of records into token ids and per-record measures on
   background threads (the compiled encoder and numpy drop the GIL), while the reading goes on.
3. Assembling: `RowGroup` gathers encoded records as columns, `RowGroup.to_table` makes them one Arrow
   table (token ids on the encoder's buffers, no Python object per id); `UnsummedChunks` adds them to the
   shard's summary a row group at a time.
4. Writing: `RowGroupWriter` writes row groups, then the shard's last one, footer and rename, on one
   background thread, in order: a row group is written while the next is filled.
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from itertools import chain
from contextlib import ExitStack
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from bpe_ops.dropout import Dropout
from bpe_ops.flat_ids import FlatIds
from bpe_ops.stats import MEASURE_SEPARATORS, BatchCalibration, Summary, Tallies, count_column, measure_batch
from schemas import tables
from schemas.records import ids_of, texts_of
from pipelines.core.files import writing
from pipelines.steps.token_file import placeholder_ids
from pipelines.statistics.groups import group_value
from pipelines.statistics.windows import parse_timestamp

# Row groups are cut only after a whole number of batches of this many records (with the bounds
# below), as when a batch of this many records was the unit of encoding: the files keep that layout.
ENCODE_BATCH_RECORDS = 256
# Records encoded and measured per task of the background threads (the step a chunk grows by);
# divides ENCODE_BATCH_RECORDS. Small, so the threads keep both cores busy from a shard's first
# records to its last.
ENCODE_CHUNK_RECORDS = 16
# ... unless its records are short: a chunk grows, 16 records at a time, until its text holds this
# many characters or it ends at a multiple of CHUNK_MAX_RECORDS records: see
# `tokenize_shard.chunk_ends`. Each chunk costs the threads and the reading thread the same steps of
# Python whatever its size (~90 us), so chunks are long (benchmarks/RESULTS.md: the whole tokenize
# job). A chunk may span the place where a row group is cut: `RowGroup.rows_before_cut` finds it, so
# the files do not depend on it.
CHUNK_TEXT_CHARS = 524_288
CHUNK_MAX_RECORDS = 4_096
# A shard's first chunks are smaller, so the threads start on it after a few records rather than a
# whole chunk of them (the first goes sooner still when the shard's first read holds fewer records);
# they add up to one chunk. Row groups are cut where `RowGroup.rows_before_cut` says, whatever the chunks.
FIRST_CHUNK_RECORDS = (4, 4, 8)
# Chunks sent to encode and not yet added, per encoding thread, at most. Two cores run the reading,
# encoding and writing threads: whichever is descheduled, the others keep going while chunks are
# queued. Two chunks as long as CHUNK_TEXT_CHARS keep them as busy as four, in less memory.
CHUNKS_AHEAD_PER_THREAD = 2
# Chunks encode ahead of the one being added (in order) only while their texts stay below this, so
# chunks of very long records do not multiply tokenize's peak memory.
OVERLAP_TEXT_BYTES = 64 << 20
ROW_GROUP_ROWS = 8_192            # bounded row groups: memory stays bounded by this, not by the shard
ROW_GROUP_TOKENS = 4_000_000      # ... or by this many token ids, whichever comes first
# Row groups are made and written in memory from the C library's allocator, which keeps what a row
# group freed for the next: Arrow's default pool (mimalloc) hands it back to the system and faults
# fresh zeroed pages in again for every row group (the 128k job: a third less system time, less peak).
WRITE_POOL = pa.system_memory_pool()
# Writes queued for the writing thread at most: a shard's end (last row group, footer, rename) may
# wait behind the shard's before it while the next shard is read and encoded.
WRITES_QUEUED = 2
INT32_MAX = 2**31 - 1             # a list array's offsets are int32


def id_hashes(record_ids) -> np.ndarray:
    """Each record id as a 128-bit hash (two uint64 columns): equal ids, equal rows; a collision
    between different ids is out of reach (about n^2 / 2^129). The hash is BLAKE2b's (16 bytes):
    `_native.id_hashes` where built, else hashlib's, id by id (its specification)."""
    digests = (_ID_HASHES(record_ids) if _ID_HASHES is not None else
               b"".join(hashlib.blake2b(str(i).encode("utf-8", "surrogatepass"), digest_size=16).digest()
                        for i in record_ids))
    return np.frombuffer(digests, dtype="<u8").reshape(-1, 2)


def _compiled_id_hashes():
    try:
        from bpe_ops._native import id_hashes as compiled
    except ImportError:
        return None
    return compiled


_ID_HASHES = _compiled_id_hashes()


class ChunkEncoder:
    """The encoding step: each chunk's token ids (one `FlatIds` batch, EOS appended), `batch_stats`
    columns, digit runs and `Summary.batch_calibration`, computed on background threads.

    Args:
        tok: the loaded tokenizer.
        threads: how many chunks encode at once.
        dropout: BPE-dropout (each record's randomness its own: seed and record id), or None.
        eos_id: the id appended to each record's ids, or None.
    """

    def __init__(self, tok, threads: int, dropout: Dropout | None, eos_id: int | None):
        self.tok, self.threads, self.dropout, self.eos_id = tok, max(1, threads), dropout, eos_id
        self.pool: ThreadPoolExecutor | None = None     # made on first use
        # Each thread's Tallies: the token-id counts and group x class counts of the chunks it
        # calibrated, counted in the pass that reads the ids (no GIL), added to the summary once per shard.
        self.tallies: list[Tallies] = []
        self._local = threading.local()
        self._tallies_made = threading.Lock()

    def start(self, chunk, summary: Summary) -> Future:
        """Encode and measure `chunk` in the background (read-only on `summary`: added later, in order;
        its ids counted into the encoding thread's tallies, added by `add_tallies`)."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="tokenbeam-batch")
        return self.pool.submit(self.encode_and_measure, chunk, summary)

    def encode_and_measure(self, chunk, summary: Summary) -> tuple:
        """What a background thread makes of a chunk: its record ids (listed here, once, off the
        reading thread), token ids, measures, digit runs, calibration, and its record ids' hashes
        (`id_hashes`, for the count of repeated ids: hashed here, off the reading thread too)."""
        texts = texts_of(chunk)
        record_ids = ids_of(chunk)
        id_arrays, measured = self.ids(chunk, texts)
        stats, runs = measure_batch(texts, id_arrays, measured)
        calibration = summary.batch_calibration(stats[0], record_ids, id_arrays, tallies=self.thread_tallies(summary))
        return record_ids, id_arrays, stats, runs, calibration, id_hashes(record_ids)

    def thread_tallies(self, summary: Summary) -> Tallies:
        """The calling thread's tallies (made on first use, for `summary`'s vocabulary)."""
        tallies = getattr(self._local, "tallies", None)
        if tallies is None or len(tallies.id_counts) != summary.vocab_size:
            tallies = self._local.tallies = summary.tallies()
            with self._tallies_made:
                self.tallies = [t for t in self.tallies if len(t.id_counts) == summary.vocab_size] + [tallies]
        return tallies

    def add_tallies(self, summary: Summary) -> None:
        """Add every thread's tallies to `summary` and empty them: called with no chunk encoding, once
        the shard's chunks have all been added."""
        for tallies in self.tallies:
            summary.add_tallies(tallies)

    def clear_tallies(self) -> None:
        """Drop what the threads counted (a shard's start: a failed shard's chunks may have left counts)."""
        for tallies in self.tallies:
            tallies.clear()

    def ids(self, chunk, texts: list[str]) -> tuple[FlatIds, bytes | None]:
        """The token ids of the chunk's records (`texts`, its records' texts) as one `FlatIds` batch,
        EOS appended; and the texts' measures where the encoder took them in its pass
        (`measure_batch`'s `measured`), else None."""
        measured = None
        if self.dropout is None:
            # The compiled encoder's flat buffer and counts as they come (no Python object per id or
            # per record), by this thread's own compiled encoder (it drops the GIL: threads encode
            # side by side).
            flat, measured = self.tok.encode_flat_measured_in_thread(texts, *MEASURE_SEPARATORS)
        else:
            # Each record's randomness is its own (seed, record id): the same ids whatever the order.
            p, seed = self.dropout.p, self.dropout.seed
            flat = FlatIds.of([self.tok.encode(r.text, dropout=p, seed=seed, record_id=r.id) for r in chunk])
        if self.eos_id is not None:
            flat = flat.with_appended(self.eos_id)
        return flat, measured

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


class RowGroup:
    """Columns of the rows not yet written, filled a batch at a time. A batch's token ids are one
    `FlatIds` (its records' ids in one uint32 buffer), and reaches Arrow as a list array on that
    buffer (`list_array`), with no Python object per id or per record and no copy."""

    def __init__(self, keep_types: dict[str, str], timestamp_field: str | None = None,
                 group_field: str | None = None):
        self.keep_types = keep_types
        self.keep_fields = tuple(keep_types)
        self.timestamp_field = timestamp_field
        self.group_field = group_field
        self.groups: list[str] = []
        self.event_times: list[int | None] = []     # epoch microseconds
        self.ids: list[str] = []
        self.token_ids: list[FlatIds] = []
        self.stats: list[list[np.ndarray]] = [[] for _ in tables.STAT_COLUMNS]    # each column's batches
        self.keep: dict[str, list] = {k: [] for k in self.keep_fields}
        self.tokens = 0

    @property
    def rows(self) -> int:
        return len(self.ids)

    def extend(self, records, id_arrays, stats, record_ids: list[str] | None = None) -> None:
        """Add a batch: its records (and their ids, when the caller has them), their token ids (a
        `FlatIds` batch; each record's apart, as arrays or lists, is made one) and their
        `measure_batch` columns (int64 arrays, or `batch_stats`' lists)."""
        self.ids += ids_of(records) if record_ids is None else record_ids
        self.token_ids.append(id_arrays if isinstance(id_arrays, FlatIds) else FlatIds.of(id_arrays))
        for column, values in zip(self.stats, stats):
            column.append(count_column(values))
        for k in self.keep_fields:
            self.keep[k] += [tables.kept_value(r.keep.get(k), self.keep_types[k]) for r in records]
        if self.timestamp_field:
            seconds = (parse_timestamp(r.keep.get(self.timestamp_field)) for r in records)
            self.event_times += [None if s is None else round(s * 1e6) for s in seconds]
        if self.group_field:
            self.groups += [group_value(r.keep.get(self.group_field)) for r in records]
        self.tokens += int(np.sum(stats[0]))

    def full(self) -> bool:
        return self.rows >= ROW_GROUP_ROWS or self.tokens >= ROW_GROUP_TOKENS

    def rows_before_cut(self, n_tokens: Sequence[int]) -> int | None:
        """How many of the records that come next (their ids' counts `n_tokens`) this group takes
        before it is cut: up to the first whole number of ENCODE_BATCH_RECORDS rows at which it is
        `full`; None when it is not full at any such place within them.

        >>> group = RowGroup({})
        >>> group.rows_before_cut([10] * 300), group.rows_before_cut([20_000] * 300)
        (None, 256)
        """
        first = self.rows - self.rows % ENCODE_BATCH_RECORDS + ENCODE_BATCH_RECORDS
        last = self.rows + len(n_tokens)
        tokens = np.cumsum(n_tokens, dtype=np.int64)
        every = int(tokens[-1]) if len(tokens) else 0
        if first > last or last < ROW_GROUP_ROWS and self.tokens + every < ROW_GROUP_TOKENS:
            return None             # no such place, or not full even with every record
        for place in range(first, last + 1, ENCODE_BATCH_RECORDS):
            taken = place - self.rows
            if place >= ROW_GROUP_ROWS or self.tokens + int(tokens[taken - 1]) >= ROW_GROUP_TOKENS:
                return taken
        return None

    def to_table(self, schema: pa.Schema, summary: Summary, count_ids: bool = True,
                 placeholder: bool = False) -> pa.Table:
        """The row group as an Arrow table; unless `count_ids` is false (they were counted as they were
        calibrated: `ChunkEncoder`'s tallies), its token ids are counted into `summary` in bulk here
        (numpy.bincount over the flat id array, no Python object per id). With `placeholder`, the
        token_ids column holds empty lists: `TokenFileWriter` writes the ids (`self.token_ids`)."""
        if count_ids:
            values = FlatIds.joined(self.token_ids).ids
            if len(values):
                summary.add_dense_id_counts(np.bincount(values, minlength=summary.vocab_size))
        id_type = schema.field("token_ids").type
        pool = WRITE_POOL
        # One list array per batch, each on its batch's own buffer (from numpy, Arrow takes it as it
        # is: from an `array`, it converts id by id, ~90 ns/id); the Parquet writer reads the chunks
        # in turn. Joining them into one buffer would copy every id once more, on this thread.
        token_ids = (placeholder_ids(self.rows, id_type, pool) if placeholder else
                     pa.chunked_array([list_array(batch, id_type, pool) for batch in self.token_ids if len(batch)],
                                      type=id_type))
        columns = [pa.array(self.ids, pa.string(), memory_pool=pool), token_ids] + [
            pa.array(np.concatenate(c) if c else np.zeros(0, np.int64), pa.int32(), memory_pool=pool)
            for c in self.stats]
        if self.timestamp_field:
            columns.append(pa.array(self.event_times, pa.int64(), memory_pool=pool).cast(tables.EVENT_TIME_TYPE,
                                                                                         memory_pool=pool))
        if self.group_field:
            columns.append(pa.array(self.groups, pa.string(), memory_pool=pool))
        columns += [pa.array(self.keep[k], schema.field(k).type, memory_pool=pool) for k in self.keep_fields]
        return pa.Table.from_arrays(columns, schema=schema)


def list_array(batch: FlatIds, list_type: pa.DataType, pool) -> pa.ListArray:
    """A batch's token ids as an Arrow list array of `list_type` (list<uint32> or list<uint16>) on the
    batch's own id buffer; an id too large for uint16 raises, never wraps.

    >>> list_array(FlatIds.of([[5, 6], [], [7]]), pa.list_(pa.uint16()), None).to_pylist()
    [[5, 6], [], [7]]
    """
    ids = pa.array(batch.ids, memory_pool=pool)
    if list_type.value_type != pa.uint32():
        ids = ids.cast(list_type.value_type, memory_pool=pool)
    if len(batch) and batch.ends[-1] > INT32_MAX:
        raise OverflowError(f"{int(batch.ends[-1]):,} token ids in one batch: a list column holds at most {INT32_MAX:,}")
    offsets = np.zeros(len(batch) + 1, dtype=np.int32)
    offsets[1:] = batch.ends
    return pa.ListArray.from_arrays(pa.array(offsets, memory_pool=pool), ids, type=list_type, pool=pool)


class UnsummedChunks:
    """Encoded chunks already in their row group, not yet in the shard's Summary and partials: added
    to them together, as one batch (`add_to`), when their row group is written and at the shard's
    end. A summary's per-batch Python work (tallies, moments, per-group tables) is so paid once per
    row group rather than once per chunk, on the thread that also reads the shard and holds the GIL
    the encoding threads need. Holds each record's id and kept fields, never its text."""

    def __init__(self, kept_fields: bool = True):
        self.chunks: list[tuple] = []
        self.kept_fields = kept_fields      # whether the partials read the records' kept fields

    def add(self, chunk, record_ids: list[str], id_arrays: FlatIds, stats, runs: np.ndarray, calibration,
            hashes: np.ndarray | None = None) -> None:
        """A chunk's records (`record_ids`, their ids) and what `ChunkEncoder` made of it (its token ids
        a `FlatIds` batch, each record's apart made one; its record ids' `id_hashes`, else hashed if
        they are added to partials)."""
        keeps = [r.keep for r in chunk] if self.kept_fields else None
        flat = id_arrays if isinstance(id_arrays, FlatIds) else FlatIds.of(id_arrays)
        self.chunks.append((record_ids, keeps, flat, stats, runs, calibration, hashes))

    def add_to(self, summary: Summary, partials) -> None:
        """Add the chunks held, in order, to `summary` and `partials` (if any) as one batch; hold none."""
        if not self.chunks:
            return
        chunks, self.chunks = self.chunks, []
        joined = chain.from_iterable
        record_ids = list(joined(c[0] for c in chunks))
        stats = tuple(np.concatenate([count_column(c[3][k]) for c in chunks]) for k in range(len(chunks[0][3])))
        runs = np.concatenate([c[4] for c in chunks])
        # The chunks' calibrations hold what their ids give the summary: the ids are not read again.
        summary.add_batch(*stats, record_ids=record_ids, digit_runs=runs,
                          calibration=BatchCalibration.joined([c[5] for c in chunks]))
        if partials is not None:
            if self.kept_fields:      # each record's ids apart: the partials split the batch record by record
                id_arrays = [ids for c in chunks for ids in c[2].arrays()]
                partials.add_batch(list(joined(c[1] for c in chunks)), [column.tolist() for column in stats],
                                   id_arrays, record_ids, digit_runs=runs)
            partials.add_id_hashes(np.concatenate([id_hashes(c[0]) if c[6] is None else c[6] for c in chunks]))


class RowGroupWriter:
    """The writing step: row groups, and at a shard's end its last row group, footer and rename, written
    by one background thread in order (Arrow drops the GIL): a row group while the next is filled, a
    shard's end while the next shard is read and encoded. Up to WRITES_QUEUED writes wait or run at
    once, so a shard whose records encode faster than the shard before it is written does not keep
    the encoding threads idle at its end. `wait` raises what a write raised.

    Args:
        queued: the writes started and not yet waited for, at most (WRITES_QUEUED).
    """

    def __init__(self, queued: int | None = None):
        self.queued = max(1, WRITES_QUEUED if queued is None else queued)
        self.thread: ThreadPoolExecutor | None = None     # made on first use
        self.started: deque[Future] = deque()             # the writes started, oldest first, until waited for
        self.count = 0                                    # writes started since the step was made

    def start(self, write: Callable, *args) -> None:
        """Start a write after those before it, once fewer than `queued` are started (and raise what
        the oldest of them raised, once it is waited for)."""
        self._make_room()
        self._submit(write, *args)

    def _make_room(self) -> None:
        """Wait for the oldest writes while `queued` are started; raise what one of them raised."""
        while len(self.started) >= self.queued:
            self.started.popleft().result()

    def _submit(self, write: Callable, *args) -> None:
        if self.thread is None:
            self.thread = ThreadPoolExecutor(1, thread_name_prefix="tokenbeam-write")
        self.started.append(self.thread.submit(write, *args))
        self.count += 1

    def wait_since(self, count: int) -> None:
        """Wait as `wait` does when a write was started after `count` writes (a shard's own row
        groups, `count` taken at its start): one thread writes in order, so those before it are
        done once it is; else return at once (the shards before it go on writing)."""
        if self.count > count:
            self.wait()

    def finish(self, url: str, stack: ExitStack, writer, last: tuple | None, entry: dict) -> None:
        """Start writing a shard's end: its last row group, the footer holding its accounting, the rename.
        When a write before it failed (raised here), the shard's file is dropped unfinished, its
        temporary file removed, as when a shard fails midway."""
        try:
            self._make_room()
        except BaseException:
            with stack:
                raise
        self._submit(finish_file, url, stack, writer, last, entry)

    def wait(self, quiet: bool = False) -> None:
        """Wait for every write started; raise what the first that failed raised, unless `quiet`
        (another error is on its way)."""
        started, self.started = list(self.started), deque()
        wait(started)
        if not quiet:
            for future in started:
                future.result()

    def close(self) -> None:
        if self.thread is not None:
            self.thread.shutdown()


def finish_file(url: str, stack: ExitStack, writer, last: tuple | None, entry: dict) -> None:
    """Write a shard's last row group (`TokenFileWriter.write_row_group`'s arguments) and its footer,
    and rename the file into place (`stack` holds the writer and the temporary file)."""
    with writing(url), stack:
        if last is not None:
            writer.write_row_group(*last)
        # The footer carries the shard's accounting: a rerun rebuilds its summary from the file alone.
        writer.add_key_value_metadata({tables.SHARD_KEY: json.dumps(entry, sort_keys=True)})
        writer.close()

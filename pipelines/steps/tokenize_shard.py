"""One shard tokenized: the DoFn that reads a shard, encodes it in chunks on background threads and
writes its token Parquet, composed of the steps in `tokenize_steps` (ShardReader, ChunkEncoder,
RowGroup, RowGroupWriter); with what it yields besides the Parquet: the shard's Summary, its
manifest entry, its window and group partials, and its record ids' hashes (repeated ids).

A shard whose Parquet an earlier run completed with the same fingerprint (`shard_fingerprint`) is
not redone: its summary is rebuilt from the file.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from concurrent.futures import wait
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Sequence

from pipelines.core.beam_options import beam  # first: it hides Beam's import-time apitools warning
import numpy as np
import pyarrow.parquet as pq

from bpe_ops.dropout import Dropout
from bpe_ops.stats import Summary
from bpe_ops.utf8_texts import Utf8Texts
from schemas import tables
from schemas.records import join_runs, texts_of
from pipelines.core.errors import ShardFailure, UserError, shard_done
from pipelines.core.files import filesystem, join, open_atomic, writing
from pipelines.core.heap import process_owned, settle_heap
from pipelines.datasets.shards import ShardReader, numbered
from pipelines.datasets.tokenizer_files import TokenizerRef, load_identified_tokenizer
from pipelines.statistics.breakdowns import BreakdownSummaries, Breakdowns, add_file
from pipelines.statistics.windows import format_utc
from pipelines.steps.token_file import TokenFileWriter
from pipelines.steps.tokenize_steps import (CHUNK_MAX_RECORDS, CHUNK_TEXT_CHARS, CHUNKS_AHEAD_PER_THREAD,
                                            ENCODE_CHUNK_RECORDS, FIRST_CHUNK_RECORDS, OVERLAP_TEXT_BYTES, WRITE_POOL,
                                            ChunkEncoder, RowGroup, RowGroupWriter, UnsummedChunks, id_hashes)

if TYPE_CHECKING:
    from pipelines.datasets.sources import SourceOptions

MANIFEST_VERSION = 1            # the layout of the shard records in the footers (and so in the fingerprint)
# Pieces each encoding thread's cache holds in a tokenize job (the tokenizer's default suits a single
# caller): the distinct pre-tokens of a dataset run to hundreds of thousands, and a cache that fills
# up is emptied whole, so one smaller than them keeps missing. This many (the seeded whole tokens
# counted) fill a table of 2**19 slots of 32 bytes (16 MB) per thread to its 3/4 limit: the most room
# that table gives.
JOB_CACHE_PIECES = 3 << 17


def chunk_ends(records: int, first_size: int | None, chars: int, submitted: int) -> bool:
    """Whether a chunk of `records` records (`chars` characters), after `submitted` records of the
    shard, is sent to encode now. A shard's first chunks have FIRST_CHUNK_RECORDS records; then a
    chunk grows by ENCODE_CHUNK_RECORDS records at a time until its text reaches CHUNK_TEXT_CHARS or it
    ends at a multiple of CHUNK_MAX_RECORDS: chunks of short records are long (each chunk costs the
    threads the same hand-overs of the GIL, whatever its size). Where a row group is cut does not
    depend on the chunks (`RowGroup.rows_before_cut`).

    >>> chunk_ends(4, 4, 40, 0), chunk_ends(16, None, 500, 16), chunk_ends(16, None, 600_000, 16)
    (True, False, True)
    >>> chunk_ends(4080, None, 500, 16), chunk_ends(240, None, 500, 16), chunk_ends(31, None, 600_000, 16)
    (True, False, False)
    """
    if first_size is not None:
        return records >= first_size
    return records % ENCODE_CHUNK_RECORDS == 0 and (
        chars >= CHUNK_TEXT_CHARS or (submitted + records) % CHUNK_MAX_RECORDS == 0)


def spans_joined(spans: list) -> Sequence:
    """The records of spans `[run, start, stop]` of runs read (`RecordRun`s or lists), in order, as one
    run (`join_runs`).

    >>> spans_joined([[["a", "b", "c"], 1, 3], [["d"], 0, 1]])
    ['b', 'c', 'd']
    """
    return join_runs([run[start:stop] for run, start, stop in spans])


def text_chars(texts, start: int, stop: int) -> int:
    """The characters of texts[start:stop] (a list of str, or `Utf8Texts`, counted as they were read).

    >>> text_chars(["ab", "c", "déf"], 1, 3), text_chars(Utf8Texts.of(["ab", "c", "déf"]), 1, 3)
    (4, 4)
    """
    if type(texts) is Utf8Texts:
        return int(texts.chars[start:stop].sum())
    return sum(map(len, texts[start:stop]))


def prepare_encoding(tok, threads: int, dropout: Dropout | None = None) -> None:
    """Make `tok` ready for a tokenize job's `threads` encoding threads: its compiled encoder's cache
    sized for the whole job (JOB_CACHE_PIECES entries in all, the whole tokens it seeds counted; read
    when the encoder is built), and, without BPE-dropout (which encodes in Python), the encoder and
    its forks for the other threads built on a background thread (`Tokenizer.prepare_threads`): their
    tables' first touch overlaps the job's start rather than holding up its first chunk. The worker's
    `setup` calls it, and the launcher too where the job runs in its own process (the worker then
    finds them built, or being built). A build that fails here is left to the encoding threads, which
    build what is missing and fail there, in the job's terms."""
    from bpe_ops.text_encoder import cache_size_for

    tok.cache_size = max(tok.cache_size, cache_size_for(tok, JOB_CACHE_PIECES))
    if dropout is not None:
        return

    def build() -> None:
        try:
            tok.prepare_threads(max(1, threads))
        except Exception:       # out of memory, say: the encoding threads meet it again and report it
            pass

    threading.Thread(target=build, name="tokenbeam-prepare", daemon=True).start()


def read_shard_metadata(url: str) -> dict | None:
    """The tokenbeam shard record in a finished Parquet file's footer, or None if absent/unreadable."""
    fs, path = filesystem(url)
    try:
        if not fs.exists(path):
            return None
        with fs.open(path, "rb") as f:
            meta = tables.file_metadata(pq.ParquetFile(f).metadata.metadata)
        return json.loads(meta[tables.SHARD_KEY])
    except Exception:  # a truncated or foreign file is simply not complete: it gets redone
        return None


@dataclass(frozen=True)
class ShardJob:
    """What every TokenizeShard call needs, decided by the launcher and pickled to the workers.

    Args:
        tokenizer: the tokenizer the launcher identified (workers load it by this reference).
        source_options: how to read the shards.
        output: the output folder.
        eos_token: the special token ending every record, if any.
        fail_fast: stop at the first bad record instead of rejecting it.
        encode_threads: threads encoding each shard's chunks.
        breakdowns: the per-window and per-group statistics asked for.
        judged: watch mode with a baseline: each shard's summary goes on to be judged.
        dropout: BPE-dropout, if asked.
        kept_types: the --keep-field types given on the command line (the others are inferred).
    """
    tokenizer: TokenizerRef
    source_options: SourceOptions
    output: str
    eos_token: str | None = None
    fail_fast: bool = False
    encode_threads: int = 1
    breakdowns: Breakdowns = Breakdowns()
    judged: bool = False
    dropout: Dropout | None = None
    kept_types: tuple[tuple[str, str], ...] = ()


class TokenizeShard(beam.DoFn):
    """Tokenize one shard into `<output>/<shard name>.parquet`; emit its Summary and manifest entry.

    The tokenizer is loaded once per worker in `setup()` from its path (cheaper than pickling a
    merge table into the pipeline); its sha256 comes from the launcher (`TokenizerRef`). Rows keep
    input order; row groups are bounded. A shard whose Parquet an earlier run completed with the
    same fingerprint (`shard_fingerprint`) is not redone: its summary is rebuilt from the file.
    """
    MANIFEST = "manifest"
    WINDOWS = "windows"
    GROUPS = "groups"
    JUDGED = "judged"
    IDS = "ids"

    def __init__(self, job: ShardJob):
        self.job = job
        self.tokenizer = job.tokenizer
        self.kept_types = dict(job.kept_types)
        self.dropout = job.dropout
        self.breakdowns = job.breakdowns
        self.judged = job.judged
        self.source_options = job.source_options
        self.output = job.output
        self.eos_token = job.eos_token
        self.fail_fast = job.fail_fast
        self.encode_threads = job.encode_threads
        self.launcher_pid = os.getpid()

    def setup(self):
        try:
            self.tok = load_identified_tokenizer(self.tokenizer)
        except UserError as exc:      # the launcher could read it, this worker cannot: say so in one line
            raise ShardFailure(str(exc)) from exc
        self.sha256 = self.tokenizer.sha256
        prepare_encoding(self.tok, self.encode_threads, self.dropout)
        if os.getpid() != self.launcher_pid or process_owned():     # not a library caller's process
            settle_heap()
        self.raw_byte_ids = self.tok.raw_byte_ids
        self.eos_id = self.tok.special_tokens[self.eos_token] if self.eos_token else None
        self.encoder = ChunkEncoder(self.tok, self.encode_threads, self.dropout, self.eos_id)
        self.writes = RowGroupWriter()
        self._schemas: dict[tuple, object] = {}
        self.counters = {name: beam.metrics.Metrics.counter("tokenbeam", name)
                         for name in ("records", "bytes", "tokens", "rejected")}

    def process(self, shard, inferred_types: dict[str, str] | None = None, rows: dict | None = None):
        """`inferred_types`: the kept fields' types inferred from the whole input (a side input),
        when they were not all given on the command line; `rows`: the rows of the parts of split
        files (`shards.first_rows`), which number the records of the parts after them."""
        shard = numbered(shard, rows)
        self.shard_types = {name: (inferred_types or {}).get(name) or self.kept_types[name]
                            for name in self.source_options.keep_fields}
        self.schema = self.tokens_schema(self.shard_types)
        out_url = join(self.output, shard.output_name())
        fingerprint = shard_fingerprint(shard, self.source_options, self.sha256, self.eos_token, self.dropout,
                                        self.shard_types)
        done = read_shard_metadata(out_url)
        partials = ShardPartials(self.breakdowns, self.tok.vocab_size, self.raw_byte_ids)
        if done is not None and done.get("fingerprint") == fingerprint and not done.get("shard_errors"):
            summary = self.summary_from_parquet(out_url, partials)
            shard_done(f"skipped {shard.name}: complete from an earlier run with the same inputs and options "
                       f"({done['rows']:,} rows)")
            entry = dict(done, reused=True)
        else:
            with writing(out_url):
                summary, entry = self.tokenize(shard, out_url, fingerprint, partials)
            entry = dict(entry, reused=False)
        if partials.windowed:
            entry["untimed_records"] = partials.windowed.untimed.records
            entry["windows"] = [format_utc(e.timestamp.micros) for e in partials.windowed.elements()]
            for element in partials.windowed.elements():
                yield beam.pvalue.TaggedOutput(self.WINDOWS, element)
        if partials.grouped:
            for element in partials.grouped.elements():
                yield beam.pvalue.TaggedOutput(self.GROUPS, element)
        yield from (beam.pvalue.TaggedOutput(self.IDS, bucket) for bucket in partials.id_buckets())
        if self.judged:
            self.writes.wait()          # judged (watch mode) once its file is in place, as before
            yield beam.pvalue.TaggedOutput(self.JUDGED, (entry, summary))
        yield summary
        yield beam.pvalue.TaggedOutput(self.MANIFEST, entry)

    def tokens_schema(self, shard_types: dict):
        """The token Parquet's schema for shards whose kept fields have `shard_types`: the same for
        every shard of a run, made once (a schema with its metadata costs more than a shard's gap)."""
        key = tuple(shard_types.items())
        schema = self._schemas.get(key)
        if schema is None:
            schema = self._schemas[key] = tables.tokens_schema(self.tok.vocab_size, shard_types, {
                tables.TOKENIZER_SHA256_KEY: self.sha256, tables.VOCAB_SIZE_KEY: str(self.tok.vocab_size)},
                event_time=self.breakdowns.windowing is not None, group=self.breakdowns.group_field is not None)
        return schema

    def tokenize(self, shard, out_url: str, fingerprint: dict, partials: "ShardPartials"):
        started = time.perf_counter()
        summary = Summary(self.tok.vocab_size, raw_byte_ids=self.raw_byte_ids)
        summary.add_shard(shard.relpath)
        reader = ShardReader(shard, self.source_options, self.output, self.fail_fast,
                             check=partial(kept_type_mismatch, self.shard_types) if self.shard_types else None)
        # Texts kept as the UTF-8 read where the encoder reads them so (no str of each is made).
        utf8 = self.dropout is None and self.tok.reads_utf8()
        spans: list = []                            # the spans of the runs read taken for the next chunk
        held = 0                                    # their records
        group = self.new_row_group()
        pending: deque = deque()                    # (chunk, its text size, its future), in order
        unsummed = UnsummedChunks(kept_fields=bool(partials.windowed or partials.grouped))
        self.encoder.clear_tallies()
        writes_before = self.writes.count
        # The writer is a context too: a failure mid-shard closes it before its file goes, rather than
        # leaving its finalizer to write into a closed file (a traceback on the terminal).
        # No dictionary encoding: plain token ids compress better under zstd and write faster; ids and
        # counts do not repeat enough for a dictionary to pay.
        # Row groups are written, and the file finished, by the writing step (`RowGroupWriter`); its
        # `wait` (at the next write, at the end of the bundle) raises what a write raised.
        with ExitStack() as stack:
            writer = None
            try:
                # Chunks of records encode and are measured in the background threads (the compiled
                # encoder and numpy drop the GIL) while this thread reads the next records and adds
                # the finished chunks, in order, to the summary and row group: the file is the same
                # as encoding them one after the other.
                ahead = CHUNKS_AHEAD_PER_THREAD * max(1, self.encode_threads)     # chunks in flight, at most
                first = iter(FIRST_CHUNK_RECORDS)
                size = next(first)
                submitted = chars = 0                       # records sent to encode; their characters
                for records in reader.batches(utf8=utf8):
                    texts, at = texts_of(records), 0
                    while at < len(records):
                        # Records are taken up to the next place a chunk may end (`chunk_ends` is
                        # false before it), so short records cost no step of Python each. The chunk
                        # is the spans of the runs read that it takes, `[run, start, stop]` (one
                        # span a read, grown as records are taken), cut out and joined when it goes:
                        # a run of columns stays one, with no object per record.
                        step = (size - held if size is not None
                                else ENCODE_CHUNK_RECORDS - held % ENCODE_CHUNK_RECORDS)
                        start, at = at, min(at + step, len(records))
                        held += at - start
                        if spans and spans[-1][0] is records:
                            spans[-1][2] = at
                        else:
                            spans.append([records, start, at])
                        chars += text_chars(texts, start, at)
                        # A shard's first chunk also goes when the first read ends short of its records:
                        # the encoders start on those rather than wait for the next read.
                        if (submitted == 0 and at == len(records)
                                or at - start == step and chunk_ends(held, size, chars, submitted)):
                            group = self.submit(spans_joined(spans), chars, pending, ahead, group, summary, partials,
                                                writer, unsummed)
                            submitted += held
                            spans, chars, held = [], 0, 0
                            size = next(first, None)
                            if writer is None:
                                # Opened once the first chunk encodes: the threads are not kept waiting
                                # for it at the start of every shard (no row group is written before).
                                writer = self.open_writer(stack, out_url)
                if writer is None:
                    writer = self.open_writer(stack, out_url)
                if held:
                    group = self.submit(spans_joined(spans), chars, pending, ahead, group, summary, partials, writer,
                                        unsummed)
                while pending:
                    group = self.settle(pending.popleft(), group, summary, partials, writer, unsummed)
                unsummed.add_to(summary, partials)
                self.encoder.add_tallies(summary)       # every chunk added: the ids' counts are whole
                last = self.row_group_parts(group, summary) if group.rows or summary.records == 0 else None
                account = reader.finish()
                if account.records != summary.records:
                    raise RuntimeError(f"{shard.name}: record accounting is broken: {account.records} read, "
                                       f"{summary.records} written")
                add_account(summary, account)
                entry = manifest_entry(shard, account, fingerprint, self.sha256)
                self.writes.wait_since(writes_before)      # this shard's row groups written, or raised
            except BaseException:
                self.writes.wait(quiet=True)    # no write of this file runs while it is closed
                wait([future for _, _, future in pending])  # nor a chunk counting into the next shard's tallies
                raise
            finishing = stack.pop_all()
        self.writes.finish(out_url, finishing, writer, last, entry)
        for name, value in (("records", account.records_read), ("tokens", summary.tokens),
                            ("bytes", summary.bytes), ("rejected", account.rejected)):
            self.counters[name].inc(value)
        elapsed = time.perf_counter() - started
        shard_done(f"tokenized {shard.name}: {account.records:,} rows, {summary.tokens:,} tokens, "
                   f"{account.rejected} rejected, {summary.bytes / 1e6 / max(elapsed, 1e-9):.2f} MB/s")
        return summary, entry

    def open_writer(self, stack: ExitStack, out_url: str) -> TokenFileWriter:
        """The shard's Parquet writer on its temporary file, both closed by `stack` (the writer
        first: its last bytes reach the file before its rename)."""
        f = stack.enter_context(open_atomic(out_url))
        return stack.enter_context(TokenFileWriter(f, self.schema, WRITE_POOL))

    def row_group_parts(self, group: "RowGroup", summary) -> tuple:
        """What `TokenFileWriter.write_row_group` takes of a full row group: its table (token ids as
        a placeholder) and its token ids, batch by batch."""
        return group.to_table(self.schema, summary, count_ids=False, placeholder=True), group.token_ids

    def new_row_group(self) -> "RowGroup":
        windowing = self.breakdowns.windowing
        return RowGroup(self.shard_types, windowing and windowing.field, self.breakdowns.group_field)

    def submit(self, chunk, size: int, pending: deque, ahead: int, group: "RowGroup", summary, partials, writer,
               unsummed: UnsummedChunks) -> "RowGroup":
        """Start encoding `chunk` (`size` characters of text) in the background after the chunks
        `pending`, first adding the oldest of them while `ahead` chunks are encoding or their texts
        would pass OVERLAP_TEXT_BYTES; returns the row group to go on with."""
        while pending and (len(pending) >= ahead or sum(p[1] for p in pending) + size > OVERLAP_TEXT_BYTES):
            group = self.settle(pending.popleft(), group, summary, partials, writer, unsummed)
        pending.append((chunk, size, self.encoder.start(chunk, summary)))
        return group

    def settle(self, in_flight, group: "RowGroup", summary, partials, writer, unsummed: UnsummedChunks) -> "RowGroup":
        """Add a chunk whose encoding was started (`(chunk, size, future)`) to `group` (and to
        `unsummed`), writing the group wherever it is full at a whole number of ENCODE_BATCH_RECORDS
        records (`RowGroup.rows_before_cut`: a long chunk may hold more than one such place), the
        chunks held added to the summary first; returns the group to go on with."""
        chunk, _, measured = in_flight
        record_ids, id_arrays, stats, runs, calibration, hashes = measured.result()
        unsummed.add(chunk, record_ids, id_arrays, stats, runs, calibration, hashes)
        while (taken := group.rows_before_cut(stats[0])) is not None:
            ids_taken, id_arrays = id_arrays.split(taken)
            group.extend(chunk[:taken], ids_taken, [column[:taken] for column in stats], record_ids[:taken])
            chunk, record_ids, stats = chunk[taken:], record_ids[taken:], [column[taken:] for column in stats]
            unsummed.add_to(summary, partials)
            self.writes.start(writer.write_row_group, *self.row_group_parts(group, summary))
            group = self.new_row_group()
        if chunk:
            group.extend(chunk, id_arrays, stats, record_ids)
        return group

    def finish_bundle(self):
        self.writes.wait()

    def teardown(self):
        for step in (getattr(self, "writes", None), getattr(self, "encoder", None)):
            if step is not None:
                step.close()

    def summary_from_parquet(self, url: str, partials: "ShardPartials"):
        """Rebuild a finished shard's Summary, and its window and group partials, from its Parquet
        rows and footer in one read (no re-encoding; the texts' number formats from the ids)."""
        summary = Summary(self.tok.vocab_size, raw_byte_ids=self.raw_byte_ids)
        add_file(summary, url, self.sha256, partials if partials.windowed or partials.grouped else None,
                 decode_bytes=self.tok.decode_bytes)
        fs, path = filesystem(url)
        with fs.open(path, "rb") as f:
            partials.add_ids(pq.read_table(f, columns=["id"]).column("id").to_pylist())
        return summary


ID_BUCKETS = 64       # the id hashes are counted per bucket: no worker holds more than a bucket's


class CountRepeatedIds(beam.CombineFn):
    """One bucket of id hashes -> (records whose id another record has too, distinct such ids): an
    exact count of repeated ids, each bucket counted on its own. A shard's hashes in a bucket come as
    the bytes of `id_hashes`' rows (`ShardPartials.id_buckets`): Beam's coder writes bytes as they
    are, where a numpy array each (64 per shard, more in the accumulators) went through pickle."""

    def create_accumulator(self):
        return []

    def add_input(self, acc, hashes: bytes):
        acc.append(hashes)
        return acc

    def merge_accumulators(self, accs):
        return [hashes for acc in accs for hashes in acc]

    def extract_output(self, acc):
        if not acc:
            return 0, 0
        hashes = np.frombuffer(b"".join(acc), dtype="<u8").reshape(-1, 2)
        firsts = np.sort(hashes[:, 0])
        if not np.any(firsts[1:] == firsts[:-1]):
            return 0, 0             # no two first halves alike: no id repeated (one sort, not two)
        hashes = hashes[np.lexsort((hashes[:, 1], hashes[:, 0]))]
        # Runs of equal rows in sorted order: each run's length is how many records have that id.
        starts = np.flatnonzero(np.r_[True, np.any(hashes[1:] != hashes[:-1], axis=1)])
        counts = np.diff(np.r_[starts, len(hashes)])
        repeated = counts[counts > 1]
        return int(repeated.sum()), len(repeated)


def add_pairs(pairs) -> tuple[int, int]:
    pairs = list(pairs)
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


class ShardPartials(BreakdownSummaries):
    """One shard's partial summaries per window and per group, fed batch by batch as it is encoded,
    or rebuilt from its Parquet (the `event_time` and `group` columns, by `summary_from_parquet`)
    when a rerun reuses it; and the hashes of its record ids, to count the ids repeated in the run."""

    def __init__(self, breakdowns: Breakdowns, vocab_size: int, raw_byte_ids):
        super().__init__(breakdowns, vocab_size, raw_byte_ids)
        self.ids: list[np.ndarray] = []

    def add_ids(self, record_ids) -> None:
        self.add_id_hashes(id_hashes(record_ids))

    def add_id_hashes(self, hashes: np.ndarray) -> None:
        """Record ids already hashed (`id_hashes`' rows: an encoding thread hashes its chunk's)."""
        self.ids.append(hashes)

    def id_buckets(self):
        """The shard's record-id hashes as (bucket, the bytes of its rows of `id_hashes`) pairs, for
        `CountRepeatedIds`."""
        if not self.ids:
            return
        hashes = np.concatenate(self.ids)
        buckets = (hashes[:, 0] % ID_BUCKETS).astype(np.uint8)
        # Sorted by bucket once (stable: each bucket's rows in shard order), then cut where it changes;
        # one byte a bucket, so numpy's stable sort is a radix sort (a merge sort of uint64 cost ~3%
        # of a short-record job's reading thread).
        order = np.argsort(buckets, kind="stable")
        buckets, hashes = buckets[order], hashes[order]
        cuts = np.flatnonzero(buckets[1:] != buckets[:-1]) + 1
        for start, end in zip(np.r_[0, cuts], np.r_[cuts, len(buckets)]):
            yield int(buckets[start]), hashes[start:end].tobytes()


def shard_fingerprint(shard, source_options, tokenizer_sha256: str, eos_token: str | None,
                      dropout: Dropout | None = None, kept_types: dict[str, str] | None = None) -> dict:
    """Everything that shapes a shard's output: a rerun reuses the output only when all of it matches
    (the input file and its version, how it is read, the tokenizer, the EOS token, BPE-dropout, the
    kept columns' types, the layout). Without dropout or kept fields their key is absent, so outputs
    made before they existed are still reused."""
    from pipelines.core.inputs import InputError
    from pipelines.datasets.sources import shard_format

    options = json.loads(json.dumps(asdict(source_options)))     # tuples as lists, as the footer holds them
    try:
        fmt = shard_format(shard, source_options)
    except InputError:            # read_shard lists the shard as unreadable; its output is never reused
        fmt = None
    fingerprint = {"layout": {"tokens_schema": tables.TOKENS_SCHEMA_VERSION, "manifest": MANIFEST_VERSION},
                   "input": {"url": shard.url, "size": shard.size, "version": shard.version},
                   "format": fmt, "source_options": options,
                   "tokenizer_sha256": tokenizer_sha256, "eos_token": eos_token}
    if dropout is not None:
        fingerprint["dropout"] = dropout.to_json()
    if kept_types:
        fingerprint["kept_types"] = dict(kept_types)
    if shard.part is not None:      # a part of a split file: its output holds only that part
        fingerprint["part"] = shard.part.to_json()
    return fingerprint


def kept_type_mismatch(kept_types: dict[str, str], record) -> tuple[str, str] | None:
    """Why a record is rejected when a kept field does not fit the type given for it (`--keep-field
    NAME:TYPE`): (reason, detail); None when every kept value fits (inferred types fit every value)."""
    from schemas.records import KEPT_FIELD_TYPE

    for name, type_name in kept_types.items():
        value = record.keep.get(name)
        if not tables.fits(value, type_name):
            return KEPT_FIELD_TYPE, (f"field {name!r} holds a {tables.value_kind(value)} value, not {type_name} "
                                     f"(--keep-field {name}:{type_name})")
    return None


def kept_field_kinds(shard, source_options, fields: tuple[str, ...]) -> set[tuple[str, str]]:
    """The kinds of value (`tables.value_kind`) each of `fields` takes in the records of a shard:
    {(field, kind)}, from which the whole dataset's kept column types are inferred."""
    from pipelines.datasets.sources import Record, read_shard

    if shard.part is not None and shard.part.first_row is None:     # its row numbers do not matter here
        shard = replace(shard, part=replace(shard.part, first_row=0))
    return {(name, tables.value_kind(item.keep.get(name))) for item in read_shard(shard, source_options)
            if isinstance(item, Record) for name in fields}


def union_all(sets) -> set:
    return set().union(*sets)


def inferred_types(kinds: set[tuple[str, str]], fields: tuple[str, ...]) -> dict[str, str]:
    """{field: its kept column type} from the kinds every shard found (`tables.kept_type`)."""
    return {name: tables.kept_type(kind for field, kind in kinds if field == name) for name in fields}


def add_account(summary: Summary, account) -> None:
    """What the shard reader set aside, into the shard's summary."""
    for reason, n in account.rejected_by_reason.items():
        summary.add_rejected(reason, n)
    summary.add_repaired(account.repaired)
    for error in account.shard_errors:
        summary.add_shard_error(error["source"], error["rows_read"], error["reason"], error["detail"])


def manifest_entry(shard, account, fingerprint: dict, tokenizer_sha256: str) -> dict:
    """A shard's line of the manifest, also kept in its Parquet footer (a part's: its own line,
    merged with its file's other parts into one line of the manifest by `merge_parts`)."""
    return {"source": shard.url, "relpath": shard.relpath, "output": shard.output_name(),
            "tokenizer_sha256": tokenizer_sha256, "fingerprint": fingerprint,
            "records_read": account.records_read, "rows": account.records, "rejected": account.rejected,
            "rejected_by_reason": account.rejected_by_reason, "repaired": account.repaired,
            "shard_errors": account.shard_errors}

"""`tokenbeam tokenize`: sharded text -> one token Parquet per shard + stats.json + _SUCCESS.

    shards -> TokenizeShard (one DoFn call per shard: read, encode in batches, write Parquet under a
    temporary name, rename) -> per-shard Summary -> MergeSummaries (exact, any runner) -> stats.json
    -> _SUCCESS (written last: the shards, their record counts, the tokenizer sha256).

A rerun into the same output skips shards whose Parquet is complete and was made with the same
tokenizer (their summaries are rebuilt from the Parquet itself) and redoes the rest, including the
shards whose input could not be read to the end last time (it may have been repaired since).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import posixpath
import sys
import time
from collections import deque
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from functools import partial

from pipelines.beam_options import (beam, check_worker_paths, local_cores_per_worker, one_local_worker,
                                    pipeline_options, split_beam_args)
import numpy as np
import pyarrow.parquet as pq

from bpe_ops.dropout import DROPOUT_MODES, Dropout
from bpe_ops.stats import Summary
from schemas import tables
from schemas.accounts import ACCOUNT_KEY, Account, account_of
from schemas.stats import TokenizerFacts, dump_stats, stats_json, upgrade_stats
from pipelines import command
from pipelines.command import (Command, add_dropout_arguments, add_quiet_argument, implementation_from_environment,
                               option_strings, parse_dropout)
from pipelines.errors import (EXIT_DRIFT, IncompleteRun, ShardFailure, UserError, os_error_reason,
                              pipeline_failures, quiet_worker_stderr, say, set_quiet, shard_done, warn)
from pipelines.files import (canonical, exists, filesystem, inside, join, open_atomic,
                             read_json, remove, remove_stale_temporaries, remove_tree, write_text_atomic, writing)
from pipelines.folders import check_finished, claim_output, mark_output
from pipelines.inputs import InputError, Sought, find_files
from pipelines.shards import REJECTED_DIR, ShardReader, add_source_arguments, expand, \
    first_rows, job_progress, numbered, parts_said, plan, source_options as make_source_options, \
    warn_mostly_rejected, warn_shard_errors
from pipelines.tokenizer_files import (TokenizerRef, check_id_range, identify_tokenizer,
                                      load_identified_tokenizer, parse_special_token, settle_heap, token_bytes_of)
from pipelines.outcome import RunFigures, RunWords, incomplete_run, repeated_ids_line
from pipelines.alerts import ALERTS, ALERTS_DIR, JudgeShard, gather_alerts
from pipelines.drift_judging import (Thresholds, check_calibrated, check_same_dropout, judging_errors, load_stats,
                                     pair_drifted)
from pipelines.drift_reports import show_pair
from pipelines.groups import GROUPS_FOLDER, NO_GROUP, GroupStats
from pipelines.breakdowns import BreakdownSummaries, Breakdowns, Windowing, add_file
from pipelines.summaries import MergeSummaries
from pipelines.watch import StopSignal, WatchShards, WholeRun, install_stop_handlers
from pipelines.tokenize_steps import (ENCODE_BATCH_RECORDS, ENCODE_CHUNK_RECORDS, OVERLAP_TEXT_BYTES, ChunkEncoder,
                                      RowGroup, RowGroupWriter, text_size)
from pipelines.windows import WINDOWS_FOLDER, WindowStats, format_utc, parse_duration

SUCCESS = "_SUCCESS"
STOP_FILE = "_STOP"              # created by anyone: a --watch run ends cleanly
MANIFEST_VERSION = 1            # the layout of the shard records in the footers (and so in the fingerprint)
VERDICT_WORDS = RunWords(done="tokenized", lost="no _SUCCESS", nothing="nothing was written", last="; no _SUCCESS")


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

    def __init__(self, tokenizer: TokenizerRef, source_options, output: str, eos_token: str | None,
                 fail_fast: bool = False, encode_threads: int = 1, breakdowns: "Breakdowns | None" = None,
                 judged: bool = False, dropout: Dropout | None = None, kept_types: dict[str, str] | None = None):
        self.tokenizer = tokenizer
        self.kept_types = kept_types or {}      # --keep-field types given on the command line
        self.dropout = dropout
        self.breakdowns = breakdowns or Breakdowns()
        self.judged = judged
        self.source_options = source_options
        self.output = output
        self.eos_token = eos_token
        self.fail_fast = fail_fast
        self.encode_threads = encode_threads
        self.launcher_pid = os.getpid()

    def setup(self):
        try:
            self.tok = load_identified_tokenizer(self.tokenizer)
        except UserError as exc:      # the launcher could read it, this worker cannot: say so in one line
            raise ShardFailure(str(exc)) from exc
        self.sha256 = self.tokenizer.sha256
        if os.getpid() != self.launcher_pid:    # a worker process of its own, not the caller's process
            settle_heap()
        self.raw_byte_ids = self.tok.raw_byte_ids
        self.eos_id = self.tok.special_tokens[self.eos_token] if self.eos_token else None
        self.encoder = ChunkEncoder(self.tok, self.encode_threads, self.dropout, self.eos_id)
        self.writes = RowGroupWriter()
        self.counters = {name: beam.metrics.Metrics.counter("tokenbeam", name)
                         for name in ("records", "bytes", "tokens", "rejected")}

    def process(self, shard, inferred_types: dict[str, str] | None = None, rows: dict | None = None):
        """`inferred_types`: the kept fields' types inferred from the whole input (a side input),
        when they were not all given on the command line; `rows`: the rows of the parts of split
        files (`shards.first_rows`), which number the records of the parts after them."""
        shard = numbered(shard, rows)
        self.shard_types = {name: (inferred_types or {}).get(name) or self.kept_types[name]
                            for name in self.source_options.keep_fields}
        self.schema = tables.tokens_schema(self.tok.vocab_size, self.shard_types, {
            tables.TOKENIZER_SHA256_KEY: self.sha256, tables.VOCAB_SIZE_KEY: str(self.tok.vocab_size)},
            event_time=self.breakdowns.windowing is not None, group=self.breakdowns.group_field is not None)
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

    def tokenize(self, shard, out_url: str, fingerprint: dict, partials: "ShardPartials"):
        started = time.perf_counter()
        summary = Summary(self.tok.vocab_size, raw_byte_ids=self.raw_byte_ids)
        summary.add_shard(shard.relpath)
        reader = ShardReader(shard, self.source_options, self.output, self.fail_fast,
                             check=partial(kept_type_mismatch, self.shard_types))
        batch: list = []
        group = self.new_row_group()
        # The writer is a context too: a failure mid-shard closes it before its file goes, rather than
        # leaving its finalizer to write into a closed file (a traceback on the terminal).
        # No dictionary encoding: plain token ids compress better under zstd and write faster; ids and
        # counts do not repeat enough for a dictionary to pay.
        # Row groups are written, and the file finished, by the writing step (`RowGroupWriter`); its
        # `wait` (at the next write, at the end of the bundle) raises what a write raised.
        with ExitStack() as stack:
            f = stack.enter_context(open_atomic(out_url))
            writer = stack.enter_context(pq.ParquetWriter(f, self.schema, compression="zstd", use_dictionary=False,
                                                          write_statistics=False))
            try:
                # Chunks of records encode and are measured in the background threads (the compiled
                # encoder and numpy drop the GIL) while this thread reads the next records and adds
                # the finished chunks, in order, to the summary and row group: the file is the same
                # as encoding them one after the other.
                pending: deque = deque()                    # (chunk, its text size, its future), in order
                ahead = 2 * max(1, self.encode_threads)     # chunks encoding at once, at most
                for record in reader:
                    batch.append(record)
                    if len(batch) >= ENCODE_CHUNK_RECORDS:
                        group = self.submit(batch, pending, ahead, group, summary, partials, writer)
                        batch = []
                if batch:
                    group = self.submit(batch, pending, ahead, group, summary, partials, writer)
                while pending:
                    group = self.settle(pending.popleft(), group, summary, partials, writer)
                last = group.to_table(self.schema, summary) if group.rows or summary.records == 0 else None
                account = reader.finish()
                if account.records != summary.records:
                    raise RuntimeError(f"{shard.name}: record accounting is broken: {account.records} read, "
                                       f"{summary.records} written")
                add_account(summary, account)
                entry = manifest_entry(shard, account, fingerprint, self.sha256)
                self.writes.wait()
            except BaseException:
                self.writes.wait(quiet=True)    # no write of this file runs while it is closed
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

    def new_row_group(self) -> "RowGroup":
        windowing = self.breakdowns.windowing
        return RowGroup(self.shard_types, windowing and windowing.field, self.breakdowns.group_field)

    def submit(self, chunk, pending: deque, ahead: int, group: "RowGroup", summary, partials, writer) -> "RowGroup":
        """Start encoding `chunk` in the background after the chunks `pending`, first adding the
        oldest of them while `ahead` chunks are encoding or their texts would pass
        OVERLAP_TEXT_BYTES; returns the row group to go on with."""
        size = text_size(chunk)
        while pending and (len(pending) >= ahead or sum(p[1] for p in pending) + size > OVERLAP_TEXT_BYTES):
            group = self.settle(pending.popleft(), group, summary, partials, writer)
        pending.append((chunk, size, self.encoder.start(chunk, summary)))
        return group

    def settle(self, in_flight, group: "RowGroup", summary, partials, writer) -> "RowGroup":
        """Add a chunk whose encoding was started (`(chunk, size, future)`) to `group`, and write
        the group once it is full at a whole number of ENCODE_BATCH_RECORDS records; returns the
        group to go on with."""
        chunk, _, measured = in_flight
        self.add_encoded(chunk, *measured.result(), group, summary, partials)
        if group.rows % ENCODE_BATCH_RECORDS == 0 and group.full():
            table = group.to_table(self.schema, summary)
            self.writes.start(writer.write_table, table)
            return self.new_row_group()
        return group

    def finish_bundle(self):
        self.writes.wait()

    def teardown(self):
        for step in (getattr(self, "writes", None), getattr(self, "encoder", None)):
            if step is not None:
                step.close()

    def add_encoded(self, batch, id_arrays: list, stats, runs, calibration, group: "RowGroup", summary,
                    partials) -> None:
        """Add an encoded, measured batch to `group`, the shard's summary and its partials (token
        ids are counted later, per row group)."""
        record_ids = [r.id for r in batch]
        summary.add_batch(*stats, record_ids=record_ids, id_arrays=id_arrays, digit_runs=runs,
                          calibration=calibration)
        group.extend(batch, id_arrays, stats)
        if partials is not None:
            partials.add_batch([r.keep for r in batch], stats, id_arrays, record_ids, digit_runs=runs)
            partials.add_ids(record_ids)

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


def id_hashes(record_ids) -> np.ndarray:
    """Each record id as a 128-bit hash (two uint64 columns): equal ids, equal rows; a collision
    between different ids is out of reach (about n^2 / 2^129)."""
    digests = b"".join(hashlib.blake2b(str(i).encode("utf-8", "surrogatepass"), digest_size=16).digest()
                       for i in record_ids)
    return np.frombuffer(digests, dtype="<u8").reshape(-1, 2)


class CountRepeatedIds(beam.CombineFn):
    """One bucket of id hashes -> (records whose id another record has too, distinct such ids): an
    exact count of repeated ids, each bucket counted on its own."""

    def create_accumulator(self):
        return []

    def add_input(self, acc, hashes):
        acc.append(hashes)
        return acc

    def merge_accumulators(self, accs):
        return [hashes for acc in accs for hashes in acc]

    def extract_output(self, acc):
        if not acc:
            return 0, 0
        hashes = np.concatenate(acc)
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
        self.ids.append(id_hashes(record_ids))

    def id_buckets(self):
        """The shard's record-id hashes as (bucket, hashes) pairs, for `CountRepeatedIds`."""
        if not self.ids:
            return
        hashes = np.concatenate(self.ids)
        buckets = hashes[:, 0] % ID_BUCKETS
        for bucket in np.unique(buckets):
            yield int(bucket), hashes[buckets == bucket]


def shard_fingerprint(shard, source_options, tokenizer_sha256: str, eos_token: str | None,
                      dropout: Dropout | None = None, kept_types: dict[str, str] | None = None) -> dict:
    """Everything that shapes a shard's output: a rerun reuses the output only when all of it matches
    (the input file and its version, how it is read, the tokenizer, the EOS token, BPE-dropout, the
    kept columns' types, the layout). Without dropout or kept fields their key is absent, so outputs
    made before they existed are still reused."""
    from pipelines.inputs import InputError
    from pipelines.sources import shard_format

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
    from pipelines.sources import Record, read_shard

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


def write_stats(summary, tokenizer: TokenizerFacts, tokenizer_url: str, output: str, inputs: list[str],
                started_at: float, groups: dict | None = None, read_whole: dict[str, str] | None = None) -> str:
    """Write stats.json from the combined summary; `tokenizer` carries what it needs of the tokenizer
    (handed over by the launcher: this step does not load the tokenizer again); `groups` is the
    index of the per-group files (`--group-field`)."""
    extra = {"inputs": inputs, "tokenizer": tokenizer_url,
             "timing": {"started_at": started_at, "elapsed_seconds": round(time.time() - started_at, 3)}}
    if groups is not None:
        extra["groups"] = groups
    if read_whole:      # files above --split-size that could not be split, and why
        extra["read_whole"] = dict(sorted(read_whole.items()))
    stats = stats_json(summary, tokenizer, extra)
    url = join(output, "stats.json")
    with writing(url):
        write_text_atomic(url, dump_stats(stats))
    return url


def write_success(entries: list[dict], stats_url: str, output: str, tokenizer_sha256: str,
                  allow_shard_errors: bool = False, repeated_ids: tuple[int, int] = (0, 0)) -> bool:
    """`_SUCCESS`, written last, when the run is complete: every shard read (or shard errors allowed)
    and at least one record written. It lists the shards, their record counts and the tokenizer.

    The books must balance: records read == written + rejected for every shard and in total (the
    Account checks it), and the account of the manifest equals that of stats.json (two separate
    aggregations)."""
    try:
        by_file: dict[str, Account] = {}
        for e in entries:      # a split file's parts summed: one shard, counted by its first part
            first = e["fingerprint"].get("part", {}).get("index", 0) == 0
            by_file[e["relpath"]] = by_file.get(e["relpath"], Account()) + tables.shard_account(e, shards=int(first))
        entries = merge_parts(entries)
        accounts = [by_file[e["relpath"]] for e in entries]
        account = Account.total(accounts)
    except ValueError as exc:
        raise RuntimeError(f"record accounting is broken: {exc}") from None
    manifest = {"version": tables.SUCCESS_VERSION, "tokenizer_sha256": tokenizer_sha256, "stats": "stats.json",
                "shards": [dict({k: e[k] for k in ("relpath", "output", "parts", "shard_errors") if k in e},
                                input=e["fingerprint"]["input"], account=a.to_json()) for e, a in zip(entries, accounts)],
                ACCOUNT_KEY: account.to_json()}
    if repeated_ids[0]:      # records whose id another record has too, and how many such ids
        manifest["repeated_ids"] = {"records": repeated_ids[0], "ids": repeated_ids[1]}
    if any("untimed_records" in e for e in entries):     # --window: records without a usable timestamp
        manifest["untimed_records"] = sum(e.get("untimed_records", 0) for e in entries)
    counted = account_of(read_json(stats_url))
    if account != counted:
        raise RuntimeError(f"record accounting is broken: the manifest says {account}; stats.json says {counted}")
    if account.records_written == 0 or (account.shards_failed and not allow_shard_errors):
        return False
    url = join(output, SUCCESS)
    with writing(url):
        write_text_atomic(url, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return True


def merge_parts(entries: list[dict]) -> list[dict]:
    """The manifest entries sorted by input, the entries of a split file's parts made into one for
    the file: its counts summed, its shard errors in order, and `parts` (the part files in order) in
    place of `output`. Everything else about a file is the same in any split."""
    by_file: dict[str, list[dict]] = {}
    for entry in entries:
        by_file.setdefault(entry["relpath"], []).append(entry)
    merged = []
    for relpath in sorted(by_file):
        parts = sorted(by_file[relpath], key=lambda e: e["fingerprint"].get("part", {}).get("index", 0))
        if "part" not in parts[0]["fingerprint"]:
            merged += parts
            continue
        entry = {k: v for k, v in parts[0].items() if k != "output"}
        entry.update({k: sum(e[k] for e in parts) for k in ("records_read", "rows", "rejected", "repaired")},
                     shard_errors=[error for e in parts for error in e["shard_errors"]],
                     parts=[e["output"] for e in parts])
        if any("untimed_records" in e for e in parts):
            entry["untimed_records"] = sum(e.get("untimed_records", 0) for e in parts)
        merged.append(entry)
    return merged


@dataclass(frozen=True)
class Watching:
    """`--watch`: the shard source, and the baseline each new shard is judged against."""
    source: beam.PTransform
    baseline: str | None = None


def build_tokenize_pipeline(p, shards, tokenizer: TokenizerRef, facts: TokenizerFacts, source_options,
                            output: str, eos_token: str | None, inputs: list[str], started_at: float,
                            fail_fast: bool = False, encode_threads: int = 1, spread: bool = True,
                            allow_shard_errors: bool = False, breakdowns: Breakdowns = Breakdowns(),
                            watching: Watching | None = None, dropout: Dropout | None = None,
                            kept_types: dict[str, str | None] | None = None, 
                            read_whole: dict[str, str] | None = None):
    """The tokenize pipeline for a tokenizer the launcher loaded: `tokenizer` names it (and carries its
    sha256), `facts` is what stats.json needs of it, so no worker computes either again. The shards
    are `shards` (batch), or what `watching.source` finds as they land (watch mode): the same
    per-shard transform, windows and whole-run results serve both. `kept_types`: the --keep-field
    types given, None for those to infer from every record of the input (batch runs only: a stage
    reads the kept fields of every shard before any is tokenized). `shards` may hold parts of split
    files (`shards.plan`); `read_whole` says which large files are not split and why (stats.json)."""
    kept_types = kept_types or {}
    to_infer = tuple(name for name, type_name in kept_types.items() if type_name is None)
    if watching is None:
        # One element per shard, spread over the workers unless they are this one process.
        shard_elements = p | "Shards" >> beam.Create(shards)
        if spread:
            shard_elements = shard_elements | "SpreadShards" >> beam.Reshuffle()
    else:
        shard_elements = p | "WatchShards" >> watching.source
    rows = first_rows(p, shards, source_options) if watching is None else None
    inferred = ()
    if to_infer:
        inferred = (beam.pvalue.AsSingleton(
            shard_elements
            | "KeptFieldKinds" >> beam.Map(kept_field_kinds, source_options, to_infer)
            | "AllKinds" >> beam.CombineGlobally(union_all)
            | "KeptFieldTypes" >> beam.Map(inferred_types, to_infer)),)
    results = (shard_elements
               | "TokenizeShard" >> beam.ParDo(TokenizeShard(tokenizer, source_options, output, eos_token,
                                                             fail_fast, encode_threads, breakdowns,
                                                             judged=bool(watching and watching.baseline),
                                                             dropout=dropout,
                                                             kept_types={k: v for k, v in kept_types.items() if v}),
                                               *inferred, **({"rows": rows} if rows is not None else {})
                                               ).with_outputs(TokenizeShard.MANIFEST, TokenizeShard.WINDOWS,
                                                              TokenizeShard.GROUPS, TokenizeShard.JUDGED,
                                                              TokenizeShard.IDS, main="summaries"))
    windowing = breakdowns.windowing
    if windowing is not None:
        (results[TokenizeShard.WINDOWS]
         | "WindowStats" >> WindowStats(facts.vocab_size, windowing.seconds, output, facts,
                                        extra={"tokenizer": tokenizer.url, "timestamp_field": windowing.field}))
    summaries, manifest = results.summaries, results[TokenizeShard.MANIFEST]
    group_partials = results[TokenizeShard.GROUPS]
    id_buckets = results[TokenizeShard.IDS]
    if watching is not None:
        if watching.baseline:
            results[TokenizeShard.JUDGED] | "JudgeShard" >> beam.ParDo(JudgeShard(watching.baseline, facts, output))
        # A stream's whole-run results fire once, when the watch has ended.
        summaries = summaries | "WholeRunSummaries" >> WholeRun()
        manifest = manifest | "WholeRunManifest" >> WholeRun()
        group_partials = group_partials | "WholeRunGroups" >> WholeRun()
        id_buckets = id_buckets | "WholeRunIds" >> WholeRun()
    groups = None
    if breakdowns.group_field is not None:
        groups = beam.pvalue.AsSingleton(
            group_partials | "GroupStats" >> GroupStats(facts.vocab_size, output, facts, breakdowns.group_field))
    repeated_ids = (id_buckets
                    | "CountRepeatedIds" >> beam.CombinePerKey(CountRepeatedIds())
                    | "RepeatedIdsPerBucket" >> beam.Values()
                    | "AddRepeatedIds" >> beam.CombineGlobally(add_pairs).without_defaults())
    stats_url = (summaries
                 | "CombineStats" >> beam.CombineGlobally(MergeSummaries(facts.vocab_size)).without_defaults()
                 | "WriteStats" >> beam.Map(write_stats, facts, tokenizer.url, output, inputs, started_at, groups,
                                            read_whole))
    (manifest
     | "CollectManifest" >> beam.CombineGlobally(beam.combiners.ToListCombineFn()).without_defaults()
     | "WriteSuccess" >> beam.Map(write_success, beam.pvalue.AsSingleton(stats_url), output, tokenizer.sha256,
                                  allow_shard_errors, beam.pvalue.AsSingleton(repeated_ids, default_value=(0, 0))))


# --- the output folder ----------------------------------------------------------------------------

def clear_stale_outputs(output: str, shards) -> int:
    """Make the output folder describe only this run's inputs: remove `_SUCCESS` and `stats.json`
    (rewritten at the end: a run that fails must not leave the last run's vouching for it), the token
    Parquet of inputs no longer given (ours: their footer says so) and their rejected files. A
    Parquet file tokenbeam did not write is never removed: the run refuses instead. Returns how many
    stale shard outputs were removed."""
    fs, root = filesystem(output)
    root = root.rstrip("/")
    expected = {s.output_name() for s in shards}
    expected_rejected = {s.output_name(".jsonl") for s in shards}
    found = [f for f in fs.find(root) if not posixpath.basename(f).startswith(".")]
    relative = {f: posixpath.relpath(f, root) for f in found}
    stale_parquet = [f for f, rel in relative.items() if rel.endswith(".parquet") and rel not in expected
                     and not rel.startswith((REJECTED_DIR + "/", WINDOWS_FOLDER + "/", ALERTS_DIR + "/"))]
    foreign = [relative[f] for f in stale_parquet if read_shard_metadata(fs.unstrip_protocol(f)) is None]
    if foreign:
        raise UserError(f"--output {output} holds Parquet files tokenbeam did not write ({', '.join(sorted(foreign)[:3])}"
                        f"{', ...' if len(foreign) > 3 else ''}); give an empty or tokenbeam-only folder")
    stale_rejected = [f for f, rel in relative.items() if rel.startswith(REJECTED_DIR + "/")
                      and rel[len(REJECTED_DIR) + 1:] not in expected_rejected]
    for name in (SUCCESS, "stats.json", ALERTS, STOP_FILE):
        remove(join(output, name))
    # Windows and alerts are rewritten whole by every run.
    for folder in (WINDOWS_FOLDER, GROUPS_FOLDER, ALERTS_DIR):
        remove_tree(join(output, folder))
    for f in stale_parquet + stale_rejected:
        fs.rm(f)
    return len(stale_parquet)


def changed_inputs(inputs: list[str], manifest: dict) -> list[str]:
    """The inputs that are no longer what was tokenized (a file that grew after it was read, as a file
    written in parts can under --watch): their size or version in one listing now differs from the
    one the manifest records. A rerun tokenizes them again (their fingerprint no longer matches)."""
    from pipelines.sources import expand_inputs

    try:
        now = {shard.url: shard for shard in expand_inputs(inputs)}
    except InputError:          # every file of a pattern is gone
        now = {}
    changed = []
    for read in (entry["input"] for entry in manifest.get("shards", []) if "input" in entry):
        current = now.get(read["url"])
        if current is None or (current.size, current.version) != (read["size"], read["version"]):
            changed.append(f"{read['url']} ({read['size']:,} bytes tokenized, "
                           f"{'gone' if current is None else f'{current.size:,} now'})")
    return changed


def absent_fields(output: str, manifest: dict, keep_fields: list[str], stats: dict, group_field: str | None) -> list[str]:
    """The --keep-field / --group-field names that no record had (a typo gives an all-null column, or
    one group `(none)`)."""
    absent = []
    files = [join(output, name) for entry in manifest.get("shards", []) if entry[ACCOUNT_KEY]["records"]["written"]
             for name in entry.get("parts", [entry.get("output")])]
    for name in keep_fields:
        if files and not any(holds_a_value(url, name) for url in files):
            absent.append(f"--keep-field {name}: no record has this field (its column holds only nulls)")
    if group_field is not None and list(stats.get("groups") or {}) == [NO_GROUP]:
        absent.append(f"--group-field {group_field}: no record has this field (every record is in group {NO_GROUP})")
    return absent


def holds_a_value(url: str, name: str) -> bool:
    """Whether column `name` of a token Parquet has a non-null value."""
    fs, path = filesystem(url)
    with fs.open(path, "rb") as f:
        column = pq.read_table(f, columns=[name]).column(name)
    return column.null_count < len(column)


def warn_doubtful_run(args: argparse.Namespace, inputs: list[str], stats: dict, manifest: dict) -> None:
    """Warnings for a run that is legal but probably not what was meant."""
    for what in absent_fields(args.output, manifest, list(parse_keep_fields(args.keep_field)), stats, args.group_field):
        warn(f"{what}; is the name right?")
    for text in changed_inputs(inputs, manifest):
        warn(f"{text} changed after it was tokenized: the output holds it as it was; rerun to tokenize it again")
    warn_mostly_rejected(account_of(stats))
    if "repeated_ids" in manifest:
        warn(repeated_ids_line(manifest["repeated_ids"], f"--id-field {args.id_field}"))


# --- command line -------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quiet_argument(parser)
    parser.add_argument("--tokenizer", required=True,
                        help="tokenizer.json (ours, a byte-level BPE or a SentencePiece-style BPE one), or a folder holding one")
    parser.add_argument("--output", required=True, help="output folder (local or fsspec URL)")
    parser.add_argument("--pattern", default=None, metavar="NAME_OR_REGEX",
                        help="with a tiktoken rank file as --tokenizer: its split pattern (gpt2, gpt4, o200k, "
                             "cl100k_base, ... or a regex)")
    parser.add_argument("--special-token", action="append", default=[], metavar="TOKEN=ID",
                        help="with a tiktoken rank file: a special token and its id (repeatable)")
    parser.add_argument("--keep-field", action="append", default=[], metavar="NAME[:TYPE]",
                        help="copy this input field into the Parquet (repeatable), as a column of TYPE: string, "
                             "int64, float64, bool, or json (JSON text); without TYPE, the one type that fits "
                             "every value of the field in the input (ints with floats: float64; other mixes "
                             "and lists/objects: json; no value at all: string), found by reading the kept "
                             "fields of every shard first")
    parser.add_argument("--eos-token", default=None, metavar="TOKEN", help="end every record with this special token")
    add_dropout_arguments(parser)
    parser.add_argument("--encode-threads", type=int, default=None, metavar="N",
                        help="threads that encode each batch in a worker (default: the cores each local worker "
                             "has, 1 on other runners)")
    parser.add_argument("--baseline", default=None, metavar="STATS",
                        help="compare the new stats.json with this one at the end (as `tokenbeam drift`); "
                             "with --watch, judge each new shard against it as it is written (alerts.jsonl)")
    parser.add_argument("--timestamp-field", default=None, metavar="FIELD",
                        help="the field dating each record (ISO-8601 or epoch seconds), for --window statistics")
    parser.add_argument("--window", default=None, metavar="DURATION",
                        help="statistics per event-time window of DURATION (15m, 1h, 1d) in windows/<UTC start>"
                             ".stats.json; records without a usable timestamp are counted as untimed")
    parser.add_argument("--group-field", default=None, metavar="FIELD",
                        help="statistics per value of FIELD (a language, a source) in groups/<value>.stats.json, "
                             "listed in stats.json; `tokenbeam drift` then judges each group")
    parser.add_argument("--watch", action="store_true",
                        help="keep running: tokenize each new shard matching --input as it lands (Ctrl-C, "
                             "SIGTERM or an OUTPUT/_STOP file end it cleanly)")
    parser.add_argument("--poll-interval", type=float, default=2.0, metavar="SECONDS",
                        help="--watch: how often to look for new shards (default: %(default)s)")
    parser.add_argument("--stop-after", default=None, metavar="DURATION", help="--watch: end after DURATION")
    parser.add_argument("--stop-when-idle", default=None, metavar="DURATION",
                        help="--watch: end after DURATION without a new shard")
    add_source_arguments(parser, split=True)


def run(argv: list[str]) -> dict:
    """Run `tokenbeam tokenize ARGV`; returns stats.json's content. UserError for bad usage,
    IncompleteRun when the output is not complete."""
    return command.run(COMMAND, argv)


def parse_keep_fields(specs: list[str]) -> dict[str, str | None]:
    """`--keep-field NAME[:TYPE]` values -> {NAME: TYPE, or None to infer it}; a NAME holding ':' is
    taken whole unless what follows its last ':' is a type. UserError for an empty name or a field
    given twice with two types."""
    kept: dict[str, str | None] = {}
    for spec in specs:
        name, sep, type_name = spec.rpartition(":")
        if not sep or type_name not in tables.KEPT_TYPES:
            name, type_name = spec, None
        if not name:
            raise UserError(f"--keep-field {spec!r}: the field name is empty")
        if name in kept and kept[name] != type_name:
            raise UserError(f"--keep-field {name} is given twice, with different types")
        kept[name] = type_name
    return kept


def duration(flag: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UserError(f"{flag}: {exc}") from None


BASELINE_FILE = Sought("--baseline", in_folder="stats.json", many=False, as_written=True)    # a stats.json, or its folder


def check_baseline(url: str, output: str, dropout: Dropout | None = None) -> str:
    """A baseline to judge against must be a readable, calibrated stats.json (or a folder holding one),
    of data encoded with the same BPE-dropout, and not a file this run replaces: refused at launch,
    not after the run. Returns the stats.json's URL."""
    from schemas.stats import validate_stats

    if not exists(url):
        raise UserError(f"--baseline {url}: no such file")
    check_finished(url, "--baseline", "tokenize --baseline")
    try:
        (path,) = [found.url for found in find_files([url], BASELINE_FILE)]
        stats = upgrade_stats(read_json(path))
        validate_stats(stats)
        check_calibrated(stats, "baseline")
        check_same_dropout(stats.get("dropout"), dropout and dropout.to_json())
    except InputError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"--baseline {url}: {os_error_reason(exc)}") from None
    except ValueError as exc:
        raise UserError(f"--baseline {url}: {exc}") from None
    if canonical(path) == canonical(join(output, "stats.json")) or any(
            inside(path, join(output, folder)) for folder in (WINDOWS_FOLDER, GROUPS_FOLDER)):
        raise UserError(f"--baseline {url} is a file of --output {output}, which this run rewrites; "
                        f"copy it elsewhere first")
    return path


def run_parsed(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> dict:
    started_at = time.time()
    set_quiet(args.quiet)
    beam_args, bare = split_beam_args(rest, option_strings(parser))
    inputs = list(args.input) + bare
    dropout = parse_dropout(args.dropout, args.seed)
    if args.dropout is not None and dropout is None:
        say("--dropout 0 is the deterministic encoding: tokenizing without dropout")
    if args.baseline:
        args.baseline = check_baseline(args.baseline, args.output, dropout)
    if (args.timestamp_field is None) != (args.window is None):
        raise UserError("--timestamp-field and --window go together: the field that dates each record, and "
                        "the window length (15m, 1h, 1d, ...)")
    windowing = args.window and Windowing(args.timestamp_field, duration("--window", args.window))
    watch_flags = [flag for flag, value in (("--stop-after", args.stop_after), ("--stop-when-idle", args.stop_when_idle))
                   if value is not None]
    if watch_flags and not args.watch:
        raise UserError(f"{watch_flags[0]} applies to --watch runs")
    specials = dict(parse_special_token(spec) for spec in args.special_token) if args.special_token else None
    tok, tokenizer = identify_tokenizer(args.tokenizer, implementation_from_environment(), args.pattern, specials)
    check_id_range(tok, args.tokenizer)
    if dropout is not None and tok.mode not in DROPOUT_MODES:
        raise UserError(f"--dropout: {args.tokenizer} is {tok.mode}-mode BPE; BPE-dropout supports byte-level "
                        f"and classic BPE")
    if args.eos_token is not None and args.eos_token not in tok.special_tokens:
        known = ", ".join(sorted(tok.special_tokens)) or "none"
        raise UserError(f"--eos-token {args.eos_token!r} is not a special token of {args.tokenizer} (it has: {known})")
    kept_types = parse_keep_fields(args.keep_field)
    try:
        tables.tokens_schema(tok.vocab_size, dict.fromkeys(kept_types, "json"), event_time=windowing is not None,
                             group=args.group_field is not None)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    untyped = [name for name, type_name in kept_types.items() if type_name is None]
    if args.watch and untyped:
        raise UserError(f"--watch: give --keep-field {untyped[0]} its type ({untyped[0]}:TYPE, TYPE one of "
                        f"{', '.join(tables.KEPT_TYPES)}): the shards to come cannot be read ahead to infer it")
    if args.encode_threads is not None and args.encode_threads < 1:
        raise UserError(f"--encode-threads must be at least 1, got {args.encode_threads}")
    source_options = make_source_options(args, tuple(kept_types),
                                         tuple(f for f in (args.timestamp_field, args.group_field) if f))
    watching = None
    if args.watch:
        if args.poll_interval <= 0:
            raise UserError(f"--poll-interval must be positive, got {args.poll_interval}")
        shards = expand(inputs, source_options, allow_empty=True)   # what is there already (more will come)
        stop = StopSignal(sentinel=join(args.output, STOP_FILE))
        try:
            source = WatchShards(inputs, args.poll_interval, duration("--stop-after", args.stop_after),
                                 duration("--stop-when-idle", args.stop_when_idle), stop)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        watching = Watching(source, args.baseline)
        beam_args = [*beam_args, "--streaming"]
    else:
        shards = expand(inputs, source_options)
    units, read_whole = plan(shards, source_options, 0 if watching else args.split_size)
    options, runner = pipeline_options(beam_args)
    check_worker_paths(options, [*inputs, args.output, args.tokenizer])
    claim_output(args.output, "tokenize")
    say(f"tokenize: {len(shards)} shard(s){' so far, watching for more' if args.watch else ''}, "
        f"{sum(s.size for s in shards) / 1e6:.1f} MB{parts_said(shards, units)}, vocabulary {tok.vocab_size:,}"
        f"{f', BPE-dropout p={dropout.p} seed {dropout.seed}' if dropout else ''} -> {args.output}")
    stale = clear_stale_outputs(args.output, units)
    mark_output(args.output, "tokenize")
    if stale:
        say(f"removed the outputs of {stale} input(s) of an earlier run that this run does not have")
    if remove_stale_temporaries(args.output):
        say(f"removed the temporary files of an interrupted earlier run under {args.output}")
    # The inputs as a sorted set: the same inputs listed in another order give the same stats.json.
    inputs = sorted(set(inputs))
    restore = install_stop_handlers(stop) if watching else (lambda: None)
    try:
        with pipeline_failures(args.output), quiet_worker_stderr(), job_progress(shards, watching), \
                beam.Pipeline(runner=runner, options=options) as p:
            build_tokenize_pipeline(p, units, tokenizer,
                                    TokenizerFacts.of(tok, reload=partial(token_bytes_of, tokenizer), dropout=dropout),
                                    source_options,
                                    args.output, args.eos_token, inputs, started_at, args.fail_fast,
                                    args.encode_threads or local_cores_per_worker(options, runner),
                                    spread=not one_local_worker(options, runner) and not watching,
                                    allow_shard_errors=args.allow_shard_errors,
                                    breakdowns=Breakdowns(windowing, args.group_field),
                                    watching=watching, dropout=dropout, kept_types=kept_types, read_whole=read_whole)
    finally:
        restore()
        if watching:
            remove(join(args.output, STOP_FILE))
    if not exists(join(args.output, "stats.json")):
        raise IncompleteRun(f"the watch ended before any shard matching {', '.join(inputs)} arrived; nothing "
                            f"was written" if watching else f"{join(args.output, 'stats.json')} was not written")
    stats = upgrade_stats(read_json(join(args.output, "stats.json")))
    manifest = tables.upgrade_success(read_json(join(args.output, SUCCESS))) if exists(join(args.output, SUCCESS)) else {}
    elapsed = time.time() - started_at
    warn_shard_errors(stats["shard_errors"], args.allow_shard_errors)
    untimed = (f", {manifest['untimed_records']:,} without a usable {args.timestamp_field}"
               if "untimed_records" in manifest else "")
    account = account_of(stats)
    say(f"done: {account.records_read:,} records read, {account.records_written:,} written{untimed}, "
        f"{account.records_rejected:,} rejected, {len(stats['shard_errors'])} of {account.shards_read} shard(s) "
        f"failed; {stats['tokens']:,} tokens, {stats['bytes'] / 1e6:.1f} MB in {elapsed:.1f}s "
        f"({stats['bytes'] / 1e6 / max(elapsed, 1e-9):.2f} MB/s) -> {args.output}")
    failure = incomplete_run(RunFigures.of_file(stats), args.allow_shard_errors, VERDICT_WORDS)
    if failure is not None:
        raise failure
    warn_doubtful_run(args, inputs, stats, manifest)
    if watching and args.baseline:
        drifted = gather_alerts(args.output)
        say(f"{drifted} of {account.shards_read} shard(s) drifted from {args.baseline} "
            f"({join(args.output, ALERTS)})")
        if drifted:
            raise SystemExit(EXIT_DRIFT)
    elif args.baseline and judge_against_baseline(args.baseline, join(args.output, "stats.json")):
        raise SystemExit(EXIT_DRIFT)
    return stats


def judge_against_baseline(baseline: str, stats_url: str) -> bool:
    """A batch run's stats.json judged against the baseline (`check_baseline`'s) as `tokenbeam drift
    BASELINE STATS` judges it, the report printed the same way; whether it drifted. UserError when a
    file cannot be read or judged."""
    with judging_errors():
        (baseline,) = [found.url for found in find_files([baseline], BASELINE_FILE)]     # still there, as when the run started
        for path in (baseline, stats_url):
            check_finished(path, "input", "drift")
        report, groups = show_pair(load_stats(baseline), baseline, load_stats(stats_url), stats_url, Thresholds())
    return pair_drifted(report, groups)


COMMAND = Command(name="tokenize", help="tokenize sharded text into Parquet with statistics (Beam)",
                  usage="tokenbeam tokenize --tokenizer T --output DIR --input GLOB [options] [INPUT ...]",
                  description=__doc__.split("\n")[0], add_arguments=add_arguments, run=run_parsed, beam=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.tokenize ARGV` (the same as `tokenbeam tokenize ARGV`)."""
    return command.main(COMMAND, argv)


if __name__ == "__main__":
    import gc

    code = main()
    gc.freeze()       # the process exits next: spare the interpreter's final walk over Beam's objects
    sys.exit(code)

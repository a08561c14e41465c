"""The Beam half of `tokenbeam train` (steps 1-4): sharded text -> OUTPUT/counts/*.parquet + _totals.json.

    shards -> CountShardPretokens (one DoFn call per shard, a local counter per bundle) -> SumCounts
    (CombinePerKey, hot-key fan-out on distributed runners) -> PruneAndWriteCounts (--min-count,
    --max-unique, counts/*.parquet by bucket) ; per-shard totals, and per-bucket totals with each
    bucket's histogram of counts -> MergeTotals -> counts/histogram.json + counts/_totals.json
    (with --max-unique, also each bucket's histogram -> MergeHistograms -> the cut that
    PruneAndWriteCounts applies first: bpe_ops.count_table.budget_cut)

With `--superword-transition` the same pass also counts SuperBPE's phase-two units
(`pretokenize.superword_pattern`) beside the pre-tokens, under bucket keys of their own, into
counts/superword/*.parquet, pruned the same way.

`tokenbeam train` runs this in a child process (`pipelines/count_process.py`) and runs the merge loop
itself once it has exited: Beam and everything it imports stay out of the process that holds the
counts and the merge loop's tables.
"""
from __future__ import annotations

import gc
import json
import os
import queue
import sys
import threading
import time
import traceback
import zlib

import argparse

from pipelines.core.beam_options import (beam, check_worker_paths, local_cores_per_worker, one_local_worker,
                                    pipeline_options, split_beam_args)
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from bpe_ops import pretokenize
from bpe_ops.count_table import budget_cut, new_count_table
from bpe_ops.implementation import DEFAULT, Implementation
from bpe_ops.stats import utf8_length
from schemas import reports
from schemas.reports import HISTOGRAM_FILE
from schemas.tables import COUNTS_SCHEMA, SUPERWORD_DIR
from pipelines.core.errors import (UserError, debugging, os_error_reason, pipeline_failures, quiet_worker_stderr, say,
                              shard_done)
from pipelines.core.folders import claim_output, mark_output
from pipelines.core.files import (filesystem, join, open_atomic, remove_stale_temporaries,
                             remove_tree, write_text_atomic, writing)
from pipelines.datasets.shards import (REJECTED_DIR, ShardReader, expand, first_rows, job_progress, numbered, parts_said, plan,
                              source_options as make_source_options)
from pipelines.steps.train_options import (check_pattern, clear_tokenizer_files, text_options_of, text_rules_of,
                                     units_pattern_of, within_budget)

N_COUNT_BUCKETS = 16            # counts/part-XXXXX-of-00016.parquet
HOT_KEY_FANOUT = 8               # SumCounts' fan-out on distributed runners (none on the local one)
LOCAL_COUNTER_FLUSH = 1_000_000  # distinct pre-tokens a bundle's counter holds before emitting


# --- Beam transforms ----------------------------------------------------------------------------

class CountShardPretokens(beam.DoFn):
    """Read one shard per call, pre-tokenize and count its records in a counter kept for the whole
    bundle, and emit `(bucket, {pretoken: count})` when the bundle ends (or the counter is full).

    One call per shard keeps Beam's per-element cost out of the hot loop (a plain Counter is ~5x
    cheaper than `(word, 1)` + CombinePerKey). The counter lives as long as the bundle, not the
    shard: `threads` threads count while the next records (and the next shards) are read, and the
    counts are drained and handed to Beam once, instead of the threads idling at every shard's end.
    Rejected records go to `rejected/<shard>.jsonl`; each shard's totals go to the `totals` output
    when it is read, and the bundle's pre-token total when its counts are emitted.
    With `units_pattern` (SuperBPE's phase-two split) every text is counted by that pattern too, and
    those counts go under the bucket keys N_COUNT_BUCKETS.. 2 * N_COUNT_BUCKETS - 1.
    """
    TOTALS = "totals"

    def __init__(self, source_options, pattern: str, special_tokens: tuple[str, ...], output: str,
                 fail_fast: bool = False, threads: int = 1, implementation: Implementation = DEFAULT,
                 normalizer: dict | None = None, pre_tokenizer: dict | None = None,
                 units_pattern: str | None = None):
        self.source_options = source_options
        self.pattern = pattern
        self.normalizer = normalizer            # HF components, as the tokenizer will hold them
        self.pre_tokenizer = pre_tokenizer
        self.special_tokens = special_tokens
        self.output = output
        self.fail_fast = fail_fast
        self.threads = threads
        self.implementation = implementation
        self.units_pattern = units_pattern

    def patterns(self) -> list[str]:
        return [self.pattern] + ([self.units_pattern] if self.units_pattern else [])

    def setup(self):
        for pattern in self.patterns():     # compiled (and its PCRE2 guard built) once per worker
            pretokenize.compile_pattern(pattern, self.implementation)
        self.records = beam.metrics.Metrics.counter("tokenbeam", "records")
        self.bytes = beam.metrics.Metrics.counter("tokenbeam", "bytes")
        self.rejected = beam.metrics.Metrics.counter("tokenbeam", "rejected")
        self.counter = None

    def start_bundle(self):
        if self.counter is not None:          # the last bundle failed, and teardown did not run
            self.counter.close()
        # The units are one split regex of their own (no pre-tokenizer chain), normalized alike.
        self.counter = CountingThreads(lambda: [pretokenize.PretokenCounter(
            pattern, self.special_tokens, normalizer=self.normalizer,
            pre_tokenizer=self.pre_tokenizer if pattern == self.pattern else None,
            implementation=self.implementation) for pattern in self.patterns()], self.threads)

    def process(self, shard, rows: dict | None = None):
        """`rows`: the rows of the parts of split files (`shards.first_rows`), which number the
        records of the parts after them (in rejected/)."""
        started = time.perf_counter()
        shard = numbered(shard, rows)
        totals = reports.empty_totals()
        counter = self.counter
        reader = ShardReader(shard, self.source_options, self.output, self.fail_fast)
        for record in reader:
            text = record.text
            totals["bytes"] += utf8_length(text)
            counter.add(text)
            if counter.full():
                yield from self._emit_counts(counter, windowed=False)
        account = reader.finish()
        # A split file is one shard: its first part counts it.
        totals.update(account=account.account(shards=int(shard.part is None or shard.part.index == 0)),
                      shard_errors=account.shard_errors)
        self.records.inc(account.records_read)
        self.bytes.inc(totals["bytes"])
        self.rejected.inc(account.rejected)
        elapsed = time.perf_counter() - started
        shard_done(f"read {shard.name}: {account.records:,} records, {totals['bytes'] / 1e6:.1f} MB, "
                   f"{account.rejected} rejected, {totals['bytes'] / 1e6 / max(elapsed, 1e-9):.1f} MB/s")
        yield beam.pvalue.TaggedOutput(self.TOTALS, totals)

    def finish_bundle(self):
        counter, self.counter = self.counter, None
        try:
            yield from self._emit_counts(counter, windowed=True)
        finally:
            counter.close()

    def teardown(self):
        if self.counter is not None:          # a bundle that failed: stop its threads
            self.counter.close()

    def _emit_counts(self, counter: "CountingThreads", windowed: bool):
        """Drain the counter: one `(bucket, packed count table)` element per bucket (`count_bucket`
        of each pre-token; bpe_ops/count_table.py), then a totals record of the pre-tokens drained.

        A shard holds tens of thousands of distinct pre-tokens: emitted one by one, Beam's per-element
        cost dwarfed the counting itself. Bucketing by a stable hash keeps the elements few and still spreads
        the sum over N_COUNT_BUCKETS keys; packed, a bucket is one `bytes` to Beam's coders instead of
        a dict coded entry by entry. `finish_bundle` must hand Beam windowed values.
        """
        def out(value, tag=None):
            if windowed:
                value = WindowedValue(value, MIN_TIMESTAMP, [GlobalWindow()])
            return value if tag is None else beam.pvalue.TaggedOutput(tag, value)

        (pretokens, tables), *units = counter.drain_packed(N_COUNT_BUCKETS)
        for bucket, table in enumerate(tables):
            if table:
                yield out((bucket, table))
        for bucket, table in enumerate(units[0][1] if units else ()):
            if table:
                yield out((N_COUNT_BUCKETS + bucket, table))
        if pretokens:
            yield out(dict(reports.empty_totals(), pretokens=pretokens,
                           superword_units=units[0][0] if units else 0), self.TOTALS)


class CountingThreads:
    """Pre-token counting fed to `threads` worker threads in batches of records through one queue,
    each thread with counters of its own (`make_counters()`: one per split pattern, each text goes
    to all): the compiled counter drops the GIL while it splits and counts, so the threads count on
    as many cores while the DoFn reads and decodes the next records, and whichever thread is free
    takes the next batch. Their counts are summed when drained. Without the compiled counter it
    still counts right, without overlap."""
    BATCH = 32                    # records per hand-over

    def __init__(self, make_counters, threads: int = 1):
        self.counters = [make_counters() for _ in range(max(1, threads))]
        self.queue: queue.Queue = queue.Queue(maxsize=2 * len(self.counters))
        self.batch: list[str] = []
        self.error: BaseException | None = None
        self.stopping = False
        self.threads = [threading.Thread(target=self._count, args=(counter,), name="count-pretokens", daemon=True)
                        for counter in self.counters]
        for thread in self.threads:
            thread.start()

    def _count(self, counters: list[pretokenize.PretokenCounter]) -> None:
        while (texts := self.queue.get()) is not None:
            try:
                if not self.stopping and self.error is None:
                    for counter in counters:
                        for text in texts:
                            counter.add(text)
            except BaseException as exc:          # kept for the reading thread to raise
                self.error = exc
            finally:
                self.queue.task_done()
        self.queue.task_done()

    def add(self, text: str) -> None:
        self.batch.append(text)
        if len(self.batch) >= self.BATCH:
            self._hand_over()

    def _hand_over(self) -> None:
        if self.error is not None:
            raise self.error
        batch, self.batch = self.batch, []
        if batch:
            self.queue.put(batch)

    def full(self) -> bool:
        """Whether the counters hold LOCAL_COUNTER_FLUSH distinct pre-tokens between them (read while
        threads may be counting: a heuristic for when to emit, never a figure that is reported)."""
        return sum(len(c) for counters in self.counters for c in counters) >= LOCAL_COUNTER_FLUSH

    def drain_packed(self, n: int) -> list[tuple[int, list[bytes]]]:
        """Every record added so far counted, the threads' counters summed and drained into n packed
        tables (stable buckets); per pattern, with the pieces they hold, repeats included."""
        self._hand_over()
        self.queue.join()                 # every batch handed over is counted
        if self.error is not None:
            raise self.error
        first, *others = self.counters
        drained = []
        for k, counter in enumerate(first):
            for other in others:
                counter.absorb(other[k])
            drained.append((counter.pieces, counter.drain_packed(n)))
        return drained

    def close(self) -> None:
        """Stop the threads (after their batch, dropping queued ones: only an error gets here early)."""
        self.stopping = True
        for _ in self.threads:
            self.queue.put(None)
        for thread in self.threads:
            thread.join()


class SumCounts(beam.CombineFn):
    """Packed count tables summed key by key into a CountTable (bpe_ops/count_table.py, in C where
    built): CombinePerKey(sum) over every pre-token of a bucket at once. Exact, associative and
    commutative, so right on any runner and bundle split; an accumulator travels as its packed table."""

    def __init__(self, implementation: Implementation = DEFAULT):
        self.implementation = implementation

    def create_accumulator(self):
        return new_count_table(implementation=self.implementation)

    def add_input(self, acc, packed):
        acc.add_packed(packed)
        return acc

    def merge_accumulators(self, accs):
        accs = iter(accs)
        out = next(accs)
        for acc in accs:
            out.absorb(acc)
        return out

    def extract_output(self, acc):
        return acc


# A totals record of WriteCountsBucket also carries its bucket's histogram of counts under this key
# (`{bucket: {count: n}}`), summed by MergeTotals beside the totals and taken out by write_totals:
# counts/histogram.json then needs no combine and no side input of its own (each is a stage more
# for the runner, which costs the local one a fixed time).
HISTOGRAMS = "histograms"


class MergeTotals(beam.CombineFn):
    """Exact combine of per-shard totals (associative and commutative, so right on any runner), with
    the buckets' histograms some of them carry (HISTOGRAMS)."""

    def create_accumulator(self):
        return reports.empty_totals()

    def add_input(self, acc, totals):
        return merged_totals(acc, totals)

    def merge_accumulators(self, accs):
        out = reports.empty_totals()
        for acc in accs:
            out = merged_totals(out, acc)
        return out

    def extract_output(self, acc):
        return acc


def merged_totals(a: dict, b: dict) -> dict:
    """`reports.merge_totals` of two totals records, and the sum of the histograms they carry."""
    out = reports.merge_totals(a, b)
    if HISTOGRAMS in a or HISTOGRAMS in b:
        out[HISTOGRAMS] = add_histograms(add_histograms({}, a.get(HISTOGRAMS, {})), b.get(HISTOGRAMS, {}))
    return out


def add_histograms(into: dict, histograms: dict) -> dict:
    """`into` (`{bucket: {count: n}}`) plus `histograms`, bucket by bucket; returns `into`."""
    for bucket, histogram in histograms.items():
        mine = into.setdefault(bucket, {})
        for count, n in histogram.items():
            mine[count] = mine.get(count, 0) + n
    return into


def histogram_of(counts) -> dict[int, int]:
    """`{count: pre-tokens with that count}` of a summed bucket (a CountTable): exact, and small (a few
    distinct counts per thousand pre-tokens)."""
    values = pa.Array.from_buffers(pa.int64(), len(counts), [None, pa.py_buffer(counts.count_values())])
    found = pc.value_counts(values)
    return dict(zip(found.field("values").to_pylist(), found.field("counts").to_pylist()))


def bucket_histogram(bucket_and_counts):
    """`(bucket, histogram_of(counts))` of a pre-token bucket (nothing for the superword units'
    buckets)."""
    bucket, counts = bucket_and_counts
    if bucket < N_COUNT_BUCKETS:
        yield bucket, histogram_of(counts)


class MergeHistograms(beam.CombineFn):
    """The buckets' histograms of counts, kept by bucket (`{bucket: {count: n}}`): the budget shares
    the pre-tokens at its threshold out bucket by bucket. Exact, so right on any runner."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, bucket_and_histogram):
        bucket, histogram = bucket_and_histogram
        return add_histograms(acc, {bucket: histogram})

    def merge_accumulators(self, accs):
        out = {}
        for acc in accs:
            add_histograms(out, acc)
        return out

    def extract_output(self, acc):
        return acc


def count_bucket(pretoken: bytes) -> int:
    """Stable bucket of a pre-token (crc32, not Python's salted hash: same files on every run)."""
    return zlib.crc32(pretoken) % N_COUNT_BUCKETS


class WriteCountsBucket(beam.DoFn):
    """Prune one bucket below `--min-count` (and to the `cut` of --max-unique, a side input:
    bpe_ops.count_table.budget_cut) and write it to `counts/part-BBBBB-of-NNNNN.parquet`, sorted by
    pre-token; emit a totals record of its distinct pre-tokens before and after pruning, and of a
    pre-token bucket also its histogram of counts before pruning (HISTOGRAMS).
    The superword units' buckets (keys from N_COUNT_BUCKETS) go to counts/superword/ alike, never cut."""

    def __init__(self, counts_dir: str, min_count: int):
        self.counts_dir = counts_dir
        self.min_count = min_count

    def process(self, bucket_and_counts, cut=None):
        bucket, counts = bucket_and_counts
        min_count, ties_kept = self.min_count, None
        if cut is not None and bucket < N_COUNT_BUCKETS:
            min_count, ties_kept = cut["threshold"], cut["ties_kept_by_bucket"].get(bucket)
        # Pruned and sorted by pre-token bytes where the table lives (the same files on every run),
        # handed to Arrow as buffers: no Python object per pre-token.
        schema, large = COUNTS_SCHEMA, False
        try:
            rows, offsets, data, values = counts.columns(min_count)
        except OverflowError:    # over 2 GiB of pre-tokens in one bucket: Arrow's 64-bit offsets
            large = True
            rows, offsets, data, values = counts.columns(min_count, large)
            schema = schema.set(schema.get_field_index("pretoken"), pa.field("pretoken", pa.large_binary(), False))
        table = pa.table({"pretoken": pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), rows,
                                                            [None, pa.py_buffer(offsets), pa.py_buffer(data)]),
                          "count": pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(values)])},
                         schema=schema)
        if ties_kept is not None:          # only some of the pre-tokens at the threshold are kept
            table = within_budget(table, cut, bucket)
            rows = table.num_rows
        units = bucket >= N_COUNT_BUCKETS
        folder = join(self.counts_dir, SUPERWORD_DIR) if units else self.counts_dir
        url = join(folder, f"part-{bucket % N_COUNT_BUCKETS:05d}-of-{N_COUNT_BUCKETS:05d}.parquet")
        with writing(url), open_atomic(url) as f:
            pq.write_table(table, f, compression="zstd")
        kind = "superword_units" if units else "pretokens"
        totals = dict(reports.empty_totals(), **{f"unique_{kind}_before_pruning": len(counts),
                                                 f"unique_{kind}_after_pruning": rows})
        if not units:
            totals[HISTOGRAMS] = {bucket: histogram_of(counts)}
        yield totals


def write_totals(totals, counts_dir, text_options=None, units_pattern=None, cut=None):
    """counts/histogram.json (of the buckets' histograms of counts the totals carry, HISTOGRAMS),
    then _totals.json, which vouches for the folder; with the `cut` of --max-unique, the totals hold
    its account."""
    totals = dict(totals)
    histograms = totals.pop(HISTOGRAMS, {})
    merged: dict[int, int] = {}
    for histogram in histograms.values():
        for count, n in histogram.items():
            merged[count] = merged.get(count, 0) + n
    url = join(counts_dir, HISTOGRAM_FILE)
    with writing(url):
        write_text_atomic(url, json.dumps(reports.histogram_file(merged), separators=(",", ":")) + "\n")
    budget = None if cut is None else reports.budget_report(cut, totals["pretokens"])
    totals = dict(reports.totals_json(totals), version=reports.TOTALS_VERSION, text_options=text_options or reports.text_options(),
                  superword_pattern=units_pattern, budget=budget)
    url = join(counts_dir, "_totals.json")
    with writing(url):
        write_text_atomic(url, json.dumps(totals, indent=1, sort_keys=True) + "\n")


def build_count_pipeline(p, shards, source_options, pattern, special_tokens, output, min_count, hot_key_fanout=None,
                         fail_fast=False, count_threads=1, spread=True, implementation: Implementation = DEFAULT,
                         normalizer=None, pre_tokenizer=None, text_options=None, units_pattern: str | None = None,
                         max_unique: int | None = None):
    """The Beam graph of the counting stage (steps 1-4); returns nothing, writes OUTPUT/counts/ (and
    counts/superword/ with `units_pattern`, SuperBPE's phase-two split). With `max_unique` only the
    `max_unique` most frequent pre-tokens are written (bpe_ops.count_table.budget_cut).
    `normalizer` and `pre_tokenizer` are the tokenizer's HF components (bpe_ops/text_rules.py), and
    `text_options` the flags they came from, recorded in _totals.json."""
    counts_dir = join(output, "counts")
    # One element per shard, spread over the workers unless they are this one process.
    shard_elements = p | "Shards" >> beam.Create(shards)
    if spread:
        shard_elements = shard_elements | "SpreadShards" >> beam.Reshuffle()
    rows = first_rows(p, shards, source_options)     # the row numbers of split files' parts
    counted = (shard_elements
               | "CountShardPretokens" >> beam.ParDo(
                   CountShardPretokens(source_options, pattern, tuple(special_tokens), output, fail_fast,
                                       count_threads, implementation, normalizer, pre_tokenizer, units_pattern),
                   **({"rows": rows} if rows is not None else {})
               ).with_outputs(CountShardPretokens.TOTALS, main="counts"))
    # Every one of the 16 bucket keys is hot on a distributed runner, where the fan-out spreads each
    # key's sum over more workers; on the local runner it is one more stage
    # for nothing, since combiner lifting already sums each bundle's tables before the shuffle.
    sum_counts = beam.CombinePerKey(SumCounts(implementation))
    if hot_key_fanout:
        sum_counts = sum_counts.with_hot_key_fanout(hot_key_fanout)
    summed = counted.counts | "SumCounts" >> sum_counts
    if max_unique is None:
        cut = None
        bucket_totals = summed | "PruneAndWriteCounts" >> beam.ParDo(WriteCountsBucket(counts_dir, min_count))
    else:
        # The cut needs every bucket's histogram: the buckets wait for it (held by the runner
        # meanwhile), where without a budget each is written as soon as it is summed.
        histograms = (summed
                      | "BucketHistograms" >> beam.FlatMap(bucket_histogram)
                      | "MergeHistograms" >> beam.CombineGlobally(MergeHistograms()).without_defaults())
        cut = beam.pvalue.AsSingleton(histograms | "BudgetCut" >> beam.Map(budget_cut, max_unique, min_count),
                                      default_value=None)
        bucket_totals = summed | "PruneAndWriteCounts" >> beam.ParDo(WriteCountsBucket(counts_dir, min_count), cut=cut)
    # The shards' totals and the buckets' unique counts and histograms are one kind of record: one
    # combine, one write (every extra stage costs the local runner a fixed time). Every shard sends a
    # totals record, so the combine never runs on nothing and needs no default (Beam injects one
    # through a side input, a stage more).
    ((counted[CountShardPretokens.TOTALS], bucket_totals)
     | "AllTotals" >> beam.Flatten()
     | "MergeTotals" >> beam.CombineGlobally(MergeTotals()).without_defaults()
     | "WriteTotals" >> beam.Map(write_totals, counts_dir, text_options, units_pattern, cut))


def clear_counts(counts_dir: str) -> None:
    """Remove the counts of an earlier run into the same folder before counting again: a bucket that the
    new corpus leaves empty would keep its old file, and the merge loop would train on both. The
    totals go first, so an interrupted cleanup never leaves totals that vouch for partial counts."""
    fs, path = filesystem(counts_dir)
    path = path.rstrip("/")
    stale = (fs.glob(path + "/_totals.json") + fs.glob(f"{path}/{HISTOGRAM_FILE}") + sorted(fs.glob(path + "/part-*.parquet"))
             + sorted(fs.glob(f"{path}/{SUPERWORD_DIR}/part-*.parquet")))
    for f in stale:
        fs.rm(f)


def count_corpus(args: argparse.Namespace, rest: list[str], tool_options: list[str],
                 implementation: Implementation = DEFAULT) -> list[str]:
    """Steps 1-4 of `tokenbeam train`: sort the leftover arguments into Beam's flags and more inputs,
    match the shards, run the counting pipeline, leave OUTPUT/counts/ (parts and _totals.json) behind;
    returns the inputs. Bad input is a UserError; outputs are only touched once all checks pass."""
    beam_args, bare = split_beam_args(rest, tool_options)
    inputs = list(args.input) + bare
    check_pattern(args.pattern, implementation)
    rules = text_rules_of(args)
    source_options = make_source_options(args)
    shards = expand(inputs, source_options)
    units, _ = plan(shards, source_options, args.split_size)
    options, runner = pipeline_options(beam_args)
    if not any(a.startswith(("--pipeline_type_check", "--no_pipeline_type_check")) for a in beam_args):
        # Type-checking the graph as it is built checks this module's own fixed graph, which the
        # tests build on every runner; a user can still ask for it with --pipeline_type_check.
        from apache_beam.options.pipeline_options import TypeOptions
        options.view_as(TypeOptions).pipeline_type_check = False
    check_worker_paths(options, [*inputs, args.output])
    claim_output(args.output, "train")
    # The earlier run's outputs go before anything is counted: what is left after a failure is this run's.
    clear_tokenizer_files(args.output)
    clear_counts(join(args.output, "counts"))
    remove_tree(join(args.output, REJECTED_DIR))
    mark_output(args.output, "train")
    if remove_stale_temporaries(args.output):
        say(f"removed the temporary files of an interrupted earlier run under {args.output}")
    say(f"train: {len(shards)} shard(s), {sum(s.size for s in shards) / 1e6:.1f} MB{parts_said(shards, units)} "
        f"-> {args.output}")
    with pipeline_failures(args.output), quiet_worker_stderr(), job_progress(shards), \
            beam.Pipeline(runner=runner, options=options) as p:
        build_count_pipeline(p, units, source_options, rules.pattern, list(dict.fromkeys(args.special_token)),
                             args.output, args.min_count, fail_fast=args.fail_fast,
                             count_threads=args.count_threads or local_cores_per_worker(options, runner),
                             hot_key_fanout=None if runner is not None else HOT_KEY_FANOUT,
                             spread=not one_local_worker(options, runner), implementation=implementation,
                             normalizer=rules.normalizer, pre_tokenizer=rules.pre_tokenizer,
                             text_options=text_options_of(args), units_pattern=units_pattern_of(args),
                             max_unique=getattr(args, "max_unique", None))
    return sorted(set(inputs))


def count_and_report(result_fd: int, job: str) -> int:
    """Count (`count_corpus` of the JSON job: the launcher's parsed flags and leftover arguments), then
    write the outcome as JSON to file descriptor `result_fd` (the launcher's pipe):
    `{"inputs": [...]}` when the counts are written, `{"error": line, "exit_code": n}` for an error
    the user can fix. Anything else is a bug and keeps its traceback here (exit 1)."""
    if result_fd > 2:
        os.set_inheritable(result_fd, False)      # Beam's worker processes must not hold the pipe open
    spec = json.loads(job)
    try:
        inputs = count_corpus(argparse.Namespace(**spec["args"]), spec["rest"], spec["tool_options"],
                              Implementation(**spec.get("implementation", {})))
        result, code = {"inputs": inputs}, 0
    except (UserError, OSError) as exc:
        if debugging():
            traceback.print_exception(exc.__cause__ or exc.__context__ or exc, file=sys.stderr)
        code = getattr(exc, "exit_code", 2)
        result = {"error": os_error_reason(exc) if isinstance(exc, OSError) else str(exc), "exit_code": code}
    except KeyboardInterrupt:
        result, code = {"error": "interrupted"}, 130
    try:
        with open(result_fd, "w", encoding="utf-8", closefd=result_fd > 2) as f:
            f.write(json.dumps(result) + "\n")
    except BrokenPipeError:      # the launcher stopped listening (Ctrl-C): nobody to tell
        pass
    # Skip the interpreter's final walk over Beam's objects: every output is written by now.
    gc.freeze()
    return code

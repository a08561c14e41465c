"""`tokenbeam train`: sharded text -> pre-token counts (Beam) -> BPE merge loop -> tokenizer files.

    shards -> CountShardPretokens (one DoFn call per shard, local counter) -> SumCounts (CombinePerKey,
    hot-key fan-out on distributed runners) -> PruneRare (--min-count) -> WriteCounts (counts/*.parquet, by bucket)
    then, in the launching process: load counts -> learn merges (progress bar) -> write tokenizer.json,
    tokenizer.tiktoken, train_report.json, compression_curve.png.

`--counts DIR` skips the Beam part and trains a new vocabulary from counts written earlier.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from operator import mul

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bpe_ops import pretokenize
from bpe_ops.stats import utf8_length
from bpe_ops.trainer import MAX_IDS
from schemas import reports
from schemas.records import rejected_to_json
from schemas.tables import COUNTS_SCHEMA
from pipelines import common
from pipelines.common import UserError, join, say

N_COUNT_BUCKETS = 16            # counts/part-XXXXX-of-00016.parquet
HOT_KEY_FANOUT = 8               # SumCounts' fan-out on distributed runners (none on the local one)
LOCAL_COUNTER_FLUSH = 1_000_000  # distinct pre-tokens a shard's counter holds before emitting


# --- Beam transforms ----------------------------------------------------------------------------

class CountShardPretokens(beam.DoFn):
    """Read one shard, pre-tokenize and count its records locally, emit `(bucket, {pretoken: count})`.

    One call per shard keeps Beam's per-element cost out of the hot loop (a plain Counter is ~5x
    cheaper than `(word, 1)` + CombinePerKey); `threads` threads count while the next records are
    read. Rejected records go to `rejected/<shard>.jsonl`; the shard's totals go to the `totals` output.
    """
    TOTALS = "totals"

    def __init__(self, source_options, pattern: str, special_tokens: tuple[str, ...], output: str,
                 fail_fast: bool = False, threads: int = 1):
        self.source_options = source_options
        self.pattern = pattern
        self.special_tokens = special_tokens
        self.output = output
        self.fail_fast = fail_fast
        self.threads = threads

    def setup(self):
        pretokenize.compile_pattern(self.pattern)     # compiled (and its PCRE2 guard built) once per worker
        self.records = beam.metrics.Metrics.counter("tokenbeam", "records")
        self.bytes = beam.metrics.Metrics.counter("tokenbeam", "bytes")
        self.rejected = beam.metrics.Metrics.counter("tokenbeam", "rejected")

    def process(self, shard):
        from pipelines.sources import Record, Rejected, read_shard

        started = time.perf_counter()
        totals = reports.empty_totals()
        totals["shards"] = 1
        counter = CountingThreads(lambda: pretokenize.PretokenCounter(self.pattern, self.special_tokens),
                                  self.threads)
        rejected_lines: list[str] = []
        try:
            for item in read_shard(shard, self.source_options):
                if isinstance(item, Record):
                    totals["records"] += 1
                    totals["records_counted"] += 1
                    totals["records_repaired"] += item.repaired
                    text = item.text
                    totals["bytes"] += utf8_length(text)
                    counter.add(text)
                    if counter.full():
                        yield from _emit(counter.drain_buckets(N_COUNT_BUCKETS), totals)
                elif isinstance(item, Rejected):
                    if self.fail_fast:
                        raise common.fail_fast_failure(item)
                    totals["records"] += 1
                    totals["records_rejected"] += 1
                    reasons = totals["rejected_by_reason"]
                    reasons[item.reason] = reasons.get(item.reason, 0) + 1
                    rejected_lines.append(json.dumps(rejected_to_json(item), ensure_ascii=False))
                else:  # ShardError: a file-level problem; the records read before it stay counted
                    if self.fail_fast:
                        raise common.fail_fast_failure(item)
                    error = common.shard_error_record(item)
                    say(f"shard error: {common.describe_shard_error(error)}")
                    totals["shard_errors"].append(error)
            yield from _emit(counter.drain_buckets(N_COUNT_BUCKETS), totals)
        finally:
            counter.close()
        if rejected_lines:
            from pipelines.sources import output_name
            rejected_url = join(self.output, "rejected", output_name(shard.relpath, ".jsonl"))
            with common.writing(rejected_url):
                common.write_text_atomic(rejected_url, "\n".join(rejected_lines) + "\n")
        self.records.inc(totals["records"])
        self.bytes.inc(totals["bytes"])
        self.rejected.inc(totals["records_rejected"])
        elapsed = time.perf_counter() - started
        say(f"counted {shard.relpath}: {totals['records_counted']:,} records, {totals['bytes'] / 1e6:.1f} MB, "
            f"{totals['records_rejected']} rejected, {totals['bytes'] / 1e6 / max(elapsed, 1e-9):.1f} MB/s")
        yield beam.pvalue.TaggedOutput(self.TOTALS, totals)


class CountingThreads:
    """A shard's pre-token counting, fed to `threads` worker threads in batches of records, each thread
    with a counter of its own: the compiled counter drops the GIL while it splits and counts, so the
    threads count on as many cores while the DoFn reads and decodes the next records. Their counts
    are summed when drained. Without the compiled counter it still counts right, without overlap."""
    BATCH = 32                    # records per hand-over

    def __init__(self, make_counter, threads: int = 1):
        self.counters = [make_counter() for _ in range(max(1, threads))]
        self.pools = [ThreadPoolExecutor(max_workers=1, thread_name_prefix="count-pretokens") for _ in self.counters]
        self.pending: list = [None] * len(self.counters)
        self.next = 0                 # the thread that takes the next batch (round robin)
        self.batch: list[str] = []

    def add(self, text: str) -> None:
        self.batch.append(text)
        if len(self.batch) >= self.BATCH:
            self._hand_over()

    def _hand_over(self) -> None:
        k, self.next = self.next, (self.next + 1) % len(self.counters)
        self._wait(k)
        batch, self.batch = self.batch, []
        self.pending[k] = self.pools[k].submit(self._count, self.counters[k], batch)

    @staticmethod
    def _count(counter: pretokenize.PretokenCounter, texts: list[str]) -> None:
        for text in texts:
            counter.add(text)

    def _wait(self, k: int) -> None:
        pending, self.pending[k] = self.pending[k], None
        if pending is not None:
            pending.result()                  # re-raises what the thread raised

    def full(self) -> bool:
        """Whether the counters hold LOCAL_COUNTER_FLUSH distinct pre-tokens between them (read while
        threads may be counting: a heuristic for when to emit, never a figure that is reported)."""
        return sum(map(len, self.counters)) >= LOCAL_COUNTER_FLUSH

    def drain_buckets(self, n: int) -> list[dict[bytes, int]]:
        """Every record added so far counted, the counters summed and drained into n stable buckets."""
        self._hand_over()
        for k in range(len(self.counters)):
            self._wait(k)
        for counter in self.counters[1:]:
            self.counters[0].absorb(counter)
        return self.counters[0].drain_buckets(n)

    def close(self) -> None:
        """Stop the threads (after their batch, dropping queued ones: only an error gets here early)."""
        for pool in self.pools:
            pool.shutdown(wait=True, cancel_futures=True)


def _emit(buckets: list[dict[bytes, int]], totals: dict):
    """Emit a shard's local counts as one `(bucket, {pre-token bytes: count})` element per bucket
    (`count_bucket` of each pre-token, as `PretokenCounter.drain_buckets` splits them).

    A shard holds ~60k distinct pre-tokens: emitted one by one, Beam's per-element cost dwarfed the
    counting itself (measured on 4 en/ shards: 27.6 s in the counting stage against ~3 CPU-s of regex
    and Counter work). Bucketing by a stable hash keeps the elements few and still spreads the sum
    over N_COUNT_BUCKETS keys.
    """
    totals["pretokens"] += sum(sum(counts.values()) for counts in buckets)
    for bucket, counts in enumerate(buckets):
        if counts:
            yield bucket, counts


class SumCounts(beam.CombineFn):
    """`{pre-token: count}` tables summed key by key: CombinePerKey(sum) over every pre-token of a
    bucket at once. Exact, associative and commutative, so right on any runner and bundle split."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, counts):
        pretokenize.add_counts(acc, counts)
        return acc

    def merge_accumulators(self, accs):
        accs = iter(accs)
        out = next(accs)
        for acc in accs:
            out = self.add_input(out, acc)
        return out

    def extract_output(self, acc):
        return acc


class MergeTotals(beam.CombineFn):
    """Exact combine of per-shard totals (associative and commutative, so right on any runner)."""

    def create_accumulator(self):
        return reports.empty_totals()

    def add_input(self, acc, totals):
        return reports.merge_totals(acc, totals)

    def merge_accumulators(self, accs):
        out = reports.empty_totals()
        for acc in accs:
            out = reports.merge_totals(out, acc)
        return out

    def extract_output(self, acc):
        return acc


def count_bucket(pretoken: bytes) -> int:
    """Stable bucket of a pre-token (crc32, not Python's salted hash: same files on every run)."""
    return zlib.crc32(pretoken) % N_COUNT_BUCKETS


class WriteCountsBucket(beam.DoFn):
    """Prune one bucket below `--min-count` and write it to `counts/part-BBBBB-of-NNNNN.parquet`,
    sorted by pre-token; emit a totals record of its distinct pre-tokens before and after pruning."""

    def __init__(self, counts_dir: str, min_count: int):
        self.counts_dir = counts_dir
        self.min_count = min_count

    def process(self, bucket_and_counts):
        bucket, counts = bucket_and_counts
        table = pa.table({"pretoken": pa.array(list(counts), pa.binary()),
                          "count": pa.array(list(counts.values()), pa.int64())}, schema=COUNTS_SCHEMA)
        if self.min_count > 1:
            table = table.filter(pc.greater_equal(table["count"], self.min_count))
        table = table.sort_by("pretoken")         # byte order, in Arrow: the same files, ~5x sooner
        url = join(self.counts_dir, f"part-{bucket:05d}-of-{N_COUNT_BUCKETS:05d}.parquet")
        with common.writing(url), common.open_atomic(url) as f:
            pq.write_table(table, f, compression="zstd")
        yield dict(reports.empty_totals(), unique_pretokens_before_pruning=len(counts),
                   unique_pretokens_after_pruning=table.num_rows)


def write_totals(totals, counts_dir):
    totals = dict(totals, version=reports.TOTALS_VERSION)
    url = join(counts_dir, "_totals.json")
    with common.writing(url):
        common.write_text_atomic(url, json.dumps(totals, indent=1, sort_keys=True) + "\n")


def build_count_pipeline(p, shards, source_options, pattern, special_tokens, output, min_count, hot_key_fanout=None,
                         fail_fast=False, count_threads=1, spread=True):
    """The Beam graph of the counting stage (steps 1-4); returns nothing, writes OUTPUT/counts/."""
    counts_dir = join(output, "counts")
    # One element per shard, spread over the workers unless they are this one process.
    shard_elements = p | "Shards" >> beam.Create(shards)
    if spread:
        shard_elements = shard_elements | "SpreadShards" >> beam.Reshuffle()
    counted = (shard_elements
               | "CountShardPretokens" >> beam.ParDo(
                   CountShardPretokens(source_options, pattern, tuple(special_tokens), output, fail_fast,
                                       count_threads)
               ).with_outputs(CountShardPretokens.TOTALS, main="counts"))
    # Every one of the 16 bucket keys is hot on a distributed runner, where the fan-out spreads each
    # key's sum over more workers; on the local runner it is one more stage (~1 s on en/, 52 MB)
    # for nothing, since combiner lifting already sums each bundle's tables before the shuffle.
    sum_counts = beam.CombinePerKey(SumCounts())
    if hot_key_fanout:
        sum_counts = sum_counts.with_hot_key_fanout(hot_key_fanout)
    bucket_totals = (counted.counts
                     | "SumCounts" >> sum_counts
                     | "PruneAndWriteCounts" >> beam.ParDo(WriteCountsBucket(counts_dir, min_count)))
    # The shards' totals and the buckets' unique counts are one kind of record: one combine, one write
    # (every extra stage costs the local runner a fixed ~0.1-0.3 s).
    ((counted[CountShardPretokens.TOTALS], bucket_totals)
     | "AllTotals" >> beam.Flatten()
     | "MergeTotals" >> beam.CombineGlobally(MergeTotals())
     | "WriteTotals" >> beam.Map(write_totals, counts_dir))


# --- the launcher side ----------------------------------------------------------------------------

def clear_counts(counts_dir: str) -> None:
    """Remove the counts of an earlier run into the same folder before counting again: a bucket that the
    new corpus leaves empty would keep its old file, and the merge loop would train on both. The
    totals go first, so an interrupted cleanup never leaves totals that vouch for partial counts."""
    fs, path = common.filesystem(counts_dir)
    stale = fs.glob(path.rstrip("/") + "/_totals.json") + sorted(fs.glob(path.rstrip("/") + "/part-*.parquet"))
    for f in stale:
        fs.rm(f)


def load_counts(counts_dir: str) -> dict[bytes, int]:
    """Read every counts/*.parquet into one {pretoken: count} table (the merge loop's input)."""
    fs, path = common.filesystem(counts_dir)
    files = sorted(f for f in fs.glob(path.rstrip("/") + "/*.parquet"))
    counts: dict[bytes, int] = {}
    for f in files:
        with fs.open(f, "rb") as fh:
            table = pq.read_table(fh)
        if table.schema.names != COUNTS_SCHEMA.names:
            raise UserError(f"{f} is not a tokenbeam counts file (columns {table.schema.names})")
        # Buckets never share a pre-token, but files copied together from two runs could: sum them.
        pretokenize.add_counts(counts, dict(zip(table.column("pretoken").to_pylist(),
                                                table.column("count").to_pylist())))
    return counts


class ProgressBar:
    """Merges done, merges/s, current pair and count, ETA: one line on stderr, redrawn twice a second."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.stream = total, stream
        self.started = self.last = time.perf_counter()
        self.interactive = stream.isatty()

    def __call__(self, done: int, pair: tuple[bytes, bytes], count: int) -> None:
        now = time.perf_counter()
        if now - self.last < (0.5 if self.interactive else 10.0) and done < self.total:
            return
        self.last = now
        rate = done / max(now - self.started, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else 0.0
        left, right = (p.decode("utf-8", "backslashreplace") for p in pair)
        line = (f"merges {done:,}/{self.total:,}  {rate:,.0f}/s  pair ({left!r}, {right!r}) count {count:,}  "
                f"ETA {eta:.0f}s")
        self.stream.write(("\r" + line[:160].ljust(160)) if self.interactive else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.interactive:
            self.stream.write("\n")
            self.stream.flush()


def compression_curve(initial_tokens: int, total_bytes: int, tokens_saved: list[int], base_vocab: int,
                      points: int = 200) -> list[dict]:
    """Tokens per byte of the training counts against vocabulary size. Each merge removes exactly the
    occurrences it merged (`tokens_saved`; less than the pair count for runs like `a a a`), so the
    curve falls out of the merge loop for free. Sampled to about `points` points."""
    if total_bytes == 0:
        return []
    step = max(1, len(tokens_saved) // points)
    curve, tokens = [{"vocab_size": base_vocab, "tokens_per_byte": initial_tokens / total_bytes}], initial_tokens
    for i, n in enumerate(tokens_saved, start=1):
        tokens -= n
        if i % step == 0 or i == len(tokens_saved):
            curve.append({"vocab_size": base_vocab + i, "tokens_per_byte": tokens / total_bytes})
    return curve


def plot_curve(curve: list[dict], url: str) -> bool:
    """compression_curve.png with the plot extra; False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([c["vocab_size"] for c in curve], [c["tokens_per_byte"] for c in curve])
    ax.set_xlabel("vocabulary size")
    ax.set_ylabel("tokens per byte (training counts)")
    ax.set_title("Compression curve")
    ax.grid(True, alpha=0.3)
    with common.open_atomic(url) as f:
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def peak_rss_mb() -> float:
    """Peak resident memory of this process and its (reaped) children, in MB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 1024


def upload_tokenizer(tok, output: str) -> str:
    """Save the tokenizer files locally (bpe_ops does plain file I/O) and copy them to OUTPUT."""
    with tempfile.TemporaryDirectory() as tmp:
        tok.save(tmp)
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), "rb") as src, common.open_atomic(join(output, name)) as dst:
                dst.write(src.read())
    return join(output, "tokenizer.json")


# --- command line -------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokenbeam train", description=__doc__.split("\n")[0],
                                     epilog="Any other --flag is passed to Beam (--runner, --direct_num_workers, ...).")
    parser.add_argument("--output", required=True, help="output folder (local or fsspec URL)")
    parser.add_argument("--vocab-size", type=int, required=True, help="ids in all: 256 bytes + merges + specials")
    parser.add_argument("--pattern", default="gpt4", help="split pattern: gpt4 (default), gpt2, o200k, classic, or a regex")
    parser.add_argument("--special-token", action="append", default=[], metavar="TOKEN",
                        help="a special token (repeatable): splits the text, never merged across")
    parser.add_argument("--min-frequency", type=int, default=2, help="stop when the best pair count is below this")
    parser.add_argument("--min-count", type=int, default=1, help="drop pre-tokens seen fewer times in the corpus")
    parser.add_argument("--count-threads", type=int, default=None, metavar="N",
                        help="threads that count each shard in a worker (default: the cores each local worker "
                             "has, 1 on other runners)")
    parser.add_argument("--tie-break", default="largest", choices=["largest", "smallest", "hf"])
    parser.add_argument("--counts", default=None, metavar="DIR",
                        help="train from counts written earlier (a run folder or its counts/), skipping the corpus")
    common.add_source_arguments(parser)
    return parser


def parse(argv):
    parser = build_parser()
    # --input is only optional with --counts.
    for action in parser._actions:
        if action.dest == "input":
            action.required = not any(a == "--counts" or a.startswith("--counts=") for a in argv)
    args, beam_args = parser.parse_known_args(argv)
    if args.counts and args.input:
        raise UserError("--counts trains from counts written earlier and reads no corpus: "
                        "give either --counts or --input, not both")
    if args.vocab_size < 1:
        raise UserError("--vocab-size must be positive")
    if args.vocab_size > MAX_IDS + len(set(args.special_token)):
        raise UserError(f"--vocab-size {args.vocab_size:,} is too large: the merge loop makes at most "
                        f"{MAX_IDS:,} ids (plus the special tokens)")
    if args.min_count < 1 or args.min_frequency < 1:
        raise UserError("--min-count and --min-frequency must be at least 1")
    if args.count_threads is not None and args.count_threads < 1:
        raise UserError(f"--count-threads must be at least 1, got {args.count_threads}")
    try:
        pretokenize.compile_pattern(args.pattern)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    base = 256 if args.pattern != "classic" else 1
    if args.vocab_size < base + len(set(args.special_token)) + 1 and args.pattern != "classic":
        raise UserError(f"--vocab-size {args.vocab_size} is too small: the byte alphabet alone is 256 ids, plus "
                        f"{len(set(args.special_token))} special tokens, plus at least one merge")
    return args, beam_args


def import_plotting_in_background() -> threading.Thread:
    """Start importing matplotlib (0.5-0.9 s) in a thread, so that it overlaps the counting stage
    (idle while worker processes count, and GIL-free while the compiled counter runs in-process)
    rather than adding to the write stage; `plot_curve` then finds it imported. Without the plot
    extra, nothing happens."""
    def warm() -> None:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot  # noqa: F401
        except ImportError:
            pass

    thread = threading.Thread(target=warm, name="import-matplotlib", daemon=True)
    thread.start()
    return thread


def run(argv: list[str]) -> dict:
    """Run the whole training job; returns the train report."""
    warming = import_plotting_in_background()
    try:
        return train(argv)
    finally:
        warming.join()


def train(argv: list[str]) -> dict:
    from bpe_ops import train_bpe

    args, beam_args = parse(argv)
    timing: dict[str, float] = {}
    started = time.perf_counter()
    specials = list(dict.fromkeys(args.special_token))
    if args.counts:
        counts_dir = args.counts if not common.exists(join(args.counts, "counts")) else join(args.counts, "counts")
        inputs = None
    else:
        source_options = common.source_options(args)
        shards = common.expand(args, source_options)
        options, runner = common.pipeline_options(beam_args)
        common.check_worker_paths(options, [*args.input, args.output])
        common.makedirs(args.output)
        counts_dir = join(args.output, "counts")
        clear_counts(counts_dir)
        if common.remove_stale_temporaries(args.output):
            say(f"removed the temporary files of an interrupted earlier run under {args.output}")
        say(f"train: {len(shards)} shard(s), {sum(s.size for s in shards) / 1e6:.1f} MB -> {args.output}")
        with common.pipeline_failures(args.output), beam.Pipeline(runner=runner, options=options) as p:
            build_count_pipeline(p, shards, source_options, args.pattern, specials, args.output,
                                 args.min_count, fail_fast=args.fail_fast,
                                 count_threads=args.count_threads or common.local_cores_per_worker(options, runner),
                                 hot_key_fanout=None if runner is not None else HOT_KEY_FANOUT,
                                 spread=not common.one_local_worker(options, runner))
        inputs = args.input
        timing["count"] = time.perf_counter() - started
    t0 = time.perf_counter()
    if not common.exists(join(counts_dir, "_totals.json")):
        raise UserError(f"no counts found in {counts_dir} (expected _totals.json and part-*.parquet)")
    totals = common.read_json(join(counts_dir, "_totals.json"))
    if totals["records"] != totals["records_counted"] + totals["records_rejected"]:
        raise RuntimeError(f"record accounting is broken: {totals['records']} read != "
                           f"{totals['records_counted']} counted + {totals['records_rejected']} rejected")
    for error in totals["shard_errors"]:
        say(f"warning: {common.describe_shard_error(error)}")
    counts = load_counts(counts_dir)
    timing["load_counts"] = time.perf_counter() - t0
    if not counts:
        raise UserError(f"nothing to train on: {totals['records']} records read, {totals['records_rejected']} "
                        f"rejected, no pre-tokens left (after --min-count pruning)")
    say(f"merge loop: {len(counts):,} unique pre-tokens, target {args.vocab_size:,} ids")
    t0 = time.perf_counter()
    bar = ProgressBar(max(1, args.vocab_size - 256 - len(specials)))
    try:
        tok = train_bpe(counts, vocab_size=args.vocab_size, pattern=args.pattern, special_tokens=specials,
                        min_frequency=args.min_frequency, tie_break=args.tie_break, progress=bar)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    bar.close()
    timing["merge_loop"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    common.makedirs(args.output)
    tokenizer_url = upload_tokenizer(tok, args.output)
    result = tok.training
    total_bytes = sum(map(mul, map(len, counts), counts.values())) if args.pattern != "classic" else totals["bytes"]
    base_vocab = tok.vocab_size - len(specials) - (len(result.merges) - result.duplicate_merges)
    curve = compression_curve(result.initial_tokens, total_bytes, result.tokens_saved, base_vocab)
    report = {
        "version": reports.TRAIN_REPORT_VERSION, "tokenizer_sha256": tok.sha256, "vocab_size": tok.vocab_size,
        "pattern": args.pattern, "special_tokens": specials, "tie_break": args.tie_break,
        "min_frequency": args.min_frequency, "min_count": args.min_count,
        "inputs": inputs if inputs is not None else {"counts": args.counts},
        "records": totals["records"], "records_counted": totals["records_counted"],
        "records_rejected": totals["records_rejected"], "rejected_by_reason": totals["rejected_by_reason"],
        "records_repaired": totals["records_repaired"], "shard_errors": totals["shard_errors"],
        "bytes": totals["bytes"], "pretokens": totals["pretokens"],
        "unique_pretokens_before_pruning": totals["unique_pretokens_before_pruning"],
        "unique_pretokens_after_pruning": totals["unique_pretokens_after_pruning"],
        "merges": len(result.merges), "tied_merges": result.tied_merges,
        "duplicate_merges": result.duplicate_merges, "stop_reason": result.stop_reason,
        "compression_curve": curve,
    }
    plotted = plot_curve(curve, join(args.output, "compression_curve.png"))
    timing["write"] = time.perf_counter() - t0
    timing["total"] = time.perf_counter() - started
    report["timing_seconds"] = {k: round(v, 3) for k, v in timing.items()}
    report["peak_rss_mb"] = round(peak_rss_mb(), 1)
    common.write_text_atomic(join(args.output, "train_report.json"),
                             json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    say(f"trained {tok.vocab_size:,} ids ({len(result.merges):,} merges, {result.tied_merges:,} tied, stop: "
        f"{result.stop_reason}) from {report['records_counted']:,} records ({report['records_rejected']:,} rejected) "
        f"in {timing['total']:.1f}s -> {tokenizer_url}" + ("" if plotted else " (install the plot extra for compression_curve.png)"))
    return report


def main(argv: list[str] | None = None) -> int:
    from pipelines.cli import run_command
    return run_command(run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    code = main()
    gc.freeze()       # the process exits next: spare the interpreter's final walk over Beam's objects (~1 s)
    sys.exit(code)

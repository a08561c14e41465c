"""`tokenbeam train`: sharded text -> pre-token counts (Beam) -> BPE merge loop -> tokenizer files.

    steps 1-4, in a child process (pipelines/steps/train_count.py, the Beam pipeline): shards ->
        CountShardPretokens -> SumCounts -> PruneAndWriteCounts -> OUTPUT/counts/*.parquet + _totals.json
    step 5, here in the launching process: load counts -> learn merges (progress bar) -> write
        tokenizer.json, tokenizer.tiktoken, train_report.json, compression_curve.png.

The launcher never imports Beam: Beam and what it pulls in (the largest share of a small job's memory
and start-up; figures in benchmarks/RESULTS.md) live and die with the counting process, so the merge loop's tables are the largest thing this process
holds. `--counts DIR` skips the Beam part and trains a new vocabulary from counts written earlier.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from operator import mul

from bpe_ops import formats, pretokenize
from bpe_ops.count_table import budget_cut
from bpe_ops.text_rules import NORMAL_FORMS
from bpe_ops.trainer import MAX_IDS
from schemas import reports
from schemas.accounts import ACCOUNT_KEY, account_of
from pipelines.core import command
from pipelines.core.command import (Command, add_quiet_argument, check_special_token, implementation_from_environment,
                               option_strings, refuse_leftovers)
from pipelines.core.errors import EXIT_INCOMPLETE, IncompleteRun, UserError, is_quiet, say, set_quiet, warn
from pipelines.core.folders import claim_output, mark_output
from pipelines.core.files import exists, join, open_atomic, read_json, write_text_atomic
from pipelines.core.line_chart import line_chart_png
from pipelines.datasets.outcome import RunFigures, RunWords, incomplete_run
from pipelines.datasets.shards import add_source_arguments, unique_count, warn_mostly_rejected, \
    warn_shard_errors
from pipelines.steps.train_options import (SUCCESS, TOKENIZER_FILES, check_pattern, clear_tokenizer_files, text_options_of,
                                     text_rules_of, units_pattern_of, within_budget)

VERDICT_WORDS = RunWords(done="counted", lost="no tokenizer was trained on part of the corpus",
                         nothing="nothing to train on")


# --- the launcher side ----------------------------------------------------------------------------

class CountingProcess:
    """Steps 1-4 (the Beam pipeline of pipelines/steps/train_count.py) in a child process, started at once;
    `wait` returns when OUTPUT/counts/ is written, or raises the child's one-line error as a UserError
    (a bug's traceback is on stderr above it). Its progress lines reach stderr as they come."""

    def __init__(self, job: dict):
        # The child's outcome comes back through a pipe: no file to leave behind if this process dies.
        read_end, write_end = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pipelines.count_process", str(os.getpid()), str(write_end), json.dumps(job)],
                env=self.environment(), pass_fds=(write_end,))
        finally:
            os.close(write_end)
        self.outcome = os.fdopen(read_end, "rb")

    @staticmethod
    def environment() -> dict[str, str]:
        """This process's environment, plus a fixed glibc trim threshold (unless the user set any
        MALLOC_ variable): glibc otherwise raises its thresholds as large blocks are freed and keeps
        the memory, and the counting process, whose large blocks (the counters' tables, the packed
        buckets, Arrow's buffers) live one after another, peaked higher without it. Ignored by other
        C libraries."""
        env = dict(os.environ)
        if not any(name.startswith("MALLOC_") for name in env):
            env["MALLOC_TRIM_THRESHOLD_"] = str(128 * 1024)
        # The child imports the very `pipelines` package this process runs, wherever it came from.
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        return env

    def stop(self) -> None:
        """After Ctrl-C (which the child got too) or an error here: let the child end, or end it."""
        self.outcome.close()
        try:
            self.process.wait(timeout=5)
        except BaseException:
            self.process.kill()
            self.process.wait()

    def wait(self) -> None:
        try:
            with self.outcome:
                said = self.outcome.read()       # until the child writes its outcome or dies
            # wait4, not Popen.wait: the child's own resource use (peak memory) comes with its status.
            _, status, usage = os.wait4(self.process.pid, 0)
        except BaseException:
            self.stop()
            raise
        code = self.process.returncode = os.waitstatus_to_exitcode(status)
        self.peak_rss_mb = usage.ru_maxrss / 1024
        try:
            result = json.loads(said or b"{}")
        except ValueError:
            result = {}
        if code == 0:
            return result
        if code in (130, -signal.SIGINT):
            raise KeyboardInterrupt
        if "error" in result:
            error = IncompleteRun if result.get("exit_code") == EXIT_INCOMPLETE else UserError
            raise error(result["error"])
        raise IncompleteRun(f"the counting stage failed (exit code {code}); its error is above")


def import_counts_reader() -> None:
    """Import what `load_counts` needs (pyarrow's Parquet reader, and fsspec, which reads every file
    of the counts folder) while the counting process runs on the other core, instead of after it.
    The price is memory: the launcher's share adds to the counting process's peak, which can become
    the job's peak, a little above the merge loop's."""
    for name in ("pyarrow.parquet", "schemas.tables", "fsspec"):
        importlib.import_module(name)


def count_files(counts_dir: str) -> tuple[object, list[str]]:
    """The filesystem of `counts_dir` and its counts/*.parquet, sorted."""
    from pipelines.core.files import filesystem

    fs, path = filesystem(counts_dir)
    return fs, sorted(fs.glob(path.rstrip("/") + "/*.parquet"))


def bucket_of(url: str, index: int) -> int:
    """The bucket of a counts file (part-BBBBB-of-NNNNN.parquet), else its place in the sorted list."""
    name = url.rsplit("/", 1)[-1]
    number = name.removeprefix("part-").split("-of-", 1)[0]
    return int(number) if name.startswith("part-") and number.isdigit() else index


def load_counts(counts_dir: str, cut: dict | None = None) -> dict[bytes, int]:
    """Read every counts/*.parquet into one {pretoken: count} table (the merge loop's input); with the
    `cut` of a budget (`budget_of_counts`), only the pre-tokens it keeps, file by file."""
    import pyarrow.parquet as pq

    from schemas.tables import COUNTS_SCHEMA

    fs, files = count_files(counts_dir)
    counts: dict[bytes, int] = {}
    for index, f in enumerate(files):
        with fs.open(f, "rb") as fh:
            # ParquetFile, not read_table: read_table goes through pyarrow.dataset, whose import
            # alone costs more than reading sixteen small files.
            table = pq.ParquetFile(fh).read()
        if table.schema.names != COUNTS_SCHEMA.names:
            raise UserError(f"{f} is not a tokenbeam counts file (columns {table.schema.names})")
        if cut is not None:
            table = within_budget(table, cut, bucket_of(f, index))
        # Buckets never share a pre-token, but files copied together from two runs could: sum them.
        pretokenize.add_counts(counts, dict(zip(table.column("pretoken").to_pylist(),
                                                table.column("count").to_pylist())))
    return counts


def budget_of_counts(counts_dir: str, max_unique: int) -> dict:
    """The cut of `--max-unique` over counts written earlier (bpe_ops.count_table.budget_cut), from
    the histogram of each file's counts, read alone: what the counting pipeline would have kept."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fs, files = count_files(counts_dir)
    histograms: dict[int, dict[int, int]] = {}
    for index, f in enumerate(files):
        with fs.open(f, "rb") as fh:
            found = pc.value_counts(pq.ParquetFile(fh).read(columns=["count"]).column("count"))
        mine = histograms.setdefault(bucket_of(f, index), {})
        for count, n in zip(found.field("values").to_pylist(), found.field("counts").to_pylist()):
            mine[count] = mine.get(count, 0) + n
    return budget_cut(histograms, max_unique)


class ProgressBar:
    """Merges done, merges/s, current pair and count, ETA: one line on stderr, redrawn twice a second."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.stream = total, stream
        self.started = self.last = time.perf_counter()
        self.interactive = stream.isatty()

    def __call__(self, done: int, pair: tuple[bytes, bytes], count: int) -> None:
        if is_quiet():
            return
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
        if self.interactive and not is_quiet():
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


def plot_curve(curve: list[dict], url: str) -> None:
    """compression_curve.png: tokens per byte against vocabulary size (pipelines/core/line_chart.py)."""
    png = line_chart_png([c["vocab_size"] for c in curve], [c["tokens_per_byte"] for c in curve],
                         title="Compression curve", x_label="vocabulary size",
                         y_label="tokens per byte (training counts)")
    with open_atomic(url) as f:
        f.write(png)


def own_peak_rss_mb() -> float:
    """Peak resident memory of this process, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def upload_tokenizer(tok, output: str) -> str:
    """Save the tokenizer files locally (bpe_ops does plain file I/O) and copy them to OUTPUT."""
    with tempfile.TemporaryDirectory() as tmp:
        tok.save(tmp)
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), "rb") as src, open_atomic(join(output, name)) as dst:
                dst.write(src.read())
    return join(output, "tokenizer.json")


# --- command line -------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quiet_argument(parser)
    parser.add_argument("--output", required=True, help="output folder (local or fsspec URL)")
    parser.add_argument("--vocab-size", type=int, required=True, help="ids in all: 256 bytes + merges + specials")
    parser.add_argument("--pattern", default="gpt4",
                        help="split pattern: gpt4 (default), gpt2, o200k, classic (any case), or a regex")
    parser.add_argument("--special-token", action="append", default=[], metavar="TOKEN",
                        help="a special token (repeatable): splits the text, never merged across")
    parser.add_argument("--min-frequency", type=int, default=2, help="stop when the best pair count is below this")
    parser.add_argument("--min-count", type=int, default=1, help="drop pre-tokens seen fewer times in the corpus")
    parser.add_argument("--max-unique", type=unique_count, default=None, metavar="N",
                        help="train on the N most frequent pre-tokens only (e.g. 3M), which bounds the merge "
                             "loop's memory; ties at the cut are chosen by content")
    parser.add_argument("--count-threads", type=int, default=None, metavar="N",
                        help="threads that count each shard in a worker (default: the cores each local worker "
                             "has, 1 on other runners)")
    parser.add_argument("--tie-break", default="largest", choices=["largest", "smallest", "hf"])
    parser.add_argument("--max-token-length", type=int, default=None, metavar="L",
                        help="Hugging Face's max_token_length: no merge makes a token of L bytes or more "
                             "(two single bytes always merge)")
    parser.add_argument("--split-digits", action="store_true",
                        help="every digit a pre-token of its own: no token holds two digits")
    parser.add_argument("--digit-group", type=int, default=None, metavar="K",
                        help="runs of digits cut into pre-tokens of K digits, from the left")
    parser.add_argument("--normalize", type=str.upper, default=None, choices=NORMAL_FORMS,
                        help="Unicode normalization of the text when counting, recorded in tokenizer.json")
    parser.add_argument("--lowercase", action="store_true",
                        help="lowercase the text (after --normalize) when counting, recorded in tokenizer.json")
    parser.add_argument("--counts", default=None, metavar="DIR",
                        help="train from counts written earlier (a run folder or its counts/), skipping the corpus")
    parser.add_argument("--superword-transition", type=int, default=None, metavar="T",
                        help="SuperBPE: learn merges inside pre-tokens until the vocabulary holds T ids (counted "
                             "like --vocab-size), then merges that may bridge words up to --vocab-size")
    parser.add_argument("--superword-max-words", type=int, default=pretokenize.SUPERWORD_MAX_WORDS, metavar="W",
                        help="SuperBPE: pre-tokens per superword unit at most (default "
                             f"{pretokenize.SUPERWORD_MAX_WORDS})")
    add_source_arguments(parser, split=True)


def check_args(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> None:
    """Every contradiction or impossible value of the tool's own flags, as a UserError."""
    if args.counts:
        if args.input:
            raise UserError("--counts trains from counts written earlier and reads no corpus: "
                            "give either --counts or --input, not both")
        refuse_leftovers(rest, parser, "with --counts no corpus is read and no Beam pipeline runs")
    for token in args.special_token:
        check_special_token(token, token)
    if args.vocab_size < 1:
        raise UserError("--vocab-size must be positive")
    if args.vocab_size > MAX_IDS + len(set(args.special_token)):
        raise UserError(f"--vocab-size {args.vocab_size:,} is too large: the merge loop makes at most "
                        f"{MAX_IDS:,} ids (plus the special tokens)")
    if args.min_count < 1 or args.min_frequency < 1:
        raise UserError("--min-count and --min-frequency must be at least 1")
    if args.count_threads is not None and args.count_threads < 1:
        raise UserError(f"--count-threads must be at least 1, got {args.count_threads}")
    if args.max_token_length is not None and args.max_token_length < 1:
        raise UserError(f"--max-token-length must be at least 1, got {args.max_token_length}")
    if args.split_digits and args.digit_group is not None:
        raise UserError("--split-digits and --digit-group exclude each other (--split-digits is --digit-group 1)")
    if args.digit_group is not None and args.digit_group < 1:
        raise UserError(f"--digit-group must be at least 1, got {args.digit_group}")
    text_rules_of(args)
    memory = [url for url in [*(args.input or []), args.output, args.counts or ""] if url.startswith("memory://")]
    if memory:
        raise UserError(f"memory:// URLs live inside one process, and training counts in a process of its own: "
                        f"{', '.join(memory)}")
    base = 256 if args.pattern.lower() != "classic" else 1
    if args.vocab_size < base + len(set(args.special_token)) + 1 and base == 256:
        raise UserError(f"--vocab-size {args.vocab_size} is too small: the byte alphabet alone is 256 ids, plus "
                        f"{len(set(args.special_token))} special tokens, plus at least one merge")
    check_superword_args(args)


def check_superword_args(args: argparse.Namespace) -> None:
    """--superword-transition and --superword-max-words, as a UserError when they cannot work."""
    transition = args.superword_transition
    if transition is None:
        if args.superword_max_words != pretokenize.SUPERWORD_MAX_WORDS:
            raise UserError("--superword-max-words only applies with --superword-transition")
        return
    if args.pattern.lower() == "classic":
        raise UserError("--superword-transition needs a byte-level pattern: classic mode drops whitespace, "
                        "so no merge could bridge words")
    low = 256 + len(set(args.special_token))
    if not low <= transition < args.vocab_size:
        raise UserError(f"--superword-transition {transition} must be at least {low} (the 256 bytes plus "
                        f"{len(set(args.special_token))} special tokens) and below --vocab-size {args.vocab_size}")
    if args.superword_max_words < 2:
        raise UserError(f"--superword-max-words must be at least 2, got {args.superword_max_words}")
    if args.max_token_length is not None:
        raise UserError("--superword-transition does not take --max-token-length (phase two starts from whole "
                        "phase-one tokens, which Hugging Face's rule never limits)")
    if text_rules_of(args).pre_tokenizer is not None:
        raise UserError("--superword-transition takes a digit rule only with a named --pattern (gpt2, gpt4, "
                        "o200k): the units must be one split regex")


def check_counts_options(counts_dir: str, args: argparse.Namespace) -> None:
    """Counts made with other text options would train a tokenizer that encodes differently from
    what it was trained on: a UserError."""
    made_with = read_json(join(counts_dir, "_totals.json")).get("text_options", reports.text_options())
    if made_with != text_options_of(args):     # (older counts have no record: made with none)
        raise UserError(f"the counts in {counts_dir} were made with {describe_text_options(made_with)}, not "
                        f"{describe_text_options(text_options_of(args))}: train with their options, or count again")


def describe_text_options(options: dict) -> str:
    """`--normalize NFKC --split-digits`-style, or `no text options`."""
    flags = [f"--{key.replace('_', '-')}" + ("" if options[key] is True else f" {options[key]}")
             for key in reports.text_options() if options.get(key) not in (None, False)]
    return " ".join(flags) or "no text options"


def run(argv: list[str]) -> dict:
    """Run `tokenbeam train ARGV`; returns the train report. UserError for bad usage, IncompleteRun
    when no tokenizer could be trained on the whole corpus."""
    return command.run(COMMAND, argv)


def run_parsed(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> dict:
    """The training job of parsed flags; `rest` is what the parser left, for the counting process to
    sort into Beam's flags and more inputs (this process never imports Beam)."""
    set_quiet(args.quiet)
    check_args(args, rest, parser)
    return train(args, rest, option_strings(parser))


def train(args: argparse.Namespace, rest: list[str], tool_options: list[str]) -> dict:
    timing: dict[str, float] = {}
    started = time.perf_counter()
    implementation = implementation_from_environment()
    specials = list(dict.fromkeys(args.special_token))
    if args.counts:
        counts_dir = args.counts if not exists(join(args.counts, "counts")) else join(args.counts, "counts")
        inputs = None
        check_pattern(args.pattern, implementation)
        if not exists(join(counts_dir, "_totals.json")):
            raise UserError(f"no counts found in {counts_dir} (expected _totals.json and part-*.parquet)")
        check_counts_options(counts_dir, args)
        check_superword_counts(read_json(join(counts_dir, "_totals.json")), args, counts_dir)
        claim_output(args.output, "train")
        clear_tokenizer_files(args.output)
        mark_output(args.output, "train")
        counting = None
    else:
        # Counting needs nothing from this process but the command line: start it first, and check
        # the pattern here meanwhile (compiling it also warms the merge loop's pre-tokenizer).
        job = {"args": {k: v for k, v in vars(args).items() if k != "command"}, "rest": rest,
               "tool_options": tool_options, "implementation": asdict(implementation)}
        counting = CountingProcess(job)
        try:
            check_pattern(args.pattern, implementation)
            import_counts_reader()
        except BaseException:
            counting.stop()
            raise
        inputs = counting.wait()["inputs"]
        counts_dir = join(args.output, "counts")
        timing["count"] = time.perf_counter() - started
    t0 = time.perf_counter()
    try:
        totals = reports.upgrade_totals(read_json(join(counts_dir, "_totals.json")))
        account = account_of(totals)
    except ValueError as exc:
        raise RuntimeError(f"record accounting is broken: {exc}") from None
    warn_shard_errors(totals["shard_errors"], args.allow_shard_errors)
    failure = incomplete_run(RunFigures.of_file(totals), args.allow_shard_errors, VERDICT_WORDS)
    if failure is not None:
        if counting is not None:
            write_text_atomic(join(args.output, "train_report.json"),
                              json.dumps(dict(corpus_report(totals, inputs), complete=False, error=str(failure)),
                                         indent=1, ensure_ascii=False) + "\n")
        raise failure
    warn_mostly_rejected(account)
    if args.counts and args.max_unique is not None:
        cut = budget_of_counts(counts_dir, args.max_unique)
        totals = dict(totals, budget=reports.budget_report(cut, totals["pretokens"]))
    else:
        cut = None
    counts = load_counts(counts_dir, cut)
    units = None
    if args.superword_transition is not None:
        from schemas.tables import SUPERWORD_DIR      # (pyarrow, imported while the counting ran)
        units = load_counts(join(counts_dir, SUPERWORD_DIR))
    timing["load_counts"] = time.perf_counter() - t0
    if not counts:
        raise IncompleteRun(f"nothing to train on: {account.records_written:,} records counted, but every "
                            f"pre-token was seen fewer than --min-count {args.min_count} times")
    if totals.get("budget"):
        say(describe_budget(totals["budget"]))
    say(f"merge loop: {len(counts):,} unique pre-tokens, target {args.vocab_size:,} ids"
        + (f"; superword units: {len(units):,} unique, from {args.superword_transition:,} ids"
           if units is not None else ""))
    from bpe_ops import train_bpe

    t0 = time.perf_counter()
    bar = ProgressBar(max(1, args.vocab_size - 256 - len(specials)))
    try:
        tok = train_bpe(counts, vocab_size=args.vocab_size, pattern=args.pattern, special_tokens=specials,
                        min_frequency=args.min_frequency, tie_break=args.tie_break,
                        progress=None if is_quiet() else bar,    # quiet: no call per merge to draw nothing
                        max_token_length=args.max_token_length, **text_options_of(args),
                        superword_transition=args.superword_transition,
                        superword_max_words=args.superword_max_words, superword_counts=units,
                        implementation=implementation)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    bar.close()
    timing["merge_loop"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    tokenizer_url = upload_tokenizer(tok, args.output)
    tiktoken = formats.tiktoken_recipe(tok)
    if not tiktoken["identical"]:
        warn(tiktoken["note"])
    result = tok.training
    total_bytes = sum(map(mul, map(len, counts), counts.values())) if args.pattern.lower() != "classic" \
        else totals["bytes"]
    base_vocab = tok.vocab_size - len(specials) - (len(result.merges) - result.duplicate_merges)
    if result.phase_one_merges is None:
        curve = compression_curve(result.initial_tokens, total_bytes, result.tokens_saved, base_vocab)
    else:
        curve = superword_curve(result, total_bytes, sum(map(mul, map(len, units), units.values())), base_vocab)
    report = {
        "version": reports.TRAIN_REPORT_VERSION, "complete": True, "tokenizer_sha256": tok.sha256,
        "vocab_size": tok.vocab_size, "pattern": args.pattern, "special_tokens": specials,
        "tie_break": args.tie_break, "min_frequency": args.min_frequency, "min_count": args.min_count,
        "max_token_length": args.max_token_length, "text_options": text_options_of(args),
        "normalizer": tok.normalizer_spec, "pre_tokenizer": tok.pre_tokenizer_spec, "tiktoken": tiktoken,
        **corpus_report(totals, inputs if inputs is not None else {"counts": args.counts}),
        "merges": len(result.merges), "tied_merges": result.tied_merges,
        "duplicate_merges": result.duplicate_merges, "stop_reason": result.stop_reason,
        "compression_curve": curve, "superword": superword_report(args, result, totals, tok),
        "budget": totals.get("budget"),
    }
    plot_curve(curve, join(args.output, "compression_curve.png"))
    timing["write"] = time.perf_counter() - t0
    timing["total"] = time.perf_counter() - started
    report["timing_seconds"] = {k: round(v, 3) for k, v in timing.items()}
    # Each process's own peak, and the larger of them: the launcher stays small (no Beam, no counts)
    # while the counting process runs, and loads the counts once it has exited.
    peaks = {"launcher": round(own_peak_rss_mb(), 1)}
    if counting is not None:
        peaks["counting"] = round(counting.peak_rss_mb, 1)
    report["peak_rss_mb"] = max(peaks.values())
    report["peak_rss_mb_by_process"] = peaks
    write_text_atomic(join(args.output, "train_report.json"), json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    write_text_atomic(join(args.output, SUCCESS), json.dumps(
        {"version": reports.TRAIN_REPORT_VERSION, "tokenizer_sha256": tok.sha256, "inputs": report["inputs"],
         ACCOUNT_KEY: report[ACCOUNT_KEY],
         "files": [name for name in TOKENIZER_FILES[:-1] if name != "tokenizer.tiktoken" or tiktoken["written"]]},
        indent=1, sort_keys=True) + "\n")
    say(f"trained {tok.vocab_size:,} ids ({len(result.merges):,} merges, {result.tied_merges:,} tied, stop: "
        f"{result.stop_reason}) from {account.records_written:,} records ({account.records_rejected:,} rejected, "
        f"{account.shards_failed} of {account.shards_read} shard(s) failed) in {timing['total']:.1f}s -> {tokenizer_url}")
    return report


def describe_budget(budget: dict) -> str:
    """The one line about --max-unique."""
    return (f"--max-unique {budget['max_unique']:,}: kept {budget['unique_after']:,} of {budget['unique_before']:,} "
            f"unique pre-tokens (count {budget['threshold']:,} or more), {budget['share_kept']:.2%} of "
            f"{budget['pretokens']:,} occurrences")


def superword_curve(result, pretoken_bytes: int, unit_bytes: int, base_vocab: int) -> list[dict]:
    """The compression curve of a SuperBPE run: phase one on the pre-token counts, then phase two on
    the superword units (tokens per byte of each phase's own table; the two can differ a little at
    the transition, where the units start from phase one's merges replayed over whole units)."""
    k = result.phase_one_merges
    one = compression_curve(result.initial_tokens, pretoken_bytes, result.tokens_saved[:k], base_vocab)
    two = compression_curve(result.superword_initial_tokens, unit_bytes, result.tokens_saved[k:], base_vocab + k)
    return one + [dict(point, phase=2) for point in two]


def superword_report(args: argparse.Namespace, result, totals: dict, tok) -> dict | None:
    """The SuperBPE section of train_report.json (None without --superword-transition)."""
    if args.superword_transition is None:
        return None
    return dict(zip(reports.SUPERWORD_KEYS, (
        args.superword_transition, args.superword_max_words, tok.pattern, result.phase_one_merges,
        len(result.merges) - result.phase_one_merges, totals.get("superword_units", 0),
        totals.get("unique_superword_units_before_pruning", 0), totals.get("unique_superword_units_after_pruning", 0))))


def check_superword_counts(totals: dict, args: argparse.Namespace, counts_dir: str) -> None:
    """With --counts and --superword-transition: the counts must hold the superword units of this
    --pattern and --superword-max-words, else a UserError saying how to get them."""
    if args.superword_transition is None:
        return
    wanted = units_pattern_of(args)
    found = totals.get("superword_pattern")
    if found != wanted:
        had = ("no superword units (counted without --superword-transition)" if found is None
               else "the superword units of another --pattern or --superword-max-words")
        raise UserError(f"{counts_dir} holds {had}: count the corpus again with --superword-transition, "
                        f"--pattern {args.pattern} and --superword-max-words {args.superword_max_words}")


def corpus_report(totals: dict, inputs) -> dict:
    """The train report's account of the corpus, from the counting stage's totals."""
    return {"inputs": inputs, ACCOUNT_KEY: totals[ACCOUNT_KEY], "shard_errors": totals["shard_errors"],
            "bytes": totals["bytes"], "pretokens": totals["pretokens"],
            "unique_pretokens_before_pruning": totals["unique_pretokens_before_pruning"],
            "unique_pretokens_after_pruning": totals["unique_pretokens_after_pruning"]}


COMMAND = Command(name="train", help="train a BPE tokenizer on sharded text (Beam)",
                  usage="tokenbeam train --output DIR --vocab-size N --input GLOB [options] [INPUT ...]",
                  description=__doc__.split("\n")[0], add_arguments=add_arguments, run=run_parsed, beam=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.train ARGV` (the same as `tokenbeam train ARGV`)."""
    return command.main(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())

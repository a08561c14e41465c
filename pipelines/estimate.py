"""`tokenbeam estimate`: count a dataset's tokens before you run, from a random sample of its bytes.

Uncompressed JSONL and text-line files are sampled by byte windows: windows of `WINDOW` bytes at
uniform starts, one from each of n equal strata of the dataset's bytes, each read with a little
text before it (pipelines/datasets/byte_windows.py), so a long record costs a window, not its whole line.
Files that must be read through (compressed, Parquet, text split on a separator or one record per
file) are read in full and each record kept with the sample's probability. Both are strata of one
estimate (bpe_ops/sample_estimate.py): tokens, records, bytes, words and the ratios bytes per token
and tokens per word, each with a 95% interval, plus a projection of the tokenize job's time on this
machine from the rate the sample was encoded at.

    tokenbeam estimate --tokenizer runs/tok/tokenizer.json --input 'corpus/*.jsonl' [--sample 0.5%]
"""
from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass

from bpe_ops.sample_estimate import Estimate, StratumSample
from bpe_ops.stats import count_words, record_stats, utf8_length

from pipelines.core import command
from pipelines.core.command import Command, implementation_from_environment
from pipelines.core.errors import IncompleteRun, UserError, error, os_error_reason, warn
from pipelines.core.files import filesystem, write_text_atomic
from pipelines.datasets.shards import add_source_arguments, expand, source_options
from pipelines.datasets.tokenizer_files import load_tokenizer

DEFAULT_SAMPLE = "0.5%"
MIN_DRAWS = 1000              # windows drawn by offset at the least: strata small enough to share records
MIN_RECORDS = 30              # records of files read through at the least (a reservoir where fewer were kept)
WINDOW = 128                  # bytes of a window drawn by offset
FIXED_SECONDS = 3.0           # a tokenize run's fixed cost on the local runner (Beam's start, the tokenizer)
FIGURES = ("records", "tokens", "bytes", "chars", "words", "rejected")
WITH_INTERVALS = ("tokens", "words")


def sample_fraction(text: str) -> float:
    """`--sample`: a share of the dataset's bytes, `0.5%` or `0.005`; in (0, 1]."""
    value = text.strip()
    try:
        share = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a share: {text!r} (e.g. 0.5% or 0.005)") from None
    if not 0 < share <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 100%: {text!r}")
    return share


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json (or a folder holding one), or a tiktoken "
                                                           "rank file with --pattern")
    parser.add_argument("--pattern", default=None, metavar="NAME_OR_REGEX",
                        help="with a tiktoken rank file as --tokenizer: its split pattern")
    add_source_arguments(parser)
    parser.add_argument("--sample", type=sample_fraction, default=sample_fraction(DEFAULT_SAMPLE), metavar="SHARE",
                        help=f"share of the dataset's bytes to read, e.g. 0.5%% or 0.005 (default "
                             f"{DEFAULT_SAMPLE.replace('%', '%%')}); at least {MIN_DRAWS} windows of {WINDOW} bytes are drawn")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random sample (default 0)")
    parser.add_argument("--output", default=None, metavar="FILE",
                        help="also write the estimate as JSON to FILE (any fsspec URL)")
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help=argparse.SUPPRESS)


@dataclass(frozen=True)
class Projection:
    """What a full tokenize run would take here: the sample's encoding rate spread over `cores`."""
    mb_per_cpu_second: float
    cores: int
    seconds: float


def run(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    options = source_options(args)
    shards = expand(list(args.input) + list(args.inputs), options)
    tok = load_tokenizer(args.tokenizer, implementation_from_environment(), args.pattern)
    started = time.perf_counter()
    sampler = Sampler(tok, options, random.Random(args.seed))
    from pipelines.datasets.byte_windows import offset_readable
    by_offset = [s for s in shards if offset_readable(s, options)]
    read_through = [s for s in shards if not offset_readable(s, options)]
    total_bytes = sum(s.size for s in shards)
    strata, unreadable = [], []
    if by_offset:
        strata.append(sampler.by_offset(by_offset, args.sample, unreadable))
    if read_through:
        strata.append(sampler.read_through(read_through, args.sample, unreadable))
    for url, reason in unreadable:
        (warn if args.allow_shard_errors else error)(f"cannot read {url}: {reason}")
    if unreadable and not args.allow_shard_errors:
        raise IncompleteRun(f"{len(unreadable)} of {len(shards)} inputs could not be read; no estimate "
                            f"(--allow-shard-errors estimates from the others)")
    estimate = Estimate(strata)
    if not estimate.strata or estimate.total("records").value == 0 or (by_offset and not sampler.field_seen
                                                                        and not first_line_has_text(by_offset[0], options)):
        raise UserError("the sample holds no record: is --text-field right?")
    elapsed = time.perf_counter() - started
    projection = project(sampler, total_bytes)
    report = describe(estimate, strata, shards, by_offset, read_through, elapsed, projection, args)
    print(render(report))
    if args.output:
        try:
            write_text_atomic(args.output, json.dumps(report, indent=2) + "\n")
        except OSError as exc:
            raise UserError(f"cannot write {args.output}: {os_error_reason(exc)}") from None
    return 0


class Sampler:
    """Draws records and measures them with the tokenizer, keeping the encoding's CPU time."""

    def __init__(self, tok, options, rng: random.Random):
        self.tok, self.options, self.rng = tok, options, rng
        self.encode_seconds = 0.0
        self.encoded_bytes = 0
        self.field_seen = False       # a window read the text field's key or a whole record

    def figures(self, item) -> dict[str, float]:
        """A record's figures (a Rejected one counts only as rejected, a blank line as nothing)."""
        from pipelines.datasets.sources import Record
        if item is None:
            return {}
        if not isinstance(item, Record):
            return {"rejected": 1}
        start = time.process_time()
        ids = self.tok.encode(item.text)
        self.encode_seconds += time.process_time() - start
        n_tokens, n_bytes, n_chars, n_words = record_stats(item.text, ids)
        self.encoded_bytes += n_bytes
        return {"records": 1, "tokens": n_tokens, "bytes": n_bytes, "chars": n_chars, "words": n_words}

    def pieces_figures(self, pieces) -> dict[str, float]:
        """The figures of what a window holds: a whole line's record as `figures` gives them; a piece
        of a longer line as the growth of each count from its context to its context and text (the
        record counted where its line starts)."""
        total: dict[str, float] = {}
        for piece in pieces:
            if piece.is_whole:
                figures = self.figures(piece.whole)
            else:
                figures = {"records": int(piece.starts_record), **self.growth(piece.context, piece.text)}
            for name, value in figures.items():
                total[name] = total.get(name, 0) + value
        return total

    def growth(self, context: str, text: str) -> dict[str, float]:
        """How much tokens, bytes, characters and words grow when `text` follows `context`."""
        if not text:
            return {}
        start = time.process_time()
        n_tokens = len(self.tok.encode(context + text)) - (len(self.tok.encode(context)) if context else 0)
        self.encode_seconds += time.process_time() - start
        n_bytes = utf8_length(text)
        self.encoded_bytes += n_bytes + 2 * utf8_length(context)
        n_words = count_words(context + text) - (count_words(context) if context else 0)
        return {"tokens": n_tokens, "bytes": n_bytes, "chars": len(text), "words": n_words}

    def by_offset(self, shards, share: float, unreadable: list) -> StratumSample:
        """Windows of `WINDOW` bytes, enough for `share` of the shards' bytes to be read (and at least
        `MIN_DRAWS`), one drawn uniformly from each of as many equal strata of the possible starts."""
        from pipelines.datasets.byte_windows import MARGIN, TAIL, window_pieces
        from pipelines.datasets.sources import Record
        total = sum(s.size for s in shards)
        sample = StratumSample(total_bytes=sum(s.size + WINDOW - 1 for s in shards), systematic=True)
        if total == 0:
            return sample
        n = max(MIN_DRAWS, math.ceil(share * total / (WINDOW + MARGIN + TAIL)))
        ends = [0]
        for s in shards:
            ends.append(ends[-1] + s.size + WINDOW - 1)
        handles = {}
        try:
            for stratum in range(n):
                at = min(int((stratum + self.rng.random()) * sample.total_bytes / n), sample.total_bytes - 1)
                k = bisect.bisect_right(ends, at) - 1
                shard = shards[k]
                if shard.url in dict(unreadable):
                    continue
                first = at - ends[k] - (WINDOW - 1)
                try:
                    if shard.url not in handles:
                        fs, path = filesystem(shard.url)
                        handles[shard.url] = fs.open(path, "rb")
                    pieces, read = window_pieces(handles[shard.url], shard, self.options, max(first, 0),
                                                 min(first + WINDOW, shard.size), MARGIN)
                except OSError as exc:
                    unreadable.append((shard.url, os_error_reason(exc)))
                    continue
                sample.add_window_draw(WINDOW, self.pieces_figures(pieces), read)
                self.field_seen = self.field_seen or any(p.field_seen or isinstance(p.whole, Record) for p in pieces)
        finally:
            for f in handles.values():
                f.close()
        return sample

    def read_through(self, shards, share: float, unreadable: list) -> StratumSample:
        """Read every record of these shards, keeping each with probability `share`; where that keeps
        fewer than `MIN_RECORDS`, a simple random sample of `MIN_RECORDS` records (a reservoir) instead."""
        from pipelines.datasets.sources import ShardError, read_shard
        kept, reservoir, population, read = [], [], 0, 0
        for shard in shards:
            for item in read_shard(shard, self.options):
                if isinstance(item, ShardError):
                    unreadable.append((shard.url, item.detail))
                    break
                population += 1
                if self.rng.random() < share:
                    kept.append(self.figures(item))
                slot = population - 1 if population <= MIN_RECORDS else self.rng.randrange(population)
                if slot < MIN_RECORDS:
                    reservoir[slot:slot + 1] = [item]
            read += shard.size
        sample = StratumSample()
        if len(kept) >= MIN_RECORDS:
            sample.add_bernoulli(kept, share, read)
        else:
            sample.add_simple_random([self.figures(item) for item in reservoir], population, read)
        return sample


def first_line_has_text(shard, options) -> bool:
    """Whether the shard's first line holds a record: asked when no window read the text field's key
    (a piece of a line whose key was not read is taken to be text), so that a wrong --text-field fails."""
    from pipelines.datasets.byte_windows import record_at
    from pipelines.datasets.sources import Record
    fs, path = filesystem(shard.url)
    with fs.open(path, "rb") as f:
        return isinstance(record_at(f, shard, options, 0)[1], Record)


def project(sampler: Sampler, total_bytes: int) -> Projection | None:
    """The tokenize job's time on this machine, from the sample's encoding rate (bytes of text per CPU
    second, one thread) over every core, plus the fixed cost of a run."""
    if sampler.encode_seconds <= 0 or sampler.encoded_bytes == 0:
        return None
    rate = sampler.encoded_bytes / sampler.encode_seconds / 1e6
    cores = os.cpu_count() or 1
    return Projection(rate, cores, total_bytes / 1e6 / rate / cores + FIXED_SECONDS)


def describe(estimate: Estimate, strata, shards, by_offset, read_through, elapsed, projection, args) -> dict:
    """The estimate as JSON-ready data: each figure's value and 95% interval, and how it was made."""
    def figure(f):
        return {"value": f.value, "low": f.low, "high": f.high}
    read = sum(s.bytes_read for s in strata)
    total = sum(s.size for s in shards)
    return {
        "tokenizer": args.tokenizer,
        "inputs": len(shards), "input_bytes": total,
        "sampled_by_offset": len(by_offset), "read_through": len(read_through),
        "sample": args.sample, "seed": args.seed,
        "draws": sum(len(s.draws) for s in strata), "bytes_read": read,
        "seconds": round(elapsed, 3),
        "totals": {name: figure(estimate.total(name)) for name in WITH_INTERVALS},
        # Records are counted where a line starts, a line longer than the bytes read taken to be a
        # valid record; text bytes are estimated as tokens are, but their interval was not validated.
        "about": {name: estimate.total(name).value for name in FIGURES if name not in WITH_INTERVALS},
        "bytes_per_token": figure(estimate.ratio("bytes", "tokens")),
        "tokens_per_word": figure(estimate.ratio("tokens", "words")),
        "projection": None if projection is None else {
            "mb_per_cpu_second": round(projection.mb_per_cpu_second, 2), "cores": projection.cores,
            "tokenize_seconds": round(projection.seconds, 1)},
    }


def render(report: dict) -> str:
    """The estimate for a terminal: one line per figure with its interval."""
    def count(name):
        f = report["totals"][name]
        return f"{name:<16}{f['value']:>16,.0f}   (95%: {f['low']:,.0f} - {f['high']:,.0f})"

    def ratio(name):
        f = report[name]
        return f"{name.replace('_', ' '):<16}{f['value']:>16.3f}   (95%: {f['low']:.3f} - {f['high']:.3f})"
    lines = [f"estimate of {report['inputs']} input(s), {report['input_bytes'] / 1e6:,.1f} MB: {report['draws']:,} "
             f"windows or records drawn, {report['bytes_read'] / 1e6:,.2f} MB read "
             f"({report['bytes_read'] / max(report['input_bytes'], 1):.1%}) in {report['seconds']:.1f} s"]
    if report["read_through"]:
        lines.append(f"({report['read_through']} compressed or Parquet input(s) were read through)")
    lines += [count(name) for name in WITH_INTERVALS]
    lines += [ratio("bytes_per_token"), ratio("tokens_per_word")]
    about = report["about"]
    lines.append(f"{'records':<16}{about['records']:>16,.0f}   (about; text bytes about {about['bytes'] / 1e6:,.1f} MB"
                 + (f", rejected records about {about['rejected']:,.0f})" if about["rejected"] else ")"))
    p = report["projection"]
    if p:
        lines.append(f"tokenize would take about {p['tokenize_seconds']:,.0f} s here ({p['cores']} cores, "
                     f"{p['mb_per_cpu_second']:.1f} MB/s of text per core, {FIXED_SECONDS:.0f} s fixed)")
    return "\n".join(lines)


COMMAND = Command(name="estimate", help="count a dataset's tokens from a sample of its records, with 95%% "
                                         "intervals, before you run",
                  usage="tokenbeam estimate --tokenizer T --input GLOB [--sample 0.5%%] [options] [INPUT ...]",
                  description=__doc__.splitlines()[0], add_arguments=add_arguments, run=run,
                  leftovers="estimate runs no Beam pipeline")


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.estimate ARGV` (the same as `tokenbeam estimate ARGV`)."""
    return command.main(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())

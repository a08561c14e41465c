"""`tokenbeam evaluate`: tokenizers side by side on a dataset -> evaluate.json, evaluate.md, evaluate.png.

    shards -> EvaluateShard (each shard read through pipelines.datasets.shards; every batch encoded with every
    tokenizer: a TokenTally per (tokenizer, group); each word type counted per group)
      tallies     -> CombinePerKey(MergeTallies)                                   \\
      word counts -> CombinePerKey(add_counts), keyed by word -> batches ->          -> rows -> report
                     ScoreWordTypes (a WordTally per (tokenizer, group)) -> CombinePerKey(MergeTallies)  /
    -> evaluate.json, evaluate.md, evaluate.png (plot extra), _SUCCESS (written last)

Each `--tokenizer` takes the per-tokenizer flags that follow it (before the next `--tokenizer`):
`--name`, `--pattern` and `--special-token` (tiktoken rank files), and `--merges K,...` or
`--vocab-sizes V,...` (the same merge list cut to each size, evaluated beside the whole one).
The figures and their definitions are bpe_ops/evaluation.py's; the report layout schemas/evaluate.py's;
the steps are in pipelines/steps/evaluate_steps.py, the report's writing in evaluate_report.py.
"""
from __future__ import annotations

import argparse
import posixpath
import sys
import time
from dataclasses import dataclass, field

from pipelines.core.beam_options import (beam, check_worker_paths, local_cores_per_worker, one_local_worker,
                                         pipeline_options, split_beam_args)
from bpe_ops.evaluation import merge_count_for_vocab_size, truncated
from schemas.accounts import account_of
from pipelines.core import command
from pipelines.core.command import Command, add_quiet_argument, implementation_from_environment, option_strings
from pipelines.core.errors import UserError, pipeline_failures, quiet_worker_stderr, say, set_quiet
from pipelines.core.folders import claim_output, mark_output
from pipelines.core.files import exists, join, read_json, remove, remove_stale_temporaries, remove_tree
from pipelines.datasets.outcome import RunFigures, RunWords, incomplete_run
from pipelines.datasets.shards import (REJECTED_DIR, add_source_arguments, expand, source_options as make_source_options,
                                       warn_mostly_rejected, warn_shard_errors)
from pipelines.datasets.tokenizer_files import TokenizerRef, check_id_range, identify_tokenizer, parse_special_token
from pipelines.steps.evaluate_report import SUCCESS, ReportContext, cell, write_report
from pipelines.steps.evaluate_steps import (WORD_BATCH, EvaluateShard, MergeAccounts, MergeTallies, ScoreWordTypes,
                                            Variant, add_counts, to_row)

OUTPUTS = ("evaluate.json", "evaluate.md", "evaluate.png")
VERDICT_WORDS = RunWords(done="evaluated", lost="no _SUCCESS", nothing="nothing was evaluated", last="; no _SUCCESS")


def build_evaluate_pipeline(p, shards, refs: list[TokenizerRef], variants: list[Variant], vocab_sizes: list[int],
                            source_options, output: str, context: ReportContext, fail_fast: bool = False,
                            encode_threads: int = 1, spread: bool = True):
    shard_elements = p | "Shards" >> beam.Create(shards)
    if spread:
        shard_elements = shard_elements | "SpreadShards" >> beam.Reshuffle()
    results = shard_elements | "EvaluateShard" >> beam.ParDo(EvaluateShard(
        refs, variants, source_options, output, context.group_field, fail_fast, encode_threads)
    ).with_outputs(EvaluateShard.WORDS, EvaluateShard.ACCOUNTS, main="tallies")
    token_tallies = results.tallies | "MergeTokenTallies" >> beam.CombinePerKey(MergeTallies())
    word_tallies = (results[EvaluateShard.WORDS]
                    | "CountWordTypes" >> beam.CombinePerKey(add_counts)
                    | "BatchWordTypes" >> beam.BatchElements(min_batch_size=WORD_BATCH, max_batch_size=WORD_BATCH)
                    | "ScoreWordTypes" >> beam.ParDo(ScoreWordTypes(refs, variants, context.group_field is not None))
                    | "MergeWordTallies" >> beam.CombinePerKey(MergeTallies()))
    rows = ({"tokens": token_tallies, "words": word_tallies}
            | "JoinTallies" >> beam.CoGroupByKey()
            | "Rows" >> beam.Map(to_row, variants, vocab_sizes)
            | "CollectRows" >> beam.combiners.ToList())
    account = results[EvaluateShard.ACCOUNTS] | "MergeAccounts" >> beam.CombineGlobally(MergeAccounts())
    (p | "Report" >> beam.Create([None])
     | "WriteReport" >> beam.Map(write_report, beam.pvalue.AsSingleton(rows), beam.pvalue.AsSingleton(account),
                                 output, context))


# --- command line -------------------------------------------------------------------------------

@dataclass
class TokenizerSpec:
    """One `--tokenizer` and the per-tokenizer flags that followed it."""
    path: str
    name: str | None = None
    pattern: str | None = None
    special_tokens: list = field(default_factory=list)
    merges: list | None = None
    vocab_sizes: list | None = None


def _sizes(flag: str, text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 0:
        raise UserError(f"{flag} {text!r}: expected a comma-separated list of non-negative integers, "
                        f"e.g. {flag} 1,200,500,1000")
    return sorted(set(values))


class _NewTokenizer(argparse.Action):
    def __call__(self, parser, namespace, value, option_string=None):
        namespace.tokenizers = [*(getattr(namespace, "tokenizers", None) or []), TokenizerSpec(value)]


class _OfTokenizer(argparse.Action):
    """A flag that belongs to the `--tokenizer` before it; refused before any, or twice for one."""

    def __call__(self, parser, namespace, value, option_string=None):
        specs = getattr(namespace, "tokenizers", None) or []
        if not specs:
            parser.error(f"{option_string} applies to the --tokenizer before it; give --tokenizer first")
        spec, key = specs[-1], self.dest.removeprefix("of_")
        if key == "special_tokens":
            spec.special_tokens.append(value)
            return
        if getattr(spec, key) is not None:
            parser.error(f"{option_string} given twice for --tokenizer {spec.path}")
        if key in ("merges", "vocab_sizes"):
            if (spec.merges if key == "vocab_sizes" else spec.vocab_sizes) is not None:
                parser.error(f"--merges and --vocab-sizes both given for --tokenizer {spec.path}: give one")
            value = _sizes(option_string, value)
        setattr(spec, key, value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quiet_argument(parser)
    parser.add_argument("--tokenizer", action=_NewTokenizer, dest="tokenizers", metavar="T",
                        help="a tokenizer to evaluate (tokenizer.json, a folder holding one, or a tiktoken rank "
                             "file; repeatable); the flags after it up to the next --tokenizer are its own")
    parser.add_argument("--name", action=_OfTokenizer, dest="of_name", metavar="NAME", help="the preceding tokenizer's name in the report")
    parser.add_argument("--pattern", action=_OfTokenizer, dest="of_pattern", metavar="NAME_OR_REGEX",
                        help="the preceding tokenizer's split pattern, for a tiktoken rank file")
    parser.add_argument("--special-token", action=_OfTokenizer, dest="of_special_tokens", metavar="TOKEN=ID",
                        help="a special token of the preceding tiktoken rank file (repeatable)")
    parser.add_argument("--merges", action=_OfTokenizer, dest="of_merges", metavar="K,K,...",
                        help="also evaluate the preceding tokenizer's first K merges, for each K")
    parser.add_argument("--vocab-sizes", action=_OfTokenizer, dest="of_vocab_sizes", metavar="V,V,...",
                        help="also evaluate the preceding tokenizer cut to each vocabulary size V")
    parser.add_argument("--output", required=True, help="output folder (local or fsspec URL)")
    parser.add_argument("--group-field", default=None, metavar="FIELD",
                        help="figures per value of FIELD (a language, a source) besides the whole dataset's")
    parser.add_argument("--encode-threads", type=int, default=None, metavar="N",
                        help="threads that encode each batch in a worker (default: the cores of a local worker)")
    add_source_arguments(parser)


def run(argv: list[str]) -> dict:
    """Run `tokenbeam evaluate ARGV`; returns evaluate.json's content. UserError for bad usage,
    IncompleteRun when the output is not complete."""
    return command.run(COMMAND, argv)


def load_variants(specs: list[TokenizerSpec]):
    """Load every tokenizer once (launcher side) and list what is evaluated: each tokenizer, and
    before it its cut sizes. Returns (refs, variants, tokenizers entries of the report, vocab sizes)."""
    implementation = implementation_from_environment()
    refs, bases, variants, entries, vocab_sizes = [], [], [], [], []
    names = set()
    for b, spec in enumerate(specs):
        specials = dict(parse_special_token(s) for s in spec.special_tokens) if spec.special_tokens else None
        tok, ref = identify_tokenizer(spec.path, implementation, spec.pattern, specials)
        check_id_range(tok, spec.path)
        refs.append(ref)
        bases.append(tok)
        name = spec.name or default_name(spec.path)
        if name in names:
            raise UserError(f"two tokenizers are named {name!r}: give each its own --name after its --tokenizer")
        names.add(name)
        merges = getattr(tok, "merges", None)
        sizes = spec.merges
        if spec.vocab_sizes is not None or spec.merges is not None:
            flag = "--vocab-sizes" if spec.vocab_sizes is not None else "--merges"
            if merges is None:
                raise UserError(f"{flag} cuts a BPE merge list to a size; {spec.path} has no merge list")
            try:
                if spec.vocab_sizes is not None:
                    sizes = sorted({merge_count_for_vocab_size(tok, v) for v in spec.vocab_sizes})
                cut = [(k, truncated(tok, k)) for k in sizes if k != len(merges)]
            except ValueError as exc:
                raise UserError(f"{flag} for --tokenizer {spec.path}: {exc}") from None
            for k, small in cut:
                variant = Variant(f"{name}@{k}", b, k)
                if variant.name in names:
                    raise UserError(f"two tokenizers are named {variant.name!r}: rename one with --name")
                names.add(variant.name)
                variants.append(variant)
                vocab_sizes.append(small.vocab_size)
                entries.append({"name": variant.name, "path": spec.path, "sha256": small.sha256,
                                "vocab_size": small.vocab_size, "merges": k, "truncated_from": name})
        variants.append(Variant(name, b))
        vocab_sizes.append(tok.vocab_size)
        entries.append({"name": name, "path": spec.path, "sha256": tok.sha256, "vocab_size": tok.vocab_size,
                        "merges": len(merges) if merges is not None else None, "truncated_from": None})
    return refs, variants, entries, vocab_sizes


def default_name(path: str) -> str:
    """A tokenizer's name in the report: its folder's name for a `tokenizer.json` (or a folder), else
    the file's name without its extension. `runs/tok32k/tokenizer.json` -> 'tok32k'."""
    path = path.rstrip("/")
    base = posixpath.basename(path)
    if base == "tokenizer.json" or "." not in base:
        parent = posixpath.basename(posixpath.dirname(path)) if base == "tokenizer.json" else base
        return parent or base
    return base.rsplit(".", 1)[0]


OTHER_COMMANDS_FILES = ("stats.json", "train_report.json", "pack.json")


def clear_output(output: str) -> None:
    """Make `output` this run's alone: remove an earlier evaluate's report, `_SUCCESS` and `rejected/`
    (every run rewrites them whole). A folder holding another command's output is refused rather
    than cleared: its `_SUCCESS` and `rejected/` are not ours to remove."""
    success = join(output, SUCCESS)
    foreign = [name for name in OTHER_COMMANDS_FILES if exists(join(output, name))]
    if not foreign and exists(success):
        try:
            foreign = [] if "evaluate" in read_json(success) else [SUCCESS]
        except ValueError:
            foreign = [SUCCESS]
    if foreign:
        raise UserError(f"--output {output} holds another command's output ({foreign[0]}); give an empty folder "
                        f"or an earlier evaluate's")
    for name in (SUCCESS, *OUTPUTS):
        remove(join(output, name))
    remove_tree(join(output, REJECTED_DIR))
    remove_stale_temporaries(output)


def run_parsed(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> dict:
    started_at = time.time()
    set_quiet(args.quiet)
    beam_args, bare = split_beam_args(rest, option_strings(parser))
    inputs = list(args.input) + bare
    specs = getattr(args, "tokenizers", None) or []
    if not specs:
        raise UserError("no tokenizer: give --tokenizer T (repeatable) (see `tokenbeam evaluate --help`)")
    if args.encode_threads is not None and args.encode_threads < 1:
        raise UserError(f"--encode-threads must be at least 1, got {args.encode_threads}")
    refs, variants, entries, vocab_sizes = load_variants(specs)
    source_options = make_source_options(args, (), (args.group_field,) if args.group_field else ())
    shards = expand(inputs, source_options)
    options, runner = pipeline_options(beam_args)
    check_worker_paths(options, [*inputs, args.output, *(s.path for s in specs)])
    claim_output(args.output, "evaluate")
    clear_output(args.output)
    mark_output(args.output, "evaluate")
    say(f"evaluate: {len(shards)} shard(s), {sum(s.size for s in shards) / 1e6:.1f} MB, "
        f"{len(variants)} tokenizer(s) ({', '.join(v.name for v in variants)}) -> {args.output}")
    context = ReportContext(sorted(set(inputs)), args.group_field, entries, started_at, args.allow_shard_errors)
    with pipeline_failures(args.output), quiet_worker_stderr(), beam.Pipeline(runner=runner, options=options) as p:
        build_evaluate_pipeline(p, shards, refs, variants, vocab_sizes, source_options, args.output, context,
                                args.fail_fast, args.encode_threads or local_cores_per_worker(options, runner),
                                spread=not one_local_worker(options, runner))
    report = read_json(join(args.output, "evaluate.json"))
    warn_shard_errors(report["shard_errors"], args.allow_shard_errors)
    for row in report["rows"]:
        if row["group"] is None:
            say(f"  {row['tokenizer']}: {cell(row['bytes_per_token'], 'ratio')} bytes/token, "
                f"{cell(row['tokens_per_word'], 'ratio')} tokens/word, {cell(row['words_kept_whole'], 'share')} "
                f"of words kept whole, {cell(row['raw_byte_share'], 'share')} raw bytes")
    account = account_of(report)
    say(f"done: {account.records_read:,} records read, {account.records_written:,} evaluated, "
        f"{account.records_rejected:,} rejected in {time.time() - started_at:.1f}s -> "
        f"{join(args.output, 'evaluate.md')}" + ("" if exists(join(args.output, "evaluate.png")) else
                                                 "; evaluate.png skipped (install the plot extra: matplotlib)"))
    failure = incomplete_run(RunFigures.of_file(report), args.allow_shard_errors, VERDICT_WORDS)
    if failure is not None:
        raise failure
    warn_mostly_rejected(account)
    return report


COMMAND = Command(name="evaluate", help="tokenizers side by side on a dataset: compression, fertility, words kept "
                                         "whole, raw bytes (Beam)",
                  usage="tokenbeam evaluate --tokenizer A [--tokenizer B ...] --output DIR --input GLOB [options] "
                        "[INPUT ...]",
                  description=__doc__.split("\n")[0], add_arguments=add_arguments, run=run_parsed, beam=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.evaluate ARGV` (the same as `tokenbeam evaluate ARGV`)."""
    return command.main(COMMAND, argv)


if __name__ == "__main__":
    import gc

    code = main()
    gc.freeze()
    sys.exit(code)

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
The figures and their definitions are bpe_ops/evaluation.py's; the report layout schemas/evaluate.py's.
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import json
import posixpath
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from pipelines.core.beam_options import (beam, check_worker_paths, local_cores_per_worker, one_local_worker,
                                    pipeline_options, split_beam_args)
from bpe_ops.evaluation import (TokenTally, WordTally, iter_words, merge_count_for_vocab_size, raw_byte_ids,
                                truncated, whitespace_ids, word_pieces, id_mask)
from bpe_ops.stats import batch_stats
from schemas.accounts import ACCOUNT_KEY, Account, account_of
from schemas.evaluate import DEFINITIONS, EVALUATE_KIND, EVALUATE_SCHEMA_VERSION, success_json, validate_evaluate
from pipelines.core import command
from pipelines.core.command import Command, add_quiet_argument, implementation_from_environment, option_strings
from pipelines.core.errors import ShardFailure, UserError, pipeline_failures, quiet_worker_stderr, \
    say, set_quiet, shard_done
from pipelines.core.folders import claim_output, mark_output
from pipelines.core.files import (exists, join, open_atomic, read_json, remove, remove_stale_temporaries,
                             remove_tree, write_text_atomic, writing)
from pipelines.statistics.groups import group_value
from pipelines.datasets.outcome import RunFigures, RunWords, incomplete_run
from pipelines.datasets.shards import REJECTED_DIR, ShardReader, add_source_arguments, describe_shard_error, expand, \
    source_options as make_source_options, warn_mostly_rejected, warn_shard_errors
from pipelines.datasets.tokenizer_files import (TokenizerRef, check_id_range, identify_tokenizer, load_identified_tokenizer,
                                      parse_special_token)

ENCODE_BATCH_RECORDS = 256        # records encoded per encode_arrays call
WORD_FLUSH_ENTRIES = 200_000      # (word, group) counts a shard holds before it hands them on
WORD_BATCH = 2_048                # word types scored per call
MAX_GROUPS = 1_000                # --group-field values in one shard: a category (language, source), not an id
OUTPUTS = ("evaluate.json", "evaluate.md", "evaluate.png")
SUCCESS = "_SUCCESS"
VERDICT_WORDS = RunWords(done="evaluated", lost="no _SUCCESS", nothing="nothing was evaluated", last="; no _SUCCESS")
WHOLE = (0, "")                   # the scope of the whole dataset; a group is (1, its value)


# --- what is evaluated ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """One column of the table: tokenizer `base` (an index into the loaded ones), whole (`merges`
    None) or cut to its first `merges` merges."""
    name: str
    base: int
    merges: int | None = None


def build_tokenizers(bases: list, variants: list[Variant]) -> list:
    """The tokenizer of each variant from the loaded bases (a cut one is built here)."""
    return [bases[v.base] if v.merges is None else truncated(bases[v.base], v.merges) for v in variants]


def load_tokenizers(refs: list[TokenizerRef], variants: list[Variant]) -> list:
    """Worker side: the tokenizer of each variant, from the files the launcher identified. Each DoFn
    instance loads its own: a compiled encoder and its cache serve one thread at a time."""
    try:
        bases = [load_identified_tokenizer(ref) for ref in refs]
    except UserError as exc:
        raise ShardFailure(str(exc)) from exc
    return build_tokenizers(bases, variants)


def scope_name(scope: tuple[int, str]) -> str | None:
    return None if scope == WHOLE else scope[1]


class EvaluateShard(beam.DoFn):
    """Read one shard and encode every batch with every tokenizer. Emits `((variant, scope), TokenTally)`
    for the whole dataset and each group, `(word, Counter({group: count}))` (WORDS) for every word type, at most
    WORD_FLUSH_ENTRIES counts held at a time, and the shard's account (ACCOUNTS)."""
    WORDS = "words"
    ACCOUNTS = "accounts"

    def __init__(self, refs: list[TokenizerRef], variants: list[Variant], source_options, output: str,
                 group_field: str | None, fail_fast: bool = False, encode_threads: int = 1):
        self.refs = refs
        self.variants = variants
        self.source_options = source_options
        self.output = output
        self.group_field = group_field
        self.fail_fast = fail_fast
        self.encode_threads = encode_threads

    def setup(self):
        self.toks = load_tokenizers(self.refs, self.variants)
        self.raw_byte_ids = [raw_byte_ids(tok) for tok in self.toks]

    def process(self, shard):
        self.shard = shard
        self.group_names: set = set()
        self.tallies: dict = {}
        self.words: Counter = Counter()
        reader = ShardReader(shard, self.source_options, self.output, self.fail_fast)
        batch = []
        for record in reader:
            batch.append(record)
            if len(batch) >= ENCODE_BATCH_RECORDS:
                self.add_batch(batch)
                batch = []
                if len(self.words) >= WORD_FLUSH_ENTRIES:
                    yield from self.flush_words()
        self.add_batch(batch)
        account = reader.finish()
        yield from self.flush_words()
        yield from self.tallies.items()
        yield beam.pvalue.TaggedOutput(self.ACCOUNTS, account)
        shard_done(f"evaluated {shard.relpath}: {account.records:,} records with {len(self.toks)} tokenizer(s), "
                   f"{account.rejected} rejected")

    def add_batch(self, batch) -> None:
        if not batch:
            return
        texts = [r.text for r in batch]
        groups = [group_value(r.keep.get(self.group_field)) for r in batch] if self.group_field else None
        rows: dict[str, list[int]] = {}
        for i, g in enumerate(groups or ()):
            rows.setdefault(g, []).append(i)
        self.group_names.update(rows)
        if len(self.group_names) > MAX_GROUPS:
            raise ShardFailure(f"--group-field {self.group_field}: more than {MAX_GROUPS:,} values in "
                               f"{self.shard.relpath}; a group field names a few categories (a language, a source)")
        columns = None
        for v, tok in enumerate(self.toks):
            arrays = tok.encode_arrays(texts, self.encode_threads)
            if columns is None:
                columns = batch_stats(texts, arrays)[1:]       # bytes, chars, words: the same for all
            n_tokens = list(map(len, arrays))
            self.tally(v, WHOLE).add_batch(n_tokens, *columns, arrays)
            for g, picked in rows.items():
                self.tally(v, (1, g)).add_batch([n_tokens[i] for i in picked],
                                                *([c[i] for i in picked] for c in columns),
                                                [arrays[i] for i in picked])
        for text, g in zip(texts, groups or [None] * len(texts)):
            self.words.update((w, g) for w in iter_words(text))

    def tally(self, v: int, scope: tuple[int, str]) -> TokenTally:
        key = (v, scope)
        tally = self.tallies.get(key)
        if tally is None:
            tally = self.tallies[key] = TokenTally(self.toks[v].vocab_size, self.raw_byte_ids[v])
        return tally

    def flush_words(self):
        by_word: dict[str, Counter] = {}
        for (word, g), n in self.words.items():
            by_word.setdefault(word, Counter())[g] = n
        self.words = Counter()
        for item in by_word.items():
            yield beam.pvalue.TaggedOutput(self.WORDS, item)


def add_counts(counters) -> Counter:
    """The `{group: count}` Counters of one word type, summed (a CombinePerKey function)."""
    total = Counter()
    for counts in counters:
        total.update(counts)
    return total


class MergeTallies(beam.CombineFn):
    """The exact merge of TokenTallies (or of WordTallies). The empty accumulator is None: its
    vocabulary is the first input's."""

    def create_accumulator(self):
        return None

    def add_input(self, acc, tally):
        return tally if acc is None else acc.merge(tally)

    def merge_accumulators(self, accs):
        out = None
        for acc in accs:
            if acc is not None:
                out = acc if out is None else out.merge(acc)
        return out

    def extract_output(self, acc):
        return acc


class ScoreWordTypes(beam.DoFn):
    """A batch of `(word, {group: count})` -> `((variant, scope), WordTally)`: each word type's pieces
    under every tokenizer, tallied for the whole dataset and for each group it occurs in."""

    def __init__(self, refs: list[TokenizerRef], variants: list[Variant], grouped: bool):
        self.refs = refs
        self.variants = variants
        self.grouped = grouped

    def setup(self):
        self.toks = load_tokenizers(self.refs, self.variants)
        self.space_masks = [id_mask(whitespace_ids(tok.vocab), tok.vocab_size) for tok in self.toks]

    def process(self, batch):
        import numpy as np

        words = [w for w, _ in batch]
        # Which words of the batch each scope holds, with their counts there: the same for every tokenizer.
        scopes = {WHOLE: (np.arange(len(batch)), np.array([sum(c.values()) for _, c in batch], dtype=np.int64))}
        if self.grouped:
            members: dict = {}
            for i, (_, counts) in enumerate(batch):
                for g, n in counts.items():
                    members.setdefault(g, ([], []))
                    members[g][0].append(i)
                    members[g][1].append(n)
            for g, (picked, counts) in members.items():
                scopes[(1, g)] = (np.array(picked), np.array(counts, dtype=np.int64))
        for v, tok in enumerate(self.toks):
            pieces = np.array(word_pieces(tok, words, self.space_masks[v]), dtype=np.int64)
            for scope, (picked, counts) in scopes.items():
                tally = WordTally()
                tally.add_many(pieces[picked], counts)
                yield (v, scope), tally


class MergeAccounts(beam.CombineFn):
    """The shards' accounts summed (`schemas.accounts.Account`), with their shard errors in order."""

    def create_accumulator(self):
        return Account(), []

    def add_input(self, acc, account):
        return self.merge_accumulators([acc, (account.account(), account.shard_errors)])

    def merge_accumulators(self, accs):
        total, errors = self.create_accumulator()
        for account, shard_errors in accs:
            total = total + account
            errors = sorted(errors + shard_errors, key=lambda e: (e["source"], e["rows_read"], e["reason"]))
        return total, errors

    def extract_output(self, acc):
        return acc


def to_row(key_and_tallies, variants: list[Variant], vocab_sizes: list[int]) -> dict:
    """One row of the table from a key's TokenTally and WordTally (either may be missing: a group
    whose records hold no word has no WordTally)."""
    (v, scope), grouped = key_and_tallies
    tokens = next(iter(grouped["tokens"]), None) or TokenTally(vocab_sizes[v], ())
    words = next(iter(grouped["words"]), None) or WordTally()
    return {"tokenizer": variants[v].name, "group": scope_name(tuple(scope)), **tokens.figures(), **words.figures()}


# --- the report -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReportContext:
    """What the report says besides the figures, from the launcher."""
    inputs: list
    group_field: str | None
    tokenizers: list            # the `tokenizers` entries of evaluate.json
    started_at: float
    allow_shard_errors: bool


def report_json(rows: list[dict], account_and_errors: tuple, context: ReportContext) -> dict:
    order = {t["name"]: i for i, t in enumerate(context.tokenizers)}
    rows = sorted(rows, key=lambda r: (order[r["tokenizer"]], r["group"] is not None, r["group"] or ""))
    account, shard_errors = account_and_errors
    report = {
        "kind": EVALUATE_KIND, "schema_version": EVALUATE_SCHEMA_VERSION, "inputs": context.inputs,
        "group_field": context.group_field, "definitions": DEFINITIONS, "tokenizers": context.tokenizers,
        "rows": rows, ACCOUNT_KEY: account.to_json(), "records": account.records_written,
        "shard_errors": shard_errors,
        "timing": {"started_at": context.started_at, "elapsed_seconds": round(time.time() - context.started_at, 3)},
    }
    validate_evaluate(report)
    return report


def _cell(value, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "share":
        return f"{100 * value:.1f}%"
    if kind == "int":
        return f"{value:,}"
    return f"{value:.3f}" if value < 10 else f"{value:.2f}"


TABLE = (("bytes/token", "bytes_per_token", "ratio"), ("tokens/char", "tokens_per_char", "ratio"),
         ("tokens/word", "tokens_per_word", "ratio"), ("words kept whole", "words_kept_whole", "share"),
         ("word types kept whole", "word_types_kept_whole", "share"),
         ("pieces/word type", "pieces_per_word_type", "ratio"), ("raw-byte share", "raw_byte_share", "share"),
         ("ids used", "used_ids", "int"), ("utilisation", "vocab_utilisation", "share"))
SIZE_TABLE = (("merges", "merges", "int"), ("vocabulary", "vocab_size", "int"), ("pieces in use", "used_ids", "int"),
              ("pieces/word type", "pieces_per_word_type", "ratio"), ("pieces/word", "pieces_per_word", "ratio"),
              ("word types kept whole", "word_types_kept_whole", "share"),
              ("words kept whole", "words_kept_whole", "share"), ("bytes/token", "bytes_per_token", "ratio"))


def _table(columns, rows: list[dict], first: tuple[str, str]) -> list[str]:
    head = [first[0]] + [c[0] for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * len(columns)]
    for row in rows:
        name = " ".join(str(row[first[1]]).split()).replace("|", "\\|")    # a group value is any text
        lines.append("| " + " | ".join([name] + [_cell(row.get(key), kind) for _, key, kind in columns]) + " |")
    return lines


def render_markdown(report: dict, picture: str | None) -> str:
    rows = report["rows"]
    whole = [r for r in rows if r["group"] is None]
    account = account_of(report)
    out = ["# Tokenizer evaluation", "",
           f"{account.records_written:,} records ({account.records_read:,} read, {account.records_rejected:,} rejected) "
           f"of {account.shards_read} shard(s): {', '.join(report['inputs'])}", ""]
    out += _table(TABLE, whole, ("tokenizer", "tokenizer")) + [""]
    merges = {t["name"]: t for t in report["tokenizers"]}
    series = [t for t in report["tokenizers"] if t["truncated_from"]]
    if series:
        out += ["## One merge list at several sizes", ""]
        for base in dict.fromkeys(t["truncated_from"] for t in series):
            names = [t["name"] for t in report["tokenizers"] if t["truncated_from"] == base or t["name"] == base]
            sized = sorted(({**r, "merges": merges[r["tokenizer"]]["merges"]} for r in whole if r["tokenizer"] in names),
                           key=lambda r: r["merges"])
            out += [f"`{base}`:", ""] + _table(SIZE_TABLE[1:], sized, ("merges", "merges")) + [""]
    if report["group_field"]:
        out += [f"## Per {report['group_field']}", ""]
        grouped = sorted((r for r in rows if r["group"] is not None), key=lambda r: (r["group"], r["tokenizer"]))
        out += _table((("records", "records", "int"),) + TABLE[:7], [{**r, "key": f"{r['group']} · {r['tokenizer']}"}
                                                                       for r in grouped], ("group · tokenizer", "key"))
        out += [""]
    out += ["## Definitions", ""] + [f"- **{k}**: {v}" for k, v in report["definitions"].items()] + [""]
    if picture:
        out += [f"![compression against vocabulary size]({picture})", ""]
    for error in report["shard_errors"]:
        out.append(f"- shard error: {describe_shard_error(error)}")
    return "\n".join(out) + "\n"


def plot_report(report: dict, f) -> None:
    """Compression (bytes per token) against vocabulary size, one line per group and tokenizer family
    (a merge list with its cut sizes is one line), written as PNG into file object `f`."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 6), layout="constrained")
    ax = fig.subplots()
    family = {t["name"]: t["truncated_from"] or t["name"] for t in report["tokenizers"]}
    lines: dict = {}
    for r in report["rows"]:
        if r["bytes_per_token"] is not None:
            lines.setdefault((family[r["tokenizer"]], r["group"]), []).append((r["vocab_size"], r["bytes_per_token"]))
    markers = dict(zip(dict.fromkeys(family.values()), "osD^vP*X"))
    groups = sorted({g for _, g in lines if g is not None})
    colors = {g: f"C{i % 10}" for i, g in enumerate(groups)}       # one colour per group, any family
    for (fam, group), points in sorted(lines.items(), key=lambda kv: (kv[0][0], kv[0][1] is not None, kv[0][1] or "")):
        points.sort()
        label = f"{fam}: {'all' if group is None else group}".encode("ascii", "backslashreplace").decode()
        ax.plot(*zip(*points), marker=markers.get(fam, "o"), linewidth=2.5 if group is None else 1,
                color="black" if group is None else colors[group], label=label)
    ax.set_xscale("log")
    ax.set_xlabel("vocabulary size (ids)")
    ax.set_ylabel("bytes per token (higher: more compression)")
    ax.set_title(f"Compression on {report['records']:,} records (marker: tokenizer, colour: group)")
    if len(lines) <= 40:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.savefig(f, format="png", dpi=100)


def plot_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None       # the `plot` extra


def write_report(_, rows: list[dict], account: tuple, output: str, context: ReportContext) -> dict:
    """evaluate.json, evaluate.md, evaluate.png (with the plot extra) and, when complete, _SUCCESS."""
    report = report_json(rows, account, context)
    picture = None
    if plot_available():
        buffer = io.BytesIO()
        plot_report(report, buffer)
        url = join(output, "evaluate.png")
        with writing(url), open_atomic(url) as f:
            f.write(buffer.getvalue())
        picture = "evaluate.png"
    for name, text in (("evaluate.json", json.dumps(report, indent=1, sort_keys=True, allow_nan=False) + "\n"),
                       ("evaluate.md", render_markdown(report, picture))):
        url = join(output, name)
        with writing(url):
            write_text_atomic(url, text)
    if report["records"] and (context.allow_shard_errors or not report["shard_errors"]):
        url = join(output, SUCCESS)
        with writing(url):
            write_text_atomic(url, json.dumps(success_json(report), sort_keys=True) + "\n")
    return report


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
            say(f"  {row['tokenizer']}: {_cell(row['bytes_per_token'], 'ratio')} bytes/token, "
                f"{_cell(row['tokens_per_word'], 'ratio')} tokens/word, {_cell(row['words_kept_whole'], 'share')} "
                f"of words kept whole, {_cell(row['raw_byte_share'], 'share')} raw bytes")
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

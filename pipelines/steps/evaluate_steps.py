"""evaluate's Beam steps: the tokenizers evaluated (`Variant`: a file, or its merge list cut to a
size), the shard DoFn that encodes every batch with every tokenizer and counts word types per group
(`EvaluateShard`), the combines of its tallies and accounts, the scoring of word types, and the rows
of the report.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pipelines.core.beam_options import beam  # first: it hides Beam's import-time apitools warning
from bpe_ops.evaluation import (TokenTally, WordTally, id_mask, iter_words, raw_byte_ids, truncated, whitespace_ids,
                                word_pieces)
from bpe_ops.stats import batch_stats
from schemas.accounts import Account
from pipelines.core.errors import ShardFailure, UserError, shard_done
from pipelines.datasets.shards import ShardReader
from pipelines.datasets.tokenizer_files import TokenizerRef, load_identified_tokenizer
from pipelines.statistics.groups import group_value

ENCODE_BATCH_RECORDS = 256        # records encoded per encode_arrays call
WORD_FLUSH_ENTRIES = 200_000      # (word, group) counts a shard holds before it hands them on
WORD_BATCH = 2_048                # word types scored per call
MAX_GROUPS = 1_000                # --group-field values in one shard: a category (language, source), not an id
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

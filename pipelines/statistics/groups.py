"""Statistics per group of records: `tokenize --group-field NAME` (a language, a source, ...).

Each record's value of the field names its group; every group gets a calibrated `stats.json` of its
own, `OUTPUT/groups/<value>.stats.json`, and the dataset's `stats.json` lists them (`groups`: value ->
records, tokens, file), so that `tokenbeam drift A B` judges each group of A against the same group
of B and says which groups appeared or vanished: a new language showing up is visible even when the
totals barely move. Every record is still counted once in the dataset's `stats.json`.

    grouped = GroupedSummaries(vocab_size=256, raw_byte_ids=range(256))
    grouped.add_batch(["en", "ja", None], n_tokens=[3, 2, 1], n_bytes=[9, 6, 1], n_chars=[9, 2, 1],
                      n_words=[2, 1, 1], id_arrays=[[104, 105, 33], [227, 129], [33]], record_ids=["a", "b", "c"])
    sorted(value for value, _ in grouped.elements())     # ['(none)', 'en', 'ja']

    (partial_summaries                                   # (value, Summary) from TokenizeShard
     | "GroupStats" >> GroupStats(vocab_size, "runs/tokens", facts))   # -> groups/en.stats.json, ...
"""
from __future__ import annotations

import json
import re
from typing import Iterable, Iterator, Mapping, Sequence

from pipelines.core.beam_options import beam  # first: it hides Beam's import-time apitools warning

from bpe_ops.stats import Summary
from pipelines.statistics.summaries import MergeSummaries, count_ids

GROUPS_FOLDER = "groups"
NO_GROUP = "(none)"          # records without the field (or with null in it)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def group_value(value) -> str:
    """A field value as a group name: strings as they are, other JSON values as JSON, missing as
    `(none)`. `group_value("ja")` -> 'ja'; `group_value(3)` -> '3'; `group_value(None)` -> '(none)'."""
    if value is None:
        return NO_GROUP
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def group_file_name(value: str) -> str:
    """The file of a group: its name with every character outside [A-Za-z0-9._-] percent-encoded
    (UTF-8), so any value is a safe, distinct file name. `group_file_name("pt-BR")` ->
    'pt-BR.stats.json'; `group_file_name("a/b")` -> 'a%2Fb.stats.json'."""
    safe = _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode("utf-8")), value)
    return (safe if safe not in ("", ".", "..") else f"%{safe}") + ".stats.json"


class GroupedSummaries:
    """The per-group partial summaries of one shard, filled batch by batch inside the tokenize DoFn,
    calibrated like the shard's own Summary."""

    def __init__(self, vocab_size: int, *, raw_byte_ids: Iterable[int] | None = None):
        self.vocab_size = vocab_size
        self.raw_byte_ids = None if raw_byte_ids is None else tuple(raw_byte_ids)
        self.groups: dict[str, Summary] = {}

    def add_batch(self, values: Sequence, n_tokens: Sequence[int], n_bytes: Sequence[int], n_chars: Sequence[int],
                  n_words: Sequence[int], id_arrays: Sequence, record_ids: Sequence[str],
                  digit_runs: Sequence | None = None) -> None:
        rows: dict[str, list[int]] = {}
        for i, value in enumerate(values):
            rows.setdefault(group_value(value), []).append(i)
        for name, picked in rows.items():
            summary = self.groups.get(name)
            if summary is None:
                summary = self.groups[name] = Summary(self.vocab_size, raw_byte_ids=self.raw_byte_ids)
            columns = [[column[i] for i in picked] for column in (n_tokens, n_bytes, n_chars, n_words)]
            ids = [id_arrays[i] for i in picked]
            runs = None if digit_runs is None else [digit_runs[i] for i in picked]
            summary.add_batch(*columns, record_ids=[record_ids[i] for i in picked], id_arrays=ids, digit_runs=runs)
            count_ids(summary, ids)

    def elements(self) -> Iterator[tuple[str, Summary]]:
        return iter(sorted(self.groups.items()))


class WriteGroupStats(beam.DoFn):
    """Write one group's merged Summary as `OUTPUT/groups/<value>.stats.json`; emit its index entry."""

    def __init__(self, output: str, tokenizer_facts, field: str):
        self.output = output
        self.tokenizer_facts = tokenizer_facts
        self.field = field

    def process(self, value_and_summary):
        value, summary = value_and_summary
        yield value, write_group_stats(self.output, value, summary, self.tokenizer_facts, self.field)


def write_group_stats(output: str, value: str, summary: Summary, tokenizer_facts, field: str) -> dict:
    """Write `OUTPUT/groups/<value>.stats.json` atomically; returns the group's entry in the
    dataset's `groups` index (records, tokens, file)."""
    from pipelines.core.files import join, write_text_atomic, writing
    from schemas.stats import dump_stats, stats_json

    name = group_file_name(value)
    url = join(output, GROUPS_FOLDER, name)
    with writing(url):
        write_text_atomic(url, dump_stats(stats_json(summary, tokenizer_facts,
                                                     {"group": {"field": field, "value": value}})))
    return {"records": summary.records, "tokens": summary.tokens, "file": f"{GROUPS_FOLDER}/{name}"}


class GroupStats(beam.PTransform):
    """(value, partial Summary) pairs -> one stats.json per group; output: `{value: index entry}`,
    one element, for the dataset's stats.json."""

    def __init__(self, vocab_size: int, output: str, tokenizer_facts, field: str):
        super().__init__()
        self.vocab_size = vocab_size
        self.output = output
        self.tokenizer_facts = tokenizer_facts
        self.field = field

    def expand(self, partials):
        return (partials
                | "MergePerGroup" >> beam.CombinePerKey(MergeSummaries(self.vocab_size))
                | "WriteGroupStats" >> beam.ParDo(WriteGroupStats(self.output, self.tokenizer_facts, self.field))
                | "GroupIndex" >> beam.CombineGlobally(IndexGroups()))


class IndexGroups(beam.CombineFn):
    """`{value: {records, tokens, file}}` of every group, sorted by value (empty when no group)."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, value_and_entry):
        value, entry = value_and_entry
        acc[value] = entry
        return acc

    def merge_accumulators(self, accs):
        out = {}
        for acc in accs:
            out.update(acc)
        return out

    def extract_output(self, acc) -> Mapping:
        return dict(sorted(acc.items()))

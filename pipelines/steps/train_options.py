"""The options both of train's processes need: the launcher (pipelines/train.py, no Beam) and its
counting process (pipelines/steps/train_count.py, the Beam pipeline), which must read the command line the
same way: the text rules and split pattern of the flags, the budget cut of --max-unique, and the
files a run's merge loop writes (which either process clears before it starts)."""
from __future__ import annotations

import argparse
from array import array

from bpe_ops import pretokenize
from bpe_ops.count_table import tie_order
from bpe_ops.implementation import DEFAULT, Implementation
from bpe_ops.text_rules import TextRules, text_rules
from schemas import reports
from pipelines.core.errors import UserError
from pipelines.core.files import join, remove

SUCCESS = "_SUCCESS"
# The files the merge loop writes: a run removes the earlier run's before it starts, so a failed run
# never leaves a tokenizer that looks like its result.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.tiktoken", "train_report.json", "compression_curve.png", SUCCESS)


def units_pattern_of(args: argparse.Namespace) -> str | None:
    """The superword units' split pattern of a `tokenbeam train` command line (on the pattern its text
    rules make), None without --superword-transition."""
    if args.superword_transition is None:
        return None
    return pretokenize.superword_pattern(text_rules_of(args).pattern, args.superword_max_words)


def text_options_of(args: argparse.Namespace) -> dict:
    """The counting options of the flags, as _totals.json and train_report.json record them."""
    return reports.text_options(normalize=getattr(args, "normalize", None),
                                lowercase=getattr(args, "lowercase", False),
                                split_digits=getattr(args, "split_digits", False),
                                digit_group=getattr(args, "digit_group", None))


def text_rules_of(args: argparse.Namespace) -> TextRules:
    """How the flags split and normalize text (bpe_ops/text_rules.py); contradictions are a UserError."""
    try:
        return text_rules(args.pattern, **text_options_of(args))
    except ValueError as exc:
        raise UserError(str(exc)) from None


def check_pattern(pattern: str, implementation: Implementation = DEFAULT) -> None:
    """Compile the split pattern (cached for the merge loop); a pattern that does not compile, an
    unknown pattern name, or a regex that would leave text unsplit (and so untokenized) is a
    UserError."""
    try:
        pretokenize.compile_pattern(pattern, implementation)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    gap = getattr(pretokenize, "pattern_coverage_gap", None)
    if gap is not None and pattern.lower() != "classic":
        missed = gap(pattern)
        if missed:
            raise UserError(f"--pattern {pattern!r}: {missed}; a tokenizer cannot encode text its pattern skips")


def within_budget(table, cut: dict, bucket: int):
    """The rows of one bucket's counts table that a budget's `cut` keeps, in their order: those
    counted more than its threshold, and of those counted exactly that, the bucket's share by
    `tie_order` (all of them when the cut lists no share for the bucket). Arrow arrays are made from
    buffers: `pa.array` asks for pandas, which the counting process hides."""
    threshold, keep = cut["threshold"], cut["ties_kept_by_bucket"].get(bucket)
    counts = table.column("count").to_pylist()
    ties = [row for row, n in enumerate(counts) if n == threshold]
    if keep is not None and keep < len(ties):
        keys = table.column("pretoken").take(index_array(ties)).to_pylist()
        ties = [ties[i] for i in sorted(range(len(keys)), key=lambda i: tie_order(keys[i]))[:keep]]
    return table.take(index_array(sorted([*(row for row, n in enumerate(counts) if n > threshold), *ties])))


def index_array(rows: list[int]):
    import pyarrow as pa

    return pa.Array.from_buffers(pa.uint64(), len(rows), [None, pa.py_buffer(array("Q", rows))])


def clear_tokenizer_files(output: str) -> None:
    """Remove the files an earlier run's merge loop wrote into `output` (_SUCCESS first, so that an
    interrupted cleanup never leaves it vouching for what is left)."""
    for name in reversed(TOKENIZER_FILES):
        remove(join(output, name))

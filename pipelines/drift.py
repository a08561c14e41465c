"""`tokenbeam drift BASELINE CURRENT...`: did tokenization (or the data) drift between stats.json files?

The command line only: its arguments, finding the stats files, and running the comparison of a
pair (with its groups when both sides have them) or of several files over time. How each figure is
judged against sampling noise is `pipelines/monitoring/drift_judging.py`; the text and files shown,
`pipelines/monitoring/drift_reports.py`. Verdicts: `ok` (within noise), `moderate` (beyond noise, within the
threshold), `significant` (beyond noise and past the threshold). Exit code 0 = nothing at or past
`--fail-on`, 1 = drift, 2 = error.
"""
from __future__ import annotations

import argparse
import math
import sys

from pipelines.core import command
from pipelines.core.command import Command
from pipelines.monitoring.drift_judging import Thresholds, compare_over_time, judging_errors, load_stats, pair_drifted
from pipelines.monitoring.drift_reports import render_over_time, show_pair, write_groups, write_over_time, write_report
from schemas import drift as layout
from pipelines.core.inputs import GLOB_CHARS, Sought, find_files

# What the arguments may name: a stats.json or a folder holding one; the current side also a glob.
BASELINE = Sought(flag="", in_folder="stats.json", many=False, as_written=True)
CURRENT = Sought(flag="", in_folder="stats.json", many=True, as_written=True)


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def _level(text: str) -> float:
    value = _non_negative(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = Thresholds()
    parser.add_argument("baseline", help="stats.json of the reference data (or the folder holding it)")
    parser.add_argument("current", nargs="+",
                        help="stats.json of the new data (or its folder); several files or a glob such as "
                             "'OUTPUT/windows/*.stats.json' judge each one against the baseline, over time")
    parser.add_argument("--report", metavar="DIR", help="write drift.json, drift.md and drift.png here")
    parser.add_argument("--fail-on", choices=[layout.MODERATE, layout.SIGNIFICANT], default=d.fail_on,
                        help="exit 1 when a metric reaches this verdict (default: %(default)s)")
    parser.add_argument("--level", type=_level, default=d.level, metavar="A",
                        help="family-wise false-alarm level of the noise tests (default: %(default)s)")
    for name, help_text in (
            ("bytes-per-token-change", "relative change of bytes per token"),
            ("tokens-per-word-change", "relative change of tokens per word"),
            ("tokens-per-record-change", "relative change of mean and p90 tokens per record"),
            ("psi", "population stability index of each histogram, above its no-drift value"),
            ("js", "Jensen-Shannon divergence of token ids, above its no-drift value"),
            ("raw-byte-share-change", "change of the share of single-byte tokens"),
            ("rejected-rate-change", "change of the rejected-record rate")):
        dest = name.replace("-change", "").replace("-", "_")
        parser.add_argument(f"--max-{name}", dest=dest, type=_non_negative, default=getattr(d, dest),
                            metavar="X", help=f"{help_text}: flagged past X when beyond noise (default: %(default)s)")
    parser.add_argument("--allow-different-tokenizers", action="store_true",
                        help="compare stats made with different tokenizers (token-id figures left out)")


def run_parsed(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    """`tokenbeam drift` of parsed flags: 0 no drift, 1 drift; a file that cannot be read or judged is
    one line (exit 2)."""
    from pipelines.core.folders import check_finished

    thresholds = Thresholds(bytes_per_token=args.bytes_per_token, tokens_per_word=args.tokens_per_word,
                            tokens_per_record=args.tokens_per_record, psi=args.psi, js=args.js,
                            raw_byte_share=args.raw_byte_share, rejected_rate=args.rejected_rate,
                            level=args.level, fail_on=args.fail_on)
    with judging_errors():
        (baseline_path,) = [found.url for found in find_files([args.baseline], BASELINE)]
        currents = [found.url for argument in args.current for found in find_files([argument], CURRENT)]
        for path in (baseline_path, *currents):
            check_finished(str(path), "input", "drift")
        baseline = load_stats(baseline_path)
        if len(currents) > 1 or any(c in a for a in args.current for c in GLOB_CHARS):
            judged = compare_over_time(baseline, currents, thresholds, args.allow_different_tokenizers)
            print(render_over_time(judged))
            if args.report:
                say_written(write_over_time(judged, args.report))
            return 1 if any(j.drift for j in judged) else 0
        report, groups = show_pair(baseline, baseline_path, load_stats(currents[0]), currents[0], thresholds,
                                   args.allow_different_tokenizers)
        if args.report:
            say_written(write_report(report, args.report))
            if groups:
                say_written([write_groups(groups, args.report)])
    return 1 if pair_drifted(report, groups) else 0


def say_written(urls: list[str]) -> None:
    for url in urls:
        print(f"wrote {url}", file=sys.stderr)


COMMAND = Command(
    name="drift", help="compare stats.json files (two, or a baseline and windows over time): did tokenization drift?",
    usage="tokenbeam drift BASELINE CURRENT [CURRENT ...] [options]",
    description="Compare stats.json files and say whether tokenization drifted.",
    epilog="A figure is flagged when its change is beyond sampling noise (Holm-Bonferroni at --level over the judged "
           "figures) and past its threshold. Verdicts: ok (within noise), moderate (beyond noise, within the "
           "threshold), significant (both). Exit code: 0 no drift, 1 drift (in any file judged), 2 error "
           "(unreadable, old or incompatible stats files).",
    add_arguments=add_arguments, run=run_parsed, leftovers="drift takes stats.json files and its own options")


def main(argv: list[str] | None = None) -> int:
    """`python -m pipelines.drift ARGV` (the same as `tokenbeam drift ARGV`)."""
    return command.main(COMMAND, argv)


if __name__ == "__main__":
    sys.exit(main())

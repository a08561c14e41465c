"""Judging drift: two stats.json objects in, a verdict per figure out, for the three report kinds of
`tokenbeam drift` (a pair, a series over time, the groups of a pair) and `tokenize --baseline`.

Every judged figure is compared with what sampling noise alone would give for these two samples,
with the record as the sampling unit (the statistics are `bpe_ops/drift_stats.py`):

- ratio figures (bytes per token, tokens per word, raw-byte share, mean tokens per record):
  delta-method standard errors from the per-record moments, a two-sided t test of the difference
  whose variance is the larger of the two sides' own (Welch) and the pooled no-drift one;
- p90 tokens per record: the order-statistic (binomial) interval of each side's quantile, the
  no-drift spread read off the larger side's percentiles;
- PSI of the two histograms and the Jensen-Shannon divergence of token ids: judged against their
  no-drift distribution for these sample sizes, drawn from the random groups;
- rejected-record rate: a two-proportion z test.

A figure is flagged only when its change is beyond noise (Holm-Bonferroni over all judged figures)
*and* past its practical threshold (`Thresholds`). Rendering and writing the reports is
`pipelines/monitoring/drift_reports.py`.
"""
from __future__ import annotations

import contextlib
import heapq
import math
import posixpath
from dataclasses import asdict, dataclass, field, replace
from typing import Iterator

import numpy as np

from bpe_ops.drift_stats import (Estimate, NullDistribution, holm, js_divergence, js_null, pooled_ratio_null, psi,
                                 psi_null, quantile_estimate, ratio_estimate, relative_change, t_quantile,
                                 two_sided_p, welch_df, z_quantile)
from pipelines.core import files
from schemas import drift as layout
from schemas.accounts import account_of
from schemas.stats import REBUILD_HINT, parse_stats

TOP_SHIFTED = 15


def _digit_run_groups(stats: dict) -> np.ndarray | None:
    """The number-format table of a stats.json, when it covers every record (else None)."""
    runs = stats.get("digit_runs")
    if runs is None or runs["records"] != stats["records"]:
        return None
    return np.asarray(stats["replicates"]["digit_run_counts"], dtype=float)


# ---- the comparison ---------------------------------------------------------------------------

TOKENIZATION, DATA, INFO_SECTION = "tokenization", "data", "info"


@dataclass(frozen=True)
class Thresholds:
    """When a change counts as drift: beyond sampling noise at `level` (Holm-Bonferroni over the
    judged figures) and past its practical threshold. Relative changes and shares are fractions
    (0.02 = 2%); divergences are the excess over their no-drift value for these sample sizes.

    The practical thresholds sit below the smallest constructed shift of
    benchmarks/bench_drift_calibration.py that each figure should catch, and above what no one
    would act on: the noise test alone already keeps small samples quiet, the threshold keeps a
    million-record comparison from flagging a change too small to matter."""
    # A preprocessing change (collapsed whitespace, reformatted digits) moves compression by a few
    # percent, a different domain by tens: 2% catches the former, a tokenizer that compresses
    # 2% worse costs 2% more compute for the same text.
    bytes_per_token: float = 0.02
    # Fertility moves with the same changes, a little more than compression (words get split):
    # the same 2%.
    tokens_per_word: float = 0.02
    # Record lengths are heavy-tailed (one long document moves the mean of a few hundred records
    # by tens of percent), and longer or shorter documents are a data change, not a tokenizer one:
    # only a quarter or more is worth an alarm.
    tokens_per_record: float = 0.25
    # PSI above its no-drift value: 0.1 is the conventional "moderate" band, the change at which
    # a distribution is usually called shifted.
    psi: float = 0.1
    # JS divergence of token ids above its no-drift value: English with collapsed whitespace moves
    # it by several hundredths, another domain or script by tenths; 0.02 keeps the former.
    js: float = 0.02
    # Raw single-byte tokens are the tokenizer's fallback for text it has not learnt: half a
    # percentage point more of them is already a visible loss of fit.
    raw_byte_share: float = 0.005
    # Rejected records are data loss: one percentage point.
    rejected_rate: float = 0.01
    level: float = 0.05                # family-wise false-alarm level of the noise tests
    fail_on: str = layout.SIGNIFICANT  # exit 1 from this verdict on: "moderate" or "significant"


@dataclass
class Metric:
    """One row of the report. `change_kind` says how `change` is computed and judged; `interval` is
    the change's interval at the per-figure Bonferroni level, `detectable` the smallest change
    this pair of samples would call beyond noise at that level."""
    name: str
    label: str
    section: str
    baseline: float | None
    current: float | None
    change: float | None
    change_kind: str
    threshold: float | None
    verdict: str
    interval: list[float] | None = None
    detectable: float | None = None
    p_value: float | None = None
    beyond_noise: bool | None = None
    null: dict | None = None
    note: str | None = None          # why a figure could not be judged


@dataclass
class DriftReport:
    """Every figure of a comparison; `to_json()` is drift.json."""
    thresholds: Thresholds
    baseline: dict
    current: dict
    same_tokenizer: bool
    metrics: list[Metric]
    top_shifted_tokens: list[dict]
    histograms: dict = field(repr=False)

    @property
    def judged(self) -> list[Metric]:
        return [m for m in self.metrics if m.verdict in layout.SEVERITY]

    @property
    def verdict(self) -> str:
        """The worst judged verdict."""
        return max((m.verdict for m in self.judged), key=layout.SEVERITY.get, default=layout.OK)

    @property
    def flagged(self) -> list[Metric]:
        """Metrics at or past `fail_on`."""
        bar = layout.SEVERITY[self.thresholds.fail_on]
        return [m for m in self.judged if layout.SEVERITY[m.verdict] >= bar]

    @property
    def drift(self) -> bool:
        return bool(self.flagged)

    def section_flagged(self, section: str) -> list[Metric]:
        return [m for m in self.flagged if m.section == section]

    def section_verdict(self, section: str) -> str:
        return max((m.verdict for m in self.judged if m.section == section), key=layout.SEVERITY.get,
                   default=layout.OK)

    def metric(self, name: str) -> Metric:
        return next(m for m in self.metrics if m.name == name)

    def to_json(self) -> dict:
        return {
            "kind": layout.DRIFT_KIND,
            "schema_version": layout.DRIFT_SCHEMA_VERSION,
            "baseline": self.baseline,
            "current": self.current,
            "same_tokenizer": self.same_tokenizer,
            "thresholds": asdict(self.thresholds),
            "verdict": self.verdict,
            "drift": self.drift,
            "sections": {s: {"verdict": self.section_verdict(s), "drift": bool(self.section_flagged(s)),
                             "flagged": [m.name for m in self.section_flagged(s)]} for s in (TOKENIZATION, DATA)},
            "headline": headline(self),
            "metrics": [asdict(m) for m in self.metrics],
            "top_shifted_tokens": self.top_shifted_tokens,
            "histograms": self.histograms,
        }


@dataclass
class _Test:
    """A judged figure before the Holm step: its change, the spread of the change's sampling error
    (`se`, or a no-drift distribution `null` for a divergence) and the p-value."""
    metric: Metric
    p_value: float
    se: float | None = None
    null: NullDistribution | None = None
    df: float | None = None


def _side(stats: dict) -> dict:
    """What drift.json says about one input (`path` is filled in by the command line)."""
    return {"path": None, "tokenizer_sha256": stats["tokenizer_sha256"], "records": stats["records"]}


def _p_of_difference(diff: float, se: float, df: float | None = None) -> float:
    if se > 0:
        return two_sided_p(diff / se, df)
    return 1.0 if diff == 0 else 0.0


def _ratio_test(name, label, section, base: Estimate, cur: Estimate, threshold, kind="relative",
                null: Estimate | None = None) -> _Test | Metric:
    """The change of a figure, its p-value and its interval. The interval (and the smallest
    detectable change) rests on each side's own variance (Welch); the p-value on `null`, the
    variance of the difference under "no drift" (`pooled_ratio_null`), when given: the larger of
    the two, so neither a small side that missed the tail nor a pooled spread makes noise look
    like drift."""
    if base.value is None or cur.value is None or base.variance is None or cur.variance is None \
            or (kind == "relative" and base.value == 0):
        return Metric(name, label, section, base.value, cur.value, None, kind, threshold, layout.NOT_AVAILABLE)
    diff = cur.value - base.value
    se = math.sqrt(base.variance + cur.variance)
    scale = base.value if kind == "relative" else 1.0
    metric = Metric(name, label, section, base.value, cur.value, diff / scale, kind, threshold, layout.OK)
    df = welch_df(base.variance, base.df, cur.variance, cur.df) if base.df and cur.df else None
    p_value = _p_of_difference(diff, se, df)
    if null is not None and null.variance is not None and null.variance > se * se:
        p_value = _p_of_difference(diff, math.sqrt(null.variance), null.df)
    return _Test(metric, p_value, se=se / abs(scale), df=df)


def _rate_test(name, label, section, base: tuple[int, int], cur: tuple[int, int], threshold) -> _Test | Metric:
    """A two-proportion z test: (events, trials) per side, pooled rate under "no change"."""
    (e1, n1), (e2, n2) = base, cur
    if not n1 or not n2:
        return Metric(name, label, section, None, None, None, "absolute", threshold, layout.NOT_AVAILABLE)
    r1, r2 = e1 / n1, e2 / n2
    pooled = (e1 + e2) / (n1 + n2)
    se0 = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    # The interval's spread, with one event in two added trials (Laplace): never 0, so a pair without
    # rejections still says how large a change it could have seen.
    smoothed = (e1 + e2 + 1) / (n1 + n2 + 2)
    se = max(math.sqrt(r1 * (1 - r1) / n1 + r2 * (1 - r2) / n2),
             math.sqrt(smoothed * (1 - smoothed) * (1 / n1 + 1 / n2)))
    metric = Metric(name, label, section, r1, r2, r2 - r1, "absolute", threshold, layout.OK)
    return _Test(metric, _p_of_difference(r2 - r1, se0), se=se)


def _divergence_test(name, label, section, observed: float, null: NullDistribution, threshold) -> _Test:
    """The change of a divergence is its excess over the no-drift mean; p = share of no-drift draws
    at least as large as the observed value."""
    metric = Metric(name, label, section, null.mean, observed, observed - null.mean, "divergence", threshold,
                    layout.OK, null={"mean": null.mean, "sd": null.sd, "draws": len(null.draws)})
    return _Test(metric, null.p_value(observed), null=null)


def _judge(tests: list[_Test], level: float) -> None:
    """Holm over the tests; then each verdict, interval and smallest detectable change."""
    if not tests:
        return
    per_figure = level / len(tests)      # Bonferroni: the level of each interval and detectable change
    for t, beyond in zip(tests, holm([t.p_value for t in tests], level)):
        m = t.metric
        m.p_value, m.beyond_noise = t.p_value, beyond
        if t.null is not None:
            m.detectable = t.null.quantile(1 - per_figure) - t.null.mean
            half = z_quantile(per_figure) * t.null.sd
        else:
            z = t_quantile(per_figure, t.df)
            m.detectable = z * t.se
            half = z * t.se
        m.interval = [m.change - half, m.change + half]
        # A divergence is beyond noise only above its no-drift value, so |change| is the excess.
        m.verdict = layout.verdict_for(beyond, m.change, m.threshold)


def top_shifted_tokens(baseline: dict, current: dict, n: int = TOP_SHIFTED) -> list[dict]:
    """The ids whose share of all tokens changed most (unchanged ids never), labelled from either
    file's `top` table, else shown as `#id`."""
    p, q = baseline["token_frequency"]["counts"], current["token_frequency"]["counts"]
    p_total, q_total = baseline["tokens"], current["tokens"]
    labels = {t["id"]: t["token"] for t in baseline["token_frequency"]["top"]}
    labels.update({t["id"]: t["token"] for t in current["token_frequency"]["top"]})
    changes = ((b / q_total - a / p_total, i) for i, (a, b) in enumerate(zip(p, q))
               if b / q_total != a / p_total)
    top = heapq.nsmallest(n, changes, key=lambda ci: (-abs(ci[0]), ci[1]))
    return [{"id": i, "token": labels.get(i, f"#{i}"), "baseline_share": p[i] / p_total,
             "current_share": q[i] / q_total, "change": change} for change, i in top]


def check_calibrated(stats: dict, side: str) -> None:
    """ValueError unless every record of `stats` carries the calibration data (moments, groups)."""
    covered, records = stats["moments"]["records"], stats["records"]
    if covered != records:
        raise ValueError(f"the {side} stats.json calibrates {covered:,} of its {records:,} records (its writer "
                         f"did not give record ids and token ids to Summary.add_batch); " + REBUILD_HINT)


def describe_dropout(dropout: dict | None) -> str:
    return f"with BPE-dropout p={dropout['p']} (seed {dropout['seed']})" if dropout else "without BPE-dropout"


def check_same_dropout(baseline: dict | None, current: dict | None) -> None:
    """ValueError unless both sides were encoded with the same BPE-dropout probability (stats.json's
    `dropout`, None without): dropout changes tokens per byte and every figure after it by design,
    so a difference is no tokenization drift. The seed may differ: it draws from the same distribution."""
    if (baseline and baseline["p"]) != (current and current["p"]):
        raise ValueError(f"the baseline was tokenized {describe_dropout(baseline)} and the current "
                         f"{describe_dropout(current)}: dropout changes every figure by design, so comparing them is "
                         f"not a drift question; compare datasets tokenized with the same --dropout")


def _groups(stats: dict, key: str) -> np.ndarray:
    rep = stats["replicates"]
    table = rep["token_classes"]["counts"] if key == "token_classes" else rep[key]
    return np.asarray(table, dtype=float)


def compare(baseline: dict, current: dict, thresholds: Thresholds = Thresholds(),
            allow_different_tokenizers: bool = False) -> DriftReport:
    """Compare two validated stats.json objects. ValueError (one line) when they cannot be compared:
    no records on a side, a side not calibrated on every record, or different tokenizers unless
    `allow_different_tokenizers` (then the id-based figures, JS divergence and shifted tokens, are
    left out: ids of two vocabularies do not correspond)."""
    for side, stats in (("baseline", baseline), ("current", current)):
        if stats["records"] < 2:
            raise ValueError(f"the {side} stats have {stats['records']} records: at least 2 are needed "
                             f"to tell drift from noise")
        check_calibrated(stats, side)
    check_same_dropout(baseline.get("dropout"), current.get("dropout"))
    same_tokenizer = baseline["tokenizer_sha256"] == current["tokenizer_sha256"]
    if not same_tokenizer and not allow_different_tokenizers:
        raise ValueError(f"the stats were made with different tokenizers (sha256 "
                         f"{baseline['tokenizer_sha256'][:12]}... vs {current['tokenizer_sha256'][:12]}...); "
                         f"pass --allow-different-tokenizers to compare them anyway")
    t = thresholds
    bm, cm = baseline["moments"], current["moments"]

    def ratio(name, label, section, num, den, threshold, kind="relative"):
        return _ratio_test(name, label, section, ratio_estimate(bm, num, den), ratio_estimate(cm, num, den),
                           threshold, kind, pooled_ratio_null(bm, cm, num, den))

    def p90(stats, table=None):
        table = stats["tokens_per_record"]["percentiles"] if table is None else table
        return quantile_estimate(table, stats["records"], 0.9)

    # Under "no drift" the larger side's percentiles describe both sides' distribution best (the
    # smaller one often misses the tail): the null spread of each side's p90 is read off them.
    larger = max((baseline, current), key=lambda s: s["records"])["tokens_per_record"]["percentiles"]
    p90_null = Estimate(0.0, p90(baseline, larger).variance + p90(current, larger).variance,
                        max(min(baseline["records"], current["records"]) - 1, 1))

    rows: list[_Test | Metric] = [
        ratio("bytes_per_token", "bytes per token", TOKENIZATION, "bytes", "tokens", t.bytes_per_token),
        ratio("tokens_per_word", "tokens per word", TOKENIZATION, "tokens", "words", t.tokens_per_word),
        ratio("raw_byte_share", "raw-byte token share", TOKENIZATION, "raw_byte_tokens", "tokens",
              t.raw_byte_share, "absolute"),
    ]
    if same_tokenizer:
        b_cls, c_cls = _groups(baseline, "token_classes"), _groups(current, "token_classes")
        observed = js_divergence(b_cls.sum(0), c_cls.sum(0))
        rows.append(_divergence_test("js_token_ids", "JS divergence of token ids", TOKENIZATION, observed,
                                     js_null(b_cls, c_cls, baseline["records"], current["records"]), t.js))
    else:
        rows.append(Metric("js_token_ids", "JS divergence of token ids", TOKENIZATION, None, None, None,
                           "divergence", t.js, layout.NOT_AVAILABLE))
    for key, name, label, section in (
            ("bytes_per_token_counts", "psi_bytes_per_token", "PSI bytes per token", TOKENIZATION),
            ("tokens_per_record_counts", "psi_tokens_per_record", "PSI tokens per record", DATA)):
        b_g, c_g = _groups(baseline, key), _groups(current, key)
        if b_g.sum() and c_g.sum():
            rows.append(_divergence_test(name, label, section, psi(b_g.sum(0), c_g.sum(0)),
                                         psi_null(b_g, c_g), t.psi))
        else:
            rows.append(Metric(name, label, section, None, None, None, "divergence", t.psi, layout.NOT_AVAILABLE))
    rows.append(_digit_run_test(baseline, current, t.psi))
    rows += [
        ratio("tokens_per_record_mean", "tokens per record (mean)", DATA, "tokens", None, t.tokens_per_record),
        _ratio_test("tokens_per_record_p90", "tokens per record (p90)", DATA, p90(baseline), p90(current),
                    t.tokens_per_record, null=p90_null),
        _rate_test("rejected_rate", "rejected records rate", DATA,
                   _rejected_of_read(baseline), _rejected_of_read(current), t.rejected_rate),
    ]
    _judge([r for r in rows if isinstance(r, _Test)], t.level)
    metrics = [r.metric if isinstance(r, _Test) else r for r in rows]
    metrics += _info_rows(baseline, current, same_tokenizer)
    order = {TOKENIZATION: 0, DATA: 1, INFO_SECTION: 2}
    metrics.sort(key=lambda m: order[m.section])          # stable: the order above within a section
    shifted = top_shifted_tokens(baseline, current) if same_tokenizer else []
    b_tpr, c_tpr = baseline["tokens_per_record"]["histogram"], current["tokens_per_record"]["histogram"]
    b_bpt, c_bpt = baseline["bytes_per_token"]["histogram"], current["bytes_per_token"]["histogram"]
    histograms = {
        "tokens_per_record": {"edges": b_tpr["edges"], "baseline": b_tpr["counts"], "current": c_tpr["counts"]},
        "bytes_per_token": {"edges": b_bpt["edges"], "baseline": b_bpt["counts"], "current": c_bpt["counts"]},
    }
    return DriftReport(thresholds, _side(baseline), _side(current), same_tokenizer, metrics, shifted, histograms)


DIGIT_RUNS_LABEL = "PSI digit-run lengths (number formats)"
DIGIT_RUNS_MISSING = ("a stats.json without digit-run counts on every record (written before they were "
                      "counted); " + REBUILD_HINT)


def _digit_run_test(baseline: dict, current: dict, threshold: float) -> _Test | Metric:
    """How numbers are written: the PSI of the ASCII digit-run lengths (1, 2, 3, 4, 5+ digits)
    against its no-drift value for these record counts. Not available (and said so) when a side's
    stats.json predates these counts, or neither side holds a number."""
    b_g, c_g = _digit_run_groups(baseline), _digit_run_groups(current)
    if b_g is None or c_g is None or not b_g.sum() or not c_g.sum():
        why = DIGIT_RUNS_MISSING if b_g is None or c_g is None else "no numbers on one side"
        return Metric("psi_digit_runs", DIGIT_RUNS_LABEL, DATA, None, None, None, "divergence", threshold,
                      layout.NOT_AVAILABLE, note=why)
    return _divergence_test("psi_digit_runs", DIGIT_RUNS_LABEL, DATA, psi(b_g.sum(0), c_g.sum(0)),
                            psi_null(b_g, c_g, baseline["records"], current["records"]), threshold)


def _info(name, label, base, cur) -> Metric:
    return Metric(name, label, INFO_SECTION, base, cur, relative_change(base, cur), "info", None, layout.INFO)


def _info_rows(baseline: dict, current: dict, same_tokenizer: bool) -> list[Metric]:
    rows = [_info("vocabulary_utilisation", "vocabulary utilisation", baseline["vocabulary"]["utilisation"],
                  current["vocabulary"]["utilisation"]),
            _info("records", "records", baseline["records"], current["records"]),
            _info("tokens", "tokens", baseline["tokens"], current["tokens"])]
    if same_tokenizer and baseline["replicates"]["token_classes"]["classes"] < baseline["vocab_size"]:
        # The judged JS is over id classes (late merges folded); this is the same over every id.
        value = js_divergence(baseline["token_frequency"]["counts"], current["token_frequency"]["counts"])
        rows.append(Metric("js_all_ids", "JS divergence over all ids", INFO_SECTION, None, None, value,
                           "info", None, layout.INFO))
    return rows



def _names(metrics: list[Metric]) -> str:
    return ", ".join(m.label for m in metrics)


def headline(report: DriftReport) -> str:
    """Which kind moved, naming exactly the flagged metrics: the line the terminal, Markdown and
    picture all show."""
    if not report.drift:
        moderate = [m for m in report.judged if m.verdict == layout.MODERATE]
        extra = f" (beyond noise but within thresholds: {_names(moderate)})" if moderate else ""
        return f"no drift: {len(report.judged)} figures within noise or thresholds{extra}"
    parts = []
    for section, word in ((TOKENIZATION, "tokenization"), (DATA, "data")):
        flagged = report.section_flagged(section)
        parts.append(f"{word} drifted: {_names(flagged)}" if flagged else f"{word}: no drift")
    return f"DRIFT ({report.verdict}) - " + "; ".join(parts)


# ---- the stats files judged -------------------------------------------------------------------

def _rejected_of_read(stats: dict) -> tuple[int, int]:
    account = account_of(stats)
    return account.records_rejected, account.records_read


def load_stats(path) -> dict:
    """Read and validate a stats.json (a local path or any fsspec URL). OSError if unreadable, ValueError
    (one line, naming the file) if it is not valid JSON or not a valid stats.json of this schema version."""
    return parse_stats(files.read_bytes(str(path)), path)


def compare_files(baseline: dict, baseline_path: str, current: dict, current_path: str,
                  thresholds: Thresholds = Thresholds(), allow_different_tokenizers: bool = False) -> DriftReport:
    """`compare` of two loaded stats files, the report naming them; a ValueError about one side
    names that side's file."""
    try:
        report = compare(baseline, current, thresholds, allow_different_tokenizers)
    except ValueError as exc:
        side = next((s for s in ("baseline", "current") if f"the {s} stats" in str(exc)), None)
        path = {"baseline": baseline_path, "current": current_path}.get(side)
        raise ValueError(f"{path}: {exc}" if path else str(exc)) from None
    report.baseline["path"], report.current["path"] = baseline_path, current_path
    return report


@contextlib.contextmanager
def judging_errors() -> Iterator[None]:
    """Inside the block, a stats file that cannot be read or judged (OSError, ValueError) is the
    command's one-line UserError, naming the file."""
    from pipelines.core.errors import UserError, os_error_reason
    from pipelines.core.inputs import InputError

    try:
        yield
    except OSError as exc:
        raise UserError(os_error_reason(exc)) from None
    except (InputError, ValueError) as exc:
        raise UserError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


# ---- over time: each file against one baseline ------------------------------------------------

@dataclass
class Judged:
    """One file of a comparison over time: its window (or path), and its report or why it has none."""
    path: str
    label: str
    report: DriftReport | None
    reason: str | None = None

    @property
    def drift(self) -> bool:
        return self.report is not None and self.report.drift


def window_label(stats: dict, path: str) -> str:
    window = stats.get("window")
    return window["start"] if isinstance(window, dict) and "start" in window else posixpath.basename(path)


def compare_over_time(baseline: dict, paths: list[str], thresholds: Thresholds,
                      allow_different_tokenizers: bool = False) -> list[Judged]:
    """Each file against the baseline, in time order (a window's start, else its path). A file too
    small to judge (fewer than 2 records) is reported as not judged, not as an error."""
    judged = []
    for path in paths:
        current = load_stats(path)
        label = window_label(current, path)
        try:
            report = compare(baseline, current, thresholds, allow_different_tokenizers)
        except ValueError as exc:
            if current["records"] >= 2:
                raise ValueError(f"{path}: {exc}") from None
            judged.append(Judged(path, label, None, str(exc)))
            continue
        report.current["path"] = path
        judged.append(Judged(path, label, report))
    return sorted(judged, key=lambda j: (j.label, j.path))


# ---- groups: each group of a pair against the same group ---------------------------------------

# A group present on one side only is flagged when it holds at least this share of that side's
# records (below it, a rare value coming or going is no change that matters) and when the other side
# is large enough that missing it by chance is unlikely.
GROUP_SHARE = 0.01


@dataclass
class GroupComparison:
    """One group (`--group-field` value) of a comparison: on both sides (with its report), new, gone,
    or too small to judge."""
    value: str
    status: str                  # "compared", "new", "gone", "too small"
    records: tuple[int, int]     # baseline, current
    share: tuple[float, float]
    report: DriftReport | None = None
    p_value: float | None = None   # new/gone: chance that a side of this size holds none of the group
    level: float = 0.05            # the level each group is judged at (Bonferroni over the groups)

    @property
    def beyond_noise(self) -> bool:
        return self.p_value is not None and self.p_value < self.level

    @property
    def drift(self) -> bool:
        if self.status == "compared":
            return self.report.drift
        if self.status in ("new", "gone"):
            return max(self.share) >= GROUP_SHARE and self.beyond_noise
        return False


def compare_groups(baseline: dict, baseline_path: str, current: dict, current_path: str, thresholds: Thresholds,
                   allow_different_tokenizers: bool = False) -> list[GroupComparison]:
    """Each group of two stats.json written with `--group-field`: judged against itself where both
    sides have it, else reported as new or gone (flagged from GROUP_SHARE of a side's records)."""
    a, b = baseline.get("groups") or {}, current.get("groups") or {}
    values = sorted(set(a) | set(b))
    # Bonferroni over the groups: each group's own tests run at the level shared out.
    level = thresholds.level / max(1, len(values))
    per_group = replace(thresholds, level=level)
    out = []
    for value in values:
        records = (a.get(value, {}).get("records", 0), b.get(value, {}).get("records", 0))
        share = (records[0] / max(1, baseline["records"]), records[1] / max(1, current["records"]))
        if value not in a or value not in b:
            # A group of share s on one side is missing from n records of the other with chance
            # (1 - s)^n if nothing changed.
            seen, other_n = (share[1], baseline["records"]) if value not in a else (share[0], current["records"])
            out.append(GroupComparison(value, "new" if value not in a else "gone", records, share,
                                       p_value=(1 - seen) ** other_n, level=level))
            continue
        if min(records) < 2:
            out.append(GroupComparison(value, "too small", records, share))
            continue
        sides = [load_stats(files.sibling(path, groups[value]["file"]))
                 for path, groups in ((baseline_path, a), (current_path, b))]
        report = compare(*sides, per_group, allow_different_tokenizers)
        out.append(GroupComparison(value, "compared", records, share, report))
    return out


def pair_drifted(report: DriftReport, groups: list[GroupComparison]) -> bool:
    """Whether a pair comparison is drift: the whole data's report, or any of its groups."""
    return report.drift or any(g.drift for g in groups)

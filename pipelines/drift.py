"""`tokenbeam drift BASELINE CURRENT`: did tokenization (or the data) drift between two stats.json files?

Every judged figure is compared with what sampling noise alone would give for these two samples,
with the record as the sampling unit (stats.json version 2 holds what that needs, see
`schemas/stats.py`):

- ratio figures (bytes per token, tokens per word, raw-byte share, mean tokens per record):
  delta-method standard errors from the per-record moments, a two-sided t test of the difference
  whose variance is the larger of the two sides' own (Welch) and the pooled no-drift one;
- p90 tokens per record: the order-statistic (binomial) interval of each side's quantile, the
  no-drift spread read off the larger side's percentiles;
- PSI of the two histograms and the Jensen-Shannon divergence of token ids: judged against their
  no-drift distribution for these sample sizes, drawn from the random groups (`null_draws`);
- rejected-record rate: a two-proportion z test.

A figure is flagged only when its change is beyond noise (Holm-Bonferroni over all judged figures
at `--level`) *and* past its practical threshold. Verdicts: `ok` (within noise), `moderate`
(beyond noise, within the threshold), `significant` (beyond noise and past the threshold). The
figures are reported in two sections: tokenization (length-invariant: how well the tokenizer fits
the text) and data (record lengths, rejections). Exit code 0 = nothing at or past `--fail-on`,
1 = drift, 2 = error.
"""
from __future__ import annotations

import argparse
import heapq
import importlib.util
import json
import math
import os
import posixpath
import sys
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from statistics import NormalDist
from typing import Sequence

import numpy as np

from pipelines import files
from schemas import drift as layout
from schemas.stats import REBUILD_HINT, load_stats

TOP_SHIFTED = 15
NULL_DRAWS = 499      # no-drift draws per divergence: p-values down to 1/500, below the Holm levels (0.05/9)
NULL_SEED = 20250113  # fixed: the same two files always give the same report
_NORMAL = NormalDist()


# ---- the math (pure) ------------------------------------------------------------------------

def relative_change(baseline: float | None, current: float | None) -> float | None:
    """(current - baseline) / baseline; None when undefined (a missing figure or a zero baseline)."""
    if baseline is None or current is None or baseline == 0:
        return None
    return (current - baseline) / baseline


def psi(expected: Sequence[float], actual: Sequence[float], smoothing: float = 0.5) -> float:
    """Population stability index of two histograms over the same bins, from record counts.

    PSI = sum_i (q_i - p_i) * ln(q_i / p_i). An empty bin would make it infinite, so every bin that
    either side uses gets `smoothing` extra records on both sides (additive, Jeffreys-style: it
    fades as counts grow); bins empty on both sides play no part. Identical histograms give 0.

    >>> round(psi([50, 50], [80, 20], smoothing=0), 4)   # 0.3 ln 1.6 + 0.3 ln 2.5
    0.4159
    """
    return float(psi_rows(np.asarray([expected], float), np.asarray([actual], float), smoothing)[0])


def psi_rows(expected: np.ndarray, actual: np.ndarray, smoothing: float = 0.5) -> np.ndarray:
    """`psi` of each row pair of two (draws x bins) count arrays (counts may be fractional)."""
    used = (expected > 0) | (actual > 0)
    bins = used.sum(axis=1, keepdims=True)
    p = np.where(used, expected + smoothing, 0) / (expected.sum(axis=1, keepdims=True) + smoothing * bins)
    q = np.where(used, actual + smoothing, 0) / (actual.sum(axis=1, keepdims=True) + smoothing * bins)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(used, (q - p) * np.log(np.where(used, q, 1) / np.where(used, p, 1)), 0.0)
    return terms.sum(axis=1)


def js_divergence(p_counts: Sequence[float], q_counts: Sequence[float]) -> float:
    """Jensen-Shannon divergence (base 2, so in [0, 1]) of two count vectors over the same ids.

    JS = (KL(P || M) + KL(Q || M)) / 2 with M = (P + Q) / 2: finite without smoothing, symmetric,
    0 for identical distributions, 1 for distributions on disjoint ids.

    >>> js_divergence([4, 0], [0, 9]), js_divergence([3, 0, 5], [3, 0, 5])
    (1.0, 0.0)
    """
    p, q = np.asarray([p_counts], float), np.asarray([q_counts], float)
    if p.sum() == 0 or q.sum() == 0:
        raise ValueError("Jensen-Shannon divergence of an empty distribution")
    return float(js_rows(p / p.sum(), q / q.sum())[0])


def _entropy_rows(p: np.ndarray) -> np.ndarray:
    """Shannon entropy (bits) of each row of a share array (0 log 0 = 0)."""
    logs = np.zeros_like(p)
    np.log2(p, out=logs, where=p > 0)
    return -(p * logs).sum(axis=1)


def js_rows(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen-Shannon divergence (bits) of each row pair of two (draws x ids) share arrays, as
    H(M) - (H(P) + H(Q)) / 2 with M = (P + Q) / 2 (the same as the mean of the two KL(. || M))."""
    return np.clip(_entropy_rows((p + q) / 2) - (_entropy_rows(p) + _entropy_rows(q)) / 2, 0.0, 1.0)


@dataclass(frozen=True)
class Estimate:
    """A figure of one side, the variance of its sampling error, and the degrees of freedom that
    variance rests on (None: treat as known)."""
    value: float | None
    variance: float | None
    df: float | None = None


def ratio_estimate(moments: dict, numerator: str, denominator: str | None) -> Estimate:
    """R = sum y / sum x over records and its delta-method (linearised) variance

        Var(R) ~ sum_i (y_i - R x_i)^2 / (n (n - 1) xbar^2),

    from the per-record sums and products of stats.json's `moments` (`denominator` None: x = 1,
    R is the mean of y per record). The residual sum is computed exactly, as the integer
    Syy Sx^2 - 2 Sy Sx Sxy + Sy^2 Sxx over Sx^2, before any float is taken.

    The variance rests on n_eff - 1 degrees of freedom, with n_eff = (sum x)^2 / sum x^2 (Kish's
    effective size of x-weighted records: n for a mean, far fewer than n when a few long records
    carry most of the tokens, as the heavy-tailed record lengths of real corpora do).

    >>> m = {"variables": ["tokens", "bytes"], "records": 3, "sums": [6, 18],
    ...      "products": [[14, 42], [42, 126]]}          # three records: (1, 3), (2, 6), (3, 9) bytes
    >>> ratio_estimate(m, "bytes", "tokens")              # bytes per token exactly 3: no variance
    Estimate(value=3.0, variance=0.0, df=1.5714285714285716)
    >>> ratio_estimate(m, "tokens", None)                  # mean 2, s^2 = 1, Var(mean) = 1/3
    Estimate(value=2.0, variance=0.3333333333333333, df=2.0)
    """
    n = moments["records"]
    names = moments["variables"]
    y = names.index(numerator)
    sy, syy = moments["sums"][y], moments["products"][y][y]
    if denominator is None:
        sx, sxx, sxy = n, n, sy
    else:
        x = names.index(denominator)
        sx, sxx, sxy = moments["sums"][x], moments["products"][x][x], moments["products"][x][y]
    if sx == 0:
        return Estimate(None, None)
    value = sy / sx
    if n < 2:
        return Estimate(value, None)
    residuals = Fraction(syy * sx * sx - 2 * sy * sx * sxy + sy * sy * sxx, sx * sx)
    xbar = Fraction(sx, n)
    n_eff = sx * sx / sxx
    return Estimate(value, float(residuals / (n * (n - 1) * xbar * xbar)), max(n_eff - 1, 1.0))


def pooled_ratio_null(a: dict, b: dict, numerator: str, denominator: str | None) -> Estimate:
    """The variance of R_a - R_b under "no drift", from both sides' records pooled: one ratio R
    and one spread of the records around it, s^2 = sum (y_i - R x_i)^2 / ((n - 1) xbar^2) over all
    n = n_a + n_b records, so Var(R_a - R_b) = s^2 (1/n_a + 1/n_b), on n_eff - 2 degrees of freedom.

    This is the variance the test needs: under "no drift" both sides draw from one distribution,
    and the pooled records see its heavy tail far better than a small side alone, which usually
    misses the few long or odd records that carry most of the variance (then its own variance is
    too small and a Welch test flags noise: 600 records against 40 did, 11-15% of the time).
    `value` is the pooled ratio.

    >>> m = {"variables": ["tokens", "bytes"], "records": 2, "sums": [3, 9], "products": [[5, 15], [15, 45]]}
    >>> pooled_ratio_null(m, m, "bytes", "tokens").variance      # every record: 3 bytes a token
    0.0
    """
    sides = [a, b]
    names = a["variables"]
    y = names.index(numerator)
    n = sum(m["records"] for m in sides)
    sy = sum(m["sums"][y] for m in sides)
    syy = sum(m["products"][y][y] for m in sides)
    if denominator is None:
        sx, sxx, sxy = n, n, sy
    else:
        x = names.index(denominator)
        sx = sum(m["sums"][x] for m in sides)
        sxx = sum(m["products"][x][x] for m in sides)
        sxy = sum(m["products"][x][y] for m in sides)
    if sx == 0 or n < 3:
        return Estimate(None, None)
    residuals = Fraction(syy * sx * sx - 2 * sy * sx * sxy + sy * sy * sxx, sx * sx)
    xbar = Fraction(sx, n)
    spread = residuals / ((n - 1) * xbar * xbar)
    sizes = Fraction(1, a["records"]) + Fraction(1, b["records"])
    return Estimate(sy / sx, float(spread * sizes), max(sx * sx / sxx - 2, 1.0))


def interpolated_percentile(percentiles: Sequence[int], p: float) -> float:
    """The p-quantile (0 <= p <= 1) read off a p0..p100 table, linear between whole percents."""
    at = min(max(p, 0.0), 1.0) * 100
    lo = min(int(at), 99)
    return percentiles[lo] + (at - lo) * (percentiles[lo + 1] - percentiles[lo])


def quantile_estimate(percentiles: Sequence[int], n: int, p: float) -> Estimate:
    """A quantile and its variance from the order-statistic interval: the quantile of a sample of n
    has rank n p +- sqrt(n p (1 - p)) at one standard error (binomial), so the standard error is
    read off the percentiles as (Q(p + s) - Q(p - s)) / 2 or (Q(p + 2s) - Q(p - 2s)) / 4, with
    s = sqrt(p (1 - p) / n). The larger of the two readings is taken: on the heavy right tail of
    record lengths either band alone can fall between two close values and make a quantile of a
    few dozen records look far more certain than it is.

    >>> round(quantile_estimate(list(range(101)), 100, 0.9).variance, 6)   # s = 0.03: SE 3
    9.0
    """
    if not percentiles:
        return Estimate(None, None)
    s = math.sqrt(p * (1 - p) / n)

    def band(k: int) -> float:
        return (interpolated_percentile(percentiles, p + k * s) - interpolated_percentile(percentiles, p - k * s)) / (2 * k)
    se = max(band(1), band(2))
    return Estimate(percentiles[round(100 * p)], se * se, max(n - 1, 1))


def two_sided_p(z: float, df: float | None = None) -> float:
    """P(|T| >= |z|) for Student's t with `df` degrees of freedom (the normal when df is None)."""
    if df is None:
        return 2 * _NORMAL.cdf(-abs(z))
    return _regularized_beta(df / (df + z * z), df / 2, 0.5)


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), by its continued fraction (modified Lentz; Numerical Recipes' betacf)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):                    # the fraction converges fast on this side
        return 1.0 - _regularized_beta(1 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1) < 1e-14:
            break
    return front * f


def t_quantile(level: float, df: float | None) -> float:
    """The t (or z when df is None) of a two-sided test at `level`, by bisection on `two_sided_p`."""
    if df is None:
        return z_quantile(level)
    lo, hi = 0.0, 1e4
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if two_sided_p(mid, df) > level else (lo, mid)
    return hi


def welch_df(v1: float, df1: float, v2: float, df2: float) -> float | None:
    """Welch-Satterthwaite degrees of freedom of a difference of two estimates with variances
    v1, v2 estimated on df1, df2 degrees of freedom (None when both variances are 0)."""
    if v1 + v2 == 0:
        return None
    return (v1 + v2) ** 2 / ((v1 * v1 / df1 if v1 else 0) + (v2 * v2 / df2 if v2 else 0))


def z_quantile(level: float) -> float:
    """The z of a two-sided test at `level`: 1.96 at 0.05."""
    return _NORMAL.inv_cdf(1 - level / 2)


def holm(p_values: Sequence[float], level: float) -> list[bool]:
    """Holm-Bonferroni: which of the hypotheses to reject, controlling the family-wise error at
    `level`. The k-th smallest p-value (k = 0, 1, ...) is compared with level / (m - k), and the
    first one that fails stops the rejections.

    >>> holm([0.01, 0.04, 0.03, 0.5], 0.05)     # 0.01 < 0.05/4; then 0.03 > 0.05/3 stops
    [True, False, False, False]
    """
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    reject = [False] * len(p_values)
    for k, i in enumerate(order):
        if p_values[i] > level / (len(p_values) - k):
            break
        reject[i] = True
    return reject


# ---- the no-drift distribution of a divergence, from random groups ---------------------------

def _row_shares(rows: np.ndarray) -> np.ndarray:
    totals = rows.sum(axis=1, keepdims=True)
    return np.divide(rows, totals, out=np.zeros_like(rows), where=totals > 0)


def group_swaps(a_groups: np.ndarray, b_groups: np.ndarray, draws: int, rng: np.random.Generator):
    """Pseudo-samples of "no drift": in each draw, every group k of A trades places with group k of
    B on a coin flip (a permutation test whose units are the random groups).

    Under "no drift" the records of both sides come from one distribution and fall into groups by a
    hash of their id, so when the two sides have as many records, group k of A and group k of B are
    exchangeable, and the swapped pairs are distributed exactly as the observed pair, heavy tails
    included (one very long document stays whole in its group). Returns (X, Y): the (draws x bins)
    counts of the two pseudo-samples. Bins neither side uses are dropped: they change nothing.
    """
    used = (a_groups.sum(0) > 0) | (b_groups.sum(0) > 0)
    a_groups, b_groups = a_groups[:, used], b_groups[:, used]
    swap = rng.random((draws, a_groups.shape[0])) < 0.5
    keep, trade = (~swap).astype(float), swap.astype(float)
    return keep @ a_groups + trade @ b_groups, trade @ a_groups + keep @ b_groups


def size_factor(total_a: float, total_b: float) -> float:
    """How much larger a divergence's no-drift value is for samples of these totals than for the
    swapped pseudo-samples, which each hold about half of both: a divergence near 0 grows with
    the variance of the difference, 1/total_a + 1/total_b, against 4/(total_a + total_b) after
    swapping. 1 for equal totals, where the swap test is exact; an approximation otherwise.

    >>> size_factor(100, 100), size_factor(900, 100)
    (1.0, 2.7777777777777777)
    """
    return (total_a + total_b) ** 2 / (4 * total_a * total_b)


@dataclass(frozen=True)
class NullDistribution:
    """A divergence's draws under "no drift" for these two samples: mean, spread, upper quantiles."""
    draws: np.ndarray

    @property
    def mean(self) -> float:
        return float(self.draws.mean())

    @property
    def sd(self) -> float:
        return float(self.draws.std(ddof=1))

    def p_value(self, observed: float) -> float:
        """Share of draws at least as large as the observed value, counting the observed one
        (so never 0: with 499 draws at least 0.002)."""
        return (1 + int((self.draws >= observed).sum())) / (1 + len(self.draws))

    def quantile(self, q: float) -> float:
        return float(np.quantile(self.draws, q))


def js_null(a_groups: np.ndarray, b_groups: np.ndarray, records_a: int, records_b: int,
            draws: int = NULL_DRAWS, seed: int = NULL_SEED):
    """No-drift draws of the JS divergence of token-id classes (groups x classes counts per side),
    scaled to the two sides' record counts (`size_factor`). Records, not tokens: the record is the
    sampling unit, and a small side that drew one very long document has many tokens but no more
    information, so scaling by tokens would shrink its no-drift value just when it is most noisy."""
    x, y = group_swaps(a_groups.astype(float), b_groups.astype(float), draws, np.random.default_rng(seed))
    ok = (x.sum(1) > 0) & (y.sum(1) > 0)
    values = js_rows(_row_shares(x[ok]), _row_shares(y[ok]))
    return NullDistribution(values * size_factor(records_a, records_b))


def psi_null(a_groups: np.ndarray, b_groups: np.ndarray, records_a: int | None = None,
             records_b: int | None = None, draws: int = NULL_DRAWS, seed: int = NULL_SEED):
    """No-drift draws of the PSI of a histogram (groups x bins counts per side), scaled to the two
    sides' records (`size_factor`; by default the histograms' totals, which are records when
    each record falls in one bin)."""
    x, y = group_swaps(a_groups.astype(float), b_groups.astype(float), draws, np.random.default_rng(seed + 1))
    ok = (x.sum(1) > 0) & (y.sum(1) > 0)
    records_a = a_groups.sum() if records_a is None else records_a
    records_b = b_groups.sum() if records_b is None else records_b
    return NullDistribution(psi_rows(x[ok], y[ok]) * size_factor(records_a, records_b))


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
                   (baseline["rejected"]["total"], baseline["records_read"]),
                   (current["rejected"]["total"], current["records_read"]), t.rejected_rate),
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


# ---- rendering --------------------------------------------------------------------------------

_SHARES = {"raw_byte_share", "rejected_rate", "vocabulary_utilisation"}


def _value(m: Metric, v) -> str:
    if v is None:
        return "-"
    if m.name in _SHARES:
        return f"{100 * v:.2f}%"
    if m.change_kind == "divergence" or m.name == "js_all_ids":
        return f"{v:.4f}"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3f}"


def _amount(m: Metric, v: float | None, signed: bool = True) -> str:
    """A change (or a width) in the metric's unit: percent, percentage points or divergence."""
    if v is None:
        return "-"
    sign = "+" if signed else ""
    if m.change_kind == "absolute":
        return f"{100 * v:{sign}.2f} pp"
    if m.change_kind == "divergence":
        return f"{v:{sign}.4f}"
    return f"{100 * v:{sign}.1f}%"


def _change(m: Metric) -> str:
    if m.change_kind == "info":
        return _value(m, m.change) if m.name == "js_all_ids" else (
            "-" if m.change is None else f"{100 * m.change:+.1f}%")
    return _amount(m, m.change)


def _interval(m: Metric) -> str:
    if m.interval is None:
        return "-"
    return f"[{_amount(m, m.interval[0])}, {_amount(m, m.interval[1])}]"


def _detectable(m: Metric) -> str:
    return "-" if m.detectable is None else ("" if m.change_kind == "divergence" else "±") + _amount(
        m, m.detectable, signed=False)


def _threshold(m: Metric) -> str:
    if m.threshold is None:
        return "-"
    return ("+" if m.change_kind == "divergence" else "±") + _amount(m, m.threshold, signed=False)


def _p(m: Metric) -> str:
    return "-" if m.p_value is None else f"{m.p_value:.3f}" if m.p_value >= 0.001 else f"{m.p_value:.0e}"


HEADER = ["metric", "baseline", "current", "change", "interval", "detectable", "threshold", "p", "verdict"]
SECTION_TITLES = {TOKENIZATION: "tokenization (length-invariant: how the tokenizer fits the text)",
                  DATA: "data (record lengths, rejections)", INFO_SECTION: "info (not judged)"}


def table_rows(report: DriftReport, section: str | None = None) -> list[list[str]]:
    return [[m.label, _value(m, m.baseline), _value(m, m.current), _change(m), _interval(m), _detectable(m),
             _threshold(m), _p(m), m.verdict] for m in report.metrics if section in (None, m.section)]


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


def verdict_line(report: DriftReport) -> str:
    """The one-line answer."""
    return headline(report)


def _settings_line(report: DriftReport) -> str:
    t = report.thresholds
    n = sum(1 for m in report.judged)
    return (f"flagged = beyond noise (Holm-Bonferroni over {n} figures, family-wise level {t.level:g}) and past "
            f"the threshold; interval and detectable change at the per-figure level {t.level / max(n, 1):.4f}; "
            f"divergences: change = value - no-drift mean for these sample sizes (baseline column)")


def render_terminal(report: DriftReport) -> str:
    rows = [HEADER] + table_rows(report)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]

    def line(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    lines = [line(HEADER), "  ".join("-" * w for w in widths)]
    for section in (TOKENIZATION, DATA, INFO_SECTION):
        lines.append(f"[{SECTION_TITLES[section]}]")
        lines += [line(r) for r in table_rows(report, section)]
    lines.append(_settings_line(report))
    lines += [f"({m.label}: not judged: {m.note})" for m in report.metrics if m.note]
    if not report.same_tokenizer:
        lines.append("(different tokenizers: token-id figures are not comparable and were left out)")
    if report.top_shifted_tokens:
        lines.append("")
        lines.append("top shifted tokens (share of all tokens, baseline -> current):")
        for t in report.top_shifted_tokens[:10]:
            lines.append(f"  {t['id']:>7}  {t['token']:<24} {100 * t['baseline_share']:7.3f}% -> "
                         f"{100 * t['current_share']:7.3f}%  ({100 * t['change']:+.3f} pp)")
    lines.append("")
    lines.append(verdict_line(report))
    return "\n".join(lines)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _md_code(text: str) -> str:
    # A token may itself contain a backtick: then a double-backtick code span holds it.
    return f"`` {_md_cell(text)} ``" if "`" in text else f"`{_md_cell(text)}`"


def render_markdown(report: DriftReport, picture: str | None) -> str:
    b, c = report.baseline, report.current
    lines = ["# Tokenization drift", "",
             f"**{verdict_line(report)}**", "",
             f"- baseline: `{b['path']}` ({b['records']:,} records, tokenizer `{b['tokenizer_sha256'][:12]}`)",
             f"- current: `{c['path']}` ({c['records']:,} records, tokenizer `{c['tokenizer_sha256'][:12]}`)",
             f"- {_settings_line(report)}; fail on: {report.thresholds.fail_on}"]
    for section in (TOKENIZATION, DATA, INFO_SECTION):
        lines += ["", f"## {SECTION_TITLES[section][0].upper()}{SECTION_TITLES[section][1:]}", "",
                  "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(_md_cell(cell) for cell in row) + " |" for row in table_rows(report, section)]
    if report.top_shifted_tokens:
        lines += ["", "## Top shifted tokens", "", "| id | token | baseline share | current share | change |",
                  "|---|---|---|---|---|"]
        lines += [f"| {t['id']} | {_md_code(t['token'])} | {100 * t['baseline_share']:.3f}% | "
                  f"{100 * t['current_share']:.3f}% | {100 * t['change']:+.3f} pp |"
                  for t in report.top_shifted_tokens]
    if picture:
        lines += ["", f"![drift]({picture})"]
    return "\n".join(lines) + "\n"


def _shares(counts: Sequence[int]) -> list[float]:
    total = sum(counts)
    return [c / total if total else 0.0 for c in counts]


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _short_count(n: int) -> str:
    """1024 -> '1k', 65536 -> '64k', 2**20 -> '1M' (binary prefixes, as context lengths are named)."""
    for shift, suffix in ((20, "M"), (10, "k")):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g}{suffix}"
    return str(n)


def _used_range(*histograms: Sequence[int]) -> tuple[int, int]:
    used = [i for h in histograms for i, c in enumerate(h) if c]
    return min(used), max(used) + 1


def _value_of(report: DriftReport, name: str) -> str:
    """A divergence as the picture's titles show it: the value, its no-drift value and the verdict."""
    m = report.metric(name)
    if m.current is None:
        return "n/a"
    return f"{m.current:.3f}, no-drift {m.baseline:.3f}: {m.verdict}"


def report_side(report: DriftReport, side: str) -> str:
    """A legend label: the stats file's folder (runs/tokens/stats.json -> tokens) or file name."""
    info = getattr(report, side)
    path = info["path"] or side
    path = os.path.abspath(path) if "://" not in path else path
    name = posixpath.basename(posixpath.dirname(path) if posixpath.basename(path) == "stats.json" else path)
    return f"{name}, {info['records']:,} records"


def plot_report(report: DriftReport, path: str) -> None:
    """drift.png: tokens-per-record and bytes-per-token distributions overlaid, top shifted tokens."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(18, 5.5), layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=[1, 1, 1.1])
    colors = {"baseline": "tab:blue", "current": "tab:orange"}

    # Tokens per record: log-spaced bins, drawn over the bin index so each bin has the same width.
    hist = report.histograms["tokens_per_record"]
    lo, hi = _used_range(hist["baseline"], hist["current"])
    ax = axes[0]
    for side in ("baseline", "current"):
        ax.stairs(_shares(hist[side])[lo:hi], range(lo, hi + 1), fill=True, alpha=0.45,
                  color=colors[side], label=f"{side} ({report_side(report, side)})")
    ticks = [i for i in range(lo, min(hi + 1, len(hist["edges"]))) if _is_power_of_two(hist["edges"][i])]
    ticks = ticks[::2] if len(ticks) > 8 else ticks
    ax.set_xticks(ticks, [_short_count(hist["edges"][i]) for i in ticks])
    ax.set_xlabel("tokens per record (log-spaced bins)")
    ax.set_ylabel("share of records")
    ax.set_title(f"Tokens per record  (PSI {_value_of(report, 'psi_tokens_per_record')})")
    ax.legend()

    hist = report.histograms["bytes_per_token"]
    lo, hi = _used_range(hist["baseline"], hist["current"])
    edges = hist["edges"] + [hist["edges"][-1] * 1.25]   # close the open last bin for drawing
    ax = axes[1]
    for side in ("baseline", "current"):
        ax.stairs(_shares(hist[side])[lo:hi], edges[lo:hi + 1], fill=True, alpha=0.45,
                  color=colors[side], label=f"{side} ({report_side(report, side)})")
    bpt = report.metric("bytes_per_token")
    for side, value in (("baseline", bpt.baseline), ("current", bpt.current)):
        if value is not None:
            ax.axvline(value, color=colors[side], linestyle="--", linewidth=1.5)
    ax.set_xlabel("bytes per token of a record (dashed: overall)")
    ax.set_ylabel("share of records")
    ax.set_title(f"Bytes per token  ({_change(bpt)}, PSI {_value_of(report, 'psi_bytes_per_token')})")
    ax.legend()

    ax = axes[2]
    shifted = report.top_shifted_tokens[::-1]
    if shifted:
        # ASCII-escaped labels: the default font has no glyphs for most scripts.
        labels = [f"{t['token'].encode('ascii', 'backslashreplace').decode()}  #{t['id']}" for t in shifted]
        values = [100 * t["change"] for t in shifted]
        ax.barh(range(len(shifted)), values, color=[colors["current"] if v > 0 else colors["baseline"]
                                                   for v in values])
        ax.set_yticks(range(len(shifted)), labels, fontfamily="monospace", fontsize=9)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_xlabel("change of share of all tokens (pp; orange = more in current)")
        ax.set_title(f"Top shifted tokens  (JS {_value_of(report, 'js_token_ids')})")
    else:
        why = "no token's share changed" if report.same_tokenizer else "different tokenizers:\ntoken ids not comparable"
        ax.text(0.5, 0.5, why, ha="center", va="center")
        ax.set_axis_off()
    fig.suptitle(headline(report), fontsize=13,
                 color="tab:red" if report.drift else "tab:green", fontweight="bold")
    save_figure(fig, path)


def save_figure(fig, url: str) -> None:
    with files.open_atomic(url) as f:
        fig.savefig(f, dpi=100, format="png")


def write_report(report: DriftReport, directory: str) -> list[str]:
    """drift.json, drift.md and (when matplotlib is importable) drift.png in `directory` (a path or URL)."""
    written = []
    picture = None
    if importlib.util.find_spec("matplotlib") is not None:    # the `plot` extra
        plot_report(report, files.join(directory, "drift.png"))
        picture = "drift.png"
        written.append(files.join(directory, "drift.png"))
    files.write_text_atomic(files.join(directory, "drift.json"), dump_json(report.to_json()))
    files.write_text_atomic(files.join(directory, "drift.md"), render_markdown(report, picture))
    return [files.join(directory, "drift.json"), files.join(directory, "drift.md")] + written


def dump_json(value) -> str:
    return json.dumps(value, indent=1, sort_keys=True, allow_nan=False) + "\n"


# ---- command line -----------------------------------------------------------------------------

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


def render_over_time(judged: list[Judged]) -> str:
    """One line per file: label, verdict, records and the flagged metrics (or why not judged)."""
    width = max(len(j.label) for j in judged)
    lines = []
    for j in judged:
        if j.report is None:
            lines.append(f"{j.label:<{width}}  not judged   {j.reason}")
            continue
        r = j.report
        verdict = "DRIFT" if r.drift else "ok"
        lines.append(f"{j.label:<{width}}  {verdict:<11}  {r.current['records']:>7,} records  {headline(r)}")
    drifted = sum(j.drift for j in judged)
    lines.append(f"{drifted} of {len(judged)} judged against the baseline drifted")
    return "\n".join(lines)


TIME_PANEL_METRICS = ("bytes_per_token", "tokens_per_word", "raw_byte_share", "js_token_ids",
                      "psi_bytes_per_token", "tokens_per_record_mean")


def plot_over_time(judged: list[Judged], path: str) -> None:
    """drift.png over time: each judged figure's change per window with its interval, the threshold
    band, and the windows where it was flagged (red)."""
    from matplotlib.figure import Figure

    reports = [(i, j) for i, j in enumerate(judged) if j.report is not None]
    names = [n for n in TIME_PANEL_METRICS if reports and any(m.name == n for m in reports[0][1].report.metrics)]
    fig = Figure(figsize=(max(8, 1.2 * len(judged) + 4), 2.6 * max(1, len(names))), layout="constrained")
    axes = fig.subplots(max(1, len(names)), 1, sharex=True, squeeze=False)[:, 0]
    for ax, name in zip(axes, names):
        xs, ys, lows, highs, flagged = [], [], [], [], []
        for i, j in reports:
            m = j.report.metric(name)
            if m.change is None:
                continue
            xs.append(i)
            ys.append(m.change)
            low, high = m.interval if m.interval else (m.change, m.change)
            lows.append(m.change - low)
            highs.append(high - m.change)
            flagged.append(m in j.report.flagged)
        ax.errorbar(xs, ys, yerr=[lows, highs], fmt="o", color="tab:blue", capsize=3)
        ax.scatter([x for x, f in zip(xs, flagged) if f], [y for y, f in zip(ys, flagged) if f],
                   color="tab:red", zorder=3, s=60, label="flagged")
        threshold = reports[0][1].report.metric(name).threshold
        if threshold is not None:
            ax.axhspan(-threshold, threshold, color="tab:green", alpha=0.12, label="within threshold")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_ylabel(reports[0][1].report.metric(name).label, fontsize=9)
        if any(flagged):
            ax.legend(fontsize=8, loc="upper left")
    axes[-1].set_xticks(range(len(judged)), [j.label for j in judged], rotation=30, ha="right", fontsize=8)
    drifted = [j.label for j in judged if j.drift]
    fig.suptitle(f"{len(drifted)} of {len(judged)} windows drifted" + (f": {', '.join(drifted)}" if drifted else ""),
                 fontsize=12, color="tab:red" if drifted else "tab:green", fontweight="bold")
    save_figure(fig, path)


def write_over_time(judged: list[Judged], directory: str) -> list[str]:
    """drift.json (every file's report), drift.md (one row per file) and drift.png (the time panel)."""
    written = [files.join(directory, "drift.json"), files.join(directory, "drift.md")]
    files.write_text_atomic(written[0], dump_json(
        {"kind": layout.DRIFT_KIND + ".over_time", "schema_version": layout.DRIFT_SCHEMA_VERSION,
         "drifted": sum(j.drift for j in judged),
         "windows": [{"label": j.label, "path": j.path, "drift": j.drift, "not_judged": j.reason,
                      "report": j.report.to_json() if j.report else None} for j in judged]}))
    picture = None
    if importlib.util.find_spec("matplotlib") is not None:    # the `plot` extra
        plot_over_time(judged, files.join(directory, "drift.png"))
        picture = "drift.png"
        written.append(files.join(directory, "drift.png"))
    lines = ["# Drift over time\n\n| window | verdict | records | headline |\n|---|---|---|---|\n"]
    for j in judged:
        if j.report is None:
            lines.append(f"| {_md_cell(j.label)} | not judged | | {_md_cell(j.reason or '')} |\n")
        else:
            lines.append(f"| {_md_cell(j.label)} | {'DRIFT' if j.drift else 'ok'} | {j.report.current['records']:,} | "
                         f"{_md_cell(headline(j.report))} |\n")
    if picture:
        lines.append(f"\n![drift over time]({picture})\n")
    files.write_text_atomic(written[1], "".join(lines))
    return written


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


def render_groups(groups: list[GroupComparison]) -> str:
    """The groups' lines: every flagged group with why, and a count of the rest."""
    lines = [f"groups: {len(groups)}, {sum(g.drift for g in groups)} flagged"]
    for g in groups:
        if g.status == "new" and g.drift:
            lines.append(f"  {g.value}: NEW, {g.records[1]:,} records ({g.share[1]:.1%} of current; "
                         f"p = {g.p_value:.2g} that the baseline missed it by chance)")
        elif g.status == "gone" and g.drift:
            lines.append(f"  {g.value}: GONE, {g.records[0]:,} records ({g.share[0]:.1%} of baseline; "
                         f"p = {g.p_value:.2g} that the current data missed it by chance)")
        elif g.status == "compared" and g.drift:
            lines.append(f"  {g.value}: {headline(g.report)}")
    return "\n".join(lines)


# Here, with the command line: the rest of the module needs none of them.
from pipelines import command  # noqa: E402
from pipelines.command import Command  # noqa: E402
from pipelines.inputs import GLOB_CHARS, InputError, Sought, find_files  # noqa: E402

# What the arguments may name: a stats.json or a folder holding one; the current side also a glob.
BASELINE = Sought(flag="", in_folder="stats.json", many=False)
CURRENT = Sought(flag="", in_folder="stats.json", many=True)


def run_parsed(args: argparse.Namespace, rest: list[str], parser: argparse.ArgumentParser) -> int:
    """`tokenbeam drift` of parsed flags: 0 no drift, 1 drift; a ValueError/OSError is one line (exit 2)."""
    from pipelines.errors import UserError, os_error_reason
    from pipelines.folders import check_finished

    thresholds = Thresholds(bytes_per_token=args.bytes_per_token, tokens_per_word=args.tokens_per_word,
                            tokens_per_record=args.tokens_per_record, psi=args.psi, js=args.js,
                            raw_byte_share=args.raw_byte_share, rejected_rate=args.rejected_rate,
                            level=args.level, fail_on=args.fail_on)
    try:
        (baseline_path,) = [found.url for found in find_files([args.baseline], BASELINE)]
        currents = [found.url for argument in args.current for found in find_files([argument], CURRENT)]
        for path in (baseline_path, *currents):
            check_finished(str(path), "input", "drift")
        baseline = load_stats(baseline_path)
        if len(currents) > 1 or any(c in a for a in args.current for c in GLOB_CHARS):
            judged = compare_over_time(baseline, currents, thresholds, args.allow_different_tokenizers)
            print(render_over_time(judged))
            if args.report:
                for path in write_over_time(judged, args.report):
                    print(f"wrote {path}", file=sys.stderr)
            return 1 if any(j.drift for j in judged) else 0
        current = load_stats(currents[0])
        try:
            report = compare(baseline, current, thresholds, args.allow_different_tokenizers)
        except ValueError as exc:
            # Name the file where the message is about one side.
            side = next((s for s in ("baseline", "current") if f"the {s} stats" in str(exc)), None)
            path = {"baseline": baseline_path, "current": currents[0]}.get(side)
            raise ValueError(f"{path}: {exc}" if path else str(exc)) from None
        report.baseline["path"], report.current["path"] = baseline_path, currents[0]
        print(render_terminal(report))
        groups = []
        if baseline.get("groups") is not None and current.get("groups") is not None:
            groups = compare_groups(baseline, baseline_path, current, currents[0], thresholds,
                                    args.allow_different_tokenizers)
            print(render_groups(groups))
        if args.report:
            for path in write_report(report, args.report):
                print(f"wrote {path}", file=sys.stderr)
            if groups:
                path = files.join(args.report, "drift_groups.json")
                files.write_text_atomic(path, dump_json(
                    [{"value": g.value, "status": g.status, "records": list(g.records), "share": list(g.share),
                      "drift": g.drift, "report": g.report.to_json() if g.report else None} for g in groups]))
                print(f"wrote {path}", file=sys.stderr)
        if any(g.drift for g in groups):
            return 1
    except OSError as exc:
        raise UserError(os_error_reason(exc)) from None
    except (InputError, ValueError) as exc:
        raise UserError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return 1 if report.drift else 0


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

"""The statistics of drift judging, pure (numpy and the standard library; no I/O): relative change,
population stability index, Jensen-Shannon divergence, ratio and quantile estimates with their
sampling variances, Student's t and normal tail areas, Welch's degrees of freedom, Holm-Bonferroni,
and the no-drift distributions of the divergences drawn from the random groups of stats.json.

`pipelines/monitoring/drift_judging.py` turns them into verdicts. Every public function shows a worked example
that runs (tests/bpe_ops/test_drift_stats.py runs them as doctests).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Sequence

import numpy as np

NULL_DRAWS = 499      # no-drift draws per divergence: p-values down to 1/500, below the Holm levels (0.05/9)
NULL_SEED = 20250113  # fixed: the same two files always give the same report
_NORMAL = NormalDist()


# ---- the math (pure) ------------------------------------------------------------------------

def relative_change(baseline: float | None, current: float | None) -> float | None:
    """(current - baseline) / baseline; None when undefined (a missing figure or a zero baseline).

    >>> relative_change(2.0, 2.5), relative_change(0, 1), relative_change(None, 1)
    (0.25, None, None)
    """
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
    """`psi` of each row pair of two (draws x bins) count arrays (counts may be fractional).

    >>> psi_rows(np.array([[50., 50], [10, 10]]), np.array([[80., 20], [10, 10]]), smoothing=0).round(4)
    array([0.4159, 0.    ])
    """
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
    H(M) - (H(P) + H(Q)) / 2 with M = (P + Q) / 2 (the same as the mean of the two KL(. || M)).

    >>> js_rows(np.array([[1., 0], [0.5, 0.5]]), np.array([[0., 1], [0.5, 0.5]]))   # disjoint; identical
    array([1., 0.])
    """
    return np.clip(_entropy_rows((p + q) / 2) - (_entropy_rows(p) + _entropy_rows(q)) / 2, 0.0, 1.0)


@dataclass(frozen=True)
class Estimate:
    """A figure of one side, the variance of its sampling error, and the degrees of freedom that
    variance rests on (None: treat as known).

    >>> Estimate(2.0, 0.25)               # a mean of 2 with standard error 0.5, variance known
    Estimate(value=2.0, variance=0.25, df=None)
    """
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
    """The p-quantile (0 <= p <= 1) read off a p0..p100 table, linear between whole percents.

    >>> interpolated_percentile(list(range(0, 202, 2)), 0.905)     # halfway between p90 = 180 and p91 = 182
    181.0
    """
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
    """P(|T| >= |z|) for Student's t with `df` degrees of freedom (the normal when df is None).

    >>> round(two_sided_p(1.959964), 4), round(two_sided_p(2.0, 10), 4)
    (0.05, 0.0734)
    """
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
    """The t (or z when df is None) of a two-sided test at `level`, by bisection on `two_sided_p`.

    >>> round(t_quantile(0.05, 10), 3), round(t_quantile(0.05, None), 3)
    (2.228, 1.96)
    """
    if df is None:
        return z_quantile(level)
    lo, hi = 0.0, 1e4
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if two_sided_p(mid, df) > level else (lo, mid)
    return hi


def welch_df(v1: float, df1: float, v2: float, df2: float) -> float | None:
    """Welch-Satterthwaite degrees of freedom of a difference of two estimates with variances
    v1, v2 estimated on df1, df2 degrees of freedom (None when both variances are 0).

    >>> welch_df(1.0, 9, 1.0, 9), welch_df(0.0, 5, 0.0, 5)     # two equal halves: 9 + 9 df
    (18.0, None)
    """
    if v1 + v2 == 0:
        return None
    return (v1 + v2) ** 2 / ((v1 * v1 / df1 if v1 else 0) + (v2 * v2 / df2 if v2 else 0))


def z_quantile(level: float) -> float:
    """The z of a two-sided test at `level`: 1.96 at 0.05.

    >>> round(z_quantile(0.05), 3), round(z_quantile(0.01), 3)
    (1.96, 2.576)
    """
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

    >>> a, b = np.array([[1., 0, 0], [0, 1, 0]]), np.array([[2., 0, 0], [0, 2, 0]])   # 2 groups; bin 3 unused
    >>> x, y = group_swaps(a, b, 4, np.random.default_rng(0))
    >>> x.shape, (x + y).tolist()      # every draw keeps all records: each group is on one side or the other
    ((4, 2), [[3.0, 3.0], [3.0, 3.0], [3.0, 3.0], [3.0, 3.0]])
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
    """A divergence's draws under "no drift" for these two samples: mean, spread, upper quantiles.

    >>> null = NullDistribution(np.array([0.1, 0.2, 0.3, 0.4]))
    >>> null.mean, round(null.sd, 4), null.p_value(0.35), null.quantile(0.5)
    (0.25, 0.1291, 0.4, 0.25)
    """
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
    information, so scaling by tokens would shrink its no-drift value just when it is most noisy.

    >>> groups = np.array([[5., 5, 0], [4, 6, 0], [6, 4, 0]])      # 3 groups x 3 id classes, both sides alike
    >>> null = js_null(groups, groups, 30, 30, draws=9)
    >>> len(null.draws), bool(0 <= null.mean < 0.05)
    (9, True)
    """
    x, y = group_swaps(a_groups.astype(float), b_groups.astype(float), draws, np.random.default_rng(seed))
    ok = (x.sum(1) > 0) & (y.sum(1) > 0)
    values = js_rows(_row_shares(x[ok]), _row_shares(y[ok]))
    return NullDistribution(values * size_factor(records_a, records_b))


def psi_null(a_groups: np.ndarray, b_groups: np.ndarray, records_a: int | None = None,
             records_b: int | None = None, draws: int = NULL_DRAWS, seed: int = NULL_SEED):
    """No-drift draws of the PSI of a histogram (groups x bins counts per side), scaled to the two
    sides' records (`size_factor`; by default the histograms' totals, which are records when
    each record falls in one bin).

    >>> groups = np.array([[5., 5, 0], [4, 6, 0], [6, 4, 0]])      # 3 groups x 3 bins, both sides alike
    >>> null = psi_null(groups, groups, draws=9)
    >>> len(null.draws), bool(0 <= null.mean < 0.1)
    (9, True)
    """
    x, y = group_swaps(a_groups.astype(float), b_groups.astype(float), draws, np.random.default_rng(seed + 1))
    ok = (x.sum(1) > 0) & (y.sum(1) > 0)
    records_a = a_groups.sum() if records_a is None else records_a
    records_b = b_groups.sum() if records_b is None else records_b
    return NullDistribution(psi_rows(x[ok], y[ok]) * size_factor(records_a, records_b))


"""The layout of `drift.json` (written by `tokenbeam drift --report DIR`), its version and verdicts.

Layout (version 2):

    kind: "tokenbeam.drift", schema_version: 2
    baseline, current: {path, tokenizer_sha256, records}
    same_tokenizer: bool
    thresholds: {bytes_per_token, tokens_per_word, tokens_per_record, psi, js, raw_byte_share,
                 rejected_rate, level, fail_on}
    verdict: "ok" | "moderate" | "significant"      (the worst metric verdict)
    drift: bool                                     (some metric at or past `fail_on`; exit code 1)
    sections: {tokenization, data: {verdict, drift, flagged: [metric names]}}
    headline: str                                   (which kind moved, naming the flagged metrics)
    metrics: [{name, label, section, baseline, current, change, change_kind, interval, detectable,
               threshold, p_value, beyond_noise, null, verdict}]
        section "tokenization" (length-invariant figures), "data" (record lengths, rejections), "info".
        change_kind "relative": (current - baseline) / baseline, threshold on its absolute value;
        "absolute": current - baseline (shares and rates, in [0, 1]);
        "divergence": PSI or Jensen-Shannon divergence: `current` is the observed value, `baseline`
            its no-drift mean for these two sample sizes (`null`: {mean, sd, draws} from the random
            groups), change = current - baseline, threshold on the change;
        "info": shown, never judged (verdict "info").
        interval: [low, high] of the change at the per-figure Bonferroni level (level / judged
        figures); detectable: the smallest change beyond noise at that level; p_value: the test's.
        A figure that cannot be computed is null with verdict "n/a".
    top_shifted_tokens: [{id, token, baseline_share, current_share, change}]  (largest |change| first)
    histograms: {tokens_per_record, bytes_per_token: {edges, baseline, current}}  (record counts)

Verdicts, the same rule for every judged metric: `ok` when the change is within sampling noise
(not rejected by Holm-Bonferroni over the judged figures at `level`), `moderate` when beyond noise
but within the practical threshold, `significant` when beyond noise and past the threshold.
"""
from __future__ import annotations

DRIFT_KIND = "tokenbeam.drift"
DRIFT_SCHEMA_VERSION = 2

OK, MODERATE, SIGNIFICANT = "ok", "moderate", "significant"
INFO, NOT_AVAILABLE = "info", "n/a"
SEVERITY = {OK: 0, MODERATE: 1, SIGNIFICANT: 2}   # judged verdicts, mildest first
SECTIONS = ("tokenization", "data", "info")

CHANGE_KINDS = ("relative", "absolute", "divergence", "info")
METRIC_KEYS = ("name", "label", "section", "baseline", "current", "change", "change_kind", "interval",
               "detectable", "threshold", "p_value", "beyond_noise", "null", "verdict")
REQUIRED_KEYS = ("kind", "schema_version", "baseline", "current", "same_tokenizer", "thresholds",
                 "verdict", "drift", "sections", "headline", "metrics", "top_shifted_tokens", "histograms")


def verdict_for(beyond_noise: bool, change: float | None, threshold: float) -> str:
    """ok / moderate / significant for a change (see the rule above).

    >>> verdict_for(False, 0.3, 0.1), verdict_for(True, 0.05, 0.1), verdict_for(True, -0.3, 0.1)
    ('ok', 'moderate', 'significant')
    """
    if change is None:
        return NOT_AVAILABLE
    if not beyond_noise:
        return OK
    return SIGNIFICANT if abs(change) > threshold else MODERATE


def validate_drift(d) -> None:
    """Raise ValueError with one line if `d` is not a drift.json of this version."""
    if not isinstance(d, dict) or d.get("kind") != DRIFT_KIND:
        raise ValueError("not a tokenbeam drift.json")
    if d.get("schema_version") != DRIFT_SCHEMA_VERSION:
        raise ValueError(f"drift.json schema_version {d.get('schema_version')!r} is not supported "
                         f"(this tokenbeam reads version {DRIFT_SCHEMA_VERSION})")
    for key in REQUIRED_KEYS:
        if key not in d:
            raise ValueError(f"missing key {key!r}")
    for m in d["metrics"]:
        missing = [k for k in METRIC_KEYS if k not in m]
        if missing:
            raise ValueError(f"metric {m.get('name')!r} lacks {missing[0]!r}")
        if m["section"] not in SECTIONS:
            raise ValueError(f"metric {m['name']!r} has unknown section {m['section']!r}")
        if m["change_kind"] not in CHANGE_KINDS:
            raise ValueError(f"metric {m['name']!r} has unknown change_kind {m['change_kind']!r}")

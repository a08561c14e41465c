"""The layout of `drift.json` (written by `tokenbeam drift --report DIR`), its version and verdicts.

Layout (version 1):

    kind: "tokenbeam.drift", schema_version: 1
    baseline, current: {path, tokenizer_sha256, records}
    same_tokenizer: bool
    thresholds: {bytes_per_token, tokens_per_word, tokens_per_record, psi, js, raw_byte_share,
                 rejected_rate, fail_on}
    verdict: "ok" | "moderate" | "significant"      (the worst metric verdict)
    drift: bool                                     (some metric at or past `fail_on`; exit code 1)
    metrics: [{name, label, baseline, current, change, change_kind, threshold, verdict}]
        change_kind "relative": (current - baseline) / baseline, threshold on its absolute value;
        "absolute": current - baseline (shares and rates, in [0, 1]);
        "divergence": change is the divergence itself (PSI, Jensen-Shannon), baseline/current null;
        "info": shown, never judged (verdict "info").
        A figure that cannot be computed is null with verdict "n/a".
    top_shifted_tokens: [{id, token, baseline_share, current_share, change}]  (largest |change| first)
    histograms: {tokens_per_record, bytes_per_token: {edges, baseline, current}}  (record counts)

Verdict bands, the same rule for every judged metric: `ok` while |change| <= 40% of its threshold,
`moderate` up to the threshold, `significant` past it. With the default `--max-psi 0.25` this is the
usual population-stability convention (< 0.1 stable, 0.1-0.25 moderate, > 0.25 significant).
"""
from __future__ import annotations

DRIFT_KIND = "tokenbeam.drift"
DRIFT_SCHEMA_VERSION = 1

OK, MODERATE, SIGNIFICANT = "ok", "moderate", "significant"
INFO, NOT_AVAILABLE = "info", "n/a"
SEVERITY = {OK: 0, MODERATE: 1, SIGNIFICANT: 2}   # judged verdicts, mildest first
MODERATE_FRACTION = 0.4

CHANGE_KINDS = ("relative", "absolute", "divergence", "info")
METRIC_KEYS = ("name", "label", "baseline", "current", "change", "change_kind", "threshold", "verdict")
REQUIRED_KEYS = ("kind", "schema_version", "baseline", "current", "same_tokenizer", "thresholds",
                 "verdict", "drift", "metrics", "top_shifted_tokens", "histograms")


def verdict_for(change: float | None, threshold: float) -> str:
    """ok / moderate / significant for a change judged against its threshold (see the bands above)."""
    if change is None:
        return NOT_AVAILABLE
    size = abs(change)
    if size > threshold:
        return SIGNIFICANT
    if size > MODERATE_FRACTION * threshold:
        return MODERATE
    return OK


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
        if m["change_kind"] not in CHANGE_KINDS:
            raise ValueError(f"metric {m['name']!r} has unknown change_kind {m['change_kind']!r}")

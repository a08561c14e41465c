"""`tokenbeam drift BASELINE CURRENT`: did tokenization drift between two stats.json files?

From the two files alone: relative change of bytes per token (compression), tokens per word
(fertility), mean and p90 tokens per record; population stability index (PSI) of the
tokens-per-record and bytes-per-token histograms; Jensen-Shannon divergence of the token-id
frequencies and the ids whose share moved most; change of the raw-byte token share and of the
rejected-record rate. Each judged figure gets a verdict (ok / moderate / significant, bands in
`schemas/drift.py`); exit code 0 = nothing at or past `--fail-on`, 1 = drift, 2 = error.
"""
from __future__ import annotations

import argparse
import heapq
import importlib.util
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Sequence

from schemas import drift as layout
from schemas.stats import load_stats

TOP_SHIFTED = 15


# ---- the math (pure) ------------------------------------------------------------------------

def relative_change(baseline: float | None, current: float | None) -> float | None:
    """(current - baseline) / baseline; None when undefined (a missing figure or a zero baseline)."""
    if baseline is None or current is None or baseline == 0:
        return None
    return (current - baseline) / baseline


def psi(expected: Sequence[int], actual: Sequence[int], smoothing: float = 0.5) -> float:
    """Population stability index of two histograms over the same bins, from record counts.

    PSI = sum_i (q_i - p_i) * ln(q_i / p_i). An empty bin would make it infinite, so every bin that
    either side uses gets `smoothing` extra records on both sides (additive, Jeffreys-style: it
    fades as counts grow); bins empty on both sides play no part. Identical histograms give 0.
    """
    pairs = [(e, a) for e, a in zip(expected, actual, strict=True) if e or a]
    if not pairs:
        return 0.0
    total_e = sum(e for e, _ in pairs) + smoothing * len(pairs)
    total_a = sum(a for _, a in pairs) + smoothing * len(pairs)
    value = 0.0
    for e, a in pairs:
        p, q = (e + smoothing) / total_e, (a + smoothing) / total_a
        value += (q - p) * math.log(q / p)
    return value


def js_divergence(p_counts: Sequence[int], q_counts: Sequence[int]) -> float:
    """Jensen-Shannon divergence (base 2, so in [0, 1]) of two count vectors over the same ids.

    JS = (KL(P || M) + KL(Q || M)) / 2 with M = (P + Q) / 2: finite without smoothing, symmetric,
    0 for identical distributions, 1 for distributions on disjoint ids.
    """
    p_total, q_total = sum(p_counts), sum(q_counts)
    if p_total == 0 or q_total == 0:
        raise ValueError("Jensen-Shannon divergence of an empty distribution")
    value = 0.0
    for a, b in zip(p_counts, q_counts, strict=True):
        if a or b:
            p, q = a / p_total, b / q_total
            m = (p + q) / 2
            if p:
                value += p * math.log2(p / m)
            if q:
                value += q * math.log2(q / m)
    return min(1.0, max(0.0, value / 2))


# ---- the comparison ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Thresholds:
    """When a change counts as drift. Relative changes and shares are fractions (0.05 = 5%)."""
    bytes_per_token: float = 0.05     # |relative change| of bytes per token
    tokens_per_word: float = 0.05     # |relative change| of tokens per word
    tokens_per_record: float = 0.25   # |relative change| of mean and p90 tokens per record
    psi: float = 0.25                 # PSI of each histogram
    js: float = 0.1                   # Jensen-Shannon divergence of token-id frequencies
    raw_byte_share: float = 0.02      # |change| of the share of single-byte tokens
    rejected_rate: float = 0.01       # |change| of rejected / records read
    fail_on: str = layout.SIGNIFICANT  # exit 1 from this verdict on: "moderate" or "significant"


@dataclass
class Metric:
    """One row of the report. `change_kind` says how `change` is computed and judged."""
    name: str
    label: str
    baseline: float | None
    current: float | None
    change: float | None
    change_kind: str
    threshold: float | None
    verdict: str


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
            "metrics": [asdict(m) for m in self.metrics],
            "top_shifted_tokens": self.top_shifted_tokens,
            "histograms": self.histograms,
        }


def _rejected_rate(stats: dict) -> float | None:
    return stats["rejected"]["total"] / stats["records_read"] if stats["records_read"] else None


def _relative(name, label, base, cur, threshold) -> Metric:
    change = relative_change(base, cur)
    return Metric(name, label, base, cur, change, "relative", threshold, layout.verdict_for(change, threshold))


def _absolute(name, label, base, cur, threshold) -> Metric:
    change = None if base is None or cur is None else cur - base
    return Metric(name, label, base, cur, change, "absolute", threshold, layout.verdict_for(change, threshold))


def _divergence(name, label, value, threshold) -> Metric:
    return Metric(name, label, None, None, value, "divergence", threshold, layout.verdict_for(value, threshold))


def _info(name, label, base, cur) -> Metric:
    return Metric(name, label, base, cur, relative_change(base, cur), "info", None, layout.INFO)


def _side(stats: dict) -> dict:
    """What drift.json says about one input (`path` is filled in by the command line)."""
    return {"path": None, "tokenizer_sha256": stats["tokenizer_sha256"], "records": stats["records"]}


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


def compare(baseline: dict, current: dict, thresholds: Thresholds = Thresholds(),
            allow_different_tokenizers: bool = False) -> DriftReport:
    """Compare two validated stats.json objects. ValueError (one line) when they cannot be compared:
    no records on a side, or different tokenizers unless `allow_different_tokenizers` (then the
    id-based figures, JS divergence and shifted tokens, are left out: ids of two vocabularies do
    not correspond)."""
    for side, stats in (("baseline", baseline), ("current", current)):
        if stats["records"] == 0:
            raise ValueError(f"the {side} stats have no records: nothing to compare")
    same_tokenizer = baseline["tokenizer_sha256"] == current["tokenizer_sha256"]
    if not same_tokenizer and not allow_different_tokenizers:
        raise ValueError(f"the stats were made with different tokenizers (sha256 "
                         f"{baseline['tokenizer_sha256'][:12]}... vs {current['tokenizer_sha256'][:12]}...); "
                         f"pass --allow-different-tokenizers to compare them anyway")
    t = thresholds
    b_tpr, c_tpr = baseline["tokens_per_record"], current["tokens_per_record"]
    b_hist_tpr, c_hist_tpr = b_tpr["histogram"]["counts"], c_tpr["histogram"]["counts"]
    b_hist_bpt = baseline["bytes_per_token"]["histogram"]["counts"]
    c_hist_bpt = current["bytes_per_token"]["histogram"]["counts"]
    if same_tokenizer:
        js = js_divergence(baseline["token_frequency"]["counts"], current["token_frequency"]["counts"])
        shifted = top_shifted_tokens(baseline, current)
    else:
        js, shifted = None, []

    metrics = [
        _relative("bytes_per_token", "bytes per token", baseline["bytes_per_token"]["overall"],
                  current["bytes_per_token"]["overall"], t.bytes_per_token),
        _relative("tokens_per_word", "tokens per word", baseline["tokens_per_word"],
                  current["tokens_per_word"], t.tokens_per_word),
        _relative("tokens_per_record_mean", "tokens per record (mean)", b_tpr["mean"], c_tpr["mean"],
                  t.tokens_per_record),
        _relative("tokens_per_record_p90", "tokens per record (p90)", b_tpr["p90"], c_tpr["p90"],
                  t.tokens_per_record),
        _divergence("psi_tokens_per_record", "PSI tokens per record", psi(b_hist_tpr, c_hist_tpr), t.psi),
        _divergence("psi_bytes_per_token", "PSI bytes per token", psi(b_hist_bpt, c_hist_bpt), t.psi),
        _divergence("js_token_ids", "JS divergence of token ids", js, t.js),
        _absolute("raw_byte_share", "raw-byte token share", baseline["raw_byte_tokens"]["share"],
                  current["raw_byte_tokens"]["share"], t.raw_byte_share),
        _absolute("rejected_rate", "rejected records rate", _rejected_rate(baseline), _rejected_rate(current),
                  t.rejected_rate),
        _info("vocabulary_utilisation", "vocabulary utilisation", baseline["vocabulary"]["utilisation"],
              current["vocabulary"]["utilisation"]),
        _info("records", "records", baseline["records"], current["records"]),
        _info("tokens", "tokens", baseline["tokens"], current["tokens"]),
    ]
    histograms = {
        "tokens_per_record": {"edges": b_tpr["histogram"]["edges"], "baseline": b_hist_tpr, "current": c_hist_tpr},
        "bytes_per_token": {"edges": baseline["bytes_per_token"]["histogram"]["edges"],
                            "baseline": b_hist_bpt, "current": c_hist_bpt},
    }
    return DriftReport(thresholds, _side(baseline), _side(current), same_tokenizer, metrics, shifted, histograms)


# ---- rendering --------------------------------------------------------------------------------

_SHARES = {"raw_byte_share", "rejected_rate", "vocabulary_utilisation"}


def _value(m: Metric, v) -> str:
    if v is None:
        return "-"
    if m.name in _SHARES:
        return f"{100 * v:.2f}%"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3f}"


def _change(m: Metric) -> str:
    if m.change is None:
        return "-"
    if m.change_kind == "absolute":
        return f"{100 * m.change:+.2f} pp"
    if m.change_kind == "divergence":
        return f"{m.change:.4f}"
    return f"{100 * m.change:+.1f}%"


def _threshold(m: Metric) -> str:
    if m.threshold is None:
        return "-"
    if m.change_kind == "absolute":
        return f"±{100 * m.threshold:.2f} pp"
    if m.change_kind == "divergence":
        return f"{m.threshold:g}"
    return f"±{100 * m.threshold:.1f}%"


def table_rows(report: DriftReport) -> list[list[str]]:
    return [[m.label, _value(m, m.baseline), _value(m, m.current), _change(m), _threshold(m), m.verdict]
            for m in report.metrics]


HEADER = ["metric", "baseline", "current", "change", "threshold", "verdict"]


def verdict_line(report: DriftReport) -> str:
    """The one-line answer."""
    if report.drift:
        names = ", ".join(m.label for m in report.flagged)
        return (f"DRIFT ({report.verdict}): {len(report.flagged)} of {len(report.judged)} metrics at or past "
                f"'{report.thresholds.fail_on}': {names}")
    moderate = [m.label for m in report.judged if m.verdict == layout.MODERATE]
    extra = f" (moderate: {', '.join(moderate)})" if moderate else ""
    return f"no drift: {len(report.judged)} metrics within thresholds{extra}"


def render_terminal(report: DriftReport) -> str:
    rows = [HEADER] + table_rows(report)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
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
             f"- fail on: {report.thresholds.fail_on}; bands: ok up to {layout.MODERATE_FRACTION:.0%} of a "
             f"threshold, moderate up to it, significant past it", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_md_cell(cell) for cell in row) + " |" for row in table_rows(report)]
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


def headline(report: DriftReport) -> str:
    """A short title: the verdict and the figures users read first."""
    figures = [f"{m.label} {_change(m)}" for m in report.metrics
               if m.name in ("bytes_per_token", "tokens_per_word", "js_token_ids") and m.change is not None]
    word = f"DRIFT ({report.verdict})" if report.drift else f"no drift ({report.verdict})"
    return f"{word}: " + ", ".join(figures)


def _used_range(*histograms: Sequence[int]) -> tuple[int, int]:
    used = [i for h in histograms for i, c in enumerate(h) if c]
    return min(used), max(used) + 1


def report_side(report: DriftReport, side: str) -> str:
    """A legend label: the stats file's folder (runs/tokens/stats.json -> tokens) or file name."""
    info = getattr(report, side)
    path = os.path.abspath(info["path"]) if info["path"] else side
    name = os.path.basename(os.path.dirname(path) if os.path.basename(path) == "stats.json" else path)
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
    ax.set_title(f"Tokens per record  (PSI {report.metric('psi_tokens_per_record').change:.3f})")
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
    ax.set_title(f"Bytes per token  ({_change(bpt)}, PSI {report.metric('psi_bytes_per_token').change:.3f})")
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
        ax.set_title(f"Top shifted tokens  (JS {report.metric('js_token_ids').change:.4f})")
    else:
        why = "no token's share changed" if report.same_tokenizer else "different tokenizers:\ntoken ids not comparable"
        ax.text(0.5, 0.5, why, ha="center", va="center")
        ax.set_axis_off()
    fig.suptitle(headline(report), fontsize=13,
                 color="tab:red" if report.drift else "tab:green", fontweight="bold")
    fig.savefig(path, dpi=100)


def write_report(report: DriftReport, directory: str) -> list[str]:
    """drift.json, drift.md and (when matplotlib is importable) drift.png in `directory`."""
    os.makedirs(directory, exist_ok=True)
    written = []
    picture = None
    if importlib.util.find_spec("matplotlib") is not None:    # the `plot` extra
        plot_report(report, os.path.join(directory, "drift.png"))
        picture = "drift.png"
        written.append(os.path.join(directory, "drift.png"))
    with open(os.path.join(directory, "drift.json"), "w", encoding="utf-8") as f:
        json.dump(report.to_json(), f, indent=1, sort_keys=True, allow_nan=False)
        f.write("\n")
    with open(os.path.join(directory, "drift.md"), "w", encoding="utf-8") as f:
        f.write(render_markdown(report, picture))
    return [os.path.join(directory, "drift.json"), os.path.join(directory, "drift.md")] + written


# ---- command line -----------------------------------------------------------------------------

def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    d = Thresholds()
    parser = argparse.ArgumentParser(
        prog="tokenbeam drift", description="Compare two stats.json files and say whether tokenization drifted.",
        epilog=f"Verdicts: ok up to {layout.MODERATE_FRACTION:.0%} of a threshold, moderate up to it, significant "
               f"past it. Exit code: 0 no drift, 1 drift, 2 error (unreadable or incompatible stats files).")
    parser.add_argument("baseline", help="stats.json of the reference data")
    parser.add_argument("current", help="stats.json of the new data")
    parser.add_argument("--report", metavar="DIR", help="write drift.json, drift.md and drift.png here")
    parser.add_argument("--fail-on", choices=[layout.MODERATE, layout.SIGNIFICANT], default=d.fail_on,
                        help="exit 1 when a metric reaches this verdict (default: %(default)s)")
    for name, help_text in (
            ("bytes-per-token-change", "relative change of bytes per token"),
            ("tokens-per-word-change", "relative change of tokens per word"),
            ("tokens-per-record-change", "relative change of mean and p90 tokens per record"),
            ("psi", "population stability index of each histogram"),
            ("js", "Jensen-Shannon divergence of token-id frequencies"),
            ("raw-byte-share-change", "change of the share of single-byte tokens"),
            ("rejected-rate-change", "change of the rejected-record rate")):
        dest = name.replace("-change", "").replace("-", "_")
        parser.add_argument(f"--max-{name}", dest=dest, type=_non_negative, default=getattr(d, dest),
                            metavar="X", help=f"{help_text} counted as significant past X (default: %(default)s)")
    parser.add_argument("--allow-different-tokenizers", action="store_true",
                        help="compare stats made with different tokenizers (token-id figures left out)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    thresholds = Thresholds(bytes_per_token=args.bytes_per_token, tokens_per_word=args.tokens_per_word,
                            tokens_per_record=args.tokens_per_record, psi=args.psi, js=args.js,
                            raw_byte_share=args.raw_byte_share, rejected_rate=args.rejected_rate,
                            fail_on=args.fail_on)
    try:
        baseline, current = load_stats(args.baseline), load_stats(args.current)
        report = compare(baseline, current, thresholds, args.allow_different_tokenizers)
        report.baseline["path"], report.current["path"] = args.baseline, args.current
        print(render_terminal(report))
        if args.report:
            for path in write_report(report, args.report):
                print(f"wrote {path}", file=sys.stderr)
    except (OSError, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, OSError) and exc.filename and str(exc.filename) not in message:
            message = f"{exc.filename}: {message}"
        print(f"tokenbeam drift: error: {message}", file=sys.stderr)
        return 2
    return 1 if report.drift else 0


if __name__ == "__main__":
    sys.exit(main())

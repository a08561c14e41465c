"""Showing drift: the terminal text, drift.md, drift.json and drift.png of each report kind of
`tokenbeam drift` (a pair, a series over time, the groups of a pair), from the judgements of
`pipelines/monitoring/drift_judging.py`. The picture needs the `plot` extra (matplotlib); without it the other
files are written and the Markdown has no picture.
"""
from __future__ import annotations

import importlib.util
import json
import os
import posixpath
from typing import Callable, Sequence

from pipelines.core import files
from pipelines.monitoring.drift_judging import (DATA, INFO_SECTION, TOKENIZATION, DriftReport, GroupComparison, Judged, Metric,
                                     Thresholds, compare_files, compare_groups, headline)
from schemas import drift as layout

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


# ---- a pair (and its groups' lines): shown, and the files of every kind written --------------

def show_pair(baseline: dict, baseline_path: str, current: dict, current_path: str,
              thresholds: Thresholds = Thresholds(), allow_different_tokenizers: bool = False
              ) -> tuple[DriftReport, list[GroupComparison]]:
    """Judge a pair of loaded stats files and print the terminal report on stdout: the whole data's
    table, then, when both sides were written with `--group-field`, each group's line. Returns the
    report and the groups (empty without)."""
    report = compare_files(baseline, baseline_path, current, current_path, thresholds, allow_different_tokenizers)
    print(render_terminal(report))
    groups = []
    if baseline.get("groups") is not None and current.get("groups") is not None:
        groups = compare_groups(baseline, baseline_path, current, current_path, thresholds, allow_different_tokenizers)
        print(render_groups(groups))
    return report, groups


PICTURE = "drift.png"


def write_files(directory: str, value: dict, markdown: Callable[[str | None], str],
                plot: Callable[[str], None]) -> list[str]:
    """The files of one report in `directory` (a path or URL): drift.png drawn by `plot(url)` when
    matplotlib (the `plot` extra) is importable, drift.json holding `value`, and drift.md as
    `markdown(the picture's name, or None)` gives it. Returns the URLs written: json, md, png."""
    json_url, md_url, png_url = (files.join(directory, name) for name in ("drift.json", "drift.md", PICTURE))
    picture = None
    if importlib.util.find_spec("matplotlib") is not None:
        plot(png_url)
        picture = PICTURE
    files.write_text_atomic(json_url, dump_json(value))
    files.write_text_atomic(md_url, markdown(picture))
    return [json_url, md_url] + ([png_url] if picture else [])


def write_report(report: DriftReport, directory: str) -> list[str]:
    """drift.json, drift.md and (when matplotlib is importable) drift.png of a pair in `directory`."""
    return write_files(directory, report.to_json(), lambda picture: render_markdown(report, picture),
                       lambda url: plot_report(report, url))


def dump_json(value) -> str:
    return json.dumps(value, indent=1, sort_keys=True, allow_nan=False) + "\n"


# ---- over time ------------------------------------------------------------------------------

def _verdict_word(judged: Judged) -> str:
    return "DRIFT" if judged.drift else "ok"


def render_over_time(judged: list[Judged]) -> str:
    """One line per file: label, verdict, records and the flagged metrics (or why not judged)."""
    width = max(len(j.label) for j in judged)
    lines = []
    for j in judged:
        if j.report is None:
            lines.append(f"{j.label:<{width}}  not judged   {j.reason}")
            continue
        lines.append(f"{j.label:<{width}}  {_verdict_word(j):<11}  {j.report.current['records']:>7,} records  "
                     f"{headline(j.report)}")
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


def over_time_json(judged: list[Judged]) -> dict:
    """drift.json over time: every file's report (or why it has none)."""
    return {"kind": layout.DRIFT_KIND + ".over_time", "schema_version": layout.DRIFT_SCHEMA_VERSION,
            "drifted": sum(j.drift for j in judged),
            "windows": [{"label": j.label, "path": j.path, "drift": j.drift, "not_judged": j.reason,
                         "report": j.report.to_json() if j.report else None} for j in judged]}


def render_markdown_over_time(judged: list[Judged], picture: str | None) -> str:
    """drift.md over time: one row per file."""
    lines = ["# Drift over time\n\n| window | verdict | records | headline |\n|---|---|---|---|\n"]
    for j in judged:
        if j.report is None:
            lines.append(f"| {_md_cell(j.label)} | not judged | | {_md_cell(j.reason or '')} |\n")
        else:
            lines.append(f"| {_md_cell(j.label)} | {_verdict_word(j)} | {j.report.current['records']:,} | "
                         f"{_md_cell(headline(j.report))} |\n")
    if picture:
        lines.append(f"\n![drift over time]({picture})\n")
    return "".join(lines)


def write_over_time(judged: list[Judged], directory: str) -> list[str]:
    """drift.json (every file's report), drift.md (one row per file) and drift.png (the time panel)."""
    return write_files(directory, over_time_json(judged), lambda picture: render_markdown_over_time(judged, picture),
                       lambda url: plot_over_time(judged, url))


# ---- groups ---------------------------------------------------------------------------------

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


GROUPS_FILE = "drift_groups.json"


def write_groups(groups: list[GroupComparison], directory: str) -> str:
    """drift_groups.json in `directory`: each group's status, sizes and report; returns its URL."""
    url = files.join(directory, GROUPS_FILE)
    files.write_text_atomic(url, dump_json(
        [{"value": g.value, "status": g.status, "records": list(g.records), "share": list(g.share),
          "drift": g.drift, "report": g.report.to_json() if g.report else None} for g in groups]))
    return url

"""evaluate's report: evaluate.json from the rows, evaluate.md (tables) and evaluate.png (the plot
extra), written by the last step of the pipeline, and `_SUCCESS` after them.
"""
from __future__ import annotations

import importlib.util
import io
import json
import time
from dataclasses import dataclass

from schemas.accounts import ACCOUNT_KEY, account_of
from schemas.evaluate import DEFINITIONS, EVALUATE_KIND, EVALUATE_SCHEMA_VERSION, success_json, validate_evaluate
from pipelines.core.files import join, open_atomic, write_text_atomic, writing
from pipelines.datasets.shards import describe_shard_error

SUCCESS = "_SUCCESS"

@dataclass(frozen=True)
class ReportContext:
    """What the report says besides the figures, from the launcher."""
    inputs: list
    group_field: str | None
    tokenizers: list            # the `tokenizers` entries of evaluate.json
    started_at: float
    allow_shard_errors: bool


def report_json(rows: list[dict], account_and_errors: tuple, context: ReportContext) -> dict:
    order = {t["name"]: i for i, t in enumerate(context.tokenizers)}
    rows = sorted(rows, key=lambda r: (order[r["tokenizer"]], r["group"] is not None, r["group"] or ""))
    account, shard_errors = account_and_errors
    report = {
        "kind": EVALUATE_KIND, "schema_version": EVALUATE_SCHEMA_VERSION, "inputs": context.inputs,
        "group_field": context.group_field, "definitions": DEFINITIONS, "tokenizers": context.tokenizers,
        "rows": rows, ACCOUNT_KEY: account.to_json(), "records": account.records_written,
        "shard_errors": shard_errors,
        "timing": {"started_at": context.started_at, "elapsed_seconds": round(time.time() - context.started_at, 3)},
    }
    validate_evaluate(report)
    return report


def cell(value, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "share":
        return f"{100 * value:.1f}%"
    if kind == "int":
        return f"{value:,}"
    return f"{value:.3f}" if value < 10 else f"{value:.2f}"


TABLE = (("bytes/token", "bytes_per_token", "ratio"), ("tokens/char", "tokens_per_char", "ratio"),
         ("tokens/word", "tokens_per_word", "ratio"), ("words kept whole", "words_kept_whole", "share"),
         ("word types kept whole", "word_types_kept_whole", "share"),
         ("pieces/word type", "pieces_per_word_type", "ratio"), ("raw-byte share", "raw_byte_share", "share"),
         ("ids used", "used_ids", "int"), ("utilisation", "vocab_utilisation", "share"))
SIZE_TABLE = (("merges", "merges", "int"), ("vocabulary", "vocab_size", "int"), ("pieces in use", "used_ids", "int"),
              ("pieces/word type", "pieces_per_word_type", "ratio"), ("pieces/word", "pieces_per_word", "ratio"),
              ("word types kept whole", "word_types_kept_whole", "share"),
              ("words kept whole", "words_kept_whole", "share"), ("bytes/token", "bytes_per_token", "ratio"))


def markdown_table(columns, rows: list[dict], first: tuple[str, str]) -> list[str]:
    head = [first[0]] + [c[0] for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" + "---:|" * len(columns)]
    for row in rows:
        name = " ".join(str(row[first[1]]).split()).replace("|", "\\|")    # a group value is any text
        lines.append("| " + " | ".join([name] + [cell(row.get(key), kind) for _, key, kind in columns]) + " |")
    return lines


def render_markdown(report: dict, picture: str | None) -> str:
    rows = report["rows"]
    whole = [r for r in rows if r["group"] is None]
    account = account_of(report)
    out = ["# Tokenizer evaluation", "",
           f"{account.records_written:,} records ({account.records_read:,} read, {account.records_rejected:,} rejected) "
           f"of {account.shards_read} shard(s): {', '.join(report['inputs'])}", ""]
    out += markdown_table(TABLE, whole, ("tokenizer", "tokenizer")) + [""]
    merges = {t["name"]: t for t in report["tokenizers"]}
    series = [t for t in report["tokenizers"] if t["truncated_from"]]
    if series:
        out += ["## One merge list at several sizes", ""]
        for base in dict.fromkeys(t["truncated_from"] for t in series):
            names = [t["name"] for t in report["tokenizers"] if t["truncated_from"] == base or t["name"] == base]
            sized = sorted(({**r, "merges": merges[r["tokenizer"]]["merges"]} for r in whole if r["tokenizer"] in names),
                           key=lambda r: r["merges"])
            out += [f"`{base}`:", ""] + markdown_table(SIZE_TABLE[1:], sized, ("merges", "merges")) + [""]
    if report["group_field"]:
        out += [f"## Per {report['group_field']}", ""]
        grouped = sorted((r for r in rows if r["group"] is not None), key=lambda r: (r["group"], r["tokenizer"]))
        out += markdown_table((("records", "records", "int"),) + TABLE[:7], [{**r, "key": f"{r['group']} · {r['tokenizer']}"}
                                                                       for r in grouped], ("group · tokenizer", "key"))
        out += [""]
    out += ["## Definitions", ""] + [f"- **{k}**: {v}" for k, v in report["definitions"].items()] + [""]
    if picture:
        out += [f"![compression against vocabulary size]({picture})", ""]
    for error in report["shard_errors"]:
        out.append(f"- shard error: {describe_shard_error(error)}")
    return "\n".join(out) + "\n"


def plot_report(report: dict, f) -> None:
    """Compression (bytes per token) against vocabulary size, one line per group and tokenizer family
    (a merge list with its cut sizes is one line), written as PNG into file object `f`."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 6), layout="constrained")
    ax = fig.subplots()
    family = {t["name"]: t["truncated_from"] or t["name"] for t in report["tokenizers"]}
    lines: dict = {}
    for r in report["rows"]:
        if r["bytes_per_token"] is not None:
            lines.setdefault((family[r["tokenizer"]], r["group"]), []).append((r["vocab_size"], r["bytes_per_token"]))
    markers = dict(zip(dict.fromkeys(family.values()), "osD^vP*X"))
    groups = sorted({g for _, g in lines if g is not None})
    colors = {g: f"C{i % 10}" for i, g in enumerate(groups)}       # one colour per group, any family
    for (fam, group), points in sorted(lines.items(), key=lambda kv: (kv[0][0], kv[0][1] is not None, kv[0][1] or "")):
        points.sort()
        label = f"{fam}: {'all' if group is None else group}".encode("ascii", "backslashreplace").decode()
        ax.plot(*zip(*points), marker=markers.get(fam, "o"), linewidth=2.5 if group is None else 1,
                color="black" if group is None else colors[group], label=label)
    ax.set_xscale("log")
    ax.set_xlabel("vocabulary size (ids)")
    ax.set_ylabel("bytes per token (higher: more compression)")
    ax.set_title(f"Compression on {report['records']:,} records (marker: tokenizer, colour: group)")
    if len(lines) <= 40:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.savefig(f, format="png", dpi=100)


def plot_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None       # the `plot` extra


def write_report(_, rows: list[dict], account: tuple, output: str, context: ReportContext) -> dict:
    """evaluate.json, evaluate.md, evaluate.png (with the plot extra) and, when complete, _SUCCESS."""
    report = report_json(rows, account, context)
    picture = None
    if plot_available():
        buffer = io.BytesIO()
        plot_report(report, buffer)
        url = join(output, "evaluate.png")
        with writing(url), open_atomic(url) as f:
            f.write(buffer.getvalue())
        picture = "evaluate.png"
    for name, text in (("evaluate.json", json.dumps(report, indent=1, sort_keys=True, allow_nan=False) + "\n"),
                       ("evaluate.md", render_markdown(report, picture))):
        url = join(output, name)
        with writing(url):
            write_text_atomic(url, text)
    if report["records"] and (context.allow_shard_errors or not report["shard_errors"]):
        url = join(output, SUCCESS)
        with writing(url):
            write_text_atomic(url, json.dumps(success_json(report), sort_keys=True) + "\n")
    return report

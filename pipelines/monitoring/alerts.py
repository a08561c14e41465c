"""Watch-mode alerts: `tokenize --watch --baseline STATS` judges each new shard against the baseline
as soon as it is written, says so at once, and keeps one line per shard in `OUTPUT/alerts.jsonl`
(shard, its windows, verdict, flagged metrics, headline)."""
from __future__ import annotations

import json
import time

from pipelines.core.beam_options import beam  # first: it hides Beam's import-time apitools warning

from pipelines.monitoring.drift_judging import compare, headline
from pipelines.core.errors import say
from pipelines.core.files import append_text, filesystem, is_local, join, read_json, write_text_atomic, writing
from schemas.stats import TokenizerFacts, dump_stats, stats_json

class JudgeShard(beam.DoFn):
    """Watch mode: judge each shard's statistics against the baseline as soon as the shard is written
    and say so at once, on the console and as one line of `OUTPUT/alerts.jsonl` (shard, its windows,
    verdict, flagged metrics, headline). A local output gets the line appended as it is judged; on an
    object store each shard's line is its own file under `alerts/`, gathered into `alerts.jsonl` when
    the watch ends."""

    def __init__(self, baseline_url: str, facts: TokenizerFacts, output: str):
        self.baseline_url = baseline_url
        self.facts = facts
        self.output = output

    def setup(self):
        self.baseline = read_json(self.baseline_url)

    def process(self, entry_and_summary):
        entry, summary = entry_and_summary
        current = json.loads(dump_stats(stats_json(summary, self.facts)))
        alert = {"shard": entry["relpath"], "windows": entry.get("windows", []), "records": summary.records,
                 "at": round(time.time(), 3)}
        try:
            report = compare(self.baseline, current)
        except ValueError as exc:     # too few records to judge, say: reported, never an alert
            alert.update(verdict="not judged", drift=False, flagged=[], headline=str(exc))
        else:
            alert.update(verdict=report.verdict, drift=report.drift, flagged=[m.name for m in report.flagged],
                         headline=headline(report))
        line = json.dumps(alert, sort_keys=True)
        say(f"{'ALERT' if alert['drift'] else 'ok'} {entry['relpath']}: {alert['headline']}")
        write_alert(self.output, entry["relpath"], line)
        yield alert


ALERTS = "alerts.jsonl"
ALERTS_DIR = "alerts"


def write_alert(output: str, relpath: str, line: str) -> None:
    from pipelines.datasets.sources import output_name

    url = join(output, ALERTS_DIR, output_name(relpath, ".json"))
    with writing(url):
        write_text_atomic(url, line + "\n")
        if is_local(output):
            append_text(join(output, ALERTS), line + "\n")      # one short line per write: appended whole


def gather_alerts(output: str) -> int:
    """`alerts.jsonl` from the per-shard alert files, in the order they were judged (an object store
    output has no appendable file). Returns how many alerts said drift."""
    fs, root = filesystem(join(output, ALERTS_DIR))
    alerts = []
    if fs.exists(root):
        for f in sorted(f for f in fs.find(root) if f.endswith(".json")):
            with fs.open(f, "rb") as fh:
                alerts.append(json.loads(fh.read()))
    alerts.sort(key=lambda a: (a["at"], a["shard"]))
    write_text_atomic(join(output, ALERTS), "".join(json.dumps(a, sort_keys=True) + "\n" for a in alerts))
    return sum(a["drift"] for a in alerts)

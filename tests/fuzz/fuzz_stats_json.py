"""Fuzz target: a stats.json as `tokenbeam drift` reads it, on either side of a comparison with a
valid one (`pipelines.drift`'s command: load, validate, compare, print the report, compare the
groups both index; stdout dropped),
held to tests/fuzz/harness.py's contract. Run from the worktree:

    mkdir -p /tmp/fuzz-stats_json && python3 tests/fuzz/fuzz_stats_json.py -max_total_time=600 \
        /tmp/fuzz-stats_json tests/fuzz/corpus/stats_json

(new corpus entries go to the first folder, crashing inputs to ./crash-*; seeds: make_seeds.py)."""
import contextlib
import io
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from bpe_ops import drift_stats
    from pipelines.core import command
    from pipelines import drift
    from schemas import stats  # noqa: F401  (instrumented: drift reads stats.json through it)

if __name__ == "__main__":
    # Fuzzing only (never on import: the regression test shares its process with drift's own tests):
    # 19 no-drift draws instead of 499, the same code, five times as many inputs a second.
    for null in (drift_stats.js_null, drift_stats.psi_null):
        null.__defaults__ = tuple(19 if v == drift_stats.NULL_DRAWS else v for v in null.__defaults__)
HERE = Path(__file__).resolve().parent
# The valid side: a stats.json with a groups index, whose group files drift reads too.
GOOD = HERE / "corpus" / "stats_json" / "grouped.stats.json"
GROUPS = HERE / "data" / "groups"


def check(data: bytes) -> None:
    bad = harness.scratch("stats.json", data, folder="stats_json")
    good = harness.scratch("good.stats.json", GOOD.read_bytes(), folder="stats_json")
    os.makedirs(os.path.join(os.path.dirname(good), "groups"), exist_ok=True)
    for group in GROUPS.iterdir():
        harness.scratch(f"groups/{group.name}", group.read_bytes(), folder="stats_json")
    for argv in ([bad, good], [good, bad]):
        with contextlib.redirect_stdout(io.StringIO()):
            harness.expect_refusal_or(lambda: command.run(drift.COMMAND, argv), bad)


if __name__ == "__main__":
    harness.fuzz(check)

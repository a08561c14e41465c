"""Fuzz target: a tokenizer.json as the CLI loads it (`pipelines.datasets.tokenizer_files.load_tokenizer`), then
encoded and decoded (tests/fuzz/harness.py says what a finding is). Run from the worktree:

    mkdir -p /tmp/fuzz-tokenizer_json && python3 tests/fuzz/fuzz_tokenizer_json.py -max_total_time=600 \
        /tmp/fuzz-tokenizer_json tests/fuzz/corpus/tokenizer_json

(new corpus entries go to the first folder, crashing inputs to ./crash-*; seeds: make_seeds.py).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from pipelines.datasets.tokenizer_files import load_tokenizer


def check(data: bytes) -> None:
    path = harness.scratch("tokenizer.json", data, folder="tokenizer")
    harness.exercise_tokenizer(
        lambda implementation: harness.expect_refusal_or(lambda: load_tokenizer(path, implementation), path), path)


if __name__ == "__main__":
    harness.fuzz(check)

"""Fuzz target: a SentencePiece-style tokenizer.json (or a SentencePiece `.model` protobuf given as the
tokenizer) as the CLI loads it (`pipelines.datasets.tokenizer_files.load_tokenizer`), then
encoded and decoded (tests/fuzz/harness.py says what a finding is). Run from the worktree:

    mkdir -p /tmp/fuzz-sentencepiece && python3 tests/fuzz/fuzz_sentencepiece.py -max_total_time=600 \
        /tmp/fuzz-sentencepiece tests/fuzz/corpus/sentencepiece

(new corpus entries go to the first folder, crashing inputs to ./crash-*; seeds: make_seeds.py).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from pipelines.datasets.tokenizer_files import load_tokenizer


def check(data: bytes) -> None:
    path = harness.scratch("tokenizer.model" if data[:1] == b"\n" else "tokenizer.json", data, folder="tokenizer")
    harness.exercise_tokenizer(
        lambda implementation: harness.expect_refusal_or(lambda: load_tokenizer(path, implementation), path), path)


if __name__ == "__main__":
    harness.fuzz(check)

"""Fuzz target: a tiktoken rank file as the CLI loads it (`load_tokenizer` with `--pattern gpt4
--special-token '<|endoftext|>=299'`), then encoded and decoded (tests/fuzz/harness.py says what a
finding is). Run from the worktree:

    mkdir -p /tmp/fuzz-tiktoken && python3 tests/fuzz/fuzz_tiktoken.py -max_total_time=600 \
        /tmp/fuzz-tiktoken tests/fuzz/corpus/tiktoken

(new corpus entries go to the first folder, crashing inputs to ./crash-*; seeds: make_seeds.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from pipelines.datasets.tokenizer_files import load_tokenizer

SPECIALS = {"<|endoftext|>": 299}       # the id after the seed's last rank


def check(data: bytes) -> None:
    path = harness.scratch("tokenizer.tiktoken", data, folder="tokenizer")
    harness.exercise_tokenizer(lambda implementation: harness.expect_refusal_or(
        lambda: load_tokenizer(path, implementation, "gpt4", SPECIALS), path), path)


if __name__ == "__main__":
    harness.fuzz(check)

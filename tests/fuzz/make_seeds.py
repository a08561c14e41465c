"""Write the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/), every file made by tokenbeam
itself (or by `tokenizers` / `sentencepiece`, as the tests make SentencePiece-style files), each
small (a few KB):

    cd WORKTREE && PYTHONPATH=$PWD python3 tests/fuzz/make_seeds.py

tokenizer_json: a tiny trained byte-level tokenizer.json (300 ids, a special token), the same with
    a normalizer and a Digits+Split chain, and one with HF added tokens;
tiktoken: the rank file of the first;
sentencepiece: a SentencePiece-style tokenizer.json (byte_fallback, Metaspace, HF's Llama decoder),
    one with unk_token, and a SentencePiece `.model` protobuf (what a user may pass as tokenizer.model);
token_parquet: the token Parquet files `tokenbeam tokenize` writes for a few records (plain, and
    with --keep-field and --eos-token), and recipes that rewrite them (fuzz_token_parquet.py);
stats_json: the stats.json of the same run, and of a run with --group-field (its group files in
    tests/fuzz/data/groups/, where the drift target finds them);
sequence_split: real models' chains of Split pre-tokenizers (DeepSeek-V3's digits, CJK runs and word
    regex; Llama 3's digits before its word regex; a Removed and an inverted step) over mixed texts.
calibrate_ids / guard_bitmap: a few batches of ids (in and just past the vocabulary, empty records)
    and guarded sets with texts of each width Python stores.
token_pages: records of a few ids, empty ones, long ones (runs longer than a varint byte), a range
    of them, and ends that fall back.
The other targets' seeds (jsonl_record, spm_encode) are written by hand and left as they are.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORPUS = HERE / "corpus"
GROUPS = HERE / "data" / "groups"      # the group files of corpus/stats_json/grouped.stats.json
TEXTS = ["Hello world, hello tokenizer! 123 456 7890.", "The quick brown fox jumps over the lazy dog.",
         "naïve café, 日本語のテキスト, emoji 👍🏽 and tabs\tand\nnewlines", "def f(x):\n    return x + 1\n",
         "low lower lowest newer newest wider widest"] * 4


def write(target: str, name: str, data: bytes) -> None:
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def byte_level_files(tmp: Path) -> Path:
    from bpe_ops import Tokenizer, train_bpe

    tok = train_bpe(TEXTS, 300, pattern="gpt4", special_tokens=["<|endoftext|>"], min_frequency=2)
    folder = tmp / "byte"
    json_path = tok.save(folder)
    write("tokenizer_json", "trained.json", Path(json_path).read_bytes())
    write("tiktoken", "trained.tiktoken", (folder / "tokenizer.tiktoken").read_bytes())
    doc = json.loads(Path(json_path).read_text(encoding="utf-8"))
    chain = dict(doc, normalizer={"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]},
                 pre_tokenizer={"type": "Sequence", "pretokenizers": [
                     {"type": "Digits", "individual_digits": True},
                     {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "MergedWithNext", "invert": False},
                     {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]})
    write("tokenizer_json", "chain.json", json.dumps(chain, ensure_ascii=False, indent=1).encode())
    added = dict(doc, added_tokens=doc["added_tokens"] + [
        {"id": 300, "content": "<tool>", "single_word": True, "lstrip": True, "rstrip": False,
         "normalized": False, "special": False}])
    Tokenizer.from_file(json_path)                      # the seeds load: the fuzzer starts from valid files
    write("tokenizer_json", "added.json", json.dumps(added, ensure_ascii=False, indent=1).encode())
    return folder


def sentencepiece_files(tmp: Path) -> None:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    for name, options in (("byte_fallback", {"byte_fallback": True}), ("unk", {"unk_token": "<unk>"})):
        hf = HFTokenizer(models.BPE(**options))
        hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
        hf.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                        decoders.Strip(" ", 1, 0)])
        hf.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>", "<s>"]))
        doc = json.loads(hf.to_str())
        if options.get("byte_fallback"):
            vocab = doc["model"]["vocab"]
            for b in range(256):
                vocab.setdefault(f"<0x{b:02X}>", len(vocab))
        write("sentencepiece", f"{name}.json", json.dumps(doc, ensure_ascii=False).encode())
    import sentencepiece as spm

    text = tmp / "sp.txt"
    text.write_text("\n".join(TEXTS * 5), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp / "sp"), vocab_size=90, model_type="bpe",
                                   byte_fallback=False, minloglevel=2,
                                   normalization_rule_name="identity")
    write("sentencepiece", "tokenizer.model", (tmp / "sp.model").read_bytes())


def tokenize_outputs(tmp: Path, tokenizer: Path) -> None:
    """Run `tokenbeam tokenize` on a few records: its Parquet files and stats.json are the seeds."""
    data = tmp / "data"
    data.mkdir()
    with open(data / "part.jsonl", "w", encoding="utf-8") as f:
        for k, text in enumerate(TEXTS[:5]):
            f.write(json.dumps({"id": f"r{k}", "text": text, "lang": ["en", "ja"][k % 2]}) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENBEAM_CACHE_DIR": str(tmp / "cache")}
    for name, extra in (("plain", []), ("kept_eos", ["--keep-field", "lang", "--eos-token", "<|endoftext|>"]),
                        ("grouped", ["--group-field", "lang"])):
        out = tmp / f"out-{name}"
        subprocess.run([sys.executable, "-m", "pipelines.cli", "tokenize", "--tokenizer", str(tokenizer),
                        "--input", str(data / "*.jsonl"), "--output", str(out), *extra],
                       check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
        if name == "grouped":      # a stats.json with a groups index, and the group files beside it
            write("stats_json", "grouped.stats.json", (out / "stats.json").read_bytes())
            shutil.rmtree(GROUPS, ignore_errors=True)
            shutil.copytree(out / "groups", GROUPS)
            continue
        for k, parquet in enumerate(sorted(out.glob("*.parquet"))):
            write("token_parquet", f"{name}-{k}.parquet", parquet.read_bytes())
        if name == "plain":
            write("stats_json", "stats.json", (out / "stats.json").read_bytes())


def parquet_recipes() -> None:
    """Recipes (tests/fuzz/fuzz_token_parquet.py's `build`) that rewrite the seed rows with the real
    files' metadata: as written, grouped by a kept field, and windowed by an event time."""
    import pyarrow.parquet as pq

    folder = CORPUS / "token_parquet"
    for name in ("plain-0", "kept_eos-0"):
        pf = pq.ParquetFile(folder / f"{name}.parquet")
        schema = pf.schema_arrow.metadata
        lines = [b"S" + k + b"=" + v for k, v in schema.items()]
        lines += [b"F" + k + b"=" + v for k, v in pf.metadata.metadata.items() if k not in schema
                  and k != b"ARROW:schema"]
        if name == "plain-0":
            lines.append(b"Vdrop:lang")
        write("token_parquet", f"recipe-{name}.txt", b"\n".join(lines) + b"\n")
    kept = (folder / "recipe-kept_eos-0.txt").read_bytes()
    write("token_parquet", "recipe-group.txt", kept + b"Agroup\n")
    write("token_parquet", "recipe-window.txt", kept + b"Vevent_time:x\nAwindow\nG2\n")


def sequence_split_seeds() -> None:
    """An input of fuzz_sequence_split is a byte giving the number of steps less one, a byte per step
    (its pattern, behavior and invert, see the target), then the text."""
    from tests.fuzz.fuzz_sequence_split import PATTERNS
    from bpe_ops.hf_components import BEHAVIORS

    def step(pattern: str, behavior: str, invert: bool = False) -> int:
        pick = BEHAVIORS.index(behavior) * len(PATTERNS) + PATTERNS.index(pattern) + 128 * invert
        assert pick < 256 and (pick // len(PATTERNS)) % len(BEHAVIORS) == BEHAVIORS.index(behavior)
        return pick

    deepseek_word = PATTERNS[9]
    chains = {
        "deepseek": [step(r"\p{N}{1,3}", "Isolated"), step("[一-龥぀-ゟ゠-ヿ]+", "Isolated"),
                     step(deepseek_word, "Isolated")],
        "llama3_digits": [step(r"\p{N}", "Isolated"), step(PATTERNS[10], "Isolated")],
        "removed_inverted": [step(r"\s+", "Removed"), step(r"\p{L}+", "MergedWithNext", invert=True)],
    }
    for name, steps in chains.items():
        for k, text in enumerate(TEXTS[:5]):
            write("sequence_split", f"{name}-{k}", bytes([len(steps) - 1, *steps]) + text.encode())


def split_scan_seeds() -> None:
    """An input of fuzz_split_scan is a byte picking the pattern, then a byte saying how the rest
    reads (odd: as UTF-8; even: each byte a piece of the target's ALPHABET)."""
    from tests.fuzz.fuzz_split_scan import ALPHABET, PATTERNS

    def pieces(*chosen: str) -> bytes:
        return bytes(ALPHABET.index(c) for c in chosen)

    plain = pieces("Th", "is", " ", "is", " ", "a", " ", "t", "e", "q", "t", ".", "  ", "(", "e", ")", "-", "ing")
    for k, pattern in enumerate(PATTERNS):
        write("split_scan", f"utf8-{k}", bytes([k, 1]) + "".join(TEXTS[:5]).encode())
        write("split_scan", f"pieces-{k}", bytes([k, 0]) + plain * 5 + pieces("'s", "2024", "\n    ", "é", "'ll")
              + plain * 3 + pieces("123456", " ", "\t", "'T", "x" * 70))


def id_and_code_point_seeds() -> None:
    """calibrate_ids: a byte picking the vocabulary size (and the raw-byte mask), one the chunk, then
    16-bit ids with 0xffff ending a record. guard_bitmap: the number of guarded code points, the
    text's widest character, then 3-byte code points (the guarded first)."""
    def ids(*records):
        return b"".join(b"".join(i.to_bytes(2, "little") for i in r) + b"\xff\xff" for r in records)

    write("calibrate_ids", "small", bytes([2, 0]) + ids([1, 2, 3], [], [255, 0]))
    write("calibrate_ids", "past_the_vocabulary", bytes([3, 1]) + ids([299, 300, 301, 302]))
    write("calibrate_ids", "large", bytes([5, 3]) + ids(list(range(0, 5000, 37)), [4999] * 40, list(range(300))))

    def points(*cps):
        return b"".join(c.to_bytes(3, "little") for c in cps)

    text = [ord(c) for c in "naïve café 日本語 👍🏽"]
    write("guard_bitmap", "none_guarded", bytes([0, 3]) + points(*text))
    write("guard_bitmap", "latin1", bytes([1, 1]) + points(0xE9, *text))
    write("guard_bitmap", "cjk_at_the_end", bytes([2, 2]) + points(0x8A9E, 0x3000, *text[:-2]))
    write("guard_bitmap", "astral", bytes([1, 3]) + points(0x1F44D, *text))


def token_page_seeds() -> None:
    """token_pages: the row group size, a range's first and last record, then records (a length byte,
    0xff a long one, 0xfe falling ends) over two-byte ids (fuzz_token_pages.py)."""
    ids = bytes(range(0, 250, 3))
    write("token_pages", "short_and_empty", bytes([2, 1, 3]) + bytes([2, 0, 1, 0, 0, 3]) + ids)
    write("token_pages", "long", bytes([7, 0, 9]) + bytes([0xFF, 5, 1, 0xFF, 70, 0]) + ids * 3)
    write("token_pages", "falling_ends", bytes([0, 0, 2]) + bytes([3, 4, 0xFE]) + ids)


def main() -> None:
    for target in ("tokenizer_json", "tiktoken", "sentencepiece", "token_parquet", "stats_json", "sequence_split",
                   "calibrate_ids", "guard_bitmap", "split_scan", "token_pages"):
        shutil.rmtree(CORPUS / target, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder = byte_level_files(tmp)
        sentencepiece_files(tmp)
        tokenize_outputs(tmp, folder / "tokenizer.json")
    parquet_recipes()
    sequence_split_seeds()
    split_scan_seeds()
    id_and_code_point_seeds()
    token_page_seeds()
    for path in sorted(CORPUS.rglob("*")):
        if path.is_file():
            print(f"{path.relative_to(ROOT)}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()

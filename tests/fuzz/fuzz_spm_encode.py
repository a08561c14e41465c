"""Fuzz target: piece mode's compiled encoder (bpe_ops/_spm.c) against its specification. The input
picks one of the SentencePiece-style files of tests/data/sentencepiece, whether the encoders'
caches are tiny (so that they fill and empty all the time) and whether special tokens are allowed
(the text after one is not the start of the text, which Metaspace's prepend_scheme "first" asks:
the compiled `encode_text` is then told not to prepend); the rest is the text (UTF-8, an invalid
byte read as a lone surrogate, \\x01 as the space mark `▁`). The compiled ids (`encode`, and
`encode_array`) must equal the pure-Python specification's (`Implementation(compiled=False)`) and,
for a text without lone surrogates, Hugging Face `tokenizers`'. Run from the worktree:

    mkdir -p /tmp/fuzz-spm-encode && python3 tests/fuzz/fuzz_spm_encode.py -max_total_time=600 \\
        /tmp/fuzz-spm-encode tests/fuzz/corpus/spm_encode

(new corpus entries go to the first folder, crashing inputs to ./crash-*). tests/test_spm_compiled.py
replays the corpus and tests/fuzz/regressions/spm_encode without atheris.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from bpe_ops import Implementation, Tokenizer

DATA = Path(__file__).resolve().parents[1] / "data" / "sentencepiece"
FILES = ["llama", "llama-legacy", "gemma", "unk", "llama32k"]
TINY_CACHE = 2
_loaded: dict = {}


def tokenizers(name: str, tiny_cache: bool):
    """(compiled, specification, Hugging Face) for the file `name`, loaded once per process."""
    key = (name, tiny_cache)
    if key not in _loaded:
        from tokenizers import Tokenizer as HFTokenizer
        path = DATA / f"{name}.json"
        compiled = Tokenizer.from_file(path)
        spec = Tokenizer.from_file(path, implementation=Implementation(compiled=False))
        if tiny_cache:
            compiled.cache_size = spec.cache_size = TINY_CACHE     # read when the encoders are built
        hf = HFTokenizer.from_file(str(path))
        hf.encode_special_tokens = True
        _loaded[key] = compiled, spec, hf, HFTokenizer.from_file(str(path))   # the last one reads "<s>" as the control
    return _loaded[key]


def text_of(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape").replace("\x01", "\u2581")


def check(data: bytes) -> None:
    if not data:
        return
    compiled, spec, hf, hf_specials = tokenizers(FILES[data[0] % len(FILES)], data[0] >= 128)
    allowed = "all" if data[0] & 64 else ()
    text = text_of(data[1:])
    want = spec.encode(text, allowed)
    got = compiled.encode(text, allowed)
    assert got == want, f"compiled {got} != specification {want} for {text!r}"
    assert compiled.encode_array(text, allowed).tolist() == want, f"encode_array differs for {text!r}"
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        oracle = hf_specials if allowed else hf
        assert oracle.encode(text, add_special_tokens=False).ids == want, f"HF differs for {text!r}"


if __name__ == "__main__":
    harness.fuzz(check)

"""Fuzz target: a Sequence of Split pre-tokenizers run by the compiled encoder
(`_pcre2.TextEncoder(steps=...)`, see bpe_ops/sequence_split.py) against its specification, the
Python chain of bpe_ops/hf_components.py with the pure-Python merge. The input picks one to four
steps (a pattern from a pool of real models' and edge-case patterns, a behavior, invert), or DeepSeek-V3's
chain (split in one pass: `TextEncoder.chained`) on a text repeated past a few 64-byte windows, and a text;
a finding is any difference in ids or in the pieces before the merge (`_pcre2.sequence_pieces`, also
against the steps run one after another and the same steps split by PCRE2 alone, without `sequence_split.step_reading`'s class runs and
word scanner), or any exception but `Fallback` (a text the compiled encoder hands back to Python). GPT-2's vocabulary (../shared/oracles/gpt2) gives the merges. Run from the
worktree:

    mkdir -p /tmp/fuzz-sequence_split && python3 tests/fuzz/fuzz_sequence_split.py -max_total_time=600 \
        /tmp/fuzz-sequence_split

(new corpus entries go to the first folder, crashing inputs to ./crash-*).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from bpe_ops import Implementation, Tokenizer, hf_components, sequence_split
    from bpe_ops._pcre2 import Fallback, TextEncoder, sequence_pieces

PATTERNS = [
    r"\p{N}{1,3}", r"\p{N}", "[一-龥぀-ゟ゠-ヿ]+", r"\s+", r"\s", " ", r"[.,;:!?]", r"\p{L}+|\p{N}+", r"\p{L}+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    r"(?<=a)b+", r"x(?=y)", r"[^a-z]+", r"[\p{P}\p{S}]+$", "^ ",
    r"\p{N}{2,3}", r"\P{L}{2,}", r"[\p{P}\p{S}]", r"[\s\p{M}]{2}", r"\p{Lu}+", "\U0001F44D",
]
DEEPSEEK_STEPS = (0, 2, 9)       # DeepSeek-V3's chain, Isolated: one input in eight (its first byte 224+)
_SHARED = Path(__file__).resolve().parents[3] / "shared" / "oracles" / "gpt2"
_BASE = []                      # GPT-2's first 3,000 merges (an encoder is built per chain, in
                                # milliseconds), read on first use: importing this module reads no file


def _base() -> Tokenizer:
    if not _BASE:
        _BASE.append(Tokenizer(Tokenizer.from_gpt2_files(_SHARED / "gpt2_vocab.json",
                                                         _SHARED / "gpt2_merges.txt").merges[:3000],
                               implementation=Implementation(compiled=False, engine="regex")))
    return _BASE[0]
_STEPS: dict = {}
_KEPT = 16                      # encoders kept for chains seen before (a few MB each)


def _encoders(spec: dict):
    """The compiled encoder of a chain and its twin whose steps all run on PCRE2 (no reading), or
    None where sequence_split does not compile the chain."""
    key = repr(spec)
    if key not in _STEPS:
        if len(_STEPS) >= _KEPT:
            _STEPS.clear()
        steps = sequence_split.encoder_steps(spec)
        plain = steps and {**steps, "steps": [step[:3] for step in steps["steps"]]}
        base = _base()
        _STEPS[key] = steps and tuple(TextEncoder(s["steps"][0][0], base._left, base._right, base._merged,
                                                  base._byte_ids, None, 64, **s) for s in (steps, plain))
    return _STEPS[key]


def check(data: bytes) -> None:
    if len(data) < 2:
        return
    count, deepseek, data = 1 + data[0] % 4, data[0] >= 224, data[1:]
    steps = [{"type": "Split", "pattern": {"Regex": PATTERNS[k]}, "behavior": "Isolated", "invert": False}
             for k in DEEPSEEK_STEPS] if deepseek else []
    for k in range(0 if deepseek else count):
        if len(data) < 1:
            return
        pick, data = data[0], data[1:]
        steps.append({"type": "Split", "pattern": {"Regex": PATTERNS[pick % len(PATTERNS)]},
                      "behavior": hf_components.BEHAVIORS[(pick // len(PATTERNS)) % 5], "invert": pick >= 128})
    spec = {"type": "Sequence", "pretokenizers": steps + [{"type": "ByteLevel", "add_prefix_space": False,
                                                           "use_regex": False}]}
    # An odd-length input keeps its invalid bytes as lone surrogates, which the compiled encoder must
    # hand back to Python (Fallback) rather than encode.
    text = data.decode("utf-8", "surrogateescape" if len(data) % 2 else "replace")
    if deepseek and text:       # long enough for the chain's 64-byte windows (chain_pieces)
        text *= 1 + 200 // len(text)
    encoders = _encoders(spec)
    if encoders is None:
        return
    encoder, plain = encoders
    try:
        ids = encoder.encode(text)
    except Fallback:
        return
    pieces = hf_components.pre_tokenizer(spec)(text)
    expected = [i for piece in pieces for i in _base()._encode_piece(piece)]
    if ids != expected:
        raise AssertionError(f"{steps} on {text!r}: compiled {ids}, Python {expected}")
    compiled = sequence_pieces(encoder, text)
    if compiled != pieces:
        raise AssertionError(f"{steps} on {text!r}: compiled pieces {compiled}, Python {pieces}")
    if sequence_pieces(encoder, text, False) != compiled:
        raise AssertionError(f"{steps} on {text!r}: pieces {compiled}, step after step "
                             f"{sequence_pieces(encoder, text, False)}")
    try:
        by_pcre2 = sequence_pieces(plain, text)
    except Fallback:            # an empty match or a limit, which PCRE2 alone meets and a reading may not
        return
    if by_pcre2 != compiled:
        raise AssertionError(f"{steps} on {text!r}: pieces {compiled}, by PCRE2 alone {by_pcre2}")


if __name__ == "__main__":
    harness.fuzz(check)

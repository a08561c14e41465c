"""The split patterns by name: the regexes of the named patterns (`--pattern gpt2`, ...), those real
models' tokenizer.json files carry, and tiktoken's names for them. Constants only: every module that
needs one (pretokenize, hf_components) imports it from here, not from another."""

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# tiktoken's cl100k_base pattern as it ships today (with `\s++$`), spelled `\p{N}{1,3}` where tiktoken
# writes `\p{N}{1,3}+`: the same matches in Python's `regex` and Rust (the `+` is possessive there and,
# ending its alternative, changes nothing), but Hugging Face's Oniguruma reads `{1,3}+` as "one or more
# runs of 1-3 digits", so the tiktoken spelling splits every long number differently once loaded there.
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
CLASSIC_PATTERN = r"""\S+"""
# The split patterns real models' tokenizer.json files carry, beside the named ones above: Llama 3's
# (tiktoken's first cl100k spelling), Qwen2's (one digit per piece), and GPT-2's as Hugging Face writes it.
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
HF_GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# tiktoken's own spellings (its `pat_str`), which callers of `Tokenizer.from_tiktoken` pass as given:
# cl100k_base's with the possessive `\p{N}{1,3}+` (GPT4_PATTERN's pieces in PCRE2, `regex` and Rust),
# and r50k_base's (GPT-2's pieces: `\s++$` takes a run that ends the text, as `\s+(?!\S)` does).
TIKTOKEN_CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                           r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
TIKTOKEN_R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""

PATTERNS = {
    "gpt2": GPT2_PATTERN,
    "gpt4": GPT4_PATTERN,
    "o200k": O200K_PATTERN,
    "classic": CLASSIC_PATTERN,
}
# tiktoken's encoding names for the same patterns (a rank file is used with its encoding's pattern).
PATTERN_ALIASES = {"cl100k": "gpt4", "cl100k_base": "gpt4", "o200k_base": "o200k", "r50k_base": "gpt2",
                   "p50k_base": "gpt2", "p50k_edit": "gpt2"}

"""What every fuzz target shares: the contract a reader is held to, a scratch file, and the libFuzzer
driver (atheris; imported only when a target runs as a fuzzer, so the regression test needs none).

The contract (the CLI's, pipelines/core/errors.py): a file either loads, or its reader raises `UserError`
(the CLI prints it as one line `tokenbeam: error: ...` and exits 2) whose message is one line, names
the file, and says what is wrong in the file's terms: a message that is only a Python exception's
text caught by a reader's safety net (`malformed tokenizer.json (KeyError: 'id')`) means a check is
missing, and counts as a finding. Any other exception, a crash or an abort is a finding.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipelines.core.errors import UserError  # noqa: E402

# What a reader's catch-all says when an unchecked value reached Python code of the wrong shape.
SAFETY_NET = re.compile(r"\((TypeError|KeyError|AttributeError|IndexError|OverflowError|RecursionError)\b")
_SCRATCH = tempfile.mkdtemp(prefix="tokenbeam-fuzz-")
atexit.register(shutil.rmtree, _SCRATCH, True)


def scratch(name: str, data: bytes, folder: str) -> str:
    """`data` written to the file `name` in `folder` (the target's own) of this process's scratch
    folder; its path. Targets keep apart: a tokenizer.json or a token Parquet beside a stats.json would
    make that folder another command's output to the readers of stats.json."""
    path = os.path.join(_SCRATCH, folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def refused(exc: UserError, *names: str) -> None:
    """Hold a refusal to the contract: one non-empty line naming one of `names`, not a safety net's."""
    message = str(exc)
    if not message or "\n" in message or "\r" in message:
        raise AssertionError(f"the error is not one line: {message!r}")
    if not any(name in message for name in names):
        raise AssertionError(f"the error does not name the file ({names}): {message!r}")
    if SAFETY_NET.search(message):
        raise AssertionError(f"an unchecked value reached the reader's safety net: {message!r}")


def expect_refusal_or(load, *names: str):
    """`load()`'s result, or None when it raised a UserError that keeps the contract."""
    try:
        return load()
    except UserError as exc:
        refused(exc, *names)
        return None


def instrumented(fuzzing: bool):
    """Inside: the imports whose code the fuzzer should see (tokenbeam's own packages), when fuzzing."""
    if not fuzzing:
        return contextlib.nullcontext()
    import atheris

    return atheris.instrument_imports(include=["bpe_ops", "pipelines", "schemas"])


def fuzz(check) -> None:
    """Run `check(data)` under libFuzzer with this process's command line (libFuzzer's flags and
    corpus folders). Crashing inputs go where `-artifact_prefix=` says (default: the current folder).

    With TOKENBEAM_FUZZ_KEEP_GOING=FOLDER (triage: libFuzzer's -fork mode does not run under
    atheris), an exception does not stop the run: the first input of each distinct finding (its
    exception type and the line that raised it) is written to FOLDER and fuzzing goes on."""
    import atheris

    folder = os.environ.get("TOKENBEAM_FUZZ_KEEP_GOING")
    atheris.Setup(sys.argv, _keep_going(check, folder) if folder else check)
    atheris.Fuzz()


def _keep_going(check, folder: str):
    import hashlib
    import traceback

    seen: set = set()
    os.makedirs(folder, exist_ok=True)

    def run(data: bytes) -> None:
        try:
            check(data)
        except Exception as exc:  # noqa: BLE001  (every finding is written, none stops the run)
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            text = str(exc)
            kind = SAFETY_NET.search(text).group(1) if SAFETY_NET.search(text) else text[:40]
            signature = f"{type(exc).__name__} {frame.filename}:{frame.lineno} {kind if isinstance(exc, AssertionError) else ''}"
            if signature not in seen:
                seen.add(signature)
                name = "finding-" + hashlib.sha1(signature.encode()).hexdigest()[:12]
                with open(os.path.join(folder, name), "wb") as f:
                    f.write(data)
                print(f"FINDING {name}: {signature}: {text[:300]!r}", file=sys.stderr, flush=True)
    return run


def replay(check, paths) -> None:
    """Run `check` on each file (what the regression test does without atheris)."""
    for path in paths:
        check(Path(path).read_bytes())


# Texts every loaded tokenizer encodes: ASCII, digits, spaces and tabs, accents (composed and not),
# CJK, an emoji sequence, a lone special-token string, the SentencePiece space mark, an empty text.
# Every str kind the compiled encoder converts to UTF-8 itself (Latin-1, BMP, astral), and a lone
# surrogate, which it hands back to Python.
TEXTS = ["Hello world, 1234 567!\t\n  x", "nai\u0308ve café 日本語 👍🏽 \u2581a", "<|endoftext|><s></s><unk>", "",
         "café naïve ÿ", "日本語 — ok", "a\ud800b \udfff"]


_as_utf8 = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
_as_utf8.argtypes, _as_utf8.restype = [ctypes.py_object, ctypes.POINTER(ctypes.c_ssize_t)], ctypes.c_void_p


def keeping_utf8(text: str) -> tuple[str, int, int]:
    """A new str equal to `text` that keeps its UTF-8 (CPython stores it once C code asks for it,
    PyUnicode_AsUTF8AndSize, as most engines do: the compiled encoder reads it instead of writing
    its own), with the address and length of that UTF-8; (copy, 0, 0) for a text with a lone
    surrogate, which has no UTF-8."""
    copy = text.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
    size = ctypes.c_ssize_t()
    try:
        return copy, _as_utf8(copy, ctypes.byref(size)), size.value
    except UnicodeEncodeError:
        return copy, 0, 0


def _utf8(text: str) -> bytes:
    """The bytes a text encodes to: a lone surrogate is written as U+FFFD."""
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text).encode("utf-8")


def exercise_tokenizer(load, path: str) -> None:
    """After a load, what the CLI does with a tokenizer: its sha256 (the canonical file, which every
    output records) and raw-byte ids, the dense statistics over its ids (stats, tokenize), encoding each text (the compiled whole-text encoder,
    as tokenize does, and `encode` with every special token allowed) and decoding the ids. The
    pure-Python implementation of the same file must give the same ids; a byte-level tokenizer
    without a normalizer, a pre-tokenizer chain or added tokens must give the text's bytes back."""
    from bpe_ops import formats
    from bpe_ops.implementation import Implementation

    from bpe_ops.stats import MEASURE_SEPARATORS, Summary, measure_batch
    from schemas.stats import TokenizerFacts

    tok = load(Implementation())
    if tok is None:
        return
    # What `tokenbeam stats` and `tokenize` make next: dense tables over the id range.
    Summary(tok.vocab_size, raw_byte_ids=TokenizerFacts.of(tok).raw_byte_ids)
    pure = load(Implementation(compiled=False, engine="regex"))
    if pure is None or pure.sha256 != tok.sha256:
        raise AssertionError("the file loads with the compiled implementation only, or as another tokenizer")
    if tok.mode == "byte" and formats.tokenizer_json_text(tok) != formats.tokenizer_json_text(tok, compiled=False):
        raise AssertionError("the canonical file's sections differ between the compiled writer and its specification")
    assert tok.raw_byte_ids is not None
    # HF's components may change the text on purpose (ByteLevel's add_prefix_space in a chain, a Split
    # that removes its matches): only the plain byte-level path must give the bytes back.
    lossless = (tok.mode == "byte" and tok.normalizer_spec is None and tok.added_tokens_spec is None
                and tok.pre_tokenizer_spec is None)
    # The tokenize threads' path: every text in one call (`encode_texts_bytes` where it applies), and
    # measured in the same pass (`encode_measure_texts`) as the specification measures them.
    together = [list(a) for a in tok.encode_arrays_in_thread(TEXTS)]
    arrays, measured = tok.encode_measured_in_thread(TEXTS, *MEASURE_SEPARATORS)
    if [list(a) for a in arrays] != together:
        raise AssertionError("the ids of the texts encoded and measured in one call differ")
    stats, runs = measure_batch(TEXTS, arrays, measured)
    spec_stats, spec_runs = measure_batch(TEXTS, arrays)
    stats, spec_stats = [c.tolist() for c in stats], [c.tolist() for c in spec_stats]
    if stats != spec_stats or runs.tolist() != spec_runs.tolist():
        raise AssertionError(f"the measures taken while encoding differ: {stats} / {spec_stats}")
    for text in TEXTS:
        ids = list(tok.encode_arrays([text])[0])
        if together[TEXTS.index(text)] != ids:
            raise AssertionError(f"ids of {text!r} differ encoded with the others: {together[TEXTS.index(text)]} / {ids}")
        if ids != pure.encode(text):
            raise AssertionError(f"compiled and pure-Python ids differ on {text!r}: {ids} / {pure.encode(text)}")
        kept, address, _ = keeping_utf8(text)
        if address and list(tok.encode_arrays([kept])[0]) != ids:
            raise AssertionError(f"ids of {text!r} differ when the str keeps its UTF-8")
        if any(not 0 <= i < tok.vocab_size for i in ids):
            raise AssertionError(f"an id outside 0..{tok.vocab_size - 1}: {ids}")
        if lossless and tok.decode_bytes(ids) != _utf8(text):
            raise AssertionError(f"decode(encode({text!r})) is {tok.decode_bytes(ids)!r}")
        tok.decode(ids)
        special = tok.encode(text, allowed_special="all")
        tok.decode(special)

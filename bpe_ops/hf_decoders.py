"""Hugging Face `tokenizers` decoders of SentencePiece-style files, as functions `pieces -> text`.

A decoder maps the list of token strings to a list of strings (`decode_chain`), which are then
joined. Written from `tokenizers`' decoders/*.rs and held to `Tokenizer.decode` by
tests/bpe_ops/test_sentencepiece_bpe.py:

    >>> decode = decoder({"type": "Sequence", "decoders": [
    ...     {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    ...     {"type": "ByteFallback"}, {"type": "Fuse"},
    ...     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})
    >>> decode(["\u2581caf", "<0xC3>", "<0xA9>", "\u2581ok", "<0xFF>"])
    'café ok\ufffd'
"""
from __future__ import annotations

from typing import Callable

from .hf_components import Unsupported, _pattern, metaspace_options
from .sentencepiece_bpe import byte_of_piece

Chain = Callable[[list], list]
DECODERS = ("Replace", "ByteFallback", "Fuse", "Strip", "Metaspace", "Sequence")


def decoder(spec: dict | None) -> Callable[[list], str]:
    """`pieces -> text` of a tokenizer.json `decoder` (None: the pieces joined as they are)."""
    chain = _chain(spec) if spec is not None else None

    def decode(pieces: list) -> str:
        return "".join(chain(list(pieces)) if chain is not None else pieces)
    return decode


def _chain(spec: dict) -> Chain:
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "Sequence":
        steps = [_chain(child) for child in spec.get("decoders") or []]

        def sequence(pieces: list) -> list:
            for step in steps:
                pieces = step(pieces)
            return pieces
        return sequence
    if kind == "Replace":
        pattern, content = _pattern(spec.get("pattern"), "decoder Replace"), spec.get("content", "")
        if not isinstance(content, str):
            raise Unsupported(f"decoder Replace content {content!r}")
        return lambda pieces: [pattern.sub(lambda _: content, p) for p in pieces]
    if kind == "ByteFallback":
        return byte_fallback
    if kind == "Fuse":
        return lambda pieces: ["".join(pieces)]
    if kind == "Strip":
        content, start, stop = spec.get("content", " "), spec.get("start", 0), spec.get("stop", 0)
        if not (isinstance(content, str) and len(content) == 1 and isinstance(start, int) and isinstance(stop, int)):
            raise Unsupported(f"decoder Strip {spec!r}")
        return lambda pieces: [_strip(p, content, start, stop) for p in pieces]
    if kind == "Metaspace":
        replacement, scheme, _ = metaspace_options(spec)

        def metaspace(pieces: list) -> list:
            # The first piece loses every replacement (unless the scheme is never), later ones
            # turn each into a space.
            return [p.replace(replacement, "" if i == 0 and scheme != "never" else " ")
                    for i, p in enumerate(pieces)]
        return metaspace
    raise Unsupported(f"decoder {kind}")


def byte_fallback(pieces: list) -> list:
    """Runs of `<0xNN>` pieces become their UTF-8 text; a run that is not valid UTF-8 becomes one
    U+FFFD per byte, as `tokenizers` does."""
    out, run = [], bytearray()
    for piece in pieces:
        byte = byte_of_piece(piece)
        if byte is not None:
            run.append(byte)
            continue
        if run:
            out.extend(_run_text(run))
            run.clear()
        out.append(piece)
    if run:
        out.extend(_run_text(run))
    return out


def _run_text(run: bytearray) -> list:
    try:
        return [run.decode("utf-8")]
    except UnicodeDecodeError:
        return ["\ufffd"] * len(run)


def _strip(piece: str, content: str, start: int, stop: int) -> str:
    """Drop up to `start` leading and `stop` trailing `content` characters."""
    left = 0
    while left < min(start, len(piece)) and piece[left] == content:
        left += 1
    right = len(piece)
    while len(piece) - right < stop and right > left and piece[right - 1] == content:
        right -= 1
    return piece[left:right]

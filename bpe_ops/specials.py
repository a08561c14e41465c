"""Special tokens: which ids they get, which ones a caller allows, and which tokens are the alphabet.

A special token is never produced by merging: the encoder finds it only where the caller allows it
(`allowed`), so data can never inject a control token. Its id is explicit (a mapping) or the next
free one, unless the vocab already holds the string as a token that is neither made by a merge nor
a symbol of the alphabet (`is_base`): then it keeps that id, as trainers and GPT-2's vocab.json
write it.

>>> tokens = {0: b"a", 1: b"b", 2: b"ab", 3: b"<s>"}
>>> assign_ids(["<s>", "</s>"], tokens, {t: i for i, t in tokens.items()}, made={2}, mode="byte")
{'<s>': 3, '</s>': 4}
>>> allowed("all", {"<s>": 3, "</s>": 4})
('</s>', '<s>')
>>> is_base("byte", b"a"), is_base("classic", "é".encode()), is_base("piece", b"<0x41>")
(True, True, True)

`encode_with` encodes the text between the allowed special tokens, which become their ids:

>>> ords = lambda text, at_start: [ord(c) for c in text]
>>> plain = dict(special_tokens={"<s>": 3}, added=None, normalize=None, kept_start=lambda text: True)
>>> encode_with("a<s>b", "all", ords, **plain), encode_with("a<s>", (), ords, **plain)
([97, 3, 98], [97, 60, 115, 62])
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from .pretokenize import END_OF_WORD, split_on_special
from .sentencepiece_bpe import byte_of_piece


def is_base(mode: str, token: bytes) -> bool:
    """A symbol of the alphabet: a single byte, in classic mode a character or `</w>`, in piece mode
    a character or a byte piece."""
    if mode == "byte":
        return len(token) == 1
    if mode == "piece":
        piece = token.decode("utf-8", "surrogatepass")
        return len(piece) == 1 or byte_of_piece(piece) is not None
    return token == END_OF_WORD.encode() or len(token.decode("utf-8", "replace")) == 1


def assign_ids(special_tokens: Sequence[str] | Mapping[str, int], tokens: dict[int, bytes],
               token_ids: dict[bytes, int], made: set[int], mode: str) -> dict[str, int]:
    """Explicit ids from a Mapping. From a Sequence: the id of the same string when the vocab
    (`tokens`, and its inverse `token_ids`) already holds it outside the alphabet and the merges'
    results `made`; otherwise the next id after the last token, in the given order."""
    if isinstance(special_tokens, Mapping):
        out = {}
        for s, i in special_tokens.items():
            if i < 0:
                raise ValueError(f"special token {s!r} has a negative id {i}")
            if i in tokens and tokens[i] != s.encode("utf-8"):
                raise ValueError(f"special token {s!r} id {i} is already the token {tokens[i]!r}")
            out[s] = int(i)
        if len(set(out.values())) < len(out):
            raise ValueError(f"two special tokens share an id: {out}")
        return out
    next_id = max(tokens) + 1
    out = {}
    for s in special_tokens:
        if s in out:
            continue
        i = token_ids.get(s.encode("utf-8"))
        if i is not None and i not in made and not is_base(mode, tokens[i]):
            out[s] = i
        else:
            out[s] = next_id
            next_id += 1
    return out


def allowed(allowed_special: Iterable[str] | str, special_tokens: Mapping[str, int]) -> tuple[str, ...]:
    """The special tokens `allowed_special` names (`"all"`: every one), sorted; ValueError for a name
    that is not a special token."""
    if allowed_special == "all":
        return tuple(sorted(special_tokens))
    if isinstance(allowed_special, str):
        allowed_special = (allowed_special,)
    names = tuple(sorted(set(allowed_special)))
    unknown = [s for s in names if s not in special_tokens]
    if unknown:
        raise ValueError(f"allowed_special names tokens that are not special tokens: {unknown}")
    return names


def encode_with(text: str, allowed_special: Iterable[str] | str, encode_normalized: Callable[[str, bool], list[int]],
                *, special_tokens: Mapping[str, int], added: Any, normalize: Callable[[str], str] | None,
                kept_start: Callable[[str], bool]) -> list[int]:
    """`Tokenizer.encode`'s ids of `text`: the allowed special tokens (and a file's added tokens,
    `hf_components.AddedVocabulary`, found as Hugging Face finds them) as their ids, each stretch of
    text between them normalized by `normalize` and encoded by `encode_normalized(text, at_start)`
    (`at_start`: the stretch begins the record, as `kept_start` tells; see
    `hf_components.pre_tokenizer`)."""
    if added is not None:
        names = frozenset(allowed(allowed_special, special_tokens)) if allowed_special else frozenset()
        if added.active(names):
            out: list[int] = []
            for k, (segment, token) in enumerate(added.split(text, names)):
                if token is not None:
                    out.append(token)
                else:
                    out.extend(encode_normalized(segment, k == 0 and kept_start(text)))
            return out
    normalize = normalize or str
    if not allowed_special:
        return encode_normalized(normalize(text), kept_start(text))
    out = []
    for k, (segment, is_special) in enumerate(split_on_special(text, allowed(allowed_special, special_tokens))):
        if is_special:
            out.append(special_tokens[segment])
        else:
            out.extend(encode_normalized(normalize(segment), k == 0 and kept_start(segment)))
    return out

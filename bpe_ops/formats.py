"""Tokenizer files: Hugging Face `tokenizer.json`, tiktoken's `.tiktoken`, GPT-2's vocab.json + merges.txt.

We write one canonical tokenizer.json per tokenizer (fixed key order and layout, so the same tokenizer
always gives the same bytes and its SHA-256 identifies it) that Hugging Face `tokenizers` loads and
encodes identically: BPE model, vocab and merges in the GPT-2 byte-to-unicode alphabet, merges as
pairs, `Split(regex)` + `ByteLevel(use_regex=false)` pre-tokenizer, ByteLevel decoder, special
tokens as added tokens. The split pattern is recorded only as that regex: `tokenizers` refuses
unknown top-level keys, and `pretokenize.pattern_name` recovers the name from the regex.

We read byte-level BPE files written by others (GPT-2 style and Llama-3 style) and refuse everything
else with one line saying what is unsupported, rather than encoding differently. Files are parsed as
JSON or plain text; nothing is ever evaluated or unpickled.

Readers return the keyword arguments of `Tokenizer(...)`, so this module does not import the encoder.
"""
from __future__ import annotations

from collections.abc import Mapping

import base64
import json
import os
from array import array
from functools import lru_cache
from typing import Any

import regex

from . import hf_components, hf_decoders, json_merges, json_sections, merge_ids
from .regex_dialect import from_oniguruma, to_oniguruma
from .pretokenize import (resolve_pattern, token_to_unicode, unicode_to_blob, unicode_to_token,
                          unicode_to_tokens)

SUPPORTED = ("supported: byte-level BPE (model BPE without dropout or subword affixes; "
             "normalizers NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents, Replace, Prepend, Sequence; "
             "pre-tokenizer ByteLevel, or a Sequence of Split (any behavior, invert) and Digits steps "
             "ending with one ByteLevel) and SentencePiece-style BPE (byte_fallback and/or unk_token, fuse_unk; "
             "the same normalizers; pre-tokenizers Metaspace, Split, Digits; decoders Replace, ByteFallback, "
             "Fuse, Strip, Metaspace)")


# ---- writing ------------------------------------------------------------------------------------

def tokenizer_json_text(tok, compiled: bool = True) -> str:
    """The canonical tokenizer.json text of a byte-mode tokenizer (its big sections written by the
    specification when not `compiled`: the same text)."""
    _require_byte_mode(tok, "tokenizer.json")
    special_ids = set(tok.special_tokens.values())
    # The ordinary tokens by id (a special token's id is listed with the added tokens instead).
    ids = [i for i in sorted(tok._tokens) if i not in special_ids]
    write = json_sections.byte_level_sections if compiled else json_sections.byte_level_sections_python
    vocab_text, merges_text = write(tok._tokens, ids, tok._left, tok._right, pad="  " * 3, end="\n" + "  " * 2)

    doc = {
        **_file_head(tok),
        "pre_tokenizer": tok.pre_tokenizer_spec or {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": to_oniguruma(tok.pattern)}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": bool(tok.ignore_merges),
            "vocab": _Raw(vocab_text),
            "merges": _Raw(merges_text),
        },
    }
    return _dumps(doc) + "\n"


def _file_head(tok) -> dict:
    """The first keys of a canonical tokenizer.json, to the normalizer: special tokens as added tokens
    (or the file's own added tokens, with their flags)."""
    specials = sorted(tok.special_tokens.items(), key=lambda kv: kv[1])
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": tok.added_tokens_spec or [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for s, i in specials
        ],
        "normalizer": tok.normalizer_spec,
    }


def tiktoken_text(tok) -> str:
    """`.tiktoken` text: `base64(token bytes) id` per line in id order, special tokens left out
    (tiktoken takes them separately)."""
    _require_byte_mode(tok, ".tiktoken")
    specials = set(tok.special_tokens.values())
    return "".join(f"{base64.b64encode(t).decode('ascii')} {i}\n"
                   for i, t in sorted(tok.vocab.items()) if i not in specials)


def tiktoken_recipe(tok) -> dict:
    """How tiktoken encodes as `tok` does from its rank file, or why it cannot:
    `{"written": bool, "pattern": str | None, "identical": bool, "note": str}`.

    tiktoken splits with one regex and has no normalizer. A pre-tokenizer chain (a digit rule on a
    custom regex) has no one-regex equivalent: no rank file is written. A normalizer is not a
    pattern: the rank file is written, and gives the same ids on text normalized first. A
    SentencePiece-style tokenizer merges characters, which tiktoken's byte ranks cannot say."""
    if tok.mode == "piece":
        return {"written": False, "pattern": None, "identical": False,
                "note": "no tokenizer.tiktoken: tiktoken merges bytes, this tokenizer characters (with byte "
                        "fallback or an unknown token)"}
    if tok.pre_tokenizer_spec is not None:
        return {"written": False, "pattern": None, "identical": False,
                "note": f"no tokenizer.tiktoken: tiktoken splits with one regex, and this tokenizer splits with "
                        f"the chain {_describe(tok.pre_tokenizer_spec)}"}
    if tok.normalizer_spec is not None:
        return {"written": True, "pattern": tok.pattern, "identical": False,
                "note": f"tiktoken has no normalizer: tokenizer.tiktoken gives the same ids only on text normalized "
                        f"first as tokenizer.json says ({_describe(tok.normalizer_spec)})"}
    return {"written": True, "pattern": tok.pattern, "identical": True,
            "note": "tokenizer.tiktoken with this pattern gives the same ids"}


def _require_byte_mode(tok, what: str) -> None:
    if tok.mode != "byte":
        raise ValueError(f"a {tok.mode}-mode tokenizer cannot be written as {what}: Hugging Face BPE has no "
                         f"separate end-of-word symbol (its end_of_word_suffix is glued to the last "
                         f"character), so no file would encode the same; only byte-mode tokenizers are saved")


def _dumps(value: Any, depth: int = 0) -> str:
    """JSON with two-space indentation, except that lists of scalars (merge pairs) stay on one line.

    Strings and ints, the bulk of a vocabulary, skip `json.dumps` (its per-call cost was most of a
    32k-id file's ~1 s) for the C string encoder it would call; the text is the same."""
    if isinstance(value, _Raw):
        return value
    if isinstance(value, str):
        return _encode_string(value)
    if type(value) is int:
        return str(value)
    pad, end = "  " * (depth + 1), "\n" + "  " * depth
    if isinstance(value, dict) and value:
        items = (f"{pad}{_encode_string(k)}: {_dumps(v, depth + 1)}" for k, v in value.items())
        return "{\n" + ",\n".join(items) + end + "}"
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "[" + ", ".join(map(_encode_string, value)) + "]"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(pad + _dumps(v, depth + 1) for v in value) + end + "]"
    return json.dumps(value, ensure_ascii=False)


class _Raw(str):
    """JSON text `_dumps` writes as it is (a section already written at its depth)."""


# What `json.dumps(s, ensure_ascii=False)` returns for a str s (C-accelerated where available).
_encode_string = json.encoder.encode_basestring


# ---- reading tokenizer.json ---------------------------------------------------------------------

def read_tokenizer_json(path: str | os.PathLike) -> dict:
    """`Tokenizer(...)` keyword arguments from a byte-level BPE tokenizer.json."""
    with open(path, "rb") as f:
        return read_tokenizer_data(f.read(), path)


def read_tokenizer_data(data: bytes, path: str | os.PathLike = "tokenizer.json", as_tables: bool = False):
    """`read_tokenizer_json` of a file's bytes (`path` names it in errors). With `as_tables`, the
    common byte-level file (see `_byte_level_tables`) comes back as the `table_cache.Tables` its
    Tokenizer would have, read straight from the file's strings, and any other file as the dict."""
    if as_tables:
        tables = _tables_of_text(data, path)
        if tables is not None:
            return tables
    try:
        doc = _parse_json(data, path)
    except ValueError:
        if data[:1] == b"\n":     # a protobuf's first field, as SentencePiece's ModelProto starts
            raise ValueError(f"{path}: a SentencePiece .model (protobuf), not a tokenizer.json: tokenbeam reads "
                             f"SentencePiece BPE converted to tokenizer.json (e.g. by transformers' "
                             f"LlamaTokenizerFast.save_pretrained)") from None
        raise
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise ValueError(f"{path}: not a tokenizer.json (no \"model\" object)")
    try:
        columns = _check_document(doc)
    except ValueError as exc:
        raise ValueError(f"{path}: malformed tokenizer.json: {exc}") from None
    try:
        return _read_tokenizer_doc(doc, path, as_tables, columns)
    except (AttributeError, TypeError) as exc:   # a safety net: `_check_document` should have said what
        raise ValueError(f"{path}: malformed tokenizer.json ({type(exc).__name__}: {exc})") from None


def _tables_of_text(data: bytes, path):
    """The Tables of the common byte-level file (`_byte_level_tables`), its merges read from the text
    (`json_merges`: no list of them is made); None for any other file or when the cut declines: the
    whole file is then read as usual, and what is wrong with it named."""
    doc = json_merges.read(data)
    if doc is None or is_piece_file(doc):
        return None
    if (b"\\ud" in data or b"\\uD" in data) and _LONE_SURROGATE_ESCAPE_BYTES.search(data):
        return None                                         # `_parse_json` decides, and names the string
    try:
        got = _read_tokenizer_doc(doc, path, True, _check_document(doc))
    except (ValueError, TypeError, AttributeError, KeyError, json_merges.Declined):
        return None
    from .table_cache import Tables
    return got if isinstance(got, Tables) else None


# The model's fields and their JSON types (null: absent); `vocab` and `merges` must be there, not null.
_MODEL_FIELDS = {"type": str, "vocab": dict, "merges": list, "dropout": (int, float), "unk_token": str,
                 "continuing_subword_prefix": str, "end_of_word_suffix": str, "fuse_unk": bool,
                 "byte_fallback": bool, "ignore_merges": bool}
_ADDED_TOKEN_FIELDS = {"id": int, "content": str, **{flag: bool for flag in hf_components.ADDED_TOKEN_FLAGS}}
# Deeper than any tokenizer.json (a Sequence in a Sequence is 5 levels): what the checks recurse over.
MAX_COMPONENT_DEPTH = 32


def _check_document(doc: dict):
    """ValueError naming the first field (by its path in the file) whose JSON type is not what every
    reader below takes for granted: the model's fields, each merge, each added token, the components.
    What the values mean (ids, tokens, supported components) is checked where they are read.
    Returns the merges' id columns over the whole vocab (`merge_ids`) when the compiled pass that
    checks their form found every half and join a token (for the reader to reuse), else None."""
    model = doc["model"]
    if model.get("type", "BPE" if "merges" in model else None) != "BPE":
        return None                     # another model: refused as unsupported, whatever its shape
    for field in ("vocab", "merges"):
        if field not in model:
            raise ValueError(f"model.{field} is missing")
    for field, kind in _MODEL_FIELDS.items():
        value = model.get(field)
        if isinstance(value, json_merges.MergesText):
            continue                    # an array (its `ids` reads it, or declines)
        if (value is not None or field in ("vocab", "merges")) and not hf_components.is_json(value, kind):
            raise ValueError(f"model.{field} must be {_json_name(kind)}, got {hf_components.json_type(value)}")
    columns = _merge_columns(model["merges"], model["vocab"], compiled=True)   # well-formed merges when not None
    if columns is None and merge_ids.merge_halves(model["merges"]) is None:   # a loop only to name the bad one
        for k, merge in enumerate(model["merges"]):
            parts = merge.split(" ") if isinstance(merge, str) else merge
            if not (isinstance(parts, list) and len(parts) == 2 and all(isinstance(h, str) for h in parts)):
                raise ValueError(f'model.merges[{k}] must be "A B" or ["A", "B"] (two tokens), got {merge!r:.80}')
    added = doc.get("added_tokens")
    if added is not None and not isinstance(added, list):
        raise ValueError(f"added_tokens must be a list, got {hf_components.json_type(added)}")
    seen: dict[str, int] = {}
    for k, entry in enumerate(added or []):
        if not isinstance(entry, dict) or "id" not in entry or "content" not in entry:
            raise ValueError(f"added_tokens[{k}] must be an object with an id and a content")
        for field, kind in _ADDED_TOKEN_FIELDS.items():
            if field in entry and not hf_components.is_json(entry[field], kind):
                raise ValueError(f"added_tokens[{k}].{field} must be {_json_name(kind)}, "
                                 f"got {hf_components.json_type(entry[field])}")
        if not entry["content"]:
            raise ValueError(f"added_tokens[{k}] has an empty content")
        first = seen.setdefault(entry["content"], entry["id"])
        if first != entry["id"]:
            raise ValueError(f"added token {entry['content']!r} is listed twice, with ids {first} and {entry['id']}")
    for role in ("normalizer", "pre_tokenizer", "decoder"):
        if doc.get(role) is not None:
            if _depth(doc[role]) > MAX_COMPONENT_DEPTH:
                raise ValueError(f"{role} is nested more than {MAX_COMPONENT_DEPTH} levels deep")
            hf_components.check_shape(doc[role], role, role)
    return columns


def _merge_columns(merges, vocab, compiled: bool = False):
    """`merge_ids.merge_ids` (`compiled`: `merge_ids.compiled`) of the merges over `vocab`, or their
    `json_merges.MergesText.ids` when they are still text (which raises `Declined` for None)."""
    if isinstance(merges, json_merges.MergesText):
        return merges.ids(vocab)
    return (merge_ids.compiled if compiled else merge_ids.merge_ids)(merges, vocab)


def _json_name(kind) -> str:
    return "a number" if kind == (int, float) else hf_components.JSON_NAMES[kind]


def _depth(value) -> int:
    """How deeply a parsed JSON value nests lists and objects (without recursion: it may be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _read_tokenizer_doc(doc: dict, path, as_tables: bool = False, columns=None):
    def unsupported(what: str) -> ValueError:
        return ValueError(f"{path}: unsupported tokenizer.json: {what}; {SUPPORTED}")

    model = doc["model"]
    model_type = model.get("type", "BPE" if "merges" in model else None)
    if model_type != "BPE":
        raise unsupported(f"model {model_type}")
    if is_piece_file(doc):
        return _read_piece_doc(doc, unsupported)
    if model.get("byte_fallback"):
        raise unsupported("BPE with byte_fallback in a byte-level file (ByteLevel pre-tokenizer or decoder)")
    components = _common_components(doc, unsupported)
    pre_tokenizer = doc.get("pre_tokenizer")
    try:
        pattern = _pattern_of(pre_tokenizer, unsupported)
    except ValueError:
        # Not the single split the fast path runs: the general chain, if every step is reproduced.
        pattern = _chain_pattern(pre_tokenizer, unsupported)
        components["pre_tokenizer"] = pre_tokenizer
    decoder = doc.get("decoder")
    if decoder is not None and decoder.get("type") != "ByteLevel":
        raise unsupported(f"decoder {_describe(decoder)}")

    specials = _special_tokens(doc, components)
    special_ids = set(specials.values())
    problem = _id_problem(model["vocab"], specials)
    if problem:
        raise unsupported(problem)
    tables = _byte_level_tables(model, pattern, specials, components, columns) if as_tables else None
    if tables is not None:
        return tables
    try:
        ordinary = [(s, i) for s, i in model["vocab"].items() if i not in special_ids]
        vocab = dict(zip([i for _, i in ordinary], unicode_to_tokens([s for s, _ in ordinary])))
        merges = _merge_pairs(model["merges"])
    except KeyError as exc:
        raise unsupported(f"a token uses the character {exc.args[0]!r}, outside the GPT-2 byte alphabet "
                          f"(not a byte-level vocabulary)") from None
    except ValueError as exc:
        raise unsupported(f"malformed merges ({exc})") from None
    return {"merges": merges, "pattern": pattern, "special_tokens": specials, "vocab": vocab,
            "ignore_merges": bool(model.get("ignore_merges", False)), **components}


# ---- reading SentencePiece-style tokenizer.json ----------------------------------------------------

def is_piece_file(doc: dict) -> bool:
    """Whether a BPE tokenizer.json merges characters rather than bytes (SentencePiece-style):
    nothing in it is byte-level (no ByteLevel pre-tokenizer or decoder)."""
    return "ByteLevel" not in json.dumps([doc.get("pre_tokenizer"), doc.get("decoder")])


def _read_piece_doc(doc: dict, unsupported) -> dict:
    """`Tokenizer(mode="piece", ...)` keyword arguments of a SentencePiece-style BPE file (see
    bpe_ops/sentencepiece_bpe.py); the components are checked here, so a file is refused in one line."""
    model = doc["model"]
    components = _common_components(doc, unsupported)
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise unsupported("BPE vocab is not an object")
    unk, byte_fallback = model.get("unk_token"), bool(model.get("byte_fallback"))
    if unk is not None and unk not in vocab:
        raise unsupported(f"unk_token {unk!r} is not in the vocab")
    if unk is None and not (byte_fallback and all(f"<0x{b:02X}>" in vocab for b in range(256))):
        raise unsupported("character BPE without unk_token or a full byte_fallback (<0x00>..<0xFF>): "
                          "Hugging Face drops the characters outside its vocabulary, tokenbeam never drops text")
    pre_tokenizer = doc.get("pre_tokenizer")
    if pre_tokenizer is not None:
        kinds = _step_kinds(pre_tokenizer)
        unknown = [k for k in kinds if k not in hf_components.PRE_TOKENIZERS or k == "ByteLevel"]
        if unknown:
            raise unsupported(f"pre-tokenizer {unknown[0]} in {_describe(pre_tokenizer)} (a SentencePiece-style BPE "
                              f"takes Metaspace, Split, Digits)")
        try:
            hf_components.pre_tokenizer(pre_tokenizer)
        except hf_components.Unsupported as exc:
            raise unsupported(str(exc)) from None
        components["pre_tokenizer"] = pre_tokenizer
    decoder = doc.get("decoder")
    if decoder is not None:
        try:
            hf_decoders.decoder(decoder)
        except hf_components.Unsupported as exc:
            raise unsupported(f"{exc} (supported decoders: {', '.join(hf_decoders.DECODERS)})") from None
        components["decoder"] = decoder
    specials = _special_tokens(doc, components)
    problem = _id_problem(vocab, specials)
    if problem:
        raise unsupported(problem)
    merges = model.get("merges") or []
    parts = [m.split(" ") if isinstance(m, str) else m for m in merges]
    bad = next((m for m, p in zip(merges, parts) if not (isinstance(p, list) and len(p) == 2
                                                         and all(isinstance(h, str) for h in p))), None)
    if bad is not None:
        raise unsupported(f"malformed merges (merge {bad!r} is not two tokens)")
    encode = str.encode
    return {"mode": "piece", "pattern": "gpt2", "special_tokens": specials,
            "vocab": {i: encode(s, "utf-8", "surrogatepass") for s, i in vocab.items()},
            "merges": [(encode(a, "utf-8", "surrogatepass"), encode(b, "utf-8", "surrogatepass")) for a, b in parts],
            "ignore_merges": bool(model.get("ignore_merges", False)), "byte_fallback": byte_fallback,
            "unk_token": unk, "fuse_unk": bool(model.get("fuse_unk", False)), **components}


def _common_components(doc: dict, unsupported) -> dict:
    """The model options no reader takes (refused), and the checked normalizer as `components`."""
    model = doc["model"]
    if model.get("dropout") not in (None, 0, 0.0):
        raise unsupported(f"BPE dropout {model['dropout']}")
    for affix in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(affix):
            raise unsupported(f"BPE {affix} {model[affix]!r}")
    normalizer = doc.get("normalizer")
    if normalizer is None or normalizer == {"type": "Sequence", "normalizers": []}:
        return {}
    try:
        hf_components.normalizer(normalizer)
    except hf_components.Unsupported as exc:
        raise unsupported(str(exc)) from None
    return {"normalizer": normalizer}


def _special_tokens(doc: dict, components: dict) -> dict:
    """{content: id} of the added tokens; their HF flags go to `components` where they matter."""
    added = doc.get("added_tokens") or []
    if hf_components.needs_added_vocabulary(added):
        components["added_tokens"] = [{k: t[k] for k in ("id", "content", *hf_components.ADDED_TOKEN_FLAGS) if k in t}
                                      for t in added]
    return {t["content"]: t["id"] for t in added}


def _step_kinds(pre_tokenizer) -> list:
    if not isinstance(pre_tokenizer, dict):
        return [None]
    if pre_tokenizer.get("type") == "Sequence":
        return [k for child in pre_tokenizer.get("pretokenizers") or [] for k in _step_kinds(child)]
    return [pre_tokenizer.get("type")]


def piece_tokenizer_json_text(tok) -> str:
    """The canonical tokenizer.json text of a SentencePiece-style tokenizer: its model and components
    as it was read (HF loads it and encodes the same)."""
    model = tok._piece_model
    doc = {
        **_file_head(tok),
        "pre_tokenizer": tok.pre_tokenizer_spec,
        "post_processor": None,
        "decoder": tok.decoder_spec,
        "model": {
            "type": "BPE", "dropout": None, "unk_token": tok.unk_token, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": model.fuse_unk, "byte_fallback": model.byte_fallback,
            "ignore_merges": bool(tok.ignore_merges),
            "vocab": dict(sorted(model.piece_ids.items(), key=lambda kv: kv[1])),
            "merges": [[a.decode("utf-8", "surrogatepass"), b.decode("utf-8", "surrogatepass")] for a, b in tok.merges],
        },
    }
    return _dumps(doc) + "\n"


def _chain_pattern(pre_tokenizer, unsupported) -> str:
    """Check a pre-tokenizer chain (`hf_components.pre_tokenizer`) and return the pattern the
    Tokenizer records beside it (the first Split's regex, else GPT-2's; the chain does the
    splitting). ByteLevel must come last, once: the steps before it see text, the BPE after it
    bytes; a step after ByteLevel would see HF's byte alphabet instead of the text."""
    if not isinstance(pre_tokenizer, dict):
        raise unsupported("no pre-tokenizer (a byte-level BPE needs ByteLevel)")
    steps = pre_tokenizer.get("pretokenizers", []) if pre_tokenizer.get("type") == "Sequence" else [pre_tokenizer]
    if any(isinstance(s, dict) and s.get("type") == "Sequence" for s in steps):
        steps = [c for s in steps for c in (s.get("pretokenizers", []) if s.get("type") == "Sequence" else [s])]
    kinds = [s.get("type") if isinstance(s, dict) else None for s in steps]
    unknown = [k for k in kinds if k not in hf_components.PRE_TOKENIZERS]
    if unknown:
        raise unsupported(f"pre-tokenizer {unknown[0]} in {_describe(pre_tokenizer)}")
    if kinds.count("ByteLevel") != 1 or kinds[-1] != "ByteLevel":
        raise unsupported(f"pre-tokenizer {_describe(pre_tokenizer)} (a byte-level chain ends with one ByteLevel)")
    try:
        hf_components.pre_tokenizer(pre_tokenizer)
    except hf_components.Unsupported as exc:
        raise unsupported(str(exc)) from None
    for step in steps:
        if step["type"] == "Split" and "Regex" in (step.get("pattern") or {}):
            return _never_a_name(_file_regex(step["pattern"]["Regex"], unsupported))
    return "gpt2"


def _file_regex(pattern, unsupported) -> str:
    """A tokenizer.json split regex as the `regex` pattern that splits as Hugging Face reads the file
    (Oniguruma's syntax: `\\p{N}{1,3}+` is one or more runs of 1-3 digits there, see `regex_dialect`)."""
    if not isinstance(pattern, str):
        raise unsupported(f"Split regex {pattern!r} (not a string)")
    try:
        return from_oniguruma(pattern)
    except ValueError as exc:
        raise unsupported(f"Split regex {pattern!r} ({exc})") from None


_NAME_LIKE = regex.compile(r"[A-Za-z0-9_-]+")


def _never_a_name(pattern: str) -> str:
    """A file's split regex as a regex the Tokenizer cannot read as a pattern name: a bare word
    (`gpt2`, `abc`: a literal to split on) gets a non-capturing group, which matches the same.

    >>> _never_a_name("gpt2"), _never_a_name(r"\\s+")
    ('(?:gpt2)', '\\\\s+')
    """
    return f"(?:{pattern})" if _NAME_LIKE.fullmatch(pattern) else pattern


def _pattern_of(pre_tokenizer: dict | None, unsupported) -> str:
    """The split regex of a byte-level pre-tokenizer: `ByteLevel(use_regex=true)` is GPT-2's pattern;
    `Sequence[Split(regex), ByteLevel(use_regex=false)]` carries its own."""
    if pre_tokenizer is None:
        raise unsupported("no pre-tokenizer (a byte-level BPE needs ByteLevel)")
    kind = pre_tokenizer.get("type")
    steps = pre_tokenizer.get("pretokenizers", []) if kind == "Sequence" else [pre_tokenizer]
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel":
        _check_byte_level(steps[0], use_regex=True, unsupported=unsupported)
        return "gpt2"
    if len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel":
        split = steps[0]
        if split.get("behavior") != "Isolated" or split.get("invert"):
            raise unsupported(f"Split behavior {split.get('behavior')!r} invert={split.get('invert')} "
                              f"(only Isolated, not inverted)")
        _check_byte_level(steps[1], use_regex=False, unsupported=unsupported)
        pattern = split.get("pattern") or {}
        if "Regex" in pattern:
            return _never_a_name(_file_regex(pattern["Regex"], unsupported))
        if "String" in pattern:
            return _never_a_name(regex.escape(pattern["String"]))
        raise unsupported(f"Split pattern {pattern!r}")
    raise unsupported(f"pre-tokenizer {_describe(pre_tokenizer)}")


def _check_byte_level(step: dict, use_regex: bool, unsupported) -> None:
    # An absent key means ByteLevel's default: add_prefix_space=true, use_regex=true.
    if step.get("add_prefix_space", True):
        raise unsupported("ByteLevel add_prefix_space=true (it inserts a space before the text; "
                          "tokenbeam encodes text as given)")
    if step.get("use_regex", True) != use_regex:
        raise unsupported(f"ByteLevel use_regex={step.get('use_regex', True)} in this position")


def _describe(component: dict) -> str:
    """`Sequence[NFC, Lowercase]`-style summary of a tokenizer.json component."""
    kind = component.get("type", "?")
    children = next((v for v in component.values() if isinstance(v, list)), None)
    if kind == "Sequence" and children is not None:
        return "Sequence[" + ", ".join(str(c.get("type", "?")) for c in children if isinstance(c, dict)) + "]"
    return str(kind)


def _merge_pair(merge) -> tuple[bytes, bytes]:
    """A merge in pair form `["a", "b"]` or in the older string form `"a b"`."""
    parts = merge.split(" ") if isinstance(merge, str) else merge
    if len(parts) != 2:
        raise ValueError(f"merge {merge!r} is not two tokens")
    return unicode_to_token(parts[0]), unicode_to_token(parts[1])


def _merge_pairs(merges: list) -> list[tuple[bytes, bytes]]:
    """`_merge_pair` of every merge, the whole list spelled at once (`unicode_to_tokens`): a
    large vocabulary has hundreds of thousands of merge halves."""
    parts = [m.split(" ") if isinstance(m, str) else m for m in merges]
    if not all(type(p) is list and len(p) == 2 for p in parts):
        for m in merges:           # names the first malformed merge
            _merge_pair(m)
        raise TypeError("merges must be pairs of strings")
    halves = unicode_to_tokens([h for p in parts for h in p])
    return list(zip(halves[::2], halves[1::2]))


def _byte_level_tables(model: dict, pattern: str, specials: dict, components: dict, columns=None):
    """The `table_cache.Tables` of `Tokenizer(**_read_tokenizer_doc(...))` (its sha256 left for later),
    for the common byte-level file: every merge half and product an ordinary token of the vocab, all 256
    bytes in it, every token in the GPT-2 byte alphabet. Token ids come from the vocab's strings (a
    merge's product is spelled as its halves joined), so no token is turned into bytes one by one, and
    the vocab's bytes are one encode of all its strings. None for any other file: the Tokenizer's own
    construction then reads it, and names what is wrong. `columns`: `merge_ids` of the merges over
    the whole vocab, if known."""
    from . import table_cache
    from .merging import ranks_ascend_of

    vocab = model["vocab"]
    special_ids = set(specials.values())
    ordinary = vocab if special_ids.isdisjoint(vocab.values()) else {
        t: i for t, i in vocab.items() if i not in special_ids}
    if columns is None or ordinary is not vocab:
        columns = _merge_columns(model["merges"], ordinary)
    if columns is None or None in map(ordinary.get, _byte_spellings()):
        return None
    left, right, merged = columns
    strings = list(ordinary)
    try:
        blob = unicode_to_blob(strings)
    except UnicodeEncodeError:
        return None
    return table_cache.Tables(
        pattern=resolve_pattern(pattern), ignore_merges=bool(model.get("ignore_merges", False)),
        special_tokens=dict(specials), token_ids=array("q", ordinary.values()),
        token_lengths=array("q", map(len, strings)), token_blob=blob, left=left, right=right,
        merged=merged,
        ranks_ascend=ranks_ascend_of(left, right, merged),
        normalizer=components.get("normalizer"), pre_tokenizer=components.get("pre_tokenizer"),
        added_tokens=components.get("added_tokens"))


# A `\uD800`-`\uDBFF` escape not followed by a `\uDC00`-`\uDFFF` one, or the latter alone: JSON
# text may spell a lone surrogate, which is not Unicode text (a pair is one character).
_LONE_SURROGATE_ESCAPE = regex.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                                       r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_SURROGATE = regex.compile("[\ud800-\udfff]")
_LONE_SURROGATE_ESCAPE_BYTES = regex.compile(_LONE_SURROGATE_ESCAPE.pattern.encode("ascii"))


def _parse_json(data: bytes, path):
    """A tokenizer file's JSON; ValueError naming the file when it is not UTF-8 JSON of Unicode text
    (a lone surrogate, which `tokenizers` refuses too, would fail every later encode to UTF-8)."""
    try:
        text = data.decode("utf-8")
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                         f"truncated or not a JSON file?") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read (not a tokenizer file?)") from None
    if ("\\ud" in text or "\\uD" in text) and _LONE_SURROGATE_ESCAPE.search(text):   # else no string holds one
        spoiled = next((s for s in _strings(doc) if _SURROGATE.search(s)), None)
        if spoiled is not None:
            raise ValueError(f"{path}: the string {spoiled[:40]!r} holds a lone surrogate (not Unicode text)")
    return doc


def _strings(value):
    """Every string in a parsed JSON value, keys included (without recursion: it may be deep)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            stack.extend(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _load_json(path: str | os.PathLike):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                         f"truncated or not a JSON file?") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to read") from None


def _id_problem(vocab: Mapping, specials: Mapping) -> str | None:
    """Why a vocab's ids cannot be trusted (not non-negative integers, two tokens on one id, an id
    range mostly empty: see `id_range_problem`), or None.

    An added token may repeat its own vocab entry (same content, same id), as Hugging Face writes them."""
    ids = list(vocab.values())
    plain = bool(ids) and set(map(type, ids)) == {int}     # before any id is hashed: a list or dict is not
    owner: dict[int, str] = dict(zip(ids, vocab)) if plain else {}
    if plain and min(ids) >= 0 and len(owner) == len(ids):
        entries = list(specials.items())       # the vocab's ids are sound: only the added tokens to check
    else:
        owner, entries = {}, list(vocab.items()) + list(specials.items())
    for token, i in entries:
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            shown = repr(i) if len(repr(i)) <= 40 else f"(a JSON {'object' if isinstance(i, dict) else type(i).__name__})"
            return f"malformed id {shown} for token {token!r} (ids are non-negative integers)"
        if owner.setdefault(i, token) != token:
            return f"duplicate id {i}: both {owner[i]!r} and {token!r}"
    return id_range_problem(owner)


# Ids index dense tables (the encoder's, a dataset's frequency per id in stats.json) and fill token
# Parquet's uint32 columns: an id must fit uint32, and at least half the ids up to the largest must
# be used, so that the tables grow with the file, never with one huge id. Real vocabularies leave a
# few dozen unused (cl100k_base's gap before its special tokens).
MAX_ID = 2**32 - 1


def id_range_problem(ids) -> str | None:
    """Why ids (non-negative integers, each once) cannot be a vocabulary's (see MAX_ID), or None."""
    top = max(ids, default=-1)
    if top > MAX_ID:
        return (f"its largest id is {top:,}, too large for uint32, the widest token id type; supported: ids 0 "
                f"to {MAX_ID:,}")
    if len(ids) < (top + 1) // 2:
        return f"{len(ids):,} tokens spread over ids 0 to {top:,}; supported: ids numbered from 0 with few gaps"
    return None


# ---- reading tiktoken rank files ----------------------------------------------------------------

_RANK_LINE = regex.compile(rb"[A-Za-z0-9+/]*={0,2} [0-9]+")


def is_rank_file(data: bytes) -> bool:
    """Whether a file's bytes look like a tiktoken rank file (`.tiktoken`, or the `tokenizer.model`
    some models ship in that format): the first line is base64, a space and a number."""
    return _RANK_LINE.fullmatch(data[:data.find(b"\n")] if b"\n" in data else data) is not None


def read_tiktoken_data(data: bytes, path: str | os.PathLike = "tokenizer.tiktoken") -> dict:
    """`Tokenizer(...)` keyword arguments (without pattern and special tokens) from a tiktoken rank
    file's bytes: one `base64(token) rank` line per token; the rank is the id.

    tiktoken merges, inside a piece, the adjacent pair whose concatenation has the lowest rank. As
    merges: every split of every token into two tokens, ordered by the token's rank and then by the
    parts' ranks (as `transformers` converts rank files to tokenizer.json). Replaying them merges
    the same pairs in the same order, except where two different splits of one token are both
    mergeable in the same piece at once and overlap (`ab|a|ba` for `aba`): tiktoken takes the
    leftmost, the merge list the split listed first."""
    vocab: dict[int, bytes] = {}
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a tiktoken rank file (a non-ASCII byte at {exc.start})") from None
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if not line:
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not parts[1].isdigit():
            raise ValueError(f"{path}:{lineno}: expected `base64 rank`, got {line[:80]!r}")
        try:
            token = base64.b64decode(parts[0], validate=True)
        except ValueError:
            raise ValueError(f"{path}:{lineno}: invalid base64 {parts[0][:80]!r}") from None
        rank = int(parts[1])
        if rank in vocab:
            raise ValueError(f"{path}:{lineno}: rank {rank} given twice")
        vocab[rank] = token
    if not vocab:
        raise ValueError(f"{path}: an empty rank file")
    problem = id_range_problem(vocab)
    if problem:
        raise ValueError(f"{path}: {problem}")
    return {"vocab": vocab, "merges": tiktoken_merges(vocab)}


def tiktoken_merges(vocab: Mapping[int, bytes]) -> list[tuple[bytes, bytes]]:
    """The merge list that replays tiktoken's rank-based merging (see `read_tiktoken_data`)."""
    rank_of = {t: r for r, t in vocab.items()}
    merges = []
    for rank in sorted(vocab):
        token = vocab[rank]
        splits = [(rank_of[token[:i]], rank_of[token[i:]], i) for i in range(1, len(token))
                  if token[:i] in rank_of and token[i:] in rank_of]
        splits.sort()
        merges.extend((token[:i], token[i:]) for _, _, i in splits)
    return merges


# ---- reading vocab.json + merges.txt ------------------------------------------------------------

def read_gpt2_files(vocab_json: str | os.PathLike, merges_txt: str | os.PathLike) -> dict:
    """`Tokenizer(...)` keyword arguments (without the pattern) from GPT-2's vocab.json + merges.txt.

    Only a *first* line starting with `#version` is a header: `# #` is a real merge. Vocab entries that
    are neither a single byte nor made by a merge (GPT-2's `<|endoftext|>`) become special tokens.
    """
    raw_vocab = _load_json(vocab_json)
    if not isinstance(raw_vocab, dict):
        raise ValueError(f"{vocab_json}: expected a JSON object mapping tokens to ids")
    with open(merges_txt, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[0].startswith("#version"):
        lines[0] = ""
    merges = []
    try:
        for lineno, line in enumerate(lines, 1):
            line = line.rstrip("\r")
            if line:
                parts = line.split(" ")
                if len(parts) != 2:
                    raise ValueError(f"{merges_txt}:{lineno}: expected two tokens separated by a space, got {line!r}")
                merges.append((unicode_to_token(parts[0]), unicode_to_token(parts[1])))
        tokens = {i: unicode_to_token(s) for s, i in raw_vocab.items()}
    except KeyError as exc:
        raise ValueError(f"{vocab_json}, {merges_txt}: the character {exc.args[0]!r} is outside the GPT-2 byte "
                         f"alphabet (not a byte-level vocabulary)") from None
    made = {a + b for a, b in merges}
    vocab, specials = {}, {}
    for i, t in tokens.items():
        if len(t) > 1 and t not in made and _is_utf8(t):
            specials[t.decode("utf-8")] = i
        else:
            vocab[i] = t
    return {"merges": merges, "special_tokens": specials, "vocab": vocab}


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@lru_cache(maxsize=1)
def _byte_spellings() -> tuple[str, ...]:
    """The GPT-2 spelling of each byte 0..255: the tokens every byte-level vocab holds."""
    return tuple(token_to_unicode(bytes([b])) for b in range(256))

"""Write the hostile corpus into a folder, and say what each file must become.

Inputs that break naive readers and tokenizers: JSONL with every kind of bad row, a BOM, CRLF ends,
a truncated last line, empty and blank files; text with invalid UTF-8, lone surrogates, NUL, zero-width
and bidi controls, combining marks, emoji ZWJ sequences, base64 blobs and our special tokens' strings;
Parquet without a text column, with a text column of the wrong type, truncated; compressed shards cut
short, and files whose extension lies about their format. `big=True` adds a 20 MB record, a 5 MB line
without whitespace (minified code) and 1 MB of one repeated character (made at test time, never
committed).

Nothing is read back to decide the expectations: each `Expect` is built alongside the bytes it
describes (UTF-8 repair expectations use Python's own `bytes.decode(errors="replace")`).

    python tests/data/hostile/make_hostile.py OUT_DIR [--big] [--multi ../shared/corpora/multi]
"""
from __future__ import annotations

import argparse
import base64
import bz2
import gzip
import io
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

# Reasons, as spelled in schemas/records.py (repeated here so the expectations stand on their own).
BAD_JSON, NOT_AN_OBJECT, MISSING_TEXT_FIELD, TEXT_NOT_A_STRING = (
    "bad_json", "not_an_object", "missing_text_field", "text_not_a_string")
TRUNCATED_OR_CORRUPT, UNREADABLE_FILE, MISSING_TEXT_COLUMN, TEXT_COLUMN_NOT_STRING, WRONG_FORMAT = (
    "truncated_or_corrupt", "unreadable_file", "missing_text_column", "text_column_not_string", "wrong_format")

SPECIAL = "<|endoftext|>"
BOM = b"\xef\xbb\xbf"
BIG_RECORD_BYTES = 20 << 20
LONG_LINE_BYTES = 5 << 20
ONE_CHAR_BYTES = 1 << 20


@dataclass
class Expect:
    """What the pipelines must make of one file.

    `records`: (row, id or None for the default `<relpath>:<row>`, text) of every row to write, in
    order. `rejected`: (row, reason) of every row to reject. `error`: the shard error reason, if the
    file (or its rest) is unreadable. `prefix`: the file is cut short, so only a proper, non-empty
    prefix of `records` can be read. `repaired`: rows whose text had invalid UTF-8 or lone surrogates.
    """
    path: str
    records: list[tuple[int, str | None, str]] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)
    error: str | None = None
    prefix: bool = False
    repaired: int = 0


class Rows:
    """Builds a JSONL or text file row by row, keeping its expectation in step with its bytes."""

    def __init__(self, path: str):
        self.expect = Expect(path)
        self.data = bytearray()
        self.row = 0

    def line(self, raw: bytes, end: bytes = b"\n") -> None:
        self.data += raw + end

    def blank(self, raw: bytes = b"\n") -> None:
        self.data += raw                      # blank lines are not rows

    def ok(self, raw: bytes, text: str, rid: str | None = None, repaired: bool = False, end=b"\n"):
        self.line(raw, end)
        self.expect.records.append((self.row, rid, text))
        self.expect.repaired += repaired
        self.row += 1

    def bad(self, raw: bytes, reason: str, end=b"\n"):
        self.line(raw, end)
        self.expect.rejected.append((self.row, reason))
        self.row += 1

    def obj(self, rid: str | None, text: str, repaired_text: str | None = None, end=b"\n"):
        """A JSON object line; lone surrogates are written as `\\udXXX` escapes (ensure_ascii)."""
        obj = {"text": text} if rid is None else {"id": rid, "text": text}
        raw = json.dumps(obj, ensure_ascii=repaired_text is not None).encode("utf-8")
        self.ok(raw, repaired_text if repaired_text is not None else text, rid,
                repaired=repaired_text is not None, end=end)


def _write(folder: Path, path: str, data: bytes) -> None:
    target = folder / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _jsonl(records) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in records)


# --------------------------------------------------------------------------------------- JSONL

def jsonl_rows() -> Rows:
    """Every row-level problem, a BOM, CRLF ends, duplicate ids, a truncated last line."""
    f = Rows("jsonl/rows.jsonl")
    f.data += BOM
    f.ok(b'{"id": "r0", "text": "first, after a BOM"}', "first, after a BOM", "r0", end=b"\r\n")
    f.ok(b'{"id": "dup", "text": "one of two records sharing an id"}', "one of two records sharing an id", "dup",
         end=b"\r\n")
    f.blank(b"\r\n")
    f.bad(b"not json at all", BAD_JSON, end=b"\r\n")
    f.bad(b'{"id": "r3", "body": "no text field"}', MISSING_TEXT_FIELD)
    f.bad(b'{"id": "r4", "text": null}', TEXT_NOT_A_STRING)
    f.bad(b'{"id": "r5", "text": 42}', TEXT_NOT_A_STRING)
    f.bad(b'{"id": "r6", "text": ["a", "list"]}', TEXT_NOT_A_STRING)
    f.bad(b'{"id": "r7", "text": {"nested": "object"}}', TEXT_NOT_A_STRING)
    f.bad(b'["an", "array"]', NOT_AN_OBJECT)
    f.ok(b'{"id": "dup", "text": "the other record sharing that id"}', "the other record sharing that id", "dup")
    # What `cat a.jsonl b.jsonl` gives when each file starts with a BOM.
    f.ok(BOM + b'{"id": "r10", "text": "a line that starts with a BOM"}', "a line that starts with a BOM", "r10")
    f.ok(b'{"id": "r11", "text": ""}', "", "r11")
    f.ok(b'{"text": "no id: a default one"}', "no id: a default one", None)
    f.bad(b'{"id": "r13", "text": "cut in the mid', BAD_JSON, end=b"")      # truncated, no newline
    return f


def jsonl_last_line() -> Rows:
    f = Rows("jsonl/last_line.jsonl")
    f.obj("l0", "complete")
    f.obj("l1", "the last line is complete but has no newline", end=b"")
    return f


def jsonl_text_cases(rng: random.Random) -> Rows:
    """Text every tokenizer must carry through unchanged (or repaired as documented)."""
    f = Rows("jsonl/text.jsonl")
    blob = base64.b64encode(rng.randbytes(30_000)).decode("ascii")
    for rid, text in [
        ("nul", "before\x00after\x00\x00 end"),
        ("zero-width", "zero\u200bwidth\u200cnon\u200djoiner\ufeffword-joiner\u2060soft\u00adhyphen"),
        ("bidi", "\u202eevil\u202c \u2066isolate\u2069 \u200frlm\u200e \u061calm \u202bembed\u202c"),
        ("combining", "e\u0301 n\u0303 a\u030a\u0328 Z" + "\u0336\u0337\u0338\u0334" * 30
         + " \u1100\u1161\u11a8 \u0915\u094d\u0937 \u0e01\u0e34\u0e4a"),
        ("emoji-zwj", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 "
                      "\U0001F3F3\ufe0f\u200d\U0001F308 \U0001F469\U0001F3FD\u200d\U0001F4BB "
                      "\U0001F9D1\u200d\U0001F91D\u200d\U0001F9D1 \U0001F1EB\U0001F1F7 \u2764\ufe0f\u200d\U0001F525"),
        ("separators", "a\u2028b\u2029c\x85d\re\x0bf\x0cg\x1ch\x1di\x1ej"),
        ("specials", f"{SPECIAL} plain text {SPECIAL}{SPECIAL} <|fim_prefix|> <|endoftext|"),
        ("base64", f"data:image/png;base64,{blob}"),
        ("noncharacters", "\ufffe\uffff \U0010FFFF \U000E0001\U000E0065\U000E006E \ue000 private"),
        ("whitespace-only", "   \t  "),
        ("pair", "a valid surrogate pair \U0001F600 stays one character"),
    ]:
        f.obj(rid, text)
    # Lone surrogates are valid JSON escapes but not Unicode scalar values: U+FFFD replaces them.
    f.obj("lone-high", "lone \ud800 high", "lone \ufffd high")
    f.obj("lone-low", "\udfff low first", "\ufffd low first")
    f.obj("reversed", "reversed \udc00\ud800 pair", "reversed \ufffd\ufffd pair")
    raw = b'{"id": "lone-in-id-\\udc80", "text": "the id has a lone surrogate"}'
    f.ok(raw, "the id has a lone surrogate", "lone-in-id-\ufffd", repaired=True)
    # Raw bytes that are not UTF-8: a Latin-1 byte, 0xff, an overlong '/', a UTF-8-encoded surrogate.
    raw = b'{"id": "bytes", "text": "caf\xe9 \xff \xc0\xaf overlong \xed\xa0\x80 cesu"}'
    f.ok(raw, json.loads(raw.decode("utf-8", "replace"))["text"], "bytes", repaired=True)
    return f


# --------------------------------------------------------------------------------------- text

def text_lines() -> Rows:
    f = Rows("text/lines.txt")
    f.data += BOM
    for raw in [b"plain first line", b"caf\xe9 and \xff\xfe", b"ends mid character \xe2\x82",
                b"nul \x00 inside", b"\xe2\x80\xaeright-to-left override", b"tab\tand\x0bvertical tab"]:
        text = raw.decode("utf-8", "replace")
        f.ok(raw, text, None, repaired="\ufffd" in text, end=b"\r\n")
        f.blank(b"   \r\n")
    return f


def text_utf16() -> Expect:
    return Expect("text/utf16.txt", error=WRONG_FORMAT)


# --------------------------------------------------------------------------------------- Parquet

def parquet_files(folder: Path) -> list[Expect]:
    out = []
    texts = [f"parquet row {i} \u00e9\U0001F600" for i in range(40)]
    raw = [t.encode("utf-8") for t in texts]
    raw[7] = None                                           # a null text: rejected
    raw[9] = b"not utf-8 \xff here"                         # Arrow does not check UTF-8 in Parquet
    table = pa.table({"text": pa.array(raw, pa.binary()).view(pa.string()), "id": pa.array(range(40), pa.int64())})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=16)
    whole = buf.getvalue()
    _write(folder, "parquet/good.parquet", whole)
    good = Expect("parquet/good.parquet", repaired=1)
    for i, r in enumerate(raw):
        if r is None:
            good.rejected.append((i, TEXT_NOT_A_STRING))
        else:
            good.records.append((i, str(i), r.decode("utf-8", "replace")))
    out.append(good)

    # A dictionary-encoded text column (what pandas writes for a categorical): still text.
    cats = ["red", "green", "red", "blue \u00e9"]
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": pa.array(cats).dictionary_encode()}), buf)
    _write(folder, "parquet/dictionary.parquet", buf.getvalue())
    out.append(Expect("parquet/dictionary.parquet", records=[(i, None, t) for i, t in enumerate(cats)]))

    for name, columns, reason in [("no_text", {"body": ["a", "b"], "id": ["1", "2"]}, MISSING_TEXT_COLUMN),
                                  ("int_text", {"text": [1, 2, 3]}, TEXT_COLUMN_NOT_STRING)]:
        buf = io.BytesIO()
        pq.write_table(pa.table(columns), buf)
        _write(folder, f"parquet/{name}.parquet", buf.getvalue())
        out.append(Expect(f"parquet/{name}.parquet", error=reason))
    _write(folder, "parquet/truncated.parquet", whole[: len(whole) // 2])
    out.append(Expect("parquet/truncated.parquet", error=UNREADABLE_FILE))
    _write(folder, "parquet/lies.parquet", _jsonl([{"text": "JSONL wearing a .parquet name"}]))
    out.append(Expect("parquet/lies.parquet", error=UNREADABLE_FILE))
    return out


# --------------------------------------------------------------------------------------- compressed

def compressed_files(folder: Path) -> list[Expect]:
    out = []
    docs = [{"id": f"z{i}", "text": f"zstd record {i} \u00fc\u00f1\u00ee"} for i in range(50)]
    # Two frames, as `cat a.zst b.zst` (or pzstd) makes.
    frames = [zstandard.ZstdCompressor().compress(_jsonl(part)) for part in (docs[:20], docs[20:])]
    _write(folder, "compressed/good.jsonl.zst", b"".join(frames))
    out.append(Expect("compressed/good.jsonl.zst", records=[(i, d["id"], d["text"]) for i, d in enumerate(docs)]))

    docs = [{"id": f"g{i}", "text": f"gzip record {i} " + "word " * (i % 40)} for i in range(3000)]
    whole = gzip.compress(_jsonl(docs), mtime=0)
    _write(folder, "compressed/truncated.jsonl.gz", whole[: len(whole) * 3 // 5])
    out.append(Expect("compressed/truncated.jsonl.gz", records=[(i, d["id"], d["text"]) for i, d in enumerate(docs)],
                      error=TRUNCATED_OR_CORRUPT, prefix=True))

    lines = [f"zstd line {i} " + "x" * (i % 70) for i in range(4000)]
    whole = zstandard.ZstdCompressor().compress("\n".join(lines).encode())
    # Cut inside the last block: the blocks before it decompress, zstandard's own reader says nothing.
    _write(folder, "compressed/truncated_zst.txt.zst", whole[:-10])
    out.append(Expect("compressed/truncated_zst.txt.zst", records=[(i, None, t) for i, t in enumerate(lines)],
                      error=TRUNCATED_OR_CORRUPT, prefix=True))

    plain = _jsonl([{"text": "plain JSONL named .gz"}])
    _write(folder, "compressed/lies.jsonl.gz", plain)
    out.append(Expect("compressed/lies.jsonl.gz", error=TRUNCATED_OR_CORRUPT))
    # Compressed data without its extension would otherwise be read as lines of binary garbage.
    _write(folder, "compressed/gzip_inside.jsonl", gzip.compress(plain, mtime=0))
    out.append(Expect("compressed/gzip_inside.jsonl", error=WRONG_FORMAT))
    _write(folder, "compressed/zstd_inside.txt", zstandard.ZstdCompressor().compress(b"zstd named .txt\n"))
    out.append(Expect("compressed/zstd_inside.txt", error=WRONG_FORMAT))
    _write(folder, "compressed/bz2_inside.txt", bz2.compress(b"bz2 named .txt\n"))
    out.append(Expect("compressed/bz2_inside.txt", error=WRONG_FORMAT))
    return out


# --------------------------------------------------------------------------------------- scripts

def script_samples(multi_dir: Path, chars: int = 3000) -> Rows:
    """The first document (by shard order) of every script in the multilingual corpus, cut to
    `chars` characters."""
    f = Rows("scripts/scripts.jsonl")
    seen = set()
    for shard in sorted(Path(multi_dir).glob("*.jsonl")):
        with open(shard, encoding="utf-8") as src:
            for line in src:
                doc = json.loads(line)
                if doc["script"] not in seen:
                    seen.add(doc["script"])
                    f.obj(f"{doc['script']}:{doc['id']}", doc["text"][:chars])
    return f


# --------------------------------------------------------------------------------------- big

def big_files(folder: Path, rng: random.Random) -> list[Expect]:
    """A 20 MB record, a 5 MB line without whitespace, 1 MB of one character (written at test time)."""
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "zo", "qu", "\u00e9", "sh", "\u00f8r", "th"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    pieces, size = [], 0
    while size < BIG_RECORD_BYTES:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(4, 20))) + rng.choice([". ", "! ", ", ", ".\n"])
        pieces.append(sentence)
        size += len(sentence.encode("utf-8"))
    huge = "".join(pieces)
    f = Rows("big/record_20mb.jsonl")
    f.obj("before", "a small record before the big one")
    f.obj("huge", huge)
    f.obj("after", "a small record after it")
    out = [f]

    # Minified code: one line, no whitespace, a few thousand distinct names between punctuation.
    names = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz_$\u00e9\u4e2d") for _ in range(rng.randint(1, 9)))
             for _ in range(2000)]
    pieces, size = [], 0
    while size < LONG_LINE_BYTES:
        piece = rng.choice(names) + rng.choice([",", ":", ";", "(", ")", "{", "}", "=", "+", "[0]", ".", "=>", "!0"])
        pieces.append(piece)
        size += len(piece.encode("utf-8"))
    line = "".join(pieces)
    f = Rows("big/line_5mb.txt")
    f.ok(line.encode("utf-8"), line)
    f.ok(b"a short line after the long one", "a short line after the long one")
    out.append(f)

    f = Rows("big/one_char.txt")
    f.ok(b"a" * ONE_CHAR_BYTES, "a" * ONE_CHAR_BYTES, end=b"")
    out.append(f)
    for rows in out:
        _write(folder, rows.expect.path, bytes(rows.data))
    return [rows.expect for rows in out]


# --------------------------------------------------------------------------------------- all

def make_hostile(folder: str | Path, multi_dir: str | Path | None = None, big: bool = False) -> list[Expect]:
    """Write the hostile corpus under `folder`; return one `Expect` per file, sorted by path."""
    folder = Path(folder)
    rng = random.Random(20240613)
    expects = []
    rows = [jsonl_rows(), jsonl_last_line(), jsonl_text_cases(rng), text_lines()]
    if multi_dir is not None:
        rows.append(script_samples(Path(multi_dir)))
    for f in rows:
        _write(folder, f.expect.path, bytes(f.data))
        expects.append(f.expect)
    _write(folder, "jsonl/empty.jsonl", b"")
    expects.append(Expect("jsonl/empty.jsonl"))
    _write(folder, "jsonl/blank.jsonl", b"\n\n   \r\n\t\n")
    expects.append(Expect("jsonl/blank.jsonl"))
    _write(folder, "text/utf16.txt", "UTF-16 text\nfrom Notepad\n".encode("utf-16"))
    expects.append(text_utf16())
    expects += parquet_files(folder)
    expects += compressed_files(folder)
    if big:
        expects += big_files(folder, rng)
    return sorted(expects, key=lambda e: e.path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="folder to write the corpus into")
    parser.add_argument("--big", action="store_true", help="also write the 20 MB / 5 MB / 1 MB cases")
    parser.add_argument("--multi", default=None, help="the multilingual corpus folder (adds one document per script)")
    args = parser.parse_args()
    for e in make_hostile(args.out, args.multi, args.big):
        outcome = e.error or f"{len(e.records)} records, {len(e.rejected)} rejected"
        print(f"{e.path}: {outcome}")


if __name__ == "__main__":
    main()

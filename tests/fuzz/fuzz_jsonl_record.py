"""Fuzz target: one JSONL line as `tokenize` and `train` read it (`sources.jsonl_record`): the
compiled read of its text and id (`_native.jsonl_text_id`, where it takes the line) must give
exactly the record or rejection that json.loads gives (`sources._jsonl_record_loaded`, the
specification), for every text and id field pair and both invalid-UTF-8 policies. And the whole
input as a JSONL stream: read in blocks of whole lines (`_native.jsonl_block`) and in batches of
lines (`_native.jsonl_lines_fields`) it must give what reading it line by line gives (the blocks' texts kept
as UTF-8 too: `jsonl_block(utf8=True)`), the records' ids hashed by the compiled BLAKE2b (`_native.id_hashes`)
what hashlib gives, and their calibration groups (`_native.record_groups`) what `record_group` gives. Run from the worktree:

    mkdir -p /tmp/fuzz-jsonl_record && python3 tests/fuzz/fuzz_jsonl_record.py -max_total_time=600 \
        /tmp/fuzz-jsonl_record tests/fuzz/corpus/jsonl_record

(new corpus entries go to the first folder, crashing inputs to ./crash-*)."""
import hashlib
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fuzz import harness  # noqa: E402

with harness.instrumented(__name__ == "__main__"):
    from bpe_ops import stats
    from bpe_ops.utf8_texts import Utf8Texts
    from pipelines.datasets import sources
    from pipelines.steps import tokenize_shard
    from pipelines.datasets.sources import Shard, SourceOptions

SHARD = Shard("mem/a.jsonl", "a.jsonl", 0)
OPTIONS = [SourceOptions(text_field=text, id_field=rid, invalid_utf8=policy)
           for text, rid in (("text", "id"), ("text", None), ("id", "id"), ("t\u00e9", "id"))
           for policy in ("replace", "reject")]


def check(data: bytes) -> None:
    line = data.split(b"\n", 1)[0]
    if not line.strip():
        return
    # The line as it is; with its first string value lengthened past the size whose text is decoded
    # without the GIL (`_native`'s JSONL_FREE_THREADS_BYTES): the input's own characters then decide
    # that str's kind; and with two-byte characters before the input's bytes, so that the line's UTF-8
    # is checked 32 bytes at a time (`_utf8_valid.h`) from its start, the input's bytes at every place
    # of a block.
    value = line.find(b'":"')
    lines = [line] if value < 0 else [line, line[:value + 3] + b"x" * 4100 + line[value + 3:],
                                      line[:value + 3] + "\u00e9".encode() * (32 + len(line) % 32) + line[value + 3:]]
    for variant in lines:
        for options in OPTIONS:
            got = sources.jsonl_record(variant, 0, 3, SHARD, options)
            expected = sources._jsonl_record_loaded(variant, 0, 3, SHARD, options)
            if got != expected:
                raise AssertionError(f"compiled and json.loads reads differ on {variant!r}: {got!r} / {expected!r}")
    check_stream(data)


def check_stream(data: bytes) -> None:
    """The input as a stream of lines, read a few bytes at a time (so batches end anywhere), in
    batches and line by line, with a bound that makes some lines oversized."""
    chunk = 1 + data[0] % 64 if data else 1
    for options in OPTIONS[:2]:
        options = SourceOptions(text_field=options.text_field, id_field=options.id_field,
                                invalid_utf8=options.invalid_utf8, max_record_bytes=64)
        got = list(sources._read_jsonl(io.BytesIO(data), SHARD, options, chunk))
        block, sources._JSONL_BLOCK = sources._JSONL_BLOCK, None
        try:
            per_line = list(sources._read_jsonl(io.BytesIO(data), SHARD, options, chunk))
            compiled, sources._JSONL_LINES_FIELDS = sources._JSONL_LINES_FIELDS, None
            try:
                expected = list(sources._read_jsonl(io.BytesIO(data), SHARD, options, chunk))
            finally:
                sources._JSONL_LINES_FIELDS = compiled
        finally:
            sources._JSONL_BLOCK = block
        if got != expected or per_line != expected:
            raise AssertionError(f"block, batch and line-by-line reads differ on {data!r}: {got!r} / {per_line!r} / "
                                 f"{expected!r}")
        # Blocks read with their texts kept as UTF-8 (`Utf8Texts`): the same records, the characters
        # counted as str counts them.
        as_utf8 = list(sources._read_jsonl(io.BytesIO(data), SHARD, options, chunk, batched=True, utf8=True))
        if [x for item in as_utf8 for x in (item if type(item) in sources.RUNS else [item])] != expected:
            raise AssertionError(f"the block read as UTF-8 differs on {data!r}: {as_utf8!r} / {expected!r}")
        for item in as_utf8:
            texts = getattr(item, "texts", None)
            if type(texts) is Utf8Texts and texts.chars.tolist() != list(map(len, texts)):
                raise AssertionError(f"characters counted in the block differ on {data!r}")
        # The records' ids hashed as the repeated-id count hashes them: compiled BLAKE2b == hashlib's.
        ids = [item.id for item in got if item.id is not None] + [data.decode("utf-8", "surrogateescape")]
        digests = b"".join(hashlib.blake2b(str(i).encode("utf-8", "surrogatepass"), digest_size=16).digest()
                           for i in ids)
        if tokenize_shard.id_hashes(ids).tobytes() != digests:
            raise AssertionError(f"compiled and hashlib id hashes differ on {ids!r}")
        # ... and grouped as the calibration groups them: compiled crc32 == record_group's.
        if stats.record_groups(ids).tolist() != [stats.record_group(i) for i in ids]:
            raise AssertionError(f"compiled and Python record groups differ on {ids!r}")


if __name__ == "__main__":
    if sources._JSONL_TEXT_ID is None:
        sys.exit("fuzz_jsonl_record: bpe_ops._native is not built")
    harness.fuzz(check)

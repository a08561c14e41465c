"""pipelines/datasets/byte_windows.py: windows that tile a shard hold, piece by piece, exactly the text the
shard's reader gives, whatever bytes they are cut at (inside a JSON escape, a UTF-8 character or a
surrogate pair, a run of escaped backslashes or quotes, a key)."""
import json
import re

import pytest

from bpe_ops.stats import count_words, utf8_length
from pipelines.datasets.byte_windows import window_pieces
from pipelines.datasets.shards import expand
from pipelines.datasets.sources import Record, SourceOptions, read_shard

LINES = [
    '{"id": "a", "text": "caf\\u00e9 \\ud83d\\ude00 emoji \\\\\\\\\\\\ back\\\\\\"slash \\"\\"\\"\\"\\"\\"\\"\\"", "n": 3}',
    "",
    "   ",
    '{"text": "crlf line\\twith a tab", "tags": ["x", {"y": "z"}], "ok": true}\r',
    '{"text": 3}',
    "not json at all",
    '{"title": "short", "text": "' + "d\\u00e9j\\u00e0 vu \\u4e2d\\u6587 \\\\n " * 30 + '", "source": "x"}',
    json.dumps({"id": 7, "text": "plain ASCII words " * 40 + "中文字符" * 20}, ensure_ascii=False),
    json.dumps({"text": ':starts with a colon", and "quotes": ' * 10}),
    json.dumps({"text": "\\" * 99 + "\"" * 60 + "\u00e9\U0001F600" * 30 + "\\\"" * 60 + "\\u0041" * 20}),
]


def tokens(text):
    return len(re.findall(r"\w+|[^\w\s]", text))


def figures(pieces):
    total = {"tokens": 0, "words": 0, "bytes": 0, "chars": 0, "records": 0}
    for p in pieces:
        if p.is_whole:
            if isinstance(p.whole, Record):
                t = p.whole.text
                total.update(tokens=total["tokens"] + tokens(t), words=total["words"] + count_words(t),
                             bytes=total["bytes"] + utf8_length(t), chars=total["chars"] + len(t),
                             records=total["records"] + 1)
            continue
        total["records"] += p.starts_record
        total["tokens"] += tokens(p.context + p.text) - tokens(p.context)
        total["words"] += count_words(p.context + p.text) - count_words(p.context)
        total["bytes"] += utf8_length(p.text)
        total["chars"] += len(p.text)
    return total


@pytest.mark.parametrize("margin", [24, 128])
@pytest.mark.parametrize("window", [1, 5, 16, 64, 333])
def test_windows_tiling_a_shard_count_its_text_exactly(tmp_path, window, margin):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(LINES).encode("utf-8"))
    options = SourceOptions()
    (shard,) = expand([str(path)], options)
    exact = {"tokens": 0, "words": 0, "bytes": 0, "chars": 0, "records": 0}
    valid = 0
    for item in read_shard(shard, options):
        if isinstance(item, Record):
            valid += 1
            for name, value in figures([type("P", (), {"is_whole": True, "whole": item})()]).items():
                exact[name] += value
    assert valid == 6
    for shift in (0, window // 2):
        got = dict.fromkeys(exact, 0)
        with open(path, "rb") as f:
            for start in range(-shift, shard.size, window):
                pieces, _ = window_pieces(f, shard, options, max(start, 0), min(start + window, shard.size), margin)
                for name, value in figures(pieces).items():
                    got[name] += value
        # records: a line longer than the window counts where it starts, rejected or not
        assert {k: v for k, v in got.items() if k != "records"} == {k: v for k, v in exact.items() if k != "records"}

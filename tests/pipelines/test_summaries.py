"""pipelines/statistics/summaries.py: the coder of a Summary (pickled, its size estimated without a
pickle) and the tokenize pipeline's use of it."""
import json
import pickle

import apache_beam as beam
import pytest

from bpe_ops import Tokenizer
from bpe_ops.stats import Summary, single_byte_ids
from pipelines import tokenize
from pipelines.statistics.summaries import SummaryCoder
from tests.conftest import read_jsonl_texts


@pytest.fixture(scope="module")
def gpt2(gpt2_files):
    return Tokenizer.from_gpt2_files(*gpt2_files)


def summary_of(texts, tok) -> Summary:
    summary = Summary(tok.vocab_size, raw_byte_ids=single_byte_ids(tok.vocab))
    for k, text in enumerate(texts):
        summary.add_text(text, tok.encode(text), record_id=f"r{k}")
    return summary


def test_the_coder_round_trips_a_summary_and_estimates_its_size_near_its_pickle(corpora, gpt2):
    assert isinstance(beam.coders.registry.get_coder(Summary), SummaryCoder)
    coder = SummaryCoder()
    for texts in (read_jsonl_texts(corpora / "tiny"), read_jsonl_texts(corpora / "tiny")[:3]):
        summary = summary_of(texts, gpt2)
        encoded = coder.encode(summary)
        assert pickle.dumps(coder.decode(encoded)) == pickle.dumps(summary)
        assert 0.5 <= coder.estimate_size(summary) / len(encoded) <= 2


@pytest.mark.slow
def test_tokenize_pickles_no_shard_summary_to_measure_it(corpora, gpt2, tmp_path, monkeypatch):
    # Beam samples the size of the first ten elements of each output of a step (then fewer): with a
    # pickle as the measure, each of 20 shards' summaries was pickled twice (the step's output and
    # the combine's keyed input). Only the bundle's combined summary is pickled now, on its way.
    texts = read_jsonl_texts(corpora / "tiny")
    inputs = tmp_path / "in"
    inputs.mkdir()
    for shard in range(20):
        lines = [json.dumps({"text": t}) for t in texts[shard::20]]
        (inputs / f"s{shard:02d}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    pickles = []
    original = Summary.__getstate__
    monkeypatch.setattr(Summary, "__getstate__", lambda self: pickles.append(1) or original(self))
    stats = tokenize.run(["--tokenizer", gpt2.save(str(tmp_path / "tok")), "--input", str(inputs / "*.jsonl"),
                          "--output", str(tmp_path / "out"), "--quiet"])
    assert stats["records"] == len(texts) and len(stats["shards"]["names"]) == 20
    assert 0 < len(pickles) < 10

"""The canonical tokenizer.json's vocab and merges sections: the compiled writer against its
specification (bpe_ops/json_sections.py) and against json.loads."""
import json
import random

import pytest

from bpe_ops import Tokenizer, formats, json_sections
from bpe_ops.pretokenize import token_to_unicode

compiled = pytest.mark.skipif(json_sections._byte_level_sections is None, reason="bpe_ops._native is not built")

PAD, END = "      ", "\n    "


def both(tokens, ids, left, right, pad=PAD, end=END):
    written = json_sections._byte_level_sections(tokens, ids, left, right, json_sections.byte_alphabet(), pad, end)
    return written, json_sections.byte_level_sections_python(tokens, ids, left, right, pad, end)


def random_table(rng, n_tokens, n_merges, start=0):
    tokens = {start + i: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9))) for i in range(n_tokens)}
    keys = list(tokens)
    left = [rng.choice(keys) for _ in range(n_merges)]
    right = [rng.choice(keys) for _ in range(n_merges)]
    return tokens, keys, left, right


@compiled
@pytest.mark.parametrize("seed", range(20))
def test_compiled_equals_specification_on_random_tables(seed):
    rng = random.Random(seed)
    tokens, ids, left, right = random_table(rng, rng.randrange(0, 300), rng.randrange(0, 300), rng.randrange(0, 50))
    ids = sorted(rng.sample(ids, len(ids) // 2)) if seed % 2 else ids    # some listed, all named by merges
    written, spec = both(tokens, ids, left, right)
    assert written == spec


@compiled
def test_every_byte_is_spelled_and_quoted_as_json_dumps_does():
    tokens = {b: bytes([b]) for b in range(256)}
    tokens[256] = bytes(range(256))
    vocab, merges = both(tokens, list(tokens), [256], [0])[0]
    read = json.loads(vocab)
    assert read == {token_to_unicode(t): i for i, t in tokens.items()}
    assert json.loads(merges) == [[token_to_unicode(bytes(range(256))), token_to_unicode(b"\0")]]
    assert '\\"' in vocab and "\\\\" in vocab          # the two characters of the alphabet JSON escapes


@compiled
def test_empty_sections():
    assert both({}, [], [], []) == (("{}", "[]"), ("{}", "[]"))
    assert both({0: b"a"}, [0], [], [])[0] == ("{\n" + PAD + '"a": 0' + END + "}", "[]")


@compiled
def test_sparse_ids_are_written_by_the_specification():
    tokens = {0: b"a", 1: b"b", 10**9: b"ab"}
    assert json_sections._byte_level_sections(tokens, [0, 1, 10**9], [0], [1], json_sections.byte_alphabet(),
                                              PAD, END) is None
    assert json_sections.byte_level_sections(tokens, [0, 1, 10**9], [0], [1], PAD, END) == \
        json_sections.byte_level_sections_python(tokens, [0, 1, 10**9], [0], [1], PAD, END)


@compiled
def test_a_merge_of_an_unknown_id_raises_as_the_specification_does():
    with pytest.raises(KeyError):
        json_sections._byte_level_sections({0: b"a"}, [0], [0], [7], json_sections.byte_alphabet(), PAD, END)
    with pytest.raises(KeyError):
        json_sections.byte_level_sections_python({0: b"a"}, [0], [0], [7], PAD, END)


@compiled
def test_a_token_that_is_not_bytes_is_refused():
    with pytest.raises(TypeError):
        json_sections._byte_level_sections({0: "a"}, [0], [], [], json_sections.byte_alphabet(), PAD, END)


def test_the_canonical_file_reads_back_as_the_tokenizer():
    """The whole text through formats: json.loads finds every ordinary token and merge, and none of
    the special tokens (listed with the added tokens instead)."""
    tok = Tokenizer([(b"a", b"b"), (b"ab", b'"'), (b"\\", b"\n")], special_tokens=["<|end|>"])
    doc = json.loads(formats.tokenizer_json_text(tok))
    model = doc["model"]
    assert model["vocab"] == {token_to_unicode(t): i for i, t in tok._tokens.items()
                              if i not in tok.special_tokens.values()}
    assert model["merges"] == [[token_to_unicode(a), token_to_unicode(b)] for a, b in tok.merges]
    assert [t["content"] for t in doc["added_tokens"]] == ["<|end|>"]

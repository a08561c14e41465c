"""Shared test fixtures: where `../shared` (real corpora, oracle files) lives, and the in-repo sample.

Tests that only need real text, not oracle files or measured sizes, use `sample` (the repository's
`sample/` folder, two JSONL shards of public-domain English), so a fresh clone runs them. Tests that
need `../shared` skip with a clear reason when it is missing, unless
`TOKENBEAM_REQUIRE_SHARED=1` (set by `.ci/run`), under which a missing `../shared` fails them.
"""
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TOKENBEAM_SHARED", ROOT.parent / "shared"))


def _need(path: Path) -> Path:
    if path.exists():
        return path
    msg = f"{path} is missing (tests read real corpora and oracle files from ../shared)"
    if os.environ.get("TOKENBEAM_REQUIRE_SHARED") == "1":
        pytest.fail(msg + " and TOKENBEAM_REQUIRE_SHARED=1")
    pytest.skip(msg)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return _need(SHARED)


@pytest.fixture(scope="session")
def corpora(shared_dir) -> Path:
    return _need(shared_dir / "corpora")


@pytest.fixture(scope="session")
def sample() -> Path:
    """The repository's `sample/` folder: sample-000-of-002.jsonl and sample-001-of-002.jsonl (`id`,
    `source`, `text`; King James Bible, Jargon File, Devil's Dictionary; ~320 KB). Always there."""
    folder = ROOT / "sample"
    assert sorted(p.name for p in folder.glob("*.jsonl")) == ["sample-000-of-002.jsonl", "sample-001-of-002.jsonl"]
    return folder


@pytest.fixture(scope="session")
def gpt2_files(shared_dir) -> tuple[Path, Path]:
    d = _need(shared_dir / "oracles" / "gpt2")
    return d / "gpt2_vocab.json", d / "gpt2_merges.txt"


@pytest.fixture(scope="session")
def trained_tokenizer(tmp_path_factory, sample, corpora_if_needed):
    """A function giving the folder of a tokenizer trained by the real `train` pipeline, once per run
    for each set of arguments: `trained_tokenizer("sample", 300)` or `trained_tokenizer("tiny", 1000,
    "--special-token", "<|endoftext|>")`. The corpus is the in-repo `sample/` or a folder of
    ../shared/corpora. Tests must not write into the folder it returns."""
    from pipelines import train

    made: dict[tuple, Path] = {}

    def trained(corpus: str, vocab_size: int, *options: str) -> Path:
        key = (corpus, vocab_size, *options)
        if key not in made:
            folder = sample if corpus == "sample" else corpora_if_needed() / corpus
            out = tmp_path_factory.mktemp(f"tok-{corpus}-{vocab_size}")
            train.run(["--input", str(folder / "*.jsonl"), "--output", str(out), "--vocab-size", str(vocab_size),
                       "--quiet", *options])
            made[key] = out
        return made[key]

    return trained


@pytest.fixture(scope="session")
def corpora_if_needed():
    """../shared/corpora, asked for only when a test needs it (a fixture that may not need it)."""
    return lambda: _need(SHARED / "corpora")


def pytest_collection_modifyitems(items):
    """Everything under tests/system/ is a system test, and slow."""
    system = Path(__file__).resolve().parent / "system"
    for item in items:
        if system in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.system)
            item.add_marker(pytest.mark.slow)


def read_jsonl_texts(folder: Path, limit: int | None = None) -> list[str]:
    """The `text` field of every record of every `*.jsonl` shard in `folder`, in shard order."""
    texts = []
    for shard in sorted(folder.glob("*.jsonl")):
        with open(shard, encoding="utf-8") as f:
            for line in f:
                texts.append(json.loads(line)["text"])
                if limit is not None and len(texts) >= limit:
                    return texts
    return texts


@pytest.fixture(autouse=True)
def loud_by_default(monkeypatch):
    """Each test starts without `--quiet` in the environment: a command run in-process with --quiet
    sets it (for the processes it starts), and it would otherwise silence every later test's commands."""
    from pipelines.core.errors import QUIET_VARIABLE

    monkeypatch.delenv(QUIET_VARIABLE, raising=False)


@pytest.fixture(scope="session")
def native():
    """`bpe_ops._native`: a failure where a C compiler could have built it, else a skip."""
    import shutil
    import sysconfig

    try:
        from bpe_ops import _native
    except ImportError:
        _native = None
    if _native is None:
        msg = "bpe_ops._native is not built (python setup.py build_ext --inplace)"
        if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]):
            pytest.fail(msg)
        pytest.skip(msg + " and there is no C compiler")
    return _native

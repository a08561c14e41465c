"""The packages a tokenbeam process hides from itself (pipelines.core.hidden_packages)."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.core import hidden_packages

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def finder(monkeypatch, tmp_path):
    """A fresh finder and meta path, and an installed package `present` with a submodule."""
    monkeypatch.setattr(hidden_packages, "FINDER", hidden_packages.HiddenPackages())
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    (tmp_path / "present").mkdir()
    (tmp_path / "present" / "__init__.py").write_text("")
    (tmp_path / "present" / "sub.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("present", "present.sub"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return hidden_packages.FINDER


def test_a_hidden_package_and_its_submodules_cannot_be_imported(finder):
    hidden_packages.hide(["present"])
    with pytest.raises(ModuleNotFoundError, match="'present'"):
        importlib.import_module("present")
    with pytest.raises(ModuleNotFoundError, match="'present'"):      # its package first
        importlib.import_module("present.sub")
    assert "present" not in sys.modules


def test_a_package_already_imported_stays(finder):
    import present
    hidden_packages.hide(["present"])
    importlib.import_module("present.sub")       # nor is a submodule of it
    assert sys.modules["present"] is present and finder.names == set()


def test_hiding_twice_places_one_finder(finder):
    hidden_packages.hide(["a"])
    hidden_packages.hide(["b"])
    assert sys.meta_path.count(finder) == 1 and sys.meta_path[0] is finder and finder.names == {"a", "b"}


@pytest.mark.slow
@pytest.mark.parametrize("hidden,steps", [
    (hidden_packages.UNUSED, "pipelines.steps.tokenize_shard"),                       # the console's
    (hidden_packages.UNUSED + hidden_packages.REMOTE_ONLY, "pipelines.steps.train_count"),  # counting, local
])
def test_the_steps_beam_and_arrow_run_with_those_packages_hidden(hidden, steps):
    """A command's steps import, Beam runs a pipeline of labelled transforms, Arrow's `pa.array`
    works, none of the hidden packages is loaded, and Beam prints nothing."""
    code = ("import json, sys\n"
            "from pipelines.core import hidden_packages\n"
            f"hidden_packages.hide({hidden!r})\n"
            f"import pyarrow as pa, {steps}\n"
            "from pipelines.core.beam_options import beam\n"
            "from apache_beam.runners.portability.fn_api_runner import FnApiRunner\n"
            "assert pa.array([1, 2]).to_pylist() == [1, 2]\n"
            "with beam.Pipeline(runner=FnApiRunner()) as p:\n"
            "    p | 'Create' >> beam.Create([1, 2]) | 'Sum' >> beam.CombineGlobally(sum)\n"
            "print(json.dumps(sorted(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    said, = result.stdout.splitlines()
    assert result.stderr == ""                 # Beam said nothing (it logs a warning without pymongo)
    loaded = {m.split(".")[0] for m in json.loads(said)}
    assert not loaded & set(hidden)


@pytest.mark.parametrize("argv,local", [
    (["tokenize", "--input", "data/*.jsonl", "--output", "out"], True),
    (["tokenize", "--input", "s3://bucket/*.jsonl", "--output", "out"], False),
    (["tokenize", "--input", "a.jsonl", "--output", "gs://bucket/out"], False),
    (["train", "a.jsonl", "--output", "out", "--temp_location=gs://bucket/tmp"], False),
    (["tokenize", "--input", "a.jsonl", "--output", "out", "--runner", "DirectRunner"], False),
    (["tokenize", "--input", "a.jsonl", "--output", "out", "--runner=PortableRunner"], False),
])
def test_the_console_hides_the_remote_connectors_only_for_a_local_command_line(argv, local):
    code = ("import json, sys\n"
            "from pipelines import cli\n"
            "from pipelines.core import hidden_packages\n"
            "cli.main = lambda: print(json.dumps(sorted(hidden_packages.FINDER.names))) or 0\n"
            f"sys.argv = ['tokenbeam', *{argv!r}]\n"
            "cli.console()\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    hidden = set(json.loads(result.stdout))
    assert hidden == set(hidden_packages.UNUSED) | (set(hidden_packages.REMOTE_ONLY) if local else set())

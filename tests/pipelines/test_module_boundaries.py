"""Which modules the drift and summary rooms pull in: the statistics stay pure, and tokenize runs
`--baseline` and its summaries through libraries, never through another command's module."""
import json
import subprocess
import sys

from tests.conftest import ROOT
from tests.test_import_graph import COMMANDS, imported_by


def modules_loaded_by(module: str) -> set[str]:
    """The modules a fresh interpreter holds after importing `module` alone."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_drift_statistics_import_neither_beam_nor_fsspec_nor_pipelines():
    loaded = modules_loaded_by("bpe_ops.drift_stats")
    assert not {m for m in loaded if m.split(".")[0] in ("apache_beam", "fsspec", "pipelines", "pyarrow")}


def test_tokenize_imports_no_command_module_even_inside_a_function():
    assert imported_by("pipelines.tokenize") & (COMMANDS | {"pipelines.cli"}) == set()


def test_tokenize_judges_and_summarises_through_the_libraries():
    libraries = {"pipelines.monitoring.drift_judging", "pipelines.monitoring.drift_reports", "pipelines.statistics.summaries", "pipelines.statistics.breakdowns"}
    assert libraries <= modules_loaded_by("pipelines.tokenize")

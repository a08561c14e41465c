"""train's counting process (pipelines/count_process.py): which packages it hides from Beam, and when."""
import json
import subprocess
import sys

import pytest

from pipelines.core.hidden_packages import REMOTE_ONLY, UNUSED
from pipelines.count_process import runs_here_on_local_files
from tests.conftest import ROOT


def job(inputs, output="out", rest=()):
    return {"args": {"input": inputs, "output": output}, "rest": list(rest)}


@pytest.mark.parametrize("spec, local", [
    (job(["a/*.jsonl"]), True),
    (job(None, rest=["b.jsonl", "--direct_running_mode", "multi_processing"]), True),
    (job(["s3://bucket/*.jsonl"]), False),
    (job(["a.jsonl"], output="gs://bucket/run"), False),
    (job(["a.jsonl"], rest=["--temp_location=gs://bucket/tmp"]), False),
    (job(["a.jsonl"], rest=["--runner", "DirectRunner"]), False),
    (job(["a.jsonl"], rest=["--runner=PortableRunner", "--job_endpoint", "localhost:8099"]), False),
])
def test_connector_packages_are_hidden_only_on_the_local_runner_with_local_paths(spec, local):
    assert runs_here_on_local_files(spec) is local


@pytest.mark.slow
def test_beam_and_the_counting_steps_import_and_run_with_those_packages_hidden():
    hidden = UNUSED + REMOTE_ONLY
    code = (f"import json, sys\nfrom pipelines.core import hidden_packages\nhidden_packages.hide({hidden!r})\n"
            "import pipelines.steps.train_count, apache_beam as beam\n"
            "from apache_beam.runners.portability.fn_api_runner import FnApiRunner\n"
            "with beam.Pipeline(runner=FnApiRunner()) as p:\n"
            "    p | beam.Create([1, 2]) | beam.CombineGlobally(sum)\n"
            "print(json.dumps(sorted(m for m in sys.modules if sys.modules[m] is not None)))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    said, = result.stdout.splitlines()         # Beam printed nothing (it does without pymongo)
    loaded = {m.split(".")[0] for m in json.loads(said)}
    assert not loaded & set(hidden)

"""train's counting process (pipelines/count_process.py): which packages it hides from Beam, and when."""

import pytest

from pipelines.count_process import runs_here_on_local_files


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

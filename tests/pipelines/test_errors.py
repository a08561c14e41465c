"""pipelines/core/errors.py: a pipeline's failure read as the user's one line, whatever Beam wrapped it in."""
import threading

import pytest

from pipelines.core.errors import IncompleteRun, interrupted, pipeline_failures


def looped(message: str) -> RuntimeError:
    """A RuntimeError whose context is an error whose context is the RuntimeError again: the chain a
    worker killed under the multi-process runner leaves (Beam's RuntimeError and gRPC's error)."""
    outer, inner = RuntimeError(message), ConnectionError("Socket closed")
    outer.__context__, inner.__context__ = inner, outer
    return outer


def answer_within(seconds: float, question, *args):
    """question(*args), asked on a thread: a walk that goes round the loop fails the test rather than
    hanging it (the thread spins on, a daemon)."""
    answers = []
    asking = threading.Thread(target=lambda: answers.append(question(*args)), daemon=True)
    asking.start()
    asking.join(seconds)
    assert answers, f"{question.__name__} gave no answer in {seconds} s"
    return answers[0]


def test_a_chain_of_exceptions_that_loops_is_walked_once():
    assert answer_within(10, interrupted, looped("Worker subprocess exited with return code 137")) is False
    # A Ctrl-C anywhere along a chain that loops is still found.
    outer = looped("boom")
    outer.__context__.__cause__ = KeyboardInterrupt()
    assert interrupted(outer) is True


def test_a_dead_worker_whose_error_loops_is_one_line_not_a_hang(tmp_path):
    with pytest.raises(IncompleteRun, match="a Beam worker process died during the run"):
        with pipeline_failures(str(tmp_path)):
            raise looped("Channel closed prematurely")


def test_a_ctrl_c_that_beam_rewrapped_is_an_interrupt():
    error = RuntimeError("KeyboardInterrupt [while running 'TokenizeShard']")
    assert interrupted(error) is True
    with pytest.raises(KeyboardInterrupt):
        with pipeline_failures("out"):
            raise error

"""The worked examples in bpe_ops/drift_stats.py's docstrings run and give what they show."""
import doctest

from bpe_ops import drift_stats


def test_every_worked_example_of_the_drift_statistics_holds():
    result = doctest.testmod(drift_stats, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted >= 30


def test_every_public_function_and_class_of_the_drift_statistics_shows_a_worked_example():
    finder = doctest.DocTestFinder()
    public = [name for name, value in vars(drift_stats).items() if not name.startswith("_") and callable(value)
              and getattr(value, "__module__", None) == drift_stats.__name__]
    without = [name for name in public if not any(t.examples for t in finder.find(getattr(drift_stats, name), name))]
    assert public and without == []

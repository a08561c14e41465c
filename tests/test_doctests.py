"""Every module's docstring examples (bpe_ops, schemas, pipelines) run and give what they show."""
import doctest
import importlib
import pkgutil

import pytest

import bpe_ops
import pipelines
import schemas

MODULES = sorted(info.name for package in (bpe_ops, schemas, pipelines)
                 for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.") if not info.ispkg)


def test_every_module_is_listed():
    assert {"bpe_ops.encoder", "bpe_ops.merging", "bpe_ops.load", "bpe_ops._educational", "schemas.stats",
            "pipelines.statistics.windows", "pipelines.datasets.watch"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (output above)"

"""The worked `>>>` examples in the module docstrings are tests too."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("module", ["advantage", "loss", "config", "reward", "reward_dapo", "benchmarks", "math_parse",
                                    "math_values", "math_equal", "verifier_pool", "rollout", "data", "logger",
                                    "policy"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0

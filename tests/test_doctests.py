"""The worked `>>>` examples in the module docstrings are tests too: every module of the project's,
at the root and in its packages."""

import doctest
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODULES = sorted([p.stem for p in REPO.glob("*.py")]
                 + [f"{p.parent.name}.{p.stem}" for p in REPO.glob("*/*.py")
                    if (p.parent / "__init__.py").exists() and p.stem != "__init__"])


def test_the_packages_are_found():
    assert {"reward", "advantage", "verifier.parse", "verifier.pool"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0

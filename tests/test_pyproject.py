"""The package's metadata builds as today's setuptools wants it, without deprecation warnings."""

from __future__ import annotations

import re
from pathlib import Path

PYPROJECT = (Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8")


def test_the_licence_is_an_spdx_expression_with_a_backend_that_reads_it() -> None:
    # The table form (`{ text = "MIT" }`) warns in setuptools 77+ and stops building in 2027;
    # the string form needs 77 (PEP 639).
    assert re.search(r'^license = "MIT"$', PYPROJECT, re.M)
    assert re.search(r'^requires = \["setuptools>=77,<\d+"\]$', PYPROJECT, re.M)

"""Fixtures of the evaluator tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def reference_cache(tmp_path_factory) -> str:
    """A reference-timing cache of the test session's own (the user's cache stays untouched)."""
    return str(tmp_path_factory.mktemp("reference-cache"))

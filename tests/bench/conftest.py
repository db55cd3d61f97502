"""Fixtures of the bench tests: the toy backend of the core tests."""

from core.conftest import toy_plugin, toy_problem  # noqa: F401  (fixtures)

"""Fixtures of the MAP-Elites tests: synthetic runs from ``run_builders``."""

from run_builders import make_run, source  # noqa: F401  (fixtures)

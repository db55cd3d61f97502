"""The local Ray cluster the tests of this directory start, and where its actors find the test plugins."""

from __future__ import annotations

import logging
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What actors load (KSMITH_PLUGIN_MODULES): the toy backend and the crashy one.
ACTOR_PLUGINS = "tests.core.toy:PLUGIN,tests.on_ray.crashy:PLUGIN"


def start_cluster(ray) -> None:
    """A fresh local cluster of 2 CPUs, no dashboard; its workers import this repository's test plugins."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level=logging.WARNING,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "KSMITH_PLUGIN_MODULES": ACTOR_PLUGINS}},
    )

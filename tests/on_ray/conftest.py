"""A real local Ray cluster for the tests of this directory: two CPUs, no dashboard, one per test module.

This directory is not named ``ray``: pytest puts ``tests/`` on ``sys.path``, and a ``tests/ray`` folder would then
import as a namespace package ``ray`` wherever the real one is not installed. Its helpers are imported as ``tests.on_ray.cluster`` and
``tests.on_ray.crashy``.

Actors are Ray worker processes: they find the test plugins through ``KSMITH_PLUGIN_MODULES`` and this
repository through ``PYTHONPATH``, both set in the cluster's job-level runtime environment. The driver (the
test process) registers the same plugins in its own plugin manager.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # `tests.on_ray.crashy` also under the bare `pytest` script

from ksmith_core.plugins import get_plugin_manager  # noqa: E402
from tests.core.toy import ToyPlugin  # noqa: E402
from tests.on_ray import crashy  # noqa: E402
from tests.on_ray.cluster import start_cluster  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster():
    """``ray``, initialised on a fresh local cluster of 2 CPUs; shut down after the module."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'kernel-smith[ray]')")
    if ray.is_initialized():
        ray.shutdown()
    start_cluster(ray)
    try:
        yield ray
    finally:
        ray.shutdown()  # the executor's pool notices: the next connection gets a new one


@pytest.fixture
def test_plugins():
    """The toy backend (every third proposal incorrect) and the crashy backend and proposer, in the driver."""
    toy = ToyPlugin(fail_every=3)
    crashy.PLUGIN.extras.clear()
    pm = get_plugin_manager()
    pm.register(toy, name="toy")
    pm.register(crashy.PLUGIN, name="crashy")
    try:
        yield toy, crashy.PLUGIN
    finally:
        pm.unregister(name="toy")
        pm.unregister(name="crashy")
        crashy.PLUGIN.extras.clear()

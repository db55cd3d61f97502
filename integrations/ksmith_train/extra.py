"""The ``train`` extra is optional: its packages are imported only when a command needs them."""

from __future__ import annotations

import importlib
from types import ModuleType

from ksmith_core.errors import KsmithError

INSTALL = "pip install 'kernel-smith[train]'"


class MissingExtra(KsmithError):
    """A training command was run without the ``train`` extra installed."""


def need(module: str, what: str = "this command") -> ModuleType:
    """Import ``module`` or raise a one-line error saying how to install the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(f"{what} needs the '{module.split('.')[0]}' package: {INSTALL}") from exc

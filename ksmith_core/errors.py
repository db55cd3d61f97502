"""Errors a user can act on.

Library code raises these; the CLI turns each into one line on stderr and exit code 2. Anything else that
escapes is a bug in ksmith, not bad input.
"""

from __future__ import annotations


class KsmithError(Exception):
    """Base class: the message is written for the person at the terminal."""


class ProblemError(KsmithError):
    """A problem file is missing, unreadable, or not in KernelBench format."""


class CandidateError(KsmithError):
    """A candidate file is missing, unreadable, or defines no ``ModelNew``."""


class PluginError(KsmithError):
    """A plugin was named that is not installed, or no plugin can serve the request."""


class RunStoreError(KsmithError):
    """A run directory is missing, damaged, or already being written by another driver."""


class ConfigError(KsmithError):
    """An option value that cannot work (negative budget, unknown device, ...)."""


class ProposerError(KsmithError):
    """A proposer cannot work at all (server unreachable, missing extra), as opposed to one bad proposal."""


class BackendUnavailable(KsmithError):
    """A backend cannot run on this machine: no GPU, or a compiler or build tool it needs is missing."""

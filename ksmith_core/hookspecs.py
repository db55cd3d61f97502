"""Hook specifications: the contract between ksmith's core and its plugins.

Every built-in capability is a plugin, registered through the entry-point group ``kernelsmith`` exactly as a
third-party package would be. There are two sorts of hook:

* **Registration hooks** (``ksmith_register_<kind>s(register)``) fill the one registry of named capabilities
  (:mod:`ksmith_core.registry`). A plugin calls ``register`` with capability objects
  (:mod:`ksmith_core.capabilities`) that carry their implementation; the core looks a capability up by name
  and calls it. That is how proposing, selecting, evaluating, seeding and exporting are plugged in: no
  plugin ever checks whether it is the one the user asked for.
* **Broadcast hooks** are called in every plugin that implements them: ``ksmith_archive`` after each
  evaluation, the run lifecycle, report sections and command-line commands.

A plugin module marks its implementations with :data:`hookimpl`::

    from ksmith_core import Exporter, hookimpl

    @hookimpl
    def ksmith_register_exporters(register):
        register(Exporter("my-json", write_json, "One JSON file per kernel"))

Implementations may accept fewer arguments than the spec lists (pluggy's opt-in arguments), so new arguments
can be added to a hook without breaking existing plugins. ``run`` arguments are :class:`ksmith_core.run.Run`
objects: the problem, the resolved configuration, the population evaluated so far, a seeded random generator
and a per-plugin state dictionary. Plugins read from the run; only the driver writes to the run store.

``docs/hooks.md`` is generated from this module and :mod:`ksmith_core.capabilities`
(``python -m ksmith_core.hookdoc``); ``tests/core/test_hooks.py`` fails when the two differ or a hook has no
test of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from collections.abc import Callable

    import click

    from ksmith_core.capabilities import (
        Backend,
        Executor,
        Exporter,
        Platform,
        ProblemSuite,
        Proposer,
        SeedMethod,
        Selector,
    )
    from ksmith_core.model import Candidate, ReportSection, Verdict
    from ksmith_core.run import Run
    from ksmith_core.store import RunStore

PROJECT = "kernelsmith"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# ---------------------------------------------------------------------------------------------------------------
# Registration: called whenever the registry is built (the first time a command needs a capability)
# ---------------------------------------------------------------------------------------------------------------


@hookspec
def ksmith_register_proposers(register: Callable[[Proposer], None]) -> None:
    """Register :class:`~ksmith_core.capabilities.Proposer` objects (``--proposer NAME``)."""


@hookspec
def ksmith_register_selectors(register: Callable[[Selector], None]) -> None:
    """Register :class:`~ksmith_core.capabilities.Selector` objects (``--select NAME``; one may be the default)."""


@hookspec
def ksmith_register_backends(register: Callable[[Backend], None]) -> None:
    """Register :class:`~ksmith_core.capabilities.Backend` objects, named as problems name them in
    ``KSMITH_BACKEND`` (``"triton"`` when a problem names none)."""


@hookspec
def ksmith_register_seed_methods(register: Callable[[SeedMethod], None]) -> None:
    """Register :class:`~ksmith_core.capabilities.SeedMethod` objects (``ksmith seed --from NAME``)."""


@hookspec
def ksmith_register_exporters(register: Callable[[Exporter], None]) -> None:
    """Register :class:`~ksmith_core.capabilities.Exporter` objects (``ksmith export --target NAME``)."""


@hookspec
def ksmith_register_executors(register: Callable[[Executor], None]) -> None:
    """Register :class:`~ksmith_core.capabilities.Executor` objects: how evaluations are dispatched."""


@hookspec
def ksmith_register_platforms(register: Callable[[Platform], None]) -> None:
    """Register :class:`~ksmith_core.capabilities.Platform` objects: kinds of accelerator and their facts."""


@hookspec
def ksmith_register_problem_suites(register: Callable[[ProblemSuite], None]) -> None:
    """Register :class:`~ksmith_core.capabilities.ProblemSuite` objects: directories of problems usable by
    name (``ksmith evolve softmax``) and listed by ``ksmith problems``."""


@hookspec
def ksmith_register_commands(cli: click.Group) -> None:
    """Add commands to the ``ksmith`` command line (``@cli.command()`` inside the hook).

    Called once when the command line starts, before arguments are parsed. ``ksmith bench`` and
    ``ksmith report`` are added this way by their plugins.
    """


# ---------------------------------------------------------------------------------------------------------------
# Broadcast: every implementation is called
# ---------------------------------------------------------------------------------------------------------------


@hookspec
def ksmith_archive(run: Run, candidate: Candidate, verdict: Verdict) -> list[dict[str, Any]] | None:
    """Observe one finished evaluation: update archives, emit trajectory rows.

    Called by the engine after every evaluation, in every implementation. Plugins update their own state in
    ``run.state(<plugin name>)`` and may return a list of JSON-serialisable records; the driver stores each
    as an event (kind ``record["kind"]``) in the same transaction as the verdict, so plugins never write to
    the run store themselves. Also replayed on ``--resume`` for every stored evaluation with
    ``run.replaying`` set, so in-memory archives are rebuilt; records returned while replaying are dropped.
    """


@hookspec
def ksmith_run_start(run: Run) -> None:
    """A run is starting (or resuming: ``run.resumed`` is true). Every implementation is called."""


@hookspec
def ksmith_new_best(run: Run, candidate: Candidate, verdict: Verdict) -> None:
    """A candidate beat the run's best accepted candidate. Every implementation is called."""


@hookspec
def ksmith_run_end(run: Run, reason: str) -> None:
    """A run stopped: ``reason`` is ``"budget"``, ``"gpu_minutes"``, ``"patience"``, ``"near_roofline"`` or
    ``"exhausted"``."""


@hookspec
def ksmith_report_sections(store: RunStore) -> list[ReportSection] | None:
    """Sections a plugin adds to ``ksmith report``, read from the run's stored events.

    Called once per report with the run's store (read-only). Return
    :class:`~ksmith_core.model.ReportSection` objects (a title and self-contained HTML); sections are
    ordered by their ``order`` and then by title. The MAP-Elites plugin draws its archive map this way.
    """

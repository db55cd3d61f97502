"""Named capabilities: what a plugin registers, and what the core calls by name.

A capability is a small frozen dataclass holding its name, a one-line description and the callable that does
the work. A plugin registers instances through the matching registration hook (``ksmith_register_proposers``
for a :class:`Proposer`, ...); the core looks one up by name in :mod:`ksmith_core.registry` and calls it. A
plugin never checks which name the user asked for: it is only ever called for its own.

::

    from ksmith_core import Proposer, hookimpl

    def propose(run, selection):
        ...  # one targeted edit per parent -> list[Proposal]

    @hookimpl
    def ksmith_register_proposers(register):
        register(Proposer("greedy-llm", propose, "Asks my model for one change at a time"))

Each kind's callable, its arguments and what its result means are documented on the class; ``docs/hooks.md``
is generated from these docstrings and the hook specifications.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ksmith_core.model import Artifact, Candidate, EvalOptions, Problem, Proposal, Selection, Verdict
    from ksmith_core.run import Run


@dataclass(frozen=True)
class Proposer:
    """Makes new candidate sources from selected parents: one targeted edit each.

    ``propose(run, selection) -> list[Proposal]`` is called by the engine once per step with the
    :class:`~ksmith_core.model.Selection` the run's selector made (each parent carries its verdict and
    feedback text). An empty list means "nothing new this step"; the engine stops the run as exhausted after
    several such steps. Raise :class:`~ksmith_core.errors.ProposerError` only when the proposer cannot work
    at all (its server is unreachable); one bad generation should simply yield fewer proposals.

    Say why a generation came to nothing with ``run.note_dropped(reason, detail="")``: ``reason`` a short
    stable snake_case label (``"no_edit_block"``, ``"edit_not_applied"``, ``"all_edits_tried"``), which
    summaries print as its words with a count; ``detail`` what exactly went wrong, kept with the event. It is
    thread-safe and only counts and queues: the engine commits each step's drops as ``dropped`` events (with
    ``reason``, ``detail``, ``by``, ``proposer``, ``evaluations``) before the step's evaluations, and
    ``ksmith evolve``, ``ksmith show`` and the report explain the run's stop with them. The engine notes its
    own drops the same way (``duplicate``, ``near_duplicate``, ``over_budget``, ``no_selection``, and
    ``no_proposal`` for a step where the proposer returned nothing and noted nothing).

    ``cli_options`` are click options this proposer adds to ``ksmith evolve`` and ``ksmith bench``;
    ``options_from_cli(values)`` turns their parsed values (a dict keyed by parameter name) into the run's
    ``proposer_options``, which are stored with the run and must never hold secrets. ``default=True`` makes
    this the proposer used when the user names none.
    """

    name: str
    propose: Callable[[Run, Selection], list[Proposal]]
    description: str = ""
    cli_options: tuple[Any, ...] = ()
    options_from_cli: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    default: bool = False


@dataclass(frozen=True)
class Selector:
    """Chooses the parent(s) and inspirations the proposer sees next.

    ``select(run) -> Selection | None`` is called by the engine before every proposal step, once at least
    one evaluation exists. ``None`` (or a selection with no parents) ends the run as exhausted. A selection's
    ``mode`` is ``"improve"`` when its parents work and ``"fix"`` when a broken candidate is handed back
    with its error for repair. ``default=True`` makes this the selector used when the user names none
    (``--select``); exactly one installed selector should claim it.
    """

    name: str
    select: Callable[[Run], Selection | None]
    description: str = ""
    default: bool = False


@dataclass(frozen=True)
class Backend:
    """Judges candidates for problems whose ``KSMITH_BACKEND`` is this name: compiles? correct? how fast?

    ``evaluate(problem, candidate, options) -> Verdict`` is called by the executor for every new candidate
    and by ``ksmith eval``. It must never raise for anything the candidate did: a crash, hang or cheat
    becomes a :class:`~ksmith_core.model.Verdict` with the matching status and ``reasons``; it raises
    :class:`~ksmith_core.errors.ProblemError` only when the *problem* cannot be evaluated. It may be called
    from several threads at once, so implementations serialise their own timing. ``language`` is what its
    candidates are written in, read by proposers: ``"triton"`` or ``"cuda"`` (C++ built with ``load_inline``).
    """

    name: str
    evaluate: Callable[[Problem, Candidate, EvalOptions], Verdict]
    description: str = ""
    language: str = "triton"


@dataclass(frozen=True)
class SeedMethod:
    """Writes a first candidate (``ModelNew``) for a problem that ships none.

    ``seed(problem, options) -> Proposal`` is called by ``ksmith seed PROBLEM --from NAME`` and by
    ``ksmith evolve --seed-from NAME``. ``options`` holds ``device`` (``"cuda"`` or ``"cpu"``), ``small``
    and ``method_options`` (what ``options_from_cli`` made of this method's own command-line options). Raise
    a :class:`~ksmith_core.errors.KsmithError` subclass with one clear line when no seed can be made (no
    GPU, an op handed to a library, an unreachable server).
    """

    name: str
    seed: Callable[[Problem, Mapping[str, Any]], Proposal]
    description: str = ""
    cli_options: tuple[Any, ...] = ()
    options_from_cli: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Exporter:
    """Turns a stored candidate into an artefact: a library entry, an upstream patch, a dataset.

    ``export(run, candidate, options) -> Artifact`` is called by ``ksmith export RUN --target NAME``.
    ``run`` is the :class:`~ksmith_core.store.RunStore` the candidate came from (read-only), or ``None``;
    ``options`` carries ``output`` (a path), ``problem`` and ``verdict``.
    """

    name: str
    export: Callable[[Any, Candidate, Mapping[str, Any]], Artifact]
    description: str = ""


@dataclass(frozen=True)
class EvalJob:
    """One evaluation an executor is asked to run."""

    problem: Problem
    candidate: Candidate
    options: EvalOptions


@dataclass(frozen=True)
class Executor:
    """Dispatches evaluations: where and how many at once (a local pool, a cluster).

    ``run(jobs, parallel, options) -> list[Verdict]`` is called by the engine once per step and by
    ``ksmith bench``; verdicts come back in the order of ``jobs``, each made by the job's backend
    (:func:`ksmith_core.engine.evaluate` does the lookup where the job runs). ``parallel`` is how many
    evaluations may be in flight at once; ``options`` are the run's ``executor_options`` (what
    ``options_from_cli`` made of this executor's ``cli_options``: a cluster address, say). The driver remains
    the only writer of the run store: an executor only returns verdicts.
    """

    name: str
    run: Callable[[Sequence[EvalJob], int, Mapping[str, Any]], list[Verdict]]
    description: str = ""
    default: bool = False
    cli_options: tuple[Any, ...] = ()
    options_from_cli: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Platform:
    """A kind of accelerator: how to detect it and the facts that differ between platforms.

    Both callables read a :class:`~ksmith_core.platform.PlatformSignals`, gathered from the machine once
    (:func:`ksmith_core.platform.gather_signals`), so a platform is tested by handing it made-up signals.

    ``detect(signals) -> int | None`` says how surely this machine is this platform: ``1`` when Triton's
    active driver names its backend, ``2`` from a vendor's version string, ``3`` from its toolchain or device
    files on disk, ``4`` from the device's name, ``None`` when nothing says so. The surest platform wins; a
    tie goes to the one registered first. ``facts(signals) -> PlatformFacts`` gives what backends, proposers
    and the roofline read (device name, warp size, ``num_warps`` and ``num_stages`` limits, shared memory,
    extra Triton launch options, datasheet peaks, the compiler for native sources); a plain mapping of those
    fields is accepted too. ``aliases`` are other names it answers to, such as its Triton backend's name
    (``ksmith doctor --backend maca``).
    """

    name: str
    detect: Callable[[Any], int | None]
    facts: Callable[[Any], Any] = field(default=lambda signals: {})
    description: str = ""
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProblemSuite:
    """A directory of KernelBench-format problems (``NAME.py``), each with an optional ``NAME.seed.py``.

    Problems of installed suites can be named instead of given as paths (``ksmith evolve softmax``).
    """

    name: str
    directory: Path
    description: str = ""


@dataclass(frozen=True)
class Kind:
    """One kind of capability: its class, the hook that registers it and the method the core calls."""

    name: str  # "proposer"
    plural: str  # "proposers"
    cls: type
    method: str  # the attribute holding the callable ("" for data-only kinds)

    @property
    def hook(self) -> str:
        return f"ksmith_register_{self.plural}"


KINDS: tuple[Kind, ...] = (
    Kind("proposer", "proposers", Proposer, "propose"),
    Kind("selector", "selectors", Selector, "select"),
    Kind("backend", "backends", Backend, "evaluate"),
    Kind("seed method", "seed_methods", SeedMethod, "seed"),
    Kind("exporter", "exporters", Exporter, "export"),
    Kind("executor", "executors", Executor, "run"),
    Kind("platform", "platforms", Platform, "detect"),
    Kind("problem suite", "problem_suites", ProblemSuite, ""),
)
KIND_OF: Mapping[type, Kind] = {kind.cls: kind for kind in KINDS}

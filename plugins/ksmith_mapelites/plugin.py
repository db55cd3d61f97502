"""MAP-Elites islands: the default selector of ``ksmith evolve``.

``ksmith_archive`` places every accepted candidate in its island's grid cell (see
:mod:`ksmith_mapelites.descriptors`) when it beats the cell's incumbent, seeds every island with the run's
first accepted candidate, counts fix attempts, and migrates island bests around the ring every
:data:`~ksmith_mapelites.archive.MIGRATION_INTERVAL` evaluations. It returns one ``archive`` record per
placement, which the report reads back to draw the archive map.

The ``mapelites`` selector is the default (``--select`` unset): islands take turns; within one, a parent is
sampled by normalised score and by 1 / (1 + children) (see :mod:`ksmith_mapelites.sampling`). The archive
map in ``ksmith report`` comes from :mod:`ksmith_mapelites.report`.
"""

from __future__ import annotations

from typing import Any

from ksmith_core import hookimpl
from ksmith_core.capabilities import Selector
from ksmith_core.model import Candidate, ReportSection, Selection, Verdict
from ksmith_core.run import Run
from ksmith_core.store import RunStore
from ksmith_mapelites.archive import MIGRATION_INTERVAL, Elite, IslandArchive
from ksmith_mapelites.descriptors import describe
from ksmith_mapelites.report import archive_map_html
from ksmith_mapelites.sampling import select

NAME = "mapelites"


def archive_of(run: Run) -> IslandArchive:
    """The run's island archive, created on first use."""
    state = run.state(NAME)
    if "archive" not in state:
        state["archive"] = IslandArchive(islands=run.config.islands, migration_interval=MIGRATION_INTERVAL)
    return state["archive"]


def select_from_islands(run: Run) -> Selection | None:
    archive = archive_of(run)
    state = run.state(NAME)
    # Islands take turns; after a resume the turn picks up from the evaluation count.
    island = state.get("next_island", run.evaluations % archive.islands)
    state["next_island"] = (island + 1) % archive.islands
    return select(run, archive, island)


MAPELITES = Selector(
    NAME,
    select_from_islands,
    "Islands of MAP-Elites grids over kernel descriptors; parents by score and 1 / (1 + children)",
    default=True,
)


@hookimpl
def ksmith_register_selectors(register):
    register(MAPELITES)


@hookimpl
def ksmith_report_sections(store: RunStore) -> list[ReportSection]:
    return [ReportSection("Archive map", archive_map_html(store.events("archive")), order=40)]


@hookimpl
def ksmith_archive(run: Run, candidate: Candidate, verdict: Verdict) -> list[dict[str, Any]]:
    archive = archive_of(run)
    for broken_id in _fix_attempted(run, candidate):
        archive.fix_attempts[broken_id] += 1
    records: list[dict[str, Any]] = []
    if verdict.accepted:
        descriptors = describe(candidate.source, verdict.launches)
        island = archive.island_of(candidate.island)
        elite = Elite(candidate.id, descriptors.cell(), verdict.score, descriptors, home=island)
        records.extend(archive.add(island, elite, seeds_all=archive.is_empty()))
    if archive.migration_interval and run.evaluations % archive.migration_interval == 0:
        records.extend(archive.migrate())
    run.state(NAME)["progress_text"] = archive.progress_text()
    return records


def _fix_attempted(run: Run, candidate: Candidate) -> set[str]:
    """The broken candidates this one tried to fix: a broken first parent, or the one a proposer names as
    ``meta["instead_of"]`` when it branched from a working ancestor instead of editing the broken kernel."""
    attempted = set()
    for candidate_id in (
        candidate.parent_ids[0] if candidate.parent_ids else None,
        (candidate.meta or {}).get("instead_of"),
    ):
        scored = run.by_id.get(candidate_id) if isinstance(candidate_id, str) else None
        if scored is not None and not scored.verdict.accepted:
            attempted.add(candidate_id)
    return attempted

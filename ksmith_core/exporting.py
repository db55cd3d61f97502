"""Export: hand a stored candidate to the exporter registered for a target."""

from __future__ import annotations

from pathlib import Path

from ksmith_core.capabilities import Exporter
from ksmith_core.errors import KsmithError, PluginError
from ksmith_core.loading import load_problem
from ksmith_core.model import Artifact
from ksmith_core.registry import lookup
from ksmith_core.store import RunStore, resolve_run


def export_from_run(run_spec: str, target: str, output: Path, candidate_id: str | None = None) -> Artifact:
    exporter = lookup(Exporter, target)  # an unknown target fails before the run is read
    with RunStore.open(resolve_run(run_spec)) as store:
        found = store.get(candidate_id) if candidate_id else store.best()
        if found is None:
            what = f"candidate {candidate_id}" if candidate_id else "accepted candidate"
            raise KsmithError(f"run {run_spec} has no {what}")
        candidate, verdict = found
        problem = load_problem(store.problem_path, name=store.meta().get("problem"))
        options = {"output": Path(output), "problem": problem, "verdict": verdict}
        artifact = exporter.export(store, candidate, options)
    if not isinstance(artifact, Artifact):
        raise PluginError(f"exporter {target!r} returned {type(artifact).__name__}, not an Artifact")
    return artifact

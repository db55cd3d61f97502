"""ksmith's basics: the local executor, the greedy selector, trajectory rows and the ``library`` exporter.

``local`` (the default executor) evaluates in threads of the driver, ``parallel`` at a time; each evaluation
is its own child process in the backend, so the threads only wait.

``greedy`` is the fallback selector: the best candidates first, each yielding its turn to those with fewer
children; ``--select greedy`` picks it over the default (MAP-Elites islands).

``ksmith_archive`` turns every evaluation into a trajectory row -- parent, child, edit, proposer, verdict and
gain -- which the training exporters read back as step-level data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ksmith_core import hookimpl
from ksmith_core.capabilities import EvalJob, Executor, Exporter, Selector
from ksmith_core.model import Artifact, Candidate, Selection, Verdict


def run_locally(
    jobs: Sequence[EvalJob], parallel: int, options: Mapping[str, Any] | None = None
) -> list[Verdict]:
    from ksmith_core.engine import evaluate

    def one(job: EvalJob) -> Verdict:
        return evaluate(job.problem, job.candidate, job.options)

    if parallel <= 1 or len(jobs) <= 1:
        return [one(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=min(parallel, len(jobs))) as pool:
        return list(pool.map(one, jobs))


def select_greedy(run) -> Selection | None:
    accepted = [s for s in run.population if s.verdict.accepted]
    if accepted:
        # Best first, but not always: a parent with many children yields its turn (1 / (1 + children)).
        weights = [s.verdict.score / (1 + run.children[s.candidate.id]) + 1e-9 for s in accepted]
        parent = run.rng.choices(accepted, weights=weights, k=1)[0]
        return Selection(parents=(parent,), inspirations=tuple(accepted[-2:]), mode="improve")
    if run.population:
        return Selection(parents=(run.population[-1],), mode="fix")
    return None


def export_library_entry(run: Any, candidate: Candidate, options: Mapping[str, Any]) -> Artifact:
    """A kernel-library entry: the kernel, the problem it was evolved for, and what it was judged on.

    Layout: ``OUT/<problem>/kernel.py``, ``OUT/<problem>/problem.py`` (the problem's source, byte for byte) and
    ``OUT/<problem>/entry.json`` (problem sha, verdict, versions, device, the module globals that set the size
    it was verified at and the shapes and dtypes of that size's inputs), so several runs exported into one
    directory make one library, and ``torch.compile(backend="kernelsmith")`` can match each entry back into a
    model.
    """
    from ksmith_core.clitools import output_dir
    from ksmith_core.environment import versions

    problem = options["problem"]
    verdict = options.get("verdict")
    entry_dir = output_dir(Path(options["output"])) / problem.name
    entry_dir.mkdir(parents=True, exist_ok=True)
    kernel_path = entry_dir / "kernel.py"
    kernel_path.write_text(candidate.source, encoding="utf-8")
    problem_path = entry_dir / "problem.py"
    problem_path.write_text(problem.source, encoding="utf-8")
    small = verdict is not None and verdict.details.get("size") == "small"
    sizes = dict(problem.small_sizes) if small else {}
    entry = {
        "problem": problem.name,
        "problem_sha": problem.sha,
        "problem_file": problem_path.name,
        "candidate_id": candidate.id,
        "run": run.path.name if run is not None else None,
        "device": verdict.device if verdict is not None else None,
        "sizes": sizes,
        "verified_inputs": _input_specs(problem.source, sizes),
        "verdict": verdict.to_dict() if verdict is not None else None,
        "versions": versions(),
    }
    entry_path = entry_dir / "entry.json"
    entry_path.write_text(json.dumps(entry, indent=2, default=str), encoding="utf-8")
    speed = f"{verdict.speedup:.3g}x vs eager" if verdict is not None and verdict.speedup else "unmeasured"
    return Artifact(
        target="library", paths=(kernel_path, problem_path, entry_path), summary=f"{problem.name}: {speed}"
    )


def _input_specs(source: str, sizes: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """Shape and dtype of each of the problem's inputs at ``sizes`` (made on the meta device: no memory), or
    ``None`` when the problem's code cannot say (the entry is then matched on nothing but its own check)."""
    import types

    import torch

    module = types.ModuleType("ksmith_problem")
    try:
        exec(compile(source, "<problem>", "exec"), module.__dict__)
        module.__dict__.update(sizes)
        with torch.device("meta"):
            values = list(module.get_inputs())
    except Exception:  # noqa: BLE001 - the problem's own code; the entry stays usable without the specs
        return None
    return [
        {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
        if isinstance(v, torch.Tensor)
        else {"value": repr(v)}
        for v in values
    ]


LOCAL = Executor(
    "local", run_locally, "Threads of the driver, --parallel at a time, one child process each", default=True
)
GREEDY = Selector(
    "greedy", select_greedy, "Best first, weighted by 1 / (1 + children); fix mode when none work"
)
LIBRARY = Exporter("library", export_library_entry, "OUT/<problem>/kernel.py + entry.json, one per problem")


@hookimpl
def ksmith_register_executors(register):
    register(LOCAL)


@hookimpl
def ksmith_register_selectors(register):
    register(GREEDY)


@hookimpl
def ksmith_register_exporters(register):
    register(LIBRARY)


@hookimpl
def ksmith_archive(run, candidate, verdict):
    parent = run.by_id.get(candidate.parent_ids[0]) if candidate.parent_ids else None
    gain = None
    if parent is not None and parent.verdict.accepted and verdict.accepted and parent.verdict.score > 0:
        gain = verdict.score / parent.verdict.score - 1.0
    return [
        {
            "kind": "trajectory",
            "step": run.evaluations,
            "parent_id": parent.candidate.id if parent else None,
            "child_id": candidate.id,
            "island": candidate.island,
            "proposer": candidate.proposer,
            "edit": candidate.edit,
            "edit_kind": candidate.edit_kind,
            "status": verdict.status.value,
            "speedup": verdict.speedup,
            "speedup_vs_compile": verdict.speedup_vs_compile,
            "parent_status": parent.verdict.status.value if parent else None,
            "parent_speedup": parent.verdict.speedup if parent else None,
            "gain": gain,
        }
    ]

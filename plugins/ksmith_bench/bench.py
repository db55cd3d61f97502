"""``ksmith bench``: evaluate (or evolve) many problems and summarise them the way KernelBench does.

Per problem: status, speedup vs eager and vs torch.compile, roofline fraction. Summary: correct rate,
fast_0 and fast_1 against both references (KernelBench's fast_p: the fraction of problems that are correct
*and* faster than the reference by more than p), and the mean and geometric mean speedup over correct
problems. Where the evaluator measured a roofline, rows also say whether the problem is memory- or
compute-bound and how close torch.compile itself is to the ceiling; the summary groups by bound and gives the
headroom (the geometric-mean speedup over torch.compile that kernels at the roofline would reach).

Results are appended to ``OUT/results.jsonl`` one problem at a time, so an interrupted bench resumes where it
stopped (a problem is redone only if its problem file or candidate changed).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksmith_core.capabilities import EvalJob
from ksmith_core.errors import KsmithError, ProblemError
from ksmith_core.loading import (
    SEED_SUFFIX,
    load_candidate,
    load_problem,
    problem_files,
    seed_path_for,
    with_backend,
)
from ksmith_core.model import Candidate, Problem, Status, Verdict
from ksmith_core.run import RunConfig

RESULTS = "results.jsonl"
ERROR_TAIL_CHARS = 800  # how much of a failed verdict's error a bench row keeps
NOT_EVALUATED = frozenset({"load_failed", "setup_failed", "no_candidate", "no_seed"})
SEEDS_DIR = "seeds"  # where --seed-from writes the seeds it makes, one NAME.seed.py (+ .json) per problem


@dataclass(frozen=True)
class BenchItem:
    problem: Problem
    candidate_path: Path | None


HARVEST_SUMMARY = "harvest.json"  # what ``ksmith harvest`` writes beside its problems (docs/compile.md)


def collect_problems(paths: Iterable[Path]) -> list[Path]:
    """Problem files from files and directories (recursively, see :func:`ksmith_core.loading.problem_files`).
    A directory ``ksmith harvest`` wrote comes largest share of the model's time first (:func:`by_time_share`)."""
    found: list[Path] = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            found.extend(by_time_share(path, problem_files(path)))
        elif path.is_file():
            found.append(path)
        else:
            raise ProblemError(f"no such problem file or directory: {path}")
    if not found:
        raise ProblemError("no problem files found in " + ", ".join(str(p) for p in paths))
    return found


def by_time_share(directory: Path, files: list[Path]) -> list[Path]:
    """``files`` with those ``directory/harvest.json`` gives a ``time_share`` first, largest first (ties and the
    rest in name order): evolutions run one problem at a time, so a bench cut short by its time limit has spent
    it where the model's time is. A directory without a readable summary keeps name order."""
    try:
        entries = json.loads((directory / HARVEST_SUMMARY).read_text(encoding="utf-8"))["problems"]
        shares = {str(e["file"]): float(e["time_share"]) for e in entries if e.get("time_share") is not None}
    except (OSError, ValueError, KeyError, TypeError):
        return files
    return sorted(files, key=lambda f: -shares.get(str(f.relative_to(directory)), -1.0))


def candidate_for(problem: Problem, candidates_dir: Path | None) -> Path | None:
    """A ModelNew for the problem: ``candidates_dir/NAME.py``, else the seed shipped beside the problem."""
    if candidates_dir is not None:
        for name in (f"{problem.name}.py", f"{problem.name}{SEED_SUFFIX}"):
            if (candidates_dir / name).is_file():
                return candidates_dir / name
    return seed_path_for(problem)


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def compile_roofline_fraction(row: dict[str, Any]) -> float | None:
    """torch.compile's own roofline fraction, from the candidate's fraction and its speedup over torch.compile."""
    fraction, vs_compile = row.get("roofline_fraction"), row.get("speedup_vs_compile")
    return fraction / vs_compile if fraction and vs_compile else None


def _headroom(rows: list[dict[str, Any]]) -> float | None:
    """The geometric-mean speedup over torch.compile that kernels at the measured roofline would reach.

    It bounds what any kernel can show on these problems: a suite whose torch.compile kernels already run near
    the hardware's ceiling leaves no room for a large mean speedup over it, however good the search.
    """
    return _geomean([1.0 / f for f in map(compile_roofline_fraction, rows) if f])


def _bound_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    compiled = [r["speedup_vs_compile"] for r in rows if r.get("speedup_vs_compile")]
    return {
        "problems": sorted(r["problem"] for r in rows),
        "geomean_speedup_eager": _geomean([r["speedup"] for r in rows if r.get("speedup")]),
        "geomean_speedup_compile": _geomean(compiled),
        "headroom_geomean_vs_compile": _headroom(rows),
    }


def room(row: dict[str, Any]) -> float | None:
    """How much faster an evolved problem's best could still get, for the reserve; ``None``: give it nothing.

    Only runs that stopped at their budget qualify (one near its roofline, out of patience or of proposals
    would not use more). On a GPU, 1 / the best's roofline fraction; otherwise 1 / its speedup over
    torch.compile where that is below 1."""
    if row.get("mode") != "evolve" or row.get("status") != "ok" or row.get("stop_reason") != "budget":
        return None
    fraction = row.get("roofline_fraction")
    if fraction and not row.get("interpreted"):
        return 1.0 / fraction
    versus = row.get("speedup_vs_compile")
    return 1.0 / versus if versus and versus < 1.0 else None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    correct = [r for r in rows if r["status"] == "ok"]

    def fast(key: str, p: float) -> float | None:
        return None if n == 0 else sum(1 for r in correct if (r.get(key) or 0) > p) / n

    eager = [r["speedup"] for r in correct if r.get("speedup")]
    compiled = [r["speedup_vs_compile"] for r in correct if r.get("speedup_vs_compile")]
    return {
        "problems": n,
        "correct": len(correct),
        "correct_rate": len(correct) / n if n else None,
        "fast_0_eager": fast("speedup", 0.0),
        "fast_1_eager": fast("speedup", 1.0),
        "fast_0_compile": fast("speedup_vs_compile", 0.0) if compiled else None,
        "fast_1_compile": fast("speedup_vs_compile", 1.0) if compiled else None,
        "mean_speedup_eager": sum(eager) / len(eager) if eager else None,
        "geomean_speedup_eager": _geomean(eager),
        "mean_speedup_compile": sum(compiled) / len(compiled) if compiled else None,
        "geomean_speedup_compile": _geomean(compiled),
        "headroom_geomean_vs_compile": _headroom(correct),
        "by_bound": {
            bound: _bound_summary([r for r in correct if r.get("roofline_bound") == bound])
            for bound in ("memory", "compute")
            if any(r.get("roofline_bound") == bound for r in correct)
        },
        "slower_than_compile": sorted(
            r["problem"] for r in correct if (r.get("speedup_vs_compile") or 2) < 1.0
        ),
        "interpreted": any(r.get("interpreted") for r in rows),
        "reserve_evaluations": {
            r["problem"]: r["reserve_evaluations"] for r in rows if r.get("reserve_evaluations")
        },
        # Rows with no verdict, by why: load_failed, setup_failed, no_candidate.
        "not_evaluated": {
            status: sum(1 for r in rows if r["status"] == status)
            for status in sorted({r["status"] for r in rows} & NOT_EVALUATED)
        },
    }


def _row(
    problem: Problem, candidate: Candidate | None, verdict: Verdict | None, mode: str, extra: dict
) -> dict:
    row: dict[str, Any] = {
        "problem": problem.name,
        "path": str(problem.path),
        "problem_sha": problem.sha,
        "candidate_id": candidate.id if candidate else None,
        "mode": mode,
        "status": verdict.status.value if verdict else "no_candidate",
        "speedup": verdict.speedup if verdict else None,
        "speedup_vs_compile": verdict.speedup_vs_compile if verdict else None,
        "roofline_fraction": verdict.roofline_fraction if verdict else None,
        "roofline_bound": verdict.roofline_bound if verdict else None,
        "runtime_ms": verdict.runtime_ms if verdict else None,
        "reference_ms": verdict.reference_ms if verdict else None,
        # How steady each timing was (max/min - 1 of its blocks' medians): a ratio is as good as both ends.
        "runtime_spread": verdict.runtime.spread if verdict and verdict.runtime else None,
        "reference_eager_spread": verdict.reference_eager.spread
        if verdict and verdict.reference_eager
        else None,
        "reference_compile_spread": (
            verdict.reference_compile.spread if verdict and verdict.reference_compile else None
        ),
        # The configuration torch.compile's autotuner kept for each of its tuned kernels (docs/evaluation.md,
        # "Steady references"): two benches' compile references are comparable when these agree.
        "reference_compile_picks": [
            k["chosen"] for k in (verdict.details.get("compile_reference_autotune") or [])
        ]
        if verdict
        else [],
        "interpreted": verdict.interpreted if verdict else False,
        "device": verdict.device if verdict else None,
        "reasons": list(verdict.reasons) if verdict else ["NO_CANDIDATE: no ModelNew beside the problem"],
        # The end of what went wrong (a traceback, else the candidate's stderr), so a row says why without its run.
        "error": _error_tail(verdict),
        # Ran out of memory beside other evaluations and was judged again alone (the Triton backend's
        # memory admission): the verdict is the second run's.
        "oom_retried_alone": bool(verdict and verdict.details.get("oom_retried_alone")),
    }
    row.update(extra)
    row["compile_roofline_fraction"] = compile_roofline_fraction(row)
    return row


def _error_tail(verdict: Verdict | None) -> str:
    if verdict is None or verdict.status is Status.OK:
        return ""
    text = verdict.error or verdict.details.get("stderr") or ""
    return str(text)[-ERROR_TAIL_CHARS:]


def _failed_row(
    path: Path, status: str, reason: str, problem: Problem | None = None, extra: dict | None = None
) -> dict[str, Any]:
    """The row of a problem that was not evaluated, with why (one line)."""
    first = (reason.strip().splitlines() or [status])[0]
    row: dict[str, Any] = {
        "problem": problem.name if problem else path.stem,
        "path": str(path),
        "problem_sha": problem.sha if problem else None,
        "candidate_id": None,
        "mode": "none",
        "status": status,
        "speedup": None,
        "speedup_vs_compile": None,
        "roofline_fraction": None,
        "roofline_bound": None,
        "runtime_ms": None,
        "reference_ms": None,
        "interpreted": False,
        "device": None,
        "reasons": [f"{status.upper()}: {first}"],
        **(extra or {}),
    }
    row["compile_roofline_fraction"] = None
    return row


class Bench:
    def __init__(
        self,
        out_dir: Path,
        config: RunConfig,
        evolve: bool,
        candidates_dir: Path | None = None,
        seed_from: str | None = None,
        seed_options: dict[str, Any] | None = None,
        reserve: int = 0,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.reserve = max(
            0, reserve
        )  # --reserve: evaluations given after the first pass where room is largest
        self.config = config
        self.evolve = evolve
        self.candidates_dir = candidates_dir
        self.seed_from = seed_from
        self.seed_options = dict(seed_options or {})
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.results_path = self.out_dir / RESULTS

    def done(self) -> dict[tuple[str, str | None], dict[str, Any]]:
        """Rows already finished, keyed by (problem sha, starting candidate id)."""
        rows: dict[tuple[str, str | None], dict[str, Any]] = {}
        if self.results_path.exists():
            for line in self.results_path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    rows[(row["problem_sha"], row.get("start_candidate_id", row.get("candidate_id")))] = row
        return rows

    def _append(self, row: dict[str, Any]) -> None:
        with open(self.results_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def run(
        self, problem_paths: list[Path], on_row: Callable[[dict[str, Any]], None] | None = None
    ) -> dict[str, Any]:
        finished = self.done()
        # Evaluations of different problems run concurrently (config.parallel); evolutions one problem at a
        # time, each using config.parallel inside its own run.
        workers = 1 if self.evolve else max(1, self.config.parallel)
        rows = []
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for row, fresh in pool.map(lambda path: self._one(path, finished), problem_paths):
                if fresh:
                    self._append(row)
                    if on_row:
                        on_row(row)
                rows.append(row)
        if self.evolve and self.reserve:
            rows = self._spend_reserve(rows, on_row)
        summary = summarise(rows)
        (self.out_dir / "summary.json").write_text(
            json.dumps({"summary": summary, "rows": rows}, indent=2, default=str)
        )
        return {"summary": summary, "rows": rows}

    def _one(self, path: Path, finished: dict) -> tuple[dict[str, Any], bool]:
        """One problem's row, and whether it was computed now (False: taken from an earlier bench).

        A problem that cannot be loaded, set up or started gets a row saying so, with the one-line reason,
        and the bench goes on (``load_failed``, ``setup_failed``, ``no_candidate``)."""
        from ksmith_core.engine import evaluate_all

        try:
            problem = with_backend(load_problem(path), self.config.backend)
        except KsmithError as exc:
            return _failed_row(path, "load_failed", str(exc)), True
        try:
            cand_path = candidate_for(problem, self.candidates_dir)
            start = load_candidate(cand_path) if cand_path else None
        except KsmithError as exc:
            return _failed_row(path, "load_failed", str(exc), problem), True
        clock = time.monotonic()
        if start is None and self.seed_from:
            try:
                start = self._seed(problem)
            except KsmithError as exc:
                return _failed_row(path, "no_seed", str(exc), problem), True
        key = (problem.sha, start.id if start else None)
        if key in finished and finished[key].get("mode") == ("evolve" if self.evolve else "eval"):
            return finished[key], False
        # Where a bench's time goes: seeding (0 when the seed was stored), then the evaluation's own phases.
        extra = {
            "start_candidate_id": start.id if start else None,
            "seed_s": round(time.monotonic() - clock, 1),
        }
        if start is None:
            return _row(problem, None, None, "eval", extra), True
        try:
            if not self.evolve:
                clock = time.monotonic()
                (verdict,) = evaluate_all(
                    [EvalJob(problem, start, self.config.eval)],
                    1,
                    self.config.executor,
                    self.config.executor_options,
                )
                extra["eval_s"] = round(time.monotonic() - clock, 1)
                waited = (verdict.details.get("memory") or {}).get("waited_s")
                extra["phases"] = {**(verdict.phases or {}), "waiting_for_memory": waited}
                return _row(problem, start, verdict, "eval", extra), True
            return self._evolve_one(problem, start, extra), True
        except ProblemError as exc:
            return _failed_row(path, "setup_failed", str(exc), problem, extra), True

    def _seed(self, problem: Problem) -> Candidate:
        """A first kernel from ``--seed-from``, kept in ``OUT/seeds/``: a resumed bench reuses it as long as
        the problem and the seed method's options are unchanged (both are stored beside it)."""
        from ksmith_core.planning import seed_candidate

        directory = self.out_dir / SEEDS_DIR
        path = directory / f"{problem.name}{SEED_SUFFIX}"
        facts = path.with_name(f"{problem.name}.seed.json")
        if path.is_file() and facts.is_file():
            try:
                stored = json.loads(facts.read_text())
            except ValueError:
                stored = {}
            if (
                stored.get("problem_sha") == problem.sha
                and stored.get("method") == self.seed_from
                and stored.get("options", {}) == dict(self.seed_options)
            ):
                return load_candidate(path)
        candidate = seed_candidate(problem, self.seed_from, self.config.eval, self.seed_options)
        directory.mkdir(parents=True, exist_ok=True)
        path.write_text(candidate.source, encoding="utf-8")
        facts.write_text(
            json.dumps(
                {
                    "problem_sha": problem.sha,
                    "method": self.seed_from,
                    "options": dict(self.seed_options),
                    "candidate_id": candidate.id,
                }
            )
        )
        return candidate

    def _evolve_one(self, problem: Problem, start: Candidate, extra: dict[str, Any]) -> dict[str, Any]:
        from ksmith_core.engine import Engine

        run_dir = self.out_dir / "runs" / problem.name
        started = time.monotonic()
        if (run_dir / "run.sqlite").exists():
            engine = Engine.resume(run_dir, {"budget": self.config.budget})
            # A run stopped before its seed's verdict was stored (a bench killed at its deadline) holds no
            # candidate: it starts from the seed, as a fresh one would.
            result = engine.evolve(None if engine.run.by_id else start)
        else:
            engine = Engine.start(problem, start, self.config, run_dir)
            result = engine.evolve(start)
        engine.close()
        return self._evolved_row(problem, result, run_dir, started, extra)

    # -- the reserve: evaluations given after the first pass, where the room is largest ----------------------

    def round_size(self) -> int:
        """Evaluations per reserve round: half a problem's budget, at least 4."""
        return max(4, self.config.budget // 2)

    def _spend_reserve(
        self, rows: list[dict[str, Any]], on_row: Callable[[dict[str, Any]], None] | None
    ) -> list[dict[str, Any]]:
        """Give ``--reserve`` evaluations, a round at a time, to the problem with the most room left.

        Room is :func:`room` (1 / roofline fraction on a GPU, else 1 / speedup vs torch.compile). A round that
        does not improve its problem's best ends that problem's share; a resumed bench counts what earlier
        rounds spent (each round's row is appended to ``results.jsonl``)."""
        rows = list(rows)
        left = self.reserve - sum(r.get("reserve_evaluations", 0) for r in rows)
        while left > 0:
            choices = [
                (room(r), r["problem"], i)
                for i, r in enumerate(rows)
                if room(r) and not r.get("reserve_stalled")
            ]
            if not choices:
                break
            _, _, index = max(choices)
            row = rows[index]
            grown = self._extend(row, min(self.round_size(), left))
            given = grown["reserve_evaluations"] - row.get("reserve_evaluations", 0)
            left -= given
            rows[index] = grown
            self._append(grown)
            if on_row:
                on_row(grown)
        return rows

    def _extend(self, row: dict[str, Any], give: int) -> dict[str, Any]:
        """The problem's run resumed with ``give`` more evaluations; its new row."""
        from ksmith_core.engine import Engine

        run_dir = Path(row["run_dir"])
        started = time.monotonic()
        engine = Engine.resume(run_dir, {"budget": row["evaluations"] + give})
        try:
            result = engine.evolve(None)
            problem = engine.run.problem
        finally:
            engine.close()
        extra = {key: row[key] for key in ("start_candidate_id",) if key in row}
        grown = self._evolved_row(problem, result, run_dir, started, extra)
        given = result.evaluations - row["evaluations"]
        gain = (grown.get("speedup") or 0.0) / row["speedup"] if row.get("speedup") else None
        grown["reserve_evaluations"] = row.get("reserve_evaluations", 0) + given
        grown["reserve_rounds"] = [*row.get("reserve_rounds", []), {"given": given, "gain": gain}]
        # Nothing spent, or the same best kernel: more of the same will not help this problem.
        grown["reserve_stalled"] = given <= 0 or grown.get("candidate_id") == row.get("candidate_id")
        return grown

    def _evolved_row(
        self, problem: Problem, result: Any, run_dir: Path, started: float, extra: dict[str, Any]
    ) -> dict[str, Any]:
        best, seed = result.best, result.seed
        verdict = result.revalidated if result.revalidated is not None else (best.verdict if best else None)
        extra |= {
            "run_dir": str(run_dir),
            "evaluations": result.evaluations,
            "stop_reason": result.stop_reason,  # budget, near_roofline, patience, exhausted, ...
            "evolve_seconds": round(time.monotonic() - started, 1),  # this session's wall clock on the device
            "seed_speedup": seed.verdict.speedup if seed else None,
            "seed_speedup_vs_compile": seed.verdict.speedup_vs_compile if seed else None,
        }
        if result.set_aside:
            # Better kernels that passed their evaluation and failed the run's re-validation: not reported.
            extra["failed_revalidation"] = [
                {"candidate_id": s.candidate.id, "speedup": s.verdict.speedup} for s in result.set_aside
            ]
        if best is None and result.set_aside:
            # Every accepted candidate failed its re-validation: the row is the last of those verdicts.
            row = _row(
                problem, result.set_aside[-1].candidate, result.failed_revalidations[-1], "evolve", extra
            )
            row["reasons"].append("FAILED_REVALIDATION: every accepted candidate failed its re-validation")
            return row
        row = _row(problem, best.candidate if best else None, verdict, "evolve", extra)
        if best is None and seed is not None:
            row["status"] = seed.verdict.status.value
        if best is not None and result.revalidated is None and result.set_aside:
            row["reasons"].append(
                f"NOT_REVALIDATED: the {len(result.set_aside)} candidates above it failed their re-validation"
            )
        return row

"""Runs written straight into the run store with chosen verdicts, for the dataset tests.

Real searches on the CPU interpreter give noisy timings and no hacks on cue; these runs hold exactly the
steps each filter is about (a clear gain, a gain within the noise, a refused hack, a broken child, a repair,
a gain that failed re-validation) with the real store, real problem file and real kernel sources.
"""

from __future__ import annotations

from pathlib import Path

from ksmith_core.model import Candidate, EvalOptions, Mismatch, Status, TimingStats, Verdict
from ksmith_core.run import RunConfig
from ksmith_core.store import RunStore

DATA = Path(__file__).resolve().parents[1] / "data"
PROBLEM = DATA / "vector_add.py"
SEED = (DATA / "vector_add.seed.py").read_text()
HARDWARE = {"device": "cpu", "name": "cpu (x86_64), Triton interpreter"}


def ok(speedup: float, spread: float | None = 0.02) -> Verdict:
    runtime = TimingStats(1.0 / speedup, 1.0 / speedup, 0.9, 1.1, 0.01, 100, spread)
    reference = TimingStats(1.0, 1.0, 0.95, 1.05, 0.01, 100, spread)
    return Verdict(
        status=Status.OK,
        correct=True,
        runtime=runtime,
        reference_eager=reference,
        speedup=speedup,
        device="cuda",
    )


def failed(status: Status, reasons: tuple[str, ...] = (), **fields) -> Verdict:
    return Verdict(status=status, reasons=reasons, device="cuda", **fields)


def variant(source: str, old: str, new: str) -> str:
    assert old in source, old
    return source.replace(old, new, 1)


def child(parent: Candidate, source: str, edit: str, kind: str) -> Candidate:
    return Candidate.from_source(source, parent_ids=(parent.id,), edit=edit, edit_kind=kind, proposer="llm")


def write_run(run_dir: Path, name: str = "vector_add") -> dict[str, Candidate]:
    """A run of every kind of step; returns its candidates by role."""
    seed = Candidate.from_source(SEED, proposer="seed")
    bigger = child(
        seed, variant(SEED, "BLOCK_SIZE=256", "BLOCK_SIZE=1024"), "BLOCK_SIZE 256 -> 1024", "block_size"
    )
    warps = child(seed, variant(SEED, "num_warps=4", "num_warps=8"), "num_warps 4 -> 8", "num_warps")
    hack = child(
        seed,
        variant(SEED, "        _add_kernel[grid](x, y, out, n, BLOCK_SIZE=256, num_warps=4)\n", "").replace(
            "return out", "return x + y"
        ),
        "compute in torch",
        "rewrite",
    )
    broken = child(bigger, variant(bigger.source, "x + y, mask=mask", "x - y, mask=mask"), "subtract", "math")
    repaired = child(
        broken, variant(broken.source, "x - y, mask=mask", "y + x, mask=mask"), "add again", "math"
    )
    stages = child(
        bigger,
        variant(bigger.source, "num_warps=4)", "num_warps=4, num_stages=2)"),
        "num_stages 2",
        "num_stages",
    )
    verdicts = [
        (seed, ok(1.0)),
        (bigger, ok(1.5)),  # +50 %, noise 2 %: kept
        (warps, ok(1.01)),  # +1 %: within the noise
        (hack, failed(Status.REJECTED, ("NO_TRITON_LAUNCH: forward launched no Triton kernel",))),
        (broken, failed(Status.INCORRECT, ("MISMATCH: output 0",), mismatch=Mismatch(output=0))),
        (repaired, ok(1.45)),  # fixes a broken parent: a repair, not an improvement
        (stages, ok(2.0)),  # +33 % over its parent, but re-validation says 1.5x: not kept
    ]
    config = RunConfig(proposer="llm", budget=len(verdicts), eval=EvalOptions(device="cuda"))
    meta = {"problem": name, "problem_sha": "", "config": config.to_dict(), "seed_id": seed.id}
    store = RunStore.create(run_dir, PROBLEM.read_text(), meta, {"device": HARDWARE})
    with store:
        for candidate, verdict in verdicts:
            store.record_evaluation(candidate, verdict)
        store.record_event("revalidation", ok(1.5).to_dict(), stages.id)
    return {
        "seed": seed,
        "bigger": bigger,
        "warps": warps,
        "hack": hack,
        "broken": broken,
        "repaired": repaired,
        "stages": stages,
    }

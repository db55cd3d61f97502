"""The data model every plugin speaks: Problem, Candidate, Proposal, Verdict and the options around them.

All of it is immutable and JSON-round-trippable, because verdicts cross process boundaries (the evaluator's
child process writes one as JSON) and everything lands in the run store.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any


class FrozenDict(dict):
    """A dict that refuses mutation, so frozen dataclasses stay frozen all the way down."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("FrozenDict is immutable")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda kv: kv[0])))

    def __reduce__(self):
        return (FrozenDict, (dict(self),))


def freeze(value: Any) -> Any:
    """Deep-freeze JSON-like data: dicts become FrozenDict, lists become tuples."""
    if isinstance(value, Mapping):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The inverse of :func:`freeze`, for JSON encoding."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def source_id(source: str) -> str:
    """A candidate's identity: the hash of its source with trailing whitespace normalised away."""
    normalised = "\n".join(line.rstrip() for line in source.strip().splitlines()) + "\n"
    return hashlib.sha256(normalised.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------------------------
# Problem
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


# KernelBench's defaults: fp32 1e-4; half precision 1e-2. A problem may override any entry.
DEFAULT_TOLERANCES: Mapping[str, Tolerance] = FrozenDict(
    {
        "float32": Tolerance(1e-4, 1e-4),
        "float64": Tolerance(1e-7, 1e-7),
        "float16": Tolerance(1e-2, 1e-2),
        "bfloat16": Tolerance(1e-2, 1e-2),
    }
)


@dataclass(frozen=True)
class Problem:
    """A KernelBench-format problem: a module with ``Model``, ``get_inputs`` and ``get_init_inputs``.

    The file is kept exactly as written. Optional module-level literals tune how ksmith judges it:
    ``KSMITH_BACKEND`` (default ``"triton"``), ``KSMITH_TOLERANCES`` (``{"float32": [atol, rtol]}``),
    ``KSMITH_ALLOWED_OPS`` (torch ops a candidate may still dispatch, e.g. ``["aten.convolution"]``) and
    ``KSMITH_SMALL`` (module globals to override for a size the CPU interpreter runs in seconds).
    """

    name: str
    path: Path
    source: str
    backend: str = "triton"
    tolerances: Mapping[str, Tolerance] = DEFAULT_TOLERANCES
    allowed_ops: frozenset[str] = frozenset()
    small_sizes: Mapping[str, Any] = field(default_factory=FrozenDict)
    description: str = ""

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def tolerance_for(self, dtype_name: str) -> Tolerance:
        """Tolerance for a dtype name such as ``"float32"`` (``torch.float32`` also accepted)."""
        key = dtype_name.removeprefix("torch.")
        return self.tolerances.get(key) or DEFAULT_TOLERANCES.get(key) or Tolerance(1e-4, 1e-4)


# --------------------------------------------------------------------------------------------------------------
# Candidates and proposals
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
    """What a proposer hands back: a full candidate source and the single edit that produced it."""

    source: str
    parent_ids: tuple[str, ...] = ()
    edit: str = ""  # one line a human (and the next prompt) can read: "num_warps 4 -> 8"
    edit_kind: str = ""  # a stable label the proposer learns over: "num_warps", "block_size", "rewrite"
    proposer: str = ""
    meta: Mapping[str, Any] = field(default_factory=FrozenDict)


@dataclass(frozen=True)
class Candidate:
    """A module defining ``ModelNew`` (KernelBench convention) whose forward launches its kernels."""

    id: str
    source: str
    parent_ids: tuple[str, ...] = ()
    island: int = 0
    edit: str = ""
    edit_kind: str = ""
    proposer: str = "seed"
    meta: Mapping[str, Any] = field(default_factory=FrozenDict)

    @classmethod
    def from_source(cls, source: str, **kwargs: Any) -> Candidate:
        if "meta" in kwargs:
            kwargs["meta"] = freeze(kwargs["meta"])
        return cls(id=source_id(source), source=source, **kwargs)

    @classmethod
    def from_proposal(cls, proposal: Proposal, island: int = 0) -> Candidate:
        return cls.from_source(
            proposal.source,
            parent_ids=tuple(proposal.parent_ids),
            island=island,
            edit=proposal.edit,
            edit_kind=proposal.edit_kind,
            proposer=proposal.proposer,
            meta=proposal.meta,
        )


# --------------------------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------------------------


class Status(str, Enum):
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    INCORRECT = "incorrect"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    REJECTED = "rejected"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TimingStats:
    """Milliseconds per call over ``trials`` timed runs.

    ``spread`` says how steady the measurement was: the largest relative difference between the medians of
    separate blocks of calls (``max / min - 1``; the candidate's first and second half, a reference's blocks
    timed apart). ``None`` when there was only one block.
    """

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    trials: int
    spread: float | None = None

    @classmethod
    def from_samples(cls, samples_ms: list[float], blocks: list[list[float]] | None = None) -> TimingStats:
        if not samples_ms:
            raise ValueError("no timing samples")
        ordered = sorted(samples_ms)
        n = len(ordered)
        mean = sum(ordered) / n
        std = math.sqrt(sum((x - mean) ** 2 for x in ordered) / n)
        medians = [_median(block) for block in blocks or () if block]
        spread = max(medians) / min(medians) - 1.0 if len(medians) > 1 and min(medians) > 0 else None
        return cls(_median(ordered), mean, ordered[0], ordered[-1], std, n, spread)

    @classmethod
    def from_halves(cls, samples_ms: list[float]) -> TimingStats:
        """Stats of samples in call order, with the spread between the first and the second half."""
        half = len(samples_ms) // 2
        blocks = [samples_ms[:half], samples_ms[half:]] if half >= 2 else None
        return cls.from_samples(samples_ms, blocks)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


@dataclass(frozen=True)
class Mismatch:
    """Where a candidate's outputs differ from the reference's: what the next proposal is told.

    ``expected`` and ``got`` are the values at the worst element (or, for a structure, dtype, shape or
    device mismatch, what each side had); ``output`` is the index of the output tensor and ``where`` says
    which call it was (``"trial 2 of 5"``).
    """

    output: int | None = None
    where: str = ""
    expected: Any = None
    got: Any = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    worst_index: tuple[int, ...] = ()
    mismatched: int | None = None
    numel: int | None = None
    atol: float | None = None
    rtol: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "worst_index", tuple(int(i) for i in self.worst_index or ()))
        object.__setattr__(self, "expected", freeze(self.expected))
        object.__setattr__(self, "got", freeze(self.got))

    def to_dict(self) -> dict[str, Any]:
        return {f.name: thaw(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Mismatch:
        data = dict(data)
        # Stored by earlier versions under other names.
        data.setdefault("expected", data.pop("expected_value", None))
        data.setdefault("got", data.pop("got_value", None))
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


ROOFLINE_BOUNDS = ("memory", "compute")
_STATS_FIELDS = frozenset(f.name for f in fields(TimingStats))


@dataclass(frozen=True)
class Verdict:
    """The evaluator's judgement of one candidate on one problem and device.

    ``reasons`` are lines each starting with a stable upper-case code (``MISMATCH: ...``, ``NO_TRITON_LAUNCH:
    ...``) so pipelines can match on codes; ``feedback`` is prose written for the next proposal (filled by
    :func:`ksmith_core.engine.evaluate` from the fields below). The typed fields are the contract between a
    backend and everything that reads a verdict (feedback, bench, report, archives); ``details`` holds what
    only the backend itself reads back (its protocol version, per-worker timings, captured output).
    """

    status: Status
    correct: bool = False
    runtime: TimingStats | None = None
    reference_eager: TimingStats | None = None
    reference_compile: TimingStats | None = None
    speedup: float | None = None
    speedup_vs_compile: float | None = None
    roofline_fraction: float | None = None  # measured time over the roofline floor's, as a fraction
    roofline_bound: str | None = None  # which floor binds: "memory" or "compute"
    mismatch: Mismatch | None = None  # set when outputs differ from the reference
    error: str = ""  # the failing traceback or compiler message, for the proposer and the user
    launches: tuple[int, ...] = ()  # kernels launched per forward, one count per correctness trial
    phases: Mapping[str, float] = field(default_factory=FrozenDict)  # seconds per evaluation phase
    reasons: tuple[str, ...] = ()
    feedback: str = ""
    device: str = "cpu"
    interpreted: bool = False
    details: Mapping[str, Any] = field(default_factory=FrozenDict)
    eval_seconds: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "reasons", tuple(self.reasons))
        object.__setattr__(self, "details", freeze(self.details))
        object.__setattr__(self, "phases", freeze(dict(self.phases or {})))
        object.__setattr__(self, "launches", tuple(int(n) for n in self.launches or () if n is not None))
        if isinstance(self.mismatch, Mapping):
            object.__setattr__(self, "mismatch", Mismatch.from_dict(self.mismatch))
        if self.roofline_bound is not None and self.roofline_bound not in ROOFLINE_BOUNDS:
            raise ValueError(f"roofline_bound must be one of {ROOFLINE_BOUNDS}, not {self.roofline_bound!r}")

    @property
    def accepted(self) -> bool:
        return self.status is Status.OK

    @property
    def runtime_ms(self) -> float | None:
        return self.runtime.median_ms if self.runtime else None

    @property
    def reference_ms(self) -> float | None:
        return self.reference_eager.median_ms if self.reference_eager else None

    @property
    def score(self) -> float:
        """What selection maximises: speedup vs eager for accepted candidates, else 0."""
        return float(self.speedup or 0.0) if self.accepted else 0.0

    def to_dict(self) -> dict[str, Any]:
        def stats(s: TimingStats | None) -> dict | None:
            return None if s is None else {f.name: getattr(s, f.name) for f in fields(s)}

        return {
            "status": self.status.value,
            "correct": self.correct,
            "speedup": self.speedup,
            "speedup_vs_compile": self.speedup_vs_compile,
            "runtime_ms": self.runtime_ms,
            "reference_ms": self.reference_ms,
            "reference_compile_ms": self.reference_compile.median_ms if self.reference_compile else None,
            "roofline_fraction": self.roofline_fraction,
            "roofline_bound": self.roofline_bound,
            "mismatch": self.mismatch.to_dict() if self.mismatch else None,
            "error": self.error,
            "launches": list(self.launches),
            "phases": thaw(self.phases),
            "reasons": list(self.reasons),
            "feedback": self.feedback,
            "device": self.device,
            "interpreted": self.interpreted,
            "runtime": stats(self.runtime),
            "reference_eager": stats(self.reference_eager),
            "reference_compile": stats(self.reference_compile),
            "details": thaw(self.details),
            "eval_seconds": self.eval_seconds,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        def stats(d: Mapping | None) -> TimingStats | None:
            return None if not d else TimingStats(**{k: v for k, v in d.items() if k in _STATS_FIELDS})

        details = dict(data.get("details") or {})
        # Verdicts stored by earlier versions kept these in ``details``.
        legacy = {key: details.pop(key, None) for key in ("mismatch", "error", "roofline_bound", "phases")}
        legacy_launches = details.pop("launches", None)
        mismatch = data.get("mismatch") or legacy["mismatch"]
        launches = data.get("launches") or legacy_launches
        if isinstance(launches, int):
            launches = [launches]
        return cls(
            status=Status(data["status"]),
            correct=bool(data.get("correct", False)),
            runtime=stats(data.get("runtime")),
            reference_eager=stats(data.get("reference_eager")),
            reference_compile=stats(data.get("reference_compile")),
            speedup=data.get("speedup"),
            speedup_vs_compile=data.get("speedup_vs_compile"),
            roofline_fraction=data.get("roofline_fraction"),
            roofline_bound=data.get("roofline_bound") or legacy["roofline_bound"],
            mismatch=Mismatch.from_dict(mismatch) if mismatch else None,
            error=str(data.get("error") or legacy["error"] or ""),
            launches=tuple(launches or ()),
            phases=data.get("phases") or legacy["phases"] or {},
            reasons=tuple(data.get("reasons", ())),
            feedback=data.get("feedback", ""),
            device=data.get("device", "cpu"),
            interpreted=bool(data.get("interpreted", False)),
            details=details,
            eval_seconds=float(data.get("eval_seconds", 0.0)),
        )


# --------------------------------------------------------------------------------------------------------------
# Options passed to hooks
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalOptions:
    """How to evaluate. The defaults are the protocol; change them knowingly."""

    device: str = "cpu"  # "cuda" or "cpu" (Triton interpreter, timings labelled interpreted)
    timeout_s: float = 180.0  # wall clock for one candidate's child process
    correctness_trials: int = 5  # fresh seeds, each with fresh inputs
    timing_trials: int = 100  # timed runs (median reported); GPU only
    warmup: int = 10
    memory_limit_mb: int = 16384  # address-space cap is not used on CUDA (drivers map huge VA); RSS watched
    small: bool | None = None  # use the problem's KSMITH_SMALL sizes; None = small on CPU, full on GPU
    cache_dir: str | None = None  # reference timing cache; None = user cache dir
    gpu_index: int | None = None  # pin to this GPU; None = let the pool choose

    @property
    def use_small(self) -> bool:
        return (self.device == "cpu") if self.small is None else self.small


@dataclass(frozen=True)
class Scored:
    """A candidate with its verdict, as selection and proposers see it."""

    candidate: Candidate
    verdict: Verdict
    feedback: str = ""  # structured feedback text for the proposer (see ksmith_core.feedback)


@dataclass(frozen=True)
class Selection:
    """Who to show the proposer next. ``mode`` is "improve" for working parents, "fix" for broken ones."""

    parents: tuple[Scored, ...]
    inspirations: tuple[Scored, ...] = ()
    island: int = 0
    mode: str = "improve"


@dataclass(frozen=True)
class ReportSection:
    """A section a plugin adds to ``ksmith report``: a title and self-contained HTML (no scripts, no links
    outside the file). Sections are ordered by ``order``, then title."""

    title: str
    html: str
    order: int = 50


@dataclass(frozen=True)
class Artifact:
    """What an exporter produced: files written and a one-line summary."""

    target: str
    paths: tuple[Path, ...]
    summary: str

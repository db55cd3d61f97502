"""ksmith core: hook specifications, capabilities and their registry, data model, run store, engine and CLI."""

from ksmith_core.capabilities import (
    Backend,
    EvalJob,
    Executor,
    Exporter,
    Platform,
    ProblemSuite,
    Proposer,
    SeedMethod,
    Selector,
)
from ksmith_core.errors import KsmithError
from ksmith_core.hookspecs import hookimpl
from ksmith_core.model import Candidate, Problem, Proposal, ReportSection, Status, Verdict

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "Candidate",
    "EvalJob",
    "Executor",
    "Exporter",
    "KsmithError",
    "Platform",
    "Problem",
    "ProblemSuite",
    "Proposal",
    "Proposer",
    "ReportSection",
    "SeedMethod",
    "Selector",
    "Status",
    "Verdict",
    "__version__",
    "hookimpl",
]

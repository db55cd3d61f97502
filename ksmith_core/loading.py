"""Reading problems and candidates from disk without running them.

The driver never imports a problem or candidate: files are checked with ``ast`` here and executed only in
the evaluator's child process. That keeps a hostile candidate away from the driver and makes bad input
(missing file, syntax error, no ``Model``) a one-line error before any work starts.
"""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

from ksmith_core.errors import CandidateError, KsmithError, ProblemError
from ksmith_core.model import DEFAULT_TOLERANCES, Candidate, FrozenDict, Problem, Tolerance

SEED_SUFFIX = ".seed.py"


def _read(path: Path, error: type[KsmithError], what: str) -> str:
    if not path.exists():
        raise error(f"{what} not found: {path}")
    if not path.is_file():
        raise error(f"{what} is not a file: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {what} {path}: {exc}") from exc


# CPython 3.11's AST constructor keeps its recursion-depth counter in shared state: two threads parsing at
# once (bench and batch evaluation load files from worker threads) can fail with "SystemError: AST
# constructor recursion depth mismatch" (python/cpython#106905). Parsing is fast; one at a time is enough.
_PARSE_LOCK = threading.Lock()


def _parse(source: str, path: Path, error: type[KsmithError], what: str) -> ast.Module:
    try:
        with _PARSE_LOCK:
            return ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise error(f"{what} {path} has a syntax error at line {exc.lineno}: {exc.msg}") from exc


def _top_level_names(tree: ast.Module) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


def _literal(names: dict[str, ast.AST], key: str, path: Path) -> Any:
    node = names.get(key)
    if node is None:
        return None
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    if value is None:
        raise ProblemError(f"{path}: {key} must be assigned a literal")
    try:
        return ast.literal_eval(value)
    except ValueError as exc:
        raise ProblemError(f"{path}: {key} must be a literal (numbers, strings, lists, dicts)") from exc


def _tolerances(raw: Any, path: Path) -> FrozenDict:
    merged = dict(DEFAULT_TOLERANCES)
    if raw is None:
        return FrozenDict(merged)
    if not isinstance(raw, dict):
        raise ProblemError(f"{path}: KSMITH_TOLERANCES must be a dict like {{'float32': [1e-4, 1e-4]}}")
    for dtype, pair in raw.items():
        if isinstance(pair, (int, float)):
            pair = (pair, pair)
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
            raise ProblemError(f"{path}: KSMITH_TOLERANCES[{dtype!r}] must be [atol, rtol]")
        merged[str(dtype)] = Tolerance(float(pair[0]), float(pair[1]))
    return FrozenDict(merged)


def load_problem(path: str | Path, name: str | None = None) -> Problem:
    """Load a KernelBench-format problem file exactly as it is (``Model``, ``get_inputs``, ...)."""
    path = Path(path)
    source = _read(path, ProblemError, "problem file")
    tree = _parse(source, path, ProblemError, "problem file")
    names = _top_level_names(tree)
    if not isinstance(names.get("Model"), ast.ClassDef):
        raise ProblemError(f"{path} is not a KernelBench problem: it defines no class Model")
    if not isinstance(names.get("get_inputs"), (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise ProblemError(f"{path} is not a KernelBench problem: it defines no function get_inputs()")
    backend = _literal(names, "KSMITH_BACKEND", path) or "triton"
    allowed = _literal(names, "KSMITH_ALLOWED_OPS", path) or []
    small = _literal(names, "KSMITH_SMALL", path) or {}
    if not isinstance(allowed, (list, tuple)) or not all(isinstance(a, str) for a in allowed):
        raise ProblemError(f"{path}: KSMITH_ALLOWED_OPS must be a list of op names such as 'aten.mm'")
    if not isinstance(small, dict):
        raise ProblemError(f"{path}: KSMITH_SMALL must be a dict of module globals, e.g. {{'N': 256}}")
    return Problem(
        name=name or problem_name(path),
        path=path.resolve(),
        source=source,
        backend=str(backend),
        tolerances=_tolerances(_literal(names, "KSMITH_TOLERANCES", path), path),
        allowed_ops=frozenset(allowed),
        small_sizes=FrozenDict(small),
        description=(ast.get_docstring(tree) or "").strip().splitlines()[0]
        if ast.get_docstring(tree)
        else "",
    )


def problem_name(path: Path) -> str:
    name = path.name
    for suffix in (SEED_SUFFIX, ".py"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def check_candidate_source(source: str, path: Path | str = "<candidate>") -> None:
    """Raise :class:`CandidateError` unless ``source`` parses and defines ``class ModelNew``."""
    tree = _parse(source, Path(str(path)), CandidateError, "candidate")
    if not isinstance(_top_level_names(tree).get("ModelNew"), ast.ClassDef):
        raise CandidateError(f"{path} is not a candidate: it defines no class ModelNew")


def load_candidate(path: str | Path, **kwargs: Any) -> Candidate:
    """Read a candidate module (a file defining ``ModelNew``)."""
    path = Path(path)
    source = _read(path, CandidateError, "candidate file")
    check_candidate_source(source, path)
    return Candidate.from_source(source, **kwargs)


def seed_path_for(problem: Problem) -> Path | None:
    """The seed kernel shipped beside a problem, if any: ``NAME.BACKEND.seed.py`` for the backend that judges
    it (``relu.cuda.seed.py`` under ``--backend cuda``), else ``NAME.seed.py``."""
    stem = problem.path.name.removesuffix(".py")
    for name in (f"{stem}.{problem.backend}{SEED_SUFFIX}", f"{stem}{SEED_SUFFIX}"):
        candidate = problem.path.with_name(name)
        if candidate.is_file():
            return candidate
    return None


def problem_files(directory: Path) -> list[Path]:
    """The problem files under ``directory``, recursively: every ``*.py`` but seeds (``NAME.seed.py``),
    private files (``_*.py``) and caches. KernelBench's own ``level1/`` ... directories are read as they are."""
    return [
        path
        for path in sorted(Path(directory).rglob("*.py"))
        if not path.name.endswith(SEED_SUFFIX)
        and not path.name.startswith("_")
        and "__pycache__" not in path.parts
    ]


def suite_problem_files() -> list[tuple[str, Path]]:
    """``(suite name, problem file)`` for every problem of every installed suite."""
    from ksmith_core.capabilities import ProblemSuite
    from ksmith_core.registry import registry

    return [
        (suite.name, path)
        for suite in sorted(registry().all(ProblemSuite), key=lambda s: s.name)
        for path in problem_files(suite.directory)
    ]


def with_backend(problem: Problem, backend: str | None) -> Problem:
    """``problem`` judged by ``backend`` instead of its ``KSMITH_BACKEND`` (``--backend``); an unknown name is
    one line listing the registered backends. ``None`` leaves it as it is."""
    if not backend or backend == problem.backend:
        return problem
    from dataclasses import replace

    from ksmith_core.capabilities import Backend
    from ksmith_core.registry import lookup

    lookup(Backend, backend)
    return replace(problem, backend=backend)


def resolve_problem(spec: str) -> Problem:
    """Accept a path to a problem file, or the name of a problem in an installed suite."""
    as_path = Path(spec)
    if as_path.suffix == ".py" or as_path.exists() or "/" in spec:
        return load_problem(as_path)
    matches = [(suite, path) for suite, path in suite_problem_files() if problem_name(path) == spec]
    if not matches:
        raise ProblemError(f"no problem file and no installed problem named {spec!r} (see `ksmith problems`)")
    if len(matches) > 1:
        where = ", ".join(f"{suite}:{path.name}" for suite, path in matches)
        raise ProblemError(f"problem name {spec!r} is ambiguous ({where}); pass a path instead")
    return load_problem(matches[0][1])

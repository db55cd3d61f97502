"""The evaluator's code is split along its trust boundary: the candidate's process and the reference process
each load their own side's module and what both share, never the other side's code."""

from __future__ import annotations

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def _ksmith_triton_imports(module: str) -> set[str]:
    """Every ksmith_triton module that ``module`` imports, anywhere in it (lazy imports too), transitively."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        path = PLUGINS / f"{name.replace('.', '/')}.py"
        if name in seen or not path.is_file():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ksmith_triton"):
                todo.append(node.module)
                todo.extend(f"{node.module}.{alias.name}" for alias in node.names)  # submodules by name
            elif isinstance(node, ast.Import):
                todo.extend(alias.name for alias in node.names if alias.name.startswith("ksmith_triton"))
    return seen


def test_the_candidate_and_reference_sides_never_import_each_other():
    candidate_side = _ksmith_triton_imports("ksmith_triton.candidate_side")
    reference_side = _ksmith_triton_imports("ksmith_triton.reference_side")
    assert "ksmith_triton.child_common" in candidate_side & reference_side  # what both share
    assert "ksmith_triton.reference_side" not in candidate_side
    assert "ksmith_triton.candidate_side" not in reference_side
    assert not {"ksmith_triton.guards", "ksmith_triton.warmkernel"} & reference_side  # candidate machinery

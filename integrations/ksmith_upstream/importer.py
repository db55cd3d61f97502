"""``ksmith import``: an upstream launcher becomes a KernelBench problem ``NAME.py`` and its seed ``NAME.seed.py``.

Both files carry the same extracted upstream code. The reference ``Model`` runs upstream's kernel as it ships
(neither project has a torch reference for the supported launchers that runs without the package), so an
evolved kernel must reproduce upstream's outputs exactly (integers) or within the recipe's tolerance (floats),
and its speedup is measured against upstream's kernel. The problem records where it came from in
``KSMITH_UPSTREAM`` so that ``ksmith patch`` can find its way back.
"""

from __future__ import annotations

import ast
import json
import pprint
from dataclasses import dataclass
from pathlib import Path

from ksmith_core.loading import check_candidate_source, load_problem
from ksmith_upstream.extract import Extraction, extract
from ksmith_upstream.recipes import Recipe, recipe_for, with_shapes
from ksmith_upstream.source import UpstreamError, UpstreamSource


@dataclass(frozen=True)
class Imported:
    problem: Path
    seed: Path
    extraction: Extraction


HARNESS_IMPORTS = ("import torch", "import torch.nn as nn")


def call_parameters(recipe: Recipe) -> list[str]:
    """The tensor parameters of the recipe's ``call`` (after ``launcher``, before the config)."""
    fn = ast.parse(recipe.call).body[0]
    assert isinstance(fn, ast.FunctionDef)
    names = [a.arg for a in fn.args.args][1:]
    return [n for n in names if n not in recipe.config]


def read_shapes(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UpstreamError(f"--shapes {path}: not a readable JSON file ({type(exc).__name__})") from exc


def provenance(ex: Extraction, sizes: dict) -> dict:
    return {
        "project": ex.source.project.name,
        "version": ex.source.version,
        "source": ex.source.origin,
        "file": ex.repo_path,
        "symbol": ex.symbol,
        "launcher": ex.launcher,
        "kernels": list(ex.kernels),
        "sha256": ex.sha256,
        "files": dict(ex.files),
        "sizes": dict(sizes),
    }


def _literal(name: str, value: object) -> str:
    return f"{name} = " + pprint.pformat(value, width=100, sort_dicts=False)


def harness(recipe: Recipe, ex: Extraction, cls: str) -> str:
    tensors = call_parameters(recipe)
    config = list(recipe.config)
    init = "\n".join(f"        self.{c} = {c}" for c in config)
    passed = ", ".join([*tensors, *(f"{c}=self.{c}" for c in config)])
    return (
        f"class {cls}(nn.Module):\n"
        f"    def __init__({', '.join(['self', *config])}):\n"
        f"        super().__init__()\n" + (f"{init}\n" if init else "") + "\n"
        f"    def forward(self, {', '.join(tensors)}):\n"
        f"        return call({ex.launcher}, {passed})\n"
    )


def render_problem(ex: Extraction, recipe: Recipe, sizes: dict, small: dict) -> str:
    names = ", ".join(ex.kernels)
    doc = (
        f'"""{ex.source.project.name} {ex.source.version} {ex.launcher} ({names}) from {ex.repo_path}; '
        f'the reference is the upstream kernel itself."""'
    )
    globals_ = "\n".join(f"{k} = {v!r}" for k, v in sizes.items())
    size_args = ", ".join(f"{k}={k}" for k in recipe.sizes)
    parts = [
        doc,
        ex.code(HARNESS_IMPORTS).strip("\n"),
        _literal("KSMITH_UPSTREAM", provenance(ex, sizes)),
        _literal("KSMITH_SMALL", small),
    ]
    if recipe.tolerances:
        parts.append(_literal("KSMITH_TOLERANCES", recipe.tolerances))
    parts += [
        f"# Full sizes: {recipe.model}.\n{globals_}",
        recipe.make_inputs.strip("\n"),
        recipe.call.strip("\n"),
        harness(recipe, ex, "Model").strip("\n"),
        f"def get_inputs():\n    return make_inputs({size_args})",
        f"def get_init_inputs():\n    return [{', '.join(recipe.config)}]",
    ]
    return "\n\n\n".join(parts) + "\n"


def render_seed(ex: Extraction, recipe: Recipe) -> str:
    doc = (
        f'"""Seed: upstream\'s {ex.launcher} from {ex.source.project.name} {ex.source.version} '
        f'({ex.repo_path}), unchanged."""'
    )
    parts = [
        doc,
        ex.code(HARNESS_IMPORTS).strip("\n"),
        recipe.call.strip("\n"),
        harness(recipe, ex, "ModelNew").strip("\n"),
    ]
    return "\n\n\n".join(parts) + "\n"


def import_kernel(
    source: UpstreamSource, symbol: str, out_dir: Path, shapes: dict, name: str | None = None
) -> Imported:
    ex = extract(source, symbol)
    recipe = recipe_for(source.project.name, ex.launcher)
    sizes, small = with_shapes(recipe, shapes)
    name = name or ex.launcher
    if not name.isidentifier():
        raise UpstreamError(f"--name {name!r} must be a Python identifier")
    problem = out_dir / f"{name}.py"
    seed = out_dir / f"{name}.seed.py"
    problem.write_text(render_problem(ex, recipe, sizes, small), encoding="utf-8")
    seed.write_text(render_seed(ex, recipe), encoding="utf-8")
    # What ksmith's own loaders will read later: the problem must load and the seed must be a candidate.
    load_problem(problem)
    check_candidate_source(seed.read_text(encoding="utf-8"), seed)
    return Imported(problem, seed, ex)


def read_provenance(problem_source: str, where: str) -> dict:
    """``KSMITH_UPSTREAM`` of a problem written by ``ksmith import``."""
    try:
        tree = ast.parse(problem_source)
    except SyntaxError as exc:
        raise UpstreamError(f"{where}: the problem does not parse") from exc
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "KSMITH_UPSTREAM" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError as exc:
                raise UpstreamError(f"{where}: KSMITH_UPSTREAM is not a literal") from exc
            if isinstance(value, dict) and {"project", "file", "launcher", "sha256"} <= set(value):
                return value
    raise UpstreamError(f"{where}: the problem was not made by `ksmith import` (no KSMITH_UPSTREAM)")

"""``ksmith patch``: a run's best kernel, written back into the upstream module it came from.

The codemod (libcst) keeps the public launcher and its signature. What the evolved candidate changed (the
launcher, kernels, helpers) is added to the module under ``*_evolved`` names, together with a predicate over
the launcher's arguments that says which calls the run verified: the configuration the problem exercised
(its dtypes and the scalar settings). The launcher sends those calls to the evolved path and every other
call down upstream's original code, unchanged below it. Alongside the patch come a test in the upstream's
layout and style comparing the two paths over an edge-case sweep, a micro-benchmark, and ``PR.md``.
"""

from __future__ import annotations

import ast
import difflib
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ksmith_upstream.extract import Extraction, _defined_names, _reads, extract
from ksmith_upstream.importer import call_parameters, harness, read_provenance
from ksmith_upstream.recipes import Recipe, recipe_for
from ksmith_upstream.source import Project, UpstreamError, UpstreamSource, sha256_of
from ksmith_upstream.standalone import SLOWER_THAN, bench_cases

HARNESS_NAMES = frozenset({"ModelNew", "call"})
_code = cst.Module(body=[]).code_for_node


@dataclass
class RunFacts:
    """What the patch and PR.md take from a run."""

    run: str
    provenance: dict
    problem_source: str  # the problem as imported: upstream's code at import time
    source: str  # the best candidate's source
    candidate_id: str
    verdict: object
    evaluations: int
    proposer: str
    versions: dict


def load_run(run: str) -> RunFacts:
    from ksmith_core.store import resolve_run

    run_dir = resolve_run(run)
    try:
        return _load_run(run, run_dir)
    except OSError as exc:  # a run directory copied without its files
        raise UpstreamError(f"run {run} is incomplete: {exc.filename or exc} is missing") from None


def _load_run(run: str, run_dir: Path) -> RunFacts:
    from ksmith_core.store import RunStore

    with RunStore.open(run_dir) as store:
        problem_source = store.problem_path.read_text(encoding="utf-8")
        provenance = read_provenance(problem_source, f"run {run}")
        best = store.best()
        if best is None or not best[1].correct:
            raise UpstreamError(f"run {run} has no correct candidate; there is nothing to patch")
        candidate, verdict = best
        meta = store.meta()
        manifest = store.manifest()
        return RunFacts(
            run=run_dir.name,
            provenance=provenance,
            problem_source=problem_source,
            source=candidate.source,
            candidate_id=candidate.id,
            verdict=verdict,
            evaluations=store.count_evaluations(),
            proposer=str(meta.get("config", {}).get("proposer") or "mutate"),
            versions=dict(manifest.get("versions", {})),
        )


# ---------------------------------------------------------------------------------------------------------------
# The codemod
# ---------------------------------------------------------------------------------------------------------------


def _private(name: str) -> str:
    return name if name.startswith("_") else "_" + name


class _Rename(cst.CSTTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return (
            updated.with_changes(value=self.names[updated.value]) if updated.value in self.names else updated
        )

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)  # only the object of ``a.b`` may be renamed

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)


class _SingleQuotes(cst.CSTTransformer):
    """LMDeploy's pre-commit runs double-quote-string-fixer: plain strings use single quotes."""

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.SimpleString:
        value = updated.value
        prefix = value[: len(value) - len(value.lstrip("rbuRBU"))]
        body = value[len(prefix) :]
        if body.startswith('"') and not body.startswith('"""') and "'" not in body and "\\" not in body:
            return updated.with_changes(value=prefix + "'" + body[1:-1] + "'")
        return updated


@dataclass
class Codemod:
    new_module: str
    evolved_launcher: str
    applies_fn: str
    changed: list[str]  # upstream names whose evolved versions were added
    fast_case: dict  # the sweep case the generated test checks takes the fast path (inside any size gate)
    gate: SizeGate | None = None


def _check_harness(cand: cst.Module, ex: Extraction, recipe: Recipe) -> None:
    """The candidate's ``ModelNew`` and ``call`` must be the seed's: the patch carries only the upstream code."""
    expected = {"ModelNew": harness(recipe, ex, "ModelNew"), "call": recipe.call}
    for stmt in cand.body:
        if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)) and stmt.name.value in expected:
            want = ast.dump(ast.parse(textwrap.dedent(expected.pop(stmt.name.value))))
            if ast.dump(ast.parse(_code(stmt))) != want:
                raise UpstreamError(
                    f"the run's best candidate changed the problem harness ({stmt.name.value}), which a patch "
                    f"cannot carry upstream; only changes to {ex.launcher} and what it calls can be patched"
                )
    if expected:
        raise UpstreamError(
            f"the run's best candidate has no {' or '.join(expected)}; it is not from this import"
        )


def _docstring(text: str) -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine([cst.Expr(cst.SimpleString(f'"""{text}"""'))])


def codemod(
    ex: Extraction,
    recipe: Recipe,
    candidate_source: str,
    sizes: dict,
    baseline: str | None = None,
    gate: SizeGate | None = None,
) -> Codemod:
    """Add what ``candidate_source`` changed to the launcher's module, behind the dispatch predicate (the
    recipe's conditions, and the measured size range of ``gate`` when given).

    "Changed" is measured against ``baseline``, the upstream code as imported (the run's problem file), so that
    with ``--rebase`` only the evolved definitions are carried and everything else stays the new upstream's.
    """
    try:
        cand = cst.parse_module(candidate_source)
    except cst.ParserSyntaxError as exc:
        raise UpstreamError("the run's best candidate does not parse") from exc
    upstream_code = {n: _code(d.node).strip() for d in ex.definitions for n in d.names}
    if baseline is not None:
        upstream_code = {
            n: _code(stmt).strip() for stmt in cst.parse_module(baseline).body for n in _defined_names(stmt)
        }
    module_tree = cst.parse_module(ex.file.read_text(encoding="utf-8"))
    module_bound = {n for stmt in module_tree.body for n in _defined_names(stmt)}
    cand_imports: dict[str, str] = {}
    stmts: list[tuple[tuple[str, ...], cst.CSTNode]] = []
    for stmt in cand.body:
        if isinstance(stmt, cst.SimpleStatementLine) and isinstance(
            stmt.body[0], (cst.Import, cst.ImportFrom)
        ):
            for small in stmt.body:
                for alias in small.names if not isinstance(small.names, cst.ImportStar) else []:
                    bound = alias.asname.name if alias.asname else alias.name
                    key = _code(bound).split(".")[0]
                    cand_imports[key] = _code(cst.SimpleStatementLine([small])).strip()
            continue
        names = tuple(_defined_names(stmt))
        if not names or set(names) & HARNESS_NAMES or any(n.startswith("KSMITH_") for n in names):
            continue
        stmts.append((names, stmt))
    for stmt in module_tree.body:
        if isinstance(stmt, cst.SimpleStatementLine) and isinstance(
            stmt.body[0], (cst.Import, cst.ImportFrom)
        ):
            for small in stmt.body:
                for alias in small.names if not isinstance(small.names, cst.ImportStar) else []:
                    module_bound.add(_code(alias.asname.name if alias.asname else alias.name).split(".")[0])

    _check_harness(cand, ex, recipe)
    by_name = {n: (names, stmt) for names, stmt in stmts for n in names}
    if ex.launcher not in by_name or not isinstance(by_name[ex.launcher][1], cst.FunctionDef):
        raise UpstreamError(f"the run's best candidate defines no {ex.launcher}; cannot map it back upstream")
    launcher_node = by_name[ex.launcher][1]
    if _code(launcher_node.params) != _code(ex.function.params):
        raise UpstreamError(
            f"the evolved {ex.launcher} changed its signature; the patch must keep upstream's"
        )

    reachable = {
        ex.launcher
    }  # what the launcher uses, transitively; anything else the candidate holds is dead
    frontier = [ex.launcher]
    while frontier:
        for read in _reads(by_name[frontier.pop()][1]):
            if read in by_name and read not in reachable:
                reachable.add(read)
                frontier.append(read)
    changed = {
        n
        for names, stmt in stmts
        for n in names
        if upstream_code.get(n) != _code(stmt).strip() and n in reachable
    }
    if not changed:
        raise UpstreamError(
            f"the run's best candidate is upstream's {ex.launcher} unchanged; there is nothing to patch"
        )
    included = set(changed)
    grew = True
    while grew:  # whatever reads an included definition is included too, up to the launcher
        grew = False
        for names, stmt in stmts:
            if not set(names) <= included and _reads(stmt) & included and set(names) & reachable:
                included.update(names)
                grew = True
    if ex.launcher not in included:
        raise UpstreamError(
            f"what the candidate changed is not used by {ex.launcher}; there is nothing to patch"
        )

    renames = {}
    for name in sorted(included):
        if name == ex.launcher or name in module_bound:
            renames[name] = _private(name) + "_evolved"
    evolved_launcher = renames[ex.launcher]
    added: list[cst.CSTNode] = []
    needed_imports: list[str] = []
    for names, stmt in stmts:
        if not set(names) & included:
            continue
        node = stmt.visit(_Rename(renames))
        if isinstance(node, cst.FunctionDef) and names == (ex.launcher,):
            doc = f"Evolved fast path of ``{ex.launcher}``.\n\n    Called only for inputs ``{applies_name(ex)}`` accepts.\n    "
            body = list(node.body.body)
            if (
                body
                and isinstance(body[0], cst.SimpleStatementLine)
                and isinstance(body[0].body[0], cst.Expr)
            ):
                if isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
                    body = body[1:]
            node = node.with_changes(body=node.body.with_changes(body=[_docstring(doc), *body]))
        for read in sorted(_reads(node)):
            if read in cand_imports and read not in module_bound and cand_imports[read] not in needed_imports:
                needed_imports.append(cand_imports[read])
        added.append(node)

    params = ex.parameters()
    conditions = [c.format(**sizes) for c in recipe.applies] + (gate.conditions() if gate else [])
    used = set().union(*(_reads(cst.parse_expression(c)) for c in conditions)) if conditions else set()
    applies_params = [p for p in params if p in used]
    applies_src = (
        f"def {applies_name(ex)}({', '.join(applies_params)}):\n"
        f'    """Whether a call is one the evolved kernel was verified on; others take the original path."""\n'
        f"    return (\n        " + "\n        and ".join(conditions) + "\n    )\n"
    )
    added.append(cst.parse_statement(applies_src))
    project = ex.source.project
    added_code = "\n\n".join(_code(n) for n in added)
    added = list(cst.parse_module(format_snippet(project, added_code)).body)
    call_src = (
        f"if {applies_name(ex)}({', '.join(f'{p}={p}' for p in applies_params)}):\n"
        f"    return {evolved_launcher}({', '.join(f'{p}={p}' for p in params)})\n"
    )
    dispatch = cst.parse_statement(format_snippet(project, call_src, indent=4))

    class Insert(cst.CSTTransformer):
        def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
            body = list(updated.body)
            index = next(
                i
                for i, s in enumerate(body)
                if isinstance(s, cst.FunctionDef) and s.name.value == ex.launcher
            )
            public = body[index]
            inner = list(public.body.body)
            at = (
                1
                if inner and isinstance(inner[0], cst.SimpleStatementLine) and _is_docstring(inner[0])
                else 0
            )
            inner.insert(at, dispatch)
            body[index] = public.with_changes(body=public.body.with_changes(body=inner))
            spaced = [n.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]) for n in added]
            body[index:index] = spaced
            if needed_imports:
                last = max(
                    i
                    for i, s in enumerate(body)
                    if isinstance(s, cst.SimpleStatementLine)
                    and isinstance(s.body[0], (cst.Import, cst.ImportFrom))
                )
                body[last + 1 : last + 1] = [cst.parse_statement(line + "\n") for line in needed_imports]
            return updated.with_changes(body=body)

    new = module_tree.visit(Insert())
    admitted = [case for case in _cases(recipe, sizes) if gate is None or gate.admits(case)]
    if not admitted:
        raise UpstreamError(
            f"no case of {ex.launcher}'s test sweep lies inside the size gate ({gate.describe()})"
        )
    changed_names = sorted(n for n in changed)
    return Codemod(new.code, evolved_launcher, applies_name(ex), changed_names, admitted[-1], gate)


def _is_docstring(stmt: cst.SimpleStatementLine) -> bool:
    first = stmt.body[0]
    return isinstance(first, cst.Expr) and isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString))


def applies_name(ex: Extraction) -> str:
    return _private(ex.launcher) + "_evolved_applies"


# ---------------------------------------------------------------------------------------------------------------
# Formatting as upstream's pre-commit would
# ---------------------------------------------------------------------------------------------------------------


# How each project's sources are formatted. SGLang 0.5.23's kernel modules are stable under ``ruff format`` at
# 88 columns (black 24 and 26 both rewrite some of them), LMDeploy runs ruff at 120 columns with single quotes.
STYLE = {"sglang": (88, "double"), "lmdeploy": (120, "single")}


def _ruff(args: list[str], code: str) -> str | None:
    cmd = [sys.executable, "-m", "ruff", *args, "--isolated", "-"]
    try:
        proc = subprocess.run(cmd, input=code, capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def format_snippet(project: Project, code: str, indent: int = 0) -> str:
    """Code the codemod adds, formatted as the project's sources are; upstream's own lines are not touched.

    Without ruff the code is left as written (LMDeploy's quotes are still made single) and ``formatting_note``
    says so.
    """
    width, quotes = STYLE[project.name]
    if quotes == "single":
        code = cst.parse_module(code).visit(_SingleQuotes()).code
    args = ["format", "--line-length", str(width - indent), "--config", f"format.quote-style='{quotes}'"]
    return _ruff(args, code) or code


def format_file(project: Project, code: str) -> str:
    """A new file (test, benchmark): imports sorted with the package first-party, then formatted."""
    width, _ = STYLE[project.name]
    args = ["check", "--select", "I", "--fix", "--line-length", str(width)]
    args += ["--config", f"lint.isort.known-first-party=['{project.name}']"]
    return format_snippet(project, _ruff(args, code) or code)


def formatting_note(project: Project) -> str:
    width, quotes = STYLE[project.name]
    if _ruff(["format"], "x = 1\n") is None:
        return "not formatted: ruff is not installed where the patch was made; run the project's pre-commit"
    return f"added code formatted with ruff format ({width} columns, {quotes} quotes); upstream lines are untouched"


# ---------------------------------------------------------------------------------------------------------------
# Generated test, benchmark, PR.md
# ---------------------------------------------------------------------------------------------------------------


def _tolerances(recipe: Recipe) -> dict[str, tuple[float, float]]:
    """(atol, rtol) per floating dtype: ksmith's defaults, then the recipe's."""
    table = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)}
    table.update({k: (float(v[0]), float(v[1])) for k, v in recipe.tolerances.items()})
    return table


def _cases(recipe: Recipe, sizes: dict) -> list[dict]:
    cases = [{**sizes, **case} for case in recipe.cases]
    return [*cases, dict(sizes)] if dict(sizes) not in cases else cases


def _fast_case(mod: Codemod) -> str:
    """The generated test's fast-path case: the sweep's last (cut with it by a short CPU check), or, behind a
    size gate, the last case inside the gate, written out."""
    return "CASES[-1]" if mod.gate is None else repr(mod.fast_case)


def _module_import(ex: Extraction) -> tuple[str, str]:
    package, _, leaf = ex.module.rpartition(".")
    return f"from {package} import {leaf}", leaf


def _shared(recipe: Recipe) -> str:
    return recipe.make_inputs.strip("\n") + "\n\n\n" + recipe.call.strip("\n") + "\n"


def render_sglang_test(ex: Extraction, recipe: Recipe, sizes: dict, mod: Codemod) -> str:
    import_line, leaf = _module_import(ex)
    tensors, config = call_parameters(recipe), list(recipe.config)
    cls = "Test" + "".join(p.title() for p in ex.launcher.split("_")) + "Evolved"
    tolerances = _tolerances(recipe)
    return f'''import unittest
from unittest import mock

import torch

{import_line}
from sglang.test.ci.ci_register import register_cuda_ci
from sglang.test.test_utils import CustomTestCase

register_cuda_ci(est_time=30, suite="stage-b-test-small-1-gpu")

CONFIG = {config!r}
CASES = {_cases(recipe, sizes)!r}
FAST_CASE = {_fast_case(mod)}
TOLERANCES = {tolerances!r}


{_shared(recipe)}

def original_path(*args, **kwargs):
    """Upstream's original code path, with the evolved fast path switched off."""
    with mock.patch.object({leaf}, "{mod.applies_fn}", return_value=False):
        return {leaf}.{ex.launcher}(*args, **kwargs)


class {cls}(CustomTestCase):
    def _inputs(self, case):
        torch.manual_seed(0)
        sizes = {{k: case[k] for k in case}}
        inputs = [t.to("cuda") for t in make_inputs(**sizes)]
        return inputs, {{k: case[k] for k in CONFIG}}

    def test_matches_original_path(self):
        for case in CASES:
            with self.subTest(**case):
                inputs, config = self._inputs(case)
                expected = call(original_path, *inputs, **config)
                got = call({leaf}.{ex.launcher}, *inputs, **config)
                for want, have in zip(expected, got):
                    if want.is_floating_point():
                        atol, rtol = TOLERANCES[str(want.dtype).removeprefix("torch.")]
                        torch.testing.assert_close(have, want, atol=atol, rtol=rtol)
                    else:
                        self.assertTrue(torch.equal(have, want))

    def test_fast_path_taken(self):
        inputs, config = self._inputs(FAST_CASE)
        fast = {leaf}.{mod.evolved_launcher}
        with mock.patch.object({leaf}, "{mod.evolved_launcher}", wraps=fast) as spy:
            call({leaf}.{ex.launcher}, *inputs, **config)
        spy.assert_called_once()


if __name__ == "__main__":
    unittest.main(verbosity=3)
'''.replace("{tensors}", ", ".join(tensors))


def render_lmdeploy_test(ex: Extraction, recipe: Recipe, sizes: dict, mod: Codemod) -> str:
    import_line, leaf = _module_import(ex)
    cls = "Test" + "".join(p.title() for p in ex.launcher.split("_")) + "Evolved"
    tolerances = _tolerances(recipe)
    body = f'''# Copyright (c) OpenMMLab. All rights reserved.
from unittest import mock

import pytest
import torch

{import_line}

CONFIG = {list(recipe.config)!r}
CASES = {_cases(recipe, sizes)!r}
FAST_CASE = {_fast_case(mod)}
TOLERANCES = {tolerances!r}


{_shared(recipe)}

def _original_path(*args, **kwargs):
    """Upstream's original code path, with the evolved fast path switched off."""
    with mock.patch.object({leaf}, '{mod.applies_fn}', return_value=False):
        return {leaf}.{ex.launcher}(*args, **kwargs)


class {cls}:

    @pytest.fixture
    def device(self):
        yield 'cuda'

    @pytest.mark.parametrize('case', CASES)
    def test_matches_original_path(self, case, device):
        torch.manual_seed(0)
        inputs = [t.to(device) for t in make_inputs(**case)]
        config = {{k: case[k] for k in CONFIG}}
        expected = call(_original_path, *inputs, **config)
        got = call({leaf}.{ex.launcher}, *inputs, **config)
        for want, have in zip(expected, got):
            if want.is_floating_point():
                atol, rtol = TOLERANCES[str(want.dtype).removeprefix('torch.')]
                torch.testing.assert_close(have, want, atol=atol, rtol=rtol)
            else:
                torch.testing.assert_close(have, want, atol=0, rtol=0)

    def test_fast_path_taken(self, device):
        case = FAST_CASE
        inputs = [t.to(device) for t in make_inputs(**case)]
        fast = {leaf}.{mod.evolved_launcher}
        with mock.patch.object({leaf}, '{mod.evolved_launcher}', wraps=fast) as spy:
            call({leaf}.{ex.launcher}, *inputs, **{{k: case[k] for k in CONFIG}})
        spy.assert_called_once()
'''
    return body


def render_bench(ex: Extraction, recipe: Recipe, sizes: dict, mod: Codemod) -> str:
    import_line, leaf = _module_import(ex)
    return f'''"""Micro-benchmark: upstream's original {ex.launcher} path against the evolved fast path.

Run on a GPU: python {bench_name(ex)}
"""

from unittest import mock

import torch
import triton.testing

{import_line}

CONFIG = {list(recipe.config)!r}
CASES = {_cases(recipe, sizes)!r}


{_shared(recipe)}

def gpu_time(fn):
    """The GPU time of one call, from a CUDA graph of it (the launcher's Python cost, which a decode step's
    graph leaves out, is not counted); do_bench's time with the launch where the call cannot be captured."""
    try:
        return triton.testing.do_bench_cudagraph(fn), ""
    except Exception:  # a host synchronisation in the call: no graph
        torch.cuda.synchronize()
        return triton.testing.do_bench(fn), " (with launch: no CUDA graph)"


def main():
    timings = []
    for case in CASES:
        torch.manual_seed(0)
        inputs = [t.to("cuda") for t in make_inputs(**case)]
        config = {{k: case[k] for k in CONFIG}}
        run = lambda: call({leaf}.{ex.launcher}, *inputs, **config)  # noqa: E731
        with mock.patch.object({leaf}, "{mod.applies_fn}", return_value=False):
            before, note = gpu_time(run)
            before_launch = triton.testing.do_bench(run)
        fast = {leaf}.{mod.evolved_launcher}
        with mock.patch.object({leaf}, "{mod.evolved_launcher}", wraps=fast) as spy:
            run()
        after, note_after = gpu_time(run)
        after_launch = triton.testing.do_bench(run)
        # Where the patch keeps upstream's path, both columns time the same code.
        path = "" if spy.called else " [upstream path]"
        label = ", ".join(f"{{k}}={{v}}" for k, v in case.items()) + path + (note or note_after)
        timings.append((label, before, after, before_launch, after_launch))
    print("GPU time per call")
    print(f"{{'case':<60}} {{'original (us)':>14}} {{'evolved (us)':>13}} {{'speedup':>8}}")
    for label, before, after, _, _ in timings:
        print(f"{{label:<60}} {{before * 1e3:>14.2f}} {{after * 1e3:>13.2f}} {{before / after:>7.2f}}x")
    print()
    print("Time per call with the launch (triton.testing.do_bench)")
    for label, _, _, before, after in timings:
        print(f"{{label:<60}} {{before * 1e3:>14.2f}} {{after * 1e3:>13.2f}} {{before / after:>7.2f}}x launch")


if __name__ == "__main__":
    main()
'''


def bench_name(ex: Extraction) -> str:
    return f"bench_{ex.launcher}_evolved.py"


def new_file_paths(ex: Extraction) -> tuple[str, str | None]:
    """Where the generated test (and, for SGLang, the benchmark) go in the upstream repository."""
    if ex.source.project.name == "sglang":
        parts = ex.module.split(".")
        group = parts[3] if parts[:3] == ["sglang", "kernels", "ops"] and len(parts) > 4 else parts[-2]
        return (
            f"test/registered/kernels/ops/{group}/test_{ex.launcher}_evolved.py",
            f"test/registered/kernels/benchmark/{group}/{bench_name(ex)}",
        )
    return f"tests/pytorch/kernel/test_{ex.launcher}_evolved.py", None


def unified_diff(path: str, before: str | None, after: str) -> str:
    """One file's diff in git's format (``before=None`` for a new file)."""
    old = [] if before is None else before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    head = f"diff --git a/{path} b/{path}\n"
    if before is None:
        head += "new file mode 100644\n"
    lines = list(
        difflib.unified_diff(old, new, "/dev/null" if before is None else f"a/{path}", f"b/{path}", n=3)
    )
    out = []
    for line in lines:
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return head + "".join(out)


def _ms(stats) -> str:
    return "-" if stats is None else f"{stats.median_ms * 1e3:.1f}"


def render_pr(project: Project, ex: Extraction, facts: RunFacts, mod: Codemod, fmt_note: str, paths) -> str:
    v = facts.verdict
    sizes = facts.provenance.get("sizes", {})
    shape = ", ".join(f"{k}={val}" for k, val in sizes.items())
    size_used = (v.details or {}).get("size", "full")
    if size_used == "small":
        shape += " (evaluated at the problem's small CPU sizes)"
    device = (v.details or {}).get("device_name") or v.device
    torch_v, triton_v = facts.versions.get("torch", "?"), facts.versions.get("triton", "?")
    table = (
        "| GPU | torch / triton | shapes | upstream (us) | evolved (us) | speedup |\n"
        "|---|---|---|---|---|---|\n"
        f"| {device} | {torch_v} / {triton_v} | {shape} | {_ms(v.reference_eager)} | {_ms(v.runtime)} | "
        f"{v.speedup:.2f}x |"
        if v.speedup is not None
        else ""
    )
    warning = ""
    if v.interpreted or v.device == "cpu":
        warning = (
            "\n> **These timings come from the Triton interpreter on CPU and say nothing about GPU speed.** "
            "Run the benchmark below on a GPU and replace this table before opening the PR.\n"
        )
    changed = ", ".join(f"`{n}`" for n in mod.changed)
    conditions = "\n".join(
        f"  - `{c}`" for c in _conditions(ex, facts) + (mod.gate.conditions() if mod.gate else [])
    )
    if mod.gate:
        conditions += (
            f"\n\n  The size range comes from the GPU benchmark of the ungated patch: the fast path runs for "
            f"{mod.gate.describe()}."
        )
        if mod.gate.measured:
            table += (
                "\n\nPer shape, from the micro-benchmark of the ungated patch (each call's GPU time in a CUDA "
                "graph):\n\n" + mod.gate.per_shape_table()
            )
        if mod.gate.size in sizes and not mod.gate.admits(sizes):
            warning += (
                f"\n> **The shape in this table ({mod.gate.size}={sizes[mod.gate.size]}) lies outside the size gate:** "
                "there the patch keeps upstream's path, so this speedup is not what the patch delivers at it.\n"
            )
    test_path, bench_path = paths
    how = (
        f"The kernel was produced by ksmith, an automated evolutionary search over Triton kernels "
        f"(proposer: {facts.proposer}), starting from upstream's `{ex.launcher}` unchanged. The run evaluated "
        f"{facts.evaluations} candidates; each was checked against upstream's kernel on fresh random inputs "
        f"(integer outputs compared exactly) before it was timed. The selected candidate is `{facts.candidate_id}` "
        f"of run `{facts.run}`. A person should review the diff as they would any contribution."
    )
    bench_cmd = (
        f"python {bench_path}" if bench_path else f"python {bench_name(ex)}  (shipped beside this PR.md)"
    )
    mods = (
        f"- `{ex.repo_path}`: adds `{mod.evolved_launcher}` (evolved: {changed}) and "
        f"`{mod.applies_fn}`. `{ex.launcher}` keeps its signature; it takes the evolved path only when:\n"
        f"{conditions}\n"
        "  Every other call runs upstream's original code, unchanged.\n"
        f"- `{test_path}`: compares the evolved path with the original path over an edge-case sweep "
        "(integer outputs exactly)."
    )
    if bench_path:
        mods += f"\n- `{bench_path}`: micro-benchmark of both paths."
    if project.name == "sglang":
        return f"""# [Perf] Faster `{ex.launcher}` Triton kernel

## Motivation

`{ex.launcher}` (`{ex.repo_path}`, kernels: {", ".join(f"`{k}`" for k in ex.kernels)}) is on the hot path.
This PR adds a faster kernel for the configuration below and keeps the existing kernel as the fallback.

{how}

## Modifications

{mods}

## Accuracy Tests

`python3 {test_path}` compares against the original path ({fmt_note}).

## Speed Tests and Profiling
{warning}
{table}

Reproduce: `{bench_cmd}`.

## Checklist

- [ ] Format your code according to the [Format code with pre-commit](https://docs.sglang.io/developer_guide/contribution_guide.html#format-code-with-pre-commit).
- [x] Add unit tests according to the [Run and add unit tests](https://docs.sglang.io/developer_guide/contribution_guide.html#run-and-add-unit-tests).
- [ ] Update documentation according to [Write documentations](https://docs.sglang.io/developer_guide/contribution_guide.html#write-documentations).
- [ ] Provide accuracy and speed benchmark results according to [Test the accuracy](https://docs.sglang.io/developer_guide/contribution_guide.html#test-the-accuracy) and [Benchmark the speed](https://docs.sglang.io/developer_guide/contribution_guide.html#benchmark-the-speed).
"""
    return f"""## Motivation

`{ex.launcher}` (`{ex.repo_path}`, kernels: {", ".join(f"`{k}`" for k in ex.kernels)}) gets a faster kernel for
the configuration below; the existing kernel stays as the fallback.

{how}
{warning}
{table}

Reproduce: `{bench_cmd}`.

## Modification

{mods}

## BC-breaking (Optional)

None: the public function and its signature are unchanged.

## Use cases (Optional)

## Checklist

1. [ ] Pre-commit or other linting tools are used to fix the potential lint issues ({fmt_note}).
2. [x] The modification is covered by complete unit tests. `pytest {test_path}`
3. [ ] If the modification has a dependency on downstream projects of a newer version, this PR should be tested with all supported versions of downstream projects.
4. [ ] The documentation has been modified accordingly, like docstring or example tutorials.
"""


@dataclass(frozen=True)
class SizeGate:
    """The range of one size where the evolved path measured at least ``SLOWER_THAN`` of upstream's speed at
    every shape; calls outside it keep upstream's path. Bounds are measured sizes (``None``: open)."""

    size: str  # the recipe's size name: "num_tokens"
    expression: str  # the same size read from the launcher's arguments: "scores.shape[0]"
    low: float | None
    high: float | None
    slower: list[dict]  # the measured shapes it keeps on upstream's path for being slower
    measured: list[dict] = field(default_factory=list)  # every row of the benchmark it was read from

    def per_shape_table(self) -> str:
        """The benchmark's rows as a Markdown table, each marked with the path this patch takes there."""
        rows = [
            f"| {c['case']} | {c['original_us']:.2f} | {c['evolved_us']:.2f} | {c['speedup']:.2f}x | "
            f"{'evolved' if self.admits(_case_sizes(c['case'])) else 'upstream (unchanged)'} |"
            for c in self.measured
        ]
        return (
            "| shape | upstream (us) | evolved (us) | speedup | this patch runs |\n|---|---|---|---|---|\n"
            + "\n".join(rows)
        )

    def _bounds(self) -> list[str]:
        return [f"{op} {_number(v)}" for v, op in ((self.low, ">="), (self.high, "<=")) if v is not None]

    def conditions(self) -> list[str]:
        return [f"{self.expression} {bound}" for bound in self._bounds()]

    def admits(self, case: dict) -> bool:
        value = case[self.size]
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def describe(self) -> str:
        kept = " and ".join(f"{self.size} {bound}" for bound in self._bounds())
        slower = "; ".join(f"{c['case']}: {c['speedup']:.2f}x" for c in self.slower)
        return f"{kept} (upstream's path kept where the evolved one measured slower: {slower})"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _case_sizes(label: str) -> dict[str, float]:
    sizes = {}
    for part in label.split(" [", 1)[0].split(" (", 1)[0].split(","):  # the sizes before any marker
        key, _, value = part.strip().partition("=")
        try:
            sizes[key] = float(value)
        except ValueError:
            continue
    return sizes


def read_bench_cases(check: Path) -> list[dict]:
    """The per-shape rows of a patch's GPU benchmark: ``check.json`` as ``ksmith_upstream.standalone`` writes
    it (or that module's ``--json`` result)."""
    try:
        result = json.loads(check.read_text(encoding="utf-8"))
        bench = result["bench"]
        cases = bench.get("cases") or bench_cases(bench.get("output", ""))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UpstreamError(
            f"--gate-from {check}: not a check.json with a GPU benchmark (python -m ksmith_upstream.standalone "
            "OUT --device cuda writes one)"
        ) from None
    if not cases:
        raise UpstreamError(f"--gate-from {check}: its benchmark has no per-shape rows")
    return cases


def size_gate(recipe: Recipe, cases: list[dict], slower_than: float | None = None) -> SizeGate | None:
    """Where the evolved path may run, from measured per-shape speedups: the longest run of measured values of
    the recipe's gate size (the larger one on a tie: representative shapes are large) at which every shape
    kept at least ``slower_than`` of upstream's speed. ``None`` when no shape was slower."""
    threshold = SLOWER_THAN if slower_than is None else slower_than
    if recipe.gate is None:
        raise UpstreamError(f"the recipe for {recipe.launcher} names no size to gate the fast path on")
    size, expression = recipe.gate
    by_value: dict[float, list[dict]] = {}
    for case in cases:
        value = _case_sizes(case["case"]).get(size)
        if value is None:
            raise UpstreamError(f"--gate-from: the benchmark row {case['case']!r} does not give {size}")
        by_value.setdefault(value, []).append(case)
    values = sorted(by_value)
    fine = [all(c["speedup"] >= threshold for c in by_value[v]) for v in values]
    slower = [c for c in cases if c["speedup"] < threshold]
    if all(fine):
        return None
    runs: list[list[float]] = []
    current: list[float] = []
    for value, ok in zip(values, fine):
        if ok:
            current.append(value)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    if not runs:
        shown = "; ".join(f"{c['case']}: {c['speedup']:.2f}x" for c in slower)
        raise UpstreamError(f"the evolved path is slower than upstream at every measured shape ({shown})")
    best = max(runs, key=lambda run: (len(run), run[-1]))
    low = best[0] if best[0] != values[0] else None
    high = best[-1] if best[-1] != values[-1] else None
    return SizeGate(
        size, expression, low, high, slower, list(cases)
    )  # every slower shape lies outside the run


def _conditions(ex: Extraction, facts: RunFacts) -> list[str]:
    recipe = recipe_for(ex.source.project.name, ex.launcher)
    return [c.format(**facts.provenance.get("sizes", recipe.sizes)) for c in recipe.applies]


# ---------------------------------------------------------------------------------------------------------------


def locate(upstream: UpstreamSource, provenance: dict, rebase: bool) -> Extraction:
    """The launcher in ``upstream``, refusing sources that changed since the import unless ``rebase``.

    Every file the import drew from is checked (the launcher's module and the modules its helpers came from).
    """
    files = provenance.get("files") or {provenance["file"]: provenance["sha256"]}
    for repo_path, sha in files.items():
        file = upstream.root / repo_path.removeprefix(upstream.project.repo_prefix)
        if file.is_file() and sha256_of(file) == sha:
            continue
        if not rebase:
            state = "is gone from" if not file.is_file() else "changed in"
            raise UpstreamError(
                f"{repo_path} {state} {upstream.project.name} {upstream.version} since the import "
                "(sha256 differs); pass --rebase to re-apply the change to the new source"
            )
        return extract(upstream, provenance["launcher"])  # found anew by name: upstream moves files
    return extract(upstream, provenance["symbol"])


def write_patch(
    project: Project,
    run: str,
    upstream: UpstreamSource,
    out: Path,
    rebase: bool,
    gate_from: Path | None = None,
) -> list[Path]:
    """Write the patch, the upstream-style test and benchmark, ``PR.md`` and ``patch.json`` into ``out``.

    ``gate_from``: a ``check.json`` with the GPU benchmark of an earlier patch of the same run; the fast path
    is then limited to the measured size range where it was not slower (:func:`size_gate`)."""
    facts = load_run(run)
    if facts.provenance["project"] != project.name:
        raise UpstreamError(
            f"run {run} evolved a {facts.provenance['project']} kernel, not a {project.name} one"
        )
    ex = locate(upstream, facts.provenance, rebase)
    recipe = recipe_for(project.name, ex.launcher)
    sizes = facts.provenance.get("sizes", recipe.sizes)
    gate = size_gate(recipe, read_bench_cases(gate_from)) if gate_from is not None else None
    mod = codemod(ex, recipe, facts.source, sizes, baseline=facts.problem_source, gate=gate)
    new_code, fmt_note = mod.new_module, formatting_note(project)
    test_path, bench_path = new_file_paths(ex)
    if project.name == "sglang":
        test_code = format_file(project, render_sglang_test(ex, recipe, sizes, mod))
    else:
        test_code = format_file(project, render_lmdeploy_test(ex, recipe, sizes, mod))
    bench_code = format_file(project, render_bench(ex, recipe, sizes, mod))
    bench_path = bench_path or bench_name(ex)  # LMDeploy has no kernel benchmark tree: it ships beside PR.md
    files = {ex.repo_path: new_code, test_path: test_code, bench_path: bench_code}
    in_patch = [p for p in files if p != bench_name(ex)]
    diff = unified_diff(ex.repo_path, ex.file.read_text(encoding="utf-8"), new_code)
    diff += "".join(unified_diff(p, None, files[p]) for p in in_patch[1:])
    patch = out / f"{ex.launcher}.patch"
    patch.write_text(diff, encoding="utf-8")
    pr = out / "PR.md"
    shown = (test_path, bench_path if bench_path in in_patch else None)
    pr.write_text(render_pr(project, ex, facts, mod, fmt_note, shown), encoding="utf-8")
    written = [patch, pr]
    if bench_path not in in_patch:
        written.append(out / bench_path)
        (out / bench_path).write_text(bench_code, encoding="utf-8")
    for path, code in files.items():  # the files as patched, for review and for `ksmith_upstream.standalone`
        (out / "tree" / path).parent.mkdir(parents=True, exist_ok=True)
        (out / "tree" / path).write_text(code, encoding="utf-8")
    manifest = {
        "project": project.name,
        "version": upstream.version,
        "launcher": ex.launcher,
        "module": ex.module,
        "kernel_file": ex.repo_path,
        "test_file": test_path,
        "bench_file": bench_path,
        "run": facts.run,
        "candidate": facts.candidate_id,
        "gate": None if gate is None else {"conditions": gate.conditions(), "slower_shapes": gate.slower},
    }
    (out / "patch.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    written.append(out / "patch.json")
    return written

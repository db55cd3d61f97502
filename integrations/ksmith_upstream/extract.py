"""Find a Triton launcher by name in an upstream tree and lift it out with everything it needs.

The launcher is found by parsing (libcst), never by a fixed path: upstream moves files. What it needs is
followed name by name: module-level functions, classes and constants of its own module, and of other modules
of the same package reached through ``from .x import y`` or ``from sglang.x import y``. Imports of torch,
triton and the standard library are kept; anything else (a compiled extension, another package) makes the
kernel not extractable, said in one line.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from ksmith_upstream.source import UpstreamError, UpstreamSource, sha256_of

# Top-level packages an extracted kernel may import: what the GPU machine has besides the standard library.
ALLOWED_ROOTS = frozenset({"torch", "triton"}) | frozenset(sys.stdlib_module_names)


@dataclass
class Definition:
    """One top-level statement lifted from an upstream module."""

    module: str  # dotted module name
    index: int  # position in its module, to keep upstream's order
    node: cst.CSTNode
    names: tuple[str, ...]  # what the statement defines


@dataclass
class Extraction:
    """A launcher and its closure, ready to be written as standalone code."""

    source: UpstreamSource
    launcher: str
    module: str  # dotted module of the launcher
    file: Path  # the launcher's file on disk
    repo_path: str  # the launcher's file in the upstream repository layout
    function: cst.FunctionDef
    imports: list[str]  # import lines, deduplicated, sorted
    definitions: list[Definition]  # in dependency-then-upstream order
    kernels: list[str]  # the @triton.jit functions among the definitions
    files: dict[str, str] = field(default_factory=dict)  # repo path -> sha256 of every file drawn from

    @property
    def symbol(self) -> str:
        return f"{self.module}.{self.launcher}"

    @property
    def sha256(self) -> str:
        return self.files[self.repo_path]

    def code(self, extra_imports: tuple[str, ...] = ()) -> str:
        """The imports and definitions as one module body (no harness)."""
        empty = cst.Module(body=[])
        imports = sorted({*self.imports, *extra_imports}, key=lambda line: (line.startswith("from "), line))
        parts = ["\n".join(imports)]
        parts += [empty.code_for_node(d.node).strip("\n") for d in self.definitions]
        return "\n\n\n".join(parts) + "\n"

    def parameters(self) -> list[str]:
        """The launcher's parameter names, in order."""
        params = self.function.params
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        return [p.name.value for p in every]


def module_name(source: UpstreamSource, path: Path) -> str:
    rel = path.relative_to(source.root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_launcher(source: UpstreamSource, symbol: str) -> tuple[Path, str]:
    """The file defining ``symbol`` (``name``, or a dotted ``module.name`` suffix) at module level."""
    qualifier, _, name = symbol.replace(":", ".").rpartition(".")
    if not name.isidentifier():
        raise UpstreamError(f"{symbol!r} is not a function name")
    pkg = source.project.name
    qualifier = qualifier.removeprefix(pkg + ".") if qualifier != pkg else ""
    found = []
    for path in sorted(source.package_dir.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if f"def {name}(" not in text or "triton" not in text:
            continue
        module = module_name(source, path)
        if qualifier and not (module == f"{pkg}.{qualifier}" or module.endswith("." + qualifier)):
            continue
        tree = _parse(path)
        if any(isinstance(s, cst.FunctionDef) and s.name.value == name for s in tree.body):
            found.append((path, module))
    if not found:
        raise UpstreamError(f"no module-level function {symbol!r} in {source.project.name} {source.version}")
    if len(found) > 1:
        names = ", ".join(f"{m}.{name}" for _, m in found)
        raise UpstreamError(f"{symbol!r} is ambiguous in {source.project.name}: {names}; give the module too")
    return found[0][0], name


def extract(source: UpstreamSource, symbol: str) -> Extraction:
    path, name = find_launcher(source, symbol)
    walker = _Closure(source)
    module = module_name(source, path)
    walker.need(module, name)
    function = walker.modules[module].defs[name].node
    if not isinstance(function, cst.FunctionDef):
        raise UpstreamError(f"{symbol} is not a function")
    kernels = [n for d in walker.order for n in d.names if _is_triton_kernel(d.node)]
    if not kernels:
        raise UpstreamError(f"{module}.{name} launches no @triton.jit kernel; it is not a Triton launcher")
    files = {source.repo_path(p): sha256_of(p) for p in walker.files}
    return Extraction(
        source=source,
        launcher=name,
        module=module,
        file=path,
        repo_path=source.repo_path(path),
        function=function,
        imports=sorted(walker.imports, key=lambda line: (line.startswith("from "), line)),
        definitions=walker.order,
        kernels=kernels,
        files=files,
    )


# ---------------------------------------------------------------------------------------------------------------


def _parse(path: Path) -> cst.Module:
    try:
        return cst.parse_module(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, cst.ParserSyntaxError) as exc:
        raise UpstreamError(f"cannot parse {path}: {type(exc).__name__}") from exc


def _is_triton_kernel(node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.FunctionDef):
        return False
    for deco in node.decorators:
        expr = deco.decorator.func if isinstance(deco.decorator, cst.Call) else deco.decorator
        text = cst.Module(body=[]).code_for_node(expr)
        if text in ("triton.jit", "jit", "triton.autotune", "triton.heuristics"):
            return True
    return False


class _Names(cst.CSTVisitor):
    """Names a statement reads (attribute names, keyword names and parameter names excluded)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        for part in (node.annotation, node.default):
            if part is not None:
                part.visit(self)
        return False


def _reads(node: cst.CSTNode) -> set[str]:
    visitor = _Names()
    node.visit(visitor)
    return visitor.names


@dataclass
class _Import:
    line: str  # the import as one line of code, for external modules
    module: str | None  # the dotted module, for modules of the upstream package
    attr: str | None  # the imported name inside that module


@dataclass
class _Module:
    defs: dict[str, Definition]
    imports: dict[str, _Import]
    star: list[str] = field(default_factory=list)  # upstream modules imported with ``*``


def _defined_names(stmt: cst.CSTNode) -> list[str]:
    """Names a top-level statement binds; for ``if``/``try`` blocks, the names bound anywhere inside."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return [stmt.name.value]
    names: list[str] = []
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            targets = []
            if isinstance(small, cst.Assign):
                targets = [t.target for t in small.targets]
            elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                targets = [small.target]
            for target in targets:
                elements = target.elements if isinstance(target, cst.Tuple) else [target]
                for element in elements:
                    value = element.value if isinstance(element, cst.Element) else element
                    if isinstance(value, cst.Name):
                        names.append(value.value)
        return names
    if isinstance(stmt, (cst.If, cst.Try)):

        class Bound(cst.CSTVisitor):
            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                names.append(node.name.value)
                return False

            def visit_ClassDef(self, node: cst.ClassDef) -> bool:
                names.append(node.name.value)
                return False

            def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
                if isinstance(node.target, cst.Name):
                    names.append(node.target.value)

            def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
                bound = node.asname.name if node.asname else node.name
                if isinstance(bound, cst.Name):
                    names.append(bound.value)

        stmt.visit(Bound())
    return names


class _Closure:
    """Walks names from the launcher outwards, module by module."""

    def __init__(self, source: UpstreamSource) -> None:
        self.source = source
        self.modules: dict[str, _Module] = {}
        self.done: set[tuple[str, str]] = set()
        self.emitted: set[int] = set()
        self.order: list[Definition] = []
        self.imports: set[str] = set()
        self.files: list[Path] = []
        self.bound: dict[str, tuple[str, str]] = {}  # name in the output -> (its module, its code)

    def _load(self, module: str) -> _Module:
        if module in self.modules:
            return self.modules[module]
        rel = Path(*module.split("."))
        path = self.source.root / rel.with_suffix(".py")
        if not path.is_file():
            path = self.source.root / rel / "__init__.py"
        if not path.is_file():
            raise UpstreamError(f"module {module} is not in the {self.source.project.name} sources")
        tree = _parse(path)
        self.files.append(path)
        defs: dict[str, Definition] = {}
        imports: dict[str, _Import] = {}
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        star: list[str] = []
        for index, stmt in enumerate(tree.body):
            if isinstance(stmt, cst.SimpleStatementLine) and isinstance(
                stmt.body[0], (cst.Import, cst.ImportFrom)
            ):
                for small in stmt.body:
                    imports.update(self._imports_of(small, package, star))
                continue
            names = _defined_names(stmt)
            definition = Definition(module, index, stmt, tuple(names))
            for name in names:
                defs.setdefault(name, definition)
        loaded = _Module(defs, imports, star)
        self.modules[module] = loaded
        return loaded

    def _imports_of(self, small: cst.BaseSmallStatement, package: str, star: list[str]) -> dict[str, _Import]:
        code = cst.Module(body=[]).code_for_node
        out: dict[str, _Import] = {}
        pkg = self.source.project.name
        if isinstance(small, cst.Import):
            for alias in small.names:
                dotted = code(alias.name)
                bound = code(alias.asname.name) if alias.asname else dotted.split(".")[0]
                line = f"import {dotted}" + (f" as {bound}" if alias.asname else "")
                out[bound] = _Import(line, dotted if dotted.split(".")[0] == pkg else None, None)
            return out
        if not isinstance(small, cst.ImportFrom):
            return out
        level = len(small.relative)
        base = code(small.module) if small.module is not None else ""
        if level:
            parent = package.split(".")
            parent = parent[: len(parent) - (level - 1)] if level > 1 else parent
            base = ".".join([*parent, base] if base else parent)
        if isinstance(small.names, cst.ImportStar):
            if base.split(".")[0] == pkg:
                star.append(base)
            return out
        for alias in small.names:
            name = code(alias.name)
            bound = code(alias.asname.name) if alias.asname else name
            if base.split(".")[0] == pkg:
                out[bound] = _Import("", base, name)
            else:
                line = f"from {base} import {name}" + (f" as {bound}" if alias.asname else "")
                out[bound] = _Import(line, None, None)
        return out

    def need(self, module: str, name: str) -> None:
        if (module, name) in self.done:
            return
        self.done.add((module, name))
        loaded = self._load(module)
        if name in loaded.defs:
            definition = loaded.defs[name]
            if id(definition.node) in self.emitted:
                return
            code = cst.Module(body=[]).code_for_node(definition.node)
            for bound in definition.names:
                other = self.bound.get(bound)
                if other is not None and other[0] != module:
                    if other[1] == code:  # the same statement in two modules (``logger = ...``): keep one
                        self.emitted.add(id(definition.node))
                        return
                    raise UpstreamError(
                        f"{bound} is defined in both {other[0]} and {module}; cannot merge them"
                    )
                self.bound[bound] = (module, code)
            self.emitted.add(id(definition.node))
            for read in sorted(_reads(definition.node)):
                if read not in definition.names or isinstance(definition.node, (cst.If, cst.Try)):
                    self.need(module, read)
            self.order.append(definition)
            return
        if name in loaded.imports:
            imported = loaded.imports[name]
            if imported.module is None:
                root = imported.line.split()[1].split(".")[0]
                if root not in ALLOWED_ROOTS:
                    raise UpstreamError(
                        f"{module} needs {name!r} from {root}, which is neither torch, triton nor the standard "
                        "library; this kernel cannot be extracted standalone"
                    )
                self.imports.add(imported.line)
            elif imported.attr is None:
                raise UpstreamError(f"{module} uses module {imported.module} as a whole; cannot extract it")
            else:
                target = imported.module
                if self._is_module(f"{target}.{imported.attr}"):
                    raise UpstreamError(
                        f"{module} imports module {target}.{imported.attr}; cannot extract it"
                    )
                if imported.attr != name:
                    raise UpstreamError(
                        f"{module} imports {imported.attr} as {name}; renamed imports unsupported"
                    )
                self.need(target, imported.attr)
            return
        for other in loaded.star:
            if name in self._load(other).defs or name in self._load(other).imports:
                self.need(other, name)
                return
        # Anything else is a builtin or a local name of the statement that read it.

    def _is_module(self, dotted: str) -> bool:
        rel = Path(*dotted.split("."))
        return (self.source.root / rel.with_suffix(".py")).is_file() or (self.source.root / rel).is_dir()

"""What a ``load_inline`` call builds, read from the candidate's source without running it.

:func:`extract_extensions` finds every ``load_inline`` call with ``ast`` and resolves its arguments from
literals and the module's own constants (``cuda_source = \"\"\"...\"\"\"``, string concatenation, lists of
strings), which is how KernelBench's CUDA candidates are written. In the candidate's process the same
:class:`ExtensionSpec` is made from the call's real arguments (:meth:`ExtensionSpec.from_call`), and its
:attr:`~ExtensionSpec.key` finds the library built ahead for it. This module imports neither torch nor
anything of the harness: both sides use it.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any


class NativeSourceError(Exception):
    """The candidate's ``load_inline`` call cannot be read ahead or built as asked; the message says why."""


# load_inline's arguments, in its signature's order for the first three (the only ones read positionally).
POSITIONAL = ("name", "cpp_sources", "cuda_sources")
BUILD_ARGUMENTS = (
    "name",
    "cpp_sources",
    "cuda_sources",
    "functions",
    "extra_cflags",
    "extra_cuda_cflags",
    "extra_ldflags",
    "extra_include_paths",
    "with_cuda",
    "with_pytorch_error_handling",
    "no_implicit_headers",
)
# Accepted and ignored: how torch would log, where it would build, what it would keep.
IGNORED_ARGUMENTS = ("verbose", "build_directory", "keep_intermediates", "use_pch")
REFUSED_ARGUMENTS = {
    "sycl_sources": "SYCL sources are not built by the cuda backend",
    "extra_sycl_cflags": "SYCL sources are not built by the cuda backend",
    "with_sycl": "SYCL sources are not built by the cuda backend",
}


@dataclass(frozen=True)
class ExtensionSpec:
    """One extension to build: ``load_inline``'s arguments, normalised the way torch reads them."""

    name: str
    cpp_sources: tuple[str, ...]
    cuda_sources: tuple[str, ...] = ()
    functions: tuple[tuple[str, str], ...] | None = None  # name -> docstring, in order
    extra_cflags: tuple[str, ...] = ()
    extra_cuda_cflags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()
    extra_include_paths: tuple[str, ...] = ()
    with_cuda: bool | None = None
    with_pytorch_error_handling: bool = True
    no_implicit_headers: bool = False

    @property
    def key(self) -> str:
        """A hash of everything that changes the built library's code (the toolchain is added by the cache)."""
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def function_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.functions or ())

    @property
    def has_cuda(self) -> bool:
        return bool(self.cuda_sources) or bool(self.with_cuda)

    def load_inline_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.utils.cpp_extension.load_inline`` that build exactly this."""
        return {
            "name": self.name,
            "cpp_sources": list(self.cpp_sources),
            "cuda_sources": list(self.cuda_sources) or None,
            "functions": dict(self.functions) if self.functions is not None else None,
            "extra_cflags": list(self.extra_cflags),
            "extra_cuda_cflags": list(self.extra_cuda_cflags),
            "extra_ldflags": list(self.extra_ldflags),
            "extra_include_paths": list(self.extra_include_paths),
            "with_cuda": self.with_cuda,
            "with_pytorch_error_handling": self.with_pytorch_error_handling,
            "no_implicit_headers": self.no_implicit_headers,
        }

    @classmethod
    def from_call(cls, args: Sequence[Any], kwargs: Mapping[str, Any]) -> ExtensionSpec:
        """The spec of ``load_inline(*args, **kwargs)``; :class:`NativeSourceError` for what cannot be built."""
        if len(args) > len(POSITIONAL):
            raise NativeSourceError(
                f"load_inline takes {len(POSITIONAL)} positional arguments here "
                f"({', '.join(POSITIONAL)}); pass the others by keyword"
            )
        values = dict(zip(POSITIONAL, args))
        for key, value in kwargs.items():
            if key in values:
                raise NativeSourceError(f"load_inline got {key!r} twice")
            values[key] = value
        for key, why in REFUSED_ARGUMENTS.items():
            if values.get(key):
                raise NativeSourceError(f"load_inline argument {key}: {why}")
        if values.get("is_python_module", True) is not True:
            raise NativeSourceError(
                "load_inline(is_python_module=False) is not supported: build a Python module"
            )
        unknown = set(values) - set(BUILD_ARGUMENTS) - set(IGNORED_ARGUMENTS) - set(REFUSED_ARGUMENTS)
        unknown.discard("is_python_module")
        if unknown:
            raise NativeSourceError(f"load_inline got unknown argument(s) {', '.join(sorted(unknown))}")
        name = values.get("name")
        if not isinstance(name, str) or not name.isidentifier():
            raise NativeSourceError(f"load_inline name must be a Python identifier (got {name!r})")
        if "cpp_sources" not in values:
            raise NativeSourceError("load_inline needs cpp_sources")
        return cls(
            name=name,
            cpp_sources=_strings("cpp_sources", values.get("cpp_sources")),
            cuda_sources=_strings("cuda_sources", values.get("cuda_sources")),
            functions=_functions(values.get("functions")),
            extra_cflags=_strings("extra_cflags", values.get("extra_cflags")),
            extra_cuda_cflags=_strings("extra_cuda_cflags", values.get("extra_cuda_cflags")),
            extra_ldflags=_strings("extra_ldflags", values.get("extra_ldflags")),
            extra_include_paths=_strings("extra_include_paths", values.get("extra_include_paths")),
            with_cuda=_flag("with_cuda", values.get("with_cuda"), None),
            with_pytorch_error_handling=bool(
                _flag("with_pytorch_error_handling", values.get("with_pytorch_error_handling"), True)
            ),
            no_implicit_headers=bool(_flag("no_implicit_headers", values.get("no_implicit_headers"), False)),
        )


def _strings(what: str, value: Any) -> tuple[str, ...]:
    """A string or a list of strings, as torch accepts them (``None`` is none)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise NativeSourceError(f"load_inline argument {what} must be a string or a list of strings")


def _functions(value: Any) -> tuple[tuple[str, str], ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        pairs = tuple((v, v) for v in value)
    elif isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        pairs = tuple(value.items())
    else:
        raise NativeSourceError(
            "load_inline argument functions must be a list of names or a dict of docstrings"
        )
    for name, _ in pairs:
        if not name.isidentifier():
            raise NativeSourceError(f"load_inline functions: {name!r} is not a C++ function name")
    return pairs


def _flag(what: str, value: Any, default: bool | None) -> bool | None:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise NativeSourceError(f"load_inline argument {what} must be True or False")


# --------------------------------------------------------------------------------------------------------------
# Reading the calls from the source
# --------------------------------------------------------------------------------------------------------------


class _Unresolved(Exception):
    pass


def _resolve(node: ast.AST, names: Mapping[str, Any]) -> Any:
    """The value of a constant expression: literals, the module's constants, ``+`` of strings or lists,
    lists, tuples and dicts of those, f-strings without fields."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bool, int, float, type(None))):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in names:
            return names[node.id]
        raise _Unresolved(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_resolve(e, names) for e in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _Unresolved("**")
        return {_resolve(k, names): _resolve(v, names) for k, v in zip(node.keys, node.values)}  # type: ignore[arg-type]
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        return "".join(str(v.value) for v in node.values)  # type: ignore[attr-defined]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _resolve(node.left, names), _resolve(node.right, names)
        if type(left) is type(right) and isinstance(left, (str, list)):
            return left + right
    raise _Unresolved(ast.unparse(node)[:60])


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    """Module-level names bound to constant expressions, in order (a later binding replaces an earlier)."""
    names: dict[str, Any] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        else:
            continue
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            try:
                names[target.id] = _resolve(value, names)
            except _Unresolved:
                names.pop(target.id, None)
    return names


def _is_load_inline(func: ast.AST) -> bool:
    return (isinstance(func, ast.Name) and func.id == "load_inline") or (
        isinstance(func, ast.Attribute) and func.attr == "load_inline"
    )


def _is_load(func: ast.AST, imported_load: bool) -> bool:
    if isinstance(func, ast.Name):
        return func.id == "load" and imported_load
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "load"
        and isinstance(func.value, (ast.Name, ast.Attribute))
        and "cpp_extension" in ast.unparse(func.value)
    )


def extract_extensions(source: str) -> list[ExtensionSpec]:
    """Every extension the candidate builds with ``load_inline``, read from its source (without running it).

    Raises :class:`NativeSourceError` naming the call and argument that cannot be read ahead."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise NativeSourceError(f"line {exc.lineno}: {exc.msg}") from exc
    names = _module_constants(tree)
    imported_load = any(
        isinstance(node, ast.ImportFrom)
        and (node.module or "").endswith("cpp_extension")
        and any(alias.name == "load" for alias in node.names)
        for node in ast.walk(tree)
    )
    specs: dict[str, ExtensionSpec] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if _is_load(node.func, imported_load):
            raise NativeSourceError(
                f"line {node.lineno}: cpp_extension.load builds from files; write the sources inline with "
                "load_inline"
            )
        if not _is_load_inline(node.func):
            continue
        where = f"line {node.lineno}: load_inline"
        try:
            args = [_resolve(a, names) for a in node.args if not isinstance(a, ast.Starred)]
            if len(args) != len(node.args) or any(k.arg is None for k in node.keywords):
                raise NativeSourceError(f"{where} with *args or **kwargs cannot be read ahead")
            kwargs = {}
            for keyword in node.keywords:
                try:
                    kwargs[keyword.arg] = _resolve(keyword.value, names)
                except _Unresolved as exc:
                    raise NativeSourceError(
                        f"{where} argument {keyword.arg} ({exc}) is not a constant of the module; the "
                        "sources are built before the candidate runs, so write them as module-level strings"
                    ) from None
            spec = ExtensionSpec.from_call(args, kwargs)
        except _Unresolved as exc:
            raise NativeSourceError(
                f"{where}: a positional argument ({exc}) is not a constant of the module"
            ) from None
        except NativeSourceError as exc:
            message = str(exc)
            raise NativeSourceError(
                message if message.startswith("line ") else f"{where}: {message}"
            ) from None
        specs.setdefault(spec.key, spec)
    names_seen: dict[str, str] = {}
    for spec in specs.values():
        if names_seen.setdefault(spec.name, spec.key) != spec.key:
            raise NativeSourceError(f"two different load_inline calls name their extension {spec.name!r}")
    return list(specs.values())

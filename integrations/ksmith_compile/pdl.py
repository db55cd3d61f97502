"""A library entry's kernels made to launch with programmatic dependent launch (PDL), for CUDA graphs on Hopper+.

A decode step is some forty short kernels; between two of them the GPU idles while the second launches and
ramps up. With PDL (compute capability 9.0 and later) a kernel launched with the attribute may start while the
kernel before it still runs; it must wait (``griddepcontrol.wait``) before it touches memory the kernel before
may write, and a kernel says when its dependents may start (``griddepcontrol.launch_dependents``).

:func:`with_pdl` rewrites an entry's ``kernel.py`` so that every ``@triton.jit`` kernel it launches

- waits at its very start (``tl.extra.cuda.gdc_wait()``): nothing of the kernel runs before the kernel before it
  has finished and its writes are visible, so the result cannot change;
- then lets the next kernel launch (``tl.extra.cuda.gdc_launch_dependents()``): that one, if launched with PDL,
  waits the same way before it reads anything;

and every launch of those kernels passes ``launch_pdl=True``. Inductor launches a user kernel it traces
(``triton_op``) without PDL, so an entry rewritten this way is swapped as its opaque custom op, whose launches
are this code's; the backend does this only where CUDA graphs replay the step (``mode="reduce-overhead"``), where a
custom op's Python costs nothing, and turns on Inductor's own PDL (``triton.enable_pdl``) for the kernels around
it. docs/benchmarks.md §11h measures it.
"""

from __future__ import annotations

import libcst as cst

WAIT = "tl.extra.cuda.gdc_wait()"
LAUNCH_DEPENDENTS = "tl.extra.cuda.gdc_launch_dependents()"


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    if isinstance(node, cst.Call):
        return _dotted(node.func)
    return ""


def _is_jit(function: cst.FunctionDef) -> bool:
    return any(_dotted(d.decorator).rsplit(".", 1)[-1] == "jit" for d in function.decorators)


def _launched_kernel(call: cst.Call) -> str | None:
    """``name`` for a ``name[grid](...)`` call."""
    if isinstance(call.func, cst.Subscript) and isinstance(call.func.value, cst.Name):
        return call.func.value.value
    return None


def _binds_tl(module: cst.Module) -> bool:
    """Whether the module imports ``triton.language as tl`` (the statements added use that name)."""
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if _dotted(alias.name) == "triton.language" and alias.asname is not None:
                        if isinstance(alias.asname.name, cst.Name) and alias.asname.name.value == "tl":
                            return True
    return False


class _Launches(cst.CSTVisitor):
    def __init__(self, kernels: set[str]) -> None:
        self.kernels = kernels
        self.launched: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        name = _launched_kernel(node)
        if name in self.kernels:
            self.launched.add(name)


class _Rewrite(cst.CSTTransformer):
    def __init__(self, launched: set[str]) -> None:
        self.launched = launched

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if updated.name.value not in self.launched or not _is_jit(updated):
            return updated
        body = list(updated.body.body)
        first = 1 if body and _is_docstring(body[0]) else 0
        added = [cst.parse_statement(WAIT + "\n"), cst.parse_statement(LAUNCH_DEPENDENTS + "\n")]
        return updated.with_changes(
            body=updated.body.with_changes(body=[*body[:first], *added, *body[first:]])
        )

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if _launched_kernel(updated) not in self.launched:
            return updated
        if any(a.keyword is not None and a.keyword.value == "launch_pdl" for a in updated.args):
            return updated
        args = list(updated.args)
        if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        keyword = cst.Arg(
            keyword=cst.Name("launch_pdl"),
            value=cst.Name("True"),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
            ),
        )
        return updated.with_changes(args=[*args, keyword])


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def with_pdl(source: str) -> str | None:
    """``source`` with its launched kernels waiting at their start and launched with PDL, or None when it
    launches none of its own kernels (nothing to gain), already uses PDL, or cannot be rewritten safely."""
    if "gdc_wait" in source or "gdc_launch_dependents" in source or "launch_pdl" in source:
        return None  # written with PDL already: its own waits are its own business
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    if not _binds_tl(module):
        return None
    kernels = {
        node.name.value for node in _walk(module) if isinstance(node, cst.FunctionDef) and _is_jit(node)
    }
    launches = _Launches(kernels)
    module.visit(launches)
    if not launches.launched:
        return None
    return module.visit(_Rewrite(launches.launched)).code


def _walk(node: cst.CSTNode):
    yield node
    for child in node.children:
        yield from _walk(child)

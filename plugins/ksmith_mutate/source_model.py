"""Read a candidate's structure with libcst: its Triton kernels, their launch sites and what they tune.

Everything the mutate proposer edits is found here first: a *kernel* is a function decorated with
``triton.jit`` (or ``jit``); a *launch site* is a call ``kernel[grid](...)``, whose literal keyword arguments
(``BLOCK_SIZE=1024``, ``num_warps=4``, ...) are the tunables. Only literal integers are ever tuned: a value
computed in ``forward`` (``BLOCK_SIZE=block`` after ``block = triton.next_power_of_2(n)``) is left alone,
because the code that computed it knows something the proposer does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from ksmith_core.errors import CandidateError

# Constexpr names the proposer tunes as tile sizes: BLOCK_SIZE, BLOCK_M, BLOCK_SIZE_N, BLOCK_K, ...
# Hand-written names (BLOCK_SIZE, BLOCK_M, ...) and Inductor's (XBLOCK, YBLOCK, R0_BLOCK, RBLOCK).
BLOCK_NAME = re.compile(r"^(?:BLOCK(?:_SIZE)?(?:_[A-Z0-9]+)?|[XYZ]BLOCK|R\d?_?BLOCK)$")
# Dot-tile axes: the last letter of BLOCK_M / BLOCK_SIZE_N / BLOCK_K.
DOT_AXIS = re.compile(r"^BLOCK(?:_SIZE)?_([MNK])$")
GROUP_NAMES = ("GROUP_M", "GROUP_SIZE_M")
ROWS_NAMES = ("ROWS_PER_PROGRAM", "ROWS_PER_PROG", "BLOCK_ROWS")


def is_block_name(name: str) -> bool:
    """A tile-size constexpr (``BLOCK_ROWS`` is rows per program, a grid-shape tunable, not a tile)."""
    return bool(BLOCK_NAME.match(name)) and name not in ROWS_NAMES


class MutateSourceError(CandidateError):
    """A candidate source the mutate proposer cannot parse."""


@dataclass
class KernelDef:
    """A ``@triton.jit`` function and the facts about its body the edits need."""

    name: str
    node: cst.FunctionDef
    params: tuple[str, ...]
    constexpr_params: tuple[str, ...]
    uses_dot: bool
    autotuned: bool = False  # @triton.autotune picks num_warps / num_stages itself
    loads: list[cst.Call] = field(default_factory=list)
    stores: list[cst.Call] = field(default_factory=list)
    dots: list[cst.Call] = field(default_factory=list)


@dataclass
class LaunchSite:
    """One ``kernel[grid](...)`` call and the grid expressions it depends on."""

    kernel: str
    call: cst.Call
    grid_exprs: list[cst.BaseExpression]
    index: int  # order of appearance, for readable edit descriptions when a kernel is launched twice

    def keyword(self, name: str) -> cst.Arg | None:
        for arg in self.call.args:
            if arg.keyword is not None and arg.keyword.value == name:
                return arg
        return None

    def literal_ints(self) -> dict[str, int]:
        """Keyword arguments passed as plain integer literals."""
        found: dict[str, int] = {}
        for arg in self.call.args:
            if arg.keyword is not None and isinstance(arg.value, cst.Integer):
                found[arg.keyword.value] = int(arg.value.evaluated_value)
        return found


@dataclass
class SourceModel:
    module: cst.Module
    kernels: dict[str, KernelDef]
    launches: list[LaunchSite]

    def kernel_for(self, site: LaunchSite) -> KernelDef | None:
        return self.kernels.get(site.kernel)


def keyword_value(call: cst.Call, name: str) -> cst.BaseExpression | None:
    """The value passed for keyword ``name`` in ``call``, or ``None``."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def two_axis_grid(grid: cst.BaseExpression) -> cst.Tuple | None:
    """The pair a launch grid is: ``grid`` itself, or the body of a ``lambda`` returning it; None for any other
    grid (one of another length, a starred element)."""
    pair = grid.body if isinstance(grid, cst.Lambda) else grid
    if not isinstance(pair, cst.Tuple) or len(pair.elements) != 2:
        return None
    if any(isinstance(e, cst.StarredElement) for e in pair.elements):
        return None
    return pair


def launch_grid(call: cst.Call) -> cst.BaseExpression | None:
    """The grid of a launch ``kernel[grid](...)``; None where the call is not written so."""
    func = call.func
    if (
        isinstance(func, cst.Subscript)
        and len(func.slice) == 1
        and isinstance(func.slice[0].slice, cst.Index)
    ):
        return func.slice[0].slice.value
    return None


def with_launch_grid(call: cst.Call, grid: cst.BaseExpression) -> cst.Call:
    """The launch ``kernel[grid](...)`` with another grid (``call`` must have one: :func:`launch_grid`)."""
    func = call.func
    assert isinstance(func, cst.Subscript)
    return call.with_changes(
        func=func.with_changes(slice=[func.slice[0].with_changes(slice=cst.Index(grid))])
    )


def literal_axis(call: cst.Call) -> int | None:
    """The literal axis of ``tl.program_id(a)`` / ``tl.num_programs(axis=a)``; None where it is not one."""
    axis = keyword_value(call, "axis")
    if axis is None and call.args and call.args[0].keyword is None:
        axis = call.args[0].value
    return int(axis.evaluated_value) if isinstance(axis, cst.Integer) else None


def dotted_name(node: cst.BaseExpression) -> str:
    """``tl.load`` for ``Attribute(Name("tl"), "load")``; "" for anything that is not a dotted name."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr.value}" if base else ""
    return ""


def is_tl_call(node: cst.CSTNode, *names: str) -> bool:
    """A call of ``tl.<name>`` (or ``triton.language.<name>``) for one of ``names``."""
    if not isinstance(node, cst.Call):
        return False
    name = dotted_name(node.func)
    return any(name in (f"tl.{n}", f"triton.language.{n}") for n in names)


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node below it, depth first."""
    yield node
    for child in node.children:
        yield from walk(child)


def top_level_assignments(
    statements: list[cst.BaseStatement],
) -> Iterator[tuple[cst.SimpleStatementLine, str, cst.BaseExpression]]:
    """(line, name, value) of each one-target ``name = value`` among ``statements`` (a kernel's top level),
    in order."""
    for line in statements:
        if isinstance(line, cst.SimpleStatementLine):
            for small in line.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target = name_of(small.targets[0].target)
                    if target is not None:
                        yield line, target, small.value


def arange_width(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``width`` of ``tl.arange(0, width)``, indexed or not (``tl.arange(0, XBLOCK)[:, None]``)."""
    while isinstance(node, cst.Subscript):
        node = node.value
    if is_tl_call(node, "arange") and len(node.args) == 2:  # type: ignore[union-attr]
        start, width = node.args[0].value, node.args[1].value  # type: ignore[union-attr]
        if isinstance(start, cst.Integer) and int(start.evaluated_value) == 0:
            return width
    return None


def tight_equal() -> cst.AssignEqual:
    return cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    )


def with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with keyword ``name`` set to ``value``: replaced in place, or appended keeping the layout."""
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[i] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    new_arg = cst.Arg(value=value, keyword=cst.Name(name), equal=tight_equal())
    if args and isinstance(args[-1].comma, cst.Comma):
        # A trailing comma owns the whitespace before ")": hand it to the new last argument, and give the
        # old last argument the separator its neighbours use (a newline and indent in a multi-line call).
        last = args[-1]
        new_arg = new_arg.with_changes(comma=last.comma)
        separator = (
            args[-2].comma
            if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma)
            else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        )
        args[-1] = last.with_changes(comma=separator)
    args.append(new_arg)
    return call.with_changes(args=args)


def name_of(node: cst.CSTNode) -> str | None:
    """``x`` for the name ``x``; None for anything else."""
    return node.value if isinstance(node, cst.Name) else None


def assigned_values(body: cst.CSTNode) -> dict[str, list[cst.BaseExpression]]:
    """Every value assigned to each plain name below ``body`` (``=``, ``+=``, annotated), in order."""
    values: dict[str, list[cst.BaseExpression]] = {}
    for node in walk(body):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    values.setdefault(target.target.value, []).append(node.value)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            values.setdefault(node.target.value, []).append(node.value)  # type: ignore[arg-type]
    return values


def read_names(node: cst.CSTNode) -> list[str]:
    """The variables ``node`` reads, in order. An attribute's name (``tl`` of ``tl.load``) is read; its
    attribute (``load``) is not a variable."""
    attributes = {id(n.attr) for n in walk(node) if isinstance(n, cst.Attribute)}
    return [n.value for n in walk(node) if isinstance(n, cst.Name) and id(n) not in attributes]


def reads_and_writes(statement: cst.CSTNode) -> tuple[list[str], list[str]]:
    """Names read, then names written, by one simple statement (in the order Python evaluates them)."""
    if isinstance(statement, cst.Assign):
        targets = [n.value for t in statement.targets for n in walk(t.target) if isinstance(n, cst.Name)]
        return read_names(statement.value), targets
    if isinstance(statement, cst.AugAssign):
        target = read_names(statement.target)
        return target + read_names(statement.value), target
    if isinstance(statement, cst.AnnAssign):
        value = read_names(statement.value) if statement.value is not None else []
        return value, read_names(statement.target)
    return read_names(statement), []


def simple_statements(body: cst.CSTNode) -> list[cst.CSTNode] | None:
    """A loop body's small statements in order; ``None`` where it holds a compound statement (an ``if``
    or a nested loop, whose writes happen only sometimes)."""
    found: list[cst.CSTNode] = []
    for line in body.body:  # type: ignore[attr-defined]
        if not isinstance(line, cst.SimpleStatementLine):
            return None
        found.extend(line.body)
    return found


def read_after(names: set[str], after: list[cst.BaseStatement]) -> bool:
    """Whether code after a loop reads one of ``names`` before writing it: it would see the value of the
    last iteration, which an edit of the loop's order or shape changes. A write inside a compound statement may not happen, so it does
    not count, except for reads later in the same loop body."""
    pending = set(names)
    for statement in after:
        if not pending:
            return False
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                reads, writes = reads_and_writes(small)
                if pending & set(reads):
                    return True
                pending -= set(writes)
        elif isinstance(statement, cst.For) and simple_statements(statement.body) is not None:
            if pending & set(read_names(statement.iter)):
                return True
            inner = set(pending)
            for small in simple_statements(statement.body) or []:
                reads, writes = reads_and_writes(small)
                if inner & set(reads):
                    return True
                inner -= set(writes)
        elif pending & set(read_names(statement)):
            return True
    return False


def pointer_arg(call: cst.Call) -> cst.BaseExpression | None:
    """A ``tl.load`` / ``tl.store``'s address: the ``pointer=`` keyword or the first positional argument."""
    keyword = keyword_value(call, "pointer")
    if keyword is not None:
        return keyword
    positional = [arg for arg in call.args if arg.keyword is None]
    return positional[0].value if positional else None


def address_base(address: cst.BaseExpression) -> str | None:
    """The leftmost name of a sum, ``x_ptr`` in ``x_ptr + (r0_1 + 65535 * x0)``: where an address starts."""
    while isinstance(address, cst.BinaryOperation) and isinstance(address.operator, (cst.Add, cst.Subtract)):
        address = address.left
    return name_of(address)


def address_bases(node: cst.CSTNode, what: str) -> set[str]:
    """Where the addresses of the ``tl.<what>`` calls below ``node`` start."""
    found: set[str] = set()
    for call in walk(node):
        if is_tl_call(call, what):
            address = pointer_arg(call)  # type: ignore[arg-type]
            base = address_base(address) if address is not None else None
            if base is not None:
                found.add(base)
    return found


def has_other_effects(node: cst.CSTNode, helpers: set[str]) -> bool:
    """Whether ``node`` does more than plain loads and ``tl.store``: an atomic, a barrier, a call of a
    ``@triton.jit`` helper (``helpers``: their names) or a descriptor's store, whose order or place these
    checks cannot see."""
    for call in walk(node):
        if not isinstance(call, cst.Call):
            continue
        name = dotted_name(call.func)
        method = name.rsplit(".", 1)[-1]
        if name in helpers or method.startswith("atomic_") or method == "debug_barrier":
            return True
        if method == "store" and not is_tl_call(call, "store"):
            return True  # a descriptor's store: its address is not read here
    return False


def base_name(node: cst.BaseExpression) -> str | None:
    """``offs`` for ``offs[None, :]`` or ``offs``; None for anything else."""
    if isinstance(node, cst.Subscript):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def range_from_zero(loop: cst.For) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(stop, step) of ``for v in range(0, stop, step)`` or ``tl.range(0, stop, step)`` (positional
    arguments, a literal 0 start)."""
    it = loop.iter
    if not (
        isinstance(it, cst.Call) and dotted_name(it.func) in ("range", "tl.range", "triton.language.range")
    ):
        return None
    if len(it.args) != 3 or any(arg.keyword is not None for arg in it.args):
        return None
    start, stop, step = (arg.value for arg in it.args)
    if not (isinstance(start, cst.Integer) and int(start.evaluated_value) == 0):
        return None
    return stop, step


def arange_offsets(value: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(start, extent) of ``start + tl.arange(0, extent)``."""
    if (
        isinstance(value, cst.BinaryOperation)
        and isinstance(value.operator, cst.Add)
        and is_tl_call(value.right, "arange")
        and len(value.right.args) == 2
    ):
        return value.left, value.right.args[1].value
    return None


def same_code(a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Whether two expressions are written the same (``BLOCK_N`` and ``BLOCK_N``)."""
    code = cst.Module([]).code_for_node
    return code(a).strip() == code(b).strip()


def grouped(text: str) -> str:
    """An expression's code as one operand of a larger one: ``BLOCK`` or ``64`` as it is, ``2 * BLOCK`` in
    parentheses (pasted bare into ``n // 2 * BLOCK`` it would divide by 2 only)."""
    return text if text.isidentifier() or text.isdigit() else f"({text})"


def fresh_name(kernel_node: cst.CSTNode, base: str) -> str:
    """``base``, or ``base_2``, ``base_3``, ... where the kernel already uses that name."""
    taken = {node.value for node in walk(kernel_node) if isinstance(node, cst.Name)}
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def _decorator_name(decorator: cst.Decorator) -> str:
    target = decorator.decorator
    if isinstance(target, cst.Call):
        target = target.func
    return dotted_name(target)


def _is_jit(decorator: cst.Decorator) -> bool:
    return _decorator_name(decorator) in ("triton.jit", "jit")


def _is_constexpr(param: cst.Param) -> bool:
    return param.annotation is not None and dotted_name(param.annotation.annotation).endswith("constexpr")


class _KernelBodyScan(cst.CSTVisitor):
    def __init__(self) -> None:
        self.loads: list[cst.Call] = []
        self.stores: list[cst.Call] = []
        self.dots: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        if is_tl_call(node, "load"):
            self.loads.append(node)
        elif is_tl_call(node, "store"):
            self.stores.append(node)
        elif is_tl_call(node, "dot"):
            self.dots.append(node)


class _ModuleScan(cst.CSTVisitor):
    """Collects kernels, and launch sites with the assignments of their enclosing function."""

    def __init__(self) -> None:
        self.kernels: dict[str, KernelDef] = {}
        self.launch_calls: list[
            tuple[cst.Call, str, cst.BaseExpression, dict[str, list[cst.BaseExpression]]]
        ] = []
        self._assignments: list[dict[str, list[cst.BaseExpression]]] = [{}]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if any(_is_jit(d) for d in node.decorators):
            scan = _KernelBodyScan()
            node.body.visit(scan)
            params = [*node.params.params, *node.params.kwonly_params]
            self.kernels[node.name.value] = KernelDef(
                name=node.name.value,
                node=node,
                params=tuple(p.name.value for p in params),
                constexpr_params=tuple(p.name.value for p in params if _is_constexpr(p)),
                uses_dot=bool(scan.dots),
                autotuned=any(_decorator_name(d).endswith("autotune") for d in node.decorators),
                loads=scan.loads,
                stores=scan.stores,
                dots=scan.dots,
            )
            return False  # kernels launch nothing
        self._assignments.append({})
        return True

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        if not any(_is_jit(d) for d in original_node.decorators):
            self._assignments.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self._assignments[-1].setdefault(target.target.value, []).append(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Subscript) and len(func.slice) == 1:
            element = func.slice[0].slice
            if isinstance(element, cst.Index):
                kernel = dotted_name(func.value).rsplit(".", 1)[-1]
                if kernel:
                    self.launch_calls.append((node, kernel, element.value, self._assignments[-1]))


def parse(source: str) -> SourceModel:
    """Parse a candidate; raises :class:`MutateSourceError` if it is not valid Python."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise MutateSourceError(f"candidate source does not parse: {exc}") from exc
    scan = _ModuleScan()
    module.visit(scan)
    launches: list[LaunchSite] = []
    for call, kernel, grid, assignments in scan.launch_calls:
        # A subscript call is a launch if it names a kernel here, or passes launch options to one imported.
        passes_options = any(
            a.keyword is not None
            and (a.keyword.value in ("num_warps", "num_stages") or is_block_name(a.keyword.value))
            for a in call.args
        )
        if kernel not in scan.kernels and not passes_options:
            continue
        grid_exprs = [grid]
        if isinstance(grid, cst.Name):
            grid_exprs = list(assignments.get(grid.value, [])) or [grid]
        launches.append(LaunchSite(kernel=kernel, call=call, grid_exprs=grid_exprs, index=len(launches)))
    return SourceModel(module=module, kernels=scan.kernels, launches=launches)


def _string_value(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def launch_config(source: str) -> dict[str, Any]:
    """The launch configuration and kernel-body facts of a candidate, read with libcst.

    Keys: ``kernels`` (names of ``@triton.jit`` functions), ``launch_sites`` (how many ``kernel[grid](...)``
    calls), ``launches`` (per site: kernel name and its literal integer keyword arguments), ``block_sizes``
    (``{name: [values]}`` over all sites), ``num_warps`` and ``num_stages`` (values over all sites, ``None``
    where a site leaves them to Triton's default), ``group_m``, ``uses_dot``, ``dot_input_precision``,
    ``eviction_policies`` and ``cache_modifiers`` (hints present on ``tl.load`` / ``tl.store``), and
    ``math`` (which fast-math forms the kernels use: ``exp2``, ``log2``, ``rsqrt``).
    """
    model = parse(source)
    block_sizes: dict[str, list[int]] = {}
    num_warps: list[int | None] = []
    num_stages: list[int | None] = []
    group_m: list[int] = []
    launches = []
    for site in model.launches:
        literals = site.literal_ints()
        launches.append({"kernel": site.kernel, "literals": literals})
        for name, value in literals.items():
            if is_block_name(name):
                block_sizes.setdefault(name, []).append(value)
            elif name in GROUP_NAMES:
                group_m.append(value)
        num_warps.append(literals.get("num_warps"))
        num_stages.append(literals.get("num_stages"))
    evictions: set[str] = set()
    cache_modifiers: set[str] = set()
    precisions: set[str] = set()
    math_forms: set[str] = set()
    for kernel in model.kernels.values():
        for call in [*kernel.loads, *kernel.stores]:
            for arg in call.args:
                if arg.keyword is None:
                    continue
                value = _string_value(arg.value)
                if arg.keyword.value == "eviction_policy" and value:
                    evictions.add(value)
                elif arg.keyword.value == "cache_modifier" and value:
                    cache_modifiers.add(value)
        for call in kernel.dots:
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "input_precision":
                    precisions.add(_string_value(arg.value) or "?")
        math_forms.update(_MathFormScan.of(kernel.node))
    return {
        "kernels": sorted(model.kernels),
        "launch_sites": len(model.launches),
        "launches": launches,
        "block_sizes": block_sizes,
        "num_warps": num_warps,
        "num_stages": num_stages,
        "group_m": group_m,
        "uses_dot": any(k.uses_dot for k in model.kernels.values()),
        "dot_input_precision": sorted(precisions),
        "eviction_policies": sorted(evictions),
        "cache_modifiers": sorted(cache_modifiers),
        "math": sorted(math_forms),
    }


class _MathFormScan(cst.CSTVisitor):
    def __init__(self) -> None:
        self.forms: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        for form in ("exp2", "log2", "rsqrt"):
            if is_tl_call(node, form):
                self.forms.add(form)

    @classmethod
    def of(cls, node: cst.CSTNode) -> set[str]:
        scan = cls()
        node.visit(scan)
        return scan.forms


def imports_module(module: cst.Module, name: str, alias: str | None = None) -> bool:
    """Whether the module has a top-level ``import <name>`` (``import <name> as <alias>`` when ``alias`` is
    given; not aliased otherwise)."""
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Import) and any(
                    dotted_name(imported.name) == name
                    and (None if imported.asname is None else name_of(imported.asname.name)) == alias
                    for imported in small.names
                ):
                    return True
    return False

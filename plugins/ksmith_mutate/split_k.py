"""The ``split_k`` edit: a tiled matmul's K loop sliced over a new grid axis, the partial tiles added atomically.

A matmul whose K is long beside its M x N output (a ``[256, 256] x [256, 1M]``-shaped product, a weight
gradient) has too few output tiles to fill the GPU: each program walks all of K alone while most SMs idle.
Split-K gives every output tile ``SPLIT_K`` programs, each walking one slice of K, and adds their partial
tiles into the output, zeroed first, with ``tl.atomic_add``. The rewrite recognises the idiom the ``tma_loads``
edit does (pointer blocks advanced by ``BLOCK_K * stride`` in ``for k in range(0, K, BLOCK_K)``, masks against
``K - k``; or ``for k in range(0, tl.cdiv(K, BLOCK_K))`` counting tiles, sliced by tiles the same way)::

    split_pid = tl.program_id(2)                       # the first axis the kernel does not use
    split_span = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
    split_start = split_pid * split_span
    a_ptrs += split_start * stride_ak
    b_ptrs += split_start * stride_bk
    for k in range(split_start, min(split_start + split_span, K), BLOCK_K):
        ...                                            # unchanged: the masks already use the absolute k
    acc = acc * alpha                                  # scaling is linear: every slice scales its part
    if split_pid == 0:
        acc += beta * tl.load(bias_ptrs, ...)          # a term added once, by the first slice
    tl.atomic_add(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)

The launch passes ``SPLIT_K`` as a constexpr, its grid gains the axis through ``_split_k_grid`` (which reads
``meta["SPLIT_K"]``, so the value is tuned at the launch alone), and the output argument is zeroed in place
(``c.zero_()``) as it is passed. The epilogue must be affine in the accumulator: scaled by factors that do not
depend on it, shifted by terms that do not (added by the first slice only), stored once. Anything else
(an activation, a second store, a cast kept in a variable) leaves the kernel alone, as do: a pointer advanced in
the loop that is not one of the recognised operands (or advanced a second way), any other value carried
through the loop or read after it (a counter, a running max, ``k``), an epilogue that loads through the output
(a residual: the zeroed output would lose it), more than one launch of the kernel, and a kernel already using
grid axis 2. The slices' start offsets are computed in int64, as the loop's pointer increments effectively are. Sums in another order and
atomics make the result differ from the unsplit one by rounding; the evaluator judges it by the problem's
tolerance like any other candidate.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ksmith_mutate.source_model import (
    KernelDef,
    LaunchSite,
    SourceModel,
    dotted_name,
    is_tl_call,
    keyword_value,
    launch_grid,
    with_launch_grid,
)
from ksmith_mutate.tma import (
    _code,
    _expr,
    _increment,
    _launch_argument,
    _loop_range,
    _operands,
    _single_name_assign,
    _sum_terms,
    with_constexpr_params,
)

PARAM = "SPLIT_K"
START_VALUES = (4, 16)  # offered at once: a moderate split and one for K far longer than M x N
VALUES = (2, 64)  # range of the tuning steps (x2, /2) once a launch has SPLIT_K
GRID_HELPER = "_split_k_grid"
GRID_HELPER_SOURCE = f'''

def {GRID_HELPER}(grid, axis):
    # The launch grid with meta["SPLIT_K"] programs along ``axis``, one per slice of K (ksmith's split_k edit).
    def split(meta):
        dims = tuple(grid(meta) if callable(grid) else grid)
        dims = dims + (1,) * (axis + 1 - len(dims))
        return dims[:axis] + (meta["{PARAM}"],) + dims[axis + 1 :]

    return split
'''
PID, SPAN, START = "split_pid", "split_span", "split_start"


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def _names(node: cst.CSTNode) -> set[str]:
    visitor = _Names()
    node.visit(visitor)
    return visitor.names


def _program_id_axes(kernel: KernelDef) -> list[int] | None:
    """Literal axes of every ``tl.program_id`` call; None when one is not a literal."""
    axes: list[int] = []

    class Scan(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if is_tl_call(node, "program_id"):
                value = node.args[0].value if node.args else None
                axes.append(int(value.value) if isinstance(value, cst.Integer) else -1)

    kernel.node.visit(Scan())
    return None if -1 in axes else axes


def _accumulator(kernel: KernelDef, loop: cst.For) -> str | None:
    """The one name set to ``tl.zeros(...)`` before the loop and assigned inside it."""
    zeros = set()
    for statement in kernel.node.body.body:
        if statement is loop:
            break
        assigned = _single_name_assign(statement)
        if assigned is not None and isinstance(assigned[1], cst.Call) and is_tl_call(assigned[1], "zeros"):
            zeros.add(assigned[0])
    assigned_in_loop: set[str] = set()

    class Targets(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            if isinstance(node.target, cst.Name):
                assigned_in_loop.add(node.target.value)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if isinstance(node.target, cst.Name):
                assigned_in_loop.add(node.target.value)

    loop.body.visit(Targets())
    found = zeros & assigned_in_loop
    return next(iter(found)) if len(found) == 1 else None


class _NotAffine(Exception):
    """The epilogue does something with the accumulator that partial sums cannot be added after."""


class _Epilogue:
    """Rewrites the statements after the K loop for partial tiles, or raises ``_NotAffine``."""

    def __init__(self, acc: str) -> None:
        self.acc = acc
        self.stores: list[cst.BaseExpression] = []  # the pointer each accumulator store writes through

    def _is_acc(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Name) and node.value == self.acc

    def _free(self, node: cst.CSTNode) -> bool:
        return self.acc not in _names(node)

    def statements(self, body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        for statement in body:
            if self._free(statement):
                out.append(statement)
            elif isinstance(statement, cst.If):
                out.append(self._if(statement))
            elif isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
                out.append(self._line(statement))
            else:
                raise _NotAffine(_code(statement).strip().splitlines()[0])
        return out

    def _if(self, node: cst.If) -> cst.If:
        if not self._free(node.test):
            raise _NotAffine("a branch on the accumulator")
        body = node.body.with_changes(body=self.statements(list(node.body.body)))
        orelse = node.orelse
        if isinstance(orelse, cst.Else):
            orelse = orelse.with_changes(
                body=orelse.body.with_changes(body=self.statements(list(orelse.body.body)))
            )
        elif isinstance(orelse, cst.If):
            orelse = self._if(orelse)
        return node.with_changes(body=body, orelse=orelse)

    def _line(self, line: cst.SimpleStatementLine) -> cst.BaseStatement:
        small = line.body[0]
        if (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and is_tl_call(small.value, "store")
        ):
            return self._store(line, small.value)
        if isinstance(small, cst.AugAssign) and self._is_acc(small.target) and self._free(small.value):
            if isinstance(small.operator, (cst.MultiplyAssign, cst.DivideAssign)):
                return line
            if isinstance(small.operator, (cst.AddAssign, cst.SubtractAssign)):
                return _first_slice_only(line)
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and self._is_acc(small.targets[0].target)
            and isinstance(small.value, cst.BinaryOperation)
        ):
            op, left, right = small.value.operator, small.value.left, small.value.right
            if isinstance(op, cst.Multiply) and (
                (self._is_acc(left) and self._free(right)) or (self._is_acc(right) and self._free(left))
            ):
                return line
            if isinstance(op, cst.Divide) and self._is_acc(left) and self._free(right):
                return line
            if isinstance(op, cst.Add) and (
                (self._is_acc(left) and self._free(right)) or (self._is_acc(right) and self._free(left))
            ):
                return _first_slice_only(line)
            if isinstance(op, cst.Subtract) and self._is_acc(left) and self._free(right):
                return _first_slice_only(line)
        raise _NotAffine(_code(line).strip())

    def _store(self, line: cst.SimpleStatementLine, call: cst.Call) -> cst.BaseStatement:
        positional = [a.value for a in call.args if a.keyword is None]
        value = positional[1] if len(positional) > 1 else keyword_value(call, "value")
        pointer = positional[0] if positional else keyword_value(call, "pointer")
        if value is None or pointer is None or not self._free(pointer):
            raise _NotAffine("a store it cannot read")
        stored_acc = self._is_acc(value) or (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and self._is_acc(value.func.value)
            and value.func.attr.value == "to"
        )
        if not stored_acc:
            raise _NotAffine(_code(value))
        self.stores.append(pointer)
        mask = keyword_value(call, "mask")
        if mask is None and len(positional) > 2:
            mask = positional[2]
        mask_code = f", mask={_code(mask)}" if mask is not None else ""
        return cst.parse_statement(
            f"tl.atomic_add({_code(pointer)}, {_code(value)}{mask_code})\n"
        ).with_changes(leading_lines=line.leading_lines)


def _first_slice_only(line: cst.SimpleStatementLine) -> cst.If:
    body = line.with_changes(leading_lines=[])
    return cst.If(
        test=_expr(f"{PID} == 0"),
        body=cst.IndentedBlock(body=[body]),
        leading_lines=line.leading_lines,
    )


def _store_param(kernel: KernelDef, pointer: cst.BaseExpression) -> str | None:
    """The kernel parameter the store's pointer is based on (``c_ptr`` of ``c_ptrs = c_ptr + ...``)."""
    value = pointer
    if isinstance(pointer, cst.Name) and pointer.value not in kernel.params:
        definitions = [
            a[1]
            for s in kernel.node.body.body
            if (a := _single_name_assign(s)) is not None and a[0] == pointer.value
        ]
        if len(definitions) != 1:
            return None
        value = definitions[0]
    for term in _sum_terms(value):
        if isinstance(term, cst.Name) and term.value in kernel.params:
            return term.value
    return None


def _rewrite_kernel(
    kernel: KernelDef,
    loop: cst.For,
    counts_tiles: bool,
    axis: int,
    epilogue: list[cst.BaseStatement],
    pointers: list[tuple[str, str, str]],
) -> cst.FunctionDef:
    """The kernel with its K loop over one slice: ``range(0, K, BLOCK_K)`` walks elements
    ``[split_start, split_start + split_span)``; ``range(0, tl.cdiv(K, BLOCK_K))`` walks tiles the same way."""
    args = [_code(a.value) for a in loop.iter.args if a.keyword is None]
    if counts_tiles:
        tiles = args[1]
        span = f"tl.cdiv({tiles}, {PARAM})"
        new_iter = f"range({START}, min({START} + {SPAN}, {tiles}))"
        moves = [
            f"{pointer} += {START}.to(tl.int64) * {block} * {stride}" for pointer, block, stride in pointers
        ]
    else:
        extent, step = args[1], args[2]
        span = f"tl.cdiv(tl.cdiv({extent}, {step}), {PARAM}) * {step}"
        new_iter = f"range({START}, min({START} + {SPAN}, {extent}), {step})"
        moves = [f"{pointer} += {START}.to(tl.int64) * {stride}" for pointer, _, stride in pointers]
    prologue = [f"{PID} = tl.program_id({axis})", f"{SPAN} = {span}", f"{START} = {PID} * {SPAN}", *moves]
    body = list(kernel.node.body.body)
    at = body.index(loop)
    statements = [
        *body[:at],
        *(cst.parse_statement(line + "\n") for line in prologue),
        loop.with_changes(iter=_expr(new_iter)),
        *epilogue,
    ]
    return kernel.node.with_changes(
        params=with_constexpr_params(kernel.node, [PARAM]),
        body=kernel.node.body.with_changes(body=statements),
    )


class _Assigned(cst.CSTVisitor):
    """Every name a block assigns (plain, augmented or loop targets), with how many statements do."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def _add(self, target: cst.BaseExpression) -> None:
        for name in _names(target):
            self.counts[name] = self.counts.get(name, 0) + 1

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._add(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._add(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._add(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._add(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._add(node.target)


def _loop_state_is_only(
    loop: cst.For,
    before: list[cst.BaseStatement],
    after: list[cst.BaseStatement],
    acc: str,
    increments: list[tuple[str, str, str]],
) -> bool:
    """Whether the K loop carries nothing but the accumulator and the recognised pointer increments: a name
    the loop assigns that lived before it (a counter, a running max) or that the epilogue reads (``k``, a
    loop local) would differ from slice to slice, and the split kernel would compute something else."""
    assigned = _Assigned()
    loop.visit(assigned)
    pointers = {inc[0] for inc in increments}
    if any(assigned.counts.get(pointer, 0) != 1 for pointer in pointers):
        return False  # a pointer moved a second way as well (``a_ptrs = a_ptrs + ...``)
    earlier = _Assigned()
    for statement in before:
        statement.visit(earlier)
    carried = {name for name in assigned.counts if name in earlier.counts} - {acc} - pointers
    if carried:
        return False
    read_after = set().union(*(_names(statement) for statement in after)) if after else set()
    return not ((set(assigned.counts) - {acc} - pointers) & read_after)


def _reads_output(body: list[cst.BaseStatement], after: list[cst.BaseStatement], output: str) -> bool:
    """Whether a ``tl.load`` after the loop reads through the output parameter, or through any name the
    kernel derives from it (``c_ptrs``, ``c_ptrs0``, ...)."""
    watched = {output}
    grew = True
    while grew:  # names assigned from watched names, to a fixed point
        grew = False
        for statement in body:
            assigned = _single_name_assign(statement)
            if assigned is not None and assigned[0] not in watched and _names(assigned[1]) & watched:
                watched.add(assigned[0])
                grew = True
    found = False

    class Loads(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            nonlocal found
            if is_tl_call(node, "load") and node.args and _names(node.args[0].value) & watched:
                found = True

    for statement in after:
        statement.visit(Loads())
    return found


def split_k_changes(model: SourceModel) -> Iterator[tuple[str, list[tuple[cst.CSTNode, cst.CSTNode]], dict]]:
    """(description, node replacements, detail) for each kernel that matches, at each of ``START_VALUES``."""
    # Every change is rendered from the original module on its own, so each adds the helper if it is missing.
    needs_helper = GRID_HELPER not in _names(model.module)
    for kernel in model.kernels.values():
        if not kernel.uses_dot or kernel.autotuned or PARAM in kernel.params:
            continue
        if {PID, SPAN, START} & _names(kernel.node):
            continue
        matched = _operands(kernel)
        if matched is None:
            continue
        loop, operands = matched
        walked = _loop_range(loop)
        if walked is None:
            continue
        counts_tiles = walked[2]
        increments = [inc for s in loop.body.body if (inc := _increment(s)) is not None]
        if {inc[0] for inc in increments} != {op.pointer for op in operands}:
            continue  # a pointer the prologue would not know how to move
        axes = _program_id_axes(kernel)
        if not axes or max(axes) >= 2:
            continue
        axis = max(axes) + 1
        acc = _accumulator(kernel, loop)
        if acc is None:
            continue
        body = list(kernel.node.body.body)
        before, after = body[: body.index(loop)], body[body.index(loop) + 1 :]
        if not _loop_state_is_only(loop, before, after, acc, increments):
            continue
        rewriter = _Epilogue(acc)
        try:
            epilogue = rewriter.statements(after)
        except _NotAffine:
            continue
        if len(rewriter.stores) != 1:
            continue
        output = _store_param(kernel, rewriter.stores[0])
        if output is None or _reads_output(body, after, output):
            continue  # the epilogue reads the output (a residual, C += A @ B): zeroing it would lose that
        sites = [s for s in model.launches if s.kernel == kernel.name]
        if len(sites) != 1:
            continue  # several launches may write parts of one output: each would zero the others' part
        new_kernel: cst.CSTNode = _rewrite_kernel(kernel, loop, counts_tiles, axis, epilogue, increments)
        if needs_helper:
            helper = list(cst.parse_module(GRID_HELPER_SOURCE).body)
            helper[0] = helper[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
            new_kernel = cst.FlattenSentinel([*helper, new_kernel])
        for value in START_VALUES:
            pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = [(kernel.node, new_kernel)]
            for site in sites:
                launched = _split_launch(site, kernel, output, axis, value)
                if launched is None:
                    break
                pairs.append((site.call, launched))
            else:
                yield (
                    f"split-K x{value} for {kernel.name} (K sliced over grid axis {axis}, partial tiles added "
                    "atomically into the zeroed output)",
                    pairs,
                    {"direction": "up", "split_k": value},
                )


def _split_launch(site: LaunchSite, kernel: KernelDef, output: str, axis: int, value: int) -> cst.Call | None:
    """The launch with the split grid, the output zeroed as it is passed, and ``SPLIT_K=value``."""
    from ksmith_mutate.edits import with_keyword

    call = site.call
    grid = launch_grid(call)
    if grid is None:
        return None
    target = _launch_argument(site, kernel, output)
    if target is None:
        return None
    new_grid = _expr(f"{GRID_HELPER}({_code(grid)}, {axis})")
    simple = isinstance(target, (cst.Name, cst.Attribute, cst.Call, cst.Subscript))
    zeroed = _expr(f"{_code(target)}.zero_()" if simple else f"({_code(target)}).zero_()")
    args = [a.with_changes(value=zeroed) if a.value is target else a for a in call.args]
    new_call = with_launch_grid(call.with_changes(args=args), new_grid)
    return with_keyword(new_call, PARAM, cst.Integer(str(value)))


def split_k_steps(model: SourceModel) -> Iterator[tuple[str, list[tuple[cst.CSTNode, cst.CSTNode]], dict]]:
    """``SPLIT_K`` x2 or /2 at a launch that passes it as a literal (the grid reads it from ``meta``)."""
    from ksmith_mutate.edits import with_keyword

    for site in model.launches:
        value = site.literal_ints().get(PARAM)
        grid = launch_grid(site.call)
        split_grid = isinstance(grid, cst.Call) and dotted_name(grid.func) == GRID_HELPER
        if value is None or not split_grid:
            continue  # a grid that does not read meta["SPLIT_K"] would not follow the new value
        for new, direction in ((value * 2, "up"), (value // 2, "down")):
            if VALUES[0] <= new <= VALUES[1]:
                yield (
                    f"{PARAM} {value} -> {new} at launch {site.index + 1} of {site.kernel}",
                    [(site.call, with_keyword(site.call, PARAM, cst.Integer(str(new))))],
                    {"direction": direction, "split_k": new},
                )


__all__ = ["split_k_changes", "split_k_steps"]

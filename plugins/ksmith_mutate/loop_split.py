"""The ``mask_split`` edit: a blocked loop's full blocks run without their bound mask, the last one with it.

A kernel that walks a long axis in blocks (``for start in range(0, n, BLOCK): offs = start + tl.arange(0,
BLOCK)``) guards every load and every reduction of every block with ``offs < n``, though only the last block
can cross ``n``. This edit runs the loop in two: the blocks that end at or before the last multiple of the
step below ``n`` with each such comparison replaced by ``True`` (Triton folds the constant mask away, so the
loads are plain and ``tl.where(True, x, y)`` is ``x``), then the rest as written. Flash attention's key loop
and the column loops of row reductions (LayerNorm, softmax) have this shape; on an H100 the attention seed
without its bound masks ran 8 % faster at the same tile (benchmarks/attention_variants.py).

Only loops from 0 are split (from anywhere else the full blocks are not a prefix), and only comparisons of
offsets counted from the loop's own variable against a name the loop does not assign.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ksmith_mutate.source_model import KernelDef, SourceModel, base_name, is_tl_call, walk

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]
FULL_END = "full_blocks_end"


def mask_split_changes(model: SourceModel) -> Iterator[tuple[str, Pairs, dict]]:
    """(description, pairs, detail) for each blocked loop of each kernel that a bound mask guards."""
    for kernel in model.kernels.values():
        loops = _Loops()
        kernel.node.body.visit(loops)
        for number, loop in enumerate(loops.found, 1):
            found = _bound_comparisons(loop)
            if found is None:
                continue
            comparisons, bound = found
            code = cst.Module([]).code_for_node
            yield (
                f"full blocks of loop {number} in {kernel.name} without the mask {code(comparisons[0])}",
                [(loop, _split(loop, comparisons, bound, _fresh_name(kernel)))],
                {"direction": "up", "loop": number},
            )


def _fresh_name(kernel: KernelDef) -> str:
    """``full_blocks_end``, or with a number where a loop of the kernel was split already."""
    taken = {node.value for node in walk(kernel.node) if isinstance(node, cst.Name)}
    name, n = FULL_END, 1
    while name in taken:
        n += 1
        name = f"{FULL_END}_{n}"
    return name


class _Loops(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.For] = []

    def visit_For(self, node: cst.For) -> None:
        self.found.append(node)


def _range_from_zero(loop: cst.For) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(stop, step) of ``for v in range(0, stop, step)``."""
    it = loop.iter
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "range"):
        return None
    if len(it.args) != 3 or any(arg.keyword is not None for arg in it.args):
        return None
    start, stop, step = (arg.value for arg in it.args)
    if not (isinstance(start, cst.Integer) and int(start.evaluated_value) == 0):
        return None
    return stop, step


def _assigned_names(body: cst.CSTNode) -> dict[str, list[cst.BaseExpression]]:
    values: dict[str, list[cst.BaseExpression]] = {}
    for node in walk(body):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    values.setdefault(target.target.value, []).append(node.value)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            values.setdefault(node.target.value, []).append(node.value)  # type: ignore[arg-type]
    return values


def _bound_comparisons(loop: cst.For) -> tuple[list[cst.Comparison], str] | None:
    """The loop body's ``offs[...] < bound`` comparisons, where ``offs = <loop variable> + tl.arange(...)``
    is assigned once in the body and ``bound`` is a name the body never assigns; all against one bound."""
    if _range_from_zero(loop) is None or not isinstance(loop.target, cst.Name):
        return None
    variable = loop.target.value
    assigned = _assigned_names(loop.body)
    offsets = {
        name
        for name, values in assigned.items()
        if len(values) == 1
        and isinstance(values[0], cst.BinaryOperation)
        and isinstance(values[0].operator, cst.Add)
        and isinstance(values[0].left, cst.Name)
        and values[0].left.value == variable
        and is_tl_call(values[0].right, "arange")
    }
    comparisons: list[cst.Comparison] = []
    bounds: set[str] = set()
    for node in walk(loop.body):
        if isinstance(node, cst.For):
            if node is not loop:
                return None  # a nested loop: its own blocks are not this one's
        if not (isinstance(node, cst.Comparison) and len(node.comparisons) == 1):
            continue
        target = node.comparisons[0]
        bound = target.comparator
        if (
            isinstance(target.operator, cst.LessThan)
            and base_name(node.left) in offsets
            and isinstance(bound, cst.Name)
            and bound.value not in assigned
        ):
            comparisons.append(node)
            bounds.add(bound.value)
    if not comparisons or len(bounds) != 1:
        return None
    return comparisons, bounds.pop()


def _split(loop: cst.For, comparisons: list[cst.Comparison], bound: str, name: str) -> cst.FlattenSentinel:
    stop, step = _range_from_zero(loop)  # type: ignore[misc]
    code = cst.Module([]).code_for_node
    stop_text, step_text = code(stop), code(step)
    # The full blocks end at the last multiple of the step at or below the bound, and no later than the
    # loop would have gone (a stop below the bound, as a causal key loop has).
    end = f"({bound} // {step_text}) * {step_text}"
    if stop_text != bound:
        end = f"tl.minimum(tl.cdiv({stop_text}, {step_text}) * {step_text}, {end})"
    assign = cst.parse_statement(f"{name} = {end}\n").with_changes(leading_lines=loop.leading_lines)

    class Unmask(cst.CSTTransformer):
        def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
            if any(original is c for c in comparisons):
                return cst.Name("True", lpar=updated.lpar, rpar=updated.rpar)  # type: ignore[attr-defined]
            return updated

    def ranged(start: cst.BaseExpression, end: cst.BaseExpression, body: cst.BaseSuite) -> cst.For:
        call = cst.Call(func=cst.Name("range"), args=[cst.Arg(start), cst.Arg(end), cst.Arg(step)])
        return loop.with_changes(iter=call, body=body, leading_lines=[])

    full = ranged(cst.Integer("0"), cst.Name(name), loop.body.visit(Unmask()))
    rest = ranged(cst.Name(name), stop, loop.body)
    return cst.FlattenSentinel([assign, full, rest])

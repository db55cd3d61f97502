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

from ksmith_mutate.source_model import (
    SourceModel,
    arange_offsets,
    assigned_values,
    base_name,
    fresh_name,
    grouped,
    is_tl_call,
    range_from_zero,
    same_code,
    walk,
)

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
                [(loop, _split(loop, comparisons, bound, fresh_name(kernel.node, FULL_END)))],
                {"direction": "up", "loop": number},
            )


class _Loops(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.For] = []

    def visit_For(self, node: cst.For) -> None:
        self.found.append(node)


def _bound_comparisons(loop: cst.For) -> tuple[list[cst.Comparison], str] | None:
    """The loop body's ``offs[...] < bound`` comparisons, where ``offs = <loop variable> + tl.arange(...)``
    is assigned once in the body and ``bound`` is a name the body never assigns; all against one bound."""
    if range_from_zero(loop) is None or not isinstance(loop.target, cst.Name):
        return None
    variable = loop.target.value
    _, step = range_from_zero(loop)  # type: ignore[misc]
    assigned = assigned_values(loop.body)
    offsets = set()
    for name, values in assigned.items():
        at = arange_offsets(values[0]) if len(values) == 1 else None
        # One block per step from the loop's own variable: a block longer than the step (a sliding window)
        # would cross the bound before the last step.
        if (
            at is not None
            and isinstance(at[0], cst.Name)
            and at[0].value == variable
            and same_code(at[1], step)
        ):
            offsets.add(name)
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
    parents = _parents(loop.body)
    if not all(_used_as_mask(c, parents, loop.body) for c in comparisons):
        return None  # a mask indexed, converted or reduced: ``True`` would not stand in for it
    return comparisons, bounds.pop()


def _constant(node: cst.BaseExpression) -> bool:
    """A number written out: ``0.0``, ``-1``, ``float("-inf")``."""
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    if isinstance(node, cst.Call):
        return isinstance(node.func, cst.Name) and node.func.value == "float"
    return isinstance(node, (cst.Integer, cst.Float))


def _parents(root: cst.CSTNode) -> dict[int, cst.CSTNode]:
    return {id(child): node for node in walk(root) for child in node.children}


def _used_as_mask(
    node: cst.CSTNode, parents: dict[int, cst.CSTNode], body: cst.CSTNode, seen: set[str] | None = None
) -> bool:
    """Whether a mask (a comparison, or a name bound to one) reaches only places where ``True`` means "no
    mask": a ``mask=`` argument, the condition of ``tl.where``, an ``&`` with another mask, or a name every
    use of which is one of those."""
    seen = set() if seen is None else seen
    parent = parents.get(id(node))
    if isinstance(parent, cst.Arg):
        call = parents.get(id(parent))
        if parent.keyword is not None:
            return parent.keyword.value == "mask"
        # tl.where's condition, where a value is a tensor: with two constants the condition is the shape
        return (
            is_tl_call(call, "where")
            and call.args[0] is parent  # type: ignore[union-attr]
            and not all(_constant(arg.value) for arg in call.args[1:])  # type: ignore[union-attr]
        )
    if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.BitAnd):
        return _used_as_mask(parent, parents, body, seen)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and parent.value is node:
        target = parent.targets[0].target
        if not isinstance(target, cst.Name) or target.value in seen:
            return isinstance(target, cst.Name)
        seen.add(target.value)
        targets = {id(t.target) for n in walk(body) if isinstance(n, cst.Assign) for t in n.targets}
        uses = [
            n
            for n in walk(body)
            if isinstance(n, cst.Name) and n.value == target.value and id(n) not in targets
        ]
        return all(_used_as_mask(use, parents, body, seen) for use in uses)
    return False


def _split(loop: cst.For, comparisons: list[cst.Comparison], bound: str, name: str) -> cst.FlattenSentinel:
    stop, step = range_from_zero(loop)  # type: ignore[misc]
    code = cst.Module([]).code_for_node
    stop_text, step_text = grouped(code(stop)), grouped(code(step))
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

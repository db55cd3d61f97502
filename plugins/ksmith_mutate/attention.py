"""Structural edits of flash-attention kernels: the online softmax in base 2, the causal diagonal split, and
Inductor's flex-attention configurations.

A flash-attention kernel (two ``tl.dot`` products per key block, an online softmax between them) is
compute-bound, and at a third of an H100's tensor throughput its structure is what holds it back, not its
hints. On an H100 (docs/benchmarks.md §6e) these rewrites, with ``mask_split``
(:mod:`ksmith_mutate.loop_split`) and the tile that suits them, took the suite's attention seeds from 0.57x and
0.55x of torch.compile (cuDNN's flash attention) to 0.90x and 0.85x in 32 evaluations:

``exp2_softmax``
    The softmax in base 2, in one of two forms. Folded: the scores' scale is multiplied by log2(e) where the
    scores are formed (``s = tl.dot(q, k) * sm_scale``) and every ``tl.exp`` becomes ``tl.exp2``. In the
    exponent (as Triton's tutorial kernel has it): the scores stay unscaled, the row max is scaled once per
    row and each exponent is one multiply-add, ``exp2(s * scale' - m)``; only where the scores feed nothing
    but masks, row maxima and exponents. Exact where every exponent is a difference of scaled scores or
    their running maxima (``exp(s - m)``, ``exp(m_old - m_new)``), as in an online softmax; ``exp2`` is one
    MUFU instruction where ``exp`` is a multiply and an ``exp2``. Applies only where every ``tl.exp`` takes
    a difference, the scores have one scalar scale and the kernel has no ``log``.
``diagonal_split``
    A key loop whose mask is narrowed under a constexpr flag (``if CAUSAL: valid = valid & (offs_n[None, :]
    <= offs_m[:, None])``) runs, when the flag is set, as two loops: the key blocks wholly below the diagonal
    of the program's query block without that mask, then the rest with it: only the blocks on the diagonal
    still compute and apply it.
``attention_config``
    ``BLOCK_M``, ``BLOCK_N``, ``num_warps`` and ``num_stages`` of the launch set at once to one of the
    configurations Inductor's flex-attention template autotunes over (read from the installed torch; torch
    2.11's list where it cannot be read), each also at the other of 4 and 8 warps, as ``gemm_config`` does
    for matmuls. A launch whose grid divides by a tile's literal is left to the one-value edits.

Each rewrite keeps the program valid Triton; the evaluator judges whether it stays correct and gets faster.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import libcst as cst

from ksmith_mutate.source_model import (
    KernelDef,
    LaunchSite,
    SourceModel,
    arange_offsets,
    base_name,
    dotted_name,
    fresh_name,
    grouped,
    is_tl_call,
    keyword_value,
    range_from_zero,
    same_code,
    walk,
    with_keyword,
)

LOG2_E = "1.4426950408889634"

# Inductor's flex-attention forward configs (torch 2.11, CUDAConfigHeuristic.flex_attn_fwd_autotune_configs,
# and its defaults for head dims up to 128): (BLOCK_M, BLOCK_N, num_stages, num_warps).
_FALLBACK_FLEX = (
    (128, 64, 3, 4),
    (128, 128, 3, 4),
    (128, 128, 2, 8),
    (128, 128, 1, 8),
    (64, 128, 3, 4),
    (64, 64, 3, 4),
)

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]


@functools.cache
def flex_attention_configs() -> tuple[tuple[int, int, int, int], ...]:
    """Inductor's flex-attention forward configs from the installed torch, else torch 2.11's list."""
    try:
        from torch._inductor.template_heuristics.triton import CUDAConfigHeuristic

        found = tuple(
            (int(c.block_m), int(c.block_n), int(c.num_stages), int(c.num_warps))
            for c in CUDAConfigHeuristic().flex_attn_fwd_autotune_configs
        )
    except Exception:  # private API: moved, renamed or failing to build -- use the known list
        found = ()
    listed = found or _FALLBACK_FLEX
    # Each tile also at the other of 4 and 8 warps: Inductor pairs a tile with one warp count, and on an H100
    # the non-causal kernel ran best at 128x64 with 8 warps where the list has 4 (benchmarks/attention_variants.py,
    # docs/benchmarks.md §6e).
    twins = tuple((m, n, stages, 12 - warps) for m, n, stages, warps in listed if warps in (4, 8))
    return tuple(dict.fromkeys(listed + twins))


def is_attention(kernel: KernelDef) -> bool:
    """Two products per key block with an exponential between them: the flash-attention idiom."""
    calls = _calls_of(kernel.node.body)
    return calls.dots >= 2 and bool(calls.exps or calls.exp2s)


def attention_changes(
    model: SourceModel, max_warps: tuple[int, ...]
) -> Iterator[tuple[str, str, Pairs, dict]]:
    """Every applicable rewrite of every attention kernel in ``model``: (kind, description, pairs, detail)."""
    for kernel in model.kernels.values():
        if not is_attention(kernel):
            continue
        in_exponent = _exp2_in_exponent(kernel)
        if in_exponent is not None:
            description = (
                "online softmax in base 2, the scale in each exponent's multiply-add and on the row max, "
                f"in {kernel.name}"
            )
            yield "exp2_softmax", description, in_exponent, {"direction": "up", "form": "fma"}
        change = _exp2_softmax(kernel)
        if change is not None:
            yield (
                "exp2_softmax",
                f"online softmax in base 2 (scale x log2(e), exp -> exp2) in {kernel.name}",
                change,
                {"direction": "up"},
            )
        split = _diagonal_split(kernel)
        if split is not None and not _always_false(model, kernel.name, split[1]):
            pairs, flag = split
            yield (
                "diagonal_split",
                f"key loop split at the diagonal under {flag} in {kernel.name}",
                pairs,
                {"direction": "up"},
            )
    for site in model.launches:
        kernel = model.kernel_for(site)
        if kernel is not None and not kernel.autotuned and is_attention(kernel):
            yield from _config_changes(site, max_warps)


def _always_false(model: SourceModel, kernel: str, flag: str) -> bool:
    """Every launch of ``kernel`` passes ``flag=False``: splitting under it would change nothing."""
    sites = [site for site in model.launches if site.kernel == kernel]
    values = [keyword_value(site.call, flag) for site in sites]
    return bool(sites) and all(isinstance(v, cst.Name) and v.value == "False" for v in values)


# --------------------------------------------------------------------------------------------------------------
# exp2_softmax
# --------------------------------------------------------------------------------------------------------------


class _Calls(cst.CSTVisitor):
    """The kernel's ``tl.exp`` calls, and whether it already uses ``exp2`` or takes a logarithm."""

    def __init__(self) -> None:
        self.exps: list[cst.Call] = []
        self.exp2s = 0
        self.logs = 0
        self.dots = 0

    def visit_Call(self, node: cst.Call) -> None:
        name = dotted_name(node.func)
        if is_tl_call(node, "exp"):
            self.exps.append(node)
        elif name.endswith("exp2"):
            self.exp2s += 1
        elif name.endswith(("log", "log2")):
            self.logs += 1
        elif is_tl_call(node, "dot"):
            self.dots += 1


class _ScaledScores(cst.CSTVisitor):
    """Assignments ``name = <... tl.dot(...) ...> * scale`` (either order) with ``scale`` a scalar argument."""

    def __init__(self, scalars: set[str]) -> None:
        self.scalars = scalars
        self.found: list[cst.Name] = []  # the scale's Name node in each
        # (target, the assigned product, its unscaled factor) of each
        self.assigns: list[tuple[str, cst.BinaryOperation, cst.BaseExpression]] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)):
            return
        for product, scale in ((value.left, value.right), (value.right, value.left)):
            if isinstance(scale, cst.Name) and scale.value in self.scalars and _calls_of(product).dots:
                self.found.append(scale)
                target = node.targets[0].target if len(node.targets) == 1 else None
                if isinstance(target, cst.Name):
                    self.assigns.append((target.value, value, product))
                return


def _calls_of(node: cst.CSTNode) -> _Calls:
    calls = _Calls()
    node.visit(calls)
    return calls


def _scaled_scores(kernel: KernelDef) -> tuple[_Calls, _ScaledScores] | None:
    """The kernel's exponentials and its scaled scores, where base 2 applies: every ``tl.exp`` takes a
    difference, there is no logarithm, and the scores are scaled by one scalar argument."""
    calls = _calls_of(kernel.node.body)
    if not calls.exps or calls.exp2s or calls.logs:
        return None
    for call in calls.exps:
        if len(call.args) != 1 or not (
            isinstance(call.args[0].value, cst.BinaryOperation)
            and isinstance(call.args[0].value.operator, cst.Subtract)
        ):
            return None  # an exponent that is not a difference: base 2 would change its value
    scalars = {p for p in kernel.params if p not in kernel.constexpr_params and "ptr" not in p.lower()}
    scaled = _ScaledScores(scalars)
    kernel.node.body.visit(scaled)
    if len({scale.value for scale in scaled.found}) != 1:
        return None  # no scaled scores, or several scales: which exponents take which is not clear
    names = {target for target, _, _ in scaled.assigns}
    if len(names) != 1 or len(scaled.assigns) != len(scaled.found):
        return None
    if not _softmax_only(kernel, next(iter(names))):
        return None
    return calls, scaled


def _softmax_only(kernel: KernelDef, scores: str) -> bool:
    """Whether the scores and their running maxima feed nothing but the online softmax: the scores only
    masks assigned back to them (``s = tl.where(c, s, -inf)``), row maxima (``tl.max(s, ...)``) and the left
    side of exponents; the maxima (names assigned from ``tl.maximum`` / ``tl.max(s)``, and their carries)
    only ``tl.maximum``, exponents and each other. Anything else (a bias added to the scaled scores, a max
    stored as an output) would see the values in the wrong base."""
    body = kernel.node.body
    maxima: set[str] = set()
    assigns = [n for n in walk(body) if isinstance(n, cst.Assign) and len(n.targets) == 1]
    grew = True
    while grew:
        grew = False
        for node in assigns:
            target = node.targets[0].target
            if not isinstance(target, cst.Name) or target.value in maxima:
                continue
            value = node.value
            from_max = is_tl_call(value, "maximum") or (
                is_tl_call(value, "max") and value.args and _is_name(value.args[0].value, scores)
            )
            if from_max or (isinstance(value, cst.Name) and value.value in maxima):
                maxima.add(target.value)
                grew = True
    tracked = maxima | {scores}
    allowed: set[int] = set()
    for node in assigns:
        allowed.add(id(node.targets[0].target))
        value = node.value
        if isinstance(value, cst.Name) and value.value in maxima:
            allowed.add(id(value))  # a carry: m_i = m_new
        if _is_name(node.targets[0].target, scores) and is_tl_call(value, "where"):
            allowed.update(id(a.value) for a in value.args if _is_name(a.value, scores))
    for node in walk(body):
        if is_tl_call(node, "maximum"):
            allowed.update(id(_name_of(a.value)) for a in node.args if _name_of(a.value) is not None)
        elif is_tl_call(node, "max") and node.args and _is_name(node.args[0].value, scores):
            allowed.add(id(node.args[0].value))
        elif is_tl_call(node, "exp"):
            difference = node.args[0].value
            assert isinstance(difference, cst.BinaryOperation)
            for side in (difference.left, difference.right):
                if _name_of(side) is not None:
                    allowed.add(id(_name_of(side)))
    uses = [n for n in walk(body) if isinstance(n, cst.Name) and n.value in tracked]
    return all(id(n) in allowed for n in uses)


def _name_of(node: cst.BaseExpression) -> cst.Name | None:
    """The Name in ``m`` or ``m[:, None]``."""
    if isinstance(node, cst.Subscript):
        node = node.value
    return node if isinstance(node, cst.Name) else None


def _base2_scale(scale: str) -> cst.BinaryOperation:
    return cst.BinaryOperation(
        left=cst.Name(scale),
        operator=cst.Multiply(),
        right=cst.Float(LOG2_E),
        lpar=[cst.LeftParen()],
        rpar=[cst.RightParen()],
    )


def _to_exp2(call: cst.Call, arg: cst.BaseExpression | None = None) -> cst.Call:
    func = call.func
    assert isinstance(func, cst.Attribute)
    args = call.args if arg is None else [call.args[0].with_changes(value=arg)]
    return call.with_changes(func=func.with_changes(attr=cst.Name("exp2")), args=args)


def _exp2_in_exponent(kernel: KernelDef) -> Pairs | None:
    """Base 2 with the scale where the tutorial kernels put it: the scores stay unscaled, the row max is
    scaled once per row (``tl.max(s, 1) * scale'``), and each exponent is one multiply-add
    (``exp2(s * scale' - m)``). Only where the scores feed nothing but the softmax (:func:`_softmax_only`).
    Scaling the max after taking it assumes a scale of at least 0, as a softmax temperature is; a negative
    one fails the evaluator's check."""
    found = _scaled_scores(kernel)
    if found is None:
        return None
    calls, scaled = found
    scores = scaled.assigns[0][0]
    scale = _base2_scale(scaled.found[0].value)
    pairs: Pairs = [(value, product) for _, value, product in scaled.assigns]
    for node in walk(kernel.node.body):
        if is_tl_call(node, "max") and node.args and _is_name(node.args[0].value, scores):
            pairs.append((node, cst.BinaryOperation(left=node, operator=cst.Multiply(), right=scale)))
    for call in calls.exps:
        difference = call.args[0].value
        assert isinstance(difference, cst.BinaryOperation)
        if _is_name(difference.left, scores):
            scaled_left = cst.BinaryOperation(left=difference.left, operator=cst.Multiply(), right=scale)
            pairs.append((call, _to_exp2(call, difference.with_changes(left=scaled_left))))
        elif _name_of(difference.left) is not None and _name_of(difference.left).value == scores:
            return None  # a subscripted score tile: not the form this rewrite writes
        elif _name_of(difference.right) is not None and _name_of(difference.right).value == scores:
            return None  # scores subtracted: they would stay unscaled there
        else:
            pairs.append((call, _to_exp2(call)))
    return pairs


def _is_name(node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _exp2_softmax(kernel: KernelDef) -> Pairs | None:
    found = _scaled_scores(kernel)
    if found is None:
        return None
    calls, scaled = found
    pairs: Pairs = [
        (
            scale,
            cst.BinaryOperation(
                left=cst.Name(scale.value),
                operator=cst.Multiply(),
                right=cst.Float(LOG2_E),
                lpar=[cst.LeftParen()],
                rpar=[cst.RightParen()],
            ),
        )
        for scale in scaled.found  # one per copy of the loop (after a diagonal split, three)
    ]
    pairs.extend((call, _to_exp2(call)) for call in calls.exps)
    return pairs


# --------------------------------------------------------------------------------------------------------------
# diagonal_split
# --------------------------------------------------------------------------------------------------------------


def _assigned(statements: Any, name: str) -> cst.BaseExpression | None:
    """The value of the single-target assignment to ``name`` among ``statements`` (the last one)."""
    found = None
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                    and small.targets[0].target.value == name
                ):
                    found = small.value
    return found


def _diagonal_mask(statement: cst.BaseStatement, flags: set[str]) -> tuple[str, str, str] | None:
    """``if FLAG: x = x & (keys <= queries)``: (FLAG, key offsets' name, query offsets' name)."""
    if not (
        isinstance(statement, cst.If)
        and statement.orelse is None
        and isinstance(statement.test, cst.Name)
        and statement.test.value in flags
        and isinstance(statement.body, cst.IndentedBlock)
        and len(statement.body.body) == 1
        and isinstance(statement.body.body[0], cst.SimpleStatementLine)
        and len(statement.body.body[0].body) == 1
    ):
        return None
    assign = statement.body.body[0].body[0]
    if not (isinstance(assign, cst.Assign) and isinstance(assign.value, cst.BinaryOperation)):
        return None
    if not isinstance(assign.value.operator, cst.BitAnd):
        return None
    compare = assign.value.right
    if not (isinstance(compare, cst.Comparison) and len(compare.comparisons) == 1):
        return None
    op = compare.comparisons[0].operator
    left, right = base_name(compare.left), base_name(compare.comparisons[0].comparator)
    if left is None or right is None:
        return None
    if isinstance(op, (cst.LessThanEqual, cst.LessThan)):
        return statement.test.value, left, right  # keys <= queries
    if isinstance(op, (cst.GreaterThanEqual, cst.GreaterThan)):
        return statement.test.value, right, left  # queries >= keys
    return None


def _diagonal_split(kernel: KernelDef) -> tuple[Pairs, str] | None:
    body = kernel.node.body
    assert isinstance(body, cst.IndentedBlock)
    statements = list(body.body)
    for loop in statements:
        if not isinstance(loop, cst.For) or not isinstance(loop.target, cst.Name):
            continue
        bounds = range_from_zero(loop)
        if bounds is None or not isinstance(loop.body, cst.IndentedBlock):
            continue  # from a key other than 0, the blocks below the diagonal are not a prefix of the loop
        inner = list(loop.body.body)
        for index, statement in enumerate(inner):
            found = _diagonal_mask(statement, set(kernel.constexpr_params))
            if found is None:
                continue
            flag, keys, queries = found
            key_start = _assigned(inner, keys)
            query_start = _assigned(statements[: statements.index(loop)], queries)
            if key_start is None or query_start is None:
                continue
            keys_at, queries_at = arange_offsets(key_start), arange_offsets(query_start)
            if keys_at is None or queries_at is None:
                continue
            if not (_is_name(keys_at[0], loop.target.value) and same_code(keys_at[1], bounds[1])):
                continue  # key offsets not one block per step from the loop's own variable
            name = fresh_name(kernel.node, "diagonal_start")
            return _split_pairs(loop, bounds, index, flag, queries_at[0], name), flag
    return None


def _split_pairs(
    loop: cst.For,
    bounds: tuple[cst.BaseExpression, cst.BaseExpression],
    mask_index: int,
    flag: str,
    first_query: cst.BaseExpression,
    split_name: str,
) -> Pairs:
    """The loop, under ``if FLAG:``, as a loop up to the last key block wholly below the diagonal without the
    mask, then one from there with it; unchanged under ``else:``."""
    high, step = bounds
    code = cst.Module([]).code_for_node

    # Blocks starting below the last multiple of the step at or below the program's first query row, and
    # ending by the loop's own stop, are wholly below the diagonal.
    assign = cst.parse_statement(
        f"{split_name} = tl.minimum(({grouped(code(first_query))} // {grouped(code(step))}) * {grouped(code(step))}, "
        f"({grouped(code(high))} // {grouped(code(step))}) * {grouped(code(step))})\n"
    )

    def ranged(start: cst.BaseExpression, stop: cst.BaseExpression, body: cst.IndentedBlock) -> cst.For:
        call = cst.Call(func=cst.Name("range"), args=[cst.Arg(start), cst.Arg(stop), cst.Arg(step)])
        return loop.with_changes(iter=call, body=body, leading_lines=[])

    assert isinstance(loop.body, cst.IndentedBlock)
    unmasked = loop.body.with_changes(body=[s for i, s in enumerate(loop.body.body) if i != mask_index])
    below = ranged(cst.Integer("0"), cst.Name(split_name), unmasked)
    on = ranged(cst.Name(split_name), high, loop.body)
    split_if = cst.If(
        test=cst.Name(flag),
        body=cst.IndentedBlock(body=[assign, below, on]),
        orelse=cst.Else(body=cst.IndentedBlock(body=[loop.with_changes(leading_lines=[])])),
        leading_lines=loop.leading_lines,
    )
    return [(loop, split_if)]


# --------------------------------------------------------------------------------------------------------------
# attention_config
# --------------------------------------------------------------------------------------------------------------


def _config_changes(site: LaunchSite, max_warps: tuple[int, ...]) -> Iterator[tuple[str, str, Pairs, dict]]:
    from ksmith_mutate.edits import _grid_coupling  # edits imports this module

    literals = site.literal_ints()
    if "BLOCK_M" not in literals or "BLOCK_N" not in literals:
        return
    for name in ("BLOCK_M", "BLOCK_N"):
        _, grid_literals = _grid_coupling(site, name, literals[name])
        if grid_literals is None or grid_literals:
            return  # the grid divides by the tile's literal: left to the one-value edits, which follow it
    current = (literals["BLOCK_M"], literals["BLOCK_N"])
    for block_m, block_n, stages, warps in flex_attention_configs():
        if warps not in max_warps:
            continue
        wanted = {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}
        if all(literals.get(name) == value for name, value in wanted.items()):
            continue
        call = site.call
        for name, value in wanted.items():
            call = with_keyword(call, name, cst.Integer(str(value)))
        shrinks = block_m * block_n < current[0] * current[1]
        label = f"{block_m}x{block_n}, {warps} warps, {stages} stages"
        yield (
            "attention_config",
            f"attention config -> {label} (Inductor's flex-attention template) in {site.kernel} launch",
            [(site.call, call)],
            {"config": [block_m, block_n, stages, warps], "direction": "down" if shrinks else "up"},
        )

"""The ``whole_row`` edit: a row the kernel walks several times in blocks is read once when it fits in one block.

A hand-written row reduction (RMSNorm, LayerNorm, softmax) walks its row in blocks two or three times: the
sums, then the normalised output, each pass loading the row again. Inductor's *persistent* reduction, what
torch.compile emits for rows of a few thousand elements, loads the row once into registers and does every pass
there. On the suite's RMSNorm and LayerNorm (8192 rows of 4096 fp32) the looped seeds stayed at 0.81-0.88x of
torch.compile after 16 evaluations (docs/benchmarks.md section 4c): block size, warps and cache hints cannot
remove a pass over memory.

The edit keeps the loops for rows longer than a block, and adds in front of them the case where the row fits::

    if (n_cols > 0) & (n_cols <= BLOCK_SIZE):   # one block holds the row: every pass's one iteration,
        start = 0                                # straight-line, so the passes' loads of the same block
        cols = start + tl.arange(0, BLOCK_SIZE)  # are one load the compiler shares (same address, mask,
        x = tl.load(x_row + cols, ...)           # no store between them)
        ...
    else:
        for start in range(0, n_cols, BLOCK_SIZE):   # the loops as they were
            ...

and the launch passes ``BLOCK_SIZE=min(max(<as before>, triton.next_power_of_2(n_cols)), 8192)``, so the block
covers rows of up to 8192 elements (a row longer than that keeps the loops, now with larger blocks).

When ``0 < n_cols <= BLOCK_SIZE`` each ``for v in range(0, n_cols, BLOCK_SIZE)`` runs exactly once with
``v = 0``, so the straight-line branch computes what the loops compute, statement for statement. It is offered
only where that holds as written: two or more top-level loops of the kernel from 0 with the same bound and the
same constexpr step, bodies of simple statements (no nested loop, ``if``, ``break`` or ``continue``) that do
not assign the loop variable, only simple statements between them, and no name a loop body alone assigns read
after the loops (Triton keeps such a name inside the loop; the straight-line branch would not). The bound must
be a kernel parameter the launch passes, the step a constexpr the launch passes as an integer literal and its
grid does not read, and the module must import ``triton``.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ksmith_mutate.source_model import (
    KernelDef,
    SourceModel,
    imports_module,
    range_from_zero,
    read_after,
    reads_and_writes,
    simple_statements,
    walk,
    with_keyword,
)
from ksmith_mutate.tma import _code, _launch_argument

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]

# The largest block the launch asks for: 8192 fp32 elements are 64 registers a thread at 4 warps for each value
# the kernel keeps of the row; longer rows keep their loops.
MAX_BLOCK = 8192


def whole_row_changes(model: SourceModel) -> Iterator[tuple[str, Pairs, dict]]:
    """(description, pairs, detail) for each kernel whose row passes can read one block once."""
    if not imports_module(model.module, "triton"):
        return
    for kernel in model.kernels.values():
        region = _passes(kernel)
        if region is None:
            continue
        first, last, stop, step = region
        sites = [s for s in model.launches if s.kernel == kernel.name]
        if len(sites) != 1:
            continue  # each launch would need its own block; one launch is the case that matters
        site = sites[0]
        block = site.keyword(step)
        bound = _launch_argument(site, kernel, stop)
        if block is None or not isinstance(block.value, cst.Integer) or bound is None:
            continue
        if isinstance(bound, cst.Integer) and int(bound.evaluated_value) > MAX_BLOCK:
            continue  # a literal row longer than any block the edit asks for: the branch would never run
        if any(step in _code(g) for g in site.grid_exprs):
            continue  # a grid sized by the block would change with it
        statements = list(kernel.node.body.body)
        rewritten = _with_fast_path(statements, first, last, stop, step)
        body = kernel.node.body.with_changes(body=rewritten)
        bound_code = _code(bound)
        value = cst.parse_expression(
            f"min(max({block.value.value}, triton.next_power_of_2({bound_code})), {MAX_BLOCK})"
        )
        loops = sum(isinstance(s, cst.For) for s in statements[first : last + 1])
        yield (
            f"{loops} passes of {kernel.name} over a row that fits one {step} read it once "
            f"({step}={block.value.value} -> covers {bound_code} up to {MAX_BLOCK})",
            [
                (kernel.node, kernel.node.with_changes(body=body)),
                (site.call, with_keyword(site.call, step, value)),
            ],
            {"direction": "up", "loops": loops},
        )


def _passes(kernel: KernelDef) -> tuple[int, int, str, str] | None:
    """(index of the first loop, index of the last, bound name, step name) of the kernel's top-level passes
    over one row, or ``None``."""
    statements = list(kernel.node.body.body)
    loops = [i for i, s in enumerate(statements) if isinstance(s, cst.For)]
    if len(loops) < 2:
        return None
    keys = {_pass_key(statements[i], kernel) for i in loops}
    if len(keys) != 1 or None in keys:
        return None
    stop, step = next(iter(keys))  # type: ignore[misc]
    first, last = loops[0], loops[-1]
    between = statements[first : last + 1]
    if any(not isinstance(s, (cst.For, cst.SimpleStatementLine)) for s in between):
        return None
    # Names only a loop body assigns stay inside that loop in Triton: read after the loops, the straight-line
    # branch would hand on a value the loops never did.
    top_level: set[str] = set()
    for statement in statements[: last + 1]:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                top_level |= set(reads_and_writes(small)[1])
    loop_only: set[str] = set()
    for i in loops:
        loop = statements[i]
        loop_only.add(loop.target.value)  # type: ignore[attr-defined]
        for small in simple_statements(loop.body) or []:  # type: ignore[attr-defined]
            loop_only |= set(reads_and_writes(small)[1]) - top_level
    if read_after(loop_only, statements[last + 1 :]):
        return None
    if any(
        stop in reads_and_writes(small)[1]
        for s in between
        if isinstance(s, cst.SimpleStatementLine)
        for small in s.body
    ):
        return None
    return first, last, stop, step


def _pass_key(loop: cst.For, kernel: KernelDef) -> tuple[str, str] | None:
    bounds = range_from_zero(loop)
    if bounds is None or not isinstance(loop.target, cst.Name) or loop.orelse is not None:
        return None
    stop, step = bounds
    if not (isinstance(stop, cst.Name) and isinstance(step, cst.Name)):
        return None
    if stop.value not in kernel.params or step.value not in kernel.constexpr_params:
        return None
    body = simple_statements(loop.body)
    if not body:
        return None
    variable = loop.target.value
    for small in body:
        if isinstance(small, (cst.Break, cst.Continue, cst.Return)):
            return None
        if variable in reads_and_writes(small)[1]:
            return None
    if any(isinstance(n, (cst.Lambda, cst.GeneratorExp, cst.ListComp)) for n in walk(loop.body)):
        return None
    return stop.value, step.value


def _with_fast_path(
    statements: list[cst.BaseStatement], first: int, last: int, stop: str, step: str
) -> list[cst.BaseStatement]:
    region = statements[first : last + 1]
    straight: list[cst.BaseStatement] = []
    for statement in region:
        if isinstance(statement, cst.For):
            start = cst.parse_statement(f"{statement.target.value} = 0")  # type: ignore[attr-defined]
            straight.append(start)
            straight.extend(statement.body.body)  # type: ignore[attr-defined]
        else:
            straight.append(statement)
    straight = [s.with_changes(leading_lines=[]) if i == 0 else s for i, s in enumerate(straight)]
    region = [s.with_changes(leading_lines=[]) if i == 0 else s for i, s in enumerate(region)]
    fast = cst.If(
        test=cst.parse_expression(f"({stop} > 0) & ({stop} <= {step})"),
        body=cst.IndentedBlock(body=straight),
        orelse=cst.Else(body=cst.IndentedBlock(body=region)),
        leading_lines=statements[first].leading_lines,
    )
    return [*statements[:first], fast, *statements[last + 1 :]]

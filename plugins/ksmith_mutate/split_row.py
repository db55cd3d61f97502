"""The ``split_row`` edit: a row too long for one program's registers split over several programs that meet.

A row reduction over rows longer than a block (a softmax over a 32768-wide vocabulary) walks each row in
blocks twice: the running sums, then the normalised output. With one program per row the second pass finds
little of the row still in L2, so the row is read from DRAM about twice; Inductor's looped reduction does the
same. ``whole_row`` cannot help: such a row does not fit one program's registers.

The edit gives each row ``SPLIT_ROW`` programs. Each holds one slice of the row (one block) in registers and
runs every pass on it, straight-line, as ``whole_row`` does for one block; where the original code reduces a
pass's per-lane values to the row's value (``tl.sum``, ``tl.max`` or ``tl.min`` between the passes), each
program reduces its slice, publishes the partial, waits until the row's other programs have published theirs,
and combines them (``_split_row_reduce``). The row is read from DRAM once (docs/benchmarks.md section 4d
measures it on the suite's online softmax). A row's maximum followed by its sum of ``tl.exp(x - max)`` meets
once, the sums rescaled from each program's maximum to the row's (``_split_row_online_softmax``).

Why it is correct where it is offered: between the passes the code acts on lanes elementwise and reduces them
only through those full reductions, so partitioning the lanes over programs and reducing over all of them
gives the row's value (summed or compared in another order, as any block size does). Each program's slice is
``start = part * BLOCK`` in every pass, which the loops would visit as one of their iterations. It is offered
only where ``whole_row``'s conditions hold (top-level passes from 0 with one bound and one constexpr step,
simple bodies, nothing loop-local read after them) and further: the kernel is one-dimensional (no ``[:, None]``
tiles), takes its row from ``tl.program_id(0)`` and never reads ``tl.num_programs``, has no reduction, scan,
atomic or barrier in its passes or outside them, nor in a jit helper it calls (only the full reductions
between the passes, not nested, not in a conditional expression), no ``tl.arange`` between the passes, and no other compound statement; the
launch passes the step as a literal, its grid is a one-element tuple, and the module imports torch and triton.

Waiting needs the programs of a row to run at once. NVIDIA GPUs start a launch's programs in the order of
their number (what is observed, not a documented guarantee), so when a program waits, the row's lower-numbered
programs have started and its higher-numbered ones start as soon as any program ends: only the row started
last can wait for programs not yet running, and it needs ``SPLIT_ROW`` programs resident, far fewer than a
GPU holds. (Numbering programs by an atomic ticket would guarantee the order on any device; on the H100 it cost
7 %, so it is not done.) The per-row arrival counters and the partials live in one int32 buffer the launch
zeroes (``_split_row_sync``); the launch sizes the slice and the warps (about 16 elements a thread) from the
row's length. Rows longer than ``SPLIT_ROW`` blocks keep the loops, in the row's first program. Triton's
interpreter runs programs one after another, so a wait there never ends: ``_split_row_sync`` refuses to run
under it with more than one program a row, and the proposer does not offer the edit to runs evaluated on the
CPU (``ksmith_mutate.plugin``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from ksmith_mutate.source_model import (
    KernelDef,
    SourceModel,
    grouped,
    imports_module,
    is_tl_call,
    launch_grid,
    name_of,
    read_after,
    read_names,
    walk,
    with_keyword,
    with_launch_grid,
)
from ksmith_mutate.tma import _code, _launch_argument
from ksmith_mutate.whole_row import MAX_BLOCK, _passes

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]

PARAM = "SPLIT_ROW"
SYNC = "split_row_sync"
SPLITS = (4, 8, 16)  # programs per row offered; a row of 32768 fp32 is 8192-2048 elements a program
REDUCTIONS = {"sum": 0, "max": 1, "min": 2}  # the combine of each, by code in _split_row_reduce
# What the passes and the code around them may not call: results that depend on which lanes a program holds
# (reductions and scans outside the combined ones, shape changes), or that see other programs.
NOT_LANEWISE = {
    "sum", "max", "min", "reduce", "argmax", "argmin", "cumsum", "cumprod", "associative_scan", "xor_sum",
    "sort", "histogram", "flip", "reshape", "view", "trans", "permute", "broadcast_to", "expand_dims", "join",
    "split", "interleave", "dot", "dot_scaled", "debug_barrier", "num_programs", "atomic_add", "atomic_and",
    "atomic_cas", "atomic_max", "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor", "gather",
}  # fmt: skip

HELPERS_SOURCE = f"""

def _split_row_sync(rows, split, slots, like):
    # One zeroed int32 buffer per launch for ksmith's split_row edit: [row] counts the meetings the row's
    # programs have arrived at, then the partials they publish (float32 bits), ``slots`` per program.
    import os

    if split > 1 and os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError(
            "split_row: a row's programs wait for each other, and Triton's interpreter runs one program at a time"
        )
    device = like.device if isinstance(like, torch.Tensor) else torch.device("cuda")
    return torch.zeros(rows + rows * split * slots, dtype=torch.int32, device=device)


def _split_row_block(n, split, least):
    # Each of a row's ``split`` programs holds one slice of it: a power of two, within the edit's limits.
    return min(max(least, triton.next_power_of_2(triton.cdiv(n, split))), {MAX_BLOCK})


def _split_row_warps(n, split, least):
    # About 16 elements of the slice a thread: fewer warps spill, more leave too little work per thread.
    return min(16, max(4, _split_row_block(n, split, least) // 512))


@triton.jit
def _split_row_meet(sync, row, ROUND: tl.constexpr, SPLIT: tl.constexpr):
    # This program has published its partials for the row's ROUND-th meeting: wait for the row's others.
    tl.debug_barrier()
    tl.atomic_add(sync + row, 1, sem="release")
    seen = tl.atomic_add(sync + row, 0, sem="acquire")
    while seen < SPLIT * (ROUND + 1):
        seen = tl.atomic_add(sync + row, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def _split_row_reduce(local, sync, row, part, rows, SLOT: tl.constexpr, SLOTS: tl.constexpr, ROUND: tl.constexpr, SPLIT: tl.constexpr, OP: tl.constexpr):
    # One full reduction of a row split over SPLIT programs (OP 0 sum, 1 max, 2 min): publish this program's
    # partial, meet, combine every program's.
    partials = (sync + rows).to(tl.pointer_type(tl.float32)) + row * SPLIT * SLOTS + SLOT
    tl.store(partials + part * SLOTS, local)
    _split_row_meet(sync, row, ROUND, SPLIT)
    values = tl.load(partials + tl.arange(0, SPLIT) * SLOTS, volatile=True)
    if OP == 0:
        combined = tl.sum(values, axis=0)
    elif OP == 1:
        combined = tl.max(values, axis=0)
    else:
        combined = tl.min(values, axis=0)
    return combined.to(local.dtype)


@triton.jit
def _split_row_online_softmax(local_max, local_sum, sync, row, part, rows, SLOT: tl.constexpr, SLOTS: tl.constexpr, ROUND: tl.constexpr, SPLIT: tl.constexpr):
    # A row's maximum and its sum of exp(x - maximum), in one meeting: each program's sum is relative to its
    # own maximum and is rescaled to the row's (exp(a - M) = exp(a - m) * exp(m - M)).
    partials = (sync + rows).to(tl.pointer_type(tl.float32)) + row * SPLIT * SLOTS + SLOT
    tl.store(partials + part * SLOTS, local_max)
    tl.store(partials + part * SLOTS + 1, local_sum)
    _split_row_meet(sync, row, ROUND, SPLIT)
    maxima = tl.load(partials + tl.arange(0, SPLIT) * SLOTS, volatile=True)
    sums = tl.load(partials + tl.arange(0, SPLIT) * SLOTS + 1, volatile=True)
    row_max = tl.max(maxima, axis=0)
    row_sum = tl.sum(tl.where(maxima == float("-inf"), 0.0, sums * tl.exp(maxima - row_max)), axis=0)
    return row_max.to(local_max.dtype), row_sum.to(local_sum.dtype)
"""


def split_row_changes(
    model: SourceModel, splits: tuple[int, ...] = SPLITS
) -> Iterator[tuple[str, Pairs, dict]]:
    """(description, pairs, detail) for each kernel whose long rows can be split, once per split in
    ``splits``."""
    if not imports_module(model.module, "triton") or not imports_module(model.module, "torch"):
        return
    code = model.module.code
    if "def _split_row_reduce" in code or "def _split_row_sync" in code:
        return  # already split once; the helpers would be defined twice
    # A jit helper that reduces or sees other programs would do so on one program's slice.
    not_lanewise = {name for name, k in model.kernels.items() if _calls_any(k.node.body, NOT_LANEWISE)}
    for kernel in model.kernels.values():
        shape = _shape(kernel)
        if shape is None or any(
            isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in not_lanewise
            for n in walk(kernel.node.body)
        ):
            continue
        first, last, stop, step, reductions = shape
        sites = [s for s in model.launches if s.kernel == kernel.name]
        if len(sites) != 1:
            continue
        site = sites[0]
        launch = _launch_parts(site, kernel, stop, step)
        if launch is None:
            continue
        rows, bound, like, block = launch
        meetings = _meetings(list(kernel.node.body.body), first, last, reductions)
        slots = sum(m.slots for m in meetings)
        new_kernel = _split_kernel(kernel, first, last, stop, step, meetings)
        helpers = list(cst.parse_module(HELPERS_SOURCE).body)
        helpers[0] = helpers[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        for split in splits:
            call = _split_launch(site, rows, bound, like, step, block, split, slots)
            yield (
                f"rows of {kernel.name} split over {split} programs that meet {len(meetings)} time(s) to combine "
                f"{len(reductions)} reduction(s) ({step} -> a slice of {_code(bound)} / {split}, up to {MAX_BLOCK})",
                [(kernel.node, cst.FlattenSentinel([*helpers, new_kernel])), (site.call, call)],
                {"direction": "up", "split": split, "reductions": len(reductions), "meetings": len(meetings)},
            )


def _shape(kernel: KernelDef) -> tuple[int, int, str, str, list[cst.Call]] | None:
    """(first loop, last loop, bound, step, the full reductions between the passes in evaluation order) of a
    kernel the edit may split, or ``None``."""
    region = _passes(kernel)
    if region is None:
        return None
    first, last, stop, step = region
    statements = list(kernel.node.body.body)
    if any(not isinstance(s, cst.SimpleStatementLine) for s in statements[:first] + statements[last + 1 :]):
        return None
    if not any(_is_program_id_0(n) for n in walk(kernel.node.body)):
        return None
    if any(isinstance(n, cst.Subscript) and "None" in _code(n) for n in walk(kernel.node.body)):
        return None  # a 2-D tile: its axis-0 reductions are not over the row
    between = [s for s in statements[first : last + 1] if isinstance(s, cst.SimpleStatementLine)]
    outside = [s for i, s in enumerate(statements) if not (first <= i <= last) or isinstance(s, cst.For)]
    if any(_calls_any(s, NOT_LANEWISE) for s in outside):
        return None
    reductions: list[cst.Call] = []
    for statement in between:
        for node in walk(statement):
            if isinstance(node, (cst.IfExp, cst.BooleanOperation, cst.Lambda)) and _calls_any(
                node, REDUCTIONS
            ):
                return None  # evaluated only sometimes: every program must meet at every reduction
            if is_tl_call(node, "arange"):
                return None  # lane numbers between the passes would count within a slice
            if is_tl_call(node, *REDUCTIONS):
                if not _full_reduction(node) or any(_calls_any(a, REDUCTIONS) for a in node.args):  # type: ignore[attr-defined]
                    return None
                reductions.append(node)  # type: ignore[arg-type]
            elif _calls_any(node, NOT_LANEWISE, here=True):
                return None
    if not reductions:
        return None  # passes that never combine lanes need no meeting: whole_row or the loops suffice
    return first, last, stop, step, reductions


def _is_program_id_0(node: cst.CSTNode) -> bool:
    if not is_tl_call(node, "program_id"):
        return False
    args = node.args  # type: ignore[attr-defined]
    return len(args) == 1 and isinstance(args[0].value, cst.Integer) and args[0].value.value == "0"


def _calls_any(node: cst.CSTNode, names, here: bool = False) -> bool:
    nodes = [node] if here else walk(node)
    return any(is_tl_call(n, *names) or _is_method_call(n, names) for n in nodes)


def _is_method_call(node: cst.CSTNode, names) -> bool:
    # ``x.sum()``-style reductions on a tensor
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in names
        and not (isinstance(node.func.value, cst.Name) and node.func.value.value in ("tl", "triton", "math"))
        and node.func.attr.value not in ("max", "min")  # Python's own max/min of scalars stay allowed
    )


def _full_reduction(call: cst.Call) -> bool:
    """``tl.sum(x)`` or ``tl.sum(x, 0)`` / ``axis=0`` of a one-dimensional value, nothing else passed."""
    positional = [a for a in call.args if a.keyword is None]
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    if len(positional) not in (1, 2) or set(keywords) - {"axis"}:
        return False
    axis = positional[1].value if len(positional) == 2 else keywords.get("axis")
    return axis is None or (isinstance(axis, cst.Integer) and axis.value == "0")


def _launch_parts(site, kernel: KernelDef, stop: str, step: str):
    """(rows, bound, a tensor argument, the literal block) of the one launch, or ``None`` where its grid or
    block does not fit."""
    block = site.keyword(step)
    bound = _launch_argument(site, kernel, stop)
    if block is None or not isinstance(block.value, cst.Integer) or bound is None:
        return None
    if PARAM in kernel.params or SYNC in kernel.params:
        return None
    grid = launch_grid(site.call)
    if not (isinstance(grid, cst.Tuple) and len(grid.elements) == 1):
        return None
    rows = grid.elements[0].value
    if step in _code(rows):
        return None
    positional = [a for a in site.call.args if a.keyword is None and a.star == ""]
    if not positional:
        return None
    return rows, bound, positional[0].value, block.value.value


class _RowFromPart(cst.CSTTransformer):
    # ``tl.program_id(0)`` numbered rows; with SPLIT_ROW programs a row it is ``_ks_row``.
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return cst.Name("_ks_row") if _is_program_id_0(original_node) else updated_node


@dataclass(frozen=True)
class _Meeting:
    """One wait of a row's programs for each other: a full reduction (``call``), or a row's maximum and its
    sum of exponentials relative to it (``pair``: the two lines, combined in one meeting)."""

    round: int
    slot: int
    call: cst.Call | None = None
    pair: tuple[cst.SimpleStatementLine, cst.SimpleStatementLine] | None = None

    @property
    def slots(self) -> int:
        return 2 if self.pair else 1


def _meetings(
    statements: list[cst.BaseStatement], first: int, last: int, reductions: list[cst.Call]
) -> list[_Meeting]:
    pairs = {id(p[0]): p for p in _online_softmax_pairs(statements, first, last)}
    paired_sums = {id(_assigned(p[1])[1]) for p in pairs.values()}  # type: ignore[index]
    meetings: list[_Meeting] = []
    slot = 0
    by_call = {id(r): r for r in reductions}
    for statement in statements[first : last + 1]:
        if isinstance(statement, cst.For):
            continue
        pair = pairs.get(id(statement))
        if pair is not None:
            meetings.append(_Meeting(len(meetings), slot, pair=pair))
            slot += 2
            continue
        for node in walk(statement):
            if id(node) in by_call and id(node) not in paired_sums:
                meetings.append(_Meeting(len(meetings), slot, call=by_call[id(node)]))
                slot += 1
    return meetings


def _assigned(line: cst.BaseStatement) -> tuple[str, cst.BaseExpression] | None:
    """(name, value) of a line that is one ``name = value``."""
    if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
        return None
    small = line.body[0]
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
        return None
    name = name_of(small.targets[0].target)
    return (name, small.value) if name else None


def _online_softmax_pairs(
    statements, first: int, last: int
) -> Iterator[tuple[cst.SimpleStatementLine, cst.SimpleStatementLine]]:
    """(max line, sum line) of each ``m = tl.max(a)`` followed, before the next pass, by ``s = tl.sum(b)`` where
    ``b`` is a product with one factor ``tl.exp(x - m)`` (or ``tl.where(c, 0.0, tl.exp(x - m))``) and nothing
    else depending on ``m``: each program's sum is then rescalable from its own maximum to the row's, and the
    two need one meeting. Lines between them must be plain assignments without reductions, and what they
    compute from ``m`` must not be read after the sum (it would hold this program's maximum, not the row's)."""
    region = statements[first : last + 1]
    for i, line in enumerate(region):
        head = _assigned(line)
        if head is None or not (is_tl_call(head[1], "max") and _full_reduction(head[1])):  # type: ignore[arg-type]
            continue
        m = head[0]
        values: dict[str, cst.BaseExpression] = {}
        for j in range(i + 1, len(region)):
            step = _assigned(region[j])
            if step is None:
                break
            name, value = step
            if is_tl_call(value, "sum") and _full_reduction(value):  # type: ignore[arg-type]
                argument = value.args[0].value  # type: ignore[attr-defined]
                if _rescalable(argument, m, values):
                    tainted = {n for n in values if _depends(values[n], m, values)}
                    rest = list(region[j + 1 :]) + list(statements[last + 1 :])
                    if name != m and not read_after(tainted, rest):
                        yield line, region[j]  # type: ignore[misc]
                break
            if name == m or name in values or _calls_any(value, NOT_LANEWISE):
                break
            values[name] = value


def _depends(node: cst.CSTNode, m: str, values: dict[str, cst.BaseExpression]) -> bool:
    names = set(read_names(node))
    return m in names or any(_depends(values[n], m, values) for n in names & set(values))


def _rescalable(argument: cst.BaseExpression, m: str, values: dict[str, cst.BaseExpression]) -> bool:
    factors = _factors(argument, values)
    dependent = [f for f in factors if _depends(f, m, values)]
    return len(dependent) == 1 and _exp_of_difference(dependent[0], m, values)


def _factors(node: cst.BaseExpression, values: dict[str, cst.BaseExpression]) -> list[cst.BaseExpression]:
    if isinstance(node, cst.Name) and node.value in values:
        return _factors(values[node.value], values)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        return _factors(node.left, values) + _factors(node.right, values)
    return [node]


def _exp_of_difference(node: cst.BaseExpression, m: str, values: dict[str, cst.BaseExpression]) -> bool:
    """``tl.exp(x - m)`` with ``x`` free of ``m``, or ``tl.where(c, 0.0, <that>)`` / ``tl.where(c, <that>, 0.0)``
    with ``c`` free of ``m`` (through the names in ``values``)."""
    if isinstance(node, cst.Name) and node.value in values:
        return _exp_of_difference(values[node.value], m, values)
    if is_tl_call(node, "exp") and len(node.args) == 1:  # type: ignore[attr-defined]
        inner = node.args[0].value  # type: ignore[attr-defined]
        return (
            isinstance(inner, cst.BinaryOperation)
            and isinstance(inner.operator, cst.Subtract)
            and isinstance(inner.right, cst.Name)
            and inner.right.value == m
            and not _depends(inner.left, m, values)
        )
    if is_tl_call(node, "where") and len(node.args) == 3 and all(a.keyword is None for a in node.args):  # type: ignore[attr-defined]
        condition, a, b = (arg.value for arg in node.args)  # type: ignore[attr-defined]
        if _depends(condition, m, values):
            return False
        if _is_zero(a):
            return _exp_of_difference(b, m, values)
        return _is_zero(b) and _exp_of_difference(a, m, values)
    return False


def _is_zero(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Float, cst.Integer)) and float(node.value) == 0.0


class _Combine(cst.CSTTransformer):
    """Each full reduction met alone becomes ``_split_row_reduce`` of it."""

    def __init__(self, meetings: list[_Meeting], slots: int) -> None:
        super().__init__()
        self.by_call = {id(m.call): m for m in meetings if m.call is not None}
        self.slots = slots

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        meeting = self.by_call.get(id(original_node))
        if meeting is None:
            return updated_node
        op = REDUCTIONS[original_node.func.attr.value]  # type: ignore[attr-defined]
        return cst.parse_expression(
            f"_split_row_reduce({_code(updated_node)}, {SYNC}, _ks_row, _ks_part, _ks_rows, "
            f"{meeting.slot}, {self.slots}, {meeting.round}, {PARAM}, {op})"
        )


def _split_kernel(
    kernel: KernelDef, first: int, last: int, stop: str, step: str, meetings: list[_Meeting]
) -> cst.FunctionDef:
    statements = list(kernel.node.body.body)
    slots = sum(m.slots for m in meetings)
    combine = _Combine(meetings, slots)
    after_sum = {id(m.pair[1]): m for m in meetings if m.pair is not None}
    straight: list[cst.BaseStatement] = []
    for statement in statements[first : last + 1]:
        if isinstance(statement, cst.For):
            target = statement.target.value  # type: ignore[attr-defined]
            start = cst.parse_statement(f"{target} = _ks_part * {step}")
            straight.append(start.with_changes(leading_lines=statement.leading_lines))
            straight.extend(statement.body.body)  # type: ignore[attr-defined]
            continue
        straight.append(statement.visit(combine))  # type: ignore[arg-type]
        meeting = after_sum.get(id(statement))
        if meeting is not None:
            m = _assigned(meeting.pair[0])[0]  # type: ignore[index]
            total = _assigned(statement)[0]  # type: ignore[index]
            straight.append(
                cst.parse_statement(
                    f"{m}, {total} = _split_row_online_softmax({m}, {total}, {SYNC}, _ks_row, _ks_part, _ks_rows, "
                    f"{meeting.slot}, {slots}, {meeting.round}, {PARAM})"
                )
            )
    straight = [s.with_changes(leading_lines=[]) if i == 0 else s for i, s in enumerate(straight)]
    loops = [
        s.with_changes(leading_lines=[]) if i == 0 else s for i, s in enumerate(statements[first : last + 1])
    ]
    first_part_only = cst.If(test=cst.parse_expression("_ks_part == 0"), body=cst.IndentedBlock(body=loops))
    split = cst.If(
        test=cst.parse_expression(f"({stop} > 0) & ({stop} <= {PARAM} * {step})"),
        body=cst.IndentedBlock(body=straight),
        orelse=cst.Else(body=cst.IndentedBlock(body=[first_part_only])),
        leading_lines=statements[first].leading_lines,
    )
    prologue = [
        cst.parse_statement(f"_ks_row = tl.program_id(0) // {PARAM}"),
        cst.parse_statement(f"_ks_part = tl.program_id(0) % {PARAM}"),
        cst.parse_statement(f"_ks_rows = tl.num_programs(0) // {PARAM}"),
    ]
    body = [
        *prologue,
        *(s.visit(_RowFromPart()) for s in [*statements[:first], split, *statements[last + 1 :]]),
    ]
    params = kernel.node.params
    new_params = [
        *params.params,
        cst.Param(cst.Name(SYNC)),
        cst.Param(cst.Name(PARAM), annotation=cst.Annotation(cst.parse_expression("tl.constexpr"))),
    ]
    return kernel.node.with_changes(
        params=params.with_changes(params=new_params),
        body=kernel.node.body.with_changes(body=body),
    )


def _split_launch(site, rows, bound, like, step: str, before: str, split: int, slots: int) -> cst.Call:
    rows_code = grouped(_code(rows))
    grid = cst.parse_expression(f"({rows_code} * {split},)")
    call = with_launch_grid(site.call, grid)
    bound_code = _code(bound)
    call = with_keyword(
        call, step, cst.parse_expression(f"_split_row_block({bound_code}, {split}, {before})")
    )
    call = with_keyword(
        call, "num_warps", cst.parse_expression(f"_split_row_warps({bound_code}, {split}, {before})")
    )
    call = with_keyword(
        call, SYNC, cst.parse_expression(f"_split_row_sync({rows_code}, {split}, {slots}, {_code(like)})")
    )
    return with_keyword(call, PARAM, cst.Integer(str(split)))

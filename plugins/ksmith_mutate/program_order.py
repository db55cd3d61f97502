"""Edits of the order in which a launch's independent programs run: ``broadcast_reuse`` and ``grid_axes``.

``broadcast_reuse``: the programs of one column block run side by side across the rows.

A pointwise kernel over ``R`` rows of ``N`` elements that also reads an operand of ``N`` elements shared by every
row (LayerNorm's weight and bias, a bias over a long last dimension) runs its programs in flat order: all of row
0, then all of row 1. When a row streams more than L2 holds, the shared operand is gone again by the next row, so
it comes from DRAM once per row. Renumbering the programs so that program ``p`` takes row ``p % R`` of column
block ``p // R`` puts the ``R`` programs that read one block of the shared operand next to each other: it comes
from DRAM once. On an H100, KernelBench's LayerNorm over (64, 256, 256) per row (16 rows, weight and bias of
4 194 304 fp32 each) ran 1.43x faster than torch.compile so, 1.50x with 1024-element blocks
(benchmarks/results/h100-2026-11-24/memory-structure/ln_variants.log).

Recognised: a kernel whose one ``tl.program_id(0)`` gives the start of a block, ``offset = pid * BLOCK`` and
``index = offset + tl.arange(0, BLOCK)`` (Inductor's ``xoffset`` / ``xindex`` and the hand-written
``pid`` / ``offsets``), a column ``index % N`` with ``N`` a literal of at least :data:`MIN_SHARED_ELEMENTS`, a
load addressed by that column alone, and a known element count (a literal, or a parameter compared with the
index) of at least two rows. Only the order of independent programs changes, never what a program computes:
the renumbering is a bijection of the ``R * (N // BLOCK)`` programs of whole blocks and leaves every other
program (a tail, a larger grid) as it is, and a grid smaller than that keeps the flat order. So the kernel
must not let its programs see each other: no atomic, barrier, helper call or descriptor store, and nothing
stored through a pointer it also loads through.

``grid_axes``: a kernel on a two-dimensional grid (``program_id(0)`` and ``program_id(1)``) gets its two axes
swapped, in the kernel and in the grid of every launch. The GPU hands out programs with the first axis fastest,
so the swap decides which neighbours run together. A row-wise pointwise kernel with the row on axis 0 and the
column block on axis 1 (the suite's GeGLU seed) has neighbouring programs reading blocks a whole row apart;
swapped, they read neighbouring blocks, as a flat loop does: on an H100 the GeGLU at 8192 x 4096 went from 0.948x
to 0.980x of torch.compile at the seed's block (benchmarks/geglu_variants.py, docs/benchmarks.md §4f). Each
program computes what it did, so the same conditions as above hold (independent programs), and every launch
of the kernel must pass a grid of two elements the edit can rewrite (a literal pair, or a pair or ``lambda``
returning one assigned once and used by no other kernel's launch). A literal first axis above 65535 stays first:
the GPU's second axis holds no more.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ksmith_mutate.source_model import (
    KernelDef,
    SourceModel,
    address_base,
    address_bases,
    arange_width,
    assigned_values,
    fresh_name,
    grouped,
    has_other_effects,
    is_tl_call,
    keyword_value,
    literal_axis,
    name_of,
    pointer_arg,
    read_names,
    same_code,
    top_level_assignments,
    two_axis_grid,
    walk,
)

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]

# The largest grid a GPU runs along its second and third axes (CUDA's gridDim.y and .z).
MAX_GRID_YZ = 65535

# Below about a million elements (4 MB of fp32) the shared operand, and the rows streamed between two reads
# of it, fit in an H100's 50 MB L2: it is read from DRAM once already and the order changes nothing.
MIN_SHARED_ELEMENTS = 1 << 20


def broadcast_reuse_changes(model: SourceModel) -> Iterator[tuple[str, Pairs, dict]]:
    """(description, pairs, detail) for each kernel whose rows read one shared operand block by block."""
    helpers = set(model.kernels)
    for kernel in model.kernels.values():
        shape = _rows_and_columns(kernel, helpers)
        if shape is None:
            continue
        line, pid, block, columns, rows, shared = shape
        name = fresh_name(kernel.node, "xpid") if pid is None else pid
        code = cst.Module([]).code_for_node
        blocks = f"({columns} // {grouped(code(block))})"  # whole blocks per row
        whole = f"{rows} * {blocks}"
        order = (
            f"{name} = tl.where(({name} < {whole}) & (tl.num_programs(0) >= {whole}), "
            f"({name} % {rows}) * {blocks} + {name} // {rows}, {name})\n"
        )
        if pid is None:  # ``offset = tl.program_id(0) * BLOCK``: the program id gets a name first
            statement = line.body[0]
            value = statement.value  # type: ignore[attr-defined]
            call, other = (
                (value.left, value.right) if _is_program_id(value.left) else (value.right, value.left)
            )
            new = [
                cst.parse_statement(f"{name} = {code(call)}\n"),
                cst.parse_statement(order),
                line.with_changes(
                    body=[statement.with_changes(value=value.with_changes(left=cst.Name(name), right=other))]
                ),
            ]
        else:
            new = [line, cst.parse_statement(order)]
        shown = ", ".join(shared)
        yield (
            f"in {kernel.name}, the programs of the {rows} rows of each block side by side ({shown}, "
            f"{columns} elements shared by every row, read once per block instead of once per row)",
            [(line, cst.FlattenSentinel(new))],
            {"direction": "up", "rows": int(rows) if rows.isdigit() else rows, "shared_elements": columns},
        )


def _is_program_id(node: cst.BaseExpression) -> bool:
    """``tl.program_id(0)`` or ``tl.program_id(axis=0)``."""
    if not is_tl_call(node, "program_id"):
        return False
    axis = keyword_value(node, "axis")  # type: ignore[arg-type]
    if axis is None and node.args:  # type: ignore[attr-defined]
        axis = node.args[0].value  # type: ignore[attr-defined]
    return isinstance(axis, cst.Integer) and int(axis.evaluated_value) == 0


def _rows_and_columns(kernel: KernelDef, helpers: set[str]):
    """(line, pid, block, N, R, shared loads) where the kernel has the recognised shape, else None.

    ``line`` is the top-level line that takes the program id; ``pid`` the name it binds the bare id to (None
    where the line computes ``tl.program_id(0) * BLOCK`` itself); ``R`` the rows, a literal or the code that
    computes them from the element count."""
    body = kernel.node.body
    if sum(is_tl_call(n, "program_id") for n in walk(body)) != 1 or sum(
        is_tl_call(n, "num_programs") for n in walk(body)
    ):
        return None
    if has_other_effects(body, helpers) or address_bases(body, "store") & address_bases(body, "load"):
        return None
    assigned = assigned_values(body)
    once = {name for name, values in assigned.items() if len(values) == 1}
    lines = list(top_level_assignments(list(body.body)))
    values = {name: value for _, name, value in lines if name in once}

    # The program id and the block: ``offset = tl.program_id(0) * BLOCK``, or ``pid = tl.program_id(0)``
    # and ``offset = pid * BLOCK``; a name bound twice (an edited kernel's ``xpid``) is not followed.
    found = next(
        (
            (line, name, value)
            for line, name, value in lines
            if any(is_tl_call(n, "program_id") for n in walk(value))
        ),
        None,
    )
    if found is None or found[1] not in once or len(found[0].body) != 1:
        return None  # the line is replaced whole: one statement on it
    line, first, value = found
    if _is_program_id(value):
        pid, scaled = first, None
    else:
        pid, scaled = None, _scaled(value, _is_program_id)
        if scaled is None:
            return None
    if pid is None:
        offsets = {first: scaled}
    else:
        offsets = {
            name: b for name, value in values.items() if (b := _scaled(value, _named(pid))) is not None
        }
    index, block = None, None
    for name, value in values.items():
        start_width = _start_plus_arange(value)
        if start_width is None:
            continue
        start, width = start_width
        start_block = offsets.get(name_of(start) or "")
        if start_block is None and pid is not None:
            start_block = _scaled(start, _named(pid))  # ``pid * BLOCK + tl.arange(0, BLOCK)``
        if start_block is not None and same_code(start_block, width):
            index, block = name, width
            break
    if index is None:
        return None

    # The column ``index % N`` and the loads it alone addresses.
    columns = {name: n for name, value in values.items() if (n := _modulo_of(value, index)) is not None}
    if not columns:
        return None
    sources = _index_sources(values, index, set(columns))
    best = None
    for column, n in columns.items():
        shared = sorted(
            {
                address_base(address) or _code(address)
                for call in walk(body)
                if is_tl_call(call, "load")
                and (address := pointer_arg(call)) is not None  # type: ignore[arg-type]
                and _sources(address, sources) == {column}
            }
        )
        if n >= MIN_SHARED_ELEMENTS and shared and (best is None or n > best[0]):
            best = (n, shared)
    if best is None:
        return None
    n, shared = best
    rows = _rows(kernel, values, assigned, index, n)
    if rows is None:
        return None
    return line, pid, block, n, rows, shared


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node).strip()


def _scaled(value: cst.BaseExpression, is_id) -> cst.BaseExpression | None:
    """``B`` of ``id * B`` or ``B * id`` where ``is_id`` holds for ``id``."""
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
        if is_id(value.left):
            return value.right
        if is_id(value.right):
            return value.left
    return None


def _named(name: str):
    return lambda node: name_of(node) == name


def _start_plus_arange(value: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(start, width) of ``start + tl.arange(0, width)``, the arange possibly indexed (``[:]``)."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
        return None
    width = arange_width(value.right)
    return None if width is None else (value.left, width)


def _modulo_of(value: cst.BaseExpression, index: str) -> int | None:
    if (
        isinstance(value, cst.BinaryOperation)
        and isinstance(value.operator, cst.Modulo)
        and name_of(value.left) == index
        and isinstance(value.right, cst.Integer)
    ):
        return int(value.right.evaluated_value)
    return None


def _index_sources(
    values: dict[str, cst.BaseExpression], index: str, columns: set[str]
) -> dict[str, set[str]]:
    """For each top-level name, which of the index and the columns it is computed from (a column counts as
    itself, not as the index it is taken from)."""
    sources: dict[str, set[str]] = {index: {index}} | {c: {c} for c in columns}
    for name, value in values.items():  # in order: a name is bound before it is read
        if name not in sources:
            sources[name] = _sources(value, sources)
    return sources


def _sources(node: cst.CSTNode, sources: dict[str, set[str]]) -> set[str]:
    found: set[str] = set()
    for name in read_names(node):
        found |= sources.get(name, set())
    return found


def _rows(
    kernel: KernelDef,
    values: dict[str, cst.BaseExpression],
    assigned: dict[str, list[cst.BaseExpression]],
    index: str,
    columns: int,
) -> str | None:
    """How many rows of ``columns`` elements the kernel covers: a literal (Inductor binds ``xnumel`` to
    one), or ``(n // N)`` for a parameter ``n`` the index is compared with and the kernel never rebinds."""
    numel = None
    for value in values.values():
        if (
            isinstance(value, cst.Comparison)
            and name_of(value.left) == index
            and len(value.comparisons) == 1
            and isinstance(value.comparisons[0].operator, cst.LessThan)
        ):
            numel = name_of(value.comparisons[0].comparator)
            break
    if numel is None:
        numel = next((n for n in kernel.params if n.endswith("numel") and n in values), None)
    if numel is None:
        return None
    literal = values.get(numel)
    if isinstance(literal, cst.Integer):
        rows = int(literal.evaluated_value) // columns
        return str(rows) if rows >= 2 else None
    if numel in kernel.params and numel not in assigned:
        return f"({numel} // {columns})"
    return None


def grid_axes_changes(model: SourceModel) -> Iterator[tuple[str, Pairs, dict]]:
    """(description, pairs, detail) for each kernel on a two-axis grid whose axes can be swapped."""
    helpers = set(model.kernels)
    for kernel in model.kernels.values():
        calls = [n for n in walk(kernel.node.body) if is_tl_call(n, "program_id", "num_programs")]
        axes = [literal_axis(call) for call in calls]
        if None in axes or {a for a, call in zip(axes, calls) if is_tl_call(call, "program_id")} != {0, 1}:
            continue
        if set(axes) - {0, 1} or has_other_effects(kernel.node.body, helpers):
            continue
        grids = _two_axis_grids(model, kernel.name)
        if not grids:
            continue
        pairs: Pairs = [
            (call, _with_axis(call, 1 - axis)) for call, axis in zip(calls, axes) if axis is not None
        ]
        shown = []
        for grid in grids:
            pair = grid.body if isinstance(grid, cst.Lambda) else grid
            first, second = pair.elements  # type: ignore[union-attr]
            swapped = pair.with_changes(  # type: ignore[union-attr]
                elements=[first.with_changes(value=second.value), second.with_changes(value=first.value)]
            )
            new = grid.with_changes(body=swapped) if isinstance(grid, cst.Lambda) else swapped
            pairs.append((grid, new))
            shown.append(f"({_code(first.value)}, {_code(second.value)})")
        yield (
            f"in {kernel.name}, grid axes 0 and 1 swapped (program_id(0) <-> program_id(1); grid "
            f"{', '.join(dict.fromkeys(shown))} reversed): the programs that run side by side are the old "
            "second axis's neighbours",
            pairs,
            {"direction": "up"},
        )


def _with_axis(call: cst.Call, axis: int) -> cst.Call:
    args = [
        a.with_changes(value=cst.Integer(str(axis)))
        if (a.keyword is None or a.keyword.value == "axis")
        else a
        for a in call.args
    ]
    return call.with_changes(args=args)


def _two_axis_grids(model: SourceModel, kernel: str) -> list[cst.BaseExpression] | None:
    """The grid expression of every launch of ``kernel`` (each distinct node once): a pair, or a ``lambda``
    returning one; None if any launch's grid is something else, shared with another kernel's launch, or has a
    literal first axis too long for the second."""
    grids: list[cst.BaseExpression] = []
    sites = [site for site in model.launches if site.kernel == kernel]
    others = {id(e) for site in model.launches if site.kernel != kernel for e in site.grid_exprs}
    for site in sites:
        if len(site.grid_exprs) != 1 or id(site.grid_exprs[0]) in others:
            return None
        grid = site.grid_exprs[0]
        pair = two_axis_grid(grid)
        if pair is None:
            return None
        first = pair.elements[0].value
        if isinstance(first, cst.Integer) and int(first.evaluated_value) > MAX_GRID_YZ:
            return None
        if all(grid is not seen for seen in grids):
            grids.append(grid)
    return grids or None

"""The ``flip_fold`` edit: a kernel that only reverses the last dimension of another kernel's output is folded
into that kernel's store.

``torch.flip`` after a computation compiles, in Inductor, to a second kernel that reads the whole result back
and writes it reversed (``out[i, j] = buf[i, N - 1 - j]``): a full extra pass over memory. Where the producer
stores row element ``r`` of row ``x`` at ``r + N * x``, it can store it at ``N - 1 - r + N * x`` instead,
and the copy goes. KernelBench's reverse cumsum (``cumsum(x.flip(1), 1).flip(1)``) is such a pair: on an H100
the folded kernel ran 1.66x faster than torch.compile's two (benchmarks/results/h100-2026-11-24/
memory-structure/variants.log).

What is checked, so that the fold is exact: the copy kernel holds one load and one store, storing at
``i`` what it loaded at ``(N - 1) - i % N + N * (i // N)``; the producer is launched once, and its only store
into that buffer has the address ``r + N * x`` with ``r < N`` as its mask (or ``&``-ed into it); the producer
does not read that buffer, nothing between the two launches or after the copy mentions it, and the copy's
output is allocated exactly as the buffer is.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ksmith_mutate.source_model import KernelDef, LaunchSite, SourceModel, assigned_values, name_of, walk

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]


def flip_fold_changes(model: SourceModel) -> Iterator[tuple[str, Pairs, dict]]:
    """(description, pairs, detail) for each flip-copy launch whose producer's store can take the flip."""
    for function in _functions_with_launches(model):
        lines = list(function.body.body)
        for position, line in enumerate(lines):
            copy = _launch_in(model, line)
            if copy is None:
                continue
            flip = _flip_width(model.kernels.get(copy.kernel))
            if flip is None or len(copy.call.args) < 2:
                continue
            source, target = (name_of(arg.value) for arg in copy.call.args[:2])
            if source is None or target is None or _mentions(lines[position + 1 :], source):
                continue
            producer = _producer(model, lines[:position], source)
            if producer is None:
                continue
            site, parameter = producer
            if sum(other.kernel == site.kernel for other in model.launches) != 1:
                continue  # the store is rewritten for every launch of the producer, not only this one
            between = lines[lines.index(_line_of(lines, site)) + 1 : position]
            if _mentions(between, source):
                continue  # read (or passed on) before the copy: it would see the rows reversed
            allocations = _allocation(lines[:position], source), _allocation(lines[:position], target)
            if None in allocations or not _same_allocation(*allocations):  # type: ignore[arg-type]
                continue  # ``target = source`` would change the output's dtype, size or strides
            store = _flippable_store(model.kernels[site.kernel], parameter, flip)
            if store is None:
                continue
            address, flipped = store
            pairs: Pairs = [
                (address, flipped),
                (
                    line,
                    cst.parse_statement(f"{target} = {source}\n").with_changes(
                        leading_lines=line.leading_lines
                    ),
                ),
            ]
            stale = [allocations[1]] + _dead_grid(lines, position, copy)
            if sum(site.kernel == copy.kernel for site in model.launches) == 1:
                stale.append(model.kernels[copy.kernel].node)  # no longer launched: nothing left to tune
            pairs += [(node, cst.RemovalSentinel.REMOVE) for node in stale]
            yield (
                f"fold {copy.kernel} (reverses the last {flip} elements of each row) into {site.kernel}'s store",
                pairs,
                {"direction": "up"},
            )


def _functions_with_launches(model: SourceModel) -> list[cst.FunctionDef]:
    calls = {id(site.call) for site in model.launches}
    return [
        node
        for node in walk(model.module)
        if isinstance(node, cst.FunctionDef)
        and node.name.value not in model.kernels
        and any(id(n) in calls for n in walk(node))
    ]


def _launch_in(model: SourceModel, line: cst.CSTNode) -> LaunchSite | None:
    """The launch a statement line is, where it is nothing else (``kernel[grid](...)``)."""
    if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
        return None
    expression = line.body[0]
    if not isinstance(expression, cst.Expr):
        return None
    return next((s for s in model.launches if s.call is expression.value), None)


def _mentions(lines: list[cst.CSTNode], name: str) -> bool:
    return any(isinstance(n, cst.Name) and n.value == name for line in lines for n in walk(line))


def _assignments(kernel: KernelDef) -> dict[str, cst.BaseExpression]:
    """Each name the kernel assigns exactly once, with its value."""
    values = assigned_values(kernel.node.body)
    return {name: found[0] for name, found in values.items() if len(found) == 1}


def _affine(node: cst.BaseExpression, values: dict[str, cst.BaseExpression]) -> dict[str, int] | None:
    """``node`` as {variable: coefficient} plus the constant under ``""``; ``None`` where it is not affine in
    names and integers (names bound to an integer are that integer)."""
    if isinstance(node, cst.Integer):
        return {"": int(node.evaluated_value)}
    if isinstance(node, cst.Name):
        bound = values.get(node.value)
        if isinstance(bound, cst.Integer):
            return {"": int(bound.evaluated_value)}
        return {node.value: 1}
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _affine(node.expression, values)
        return None if inner is None else {k: -v for k, v in inner.items()}
    if not isinstance(node, cst.BinaryOperation):
        return None
    left, right = _affine(node.left, values), _affine(node.right, values)
    if left is None or right is None:
        return None
    if isinstance(node.operator, (cst.Add, cst.Subtract)):
        sign = 1 if isinstance(node.operator, cst.Add) else -1
        out = dict(left)
        for key, value in right.items():
            out[key] = out.get(key, 0) + sign * value
        return {k: v for k, v in out.items() if v != 0 or k == ""}
    if isinstance(node.operator, cst.Multiply):
        for constant, other in ((left, right), (right, left)):
            if set(constant) == {""}:
                return {k: v * constant[""] for k, v in other.items()}
    return None


def _flip_width(kernel: KernelDef | None) -> int | None:
    """``N`` where the kernel is ``out[i] = in[(N - 1) - i % N + N * (i // N)]`` and nothing else."""
    if kernel is None or len(kernel.loads) != 1 or len(kernel.stores) != 1 or len(kernel.params) < 2:
        return None
    if any(isinstance(n, (cst.For, cst.While, cst.If)) for n in walk(kernel.node.body)):
        return None
    load, store = kernel.loads[0], kernel.stores[0]
    values = _assignments(kernel)
    loaded = _offset_from(load.args[0].value, kernel.params[0])
    stored = _offset_from(store.args[0].value, kernel.params[1])
    if loaded is None or stored is None or len(store.args) < 2:
        return None
    index = _root(stored, values)
    value = name_of(store.args[1].value)
    if index is None or value is None or values.get(value) is not load:
        return None
    terms = _affine(loaded, {})
    if terms is None:
        return None
    parts: dict[str, tuple[str, int]] = {}
    for variable in terms:
        if variable == "":
            continue
        found = _split_of(values.get(variable), index, values)
        if found is None:
            return None
        parts[variable] = found
    remainders = [(terms[v], n) for v, (kind, n) in parts.items() if kind == "%"]
    quotients = [(terms[v], n) for v, (kind, n) in parts.items() if kind == "//"]
    if len(remainders) != 1 or len(quotients) != 1:
        return None
    (rem_coef, width), (quo_coef, quo_width) = remainders[0], quotients[0]
    if rem_coef == -1 and quo_coef == width == quo_width and terms.get("", 0) == width - 1 and width > 1:
        return width
    return None


def _offset_from(address: cst.BaseExpression, pointer: str) -> cst.BaseExpression | None:
    """``offset`` of ``pointer + offset``."""
    if (
        isinstance(address, cst.BinaryOperation)
        and isinstance(address.operator, cst.Add)
        and name_of(address.left) == pointer
    ):
        return address.right
    return None


def _root(node: cst.BaseExpression, values: dict[str, cst.BaseExpression]) -> str | None:
    """The name ``node`` is, following plain renames (``x2 = xindex``)."""
    name = name_of(node)
    seen: set[str] = set()
    while name is not None and isinstance(values.get(name), cst.Name) and name not in seen:
        seen.add(name)
        name = values[name].value  # type: ignore[attr-defined]
    return name


def _split_of(
    value: cst.BaseExpression | None, index: str, values: dict[str, cst.BaseExpression]
) -> tuple[str, int] | None:
    """("%", N) for ``index % N``, ("//", N) for ``index // N``."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.right, cst.Integer)):
        return None
    if _root(value.left, values) != index:
        return None
    if isinstance(value.operator, cst.Modulo):
        return "%", int(value.right.evaluated_value)
    if isinstance(value.operator, cst.FloorDivide):
        return "//", int(value.right.evaluated_value)
    return None


def _producer(model: SourceModel, before: list[cst.CSTNode], buffer: str) -> tuple[LaunchSite, str] | None:
    """The launch before the copy that passes ``buffer``, where it is the only one, and the kernel parameter
    it is passed as."""
    passing = []
    for line in before:
        site = _launch_in(model, line)
        if site is not None and any(name_of(arg.value) == buffer for arg in site.call.args):
            passing.append(site)
    if len(passing) != 1 or passing[0].kernel not in model.kernels:
        return None
    site = passing[0]
    positional = [arg for arg in site.call.args if arg.keyword is None]
    params = model.kernels[site.kernel].params
    for position, arg in enumerate(positional):
        if name_of(arg.value) == buffer and position < len(params):
            return site, params[position]
    return None


def _flippable_store(kernel: KernelDef, pointer: str, width: int) -> tuple[cst.CSTNode, cst.CSTNode] | None:
    """(the store's offset, the flipped offset) where the kernel's one store through ``pointer`` writes row
    element ``r`` (guarded by ``r < width``) of row ``x`` at ``r + width * x``, and nothing loads ``pointer``."""
    if any(isinstance(n, cst.Name) and n.value == pointer for load in kernel.loads for n in walk(load)):
        return None
    stores = [s for s in kernel.stores if _offset_from(s.args[0].value, pointer) is not None]
    mask = _mask_of(stores[0]) if len(stores) == 1 else None
    if mask is None:
        return None
    offset = _offset_from(stores[0].args[0].value, pointer)
    values = _assignments(kernel)
    terms = _affine(offset, values)  # type: ignore[arg-type]
    if terms is None or terms.get("", 0) != 0 or len([v for v in terms if v]) != 2:
        return None
    element = [v for v, c in terms.items() if v and c == 1 and _guarded(mask, v, width, values)]
    rows = [v for v, c in terms.items() if v and c == width]
    if len(element) != 1 or len(rows) != 1:
        return None
    return offset, cst.parse_expression(f"({width - 1} - {element[0]} + {width} * {rows[0]})")  # type: ignore[return-value]


def _mask_of(store: cst.Call) -> cst.BaseExpression | None:
    """``tl.store``'s mask: the keyword, or the third positional argument."""
    for arg in store.args:
        if arg.keyword is not None and arg.keyword.value == "mask":
            return arg.value
    positional = [arg for arg in store.args if arg.keyword is None]
    return positional[2].value if len(positional) > 2 else None


def _guarded(
    mask: cst.BaseExpression, variable: str, width: int, values: dict[str, cst.BaseExpression]
) -> bool:
    """Whether ``mask`` is ``variable < width`` or ands it in (``a & b``), following renames on both sides;
    an ``|`` or anything else around the comparison does not guard."""
    name = name_of(mask)
    node = values.get(name, mask) if name is not None else mask
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitAnd):
        return _guarded(node.left, variable, width, values) or _guarded(node.right, variable, width, values)
    if not (isinstance(node, cst.Comparison) and len(node.comparisons) == 1):
        return False
    target = node.comparisons[0]
    return (
        isinstance(target.operator, cst.LessThan)
        and _root(node.left, values) == _root(cst.Name(variable), values)
        and _affine(target.comparator, values) == {"": width}
    )


def _dead_grid(lines: list[cst.CSTNode], position: int, copy: LaunchSite) -> list[cst.CSTNode]:
    """The ``grid = ...`` line just before the copy, where only the copy used it: the next line after the copy
    that mentions the name assigns it without reading it."""
    grid = name_of(copy.call.func.slice[0].slice.value) if isinstance(copy.call.func, cst.Subscript) else None  # type: ignore[union-attr]
    line = lines[position - 1] if position else None
    if grid is None or not (
        isinstance(line, cst.SimpleStatementLine)
        and isinstance(line.body[0], cst.Assign)
        and name_of(line.body[0].targets[0].target) == grid
    ):
        return []
    for later in lines[position + 1 :]:
        if _mentions([later], grid):
            assigns = (
                isinstance(later, cst.SimpleStatementLine)
                and isinstance(later.body[0], cst.Assign)
                and name_of(later.body[0].targets[0].target) == grid
                and not _mentions([later.body[0].value], grid)
            )
            return [line] if assigns else []
    return [line]


def _line_of(lines: list[cst.CSTNode], site: LaunchSite) -> cst.CSTNode:
    return next(line for line in lines if any(node is site.call for node in walk(line)))


def _allocation(before: list[cst.CSTNode], name: str) -> cst.SimpleStatementLine | None:
    """The last ``name = torch.empty...(...)`` line before the copy, where that is how ``name`` was last bound."""
    for line in reversed(before):
        if (
            isinstance(line, cst.SimpleStatementLine)
            and len(line.body) == 1
            and isinstance(line.body[0], cst.Assign)
            and len(line.body[0].targets) == 1
            and name_of(line.body[0].targets[0].target) == name
        ):
            value = line.body[0].value
            func = cst.Module([]).code_for_node(value.func) if isinstance(value, cst.Call) else ""
            return line if func.startswith("torch.empty") else None
    return None


def _same_allocation(a: cst.SimpleStatementLine, b: cst.SimpleStatementLine) -> bool:
    """Both buffers allocated alike: same call, sizes, strides, dtype and device."""
    code = cst.Module([]).code_for_node
    return code(a.body[0].value).strip() == code(b.body[0].value).strip()  # type: ignore[attr-defined]

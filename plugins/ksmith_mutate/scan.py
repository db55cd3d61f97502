"""The ``vector_scan`` edit: a scalar loop that carries a running sum runs a block of iterations at a time.

Metadata kernels of serving engines compute per-request lengths and their prefix sum (``cu_seqlens``) in one
program, one request per iteration::

    acc = 0
    for i in range(B):
        val = tl.load(seq_lens + i).to(tl.int32)
        tl.store(cu_seqlens + i, acc)
        acc += val

Each iteration is a few scalar instructions behind a global load, so the loop runs at memory latency, one
request at a time, while the rest of the grid waits for nothing. Written a block of ``SCAN_BLOCK`` iterations
at a time, with the running sum inside a block from ``tl.cumsum``, the loop runs ``B / SCAN_BLOCK`` times::

    acc = 0
    for i_start in range(0, B, 1024):
        i = i_start + tl.arange(0, 1024)
        i_mask = i < B
        val = tl.load(seq_lens + i, mask=i_mask, other=0).to(tl.int32)
        acc_step = tl.where(i_mask, val, 0)
        acc_scan = tl.cumsum(acc_step, 0)
        tl.store(cu_seqlens + i, acc + acc_scan - acc_step, mask=i_mask)
        acc += tl.sum(acc_step, 0)

On an H100, SGLang's ``normal_decode_set_metadata`` at 256 requests ran 1.49x faster so
(benchmarks/results/h100-2026-11-25/upstream/metadata_variants_graph.log).

Only where every iteration can run at once except through the one sum: a loop from 0 by 1 of simple
statements; one name carried from one iteration to the next, updated once by ``acc += step`` (``step`` not
reading it, and computed from names that do not change between the first read of ``acc`` and the update); not
inside another loop; no other name the body assigns read after the loop; every store's address a sum with one
term ``i`` or ``i * stride``, so each iteration writes its own place; nothing stored is also loaded in the loop; and no call but loads, stores, ``.to`` and elementwise ``tl``
functions (a reduction, ``tl.arange`` or a helper would see a block instead of one value). Reads of ``acc``
before its update become the exclusive prefix (``acc + acc_scan - acc_step``), after it the inclusive one.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ksmith_mutate.source_model import (
    SourceModel,
    address_bases,
    dotted_name,
    fresh_name,
    grouped,
    is_tl_call,
    keyword_value,
    name_of,
    pointer_arg,
    read_after,
    read_names,
    reads_and_writes,
    simple_statements,
    walk,
    with_keyword,
)

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]

SCAN_BLOCK = 1024  # iterations per block: 256 and 1024 ran alike on the H100; one block covers most batches
# Calls that act on each element alone, so on a block as on one value.
ELEMENTWISE = frozenset(
    {"load", "store", "where", "maximum", "minimum", "abs", "cdiv", "exp", "exp2", "log", "log2", "sqrt"}
)


def vector_scan_changes(model: SourceModel) -> Iterator[tuple[str, Pairs, dict]]:
    """(description, pairs, detail) for each loop of each kernel that carries one running sum."""
    for kernel in model.kernels.values():
        number = 0
        for node in walk(kernel.node.body):
            if not isinstance(node, cst.For):
                continue
            number += 1
            after = _statements_after(kernel.node, node)
            shape = None if after is None else _scan_shape(node, after)
            if shape is None:
                continue
            new = _blocked(kernel.node, node, *shape)
            acc = shape[2]
            yield (
                f"loop {number} in {kernel.name} ({acc} summed one iteration at a time) {SCAN_BLOCK} "
                f"iterations at a time, the running {acc} from tl.cumsum",
                [(node, new)],
                {"direction": "up", "loop": number, "carried": acc},
            )


def _statements_after(function: cst.FunctionDef, loop: cst.For) -> list[cst.BaseStatement] | None:
    """The statements that run after ``loop`` in its own block and in the blocks around it, in order; None
    where the loop sits somewhere this does not follow (another loop, an ``else`` branch)."""

    def after(block: cst.CSTNode) -> list[cst.BaseStatement] | None:
        statements = list(getattr(block, "body", []))
        for position, statement in enumerate(statements):
            if statement is loop:
                return statements[position + 1 :]
            if any(child is loop for child in walk(statement)):
                # Through an ``if`` only: inside another loop, the statements before this one run again after
                # it and could read what it left behind.
                inner = statement.body if isinstance(statement, cst.If) else None
                found = after(inner) if isinstance(inner, cst.IndentedBlock) else None
                return None if found is None else found + statements[position + 1 :]
        return None

    return after(function.body)


def _range_stop(loop: cst.For) -> cst.BaseExpression | None:
    """``stop`` of ``for v in range(stop)``, ``range(0, stop)`` or ``range(0, stop, 1)`` (or ``tl.range``)."""
    it = loop.iter
    if not isinstance(it, cst.Call) or dotted_name(it.func) not in ("range", "tl.range"):
        return None
    if any(arg.keyword is not None for arg in it.args):
        return None
    values = [arg.value for arg in it.args]
    if len(values) == 1:
        return values[0]
    if not (isinstance(values[0], cst.Integer) and int(values[0].evaluated_value) == 0):
        return None
    if len(values) == 2:
        return values[1]
    if len(values) == 3 and isinstance(values[2], cst.Integer) and int(values[2].evaluated_value) == 1:
        return values[1]
    return None


def _update_step(statement: cst.CSTNode, acc: str) -> cst.BaseExpression | None:
    """``step`` of ``acc += step``, ``acc = acc + step`` or ``acc = step + acc``."""
    if isinstance(statement, cst.AugAssign) and name_of(statement.target) == acc:
        return statement.value if isinstance(statement.operator, cst.AddAssign) else None
    if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
        value = statement.value
        if name_of(statement.targets[0].target) == acc and isinstance(value, cst.BinaryOperation):
            if isinstance(value.operator, cst.Add):
                if name_of(value.left) == acc:
                    return value.right
                if name_of(value.right) == acc:
                    return value.left
    return None


def _scan_shape(loop: cst.For, after: list[cst.BaseStatement]):
    """(stop, statements, acc, update position, step, first position reading acc), or None."""
    stop = _range_stop(loop)
    variable = name_of(loop.target)
    statements = simple_statements(loop.body)
    if stop is None or variable is None or not statements:
        return None
    assigned: set[str] = set()
    carried: set[str] = set()
    writes_of = [set(reads_and_writes(s)[1]) for s in statements]
    every_write = set().union(*writes_of)
    for statement, writes in zip(statements, writes_of):
        reads = reads_and_writes(statement)[0]
        carried |= {r for r in reads if r not in assigned and r in every_write}
        assigned |= writes
    if len(carried) != 1 or variable in every_write or every_write & set(read_names(stop)):
        return None
    (acc,) = carried
    updates = [i for i, writes in enumerate(writes_of) if acc in writes]
    if len(updates) != 1:
        return None
    (update,) = updates
    step = _update_step(statements[update], acc)
    if step is None or acc in read_names(step):
        return None
    first = next(i for i, s in enumerate(statements) if acc in reads_and_writes(s)[0])
    between = set().union(*writes_of[first:update]) if first < update else set()
    if between & set(read_names(step)):
        return None  # the step's value at the first read of acc is not its value at the update
    if read_after(every_write - {acc}, after):
        return None
    if not _elementwise_body(loop.body, variable):
        return None
    return stop, statements, acc, update, step, first


def _elementwise_body(body: cst.CSTNode, variable: str) -> bool:
    """Only loads, stores, ``.to`` and elementwise ``tl`` calls; every store addressed by the loop variable;
    nothing stored also loaded."""
    if address_bases(body, "store") & address_bases(body, "load"):
        return False
    for call in walk(body):
        if not isinstance(call, cst.Call):
            continue
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "to" and name_of(func.value) != "tl":
            continue  # ``x.to(dtype)``
        if not is_tl_call(call, *ELEMENTWISE):
            return False
        if is_tl_call(call, "store"):
            address = pointer_arg(call)
            if address is None or not _one_place_per_iteration(address, variable):
                return False  # two iterations writing one place: the last wins, not one lane of a block
    return True


def _one_place_per_iteration(address: cst.BaseExpression, variable: str) -> bool:
    """A sum with exactly one term in the loop variable, that term ``v`` or ``v * k`` (``k`` free of it):
    every iteration writes its own place (for a nonzero stride)."""
    terms: list[cst.BaseExpression] = []

    def split(node: cst.BaseExpression) -> None:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
            split(node.left)
            terms.append(node.right)
        else:
            terms.append(node)

    split(address)
    with_variable = [t for t in terms if variable in read_names(t)]
    if len(with_variable) != 1:
        return False
    (term,) = with_variable
    if name_of(term) == variable:
        return True
    if isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply):
        factors = (term.left, term.right)
        return (
            any(name_of(f) == variable for f in factors)
            and sum(variable in read_names(f) for f in factors) == 1
        )
    return False


class _Vectorise(cst.CSTTransformer):
    """One statement of the block: loads and stores masked to the block's live lanes, reads of the running sum
    as the prefix they stand for."""

    def __init__(self, mask: str, acc: str, prefix: str | None) -> None:
        super().__init__()
        self.mask, self.acc, self.prefix = mask, acc, prefix

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if self.prefix is not None and original_node.value == self.acc:
            return cst.parse_expression(f"({self.prefix})")
        return updated_node

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        # An attribute's name (``load`` of ``tl.load``) is not a variable: never the prefix.
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not is_tl_call(original_node, "load", "store"):
            return updated_node
        load = is_tl_call(original_node, "load")
        positional = [arg for arg in updated_node.args if arg.keyword is None]
        mask = cst.parse_expression(self.mask)
        call = updated_node
        if len(positional) > (1 if load else 2):  # the mask passed by position
            given = positional[1 if load else 2]
            args = [a.with_changes(value=_and(a.value, mask)) if a is given else a for a in call.args]
            call = call.with_changes(args=args)
        else:
            given = keyword_value(call, "mask")
            call = with_keyword(call, "mask", mask if given is None else _and(given, mask))
        if load and len(positional) <= 2 and keyword_value(call, "other") is None:
            call = with_keyword(call, "other", cst.Integer("0"))
        return call


def _and(existing: cst.BaseExpression, mask: cst.BaseExpression) -> cst.BaseExpression:
    code = cst.Module([]).code_for_node
    if isinstance(existing, cst.Name) and existing.value == "None":
        return mask
    return cst.parse_expression(f"({code(existing)}) & {code(mask)}")


def _blocked(function, loop, stop, statements, acc, update, step, first) -> cst.For:
    code = cst.Module([]).code_for_node
    variable = loop.target.value
    start = fresh_name(function, f"{variable}_start")
    mask = fresh_name(function, f"{variable}_mask")
    step_name = fresh_name(function, f"{acc}_step")
    scan_name = fresh_name(function, f"{acc}_scan")
    stop_text = grouped(code(stop).strip())
    lines = [
        f"{variable} = {start} + tl.arange(0, {SCAN_BLOCK})",
        f"{mask} = {variable} < {stop_text}",
    ]

    def add(statement: cst.CSTNode, prefix: str | None) -> None:
        lines.append(code(statement.visit(_Vectorise(mask, acc, prefix))).strip())

    for statement in statements[:first]:
        add(statement, None)
    step_text = code(step.visit(_Vectorise(mask, acc, None))).strip()
    lines.append(f"{step_name} = tl.where({mask}, {step_text}, 0)")
    lines.append(f"{scan_name} = tl.cumsum({step_name}, 0)")
    for statement in statements[first:update]:
        add(statement, f"{acc} + {scan_name} - {step_name}")
    for statement in statements[update + 1 :]:
        add(statement, f"{acc} + {scan_name}")
    # Last: until then ``acc`` is the sum before the block, which every prefix above starts from.
    lines.append(f"{acc} += tl.sum({step_name}, 0)")
    body = "".join(f"    {line}\n" for line in lines)
    new = cst.parse_statement(f"for {start} in range(0, {stop_text}, {SCAN_BLOCK}):\n{body}")
    return new  # type: ignore[return-value]

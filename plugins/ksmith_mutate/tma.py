"""The ``tma_loads`` edit: a tiled matmul's pointer loads in its K loop become TMA tensor-descriptor loads.

On Hopper-class GPUs a tile loaded through a tensor descriptor (``tl.make_tensor_descriptor``) is fetched by the
copy engine, out-of-bounds elements padded with zeros, instead of by every thread computing addresses and masks.
The rewrite recognises the idiom every tiled matmul of the suite (and Triton's tutorial) is written in::

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k), other=0.0)
        a_ptrs += BLOCK_K * stride_ak

and rewrites it as a descriptor over the whole ``[M, K]`` operand and ``a_desc.load([pid_m * BLOCK_M, k])``. The
extents come from the load's mask, the block shape from the offsets' ``tl.arange``. A descriptor needs its last
stride to be 1; which stride that is depends on the tensor passed at run time (a ``Linear`` weight is read
transposed), so the launch passes ``<stride> == 1`` as a constexpr flag per operand and the kernel builds the
descriptor over the operand's real layout, transposing the loaded tile when it is column-major. Descriptors
made on the device need scratch memory: the module sets Triton's allocator once. A descriptor also needs a
16-byte aligned base and strides that are multiples of 16 bytes; the launch checks the operands
(``_tma_aligned``) and passes the answer as ``USE_TMA``: where it is false the kernel runs its original
pointer loop, kept beside the descriptor loop (an fp32 matrix 2949 wide read through a descriptor gave wrong
results on the H100: KernelBench's 8_Matmul_with_irregular_shapes_).

Anything that does not match the idiom exactly (no mask to read the extents from, a loop that does not start at
0 or steps by something else, a pointer advanced along an axis its offsets do not name) is left alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from ksmith_mutate.source_model import (
    KernelDef,
    LaunchSite,
    SourceModel,
    dotted_name,
    is_tl_call,
    keyword_value,
    with_keyword,
)

ALLOCATOR_SOURCE = """

def _tma_scratch(size, alignment, stream):
    # Device-side tensor descriptors need a little global scratch memory per program.
    return torch.empty(size, device="cuda", dtype=torch.int8)


triton.set_allocator(_tma_scratch)
"""

ALIGNED_SOURCE = """

def _tma_aligned(*tensors):
    # A tensor descriptor needs a 16-byte aligned base, one unit stride, and every other stride a positive
    # multiple of 16 bytes; otherwise the kernel keeps its pointer loads (an fp32 matrix 2949 wide fails).
    def readable(t):
        strides = list(t.stride())
        if 1 in strides:
            strides.remove(1)
        return t.data_ptr() % 16 == 0 and all(s > 0 and s * t.element_size() % 16 == 0 for s in strides)

    return all(readable(t) for t in tensors)
"""
TMA_FLAG = "USE_TMA"  # the constexpr the launch sets to ``_tma_aligned(operands...)``


@dataclass(frozen=True)
class _Offsets:
    start: cst.BaseExpression | None  # None: the offsets start at 0
    block: str


@dataclass(frozen=True)
class _Operand:
    """One pointer block loaded in the K loop, with everything the descriptor needs."""

    pointer: str  # the ``*_ptrs`` variable
    base: cst.BaseExpression  # the scalar base pointer (``a_ptr`` or ``a_ptr + batch * stride_ab``)
    rows: _Offsets
    cols: _Offsets
    row_stride: str
    col_stride: str
    row_extent: cst.BaseExpression
    col_extent: cst.BaseExpression
    moving: str  # "rows" or "cols": the axis the loop walks
    walked: str  # how far along it the loop is (``k``, or ``k * BLOCK_K`` when ``k`` counts tiles)
    flag: str  # the constexpr the launch sets to ``col_stride == 1``

    @property
    def descriptor(self) -> str:
        return f"{self.pointer.removesuffix('_ptrs')}_desc"


def _sum_terms(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _sum_terms(node.left) + _sum_terms(node.right)
    return [node]


def _broadcast(node: cst.BaseExpression) -> tuple[str, str] | None:
    """``offs[:, None]`` -> (offs, "rows"); ``offs[None, :]`` -> (offs, "cols")."""
    if not (isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and len(node.slice) == 2):
        return None
    first, second = (element.slice for element in node.slice)

    def is_none(s: cst.BaseSlice) -> bool:
        return isinstance(s, cst.Index) and isinstance(s.value, cst.Name) and s.value.value == "None"

    def is_all(s: cst.BaseSlice) -> bool:
        return isinstance(s, cst.Slice) and s.lower is None and s.upper is None and s.step is None

    if is_all(first) and is_none(second):
        return node.value.value, "rows"
    if is_none(first) and is_all(second):
        return node.value.value, "cols"
    return None


def _strided(term: cst.BaseExpression) -> tuple[str, str, str] | None:
    """``offs[:, None] * stride`` -> (offs, axis, stride)."""
    if not (isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply)):
        return None
    for left, right in ((term.left, term.right), (term.right, term.left)):
        found = _broadcast(left)
        if found is not None and isinstance(right, cst.Name):
            return found[0], found[1], right.value
    return None


def _arange_block(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Call) and is_tl_call(node, "arange") and len(node.args) == 2:
        low, high = node.args[0].value, node.args[1].value
        if isinstance(low, cst.Integer) and low.value == "0" and isinstance(high, cst.Name):
            return high.value
    return None


def _offsets(value: cst.BaseExpression) -> _Offsets | None:
    block = _arange_block(value)
    if block is not None:
        return _Offsets(None, block)
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
        block = _arange_block(value.right)
        if block is not None:
            return _Offsets(value.left, block)
    return None


def _single_name_assign(statement: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
        ):
            return small.targets[0].target.value, small.value
    return None


def _mentions(node: cst.BaseExpression, name: str) -> bool:
    if isinstance(node, cst.Name):
        return node.value == name
    if isinstance(node, cst.BinaryOperation):
        return _mentions(node.left, name) or _mentions(node.right, name)
    return False


def _mask_extents(
    mask: cst.BaseExpression, loop_var: str, loop_locals: dict[str, cst.BaseExpression]
) -> dict[str, cst.BaseExpression]:
    """``(offs_m[:, None] < M) & (offs_k[None, :] < K - k)`` -> {offs_m: M, offs_k: K}.

    A bound that subtracts what the loop has walked (``K - k``, ``K - k * BLOCK_K``, or a loop-local name
    assigned so, ``k_remaining``) names the whole extent ``K``.
    """
    if isinstance(mask, cst.BinaryOperation) and isinstance(mask.operator, cst.BitAnd):
        return {
            **_mask_extents(mask.left, loop_var, loop_locals),
            **_mask_extents(mask.right, loop_var, loop_locals),
        }
    if isinstance(mask, cst.Comparison) and len(mask.comparisons) == 1:
        target = mask.comparisons[0]
        found = _broadcast(mask.left)
        if found is None or not isinstance(target.operator, cst.LessThan):
            return {}
        bound = target.comparator
        if isinstance(bound, cst.Name) and bound.value in loop_locals:
            bound = loop_locals[bound.value]
        if _mentions(bound, loop_var):
            if not (isinstance(bound, cst.BinaryOperation) and isinstance(bound.operator, cst.Subtract)):
                return {}
            if _mentions(bound.left, loop_var):
                return {}
            bound = bound.left
        return {found[0]: bound.with_changes(lpar=[], rpar=[])}
    return {}


def _loop_range(loop: cst.For) -> tuple[str, str, bool] | None:
    """``for k in range(0, K, BLOCK_K)`` -> (k, BLOCK_K, False): ``k`` counts elements;
    ``for k in range(0, tl.cdiv(K, BLOCK_K))`` -> (k, BLOCK_K, True): ``k`` counts tiles."""
    if not (isinstance(loop.target, cst.Name) and isinstance(loop.iter, cst.Call)):
        return None
    if dotted_name(loop.iter.func) not in ("range", "tl.range"):
        return None
    args = [a.value for a in loop.iter.args if a.keyword is None]
    if not args or not (isinstance(args[0], cst.Integer) and args[0].value == "0"):
        return None
    if len(args) == 3 and isinstance(args[2], cst.Name):
        return loop.target.value, args[2].value, False
    if (
        len(args) == 2
        and isinstance(args[1], cst.Call)
        and dotted_name(args[1].func) in ("tl.cdiv", "triton.cdiv")
    ):
        cdiv = [a.value for a in args[1].args]
        if len(cdiv) == 2 and isinstance(cdiv[1], cst.Name):
            return loop.target.value, cdiv[1].value, True
    return None


def _increment(statement: cst.CSTNode) -> tuple[str, str, str] | None:
    """``a_ptrs += BLOCK_K * stride_ak`` -> (a_ptrs, BLOCK_K, stride_ak)."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return None
    aug = statement.body[0]
    if not (isinstance(aug, cst.AugAssign) and isinstance(aug.operator, cst.AddAssign)):
        return None
    if not isinstance(aug.target, cst.Name):
        return None
    value = aug.value
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
        if isinstance(value.left, cst.Name) and isinstance(value.right, cst.Name):
            return aug.target.value, value.left.value, value.right.value
    return None


def _loads_in(loop: cst.For) -> dict[str, cst.Call]:
    loads: dict[str, cst.Call] = {}
    for statement in loop.body.body:
        assigned = _single_name_assign(statement)
        if assigned is not None and isinstance(assigned[1], cst.Call) and is_tl_call(assigned[1], "load"):
            call = assigned[1]
            if call.args and isinstance(call.args[0].value, cst.Name) and call.args[0].keyword is None:
                loads[call.args[0].value.value] = call
    return loads


def _flag_name(base: cst.BaseExpression, pointer: str) -> str:
    head = _sum_terms(base)[0]
    stem = head.value if isinstance(head, cst.Name) else pointer
    return f"{stem.removesuffix('_ptr').removesuffix('_ptrs').upper()}_ROW_MAJOR"


def _operands(kernel: KernelDef) -> tuple[cst.For, list[_Operand]] | None:
    """The K loop of ``kernel`` and the operands it loads in the recognised idiom."""
    offsets: dict[str, _Offsets] = {}
    pointers: dict[str, tuple[cst.BaseExpression, dict[str, tuple[str, str]]]] = {}
    loops: list[cst.For] = []
    for statement in kernel.node.body.body:
        if isinstance(statement, cst.For):
            loops.append(statement)
            continue
        assigned = _single_name_assign(statement)
        if assigned is None:
            continue
        name, value = assigned
        found = _offsets(value)
        if found is not None:
            offsets[name] = found
            continue
        terms = _sum_terms(value)
        strided = [_strided(t) for t in terms]
        axes = {s[1]: (s[0], s[2]) for s in strided if s is not None}
        base_terms = [t for t, s in zip(terms, strided) if s is None]
        if set(axes) == {"rows", "cols"} and len(base_terms) + 2 == len(terms) and base_terms:
            base = base_terms[0]
            for extra in base_terms[1:]:
                base = cst.BinaryOperation(base, cst.Add(), extra)
            pointers[name] = (base, axes)
    if len(loops) != 1:
        return None
    loop = loops[0]
    walked = _loop_range(loop)
    if walked is None:
        return None
    loop_var, step, counts_tiles = walked
    loop_locals = {a[0]: a[1] for st in loop.body.body if (a := _single_name_assign(st)) is not None}
    increments = {inc[0]: inc for s in loop.body.body if (inc := _increment(s)) is not None}
    found: list[_Operand] = []
    for pointer, call in _loads_in(loop).items():
        if pointer not in pointers or pointer not in increments:
            continue
        base, axes = pointers[pointer]
        (row_offs, row_stride), (col_offs, col_stride) = axes["rows"], axes["cols"]
        if row_offs not in offsets or col_offs not in offsets:
            continue
        _, inc_block, inc_stride = increments[pointer]
        if inc_block != step:
            continue
        if inc_stride == row_stride and offsets[row_offs].start is None and offsets[row_offs].block == step:
            moving = "rows"
        elif inc_stride == col_stride and offsets[col_offs].start is None and offsets[col_offs].block == step:
            moving = "cols"
        else:
            continue
        mask = keyword_value(call, "mask")
        extents = _mask_extents(mask, loop_var, loop_locals) if mask is not None else {}
        if row_offs not in extents or col_offs not in extents:
            continue  # nothing says how large the operand is
        found.append(
            _Operand(
                pointer=pointer,
                base=base,
                rows=offsets[row_offs],
                cols=offsets[col_offs],
                row_stride=row_stride,
                col_stride=col_stride,
                row_extent=extents[row_offs],
                col_extent=extents[col_offs],
                moving=moving,
                walked=f"{loop_var} * {step}" if counts_tiles else loop_var,
                flag=_flag_name(base, pointer),
            )
        )
    return (loop, found) if found else None


def _expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _descriptor_statements(op: _Operand) -> list[cst.BaseStatement]:
    base = _code(op.base)
    rows, cols = _code(op.row_extent), _code(op.col_extent)
    source = (
        f"if {op.flag}:\n"
        f"    {op.descriptor} = tl.make_tensor_descriptor({base}, shape=[{rows}, {cols}], "
        f"strides=[{op.row_stride}, {op.col_stride}], block_shape=[{op.rows.block}, {op.cols.block}])\n"
        f"else:\n"
        f"    {op.descriptor} = tl.make_tensor_descriptor({base}, shape=[{cols}, {rows}], "
        f"strides=[{op.col_stride}, {op.row_stride}], block_shape=[{op.cols.block}, {op.rows.block}])\n"
    )
    return list(cst.parse_module(source).body)


def _position(offs: _Offsets, walked: str | None) -> str:
    start = _code(offs.start) if offs.start is not None else None
    if walked is not None:
        return f"{start} + {walked}" if start else walked
    return start or "0"


def _load_statement(op: _Operand, target: str) -> list[cst.BaseStatement]:
    row = _position(op.rows, op.walked if op.moving == "rows" else None)
    col = _position(op.cols, op.walked if op.moving == "cols" else None)
    source = (
        f"if {op.flag}:\n"
        f"    {target} = {op.descriptor}.load([{row}, {col}])\n"
        f"else:\n"
        f"    {target} = tl.trans({op.descriptor}.load([{col}, {row}]))\n"
    )
    return list(cst.parse_module(source).body)


def _rewrite_kernel(kernel: KernelDef, loop: cst.For, operands: list[_Operand]) -> cst.FunctionDef:
    by_pointer = {op.pointer: op for op in operands}
    body: list[cst.BaseStatement] = []
    for statement in loop.body.body:
        inc = _increment(statement)
        if inc is not None and inc[0] in by_pointer:
            continue  # the descriptor is indexed by the loop variable: no pointer to advance
        assigned = _single_name_assign(statement)
        if assigned is not None and isinstance(assigned[1], cst.Call) and is_tl_call(assigned[1], "load"):
            first = assigned[1].args[0].value
            if isinstance(first, cst.Name) and first.value in by_pointer:
                body.extend(_load_statement(by_pointer[first.value], assigned[0]))
                continue
        body.append(statement)
    new_loop = loop.with_changes(body=loop.body.with_changes(body=body))
    # Descriptors where the operands' layout allows them, the original pointer loop where it does not.
    tma = [stmt for op in operands for stmt in _descriptor_statements(op)] + [new_loop]
    branch = cst.parse_module(f"if {TMA_FLAG}:\n    pass\nelse:\n    pass\n").body[0]
    assert isinstance(branch, cst.If) and isinstance(branch.orelse, cst.Else)
    branch = branch.with_changes(
        body=branch.body.with_changes(body=tma),
        orelse=branch.orelse.with_changes(body=branch.orelse.body.with_changes(body=[loop])),
        leading_lines=loop.leading_lines,
    )
    statements = [branch if statement is loop else statement for statement in kernel.node.body.body]
    return kernel.node.with_changes(
        params=with_constexpr_params(kernel.node, [*(op.flag for op in operands), TMA_FLAG]),
        body=kernel.node.body.with_changes(body=statements),
    )


def _pointer_param(op: _Operand, kernel: KernelDef) -> str | None:
    """The kernel parameter the operand's base pointer starts from (``a_ptr`` in ``a_ptr + batch * s``)."""
    terms = _sum_terms(op.base)
    return next((t.value for t in terms if isinstance(t, cst.Name) and t.value in kernel.params), None)


def with_constexpr_params(kernel: cst.FunctionDef, names: list[str]) -> cst.Parameters:
    """The kernel's parameters with ``NAME: tl.constexpr`` for each of ``names`` appended, in the separator
    style of the signature (one per line or not). Shared by the edits that add constexprs (``split_k`` too)."""
    original = list(kernel.params.params)
    separator = (
        original[-2].comma if len(original) >= 2 else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    )
    params = [*original[:-1], original[-1].with_changes(comma=separator)]
    for i, name in enumerate(names):
        comma = original[-1].comma if i == len(names) - 1 else separator
        params.append(
            cst.Param(cst.Name(name), annotation=cst.Annotation(_expr("tl.constexpr")), comma=comma)
        )
    return kernel.params.with_changes(params=params)


def _launch_argument(site: LaunchSite, kernel: KernelDef, param: str) -> cst.BaseExpression | None:
    """The expression the launch passes for kernel parameter ``param``."""
    keyword = keyword_value(site.call, param)
    if keyword is not None:
        return keyword
    positional = [a for a in site.call.args if a.keyword is None and a.star == ""]
    if param in kernel.params:
        index = kernel.params.index(param)
        if index < len(positional):
            return positional[index].value
    return None


def tma_change(model: SourceModel) -> Iterator[tuple[str, list[tuple[cst.CSTNode, cst.CSTNode]]]]:
    """One rewrite per kernel that matches: (description, node replacements)."""

    # Helpers the module lacks, put before each rewritten kernel: every change is applied alone.
    code = model.module.code
    helpers = ("" if "set_allocator" in code else ALLOCATOR_SOURCE) + (
        "" if "def _tma_aligned" in code else ALIGNED_SOURCE
    )
    helper_nodes = list(cst.parse_module(helpers).body) if helpers else []
    if helper_nodes:
        helper_nodes[0] = helper_nodes[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    for kernel in model.kernels.values():
        rewritten = TMA_FLAG in kernel.params or any(p.endswith("_ROW_MAJOR") for p in kernel.params)
        if not kernel.uses_dot or kernel.autotuned or rewritten:
            continue
        matched = _operands(kernel)
        if matched is None:
            continue
        loop, operands = matched
        sites = [s for s in model.launches if s.kernel == kernel.name]
        if not sites:
            continue
        pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = []
        usable = True
        for site in sites:
            call = site.call
            tensors: list[cst.BaseExpression] = []
            for op in operands:
                stride = _launch_argument(site, kernel, op.col_stride)
                pointer = _pointer_param(op, kernel)
                tensor = _launch_argument(site, kernel, pointer) if pointer else None
                if stride is None or tensor is None:
                    usable = False
                    break
                tensors.append(tensor)
                flag = cst.Comparison(stride, [cst.ComparisonTarget(cst.Equal(), cst.Integer("1"))])
                call = with_keyword(call, op.flag, flag)
            if not usable:
                break
            aligned = cst.Call(cst.Name("_tma_aligned"), [cst.Arg(t) for t in tensors])
            pairs.append((site.call, with_keyword(call, TMA_FLAG, aligned)))
        if not usable:
            continue
        new_kernel: cst.CSTNode = _rewrite_kernel(kernel, loop, operands)
        if helper_nodes:
            new_kernel = cst.FlattenSentinel([*helper_nodes, new_kernel])
        pairs.append((kernel.node, new_kernel))
        names = ", ".join(op.pointer for op in operands)
        yield f"TMA tensor descriptors for {names} in {kernel.name}", pairs

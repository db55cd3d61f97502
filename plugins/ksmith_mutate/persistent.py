"""The ``persistent`` edit: a tiled matmul launched as one program per SM, each looping over output tiles.

A tiled matmul launches one program per output tile: at 4096 x 4096 with 128 x 256 tiles that is 512 programs in
four waves over an H100's 132 SMs, and every program pays its prologue (tile order, pointers, the pipeline's
first loads) and its epilogue (the store) while its SM's tensor cores wait. A persistent kernel launches at most
one program per SM on the tile axis; each walks the tiles ``program_id, program_id + programs, ...``, so the
next tile's loads are issued while the last one's store drains, and the descriptors of a TMA kernel are built
once per program instead of once per tile. Measured before it was written (``benchmarks/gemm_headroom.py``,
docs/benchmarks.md §5c): the suite's fp16 matmul on an H200 went from 0.2238 to 0.2074 ms with TMA loads at
128 x 256 x 64, and from 0.2476 to 0.2217 ms with pointer loads at the best tile.

Recognised (every GEMM seed of the suite, ksmith's GEMM template and Inductor's own mm templates are written
so)::

    pid = tl.program_id(0)                 # the only use of program_id(0) (or .to(DTYPE) of it); no
                                           # tl.num_programs anywhere
    num_pid_m = tl.cdiv(M, BLOCK_M)        # the tile counts along M and N, before pid is read (or Inductor's
    num_pid_n = tl.cdiv(N, BLOCK_N)        # grid_m = (M + BLOCK_M - 1) // BLOCK_M)
    ...                                    # everything from the first statement that reads pid to the end

becomes::

    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    ...                                    # descriptors that read nothing the tile computes, hoisted
    for pid in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        ...                                # the tile's code, unchanged

and every launch's grid passes through ``_persistent_grid(grid, per_sm)``, which keeps its other axes and caps
axis 0 at ``per_sm`` programs per SM of the device the tensors are on. A batch axis keeps its size, so a batched
GEMM still runs a grid of SMs x batches. (Spreading the SMs' programs over the batches instead, 8 a batch for 16
batches, made the suite's bmm 18 % slower: the batches running at once no longer share L2; docs/benchmarks.md
§5c.)

A batched GEMM (``batch = tl.program_id(1)``, read only by the tile's code) is also offered in **batch order**:
one grid axis of at most ``per_sm`` programs per SM, each looping over every batch's tiles, ``work = program_id,
program_id + programs, ...`` with ``batch = work // tiles`` and ``pid = work % tiles``. The programs running at
once then work on the same one or two batches, as the non-persistent grid's did (it runs axis 0 first), and the
launch runs SMs x ``per_sm`` programs in all, not SMs x batches. The batch count reaches the kernel as a new
argument, the launch grid's second axis (``_persistent_batch_grid``).
``per_sm`` is how many programs of the launch's tile fit on an SM at once (:func:`programs_per_sm`): without
the edit the hardware runs that many side by side, one's epilogue under another's main loop, and at one per SM
the suite's matmul at 128 x 128 x 64, three stages, lost 7-21 % (docs/benchmarks.md §5c). Steps move it x2 / /2.
The loop steps by the programs actually launched, so no tile is
skipped whatever the cap. Only where the tile's code may run several times in one program: it assigns no name
that lived before it (a parameter, a pointer moved once per program), and does not return (Inductor's early
return for an empty problem, before the program id, stays where it is). A program id cast in the kernel
(``.to(INDEX_DTYPE)``) is cast again at the top of each tile (``tl.cast``, which the interpreter's integer loop
counter takes too). A kernel whose grid
axis 0 was larger than its tiles ran the extra programs as no-ops (masked), and still covers every tile.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ksmith_mutate.source_model import (
    DOT_AXIS,
    KernelDef,
    LaunchSite,
    SourceModel,
    dotted_name,
    fresh_name,
    is_tl_call,
    launch_grid,
    literal_axis,
    name_of,
    read_names,
    tight_equal,
    two_axis_grid,
    walk,
    with_launch_grid,
)
from ksmith_mutate.split_k import _Assigned

GRID_HELPER = "_persistent_grid"
GRID_HELPER_SOURCE = f"""

def _persistent_programs(meta):
    # One program per SM of the device the launch's tensors are on; on Triton's CPU interpreter a few, so each
    # program still loops over several tiles.
    for value in meta.values():
        if isinstance(value, torch.Tensor) and value.is_cuda:
            index = value.device.index if value.device.index is not None else torch.cuda.current_device()
            if index not in _PERSISTENT_SMS:
                _PERSISTENT_SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
            return _PERSISTENT_SMS[index]
    return 2


_PERSISTENT_SMS = {{}}


def {GRID_HELPER}(grid, per_sm):
    # The launch grid with axis 0 capped at ``per_sm`` programs per SM (ksmith's persistent edit): each program
    # loops over the tiles axis 0 had, stepping by the programs launched. Other axes (a batch) are kept.
    def persistent(meta):
        dims = tuple(grid(meta) if callable(grid) else grid)
        return (min(dims[0], per_sm * _persistent_programs(meta)),) + dims[1:]

    return persistent
"""
BATCH_GRID_HELPER = "_persistent_batch_grid"
BATCH_GRID_HELPER_SOURCE = f"""

def {BATCH_GRID_HELPER}(grid, per_sm):
    # The launch grid's first two axes (tiles, batches) as one axis of at most ``per_sm`` programs per SM
    # (ksmith's persistent edit in batch order): each program loops over every batch's tiles, batch by batch.
    def persistent(meta):
        dims = tuple(grid(meta) if callable(grid) else grid)
        return (min(dims[0] * dims[1], per_sm * _persistent_programs(meta)), 1) + dims[2:]

    return persistent
"""
# Programs per SM: as many as the tile's registers and shared memory let share an SM (without the edit the hardware
# runs that many side by side, one's epilogue under another's main loop), estimated from the launch's literal
# tile, warps and stages; one and two where those are not literals. Then stepped x2 / /2 within PER_SM_RANGE.
START_PER_SM = (1, 2)
PER_SM_RANGE = (1, 4)
REGISTERS_PER_SM = 65536  # 32-bit registers of an SM on every NVIDIA GPU since Kepler
REGISTER_OVERHEAD = 64  # a thread's registers beyond its share of the fp32 accumulator (addresses, operands)


def programs_per_sm(
    literals: dict[str, int], shared_memory_bytes: int | None, element_bytes: int
) -> int | None:
    """How many programs of this launch fit on one SM at once: the fewer of what the registers allow (each
    thread holds its share of the ``BLOCK_M x BLOCK_N`` fp32 accumulator and ``REGISTER_OVERHEAD`` more) and
    what shared memory allows (``num_stages`` buffers of the A and B tiles); None without literal tiles. On
    the suite's matmul this gives two at 128 x 128 x 64, eight warps, three stages (measured: two per SM
    1.04x the non-persistent kernel's speed, one 0.80x) and one at five stages or at 128 x 256."""
    from ksmith_mutate.gemm_configs import tile_names

    names = tile_names(literals)
    if names is None:
        return None
    block_m, block_n, block_k = (literals[names[axis]] for axis in "MNK")
    threads = 32 * literals.get("num_warps", 4)
    by_registers = REGISTERS_PER_SM // ((block_m * block_n // threads + REGISTER_OVERHEAD) * threads)
    fits = by_registers
    if shared_memory_bytes is not None:
        pipeline = (
            max(1, literals.get("num_stages", 3)) * (block_m * block_k + block_k * block_n) * element_bytes
        )
        fits = min(fits, shared_memory_bytes // max(1, pipeline))
    return max(PER_SM_RANGE[0], min(PER_SM_RANGE[1], fits))


def _assigned_names(node: cst.CSTNode) -> set[str]:
    """Every plain name ``node`` binds: assignment targets, augmented and annotated ones, loop targets."""
    assigned = _Assigned()
    node.visit(assigned)
    return set(assigned.counts)


def _pid_line(kernel: KernelDef) -> tuple[int, str, cst.BaseExpression | None] | None:
    """(index among the kernel's top-level statements, name, cast) of the one ``name = tl.program_id(0)``, or
    ``name = tl.program_id(0).to(DTYPE)`` as Inductor's templates write it (``cast``: ``DTYPE``)."""
    calls = [n for n in walk(kernel.node.body) if is_tl_call(n, "program_id", "num_programs")]
    axis0 = [c for c in calls if is_tl_call(c, "program_id") and literal_axis(c) == 0]
    if len(axis0) != 1 or any(is_tl_call(c, "num_programs") for c in calls):
        return None
    if any(literal_axis(c) is None for c in calls):
        return None
    return _assigned_id(kernel, axis0[0])


def _assigned_id(kernel: KernelDef, call: cst.Call) -> tuple[int, str, cst.BaseExpression | None] | None:
    """(index among the kernel's top-level statements, name, cast) of ``name = call`` or ``name =
    call.to(DTYPE)`` (``cast``: ``DTYPE``), as kernels read their program ids."""
    for i, line in enumerate(kernel.node.body.body):
        if not (
            isinstance(line, cst.SimpleStatementLine)
            and len(line.body) == 1
            and isinstance(line.body[0], cst.Assign)
            and len(line.body[0].targets) == 1
        ):
            continue
        value, cast = line.body[0].value, None
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "to"
            and value.func.value is call
            and len(value.args) == 1
        ):
            value, cast = call, value.args[0].value
        if value is call:
            name = name_of(line.body[0].targets[0].target)
            return (i, name, cast) if name is not None else None
    return None


def _blocks_along(value: cst.BaseExpression) -> str | None:
    """The dot axis (``M`` / ``N``) whose tile count ``value`` computes: ``tl.cdiv(M, BLOCK_M)``, or Inductor's
    ``(M + BLOCK_M - 1) // BLOCK_M``."""
    block: cst.BaseExpression | None = None
    if isinstance(value, cst.Call) and dotted_name(value.func) in ("tl.cdiv", "triton.cdiv"):
        if len(value.args) == 2:
            block = value.args[1].value
    elif isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.FloorDivide):
        top = value.left
        if (
            isinstance(top, cst.BinaryOperation)
            and isinstance(top.operator, cst.Subtract)
            and isinstance(top.right, cst.Integer)
            and top.right.value == "1"
            and isinstance(top.left, cst.BinaryOperation)
            and isinstance(top.left.operator, cst.Add)
            and name_of(top.left.right) == name_of(value.right)
        ):
            block = value.right
    match = DOT_AXIS.match(name_of(block) or "") if block is not None else None
    return match.group(1) if match and match.group(1) in "MN" else None


def _tile_counts(statements: list[cst.BaseStatement]) -> str | None:
    """``num_pid_m * num_pid_n`` from ``num_pid_m = tl.cdiv(M, BLOCK_M)`` and ``num_pid_n = tl.cdiv(N,
    BLOCK_N)`` (or Inductor's ``grid_m = (M + BLOCK_M - 1) // BLOCK_M``) among ``statements``."""
    counts: dict[str, str] = {}
    for line in statements:
        if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
            continue
        small = line.body[0]
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
            continue
        target = name_of(small.targets[0].target)
        axis = _blocks_along(small.value)
        if target is not None and axis is not None:
            counts.setdefault(axis, target)
    if set(counts) != {"M", "N"}:
        return None
    return f"{counts['M']} * {counts['N']}"


def _is_descriptor(statement: cst.BaseStatement, constexprs: set[str]) -> bool:
    """``x_desc = tl.make_tensor_descriptor(...)``, or a branch on a constexpr holding only such statements."""
    if isinstance(statement, cst.SimpleStatementLine):
        return (
            len(statement.body) == 1
            and isinstance(statement.body[0], cst.Assign)
            and is_tl_call(statement.body[0].value, "make_tensor_descriptor")
        )
    if isinstance(statement, cst.If) and name_of(statement.test) in constexprs:
        branches = [statement.body.body]
        if isinstance(statement.orelse, cst.Else):
            branches.append(statement.orelse.body.body)
        elif statement.orelse is not None:
            return False
        return all(_is_descriptor(s, constexprs) for branch in branches for s in branch)
    return False


def _hoist_descriptors(
    statements: list[cst.BaseStatement], constexprs: set[str], tile_names: set[str]
) -> tuple[list[cst.BaseStatement], list[cst.BaseStatement]]:
    """(statements hoisted before the tile loop, the tile's statements without them): the tensor descriptors
    that read nothing the tile computes, at the top level or leading a branch on a constexpr (``if
    USE_TMA:``, as the ``tma_loads`` edit writes them; a branch on a constexpr is decided at compile time, so
    a name it binds is bound after it)."""

    def invariant(statement: cst.BaseStatement) -> bool:
        if not _is_descriptor(statement, constexprs):
            return False
        values = [n.value for n in walk(statement) if isinstance(n, cst.Assign)]  # not the descriptors' names
        return not any(set(read_names(value)) & tile_names for value in values)

    hoisted: list[cst.BaseStatement] = []
    kept: list[cst.BaseStatement] = []
    for statement in statements:
        if invariant(statement):
            hoisted.append(statement)
            continue
        if isinstance(statement, cst.If) and name_of(statement.test) in constexprs:
            inner = list(statement.body.body)
            lead = 0
            while lead < len(inner) - 1 and invariant(inner[lead]):
                lead += 1
            if lead:
                hoisted.append(
                    statement.with_changes(
                        body=statement.body.with_changes(body=inner[:lead]), orelse=None, leading_lines=[]
                    )
                )
                statement = statement.with_changes(body=statement.body.with_changes(body=inner[lead:]))
        kept.append(statement)
    return hoisted, kept


_DESCRIPTOR_ARGS = ("base", "shape", "strides", "block_shape")


def _descriptor_args(call: cst.Call) -> dict[str, cst.BaseExpression] | None:
    """``tl.make_tensor_descriptor``'s four arguments by name, positional or keyword; None for any other call."""
    found: dict[str, cst.BaseExpression] = {}
    for index, arg in enumerate(call.args):
        if arg.star:
            return None
        name = arg.keyword.value if arg.keyword is not None else _DESCRIPTOR_ARGS[min(index, 3)]
        found[name] = arg.value
    return found if set(found) == set(_DESCRIPTOR_ARGS) else None


def _batch_offset(
    base: cst.BaseExpression, batch: str
) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(pointer, stride) of ``pointer + batch * stride`` (or ``stride * batch``)."""
    if not (isinstance(base, cst.BinaryOperation) and isinstance(base.operator, cst.Add)):
        return None
    term = base.right
    if not (isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply)):
        return None
    if name_of(term.left) == batch:
        return base.left, term.right
    if name_of(term.right) == batch:
        return base.left, term.left
    return None


class _BatchDescriptors(cst.CSTTransformer):
    """A 2-D descriptor of one batch's matrix (``base = pointer + batch * stride``) made a 3-D descriptor of every
    batch (``[batches, rows, cols]``, a block of one batch), and each ``desc.load([i, j])`` a load of the batch's
    block with the batch axis dropped. The descriptor then reads nothing the tile sets and is hoisted: built once
    per program rather than once per tile (the suite's bmm at 128 x 256 x 64 went from 0.803 to 0.858 of cuBLAS
    in ``benchmarks/bmm_headroom.py``, docs/benchmarks.md §5c2). Only a descriptor whose every assignment has that
    form and whose every other use is such a load."""

    def __init__(self, statements: list[cst.BaseStatement], batch: str, batches: str, per_tile: set[str]):
        self.batch, self.batches, self.per_tile = batch, batches, per_tile
        block = cst.IndentedBlock(body=statements)
        ok: dict[str, bool] = {}
        allowed: set[int] = set()  # the Name nodes a conversion rewrites: assignment targets and loads
        for node in walk(block):
            if isinstance(node, cst.Assign) and is_tl_call(node.value, "make_tensor_descriptor"):
                target = node.targets[0].target if len(node.targets) == 1 else None
                if isinstance(target, cst.Name):
                    ok[target.value] = ok.get(target.value, True) and self._split(node.value) is not None
                    allowed.add(id(target))
            elif self._load_of(node) is not None:
                allowed.add(id(node.func.value))
        for node in walk(block):  # a descriptor assigned otherwise, or read by anything but a load, stays 2-D
            if isinstance(node, cst.Name) and node.value in ok and id(node) not in allowed:
                ok[node.value] = False
        self.names = {name for name, convertible in ok.items() if convertible}

    def _split(
        self, call: cst.Call
    ) -> tuple[dict[str, cst.BaseExpression], cst.BaseExpression, cst.BaseExpression] | None:
        """(the descriptor's arguments, the batch's pointer, its stride) where the base reads the batch so."""
        args = _descriptor_args(call)
        if args is None:
            return None
        found = _batch_offset(args["base"], self.batch)
        lists = [args[k] for k in ("shape", "strides", "block_shape")]
        if found is None or not all(isinstance(v, cst.List) and len(v.elements) == 2 for v in lists):
            return None
        if any(set(read_names(v)) & self.per_tile for v in (*found, *lists)):
            return None  # the pointer, stride or shapes read something the tile sets: not hoistable
        return args, *found

    @staticmethod
    def _load_of(node: cst.CSTNode) -> str | None:
        """The descriptor's name where ``node`` is ``desc.load([i, j])``."""
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "load"
            and isinstance(node.func.value, cst.Name)
            and len(node.args) == 1
            and node.args[0].keyword is None
            and isinstance(node.args[0].value, cst.List)
            and len(node.args[0].value.elements) == 2
        ):
            return node.func.value.value
        return None

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        if not (
            is_tl_call(updated.value, "make_tensor_descriptor")
            and len(updated.targets) == 1
            and name_of(updated.targets[0].target) in self.names
        ):
            return updated
        args, pointer, stride = self._split(updated.value)

        def widened(key: str, first: cst.BaseExpression) -> cst.Arg:
            elements = [cst.Element(first), *args[key].elements]
            return cst.Arg(cst.List(elements), keyword=cst.Name(key), equal=tight_equal())

        return updated.with_changes(
            value=updated.value.with_changes(
                args=[
                    cst.Arg(pointer),
                    widened("shape", cst.Name(self.batches)),
                    widened("strides", stride),
                    widened("block_shape", cst.Integer("1")),
                ]
            )
        )

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = self._load_of(updated)
        if name not in self.names:
            return updated
        code = cst.Module([]).code_for_node
        offsets = ", ".join(code(e.value) for e in updated.args[0].value.elements)
        # Descriptor offsets are 32-bit; the block's leading batch axis of one is dropped.
        return cst.parse_expression(
            f"{name}.load([{self.batch}.to(tl.int32), {offsets}]).reshape({name}.block_shape[1:])"
        )


def _batch_line(kernel: KernelDef) -> tuple[int, str, cst.BaseExpression | None] | None:
    """(index among the kernel's top-level statements, name, cast) of the one ``name = tl.program_id(1)`` (or
    ``.to(DTYPE)`` of it), where nothing reads axis 1 otherwise and there is no axis 2."""
    calls = [n for n in walk(kernel.node.body) if is_tl_call(n, "program_id", "num_programs")]
    if any(literal_axis(c) not in (0, 1) for c in calls):
        return None
    axis1 = [c for c in calls if literal_axis(c) == 1]
    if len(axis1) != 1 or not is_tl_call(axis1[0], "program_id"):
        return None
    return _assigned_id(kernel, axis1[0])


def _cast_code(value: str, cast: cst.BaseExpression | None) -> str:
    return value if cast is None else f"tl.cast({value}, {cst.Module([]).code_for_node(cast)})"


def _rewrite_kernel(
    kernel: KernelDef, batch_order: bool = False
) -> tuple[cst.FunctionDef, str, str | None] | None:
    """(the kernel looping over its tiles, the tile count, the new batch-count parameter in batch order)."""
    found = _pid_line(kernel)
    if found is None:
        return None
    at, pid, cast = found
    body = list(kernel.node.body.body)
    batch = None
    if batch_order:
        batch = _batch_line(kernel)
        if batch is None or any(p.default is not None for p in kernel.node.params.params):
            return None  # no batch axis to fold in, or no place for a parameter after defaults
        if (
            kernel.node.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT)
            or kernel.node.params.kwonly_params
        ):
            return None
        batch_at, batch_name, batch_cast = batch
        if batch_at < at:
            at -= 1
        body.pop(batch_at)
    first = next((i for i in range(at + 1, len(body)) if pid in read_names(body[i])), None)
    if first is None:
        return None
    before, tile = body[: at + 1], body[first:]
    prefix = body[at + 1 : first]
    tiles = _tile_counts(before + prefix)
    if tiles is None:
        return None
    if batch is not None and any(batch_name in read_names(s) for s in [*before, *prefix]):
        return None  # the batch is read before the tile's code: it cannot move into the loop
    tile_block = cst.IndentedBlock(body=tile)
    if any(isinstance(n, (cst.Return, cst.Yield)) for n in walk(tile_block)):
        return None  # a return in the tile's code would end the program, not the tile (one before it is fine)
    lived = set(kernel.params) | _assigned_names(cst.IndentedBlock(body=[*before, *prefix]))
    if batch is not None:
        lived.add(batch_name)
    assigned_in_tile = _assigned_names(tile_block)
    if assigned_in_tile & lived:
        return None  # a name bound before the tile and again in it: the second tile would see the first's
    per_tile = assigned_in_tile | ({batch_name, pid} if batch is not None else set())  # set in the loop
    batches = None
    if batch is not None:  # a descriptor of one batch becomes one of every batch, so that it can be hoisted
        batches = fresh_name(kernel.node, "num_batches")
        widen = _BatchDescriptors(tile, batch_name, batches, per_tile)
        tile = [statement.visit(widen) for statement in tile]
    hoisted, tile = _hoist_descriptors(tile, set(kernel.constexpr_params), per_tile)
    pid_line = body[at]
    target = pid
    bound = tiles
    if batches is not None:  # one loop over (batch, tile), batch-major: programs side by side share a batch
        target = fresh_name(kernel.node, "work")
        bound = f"{tiles} * {batches}"
        tile = [
            cst.parse_statement(f"{batch_name} = {_cast_code(f'{target} // ({tiles})', batch_cast)}\n"),
            cst.parse_statement(f"{pid} = {_cast_code(f'{target} % ({tiles})', cast)}\n"),
            *tile,
        ]
    elif cast is not None:  # the loop counts in int32; the tile's code gets the id in the type it asked for
        target = fresh_name(kernel.node, "tile_id")
        tile = [cst.parse_statement(f"{pid} = {_cast_code(target, cast)}\n"), *tile]
    loop = cst.For(
        target=cst.Name(target),
        iter=cst.parse_expression(f"tl.range(tl.program_id(0), {bound}, tl.num_programs(0))"),
        body=cst.IndentedBlock(body=[tile[0].with_changes(leading_lines=[]), *tile[1:]]),
        leading_lines=body[first].leading_lines,
    )
    prefix_lines = list(prefix)
    if prefix_lines:  # the program id's comment stays at the top of what follows it
        prefix_lines[0] = prefix_lines[0].with_changes(
            leading_lines=[*pid_line.leading_lines, *prefix_lines[0].leading_lines]
        )
    statements = [*body[:at], *prefix_lines, *hoisted, loop]
    node = kernel.node.with_changes(body=kernel.node.body.with_changes(body=statements))
    if batches is not None:
        params = _appended(list(node.params.params), cst.Param(cst.Name(batches)))
        node = node.with_changes(params=node.params.with_changes(params=params))
    return node, tiles, batches


def _body_constants(kernel: KernelDef) -> dict[str, int]:
    """``NAME: tl.constexpr = <int>`` at the top of the kernel's body, as Inductor's templates set their tile."""
    found: dict[str, int] = {}
    for line in kernel.node.body.body:
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
            small = line.body[0]
            if isinstance(small, cst.AnnAssign) and isinstance(small.value, cst.Integer):
                name = name_of(small.target)
                if name is not None:
                    found[name] = int(small.value.evaluated_value)
    return found


def _persistent_launch(site: LaunchSite, per_sm: int, batches: str | None = None) -> cst.Call | None:
    """The launch through the grid helper; in batch order (``batches``: the kernel's new parameter) also
    passing the grid's second axis, which must not depend on the launch's meta-parameters."""
    grid = launch_grid(site.call)
    helpers = (GRID_HELPER, BATCH_GRID_HELPER)
    if grid is None or (isinstance(grid, cst.Call) and dotted_name(grid.func) in helpers):
        return None
    args = list(site.call.args)
    if batches is not None:
        if len(site.grid_exprs) != 1:
            return None
        found = site.grid_exprs[0]
        pair = two_axis_grid(found)
        if pair is None:
            return None
        second = pair.elements[1]
        if isinstance(found, cst.Lambda):
            meta = {p.name.value for p in found.params.params}
            if meta & set(read_names(second.value)):
                return None  # the batch count depends on the meta-parameters: not known at the launch
        if any(a.keyword is not None and a.keyword.value == batches for a in args):
            return None
        args = _appended(args, cst.Arg(second.value, keyword=cst.Name(batches), equal=tight_equal()))
    helper = BATCH_GRID_HELPER if batches is not None else GRID_HELPER
    wrapped = cst.Call(cst.Name(helper), [cst.Arg(grid), cst.Arg(cst.Integer(str(per_sm)))])
    return with_launch_grid(site.call.with_changes(args=args), wrapped)


def _appended(items: list, added: cst.CSTNode) -> list:
    """``items`` (a call's arguments or a function's parameters) and ``added`` after them, laid out as the last
    item was (one per line stays so)."""
    if not items:
        return [added]
    last = items[-1]
    between = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if len(items) > 1 and isinstance(items[-2].comma, cst.Comma):
        between = items[-2].comma
    return [*items[:-1], last.with_changes(comma=between), added.with_changes(comma=last.comma)]


def persistent_changes(
    model: SourceModel, shared_memory_bytes: int | None = None, element_bytes: int = 2
) -> Iterator[tuple[str, list[tuple[cst.CSTNode, cst.CSTNode]], dict]]:
    """(description, node replacements, detail) for each tiled matmul kernel that can run persistent: at the
    programs per SM its launches' tile allows (:func:`programs_per_sm`), or at one and at two."""
    code = model.module.code
    if "import torch" not in code:
        return  # the grid helper asks torch for the SM count
    for kernel in model.kernels.values():
        if not kernel.uses_dot or kernel.autotuned:
            continue
        sites = [s for s in model.launches if s.kernel == kernel.name]
        if not sites:
            continue
        constants = _body_constants(kernel)  # Inductor's templates fix their tile in the kernel's body
        estimates = {
            programs_per_sm({**constants, **site.literal_ints()}, shared_memory_bytes, element_bytes)
            for site in sites
        }
        counts = tuple(estimates) if len(estimates) == 1 and None not in estimates else START_PER_SM
        for batch_order in (False, True):
            rewritten = _rewrite_kernel(kernel, batch_order)
            if rewritten is None:
                continue
            new_kernel_node, tiles, batches = rewritten
            new_kernel = _with_helpers(new_kernel_node, code, batch_order)
            for per_sm in counts:
                pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = [(kernel.node, new_kernel)]
                for site in sites:
                    launched = _persistent_launch(site, per_sm, batches)
                    if launched is None:
                        break
                    pairs.append((site.call, launched))
                else:
                    programs = f"at most {per_sm} program{'s' if per_sm > 1 else ''} per SM"
                    how = (
                        f"one grid axis of {programs}, each looping over every batch's output tiles "
                        f"({tiles} a batch) in batch order"
                        if batch_order
                        else f"{programs} on grid axis 0, each looping over the output tiles ({tiles})"
                    )
                    yield (
                        f"persistent {kernel.name}: {how} by the programs launched",
                        pairs,
                        {"direction": "up", "per_sm": per_sm, "batch_order": batch_order},
                    )


def _with_helpers(kernel: cst.FunctionDef, code: str, batch_order: bool) -> cst.CSTNode:
    """The kernel, preceded by the grid helpers the module does not have yet."""
    sources = [GRID_HELPER_SOURCE] if GRID_HELPER not in code else []
    if batch_order and BATCH_GRID_HELPER not in code:
        sources.append(BATCH_GRID_HELPER_SOURCE)
    if not sources:
        return kernel
    helper = []
    for source in sources:  # two blank lines before each helper
        first, *rest = cst.parse_module(source).body
        helper += [first.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]), *rest]
    return cst.FlattenSentinel([*helper, kernel])


def persistent_steps(model: SourceModel) -> Iterator[tuple[str, list[tuple[cst.CSTNode, cst.CSTNode]], dict]]:
    """Programs per SM x2 or /2 at a launch through ``_persistent_grid(grid, <int>)``."""
    for site in model.launches:
        grid = launch_grid(site.call)
        if not (
            isinstance(grid, cst.Call)
            and dotted_name(grid.func) in (GRID_HELPER, BATCH_GRID_HELPER)
            and len(grid.args) == 2
            and isinstance(grid.args[1].value, cst.Integer)
        ):
            continue
        value = int(grid.args[1].value.evaluated_value)
        for new, direction in ((value * 2, "up"), (value // 2, "down")):
            if PER_SM_RANGE[0] <= new <= PER_SM_RANGE[1]:
                args = [grid.args[0], grid.args[1].with_changes(value=cst.Integer(str(new)))]
                yield (
                    f"persistent programs per SM {value} -> {new} at launch {site.index + 1} of {site.kernel}",
                    [(grid, grid.with_changes(args=args))],
                    {"direction": direction, "per_sm": new},
                )


__all__ = ["persistent_changes", "persistent_steps"]

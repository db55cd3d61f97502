"""The ``conv_layout`` edit: a convolution called in NCHW order runs in channels-last order, without its bias.

A candidate that lets torch convolve (``F.conv2d(x, weight, bias)`` on NCHW tensors, then its own epilogue
kernel) pays for two things no tuning edit reaches: cuDNN's NCHW kernels, and cuDNN's bias, a pass of its own
over the output. On the suite's conv2d_bias_relu (fp16, 32 x 64 x 128 x 128, 3x3 to 128 channels) the NCHW
convolution with its bias took 0.553 ms, the same convolution in channels-last order without the bias 0.138 ms
(docs/benchmarks.md §4c3). torch.compile gets there with three kernels: the input copied to channels-last in
Triton, cuDNN's NHWC implicit GEMM without bias, and one Triton kernel adding the biases and writing NCHW.

The edit writes that program (a call of an ``nn.Conv2d`` module with zero padding, ``y = self.conv(x)``,
is read as the ``F.conv2d`` call it makes)::

    y = F.conv2d(_ksmith_channels_last(x), _ksmith_channels_last(weight), None, <the other arguments>)

where ``_ksmith_channels_last`` copies a 4-D tensor to channels-last order in one tiled Triton kernel (torch's
own copy of that input was three times slower). What follows depends on who reads ``y``:

- **an epilogue kernel it recognises** -- ``out = torch.empty_like(y)``, then one launch of a kernel of straight-
  line statements whose only store writes ``out`` at the index it reads ``y`` at (``plane * hw + offs``, or a
  flat ``offs`` over all elements), and whose other loads are per-channel vectors read at ``plane % channels``
  (``(offs // hw) % channels`` for a flat index; a bias, a scale): that kernel is
  replaced by one over ``(positions, channels, sample)`` tiles that reads ``y`` in its own order, adds the
  convolution's bias, applies the epilogue's expression (inlined from the old kernel, the per-channel vectors
  broadcast along the positions) and writes ``out`` in NCHW order. ``out`` is allocated contiguous.
- **anything else**: ``y`` is made NCHW again, with the bias, by one more Triton kernel
  (``_ksmith_conv_output``), so every later reader sees the tensor it saw before.

The convolution's output keeps the input's dtype, so the bias is added in fp32 and rounded to that dtype, as
cuDNN's own epilogue does. The edit is offered once per convolution whose input is not already converted,
where the module imports ``torch``, ``triton`` and ``triton.language as tl``. Whether it pays is the
evaluator's verdict; the new kernels' blocks and warps are ordinary launch edits afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import libcst as cst

from ksmith_mutate.source_model import (
    KernelDef,
    LaunchSite,
    SourceModel,
    dotted_name,
    imports_module,
    is_tl_call,
    keyword_value,
    name_of,
    pointer_arg,
    walk,
)
from ksmith_mutate.tma import _code, _launch_argument

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]

CONV_FUNCTIONS = ("F.conv2d", "torch.conv2d", "torch.nn.functional.conv2d", "nn.functional.conv2d")
# F.conv2d(input, weight, bias, stride, padding, dilation, groups): the positions of the arguments rewritten.
INPUT, WEIGHT, BIAS = 0, 1, 2
TO_CHANNELS_LAST = "_ksmith_channels_last"
TO_NCHW = "_ksmith_conv_output"
SIZE_READS = ("shape", "size", "numel", "device", "dtype", "dim", "ndim")
TILE = 64  # channels and positions of one program's tile, before any block edit

CHANNELS_LAST_SOURCE = f"""
@triton.jit
def {TO_CHANNELS_LAST}_kernel(x_ptr, out_ptr, channels, hw, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    # Grid: (samples x blocks of positions, blocks of channels). A tile of NCHW rows is read along the
    # positions and written along the channels (Triton moves it through shared memory: both sides coalesced).
    blocks = tl.cdiv(hw, BLOCK_P)
    sample = (tl.program_id(0) // blocks).to(tl.int64)
    pos = (tl.program_id(0) % blocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    chan = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (chan[:, None] < channels) & (pos[None, :] < hw)
    base = sample * channels * hw
    tile = tl.load(x_ptr + base + chan[:, None] * hw + pos[None, :], mask=mask)
    tl.store(out_ptr + base + pos[None, :] * channels + chan[:, None], tile, mask=mask)


def {TO_CHANNELS_LAST}(t):
    # The same values in channels-last (NHWC) memory order, for cuDNN's NHWC convolutions.
    t = t.contiguous()
    n, c, h, w = t.shape
    out = torch.empty((n, h, w, c), device=t.device, dtype=t.dtype).permute(0, 3, 1, 2)
    grid = lambda meta: (n * triton.cdiv(h * w, meta["BLOCK_P"]), triton.cdiv(c, meta["BLOCK_C"]))
    {TO_CHANNELS_LAST}_kernel[grid](t, out, c, h * w, BLOCK_C={TILE}, BLOCK_P={TILE}, num_warps=4)
    return out
"""

# Reads a tile of the convolution's output through its strides (channels-last or not: both have
# stride(2) == width * stride(3)), adds the bias the convolution no longer adds, and writes NCHW.
_TILE_PROLOGUE = """\
    blocks = tl.cdiv(hw_size, BLOCK_P)
    sample = (tl.program_id(0) // blocks).to(tl.int64)
    pos = (tl.program_id(0) % blocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    chan = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    chan_mask = chan < n_channels
    tile_mask = chan_mask[:, None] & (pos[None, :] < hw_size)
    value = tl.load({y} + sample * stride_n + chan[:, None] * stride_c + pos[None, :] * stride_p, mask=tile_mask)
    if HAS_CONV_BIAS:
        conv_bias = tl.load(conv_bias_ptr + chan, mask=chan_mask).to(tl.float32)
        value = (value.to(tl.float32) + conv_bias[:, None]).to({y}.dtype.element_ty)
"""
_TILE_STORE = (
    "    tl.store({out} + sample * n_channels * hw_size + chan[:, None] * hw_size + pos[None, :], {value}, "
    "mask=tile_mask)\n"
)
# Names the tile kernels use for themselves; an epilogue kernel whose parameters use one is left alone.
RESERVED = frozenset(
    {
        "sample",
        "blocks",
        "pos",
        "chan",
        "chan_mask",
        "tile_mask",
        "value",
        "result",
        "conv_bias",
        "conv_bias_ptr",
        "n_channels",
    }
    | {"hw_size", "stride_n", "stride_c", "stride_p", "HAS_CONV_BIAS", "BLOCK_C", "BLOCK_P", "tl", "triton"}
)

TO_NCHW_SOURCE = (
    f"""
@triton.jit
def {TO_NCHW}_kernel(
    y_ptr, conv_bias_ptr, out_ptr, n_channels, hw_size, stride_n, stride_c, stride_p,
    HAS_CONV_BIAS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr,
):
    # Grid: (samples x blocks of positions, blocks of channels).
"""
    + _TILE_PROLOGUE.format(y="y_ptr")
    + _TILE_STORE.format(out="out_ptr", value="value")
    + f"""

def {TO_NCHW}(y, bias):
    # The convolution's (channels-last) output as a contiguous NCHW tensor, plus the bias it did not add.
    n, c, h, w = y.shape
    out = torch.empty((n, c, h, w), device=y.device, dtype=y.dtype)
    grid = lambda meta: (n * triton.cdiv(h * w, meta["BLOCK_P"]), triton.cdiv(c, meta["BLOCK_C"]))
    {TO_NCHW}_kernel[grid](
        y, bias if bias is not None else y, out, c, h * w, y.stride(0), y.stride(1), y.stride(3),
        HAS_CONV_BIAS=bias is not None, BLOCK_C={TILE}, BLOCK_P={TILE}, num_warps=4,
    )
    return out
"""
)


def conv_layout_changes(model: SourceModel) -> Iterator[tuple[str, Pairs, dict]]:
    """(description, pairs, detail) for each ``F.conv2d`` call in a wrapper function that the edit applies to."""
    if not (
        imports_module(model.module, "torch")
        and imports_module(model.module, "triton")
        and imports_module(model.module, "triton.language", alias="tl")
    ):
        return
    anchor = _last_import(model.module)
    if anchor is None or TO_CHANNELS_LAST in model.module.code:
        return  # already rewritten once: the helpers are module-wide
    for body, index, target, call, functional in _conv_assignments(model):
        arguments = _conv_arguments(functional)
        if arguments is None:
            continue
        bias = arguments.get(BIAS)
        new_conv = _bias_free_channels_last(functional)
        fused = _epilogue_rewrite(model, body, index, target, bias)
        helpers = _statements(CHANNELS_LAST_SOURCE)
        if fused is not None:
            kernel, launch, allocation, new_kernel, new_launch, new_allocation = fused
            # Named anywhere but its definition and the launch replaced (another launch, an alias): kept.
            mentions = sum(isinstance(n, cst.Name) and n.value == kernel.name for n in walk(model.module))
            named_elsewhere = mentions > 2
            pairs: Pairs = [
                (call, new_conv),
                (allocation, new_allocation),
                (launch, new_launch),
                (anchor, cst.FlattenSentinel([anchor, *helpers])),
                (
                    kernel.node,
                    cst.FlattenSentinel([kernel.node, new_kernel]) if named_elsewhere else new_kernel,
                ),
            ]
            description = (
                f"{target} = conv2d in channels-last order without its bias (layout copies in Triton); "
                f"{kernel.name}'s epilogue adds the bias and writes NCHW from that order"
            )
            yield description, pairs, {"direction": "up", "fused": kernel.name}
        else:
            helpers += _statements(TO_NCHW_SOURCE)
            bias_code = _code(bias) if bias is not None else "None"
            wrapped = cst.parse_expression(f"{TO_NCHW}({_code(new_conv)}, {bias_code})")
            pairs = [(call, wrapped), (anchor, cst.FlattenSentinel([anchor, *helpers]))]
            description = (
                f"{target} = conv2d in channels-last order without its bias (layout copies in Triton), "
                "then NCHW again with the bias in one Triton kernel"
            )
            yield description, pairs, {"direction": "up", "fused": None}


def _last_import(module: cst.Module) -> cst.SimpleStatementLine | None:
    """The module's last top-level import line: the helpers go after it (an import holds nothing else an
    edit replaces)."""
    last = None
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine) and all(
            isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
        ):
            last = statement
    return last


def _statements(source: str) -> list[cst.BaseStatement]:
    nodes = list(cst.parse_module(source.strip() + "\n").body)
    return [nodes[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]), *nodes[1:]]


def _conv_assignments(
    model: SourceModel,
) -> Iterator[tuple[list[cst.BaseStatement], int, str, cst.Call, cst.Call]]:
    """(function body, statement index, target name, the call as written, the same as an ``F.conv2d`` call) of
    each ``y = F.conv2d(...)``, or ``y = self.conv(x)`` where the class's ``__init__`` makes ``self.conv`` an
    ``nn.Conv2d`` with zero padding, at the top level of a function that is not a Triton kernel."""
    for cls in walk(model.module):
        if not isinstance(cls, (cst.ClassDef, cst.Module)):
            continue
        modules = _conv_modules(cls) if isinstance(cls, cst.ClassDef) else set()
        owned = cls.body.body if isinstance(cls, cst.ClassDef) else cls.body
        for node in owned:
            if not isinstance(node, cst.FunctionDef) or node.name.value in model.kernels:
                continue
            if not isinstance(node.body, cst.IndentedBlock):
                continue
            body = list(node.body.body)
            for index, line in enumerate(body):
                if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
                    continue
                small = line.body[0]
                if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
                    continue
                target, value = name_of(small.targets[0].target), small.value
                if not target or not isinstance(value, cst.Call):
                    continue
                if dotted_name(value.func) in CONV_FUNCTIONS:
                    yield body, index, target, value, value
                    continue
                attribute = dotted_name(value.func)
                if attribute.startswith("self.") and attribute[5:] in modules:
                    functional = _functional(value, attribute)
                    if functional is not None:
                        yield body, index, target, value, functional


def _conv_modules(cls: cst.ClassDef) -> set[str]:
    """Attributes the class sets only to ``nn.Conv2d`` modules with zero padding (the default), wherever in the
    class it sets them."""
    found: dict[str, bool] = {}
    for assign in walk(cls):
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1):
            continue
        target, value = dotted_name(assign.targets[0].target), assign.value
        if target.startswith("self.") and target.count(".") == 1:
            found[target[5:]] = found.get(target[5:], True) and _zero_padded_conv(value)
    return {name for name, plain in found.items() if plain}


# nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, ...)
PADDING_MODE_POSITION = 8


def _zero_padded_conv(value: cst.BaseExpression) -> bool:
    if not (isinstance(value, cst.Call) and dotted_name(value.func) in ("nn.Conv2d", "torch.nn.Conv2d")):
        return False
    if any(arg.star for arg in value.args):
        return False  # *args / **kwargs may carry a padding mode
    positional = [arg.value for arg in value.args if arg.keyword is None]
    mode = keyword_value(value, "padding_mode")
    if mode is None and len(positional) > PADDING_MODE_POSITION:
        mode = positional[PADDING_MODE_POSITION]
    return mode is None or (isinstance(mode, cst.SimpleString) and mode.evaluated_value == "zeros")


def _functional(call: cst.Call, module: str) -> cst.Call | None:
    """``self.conv(x)`` as the functional call it makes: ``torch.nn.functional.conv2d(x, self.conv.weight,
    self.conv.bias, self.conv.stride, self.conv.padding, self.conv.dilation, self.conv.groups)``."""
    if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        return None
    fields = ", ".join(f"{module}.{f}" for f in ("weight", "bias", "stride", "padding", "dilation", "groups"))
    return cst.parse_expression(f"torch.nn.functional.conv2d({_code(call.args[0].value)}, {fields})")  # type: ignore[return-value]


def _conv_arguments(call: cst.Call) -> dict[int, cst.BaseExpression] | None:
    """The input, weight and (when given, not a literal ``None``) bias of a conv2d call; ``None`` where the call
    passes ``*args`` / ``**kwargs`` or lacks its input or weight, or its input is already converted."""
    if any(arg.star for arg in call.args):
        return None
    found: dict[int, cst.BaseExpression] = {}
    positional = [arg.value for arg in call.args if arg.keyword is None]
    for position, name in ((INPUT, "input"), (WEIGHT, "weight"), (BIAS, "bias")):
        value = positional[position] if position < len(positional) else keyword_value(call, name)
        if value is not None and not (isinstance(value, cst.Name) and value.value == "None"):
            found[position] = value
    if INPUT not in found or WEIGHT not in found:
        return None
    converted = found[INPUT]
    if isinstance(converted, cst.Call) and dotted_name(converted.func) == TO_CHANNELS_LAST:
        return None
    return found


def _bias_free_channels_last(call: cst.Call) -> cst.Call:
    """The conv2d call with its input and weight converted to channels-last and its bias ``None``."""
    args = list(call.args)
    positional = [i for i, arg in enumerate(args) if arg.keyword is None]

    def convert(value: cst.BaseExpression) -> cst.BaseExpression:
        return cst.parse_expression(f"{TO_CHANNELS_LAST}({_code(value)})")

    for position, name in ((INPUT, "input"), (WEIGHT, "weight"), (BIAS, "bias")):
        if position < len(positional):
            i = positional[position]
        else:
            matches = [
                i for i, arg in enumerate(args) if arg.keyword is not None and arg.keyword.value == name
            ]
            if not matches:
                continue
            i = matches[0]
        new_value = cst.Name("None") if position == BIAS else convert(args[i].value)
        args[i] = args[i].with_changes(value=new_value)
    return call.with_changes(args=args)


def _epilogue_rewrite(
    model: SourceModel,
    body: list[cst.BaseStatement],
    index: int,
    target: str,
    bias: cst.BaseExpression | None,
) -> tuple[KernelDef, cst.Call, cst.Call, cst.FunctionDef, cst.Call, cst.Call] | None:
    """(kernel, its launch, the output's allocation, and their replacements) where the convolution's only
    reader is an epilogue kernel this edit can fold; ``None`` otherwise."""
    rest = body[index + 1 :]
    allocation = out_name = None
    for line in rest:
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
            small = line.body[0]
            if (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.value, cst.Call)
                and dotted_name(small.value.func) == "torch.empty_like"
                and len(small.value.args) == 1
                and name_of(small.value.args[0].value) == target
            ):
                allocation, out_name = small.value, name_of(small.targets[0].target)
                break
    if allocation is None or out_name is None:
        return None
    sizes = _size_names(rest, target)
    for position, line in enumerate(rest):
        launches = {id(n) for n in walk(line)}
        for site in (s for s in model.launches if id(s.call) in launches):
            kernel = model.kernel_for(site)
            if kernel is None or kernel.autotuned:
                continue
            y_param = _param_passed(site, kernel, target)
            out_param = _param_passed(site, kernel, out_name)
            if y_param is None or out_param is None:
                continue
            y_argument = _launch_argument(site, kernel, y_param)
            if not _only_shape_reads(rest, target, allocation, y_argument):
                continue
            if bias is not None and _rebound(bias, rest[: position + 1]):
                continue  # the launch would read another bias than the convolution did

            def dims_of(
                param: str, site: LaunchSite = site, kernel: KernelDef = kernel
            ) -> tuple[int, ...] | None:
                argument = _launch_argument(site, kernel, param)
                return _dims(argument, target, sizes) if argument is not None else None

            epilogue = _epilogue(model, kernel, y_param, out_param, dims_of)
            if epilogue is None:
                continue
            value, pointers, scalars = epilogue
            new_kernel = _fused_kernel(model, kernel, y_param, out_param, value, pointers, scalars)
            new_launch = _fused_launch(
                site, kernel, new_kernel.name.value, target, out_name, bias, pointers, scalars
            )
            if new_launch is None:
                continue
            contiguous = cst.parse_expression(
                f"torch.empty_like({target}, memory_format=torch.contiguous_format)"
            )
            return kernel, site.call, allocation, new_kernel, new_launch, contiguous  # type: ignore[return-value]
    return None


def _param_passed(site: LaunchSite, kernel: KernelDef, name: str) -> str | None:
    """The kernel parameter the launch passes the variable ``name`` for (exactly one), or ``None``."""
    params = [p for p in kernel.params if name_of(_launch_argument(site, kernel, p) or cst.Name("_")) == name]
    return params[0] if len(params) == 1 else None


def _only_shape_reads(
    rest: list[cst.BaseStatement], target: str, allocation: cst.Call, y_argument: cst.CSTNode | None
) -> bool:
    """Whether the statements after the convolution read ``target`` only for its size (``.shape``, ``.size()``,
    ``.numel()``, ``.device``, ``.dtype``), as the output's allocation's argument and as the epilogue's own
    argument, and never rebind it: those are the readers that do not mind the output's memory order."""
    allowed: set[int] = {id(n) for n in walk(allocation)} | (
        {id(y_argument)} if y_argument is not None else set()
    )
    for line in rest:
        nodes = list(walk(line))
        allowed |= {id(n.attr) for n in nodes if isinstance(n, cst.Attribute)}
        allowed |= {id(n.keyword) for n in nodes if isinstance(n, cst.Arg) and n.keyword is not None}
        for node in nodes:
            if (
                isinstance(node, cst.Attribute)
                and name_of(node.value) == target
                and node.attr.value in SIZE_READS
            ):
                allowed.add(id(node.value))
            elif isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
                if any(isinstance(n, cst.Name) and n.value == target for n in walk(node.target)):
                    return False
            elif isinstance(node, cst.WithItem) and node.asname is not None:
                if any(isinstance(n, cst.Name) and n.value == target for n in walk(node.asname)):
                    return False
        if any(isinstance(n, cst.Name) and n.value == target and id(n) not in allowed for n in nodes):
            return False
    return True


def _rebound(bias: cst.BaseExpression, statements: list[cst.BaseStatement]) -> bool:
    """Whether ``statements`` assign a name the bias expression reads, or the attribute it is (``self.conv`` or
    ``self.conv.bias`` for ``self.conv.bias``): the launch would then see another bias than the convolution."""
    names = _variables(bias)
    dotted = dotted_name(bias)
    for statement in statements:
        for node in walk(statement):
            targets: list[cst.CSTNode] = []
            if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
                targets = [node.target]
            elif isinstance(node, cst.WithItem) and node.asname is not None:
                targets = [node.asname.name]
            for target in targets:
                written = dotted_name(target)  # type: ignore[arg-type]
                if written and dotted and (dotted == written or dotted.startswith(written + ".")):
                    return True
                if any(isinstance(n, cst.Name) and n.value in names for n in walk(target)):
                    if not written or "." not in written:
                        return True
    return False


def _size_names(statements: list[cst.BaseStatement], target: str) -> dict[str, tuple[int, ...]]:
    """Names bound to dimensions of ``target`` (``n, c, h, w = y.shape``: c is dimension 1) or to products
    of them (``hw = h * w``: dimensions 2 and 3), in ``statements``' top-level one-name assignments."""
    sizes: dict[str, tuple[int, ...]] = {}
    for line in statements:
        if not isinstance(line, cst.SimpleStatementLine):
            continue
        for small in line.body:
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
                continue
            where = small.targets[0].target
            if isinstance(where, cst.Tuple) and _is_shape(small.value, target):
                names = [name_of(e.value) for e in where.elements]
                if all(n is not None for n in names) and not any(
                    isinstance(e, cst.StarredElement) for e in where.elements
                ):
                    sizes.update({n: (i,) for i, n in enumerate(names)})  # type: ignore[misc]
            elif name_of(where) is not None:
                dims = _dims(small.value, target, sizes)
                if dims is not None:
                    sizes[name_of(where)] = dims  # type: ignore[index]
                else:
                    sizes.pop(name_of(where), None)  # type: ignore[arg-type]
    return sizes


def _is_shape(node: cst.BaseExpression, target: str) -> bool:
    node = _bare(node)
    if isinstance(node, cst.Attribute):
        return node.attr.value == "shape" and name_of(node.value) == target
    return isinstance(node, cst.Call) and dotted_name(node.func) == f"{target}.size" and not node.args


def _dims(node: cst.BaseExpression, target: str, sizes: dict[str, tuple[int, ...]]) -> tuple[int, ...] | None:
    """The dimensions of ``target`` whose product ``node`` is (``y.shape[2] * y.shape[3]``, ``h * w`` after
    ``n, c, h, w = y.shape``): sorted, or ``None`` where it is not such a product."""
    node = _bare(node)
    if isinstance(node, cst.Name):
        return sizes.get(node.value)
    if isinstance(node, cst.Subscript) and _is_shape(node.value, target) and len(node.slice) == 1:
        index = node.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.Integer):
            return (int(index.value.evaluated_value),)
    if isinstance(node, cst.Call) and dotted_name(node.func) == f"{target}.size" and len(node.args) == 1:
        value = node.args[0].value
        if isinstance(value, cst.Integer):
            return (int(value.evaluated_value),)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        left, right = _dims(node.left, target, sizes), _dims(node.right, target, sizes)
        if left is not None and right is not None:
            return tuple(sorted(left + right))
    return None


MAX_INLINED = 256  # names replaced by their values in one stored expression, at most


class _Inline(cst.CSTTransformer):
    """Replaces each name assigned in the kernel by its value, parenthesised, until only parameters remain.
    An attribute's name and a keyword argument's name are not variables: they stay as written."""

    def __init__(self, values: dict[str, cst.BaseExpression]) -> None:
        super().__init__()
        self.values = values
        self.depth = 0
        self.inlined = 0

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        value = self.values.get(original_node.value)
        if value is None:
            return updated_node
        self.depth += 1
        self.inlined += 1
        if self.depth > 32 or self.inlined > MAX_INLINED:
            raise RecursionError("inlining does not end, or grows too large")
        inlined = value.visit(self)
        self.depth -= 1
        return inlined.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _bare(node: cst.BaseExpression) -> cst.BaseExpression:
    """The expression without its own parentheses."""
    return node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node


def _key(node: cst.CSTNode) -> str:
    """An expression's code with its whitespace and comments folded: how two expressions are compared."""
    return " ".join(line.split("#", 1)[0].strip() for line in _code(node).splitlines()).replace(" ", "")


def _terms(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms of a sum, parenthesised sums opened (``p + (a * b + c)`` -> ``p``, ``a * b``, ``c``)."""
    node = _bare(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _terms(node.left) + _terms(node.right)
    return [node]


def _offset_terms(
    address: cst.BaseExpression | None, pointer: str | None = None
) -> tuple[str, list[cst.BaseExpression]] | None:
    """(pointer, the other terms) of an address ``pointer + term + ...`` whose first term is a name
    (``pointer``, when given); ``None`` otherwise."""
    if address is None:
        return None
    terms = _terms(address)
    base = name_of(terms[0])
    if base is None or (pointer is not None and base != pointer) or len(terms) < 2:
        return None
    return base, terms[1:]


# What an epilogue may compute with: element-wise functions (a reduction such as tl.sum, tl.max or tl.cumsum
# would run over another axis of the new tile), conversions, and the loads it reads.
ELEMENTWISE = frozenset(
    {
        "maximum",
        "minimum",
        "where",
        "exp",
        "exp2",
        "log",
        "log2",
        "sqrt",
        "sqrt_rn",
        "rsqrt",
        "sigmoid",
        "abs",
    }
    | {"fma", "cos", "sin", "erf", "floor", "ceil", "clamp", "fdiv", "div_rn", "cast"}
)
SIDE_EFFECTS = ("atomic_", "debug_barrier", "device_print", "device_assert", "store")


def _allowed_call(call: cst.Call) -> bool:
    name = dotted_name(call.func)
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "to":
        return True  # a conversion
    if name.startswith(("tl.math.", "triton.language.math.")) or ".libdevice." in f".{name}":
        return True  # the math libraries are element-wise
    return is_tl_call(call, *ELEMENTWISE, "load")


def _epilogue(
    model: SourceModel,
    kernel: KernelDef,
    y_param: str,
    out_param: str,
    dims_of: Callable[[str], tuple[int, ...] | None],
) -> tuple[cst.BaseExpression, list[str], list[str]] | None:
    """The stored value as an expression of the convolution's value (``value``) and per-channel vectors
    (``tl.load(p + chan, mask=chan_mask)[:, None]``), the per-channel pointers and the scalars it reads;
    ``None`` where the kernel is not a per-element epilogue of ``y_param`` into ``out_param``.
    ``dims_of(param)``: which dimensions of the convolution's output the launch passes for ``param`` (the
    channels, 1; the plane's size, 2 and 3), ``None`` where it passes something else."""
    body = kernel.node.body
    if not isinstance(body, cst.IndentedBlock) or len(kernel.stores) != 1:
        return None
    values: dict[str, cst.BaseExpression] = {}
    for line in body.body:
        if not isinstance(line, cst.SimpleStatementLine):
            return None
        for small in line.body:
            if isinstance(small, cst.Expr) and is_tl_call(small.value, "store"):
                continue
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
                return None
            name = name_of(small.targets[0].target)
            if name is None or name in values or name in kernel.params:
                return None
            values[name] = small.value
    for call in walk(body):
        if isinstance(call, cst.Call):
            method = dotted_name(call.func).rsplit(".", 1)[-1]
            if dotted_name(call.func) in model.kernels or (
                method.startswith(SIDE_EFFECTS) and not is_tl_call(call, "store")
            ):
                return None  # an effect besides the one store, or a helper whose effects are not read here
    store = kernel.stores[0]
    stored = keyword_value(store, "value")
    positional = [arg.value for arg in store.args if arg.keyword is None]
    if stored is None and len(positional) >= 2:
        stored = positional[1]
    address = pointer_arg(store)
    if address is None or stored is None:
        return None
    inline = _Inline(values)
    try:
        store_offset = _offset_terms(address.visit(inline), out_param)
        value = stored.visit(inline)
        store_mask = keyword_value(store, "mask")
        mask_key = _key(store_mask.visit(inline)) if store_mask is not None else None
    except RecursionError:
        return None
    if store_offset is None:
        return None
    offset = [_key(t) for t in store_offset[1]]
    # out + plane * hw + offs, or out + offs over all elements: the plane (plane, or offs // hw) is what the
    # per-channel loads take modulo the channels, hw the launch's height * width of the output.
    planes = set()
    for term in store_offset[1]:
        if isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply):
            for plane, size in ((term.left, term.right), (term.right, term.left)):
                size_param = name_of(_bare(size))
                if size_param in kernel.params and dims_of(size_param) == (2, 3):
                    planes.add(_key(_bare(plane)))
    index_names = {n for t in store_offset[1] for n in _variables(t)}
    pointers: list[str] = []
    replacements: dict[int, cst.BaseExpression] = {}
    for node in _outside_loads(value):
        if not isinstance(node, cst.Call):
            continue
        if not _allowed_call(node):
            return None
        if not is_tl_call(node, "load"):
            continue
        mask = keyword_value(node, "mask")
        if mask is not None and _key(mask) != mask_key:
            return None  # a narrower mask (with its `other`) gives other values than the new tile's
        load = _offset_terms(pointer_arg(node))
        if load is None:
            return None
        base, terms = load
        if base == y_param and [_key(t) for t in terms] == offset:
            replacements[id(node)] = cst.Name("value")
            continue
        channel = _bare(terms[0]) if len(terms) == 1 else None
        if (
            base in (y_param, out_param)
            or base not in kernel.params
            or not isinstance(channel, cst.BinaryOperation)
            or not isinstance(channel.operator, cst.Modulo)
            or name_of(_bare(channel.right)) not in kernel.params
            or dims_of(name_of(_bare(channel.right))) != (1,)  # type: ignore[arg-type]
            or not _is_plane(channel.left, planes, offset, kernel.params, dims_of)
        ):
            return None
        replacements[id(node)] = cst.parse_expression(f"tl.load({base} + chan, mask=chan_mask)[:, None]")
        pointers.append(base)
    if not any(isinstance(r, cst.Name) for r in replacements.values()):
        return None  # the value does not read the convolution's output
    value = value.visit(_ByIdentity(replacements))
    if any(is_tl_call(n, "program_id", "num_programs", "arange") for n in walk(value)):
        return None
    reads = _variables(value) - {"tl", "triton", "value", "chan", "chan_mask"}
    if reads - set(kernel.params) or reads & index_names or set(kernel.params) & RESERVED:
        return None
    pointers = list(dict.fromkeys(pointers))
    scalars = [p for p in kernel.params if p in reads and p not in pointers and p not in (out_param, y_param)]
    return value, pointers, scalars


def _outside_loads(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node below it, depth first, but not what a ``tl.load`` call holds (its address
    and mask index the old kernel's elements; they are checked as addresses, not as computation)."""
    yield node
    if is_tl_call(node, "load"):
        return
    for child in node.children:
        yield from _outside_loads(child)


def _is_plane(
    node: cst.BaseExpression,
    planes: set[str],
    offset: list[str],
    params: tuple[str, ...],
    dims_of: Callable[[str], tuple[int, ...] | None],
) -> bool:
    """Whether ``node`` numbers the (sample, channel) plane of the element the kernel stores: the factor of
    the store's ``plane * hw`` term, or the store's whole flat index divided by the plane's size
    (``offs // hw``, the way a kernel over all elements at once finds its channel)."""
    node = _bare(node)
    if _key(node) in planes:
        return True
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.FloorDivide)):
        return False
    size = name_of(_bare(node.right))
    return (
        [_key(t) for t in _terms(node.left)] == offset and size in params and dims_of(size) == (2, 3)  # type: ignore[arg-type]
    )


def _variables(node: cst.CSTNode) -> set[str]:
    """The variables an expression reads: not an attribute's or a keyword argument's name, not a constant."""
    nodes = list(walk(node))
    names = {id(n.attr) for n in nodes if isinstance(n, cst.Attribute)}
    names |= {id(n.keyword) for n in nodes if isinstance(n, cst.Arg) and n.keyword is not None}
    found = {n.value for n in nodes if isinstance(n, cst.Name) and id(n) not in names}
    return found - {"None", "True", "False"}


class _ByIdentity(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.BaseExpression]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:
        return self.replacements.get(id(original_node), updated_node)


def _fused_kernel(
    model: SourceModel,
    kernel: KernelDef,
    y_param: str,
    out_param: str,
    value: cst.BaseExpression,
    pointers: list[str],
    scalars: list[str],
) -> cst.FunctionDef:
    taken = set(model.kernels)
    name, n = f"{kernel.name}_channels_last", 1
    while name in taken:
        n += 1
        name = f"{kernel.name}_channels_last_{n}"
    constexprs = [s for s in scalars if s in kernel.constexpr_params]
    plain = [s for s in scalars if s not in kernel.constexpr_params]
    params = ", ".join(
        [y_param, out_param, "conv_bias_ptr", *pointers, *plain]
        + ["n_channels", "hw_size", "stride_n", "stride_c", "stride_p"]
        + [f"{p}: tl.constexpr" for p in ["HAS_CONV_BIAS", "BLOCK_C", "BLOCK_P", *constexprs]]
    )
    source = (
        f"@triton.jit\ndef {name}({params}):\n"
        f"    # {kernel.name}'s epilogue over (sample and positions, channels) tiles of the convolution's output, read\n"
        "    # in its own (channels-last) order; the result is written in NCHW order.\n"
        + _TILE_PROLOGUE.format(y=y_param)
        + f"    result = ({_code(value)})\n"
        + _TILE_STORE.format(out=out_param, value="result")
    )
    (node,) = cst.parse_module(source).body
    return node.with_changes(leading_lines=kernel.node.leading_lines)  # type: ignore[return-value]


def _fused_launch(
    site: LaunchSite,
    kernel: KernelDef,
    name: str,
    target: str,
    out_name: str,
    bias: cst.BaseExpression | None,
    pointers: list[str],
    scalars: list[str],
) -> cst.Call | None:
    passed: dict[str, str] = {}
    for param in [*pointers, *scalars]:
        argument = _launch_argument(site, kernel, param)
        if argument is None:
            return None
        passed[param] = _code(argument)
    constexprs = [s for s in scalars if s in kernel.constexpr_params]
    plain = [s for s in scalars if s not in kernel.constexpr_params]
    y = target
    if bias is None:
        conv_bias, has_bias = y, "False"
    else:
        code = _code(bias)
        conv_bias, has_bias = f"{code} if {code} is not None else {y}", f"{code} is not None"
    grid = (
        f'lambda meta: ({y}.shape[0] * triton.cdiv({y}.shape[2] * {y}.shape[3], meta["BLOCK_P"]), '
        f'triton.cdiv({y}.shape[1], meta["BLOCK_C"]))'
    )
    arguments = ", ".join(
        [y, out_name, conv_bias, *(passed[p] for p in pointers), *(passed[p] for p in plain)]
        + [
            f"{y}.shape[1]",
            f"{y}.shape[2] * {y}.shape[3]",
            f"{y}.stride(0)",
            f"{y}.stride(1)",
            f"{y}.stride(3)",
        ]
        + [f"HAS_CONV_BIAS={has_bias}", f"BLOCK_C={TILE}", f"BLOCK_P={TILE}"]
        + [f"{c}={passed[c]}" for c in constexprs]
        + ["num_warps=4"]
    )
    return cst.parse_expression(f"{name}[{grid}]({arguments})")  # type: ignore[return-value]

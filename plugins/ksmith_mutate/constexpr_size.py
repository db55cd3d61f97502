"""The ``constexpr_size`` edit: a size the kernel loops to or masks against becomes a compile-time constant.

Inductor writes the sizes of the problem it compiled into its kernels (``xnumel = 16384``, ``r0_numel =
4096``), so the compiler knows every loop's trip count and which masks are always true. A hand-written kernel
takes them as arguments. On the H100 a row sum over 4096-wide rows measured 0.962x torch.compile with the row
length as an argument at its best block and warps, 0.994x with it a ``tl.constexpr`` and ``evict_first`` loads
(docs/benchmarks.md section 4e); neither block, warps nor hints reach that alone.

The edit annotates one parameter ``tl.constexpr``: Triton then compiles the kernel once per value it is called
with, as Inductor compiles once per shape (a model whose sizes change call after call pays a compile per new
size). Offered for a parameter that is the bound of a loop from 0 (``range(0, n, BLOCK)``) or what an offset is
compared with (``offs < n``), that the kernel never assigns nor uses as a tensor (``n.to(...)``), of a kernel
that is not autotuned, at a launch that passes it (by position or keyword).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ksmith_mutate.source_model import KernelDef, SourceModel, range_from_zero, reads_and_writes, walk
from ksmith_mutate.tma import _launch_argument

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]


def constexpr_size_changes(model: SourceModel) -> Iterator[tuple[str, Pairs, dict]]:
    """(description, pairs, detail) for each size parameter of each kernel that can be made constant."""
    for kernel in model.kernels.values():
        sites = [s for s in model.launches if s.kernel == kernel.name]
        if kernel.autotuned or not sites:
            continue
        for name in _sizes(kernel):
            if any(_launch_argument(site, kernel, name) is None for site in sites):
                continue
            params = kernel.node.params
            new_params = [
                p.with_changes(annotation=cst.Annotation(cst.parse_expression("tl.constexpr")))
                if p.name.value == name
                else p
                for p in params.params
            ]
            new_kernel = kernel.node.with_changes(params=params.with_changes(params=new_params))
            yield (
                f"{name} of {kernel.name} a compile-time constant (one compile per value)",
                [(kernel.node, new_kernel)],
                {"direction": "up", "param": name},
            )


def _sizes(kernel: KernelDef) -> list[str]:
    """Parameters (not constexpr) that bound a loop from 0 or that an offset is compared with, in order."""
    candidates = [p for p in kernel.params if p not in kernel.constexpr_params]
    used: set[str] = set()
    for node in walk(kernel.node.body):
        if isinstance(node, cst.For):
            bounds = range_from_zero(node)
            if bounds is not None and isinstance(bounds[0], cst.Name):
                used.add(bounds[0].value)
        elif isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            target = node.comparisons[0]
            if isinstance(target.operator, (cst.LessThan, cst.LessThanEqual)) and isinstance(
                target.comparator, cst.Name
            ):
                used.add(target.comparator.value)
    assigned: set[str] = set()
    as_tensor: set[str] = set()
    for node in walk(kernel.node.body):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            assigned |= set(reads_and_writes(node)[1])
        elif isinstance(node, cst.For) and isinstance(node.target, cst.Name):
            assigned.add(node.target.value)
        elif isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
            as_tensor.add(node.value.value)
    return [p for p in candidates if p in used and p not in assigned and p not in as_tensor]

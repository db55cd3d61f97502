"""``gemm_config`` for Inductor's own GEMM templates: their tile constants and the fixed grid that follows them.

A seed written from Inductor's max-autotune code (``ksmith seed --from inductor``, docs/proposers.md) holds
Inductor's ``mm`` / ``addmm`` / ``bmm`` template as Inductor rendered it: the tile is a constant assigned in the
kernel's body (``BLOCK_M : tl.constexpr = 128``), the problem's sizes are literals there too (``M = 2048``),
and the launch passes a literal grid computed for that tile (``grid = (512, 1, 1)``). The launch-keyword edits
cannot move such a tile (there is no keyword), and changing a constant alone would leave the grid covering
the wrong number of tiles, so evolution from these seeds could only retune warps and stages (docs/benchmarks.md
§6d-6e: matmul, matmul_gelu and bmm stayed at 0.82-0.89x of torch.compile).

This edit moves such a kernel to another of Inductor's mm configurations (the list ``gemm_config`` uses): the
three tile constants, ``num_warps`` and ``num_stages`` at the launch, and the grid's first element recomputed
as ``cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)`` (the template's own ``grid_m * grid_n``; a batch axis stays).

Recognised only where the template's contract can be read and checked, so the edit never changes what is
computed: the three ``BLOCK_*`` constants and ``M``/``N``/``K`` as integer literals at the kernel's top level,
``grid_m``/``grid_n`` computed from them as the template does, one launch of the kernel whose grid is a
literal tuple (inline or one assignment) whose first element is that product today, and literal ``num_warps``
and ``num_stages`` there. The K loop of a template rendered with ``EVEN_K = True`` loads without masks, so
only a ``BLOCK_K`` dividing ``K`` is offered there; one rendered with masks takes any.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ksmith_mutate.gemm_configs import GemmConfig, platform_configs
from ksmith_mutate.source_model import KernelDef, LaunchSite, SourceModel, keyword_value

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]
TILE_CONSTANTS = ("BLOCK_M", "BLOCK_N", "BLOCK_K")
SIZES = ("M", "N", "K")
GRID_FORMULAS = {"grid_m": "(M + BLOCK_M - 1) // BLOCK_M", "grid_n": "(N + BLOCK_N - 1) // BLOCK_N"}


def template_config_changes(
    model: SourceModel,
    max_accumulator: int,
    shared_memory_bytes: int | None,
    num_warps: tuple[int, ...],
    element_bytes: int,
) -> Iterator[tuple[str, GemmConfig, Pairs, bool]]:
    """(kernel, config, node replacements, whether the tile shrinks) for each of Inductor's mm configurations each
    recognised template kernel can move to, within the platform's limits."""
    for kernel in model.kernels.values():
        template = _template(kernel)
        if template is None:
            continue
        sites = [s for s in model.launches if s.kernel == kernel.name]
        if len(sites) != 1:
            continue
        launch = _launch(model.module, sites[0])
        if launch is None:
            continue
        tiles, sizes, even_k = template
        current = tuple(int(tiles[n].evaluated_value) for n in TILE_CONSTANTS)
        m, n, k = (sizes[name] for name in SIZES)
        grid_first, warps_node, stages_node = launch
        if int(grid_first.evaluated_value) != _tiles(m, n, current[0], current[1]):
            continue  # the grid is not this tile's: the template's contract does not hold
        now = (*current, int(stages_node.evaluated_value), int(warps_node.evaluated_value))
        for config in platform_configs(max_accumulator, shared_memory_bytes, num_warps, element_bytes):
            if tuple(config) == now or not _offered(config, m, n, k, even_k):
                continue
            pairs: Pairs = [
                (tiles[name], cst.Integer(str(value)))
                for name, value in zip(TILE_CONSTANTS, (config.block_m, config.block_n, config.block_k))
                if value != int(tiles[name].evaluated_value)
            ]
            pairs.append((grid_first, cst.Integer(str(_tiles(m, n, config.block_m, config.block_n)))))
            pairs.append((warps_node, cst.Integer(str(config.num_warps))))
            pairs.append((stages_node, cst.Integer(str(config.num_stages))))
            yield kernel.name, config, pairs, config.block_m * config.block_n < current[0] * current[1]


def _tiles(m: int, n: int, block_m: int, block_n: int) -> int:
    return -(-m // block_m) * -(-n // block_n)


def _offered(config: GemmConfig, m: int, n: int, k: int, even_k: bool) -> bool:
    if even_k and k % config.block_k:
        return False  # the unmasked K loop would read past K
    # A tile twice the next power of two of its side computes nothing its half would not (the template wraps
    # rows and columns past the size): a wasted evaluation.
    return config.block_m < 2 * _pow2(m) and config.block_n < 2 * _pow2(n) and config.block_k < 2 * _pow2(k)


def _pow2(value: int) -> int:
    return 1 << max(value - 1, 0).bit_length()


def _template(kernel: KernelDef) -> tuple[dict[str, cst.Integer], dict[str, int], bool] | None:
    """The tile constants' literal nodes, the sizes and whether the K loop is unmasked, if ``kernel`` is an
    Inductor GEMM template as rendered for fixed sizes; ``None`` otherwise."""
    tiles: dict[str, cst.Integer] = {}
    sizes: dict[str, int] = {}
    formulas: dict[str, str] = {}
    even_k = True
    for line in kernel.node.body.body:
        if not isinstance(line, cst.SimpleStatementLine):
            continue
        for small in line.body:
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                name = small.target.value
                if name in TILE_CONSTANTS and isinstance(small.value, cst.Integer):
                    tiles[name] = small.value
                elif name == "EVEN_K" and isinstance(small.value, cst.Name):
                    even_k = small.value.value != "False"
            elif isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = small.targets[0].target
                if not isinstance(target, cst.Name):
                    continue
                if target.value in SIZES and isinstance(small.value, cst.Integer):
                    sizes[target.value] = int(small.value.evaluated_value)
                elif target.value in GRID_FORMULAS:
                    formulas[target.value] = cst.Module([]).code_for_node(small.value)
    if set(tiles) != set(TILE_CONSTANTS) or set(sizes) != set(SIZES):
        return None
    if any(_bare(formulas.get(name, "")) != _bare(formula) for name, formula in GRID_FORMULAS.items()):
        return None
    return tiles, sizes, even_k


def _bare(code: str) -> str:
    return "".join(code.split())


def _launch(module: cst.Module, site: LaunchSite) -> tuple[cst.Integer, cst.Integer, cst.Integer] | None:
    """The grid's first literal and the launch's ``num_warps`` and ``num_stages`` literals, if all are there."""
    grid = _grid_of(module, site.call)
    if not isinstance(grid, cst.Tuple):
        return None
    elements = grid.elements
    if not elements or not all(isinstance(e.value, cst.Integer) for e in elements):
        return None
    warps, stages = keyword_value(site.call, "num_warps"), keyword_value(site.call, "num_stages")
    if not isinstance(warps, cst.Integer) or not isinstance(stages, cst.Integer):
        return None
    return elements[0].value, warps, stages


def _grid_of(module: cst.Module, call: cst.Call) -> cst.BaseExpression | None:
    """The grid ``call`` launches on: the subscript itself, or the value last assigned to its name before the
    call in the same function (Inductor's wrappers reuse ``grid`` for every launch)."""
    func = call.func
    if not isinstance(func, cst.Subscript) or len(func.slice) != 1:
        return None
    grid = func.slice[0].slice
    if not isinstance(grid, cst.Index):
        return None
    if not isinstance(grid.value, cst.Name):
        return grid.value
    finder = _LastAssignment(grid.value.value, call)
    module.visit(finder)
    return finder.found


class _LastAssignment(cst.CSTVisitor):
    """The value of the last ``name = ...`` before ``call`` in the function that holds it, in source order."""

    def __init__(self, name: str, call: cst.Call) -> None:
        self.name, self.call = name, call
        self.latest: list[cst.BaseExpression | None] = [None]
        self.found: cst.BaseExpression | None = None
        self.done = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.latest.append(None)
        return not self.done

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.latest.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(isinstance(t.target, cst.Name) and t.target.value == self.name for t in node.targets):
            self.latest[-1] = node.value if len(node.targets) == 1 else None

    def visit_Call(self, node: cst.Call) -> bool:
        if node is self.call and not self.done:
            self.found, self.done = self.latest[-1], True
        return not self.done

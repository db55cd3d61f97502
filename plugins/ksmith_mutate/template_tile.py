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
``grid_m``/``grid_n`` computed from them as the template does, and at every launch of the kernel a literal
grid tuple whose first element is that product today (inline, or assigned in the statement right before the
launch and read nowhere after it) and literal ``num_warps`` and ``num_stages``; every launch moves with the
tile. The configurations are Inductor's as its template scales them to the sizes (a side at most the size's
next power of two, at least 16). The K loop of a template rendered with ``EVEN_K = True`` loads without
masks, so only a ``BLOCK_K`` dividing ``K`` is offered there; one rendered with masks takes any.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ksmith_mutate.gemm_configs import GemmConfig, platform_configs
from ksmith_mutate.source_model import (
    KernelDef,
    LaunchSite,
    SourceModel,
    keyword_value,
    top_level_assignments,
    walk,
)

Pairs = list[tuple[cst.CSTNode, cst.CSTNode]]
TILE_CONSTANTS = ("BLOCK_M", "BLOCK_N", "BLOCK_K")
SIZES = ("M", "N", "K")
MIN_BLOCK = 16  # Inductor's least tile side (tl.dot's too)
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
        tiles, sizes, even_k = template
        current = tuple(int(tiles[n].evaluated_value) for n in TILE_CONSTANTS)
        m, n, k = (sizes[name] for name in SIZES)
        # Every launch of the kernel (Inductor shares one template kernel between GEMMs of one shape) must be
        # on this tile's grid: each is moved with the tile.
        launches = [_launch(model.module, s) for s in model.launches if s.kernel == kernel.name]
        if not launches or any(
            launch is None or int(launch[0].evaluated_value) != _tiles(m, n, current[0], current[1])
            for launch in launches
        ):
            continue
        now = {
            (*current, int(stages.evaluated_value), int(warps.evaluated_value))
            for _, warps, stages in launches
        }
        for config in _configs(
            m, n, k, even_k, max_accumulator, shared_memory_bytes, num_warps, element_bytes
        ):
            if {tuple(config)} == now:
                continue
            pairs: Pairs = [
                (tiles[name], cst.Integer(str(value)))
                for name, value, old in zip(TILE_CONSTANTS, config[:3], current)
                if value != old
            ]
            for grid_first, warps, stages in launches:
                pairs.append((grid_first, cst.Integer(str(_tiles(m, n, config.block_m, config.block_n)))))
                pairs.append((warps, cst.Integer(str(config.num_warps))))
                pairs.append((stages, cst.Integer(str(config.num_stages))))
            yield kernel.name, config, pairs, config.block_m * config.block_n < current[0] * current[1]


def _tiles(m: int, n: int, block_m: int, block_n: int) -> int:
    return -(-m // block_m) * -(-n // block_n)


def _configs(
    m: int,
    n: int,
    k: int,
    even_k: bool,
    max_accumulator: int,
    shared_memory_bytes: int | None,
    num_warps: tuple[int, ...],
    element_bytes: int,
) -> list[GemmConfig]:
    """Inductor's configurations as its mm template scales them to a problem's sizes (each side at most the
    size's next power of two, at least 16), once each, within the platform's limits; a K loop without masks
    takes only a ``BLOCK_K`` dividing ``K``."""
    scaled = []
    for c in platform_configs(max_accumulator, shared_memory_bytes, num_warps, element_bytes):
        block_m, block_n, block_k = (max(min(b, _pow2(size)), MIN_BLOCK) for b, size in zip(c[:3], (m, n, k)))
        if even_k and k % block_k:
            continue  # the unmasked K loop would read past K
        scaled.append(GemmConfig(block_m, block_n, block_k, c.num_stages, c.num_warps))
    return list(dict.fromkeys(scaled))


def _pow2(value: int) -> int:
    return 1 << max(value - 1, 0).bit_length()


def _template(kernel: KernelDef) -> tuple[dict[str, cst.Integer], dict[str, int], bool] | None:
    """The tile constants' literal nodes, the sizes and whether the K loop is unmasked, if ``kernel`` is an
    Inductor GEMM template as rendered for fixed sizes; ``None`` otherwise."""
    tiles: dict[str, cst.Integer] = {}
    even_k = True
    statements = list(kernel.node.body.body)
    for line in statements:
        for small in line.body if isinstance(line, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                name = small.target.value
                if name in TILE_CONSTANTS and isinstance(small.value, cst.Integer):
                    tiles[name] = small.value
                elif name == "EVEN_K" and isinstance(small.value, cst.Name):
                    even_k = small.value.value != "False"
    sizes: dict[str, int] = {}
    formulas: dict[str, str] = {}
    for _, name, value in top_level_assignments(statements):
        if name in SIZES and isinstance(value, cst.Integer):
            sizes[name] = int(value.evaluated_value)
        elif name in GRID_FORMULAS:
            formulas[name] = cst.Module([]).code_for_node(value)
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
    """The grid ``call`` launches on: the subscript itself, or the value of ``name = ...`` in the statement
    right before the launch (as Inductor's wrappers write it) when nothing after the launch reads that value
    (it is moved with this kernel's tile); ``None`` otherwise."""
    func = call.func
    if not isinstance(func, cst.Subscript) or len(func.slice) != 1:
        return None
    grid = func.slice[0].slice
    if not isinstance(grid, cst.Index):
        return None
    if not isinstance(grid.value, cst.Name):
        return grid.value
    finder = _GridBeforeLaunch(grid.value.value, call)
    module.visit(finder)
    return finder.found


class _GridBeforeLaunch(cst.CSTVisitor):
    def __init__(self, name: str, call: cst.Call) -> None:
        self.name, self.call = name, call
        self.found: cst.BaseExpression | None = None

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._scan(list(node.body))

    def visit_Module(self, node: cst.Module) -> None:
        self._scan(list(node.body))

    def _scan(self, statements: list[cst.BaseStatement]) -> None:
        for index, statement in enumerate(statements):
            if not isinstance(statement, cst.SimpleStatementLine) or not _contains(statement, self.call):
                continue
            value = _assigned(statements[index - 1], self.name) if index else None
            if value is not None and not self._read_after(statements[index + 1 :]):
                self.found = value

    def _read_after(self, statements: list[cst.BaseStatement]) -> bool:
        for statement in statements:
            if _assigned(statement, self.name) is not None:
                return False  # rebound before any read
            if any(isinstance(n, cst.Name) and n.value == self.name for n in walk(statement)):
                return True
        return False


def _assigned(statement: cst.BaseStatement, name: str) -> cst.BaseExpression | None:
    """The value of ``statement`` when it is exactly ``name = value``."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
            if isinstance(target, cst.Name) and target.value == name:
                return small.value
    return None


def _contains(node: cst.CSTNode, target: cst.CSTNode) -> bool:
    return any(n is target for n in walk(node))

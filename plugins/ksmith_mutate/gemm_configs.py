"""The ``gemm_config`` edit: move a tiled matmul to another point of Inductor's own GEMM config space at once.

A tiled matmul's tile sizes, warps and pipeline stages only pay off together: 64x64x32 tiles with 4 warps
sit at a third of an H100's tensor throughput, 128x128x64 tiles with 4 warps spill, and the step-by-step
edits (``dot_tile``, ``num_warps``, ``num_stages``) must cross such valleys one losing step at a time. This
edit sets ``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``, ``num_warps``, ``num_stages`` (and ``GROUP_M`` where the
kernel has it) to one configuration that Inductor's max-autotune itself tries for its mm template, so every
proposal is a configuration some GPU runs well, and the evaluator says which one this GPU likes.

The configurations are read from the installed torch (``torch._inductor.template_heuristics``, the list its
mm template autotunes over), which is private API: when it cannot be read, the same list as torch 2.11 ships
is used. ksmith adds its own (``KSMITH_CONFIGS``): tiles measured fastest on the suite's matmul that the
installed torch's list may lack (torch 2.11's has no 128 x 256 tile; 2.13's has one at four stages).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import NamedTuple

import libcst as cst

from ksmith_mutate.source_model import DOT_AXIS, GROUP_NAMES, LaunchSite

# Shared memory one block may use on the GPUs ksmith targets first (an H100: 227 KiB). A software-pipelined
# matmul keeps ``stages`` copies of its A and B tiles there; a configuration that cannot fit them at the
# operands' bytes per element fails to compile ("out of resource: shared memory"), so it is never proposed.
# Sources do not say their operands' dtype: the proposer knows it from the problem (4 for fp32), and two bytes,
# the least, is assumed where nothing does.
SHARED_MEMORY_BYTES = 227 * 1024
MIN_ELEMENT_BYTES = 2


def fits_shared_memory(
    block_m: int,
    block_n: int,
    block_k: int,
    stages: int,
    shared_memory_bytes: int | None = SHARED_MEMORY_BYTES,
    element_bytes: int = MIN_ELEMENT_BYTES,
) -> bool:
    """Whether ``stages`` buffers of a ``block_m x block_k`` and a ``block_k x block_n`` tile of ``element_bytes``
    elements fit in shared memory (``shared_memory_bytes`` per block, the platform's; ``None``, not known:
    anything fits)."""
    if shared_memory_bytes is None:
        return True
    return max(stages, 1) * (block_m * block_k + block_k * block_n) * element_bytes <= shared_memory_bytes


class GemmConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    num_stages: int
    num_warps: int

    def label(self) -> str:
        return (
            f"{self.block_m}x{self.block_n}x{self.block_k}, {self.num_warps} warps, {self.num_stages} stages"
        )


# Inductor's mm template configs (torch 2.11, BaseConfigHeuristic.mm_configs): (M, N, K, stages, warps).
_FALLBACK = (
    (32, 32, 16, 1, 2),
    (32, 32, 128, 2, 4),
    (32, 64, 32, 5, 8),
    (64, 32, 32, 5, 8),
    (64, 32, 128, 5, 4),
    (64, 64, 16, 2, 4),
    (64, 64, 32, 2, 4),
    (64, 64, 64, 3, 8),
    (64, 64, 128, 5, 4),
    (64, 128, 32, 3, 4),
    (64, 128, 32, 4, 8),
    (64, 128, 64, 3, 4),
    (64, 128, 128, 4, 4),
    (128, 64, 32, 3, 4),
    (128, 64, 32, 4, 8),
    (128, 128, 32, 2, 8),
    (128, 128, 32, 3, 4),
    (128, 128, 64, 3, 4),
    (128, 128, 64, 5, 8),
    (128, 128, 128, 4, 8),
)
# ksmith's own: 128 x 256 x 64 at three stages, eight warps, the fastest TMA tile of the suite's fp16 matmul on
# an H100 and an H200, with and without the persistent edit (docs/benchmarks.md §5c).
KSMITH_CONFIGS = ((128, 256, 64, 3, 8),)


@functools.cache
def gemm_configs() -> tuple[GemmConfig, ...]:
    """The configurations ``gemm_config`` moves a matmul to: Inductor's, then ksmith's own."""
    return tuple(dict.fromkeys((*inductor_gemm_configs(), *(GemmConfig(*c) for c in KSMITH_CONFIGS))))


@functools.cache
def inductor_gemm_configs() -> tuple[GemmConfig, ...]:
    """Inductor's mm template configs from the installed torch, else torch 2.11's list."""
    try:
        from torch._inductor.template_heuristics.triton import BaseConfigHeuristic

        found = tuple(
            GemmConfig(int(c.block_m), int(c.block_n), int(c.block_k), int(c.num_stages), int(c.num_warps))
            for c in BaseConfigHeuristic().mm_configs
        )
    except Exception:  # private API: moved, renamed or failing to build -- use the known list
        found = ()
    configs = found or tuple(GemmConfig(*c) for c in _FALLBACK)
    return tuple(dict.fromkeys(configs))  # unique, in Inductor's order


def platform_configs(
    max_accumulator: int,
    shared_memory_bytes: int | None,
    num_warps: tuple[int, ...] | None,
    element_bytes: int,
) -> Iterator[GemmConfig]:
    """Inductor's configurations the platform can compile: an accumulator of at most ``max_accumulator``
    elements, tiles that fit shared memory at ``element_bytes``, a ``num_warps`` it takes (``None``: any)."""
    for config in gemm_configs():
        if config.block_m * config.block_n > max_accumulator:
            continue
        if not fits_shared_memory(
            config.block_m,
            config.block_n,
            config.block_k,
            config.num_stages,
            shared_memory_bytes,
            element_bytes,
        ):
            continue
        if num_warps is None or config.num_warps in num_warps:
            yield config


def tile_names(literals: dict[str, int]) -> dict[str, str] | None:
    """The literal keyword naming each dot axis (``{"M": "BLOCK_M", ...}``) when all three are there."""
    axes: dict[str, str] = {}
    for name in literals:
        match = DOT_AXIS.match(name)
        if match:
            axes.setdefault(match.group(1), name)
    return axes if set(axes) == {"M", "N", "K"} else None


class _Contains(cst.CSTVisitor):
    def __init__(self, targets: set[int]) -> None:
        self.targets = targets
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self.targets:
            self.found = True
        return not self.found


def gemm_config_changes(
    site: LaunchSite,
    literals: dict[str, int],
    grid_literals: dict[str, list[cst.Integer]],
    max_accumulator: int,
    shared_memory_bytes: int | None = SHARED_MEMORY_BYTES,
    num_warps: tuple[int, ...] | None = None,
    element_bytes: int = MIN_ELEMENT_BYTES,
) -> Iterator[tuple[GemmConfig, list[tuple[cst.CSTNode, cst.CSTNode]], bool]]:
    """Every Inductor config other than the current one, as node replacements for one launch site.

    Configurations the platform cannot compile are left out: tiles of ``element_bytes`` elements past
    ``shared_memory_bytes``, and a ``num_warps`` outside the platform's ``num_warps`` (MetaX takes at most 16).

    ``grid_literals`` maps each tile keyword to the ``cdiv`` literals of the grid that follow it (from the
    grid-coupling scan); the launch call is rebuilt with every keyword set, and each grid literal outside the
    call changes with its tile. Yields (config, replacements, whether the tile shrinks).
    """
    from ksmith_mutate.edits import with_keyword

    names = tile_names(literals)
    if names is None:
        return
    inside = _Contains({id(lit) for lits in grid_literals.values() for lit in lits})
    site.call.visit(inside)
    if inside.found:
        return  # a grid literal inside the launch call itself: rebuilding the call would lose its edit
    current = (literals[names["M"]], literals[names["N"]], literals[names["K"]])
    group = next((n for n in GROUP_NAMES if n in literals), None)
    for config in platform_configs(max_accumulator, shared_memory_bytes, num_warps, element_bytes):
        wanted = {
            names["M"]: config.block_m,
            names["N"]: config.block_n,
            names["K"]: config.block_k,
            "num_warps": config.num_warps,
            "num_stages": config.num_stages,
        }
        if group is not None and literals[group] != 8:
            wanted[group] = 8  # Inductor's configs use GROUP_M 8
        if all(literals.get(name) == value for name, value in wanted.items()):
            continue
        call = site.call
        for name, value in wanted.items():
            call = with_keyword(call, name, cst.Integer(str(value)))
        pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = [(site.call, call)]
        for axis, value in (("M", config.block_m), ("N", config.block_n), ("K", config.block_k)):
            pairs.extend((lit, cst.Integer(str(value))) for lit in grid_literals.get(names[axis], []))
        shrinks = config.block_m * config.block_n < current[0] * current[1]
        yield config, pairs, shrinks


def _large(config: GemmConfig) -> bool:
    fits = fits_shared_memory(config.block_m, config.block_n, config.block_k, config.num_stages)
    return config.block_m * config.block_n >= 128 * 128 and config.num_warps == 8 and fits


@functools.cache
def tma_configs() -> tuple[GemmConfig, ...]:
    """The configurations a TMA rewrite is also offered at: the large-tile, eight-warp ones, where loading by
    descriptor pays (on an H100, 128x256x64 with TMA ran at 0.85x of cuBLAS where 128x128x64 without it ran at
    0.75x and with it lost a few per cent: docs/benchmarks.md §5). A function, not a module constant: reading
    Inductor's configurations imports its template heuristics (seconds), which no command should pay at
    start-up."""
    return tuple(c for c in gemm_configs() if _large(c))

"""Kernel descriptors: where a candidate sits in a MAP-Elites grid.

Descriptors say what kind of kernel a candidate is, read from its source and launch configuration with
``ast`` (never by importing it): the block size of its main launch, ``num_warps``, ``num_stages``, whether it
uses ``tl.dot``, how many kernels its forward launches, and its memory-access pattern (cache / eviction hints,
block pointers or vectorisation hints). Code length and edit distance are deliberately absent: renaming a
variable must not look like diversity.

Each descriptor is bucketed into a small integer so that the grid stays coarse enough to fill:

===========  ==========================================================================================
axis         bucket
===========  ==========================================================================================
block        0 when computed at run time (``triton.next_power_of_2(n)``), else log2 of the elements per
             program (``BLOCK_M * BLOCK_N`` for 2-D tiles) clamped to 2^4..2^16, shifted to 1..13
warps        log2(num_warps) clamped to 0..5 (1..32 warps); Triton's default 4 when not given
stages       num_stages clamped to 1..6, shifted to 0..5; Triton's NVIDIA default 3 when not given
dot          1 when the kernel calls ``tl.dot``
launches     kernels launched per forward, clamped to 0..4
memory       bit 0: cache or eviction hints on loads/stores; bit 1: block pointers / vectorisation hints
===========  ==========================================================================================
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

AXES = ("block", "warps", "stages", "dot", "launches", "memory")

DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 3

MIN_BLOCK_LOG2 = 4
MAX_BLOCK_LOG2 = 16
MAX_WARPS_LOG2 = 5
MAX_STAGES = 6
MAX_LAUNCHES = 4

# Keyword arguments of tl.load / tl.store that steer the cache.
CACHE_HINT_KEYWORDS = frozenset({"eviction_policy", "cache_modifier", "volatile"})
# tl.* calls that describe structured or vectorised access rather than raw pointer arithmetic.
STRUCTURED_ACCESS_CALLS = frozenset(
    {"make_block_ptr", "advance", "make_tensor_descriptor", "multiple_of", "max_contiguous", "max_constancy"}
)

Cell = tuple[int, ...]


@dataclass(frozen=True)
class KernelDescriptors:
    """What kind of kernel a candidate is. ``block`` is ``None`` when the block size is computed at run time."""

    block: int | None
    num_warps: int
    num_stages: int
    uses_dot: bool
    launches: int
    cache_hints: bool
    structured_access: bool

    def cell(self) -> Cell:
        """The grid cell: one small integer per axis of :data:`AXES`."""
        if self.block is None or self.block < 1:
            block_bucket = 0
        else:
            log2 = round(math.log2(self.block))
            block_bucket = min(max(log2, MIN_BLOCK_LOG2), MAX_BLOCK_LOG2) - MIN_BLOCK_LOG2 + 1
        warps_bucket = min(max(round(math.log2(max(self.num_warps, 1))), 0), MAX_WARPS_LOG2)
        stages_bucket = min(max(self.num_stages, 1), MAX_STAGES) - 1
        memory_bucket = int(self.cache_hints) | (int(self.structured_access) << 1)
        launches_bucket = min(max(self.launches, 0), MAX_LAUNCHES)
        return (block_bucket, warps_bucket, stages_bucket, int(self.uses_dot), launches_bucket, memory_bucket)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe(source: str, launches_counted: Sequence[int] | int | None = None) -> KernelDescriptors:
    """Descriptors of a candidate source. ``launches_counted`` is the verdict's ``launches`` (kernels launched
    per forward, one count per correctness trial, when the evaluator counted them); it overrides the count of
    launch sites in the source."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        # A candidate that does not parse never reaches the archive; describe it as an empty kernel.
        tree = ast.Module(body=[], type_ignores=[])
    launches = _launch_sites(tree)
    main = _main_launch(launches)
    counted = _counted_launches(launches_counted)
    launch_count = counted if counted is not None else len(launches)
    return KernelDescriptors(
        block=main.block if main and main.sets_block else _block_from_configs(tree),
        num_warps=_pick(
            main.num_warps if main else None, _config_keyword(tree, "num_warps"), DEFAULT_NUM_WARPS
        ),
        num_stages=_pick(
            main.num_stages if main else None, _config_keyword(tree, "num_stages"), DEFAULT_NUM_STAGES
        ),
        uses_dot=_calls_tl(tree, {"dot", "dot_scaled"}),
        launches=launch_count,
        cache_hints=_has_cache_hints(tree),
        structured_access=_calls_tl(tree, STRUCTURED_ACCESS_CALLS),
    )


def _counted_launches(value: Any) -> int | None:
    def is_count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if is_count(value):
        return value
    if isinstance(value, (list, tuple)) and value and all(is_count(v) for v in value):
        return max(value)
    return None


# --------------------------------------------------------------------------------------------------------------
# Launch sites: ``kernel[grid](..., BLOCK_SIZE=1024, num_warps=4, num_stages=2)``
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Launch:
    block: int | None
    sets_block: bool  # False when the launch leaves block sizes to an autotuner
    num_warps: int | None
    num_stages: int | None


def _launch_sites(tree: ast.Module) -> list[_Launch]:
    kernels = _kernel_names(tree)
    launches = []
    for scope, call in _calls_with_scope(tree):
        if not isinstance(call.func, ast.Subscript):
            continue
        launched = call.func.value
        name = launched.id if isinstance(launched, ast.Name) else getattr(launched, "attr", None)
        # ``self.layers[0](x)`` is not a launch: with kernels defined here, only they count.
        if name is None or (kernels and name not in kernels):
            continue
        values = {kw.arg: _resolve_int(kw.value, scope, tree) for kw in call.keywords if kw.arg}
        launches.append(
            _Launch(
                block=_block_of(values, set(values)),
                sets_block=any(name.startswith("BLOCK") for name in values),
                num_warps=values.get("num_warps"),
                num_stages=values.get("num_stages"),
            )
        )
    return launches


def _kernel_names(tree: ast.Module) -> set[str]:
    """Functions decorated with ``triton.jit`` (or autotune / heuristics around it)."""
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(
            _dotted_name(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1]
            in ("jit", "autotune", "heuristics")
            for d in node.decorator_list
        )
    }


def _main_launch(launches: list[_Launch]) -> _Launch | None:
    """The launch that does most of the work: the largest known block, else the first launch."""
    if not launches:
        return None
    known = [launch for launch in launches if launch.block is not None]
    return max(known, key=lambda launch: launch.block) if known else launches[0]


def _block_of(values: Mapping[str, int | None], names: set[str]) -> int | None:
    """Elements per program: BLOCK_M * BLOCK_N for a 2-D tile, else the largest BLOCK* constexpr."""
    if "BLOCK_M" in names and "BLOCK_N" in names:
        m, n = values.get("BLOCK_M"), values.get("BLOCK_N")
        return m * n if m is not None and n is not None else None
    blocks = [name for name in names if name.startswith("BLOCK")]
    if not blocks:
        return None
    known = [values[name] for name in blocks if values.get(name) is not None]
    # One computed block (e.g. a whole row) makes the size a run-time property.
    return max(known) if len(known) == len(blocks) else None


def _calls_with_scope(tree: ast.Module) -> list[tuple[ast.AST, ast.Call]]:
    """Every call with the innermost function (or the module) it appears in."""
    found: list[tuple[ast.AST, ast.Call]] = []

    def visit(node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
            if isinstance(child, ast.Call):
                found.append((scope, child))
            visit(child, inner)

    visit(tree, tree)
    return found


def _resolve_int(node: ast.expr, scope: ast.AST, module: ast.Module) -> int | None:
    """An integer literal, or a name bound once to one in the enclosing function or the module."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        for where in (scope, module) if scope is not module else (module,):
            bound = _single_int_binding(where, node.id)
            if bound is not None:
                return bound
    return None


def _single_int_binding(scope: ast.AST, name: str) -> int | None:
    values = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            values.append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            values.append(node.value)
    if len(values) != 1:
        return None
    value = values[0]
    if isinstance(value, ast.Constant) and isinstance(value.value, int) and not isinstance(value.value, bool):
        return value.value
    return None


# --------------------------------------------------------------------------------------------------------------
# Autotuned kernels: ``@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 1024}, num_warps=4)], ...)``
# --------------------------------------------------------------------------------------------------------------


def _configs(tree: ast.Module) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _dotted_name(node.func) in ("triton.Config", "Config")
    ]


def _block_from_configs(tree: ast.Module) -> int | None:
    """The first autotune config's block, when the launch leaves block sizes to the autotuner."""
    for config in _configs(tree):
        if config.args and isinstance(config.args[0], ast.Dict):
            values: dict[str, int | None] = {}
            for key, value in zip(config.args[0].keys, config.args[0].values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    values[key.value] = _resolve_int(value, tree, tree)
            return _block_of(values, set(values))
    return None


def _config_keyword(tree: ast.Module, name: str) -> int | None:
    for config in _configs(tree):
        for kw in config.keywords:
            if kw.arg == name:
                return _resolve_int(kw.value, tree, tree)
    return None


def _pick(*values: int | None) -> int:
    return next(v for v in values if v is not None)


# --------------------------------------------------------------------------------------------------------------
# Inside the kernels
# --------------------------------------------------------------------------------------------------------------


def _dotted_name(node: ast.expr) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _calls_tl(tree: ast.Module, names: set[str] | frozenset[str]) -> bool:
    """Whether the source calls ``tl.<name>`` (or ``triton.language.<name>``) for any of ``names``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names:
            owner = _dotted_name(node.func.value)
            if owner in ("tl", "triton.language", "language"):
                return True
    return False


def _has_cache_hints(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("load", "store")
            and any(kw.arg in CACHE_HINT_KEYWORDS for kw in node.keywords)
        ):
            return True
    return False

"""The single targeted edits the mutate proposer can make, each a libcst rewrite of a candidate's source.

:func:`possible_edits` lists every edit that applies to a source; each renders its new source (and re-parses
it) when first asked, so the proposer pays only for the edits it considers. Edits keep the kernel valid
Python and Triton; whether one keeps it *correct* and makes it *faster* is the evaluator's verdict, which
the proposer learns from.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from ksmith_core.errors import CandidateError
from ksmith_mutate.attention import attention_changes
from ksmith_mutate.constexpr_size import constexpr_size_changes
from ksmith_mutate.conv_layout import conv_layout_changes
from ksmith_mutate.flip_fold import flip_fold_changes
from ksmith_mutate.gemm_configs import (
    MIN_ELEMENT_BYTES,
    SHARED_MEMORY_BYTES,
    fits_shared_memory,
    gemm_config_changes,
    tile_names,
    tma_configs,
)
from ksmith_mutate.loop_order import loop_reverse_changes
from ksmith_mutate.loop_split import mask_split_changes
from ksmith_mutate.native import NATIVE_KINDS, native_changes
from ksmith_mutate.persistent import persistent_changes, persistent_steps
from ksmith_mutate.program_order import broadcast_reuse_changes, grid_axes_changes
from ksmith_mutate.scan import vector_scan_changes
from ksmith_mutate.source_model import (
    DOT_AXIS,
    GROUP_NAMES,
    ROWS_NAMES,
    KernelDef,
    LaunchSite,
    SourceModel,
    dotted_name,
    is_block_name,
    is_tl_call,
    keyword_value,
    parse,
    with_keyword,
)
from ksmith_mutate.split_k import split_k_changes, split_k_steps
from ksmith_mutate.split_row import split_row_changes
from ksmith_mutate.template_tile import template_config_changes
from ksmith_mutate.tma import tma_change
from ksmith_mutate.whole_row import whole_row_changes

# The edit kinds, in a fixed order so that choices made with a seeded generator are reproducible.
EDIT_KINDS = (
    "gemm_config",
    "tma_loads",
    "split_k",
    "persistent",
    "conv_layout",
    "attention_structure",
    "exp2_softmax",
    "diagonal_split",
    "attention_config",
    "mask_split",
    "loop_reverse",
    "flip_fold",
    "broadcast_reuse",
    "grid_axes",
    "vector_scan",
    "whole_row",
    "split_row",
    "constexpr_size",
    "block_size",
    "dot_tile",
    "group_m",
    "num_warps",
    "num_stages",
    "grid_rows",
    "eviction_policy",
    "cache_modifier",
    "math",
    "dot_precision",
    "launch_option",
    *NATIVE_KINDS,
)

NUM_WARPS_LADDER = (1, 2, 4, 8, 16, 32)
NUM_STAGES_RANGE = (1, 5)
GROUP_M_LADDER = (1, 2, 4, 8, 16, 32)
ROWS_LADDER = (1, 2, 4, 8, 16, 32, 64)
BLOCK_1D_RANGE = (16, 8192)
BLOCK_ND_RANGE = (1, 8192)
DOT_TILE_RANGE = (16, 256)
# Elements of one program's tile beyond which registers spill badly: M*N of a dot accumulator, the product
# of the block sizes of a multi-dimensional non-dot tile.
MAX_DOT_ACCUMULATOR = 256 * 128
MAX_ND_TILE = 65536
TRITON_DEFAULT_NUM_WARPS = 4
TRITON_DEFAULT_NUM_STAGES = 3
EVICTION_POLICIES = ("evict_first", "evict_last")
LOAD_CACHE_MODIFIERS = (".cg", ".ca")
DOT_PRECISIONS = ("tf32", "ieee", "tf32x3")
# Most precise last: an edit towards the end is "safer" (fixes what a faster product broke), towards the start
# "up" in speed.
PRECISION_ORDER = ("tf32", "tf32x3", "ieee")
LOG2_E = "1.4426950408889634"
LN_2 = "0.6931471805599453"


@dataclass(frozen=True)
class Limits:
    """What the platform the kernels are tuned for allows (``ksmith_core.platform``): the ``num_warps`` a
    launch may use, the ``num_stages`` range, shared memory per block (``None``: not known, no filter),
    extra Triton launch options worth proposing (MetaX's ``pipeline`` and ``scenario``; none on NVIDIA,
    whose Triton rejects unknown options) and features (``"tma"``: tensor-descriptor loads compile).
    ``element_bytes`` is the problem's, not the platform's: the bytes of one GEMM operand element, which decide
    the tiles that fit in shared memory (the least, two, where the problem's dtype is not known)."""

    num_warps: tuple[int, ...] = NUM_WARPS_LADDER
    num_stages: tuple[int, int] = NUM_STAGES_RANGE
    shared_memory_bytes: int | None = SHARED_MEMORY_BYTES
    launch_options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    features: frozenset[str] = frozenset({"tma"})
    platform: str = "nvidia"
    warp_size: int = 32
    native_compiler: str | None = "nvcc"  # the compiler of native sources: which flags are worth proposing
    element_bytes: int = MIN_ELEMENT_BYTES

    @classmethod
    def from_platform(cls, facts: Any) -> Limits:
        return cls(
            num_warps=tuple(sorted(facts.num_warps)),
            num_stages=tuple(facts.num_stages),  # type: ignore[arg-type]
            shared_memory_bytes=facts.shared_memory_bytes,
            launch_options=dict(facts.launch_options),
            features=frozenset(facts.features),
            platform=facts.platform,
            warp_size=facts.warp_size,
            native_compiler=facts.native_compiler.name if facts.native_compiler is not None else None,
        )


def platform_limits() -> Limits:
    """The limits of the platform this process tunes for (detected, or ``KSMITH_PLATFORM``); NVIDIA's where
    none is detected (a CPU machine: Triton's interpreter, kernels meant for NVIDIA GPUs first)."""
    return _platform_limits(os.environ.get("KSMITH_PLATFORM", ""))


@functools.lru_cache(maxsize=8)
def _platform_limits(forced: str) -> Limits:
    from ksmith_core.platform import tuning_facts

    try:
        facts = tuning_facts()
    except Exception:  # noqa: BLE001 - an unknown KSMITH_PLATFORM or a broken platform plugin: the defaults
        facts = None
    return Limits.from_platform(facts) if facts is not None else Limits()


class Edit:
    """One applicable edit: its kind (what the bandit learns over), a one-line description, the new source.

    ``safer`` marks edits that move toward settings less likely to fail (smaller tiles, fewer stages, hints
    removed, exact dot precision): fix mode prefers them on a broken parent. The new source is rendered and
    re-parsed on first access, because a proposer usually needs only one or two of the edits it lists.
    """

    def __init__(
        self,
        kind: str,
        description: str,
        render: Callable[[], str],
        safer: bool = False,
        detail: dict | None = None,
    ) -> None:
        self.kind = kind
        self.description = description
        self.safer = safer
        self.detail: dict[str, Any] = detail or {}
        self._render = render
        self._source: str | None = None

    @property
    def source(self) -> str:
        if self._source is None:
            source = self._render()
            try:
                cst.parse_module(source)
                compile(source, "<candidate>", "exec")
            except (cst.ParserSyntaxError, SyntaxError) as exc:
                raise EditRenderError(f"edit {self.description!r} produced invalid Python: {exc}") from exc
            self._source = source
        return self._source

    def __repr__(self) -> str:
        return f"Edit({self.kind!r}, {self.description!r})"


class EditRenderError(CandidateError):
    """An edit that did not re-parse: a bug in an edit kind, never proposed."""


@dataclass
class _Change:
    kind: str
    description: str
    replacements: dict[int, tuple[cst.CSTNode, cst.CSTNode]]  # id(original) -> (original, replacement)
    safer: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


def _change(
    kind: str, description: str, pairs: list[tuple[cst.CSTNode, cst.CSTNode]], **kwargs: Any
) -> _Change:
    return _Change(kind, description, {id(old): (old, new) for old, new in pairs}, **kwargs)


class _ReplaceNodes(cst.CSTTransformer):
    """Swaps nodes by identity: each original node in the map becomes its replacement."""

    def __init__(self, replacements: dict[int, tuple[cst.CSTNode, cst.CSTNode]]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        pair = self.replacements.get(id(original_node))
        if pair is not None and pair[0] is original_node:
            return pair[1]
        return updated_node


def possible_edits(
    source: str, kinds: tuple[str, ...] | None = None, limits: Limits | None = None
) -> list[Edit]:
    """Every single edit that applies to ``source`` (restricted to ``kinds`` when given), in a fixed order,
    within the platform's ``limits`` (default: :func:`platform_limits`)."""
    limits = limits or platform_limits()
    model = parse(source)
    wanted = set(kinds or EDIT_KINDS)
    every = [
        Edit(change.kind, change.description, _renderer(model.module, change), change.safer, change.detail)
        for change in _all_changes(model, limits)
    ]
    edits = [e for e in every if e.kind in wanted]
    tma = [e for e in edits if e.kind == "tma_loads"]
    large = [v for e in tma for v in _tma_with_large_tiles(model, e, limits)]
    persistent_tma = [_persistent_tma(e, limits) for e in tma + large] if "persistent" in wanted else []
    attention = _attention_structure(every, limits) if "attention_structure" in wanted else []
    return edits + large + persistent_tma + attention


# What the compound attention edit applies after the base-2 softmax, each to the last one's result: the causal
# key loop split at the diagonal, then each key loop's full blocks without its bound masks (a few loops at most).
ATTENTION_FOLLOW_UPS = ("diagonal_split", "mask_split")
MAX_STEPS_OF_A_KIND = 4


def _attention_structure(every: list[Edit], limits: Limits) -> list[Edit]:
    """The attention edits that change what each key block costs, made in one step (``attention_structure``):
    one at a time they paid together, four stacked edits at 0.85-0.90x of torch.compile against 0.57x for the
    seed (docs/benchmarks.md §6e), and a search of 16 evaluations seldom stacked them all. Offered where the
    base-2 form in the exponent applies (a flash-attention kernel) and at least one follow-up does; ``every``
    is the source's single edits of all kinds."""
    first = [e for e in every if e.kind == "exp2_softmax" and e.detail.get("form") == "fma"]
    if len(first) != 1 or not any(e.kind in ATTENTION_FOLLOW_UPS for e in every):
        return []

    def render() -> str:
        current = first[0].source
        for kind in ATTENTION_FOLLOW_UPS:
            for _ in range(MAX_STEPS_OF_A_KIND):
                options = possible_edits(current, (kind,), limits)
                if not options:
                    break
                current = options[0].source
        return current

    description = (
        f"{first[0].description}, the causal key loop split at the diagonal and the key loops' full blocks "
        "without their bound masks (where each applies)"
    )
    return [Edit("attention_structure", description, render, False, {"direction": "up"})]


def _persistent_tma(tma: Edit, limits: Limits) -> Edit:
    """A TMA rewrite made persistent in the same edit: the two pay together (descriptors built once per
    program, the next tile's loads under this one's store: 0.2074 ms against 0.2238 for TMA alone on the
    suite's matmul, docs/benchmarks.md §5c), and the persistent form hides the K loop from ``tma_loads``.
    A batched GEMM takes its batch-order form, whose descriptors span every batch and are built once per
    program (the suite's bmm: 0.887x of torch.compile against 0.792x on grid axis 0 at 128 x 256 x 64, §5c);
    the axis-0 form stays the next step's choice."""

    def render() -> str:
        rewrites = [
            e
            for e in possible_edits(tma.source, ("persistent",), limits)
            if not e.description.startswith("persistent programs per SM")  # not a step of an earlier one
        ]
        batch_order = [e for e in rewrites if e.detail.get("batch_order")]
        persistent = batch_order or rewrites
        if len(persistent) != 1:  # several kernels, or one the persistent rewrite does not match
            raise EditRenderError(f"{tma.description}: {len(persistent)} persistent rewrites, not one")
        return persistent[0].source

    detail = dict(tma.detail)
    return Edit("persistent", f"{tma.description}, persistent", render, False, detail)


def _tma_with_large_tiles(model: SourceModel, tma: Edit, limits: Limits) -> list[Edit]:
    """TMA loads pay off with large tiles (and lose on small ones): the rewrite at each of Inductor's large
    configurations too, so one evaluation can judge the structure at a tile that suits it."""
    sites = [s for s in model.launches if (k := model.kernel_for(s)) is not None and k.uses_dot]
    if len(sites) != 1:
        return []
    literals = sites[0].literal_ints()
    names = tile_names(literals)
    if names is None:
        return []
    current = (literals[names["M"]], literals[names["N"]], literals[names["K"]])
    variants = []
    for config in tma_configs():
        if (config.block_m, config.block_n, config.block_k) == current:
            continue

        if config.num_warps not in limits.num_warps or not fits_shared_memory(
            config.block_m,
            config.block_n,
            config.block_k,
            config.num_stages,
            limits.shared_memory_bytes,
            limits.element_bytes,
        ):
            continue

        def render(config=config) -> str:
            (sized,) = [
                e
                for e in possible_edits(tma.source, ("gemm_config",), limits)
                if tuple(e.detail["config"]) == config
            ]
            return sized.source

        detail = {"config": list(config), "direction": "up"}
        description = f"{tma.description}, at {config.label()}"
        variants.append(Edit("tma_loads", description, render, False, detail))
    return variants


def _renderer(module: cst.Module, change: _Change) -> Callable[[], str]:
    return lambda: module.visit(_ReplaceNodes(change.replacements)).code


def _all_changes(model: SourceModel, limits: Limits) -> Iterator[_Change]:
    if "tma" in limits.features:
        for description, pairs in tma_change(model):
            yield _change("tma_loads", description, pairs, detail={"direction": "up"})
    for description, pairs, detail in split_k_changes(model):
        yield _change("split_k", description, pairs, detail=detail)
    for description, pairs, detail in split_k_steps(model):
        yield _change("split_k", description, pairs, safer=detail["direction"] == "down", detail=detail)
    for description, pairs, detail in persistent_changes(
        model, limits.shared_memory_bytes, limits.element_bytes
    ):
        yield _change("persistent", description, pairs, detail=detail)
    for description, pairs, detail in persistent_steps(model):
        yield _change("persistent", description, pairs, safer=detail["direction"] == "down", detail=detail)
    for description, pairs, detail in conv_layout_changes(model):
        yield _change("conv_layout", description, pairs, detail=detail)
    for description, pairs, detail in mask_split_changes(model):
        yield _change("mask_split", description, pairs, detail=detail)
    for description, pairs, detail in loop_reverse_changes(model):
        yield _change("loop_reverse", description, pairs, detail=detail)
    for description, pairs, detail in flip_fold_changes(model):
        yield _change("flip_fold", description, pairs, detail=detail)
    for description, pairs, detail in broadcast_reuse_changes(model):
        yield _change("broadcast_reuse", description, pairs, detail=detail)
    for description, pairs, detail in grid_axes_changes(model):
        yield _change("grid_axes", description, pairs, detail=detail)
    for description, pairs, detail in vector_scan_changes(model):
        yield _change("vector_scan", description, pairs, detail=detail)
    for description, pairs, detail in whole_row_changes(model):
        yield _change("whole_row", description, pairs, detail=detail)
    for description, pairs, detail in split_row_changes(model):
        yield _change("split_row", description, pairs, detail=detail)
    for description, pairs, detail in constexpr_size_changes(model):
        yield _change("constexpr_size", description, pairs, detail=detail)
    for kind, description, pairs, detail in attention_changes(model, limits.num_warps):
        yield _change(kind, description, pairs, safer=detail["direction"] == "down", detail=detail)
    yield from _template_config_changes(model, limits)
    for site in model.launches:
        yield from _launch_changes(model, site, limits)
    for kernel in model.kernels.values():
        yield from _hint_changes(kernel)
        yield from _math_changes(kernel)
        yield from _dot_precision_changes(kernel)
    for kind, description, pairs, safer, detail in native_changes(
        model.module, limits.warp_size, limits.native_compiler
    ):
        yield _change(kind, description, pairs, safer=safer, detail=detail)


# --------------------------------------------------------------------------------------------------------------
# Keyword arguments of calls
# --------------------------------------------------------------------------------------------------------------


def without_keyword(call: cst.Call, name: str) -> cst.Call:
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            removed = args.pop(i)
            if i == len(args) and args:
                args[-1] = args[-1].with_changes(comma=removed.comma)
            return call.with_changes(args=args)
    return call


def _bool_constant(kernel: KernelDef, node: cst.BaseExpression) -> bool | None:
    """``True``/``False`` written there, or bound to that name once in the kernel's body as a constexpr
    (``ALLOW_TF32 : tl.constexpr = False``); ``None`` for anything else."""
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    if not isinstance(node, cst.Name):
        return None
    bound = []
    for line in kernel.node.body.body:
        for statement in line.body if isinstance(line, cst.SimpleStatementLine) else ():
            if isinstance(statement, cst.AnnAssign):
                targets = [statement.target]
            elif isinstance(statement, cst.Assign):
                targets = [t.target for t in statement.targets]
            else:
                continue
            if any(isinstance(t, cst.Name) and t.value == node.value for t in targets):
                bound.append(statement.value)
    if len(bound) == 1 and isinstance(bound[0], cst.Name) and bound[0].value in ("True", "False"):
        return bound[0].value == "True"
    return None


def _string_literal(node: cst.BaseExpression | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _quoted(value: str) -> cst.SimpleString:
    return cst.SimpleString(f'"{value}"')


def _short(node: cst.CSTNode, limit: int = 32) -> str:
    text = " ".join(cst.Module(body=[]).code_for_node(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------------------------
# Launch sites: block sizes, dot tiles, GROUP_M, rows per program, num_warps, num_stages
# --------------------------------------------------------------------------------------------------------------


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _neighbours(value: int, ladder: tuple[int, ...]) -> list[int]:
    if value not in ladder:
        # Past the platform's top (num_warps 32 where MetaX takes 16): down to the top, the one fix there is.
        return [ladder[-1]] if ladder and value > ladder[-1] else []
    i = ladder.index(value)
    return [ladder[j] for j in (i - 1, i + 1) if 0 <= j < len(ladder)]


def _site_label(model: SourceModel, site: LaunchSite) -> str:
    same_kernel = [s for s in model.launches if s.kernel == site.kernel]
    if len(same_kernel) > 1:
        return f"{site.kernel} launch #{same_kernel.index(site) + 1}"
    return f"{site.kernel} launch"


class _GridScan(cst.CSTVisitor):
    """Finds what a grid expression depends on: ``meta["NAME"]`` lookups and ``cdiv(x, <int>)`` literals."""

    def __init__(self) -> None:
        self.meta_keys: set[str] = set()
        self.cdiv_literals: list[cst.Integer] = []

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            key = _string_literal(node.slice[0].slice.value)
            if key:
                self.meta_keys.add(key)

    def visit_Call(self, node: cst.Call) -> None:
        if dotted_name(node.func).rsplit(".", 1)[-1] == "cdiv" and len(node.args) == 2:
            divisor = node.args[1].value
            if isinstance(divisor, cst.Integer):
                self.cdiv_literals.append(divisor)


def _grid_coupling(site: LaunchSite, name: str, old: int) -> tuple[bool, list[cst.Integer] | None]:
    """How the launch grid depends on constexpr ``name`` (currently the literal ``old``).

    Returns (whether the grid reads ``meta[name]``, the ``cdiv`` divisor literals that must change with it).
    The literals are ``None`` when the coupling is ambiguous (several tunables share the value, or the value
    divides the grid more than once), in which case the value is not edited.
    """
    scan = _GridScan()
    for expr in site.grid_exprs:
        expr.visit(scan)
    matching = [lit for lit in scan.cdiv_literals if int(lit.evaluated_value) == old]
    if not matching:
        return name in scan.meta_keys, []
    sharing = [
        n for n, v in site.literal_ints().items() if v == old and (is_block_name(n) or n in ROWS_NAMES)
    ]
    if len(matching) == 1 and sharing == [name]:
        return True, matching
    return True, None


def _set_launch_int(
    site: LaunchSite, name: str, old: int | None, new: int, grid_literals: list[cst.Integer]
) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    # Replace the value node itself when the keyword exists: an inline grid literal inside the same call is
    # replaced too, and the two replacements must not contain each other.
    present = keyword_value(site.call, name)
    if present is not None:
        pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = [(present, cst.Integer(str(new)))]
    else:
        pairs = [(site.call, with_keyword(site.call, name, cst.Integer(str(new))))]
    pairs.extend((lit, cst.Integer(str(new))) for lit in grid_literals)
    return pairs


def _launch_changes(model: SourceModel, site: LaunchSite, limits: Limits) -> Iterator[_Change]:
    kernel = model.kernel_for(site)
    literals = site.literal_ints()
    uses_dot = kernel.uses_dot if kernel is not None else any(DOT_AXIS.match(n) for n in literals)
    label = _site_label(model, site)
    block_names = [n for n in literals if is_block_name(n)]
    if uses_dot and (kernel is None or not kernel.autotuned):
        yield from _gemm_config_changes(site, label, literals, limits)

    for name, old in literals.items():
        if is_block_name(name):
            yield from _block_changes(site, label, name, old, literals, block_names, uses_dot, limits)
        elif name in GROUP_NAMES:
            for new in _neighbours(old, GROUP_M_LADDER):
                pairs = _set_launch_int(site, name, old, new, [])
                yield _change(
                    "group_m", f"{name} {old} -> {new} in {label}", pairs, detail=_d(name, old, new)
                )
        elif name in ROWS_NAMES:
            reads_meta, grid_literals = _grid_coupling(site, name, old)
            if grid_literals is None or not (reads_meta or grid_literals):
                continue  # the grid does not follow this constexpr: changing it alone would drop rows
            for new in _neighbours(old, ROWS_LADDER):
                pairs = _set_launch_int(site, name, old, new, grid_literals)
                yield _change(
                    "grid_rows",
                    f"{name} {old} -> {new} in {label}",
                    pairs,
                    safer=new < old,
                    detail=_d(name, old, new),
                )

    if kernel is None and not literals:
        return
    # Launch options are added only where absent from a plain kernel: an autotuned one chooses its own.
    may_add = kernel is None or not kernel.autotuned
    warps = literals.get("num_warps")
    if (may_add and keyword_value(site.call, "num_warps") is None) or warps is not None:
        current = warps if warps is not None else TRITON_DEFAULT_NUM_WARPS
        shown = str(warps) if warps is not None else f"(default {current})"
        for new in _neighbours(current, limits.num_warps):
            pairs = _set_launch_int(site, "num_warps", warps, new, [])
            yield _change(
                "num_warps",
                f"num_warps {shown} -> {new} in {label}",
                pairs,
                detail=_d("num_warps", current, new),
                safer=new < current and current not in limits.num_warps,
            )
    stages = literals.get("num_stages")
    if (may_add and keyword_value(site.call, "num_stages") is None) or stages is not None:
        current = stages if stages is not None else TRITON_DEFAULT_NUM_STAGES
        shown = str(stages) if stages is not None else f"(default {current})"
        low, high = limits.num_stages
        for new in (current - 1, current + 1):
            if low <= new <= high:
                pairs = _set_launch_int(site, "num_stages", stages, new, [])
                yield _change(
                    "num_stages",
                    f"num_stages {shown} -> {new} in {label}",
                    pairs,
                    safer=new < current,
                    detail=_d("num_stages", current, new),
                )
    if may_add:
        yield from _launch_option_changes(site, label, limits)


def _launch_option_changes(site: LaunchSite, label: str, limits: Limits) -> Iterator[_Change]:
    """The platform's extra launch options (MetaX: ``pipeline``, ``scenario``) set, changed or removed at a
    plain kernel's launch; an autotuned kernel's configurations are its own."""
    for name, values in limits.launch_options.items():
        yield from _string_option_changes(site.call, name, values, "launch_option", label)


def _gemm_config_changes(
    site: LaunchSite, label: str, literals: dict[str, int], limits: Limits
) -> Iterator[_Change]:
    names = tile_names(literals)
    if names is None:
        return
    couplings = {name: _grid_coupling(site, name, literals[name]) for name in names.values()}
    if any(grid_literals is None for _, grid_literals in couplings.values()):
        return  # a tile size whose grid coupling is ambiguous is never edited
    grid_literals = {name: lits for name, (_, lits) in couplings.items() if lits}
    for config, pairs, shrinks in gemm_config_changes(
        site,
        literals,
        grid_literals,
        MAX_DOT_ACCUMULATOR,
        limits.shared_memory_bytes,
        limits.num_warps,
        limits.element_bytes,
    ):
        yield _change(
            "gemm_config",
            f"GEMM config -> {config.label()} (Inductor's mm template) in {label}",
            pairs,
            safer=shrinks,
            detail={"config": list(config), "direction": "down" if shrinks else "up"},
        )


def _template_config_changes(model: SourceModel, limits: Limits) -> Iterator[_Change]:
    """``gemm_config`` for Inductor's rendered GEMM templates, whose tile is a constant in the body and whose
    grid is a literal (``template_tile.py``)."""
    for kernel, config, pairs, shrinks in template_config_changes(
        model, MAX_DOT_ACCUMULATOR, limits.shared_memory_bytes, limits.num_warps, limits.element_bytes
    ):
        yield _change(
            "gemm_config",
            f"GEMM config -> {config.label()} (Inductor's mm template) in {kernel}: its tile constants and grid",
            pairs,
            safer=shrinks,
            detail={"config": list(config), "direction": "down" if shrinks else "up"},
        )


def _d(name: str, old: int, new: int) -> dict[str, Any]:
    return {"name": name, "old": old, "new": new, "direction": "up" if new > old else "down"}


def _block_changes(
    site: LaunchSite,
    label: str,
    name: str,
    old: int,
    literals: dict[str, int],
    block_names: list[str],
    uses_dot: bool,
    limits: Limits,
) -> Iterator[_Change]:
    if not _is_power_of_two(old):
        return
    dot_axis = DOT_AXIS.match(name) if uses_dot else None
    if dot_axis:
        kind, (low, high) = "dot_tile", DOT_TILE_RANGE
    else:
        kind, (low, high) = "block_size", (BLOCK_1D_RANGE if len(block_names) == 1 else BLOCK_ND_RANGE)
    reads_meta, grid_literals = _grid_coupling(site, name, old)
    if grid_literals is None:
        return
    for new in (old * 2, old // 2):
        if not low <= new <= high:
            continue
        tile = {n: (new if n == name else literals[n]) for n in block_names}
        if dot_axis:
            m = next((v for n, v in tile.items() if n.endswith("M")), 1)
            n_ = next((v for n, v in tile.items() if n.endswith("N")), 1)
            if m * n_ > MAX_DOT_ACCUMULATOR:
                continue
            k = next((v for n, v in tile.items() if n.endswith("K")), None)
            stages = literals.get("num_stages", TRITON_DEFAULT_NUM_STAGES)
            if (
                k is not None
                and new > old
                and not fits_shared_memory(m, n_, k, stages, limits.shared_memory_bytes, limits.element_bytes)
            ):
                continue  # grows past shared memory: would not compile
        elif len(block_names) > 1:
            product = 1
            for value in tile.values():
                product *= value
            if product > MAX_ND_TILE:
                continue
        pairs = _set_launch_int(site, name, old, new, grid_literals)
        coupled = " (and the grid)" if grid_literals else ""
        yield _change(
            kind,
            f"{name} {old} -> {new} in {label}{coupled}",
            pairs,
            safer=new < old,
            detail=_d(name, old, new),
        )
        # The block and the warps together, each thread keeping the elements it had: a row scan or reduction
        # may want a smaller block only with fewer warps to share it (KernelBench's reverse cumsum: R0_BLOCK
        # 2048 -> 1024 alone lost 3 %, with num_warps 16 -> 8 it gained 43 %; docs/benchmarks.md §6f).
        warps = literals.get("num_warps")
        if kind == "block_size" and warps is not None:
            new_warps = warps * new // old
            if new_warps in limits.num_warps:
                both = pairs + _set_launch_int(site, "num_warps", warps, new_warps, [])
                yield _change(
                    kind,
                    f"{name} {old} -> {new} with num_warps {warps} -> {new_warps} in {label}{coupled}",
                    both,
                    safer=new < old,
                    detail={**_d(name, old, new), "num_warps": [warps, new_warps]},
                )


# --------------------------------------------------------------------------------------------------------------
# Kernel bodies: load/store hints
# --------------------------------------------------------------------------------------------------------------


def _hint_changes(kernel: KernelDef) -> Iterator[_Change]:
    sites = [("tl.load", call) for call in kernel.loads] + [("tl.store", call) for call in kernel.stores]
    for what, call in sites:
        if not call.args:
            continue
        where = f"{what}({_short(call.args[0].value)}) in {kernel.name}"
        yield from _string_option_changes(
            call, "eviction_policy", EVICTION_POLICIES, "eviction_policy", where
        )
        if what == "tl.load":
            yield from _string_option_changes(
                call, "cache_modifier", LOAD_CACHE_MODIFIERS, "cache_modifier", where
            )


def _string_option_changes(
    call: cst.Call, keyword: str, options: tuple[str, ...], kind: str, where: str
) -> Iterator[_Change]:
    present = keyword_value(call, keyword)
    current = _string_literal(present)
    if present is not None and current is None:
        return  # set by an expression: not ours to change
    for option in options:
        if option != current:
            new_call = with_keyword(call, keyword, _quoted(option))
            yield _change(
                kind,
                f"{keyword} {current or 'none'} -> {option} on {where}",
                [(call, new_call)],
                detail={"name": keyword, "old": current, "new": option},
            )
    if current is not None:
        yield _change(
            kind,
            f"{keyword} {current} -> none on {where}",
            [(call, without_keyword(call, keyword))],
            safer=True,
            detail={"name": keyword, "old": current, "new": None},
        )


# --------------------------------------------------------------------------------------------------------------
# Kernel bodies: math rewrites that keep results within tolerance
# --------------------------------------------------------------------------------------------------------------

_ATOMIC_EXPRESSIONS = (
    cst.Name,
    cst.Attribute,
    cst.Call,
    cst.Subscript,
    cst.Integer,
    cst.Float,
    cst.SimpleString,
)


def _operand(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` made safe as an operand of ``*``: parenthesised unless it is atomic or already in parens."""
    if isinstance(node, _ATOMIC_EXPRESSIONS) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _tl_function(call: cst.Call, name: str) -> cst.Attribute:
    """``tl.<name>`` spelled with the same module prefix as ``call``'s function."""
    assert isinstance(call.func, cst.Attribute)
    return call.func.with_changes(attr=cst.Name(name))


def _single_positional(call: cst.Call) -> cst.BaseExpression | None:
    if len(call.args) == 1 and call.args[0].keyword is None and not call.args[0].star:
        return call.args[0].value
    return None


def _is_one(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and float(node.evaluated_value) == 1.0


class _MathScan(cst.CSTVisitor):
    def __init__(self, scalar_params: set[str]) -> None:
        self.scalar_params = scalar_params
        self.exps: list[cst.Call] = []
        self.logs: list[cst.Call] = []
        self.sqrt_divisions: list[cst.BinaryOperation] = []
        self.scalar_divisions: list[cst.BinaryOperation] = []

    def visit_Call(self, node: cst.Call) -> None:
        if _single_positional(node) is None:
            return
        if is_tl_call(node, "exp"):
            self.exps.append(node)
        elif is_tl_call(node, "log"):
            self.logs.append(node)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if not isinstance(node.operator, cst.Divide):
            return
        right = node.right
        if is_tl_call(right, "sqrt") and not right.lpar and _single_positional(right) is not None:
            self.sqrt_divisions.append(node)
        elif isinstance(right, cst.Name) and right.value in self.scalar_params and not _is_one(node.left):
            self.scalar_divisions.append(node)


def _math_changes(kernel: KernelDef) -> Iterator[_Change]:
    scalar_params = {p for p in kernel.params if p not in kernel.constexpr_params and "ptr" not in p.lower()}
    scan = _MathScan(scalar_params)
    kernel.node.body.visit(scan)
    for call in scan.exps:
        x = _single_positional(call)
        scaled = cst.BinaryOperation(left=_operand(x), operator=cst.Multiply(), right=cst.Float(LOG2_E))
        new = call.with_changes(func=_tl_function(call, "exp2"), args=[cst.Arg(value=scaled)])
        yield _change(
            "math",
            f"tl.exp({_short(x)}) -> tl.exp2(x * log2(e)) in {kernel.name}",
            [(call, new)],
            detail={"rewrite": "exp2"},
        )
    for call in scan.logs:
        x = _single_positional(call)
        log2 = call.with_changes(func=_tl_function(call, "log2"), lpar=[], rpar=[])
        new = cst.BinaryOperation(
            left=log2,
            operator=cst.Multiply(),
            right=cst.Float(LN_2),
            lpar=[cst.LeftParen()],
            rpar=[cst.RightParen()],
        )
        yield _change(
            "math",
            f"tl.log({_short(x)}) -> tl.log2(x) * ln(2) in {kernel.name}",
            [(call, new)],
            detail={"rewrite": "log2"},
        )
    for division in scan.sqrt_divisions:
        sqrt_call = division.right
        assert isinstance(sqrt_call, cst.Call)
        rsqrt = sqrt_call.with_changes(func=_tl_function(sqrt_call, "rsqrt"))
        if _is_one(division.left):
            new: cst.BaseExpression = rsqrt.with_changes(lpar=division.lpar, rpar=division.rpar)
            text = f"1 / tl.sqrt({_short(_single_positional(sqrt_call))}) -> tl.rsqrt(...) in {kernel.name}"
        else:
            new = division.with_changes(operator=cst.Multiply(), right=rsqrt)
            text = f"{_short(division.left)} / tl.sqrt(...) -> * tl.rsqrt(...) in {kernel.name}"
        yield _change("math", text, [(division, new)], detail={"rewrite": "rsqrt"})
    for division in scan.scalar_divisions:
        assert isinstance(division.right, cst.Name)
        reciprocal = cst.BinaryOperation(
            left=cst.Float("1.0"),
            operator=cst.Divide(),
            right=division.right,
            lpar=[cst.LeftParen()],
            rpar=[cst.RightParen()],
        )
        new = division.with_changes(operator=cst.Multiply(), right=reciprocal)
        name = division.right.value
        yield _change(
            "math",
            f"{_short(division.left)} / {name} -> * (1.0 / {name}) in {kernel.name}",
            [(division, new)],
            detail={"rewrite": "reciprocal"},
        )


# --------------------------------------------------------------------------------------------------------------
# Kernel bodies: tl.dot input precision
# --------------------------------------------------------------------------------------------------------------


def _dot_precision_changes(kernel: KernelDef) -> Iterator[_Change]:
    for call in kernel.dots:
        allow_tf32 = keyword_value(call, "allow_tf32")
        if allow_tf32 is not None:
            # the older spelling (Inductor's templates: allow_tf32=ALLOW_TF32, a constexpr bound in the body);
            # it is replaced, since setting both is an error
            allowed = _bool_constant(kernel, allow_tf32)
            if allowed is None:
                continue
            current, base = ("tf32" if allowed else "ieee"), without_keyword(call, "allow_tf32")
        else:
            present = keyword_value(call, "input_precision")
            current, base = _string_literal(present), call
            if present is not None and current is None:
                continue
        effective = (current or "tf32").lower()  # Triton's default for fp32 operands; it reads any case
        where = f"tl.dot in {kernel.name}"
        for option in DOT_PRECISIONS:
            if option == effective:
                continue
            new_call = with_keyword(base, "input_precision", _quoted(option))
            detail: dict[str, Any] = {"name": "input_precision", "old": current, "new": option}
            if effective in PRECISION_ORDER:
                more_precise = PRECISION_ORDER.index(option) > PRECISION_ORDER.index(effective)
                detail["direction"] = "down" if more_precise else "up"
            else:  # a precision this list does not rank (bf16x3, ...): only ieee is surely more precise
                more_precise = option == "ieee"
            yield _change(
                "dot_precision",
                f"input_precision {current or 'default'} -> {option} on {where}",
                [(call, new_call)],
                safer=more_precise,
                detail=detail,
            )

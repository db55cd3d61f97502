"""The ``mutate`` proposer: offline, structured edits of Triton source, chosen by what the run has gained.

No model is involved. Each proposal is one targeted edit of a parent's source, made with libcst (never with
regular expressions) and re-parsed before it is proposed, so every proposal is valid Python that keeps the
kernel valid Triton. Only literal values are tuned: a value computed in ``forward`` (a ``BLOCK_SIZE`` from
``triton.next_power_of_2(n_cols)`` that must cover a whole row) is left alone.

Edit kinds (the arms of the bandit):

``gemm_config``
    A tiled matmul's ``BLOCK_M`` / ``BLOCK_N`` / ``BLOCK_K``, ``num_warps`` and ``num_stages`` set at once to one
    of Inductor's mm template configurations (:mod:`ksmith_mutate.gemm_configs`). A parent that is
    compute-bound below 0.7 of its roofline tries this kind (then ``tma_loads``, ``persistent``, ``split_k``) before
    other untried kinds; while it stays that far, only tiling edits (``gemm_config``, ``tma_loads``, ``persistent``,
    ``split_k``, ``dot_tile``) compete, and those that grow the tile are four times likelier (more so the larger the tile).
    The first try of ``gemm_config``, ``tma_loads`` and ``persistent`` in a run is at their largest tile.
``tma_loads``
    A tiled matmul's pointer loads in its K loop become TMA tensor-descriptor loads, each descriptor built over
    the operand's real layout (the launch passes which stride is 1) (:mod:`ksmith_mutate.tma`).
``persistent``
    A tiled matmul launched with at most N programs per SM, each looping over the output tiles, its TMA
    descriptors built once per program; N from the tile's registers and shared memory, then stepped x2 / /2;
    also offered together with the TMA rewrite (:mod:`ksmith_mutate.persistent`). Compute-bound parents far
    below their roofline try it with the tiling edits.
``split_k``
    A tiled matmul's K loop sliced over a new grid axis, the partial tiles added atomically into the zeroed
    output, at ``SPLIT_K`` 4 or 16, then stepped x2 / /2 -- only where the epilogue is affine in the accumulator
    (:mod:`ksmith_mutate.split_k`). Compute-bound parents far below their roofline try it with the tiling edits.
``conv_layout``
    A convolution the wrapper calls in NCHW order (``F.conv2d(x, weight, bias)``) runs on channels-last copies
    made by a Triton kernel, without its bias; a recognised per-channel epilogue kernel of its output becomes
    one that reads that order, adds the bias and writes NCHW, and any other reader gets NCHW back from one more
    kernel (:mod:`ksmith_mutate.conv_layout`). Tried first, after ``dot_precision``, far below a compute
    roofline.
``exp2_softmax``, ``diagonal_split``, ``attention_config``
    Flash-attention kernels (two ``tl.dot`` per key block, an online softmax between them): the softmax in
    base 2 with the scale folded, the causal key loop split at the diagonal so only diagonal blocks are
    masked, and Inductor's flex-attention configurations (:mod:`ksmith_mutate.attention`). Compute-bound
    parents far below their roofline try them with the tiling edits.
``attention_structure``
    The base-2 softmax in the exponent, the diagonal split and the key loops' full blocks without their bound
    masks in one step (each where it applies to the step before's result); tried before the single edits.
``mask_split``
    A blocked loop from 0 (``offs = start + tl.arange(0, BLOCK)``) whose body compares ``offs < n`` runs as
    two: the full blocks with those comparisons replaced by ``True``, then the rest as written
    (:mod:`ksmith_mutate.loop_split`). Tried with the structural kinds far below a compute roofline.
``loop_reverse``
    A later pass over a row (the normalised output after the sums: Inductor's looped reductions, the suite's
    LayerNorm, RMSNorm, L2 norm, GroupNorm and online softmax) runs from its last block, so it starts with the
    blocks the first pass read most recently, still in L2. Only loops from 0 whose iterations are independent
    (nothing carried, every store to the loop's own block, nothing stored through also loaded, no atomic or
    helper call) and that load through a pointer an earlier loop loaded through (:mod:`ksmith_mutate.loop_order`). A memory-bound parent below 0.7 of its
    roofline tries this kind (after ``flip_fold``) before other untried kinds.
``flip_fold``
    A kernel that only reverses the last dimension of another kernel's output (``torch.flip`` after a scan, as
    Inductor compiles KernelBench's reverse cumsum) is removed, and its producer stores each row reversed
    instead: one pass over memory fewer. Only where the copy is exactly that flip, the producer's one store
    into the buffer writes ``r + N * x`` with ``r < N`` guarded, the producer is launched once and does not
    read the buffer, nothing else mentions it, and both buffers are allocated alike
    (:mod:`ksmith_mutate.flip_fold`). Tried first far below a memory roofline.
``broadcast_reuse``
    A pointwise kernel over rows that also reads an operand of a million elements or more shared by every row
    (LayerNorm's weight and bias over a long normalised shape) has its programs renumbered: program ``p`` takes
    row ``p % R`` of column block ``p // R``, so the rows of one block run side by side and the shared block
    comes from DRAM once, not once per row. Only where the programs are independent (no atomic, barrier, helper
    call or descriptor store, nothing stored through a pointer also loaded); the renumbering is a bijection of
    the programs of whole blocks and leaves any other program as it was (:mod:`ksmith_mutate.program_order`).
    Tried with ``flip_fold`` and ``loop_reverse`` far below a memory roofline.
``grid_axes``
    A kernel on a two-axis grid gets axes 0 and 1 swapped, in its ``tl.program_id`` / ``tl.num_programs``
    calls and in the grid of every launch (a literal pair, or a pair or ``lambda`` assigned once): the GPU runs
    the first axis fastest, so a row-wise kernel with the row on axis 0 has neighbouring programs a row apart
    in memory, and swapped they read neighbouring blocks. Only where the programs are independent (as for
    ``broadcast_reuse``) and no literal first axis exceeds the second axis's 65535
    (:mod:`ksmith_mutate.program_order`). Tried with the memory-structure kinds far below a memory roofline.
``vector_scan``
    A scalar loop that carries one running sum (a batch's lengths and their prefix sum, computed one request
    per iteration in one program, as serving engines' metadata kernels do) runs 1024 iterations at a time:
    loads and stores masked to the live lanes, the sum inside a block from ``tl.cumsum``, reads of the sum
    before its update as the exclusive prefix and after it as the inclusive one. Only a loop from 0 by 1 of
    simple statements with exactly that one carried name, updated once by ``+=``, no other name it assigns
    read after it, every store addressed by the loop variable, nothing stored also loaded, and no call but
    loads, stores, ``.to`` and elementwise ``tl`` functions (:mod:`ksmith_mutate.scan`). Tried with the
    memory-structure kinds far below a memory roofline.
``whole_row``
    Two or more passes of a kernel over one row in blocks (a norm's sums, then its output) get a first branch
    for rows that fit one block: each pass's single iteration written out in a straight line, so the passes
    share one load of the row, as Inductor's persistent reductions do; the launch's block grows to cover rows
    of up to 8192 elements. Longer rows keep the loops (:mod:`ksmith_mutate.whole_row`). Tried first, after
    ``flip_fold``, far below a memory roofline.
``split_row``
    The same passes over rows longer than a block (a softmax over a 32768-wide vocabulary), split over 4, 8
    or 16 programs a row: each holds one slice in registers and runs every pass on it; each full reduction
    between the passes is published per program and combined once the row's programs have all arrived (an
    atomic counter a row; the waits rely on programs starting in order of their number). The
    row is read from DRAM once instead of about twice. Not offered to runs evaluated on the CPU, where
    Triton's interpreter runs one program at a time (:mod:`ksmith_mutate.split_row`). Tried after
    ``whole_row`` far below a memory roofline.
``constexpr_size``
    A size parameter a loop runs to or an offset is compared with (``range(0, n, BLOCK)``, ``offs < n``)
    becomes ``tl.constexpr``, as Inductor writes its sizes into its kernels: the compiler knows trip counts and
    which masks always hold; Triton compiles once per value (:mod:`ksmith_mutate.constexpr_size`).
``block_size``
    A literal ``BLOCK_SIZE`` / ``BLOCK_*`` constexpr at a launch site of a kernel without ``tl.dot``, doubled
    or halved, staying a power of two in 16..8192 for one-dimensional blocks (1..8192 per axis, at most 65536
    elements per tile, for multi-dimensional ones). When the grid divides by the same literal
    (``grid = (triton.cdiv(n, 1024),)`` beside ``BLOCK_SIZE=1024``) the grid literal changes with it; when
    that coupling is ambiguous (two tunables share the value) the block is not edited. A grid written as
    ``lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)`` follows by itself. Where the launch sets
    ``num_warps``, the same move is also offered with the warps scaled alike (x2 or /2), so each thread keeps
    the elements it had.
``dot_tile``
    ``BLOCK_M`` / ``BLOCK_N`` / ``BLOCK_K`` of a kernel that calls ``tl.dot``: x2 or /2 in 16..256, with the
    accumulator tile ``BLOCK_M * BLOCK_N`` at most 256 x 128.
``group_m``
    ``GROUP_M`` (grouped ordering of output tiles) one step along 1, 2, 4, 8, 16, 32 -- only where the kernel
    already has it.
``num_warps``
    One step along the platform's ladder -- 1, 2, 4, 8, 16, 32 on NVIDIA, up to 16 on MetaX, where a kernel at
    32 is brought down to 16 (added at the launch when absent, from Triton's default of 4).
``num_stages``
    One step within the platform's range, 1..5 (added when absent, from Triton's default of 3).
``grid_rows``
    Grid shape: rows handled per program (``ROWS_PER_PROGRAM``, ``ROWS_PER_PROG`` or ``BLOCK_ROWS``) one step
    along 1..64 -- only where the kernel takes such a constexpr and the grid reads it (``meta[...]``) or
    divides by the same literal, so the grid keeps covering every row.
``eviction_policy``
    Add, change or remove ``eviction_policy="evict_first" | "evict_last"`` on one ``tl.load`` / ``tl.store``.
``cache_modifier``
    Add, change or remove ``cache_modifier=".cg" | ".ca"`` on one ``tl.load``.
``math``
    Rewrites that keep results within tolerance: ``tl.exp(x)`` -> ``tl.exp2(x * log2(e))``,
    ``tl.log(x)`` -> ``tl.log2(x) * ln(2)``, ``1 / tl.sqrt(x)`` -> ``tl.rsqrt(x)`` and ``a / tl.sqrt(x)`` ->
    ``a * tl.rsqrt(x)``, and ``a / s`` -> ``a * (1.0 / s)`` where ``s`` is a scalar (non-pointer, non-constexpr)
    kernel argument, so a per-element division becomes one reciprocal and a multiply.
``dot_precision``
    ``input_precision`` of one ``tl.dot`` among ``"tf32"``, ``"ieee"``, ``"tf32x3"``. On fp32 operands it
    decides whether the tensor cores run at all: ``"ieee"`` multiplies on the CUDA cores, ``"tf32x3"`` keeps
    fp32 accuracy with three TF32 products, ``"tf32"`` is one (it passes a problem's 1e-4 tolerance only
    where the output averages the rounding away, as a sum over a long row does; the evaluator judges each).
    A faster precision counts as a structural edit far below the compute roofline; a more precise one is
    the *safer* edit that fixes a kernel a faster one broke (TF32 -> tf32x3 or ieee). Skipped for problems
    that name only half-precision dtypes, where the setting cannot change the compiled kernel.
``launch_option``
    The platform's extra Triton compile options set, changed or removed at a plain kernel's launch: MetaX's
    ``pipeline`` and ``scenario``; none on NVIDIA, whose Triton rejects unknown options.
``native_block``, ``native_grid``, ``native_unroll``, ``native_fast_math``
    Native candidates (CUDA C++ built with ``load_inline``, the ``cuda`` backend): threads per block, a
    grid-stride launch's grid cap, ``#pragma unroll`` and ``--use_fast_math`` (:mod:`ksmith_mutate.native`).
    A native parent none of them applies to is dropped as ``no_edit`` with what mutate could not read.

Platform limits (:class:`ksmith_mutate.edits.Limits`, from :mod:`ksmith_core.platform`; NVIDIA's where no
platform is detected): the ``num_warps`` ladder, the ``num_stages`` range, shared memory (tile growth and GEMM
configurations must fit it), TMA (``tma_loads`` only where the platform has it) and the extra options.

Not done, on purpose: grouped tile ordering is tuned only where a kernel already has ``GROUP_M`` (adding it is
a rewrite of the kernel's index arithmetic, not a single safe edit), and the accumulator's dtype is never
lowered (fp16 accumulation over a long K does not hold a 1e-2 tolerance).

Choosing an edit: the proposer lists every edit that applies to the parent and drops those whose result was
already evaluated in the run (same :func:`ksmith_core.model.source_id`, or the same near-duplicate
:func:`ksmith_core.novelty.fingerprint`, which the engine would skip). A UCB1 bandit over the kinds that
remain picks a kind (kinds never tried come first); a seeded ``run.rng`` picks the edit within it. The
bandit's reward for each evaluated child of this proposer is its relative speedup gain over its parent,
mapped to [0, 1]: +25 % or better -> 1, no change -> 0.5, -25 % or worse -> 0, and a child that broke a
working parent -> 0. It is recomputed from ``run.population`` on every call, so it survives ``--resume``
with no state of its own; its statistics are left in ``run.state("mutate")["bandit"]`` for reports.
Several proposals in one step spread over kinds: each pick counts as a pending pull. Within a kind, an edit
that keeps going the way the parent's own edit went, when that edit gained, is four times likelier (after
``BLOCK_M`` 32 -> 64 paid, tile edits that grow are favoured; going straight back is never proposed, as
that source was already evaluated).

Dropped generations: a plan (a parent to edit) that yields no edit is noted with ``run.note_dropped``:
``no_edit`` when the parent offers nothing to tune (no tunable literal, or not Python), ``all_edits_tried``
when every edit of it was already evaluated in the run, and ``edit_did_not_parse`` for an edit whose result
did not re-parse (another edit is tried in its place).

Each proposal's ``meta`` holds ``mode`` (``"improve"`` or ``"fix"``), ``detail`` (the tunable, its old and
new value, the direction) and, for a fix made from an ancestor, ``instead_of`` (the broken candidate's id).

Fix mode (``selection.mode == "fix"``, the parent is broken): the proposer alternates between (1) one edit
of the parent's best working ancestor (the accepted candidate with the highest speedup on its first-parent
chain), a fresh branch from the last kernel that worked, and (2) a *safer* edit of the broken parent itself:
halving a block, a dot tile or rows per program, one stage fewer, removing a load/store hint, or ``"ieee"``
dot precision -- the settings that most often turn an out-of-resources or precision failure into a working
kernel (any edit, once no safer one is left). With no working ancestor only (2) is tried; if the broken
parent is not Python at all, only (1).
"""

from __future__ import annotations

import ast
import functools
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import libcst as cst

from ksmith_core import hookimpl
from ksmith_core.capabilities import Proposer
from ksmith_core.model import Proposal, Scored, Selection, source_id
from ksmith_core.novelty import fingerprint
from ksmith_mutate.bandit import EditBandit, reward_for
from ksmith_mutate.edits import EDIT_KINDS, Edit, EditRenderError, Limits, platform_limits, possible_edits
from ksmith_mutate.native import why_no_native_edit
from ksmith_mutate.source_model import MutateSourceError, launch_config

NAME = "mutate"

log = logging.getLogger(__name__)

# Within the chosen kind, an edit that keeps going the way the parent's own (gainful) edit went -- BLOCK_SIZE
# up again after BLOCK_SIZE up paid -- is this many times likelier than any other edit of the kind.
MOMENTUM_WEIGHT = 4.0
# A parent far below its compute roofline (a tiled matmul on small tiles) gains from more reuse per program:
# tile edits that grow the tile are this many times likelier. Below this roofline fraction it applies.
GROW_TILE_WEIGHT = 4.0
GROW_TILE_BELOW = 0.7
TILE_KINDS = ("gemm_config", "attention_config", "dot_tile")
# The kinds whose edits carry a GEMM configuration (block M, N, K, stages, warps): a larger tile pays far below
# the roofline on every GEMM measured (docs/benchmarks.md §5, §5c, §5c2).
GEMM_TILE_KINDS = ("gemm_config", "tma_loads", "persistent")
# Far below the compute roofline, the kinds that change how the work is done, untried ones first in this order.
# The dot's precision leads: an fp32 GEMM multiplying in "ieee" runs on the CUDA cores, and tf32x3 at the same
# tile was 4.6x faster on KernelBench's fp32 GEMMs (docs/benchmarks.md §6c); the tile comes next.
# Attention kernels: the base-2 softmax and the diagonal split change what each key block costs; the
# flex-attention configuration is their tile (docs/benchmarks.md §6e).
STRUCTURAL_FIRST = (
    "dot_precision",
    "conv_layout",
    "gemm_config",
    "attention_structure",
    "exp2_softmax",
    "diagonal_split",
    "mask_split",
    "attention_config",
    "tma_loads",
    "persistent",
    "split_k",
)

# Far below the memory roofline, the kinds that change how many passes over memory there are and what they read,
# untried ones first: a flip folded into its producer's store drops a whole pass; a later pass over a long row
# from its last block re-reads what L2 still holds; the rows of one block of a shared operand side by side read
# it once (docs/benchmarks.md §6f); a running sum a block at a time instead of one element per memory latency
# (§7b).
MEMORY_STRUCTURAL_FIRST = (
    "flip_fold",
    "whole_row",
    "split_row",
    "loop_reverse",
    "broadcast_reuse",
    "grid_axes",
    "vector_scan",
)

# Kinds whose kernels make programs of one launch wait for each other: Triton's interpreter runs programs one at
# a time, so on the CPU such a wait never ends.
WAITING_KINDS = frozenset({"split_row"})

__all__ = ["MUTATE", "NAME", "best_working_ancestor", "ksmith_register_proposers", "launch_config", "propose"]


@hookimpl
def ksmith_register_proposers(register):
    register(MUTATE)


@dataclass(frozen=True)
class _Plan:
    """Where one proposal comes from: which parent, and whether to prefer safer edits."""

    parent: Scored
    safer: bool
    mode: str
    instead_of: str | None = None
    momentum: tuple[str, str] | None = None  # (kind, direction) of the gainful edit that made the parent


def propose(run: Any, selection: Selection) -> list[Proposal]:
    """Up to ``run.config.proposals_per_step`` single-edit proposals from the selection's parents."""
    bandit = EditBandit.from_population(run.population, run.by_id, NAME)
    run.state(NAME)["bandit"] = bandit.summary()
    plans = _plans(run, selection)
    if not plans:
        return []
    skipped_kinds = kinds_without_effect(run.problem.source)
    if run.config.eval.device == "cpu":
        skipped_kinds |= WAITING_KINDS
    limits = problem_limits(run.problem.source)
    taken = _evaluated_keys(run)
    pending: Counter[str] = Counter()
    edits_by_parent: dict[str, list[Edit]] = {}
    listed: dict[str, int] = {}  # how many edits each parent offered before any was taken
    proposals: list[Proposal] = []
    exhausted: set[int] = set()
    turn = 0
    while len(proposals) < run.config.proposals_per_step and len(exhausted) < len(plans):
        index = turn % len(plans)
        turn += 1
        if index in exhausted:
            continue
        plan = plans[index]
        edit = _pick_edit(
            plan,
            edits_by_parent,
            taken,
            bandit,
            pending,
            run.rng,
            skipped_kinds,
            run.note_dropped,
            listed,
            limits,
        )
        if edit is None:
            exhausted.add(index)
            continue
        taken.update(_keys(edit.source))
        pending[edit.kind] += 1
        meta: dict[str, Any] = {"mode": plan.mode, **({"detail": edit.detail} if edit.detail else {})}
        if plan.instead_of:
            meta["instead_of"] = plan.instead_of
        proposals.append(
            Proposal(
                source=edit.source,
                parent_ids=(plan.parent.candidate.id,),
                edit=edit.description,
                edit_kind=edit.kind,
                proposer=NAME,
                meta=meta,
            )
        )
    return proposals


def _keys(source: str) -> set[str]:
    """What makes a source already evaluated: its id, or its near-duplicate fingerprint (the engine skips both)."""
    return {source_id(source), "fp:" + fingerprint(source)}


def _evaluated_keys(run: Any) -> set[str]:
    # Fingerprints cost a parse each: remember them per candidate id (a cache, rebuilt freely after a resume).
    cache: dict[str, str] = run.state(NAME).setdefault("fingerprints", {})
    keys = set(run.by_id)
    for candidate_id, scored in run.by_id.items():
        if candidate_id not in cache:
            cache[candidate_id] = "fp:" + fingerprint(scored.candidate.source)
        keys.add(cache[candidate_id])
    return keys


def _plans(run: Any, selection: Selection) -> list[_Plan]:
    if selection.mode != "fix":
        return [
            _Plan(parent, safer=False, mode="improve", momentum=_momentum(run.by_id, parent))
            for parent in selection.parents
        ]
    plans: list[_Plan] = []
    for broken in selection.parents:
        ancestor = best_working_ancestor(run.by_id, broken)
        if ancestor is not None:
            momentum = _momentum(run.by_id, ancestor)
            plans.append(_Plan(ancestor, False, "fix", instead_of=broken.candidate.id, momentum=momentum))
        plans.append(_Plan(broken, safer=True, mode="fix"))
    return plans


HALF_DTYPES = {"float16", "half", "bfloat16"}
FULL_DTYPES = {"float32", "float", "float64", "double"}
DOUBLE_DTYPES = {"float64", "double"}


@functools.lru_cache(maxsize=8)  # asked twice per proposal step (kinds_without_effect, problem_limits)
def _named_dtypes(problem_source: str) -> frozenset[str]:
    """The dtypes the problem names: ``torch.float16`` / ``torch.float64`` / ..., and ``x.half()`` /
    ``x.double()`` / ... (a problem that names none makes fp32 tensors, torch's default)."""
    try:
        tree = ast.parse(problem_source)
    except SyntaxError:
        return frozenset()
    named: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            named.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
            named.add(node.func.attr)  # x.half(), x.float()
    return frozenset(named & (HALF_DTYPES | FULL_DTYPES))


def _half_precision_only(problem_source: str) -> bool:
    """Whether the problem's tensors are all half precision (it names a half dtype and no full one)."""
    named = _named_dtypes(problem_source)
    return bool(named & HALF_DTYPES) and not named & FULL_DTYPES


def kinds_without_effect(problem_source: str) -> frozenset[str]:
    """Edit kinds that cannot change anything for this problem.

    ``input_precision`` only matters for fp32 operands of ``tl.dot``: a problem whose inputs are all half
    precision would spend evaluations on sources that compile to the same kernel.
    """
    return frozenset({"dot_precision"}) if _half_precision_only(problem_source) else frozenset()


def problem_limits(problem_source: str) -> Limits:
    """The platform's limits with the problem's operand element size: fp32 tiles take twice the shared memory
    of half ones, so a tile that fits at two bytes may not compile at four (and would cost an evaluation);
    a problem that names fp64 is sized at its eight."""
    if _named_dtypes(problem_source) & DOUBLE_DTYPES:
        element_bytes = 8
    else:
        element_bytes = 2 if _half_precision_only(problem_source) else 4
    return replace(platform_limits(), element_bytes=element_bytes)


def _momentum(by_id: dict[str, Scored], scored: Scored) -> tuple[str, str] | None:
    """The (kind, direction) of the edit that made ``scored``, if that edit gained speed."""
    candidate = scored.candidate
    if candidate.proposer != NAME or not candidate.parent_ids or candidate.parent_ids[0] not in by_id:
        return None
    reward = reward_for(scored.verdict, by_id[candidate.parent_ids[0]].verdict)
    detail = candidate.meta.get("detail") or {}
    if reward is None or reward <= 0.5 or "direction" not in detail:
        return None
    return (candidate.edit_kind, str(detail["direction"]))


def _continues(momentum: tuple[str, str] | None, edit: Edit) -> bool:
    return momentum is not None and momentum == (edit.kind, str(edit.detail.get("direction")))


def _grow_weight(edit: Edit) -> float:
    """Far from the roofline: tile edits that grow the tile, the more the tile grows the likelier. A GEMM
    configuration's K block counts up to 64 (a 128-byte fp16 row, what the TMA's swizzle and the tensor cores'
    loads want): 128x128x32 weighs half of 128x128x64. Not an attention configuration: there the larger tiles
    ran slower (128x128 at 0.45-0.52x of torch.compile from the suite's seeds, 128x64 at 0.70x; the queries'
    block and its scores live in registers), so Inductor's configurations are drawn alike."""
    if edit.kind == "attention_config":
        return 1.0
    if edit.kind not in TILE_KINDS + STRUCTURAL_FIRST or edit.detail.get("direction") != "up":
        return 1.0
    config = edit.detail.get("config")
    area = config[0] * config[1] / (128 * 128) if config else 1.0
    if config and edit.kind in GEMM_TILE_KINDS and len(config) > 2:
        area *= min(config[2], 64) / 64
    return GROW_TILE_WEIGHT * max(area, 0.25)


def _faster_dot(pool: list[Edit]) -> bool:
    """Whether a precision edit would make a product faster: a kernel already on TF32 has only slower ones."""
    return any(e.kind == "dot_precision" and e.detail.get("direction") == "up" for e in pool)


def _wants_bigger_tiles(verdict: Any) -> bool:
    """Compute-bound and far from the roofline: the tile does too little work per byte it loads."""
    return _far_below(verdict, "compute")


def _far_below(verdict: Any, bound: str) -> bool:
    """Bound by ``bound`` (``"compute"`` or ``"memory"``) and below ``GROW_TILE_BELOW`` of that roofline."""
    fraction = getattr(verdict, "roofline_fraction", None)
    return (
        getattr(verdict, "roofline_bound", None) == bound
        and fraction is not None
        and fraction < GROW_TILE_BELOW
    )


def best_working_ancestor(by_id: dict[str, Scored], scored: Scored) -> Scored | None:
    """The accepted candidate with the highest score on ``scored``'s first-parent chain (``None`` if none)."""
    best: Scored | None = None
    seen: set[str] = {scored.candidate.id}
    current = scored
    while current.candidate.parent_ids:
        parent_id = current.candidate.parent_ids[0]
        if parent_id in seen or parent_id not in by_id:
            break
        seen.add(parent_id)
        current = by_id[parent_id]
        if current.verdict.accepted and (best is None or current.verdict.score > best.verdict.score):
            best = current
    return best


def _pick_edit(
    plan: _Plan,
    edits_by_parent: dict[str, list[Edit]],
    taken: set[str],
    bandit: EditBandit,
    pending: Counter[str],
    rng: Any,
    skipped_kinds: frozenset[str] = frozenset(),
    note_dropped: Callable[[str, str], None] | None = None,
    listed: dict[str, int] | None = None,
    limits: Limits | None = None,
) -> Edit | None:
    """Bandit-chosen kind, random edit within it (a direction of the kind that has only lost so far less
    likely); edits whose result was already evaluated are dropped.

    When no edit is left, ``note_dropped(reason, detail)`` (``run.note_dropped``) says why: ``no_edit`` or
    ``all_edits_tried`` (``listed`` remembers how many edits each parent offered at first).
    """
    note = note_dropped or (lambda reason, detail: None)
    listed = {} if listed is None else listed
    parent_id = plan.parent.candidate.id
    if parent_id not in edits_by_parent:
        try:
            kinds = tuple(kind for kind in EDIT_KINDS if kind not in skipped_kinds)
            edits_by_parent[parent_id] = possible_edits(plan.parent.candidate.source, kinds, limits)
        except MutateSourceError:
            edits_by_parent[parent_id] = []  # not Python: nothing to edit structurally
        except Exception as exc:  # noqa: BLE001 -- one odd candidate must not stop a run
            log.warning("mutate: could not list edits of %s: %r", parent_id, exc)
            edits_by_parent[parent_id] = []
        listed[parent_id] = len(edits_by_parent[parent_id])
    remaining = edits_by_parent[parent_id]
    grow = _wants_bigger_tiles(plan.parent.verdict)
    far_from_memory_roofline = _far_below(plan.parent.verdict, "memory")
    while remaining:
        pool = [e for e in remaining if e.safer] if plan.safer else remaining
        pool = pool or remaining
        kinds = [kind for kind in EDIT_KINDS if any(e.kind == kind for e in pool)]
        # Far below the compute roofline, the kernel's structure is what is wrong: a faster dot precision
        # (where there is one), the config jump, the TMA loads and split-K are tried before any other kind the
        # bandit has not tried yet (after that, measured gains decide as for every kind).
        untried = [
            k
            for k in (STRUCTURAL_FIRST if grow else MEMORY_STRUCTURAL_FIRST)
            if k in kinds
            and bandit.pulls[k] + pending[k] == 0
            and (k != "dot_precision" or _faster_dot(pool))
        ]
        if grow:
            # Hints and group order cannot move a kernel at a third of its roofline: while the parent is that
            # far, only the edits that change the tiling, the loads or the dot's precision compete.
            kinds = [k for k in kinds if k in TILE_KINDS + STRUCTURAL_FIRST] or kinds
        first = grow or far_from_memory_roofline
        opening = first and bool(untried)
        kind = untried[0] if opening else bandit.choose(kinds, rng, pending)
        of_kind = [e for e in pool if e.kind == kind]
        weights = [
            (MOMENTUM_WEIGHT if _continues(plan.momentum, e) else 1.0)
            * (_grow_weight(e) if grow else 1.0)
            * bandit.direction_weight(e.kind, e.detail.get("direction"))
            for e in of_kind
        ]
        if opening and grow and kind in GEMM_TILE_KINDS:
            # A GEMM kind's first try is its largest tile: a small one that loses would leave the kind with a
            # poor record, and the search would rarely come back to it (docs/benchmarks.md §5c2, run 3).
            heaviest = max(weights)
            of_kind = [e for e, w in zip(of_kind, weights) if w == heaviest]
            weights = [1.0] * len(of_kind)
        edit = rng.choices(of_kind, weights=weights, k=1)[0]
        remaining.remove(edit)
        try:
            fresh = not (_keys(edit.source) & taken)
        except EditRenderError:
            log.warning("mutate: skipped an edit that did not re-parse: %s", edit.description)
            note("edit_did_not_parse", f"{edit.description} on {parent_id}")
            continue
        if fresh:
            return edit
    if listed.get(parent_id, 1):  # a list handed in ready-made counts as offered
        note("all_edits_tried", f"every edit of {parent_id} was already evaluated or proposed")
    else:
        native = _native_reason(plan.parent.candidate.source)
        note(
            "no_edit",
            f"{parent_id}: {native}"
            if native
            else f"{parent_id} offers nothing to tune (no tunable literal, or not Python)",
        )
    return None


def _native_reason(source: str) -> str | None:
    """For a native (CUDA C++) parent with nothing to edit: what mutate looked for and could not read."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    limits = platform_limits()
    return why_no_native_edit(module, limits.warp_size, limits.native_compiler)


MUTATE = Proposer(
    NAME,
    propose,
    "Offline structured edits of Triton and CUDA C++ sources (libcst), chosen by a bandit over measured gains",
    default=True,
)

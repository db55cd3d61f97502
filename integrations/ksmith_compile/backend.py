"""The ``kernelsmith`` torch.compile backend: library kernels swapped into Dynamo's graph, the rest to Inductor.

``torch.compile(model, backend="kernelsmith", options={...})``. Options (environment in brackets):

- ``library``: a library directory or a list of them [``KSMITH_LIBRARY``, ``os.pathsep``-separated; default
  ``./ksmith-library``];
- ``log_swaps``: log every swap and every match left alone, with why, on stderr [``KSMITH_LOG_SWAPS=1``];
- ``min_speedup``: leave an entry out when its verdict, measured on a GPU, is below this speedup over
  torch.compile on its own problem [``KSMITH_MIN_SPEEDUP``; default 1.0];
- ``split_fusions``: also swap a pointwise/reduction entry whose match Inductor would have fused with a
  neighbouring pointwise op (a residual add before a norm) [``KSMITH_SPLIT_FUSIONS=1``; default off: the evolved
  kernel was timed against that region alone, while in the model Inductor saves a launch and a pass over memory
  by fusing across the boundary, so such a swap can make the model slower even when the kernel is faster];
- ``pdl``: where CUDA graphs replay the model (``mode="reduce-overhead"``) on a GPU of compute capability 9.0 or
  later, launch the swapped kernels with programmatic dependent launch (each waits at its start for the kernel
  before it, then lets the next one launch; :mod:`ksmith_compile.pdl`) as opaque custom ops, and Inductor's own
  kernels with its ``triton.enable_pdl`` [``KSMITH_PDL=1``; default off; elsewhere ignored];
- anything else is passed to Inductor as a config patch, as ``backend="inductor"`` takes it.

Each entry's pattern (its reference ``Model.forward`` captured with Dynamo) is matched against the graph
(``SubgraphMatcher``: same targets, same literal arguments, internal nodes used nowhere else). A match is
replaced by the entry's operator (each output of a pattern with several by its item of the operator's list)
only when the graph's example values of every pattern input have the exact
shape, strides, dtype and device the kernel was verified on and its output needs no gradient; otherwise the
subgraph stays as it is. The graph then goes to ``compile_fx``, so with no swap the result is Inductor's.
"""

from __future__ import annotations

import logging
import operator
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .library import Entry, Library, load_library, pdl_supported

log = logging.getLogger("ksmith_compile")
OWN_OPTIONS = ("library", "log_swaps", "min_speedup", "split_fusions", "pdl")


@dataclass(frozen=True)
class Region:
    """One entry's outcome in one compiled graph: a match (swapped or not, why) or no match at all."""

    region: str  # "<entry>@<node>" (a match), "<entry>" (no match) or "<kind>:<ops>@<node>" (no entry)
    entry: str  # "" for a region of the model no entry matches
    swapped: bool
    reason: str
    graph: int = 0  # which compiled graph (Dynamo may make several: graph breaks, recompiles)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Recorder:
    """Collects the regions of every graph compiled while it is active (``ksmith compile-report``, tests)."""

    active: list[Recorder] = []

    def __init__(self) -> None:
        self.regions: list[Region] = []
        self.graphs = 0
        self.library: Library | None = None

    def __enter__(self) -> Recorder:
        Recorder.active.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        Recorder.active.remove(self)


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _log_swaps_handler() -> None:
    if not any(getattr(h, "_ksmith", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._ksmith = True  # type: ignore[attr-defined]
        log.addHandler(handler)
    log.setLevel(logging.INFO)


def kernelsmith_backend(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    *,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """Swap library kernels into ``gm`` where their guards hold, then compile it with Inductor."""
    from torch._inductor.compile_fx import compile_fx

    options = dict(options or {})
    explicit = "library" in options or bool(os.environ.get("KSMITH_LIBRARY"))
    pdl = _pdl_wanted(options, mode)
    library = load_library(options.get("library"), explicit=explicit, pdl=pdl)
    log_swaps = _truthy(options.get("log_swaps", os.environ.get("KSMITH_LOG_SWAPS", "")))
    if log_swaps:
        _log_swaps_handler()
    graph_index = max((r.graphs for r in Recorder.active), default=0)
    min_speedup = float(options.get("min_speedup", os.environ.get("KSMITH_MIN_SPEEDUP", 1.0)))
    split = _truthy(options.get("split_fusions", os.environ.get("KSMITH_SPLIT_FUSIONS", "")))
    regions = swap_regions(
        gm, library, graph_index, min_speedup, split_fusions=split, host_bound=not _cuda_graphs(mode)
    )
    for recorder in Recorder.active:
        recorder.graphs += 1
        recorder.library = library
        recorder.regions.extend(regions)
    level = logging.INFO if log_swaps else logging.DEBUG
    for region in regions:
        if region.swapped:
            log.log(level, "kernelsmith: %s %s", region.region, region.reason)
        elif region.entry and "@" in region.region:  # a match left alone; not every unmatched region
            log.log(level, "kernelsmith: kept %s: %s", region.region, region.reason)
    patches = {k: v for k, v in options.items() if k not in OWN_OPTIONS}
    if mode and mode != "default":
        from torch._inductor import list_mode_options

        patches = {**list_mode_options(mode), **patches}
    if pdl and hasattr(torch._inductor.config.triton, "enable_pdl"):
        patches.setdefault("triton.enable_pdl", True)  # Inductor's kernels around the swapped ones take part
    return compile_fx(gm, example_inputs, config_patches=patches or None)


def _cuda_graphs(mode: str | None) -> bool:
    """Whether Inductor replays the compiled graph as CUDA graphs in this mode (``reduce-overhead``...)."""
    if not mode or mode == "default":
        return False
    from torch._inductor import list_mode_options

    return bool(list_mode_options(mode).get("triton.cudagraphs"))


def _pdl_wanted(options: dict[str, Any], mode: str | None) -> bool:
    """The ``pdl`` option, where it applies: CUDA graphs replay the step (a mode with ``triton.cudagraphs``) on a
    GPU of compute capability 9.0 or later. Without graphs a decode step is bound by the host, where PDL gains
    nothing and the opaque custom ops it needs cost a Python call each."""
    if not _truthy(options.get("pdl", os.environ.get("KSMITH_PDL", ""))):
        return False
    return _cuda_graphs(mode) and pdl_supported()


def swap_regions(
    gm: torch.fx.GraphModule,
    library: Library,
    graph_index: int = 0,
    min_speedup: float = 1.0,
    *,
    split_fusions: bool = False,
    host_bound: bool = False,
) -> list[Region]:
    """Replace, in place, every match of a library pattern whose guards hold; one Region per outcome.

    An entry measured on a GPU as slower than ``min_speedup`` times torch.compile on its own problem is not
    swapped; entries with no such measurement (the CPU interpreter's) are, being verified correct. Unless
    ``split_fusions``, neither is a match of a pointwise/reduction entry that cuts Inductor's fusion with a
    pointwise neighbour (:func:`_splits_a_fusion`). Where ``host_bound`` (no CUDA graphs), a GPU entry that could
    not be inlined is swapped only if it saves more than its Python call costs (:func:`_host_cost`).
    """
    from torch.fx.passes.utils.matcher_utils import SubgraphMatcher

    from .harvest import find_regions

    model_regions = find_regions(gm)  # what harvest would write, named before any node is replaced
    regions: list[Region] = []
    replaced: dict[torch.fx.Node, torch.fx.Node] = {}  # a replaced region's output -> the operator's node
    deferred: list[tuple[Entry, Any]] = []
    covered: set[str] = set()  # outputs of every match decided, swapped or not (for the report)
    for entry in library.entries:
        matcher = SubgraphMatcher(
            entry.pattern.graph,
            match_output=False,
            match_placeholder=False,
            remove_overlapping_matches=False,  # overlaps are settled below, after the guards
            ignore_literals=False,
        )
        matches = matcher.match(gm.graph)
        if not matches:
            regions.append(Region(entry.name, entry.name, False, "no match in this graph", graph_index))
        for match in _distinct(entry, matches, replaced):
            why_not = _why_not(entry, match, replaced)
            if why_not is None and not split_fusions and _splits_a_fusion(entry, match, replaced):
                deferred.append((entry, match))  # a neighbour may yet be swapped into a kernel of ours
                continue
            regions.append(_decide(gm, entry, match, replaced, why_not, graph_index, min_speedup, host_bound))
            covered |= {n.name for n in match.returning_nodes}
    for entry, match in deferred:  # after every other swap: is the fusion still there to split?
        if any(getattr(match.nodes_map[n], "_erased", False) for n in _pattern_inner(entry)):
            continue  # another entry's swap took these nodes
        why_not = _why_not(entry, match, replaced) or _splits_a_fusion(entry, match, replaced)
        regions.append(_decide(gm, entry, match, replaced, why_not, graph_index, min_speedup, host_bound))
        covered |= {n.name for n in match.returning_nodes}
    for kind, nodes in model_regions:
        if nodes[-1].name not in covered:
            ops = "+".join(
                dict.fromkeys(n.target if n.op == "call_method" else n.target.__name__ for n in nodes)
            )
            regions.append(
                Region(f"{kind}:{ops}@{nodes[-1].name}", "", False, "no library entry", graph_index)
            )
    if any(r.swapped for r in regions):
        gm.graph.lint()
        gm.recompile()
    return regions


def _distinct(
    entry: Entry, matches: list[Any], replaced: dict[torch.fx.Node, torch.fx.Node]
) -> Iterator[Any]:
    """The matches to decide on, each set of graph nodes once: those whose guards hold first, so that a
    symmetric pattern (projections of one input) whose first ordering fails a guard is still swapped in the
    ordering that passes; a match whose nodes an earlier swap took is skipped."""
    decided: set[frozenset[torch.fx.Node]] = set()
    for match in sorted(matches, key=lambda m: _why_not(entry, m, replaced) is not None):
        inner = frozenset(match.nodes_map[n] for n in _pattern_inner(entry) if n in match.nodes_map)
        if inner in decided or any(getattr(n, "_erased", False) for n in inner):
            continue
        decided.add(inner)
        yield match


def _decide(
    gm: torch.fx.GraphModule,
    entry: Entry,
    match: Any,
    replaced: dict[torch.fx.Node, torch.fx.Node],
    why_not: str | None,
    graph_index: int,
    min_speedup: float,
    host_bound: bool = False,
) -> Region:
    """Swap the match unless there is a reason not to (``why_not``, the entry's measured speedup, or the host
    time of an opaque call where nothing hides it)."""
    region = f"{entry.name}@{match.returning_nodes[0].name}" if match.returning_nodes else entry.name
    if why_not is None and entry.speedup_vs_compile is not None and entry.speedup_vs_compile < min_speedup:
        why_not = f"{entry.speedup_vs_compile:.3g}x vs torch.compile on its problem (< {min_speedup:g})"
    if why_not is None and host_bound:
        why_not = _host_cost(entry)
    if why_not is not None:
        return Region(region, entry.name, False, why_not, graph_index)
    _replace(gm, entry, match, replaced)
    how = f" ({entry.inline_reason})" if entry.device_type == "cuda" and entry.inline_reason else ""
    return Region(region, entry.name, True, f"swapped for {entry.op.name()}{how}", graph_index)


# What an opaque custom op costs the host per call in a compiled model without CUDA graphs: 17 of them took a
# decode step from 1.98 to 3.73 ms on an H100 (docs/benchmarks.md §11), about 0.1 ms each.
OPAQUE_CALL_MS = 0.1


def _host_cost(entry: Entry) -> str | None:
    """Why a GPU entry swapped as an opaque custom op (not inlined into Inductor's code) would make a model that
    runs without CUDA graphs slower: its Python call costs more than the kernel saves (None: swap it). CPU
    entries are never inlined and are swapped as they are."""
    if entry.device_type != "cuda" or not entry.inline_reason:
        return None
    if entry.saving_ms is not None and entry.saving_ms > OPAQUE_CALL_MS:
        return None
    saved = f"{entry.saving_ms * 1e3:.1f} us" if entry.saving_ms is not None else "an unmeasured time"
    return (
        f"it would run as an opaque custom op ({entry.inline_reason.split(';')[0]}); without CUDA graphs its "
        f"Python call (about {OPAQUE_CALL_MS:g} ms) costs more than the {saved} it saves"
    )


def _pattern_inner(entry: Entry) -> list[torch.fx.Node]:
    return [n for n in entry.pattern.graph.nodes if n.op not in ("placeholder", "output")]


def _pattern_placeholders(entry: Entry) -> list[torch.fx.Node]:
    return [n for n in entry.pattern.graph.nodes if n.op == "placeholder"]


def _inputs(entry: Entry, match: Any, replaced: dict[torch.fx.Node, torch.fx.Node]) -> list[torch.fx.Node]:
    # A match's input may be the output of a region replaced just before (two norms in a row): that
    # node is gone from the graph, the operator's node stands for it.
    return [replaced.get(match.nodes_map[p], match.nodes_map[p]) for p in _pattern_placeholders(entry)]


def _why_not(entry: Entry, match: Any, replaced: dict[torch.fx.Node, torch.fx.Node]) -> str | None:
    if len(match.returning_nodes) != entry.outputs:
        return f"pattern matched with {len(match.returning_nodes)} outputs, the entry returns {entry.outputs}"
    nodes = _inputs(entry, match, replaced)
    values = [n.meta.get("example_value") for n in nodes]
    if any(v is None for v in values):
        return "no example value on an input of the match"
    guard = entry.accepts(values)
    if guard is not None:
        return f"guard failed: {guard}"
    for anchor in match.returning_nodes:
        out = anchor.meta.get("example_value")
        if not isinstance(out, torch.Tensor):
            return "the matched region does not return tensors"
        if out.requires_grad:
            return "output requires grad (no backward registered for the kernel)"
    if entry.outputs > 1:
        order = {n: i for i, n in enumerate(match.returning_nodes[0].graph.nodes)}
        first = min(order[a] for a in match.returning_nodes)
        if any(order[n] > first for n in nodes):
            return "an input of the match is computed after its first output"
    return None


def _splits_a_fusion(entry: Entry, match: Any, replaced: dict[torch.fx.Node, torch.fx.Node]) -> str | None:
    """Why swapping this match would split a kernel Inductor fuses across the match's boundary, or None.

    A pattern of pointwise and reduction ops only is a piece of what Inductor compiles as one kernel together
    with the pointwise ops around it: a residual add that produces a norm's input is fused into the norm's
    kernel, a cast that consumes its output into its epilogue. Swapped alone, the neighbour becomes a kernel of
    its own: one more launch and one more pass over the tensor, which the entry's own verdict (timed against
    the region alone) never saw. A matmul entry cuts nothing Inductor would fuse (its matmul is a library call),
    nor does an attention block (its attention is one; the rotary tables' cast Inductor would fuse into the
    rotary is then a small kernel of its own, once for every layer).
    """
    from .attention import is_attention
    from .nodes import is_fusible, is_matmul

    inner = _pattern_inner(entry)
    if any(is_matmul(n) or is_attention(n) for n in inner):
        return None
    matched = {match.nodes_map[n] for n in inner if n in match.nodes_map}
    for producer in _inputs(entry, match, replaced):
        if is_fusible(producer) and producer not in matched:
            return f"would split Inductor's fusion with {producer.name} ({_node_op(producer)}) before it"
    for out in match.returning_nodes:
        for user in out.users:
            if is_fusible(user) and user not in matched:
                return f"would split Inductor's fusion with {user.name} ({_node_op(user)}) after it"
    return None


def _node_op(node: torch.fx.Node) -> str:
    return (
        str(node.target) if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))
    )


def _replace(
    gm: torch.fx.GraphModule, entry: Entry, match: Any, replaced: dict[torch.fx.Node, torch.fx.Node]
) -> None:
    args = tuple(_inputs(entry, match, replaced))
    anchors = list(match.returning_nodes)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    with gm.graph.inserting_before(min(anchors, key=order.__getitem__)):  # before any output is used
        node = gm.graph.call_function(entry.op, args)
        # Several outputs (a group of projections): the operator returns a list, each output one item of it.
        outs = (
            [node]
            if entry.outputs == 1
            else [gm.graph.call_function(operator.getitem, (node, i)) for i in range(len(anchors))]
        )
    for anchor, out in zip(anchors, outs):
        out.meta = {
            k: v for k, v in anchor.meta.items() if k in ("example_value", "stack_trace", "nn_module_stack")
        }
        anchor.replace_all_uses_with(out)
        replaced[anchor] = out
    internal = [match.nodes_map[p] for p in _pattern_inner(entry) if p in match.nodes_map]
    for old in reversed(internal):  # pattern order is topological: erase users before their inputs
        if not old.users:
            gm.graph.erase_node(old)

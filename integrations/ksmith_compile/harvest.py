"""``ksmith harvest``: a model's fusible regions and matmuls, each written as a KernelBench-format problem.

The model's Dynamo graphs (the ones ``backend="kernelsmith"`` receives) are cut into regions:

- **fusible regions**: connected pointwise / reduction / cast nodes (norms, activation products, softmax,
  residual + norm, ...) between the nodes Inductor would not fuse into them (matmuls, views, indexing,
  attention). A region with several outputs is cut at its earliest output until each piece has one, since a
  library entry replaces one output;
- **matmuls with their epilogue**: each matmul and the chain of fusible nodes that is its only consumer;
- **matmul groups** (kind ``matmuls``): two ``linear``s of one input whose epilogue chains meet in one node
  (Llama's gate and up projections with ``silu(gate) * up``): one kernel can read the input once, stream both
  weights and never write the two products, where Inductor calls two GEMMs and a pointwise kernel; and
  ``linear``s of one input with no epilogue (Llama's q, k and v projections), one problem returning each
  projection: one launch instead of one a projection;
- **attention** (kind ``attention``): ``scaled_dot_product_attention`` with the heads' split, the rotary
  embedding and the grouped-query repeat before it and the heads' merge after it (:mod:`.attention`), one
  problem from the projections' outputs to the output projection's input, where Inductor runs an extern
  attention kernel behind kernels of its own;
- **normed groups** (kind ``matmuls`` too): a group with the fusible piece that makes its input when the
  group is all that reads it (the RMSNorm before Llama's q/k/v and gate/up), and that piece with the residual
  add before it, whose sum is then also an output of the region. At decode the norm is a kernel between two
  GEMMs; the group's kernel can normalise the few rows it reads anyway.

Each region becomes a problem whose ``Model.forward`` is the region's own code as Dynamo recorded it, at the
model's real shapes and dtypes, so that Dynamo captures the same graph from it and the library entry evolved
for it matches back into the model. Parameters the region reads become parameters of ``Model``
(``p0``, ``p1``, ...); ``ModelNew`` must use the same names. Identical regions are written once, with how many
times they occur. Matmul regions get a seed kernel where :mod:`.seeds` can write one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ksmith_core.errors import ProblemError

from .attention import is_attention, recognise
from .nodes import (
    init_expr,
    is_fusible,
    is_layout,
    is_linear,
    is_matmul,
    is_residual_add,
    linears_of_one_input,
    op_name,
    value_of,
)
from .seeds import MAX_GROUP, seed_for


@dataclass
class Harvested:
    """One written problem: its source, and where in the model the region occurs."""

    name: str
    # "fusible", "matmul", "matmuls" (projections of one input, maybe behind its norm) or "attention"
    kind: str
    source: str
    ops: list[str]
    inputs: list[dict[str, Any]]
    seed: str | None = None  # a seed kernel (NAME.seed.py), where harvest can write one
    occurrences: list[str] = field(default_factory=list)  # "<graph>:<output node>"
    places: list[tuple[int, list[str]]] = field(default_factory=list)  # (graph, node names) per occurrence


def _outputs(region: set[torch.fx.Node]) -> list[torch.fx.Node]:
    return [n for n in region if any(u not in region for u in n.users)]


def _ancestors_in(node: torch.fx.Node, region: set[torch.fx.Node]) -> set[torch.fx.Node]:
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in seen or n not in region:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return seen


def _components(nodes: set[torch.fx.Node]) -> list[set[torch.fx.Node]]:
    left, parts = set(nodes), []
    while left:
        stack, part = [left.pop()], set()
        while stack:
            n = stack.pop()
            part.add(n)
            for m in (*n.all_input_nodes, *n.users):
                if m in left:
                    left.discard(m)
                    stack.append(m)
        parts.append(part)
    return parts


def _single_output(region: set[torch.fx.Node], order: dict[torch.fx.Node, int]) -> list[set[torch.fx.Node]]:
    outs = _outputs(region)
    if len(outs) <= 1:
        return [region]
    first = min(outs, key=order.__getitem__)
    upstream = _ancestors_in(first, region)
    pieces = _single_output(upstream, order)
    for part in _components(region - upstream):
        pieces.extend(_single_output(part, order))
    return pieces


def find_regions(gm: torch.fx.GraphModule) -> list[tuple[str, list[torch.fx.Node]]]:
    """(kind, nodes in graph order) of every fusible region, every matmul with its epilogue and every group of
    projections of one input, the latter also with the norm that makes their input (see :func:`_normed`)."""
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    fusible = {n for n in gm.graph.nodes if is_fusible(n)}
    regions: list[tuple[str, list[torch.fx.Node]]] = []
    pieces: dict[torch.fx.Node, set[torch.fx.Node]] = {}  # a single-output fusible piece, by its output
    for component in _components(fusible):
        for piece in _single_output(component, order):
            pieces[max(piece, key=order.__getitem__)] = piece
            if len(piece) >= 2:  # a lone pointwise op is Inductor's business
                regions.append(("fusible", sorted(piece, key=order.__getitem__)))
    chains: dict[torch.fx.Node, list[list[torch.fx.Node]]] = {}  # last node -> the chains ending there
    bare: dict[torch.fx.Node, list[torch.fx.Node]] = {}  # input -> the linears of it with no epilogue
    for node in gm.graph.nodes:
        if not is_matmul(node):
            continue
        chain, cur = [node], node
        while len(cur.users) == 1 and is_fusible(next(iter(cur.users))):
            cur = next(iter(cur.users))
            chain.append(cur)
        regions.append(("matmul", chain))
        chains.setdefault(cur, []).append(chain)
        if len(chain) == 1 and is_linear(node) and node.args:
            bare.setdefault(node.args[0], []).append(node)
    groups = [
        {*ending[0], *ending[1]}
        for ending in chains.values()
        if len(ending) == 2 and linears_of_one_input(ending[0][0], ending[1][0])
    ]
    groups += [set(group) for group in bare.values() if 2 <= len(group) <= MAX_GROUP]
    for node in gm.graph.nodes:
        block = recognise(node) if is_attention(node) else None
        if block is not None:
            regions.append(("attention", sorted(block.nodes, key=order.__getitem__)))
    for group in groups:
        regions.append(("matmuls", sorted(group, key=order.__getitem__)))
        for prologue in _normed(group, pieces):
            regions.append(("matmuls", sorted(prologue | group, key=order.__getitem__)))
    regions.sort(key=lambda r: (order[r[1][0]], r[0], len(r[1])))
    return regions


def _normed(
    group: set[torch.fx.Node], pieces: dict[torch.fx.Node, set[torch.fx.Node]]
) -> list[set[torch.fx.Node]]:
    """The prologues one kernel can compute with a group of projections: the fusible piece that makes their
    input (a norm) when it feeds nothing else, and that piece with the residual add before it, whose sum is
    then one more output of the region (the next residual). At decode the norm is a kernel of its own between
    two GEMMs; in the group's kernel each program normalises the few rows it reads anyway."""
    first = next(n for n in group if is_linear(n))
    source = first.args[0]
    if not isinstance(source, torch.fx.Node) or source not in pieces or not set(source.users) <= group:
        return []
    piece = pieces[source]
    found = [piece]
    entries = {a for n in piece for a in n.all_input_nodes if a not in piece}
    residual = [a for a in entries if is_residual_add(a)]
    if len(residual) == 1:
        found.append(piece | {residual[0]})
    return found


def region_problem(
    kind: str, nodes: list[torch.fx.Node], params: set[torch.fx.Node], origin: str
) -> tuple[str, list[str], list[dict[str, Any]], str | None] | str:
    """The problem source of one region (with a seed where harvest can write one), or why it cannot be
    written as one."""
    inside = set(nodes)
    external: list[torch.fx.Node] = []
    for n in nodes:
        for a in n.all_input_nodes:
            if a not in inside and a not in external:
                external.append(a)
    for a in external:
        if not isinstance(value_of(a), torch.Tensor):
            return f"input {a.name} is not a tensor"
    leaving = set(_outputs(inside))
    outs = [n for n in nodes if n in leaving]  # in graph order
    if not all(isinstance(value_of(o), torch.Tensor) for o in outs):
        return "the region does not end in tensors"
    if outs != [nodes[-1]] and not (kind == "matmuls" and len(outs) > 1):
        return "the region does not end in one tensor"
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    activations = [a for a in external if a not in params]
    weights = [a for a in external if a in params]
    for i, a in enumerate(activations):
        env[a] = graph.placeholder(f"in{i}")
    for i, a in enumerate(weights):
        root.register_parameter(f"p{i}", torch.nn.Parameter(torch.empty(0), requires_grad=False))
        env[a] = graph.get_attr(f"p{i}")
    for i, n in enumerate(nodes):
        env[n] = graph.node_copy(n, lambda a: env[a])
        env[n].meta = {}
        env[n]._rename(f"t{i}")  # names from the model's graph would keep identical regions apart
    graph.output(env[outs[0]] if len(outs) == 1 else tuple(env[o] for o in outs))
    code = graph.python_code("self")  # names it needs beyond torch fail in matches_back(), which runs it
    body = code.src.strip().splitlines()
    signature = ", ".join(["self", *(f"in{i}" for i in range(len(activations)))])
    forward = [f"    def forward({signature}):"] + [
        "    " + line for line in body[1:] if line.strip() and not line.strip().startswith("#")
    ]
    forward = [re.sub(r";\s+[\w =]+= None$", "", line) for line in forward]
    ops = [op_name(n) for n in nodes]
    inputs = [
        {"shape": list(value_of(a).shape), "dtype": str(value_of(a).dtype).removeprefix("torch.")}
        for a in activations
    ]
    header = ["import torch", "import torch.nn as nn"]
    if "device(" in "\n".join(forward):
        header.append("from torch import device")  # FX writes device literals as device(type='cuda', ...)
    lines = [
        f'"""Harvested from {origin}: {kind} region ({", ".join(ops)}), at the model\'s shapes and dtypes."""',
        "",
        *header,
        "",
        "",
        "class Model(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
    ]
    for i, a in enumerate(weights):
        lines.append(f"        self.p{i} = nn.Parameter({init_expr(value_of(a))})")
    lines += ["", *forward, "", "", "def get_inputs():", "    return ["]
    for a in activations:
        lines.append(
            f"        {_randn(a) if value_of(a).dtype.is_floating_point else init_expr(value_of(a))},"
        )
    lines += ["    ]", "", "", "def get_init_inputs():", "    return []", ""]
    return "\n".join(lines), ops, inputs, seed_for(kind, nodes, activations, weights)


def _randn(node: torch.fx.Node) -> str:
    value = value_of(node)
    return f"torch.randn({list(value.shape)}, dtype={value.dtype})"


def matches_back(source: str, gm: torch.fx.GraphModule) -> str | None:
    """Why the written problem would not match back into the model's graph (None: it does)."""
    from torch.fx.passes.utils.matcher_utils import SubgraphMatcher

    from .library import EntryError, capture_pattern

    namespace: dict[str, Any] = {"__name__": "ksmith_harvested"}
    try:
        exec(compile(source, "<harvested>", "exec"), namespace)
        torch.manual_seed(0)
        model = namespace["Model"]().eval()
        inputs = list(namespace["get_inputs"]())
        pattern, _ = capture_pattern(model, inputs)
    except EntryError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - the generated code itself; the region is reported, not written
        return f"the written problem fails: {type(exc).__name__}: {exc}".splitlines()[0]
    matcher = SubgraphMatcher(
        pattern.graph, match_output=False, match_placeholder=False, remove_overlapping_matches=True
    )
    if not matcher.match(gm.graph):
        return "the written problem's graph does not match back into the model's"
    return None


def _param_placeholders(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> set[torch.fx.Node]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return {
        n
        for n, ex in zip(placeholders, example_inputs)
        if isinstance(ex, torch.nn.Parameter) or "_parameters_" in n.name or "_buffers_" in n.name
    }


def harvest(
    model_file: Path, output: Path, device: str = "cpu", time_share: bool | None = None
) -> dict[str, Any]:
    """Write one problem per distinct region of the model into ``output``; returns what was written.

    ``time_share`` (default: on a GPU) also measures each region's share of the Inductor-compiled model's kernel
    time (:mod:`.time_share`), GPU time on a GPU and CPU time on CPU."""
    from ksmith_core.clitools import output_dir

    from .report import load_model_file

    module = load_model_file(model_file)
    try:
        torch.manual_seed(0)
        with torch.device(device):
            model = module.Model(*module.get_init_inputs()).eval()
            inputs = list(module.get_inputs())
        model = model.to(device)
        inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs]
    except Exception as exc:
        raise ProblemError(
            f"{model_file}: building the model or its inputs failed: {exc}".splitlines()[0]
        ) from exc
    graphs: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def grab(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=grab, dynamic=False)(*inputs)
    except Exception as exc:
        raise ProblemError(f"{model_file}: Dynamo cannot trace the model: {exc}".splitlines()[0]) from exc
    finally:
        torch._dynamo.reset()
    out_dir = output_dir(Path(output))
    written: dict[str, Harvested] = {}
    skipped: list[dict[str, str]] = []
    stem = re.sub(r"\W", "_", Path(model_file).stem)
    for index, (gm, example_inputs) in enumerate(graphs):
        params = _param_placeholders(gm, example_inputs)
        for kind, nodes in find_regions(gm):
            where = f"{index}:{nodes[-1].name}"
            made = region_problem(kind, nodes, params, Path(model_file).name)
            if isinstance(made, str):
                skipped.append({"region": where, "reason": made})
                continue
            source, ops, specs, seed = made
            if source not in written:
                why_not = matches_back(source, gm)
                if why_not is not None:
                    skipped.append({"region": where, "reason": why_not})
                    continue
                what = "" if kind == "attention" else "_" + "_".join(dict.fromkeys(ops))  # the kind says it
                name = f"{stem}_{len(written):02d}_{kind}{what}"[:80]
                written[source] = Harvested(name, kind, source, ops, specs, seed)
            written[source].occurrences.append(where)
            # For the time shares: a library call's note also names the views before it (the heads merged
            # back before o_proj), which would count o_proj's GEMM for the attention block too.
            written[source].places.append((index, [n.name for n in nodes if not is_layout(n)]))
    problems = []
    for item in written.values():
        (out_dir / f"{item.name}.py").write_text(item.source, encoding="utf-8")
        if item.seed is not None:  # beside the problem, where evolve and bench look for a seed
            (out_dir / f"{item.name}.seed.py").write_text(item.seed, encoding="utf-8")
        problems.append(
            {
                "problem": item.name,
                "file": f"{item.name}.py",
                "kind": item.kind,
                "ops": item.ops,
                "inputs": item.inputs,
                "occurrences": item.occurrences,
                "seed": f"{item.name}.seed.py" if item.seed is not None else None,
                "time_share": None,
            }
        )
    summary = {"model": str(model_file), "graphs": len(graphs), "problems": problems, "skipped": skipped}
    if time_share if time_share is not None else device == "cuda":
        summary["time_share"] = _measure_shares(model, inputs, device, written, problems)
    (out_dir / "harvest.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def _measure_shares(
    model: torch.nn.Module,
    inputs: list[Any],
    device: str,
    written: dict[str, Harvested],
    problems: list[dict[str, Any]],
) -> dict[str, Any]:
    """Fill each problem's ``time_share``; the profile's summary, or why it could not be measured (a measurement
    that fails leaves the problems written, their shares ``null``)."""
    from . import time_share

    occurrences = {item.name: item.places for item in written.values()}
    try:
        by_problem, summary = time_share.measure(model, inputs, device, occurrences)
    except Exception as exc:  # noqa: BLE001 - the problems stand without the measurement
        return {"device": device, "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    for problem in problems:
        problem["time_share"] = by_problem.get(problem["problem"])
    return summary

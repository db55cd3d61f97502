"""Each harvested region's share of the Inductor-compiled model's kernel time (``harvest.json``'s ``time_share``).

The model is compiled as ``backend="inductor"`` compiles it and profiled for a few forwards. Each launch's time
is attributed to the nodes of Dynamo's graph that it computes, which Inductor's output code names:

- above each kernel it defines, ``# Topologically Sorted Source Nodes: [...]`` lists the nodes it computes;
- a call into a library (``extern_kernels.mm``, ``torch.ops.aten.<op>``) follows a note listing the nodes
  since the previous note, less those of the noted kernels launched in between. Inductor's C++ kernels (CPU)
  carry no note of their own: each shares the note of the library call after it, and both count for every
  node it names (so on CPU a norm fused before a matmul counts for the matmul's region too, and a kernel with
  no library call after it is not attributed).

Under the profiler every launch is an event directly below the graph's ``## Call CompiledFxGraph`` event: a
Triton launch is a record function named after its kernel (Inductor's launcher records one), a C++ kernel
one named ``graph_<i>_<kernel>`` (with Inductor's ``cpp.enable_kernel_profile``), a library call its
``aten::<op>``. A launch's time is the GPU time of the kernels it launched on a GPU, its CPU time on CPU.

A region's share is the time of the launches that compute any node of any of its occurrences, over the time
of all launches. Inductor fuses across regions (a residual add into the norm after it), and a group of
projections contains its single projections, so a launch can count for several regions and the shares do not
add up to one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_SOURCE_NOTE = re.compile(r"#\s*Topologically Sorted Source Nodes: \[(.*?)\]")
_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.\w+\(")
_EXTERN_CALL = re.compile(r"\b(?:extern_kernels\.(\w+)|torch\.ops\.aten\.(\w+)\.\w+)\(")
_CALL = re.compile(r"\b(\w+)(?:\.run)?\(")
_GRAPH_CALL = "## Call CompiledFxGraph"
FORWARDS = 5  # profiled forwards, after two unprofiled ones


@dataclass
class GraphLaunches:
    """What one graph's output code launches: its kernels by name and its library calls in order, each with
    the Dynamo nodes it computes."""

    kernels: dict[str, list[str]]
    externs: list[tuple[str, list[str]]]  # (aten op name, nodes)
    defined: set[str]  # every kernel the code defines, with nodes or not


def parse_output_code(code: str) -> GraphLaunches:
    """The launches of one Inductor output code (a Python wrapper, on GPU or CPU)."""
    head, _, body = code.partition("def call(")
    kernels: dict[str, list[str]] = {}
    note: list[str] | None = None
    for line in head.splitlines():
        found = _SOURCE_NOTE.search(line)
        if found:
            note = _names(found.group(1))
            continue
        defined = _KERNEL_DEF.match(line)
        if defined and note is not None:
            kernels[defined.group(1)] = note
            note = None
    externs: list[tuple[str, list[str]]] = []
    defined = _defined_names(head)
    note: list[str] | None = None
    launched: set[str] = set()  # nodes of the noted kernels launched since the last note
    unnoted: list[str] = []  # kernels with no note of their own launched since the last library call
    for line in body.splitlines():
        found = _SOURCE_NOTE.search(line)
        if found:
            note, launched = _names(found.group(1)), set()
            continue
        call = _EXTERN_CALL.search(line)
        if call:
            nodes = [n for n in note or [] if n not in launched]
            externs.append((call.group(1) or call.group(2), nodes))
            for kernel in unnoted:  # C++ kernels: they share the note with the library call after them
                kernels[kernel] = nodes
            note, launched, unnoted = None, set(), []
            continue
        for name in _CALL.findall(line):
            if name in kernels and name not in unnoted:
                launched.update(kernels[name])
            elif name in defined:
                unnoted.append(name)
    return GraphLaunches(kernels, externs, defined)


def _defined_names(head: str) -> set[str]:
    return {m.group(1) for m in map(_KERNEL_DEF.match, head.splitlines()) if m}


def _names(listed: str) -> list[str]:
    return [n.strip() for n in listed.split(",") if n.strip()]


@dataclass
class Launch:
    graph: int
    name: str
    ms: float  # per forward
    nodes: frozenset[str] | None  # None: not attributed to any node of the graph


def attribute(
    graphs: list[GraphLaunches], calls: list[list[tuple[str, float]]], forwards: int, device: str
) -> list[Launch]:
    """Each launch of the profiled forwards with its nodes: ``calls`` holds, per ``## Call CompiledFxGraph`` event
    in time order, its direct children (name, ms); every forward runs the graphs once each, in order."""
    if not graphs or len(calls) != forwards * len(graphs):
        raise ValueError(
            f"{len(calls)} compiled-graph calls in {forwards} forwards of {len(graphs)} graph(s): "
            "a graph ran more or less than once a forward"
        )
    totals: dict[tuple[int, int], Launch] = {}
    for index, children in enumerate(calls):
        graph = index % len(graphs)
        launches = graphs[graph]
        position = 0  # the next library call of the graph not yet matched
        for order, (name, ms) in enumerate(children):
            nodes: list[str] | None = None
            kernel = re.sub(r"^graph_\d+_", "", name)
            is_kernel = kernel in launches.defined
            if is_kernel:
                nodes = launches.kernels.get(kernel)
            elif name.startswith("aten::"):
                op = name.removeprefix("aten::")
                match = next(
                    (i for i in range(position, len(launches.externs)) if launches.externs[i][0] == op), None
                )
                if match is not None:
                    nodes, position = launches.externs[match][1], match + 1
            if nodes is None and not is_kernel and (device != "cuda" or ms <= 0):
                continue  # host-side work (allocations, views): no kernel time of its own
            key = (graph, order)
            launch = totals.setdefault(key, Launch(graph, kernel, 0.0, frozenset(nodes) if nodes else None))
            launch.ms += ms / forwards
    return list(totals.values())


def shares(
    launches: list[Launch], occurrences: dict[str, list[tuple[int, Iterable[str]]]]
) -> tuple[dict[str, float], list[dict[str, Any]], float]:
    """Per problem, its share of the launches' time; each launch with the problems it counts for; the total ms."""
    total = sum(launch.ms for launch in launches)
    regions = {
        problem: [(graph, frozenset(nodes)) for graph, nodes in places]
        for problem, places in occurrences.items()
    }
    time = dict.fromkeys(regions, 0.0)
    table = []
    for launch in launches:
        touched = [
            problem
            for problem, places in regions.items()
            if launch.nodes and any(g == launch.graph and launch.nodes & nodes for g, nodes in places)
        ]
        for problem in touched:
            time[problem] += launch.ms
        table.append({"launch": launch.name, "graph": launch.graph, "ms": launch.ms, "problems": touched})
    return ({p: (t / total if total > 0 else 0.0) for p, t in time.items()}, table, total)


def measure(
    model: Any, inputs: list[Any], device: str, occurrences: dict[str, list[tuple[int, Iterable[str]]]]
) -> tuple[dict[str, float], dict[str, Any]]:
    """Compile ``model`` with Inductor, profile it, and return each problem's share with the profile's summary."""
    import torch
    from torch._inductor.utils import run_and_get_code
    from torch.profiler import ProfilerActivity, profile

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            compiled = torch.compile(model, backend="inductor", dynamic=False)
            # No cached graph (its code is what names the nodes), and C++ kernels that the profiler sees.
            with torch._inductor.config.patch({"fx_graph_cache": False, "cpp.enable_kernel_profile": True}):
                _, codes = run_and_get_code(compiled, *inputs)
            compiled(*inputs)
            _synchronize(device)
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
            with profile(activities=activities) as prof:
                for _ in range(FORWARDS):
                    compiled(*inputs)
                _synchronize(device)
    finally:
        torch._dynamo.reset()
    graphs = [parse_output_code(code) for code in codes]
    events = sorted(
        (e for e in prof.events() if e.name.startswith(_GRAPH_CALL)), key=lambda e: e.time_range.start
    )
    calls = [
        [
            (c.name, (c.device_time_total if device == "cuda" else c.cpu_time_total) / 1000.0)
            for c in sorted(e.cpu_children, key=lambda c: c.time_range.start)
        ]
        for e in events
    ]
    launches = attribute(graphs, calls, FORWARDS, device)
    by_problem, table, total = shares(launches, occurrences)
    summary = {
        "device": device,
        "what": "GPU time of the kernels each launch ran" if device == "cuda" else "CPU time of each launch",
        "forwards": FORWARDS,
        "launches_ms": total,
        "unattributed_ms": sum(row["ms"] for row in table if not row["problems"]),
        "launches": table,
    }
    return by_problem, summary


def _synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()

"""Each harvested region's share of the Inductor-compiled model's kernel time (``harvest.json``'s ``time_share``).

The model is compiled as ``backend="inductor"`` compiles it and profiled for a few forwards. Each launch's time
is attributed to the nodes of Dynamo's graph that it computes, which Inductor's output code notes in its
``call`` function, in launch order (``# Topologically Sorted Source Nodes: [...]``):

- above each Triton kernel launch, the nodes that kernel computes (a kernel Inductor reuses for identical
  layers is launched from several places, each with its own note);
- above each call into a library (``extern_kernels.mm``, ``torch.ops.aten.<op>``), the nodes the call's IR
  node gathered, which include producers computed by earlier launches: those are taken off, so the call keeps
  its own nodes (the matmul, its views); where every one was named before (the kernels preparing an
  attention call's inputs carry the attention node's name), the call keeps the note's last node, its own.

Inductor's C++ kernels (CPU) are launched with no note of their own: the note of the next library call also
names their nodes, so on CPU each such kernel and that call count for all of them together (a norm fused in
front of a matmul counts for the matmul's problems and the matmul for the norm's), and a kernel with no
library call after it counts for none. CPU shares show the machinery works; GPU shares are the measurement.

Under the profiler every launch is an event directly below the graph's ``## Call CompiledFxGraph`` event: a
Triton launch is a record function named after its kernel (Inductor's launcher records one), a C++ kernel
one named ``graph_<i>_<kernel>`` (with Inductor's ``cpp.enable_kernel_profile``), a library call its
``aten::<op>``. They are matched to the code's launches in order. A launch's time is the GPU time of the
kernels it launched on a GPU, its CPU time on CPU.

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

_SOURCE_NOTE = re.compile(r"#\s*(?:Topologically Sorted|Unsorted) Source Nodes: \[(.*?)\]")
_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.\w+\(")
_EXTERN_CALL = re.compile(r"\b(?:extern_kernels\.(\w+)|torch\.ops\.aten\.(\w+)\.\w+)\(")
_CALL = re.compile(r"\b(\w+)(?:\.run)?\(")
_GRAPH_CALL = "## Call CompiledFxGraph"
FORWARDS = 5  # profiled forwards, after two unprofiled ones


@dataclass
class CodeLaunch:
    """One launch in a graph's ``call``: a kernel (by name) or a library call (``aten::<op>``), with the nodes
    it computes (None: the code does not say)."""

    name: str
    nodes: list[str] | None


def parse_output_code(code: str) -> list[CodeLaunch]:
    """The launches of one Inductor output code (a Python wrapper, on GPU or CPU), in the order ``call`` makes
    them."""
    head, _, body = code.partition("def call(")
    kernels = {m.group(1) for m in map(_KERNEL_DEF.match, head.splitlines()) if m}
    launches: list[CodeLaunch] = []
    note: list[str] | None = None
    done: set[str] = set()  # nodes of the launches so far
    unnoted: list[CodeLaunch] = []  # kernels launched with no note since the last library call (C++)
    for line in body.splitlines():
        found = _SOURCE_NOTE.search(line)
        if found:
            note = _names(found.group(1))
            continue
        call = _EXTERN_CALL.search(line)
        if call:
            nodes = [n for n in note or [] if n not in done]
            if note and not nodes:
                # Every node named, an earlier kernel named too: on a GPU Inductor's kernels that prepare an
                # attention call's inputs carry the attention node's name. The call keeps its own, the note's
                # last (the note is in topological order).
                nodes = note[-1:]
            launches.append(CodeLaunch(f"aten::{call.group(1) or call.group(2)}", nodes))
            for kernel in unnoted:
                kernel.nodes = nodes
            done.update(nodes)
            note, unnoted = None, []
            continue
        for name in _CALL.findall(line):
            if name in kernels:
                launches.append(CodeLaunch(name, note))
                if note is None:
                    unnoted.append(launches[-1])
                else:
                    done.update(note)
                note = None
    return launches


def _names(listed: str) -> list[str]:
    return [n.strip() for n in listed.split(",") if n.strip()]


@dataclass
class Launch:
    graph: int
    name: str
    ms: float  # per forward
    nodes: frozenset[str] | None  # None: not attributed to any node of the graph


def attribute(
    graphs: list[list[CodeLaunch]], calls: list[list[tuple[str, float]]], forwards: int, device: str
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
        code = graphs[graph]
        position = 0  # the next launch of the code not yet matched
        for order, (name, ms) in enumerate(children):
            name = re.sub(r"^graph_\d+_", "", name)
            match = next((i for i in range(position, len(code)) if code[i].name == name), None)
            if match is not None:
                position = match + 1
                key, nodes = (graph, match), code[match].nodes
            elif device == "cuda" and ms > 0:
                key, nodes = (graph, -1 - order), None  # GPU time the code does not name
            else:
                continue  # host-side work (allocations, views): no kernel time of its own
            launch = totals.setdefault(key, Launch(graph, name, 0.0, frozenset(nodes) if nodes else None))
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

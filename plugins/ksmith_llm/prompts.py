"""The prompts: one targeted change to a working kernel, a repair of a broken one, or a first kernel.

Every prompt carries the problem (the PyTorch reference), the hardware it will run on and the rules a
candidate must follow; an improve or fix prompt adds the parent kernel with its verdict and feedback and the
best and a few diverse other kernels of the run. The answer format is SEARCH/REPLACE blocks (the format aider
and OpenEvolve use), with a full module in one ```python block as the fallback.

Every prompt names the language the candidate is written in (:func:`language_for`): the problem's backend
says it (``Backend.language``: Triton, or CUDA C++ built with ``load_inline``) and the platform says how
(mcTriton and MACA C++ with 64-lane warps on MetaX). The rules, the task and the rewrite format follow it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ksmith_core.model import Problem, Scored, Selection

Message = dict[str, str]


@dataclass(frozen=True)
class Language:
    """What a candidate is written in, as the prompts say it."""

    name: str  # "Triton", "Triton (mcTriton)", "CUDA C++", "MACA C++"
    kernels: str  # how rules and tasks name the kernels
    module_parts: str  # what a complete module holds (the rewrite format)
    rules: tuple[str, ...]  # the language's own rules, beside the common ones

    def system_prompt(self) -> str:
        return (
            f"You are an expert GPU kernel engineer. You make PyTorch modules faster by writing {self.name} "
            "kernels, one careful, measurable change at a time, and you never change what a module computes."
        )


TRITON = Language(
    name="Triton",
    kernels="Triton kernels",
    module_parts="imports, the @triton.jit kernel(s) and class ModelNew",
    rules=(
        "- forward launches @triton.jit kernels (import torch, triton, triton.language as tl).",
        "- Never hard-code device='cuda'; keep tunables (BLOCK_SIZE, num_warps, num_stages) as literal",
        "  keyword arguments at the launch site, and size grids with triton.cdiv.",
    ),
)

CUDA_CPP_RULES = (
    "- The kernels are CUDA C++ in string constants of the module, built with",
    "  torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., cuda_sources=..., functions=[...]);",
    "  forward calls the extension's functions. The host code only checks inputs, allocates outputs",
    "  (torch::empty_like) and launches kernels on c10::cuda::getCurrentCUDAStream(): no torch or ATen math,",
    "  no cuBLAS, cuDNN or other library that computes for you.",
    "- Keep launch parameters as named integer constants (constexpr int THREADS = 256;) and derive grids",
    "  from them, so they can be tuned.",
)

SYSTEM_PROMPT = TRITON.system_prompt()  # the prompt of a Triton run, the default


def language_for(problem: Problem, hardware: Mapping[str, Any]) -> Language:
    """The language of ``problem``'s candidates: its backend's (``Backend.language``), on the run's platform."""
    from ksmith_core.capabilities import Backend
    from ksmith_core.errors import PluginError
    from ksmith_core.registry import lookup

    try:
        language = lookup(Backend, problem.backend).language
    except PluginError:  # an unregistered backend (a test's): Triton, the default
        language = "triton"
    metax = hardware.get("accelerator") == "metax" or hardware.get("vendor") == "MetaX"
    warp = hardware.get("warp_size") or (64 if metax else 32)
    if language == "cuda":
        name = "MACA C++" if metax else "CUDA C++"
        rules = CUDA_CPP_RULES
        if metax:
            rules += (
                "- MetaX MACA: the CUDA source is compiled by mxcc through cu-bridge. A warp is "
                f"{warp} threads: use warpSize, not 32, in shuffles, masks and lane arithmetic.",
            )
        return Language(
            name=name,
            kernels=f"{name} kernels (__global__ functions)",
            module_parts="imports, the source string(s), the load_inline call and class ModelNew",
            rules=rules,
        )
    if metax:
        return replace(
            TRITON, name="Triton (mcTriton)", kernels="Triton kernels, compiled by MetaX's mcTriton"
        )
    return TRITON


# Inspirations are shown whole; beyond this many characters each, only their verdict is shown.
MAX_INSPIRATION_CHARS = 6000
MAX_INSPIRATIONS = 3

EDIT_FORMAT = """\
## Answer format
First one line saying what you change and why. Then the change as one or more SEARCH/REPLACE blocks:

<<<<<<< SEARCH
lines copied exactly from the current kernel
=======
the lines that replace them
>>>>>>> REPLACE

The SEARCH text must match the current kernel exactly, whitespace included, and be just long enough to be
unique. Keep blocks small. If the change is too large for blocks, answer instead with the complete new module
in a single ```python block."""

REWRITE_FORMAT = """\
## Answer format
One line saying what the kernel does, then the complete module in a single ```python block: {parts}.
Nothing after the block."""


# What the platform seam adds to a run's hardware facts (ksmith_core.platform.PlatformFacts.summary): said in
# sentences below rather than listed.
PLATFORM_KEYS = (
    "accelerator",
    "vendor",
    "triton_backend",
    "warp_size",
    "max_num_warps",
    "launch_options",
    "verified",
)


def hardware_text(hardware: Mapping[str, Any], device: str) -> str:
    """The hardware facts for the prompt: GPU name, its platform's limits and options, measured ceilings; or
    the CPU interpreter."""
    facts = [
        f"- {key.replace('_', ' ')}: {value}"
        for key, value in hardware.items()
        if value not in (None, "") and key not in PLATFORM_KEYS
    ]
    if device == "cpu":
        head = (
            "CPU interpreter (TRITON_INTERPRET=1): kernels run on CPU tensors through Triton's interpreter, so "
            "correctness is what counts here; timings are not GPU timings."
        )
    else:
        head = f"{hardware.get('vendor') or 'NVIDIA'} GPU ({hardware.get('name', 'CUDA device')})."
        facts += platform_lines(hardware)
    return "\n".join([head, *facts])


def platform_lines(hardware: Mapping[str, Any]) -> list[str]:
    """The platform's limits and extra options (MetaX: 64-lane warps, num_warps up to 16, pipeline and
    scenario), from the run's hardware facts."""
    lines = []
    warp, most = hardware.get("warp_size"), hardware.get("max_num_warps")
    if warp and most:
        lines.append(f"- a warp is {warp} threads here; num_warps may be at most {most} (a power of two)")
    options = hardware.get("launch_options") or {}
    if options:
        listed = "; ".join(
            f"{name}= one of {', '.join(repr(v) for v in values)}" for name, values in options.items()
        )
        lines.append(
            f"- Triton here (backend {hardware.get('triton_backend', '?')}) also takes these compile options as "
            f"launch keyword arguments or triton.Config kwargs: {listed}. Upstream Triton rejects them."
        )
    return lines


def rules_text(problem: Problem, language: Language = TRITON) -> str:
    where = "inside " + language.kernels
    if problem.allowed_ops:
        torch_rule = (
            "- forward may call these torch ops besides launching your kernels: "
            + ", ".join(sorted(problem.allowed_ops))
            + f"; every other computation happens {where}."
        )
    else:
        torch_rule = (
            f"- No torch computation in forward: all arithmetic happens {where}. Allocating outputs "
            "(torch.empty_like, torch.empty(..., device=x.device)) and reading shapes and strides is fine."
        )
    return "\n".join(
        [
            "## Rules",
            "- The module defines class ModelNew(nn.Module) with the same __init__ and forward signature as Model,",
            "  and returns the same outputs (same shapes, dtypes, values within tolerance).",
            *language.rules,
            torch_rule,
            "- Do not define Model, get_inputs or get_init_inputs: they come from the problem.",
        ]
    )


def _code(source: str) -> str:
    return "```python\n" + source.strip("\n") + "\n```"


def _verdict_line(scored: Scored) -> str:
    verdict = scored.verdict
    if verdict.accepted:
        return f"status ok, speedup vs eager {verdict.speedup or 0:.3f}x"
    return f"status {verdict.status.value}"


def _inspirations(selection: Selection, parent: Scored, best: Scored | None) -> list[str]:
    parts: list[str] = []
    shown = {parent.candidate.id}
    others = ([best] if best is not None else []) + list(selection.inspirations)
    for scored in others:
        if scored.candidate.id in shown or len(shown) > MAX_INSPIRATIONS:
            continue
        shown.add(scored.candidate.id)
        label = "Best kernel so far" if scored is best else "Another kernel of this run"
        edit = f" (made by: {scored.candidate.edit})" if scored.candidate.edit else ""
        parts.append(f"### {label}: {_verdict_line(scored)}{edit}")
        if len(scored.candidate.source) <= MAX_INSPIRATION_CHARS:
            parts.append(_code(scored.candidate.source))
    return parts


def improve_messages(
    problem: Problem,
    selection: Selection,
    parent: Scored,
    best: Scored | None,
    hardware: Mapping[str, Any],
    device: str,
    hints: str = "",
) -> list[Message]:
    """The conversation asking for one targeted change to ``parent`` (or a repair, in fix mode).

    ``hints`` is the user's own guidance (the ``hints`` proposer option), placed after the format.
    """
    fixing = selection.mode == "fix" or not parent.verdict.accepted
    feedback = parent.feedback or _verdict_line(parent)
    language = language_for(problem, hardware)
    sections = [
        "## Problem: the PyTorch reference to match",
        _code(problem.source),
        "## Hardware",
        hardware_text(hardware, device),
        rules_text(problem, language),
        "## Current kernel",
        _code(parent.candidate.source),
        "### Its verdict",
        feedback.strip(),
    ]
    inspiration = _inspirations(selection, parent, best)
    if inspiration:
        sections += ["## Other kernels of this run, for ideas", *inspiration]
    if fixing:
        task = (
            "## Task\nThe current kernel is broken: its verdict above shows the error. Repair it with the smallest "
            "change that makes it compile and match the reference. Do not try to optimise yet."
        )
    else:
        task = (
            "## Task\nMake ONE targeted change to the current kernel that should make it faster on this hardware "
            "while keeping it correct: for example block sizes, num_warps or num_stages, fusing passes, better "
            "memory access, or cheaper math. Change one idea at a time so its effect can be measured."
        )
    sections += [task, EDIT_FORMAT]
    if hints.strip():
        sections.append("## Hints\n" + hints.strip())
    return _messages(language, sections)


def _messages(language: Language, sections: list[str]) -> list[Message]:
    return [
        {"role": "system", "content": language.system_prompt()},
        {"role": "user", "content": "\n\n".join(sections)},
    ]


def seed_messages(
    problem: Problem, hardware: Mapping[str, Any], device: str, hints: str = ""
) -> list[Message]:
    """The conversation asking for a first working ``ModelNew`` for a problem that ships no seed."""
    language = language_for(problem, hardware)
    sections = [
        "## Problem: the PyTorch reference to match",
        _code(problem.source),
        "## Hardware",
        hardware_text(hardware, device),
        rules_text(problem, language),
        f"## Task\nWrite a first, simple and correct {language.name} implementation of this Model as class "
        "ModelNew. Correctness first: a plain kernel that matches the reference is the goal.",
        REWRITE_FORMAT.format(parts=language.module_parts),
    ]
    if hints.strip():
        sections.append("## Hints\n" + hints.strip())
    return _messages(language, sections)


def repair_message(failures: list[str], hints: list[str]) -> Message:
    """The follow-up asking the model to fix an answer that could not be used (shown what failed)."""
    lines = ["Your answer could not be used:"]
    lines += [f"- {failure}" for failure in failures]
    if hints:
        lines.append("")
        lines += hints
    lines += [
        "",
        "Answer again in the same format. Copy SEARCH lines exactly from the current kernel, or send the "
        "complete module in one ```python block.",
    ]
    return {"role": "user", "content": "\n".join(lines)}

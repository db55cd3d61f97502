"""``ksmith seed PROBLEM --from inductor``: a seed kernel from the Triton code torch.compile generates.

The conversion (:mod:`ksmith_inductor.seeding`) imports the problem and runs Inductor, so it runs in a child
process: the driver itself never imports a problem.
"""

from __future__ import annotations

import os
import subprocess
import sys

import click

from ksmith_core import hookimpl
from ksmith_core.capabilities import SeedMethod
from ksmith_core.model import Proposal
from ksmith_inductor.seeding import GEMM_TEMPLATES, InductorSeedError

SEED_TIMEOUT_S = 900

CLI_OPTIONS = (
    click.Option(
        ["--gemm-templates"],
        type=click.Choice(GEMM_TEMPLATES),
        default=None,
        help="Seeds from inductor, on CUDA: the Triton kernel for each matmul and convolution is Inductor's "
        "max-autotune template with its epilogue fused (inductor, the default) or ksmith's own template, "
        "the form the mutate proposer's structural edits (tiles, TMA, split-K) rewrite (ksmith). "
        "CPU seeds always use ksmith's.",
    ),
)


def options_from_cli(values):
    # Always the effective choice: a bench keys its stored seeds on these options.
    return {"gemm_templates": values.get("gemm_templates") or "inductor"}


def seed_from_inductor(problem, options):
    device = options.get("device", "cpu")
    size = "small" if options.get("small", device == "cpu") else "full"
    templates = (options.get("method_options") or {}).get("gemm_templates", "inductor")
    if device != "cuda":
        return _seed(problem, device, size, templates)
    # On a GPU the child runs the model at full size beside whatever else this process evaluates there, so it
    # takes a place in the GPU's memory gate (its presence makes the others' out-of-memory retried alone),
    # and an out-of-memory it meets beside others is retried with the GPU to itself, as evaluations are.
    from ksmith_triton import admission
    from ksmith_triton.evaluator import memory_failure
    from ksmith_triton.locks import physical_gpu

    if not admission.enabled():
        return _seed(problem, device, size, templates)
    gate = admission.gate_for("cuda", physical_gpu(0))
    with gate.admitted(0) as ticket:
        try:
            return _seed(problem, device, size, templates)
        except InductorSeedError as exc:
            if not ((ticket.overlapped or ticket.crowded_at_start) and memory_failure(str(exc))):
                raise
    with gate.admitted(0, exclusive=True):
        return _seed(problem, device, size, templates)


def _seed(problem, device: str, size: str, templates: str) -> Proposal:
    from ksmith_triton.evaluator import serial_inductor_env
    from ksmith_triton.locks import physical_gpu, shared_gpu_lock

    try:
        # Inductor runs and autotunes on the GPU (max-autotune benchmarks its templates for a minute): it holds
        # the GPU's lock shared, so no evaluation's timed loop runs beside that load.
        with shared_gpu_lock(device, physical_gpu(0), "inductor seed"):
            proc = subprocess.run(
                [sys.executable, "-m", "ksmith_inductor.seeding", str(problem.path), device, size, templates],
                capture_output=True,
                text=True,
                timeout=SEED_TIMEOUT_S,
                env={**os.environ, **serial_inductor_env()},
            )
    except subprocess.TimeoutExpired:
        raise InductorSeedError(f"Inductor took more than {SEED_TIMEOUT_S} s for {problem.name}") from None
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        raise InductorSeedError(lines[-1] if lines else f"seeding failed with exit code {proc.returncode}")
    kernels = ", Inductor's GEMM templates" if "def triton_tem_" in proc.stdout else ""
    return Proposal(
        source=proc.stdout,
        edit=f"seeded from Inductor ({device}, {size} size{kernels})",
        edit_kind="inductor-seed",
        proposer="inductor",
    )


INDUCTOR = SeedMethod(
    "inductor",
    seed_from_inductor,
    "The Triton kernels torch.compile (Inductor) generates, as a ModelNew",
    CLI_OPTIONS,
    options_from_cli,
)


@hookimpl
def ksmith_register_seed_methods(register):
    register(INDUCTOR)

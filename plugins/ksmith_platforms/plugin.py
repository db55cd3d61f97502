"""Registers the NVIDIA and MetaX platforms and the ``ksmith doctor`` command."""

from __future__ import annotations

from ksmith_core import hookimpl
from ksmith_core.capabilities import Platform
from ksmith_platforms import metax, nvidia

NVIDIA = Platform(
    nvidia.NAME,
    nvidia.detect,
    nvidia.facts,
    "NVIDIA GPUs: Triton backend cuda, 32-lane warps, nvcc",
    aliases=(nvidia.TRITON_BACKEND,),
)
METAX = Platform(
    metax.NAME,
    metax.detect,
    metax.facts,
    "MetaX GPUs: mcTriton backend maca, 64-lane warps, num_warps <= 16, mxcc (not run on MetaX hardware)",
    aliases=(metax.TRITON_BACKEND, "mcTriton"),
)


@hookimpl
def ksmith_register_platforms(register):
    register(NVIDIA)
    register(METAX)


@hookimpl
def ksmith_register_commands(cli):
    from ksmith_platforms.doctor import doctor

    cli.add_command(doctor)

"""An example third-party ksmith plugin.

It adds a proposer, ``hello-warps``, which proposes the parent kernel with every literal ``num_warps=N``
at a launch site changed to another power of two, and an exporter target, ``hello-json``, which writes the
candidate and its verdict as one JSON file. Install it with ``pip install docs/examples/ksmith-hello`` and it
shows up in ``ksmith plugins``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ksmith_core import Exporter, Proposer, hookimpl
from ksmith_core.model import Artifact, Proposal

WARPS = (1, 2, 4, 8, 16)
_NUM_WARPS = re.compile(r"num_warps\s*=\s*(\d+)")


def propose(run, selection):
    """Every other power-of-two ``num_warps`` at each launch site of each parent, a few per step."""
    proposals = []
    for parent in selection.parents:
        source = parent.candidate.source
        current = [int(m.group(1)) for m in _NUM_WARPS.finditer(source)]
        for warps in WARPS:
            if warps in current:
                continue
            new_source = _NUM_WARPS.sub(f"num_warps={warps}", source)
            proposals.append(
                Proposal(
                    source=new_source,
                    parent_ids=(parent.candidate.id,),
                    edit=f"num_warps -> {warps}",
                    edit_kind="num_warps",
                    proposer="hello-warps",
                )
            )
    run.rng.shuffle(proposals)
    return proposals[: run.config.proposals_per_step]


def export(run, candidate, options):
    """The candidate and its verdict as one JSON file at ``-o``."""
    out = Path(options["output"])
    out.parent.mkdir(parents=True, exist_ok=True)
    verdict = options.get("verdict")
    out.write_text(
        json.dumps(
            {
                "id": candidate.id,
                "source": candidate.source,
                "verdict": verdict.to_dict() if verdict else None,
            },
            indent=2,
        )
    )
    return Artifact(target="hello-json", paths=(out,), summary=f"wrote {candidate.id}")


@hookimpl
def ksmith_register_proposers(register):
    register(
        Proposer("hello-warps", propose, "Example plugin: tries every other num_warps at each launch site")
    )


@hookimpl
def ksmith_register_exporters(register):
    register(Exporter("hello-json", export, "Example plugin: the candidate and its verdict as one JSON file"))

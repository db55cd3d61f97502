"""Throwaway proposers and a selector that make generations come to nothing, for the drop accounting tests.

Used with the toy backend of :mod:`tests.core.toy` (register both). ``dropper`` notes one unusable
generation per step through ``run.note_dropped``, and proposes an exact duplicate of its parent, a near
duplicate (the parent re-commented) and two new kernels, so every step exercises the proposer's and the
engine's drops. ``silent`` returns nothing and says nothing. The ``nobody`` selector offers no parent.

For subprocess tests: ``KSMITH_PLUGIN_MODULES="tests.core.toy:PLUGIN,tests.core.dropper:PLUGIN"``. With
``DROPPER_KILL_AT=N`` in the environment the process kills itself (SIGKILL) at the first step that finds N
evaluations in the run: nothing after that point runs, as with ``kill -9``.
"""

from __future__ import annotations

import os
import re
import signal

from ksmith_core import Proposer, Selector, hookimpl
from ksmith_core.model import Proposal


def _with_speed(source: str, speed: float) -> str:
    return re.sub(r"^SPEED = [0-9.]+", f"SPEED = {speed}", source, flags=re.M)


def dropper_propose(run, selection):
    kill_at = os.environ.get("DROPPER_KILL_AT")
    if kill_at and run.evaluations >= int(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)
    parent = selection.parents[0].candidate
    run.note_dropped("no_edit_block", f"from {parent.id}: the answer held no edit")
    # Above every kernel so far, so the two new ones are new whichever parent the selector picked.
    speed = max(
        float(re.search(r"^SPEED = ([0-9.]+)", s.candidate.source, re.M).group(1)) for s in run.population
    )
    sources = [
        parent.source,  # already evaluated: a duplicate
        parent.source.replace("SPEED = ", f"# {run.evaluations}\nSPEED = ", 1),  # a near duplicate
        _with_speed(parent.source, speed + 0.5),
        _with_speed(parent.source, speed + 0.25),
    ]
    return [Proposal(source=s, parent_ids=(parent.id,), edit="d", proposer="dropper") for s in sources]


def silent_propose(run, selection):
    return []


class DropperPlugin:
    @hookimpl
    def ksmith_register_proposers(self, register):
        register(Proposer("dropper", dropper_propose, "test proposer: notes drops, proposes duplicates"))
        register(Proposer("silent", silent_propose, "test proposer: never proposes, never says why"))

    @hookimpl
    def ksmith_register_selectors(self, register):
        register(Selector("nobody", lambda run: None, "test selector: offers no parent"))


PLUGIN = DropperPlugin()

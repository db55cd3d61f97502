"""A test-only backend that can take down the process evaluating it: the Ray actor itself, not a child.

Candidates run in their own child processes in the Triton backend, so a candidate cannot kill the Ray
actor there; this backend evaluates in the actor's own process and exits it when the source says so:

- ``KILL = "always"``: ``os._exit`` every time (a job that kills every worker it is given);
- ``KILL = "once:/path/marker"``: ``os._exit`` the first time only (the marker file says it happened; it is
  created atomically, so exactly one evaluation dies whichever actor runs it);
- ``SLEEP = <seconds>``: take that long (a job still running when the test kills its actor).

Everything else is the toy backend's (``tests/core/toy.py``: ``SPEED = <float>`` is the speedup). Actors load
it through ``KSMITH_PLUGIN_MODULES=tests.on_ray.crashy:PLUGIN``; the driver registers ``PLUGIN`` (or the same
module path) too, so that it knows the backend's name.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from ksmith_core import Backend, Proposer, hookimpl
from ksmith_core.model import Proposal
from tests.core.toy import PROBLEM as TOY_PROBLEM
from tests.core.toy import SEED as TOY_SEED
from tests.core.toy import ToyPlugin, speed_of

PROBLEM = TOY_PROBLEM.replace('KSMITH_BACKEND = "toy"', 'KSMITH_BACKEND = "crashy"')
assert PROBLEM != TOY_PROBLEM


def seed_source(sleep: float = 0.0) -> str:
    return TOY_SEED + (f"\nSLEEP = {sleep}\n" if sleep else "")


def write_problem(directory: Path, sleep: float = 0.0) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    problem, seed = directory / "crashy.py", directory / "crashy.seed.py"
    problem.write_text(PROBLEM)
    seed.write_text(seed_source(sleep))
    return problem, seed


def with_speed(source: str, speed: float) -> str:
    return re.sub(r"^SPEED = [0-9.]+", f"SPEED = {speed}", source, flags=re.M)


def evaluate(problem, candidate, options):
    source = candidate.source
    sleep = re.search(r"^SLEEP = ([0-9.]+)", source, re.M)
    if sleep:
        time.sleep(float(sleep.group(1)))
    kill = re.search(r'^KILL = "(always|once:(.+))"', source, re.M)
    if kill and kill.group(1) == "always":
        os._exit(17)
    if kill and kill.group(2):
        try:
            os.close(os.open(kill.group(2), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass  # died once already: evaluate this time
        else:
            os._exit(17)
    return _TOY.evaluate(problem, candidate, options)


_TOY = ToyPlugin()


class CrashyPlugin:
    """The ``crashy`` backend; and the ``crashy`` proposer, which bumps SPEED like the toy one and adds the
    line ``extras[n]`` to the n-th candidate of the run (0 is the seed)."""

    def __init__(self) -> None:
        self.extras: dict[int, str] = {}

    @hookimpl
    def ksmith_register_backends(self, register):
        register(Backend("crashy", evaluate, "test backend: exits the evaluating process when told to"))

    @hookimpl
    def ksmith_register_proposers(self, register):
        register(Proposer("crashy", self.propose, "test proposer: bumps SPEED, adds the lines asked for"))

    def propose(self, run, selection):
        parent = selection.parents[0].candidate
        out = []
        for i in range(run.config.proposals_per_step):
            n = len(run.population) + i
            speed = speed_of(parent.source) + 0.25 * (i + 1)
            source = with_speed(parent.source, speed)
            source = re.sub(r'^KILL = ".*"\n', "", source, flags=re.M)  # a child does not inherit it
            if n in self.extras:
                source += f"\n{self.extras[n]}\n"
            out.append(Proposal(source=source, parent_ids=(parent.id,), edit=f"n={n}", proposer="crashy"))
        return out


# For KSMITH_PLUGIN_MODULES="tests.on_ray.crashy:PLUGIN".
PLUGIN = CrashyPlugin()

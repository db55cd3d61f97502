"""Entry point of every child process: ``python -m ksmith_triton.worker ROLE RESULT_FD [WARM_DEVICE]``.

It only picks the role's module, so a candidate's process never loads the reference's code and the
reference's process never loads the candidate's:

``candidate``
    ``candidate_side.py``: one untrusted candidate, one process (started ahead of need by ``pool.py``); its
    trials and its timing, under the guards.

``reference``
    ``reference_side.py``: the long-lived server of one problem; reference outputs, the comparison of a
    candidate's outputs with them, eager and torch.compile timings, the GPU's ceilings. It never runs
    candidate code.

``forkserver``
    ``forkserver.py``: imports what a candidate worker needs once, then forks candidate workers on request
    (``pool.py`` uses it unless ``KSMITH_FORKSERVER=0``). It never runs candidate code.

What both share (the report channel, the problem rebuilt from its source text) is in ``child_common.py``.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    role = argv[0]
    if role == "candidate":
        from ksmith_triton.candidate_side import main as serve_role
    elif role == "reference":
        from ksmith_triton.reference_side import main as serve_role
    elif role == "forkserver":
        from ksmith_triton.forkserver import serve as serve_role
    else:
        print(f"ksmith_triton.worker: unknown role {role!r}", file=sys.stderr)
        return 2
    return serve_role(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

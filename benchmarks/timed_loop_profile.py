"""Sequential evaluations of the throughput workload's seeds (benchmarks/eval_protocol.py), one at a time, for
an external sampling profiler to see where a candidate worker's timed loop spends its host time:

    py-spy record --subprocesses --nonblocking -r 400 --format raw -o stacks.txt -- \\
        python benchmarks/timed_loop_profile.py 3

The first pass fills the reference cache; each of the ROUNDS passes after it evaluates every seed once and
prints its timed loop's parts (ms, summed over its calls). ``py-spy --native`` crashed on the H100 machine
(py-spy 0.4.3): only Python frames are attributed.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_protocol import DEFAULT_PROBLEMS, THROUGHPUT_PROBLEMS, pairs_in  # noqa: E402


def main() -> int:
    from ksmith_core.model import EvalOptions
    from ksmith_triton.evaluator import evaluate

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    options = EvalOptions(device="cuda", timing_trials=100, cache_dir=tempfile.mkdtemp())
    pairs = [(p, s) for p, s in pairs_in(DEFAULT_PROBLEMS) if p.name in THROUGHPUT_PROBLEMS]
    for problem, seed in pairs:
        evaluate(problem, seed, options)  # the references, cached
    print("warm", flush=True)
    for _ in range(rounds):
        for problem, seed in pairs:
            verdict = evaluate(problem, seed, options)
            timing = verdict.details.get("timing", {})
            print(problem.name, verdict.status.value, timing.get("calls"), timing.get("loop_ms"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

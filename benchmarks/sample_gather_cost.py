"""Host time of the after-call check's sample gather (``TimedCallCheck.queue``) in a bare process, each variant
with the GPU busy (a spin queued before it, as behind a timed call):

    python benchmarks/sample_gather_cost.py

``allocating`` is the gather as it was (positions pinned, copied to the GPU, gathered, copied back to new
pinned memory); ``reused buffers`` is ``candidate_side.GatherBuffers``; the rest are its steps alone.
"""

from __future__ import annotations

import time

import torch

from ksmith_triton.candidate_side import GatherBuffers
from ksmith_triton.child_common import SAMPLES_PER_OUTPUT, sample_positions

CALLS = 2000


def main() -> None:
    torch.set_num_threads(1)
    out = torch.randn(16 * 2**20, device="cuda")
    buffers = GatherBuffers(out, SAMPLES_PER_OUTPUT)
    positions, values = buffers.positions, buffers.values

    def allocating(seed):
        (where,) = sample_positions(seed, [out.numel()])
        where = where.pin_memory().to(out.device, non_blocking=True)
        return torch.take(out, where).to("cpu", non_blocking=True)

    def reused(seed):
        (where,) = sample_positions(seed, [out.numel()])
        return buffers.gather(out, where)

    variants = (
        ("allocating", allocating),
        ("reused buffers", reused),
        ("positions", lambda seed: sample_positions(seed, [out.numel()])),
        ("pin_memory", lambda seed: sample_positions(seed, [out.numel()])[0].pin_memory()),
        ("take", lambda seed: torch.take(out, positions)),
        ("to cpu non_blocking", lambda seed: values.to("cpu", non_blocking=True)),
        ("allocating", allocating),
    )
    for name, variant in variants:
        total = 0.0
        for seed in range(CALLS):
            torch.cuda._sleep(200000)
            begin = time.perf_counter()
            variant(seed)
            total += time.perf_counter() - begin
            torch.cuda.synchronize()
        print(f"{name:22s} {total / CALLS * 1e6:8.1f} us per call")


if __name__ == "__main__":
    main()

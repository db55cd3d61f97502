"""The memory a timing takes is asked of the driver before the exclusive hold (``reserve_for_timing``): inside
the hold every ``cudaMalloc`` or ``cudaHostAlloc`` can wait behind another process's new CUDA context. After
the reservation, the worker's timing loop -- staging copies, L2 flush, fresh inputs, outputs, the sample
gathers and the full checks' copies -- asks the driver for nothing."""

from __future__ import annotations

import pytest
import torch

from ksmith_triton.candidate_side import TimedCallCheck, release_cached_memory, reserve_for_timing
from ksmith_triton.timing import driver_allocations, reference_timers, time_calls


def test_off_the_gpu_nothing_is_reserved():
    assert reserve_for_timing("cpu", 1 << 30, [{"dtype": "torch.float32", "shape": [8]}]) is None


@pytest.mark.gpu
def test_after_the_reservation_the_timing_asks_the_driver_for_no_memory(tmp_path):
    sent: list[dict] = []

    class Channel:
        def send(self, kind, **fields):
            sent.append(fields)

    def make(seed: int) -> list[torch.Tensor]:
        generator = torch.Generator(device="cuda").manual_seed(seed)
        return [torch.randn(n, 1024, device="cuda", generator=generator) for n in (1024, 512)]

    def forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w.T)  # a new output each call

    # The trials, as the worker runs them: their sets, a poison block and outputs alive at once, then given back.
    torch.cuda.synchronize()
    release_cached_memory("cuda")
    torch.cuda.reset_peak_memory_stats()
    sets = [make(seed) for seed in range(3)]
    poison = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
    outputs = [forward(*inputs) for inputs in sets]
    described = [{"dtype": str(out.dtype), "shape": list(out.shape)} for out in outputs[:1]]
    del poison, outputs
    release_cached_memory("cuda")
    free = reserve_for_timing("cuda", torch.cuda.max_memory_reserved(), described)
    assert free is not None and free > 0

    timers = reference_timers("cuda")
    check = TimedCallCheck(Channel(), timers["urandom"], tmp_path, False, 30, device="cuda", free_bytes=free)
    before = driver_allocations()
    timed = time_calls(
        "cuda",
        forward,
        sets,
        timers,
        30,
        4,
        check,
        make,
        before_wait=check.queue,
        after_wait=check.keep,
    )
    assert sent and len(sent) == len(timed.samples_ms)
    assert -1 in timed.sets  # fresh inputs were made inside the loop
    assert check.full  # and at least one full copy of the outputs kept
    assert timed.allocations == {"device_warmup": 0, "device_calls": 0, "host_warmup": 0, "host_calls": 0}
    assert driver_allocations()["device"] == before["device"]

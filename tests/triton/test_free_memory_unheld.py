"""The worker reads the GPU's free memory while it holds no GPU lock: before the trials (``free_memory_unheld``),
whose poison blocks are sized from it, and before the timing (``reserve_for_timing``), whose full checks' copies
are bounded by it. Inside the holds the query can wait behind another process's new CUDA context. And the timed
loop's own kernels are loaded inside the trials' shared hold (``load_timing_kernels``), not on their first launch
inside the exclusive one."""

from __future__ import annotations

import os

import pytest
import torch

from ksmith_triton import candidate_side
from ksmith_triton.candidate_side import TimedCallCheck, free_memory_unheld


def test_off_the_gpu_there_is_nothing_to_read():
    assert free_memory_unheld("cpu") is None


def test_a_check_given_the_free_memory_does_not_ask_the_driver_again(tmp_path, monkeypatch):
    def asked(*args):
        raise AssertionError("free memory queried inside the hold")

    monkeypatch.setattr(torch.cuda, "mem_get_info", asked)
    check = TimedCallCheck(object(), os.urandom, tmp_path, False, 10, device="cuda", free_bytes=1 << 30)
    assert check.free_bytes == 1 << 30
    assert check._copy_fits([torch.zeros(1024)])  # bounded by what was read before the hold
    assert not check._copy_fits([torch.zeros(2**28)])  # 1 GiB of copies: more than half of it


@pytest.mark.gpu
def test_the_trials_read_the_free_memory_once_and_size_the_poison_block_from_it(monkeypatch):
    free = free_memory_unheld("cuda")
    assert free is not None and 0 < free <= torch.cuda.mem_get_info()[1]
    asked = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: asked.append(1) or (free, free))
    for _ in range(3):
        candidate_side.poison_allocator(8 * 2**20, free)
    assert asked == []  # no query inside the trials' hold


def test_off_the_gpu_no_timing_kernel_is_loaded(monkeypatch):
    launched = []
    monkeypatch.setattr(torch, "empty", lambda *a, **k: launched.append((a, k)))
    monkeypatch.setattr(torch, "zeros", lambda *a, **k: launched.append((a, k)))
    candidate_side.load_timing_kernels("cpu", [{"dtype": "torch.float32"}])
    assert launched == []


@pytest.mark.gpu
def test_the_timing_kernels_load_for_any_output_dtype_and_leave_no_error():
    names = ["torch.float32", "torch.bfloat16", "torch.float16", "torch.int64", "torch.bool", "torch.uint8"]
    names += ["torch.float8_e4m3fn", "torch.complex64", "not-a-dtype", None]
    candidate_side.load_timing_kernels("cuda", [{"dtype": name} for name in names])
    torch.cuda.synchronize()  # no sticky error left on the stream
    assert torch.take(torch.arange(4.0, device="cuda"), torch.tensor([3], device="cuda")).item() == 3.0

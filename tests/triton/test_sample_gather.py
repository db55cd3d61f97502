"""After every timed call the check draws sample positions and gathers the output's elements at them -- only
once the loop has waited for the call's kernels (a kernel still running could read positions written to host
memory) -- and on the GPU through buffers it reuses from call to call (``GatherBuffers``): each call's report
must still carry that call's own elements."""

from __future__ import annotations

import os

import pytest
import torch

from ksmith_triton.candidate_side import TimedCallCheck
from ksmith_triton.child_common import decode_values, sample_positions


def test_nothing_of_the_sample_positions_exists_before_the_loop_has_waited_for_the_call(tmp_path):
    """``queue`` runs before the wait, while the call's kernels may still run: it checks the rules and draws
    nothing. The positions' seed is drawn in ``keep`` (after the wait), and the report carries it."""
    draws: list[str] = []

    def urandom(n: int) -> bytes:
        draws.append(stage["now"])
        return os.urandom(n)

    sent: list[dict] = []

    class Channel:
        def send(self, kind, **fields):
            sent.append(fields)

    stage = {"now": "queue"}
    check = TimedCallCheck(Channel(), urandom, tmp_path, False, 10)
    out = torch.randn(3000)
    check.queue(0, out)
    assert draws == [] and check._queued[3] is None and check._queued[4] is None
    stage["now"] = "keep"
    check.keep(0, out, True)
    assert draws and set(draws) == {"keep"}
    check(0, 0, out, True, 0.1, 0.1)
    (where,) = sample_positions(sent[0]["seed"], [out.numel()])
    assert torch.equal(decode_values(sent[0]["samples"][0], out.dtype, where.numel()), out[where])


@pytest.mark.gpu
def test_each_call_s_samples_are_its_own_elements_through_reused_buffers(tmp_path):
    sent: list[dict] = []

    class Channel:
        def send(self, kind, **fields):
            sent.append(fields)

    check = TimedCallCheck(Channel(), os.urandom, tmp_path, False, 10, device="cuda")
    outputs = [
        torch.randn(5000, device="cuda"),
        torch.randn(5000, device="cuda"),  # same slot, dtype and count: the same buffers
        (torch.randn(100, device="cuda").half(), torch.randn(70, 90, device="cuda")),  # new ones
        torch.randn(5000, device="cuda"),
    ]
    for index, out in enumerate(outputs):
        last = index == len(outputs) - 1
        check.queue(index, out)
        torch.cuda.synchronize()  # what the loop does between the two halves
        check.keep(index, out, last)
        check(index, 0, out, last, 0.1, 0.1)
    assert len(sent) == len(outputs)
    for report, out in zip(sent, outputs):
        tensors = list(out) if isinstance(out, tuple) else [out]
        positions = sample_positions(report["seed"], [t.numel() for t in tensors])
        for text, tensor, where in zip(report["samples"], tensors, positions):
            got = decode_values(text, tensor.dtype, where.numel())
            assert torch.equal(got, tensor.flatten().cpu()[where])
    assert set(check.parts_ms()) == {"rules", "positions", "gather", "full", "encode", "send"}

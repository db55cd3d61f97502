"""Fresh inputs are seeded by ``child_common.seed_generators``: what ``torch.manual_seed`` would draw, without
its per-call traceback for backends that never start."""

from __future__ import annotations

import pytest
import torch


def test_seeding_for_inputs_draws_what_torch_manual_seed_draws(monkeypatch):
    """``seed_generators`` replaces ``torch.manual_seed`` before every fresh input set: the same draws, and
    once CUDA is initialised only the CPU generator and each CUDA device's default generator are seeded (no
    other backend's lazy queue, which records a formatted traceback per call)."""
    from ksmith_triton import child_common

    child_common.seed_generators(1234)
    ours = torch.randn(64)
    torch.manual_seed(1234)
    assert torch.equal(ours, torch.randn(64))

    seeded: list[int] = []

    class Generator:
        def manual_seed(self, seed):
            seeded.append(seed)

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "default_generators", (Generator(), Generator()))
    monkeypatch.setattr(torch, "manual_seed", lambda seed: (_ for _ in ()).throw(AssertionError("slow path")))
    child_common.seed_generators(99)
    assert seeded == [99, 99]
    after = torch.randn(64)
    torch.default_generator.manual_seed(99)
    assert torch.equal(after, torch.randn(64))


@pytest.mark.gpu
def test_on_the_gpu_the_inputs_drawn_are_those_torch_manual_seed_gives():
    from ksmith_triton import child_common

    torch.zeros(1, device="cuda")  # CUDA initialised, as in a worker once its first inputs are made
    child_common.seed_generators(7)
    ours = (torch.randn(1000, device="cuda"), torch.randint(0, 9, (100,), device="cuda"), torch.randn(10))
    torch.manual_seed(7)
    theirs = (torch.randn(1000, device="cuda"), torch.randint(0, 9, (100,), device="cuda"), torch.randn(10))
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))

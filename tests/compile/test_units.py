"""The fast parts: where the library is looked for, the registration, how regions are cut."""

from __future__ import annotations

import torch

import ksmith_compile
from ksmith_compile.harvest import find_regions
from ksmith_compile.library import DEFAULT_LIBRARY, library_dirs

from .helpers import dynamo_graph


def test_library_location_from_options_then_environment_then_default(monkeypatch, tmp_path):
    monkeypatch.delenv("KSMITH_LIBRARY", raising=False)
    assert library_dirs() == library_dirs(DEFAULT_LIBRARY)
    monkeypatch.setenv("KSMITH_LIBRARY", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert library_dirs() == [tmp_path / "a", tmp_path / "b"]
    assert library_dirs(str(tmp_path / "c")) == [tmp_path / "c"]
    assert library_dirs([tmp_path / "d"]) == [tmp_path / "d"]


def test_importing_the_package_registers_the_backend():
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("kernelsmith") is ksmith_compile.kernelsmith_backend


def test_regions_are_cut_to_one_output_each():
    w1, w2 = torch.randn(16, 16), torch.randn(16)

    def block(x, attn):
        h = x + attn  # used by the norm and again as the next residual: cut off the norm
        n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w2
        y = torch.nn.functional.linear(n, w1)
        return h + torch.nn.functional.silu(y) * y

    with torch.no_grad():
        gm, _ = dynamo_graph(block, torch.randn(4, 16), torch.randn(4, 16))
    regions = [
        (kind, [n.target if n.op == "call_method" else n.target.__name__ for n in nodes])
        for kind, nodes in find_regions(gm)
    ]
    assert ("fusible", ["pow", "mean", "add", "rsqrt", "mul", "mul"]) in regions
    assert ("matmul", ["linear"]) in regions
    assert ("fusible", ["silu", "mul", "add"]) in regions
    assert not any(names == ["add"] for _, names in regions)  # a lone add is left to Inductor

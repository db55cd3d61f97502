"""``torch.compile(model, backend="kernelsmith")`` on a real Llama-style decoder from transformers."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("transformers")

import ksmith_compile  # noqa: E402
from ksmith_compile import Recorder, load_library  # noqa: E402

from .helpers import tiny_llama, triton_launches  # noqa: E402

pytestmark = pytest.mark.slow  # each test compiles with Inductor on CPU


def compiled_forward(model, inputs, **options):
    torch._dynamo.reset()
    with torch.no_grad(), Recorder() as recorder:
        out = torch.compile(model, backend="kernelsmith", options=options)(*inputs)
    return out, recorder


def test_evolved_norms_are_swapped_into_the_decoder_ran_and_match_eager(library_dir, caplog):
    model, inputs = tiny_llama()
    with torch.no_grad():
        want = model(*inputs)
    entry = load_library(library_dir).entries[0]
    caplog.set_level(logging.INFO, logger="ksmith_compile")
    torch._dynamo.reset()
    options = {"library": str(library_dir), "log_swaps": 1, "split_fusions": 1}
    compiled = torch.compile(model, backend="kernelsmith", options=options)
    with torch.no_grad(), Recorder() as recorder, triton_launches(entry) as launched:
        compiled(*inputs)
        before = len(launched)
        got = compiled(*inputs)
    # The layer's two norms and the final norm (split_fusions: also the two that follow a residual add): three
    # swaps, each launching the evolved kernel once a forward.
    assert [r.swapped for r in recorder.regions if r.entry] == [True, True, True]
    assert len(launched) - before == 3
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    swaps = [r.getMessage() for r in caplog.records if r.name == "ksmith_compile"]
    assert len(swaps) == 3 and all("llama_rmsnorm@" in m and "swapped for kernelsmith::" in m for m in swaps)


def test_swaps_are_logged_only_when_asked(library_dir, caplog):
    model, inputs = tiny_llama()
    caplog.set_level(logging.INFO, logger="ksmith_compile")
    _, recorder = compiled_forward(model, inputs, library=str(library_dir), split_fusions=1)
    assert [r.swapped for r in recorder.regions if r.entry] == [True, True, True]
    assert [r for r in caplog.records if r.name == "ksmith_compile"] == []


def test_a_norm_inductor_would_fuse_with_the_residual_add_before_it_is_left_to_inductor(library_dir):
    model, inputs = tiny_llama()
    with torch.no_grad():
        want = model(*inputs)
    entry = load_library(library_dir).entries[0]
    with triton_launches(entry) as launched:
        got, recorder = compiled_forward(model, inputs, library=str(library_dir))
    matched = [(r.region.split("@")[1], r.swapped, r.reason) for r in recorder.regions if r.entry]
    # The first norm reads the embedding (no fusion to split); the post-attention and the final norm read a
    # residual add that Inductor fuses into the norm's kernel.
    assert [(node, swapped) for node, swapped, _ in matched] == [
        ("hidden_states_2", True), ("hidden_states_8", False), ("hidden_states_12", False)
    ]  # fmt: skip
    assert all(
        reason.startswith("would split Inductor's fusion with") and "(add) before it" in reason
        for _, swapped, reason in matched
        if not swapped
    ), matched
    assert len(launched) == 1
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_without_a_matching_entry_the_output_is_inductors(tmp_path):
    model, inputs = tiny_llama()
    with pytest.warns(ksmith_compile.LibraryWarning, match="does not exist"):
        got, recorder = compiled_forward(model, inputs, library=str(tmp_path / "none"))
    assert recorder.regions and all(r.reason == "no library entry" for r in recorder.regions)
    torch._dynamo.reset()
    with torch.no_grad():
        want = torch.compile(model, backend="inductor")(*inputs)
    assert torch.equal(got, want)


def test_a_broken_entry_leaves_a_model_that_compiles_and_is_right(library_copy):
    kernel = library_copy / "llama_rmsnorm" / "kernel.py"
    kernel.write_text(kernel.read_text().replace("/ n_cols + eps", "/ n_cols * 0.5 + eps"))
    model, inputs = tiny_llama()
    with torch.no_grad():
        want = model(*inputs)
    with pytest.warns(ksmith_compile.LibraryWarning, match="llama_rmsnorm.*disagrees with its reference"):
        got, recorder = compiled_forward(model, inputs, library=str(library_copy))
    assert not any(r.swapped or r.entry for r in recorder.regions)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_the_backend_is_found_by_name_with_no_ksmith_import(library_dir, tmp_path):
    script = textwrap.dedent(
        f"""
        import os, sys
        os.environ["TRITON_INTERPRET"] = "1"
        import torch
        f = lambda x: torch.relu(x) * 2
        x = torch.randn(8)
        out = torch.compile(f, backend="kernelsmith", options={{"library": {str(library_dir)!r}}})(x)
        assert torch.equal(out, torch.relu(x) * 2)
        print("ksmith_compile" in sys.modules)
        """
    )
    # Run elsewhere than the checkout: a stale ``*.egg-info`` there would hide the installed entry points.
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_graph_breaks_and_recompiles_swap_where_the_guards_hold_and_stay_right(library_dir):
    import importlib.util

    from .conftest import DATA

    spec = importlib.util.spec_from_file_location("ksmith_test_llama_rmsnorm", DATA / "llama_rmsnorm.py")
    problem = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = problem  # Dynamo looks classes up by module name
    spec.loader.exec_module(problem)

    class TwoNorms(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = problem.Model(64, 1e-6), problem.Model(64, 1e-6)

        def forward(self, x):
            y = self.first(x)
            torch._dynamo.graph_break()
            return self.second(y * 2)

    torch.manual_seed(0)
    model = TwoNorms().eval()
    entry = load_library(library_dir).entries[0]
    torch._dynamo.reset()
    options = {"library": str(library_dir), "split_fusions": 1}  # the second norm reads y * 2
    compiled = torch.compile(model, backend="kernelsmith", options=options)
    with torch.no_grad(), Recorder() as recorder, triton_launches(entry) as launched:
        for shape in ((2, 8, 64), (3, 8, 64)):  # the second shape recompiles, outside the verified one
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    matched = [(r.graph, r.swapped) for r in recorder.regions if r.entry]
    assert recorder.graphs >= 4 and matched[:2] == [(0, True), (1, True)]
    assert not any(swapped for _, swapped in matched[2:])
    assert len(launched) == 2  # one launch per graph at the verified shape, none at the other

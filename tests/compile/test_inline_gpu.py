"""On a GPU, library entries are swapped in as ``triton_op``s that Inductor traces into its own generated code:
the evolved kernel is launched from there, with no Python custom-op call around it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from ksmith_compile import Recorder, load_library

from .conftest import evolved_library
from .helpers import tiny_llama

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return evolved_library(tmp_path_factory.mktemp("cuda_library"), "cuda")


def _kernel_names(entry) -> list[str]:
    import sys

    module = sys.modules[type(entry.kernel).__module__]
    return [obj.fn.__name__ for obj in vars(module).values() if hasattr(obj, "fn") and hasattr(obj, "run")]


def _launched(fn, *args) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def test_the_entry_is_a_triton_op_inductor_inlines_and_its_kernel_runs(cuda_library):
    from torch._inductor.utils import run_and_get_code

    entry = load_library(cuda_library).entries[0]
    assert entry.op.name().endswith("_inline"), entry.inline_reason
    names = _kernel_names(entry)
    assert names
    model, inputs = tiny_llama()
    model, inputs = model.cuda(), [t.cuda() for t in inputs]
    with torch.no_grad():
        want = model(*inputs)
        torch._dynamo.reset()
        with Recorder() as recorder:
            compiled = torch.compile(
                model,
                backend="kernelsmith",
                options={"library": str(cuda_library), "min_speedup": 0, "split_fusions": 1},
            )
            got, codes = run_and_get_code(compiled, *inputs)
        assert [r.swapped for r in recorder.regions if r.entry] == [True, True, True]
        code = "\n".join(codes)
        assert "kernelsmith" not in code  # no opaque op call left in Inductor's wrapper
        assert any(name in code for name in names)  # the evolved kernel's source is in Inductor's code
        assert entry.inlined > 0 and entry.calls == 0
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        launched = _launched(compiled, *inputs)
        assert any(name in k for k in launched for name in names), launched
        torch._dynamo.reset()
        plain = torch.compile(model, backend="inductor")
        plain(*inputs)
        assert not any(name in k for k in _launched(plain, *inputs) for name in names)


def test_groups_of_projections_swap_in_on_the_gpu(tmp_path):
    """The gate/up pair and the q/k/v group, harvested on the GPU, evolved (budget 1), exported and swapped into
    the decoder: one kernel each, outputs as eager's. The q/k/v entry returns a list of tensors."""
    from .conftest import DATA

    groups, library = _harvested_library(DATA / "tiny_llama.py", tmp_path, lambda ops: "rsqrt" not in ops)
    assert sorted(p["ops"] for p in groups) == [
        ["linear", "linear", "linear"],
        ["linear", "silu", "linear", "mul"],
    ]
    assert sorted(e.outputs for e in load_library(library).entries) == [1, 3]
    got, want, recorder = _compiled(tiny_llama(), library)
    assert sorted(r.entry for r in recorder.regions if r.swapped) == sorted(p["problem"] for p in groups)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_norms_swap_in_with_their_groups_on_the_gpu(tmp_path):
    """In the float16 decode step, the norms before q/k/v (alone, and with the residual add before it) and before
    gate/up, harvested on the GPU, evolved (budget 1), exported and swapped in: each norm goes into the kernel
    of the group it feeds, inlined into Inductor's code; outputs within float16's tolerance of eager's (a
    different summation order than cuBLAS moves the last bit, where Inductor, calling cuBLAS, may match)."""
    from .conftest import DATA
    from .helpers import load_model_file

    def chosen(ops: list[str]) -> bool:  # the q/k/v norms, and the gate/up norm without the add
        return "rsqrt" in ops and (ops[-1] == "linear" or ops[0] != "add")

    groups, library = _harvested_library(DATA / "tiny_llama_decode.py", tmp_path, chosen)
    assert len(groups) == 3
    entries = load_library(library).entries
    assert all(e.op.name().endswith("_inline") for e in entries), [e.inline_reason for e in entries]
    model_and_inputs = load_model_file(DATA / "tiny_llama_decode.py")
    got, want, recorder = _compiled(model_and_inputs, library)
    swaps = [r.entry for r in recorder.regions if r.swapped]
    # Each layer's two norms, each inside the kernel of the projections it feeds (layer 1's input norm with or
    # without the residual add before it: the entry that saves more on the GPU claims it).
    assert len(swaps) == 4 and set(swaps) <= {p["problem"] for p in groups}, swaps
    torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)  # float16: the problems' tolerance


def test_the_attention_block_swaps_in_inlined_on_the_gpu(tmp_path):
    """A bfloat16 decode step's attention block (head size 128: the seed's tensor-core path, a boolean mask),
    harvested on the GPU, evolved (budget 1), exported: Inductor compiles the entry's operator (its check at
    load), inlines it in both layers, and the outputs are eager's within the problem's tolerance."""
    from .helpers import load_model_file
    from .test_attention import HALF_LLAMA

    model_file = tmp_path / "llama.py"
    model_file.write_text(HALF_LLAMA.format(batch=8, seq=1).replace(".half()", ".bfloat16()"))
    blocks, library = _harvested_library(model_file, tmp_path, lambda ops: True, kind="attention")
    (entry,) = load_library(library).entries
    assert entry.op.name().endswith("_inline"), entry.inline_reason
    got, want, recorder = _compiled(load_model_file(model_file), library)
    assert [r.entry for r in recorder.regions if r.swapped] == [blocks[0]["problem"]] * 2
    torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)


def _harvested_library(model_file, tmp_path, chosen, kind="matmuls"):
    """The model's regions of ``kind`` (groups of projections) whose ops ``chosen`` accepts, harvested on the
    GPU, each evolved from its harvested seed (budget 1) and exported into ``tmp_path/lib``."""
    import json

    from ksmith_compile.harvest import harvest

    from .conftest import ksmith

    summary = harvest(model_file, tmp_path / "problems", device="cuda")
    groups = [p for p in summary["problems"] if p["kind"] == kind and chosen(p["ops"])]
    for index, group in enumerate(groups):
        run = tmp_path / f"run{index}"
        problem = tmp_path / "problems" / group["file"]
        proc = ksmith("evolve", problem, "--budget", "1", "--device", "cuda", "--run-dir", run, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["best"]["status"] == "ok", group["problem"]
        proc = ksmith("export", run, "--target", "library", "-o", tmp_path / "lib")
        assert proc.returncode == 0, proc.stderr
    return groups, tmp_path / "lib"


def _compiled(model_and_inputs, library):
    """The model's output compiled with the library on the GPU, eager's, and what the backend recorded."""
    model, inputs = model_and_inputs
    model, inputs = model.cuda(), [t.cuda() for t in inputs]
    with torch.no_grad():
        want = model(*inputs)
        torch._dynamo.reset()
        with Recorder() as recorder:
            compiled = torch.compile(
                model, backend="kernelsmith", options={"library": str(library), "min_speedup": 0}
            )
            got = compiled(*inputs)
    return got, want, recorder


def test_under_cuda_graphs_pdl_launches_the_swapped_kernels_and_changes_no_result(cuda_library, monkeypatch):
    """``KSMITH_PDL=1`` with ``mode="reduce-overhead"`` on Hopper+: the entry is rewritten (wait first, then let
    the next kernel launch; launched with PDL), swapped as its custom op, and the outputs are eager's."""
    from ksmith_compile.library import pdl_supported

    if not pdl_supported():
        pytest.skip("programmatic dependent launch needs compute capability 9.0+")
    library = load_library(cuda_library, pdl=True)
    assert library.entries and all(e.inline_reason.startswith("launched with PDL") for e in library.entries)
    module = sys.modules[type(library.entries[0].kernel).__module__]
    assert "gdc_wait" in Path(module.__file__).read_text()
    model, inputs = tiny_llama()
    model, inputs = model.cuda(), [t.cuda() for t in inputs]
    monkeypatch.setenv("KSMITH_LIBRARY", str(cuda_library))
    monkeypatch.setenv("KSMITH_PDL", "1")
    monkeypatch.setenv("KSMITH_MIN_SPEEDUP", "0")
    monkeypatch.setenv("KSMITH_SPLIT_FUSIONS", "1")
    with torch.no_grad():
        want = model(*inputs)
        torch._dynamo.reset()
        with Recorder() as recorder:
            compiled = torch.compile(model, backend="kernelsmith", mode="reduce-overhead")
            for _ in range(3):  # warm-up, recording, replays
                got = compiled(*inputs)
        assert [r.swapped for r in recorder.regions if r.entry] == [True, True, True]
        assert all("_inline" not in r.reason for r in recorder.regions if r.swapped)
        torch.testing.assert_close(got.clone(), want, atol=1e-4, rtol=1e-4)

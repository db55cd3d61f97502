"""Loading a kernel library: what an entry carries, its check when loaded, its guards, bad libraries."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from ksmith_compile import LibraryWarning, load_library, swap_regions

from .conftest import DATA
from .helpers import dynamo_graph, tiny_llama, triton_launches

pytestmark = pytest.mark.slow  # every test here loads an entry: a Dynamo capture, a check and opcheck


def test_exported_entry_carries_its_problem_and_the_inputs_it_was_verified_on(library_dir):
    entry_dir = library_dir / "llama_rmsnorm"
    assert (entry_dir / "problem.py").read_text() == (DATA / "llama_rmsnorm.py").read_text()
    meta = json.loads((entry_dir / "entry.json").read_text())
    assert meta["problem_file"] == "problem.py"
    assert meta["device"] == "cpu"
    assert meta["verified_inputs"] == [{"shape": [2, 8, 64], "dtype": "float32"}]
    assert meta["verdict"]["status"] == "ok"


def test_a_good_library_loads_with_no_warning(library_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error", LibraryWarning)
        library = load_library(library_dir)
    assert [e.name for e in library.entries] == ["llama_rmsnorm"] and library.skipped == {}
    entry = library.entries[0]
    assert [(s.kind, s.key, s.shape) for s in entry.slots] == [
        ("input", 0, (2, 8, 64)),
        ("param", "weight", (64,)),
    ]


def test_loading_leaves_the_callers_random_stream_alone(library_copy):
    torch.manual_seed(123)
    want = torch.rand(4)
    torch.manual_seed(123)
    assert load_library(library_copy).entries
    assert torch.equal(torch.rand(4), want)


def test_the_operator_runs_the_kernel_inside_its_guards_and_the_reference_outside(library_dir):
    entry = load_library(library_dir).entries[0]
    weight = torch.randn(64)
    for shape, dtype, expect_kernel in (
        ((2, 8, 64), torch.float32, True),
        ((3, 8, 64), torch.float32, False),
        ((2, 8, 64), torch.float64, False),
    ):
        x = torch.randn(shape, dtype=dtype)
        weight = weight.to(dtype)
        with torch.no_grad(), triton_launches(entry) as launched:
            got = entry.op(x, weight)
            want = torch.func.functional_call(entry.reference, {"weight": weight}, (x,))
        assert bool(launched) is expect_kernel
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    x = torch.randn(64, 8, 2).transpose(0, 2)  # the verified shape, not the verified strides
    with torch.no_grad(), triton_launches(entry) as launched:
        got = entry.op(x, weight)
    assert launched == []
    torch.testing.assert_close(got, torch.func.functional_call(entry.reference, {"weight": weight}, (x,)))


@pytest.mark.parametrize("change, expect", [("shape", "shape [3, 8, 64]"), ("grad", "output requires grad")])
def test_a_match_outside_the_guards_is_left_alone_with_the_reason(library_dir, change, expect):
    library = load_library(library_dir)
    model, (ids,) = tiny_llama()
    if change == "shape":
        ids = torch.randint(0, 128, (3, 8))
    with torch.set_grad_enabled(change == "grad"):
        gm, _ = dynamo_graph(model, ids)
        regions = [r for r in swap_regions(gm, library) if r.entry]
    assert len(regions) == 3  # the layer's two norms and the final one: matched, none swapped
    assert not any(r.swapped for r in regions)
    assert all(expect in r.reason for r in regions), [r.reason for r in regions]
    assert not any(n.target == library.entries[0].op for n in gm.graph.nodes)


def test_dynamic_shapes_are_not_swapped(library_dir):
    library = load_library(library_dir)
    model, (ids,) = tiny_llama()
    with torch.no_grad():
        gm, _ = dynamo_graph(model, ids, dynamic=True)
        regions = [r for r in swap_regions(gm, library) if r.entry]
    # dynamic=True makes float attributes (the norm's eps) graph inputs as well as the shapes symbolic: the
    # pattern no longer matches, and a region that did would fail the shape guard. Nothing is swapped.
    assert regions and not any(r.swapped for r in regions)
    assert not any(n.target == library.entries[0].op for n in gm.graph.nodes)
    with torch.no_grad(), torch._dynamo.config.patch(specialize_float=True):
        gm, _ = dynamo_graph(model, ids, dynamic=True)
        regions = [r for r in swap_regions(gm, library) if r.entry]
    assert len(regions) == 3 and not any(r.swapped for r in regions)
    assert all("dynamic shape" in r.reason for r in regions), [r.reason for r in regions]


def test_another_dtype_is_not_swapped(library_dir):
    library = load_library(library_dir)
    model, (ids,) = tiny_llama()
    with torch.no_grad():
        gm, _ = dynamo_graph(model.double(), ids)
        regions = [r for r in swap_regions(gm, library) if r.entry]
    # Llama's norm casts back to the input dtype, so a float64 graph differs from the pattern by a literal.
    assert [(r.swapped, r.reason) for r in regions] == [(False, "no match in this graph")]


def test_an_eps_that_differs_does_not_match(library_dir):
    library = load_library(library_dir)
    model, (ids,) = tiny_llama()
    for module in model.modules():
        if hasattr(module, "variance_epsilon"):
            module.variance_epsilon = 1e-5
    with torch.no_grad():
        gm, _ = dynamo_graph(model, ids)
        regions = [r for r in swap_regions(gm, library) if r.entry]
    assert [(r.region, r.swapped, r.reason) for r in regions] == [
        ("llama_rmsnorm", False, "no match in this graph")
    ]


def _one_warning(record, *fragments):
    messages = [str(w.message) for w in record if issubclass(w.category, LibraryWarning)]
    assert len(messages) == 1, messages
    assert "\n" not in messages[0]
    for fragment in fragments:
        assert fragment in messages[0], messages[0]


def test_a_missing_library_directory_is_one_warning(tmp_path):
    with pytest.warns(LibraryWarning) as record:
        library = load_library(tmp_path / "nowhere")
    _one_warning(record, "nowhere", "does not exist")
    assert library.entries == []


def test_the_default_location_may_be_missing_silently(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LibraryWarning)
        library = load_library(None, explicit=False)
    assert library.entries == []


@pytest.mark.parametrize(
    "breakage, fragment",
    [
        ("wrong_result", "disagrees with its reference"),
        ("no_problem", "problem.py is missing"),
        ("syntax_error", "kernel.py fails to import"),
        ("bad_json", "unreadable"),
        ("other_shapes", "was verified on"),
    ],
)
def test_a_broken_entry_is_one_warning_naming_it_and_is_left_out(library_copy, breakage, fragment):
    entry_dir = library_copy / "llama_rmsnorm"
    kernel = entry_dir / "kernel.py"
    if breakage == "wrong_result":
        source = kernel.read_text()
        kernel.write_text(
            source.replace("tl.sum(x * x, axis=0) / n_cols", "tl.sum(x * x, axis=0) / n_cols * 1.02")
        )
        assert kernel.read_text() != source, "the mutated kernel changed where this test breaks it"
    elif breakage == "no_problem":
        (entry_dir / "problem.py").unlink()
    elif breakage == "syntax_error":
        kernel.write_text(kernel.read_text() + "\ndef broken(:\n")
    elif breakage == "bad_json":
        (entry_dir / "entry.json").write_text("{not json")
    elif breakage == "other_shapes":
        problem = entry_dir / "problem.py"
        problem.write_text(problem.read_text().replace("seq_len = 8", "seq_len = 4"))
    with pytest.warns(LibraryWarning) as record:
        library = load_library(library_copy)
    _one_warning(record, "llama_rmsnorm", fragment)
    assert library.entries == [] and list(library.skipped) == ["llama_rmsnorm"]


def test_an_entry_measured_slower_than_torch_compile_is_not_swapped_unless_asked(library_copy):
    entry_json = library_copy / "llama_rmsnorm" / "entry.json"
    meta = json.loads(entry_json.read_text())
    meta["verdict"].update(interpreted=False, speedup_vs_compile=0.8)  # as a GPU evaluation would record it
    entry_json.write_text(json.dumps(meta))
    library = load_library(library_copy)
    model, (ids,) = tiny_llama()
    with torch.no_grad():
        gm, _ = dynamo_graph(model, ids)
        kept = [r for r in swap_regions(gm, library, split_fusions=True) if r.entry]
        gm, _ = dynamo_graph(model, ids)
        swapped = [r for r in swap_regions(gm, library, min_speedup=0.5, split_fusions=True) if r.entry]
    assert [(r.swapped, r.reason) for r in kept] == [
        (False, "0.8x vs torch.compile on its problem (< 1)")
    ] * 3
    assert [r.swapped for r in swapped] == [True, True, True]


def test_a_match_whose_inner_values_are_used_elsewhere_is_not_replaced(library_dir):
    library = load_library(library_dir)
    weight = torch.randn(64)

    def norm_and_its_variance(x, w):
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        out = w * (h * torch.rsqrt(variance + 1e-06)).to(x.dtype)
        return out, variance  # the pattern's inner value leaves the region

    x = torch.randn(2, 8, 64)
    with torch.no_grad():
        gm, inputs = dynamo_graph(norm_and_its_variance, x, weight)
        regions = [r for r in swap_regions(gm, library) if r.entry]
    assert [(r.swapped, r.reason) for r in regions] == [(False, "no match in this graph")]
    got = gm(*inputs)
    want = norm_and_its_variance(x, weight)
    torch.testing.assert_close(tuple(got), want)
    with torch.no_grad():  # the control: the same code, the variance not returned, is swapped
        gm, _ = dynamo_graph(lambda x, w: norm_and_its_variance(x, w)[0], x, weight)
        assert [r.swapped for r in swap_regions(gm, library) if r.entry] == [True]


def test_an_entry_failing_opcheck_is_one_warning_and_left_out(library_copy, monkeypatch):
    calls = []

    def failing_opcheck(op, args, *rest, **kwargs):
        calls.append(op)
        return {"test_schema": "SUCCESS", "test_faketensor": "fake output differs"}

    monkeypatch.setattr(torch.library, "opcheck", failing_opcheck)
    with pytest.warns(LibraryWarning) as record:
        library = load_library(library_copy)
    _one_warning(record, "llama_rmsnorm", "torch.library.opcheck failed: test_faketensor")
    assert library.entries == [] and len(calls) == 1


def test_two_norms_in_a_row_are_both_swapped_and_right(library_dir):
    library = load_library(library_dir)
    weights = torch.randn(64), torch.randn(64)

    def norm(x, w):
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        return w * (h * torch.rsqrt(variance + 1e-06)).to(x.dtype)

    def twice(x, w1, w2):
        return norm(norm(x, w1), w2)  # the second match's input is the first match's output

    x = torch.randn(2, 8, 64)
    with torch.no_grad():
        gm, inputs = dynamo_graph(twice, x, *weights)
        regions = [r for r in swap_regions(gm, library, split_fusions=True) if r.entry]
        assert [r.swapped for r in regions] == [True, True]
        got = gm(*inputs)
    torch.testing.assert_close(got[0] if isinstance(got, (tuple, list)) else got, twice(x, *weights))
    assert sum(n.target == library.entries[0].op for n in gm.graph.nodes) == 2

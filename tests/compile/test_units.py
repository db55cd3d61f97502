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


def test_several_outputs_leave_the_operator_in_memory_of_their_own():
    """A custom op's outputs may not alias its inputs or each other, nor be strided views: views of one buffer
    (q, k and v written side by side) and a returned input are copied; separate outputs are kept as they are."""
    from ksmith_compile.library import _separate

    x = torch.randn(4, 8)
    fused = torch.randn(4, 24)
    q, k, v = fused[:, :8], fused[:, 8:16], fused[:, 16:]
    top, bottom = fused.view(-1)[:48].view(4, 12), fused.view(-1)[48:].view(4, 12)  # contiguous, one buffer
    own = torch.randn(4, 8)
    given = [q, k, v, x, own, top, bottom]
    outs = _separate(given, [x])
    assert all(o.is_contiguous() for o in outs)
    assert outs[4] is own
    for i, a in enumerate(outs):
        assert not torch._C._is_alias_of(a, x)
        assert not any(torch._C._is_alias_of(a, b) for b in outs[i + 1 :])
    for got, want in zip(outs, given):
        assert torch.equal(got, want)


def test_the_rms_norm_seeds_read_is_llamas_form_exactly():
    """The seeds normalise as Llama's RMSNorm does; a norm that squares the input before its upcast, or is not
    followed by the weight product, gets no seed."""
    from ksmith_compile.seeds import rms_norm

    def llama(x, w):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        return w * h.to(x.dtype)

    def squares_the_input(x, w):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
        return w * h.to(x.dtype)

    def no_weight(x, w):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        return h.to(x.dtype) + w

    found = {}
    for fn in (llama, squares_the_input, no_weight):
        with torch.no_grad():
            gm, _ = dynamo_graph(
                fn, torch.randn(4, 16, dtype=torch.float16), torch.randn(16, dtype=torch.float16)
            )
        ((_, nodes),) = [(kind, nodes) for kind, nodes in find_regions(gm) if kind == "fusible"]
        found[fn.__name__] = rms_norm(nodes)
    source, weight, eps = found["llama"]
    assert (source.name, weight.name, eps) == ("l_x_", "l_w_", 1e-5)
    assert found["squares_the_input"] is None and found["no_weight"] is None


def test_without_cuda_graphs_an_opaque_gpu_entry_is_swapped_only_where_it_saves_more_than_its_call():
    """In the default mode a decode step is bound by the host: a GPU entry Inductor could not inline runs as a
    custom op whose Python call (about 0.1 ms, docs/benchmarks.md §11) outweighs a few microseconds saved."""
    from types import SimpleNamespace

    from ksmith_compile.backend import OPAQUE_CALL_MS, _cuda_graphs, _host_cost

    def entry(
        device="cuda", inline_reason="not inlined (opcheck ...); swapped as an opaque custom op", saving=None
    ):
        return SimpleNamespace(device_type=device, inline_reason=inline_reason, saving_ms=saving)

    assert "3.3 us" in _host_cost(entry(saving=0.0033))
    assert "unmeasured" in _host_cost(entry(saving=None))
    assert _host_cost(entry(saving=OPAQUE_CALL_MS * 5)) is None  # a long kernel: the call is worth it
    assert _host_cost(entry(inline_reason="")) is None  # inlined: launched from Inductor's code
    assert _host_cost(entry(device="cpu", inline_reason="the Triton interpreter ...")) is None
    assert not _cuda_graphs(None) and not _cuda_graphs("default")
    assert not _cuda_graphs("max-autotune-no-cudagraphs")
    assert _cuda_graphs("reduce-overhead") and _cuda_graphs("max-autotune")


def test_inlining_needs_every_static_check_and_a_dynamic_trace_that_does_not_fail():
    """At dynamic shapes the guards send the op to the reference by design: outputs that differ from the
    kernel's by rounding there do not keep a kernel out of Inductor's code; any other failure does."""
    from ksmith_compile.library import _STATIC_CHECKS, inline_check_failure

    @torch.library.custom_op("ksmith_test::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    twice.register_fake(lambda x: torch.empty_like(x))
    x = torch.randn(4, 3)
    static = torch.library.opcheck(twice, (x,), test_utils=_STATIC_CHECKS, raise_exception=False)
    dynamic = torch.library.opcheck(
        twice, (x,), test_utils="test_aot_dispatch_dynamic", raise_exception=False
    )
    assert set(static) == set(_STATIC_CHECKS) and inline_check_failure(static, dynamic) is None
    differ = AssertionError(
        "Outputs of the operator are different in eager-mode PyTorch vs AOTDispatcher tracing. This means ..."
    )
    assert inline_check_failure(static, {"test_aot_dispatch_dynamic": differ}) is None
    broken = RuntimeError("could not trace")
    assert "could not trace" in inline_check_failure(static, {"test_aot_dispatch_dynamic": broken})
    assert "test_aot_dispatch_static" in inline_check_failure(
        {**static, "test_aot_dispatch_static": differ}, dynamic
    )


def test_an_entry_is_checked_outside_the_compilation_that_loads_it():
    """The backend loads the library while Dynamo compiles the model. Traced there, ``opcheck``'s static-shape
    test sees symbolic sizes (Dynamo's fake mode), so an entry's guards send the traced call to the reference
    and a kernel that rounds otherwise reads as "outputs differ"; checked outside the compilation it passes."""
    from ksmith_compile.library import outside_compilation

    def guarded(
        x: torch.Tensor,
    ) -> torch.Tensor:  # as an entry's operator: the kernel only at exact int sizes
        return x * 2 if all(isinstance(s, int) for s in x.shape) else x * 2 + 0.5

    op = torch.library.triton_op("ksmith_test::guarded", guarded, mutates_args=())
    x = torch.randn(8, 16)
    verdicts = {}

    def static_check() -> object:
        report = torch.library.opcheck(op, (x,), test_utils="test_aot_dispatch_static", raise_exception=False)
        return report["test_aot_dispatch_static"]

    def backend(gm, example_inputs):
        verdicts["inside"] = static_check()
        with outside_compilation():
            verdicts["outside"] = static_check()
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda a: a.sin(), backend=backend)(torch.randn(3))
    assert static_check() == "SUCCESS"
    assert "Outputs of the operator are different" in str(verdicts["inside"])
    assert verdicts["outside"] == "SUCCESS"


def test_inlining_needs_inductor_to_compile_the_operator_alone(monkeypatch):
    """``opcheck`` traces an operator but does not lower it: the operator is also compiled alone with Inductor
    (inside the backend's own compilation, as the library loads) and its outputs compared with its own."""
    import torch._inductor.compile_fx as compile_fx_module

    from ksmith_compile.library import inductor_check_failure, outside_compilation

    @torch.library.custom_op("ksmith_test::thrice", mutates_args=())
    def thrice(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    thrice.register_fake(lambda x: torch.empty_like(x))
    x = torch.randn(4, 3)
    verdicts = {}

    def backend(gm, example_inputs):
        with outside_compilation():
            verdicts["inside"] = inductor_check_failure(thrice._opoverload, (x,))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda a: a.cos(), backend=backend)(torch.randn(3))
    assert verdicts["inside"] is None and inductor_check_failure(thrice._opoverload, (x,)) is None

    @torch.library.custom_op("ksmith_test::pair", mutates_args=())
    def pair(x: torch.Tensor) -> list[torch.Tensor]:  # as a group of projections' operator
        return [x * 2, x + 1]

    pair.register_fake(lambda x: [torch.empty_like(x), torch.empty_like(x)])
    assert inductor_check_failure(pair._opoverload, (x,), outputs=2) is None
    assert inductor_check_failure(torch.ops.aten.sqrt.default, (torch.randn(64),)) is None  # NaN in both

    def lowering_fails(*args, **kwargs):
        raise TypeError("torch.bool is not supported by torch.iinfo")

    monkeypatch.setattr(compile_fx_module, "compile_fx", lowering_fails)
    why = inductor_check_failure(thrice._opoverload, (x,))
    assert why.startswith("Inductor cannot compile it: TypeError: torch.bool is not supported")

"""Seeds from Inductor: the Triton code ``torch.compile`` writes for a problem, as a standalone candidate.

``seed_from_inductor`` compiles the problem's ``Model`` with Inductor, reads the generated wrapper and kernels,
and writes a module defining ``ModelNew``:

- each ``@triton.jit`` kernel exactly as Inductor wrote it, without Inductor's autotuning decorator;
- ``ModelNew.__init__`` copied from ``Model.__init__``, so the evaluator's seeded construction builds the
  same parameters;
- ``ModelNew.forward`` translated from the wrapper's ``call``: buffer allocations become
  ``torch.empty_strided(..., device=x.device)`` and every launch passes the configuration Inductor chose
  (``XBLOCK``, ``R0_BLOCK``, ..., ``num_warps``, ``num_stages``) as literal keyword arguments, with a grid that
  reads its block sizes from the launch meta, so the mutate proposer can tune them.

On CUDA, a problem with a matmul or convolution is compiled with Inductor's max-autotune and Triton as its only
GEMM and convolution backend (``gemm_templates="inductor"``, the default): each becomes one of Inductor's own
Triton templates with the epilogue Inductor fused into it, at the configuration its autotuner kept, launched on
the fixed grid Inductor computed for it. Where that cannot make a seed, or with ``gemm_templates="ksmith"``
(always on CPU, where Inductor has no Triton templates), a matmul Inductor hands to a library
(``extern_kernels.mm``, ``bmm``, ``addmm``, ``baddbmm``) becomes a call of ksmith's own tiled Triton GEMM
(``gemm_template.py``), its bias and scaling in the kernel's epilogue; a
convolution handed to cuDNN or oneDNN (``extern_kernels.convolution``) becomes a call of ksmith's implicit-GEMM
Triton convolution (``conv_template.py``), and ATen's fused attention (an eager fallback in Inductor's code) a
call of ksmith's flash-attention kernel (``attention_template.py``); both write straight into the layout
Inductor planned for their output. Where Inductor's output is otherwise not a set of Triton kernels a seed can
launch (another eager fallback, dynamic shapes, ...), :class:`InductorSeedError` says why in one line.

On CUDA the model runs once, so the configuration is the one Inductor's autotuner kept. On CPU nothing can run
Inductor's kernels natively (that needs triton-cpu), so the code is generated with Inductor's Triton CPU
backend without running it, and each launch takes the first configuration of Inductor's heuristics. The
kernels are compiled for the shapes of the inputs they were generated with (Inductor specialises on them), so
a seed made with ``small=True`` is evaluated with the problem's small sizes and one made with ``small=False``
with the full ones.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
import math
import os
import re
import tempfile
import textwrap
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

from ksmith_core.errors import KsmithError
from ksmith_core.model import Problem
from ksmith_inductor.attention_template import ATTENTION_OPS, attention_text
from ksmith_inductor.conv_template import CONV_KEYWORDS, CONV_OP, conv_text
from ksmith_inductor.gemm_template import GEMM_OPS, gemm_text

NO_SEED = "no seed from inductor for this problem"

# Inductor's autotuning decorators whose kernels a seed can launch with one fixed configuration (a template is
# one of its max-autotune GEMM or convolution kernels, compiled for one configuration already).
SUPPORTED_HEURISTICS = ("pointwise", "reduction", "persistent_reduction", "template")
# Who writes the Triton kernel of a matmul or convolution: Inductor's max-autotune templates (CUDA only) or
# ksmith's own templates, in the idiom the mutate proposer's structural edits recognise.
GEMM_TEMPLATES = ("inductor", "ksmith")
# The aten ops whose presence makes a CUDA seed compile with max-autotune templates.
TEMPLATE_OPS = ("mm", "addmm", "bmm", "baddbmm", "convolution")
# The axes of Inductor's grid types; axis ``a`` covers the kernel argument ``{a}numel`` in ``{A}BLOCK`` steps.
GRID_AXES = {"Grid1D": ("x",), "Grid2D": ("x", "y"), "Grid3D": ("x", "y", "z")}
# Grid2DWithYZOverflow folds a y grid above this into z; below it, it is Grid2D.
MAX_Y_GRID = 65535

# The Triton interpreter (CPU) cannot call libdevice; a seed that uses libdevice swaps in these equivalents
# built from tl operations when TRITON_INTERPRET=1.
INTERPRETER_LIBDEVICE = {
    "exp": "lambda x: tl.exp(x)",
    "exp2": "lambda x: tl.exp2(x)",
    "expm1": "lambda x: tl.exp(x) - 1.0",
    "log": "lambda x: tl.log(x)",
    "log2": "lambda x: tl.log2(x)",
    "log1p": "lambda x: tl.log(1.0 + x)",
    "sqrt": "lambda x: tl.sqrt(x)",
    "rsqrt": "lambda x: tl.rsqrt(x)",
    "tanh": "lambda x: 2.0 * tl.sigmoid(2.0 * x) - 1.0",
    "erf": "lambda x: tl.erf(x)",
    "abs": "lambda x: tl.abs(x)",
    "floor": "lambda x: tl.floor(x)",
    "ceil": "lambda x: tl.ceil(x)",
    "trunc": "lambda x: tl.where(x < 0, tl.ceil(x), tl.floor(x))",
    # round half to even: floor(x + 0.5), one less where x + 0.5 is an odd whole number
    "nearbyint": "lambda x: tl.floor(x + 0.5) - tl.where((tl.floor(x + 0.5) == x + 0.5) & "
    "(tl.floor(x + 0.5) % 2 != 0), 1.0, 0.0)",
    "sin": "lambda x: tl.sin(x)",
    "cos": "lambda x: tl.cos(x)",
    "isnan": "lambda x: x != x",
    "isinf": 'lambda x: tl.abs(x) == float("inf")',
}
# The interpreter runs a reduction with a combine function element by element; these tl reductions compute
# the same at numpy speed.
INTERPRETER_HELPERS = {
    "max2": "lambda x, dim: tl.max(x, dim)",
    "min2": "lambda x, dim: tl.min(x, dim)",
    # (best value, smallest index holding it); a NaN beats every number, as in Inductor's combine functions
    "max_with_index": (
        "def max_with_index(value, index, dim):",
        "    nan = value != value",
        "    has_nan = tl.max(nan.to(tl.int8), dim, keep_dims=True) > 0",
        "    best = tl.where(has_nan, nan, value == tl.max(value, dim, keep_dims=True))",
        "    return tl.max(value, dim), tl.min(tl.where(best, index, tl.max(index, dim, keep_dims=True)), dim)",
    ),
    "min_with_index": (
        "def min_with_index(value, index, dim):",
        "    nan = value != value",
        "    has_nan = tl.max(nan.to(tl.int8), dim, keep_dims=True) > 0",
        "    best = tl.where(has_nan, nan, value == tl.min(value, dim, keep_dims=True))",
        "    return tl.min(value, dim), tl.min(tl.where(best, index, tl.max(index, dim, keep_dims=True)), dim)",
    ),
}


class InductorSeedError(KsmithError):
    """Inductor's output for a problem cannot become a seed (or Inductor could not compile it at all)."""


def seed_from_inductor(problem: Problem, device: str, small: bool, gemm_templates: str = "inductor") -> str:
    """The source of a candidate whose kernels are the Triton kernels Inductor generates for ``problem``.

    ``device`` is ``"cuda"`` (compile, run once, read the autotuned configurations) or ``"cpu"`` (generate
    with Inductor's Triton CPU backend; the seed then runs under ``TRITON_INTERPRET=1``). With ``small`` the
    problem's ``KSMITH_SMALL`` sizes apply, as the evaluator applies them. ``gemm_templates`` says whose
    Triton kernels stand for matmuls and convolutions on CUDA (:data:`GEMM_TEMPLATES`); if Inductor's
    templates cannot make a seed, ksmith's are used and the seed's docstring says why.
    """
    import torch

    if device not in ("cpu", "cuda"):
        raise InductorSeedError(f"device must be 'cpu' or 'cuda', not {device!r}")
    if gemm_templates not in GEMM_TEMPLATES:
        raise InductorSeedError(
            f"gemm_templates must be one of {', '.join(GEMM_TEMPLATES)}, not {gemm_templates!r}"
        )
    if device == "cuda" and not torch.cuda.is_available():
        raise InductorSeedError("device 'cuda' was asked for but torch sees no CUDA device")
    module = _load_problem_module(problem, small)
    with torch.random.fork_rng(devices=[]):  # the seeded construction must not reseed the caller
        traced = _trace(module, problem, device)
    return _seed_source(problem, traced, device, gemm_templates)


def _seed_source(problem: Problem, traced: Traced, device: str, gemm_templates: str) -> str:
    """Inductor's templates for the problem's matmuls and convolutions where asked and possible (CUDA), else
    ksmith's, with the reason the templates could not seed in the seed's docstring. An out-of-memory is not
    such a reason: it is raised, so the caller can retry with the GPU to itself."""
    fallback = ""
    if device == "cuda" and gemm_templates == "inductor" and _template_ops(traced.graph):
        # compile_fx rewrites the graph it is given; the fallback compiles the graph as traced
        attempt = replace(traced, graph=copy.deepcopy(traced.graph))
        try:
            generated = _generate(attempt, device, inductor_templates=True)
            return _write_seed(problem, attempt, generated, device)
        except Exception as exc:  # noqa: BLE001 - any failure of the template path falls back, with its reason
            from ksmith_triton.evaluator import memory_failure

            reason = str(exc) if isinstance(exc, InductorSeedError) else _one_line(exc)
            if memory_failure(reason):
                raise
            fallback = reason.removesuffix(f": {NO_SEED}")
    generated = _generate(traced, device)
    return _write_seed(problem, traced, generated, device, fallback)


def _template_ops(graph: Any) -> list[str]:
    """The aten ops of ``graph`` that Inductor's max-autotune can give a Triton template."""
    found = []
    for node in graph.graph.nodes:
        name = getattr(node.target, "__name__", "") if node.op == "call_function" else ""
        op = name.split(".")[0]
        if op in TEMPLATE_OPS and op not in found:
            found.append(op)
    return found


# --------------------------------------------------------------------------------------------------------------
# The problem, traced into one graph whose inputs are (parameters and buffers..., forward inputs...)
# --------------------------------------------------------------------------------------------------------------


@dataclass
class Traced:
    """The model as Inductor sees it: a flat graph and what each of its inputs is called in ``ModelNew``."""

    graph: Any  # torch.fx.GraphModule
    example_inputs: list[Any]
    input_exprs: list[str]  # per graph input: "self.weight" or a forward parameter name
    output_kind: str  # "tensor", "tuple" or "list"
    forward_params: list[str]
    bindings: list[str]  # lines binding locals for parameters whose path is not an attribute chain


def _load_problem_module(problem: Problem, small: bool) -> types.ModuleType:
    module = types.ModuleType("ksmith_seed_problem_" + re.sub(r"\W", "_", problem.name))
    module.__file__ = str(problem.path)
    try:
        exec(compile(problem.source, str(problem.path), "exec"), module.__dict__)
    except Exception as exc:  # noqa: BLE001 - any failure to import is the problem file's
        raise InductorSeedError(f"importing problem {problem.name} failed: {_one_line(exc)}") from exc
    if small:
        for name, value in problem.small_sizes.items():
            setattr(module, name, value)
    return module


def _one_line(exc: BaseException) -> str:
    message = str(exc).strip()
    return f"{type(exc).__name__}: {message.splitlines()[0]}" if message else type(exc).__name__


def _state_access(name: str, is_buffer: bool) -> tuple[str, str | None]:
    """How ``forward`` refers to a parameter or buffer: ``self.ln.weight``, or for ``blocks.0.weight`` a
    local ``blocks_0_weight`` and the line that binds it."""
    if all(part.isidentifier() for part in name.split(".")):
        return "self." + name, None
    local = re.sub(r"\W", "_", name)
    return local, f"{local} = self.{'get_buffer' if is_buffer else 'get_parameter'}({name!r})"


def _trace(module: types.ModuleType, problem: Problem, device: str) -> Traced:
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    model_class = getattr(module, "Model", None)
    if not isinstance(model_class, type):
        raise InductorSeedError(f"problem {problem.name} defines no class Model")
    torch.manual_seed(0)
    init_inputs = list(module.get_init_inputs()) if hasattr(module, "get_init_inputs") else []
    torch.manual_seed(0)
    try:
        with torch.no_grad():
            model = model_class(*init_inputs).to(device)
        torch.manual_seed(0)
        inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in module.get_inputs()]
    except Exception as exc:  # noqa: BLE001
        raise InductorSeedError(f"building problem {problem.name} failed: {_one_line(exc)}") from exc
    for index, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise InductorSeedError(
                f"forward input {index} is a {type(value).__name__}, not a tensor: a seed from inductor "
                "takes tensor inputs only"
            )

    forward_params = _forward_params(model_class, len(inputs))
    named_state = [*model.named_parameters(), *model.named_buffers()]
    state_names = [name for name, _ in named_state]
    state_tensors = [tensor.detach() for _, tensor in named_state]
    buffer_names = {name for name, _ in model.named_buffers()}

    def flat_forward(*flat: Any) -> Any:
        state = dict(zip(state_names, flat[: len(state_names)]))
        return torch.func.functional_call(model, state, tuple(flat[len(state_names) :]))

    example_inputs = [*state_tensors, *inputs]
    with torch.no_grad():
        try:
            reference = flat_forward(*example_inputs)
            graph = make_fx(flat_forward)(*example_inputs)
        except Exception as exc:  # noqa: BLE001
            raise InductorSeedError(f"tracing Model.forward failed ({_one_line(exc)}): {NO_SEED}") from exc
    _inline_scalar_constants(graph)
    if isinstance(reference, torch.Tensor):
        output_kind = "tensor"
    elif type(reference) in (tuple, list) and all(isinstance(t, torch.Tensor) for t in reference):
        output_kind = type(reference).__name__
    else:
        raise InductorSeedError(f"Model.forward returns a {type(reference).__name__}, not tensors: {NO_SEED}")

    accesses = [_state_access(name, name in buffer_names) for name in state_names]
    input_exprs = [expr for expr, _ in accesses] + forward_params
    bindings = [binding for _, binding in accesses if binding]
    return Traced(graph, example_inputs, input_exprs, output_kind, forward_params, bindings)


def _inline_scalar_constants(graph: Any) -> None:
    """A tensor made inside ``forward`` (``torch.tensor(self.constant_value)``) is traced as a constant attribute,
    which Inductor would lift into an extra graph input ``ModelNew`` has no value for; one-element constants
    become ``aten.full`` nodes Inductor folds into its kernels. Larger ones stay (and are refused later)."""
    import torch

    for node in list(graph.graph.nodes):
        if node.op != "get_attr":
            continue
        value = getattr(graph, node.target, None)
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            with graph.graph.inserting_before(node):
                full = graph.graph.call_function(
                    torch.ops.aten.full.default,
                    (list(value.shape), value.item()),
                    {"dtype": value.dtype, "device": value.device},
                )
            for user in list(node.users):
                if user.target is torch.ops.aten.lift_fresh_copy.default:  # a copy of a fresh tensor: itself
                    user.replace_all_uses_with(full)
                    graph.graph.erase_node(user)
            node.replace_all_uses_with(full)
            graph.graph.erase_node(node)
            delattr(graph, node.target)  # a tensor attribute left behind would still be lifted as an input
    graph.recompile()


def _forward_params(model_class: type, n_inputs: int) -> list[str]:
    signature = inspect.signature(model_class.forward)
    params = list(signature.parameters.values())[1:]  # self
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise InductorSeedError(f"Model.forward takes *args or **kwargs: {NO_SEED}")
    if len(params) < n_inputs:
        raise InductorSeedError(
            f"get_inputs() returns {n_inputs} inputs but Model.forward takes {len(params)}"
        )
    return [p.name for p in params[:n_inputs]]


# --------------------------------------------------------------------------------------------------------------
# Inductor: the generated wrapper, its kernels and the configuration each kernel launches with
# --------------------------------------------------------------------------------------------------------------


@dataclass
class LaunchConfig:
    kwargs: dict[str, int]
    num_warps: int
    num_stages: int


@dataclass
class Kernel:
    """One generated Triton kernel: its module source, its jit function's text and how it launches."""

    name: str
    source: str
    heuristic: str
    grid_type: str
    config: LaunchConfig
    params: list[str] = field(default_factory=list)
    constexpr_params: list[str] = field(default_factory=list)
    grid_args: int = 0  # trailing launch arguments that are the grid itself (a template's FixedGrid)


@dataclass
class Generated:
    wrapper: str
    kernels: dict[str, Kernel]


@contextlib.contextmanager
def _inductor_settings(device: str, inductor_templates: bool = False) -> Iterator[None]:
    """Fresh compilation (no cache may hide the generated code); on CPU, Inductor's Triton backend; with
    ``inductor_templates``, max-autotune with Triton as the only GEMM and convolution backend (its templates
    then stand where a library call would, and Inductor fuses epilogues into them)."""
    import torch._inductor.config as inductor_config

    patches: dict[str, Any] = {"force_disable_caches": True}
    if inductor_templates:
        # conv_1x1_as_mm: a 1x1 convolution as an mm gets the GEMM template (else Inductor may keep a library
        # mm for it); persistent TMA templates stay off whatever the environment says, so seeds reproduce
        patches.update(
            {
                "max_autotune": True,
                "max_autotune_gemm_backends": "TRITON",
                "max_autotune_conv_backends": "TRITON",
                "conv_1x1_as_mm": True,
                "triton.enable_persistent_tma_matmul": False,
            }
        )
    with contextlib.ExitStack() as stack:
        if device == "cpu":
            patches["cpu_backend"] = "triton"
            # Inductor hashes the active Triton backend into kernel metadata; without triton-cpu there is no
            # CPU driver to ask, and code generation needs nothing else from it.
            stack.enter_context(
                mock.patch("torch.utils._triton.triton_hash_with_backend", lambda: "KSMITH_CPU_CODEGEN")
            )
            stack.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", message="Could not find an active CPU backend")
        stack.enter_context(inductor_config.patch(patches))
        yield


def _generate(traced: Traced, device: str, inductor_templates: bool = False) -> Generated:
    import torch
    from torch._inductor.graph import GraphLowering
    from torch._inductor.utils import get_code, run_and_get_code

    def compile_graph() -> Any:
        return torch._inductor.compile(traced.graph, traced.example_inputs)

    compiled_modules: list[types.ModuleType] = []
    compile_to_module = GraphLowering.compile_to_module

    def keep_module(graph: Any) -> Any:
        module = compile_to_module(graph)
        compiled_modules.append(module)
        return module

    try:
        with _inductor_settings(device, inductor_templates), torch.no_grad():
            if device == "cpu":
                codes = get_code(compile_graph)
            else:
                with mock.patch.object(GraphLowering, "compile_to_module", keep_module):
                    _, codes = run_and_get_code(lambda: compile_graph()(*traced.example_inputs))
    except Exception as exc:  # noqa: BLE001 - Inductor's own failure, summarised on one line
        raise InductorSeedError(f"Inductor could not compile the model: {_one_line(exc)}") from exc

    wrappers = [code for code in codes if re.search(r"^\s*def call\(", code, re.M)]
    if len(wrappers) != 1:
        raise InductorSeedError(f"Inductor produced {len(wrappers)} compiled graphs, expected one: {NO_SEED}")
    return _described(wrappers[0], device, compiled_modules)


def _described(wrapper: str, device: str, compiled_modules: list[types.ModuleType]) -> Generated:
    """The wrapper's kernels with the configuration each launches with."""
    kernels = {}
    for name, source in _kernel_sources(wrapper).items():
        heuristic = _heuristic_decorator(name, source)
        _check_heuristic(name, heuristic)
        grid_args = 0
        if heuristic == "template":
            config, grid_type, grid_args = _template_config(name, source)
        elif device == "cpu":
            config, grid_type = _heuristic_config(name, source)
        else:
            config, grid_type = _autotuned_config(name, compiled_modules)
        kernels[name] = _describe_kernel(name, source, heuristic, grid_type, config, grid_args)
    return Generated(wrapper, kernels)


def _kernel_sources(wrapper: str) -> dict[str, str]:
    """``{name: module source}`` of every ``name = async_compile.<kind>('name', '''source''', ...)``."""
    tree = ast.parse(wrapper)
    sources: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        func = node.value.func
        if not (isinstance(func, ast.Attribute) and ast.unparse(func.value) == "async_compile"):
            continue
        name = node.targets[0].id if isinstance(node.targets[0], ast.Name) else "?"
        if func.attr != "triton":
            raise InductorSeedError(
                f"Inductor generated {name} as {func.attr} code, not a Triton kernel: {NO_SEED}"
            )
        source = node.value.args[1]
        if not (isinstance(source, ast.Constant) and isinstance(source.value, str)):
            raise InductorSeedError(f"the source of kernel {name} is not a literal: {NO_SEED}")
        sources[name] = source.value
    return sources


def _heuristic_decorator(name: str, source: str) -> str:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                dotted = ast.unparse(target)
                if dotted.startswith("triton_heuristics."):
                    return dotted.removeprefix("triton_heuristics.")
    raise InductorSeedError(f"kernel {name} carries no Inductor heuristics decorator: {NO_SEED}")


def _config_of(config: Any) -> LaunchConfig:
    kwargs = {k: int(v) for k, v in config.kwargs.items() if isinstance(v, int)}
    return LaunchConfig(kwargs, int(config.num_warps), int(config.num_stages))


def _heuristic_config(name: str, source: str) -> tuple[LaunchConfig, str]:
    """Build the kernel's autotuner as Inductor would, without compiling it, and take its first config."""
    # set_driver_to_cpu wants triton-cpu (set_driver_to_gpu, in a kernel generated on CUDA, a GPU); the
    # autotuner object needs nothing from a driver.
    source = "\n".join(
        line for line in source.splitlines() if not re.search(r"set_driver_to_[cg]pu\(\)", line)
    )
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, f"{name}.py")
        with open(path, "w", encoding="utf-8") as file:
            file.write(source)  # triton.jit reads a kernel's source from its file
        namespace: dict[str, Any] = {"__file__": path, "__name__": name}
        exec(compile(source, path, "exec"), namespace)
        tuner = namespace[name]
    if not tuner.configs:
        raise InductorSeedError(f"Inductor's heuristics gave kernel {name} no configuration: {NO_SEED}")
    return _config_of(tuner.configs[0]), tuner.inductor_meta.get("grid_type", "")


def _template_config(name: str, source: str) -> tuple[LaunchConfig, str, int]:
    """A template's one configuration, from its decorator: ``num_warps`` and ``num_stages`` (its block sizes
    are ``tl.constexpr`` assignments in its body), the grid type and how many launch arguments are the grid."""
    decorator = next(
        (
            d
            for d in _kernel_function(name, source).decorator_list
            if isinstance(d, ast.Call) and ast.unparse(d.func) == "triton_heuristics.template"
        ),
        None,
    )
    keywords = {k.arg: k.value for k in decorator.keywords} if decorator else {}
    try:
        num_warps, num_stages = (ast.literal_eval(keywords[k]) for k in ("num_warps", "num_stages"))
        meta = ast.literal_eval(keywords["inductor_meta"]) if "inductor_meta" in keywords else {}
    except (KeyError, ValueError, TypeError, SyntaxError) as exc:
        raise InductorSeedError(
            f"template {name} has a decorator ksmith cannot read ({type(exc).__name__}): {NO_SEED}"
        ) from None
    grid_type = meta.get("grid_type", "")
    extra = list(meta.get("extra_launcher_args", []))
    if grid_type != "FixedGrid" or list(meta.get("fixed_grid", [])) != extra or len(extra) != 3:
        raise InductorSeedError(f"template {name} uses Inductor grid {grid_type or '?'}: {NO_SEED}")
    return LaunchConfig({}, int(num_warps), int(num_stages)), grid_type, len(extra)


def _autotuned_config(name: str, compiled_modules: list[types.ModuleType]) -> tuple[LaunchConfig, str]:
    """The configuration the kernel's autotuner kept when the model ran (one launcher is left then)."""
    tuner = next((getattr(m, name) for m in reversed(compiled_modules) if hasattr(m, name)), None)
    if tuner is None or not hasattr(tuner, "launchers"):
        raise InductorSeedError(f"the compiled kernel {name} was not found after running: {NO_SEED}")
    launchers = tuner.launchers or []
    if len(launchers) == 1:
        config = launchers[0].config
    elif len(tuner.configs) == 1:
        config = tuner.configs[0]
    else:
        raise InductorSeedError(f"kernel {name} ran without settling on one configuration: {NO_SEED}")
    return _config_of(config), tuner.inductor_meta.get("grid_type", "")


def _check_heuristic(name: str, heuristic: str) -> None:
    if heuristic not in SUPPORTED_HEURISTICS:
        raise InductorSeedError(
            f"Inductor generated {name} as a {heuristic or 'custom'} kernel; seeds support pointwise, reduction "
            f"and template kernels: {NO_SEED}"
        )


def _describe_kernel(
    name: str, source: str, heuristic: str, grid_type: str, config: LaunchConfig, grid_args: int = 0
) -> Kernel:
    function = _kernel_function(name, source)
    args = function.args
    params = [a.arg for a in [*args.args, *args.kwonlyargs]]
    constexprs = [
        a.arg
        for a in [*args.args, *args.kwonlyargs]
        if a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr")
    ]
    return Kernel(name, source, heuristic, grid_type, config, params, constexprs, grid_args)


def _kernel_function(name: str, source: str) -> ast.FunctionDef:
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise InductorSeedError(f"the source of kernel {name} does not define it: {NO_SEED}")


# --------------------------------------------------------------------------------------------------------------
# Writing the seed
# --------------------------------------------------------------------------------------------------------------

LAYOUT_CHECK = '''
def _expect_layout(tensor: torch.Tensor, size: tuple, stride: tuple, name: str) -> None:
    """The kernels index with the sizes and strides Inductor compiled them for."""
    if tuple(tensor.shape) != size or any(
        n > 1 and s != want for n, s, want in zip(size, tensor.stride(), stride)
    ):
        raise ValueError(
            f"{name} has size {tuple(tensor.shape)} and stride {tensor.stride()}; "
            f"this seed was generated for size {size} and stride {stride}"
        )
'''


def _write_seed(
    problem: Problem, traced: Traced, generated: Generated, device: str, fallback: str = ""
) -> str:
    kernel_texts, kernel_imports, used_names = _kernel_texts(generated.kernels)
    writer = _ForwardWriter(traced, generated.kernels)
    forward_body = traced.bindings + writer.translate(generated.wrapper)
    kernel_texts += writer.library_texts
    init_text = _init_text(problem)

    libdevice_names = sorted(used_names.get("libdevice", set()))
    missing = [n for n in libdevice_names if n not in INTERPRETER_LIBDEVICE]
    if device == "cpu" and missing:
        raise InductorSeedError(
            f"Inductor's kernels call libdevice.{missing[0]}, which the Triton interpreter cannot run: {NO_SEED}"
        )

    forward_inputs = traced.example_inputs[len(traced.input_exprs) - len(traced.forward_params) :]
    shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in zip(traced.forward_params, forward_inputs))
    chosen = (
        "the configurations Inductor's autotuner kept on CUDA"
        if device == "cuda"
        else "Inductor's first heuristic choice for its Triton CPU backend (not autotuned)"
    )
    lines = [
        f'"""{problem.name}: the Triton kernels Inductor generates for the reference, as a seed.',
        "",
        "Launch configurations are literals to be tuned; they start from",
        f"{chosen}.",
        f"The kernels are compiled for these input shapes only: {shapes}.",
    ]
    if any(kernel.heuristic == "template" for kernel in generated.kernels.values()):
        lines += [
            "Matmuls and convolutions are Inductor's max-autotune Triton templates (epilogues fused), each",
            "with the block sizes its autotuner kept, launched on the grid Inductor computed for them.",
        ]
        if writer.gemms or writer.convolutions:
            lines.append("The library calls Inductor kept beside them are ksmith's templates.")
    elif fallback:
        reason = re.sub(r'\\|"""', "/", fallback)  # it goes into this docstring, which neither may end early
        lines += [
            "Inductor's max-autotune templates could not seed this problem, so matmuls and convolutions are",
            f"ksmith's templates; the reason: {reason}.",
        ]
    lines += ['"""', ""]
    imports = ["import math", "import torch"] if writer.attentions else ["import torch"]
    helper_names = sorted(used_names.get("triton_helpers", set()) & set(INTERPRETER_HELPERS))
    libdevice_names = [n for n in libdevice_names if n in INTERPRETER_LIBDEVICE]
    if libdevice_names or helper_names:
        imports[:0] = ["import os", "import types"]
    for line in [
        *_problem_imports(problem),
        "import triton",
        "import triton.language as tl",
        *kernel_imports,
    ]:
        if line not in imports:
            imports.append(line)
    lines += _sorted_imports(imports)
    if libdevice_names or helper_names:
        lines += ["", "", *_interpreter_block(libdevice_names, helper_names)]
    lines += ["", "", LAYOUT_CHECK.strip("\n")]
    for text in kernel_texts:
        lines += ["", "", text.rstrip("\n")]
    lines += [
        "",
        "",
        "class ModelNew(nn.Module):" if _binds(problem, "nn") else "class ModelNew(torch.nn.Module):",
    ]
    if init_text:
        lines += [init_text.rstrip("\n"), ""]
    lines.append(f"    def forward(self, {', '.join(traced.forward_params)}):")
    lines += ["        " + line if line else "" for line in forward_body]
    return "\n".join(lines).rstrip("\n") + "\n"


def _sorted_imports(imports: list[str]) -> list[str]:
    plain = [line for line in imports if line.startswith("import ")]
    from_ = [line for line in imports if line.startswith("from ")]
    return plain + from_


def _binds(problem: Problem, name: str) -> bool:
    return any(name in _bound_names(node) for node in ast.parse(problem.source).body)


def _bound_names(node: ast.AST) -> set[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        return {node.target.id}
    return set()


def _problem_imports(problem: Problem) -> list[str]:
    """The problem's top-level imports, which ``Model.__init__`` (copied into ``ModelNew``) may need."""
    tree = ast.parse(problem.source)
    return [ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]


def _init_text(problem: Problem) -> str:
    """``Model.__init__`` as written, to stand as ``ModelNew.__init__`` (same parameters, same RNG draws)."""
    tree = ast.parse(problem.source)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    init = next(
        (n for n in (model.body if model else []) if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
        None,
    )
    if init is None:
        return ""
    module_level: set[str] = set()
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            module_level |= _bound_names(node)
    local = {a.arg for a in ast.walk(init.args) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(init) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    used = {n.id for n in ast.walk(init) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    foreign = sorted((used & module_level) - local - {"Model"})
    if foreign:
        raise InductorSeedError(
            f"Model.__init__ uses the problem's module-level name {foreign[0]!r}, which a seed cannot copy: "
            f"{NO_SEED}"
        )
    lines = problem.source.splitlines()
    start = min([init.lineno, *(d.lineno for d in init.decorator_list)]) - 1
    text = "\n".join(lines[start : init.end_lineno])
    text = re.sub(r"\bsuper\(\s*Model\s*,", "super(ModelNew,", text)
    renamed = ast.parse(textwrap.dedent(text))
    if any(isinstance(n, ast.Name) and n.id == "Model" for n in ast.walk(renamed)):
        raise InductorSeedError(f"Model.__init__ refers to Model itself: {NO_SEED}")
    indent = len(text) - len(text.lstrip(" "))
    return "\n".join(("    " + line[indent:]) if line.strip() else "" for line in text.splitlines())


def _kernel_texts(kernels: dict[str, Kernel]) -> tuple[list[str], list[str], dict[str, set[str]]]:
    """Each kernel's jit function text without Inductor's decorator, the imports they need, and which
    attributes of each imported name they use (``{"libdevice": {"exp"}}``)."""
    texts: list[str] = []
    helpers_seen: dict[str, str] = {}
    imports: list[str] = []
    used_attrs: dict[str, set[str]] = {}
    for kernel in kernels.values():
        tree = ast.parse(kernel.source)
        lines = kernel.source.splitlines()
        used = _used_names(tree, used_attrs)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name != kernel.name:
                # a helper the kernel calls (a scan's combine function), shared by name across kernels
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
                text = "\n".join(lines[start : node.end_lineno])
                if helpers_seen.setdefault(node.name, text) != text:
                    raise InductorSeedError(f"two kernels define different helpers {node.name}: {NO_SEED}")
                if text not in texts:
                    texts.append(text)
        function = _kernel_function(kernel.name, kernel.source)
        jit = [d for d in function.decorator_list if ast.unparse(d) in ("triton.jit", "jit")]
        if not jit:
            raise InductorSeedError(f"kernel {kernel.name} is not a @triton.jit function: {NO_SEED}")
        texts.append("\n".join(["@triton.jit", *lines[function.lineno - 1 : function.end_lineno]]))
        for node in tree.body:
            for line in _needed_imports(node, used):
                if line not in imports:
                    imports.append(line)
    return texts, imports, used_attrs


def _used_names(tree: ast.Module, used_attrs: dict[str, set[str]]) -> set[str]:
    """Names the module's functions read in their signatures and bodies (decorators are Inductor's)."""
    used: set[str] = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for part in [node.args, *node.body]:
            for inner in ast.walk(part):
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
                    used.add(inner.id)
                if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name):
                    used_attrs.setdefault(inner.value.id, set()).add(inner.attr)
    return used


def _needed_imports(node: ast.AST, used: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        kept = [a for a in node.names if (a.asname or a.name).split(".")[0] in used]
        if kept and all((a.asname or a.name) not in ("triton", "tl") for a in kept):
            return [ast.unparse(ast.Import(names=kept))]
        return []
    if isinstance(node, ast.ImportFrom):
        kept = [a for a in node.names if (a.asname or a.name) in used]
        if kept:
            return [ast.unparse(ast.ImportFrom(module=node.module, names=kept, level=node.level))]
    return []


def _interpreter_block(libdevice_names: list[str], helper_names: list[str]) -> list[str]:
    """The interpreter's stand-ins for libdevice and for Inductor's combine-function reductions."""
    lines = ['if os.environ.get("TRITON_INTERPRET") == "1":']
    if libdevice_names:
        lines += [
            "    # The Triton interpreter (CPU) has no libdevice: the same functions from tl operations.",
            "    libdevice = types.SimpleNamespace(",
            *[f"        {name}={INTERPRETER_LIBDEVICE[name]}," for name in libdevice_names],
            "    )",
        ]
    if helper_names:
        lines += [
            "    # The interpreter runs a reduction with a combine function element by element; tl's own",
            "    # reductions compute the same result at numpy speed.",
            "    triton_helpers = types.SimpleNamespace(**vars(triton_helpers))",
        ]
        for name in helper_names:
            stand_in = INTERPRETER_HELPERS[name]
            if isinstance(stand_in, str):
                lines.append(f"    triton_helpers.{name} = {stand_in}")
            else:
                lines += ["", *("    " + line for line in stand_in), f"    triton_helpers.{name} = {name}"]
    return lines


@dataclass
class _HeldCall:
    """A library call (convolution, attention) translated into a call of ksmith's kernel, held back until
    Inductor's layout check of its output, the statement that says which strides the code after it reads, so
    the kernel writes into a buffer of exactly that layout (no copy). Attention's result is a tuple whose
    first item is bound (``bufM = bufN[0]``) before the check."""

    result: str  # the wrapper's name for the call's result
    output: str | None  # the output tensor's name: the result itself, or bufM once bound
    helper: str
    args: str
    like: str  # an operand whose dtype the output has (the weight of a convolution, the query of attention)
    returns_tuple: bool

    def waits_for(self, node: ast.stmt) -> bool:
        """Is ``node`` the binding of the output or its layout check (anything else ends the wait)?"""
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            return (
                ast.unparse(call.func) == "assert_size_stride"
                and bool(call.args)
                and ast.unparse(call.args[0]) == self.output
            )
        return isinstance(node, ast.Assign) and self.binds_output(node.value)

    def binds_output(self, value: ast.expr) -> bool:
        """Is ``value`` the ``bufN[0]`` that names a tuple result's output tensor (not yet named)?"""
        return (
            self.returns_tuple
            and self.output is None
            and isinstance(value, ast.Subscript)
            and ast.unparse(value) == f"{self.result}[0]"
        )


class _ForwardWriter:
    """Translates the wrapper's ``call(args)`` into the body of ``ModelNew.forward``."""

    def __init__(self, traced: Traced, kernels: dict[str, Kernel]) -> None:
        self.traced = traced
        self.kernels = kernels
        self.names: dict[str, str] = {}  # Inductor's argN_1 -> expression in ModelNew
        self.device_expr = ""
        self.launches = 0
        # ksmith's GEMM, convolution and attention kernels for Inductor's library calls
        self.library_texts: list[str] = []
        self.gemms = self.convolutions = self.attentions = 0
        self.pending: _HeldCall | None = None

    def translate(self, wrapper: str) -> list[str]:
        call = self._call_function(ast.parse(wrapper))
        body = self._statements(call.body)
        body += self._flush()
        if not self.launches:
            raise InductorSeedError(f"Inductor generated no Triton kernel for this model: {NO_SEED}")
        return body

    @staticmethod
    def _call_function(tree: ast.Module) -> ast.FunctionDef:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "call":
                return node
        raise InductorSeedError(f"Inductor's wrapper has no call function: {NO_SEED}")

    def _statements(self, statements: list[ast.stmt]) -> list[str]:
        out: list[str] = []
        for statement in statements:
            out += self._statement(statement)
        return out

    def _statement(self, node: ast.stmt) -> list[str]:
        if self.pending and not self.pending.waits_for(node):
            return self._flush() + self._statement(node)
        if isinstance(node, ast.Assign) and ast.unparse(node.value) == "args":
            return self._bind_arguments(node)
        if isinstance(node, ast.Delete) or isinstance(node, ast.Pass):
            return []
        if isinstance(node, ast.With):
            return self._statements(node.body)  # device guards: the seed runs where its inputs are
        if isinstance(node, ast.Return):
            return [self._return(node)]
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            return self._call_statement(node.value)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            return self._assignment(node.targets[0].id, node.value)
        raise InductorSeedError(f"cannot translate Inductor's wrapper line {ast.unparse(node)!r}: {NO_SEED}")

    def _bind_arguments(self, node: ast.Assign) -> list[str]:
        target = node.targets[0]
        names = [e.id for e in target.elts] if isinstance(target, (ast.Tuple, ast.List)) else [target.id]
        if len(names) != len(self.traced.input_exprs):
            raise InductorSeedError(
                f"the compiled graph takes {len(names)} inputs, the model has {len(self.traced.input_exprs)}: "
                f"{NO_SEED}"
            )
        self.names = dict(zip(names, self.traced.input_exprs))
        first_input = (
            self.traced.forward_params[0] if self.traced.forward_params else self.traced.input_exprs[0]
        )
        self.device_expr = f"{first_input}.device"
        return []

    def _return(self, node: ast.Return) -> str:
        value = node.value
        items = list(value.elts) if isinstance(value, (ast.Tuple, ast.List)) else [value]
        exprs = [self._expr(item) for item in items if item is not None]
        kind = self.traced.output_kind
        if kind == "tensor":
            if len(exprs) != 1:
                raise InductorSeedError(
                    f"the compiled graph returns {len(exprs)} tensors, Model one: {NO_SEED}"
                )
            return f"return {exprs[0]}"
        if kind == "list":
            return f"return [{', '.join(exprs)}]"
        return f"return ({', '.join(exprs)},)" if len(exprs) == 1 else f"return ({', '.join(exprs)})"

    def _call_statement(self, call: ast.Call) -> list[str]:
        func = ast.unparse(call.func)
        if func == "args.clear" or func.endswith("set_device") or func == "assert_alignment":
            return []
        if func == "assert_size_stride":
            if self.pending and ast.unparse(call.args[0]) == self.pending.output:
                return self._flush(*(ast.unparse(a) for a in call.args[1:3]))
            tensor, size, stride = (self._expr(a) for a in call.args[:3])
            if tensor not in self.traced.forward_params:
                return []  # parameters and buffers have the layout ModelNew.__init__ gave them
            return [f"_expect_layout({tensor}, {size}, {stride}, {tensor!r})"]
        if (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "run"
            and func[: -len(".run")] in self.kernels
        ):
            return self._launch(self.kernels[func[: -len(".run")]], call)
        if func.startswith("extern_kernels.") and func.removeprefix("extern_kernels.") in GEMM_OPS:
            return self._gemm(func.removeprefix("extern_kernels."), call)
        self._refuse_call(func)
        raise InductorSeedError(f"cannot translate Inductor's wrapper call {ast.unparse(call)!r}: {NO_SEED}")

    def _assignment(self, name: str, value: ast.expr) -> list[str]:
        if self.pending and self.pending.binds_output(value):
            self.pending.output = name  # the attention's output tensor, whose layout check comes next
            return []
        if isinstance(value, ast.Call):
            func = ast.unparse(value.func)
            if func == "get_raw_stream":
                return []
            if func == f"extern_kernels.{CONV_OP}":
                return self._convolution(name, value)
            op = func.removeprefix("torch.ops.aten.").removesuffix(".default")
            if func.startswith("torch.ops.aten.") and op in ATTENTION_OPS:
                return self._attention(name, op, value)
            if func.startswith("empty_strided_") and func.removeprefix("empty_strided_") in ("cuda", "cpu"):
                size, stride, dtype = (ast.unparse(a) for a in value.args[:3])
                return [
                    f"{name} = torch.empty_strided({size}, {stride}, dtype={dtype}, device={self.device_expr})"
                ]
            self._refuse_call(func)
        text = self._expr(value)
        return [f"{name} = {text}"]

    def _gemm(self, op: str, call: ast.Call) -> list[str]:
        """``extern_kernels.mm(a, b, out=buf)`` (and bmm, addmm, baddbmm) as a call of ksmith's Triton GEMM."""
        operands, has_bias = GEMM_OPS[op]
        keywords = {k.arg: k.value for k in call.keywords}
        unknown = set(keywords) - {"out", "alpha", "beta"}
        if len(call.args) != len(operands) or "out" not in keywords or unknown:
            raise InductorSeedError(
                f"cannot translate Inductor's wrapper call {ast.unparse(call)!r}: {NO_SEED}"
            )
        named = dict(zip(operands, (self._expr(a) for a in call.args)))
        helper, text = gemm_text(self.gemms, op)
        self.gemms += 1
        self.library_texts.append(text)
        self.launches += 1
        args = [named["a"], named["b"], self._expr(keywords["out"])]
        if has_bias:
            args.append(f"bias={named['bias']}")
            args += [f"{k}={self._expr(keywords[k])}" for k in ("alpha", "beta") if k in keywords]
        return [f"{helper}({', '.join(args)})"]

    def _convolution(self, name: str, call: ast.Call) -> list[str]:
        """``bufN = extern_kernels.convolution(x, w, [bias], stride=..., ..., groups=g)`` as ksmith's Triton
        convolution, held back until Inductor's layout check of ``bufN`` (see :class:`_HeldCall`)."""
        keywords = {k.arg: k.value for k in call.keywords}
        positional = [self._expr(a) for a in call.args]
        if "bias" in keywords and len(positional) == 2:
            positional.append(self._expr(keywords.pop("bias")))
        missing = [k for k in CONV_KEYWORDS if k not in keywords]
        if len(positional) != 3 or missing or set(keywords) - set(CONV_KEYWORDS):
            raise InductorSeedError(
                f"cannot translate Inductor's wrapper call {ast.unparse(call)!r}: {NO_SEED}"
            )
        helper, text = conv_text(self.convolutions)
        self.convolutions += 1
        args = positional + [self._expr(keywords[k]) for k in CONV_KEYWORDS]
        return self._hold(_HeldCall(name, name, helper, ", ".join(args), positional[1], False), text)

    def _attention(self, name: str, op: str, call: ast.Call) -> list[str]:
        """``bufN = torch.ops.aten._scaled_dot_product_*_attention.default(q, k, v, ...)`` as ksmith's Triton
        flash attention, held back until Inductor's layout check of ``bufN[0]``, the only result used."""
        names = ("query", "key", "value", *ATTENTION_OPS[op])
        bound = dict(zip(names, call.args))
        bound.update({k.arg: k.value for k in call.keywords})
        if len(call.args) > len(names) or not {"query", "key", "value"} <= set(bound):
            raise InductorSeedError(
                f"cannot translate Inductor's wrapper call {ast.unparse(call)!r}: {NO_SEED}"
            )
        for mask in ("attn_mask", "attn_bias"):
            if mask in bound and ast.unparse(bound[mask]) != "None":
                raise InductorSeedError(f"aten.{op} with an attention mask or bias: {NO_SEED}")
        if "dropout_p" in bound and ast.unparse(bound["dropout_p"]) not in ("0.0", "0"):
            raise InductorSeedError(f"aten.{op} with dropout: {NO_SEED}")
        args = [self._expr(bound[k]) for k in ("query", "key", "value")]
        for key in ("is_causal", "scale"):
            if key in bound:
                args.append(f"{key}={self._expr(bound[key])}")
        helper, text = attention_text(self.attentions, op)
        self.attentions += 1
        return self._hold(_HeldCall(name, None, helper, ", ".join(args), args[0], True), text)

    def _hold(self, held: _HeldCall, text: str) -> list[str]:
        self.library_texts.append(text)
        self.launches += 1
        self.pending = held
        return []

    def _flush(self, size: str | None = None, stride: str | None = None) -> list[str]:
        """The held-back library call as a call of ksmith's kernel: into a buffer of the size and stride
        Inductor asserts for its output, or, when no check came, into one the helper allocates."""
        held, self.pending = self.pending, None
        if held is None:
            return []
        if size is not None:
            return [
                f"{held.output} = torch.empty_strided({size}, {stride}, dtype={held.like}.dtype, "
                f"device={self.device_expr})",
                f"{held.helper}({held.args}, out={held.output})",
            ]
        lines = [f"{held.result} = {held.helper}({held.args})"]
        if held.returns_tuple and held.output:
            lines.append(f"{held.output} = {held.result}[0]")
        return lines

    def _refuse_call(self, func: str) -> None:
        if func.startswith("extern_kernels."):
            op = func.removeprefix("extern_kernels.")
            raise InductorSeedError(
                f"Inductor computes aten.{op} with an external library call (extern_kernels.{op}), "
                f"not a Triton kernel: {NO_SEED}"
            )
        if func.startswith(("aten.", "torch.ops.")):
            op = func.removeprefix("torch.ops.").removesuffix(".default")
            raise InductorSeedError(
                f"Inductor runs {op} eagerly (a fallback), not as a Triton kernel: {NO_SEED}"
            )

    def _expr(self, node: ast.expr) -> str:
        names = self.names

        class Rename(ast.NodeTransformer):
            def visit_Name(self, name: ast.Name) -> ast.AST:
                if name.id in names:
                    return ast.copy_location(ast.parse(names[name.id], mode="eval").body, name)
                return name

            def visit_Call(self, call: ast.Call) -> ast.AST:
                self.generic_visit(call)
                if ast.unparse(call.func) == "reinterpret_tensor":
                    call.func = ast.parse("torch.as_strided", mode="eval").body
                return call

        for inner in ast.walk(node):
            if isinstance(inner, ast.Call):
                func = ast.unparse(inner.func)
                if func != "reinterpret_tensor":
                    self._refuse_call(func)
                    raise InductorSeedError(
                        f"cannot translate Inductor's wrapper call {func}(...): {NO_SEED}"
                    )
            if isinstance(inner, ast.Name) and re.fullmatch(r"k?s\d+", inner.id):
                raise InductorSeedError(f"Inductor compiled for dynamic shapes ({inner.id}): {NO_SEED}")
        return ast.unparse(
            Rename().visit(ast.fix_missing_locations(ast.parse(ast.unparse(node), mode="eval")).body)
        )

    def _launch(self, kernel: Kernel, call: ast.Call) -> list[str]:
        self.launches += 1
        runtime_params = [p for p in kernel.params if p not in kernel.config.kwargs]
        if len(call.args) != len(runtime_params) + kernel.grid_args:
            raise InductorSeedError(
                f"kernel {kernel.name} is launched with {len(call.args)} arguments for parameters "
                f"{', '.join(runtime_params)}: {NO_SEED}"
            )
        args = [self._expr(a) for a in call.args]
        fixed_grid = args[len(runtime_params) :]  # a template's grid, computed by Inductor for its blocks
        args = args[: len(runtime_params)]
        by_param = dict(zip(runtime_params, args))
        missing = [p for p in kernel.constexpr_params if p not in kernel.config.kwargs and p not in by_param]
        if missing:
            raise InductorSeedError(
                f"kernel {kernel.name} has no value for constexpr {missing[0]}: {NO_SEED}"
            )
        grid = f"({', '.join(fixed_grid)})" if fixed_grid else self._grid(kernel, by_param)
        options = [f"{k}={v}" for k, v in kernel.config.kwargs.items() if k in kernel.constexpr_params]
        options += [f"num_warps={kernel.config.num_warps}", f"num_stages={kernel.config.num_stages}"]
        return [f"grid = {grid}", f"{kernel.name}[grid]({', '.join([*args, *options])})"]

    def _grid(self, kernel: Kernel, by_param: dict[str, str]) -> str:
        grid_type = kernel.grid_type
        folds_y = grid_type == "Grid2DWithYZOverflow"
        axes = ("x", "y") if folds_y else GRID_AXES.get(grid_type)
        if axes is None:
            raise InductorSeedError(f"kernel {kernel.name} uses Inductor grid {grid_type or '?'}: {NO_SEED}")
        dims, uses_meta = [], False
        for axis in axes:
            numel = _literal_int(by_param.get(f"{axis}numel"), kernel, axis)
            block = f"{axis.upper()}BLOCK"
            if block in kernel.constexpr_params and block in kernel.config.kwargs:
                dims.append(f'triton.cdiv({numel}, meta["{block}"])')
                uses_meta = True
            else:
                fixed = kernel.config.kwargs.get(block, 1)
                dims.append(str(math.ceil(numel / fixed)))
        if folds_y:
            # Inductor's Grid2DWithYZOverflow: a y grid above the hardware's limit is split over z, and the
            # kernel adds program_id(2) * num_programs(1) to its y block index.
            y_blocks = dims[1]
            if "tl.program_id(2)" in kernel.source:
                folds = f"triton.cdiv({y_blocks}, {MAX_Y_GRID})"
                dims[1:] = [f"triton.cdiv({y_blocks}, {folds})", folds]
            elif _literal_int(by_param.get("ynumel"), kernel) > MAX_Y_GRID:  # even at one row per block
                raise InductorSeedError(
                    f"kernel {kernel.name} needs a y grid above {MAX_Y_GRID} folded into z: {NO_SEED}"
                )
        tuple_text = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
        return f"lambda meta: {tuple_text}" if uses_meta else tuple_text


def _literal_int(text: str | None, kernel: Kernel, axis: str = "y") -> int:
    if text is None:
        raise InductorSeedError(f"kernel {kernel.name} is launched without {axis}numel: {NO_SEED}")
    try:
        return int(text)
    except ValueError:
        raise InductorSeedError(
            f"kernel {kernel.name} gets {axis}numel={text}, not a constant (dynamic shapes): {NO_SEED}"
        ) from None


def main(argv: list[str] | None = None) -> int:
    """``python -m ksmith_inductor.seeding PROBLEM_PATH DEVICE small|full [inductor|ksmith]``: the seed on
    stdout (the last argument is ``gemm_templates``).

    The plugin runs this in a child process, so the driver never imports a problem or runs Inductor itself.
    A seed that cannot be made is one line on stderr and exit code 2.
    """
    import sys

    from ksmith_core.loading import load_problem

    args = sys.argv[1:] if argv is None else argv
    if (
        len(args) not in (3, 4)
        or args[2] not in ("small", "full")
        or args[3:]
        and args[3] not in GEMM_TEMPLATES
    ):
        sys.stderr.write(
            "usage: python -m ksmith_inductor.seeding PROBLEM_PATH DEVICE small|full [inductor|ksmith]\n"
        )
        return 2
    templates = args[3] if len(args) == 4 else "inductor"
    try:
        source = seed_from_inductor(
            load_problem(args[0]), args[1], small=args[2] == "small", gemm_templates=templates
        )
    except KsmithError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    sys.stdout.write(source)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

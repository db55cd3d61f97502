"""A kernel library on disk, loaded into swappable operators.

A library is a directory of entries as ``ksmith export RUN --target library -o DIR`` writes them:
``DIR/<problem>/kernel.py`` (the evolved ``ModelNew``), ``problem.py`` (the reference ``Model`` it was evolved
for) and ``entry.json`` (device, the module globals that set the size it was verified at, the shapes and dtypes
of that size's inputs). Loading an entry:

1. imports both files from disk (Triton reads kernel source with ``inspect``, so they stay real files);
2. captures the reference ``Model.forward`` with Dynamo at the verified size: the pattern the backend looks for
   in the user's Dynamo graph, whose placeholders are either forward inputs or the model's parameters/buffers;
3. registers one ``torch.library.custom_op`` per entry (``kernelsmith::<problem>_<hash>``) that launches the
   evolved kernel when its inputs have exactly the verified shapes, strides, dtypes and device, and runs the
   reference otherwise; an entry whose ``Model.forward`` returns several tensors (a group of projections of
   one input) returns them as a list;
4. checks it: the kernel against the reference on fresh parameters and inputs (the problem's tolerances), and
   ``torch.library.opcheck``;
5. on a GPU, registers the same computation once more as a ``torch.library.triton_op``
   (``kernelsmith::<problem>_<hash>_inline``) and, when that one passes ``opcheck`` too, swaps it in instead
   (at static shapes; traced with dynamic shapes the guards send it to the reference, so there only a failure
   to trace counts, not outputs that differ from the kernel's by rounding).
   Inductor traces a ``triton_op`` into its own graph, so the evolved kernel is launched from Inductor's
   generated code like one of its own kernels: no Python between the pieces of the compiled model (an opaque
   custom op costs a Python call, the guards and a module call each time, which in the default mode made a
   decode step slower than Inductor's). The interpreter cannot be traced this way, so CPU entries keep the
   custom op.

An entry that fails any step costs one warning line naming it and is left out; nothing here raises for a bad
library, so a model always compiles.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import json
import operator
import os
import re
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .pdl import with_pdl

DEFAULT_LIBRARY = "ksmith-library"
ENV_LIBRARY = "KSMITH_LIBRARY"

_LOCK = threading.RLock()
_OPS: dict[str, Any] = {}  # qualified op name -> the registered custom op (registration is process-wide)
_CACHE: dict[tuple, Library] = {}


class LibraryWarning(UserWarning):
    """A library or one of its entries cannot be used; the model compiles without it."""


@dataclass(frozen=True)
class Slot:
    """One placeholder of an entry's pattern: a forward input (by position) or a parameter/buffer (by name),
    with the exact tensor metadata the kernel was verified on."""

    kind: str  # "input" or "param"
    key: int | str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    def describe(self) -> str:
        what = f"input {self.key}" if self.kind == "input" else f"parameter {self.key!r}"
        return f"{what} {str(self.dtype).removeprefix('torch.')}{list(self.shape)}"


@dataclass
class Entry:
    """A loaded, checked library entry: its pattern, its operator and what its guards accept."""

    name: str
    directory: Path
    device_type: str
    pattern: torch.fx.GraphModule
    slots: list[Slot]
    op: Any  # torch._ops.OpOverload
    reference: torch.nn.Module
    kernel: torch.nn.Module
    speedup_vs_compile: float | None = None  # the verdict's, when measured on a GPU (None when interpreted)
    saving_ms: float | None = (
        None  # torch.compile's time on the problem minus the kernel's (GPU verdicts only)
    )
    calls: int = 0  # times the evolved kernel ran from Python (eager, or the opaque custom op)
    fallbacks: int = 0  # times the guards sent a call to the reference instead
    inlined: int = 0  # times a compiler traced the evolved kernel into its graph (the triton_op path)
    inline_reason: str = ""  # why the entry is swapped as an opaque custom op and not inlined ("" if inlined)
    outputs: int = 1  # tensors Model.forward returns (a group of projections of one input returns several)

    @property
    def pattern_size(self) -> int:
        return sum(1 for n in self.pattern.graph.nodes if n.op not in ("placeholder", "output"))

    @property
    def claim_order(self) -> tuple:
        """Where overlapping entries compete for the same nodes, the one that saves the most time per match
        claims them first, as measured on a GPU against torch.compile on its own problem: a norm fused into its
        projections' kernel claims the projections only if it saves more than the projections' kernel alone
        (Inductor then runs the norm). Entries with no such measurement (the CPU interpreter's) follow, the
        largest pattern first."""
        if self.saving_ms is not None:
            return (0, -self.saving_ms, -self.pattern_size)
        return (1, 0.0, -self.pattern_size)

    def accepts(self, tensors: Sequence[Any]) -> str | None:
        """Why these runtime (or fake) tensors are outside what the kernel was verified on; None if inside."""
        if len(tensors) != len(self.slots):
            return f"{len(tensors)} tensors for {len(self.slots)} slots"
        for slot, t in zip(self.slots, tensors):
            if not isinstance(t, torch.Tensor):
                return f"{slot.describe()}: not a tensor"
            if t.device.type != self.device_type:
                return f"{slot.describe()}: on {t.device.type}, verified on {self.device_type}"
            if t.dtype != slot.dtype:
                return f"{slot.describe()}: dtype {str(t.dtype).removeprefix('torch.')}"
            if not all(isinstance(s, int) for s in (*t.shape, *t.stride())):
                return f"{slot.describe()}: dynamic shape {list(t.shape)}"
            if tuple(t.shape) != slot.shape:
                return f"{slot.describe()}: shape {list(t.shape)}"
            if tuple(t.stride()) != slot.stride:
                return f"{slot.describe()}: strides {list(t.stride())}, verified {list(slot.stride)}"
        return None


@dataclass
class Library:
    """Usable entries in the order they claim a graph's nodes (:attr:`Entry.claim_order`), and the entries left
    out with why."""

    directories: tuple[Path, ...]
    entries: list[Entry] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # entry (or directory) -> reason


def library_dirs(option: Any = None) -> list[Path]:
    """The library directories to use: ``options={"library": ...}`` (a path or a list), else ``$KSMITH_LIBRARY``
    (``os.pathsep``-separated), else ``./ksmith-library``."""
    if option is None:
        option = os.environ.get(ENV_LIBRARY) or DEFAULT_LIBRARY
    if isinstance(option, (str, os.PathLike)):
        parts: Iterable[Any] = str(option).split(os.pathsep)
    else:
        parts = option
    return [Path(p).expanduser() for p in parts if str(p)]


def load_library(directories: Any = None, *, explicit: bool = True, pdl: bool = False) -> Library:
    """Load (once per directory state) the entries of one or several library directories.

    A missing or unreadable directory is one warning when it was asked for (``explicit``); the default
    location may simply not exist. ``pdl``: entries on a CUDA device of compute capability 9.0 or later are
    loaded with their kernels launched with programmatic dependent launch (:mod:`.pdl`), as opaque custom ops.
    """
    dirs = tuple(library_dirs(directories))
    key = (pdl, *((str(d.resolve()), _dir_state(d)) for d in dirs))
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        library = Library(dirs)
        for directory in dirs:
            _load_directory(library, directory, explicit, pdl)
        library.entries.sort(key=lambda e: e.claim_order)
        _CACHE[key] = library
        return library


def _dir_state(directory: Path) -> tuple:
    try:
        return tuple(
            (p.name, p.stat().st_mtime_ns, p.stat().st_size)
            for sub in sorted(directory.iterdir())
            if sub.is_dir()
            for p in sorted(sub.iterdir())
        )
    except OSError:
        return ()


def _warn(message: str) -> None:
    warnings.warn(message, LibraryWarning, stacklevel=4)


def _load_directory(library: Library, directory: Path, explicit: bool, pdl: bool = False) -> None:
    try:
        subdirs = sorted(p for p in directory.iterdir() if (p / "entry.json").is_file())
    except OSError as exc:
        reason = "does not exist" if not directory.exists() else f"cannot be read ({exc.strerror or exc})"
        library.skipped[str(directory)] = f"library {reason}"
        if explicit or directory.exists():
            _warn(f"kernelsmith: library {directory} {reason}; compiling without it")
        return
    for sub in subdirs:
        try:
            with _own_rng():  # loading seeds torch's generators; the user's random stream must not move
                entry = load_entry(sub, pdl=pdl)
        except EntryUnavailable as exc:  # fine here, just not usable on this machine
            library.skipped[sub.name] = str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure of an entry leaves that entry out, never the model
            message = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            library.skipped[sub.name] = message
            _warn(f"kernelsmith: library entry {sub.name} ({sub}) skipped: {message}")
        else:
            library.entries.append(entry)


@contextlib.contextmanager
def outside_compilation() -> Any:
    """Run an entry's checks as in a process of their own, though the backend loads the library while Dynamo
    compiles the user's model. There ``opcheck``'s AOT tests would trace in Dynamo's fake-tensor mode, whose
    shape environment makes every size symbolic even in the static-shape test: the guards then send the traced
    call to the reference, and a kernel that rounds differently from it reads as "outputs differ"."""
    from torch._guards import tracing
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with tracing(None), unset_fake_temporarily():
        yield


def _own_rng() -> Any:
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    return torch.random.fork_rng(devices=devices)


class EntryError(Exception):
    """An entry that is broken: it is skipped with a warning."""


class EntryUnavailable(Exception):
    """An entry that is fine but cannot run here (another device): skipped silently, shown in the report."""


def _import_file(path: Path, module_name: str, sizes: dict[str, Any] | None = None) -> Any:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise EntryError(f"{path.name} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # Triton's jit resolves globals through the module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise EntryError(f"{path.name} fails to import: {type(exc).__name__}: {exc}") from exc
    for name, value in (sizes or {}).items():
        setattr(module, name, value)
    return module


def pdl_supported() -> bool:
    """Programmatic dependent launch needs compute capability 9.0 (Hopper) or later."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


def load_entry(directory: Path, *, pdl: bool = False) -> Entry:
    """Load and check one entry directory (raises EntryError / EntryUnavailable); ``pdl``: see load_library."""
    with outside_compilation():
        return _load_entry(directory, pdl)


def _load_entry(directory: Path, pdl: bool) -> Entry:
    name = directory.name
    try:
        meta = json.loads((directory / "entry.json").read_text(encoding="utf-8"))
        kernel_source = (directory / "kernel.py").read_text(encoding="utf-8")
        problem_file = directory / str(meta.get("problem_file") or "problem.py")
        problem_source = problem_file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise EntryError(
            f"{Path(exc.filename).name} is missing (re-export the run with this ksmith)"
        ) from exc
    except (OSError, ValueError) as exc:
        raise EntryError(f"unreadable: {exc}") from exc
    if not isinstance(meta, dict):
        raise EntryError("entry.json is not an object")
    device_type = str(meta.get("device") or "cpu")
    if device_type == "cuda" and not torch.cuda.is_available():
        raise EntryUnavailable("verified on cuda; no CUDA device here")
    if device_type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise EntryUnavailable("verified on the CPU (Triton interpreter); TRITON_INTERPRET=1 is not set")
    sizes = meta.get("sizes") or {}
    kernel_file = directory / "kernel.py"
    pdl_source = with_pdl(kernel_source) if pdl and device_type == "cuda" and pdl_supported() else None
    if pdl_source is not None:
        kernel_source = pdl_source
    digest = hashlib.sha256(
        "\0".join([kernel_source, problem_source, json.dumps(sizes, sort_keys=True)]).encode()
    ).hexdigest()[:12]
    slug = re.sub(r"\W", "_", name)
    if (
        pdl_source is not None
    ):  # Triton reads kernels' source from their file: the rewrite needs one of its own
        kernel_file = Path(tempfile.gettempdir()) / "ksmith-pdl" / f"{slug}_{digest}_kernel.py"
        kernel_file.parent.mkdir(parents=True, exist_ok=True)
        kernel_file.write_text(pdl_source, encoding="utf-8")
    problem = _import_file(problem_file, f"ksmith_library_{slug}_{digest}_problem", sizes)
    kernel_module = _import_file(kernel_file, f"ksmith_library_{slug}_{digest}_kernel")
    for module, wanted in (
        (problem, ("Model", "get_inputs", "get_init_inputs")),
        (kernel_module, ("ModelNew",)),
    ):
        missing = [w for w in wanted if not hasattr(module, w)]
        if missing:
            raise EntryError(f"{Path(module.__file__).name} defines no {', '.join(missing)}")

    device = torch.device(device_type)
    with torch.device(device):
        torch.manual_seed(0)
        init = list(problem.get_init_inputs())
        reference = problem.Model(*init).to(device).eval()
        torch.manual_seed(0)
        kernel = kernel_module.ModelNew(*init).to(device).eval()
        torch.manual_seed(1)
        inputs = list(problem.get_inputs())
    inputs = [v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs]
    verified = meta.get("verified_inputs")
    if verified is not None:
        seen = [
            {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")}
            if isinstance(v, torch.Tensor)
            else {"value": repr(v)}
            for v in inputs
        ]
        if seen != verified:
            raise EntryError(f"problem.py makes inputs {seen}, the entry was verified on {verified}")

    pattern, slots = capture_pattern(reference, inputs)
    kernel_state = dict(kernel.named_parameters()) | dict(kernel.named_buffers())
    missing = [s.key for s in slots if s.kind == "param" and s.key not in kernel_state]
    if missing:
        raise EntryError(f"ModelNew has no parameter/buffer {missing[0]!r} that Model has")

    verdict = meta.get("verdict") if isinstance(meta.get("verdict"), dict) else {}
    measured = verdict.get("speedup_vs_compile")
    speedup = (
        float(measured) if isinstance(measured, (int, float)) and not verdict.get("interpreted") else None
    )
    entry = Entry(name, directory, device_type, pattern, slots, None, reference, kernel, speedup)
    entry.saving_ms = _saving_ms(verdict) if speedup is not None else None
    entry.outputs = len(pattern_outputs(pattern))
    entry.op = _register_op(entry, f"{slug}_{digest}")
    _check(entry, problem_file, name)
    if pdl_source is not None:
        entry.inline_reason = "launched with PDL (Inductor launches the kernels it inlines without it)"
    else:
        _inline(entry, f"{slug}_{digest}_inline")
    return entry


def _saving_ms(verdict: dict[str, Any]) -> float | None:
    """What one match of the entry saves: torch.compile's time on the problem minus the kernel's, else None."""
    runtime, compiled = verdict.get("runtime_ms"), verdict.get("reference_compile_ms")
    if not all(isinstance(v, (int, float)) and v > 0 for v in (runtime, compiled)):
        return None
    return float(compiled) - float(runtime)


def capture_pattern(model: torch.nn.Module, inputs: list[Any]) -> tuple[torch.fx.GraphModule, list[Slot]]:
    """Dynamo's graph of ``model(*inputs)`` and what each of its placeholders is.

    Captured with Dynamo (not ``symbolic_trace``) so node targets and keyword arguments are the ones Dynamo
    writes in the user's graph; static shapes, under ``no_grad`` as inference runs.
    """
    box: dict[str, Any] = {}

    def grab(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        box["gm"], box["examples"] = gm, list(example_inputs)
        return gm.forward

    with torch.no_grad():
        try:
            torch.compile(model, backend=grab, fullgraph=True, dynamic=False)(*inputs)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise EntryError(f"Dynamo cannot capture Model.forward in one graph: {first}") from exc
    gm, examples = box["gm"], box["examples"]
    named = dict(model.named_parameters()) | dict(model.named_buffers())
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(examples):
        raise EntryError("Dynamo's pattern has placeholders it gave no example for")
    slots = []
    for node, example in zip(placeholders, examples):
        key: int | str | None = next((i for i, v in enumerate(inputs) if v is example), None)
        kind = "input"
        if key is None:
            key = next((k for k, v in named.items() if v is example), None)
            kind = "param"
        if key is None or not isinstance(example, torch.Tensor):
            raise EntryError(f"pattern input {node.name} is neither a forward input nor a parameter")
        slots.append(Slot(kind, key, tuple(example.shape), tuple(example.stride()), example.dtype))
    outputs = pattern_outputs(gm)
    if not outputs or not all(isinstance(o, torch.fx.Node) for o in outputs):
        raise EntryError("Model.forward must return one tensor or a tuple of tensors")
    if any(o.op == "placeholder" for o in outputs):
        raise EntryError("Model.forward returns an input unchanged")
    if len(set(outputs)) != len(outputs):
        raise EntryError("Model.forward returns the same tensor twice")
    return gm, slots


def pattern_outputs(gm: torch.fx.GraphModule) -> list[Any]:
    """What a captured ``Model.forward`` returns, in order (Dynamo's output node holds a tuple)."""
    outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def _split(entry: Entry, args: Sequence[torch.Tensor]) -> tuple[list[Any], dict[str, torch.Tensor]]:
    inputs: dict[int, Any] = {}
    state: dict[str, torch.Tensor] = {}
    for slot, arg in zip(entry.slots, args):
        if slot.kind == "input":
            inputs[int(slot.key)] = arg
        else:
            state[str(slot.key)] = arg
    return [inputs[i] for i in sorted(inputs)], state


def _register_op(entry: Entry, op_name: str) -> Any:
    qualified = f"kernelsmith::{op_name}"
    with _LOCK:
        if qualified in _OPS:
            custom = _OPS[qualified]
            custom._ksmith_entry[0] = entry  # the same files loaded again: the op now calls this load
            return custom._opoverload
        holder = [entry]

        def run(*args: torch.Tensor) -> Any:
            return _compute(holder[0], args, traced=False)

        def fake(*args: torch.Tensor) -> Any:
            inputs, state = _split(holder[0], args)
            out = torch.func.functional_call(holder[0].reference, state, tuple(inputs))
            if holder[0].outputs == 1:
                return out.new_empty(out.shape)  # contiguous, as the kernel's output is checked to be
            return [o.new_empty(o.shape) for o in out]

        returns = "Tensor" if entry.outputs == 1 else "Tensor[]"
        schema = "(" + ", ".join(f"Tensor a{i}" for i in range(len(entry.slots))) + f") -> {returns}"
        custom = torch.library.custom_op(qualified, run, mutates_args=(), schema=schema)
        custom.register_fake(fake)
        custom._ksmith_entry = holder
        _OPS[qualified] = custom
        return custom._opoverload


def _compute(entry: Entry, args: Sequence[torch.Tensor], traced: bool) -> Any:
    """The entry's computation on ``args``: the evolved kernel inside its guards, the reference outside (a
    list of tensors where the entry returns several)."""
    inputs, state = _split(entry, args)
    if entry.accepts(args) is None:
        module = entry.kernel
        if traced:
            entry.inlined += 1
        else:
            entry.calls += 1
    else:  # outside what the kernel was verified on: the reference computes it
        module = entry.reference
        entry.fallbacks += 0 if traced else 1
    with _traceable_launches() if traced else contextlib.nullcontext():
        out = torch.func.functional_call(module, state, tuple(inputs))
    if entry.outputs == 1:
        return out.clone() if any(out is a for a in args) else out
    return _separate(list(out), args)


def _separate(outs: list[torch.Tensor], args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Several outputs as a custom op must return them: each contiguous and in memory of its own. A kernel may
    write its projections into one buffer and return views of it (the evaluator accepts that); here each such
    view is copied, a cost the evaluator's timing did not see."""
    # Storage identity through ``_is_alias_of``: it also holds for the fake tensors of a trace (no data pointer).
    seen = [a for a in args if isinstance(a, torch.Tensor)]
    separate = []
    for out in outs:
        if not out.is_contiguous() or any(torch._C._is_alias_of(out, other) for other in seen):
            out = out.clone(memory_format=torch.contiguous_format)
        seen.append(out)
        separate.append(out)
    return separate


@contextlib.contextmanager
def _traceable_launches() -> Any:
    """Every ``kernel[grid](...)`` launched inside becomes what ``torch.library.wrap_triton(kernel)[grid](...)``
    makes: a traceable call that Inductor compiles as a user-defined Triton kernel.

    Evolved ``ModelNew`` code launches its kernels the plain Triton way; ``triton_op`` needs them wrapped. The
    switch is made on Triton's launch interface for the duration of one trace (compilation is single-threaded),
    which also reaches launches made from helper functions of the kernel's module.
    """
    from torch._higher_order_ops.triton_kernel_wrap import TraceableTritonKernelWrapper
    from triton.runtime.jit import KernelInterface

    original = KernelInterface.__getitem__

    def traceable(kernel: Any, grid: Any) -> Any:
        return TraceableTritonKernelWrapper(kernel, None, grid)

    with _LOCK:
        KernelInterface.__getitem__ = traceable  # type: ignore[method-assign]
        try:
            yield
        finally:
            KernelInterface.__getitem__ = original  # type: ignore[method-assign]


def _register_inline_op(entry: Entry, op_name: str) -> Any:
    """The entry as a ``triton_op``: the same computation as its custom op, visible to Inductor."""
    from torch._library.triton import is_wrap_triton_enabled

    qualified = f"kernelsmith::{op_name}"
    with _LOCK:
        if qualified in _OPS:
            op = _OPS[qualified]
            op._ksmith_entry[0] = entry
            return op._opoverload
        holder = [entry]

        def inline(*args: torch.Tensor) -> Any:
            # Eager calls come with wrap_triton switched off (plain tensors: launch directly); compilers trace
            # with it on, and then each launch must become a traceable call.
            return _compute(holder[0], args, traced=is_wrap_triton_enabled())

        tensor = inspect.Parameter.POSITIONAL_OR_KEYWORD
        inline.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(f"a{i}", tensor, annotation=torch.Tensor) for i in range(len(entry.slots))],
            return_annotation=torch.Tensor if entry.outputs == 1 else list[torch.Tensor],
        )
        op = torch.library.triton_op(qualified, inline, mutates_args=())
        op._ksmith_entry = holder
        _OPS[qualified] = op
        return op._opoverload


_STATIC_CHECKS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_static")
_OUTPUTS_DIFFER = "Outputs of the operator are different in eager-mode PyTorch vs AOTDispatcher tracing"


def inline_check_failure(static: dict[str, Any], dynamic: dict[str, Any]) -> str | None:
    """What keeps an entry's ``triton_op`` from being inlined, from ``opcheck``'s reports (test -> "SUCCESS" or
    the exception), or None. Every static-shape test must pass. Traced with dynamic shapes, the guards send the
    op to the reference, by design (the kernel was verified at its exact shapes only), so its outputs there may
    differ from the kernel's by rounding -- ``_check`` held those to the problem's tolerance; any other failure
    of that trace counts."""
    for name, value in static.items():
        if value != "SUCCESS":
            return f"opcheck {name}: {str(value)[:200]}"
    for name, value in dynamic.items():
        if value != "SUCCESS" and _OUTPUTS_DIFFER not in str(value):
            return f"opcheck {name}: {str(value)[:200]}"
    return None


def inductor_check_failure(op: Any, args: Sequence[torch.Tensor], outputs: int = 1) -> str | None:
    """Why Inductor cannot compile a graph of the one operator (``opcheck`` traces it, but does not lower it:
    a bool tensor bitcast in the kernel's wrapper passed ``opcheck`` and failed the model's compilation), or
    why the compiled call's outputs differ from the operator's own; None if it compiles and agrees."""
    from torch._inductor.compile_fx import compile_fx

    graph = torch.fx.Graph()
    call = graph.call_function(op, tuple(graph.placeholder(f"a{i}") for i in range(len(args))))
    # The graph returns tensors, as Dynamo's do: each item of an operator that returns several.
    items = (
        [graph.call_function(operator.getitem, (call, i)) for i in range(outputs)] if outputs > 1 else [call]
    )
    graph.output(tuple(items))
    try:
        compiled = compile_fx(torch.fx.GraphModule(torch.nn.Module(), graph), list(args))
        got = list(compiled(*args))
    except Exception as exc:  # noqa: BLE001 - the reason is reported; the entry stays the custom op
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return f"Inductor cannot compile it: {type(exc).__name__}: {first}"
    want = op(*args)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    try:  # the same kernel either way; only a kernel adding with atomics may round differently
        torch.testing.assert_close(got, want, equal_nan=True)  # random inputs: a sqrt may give NaN in both
    except AssertionError as exc:
        return (
            f"Inductor's compiled call differs from the operator's: {str(exc).strip().splitlines()[0][:200]}"
        )
    return None


def _inline(entry: Entry, op_name: str) -> None:
    """Swap the entry in as a ``triton_op`` where Inductor can compile user Triton kernels (GPUs), when it passes
    ``opcheck`` (which traces it as Inductor will); else it stays the checked custom op, with the reason."""
    if entry.device_type != "cuda":
        entry.inline_reason = "the Triton interpreter cannot be traced into Inductor's graph"
        return
    try:
        op = _register_inline_op(entry, op_name)
        args = _check_inputs(entry)
        # opcheck raises at its first failure unless told not to: both calls return their reports.
        static = torch.library.opcheck(op, tuple(args), test_utils=_STATIC_CHECKS, raise_exception=False)
        dynamic = torch.library.opcheck(
            op, tuple(args), test_utils="test_aot_dispatch_dynamic", raise_exception=False
        )
        failure = inline_check_failure(static, dynamic) or inductor_check_failure(op, args, entry.outputs)
        if failure:
            raise EntryError(failure)
    except Exception as exc:  # noqa: BLE001 - any failure keeps the custom op, which passed its checks
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        entry.inline_reason = f"not inlined ({first}); swapped as an opaque custom op"
        return
    entry.op = op
    entry.calls = entry.inlined = 0


def _check_inputs(entry: Entry) -> list[torch.Tensor]:
    """Fresh parameters and inputs with exactly the slots' shapes, strides and dtypes."""
    args = []
    gen = torch.Generator().manual_seed(2)
    for slot in entry.slots:
        base = torch.randn(slot.shape, generator=gen, dtype=torch.float32)
        if slot.dtype.is_floating_point:
            value = base.to(slot.dtype)
        else:
            value = (base * 4).to(slot.dtype)
        args.append(torch.as_strided(value.contiguous(), slot.shape, slot.stride).to(entry.device_type))
    return args


def _check(entry: Entry, problem_file: Path, name: str) -> None:
    """The kernel through its operator against the reference, on parameters and inputs it has not seen."""
    from ksmith_core.loading import load_problem

    try:
        tolerances = load_problem(problem_file, name)
    except Exception:  # noqa: BLE001 - tolerances only; the defaults apply
        tolerances = None
    args = _check_inputs(entry)
    if entry.accepts(args) is not None:
        raise EntryError(f"check inputs rejected by the entry's own guards: {entry.accepts(args)}")
    with torch.no_grad():
        before = entry.calls
        got = entry.op(*args)
        if entry.calls != before + 1:
            raise EntryError("the evolved kernel did not run on its verified inputs")
        inputs, state = _split(entry, args)
        want = torch.func.functional_call(entry.reference, state, tuple(inputs))
    if entry.outputs == 1:
        got, want = [got], [want]
    if not isinstance(got, (list, tuple)) or len(got) != len(want):
        raise EntryError(f"kernel returns {_describe(got)} where the reference returns {len(want)} tensors")
    for g, w in zip(got, want):
        _check_output(g, w, tolerances)
    report = torch.library.opcheck(entry.op, tuple(args))
    failed = [k for k, v in report.items() if v != "SUCCESS"]
    if failed:
        raise EntryError(f"torch.library.opcheck failed: {failed[0]}: {str(report[failed[0]])[:200]}")
    entry.calls = 0  # count only the model's calls


def _check_output(got: Any, want: torch.Tensor, tolerances: Any) -> None:
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        raise EntryError(f"kernel returns {_describe(got)} where the reference returns {_describe(want)}")
    if not got.is_contiguous():
        raise EntryError("kernel returns a non-contiguous tensor")
    dtype_name = str(want.dtype).removeprefix("torch.")
    tol = tolerances.tolerance_for(dtype_name) if tolerances is not None else None
    atol, rtol = (tol.atol, tol.rtol) if tol is not None else (1e-4, 1e-4)
    if not torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol, equal_nan=True):
        diff = (got.float() - want.float()).abs().max().item()
        raise EntryError(f"kernel disagrees with its reference (max abs diff {diff:.3g}, atol {atol:g})")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
    return type(value).__name__

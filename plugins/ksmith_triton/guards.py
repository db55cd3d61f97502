"""Checks made inside the candidate's process while its ``forward`` runs.

They are installed before the candidate module is imported, so the candidate sees them from its first line:

- Triton launches are counted (``JITFunction.run``, ``InterpretedFunction.run`` -- the autotuner and
  heuristics wrappers end in one of these), with the stream each launch went to on a GPU;
- torch ops dispatched inside ``forward`` are recorded by a ``TorchDispatchMode`` (which sees through
  ``getattr(torch, "ma" + "tmul")`` and any alias) and checked against an allow-list; ops dispatched by Triton's
  own launch path (the interpreter copies tensors) are not the candidate's and are skipped;
- threads started during ``forward`` (``threading.Thread.start`` and the raw ``_thread`` entry points) and
  threads still alive afterwards;
- processes spawned by the candidate's own code (an audit hook: Triton's compiler may spawn ``ptxas``, so a
  spawn with a Triton frame on the stack is allowed);
- identities of the timing functions and of the patched entry points, compared at the end;
- interpreter hooks that would let candidate code run inside the harness between calls, when nothing of the
  candidate's should run: trace and profile functions, garbage-collector callbacks, signal handlers, interval
  timers, torch function and dispatch modes left on the stack; compared with what was there before the
  candidate loaded, after the import, after every trial and after every timed call.

This raises the bar; it cannot make one Python process safe from code running in it. The verdict's weight
therefore rests on what the candidate cannot reach: reference outputs and the comparison live elsewhere.
"""

from __future__ import annotations

import _thread
import inspect
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

# Allocation, views, metadata and plain copies: what a wrapper around Triton kernels legitimately dispatches.
DEFAULT_ALLOWED_OPS = frozenset(
    {
        # allocation
        "aten.empty",
        "aten.empty_like",
        "aten.empty_strided",
        "aten.new_empty",
        "aten.new_empty_strided",
        "aten.zeros",
        "aten.zeros_like",
        "aten.new_zeros",
        "aten.ones",
        "aten.ones_like",
        "aten.new_ones",
        "aten.full",
        "aten.full_like",
        "aten.new_full",
        "aten.zero_",
        "aten.fill_",
        "aten.lift_fresh",
        "aten.resize_",
        # views
        "aten.view",
        "aten._unsafe_view",
        "aten.reshape",
        "aten._reshape_alias",
        "aten.view_as",
        "aten.permute",
        "aten.transpose",
        "aten.t",
        "aten.expand",
        "aten.expand_as",
        "aten.as_strided",
        "aten.unsqueeze",
        "aten.squeeze",
        "aten.slice",
        "aten.select",
        "aten.split",
        "aten.split_with_sizes",
        "aten.chunk",
        "aten.unbind",
        "aten.narrow",
        "aten.detach",
        "aten.alias",
        "aten.flatten",
        "aten.unflatten",
        "aten.movedim",
        "aten.unfold",
        # copies that only place data
        "aten.clone",
        "aten.contiguous",
        "aten.copy_",
        # metadata
        "aten.size",
        "aten.stride",
        "aten.sym_size",
        "aten.sym_stride",
        "aten.sym_numel",
        "aten.numel",
        "aten.dim",
        "aten.is_contiguous",
        "aten.sym_storage_offset",
        "prim.device",
        "prim.layout",
    }
)

SPAWN_EVENTS = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
)


def _op_names(func: Any) -> tuple[str, str]:
    packet = str(getattr(func, "overloadpacket", func))
    return packet, str(func)


class Guards:
    """All in-process checks of one candidate run. Create and :meth:`install` before importing it."""

    def __init__(self, allowed_ops: frozenset[str], device: str) -> None:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        self.allowed = DEFAULT_ALLOWED_OPS | allowed_ops
        self.device = device
        self.launches = 0
        self.launch_depth = 0
        self.launch_errors: list[tuple[BaseException, str]] = []
        self.side_stream_launches = 0
        self.threads_started: list[str] = []
        self.spawns: list[str] = []
        self.in_forward = False
        self.forbidden: dict[str, int] = {}
        self.candidate_phase = False
        self.autotuners: dict[int, Any] = {}  # Triton autotuners the candidate's launches went through
        # What counts as a launch, in the reasons given (a backend built on this protocol renames it).
        self.kernel_noun = "Triton kernel"
        self.kernel_plural = "Triton kernels"
        self.no_launch_code = "NO_TRITON_LAUNCH"
        self._torch = torch
        self._triton_dirs: tuple[str, ...] = ()
        self._captured: dict[str, tuple[Any, str, Any]] = {}
        self._mappings: list[tuple[str, dict[str, Any], tuple[tuple[str, Any], ...]]] = []
        guards = self

        class OpAccounting(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                # Ops inside a Triton launch are Triton's (the interpreter copies tensors); the depth counter
                # says so, and a Triton frame on the stack confirms it -- a counter alone could be forged.
                if guards.launch_depth == 0 or not guards._in_triton_frame():
                    packet, full = _op_names(func)
                    if packet not in guards.allowed and full not in guards.allowed:
                        guards.forbidden[full] = guards.forbidden.get(full, 0) + 1
                return func(*args, **(kwargs or {}))

        self._mode_class = OpAccounting
        if device == "cuda":
            # A raw C call (no Python stream objects): cheap enough to stay on while timing.
            self._raw_stream = torch._C._cuda_getCurrentRawStream
            self._device_index = torch.cuda.current_device()
            self._default_raw_stream = torch.cuda.default_stream().cuda_stream

    # -- installation ---------------------------------------------------------------------------------------

    def install(self) -> None:
        import triton

        self._triton_dirs = (os.path.dirname(triton.__file__),)
        self._wrap_launches()
        self._wrap_threads()
        self._wrap_escapes()
        sys.addaudithook(self._audit)

    def _wrap_launches(self) -> None:
        from triton.runtime import autotuner, jit

        launchers = [jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            launchers.append(InterpretedFunction)
        except ImportError:
            pass
        wrapped_any = False
        for cls in launchers:
            if callable(getattr(cls, "run", None)):
                self._replace_run(cls, self._counting(cls.run))
                wrapped_any = True
        if not wrapped_any:
            raise RuntimeError(
                "ksmith cannot find Triton's launch entry point (JITFunction.run) to count launches"
            )
        # The autotuner and heuristics end in a counted launch, but benchmark and summarise in between with
        # torch ops (do_bench's statistics) that are Triton's, not the candidate's.
        for name in ("Autotuner", "Heuristics"):
            cls = getattr(autotuner, name, None)
            if cls is not None and callable(getattr(cls, "run", None)):
                self._replace_run(cls, self._inside_triton(cls.run))

    def _replace_run(self, cls: type, wrapped: Callable) -> None:
        cls.run = wrapped
        self._remember(f"{cls.__qualname__}.run", cls, "run", inspect.getattr_static(cls, "run"))

    def _inside_triton(self, original: Callable) -> Callable:
        guards = self

        def run(kernel, *args, **kwargs):
            if hasattr(kernel, "cache"):
                guards.autotuners.setdefault(id(kernel), kernel)
            guards.launch_depth += 1
            try:
                return original(kernel, *args, **kwargs)
            finally:
                guards.launch_depth -= 1

        return run

    def _counting(self, original: Callable) -> Callable:
        guards = self

        def run(kernel, *args, **kwargs):
            if kwargs.get("warmup"):
                return original(kernel, *args, **kwargs)
            guards.launch_depth += 1
            try:
                if (
                    guards.device == "cuda"
                    and guards._raw_stream(guards._device_index) != guards._default_raw_stream
                ):
                    guards.side_stream_launches += 1
                result = original(kernel, *args, **kwargs)
            except BaseException as exc:
                import traceback

                guards.launch_errors.append((exc, "".join(traceback.format_exception(exc))))
                raise
            finally:
                guards.launch_depth -= 1
            guards.launches += 1
            return result

        return run

    def _wrap_threads(self) -> None:
        guards = self
        original_start = threading.Thread.start
        original_new = _thread.start_new_thread

        def start(thread, *args, **kwargs):
            if guards.candidate_phase:
                guards.threads_started.append(getattr(thread, "name", "?"))
            return original_start(thread, *args, **kwargs)

        def start_new_thread(*args, **kwargs):
            if guards.candidate_phase:
                guards.threads_started.append("_thread.start_new_thread")
            return original_new(*args, **kwargs)

        threading.Thread.start = start
        _thread.start_new_thread = start_new_thread
        threading._start_new_thread = start_new_thread  # type: ignore[attr-defined]
        self._remember("threading.Thread.start", threading.Thread, "start", start)
        self._remember("_thread.start_new_thread", _thread, "start_new_thread", start_new_thread)

    def _wrap_escapes(self) -> None:
        """Ways around the dispatch mode: host copies through numpy (CPU tensors) and popping the mode itself.

        Triton's interpreter converts through numpy inside launches, so only calls outside a launch count.
        """
        import torch.utils._python_dispatch as python_dispatch

        torch = self._torch
        guards = self

        def recording(name: str, original: Callable) -> Callable:
            def call(*args, **kwargs):
                if guards.in_forward and guards.launch_depth == 0:
                    guards.forbidden[name] = guards.forbidden.get(name, 0) + 1
                return original(*args, **kwargs)

            return call

        for owner, attr, label in (
            (torch.Tensor, "numpy", "Tensor.numpy"),
            (torch.Tensor, "tolist", "Tensor.tolist"),
            (torch.Tensor, "__array__", "Tensor.__array__"),
            (torch, "from_numpy", "torch.from_numpy"),
            (torch._C, "_pop_torch_dispatch_stack", "popping the dispatch mode"),
            (python_dispatch, "_pop_torch_dispatch_stack", "popping the dispatch mode"),
            (torch._C, "_unset_dispatch_mode", "unsetting the dispatch mode"),
            (torch._C, "_DisableTorchDispatch", "disabling torch dispatch"),
        ):
            original = inspect.getattr_static(owner, attr, None)
            if original is None:
                continue
            wrapped = recording(label, getattr(owner, attr))
            setattr(owner, attr, wrapped)
            self._remember(f"{getattr(owner, '__name__', owner)}.{attr}", owner, attr, wrapped)

    def _audit(self, event: str, args: tuple) -> None:
        if not self.candidate_phase or not event.startswith(SPAWN_EVENTS):
            return
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename.startswith(self._triton_dirs):
                return  # Triton's compiler running its tools
            frame = frame.f_back
        what = f"{event} {args[0]!r}" if args else event
        self.spawns.append(what[:200])
        raise RuntimeError(f"ksmith: candidates may not start processes ({event})")

    # -- tamper checks --------------------------------------------------------------------------------------

    def _remember(self, name: str, owner: Any, attr: str, value: Any) -> None:
        self._captured[name] = (owner, attr, value)

    def capture(self, name: str, owner: Any, attr: str) -> Any:
        """Keep a reference to ``owner.attr`` now; :meth:`tampered` reports it if it is replaced later."""
        value = getattr(owner, attr)
        self._remember(name, owner, attr, _static(owner, attr, value))
        return value

    def capture_namespace(self, label: str, owner: Any) -> None:
        """Every callable attribute of ``owner`` (``torch``, ``torch.Tensor``, ...): replacing any of them --
        ``torch.randn`` so that fresh inputs repeat, say -- is reported by :meth:`tampered`."""
        for attr, value in list(vars(owner).items()):
            if callable(value) and not attr.startswith("__"):
                self._remember(f"{label}.{attr}", owner, attr, value)

    def _in_triton_frame(self, depth: int = 64) -> bool:
        frame = sys._getframe(2)
        while frame is not None and depth > 0:
            if frame.f_code.co_filename.startswith(self._triton_dirs):
                return True
            frame, depth = frame.f_back, depth - 1
        return False

    def capture_mapping(self, label: str, mapping: dict[str, Any]) -> None:
        """Entries of a dict the harness reads (its captured timers): replacing one is :meth:`tampered`."""
        self._mappings.append((label, mapping, tuple(mapping.items())))

    def tampered(self) -> list[str]:
        changed = [
            f"{label}[{key!r}]"
            for label, mapping, original in self._mappings
            for key, value in original
            if mapping.get(key) is not value
        ]
        for name, (owner, attr, value) in self._captured.items():
            try:
                now = _static(owner, attr)
            except AttributeError:
                changed.append(name)
                continue
            if now is not value:
                changed.append(name)
        return changed

    # -- one forward ----------------------------------------------------------------------------------------

    def run_forward(self, model: Any, inputs: list[Any], fresh: bool = True) -> Any:
        """Call ``model(*inputs)`` with op accounting and launch counting (counted afresh for this call, or,
        with ``fresh=False``, added to what earlier calls counted: the timing loop's calls)."""
        if fresh:
            self.launches = 0
            self.forbidden = {}
            self.side_stream_launches = 0
            self.launch_errors = []
        with self._torch.no_grad(), self._mode_class():
            self.in_forward = True
            try:
                return model(*inputs)
            finally:
                self.in_forward = False

    def forget_autotuning(self) -> int:
        """Make every autotuner the candidate used benchmark its configurations again at its next call.

        They first benchmarked during the first call, beside other evaluations' GPU work; the timing loop's
        warm-up runs under the exclusive lock, so the configuration it picks there is the one a quiet GPU
        prefers, the same from one run to the next. Returns how many were reset."""
        reset = 0
        for tuner in self.autotuners.values():
            cache = getattr(tuner, "cache", None)
            if isinstance(cache, dict) and cache:
                cache.clear()
                reset += 1
        return reset

    def launch_error_for(self, exc: BaseException) -> str | None:
        """The traceback of a failed launch if ``exc`` is (or was raised from) that failure, else ``None``."""
        chain, seen = [exc], set()
        while chain:
            current = chain.pop()
            if current is None or id(current) in seen:
                continue
            seen.add(id(current))
            for failed, text in self.launch_errors:
                if failed is current:
                    return text
            chain.extend([current.__cause__, current.__context__])
        return None

    def threads_alive(self, before: set[int]) -> list[str]:
        """Threads alive now that were not before (including ones started through raw ``_thread``)."""
        alive = set(sys._current_frames())
        new = alive - before
        names = {t.ident: t.name for t in threading.enumerate()}
        return [names.get(ident, f"thread {ident}") for ident in sorted(new)]

    def current_stream_is_default(self) -> bool:
        return self.device != "cuda" or self._raw_stream(self._device_index) == self._default_raw_stream


def _static(owner: Any, attr: str, default: Any = None) -> Any:
    """The attribute as stored (no descriptors run); ``default`` or plain getattr where it is computed lazily."""
    try:
        return inspect.getattr_static(owner, attr)
    except AttributeError:
        return default if default is not None else getattr(owner, attr)


HOOK_SIGNALS = ("SIGALRM", "SIGVTALRM", "SIGPROF", "SIGUSR1", "SIGUSR2", "SIGCHLD", "SIGIO")


def interpreter_hooks() -> dict[str, Any]:
    """What can make Python run code of the candidate's while the harness runs: take it before the candidate
    loads and compare with :func:`hooks_added`."""
    import gc
    import signal

    hooks: dict[str, Any] = {
        "sys.settrace": sys.gettrace(),
        "sys.setprofile": sys.getprofile(),
        "threading.settrace": getattr(threading, "gettrace", lambda: None)(),
        "threading.setprofile": getattr(threading, "getprofile", lambda: None)(),
        "gc.callbacks": tuple(gc.callbacks),
    }
    try:  # torch function / dispatch modes left on the stack run on every torch call the harness makes
        import torch

        hooks["a torch function mode"] = torch._C._len_torch_function_stack()
        hooks["a torch dispatch mode"] = torch._C._len_torch_dispatch_stack()
    except (ImportError, AttributeError):
        pass
    for name in HOOK_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            hooks[f"signal {name}"] = signal.getsignal(number)
    for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"):
        which = getattr(signal, name, None)
        if which is not None:
            hooks[f"signal.setitimer {name}"] = signal.getitimer(which) != (0.0, 0.0)
    return hooks


def hooks_added(before: dict[str, Any]) -> list[str]:
    now = interpreter_hooks()
    return [name for name, value in now.items() if value != before.get(name)]


def thread_idents() -> set[int]:
    return set(sys._current_frames())


def capture_timers(guards: Guards, device: str) -> dict[str, Any]:
    """References to the clocks, taken before the candidate loads: patching the names later changes nothing."""
    import torch

    timers: dict[str, Any] = {
        "perf_counter": guards.capture("time.perf_counter", time, "perf_counter"),
        "thread_time": guards.capture("time.thread_time", time, "thread_time"),
        "urandom": guards.capture("os.urandom", os, "urandom"),
    }
    guards.capture("torch.allclose", torch, "allclose")
    if device == "cuda":
        from ksmith_triton.timing import cuda_timers

        timers.update(cuda_timers())
        guards.capture("torch.cuda.synchronize", torch.cuda, "synchronize")
        guards.capture("torch.cuda.Event", torch.cuda, "Event")
        guards.capture("torch.cuda.Event.record", torch.cuda.Event, "record")
        guards.capture("torch.cuda.Event.elapsed_time", torch.cuda.Event, "elapsed_time")
        guards.capture("torch.cuda.current_stream", torch.cuda, "current_stream")
        guards.capture("torch._C._cuda_synchronize", torch._C, "_cuda_synchronize")
        guards.capture("torch._C._cuda_sleep", torch._C, "_cuda_sleep")
    guards.capture_mapping("timers", timers)
    return timers

"""What both kinds of child process share: the report channel, the command loop's plumbing, and the problem
rebuilt from its source text.

A child is ``python -m ksmith_triton.worker ROLE RESULT_FD`` (see ``worker.py``), and its role's code lives
in a module of its own: ``candidate_side.py`` (runs one untrusted candidate) or ``reference_side.py``
(computes reference outputs and compares the candidate's outputs with them; never runs candidate code).
This module imports neither of them and holds nothing of either role.

Commands arrive as JSON lines on stdin; reports leave as JSON lines (with the parent's nonce) on RESULT_FD.
A candidate's own prints go to stdout/stderr, which the parent pointed at files.
"""

from __future__ import annotations

import contextlib
import json
import linecache
import os
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any

MAX_ERROR_CHARS = 6000


class Channel:
    """The report pipe to the parent: one JSON line per report, each carrying the parent's nonce."""

    def __init__(self, fd: int, nonce: str) -> None:
        self._file = os.fdopen(fd, "w", buffering=1)
        self._nonce = nonce

    def send(self, kind: str, **data: Any) -> None:
        self._file.write(json.dumps({"nonce": self._nonce, "kind": kind, **data}, default=str) + "\n")
        self._file.flush()


def read_command() -> dict[str, Any]:
    line = sys.stdin.readline()
    if not line:
        PARENT_GONE.append(True)
        return {"op": "exit"}
    return json.loads(line)


PARENT_GONE: list[bool] = []  # set when stdin closed: nobody will remove this worker's directory


def remove_own_directory() -> None:
    """The parent died without cleaning up (kill -9): the worker's private working directory goes with it."""
    import shutil

    shutil.rmtree(os.getcwd(), ignore_errors=True)


def format_error(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text[-MAX_ERROR_CHARS:]


def serve_job(
    fd: int,
    run: Callable[[Channel, dict[str, Any]], int],
    job_arrived: Callable[[], None] | None = None,
) -> int:
    """Read the one job (the first line on stdin, with the nonce reports must carry) and ``run`` it; clean up
    after a parent that is gone."""
    line = sys.stdin.readline()
    if not line:  # an idle spare whose parent is gone
        remove_own_directory()
        return 0
    if job_arrived is not None:
        job_arrived()
    job = json.loads(line)
    channel = Channel(fd, job.pop("nonce"))
    try:
        code = run(channel, job)
    except BrokenPipeError:  # the report channel's reader is gone: so is the parent
        PARENT_GONE.append(True)
        code = 0
    if PARENT_GONE:
        remove_own_directory()
    return code


# ---------------------------------------------------------------------------------------------------------------
# The problem, rebuilt from its source text
# ---------------------------------------------------------------------------------------------------------------


class ProblemStepError(Exception):
    """The problem's own code failed: its module, ``get_inputs()``, ``get_init_inputs()`` or ``Model()``.

    The message is one line naming which and what it raised; the user's problem is at fault, never the
    candidate."""


@contextlib.contextmanager
def problem_step(what: str) -> Iterator[None]:
    try:
        yield
    except ProblemStepError:
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure of the problem's code is reported as such
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        message = (str(exc).strip().splitlines() or [""])[0][:300]
        raise ProblemStepError(f"{what} raised {type(exc).__name__}: {message}".rstrip(": ")) from exc


PROBLEM_FILENAME = "ksmith_problem.py"


def fp32_means_fp32() -> None:
    """fp32 convolutions and matmuls in full fp32, in the reference's process and the candidate's alike.

    PyTorch lets cuDNN run fp32 convolutions in TF32 by default (``torch.backends.cudnn.allow_tf32``), while
    fp32 matmuls stay fp32: a reference computed that way is off by ~1e-3 relative, and a kernel that computes
    the problem exactly in fp32 fails the fp32 tolerance against it. Both switches are set before the problem
    module runs, so a problem that wants TF32 says so itself (and a candidate is judged by that rule)."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def load_problem_module(source: str, small_sizes: dict[str, Any] | None) -> types.ModuleType:
    module = types.ModuleType("ksmith_problem")
    module.__file__ = PROBLEM_FILENAME
    # Triton's @jit reads a kernel's source back through inspect: a reference that is itself a Triton kernel
    # (an upstream kernel imported as the problem) needs its lines where inspect looks for them.
    linecache.cache[PROBLEM_FILENAME] = (
        len(source),
        None,
        source.splitlines(keepends=True),
        PROBLEM_FILENAME,
    )
    fp32_means_fp32()
    with problem_step("the problem module"):
        exec(compile(source, PROBLEM_FILENAME, "exec"), module.__dict__)
    for name, value in (small_sizes or {}).items():
        setattr(module, name, value)
    return module


def to_device(values: list[Any], device: str) -> list[Any]:
    import torch

    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def host_threads_for_gpu_work() -> None:
    """One host thread for torch's CPU ops in a process whose work is on the GPU. Dozens of these processes
    run beside each other (a reference process per problem, a worker per evaluation): each with an OpenMP pool
    as large as the machine, a comparison of a few thousand sampled elements took half a second on a 16-core
    host busy with the others, against a few milliseconds on one thread."""
    import torch

    torch.set_num_threads(1)


def seed_generators(seed: int) -> None:
    """``torch.manual_seed(seed)``, at a fraction of its cost once CUDA is initialised.

    ``torch.manual_seed`` seeds every backend torch knows; one not initialised in the process (XPU and MTIA on
    a CUDA machine) keeps the seed with a formatted traceback of the caller's stack, for the day it starts:
    about 50 µs a call on an H100 host (more the deeper the stack), made before every fresh input set inside
    the timed loop's exclusive hold (docs/benchmarks.md §1b8). With CUDA initialised this seeds what inputs
    are drawn from -- the CPU generator and each CUDA device's default generator -- to the state
    ``torch.manual_seed`` leaves them in; otherwise it is ``torch.manual_seed``."""
    import torch

    seed = int(seed)  # as torch.manual_seed takes it (a numpy integer, say)
    if torch.cuda.is_initialized():
        torch.default_generator.manual_seed(seed)
        for generator in torch.cuda.default_generators:
            generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def make_inputs(problem: types.ModuleType, seed: int, device: str) -> list[Any]:
    import torch

    seed_generators(seed)
    # Made on the device itself: both processes draw them the same way from the same seed, and generating
    # hundreds of MB on the CPU first would dominate a GPU evaluation.
    with torch.device(device), problem_step("get_inputs()"):
        values = list(problem.get_inputs())
    return to_device(values, device)


def make_init_inputs(problem: types.ModuleType, init_seed: int, device: str) -> list[Any]:
    """``get_init_inputs()`` under the construction seed (KernelBench's convention)."""
    import torch

    seed_generators(init_seed)
    with torch.device(device), problem_step("get_init_inputs()"):
        found = list(problem.get_init_inputs()) if hasattr(problem, "get_init_inputs") else []
    return to_device(found, device)


def make_model(
    model_class: Any,
    problem: types.ModuleType,
    init_seed: int,
    device: str,
    init_inputs: list[Any] | None = None,
) -> Any:
    """KernelBench's convention: the same seed before ``get_init_inputs`` and before construction. The
    problem's own ``Model`` failing to build is the problem's error (:class:`ProblemStepError`); a candidate's
    class failing is the candidate's, raised as it is."""
    import torch

    if init_inputs is None:
        init_inputs = make_init_inputs(problem, init_seed, device)
    seed_generators(init_seed)
    building = problem_step("Model()") if model_class is getattr(problem, "Model", None) else _nothing()
    with torch.no_grad(), torch.device(device), building:
        model = model_class(*init_inputs)
        if isinstance(model, torch.nn.Module):
            model = model.to(device)
    return model


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


class OutputError(Exception):
    """A forward returned something that is not plain tensors."""


def flatten_outputs(out: Any) -> tuple[str, list[Any]]:
    """``(structure, tensors)``; only exact ``torch.Tensor`` objects pass (no subclasses, no lazy wrappers)."""
    import torch

    if type(out) in (tuple, list):
        items, structure = list(out), f"{type(out).__name__}:{len(out)}"
    else:
        items, structure = [out], "tensor"
    for i, item in enumerate(items):
        if type(item) is not torch.Tensor:
            if isinstance(item, torch.Tensor):
                raise OutputError(
                    f"TENSOR_SUBCLASS: output {i} is a {type(item).__qualname__} (a torch.Tensor subclass); "
                    "outputs must be plain torch.Tensor objects"
                )
            raise OutputError(f"OUTPUT_TYPE: output {i} is a {type(item).__qualname__}, not a torch.Tensor")
    return structure, items


def tensor_bytes(values: list[Any]) -> int:
    import torch

    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def peak_memory_bytes(device: str) -> int:
    """This process's peak memory, for the driver's memory admission (``admission.py``): on a GPU the peak of
    torch's caching allocator's reservation (what it took from the device; a CUDA context's own few hundred
    MB are left to the admission's margin), on the CPU the peak resident size."""
    if device == "cuda":
        import torch

        return int(torch.cuda.max_memory_reserved())
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


# Elements of every timed call's outputs checked against the reference (per output tensor): a call that gets
# a fraction q of the elements wrong escapes with probability (1 - q) ** SAMPLES_PER_OUTPUT.
SAMPLES_PER_OUTPUT = 512


def sample_positions(seed: int, numels: list[int]) -> list[Any]:
    """Flat element positions for each output, from ``seed`` on a CPU generator: the candidate's worker and
    the reference process derive the same positions from the same seed, drawn after the call."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [
        # A small output is checked whole; a larger one at SAMPLES_PER_OUTPUT positions.
        torch.randint(0, numel, (SAMPLES_PER_OUTPUT,), generator=generator)
        if numel > SAMPLES_PER_OUTPUT
        else torch.arange(numel)
        for numel in numels
    ]


def encode_values(values: Any) -> str:
    """Raw bytes of a 1-D CPU tensor as base64 (no pickling)."""
    import base64

    import torch

    return base64.b64encode(values.contiguous().view(torch.uint8).numpy().tobytes()).decode()


def decode_values(text: str, dtype: Any, count: int) -> Any:
    """The inverse of :func:`encode_values`, checked against the expected element count."""
    import base64

    import torch

    raw = bytearray(base64.b64decode(text.encode(), validate=True))
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if len(raw) != count * itemsize:
        raise ValueError(f"{len(raw)} bytes where {count} values of {dtype} take {count * itemsize}")
    if count == 0:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).clone()

"""Comparing a candidate's outputs with the reference's, and refusing references that cannot judge anything.

Runs in the reference process, on its device: the reference outputs stay where they were computed, and the
candidate's outputs arrive either as CUDA IPC handles (GPU outputs: mapped in place, nothing copied) or as
raw bytes in files its worker wrote, read here against the shapes and dtypes it declared (sizes checked,
nothing unpickled). The candidate's process never holds a reference output.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ksmith_core.model import Tolerance

# METR's filters for degenerate tasks: most of the output (near) zero, (near) constant, or unchanged by the seed.
DEGENERATE_FRACTION = 0.70
UNCHANGED_ACROSS_SEEDS_FRACTION = 0.95
# "Near" is relative to the output's own scale, so small-valued outputs (a long softmax row) are not "zero".
NEAR_RELATIVE = 1e-5
IPC_REF_COUNTERS = 10000  # entries in one torch IPC reference-counter file (CUDA_IPC_REF_COUNTER_FILE_SIZE)
MEAN_CHECK_MIN_NUMEL = 16
# Elements compared at once in float64 (128 MiB a slice per tensor).
SLICE_ELEMENTS = 1 << 24


@dataclass
class Outputs:
    structure: str
    tensors: list[Any]
    devices: list[str] = field(default_factory=list)


def tolerances(table: dict[str, list[float]]) -> Callable[[str], Tolerance]:
    """A ``tolerance_for`` from ``{dtype name: [atol, rtol]}`` (what the parent sends; see ``tolerance_table``)."""
    parsed = {name: Tolerance(float(a), float(r)) for name, (a, r) in table.items()}
    fallback = parsed.get("default", Tolerance(1e-4, 1e-4))
    return lambda name: parsed.get(name.removeprefix("torch."), fallback)


def tolerance_table(tolerance_for: Callable[[str], Tolerance], dtypes: tuple[str, ...]) -> dict[str, list]:
    table = {}
    for name in (*dtypes, "default"):
        tol = tolerance_for(name)
        table[name] = [tol.atol, tol.rtol]
    return table


def torch_dtype(name: Any) -> Any:
    """The torch dtype an output's description names (``"torch.float32"`` or ``"float32"``), or ``None``."""
    import torch

    value = getattr(torch, str(name or "").removeprefix("torch."), None)
    return value if isinstance(value, torch.dtype) else None


def _dtype(name: str) -> Any:
    value = torch_dtype(name)
    if value is None:
        raise ValueError(f"unknown dtype {name!r}")
    return value


def load_outputs(report: dict[str, Any], directory: Path, device: str) -> Outputs:
    """The outputs a candidate worker described in ``report`` (files in ``directory``), on ``device``."""
    import torch

    tensors, devices = [], []
    for item in report["outputs"]:
        dtype = _dtype(item["dtype"])
        shape = [int(n) for n in item["shape"]]
        if any(n < 0 for n in shape):
            raise ValueError(f"negative size in shape {shape}")
        nbytes = math.prod(shape) * dtype.itemsize
        devices.append(str(item["device"]))
        if "ipc" in item:
            if device != "cuda":
                raise ValueError("a CUDA IPC handle where no GPU is in use")
            tensors.append(_from_cuda_ipc(item["ipc"], dtype, shape, nbytes))
            continue
        name = str(item["file"])
        if "/" in name or name.startswith(".") or directory.is_symlink():
            raise ValueError(f"output file {name!r} is not a plain file of the worker's")
        raw = _read_regular_file(directory / name, nbytes)
        tensor = raw.view(dtype).reshape(shape) if nbytes else torch.empty(shape, dtype=dtype)
        tensors.append(tensor.to(device))
    return Outputs(str(report["structure"]), tensors, devices)


def _read_regular_file(path: Path, nbytes: int) -> Any:
    """Exactly ``nbytes`` from a regular file, refusing links, FIFOs and devices (nothing that could block)."""
    import os
    import stat

    import torch

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:  # a symlink (ELOOP), missing, unreadable
        raise ValueError(
            f"output file {path.name!r} is not a plain file of the worker's ({exc.strerror})"
        ) from exc
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise ValueError(f"output file {path.name!r} is not a plain file of the worker's")
        if status.st_size != nbytes:
            raise ValueError(f"{path.name} holds {status.st_size} bytes; {nbytes} are declared")
        if nbytes == 0:
            return torch.empty(0, dtype=torch.uint8)
        buffer = bytearray(nbytes)
        if handle.readinto(buffer) != nbytes:
            raise ValueError(f"{path.name} ended early")
    return torch.frombuffer(buffer, dtype=torch.uint8)


def _from_cuda_ipc(ipc: dict[str, Any], dtype: Any, shape: list[int], nbytes: int) -> Any:
    """Map a candidate worker's GPU output (its memory, read in place; torch's own IPC machinery keeps the
    producer's block alive until this mapping is released)."""
    import base64

    import torch

    def raw(key: str) -> bytes | None:
        value = ipc.get(key)
        return base64.b64decode(value) if value else None

    offset = int(ipc["element_offset"])
    if offset < 0 or (offset * dtype.itemsize + nbytes) > int(ipc["storage_bytes"]):
        raise ValueError("the shared output is smaller than its declared shape")
    if int(ipc["storage_offset_bytes"]) < 0 or not 0 <= int(ipc["ref_counter_offset"]) < IPC_REF_COUNTERS:
        raise ValueError("the shared output's handle fields are out of range")
    storage = torch.UntypedStorage._new_shared_cuda(
        int(ipc["device"]),
        raw("handle"),
        int(ipc["storage_bytes"]),
        int(ipc["storage_offset_bytes"]),
        raw("ref_counter"),
        int(ipc["ref_counter_offset"]),
        raw("event") or b"",  # must be bytes; never waited on: the worker synchronised before reporting
        False,
    )
    typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True)
    stride = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    return torch._utils._rebuild_tensor(typed, offset, tuple(shape), tuple(stride))


@dataclass
class Comparison:
    correct: bool
    reasons: list[str]
    mismatch: dict[str, Any] | None = None


def compare_outputs(
    got: Outputs,
    expected: Outputs,
    expected_device: str,
    tolerance_for: Callable[[str], Tolerance],
    label: str = "",
) -> Comparison:
    """Structure, device, dtype, shape, then values by the dtype's tolerance; the first difference found,
    with ``label`` (which call it was) recorded in the mismatch as ``where``."""
    result = _compare_outputs(got, expected, expected_device, tolerance_for, label)
    if result.mismatch is not None and label:
        result.mismatch["where"] = label
    return result


def _compare_outputs(
    got: Outputs,
    expected: Outputs,
    expected_device: str,
    tolerance_for: Callable[[str], Tolerance],
    label: str,
) -> Comparison:
    where = f" ({label})" if label else ""
    if got.structure != expected.structure or len(got.tensors) != len(expected.tensors):
        return Comparison(
            False,
            [
                f"OUTPUT_STRUCTURE: forward returned {got.structure} ({len(got.tensors)} tensors), the "
                f"reference {expected.structure} ({len(expected.tensors)}){where}"
            ],
            {"expected": expected.structure, "got": got.structure},
        )
    for index, (mine, ref) in enumerate(zip(got.tensors, expected.tensors)):
        device = got.devices[index] if index < len(got.devices) else expected_device
        if device.split(":")[0] != expected_device:
            return Comparison(
                False,
                [f"DEVICE_MISMATCH: output {index} is on {device}, expected {expected_device}{where}"],
                {"output": index, "expected": expected_device, "got": device},
            )
        if mine.dtype != ref.dtype:
            return Comparison(
                False,
                [f"DTYPE_MISMATCH: output {index} is {mine.dtype}, expected {ref.dtype}{where}"],
                {"output": index, "expected": str(ref.dtype), "got": str(mine.dtype)},
            )
        if mine.shape != ref.shape:
            return Comparison(
                False,
                [
                    f"SHAPE_MISMATCH: output {index} has shape {tuple(mine.shape)}, expected "
                    f"{tuple(ref.shape)}{where}"
                ],
                {"output": index, "expected": list(ref.shape), "got": list(mine.shape)},
            )
        result = compare_values(index, mine, ref, tolerance_for(str(ref.dtype)), where)
        if result is not None:
            return result
    return Comparison(True, [])


def compare_values(index: int, mine: Any, ref: Any, tol: Tolerance, where: str) -> Comparison | None:
    import torch

    if not (ref.is_floating_point() or ref.is_complex()):
        if torch.equal(mine, ref):
            return None
        wrong = mine != ref
        worst = [int(i) for i in wrong.nonzero()[0]] if wrong.any() else []
        return Comparison(
            False,
            [
                f"MISMATCH: output {index} differs in {int(wrong.sum())} of {ref.numel()} "
                f"elements (exact comparison for {ref.dtype}){where}"
            ],
            {
                "output": index,
                "mismatched": int(wrong.sum()),
                "numel": ref.numel(),
                "worst_index": worst,
                "atol": 0.0,
                "rtol": 0.0,
            },
        )
    # Float outputs are compared in float64 a slice at a time: a whole 6 GiB fp32 output in float64 would need
    # 12 GiB per side (the reference process then ran out of memory beside large candidates). One pass says
    # whether all is close (NaN where the reference has NaN is; NaN or Inf where it has a number is not); only
    # outputs that are not get the passes that say why.
    if all(
        bool(torch.isclose(a, b, rtol=tol.rtol, atol=tol.atol, equal_nan=True).all())
        for _, (a, b) in float64_slices(mine, ref)
    ):
        return None
    # What is wrong, in order: NaN or Inf where the reference has none, then values beyond the tolerance.
    for name, test in (("NAN_OUTPUT", torch.isnan), ("INF_OUTPUT", torch.isinf)):
        count, first_flat = 0, None
        for start, (a, b) in float64_slices(mine, ref):
            bad = test(a) & ~test(b)
            found = int(bad.sum())
            if found and first_flat is None:
                first_flat = start + int(bad.nonzero()[0][0])
            count += found
        if count:
            first = unravel(first_flat, ref.shape)
            return Comparison(
                False,
                [
                    f"{name}: output {index} has {count} {'NaN' if name == 'NAN_OUTPUT' else 'Inf'} "
                    f"value(s) where the reference has none (first at {tuple(first)}){where}"
                ],
                {
                    "output": index,
                    "mismatched": count,
                    "numel": ref.numel(),
                    "worst_index": first,
                    "atol": tol.atol,
                    "rtol": tol.rtol,
                },
            )
    worst_diff, worst_flat, worst_rel, mismatched = -1.0, 0, 0.0, 0
    expected_value = got_value = 0.0
    for start, (a, b) in float64_slices(mine, ref):
        close = torch.isclose(a, b, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
        diff = (a - b).abs().nan_to_num(nan=float("inf"))
        diff = torch.where(close, torch.zeros_like(diff), diff)
        at = int(diff.argmax())
        if float(diff[at]) > worst_diff:  # the first largest, as one argmax over the whole output would pick
            worst_diff, worst_flat = float(diff[at]), start + at
            expected_value, got_value = float(b[at]), float(a[at])
        rel = float((diff / b.abs().clamp_min(1e-12)).max())
        worst_rel = rel if math.isnan(rel) or rel > worst_rel else worst_rel  # NaN wins, as in one max
        mismatched += int((~close).sum())
    worst = unravel(worst_flat, ref.shape)
    mismatch = {
        "output": index,
        "max_abs_error": worst_diff,
        "max_rel_error": worst_rel,
        "worst_index": worst,
        "mismatched": mismatched,
        "numel": ref.numel(),
        "atol": tol.atol,
        "rtol": tol.rtol,
        "expected": expected_value,
        "got": got_value,
    }
    return Comparison(
        False,
        [
            f"MISMATCH: output {index} max abs error {mismatch['max_abs_error']:.3g} at "
            f"{tuple(worst)} (expected {mismatch['expected']:.6g}, got {mismatch['got']:.6g}); "
            f"{mismatch['mismatched']} of {mismatch['numel']} elements outside atol {tol.atol:g} "
            f"rtol {tol.rtol:g}{where}"
        ],
        mismatch,
    )


def float64_slices(*tensors: Any, elements: int | None = None):
    """``(start, [slice of each tensor as float64])`` over the tensors' elements in row-major order, at most
    ``elements`` (default ``SLICE_ELEMENTS``) at a time: a comparison's extra memory stays bounded however large
    the output is."""
    step = elements or SLICE_ELEMENTS
    flats = [t.reshape(-1) for t in tensors]
    total = flats[0].numel()
    for start in range(0, total, step):
        yield start, [f[start : start + step].double() for f in flats]


def unravel(flat: int, shape: Any) -> list[int]:
    """Row-major index of element ``flat`` of a tensor of ``shape`` ([] for a scalar)."""
    index = []
    for size in reversed(tuple(shape)):
        index.append(flat % size)
        flat //= size
    return index[::-1]


def degenerate_reasons(trials: Sequence[Outputs], tolerance_for: Callable[[str], Tolerance]) -> list[str]:
    """Why the reference cannot tell a real kernel from a constant, if it cannot (METR's filters). ``trials``
    is read by index, one at a time (two for the across-seeds check): it may compute each when asked."""
    import torch

    def each(index: int):
        for trial in range(len(trials)):
            yield trials[trial].tensors[index]

    def slices(index: int):
        for value in each(index):
            for _, (a,) in float64_slices(value):
                yield a

    reasons: list[str] = []
    count = len(trials)
    outputs = [(t.numel(), t.dtype) for t in trials[0].tensors]  # sizes only: no output held across checks
    for index, (size, dtype) in enumerate(outputs):
        if size == 0:
            continue
        numel = count * size
        scale = max(float(a.abs().nan_to_num(0.0).max()) for a in slices(index))
        near = NEAR_RELATIVE * scale
        zero = sum(int((a.abs() <= near).sum()) for a in slices(index)) / numel
        if scale == 0.0 or zero >= DEGENERATE_FRACTION:
            reasons.append(
                f"DEGENERATE_REFERENCE: output {index} is {zero:.0%} zeros across {count} seeds; "
                "a constant output would pass, so no candidate can be judged on this problem"
            )
            continue
        tol = tolerance_for(str(dtype))
        if all(
            bool(torch.isclose(torch.zeros_like(a), a, rtol=tol.rtol, atol=tol.atol).all())
            for a in slices(index)
        ):
            reasons.append(
                f"DEGENERATE_REFERENCE: an all-zero output passes the tolerance on output {index} "
                f"(values are below atol {tol.atol:g}); scale the problem's inputs"
            )
            continue
        if size >= MEAN_CHECK_MIN_NUMEL:
            constant = 0
            for v in each(index):
                mean = sum(float(a.sum()) for _, (a,) in float64_slices(v)) / v.numel()
                constant += sum(int(((a - mean).abs() <= near).sum()) for _, (a,) in float64_slices(v))
            if constant / numel >= DEGENERATE_FRACTION:
                reasons.append(
                    f"DEGENERATE_REFERENCE: output {index} is {constant / numel:.0%} equal to its mean; "
                    "a constant output would pass"
                )
                continue
        if count >= 2:
            values = each(index)
            base = next(values)
            same = min(
                sum(int(((a - a0).abs() <= near).sum()) for _, (a, a0) in float64_slices(v, base)) / v.numel()
                for v in values
            )
            if same >= UNCHANGED_ACROSS_SEEDS_FRACTION:
                reasons.append(
                    f"DEGENERATE_REFERENCE: output {index} is {same:.0%} unchanged across seeds; "
                    "a memorised output would pass"
                )
    return reasons

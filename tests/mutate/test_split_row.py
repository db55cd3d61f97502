"""The ``split_row`` edit: a row split over several programs that publish their partial reductions and wait for
each other. Triton's interpreter runs one program at a time, so on the CPU the edit is run with one program a
row (every publish, wait and combine still runs, the wait satisfied at once); several programs a row run on a
GPU (``gpu`` marker). Kernels where splitting would change what is computed are left alone, and the proposer
does not offer the edit to runs evaluated on the CPU."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ksmith_mutate.edits import EDIT_KINDS, _ReplaceNodes, possible_edits
from ksmith_mutate.plugin import MEMORY_STRUCTURAL_FIRST, WAITING_KINDS
from ksmith_mutate.source_model import parse
from ksmith_mutate.split_row import MAX_BLOCK, SPLITS, split_row_changes

from .conftest import KernelChecker

PROBLEMS = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems"
# (group, name, (reductions between the passes, meetings), sizes: a row in SPLIT_ROW slices)
CASES = [
    ("softmax", "online_softmax", (2, 1), {"batch_size": 3, "vocab_size": 3000}),
    (
        "softmax",
        "online_softmax",
        (2, 1),
        {"batch_size": 2, "vocab_size": 100},
    ),  # slices with nothing in them
    ("normalization", "rmsnorm", (1, 1), {"batch_size": 3, "hidden": 1000}),
    ("normalization", "layernorm", (2, 2), {"batch_size": 3, "hidden": 1500}),  # the variance needs the mean
    ("reduction", "l2_norm", (1, 1), {"batch_size": 3, "dim": 700}),
]
ONLINE_SUM = "row_sum = tl.sum(running_sum * lane_scale, axis=0)"
OUTPUT = "tl.exp(x - row_max) / row_sum"


def _seed(group: str, name: str) -> str:
    return (PROBLEMS / group / f"{name}.seed.py").read_text(encoding="utf-8")


def _split(source: str, split: int) -> str:
    """The edit at ``split`` programs a row (tests only: the proposer offers SPLITS)."""
    model = parse(source)
    (change,) = list(split_row_changes(model, (split,)))
    return model.module.visit(_ReplaceNodes({id(old): (old, new) for old, new in change[1]})).code


def _checker(tmp_path, group, name, sizes):
    checker = KernelChecker(name, tmp_path, PROBLEMS / group)
    for key, value in sizes.items():
        assert hasattr(checker.problem, key)
        setattr(checker.problem, key, value)
    return checker


def test_offered_on_the_suites_looped_row_reductions():
    for group, name, reductions, _ in CASES:
        edits = [e for e in possible_edits(_seed(group, name), ("split_row",))]
        assert [e.detail["split"] for e in edits] == list(SPLITS), name
        assert all((e.detail["reductions"], e.detail["meetings"]) == reductions for e in edits), name
        source = edits[0].source
        assert f"BLOCK_SIZE=_split_row_block(n_cols, {SPLITS[0]}, " in source
        assert f"num_warps=_split_row_warps(n_cols, {SPLITS[0]}, " in source
        assert "if (n_cols > 0) & (n_cols <= SPLIT_ROW * BLOCK_SIZE):" in source
        combined = source.count("_split_row_reduce(tl.") + 2 * source.count("= _split_row_online_softmax(")
        assert combined == reductions[0]
        assert not possible_edits(source, ("split_row",)), "a split kernel is not split again"
    assert "split_row" in EDIT_KINDS and "split_row" in MEMORY_STRUCTURAL_FIRST


@pytest.mark.parametrize("group, name, reductions, sizes", CASES)
def test_one_program_a_row_computes_the_same(tmp_path, group, name, reductions, sizes):
    checker = _checker(tmp_path, group, name, sizes)
    source = _split(_seed(group, name), 1)
    assert checker.max_error(source) < 1e-5
    # A row longer than one program's block: the row's first program walks it with the loops.
    width = {k: MAX_BLOCK + 808 for k in sizes if k != "batch_size"}
    assert _checker(tmp_path, group, name, {"batch_size": 2, **width}).max_error(source) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("group, name, reductions, sizes", CASES)
def test_several_programs_a_row_compute_the_same(tmp_path, group, name, reductions, sizes, split):
    checker = _checker(tmp_path, group, name, sizes)
    if checker.device != "cuda":
        pytest.skip("programs of a row wait for each other: needs a GPU")
    source = _split(_seed(group, name), split)
    assert checker.max_error(source) < 1e-5
    # A row beyond SPLIT_ROW blocks (the row's first program walks it), and for online softmax the suite's
    # 32768-wide rows.
    width = {k: split * MAX_BLOCK + 8 for k in sizes if k != "batch_size"}
    assert _checker(tmp_path, group, name, {"batch_size": 2, **width}).max_error(source) < 1e-5
    if name == "online_softmax":
        checker = _checker(tmp_path, group, name, {"batch_size": 64, "vocab_size": 32768})
        assert checker.max_error(source) < 1e-5


@pytest.mark.parametrize(
    "why, old, new",
    [
        ("the rescaled lanes are read after the sum", OUTPUT, OUTPUT + " + 0.0 * lane_scale"),
        (
            "two factors depend on the maximum",
            ONLINE_SUM,
            ONLINE_SUM.replace("* lane_scale", "* lane_scale * tl.exp(row_max - row_max)"),
        ),
        (
            "not written as a difference",
            "tl.exp(running_max - row_max)",
            "tl.exp(running_max + (0.0 - row_max))",
        ),
    ],
)
def test_a_sum_not_rescalable_from_its_own_maximum_meets_alone(tmp_path, why, old, new):
    """The online softmax's maximum and sum meet once only where each program's sum can be rescaled to the
    row's maximum; otherwise each reduction meets alone, and the result is still right."""
    seed = _seed("softmax", "online_softmax")
    assert old in seed
    changed = seed.replace(old, new)
    (edit, *_) = possible_edits(changed, ("split_row",))
    assert edit.detail["meetings"] == 2, why
    checker = _checker(tmp_path, "softmax", "online_softmax", {"batch_size": 3, "vocab_size": 3000})
    assert checker.max_error(_split(changed, 1)) == pytest.approx(checker.max_error(changed), abs=1e-5)


def test_a_broken_combine_is_caught(tmp_path):
    """The check can fail: an output pass that starts one element into its slice is wrong."""
    checker = _checker(tmp_path, "normalization", "rmsnorm", {"batch_size": 3, "hidden": 1000})
    source = _split(_seed("normalization", "rmsnorm"), 1)
    start = "start = _ks_part * BLOCK_SIZE"
    assert source.count(start) == 2
    head, tail = source.rsplit(start, 1)
    assert not checker.max_error(head + start + " + 1" + tail) < 1e-3


def test_not_offered_to_runs_evaluated_on_the_cpu(monkeypatch):
    from ksmith_mutate import plugin

    seen = {}

    def pick(plan, edits_by_parent, taken, bandit, pending, rng, skipped_kinds, *rest):
        seen["skipped"] = skipped_kinds
        return None

    monkeypatch.setattr(plugin, "_pick_edit", pick)
    monkeypatch.setattr(plugin, "_plans", lambda run, selection: [object()])
    monkeypatch.setattr(
        plugin.EditBandit, "from_population", classmethod(lambda cls, *a: SimpleNamespace(summary=dict))
    )
    for device, skipped in (("cpu", True), ("cuda", False)):
        state: dict = {}
        run = SimpleNamespace(
            config=SimpleNamespace(eval=SimpleNamespace(device=device), proposals_per_step=1),
            problem=SimpleNamespace(source="import torch\n"),
            population=[],
            by_id={},
            state=lambda name, state=state: state.setdefault(name, {}),
            rng=None,
            note_dropped=None,
        )
        assert plugin.propose(run, None) == []
        assert (WAITING_KINDS <= seen["skipped"]) is skipped, device


KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += {FIRST}
    total = {BETWEEN}
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        tl.store(out_ptr + row * n_cols + cols, {OUT}, mask=cols < n_cols)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _k[{GRID}](x, out, x.shape[1], BLOCK=1024)
        return out
"""
LOAD = "tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)"


def _kernel(first=LOAD, between="tl.sum(acc, axis=0)", out="total + 0 * cols", grid="(x.shape[0],)"):
    return KERNEL.format(FIRST=first, BETWEEN=between, OUT=out, GRID=grid)


def test_the_minimal_kernel_is_offered():
    assert len(possible_edits(_kernel(), ("split_row",))) == len(SPLITS)


@pytest.mark.parametrize(
    "why, source",
    [
        ("nothing combines lanes between the passes", _kernel(between="acc + 1.0", out="total")),
        ("a reduction inside a pass", _kernel(first="tl.sum(" + LOAD + ", axis=0)")),
        ("a reduction in the output pass", _kernel(out="total + tl.sum(tl.zeros([BLOCK], tl.float32))")),
        ("a reduction over another axis", _kernel(between="tl.sum(acc, axis=1)")),
        ("a nested reduction", _kernel(between="tl.sum(acc - tl.max(acc, axis=0), axis=0)")),
        (
            "a reduction evaluated only sometimes",
            _kernel(between="tl.sum(acc, axis=0) if n_cols > 1 else 0.0"),
        ),
        ("lane numbers between the passes", _kernel(between="tl.sum(acc * tl.arange(0, BLOCK), axis=0)")),
        ("a scan between the passes", _kernel(between="tl.cumsum(acc, axis=0)")),
        ("a method reduction", _kernel(between="acc.sum()")),
        ("a 2-D tile", _kernel(out="total + 0 * cols[:, None]")),
        ("the kernel reads the program count", _kernel(out="total + tl.num_programs(0) + 0 * cols")),
        ("an atomic", _kernel(first="tl.atomic_add(out_ptr, 1.0) + " + LOAD)),
        ("a grid of two axes", _kernel(grid="(x.shape[0], 1)")),
        ("a grid that is not a tuple", _kernel(grid="lambda meta: (x.shape[0],)")),
        ("the row is not program 0's", _kernel().replace("tl.program_id(0)", "tl.program_id(1)")),
        ("the module does not import torch", _kernel().replace("import torch\n", "", 1)),
        (
            "a jit helper that reduces",
            _kernel(first="_total(" + LOAD + ")").replace(
                "@triton.jit\ndef _k",
                "@triton.jit\ndef _total(v):\n    return tl.sum(v, axis=0) + 0 * v\n\n\n@triton.jit\ndef _k",
            ),
        ),
    ],
)
def test_kernels_splitting_would_change_are_left_alone(why, source):
    assert not possible_edits(source, ("split_row",)), why


def test_the_interpreter_refuses_several_programs_a_row_instead_of_hanging(tmp_path):
    checker = _checker(tmp_path, "normalization", "rmsnorm", {"batch_size": 3, "hidden": 1000})
    if checker.device != "cpu":
        pytest.skip("the interpreter runs on the CPU")
    with pytest.raises(RuntimeError, match="interpreter runs one program at a time"):
        checker.max_error(_split(_seed("normalization", "rmsnorm"), 4))

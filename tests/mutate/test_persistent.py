"""The ``persistent`` edit: a tiled matmul launched with at most one program per SM, each looping over output
tiles, keeps every result right (Triton interpreter on CPU, where the grid helper launches two programs, so each
loops over several tiles), hoists TMA descriptors out of the tile loop, composes with the other GEMM edits, and
leaves alone the kernels whose tile code could not run twice in one program."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from ksmith_inductor.gemm_template import gemm_text
from ksmith_mutate.edits import platform_limits, possible_edits
from ksmith_mutate.persistent import programs_per_sm

from .conftest import KernelChecker, import_file, seed_source

TOLERANCE = {"float32": 1e-4, "float16": 1e-2}
SUITE_MATMUL = Path(__file__).resolve().parents[2] / "plugins" / "ksmith_problems" / "problems" / "matmul"
LOOP = re.compile(r"for pid in tl\.range\(tl\.program_id\(0\), (\w+) \* (\w+), tl\.num_programs\(0\)\):")


def _persistent(source: str, batch_order: bool = False):
    """The rewrites (one and two programs per SM), not the steps of an existing one's programs per SM; in
    batch order or not."""
    return [
        e
        for e in possible_edits(source)
        if e.kind == "persistent"
        and not e.description.startswith("persistent programs per SM")
        and "TMA tensor descriptors" not in e.description  # the TMA rewrite made persistent in one edit
        and bool(e.detail.get("batch_order")) == batch_order
    ]


def _steps(source: str):
    return [
        e for e in possible_edits(source, ("persistent",)) if e.description.startswith("persistent programs")
    ]


def _small_tile(source: str) -> str:
    """The source at a 32 x 32 output tile (a ``gemm_config`` edit), so the small sizes have several tiles."""
    for edit in possible_edits(source, ("gemm_config",)):
        block_m, block_n = edit.detail["config"][:2]
        if block_m <= 32 and block_n <= 32:
            return edit.source
    raise AssertionError("no gemm_config edit to a 32 x 32 tile")


def _checker(directory: Path | None, name: str, tmp_path: Path) -> tuple[KernelChecker, str]:
    if directory is None:
        return KernelChecker(name, tmp_path), seed_source(name)
    return KernelChecker(name, tmp_path, directory), (directory / f"{name}.seed.py").read_text(
        encoding="utf-8"
    )


@pytest.mark.parametrize(
    "directory, name",
    [
        (SUITE_MATMUL, "matmul"),
        (SUITE_MATMUL, "bmm"),  # program_id(1) is the batch: it stays, each batch's tiles loop on axis 0
        (SUITE_MATMUL, "matmul_gelu"),
        (None, "matmul_bias_relu"),
        (None, "linear_scaled"),  # k counts tiles; a bias and a scale in the epilogue
    ],
)
def test_persistent_keeps_the_matmul_correct(directory, name, tmp_path):
    checker, seed = _checker(directory, name, tmp_path)
    seed = _small_tile(seed)
    (edit,) = _persistent(seed)
    assert edit.detail["per_sm"] == 4  # a 32 x 32 tile: registers and shared memory allow more, capped at 4
    source = edit.source
    assert LOOP.search(source), source
    assert "_persistent_grid(" in source and source.count("tl.program_id(0)") == 1
    assert _persistent(source) == [] == _persistent(source, batch_order=True)  # not made persistent twice
    tolerance = TOLERANCE[checker.output_dtype(seed)]
    error = checker.max_error(source)
    assert error < tolerance, f"{edit.description}: relative error {error:.3g}"
    # The programs per SM step x2 / /2 within 1..4, and stay correct (on CPU: two "SMs", so one program per SM
    # loops over six of the twelve tiles).
    (half,) = _steps(source)
    assert half.detail["per_sm"] == 2
    steps = _steps(half.source)
    assert sorted(e.detail["per_sm"] for e in steps) == [1, 4]
    one = next(e for e in steps if e.detail["per_sm"] == 1)
    assert "_persistent_grid(grid, 1)" in one.source
    error = checker.max_error(one.source)
    assert error < tolerance, f"{one.description}: relative error {error:.3g}"
    # A launch configuration edit on the persistent kernel (the tile moves, the loop follows).
    configs = possible_edits(source, ("gemm_config",))
    assert configs
    moved = next(e for e in configs if e.detail["config"][0] != 32 or e.detail["config"][1] != 32)
    error = checker.max_error(moved.source)
    assert error < tolerance, f"{moved.description}: relative error {error:.3g}"


def test_the_tiles_outnumber_the_programs_on_the_interpreter(tmp_path):
    """What the tests above rely on: on CPU two programs are launched, fewer than the small size's tiles, so a
    program that did only its first tile would leave NaN in the poisoned output."""
    seed = _small_tile((SUITE_MATMUL / "matmul.seed.py").read_text(encoding="utf-8"))
    edit = _persistent(seed)[0]
    path = tmp_path / "persistent_matmul.py"
    path.write_text(edit.source, encoding="utf-8")
    module = import_file(path, "_persistent_matmul_programs")
    # Two "SMs" on the CPU: per_sm x 2 programs on axis 0, the other axes (a batch) as they were.
    assert module._persistent_grid(lambda meta: (12, 3), 1)({"a_ptr": 0, "M": 100}) == (2, 3)
    assert module._persistent_grid(lambda meta: (12, 3), 2)({"a_ptr": 0, "M": 100}) == (4, 3)
    assert module._persistent_grid((1, 5), 2)({}) == (1, 5)  # never more programs than the grid had
    # One program short of the loop stepping by the launched programs would skip tiles: break it and see.
    broken = edit.source.replace("tl.num_programs(0)", "tl.num_programs(0) * 2")
    checker = KernelChecker("matmul", tmp_path, SUITE_MATMUL)
    assert checker.max_error(edit.source) < 1e-2
    assert not checker.max_error(broken) < 1e-2  # NaN, or a wrong value, where a tile was skipped


BATCH_LOOP = re.compile(
    r"for work in tl\.range\(tl\.program_id\(0\), (\w+) \* (\w+) \* num_batches, tl\.num_programs\(0\)\):"
)


def test_a_batched_matmul_also_runs_persistent_in_batch_order(tmp_path):
    """bmm's batch axis folded into the tile loop: one grid axis, ``batch = work // tiles`` and ``pid = work %
    tiles``, the batch count passed from the launch grid's second axis; correct on the interpreter, where two
    programs loop over every batch's tiles, and at one program per SM after a step."""
    checker = KernelChecker("bmm", tmp_path, SUITE_MATMUL)
    seed = _small_tile((SUITE_MATMUL / "bmm.seed.py").read_text(encoding="utf-8"))
    (edit,) = _persistent(seed, batch_order=True)
    source = edit.source
    assert BATCH_LOOP.search(source), source
    assert "batch = tl.cast(work // (num_pid_m * num_pid_n), tl.int64)" in source
    assert "pid = work % (num_pid_m * num_pid_n)" in source
    assert "tl.program_id(1)" not in source and "_persistent_batch_grid(grid, 4)" in source
    assert "num_batches=batch," in source
    assert _persistent(source) == [] == _persistent(source, batch_order=True)
    error = checker.max_error(source)
    assert error < 1e-2, f"{edit.description}: relative error {error:.3g}"
    (half,) = _steps(source)
    one = next(e for e in _steps(half.source) if e.detail["per_sm"] == 1)
    assert "_persistent_batch_grid(grid, 1)" in one.source
    assert checker.max_error(one.source) < 1e-2
    # Two "SMs" on the CPU: the tiles and batches become one axis of per_sm x 2 programs at most.
    path = tmp_path / "batch_order_bmm.py"
    path.write_text(source, encoding="utf-8")
    module = import_file(path, "_batch_order_bmm")
    assert module._persistent_batch_grid(lambda meta: (12, 3), 2)({"a_ptr": 0}) == (4, 1)
    assert module._persistent_batch_grid((1, 2), 4)({}) == (2, 1)  # never more programs than the grid had
    # A loop one batch short leaves a batch unwritten: the checker sees it.
    broken = source.replace("* num_batches,", "* (num_batches - 1),")
    assert not checker.max_error(broken) < 1e-2


def test_a_batched_matmul_s_tma_rewrite_is_made_persistent_in_batch_order_in_one_edit(tmp_path):
    """The combined TMA + persistent edit renders for bmm in batch order (two persistent forms exist for a
    batched kernel, and the combined edit takes the batch-order one, whose descriptors span every batch); from
    the TMA kernel, the axis-0 form is one more step, still correct."""
    seed = _small_tile((SUITE_MATMUL / "bmm.seed.py").read_text(encoding="utf-8"))
    combined = [
        e
        for e in possible_edits(seed, ("tma_loads", "persistent"))
        if e.kind == "persistent" and "TMA tensor descriptors" in e.description
    ]
    assert combined
    source = combined[0].source  # renders: exactly one persistent form taken
    assert "_persistent_batch_grid(" in source and "shape=[num_batches, " in source
    checker = KernelChecker("bmm", tmp_path, SUITE_MATMUL)
    assert checker.max_error(source) < 1e-2
    tma = possible_edits(seed, ("tma_loads",))[0].source
    (axis0,) = _persistent(tma)
    assert "_persistent_grid(" in axis0.source and "_persistent_batch_grid" not in axis0.source
    assert checker.max_error(axis0.source) < 1e-2


def _bmm_tma_in_batch_order(tmp_path: Path, change=lambda tma: tma) -> tuple[str, KernelChecker]:
    seed = _small_tile((SUITE_MATMUL / "bmm.seed.py").read_text(encoding="utf-8"))
    tma = change(possible_edits(seed, ("tma_loads",))[0].source)
    (ordered,) = _persistent(tma, batch_order=True)
    return ordered.source, KernelChecker("bmm", tmp_path, SUITE_MATMUL)


def _run_bmm(source: str, tmp_path: Path, a: torch.Tensor, b: torch.Tensor) -> float:
    path = tmp_path / "bmm_layouts.py"
    path.write_text(source, encoding="utf-8")
    module = import_file(path, f"_bmm_layouts_{abs(hash(source))}")
    out = module.ModelNew()(a, b).float()
    expected = torch.bmm(a.float(), b.float())
    return ((out - expected).abs().max() / expected.abs().max()).item()


def test_batch_order_builds_one_3d_descriptor_per_operand_before_the_loop(tmp_path):
    """In batch order, a TMA descriptor of one batch's matrix (its base ``ptr + batch * stride``) becomes one
    descriptor of every batch, ``[num_batches, rows, cols]`` with a block of one batch, built before the loop;
    each load names the batch and drops its axis. Right on the interpreter with B row-major and transposed (the
    kernel's other descriptor branch)."""
    source, checker = _bmm_tma_in_batch_order(tmp_path)
    loop = BATCH_LOOP.search(source)
    assert loop is not None
    descriptors = list(re.finditer(r"tl\.make_tensor_descriptor\((\w+), shape=\[num_batches, ", source))
    assert len(descriptors) == 4 and all(
        m.start() < loop.start() for m in descriptors
    )  # 2 operands x 2 layouts
    assert "block_shape=[1, BLOCK_M, BLOCK_K]" in source
    assert source.count("[batch.to(tl.int32), ") == 4 and source.count(".block_shape[1:])") == 4
    assert checker.max_error(source) < 1e-2
    torch.manual_seed(0)
    batch, m, n, k = 3, 70, 40, 48  # B transposed: strides (N * K, 1, K), still TMA-aligned
    a = torch.randn(batch, m, k, dtype=torch.float16)
    b = torch.randn(batch, n, k, dtype=torch.float16).transpose(1, 2)
    assert b.stride(1) == 1
    assert _run_bmm(source, tmp_path, a, b) < 1e-2
    # A load that forgets the batch reads batch 0's blocks for every batch: the check sees it.
    broken = source.replace("b_desc.load([batch.to(tl.int32), ", "b_desc.load([0, ")
    assert not checker.max_error(broken) < 1e-2


def test_batch_order_keeps_a_descriptor_it_cannot_widen_in_the_loop(tmp_path):
    """A descriptor assigned in a form the rewrite does not read (here B's base with a trailing ``+ 0``) stays a
    2-D descriptor built in the loop; the other operand's is still widened (its base written ``stride *
    batch``), and the kernel stays right."""

    def change(tma: str) -> str:
        old_a = "tl.make_tensor_descriptor(a_ptr + batch * stride_ab, shape=[M, K]"
        old_b = "tl.make_tensor_descriptor(b_ptr + batch * stride_bb, shape=[K, N]"
        assert old_a in tma and old_b in tma
        tma = tma.replace(old_a, "tl.make_tensor_descriptor(a_ptr + stride_ab * batch, shape=[M, K]")
        return tma.replace(old_b, "tl.make_tensor_descriptor(b_ptr + batch * stride_bb + 0, shape=[K, N]")

    source, checker = _bmm_tma_in_batch_order(tmp_path, change)
    loop = BATCH_LOOP.search(source)
    assert loop is not None
    a_descriptors = [m.start() for m in re.finditer(r"a_desc = tl\.make_tensor_descriptor\(a_ptr, ", source)]
    b_descriptors = [
        m.start() for m in re.finditer(r"b_desc = tl\.make_tensor_descriptor\(b_ptr \+ ", source)
    ]
    assert len(a_descriptors) == 2 and all(at < loop.start() for at in a_descriptors)
    assert len(b_descriptors) == 2 and all(at > loop.start() for at in b_descriptors)
    assert "b_desc.load([k, pid_n * BLOCK_N])" in source
    assert checker.max_error(source) < 1e-2


@pytest.mark.parametrize(
    "old, new, why",
    [
        (
            "batch = tl.program_id(1).to(tl.int64)\n    num_pid_m",
            "batch = tl.program_id(1).to(tl.int64)\n    stride_ab = stride_ab + 0 * batch\n    num_pid_m",
            "the batch read before the tile's code",
        ),
        (
            '(triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), batch)',
            '(triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]), batch * meta["GROUP_M"] // 8)',
            "a batch count that depends on the launch's meta-parameters",
        ),
    ],
)
def test_batch_order_leaves_alone_what_it_cannot_fold(old, new, why):
    seed = (SUITE_MATMUL / "bmm.seed.py").read_text(encoding="utf-8")
    assert old in seed
    changed = seed.replace(old, new)
    assert _persistent(changed), why  # made persistent on axis 0 still
    assert _persistent(changed, batch_order=True) == [], why


def test_persistent_tma_kernel_builds_its_descriptors_once(tmp_path):
    seed = (SUITE_MATMUL / "matmul.seed.py").read_text(encoding="utf-8")
    tma = possible_edits(_small_tile(seed), ("tma_loads",))[0].source
    source = _persistent(tma)[0].source
    loop = LOOP.search(source)
    assert loop is not None
    descriptors = [m.start() for m in re.finditer(r"tl\.make_tensor_descriptor\(", source)]
    assert descriptors and all(at < loop.start() for at in descriptors)
    assert source.count("if USE_TMA:") == 2  # the descriptors' branch before the loop, the K loop's in it
    checker = KernelChecker("matmul", tmp_path, SUITE_MATMUL)
    assert checker.max_error(source) < 1e-2


@pytest.mark.parametrize("op", ["addmm", "baddbmm"])
def test_persistent_inductor_gemm(op, tmp_path):
    helper, text = gemm_text(0, op)
    source = f"import torch\nimport triton\nimport triton.language as tl\n\n\n{text}\n"
    edit = _persistent(source)[0]
    path = tmp_path / f"persistent_{op}.py"
    path.write_text(edit.source, encoding="utf-8")
    module = import_file(path, f"_persistent_{op}")
    torch.manual_seed(0)
    shape = (2,) if op == "baddbmm" else ()
    a, b = torch.randn(*shape, 150, 90), torch.randn(*shape, 90, 140)  # 3 x 3 tiles of 64 x 64
    bias = torch.randn(140)
    out = torch.full((*shape, 150, 140), float("nan"))
    getattr(module, helper)(a, b, out, bias, alpha=0.7, beta=1.3)
    if shape:
        expected = torch.baddbmm(bias.expand(*shape, 150, 140), a, b, beta=1.3, alpha=0.7)
    else:
        expected = torch.addmm(bias, a, b, beta=1.3, alpha=0.7)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


def test_split_k_and_persistent_compose(tmp_path):
    checker, seed = _checker(SUITE_MATMUL, "matmul", tmp_path)
    split = next(e for e in possible_edits(_small_tile(seed), ("split_k",)) if e.detail["split_k"] == 4)
    edit = _persistent(split.source)[0]
    assert "_split_k_grid(" in edit.source and "_persistent_grid(" in edit.source
    assert checker.max_error(edit.source) < 1e-2


def _kernel_variant(old: str, new: str) -> str:
    seed = (SUITE_MATMUL / "matmul.seed.py").read_text(encoding="utf-8")
    assert old in seed
    return seed.replace(old, new)


@pytest.mark.parametrize(
    "old, new, why",
    [
        (
            "    offs_m = pid_m * BLOCK_M",
            "    a_ptr += 0\n    offs_m = pid_m * BLOCK_M",
            "a parameter moved in the tile's code: the second tile would start where the first left it",
        ),
        (
            "    num_pid_n = tl.cdiv(N, BLOCK_N)\n",
            "    num_pid_n = N // BLOCK_N + 1\n",
            "no tile count along N to loop to",
        ),
        (
            "    pid_n = (pid % num_pid_in_group) // group_size_m\n",
            "    pid_n = (pid % num_pid_in_group) // group_size_m\n    if pid_m >= num_pid_m:\n        return\n",
            "a return would end the program, not the tile",
        ),
        (
            "    num_pid_m = tl.cdiv(M, BLOCK_M)\n",
            "    num_pid_m = tl.cdiv(M, BLOCK_M) + 0 * tl.num_programs(0)\n",
            "the kernel reads its grid's size, which the edit changes",
        ),
    ],
)
def test_persistent_leaves_alone_what_it_cannot_loop(old, new, why):
    assert _persistent(_kernel_variant(old, new)) == [], why


def _launch_literals(block_m: int, block_n: int, block_k: int, stages: int, warps: int) -> dict[str, int]:
    """A launch's literal keywords for a GEMM configuration."""
    return {
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "BLOCK_K": block_k,
        "num_warps": warps,
        "num_stages": stages,
    }


@pytest.mark.parametrize(
    "config, expected",
    [
        ((128, 128, 64, 8, 3), 2),  # measured on the suite's matmul: two per SM 1.04x TMA alone, one 0.80x
        ((128, 128, 64, 8, 5), 1),  # 160 KiB of pipeline: one (measured 1.09x TMA alone)
        ((128, 256, 64, 8, 3), 1),  # 192 registers a thread: one
        ((64, 64, 32, 4, 3), 4),  # the seeds' tile: many fit, capped at 4
    ],
)
def test_programs_per_sm_follow_registers_and_shared_memory(config, expected):
    block_m, block_n, block_k, warps, stages = config
    assert programs_per_sm(_launch_literals(block_m, block_n, block_k, stages, warps), 232448, 2) == expected
    assert programs_per_sm({"BLOCK_M": 64, "num_warps": 4}, 232448, 2) is None  # no literal tile


def test_tma_and_persistent_in_one_edit():
    """From a pointer-load parent, ``persistent`` is also offered with the TMA rewrite at each large tile, at
    the programs per SM that tile allows."""
    seed = (SUITE_MATMUL / "matmul.seed.py").read_text(encoding="utf-8")
    combined = [
        e
        for e in possible_edits(seed, ("tma_loads", "persistent"))
        if e.kind == "persistent" and "TMA" in e.description
    ]
    assert len(combined) == len([e for e in possible_edits(seed, ("tma_loads",))])
    for edit in combined:
        assert "tl.make_tensor_descriptor(" in edit.source and LOOP.search(edit.source)
        config = edit.detail.get("config")
        if config is not None:
            literals = _launch_literals(*config)  # [M, N, K, stages, warps], as gemm_config records it
            per_sm = programs_per_sm(literals, platform_limits().shared_memory_bytes, 2)
            assert f"_persistent_grid(grid, {per_sm})" in edit.source


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["matmul", "matmul_bias_relu", "bmm"])
def test_persistent_tma_at_full_size_on_the_gpu(tmp_path, name):
    """On a GPU: one program per SM (the count the device reports) loops over the full size's tiles, the
    descriptors built once, and the result matches the reference; then at two programs per SM."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    checker = KernelChecker(name, tmp_path, SUITE_MATMUL)
    module = import_file(SUITE_MATMUL / f"{name}.py", f"_persistent_full_{name}")
    checker.problem = module  # the full size: no KSMITH_SMALL applied
    seed = (SUITE_MATMUL / f"{name}.seed.py").read_text(encoding="utf-8")
    combined = [
        e
        for e in possible_edits(seed, ("tma_loads", "persistent"))
        if e.kind == "persistent" and e.detail.get("config") == [128, 256, 64, 3, 8]
    ]
    assert len(combined) == 1
    source = combined[0].source
    helper = "_persistent_batch_grid" if name == "bmm" else "_persistent_grid"  # bmm's in batch order
    assert f"{helper}(grid, 1)" in source
    for per_sm in (1, 2):
        candidate = source.replace(f"{helper}(grid, 1)", f"{helper}(grid, {per_sm})")
        assert checker.max_error(candidate) < 1e-2, per_sm
    path = tmp_path / f"persistent_{name}.py"
    path.write_text(source, encoding="utf-8")
    edited = import_file(path, f"_persistent_full_edit_{name}")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    meta = {"a": torch.empty(1, device="cuda")}
    assert edited._persistent_grid(lambda m: (10_000, 16), 2)(meta) == (2 * sms, 16)


@pytest.mark.gpu
def test_bmm_in_batch_order_at_full_size_on_the_gpu(tmp_path):
    """On a GPU, the suite's bmm at full size (16 batches) in batch order, from the seed and from its TMA
    rewrite, at one and two programs per SM: every batch's tiles written right."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    checker = KernelChecker("bmm", tmp_path, SUITE_MATMUL)
    checker.problem = import_file(SUITE_MATMUL / "bmm.py", "_batch_order_full_bmm")  # no KSMITH_SMALL
    seed = (SUITE_MATMUL / "bmm.seed.py").read_text(encoding="utf-8")
    tma = possible_edits(seed, ("tma_loads",))[0].source
    for parent in (seed, tma):
        (edit,) = _persistent(parent, batch_order=True)
        grid = re.search(r"_persistent_batch_grid\(grid, (\d)\)", edit.source)
        assert grid is not None
        for per_sm in (1, 2):
            source = edit.source.replace(grid.group(0), f"_persistent_batch_grid(grid, {per_sm})")
            assert checker.max_error(source) < 1e-2, (edit.description, per_sm)

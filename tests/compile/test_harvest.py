"""``ksmith harvest``: model -> problems, and the loop back: evolve one, export it, swap it into the model."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

pytest.importorskip("transformers")

from ksmith_compile import Recorder  # noqa: E402
from ksmith_compile.harvest import harvest  # noqa: E402
from ksmith_core.loading import load_problem  # noqa: E402

from .conftest import DATA, ksmith  # noqa: E402
from .helpers import tiny_llama, triton_launches  # noqa: E402


@pytest.mark.slow
def test_harvest_writes_one_problem_per_distinct_region_at_the_models_shapes(tmp_path):
    summary = harvest(DATA / "tiny_llama.py", tmp_path / "out")
    problems = {tuple(p["ops"]): p for p in summary["problems"]}
    norm = problems[("to", "pow", "mean", "add", "rsqrt", "mul", "to", "mul")]
    assert norm["kind"] == "fusible" and len(norm["occurrences"]) == 2  # the layer's two norms, written once
    assert norm["inputs"] == [{"shape": [2, 8, 64], "dtype": "float32"}]
    assert problems[("silu", "mul")]["kind"] == "fusible"  # the activation product
    assert problems[("linear", "silu", "mul")]["kind"] == "matmul"  # the gate projection with its epilogue
    assert problems[("add", "to", "pow", "mean", "add", "rsqrt", "mul", "to", "mul")]["kind"] == "fusible"
    linears = [p for p in summary["problems"] if p["ops"] == ["linear"]]  # q (64x64); k and v (32x64)
    # A GEMM seed beside every matmul problem whose epilogue harvest can write (on CPU Inductor writes none).
    gemms = [p for p in summary["problems"] if p["kind"] == "matmul"]
    seeded = {tuple(p["ops"]) for p in gemms if p["seed"] and (tmp_path / "out" / p["seed"]).is_file()}
    assert seeded == {("linear",), ("linear", "add"), ("linear", "silu", "mul"), ("linear", "mul")}
    assert len(linears) == 2 and all(p["seed"] for p in linears)
    assert json.loads((tmp_path / "out" / "harvest.json").read_text()) == summary
    for p in summary["problems"]:  # every file is a KernelBench problem ksmith loads
        assert load_problem(tmp_path / "out" / p["file"]).name == p["problem"]


@pytest.mark.slow
def test_a_harvested_problem_evolved_and_exported_swaps_back_into_the_model(tmp_path):
    out = tmp_path / "problems"
    proc = ksmith("harvest", DATA / "tiny_llama.py", "-o", out, "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    norm = next(p for p in summary["problems"] if p["ops"][:5] == ["to", "pow", "mean", "add", "rsqrt"])
    run = tmp_path / "run"
    proc = ksmith(
        "evolve", out / norm["file"], "--seed", DATA / "harvested_rmsnorm.seed.py",
        "--budget", "2", "--device", "cpu", "--run-dir", run, "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["best"]["status"] == "ok"
    proc = ksmith("export", run, "--target", "library", "-o", tmp_path / "lib")
    assert proc.returncode == 0, proc.stderr
    # The o_proj matmul with its residual add, evolved from the seed harvest wrote beside it.
    gemm = next(p for p in summary["problems"] if p["ops"] == ["linear", "add"])
    assert gemm["seed"] == gemm["file"].replace(".py", ".seed.py")
    proc = ksmith(
        "evolve",
        out / gemm["file"],
        "--budget",
        "1",
        "--device",
        "cpu",
        "--run-dir",
        tmp_path / "r2",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["best"]["status"] == "ok"
    proc = ksmith("export", tmp_path / "r2", "--target", "library", "-o", tmp_path / "lib")
    assert proc.returncode == 0, proc.stderr

    model, inputs = tiny_llama()
    with torch.no_grad():
        want = model(*inputs)
        torch._dynamo.reset()
        with Recorder() as recorder:
            compiled = torch.compile(model, backend="kernelsmith", options={"library": str(tmp_path / "lib")})
            got = compiled(*inputs)
    # The first norm; the post-attention norm too, once the o_proj GEMM + residual add before it is swapped
    # (no Inductor fusion left to split there); not the final norm, whose residual add stays Inductor's.
    swapped = [(r.entry, r.region.split("@")[1]) for r in recorder.regions if r.swapped]
    assert [node for entry, node in swapped if entry == norm["problem"]] == [
        "hidden_states_2", "hidden_states_8"
    ]  # fmt: skip
    assert [node for entry, node in swapped if entry == gemm["problem"]] == ["hidden_states_5"]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_projections_of_one_input_are_one_problem_with_a_one_kernel_seed(tmp_path):
    """The gate/up pair's seed names its weights as the problem does, whichever projection the model computes
    first; two projections of different inputs are no group; two bare projections of one input are one."""
    out = tmp_path / "out"
    summary = harvest(DATA / "gate_up_mlp.py", out)
    groups = {tuple(p["ops"]): p for p in summary["problems"] if p["kind"] == "matmuls"}
    assert sorted(groups) == [("linear", "linear"), ("linear", "linear", "silu", "mul")]  # up first, as run
    pair, kv = groups["linear", "linear", "silu", "mul"], groups["linear", "linear"]
    assert pair["inputs"] == [{"shape": [6, 48], "dtype": "float32"}] and pair["occurrences"] == ["0:mul"]
    seed = (out / pair["seed"]).read_text()
    assert "gate, up = self.p1.contiguous(), self.p0.contiguous()" in seed  # p0 is the up weight here
    for group in (pair, kv):
        proc = ksmith("eval", out / group["file"], out / group["seed"], "--device", "cpu", "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["status"] == "ok", group
    # A seed with the weights the other way round computes silu(up) * gate: the evaluator says so.
    swapped = seed.replace(
        "self.p1.contiguous(), self.p0.contiguous()", "self.p0.contiguous(), self.p1.contiguous()"
    )
    (out / "swapped.seed.py").write_text(swapped)
    proc = ksmith("eval", out / pair["file"], out / "swapped.seed.py", "--device", "cpu", "--json")
    assert json.loads(proc.stdout)["status"] == "incorrect"


@pytest.mark.parametrize("rows, block_m, stages", [(6, 16, 5), (40, 64, 4)])
def test_decode_shaped_half_precision_groups_get_the_skinny_tile(tmp_path, rows, block_m, stages):
    """At a few rows of fp16/bf16 the seeds take 16 columns a program and long K steps (many programs streaming
    the weight, as §11c measured best; at one 16-row tile, the group of projections 32 and both at 2 warps,
    §11g), and one program covers every row, so each weight tile is read once; they still compute the model's
    result. fp32 keeps the square tile."""
    model = tmp_path / "gate_up_mlp_half.py"
    model.write_text(
        (DATA / "gate_up_mlp.py").read_text().replace("batch_size = 6", f"batch_size = {rows}")
        + """

_Float = Model


class Model(_Float):
    def __init__(self):
        super().__init__()
        self.half()


def get_inputs():
    return [torch.randn(batch_size, hidden).half(), torch.randn(batch_size, hidden).half()]
"""
    )
    out = tmp_path / "out"
    problems = harvest(model, out)["problems"]
    groups = [p for p in problems if p["kind"] == "matmuls"]
    assert len(groups) == 2
    singles = [p for p in problems if p["kind"] == "matmul" and p.get("seed")]
    assert singles
    one_tile = block_m == 16  # the configurations measured at one 16-row tile (ONE_TILE_CONFIGS)
    for single in singles:
        seed = (out / single["seed"]).read_text()
        assert f"BLOCK_M={block_m}, BLOCK_N=16," in seed and f"num_warps={2 if one_tile else 4}," in seed, (
            seed
        )
    for group in groups:
        seed = (out / group["seed"]).read_text()
        block_n = 32 if one_tile else 16
        assert f"BLOCK_M={block_m}, BLOCK_N={block_n}, BLOCK_K=64," in seed, seed
        want_stages = 3 if one_tile and "_gate_up_kernel" in seed else stages
        assert f"num_stages={want_stages}" in seed and f"triton.cdiv(M, {block_m})" in seed, seed
        proc = ksmith("eval", out / group["file"], out / group["seed"], "--device", "cpu", "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["status"] == "ok", group
    if rows == 6:
        fp32 = harvest(DATA / "gate_up_mlp.py", tmp_path / "fp32")["problems"]
        for group in (p for p in fp32 if p["kind"] == "matmuls"):
            assert "BLOCK_M=16, BLOCK_N=64, BLOCK_K=32," in (tmp_path / "fp32" / group["seed"]).read_text()


DOWN_MODEL = """
import torch
import torch.nn as nn

batch_size = 6
hidden = 48
intermediate = {intermediate}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Linear(intermediate, hidden, bias=False).half()

    def forward(self, x, z):
        return x + self.down(z)


def get_inputs():
    return [torch.randn(batch_size, hidden).half(), torch.randn(batch_size, intermediate).half()]


def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_a_decode_projection_with_long_k_gets_the_split_k_seed_whose_counts_stay_zero(tmp_path):
    """Where K is at least SPLIT_RATIO times N at one 16-row tile (Llama's down projection), the seed splits K
    over programs of one launch and the last of each column slice adds the partials: it passes the evaluator,
    leaves its arrival counts at zero after every call (the next call's correctness depends on it), and a copy
    that does not reset them is caught. A shorter K keeps the unsplit seed."""
    from ksmith_compile.seeds import SPLIT_RATIO

    out = tmp_path / "out"
    model = tmp_path / "down.py"
    model.write_text(
        DOWN_MODEL.format(intermediate=SPLIT_RATIO * 48 + 8)
    )  # ragged: K is not a multiple of a step
    (problem,) = harvest(model, out)["problems"]
    assert problem["ops"] == ["linear", "add"]
    seed = (out / problem["seed"]).read_text()
    assert "_split_linear_kernel[grid]" in seed and "split = 4" in seed
    assert _evaluate(out / problem["file"], out / problem["seed"]) == "ok"

    problem_module, seed_module = (_import(out / problem[key]) for key in ("file", "seed"))
    reference, kernel = problem_module.Model(), seed_module.ModelNew()
    kernel.load_state_dict(reference.state_dict())
    for call in range(3):  # new inputs each call: a result kept from an earlier call would show
        torch.manual_seed(call)
        x, z = problem_module.get_inputs()
        torch.testing.assert_close(kernel(x, z), reference(x, z), atol=2e-2, rtol=2e-2)
        assert int(kernel.arrived.abs().sum()) == 0

    # The partials are laid out by the rows there are, not the tile's: an edit to a taller tile stays correct.
    (out / "tall.seed.py").write_text(seed.replace("BLOCK_M=16,", "BLOCK_M=32,"))
    assert _evaluate(out / problem["file"], out / "tall.seed.py") == "ok"

    no_reset = seed.replace("        tl.atomic_xchg(arrived_ptr + pid_n, 0)\n", "")
    assert no_reset != seed
    (out / "no_reset.seed.py").write_text(no_reset)
    assert _evaluate(out / problem["file"], out / "no_reset.seed.py") == "incorrect"

    model.write_text(DOWN_MODEL.format(intermediate=SPLIT_RATIO * 48 - 16))
    (short,) = harvest(model, tmp_path / "short")["problems"]
    assert "_linear_kernel[grid]" in (tmp_path / "short" / short["seed"]).read_text()


NORM = ["to", "pow", "mean", "add", "rsqrt", "mul", "to", "mul"]  # Llama's RMSNorm as Dynamo records it
QKV, GATE_UP = ["linear"] * 3, ["linear", "silu", "linear", "mul"]


@pytest.mark.slow
def test_the_norm_before_a_group_is_one_region_with_it_whose_seed_rounds_as_eager(tmp_path):
    """In a float16 decode step the RMSNorm before q/k/v and before gate/up is written with its group, alone and
    with the residual add before it (whose sum the region also returns, the next residual). Each seed passes
    the evaluator; one that never writes the residual sum, or forgets the norm's weight, does not."""
    out = tmp_path / "out"
    summary = harvest(DATA / "tiny_llama_decode.py", out)
    normed = {
        tuple(p["ops"]): p for p in summary["problems"] if p["kind"] == "matmuls" and "rsqrt" in p["ops"]
    }
    assert sorted(normed) == sorted(
        tuple(prologue + group) for prologue in (NORM, ["add", *NORM]) for group in (QKV, GATE_UP)
    )
    assert len(normed[tuple(NORM + QKV)]["occurrences"]) == 2  # both layers' input norms
    assert len(normed[("add", *NORM, *QKV)]["occurrences"]) == 1  # the second layer's, after its residual add
    assert len(normed[("add", *NORM, *GATE_UP)]["occurrences"]) == 2
    assert normed[("add", *NORM, *GATE_UP)]["inputs"] == [{"shape": [4, 1, 64], "dtype": "float16"}] * 2
    for problem in normed.values():
        seed = (out / problem["seed"]).read_text()
        assert "BLOCK_N=16, BLOCK_K=64," in seed  # the decode tile
        assert _evaluate(out / problem["file"], out / problem["seed"]) == "ok", problem["problem"]
    residual = normed[("add", *NORM, *GATE_UP)]
    seed = (out / residual["seed"]).read_text()
    for wrong, right in (
        ("writes_sum = pid_n < 0", "writes_sum = pid_n == 0"),
        ("x = (x.to", "x = g[None, :] * (x.to"),
    ):
        assert right in seed
        (out / "broken.seed.py").write_text(seed.replace(right, wrong))
        assert _evaluate(out / residual["file"], out / "broken.seed.py") == "incorrect", wrong


@pytest.mark.slow
def test_normed_seeds_cover_two_row_blocks_a_ragged_width_and_an_add_only_the_norm_reads(tmp_path):
    """20 rows (two row blocks), hidden 100 (a partial last tile). An add that only its norm reads is inside the
    norm's piece: the seed adds the two inputs and returns only the projections. A residual sum the output reads
    again is returned, written for every row block: a seed that writes the first block's only is caught."""
    out = tmp_path / "out"
    summary = harvest(DATA / "normed_block.py", out)
    normed = {
        tuple(p["ops"]): p for p in summary["problems"] if p["kind"] == "matmuls" and "rsqrt" in p["ops"]
    }
    prenorm, residual = normed[("add", *NORM, *QKV)], normed[("add", *NORM, *GATE_UP)]
    assert sorted(normed) == sorted([("add", *NORM, *QKV), ("add", *NORM, *GATE_UP), (*NORM, *GATE_UP)])
    assert "return projections" in (out / prenorm["seed"]).read_text()
    assert "return (h.reshape(shape), product)" in (out / residual["seed"]).read_text()
    for problem in normed.values():
        assert _evaluate(out / problem["file"], out / problem["seed"]) == "ok", problem["problem"]
    seed = (out / residual["seed"]).read_text()
    right = "writes_sum = pid_n == 0"
    assert right in seed
    (out / "first_block.seed.py").write_text(seed.replace(right, "writes_sum = (pid_n == 0) & (pid_m == 0)"))
    assert _evaluate(out / residual["file"], out / "first_block.seed.py") == "incorrect"


def _import(path):
    spec = importlib.util.spec_from_file_location(f"ksmith_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _evaluate(problem, seed):
    proc = ksmith("eval", problem, seed, "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["status"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "ops, outputs, node, kernel",
    [
        (GATE_UP, 1, "mul_11", "_gate_up_kernel"),  # gate and up, silu(g) * u
        (QKV, 3, "linear", "_grouped_linear_kernel"),  # q, k and v
        (NORM + QKV, 3, "linear", "_normed_grouped_kernel"),  # the input norm and q, k and v
        (["add", *NORM, *GATE_UP], 2, "hidden_states_5", "_normed_gate_up_kernel"),  # residual, norm, gate/up
    ],
)
def test_a_group_of_projections_evolved_and_exported_swaps_back_as_one_kernel(
    tmp_path, ops, outputs, node, kernel
):
    summary = harvest(DATA / "tiny_llama.py", tmp_path / "problems")
    (group,) = [p for p in summary["problems"] if p["kind"] == "matmuls" and p["ops"] == ops]
    assert group["seed"]
    library = _evolved_library(tmp_path / "problems" / group["file"], tmp_path)

    from ksmith_compile.library import load_library

    (entry,) = load_library(library).entries
    assert entry.outputs == outputs
    with triton_launches(entry) as launched:
        got, want, recorder = _decoder_with(library)
    swapped = [(r.entry, r.region.split("@")[1]) for r in recorder.regions if r.swapped]
    assert swapped == [(group["problem"], node)]  # every projection of the group: one kernel
    assert launched == [kernel]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_a_group_swaps_in_the_order_of_projections_whose_guards_hold(tmp_path):
    """A k/v entry matches the decoder's q, k and v in six orders; (q, k) fails its guard (q is 64 wide), the
    entry is swapped where it fits, on k and v."""
    out = tmp_path / "problems"
    (group,) = [p for p in harvest(DATA / "kv_projections.py", out)["problems"] if p["kind"] == "matmuls"]
    got, want, recorder = _decoder_with(_evolved_library(out / group["file"], tmp_path))
    swapped = [r.region.split("@")[1] for r in recorder.regions if r.swapped]
    assert swapped in (["linear_1"], ["linear_2"])  # k and v, named after the first output of the order kept
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_overlapping_entries_claim_the_nodes_in_order_of_what_they_save(tmp_path):
    """A library with the q/k/v group and the same group with its norm: on the GPU each verdict says how much
    faster than torch.compile the kernel is on its own problem, and the entry that saves more claims the
    projections (the other is left out there, and the norm stays Inductor's when the group wins). The timings
    are the H100's (docs/benchmarks.md section 11e), written into the CPU entries' verdicts."""
    out = tmp_path / "problems"
    problems = {tuple(p["ops"]): p for p in harvest(DATA / "tiny_llama.py", out)["problems"]}
    group, normed = problems[tuple(QKV)], problems[tuple(NORM + QKV)]
    library = _evolved_library(out / group["file"], tmp_path, "run_group")
    _evolved_library(out / normed["file"], tmp_path, "run_normed")

    def measured(problem, runtime_ms, compile_ms):
        path = library / problem["problem"] / "entry.json"
        meta = json.loads(path.read_text())
        meta["verdict"].update(
            interpreted=False, runtime_ms=runtime_ms, reference_compile_ms=compile_ms,
            speedup_vs_compile=compile_ms / runtime_ms,
        )  # fmt: skip
        path.write_text(json.dumps(meta))

    for group_ms, normed_ms, winner in (
        ((0.0131, 0.0232), (0.0200, 0.0258), group),  # the group saves 10.1 us, the normed group 5.8 us
        ((0.0131, 0.0232), (0.0140, 0.0258), normed),  # a faster normed kernel: 11.8 us
    ):
        measured(group, *group_ms)
        measured(normed, *normed_ms)
        got, want, recorder = _decoder_with(library)
        assert [r.entry for r in recorder.regions if r.swapped] == [winner["problem"]]
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def _evolved_library(problem, tmp_path, run_name="run"):
    """``tmp_path/lib``: the problem evolved from its harvested seed (budget 1, CPU) and exported."""
    run = tmp_path / run_name
    proc = ksmith("evolve", problem, "--budget", "1", "--device", "cpu", "--run-dir", run, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["best"]["status"] == "ok"
    proc = ksmith("export", run, "--target", "library", "-o", tmp_path / "lib")
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "lib"


def _decoder_with(library):
    """The tiny decoder's output compiled with the library, eager's, and what the backend recorded."""
    model, inputs = tiny_llama()
    with torch.no_grad():
        want = model(*inputs)
        torch._dynamo.reset()
        with Recorder() as recorder:
            compiled = torch.compile(model, backend="kernelsmith", options={"library": str(library)})
            got = compiled(*inputs)
    return got, want, recorder


@pytest.mark.slow  # a ksmith process each (torch import): seconds
@pytest.mark.parametrize(
    "args, fragment",
    [
        (["nowhere.py", "-o", "out"], "nowhere.py: no such model file"),
        ([str(DATA / "llama_rmsnorm.seed.py"), "-o", "out"], "defines no Model, get_inputs"),
    ],
)
def test_harvest_bad_input_is_one_line_and_exit_2(args, fragment, tmp_path):
    proc = ksmith("harvest", *args, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], proc.stderr

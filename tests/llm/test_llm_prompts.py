"""What the prompts carry: problem, hardware, rules, parent with verdict and feedback, inspirations."""

from __future__ import annotations

from dataclasses import replace

from llm_helpers import seed_candidate, vector_add_run

from ksmith_core.model import Candidate, Selection, Status, Verdict
from ksmith_llm import prompts


def _ok(speedup: float) -> Verdict:
    return Verdict(status=Status.OK, correct=True, speedup=speedup, interpreted=True)


def test_improve_prompt_carries_everything_the_model_needs(tmp_path):
    run = vector_add_run(tmp_path / "run")
    seed = seed_candidate()
    parent, _ = run.add(seed, _ok(1.0))
    better = Candidate.from_source(seed.source.replace("num_warps=4", "num_warps=8"), parent_ids=(seed.id,),
                                   edit="num_warps 4 -> 8")  # fmt: skip
    best, _ = run.add(better, _ok(1.5))
    selection = Selection(parents=(parent,), inspirations=(best,), mode="improve")

    messages = prompts.improve_messages(run.problem, selection, parent, run.best, {}, "cpu")
    assert [m["role"] for m in messages] == ["system", "user"]
    text = messages[1]["content"]
    assert run.problem.source.strip() in text
    assert seed.source.strip() in text
    assert parent.feedback.strip() in text and "status: ok" in text
    assert "CPU interpreter" in text
    assert "class ModelNew" in text and "same __init__ and forward signature" in text
    assert "No torch computation in forward" in text
    assert "ONE targeted change" in text
    assert "<<<<<<< SEARCH" in text and ">>>>>>> REPLACE" in text and "```python" in text
    assert "Best kernel so far: status ok, speedup vs eager 1.500x (made by: num_warps 4 -> 8)" in text
    assert better.source.strip() in text


def test_fix_prompt_asks_for_a_repair_of_the_error_shown(tmp_path):
    run = vector_add_run(tmp_path / "run")
    broken = Candidate.from_source(seed_candidate().source.replace("tl.store", "tl.stor"))
    verdict = Verdict(status=Status.COMPILE_ERROR, error="AttributeError: module has no attribute 'stor'")
    scored, _ = run.add(broken, verdict)
    messages = prompts.improve_messages(
        run.problem, Selection(parents=(scored,), mode="fix"), scored, None, {}, "cpu"
    )
    text = messages[1]["content"]
    assert "Repair it" in text and "ONE targeted change" not in text
    assert "has no attribute 'stor'" in text
    assert "status: compile_error" in text


def test_gpu_facts_and_allowed_ops_reach_the_prompt(tmp_path):
    run = vector_add_run(tmp_path / "run")
    problem = replace(run.problem, allowed_ops=frozenset({"aten.mm"}))
    scored, _ = run.add(seed_candidate(), _ok(1.0))
    hardware = {"name": "NVIDIA H100 80GB HBM3", "peak_bandwidth_gbps": 3350}
    text = prompts.improve_messages(problem, Selection(parents=(scored,)), scored, None, hardware, "cuda")[1][
        "content"
    ]
    assert "NVIDIA GPU (NVIDIA H100 80GB HBM3)" in text
    assert "peak bandwidth gbps: 3350" in text
    assert "CPU interpreter" not in text
    assert "aten.mm" in text and "No torch computation" not in text


def test_platform_facts_reach_the_prompt(tmp_path):
    """A MetaX run's hardware facts (ksmith_core.platform summary): 64-lane warps, the num_warps cap and the
    MACA-only options are said in words; an NVIDIA run's say nothing of those options."""
    from ksmith_core.platform import PlatformSignals, platform_facts

    run = vector_add_run(tmp_path / "run")
    scored, _ = run.add(seed_candidate(), _ok(1.0))
    for backend, name in (("maca", "MetaX C500"), ("cuda", "NVIDIA H100 80GB HBM3")):
        facts = platform_facts(signals=PlatformSignals(triton_backend=backend, device_name=name))
        hardware = {"name": name, **facts.summary()}
        text = prompts.improve_messages(
            run.problem, Selection(parents=(scored,)), scored, None, hardware, "cuda"
        )
        text = text[1]["content"]
        if backend == "maca":
            assert "MetaX GPU (MetaX C500)" in text
            assert "a warp is 64 threads here; num_warps may be at most 16" in text
            assert "pipeline= one of 'basic', 'cpasync'" in text and "scenario=" in text
        else:
            assert "NVIDIA GPU (NVIDIA H100 80GB HBM3)" in text
            assert "a warp is 32 threads here; num_warps may be at most 32" in text
            assert "pipeline" not in text and "launch options" not in text


def test_seed_prompt_asks_for_a_whole_module(tmp_path):
    run = vector_add_run(tmp_path / "run")
    text = prompts.seed_messages(run.problem, {}, "cpu")[1]["content"]
    assert run.problem.source.strip() in text
    assert "complete module in a single ```python block" in text
    assert "SEARCH" not in text


def test_user_hints_are_added_to_every_prompt(tmp_path):
    run = vector_add_run(tmp_path / "run")
    scored, _ = run.add(seed_candidate(), _ok(1.0))
    hint = "Prefer BLOCK_SIZE 2048 on this machine."
    improve = prompts.improve_messages(
        run.problem, Selection(parents=(scored,)), scored, None, {}, "cpu", hint
    )
    assert improve[1]["content"].endswith("## Hints\n" + hint)
    assert prompts.seed_messages(run.problem, {}, "cpu", hint)[1]["content"].endswith("## Hints\n" + hint)
    assert "## Hints" not in prompts.seed_messages(run.problem, {}, "cpu")[1]["content"]


def test_the_prompt_names_the_candidates_language_and_platform(tmp_path):
    """Triton on NVIDIA, Triton on MACA, CUDA C++ and MACA C++: the backend says the language (``--backend
    cuda`` makes it C++ built with load_inline), the platform says how."""
    from dataclasses import replace

    from ksmith_core.platform import PlatformSignals, platform_facts

    run = vector_add_run(tmp_path / "run")
    scored, _ = run.add(seed_candidate(), _ok(1.0))
    seen = {}
    for backend in ("triton", "cuda"):
        problem = replace(run.problem, backend=backend)
        for triton_backend in ("cuda", "maca"):
            facts = platform_facts(signals=PlatformSignals(triton_backend=triton_backend, device_name="GPU"))
            hardware = {"name": "GPU", **facts.summary()}
            improve = prompts.improve_messages(
                problem, Selection(parents=(scored,)), scored, None, hardware, "cuda"
            )
            seed = prompts.seed_messages(problem, hardware, "cuda")
            seen[backend, triton_backend] = (improve[0]["content"], improve[1]["content"], seed[1]["content"])
    system, text, seed = seen["triton", "cuda"]
    assert "writing Triton kernels" in system and "forward launches @triton.jit kernels" in text
    assert "load_inline" not in text and "correct Triton implementation" in seed
    system, text, seed = seen["triton", "maca"]
    assert "Triton (mcTriton)" in system and "compiled by MetaX's mcTriton" in text
    system, text, seed = seen["cuda", "cuda"]
    assert "writing CUDA C++ kernels" in system
    assert "torch.utils.cpp_extension.load_inline" in text and "forward launches @triton.jit" not in text
    assert "all arithmetic happens inside CUDA C++ kernels (__global__ functions)" in text
    assert "no cuBLAS, cuDNN" in text and "mxcc" not in text
    assert "correct CUDA C++ implementation" in seed and "the load_inline call and class ModelNew" in seed
    system, text, seed = seen["cuda", "maca"]
    assert "writing MACA C++ kernels" in system
    assert "compiled by mxcc through cu-bridge" in text and "use warpSize, not 32" in text

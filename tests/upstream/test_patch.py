"""``ksmith patch`` from real runs, against the real SGLang and LMDeploy wheel sources.

Each run is a real ``ksmith evolve`` on an imported problem, on CPU under the Triton interpreter. Its seed is
upstream's kernel with one semantics-preserving edit, so the run's best differs from upstream whichever
candidate wins the (meaningless) interpreted timings. The patch must ``git apply`` to the wheel's tree laid
out as the upstream repository, keep the original path, and its generated upstream test must pass against
the patched module.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import error_line, git_apply, git_tree, recorded_run, run_generated_test, run_ksmith

SGLANG_EDIT = (
    "tl.cdiv(seq_len + SEQ_LEN_DELTA, PAGE_SIZE)",
    "(seq_len + SEQ_LEN_DELTA + PAGE_SIZE - 1) // PAGE_SIZE",
)
LMDEPLOY_EDIT = ("-float('inf')", "float('-inf')")


def imported(ksmith_cmd, env, project, launcher, out: Path) -> tuple[Path, Path]:
    proc = run_ksmith(ksmith_cmd, "import", project, launcher, "-o", out, env=env)
    assert proc.returncode == 0, proc.stderr
    return out / f"{launcher}.py", out / f"{launcher}.seed.py"


def evolved(ksmith_cmd, env, problem: Path, seed: Path, run_dir: Path, budget: int) -> Path:
    proc = run_ksmith(
        ksmith_cmd, "evolve", problem, "--seed", seed, "--budget", budget, "--device", "cpu",
        "--run-dir", run_dir, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return run_dir


def edited(seed: Path, edit: tuple[str, str], dest: Path) -> Path:
    text = seed.read_text(encoding="utf-8")
    assert edit[0] in text
    dest.write_text(text.replace(edit[0], edit[1]), encoding="utf-8")
    return dest


@pytest.fixture(scope="module")
def sglang_run(upstream, ksmith_exe, ksmith_env, tmp_path_factory):
    base = tmp_path_factory.mktemp("sglang")
    problem, seed = imported(ksmith_exe, ksmith_env, "sglang", "normal_decode_set_metadata", base / "problem")
    variant = edited(seed, SGLANG_EDIT, base / "variant.seed.py")
    return problem, seed, evolved(ksmith_exe, ksmith_env, problem, variant, base / "run", budget=2)


def test_sglang_patch_applies_keeps_the_original_path_and_its_test_passes(
    sglang_run, upstream, ksmith_cmd, ksmith_env, tmp_path
):
    _, _, run = sglang_run
    out = tmp_path / "out"
    proc = run_ksmith(ksmith_cmd, "patch", "sglang", run, "-o", out, env=ksmith_env)
    assert proc.returncode == 0, proc.stderr
    patch = out / "normal_decode_set_metadata.patch"
    assert proc.stdout.split() == [str(patch), str(out / "PR.md"), str(out / "patch.json")]
    text = patch.read_text(encoding="utf-8")
    kernel_file = "python/sglang/kernels/ops/attention/metadata.py"
    test_file = "test/registered/kernels/ops/attention/test_normal_decode_set_metadata_evolved.py"
    bench_file = "test/registered/kernels/benchmark/attention/bench_normal_decode_set_metadata_evolved.py"
    for path in (kernel_file, test_file, bench_file):
        assert f"diff --git a/{path} b/{path}" in text
    # The codemod only adds lines to the upstream module: upstream's code stays as the fallback.
    module_diff = text.split("diff --git")[1]
    assert not [
        line for line in module_diff.splitlines() if line.startswith("-") and not line.startswith("---")
    ]
    assert "+def _normal_decode_set_metadata_evolved(" in text
    assert "+def _fused_decode_metadata_kernel_evolved(" in text
    assert "+        and swa_page_table is None" in text

    repo = git_tree(upstream["sglang"], tmp_path / "sglang")
    assert git_apply(repo, patch, check=True).returncode == 0
    assert git_apply(repo, patch, check=False).returncode == 0
    patched = repo / kernel_file
    assert "(seq_len + SEQ_LEN_DELTA + PAGE_SIZE - 1) // PAGE_SIZE" in patched.read_text(encoding="utf-8")
    # Formatted as upstream's sources are: the whole patched module and the new files are ruff-format stable.
    for path in (patched, repo / test_file, repo / bench_file):
        fmt = ["ruff", "format", "--isolated", "--line-length", "88", "--check", str(path)]
        assert subprocess.run([sys.executable, "-m", *fmt], capture_output=True).returncode == 0, path
    assert "register_cuda_ci(est_time=" in (repo / test_file).read_text(encoding="utf-8")

    result = run_generated_test(
        repo / test_file, patched, "sglang.kernels.ops.attention.metadata", tmp_path / "generated"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout, result.stdout

    pr = (out / "PR.md").read_text(encoding="utf-8")
    for section in ("## Motivation", "## Modifications", "## Accuracy Tests", "## Speed Tests and Profiling"):
        assert section in pr
    assert "produced by ksmith" in pr
    assert "Triton interpreter on CPU and say nothing about GPU speed" in pr


def test_the_generated_test_fails_when_the_evolved_path_is_wrong(sglang_run, upstream, tmp_path):
    """The generated test can fail: break the evolved kernel after patching and it reports the mismatch."""
    _, _, run = sglang_run
    from ksmith_upstream.patching import write_patch
    from ksmith_upstream.source import PROJECTS

    out = tmp_path / "out"
    out.mkdir()
    write_patch(PROJECTS["sglang"], str(run), upstream["sglang"], out, rebase=False)
    repo = git_tree(upstream["sglang"], tmp_path / "sglang")
    assert git_apply(repo, out / "normal_decode_set_metadata.patch", check=False).returncode == 0
    patched = repo / "python/sglang/kernels/ops/attention/metadata.py"
    text = patched.read_text(encoding="utf-8")
    broken = text.replace(
        "(seq_len + SEQ_LEN_DELTA + PAGE_SIZE - 1) // PAGE_SIZE", "(seq_len + SEQ_LEN_DELTA) // PAGE_SIZE - 1"
    )
    assert broken != text
    patched.write_text(broken, encoding="utf-8")
    test_file = repo / "test/registered/kernels/ops/attention/test_normal_decode_set_metadata_evolved.py"
    result = run_generated_test(test_file, patched, "sglang.kernels.ops.attention.metadata", tmp_path / "gen")
    assert result.returncode != 0
    assert "failed" in result.stdout


def test_a_changed_upstream_file_is_refused_unless_rebase(
    sglang_run, upstream, ksmith_cmd, ksmith_env, tmp_path
):
    _, _, run = sglang_run
    tree = tmp_path / "checkout"
    repo = git_tree(upstream["sglang"], tree)
    module = repo / "python/sglang/kernels/ops/attention/metadata.py"
    module.write_text(module.read_text(encoding="utf-8") + "\n# a later upstream commit\n", encoding="utf-8")
    (repo / "python/sglang/version.py").write_text('__version__ = "0.5.24"\n', encoding="utf-8")

    refused = run_ksmith(
        ksmith_cmd, "patch", "sglang", run, "--source", repo, "-o", tmp_path / "a", env=ksmith_env
    )
    assert "sha256 differs" in error_line(refused)
    assert "--rebase" in error_line(refused)

    rebased = run_ksmith(
        ksmith_cmd, "patch", "sglang", run, "--source", repo, "--rebase", "-o", tmp_path / "b", env=ksmith_env
    )
    assert rebased.returncode == 0, rebased.stderr
    assert git_apply(repo, tmp_path / "b" / "normal_decode_set_metadata.patch", check=True).returncode == 0


def test_an_unchanged_best_or_an_incorrect_run_is_refused(
    sglang_run, upstream, ksmith_cmd, ksmith_env, tmp_path
):
    from ksmith_upstream.patching import write_patch
    from ksmith_upstream.source import PROJECTS, UpstreamError

    problem, seed, _ = sglang_run
    unchanged = recorded_run(tmp_path / "unchanged", problem, seed, correct=True)
    proc = run_ksmith(ksmith_cmd, "patch", "sglang", unchanged, "-o", tmp_path / "a", env=ksmith_env)
    assert "upstream's normal_decode_set_metadata unchanged" in error_line(proc)

    variant = edited(seed, SGLANG_EDIT, tmp_path / "variant.py")
    incorrect = recorded_run(tmp_path / "incorrect", problem, variant, correct=False)
    with pytest.raises(UpstreamError, match="has no correct candidate"):
        write_patch(PROJECTS["sglang"], str(incorrect), upstream["sglang"], tmp_path, rebase=False)
    with pytest.raises(UpstreamError, match="not a lmdeploy one"):
        write_patch(PROJECTS["lmdeploy"], str(unchanged), upstream["lmdeploy"], tmp_path, rebase=False)


def test_lmdeploy_patch_applies_to_the_wheel_tree(upstream, ksmith_cmd, ksmith_env, tmp_path):
    """The fast LMDeploy check: a recorded run of an edited router kernel; the slow test below evolves one."""
    problem, seed = imported(
        ksmith_cmd, ksmith_env, "lmdeploy", "fused_single_group_topk_router", tmp_path / "p"
    )
    variant = edited(seed, LMDEPLOY_EDIT, tmp_path / "variant.seed.py")
    run = recorded_run(tmp_path / "run", problem, variant, correct=True)
    proc = run_ksmith(ksmith_cmd, "patch", "lmdeploy", run, "-o", tmp_path / "out", env=ksmith_env)
    assert proc.returncode == 0, proc.stderr
    patch = tmp_path / "out" / "fused_single_group_topk_router.patch"
    repo = git_tree(upstream["lmdeploy"], tmp_path / "lmdeploy")
    assert git_apply(repo, patch, check=True).returncode == 0, git_apply(repo, patch, check=True).stderr
    text = patch.read_text(encoding="utf-8")
    assert "+def _fused_single_group_topk_router_evolved(" in text
    assert "+        float('-inf')," in text


@pytest.mark.slow
def test_lmdeploy_patch_applies_and_its_test_passes(upstream, ksmith_cmd, ksmith_env, tmp_path):
    problem, seed = imported(
        ksmith_cmd, ksmith_env, "lmdeploy", "fused_single_group_topk_router", tmp_path / "p"
    )
    variant = edited(seed, LMDEPLOY_EDIT, tmp_path / "variant.seed.py")
    run = evolved(ksmith_cmd, ksmith_env, problem, variant, tmp_path / "run", budget=1)
    out = tmp_path / "out"
    proc = run_ksmith(ksmith_cmd, "patch", "lmdeploy", run, "-o", out, env=ksmith_env)
    assert proc.returncode == 0, proc.stderr
    patch = out / "fused_single_group_topk_router.patch"
    bench = out / "bench_fused_single_group_topk_router_evolved.py"
    assert proc.stdout.split() == [str(patch), str(out / "PR.md"), str(bench), str(out / "patch.json")]
    text = patch.read_text(encoding="utf-8")
    test_file = "tests/pytorch/kernel/test_fused_single_group_topk_router_evolved.py"
    assert f"+++ b/{test_file}" in text
    assert "+# Copyright (c) OpenMMLab. All rights reserved." in text
    added = [line[1:] for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert all(len(line) <= 120 for line in added)
    assert not any('"' in line and "'" not in line and '"""' not in line for line in added), "double quotes"

    repo = git_tree(upstream["lmdeploy"], tmp_path / "lmdeploy")
    assert git_apply(repo, patch, check=True).returncode == 0
    assert git_apply(repo, patch, check=False).returncode == 0
    patched = repo / "lmdeploy/pytorch/kernels/cuda/moe/route_single_group.py"
    result = run_generated_test(
        repo / test_file, patched, "lmdeploy.pytorch.kernels.cuda.moe.route_single_group", tmp_path / "gen"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 passed" in result.stdout, result.stdout  # three sweep cases and the fast-path check
    pr = (out / "PR.md").read_text(encoding="utf-8")
    assert "## BC-breaking (Optional)" in pr and "produced by ksmith" in pr


def test_missing_run_is_one_line(upstream, ksmith_cmd, ksmith_env, tmp_path):
    proc = run_ksmith(ksmith_cmd, "patch", "sglang", tmp_path / "nope", "-o", tmp_path / "o", env=ksmith_env)
    error_line(proc)
    shutil.rmtree(tmp_path / "o", ignore_errors=True)


@pytest.mark.slow
def test_a_float_kernel_patch_applies_and_its_test_passes(upstream, ksmith_cmd, ksmith_env, tmp_path):
    """SGLang's merge_state_triton (bf16 values, fp32 log-sum-exps): tolerances per dtype in the generated test."""
    from ksmith_upstream.standalone import run_test

    problem, seed = imported(ksmith_cmd, ksmith_env, "sglang", "merge_state_triton", tmp_path / "p")
    edit = ("out_se = tl.exp(p_lse) + tl.exp(s_lse)", "out_se = tl.exp(s_lse) + tl.exp(p_lse)")
    run = recorded_run(tmp_path / "run", problem, edited(seed, edit, tmp_path / "v.py"), correct=True)
    out = tmp_path / "out"
    proc = run_ksmith(ksmith_cmd, "patch", "sglang", run, "-o", out, env=ksmith_env)
    assert proc.returncode == 0, proc.stderr
    repo = git_tree(upstream["sglang"], tmp_path / "sglang")
    assert git_apply(repo, out / "merge_state_triton.patch", check=False).returncode == 0
    text = (repo / "python/sglang/kernels/ops/attention/merge_state.py").read_text(encoding="utf-8")
    assert "and prefix_output.shape[-1] == 128" in text
    test_file = repo / "test/registered/kernels/ops/attention/test_merge_state_triton_evolved.py"
    assert "'bfloat16': (0.01, 0.01)" in test_file.read_text(encoding="utf-8").replace('"', "'")
    patched = repo / "python/sglang/kernels/ops/attention/merge_state.py"
    result = run_test(
        test_file, patched, "sglang.kernels.ops.attention.merge_state", tmp_path / "gen", "cpu", 2
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_reads_the_generated_benchmark_and_names_shapes_made_slower():
    from ksmith_upstream.standalone import bench_cases, regressions

    # The table the generated SGLang benchmark printed on the H100 (benchmarks/results/h100-2026-11-23/upstream).
    output = (
        "case                                                          original (us)  evolved (us)  speedup\n"
        "batch_size=7, pool_size=16, max_context_len=1000, page_size=1, seq_len_delta=0"
        "          19.86          8.24    2.41x\n"
        "batch_size=256, pool_size=512, max_context_len=8192, page_size=1, seq_len_delta=0"
        "          20.28         23.15    0.88x\n"
        "batch_size=1, pool_size=2, max_context_len=1, page_size=1, seq_len_delta=0 [upstream path]"
        "          2.59          2.73    0.95x\n"
        "\nTime per call with the launch (triton.testing.do_bench)\n"
        "batch_size=256, pool_size=512, max_context_len=8192, page_size=1, seq_len_delta=0"
        "          20.28         20.15    1.01x launch\n"
    )
    cases = bench_cases(output)  # the GPU-time table only
    assert [c["speedup"] for c in cases] == [2.41, 0.88, 0.95]
    assert cases[1]["case"].startswith("batch_size=256") and cases[1]["evolved_us"] == 23.15
    # A shape the patch leaves on upstream's path (both columns the same code) is no regression.
    assert [c["speedup"] for c in regressions(cases)] == [0.88]


H100_UPSTREAM = Path(__file__).resolve().parents[2] / "benchmarks/results/h100-2026-11-23/upstream"
LMDEPLOY_CHECK = H100_UPSTREAM / "patch-fused_single_group_topk_router/check.json"
SGLANG_CHECK = H100_UPSTREAM / "patch-normal_decode_set_metadata/check.json"


def test_the_size_gate_keeps_upstreams_path_where_the_h100_measured_it_faster():
    """From the generated benchmarks' tables on the H100: LMDeploy's router was 0.95x at 17 tokens (1.78x and
    1.85x at 4096 and 8192), SGLang's decode metadata 0.88x at batch 256."""
    from ksmith_upstream.patching import read_bench_cases, size_gate
    from ksmith_upstream.recipes import FUSED_SINGLE_GROUP_TOPK_ROUTER, NORMAL_DECODE_SET_METADATA

    router = size_gate(FUSED_SINGLE_GROUP_TOPK_ROUTER, read_bench_cases(LMDEPLOY_CHECK))
    assert router.conditions() == ["scores.shape[0] >= 128"]
    assert [c["case"].split(",")[0] for c in router.slower] == ["num_tokens=17"]
    assert router.admits({"num_tokens": 8192}) and not router.admits({"num_tokens": 17})
    decode = size_gate(NORMAL_DECODE_SET_METADATA, read_bench_cases(SGLANG_CHECK))
    assert decode.conditions() == ["seq_lens.shape[0] <= 64"]
    assert "batch_size <= 64" in decode.describe() and "batch_size=256" in decode.describe()
    # This session's vector_scan kernel on the H100 (GPU time in CUDA graphs): slower below 7 requests only.
    later = H100_UPSTREAM.parent.parent / "h100-2026-11-25/upstream/run-b/patch-normal_decode_set_metadata"
    decode = size_gate(NORMAL_DECODE_SET_METADATA, read_bench_cases(later / "check.json"))
    assert decode.conditions() == ["seq_lens.shape[0] >= 7"]
    # The benchmark's marks after a row's sizes do not change what is read from it.
    marked = [
        dict(c, case=c["case"] + " [upstream path] (with launch: no CUDA graph)")
        for c in read_bench_cases(later / "check.json")
    ]
    assert size_gate(NORMAL_DECODE_SET_METADATA, marked).conditions() == ["seq_lens.shape[0] >= 7"]


def test_the_size_gate_when_nothing_or_everything_was_slower():
    from ksmith_upstream.patching import size_gate
    from ksmith_upstream.recipes import FUSED_SINGLE_GROUP_TOPK_ROUTER
    from ksmith_upstream.source import UpstreamError

    def rows(*pairs):
        return [{"case": f"num_tokens={n}, top_k=8", "speedup": s} for n, s in pairs]

    assert size_gate(FUSED_SINGLE_GROUP_TOPK_ROUTER, rows((1, 1.0), (4096, 1.5))) is None
    with pytest.raises(UpstreamError, match="slower than upstream at every measured shape"):
        size_gate(FUSED_SINGLE_GROUP_TOPK_ROUTER, rows((1, 0.9), (4096, 0.5)))
    # Two shapes at one size, one of them slower: that size is out, the longest range of the rest is kept.
    gate = size_gate(
        FUSED_SINGLE_GROUP_TOPK_ROUTER, rows((1, 1.1), (2, 1.1), (2, 0.9), (64, 1.2), (4096, 1.3))
    )
    assert gate.conditions() == ["scores.shape[0] >= 64"]


def test_a_patch_gated_from_a_gpu_benchmark_sends_only_the_measured_range_to_the_fast_path(
    upstream, ksmith_cmd, ksmith_env, tmp_path
):
    problem, seed = imported(
        ksmith_cmd, ksmith_env, "lmdeploy", "fused_single_group_topk_router", tmp_path / "p"
    )
    variant = edited(seed, LMDEPLOY_EDIT, tmp_path / "variant.seed.py")
    run = recorded_run(tmp_path / "run", problem, variant, correct=True)
    out = tmp_path / "out"
    args = ("patch", "lmdeploy", run, "--gate-from", LMDEPLOY_CHECK, "-o", out)
    proc = run_ksmith(ksmith_cmd, *args, env=ksmith_env)
    assert proc.returncode == 0, proc.stderr
    repo = git_tree(upstream["lmdeploy"], tmp_path / "lmdeploy")
    assert git_apply(repo, out / "fused_single_group_topk_router.patch", check=False).returncode == 0
    kernel = (repo / "lmdeploy/pytorch/kernels/cuda/moe/route_single_group.py").read_text(encoding="utf-8")
    assert "and scores.shape[0] >= 128" in kernel
    test = (repo / "tests/pytorch/kernel/test_fused_single_group_topk_router_evolved.py").read_text("utf-8")
    fast_case = next(line for line in test.splitlines() if line.startswith("FAST_CASE = "))
    assert "'num_tokens': 8192" in fast_case  # the fast-path check runs inside the gate
    pr = (out / "PR.md").read_text(encoding="utf-8")
    assert "num_tokens >= 128" in pr and "num_tokens=17" in pr
    # Every measured shape, with the path the patch takes there.
    rows = [line for line in pr.splitlines() if line.startswith("| num_tokens=")]
    assert any(row.endswith("| evolved |") and "num_tokens=8192" in row for row in rows)
    assert any(row.endswith("| upstream (unchanged) |") and "num_tokens=17," in row for row in rows)
    manifest = (out / "patch.json").read_text(encoding="utf-8")
    assert '"scores.shape[0] >= 128"' in manifest

    junk = tmp_path / "junk.json"
    junk.write_text("{}", encoding="utf-8")
    proc = run_ksmith(
        ksmith_cmd, "patch", "lmdeploy", run, "--gate-from", junk, "-o", tmp_path / "o2", env=ksmith_env
    )
    assert "not a check.json with a GPU benchmark" in error_line(proc)


def test_a_run_copied_without_its_files_is_one_line(upstream, ksmith_cmd, ksmith_env, tmp_path):
    problem, seed = imported(
        ksmith_cmd, ksmith_env, "lmdeploy", "fused_single_group_topk_router", tmp_path / "p"
    )
    run = recorded_run(
        tmp_path / "run", problem, edited(seed, LMDEPLOY_EDIT, tmp_path / "v.py"), correct=True
    )
    (Path(run) / "problem.py").unlink()
    proc = run_ksmith(ksmith_cmd, "patch", "lmdeploy", run, "-o", tmp_path / "out", env=ksmith_env)
    assert "is incomplete: " in error_line(proc) and "problem.py is missing" in proc.stderr


def test_a_gate_that_excludes_the_measured_shape_says_so_in_the_pr(
    upstream, ksmith_cmd, ksmith_env, tmp_path
):
    """SGLang's decode metadata was 0.88x at batch 256, its representative shape: the gated patch keeps
    upstream's path there, and PR.md must not present the run's speedup as what the patch delivers."""
    problem, seed = imported(ksmith_cmd, ksmith_env, "sglang", "normal_decode_set_metadata", tmp_path / "p")
    run = recorded_run(tmp_path / "run", problem, edited(seed, SGLANG_EDIT, tmp_path / "v.py"), correct=True)
    out = tmp_path / "out"
    proc = run_ksmith(
        ksmith_cmd, "patch", "sglang", run, "--gate-from", SGLANG_CHECK, "-o", out, env=ksmith_env
    )
    assert proc.returncode == 0, proc.stderr
    pr = (out / "PR.md").read_text(encoding="utf-8")
    assert "`seq_lens.shape[0] <= 64`" in pr
    assert "(batch_size=256) lies outside the size gate" in pr
    test = (
        out / "tree/test/registered/kernels/ops/attention/test_normal_decode_set_metadata_evolved.py"
    ).read_text(encoding="utf-8")
    fast_case = test.split("FAST_CASE = ", 1)[1].split("\n\n", 1)[0]  # the formatter may wrap the dict
    assert fast_case.startswith("{") and '"batch_size": 64' in fast_case

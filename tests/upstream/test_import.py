"""``ksmith import`` against the real SGLang 0.5.23 and LMDeploy 0.18.0 wheels.

The seeds are evaluated with ``ksmith eval`` under the Triton interpreter at the problems' small sizes: the
extracted upstream code must run without the upstream package and match the reference exactly (integers).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ksmith_upstream.extract import extract
from ksmith_upstream.source import sha256_of

from .conftest import error_line, run_ksmith

KERNELS = {
    "sglang": ("normal_decode_set_metadata", "_fused_decode_metadata_kernel"),
    "lmdeploy": ("fused_single_group_topk_router", "_single_group_topk_router_kernel"),
    "sglang-merge": ("merge_state_triton", "merge_state_kernel"),
}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or ".").split(".")[0])
    return roots


def provenance_of(path: Path) -> dict:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "KSMITH_UPSTREAM":
            return ast.literal_eval(node.value)
    raise AssertionError("no KSMITH_UPSTREAM")


@pytest.mark.parametrize("key", ["sglang", "lmdeploy", pytest.param("sglang-merge", marks=pytest.mark.slow)])
def test_import_writes_a_standalone_seed_that_matches_upstream(
    key, upstream, ksmith_cmd, ksmith_env, tmp_path
):
    project, (launcher, kernel) = key.split("-")[0], KERNELS[key]
    proc = run_ksmith(ksmith_cmd, "import", project, launcher, "-o", tmp_path, env=ksmith_env)
    assert proc.returncode == 0, proc.stderr
    problem, seed = tmp_path / f"{launcher}.py", tmp_path / f"{launcher}.seed.py"
    assert proc.stdout.split() == [str(problem), str(seed)]

    # Standalone: torch, triton and the standard library only; the kernel is upstream's own code.
    for path in (problem, seed):
        assert imported_roots(path) <= {"torch", "triton", "typing"}, path
    assert f"def {kernel}(" in seed.read_text(encoding="utf-8")

    source = upstream[project]
    prov = provenance_of(problem)
    assert prov["project"] == project and prov["version"] == source.version
    assert prov["launcher"] == launcher
    upstream_file = source.root / prov["file"].removeprefix(source.project.repo_prefix)
    assert prov["sha256"] == sha256_of(upstream_file)
    assert (project == "sglang") == prov["file"].startswith("python/sglang/")

    verdict = run_ksmith(
        ksmith_cmd, "eval", problem, seed, "--device", "cpu", "--trials", "3", "--json", env=ksmith_env
    )
    assert verdict.returncode == 0, verdict.stderr
    result = json.loads(verdict.stdout)
    assert result["status"] == "ok", (result["status"], result.get("reasons"))
    assert result["correct"] is True


def test_a_wrong_seed_is_caught_exactly(upstream, ksmith_cmd, ksmith_env, tmp_path):
    """The integer outputs are compared exactly: a prefix sum off by one on one element fails."""
    proc = run_ksmith(
        ksmith_cmd, "import", "sglang", "normal_decode_set_metadata", "-o", tmp_path, env=ksmith_env
    )
    assert proc.returncode == 0, proc.stderr
    seed = tmp_path / "normal_decode_set_metadata.seed.py"
    text = seed.read_text(encoding="utf-8")
    assert "tl.store(cu_seqlens_k + B * cu_seqlens_k_stride_0, acc)" in text
    wrong = tmp_path / "wrong.py"
    wrong.write_text(text.replace("cu_seqlens_k_stride_0, acc)", "cu_seqlens_k_stride_0, acc + 1)"), "utf-8")
    problem = tmp_path / "normal_decode_set_metadata.py"
    verdict = run_ksmith(
        ksmith_cmd, "eval", problem, wrong, "--device", "cpu", "--trials", "1", "--json", env=ksmith_env
    )
    result = json.loads(verdict.stdout)
    assert result["status"] == "incorrect", result
    assert any("exact comparison" in r for r in result["reasons"]), result["reasons"]
    assert result["correct"] is False


def test_extraction_follows_relative_imports_into_other_modules(upstream):
    """LMDeploy's silu_and_mul reads get_device_props from .utils: it is lifted out with its tables."""
    ex = extract(upstream["lmdeploy"], "silu_and_mul")
    names = [n for d in ex.definitions for n in d.names]
    assert {"get_device_props", "WARPS_PER_SM", "BLOCKS_PER_SM", "_silu_and_mul_kernel"} <= set(names)
    assert names.index("get_device_props") < names.index("silu_and_mul")
    assert set(ex.files) == {
        "lmdeploy/pytorch/kernels/cuda/activation.py",
        "lmdeploy/pytorch/kernels/cuda/utils.py",
    }
    assert "import functools" in ex.imports
    assert ex.kernels == ["_silu_and_mul_kernel"]


def test_dotted_names_select_the_module(upstream):
    ex = extract(upstream["sglang"], "kernels.ops.attention.metadata.normal_decode_set_metadata")
    assert ex.symbol == "sglang.kernels.ops.attention.metadata.normal_decode_set_metadata"
    assert ex.repo_path == "python/sglang/kernels/ops/attention/metadata.py"


def test_shapes_file_replaces_the_default_sizes(upstream, ksmith_cmd, ksmith_env, tmp_path):
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"sizes": {"num_tokens": 512}, "small": {"num_tokens": 2}}), "utf-8")
    out = tmp_path / "out"
    proc = run_ksmith(
        ksmith_cmd, "import", "lmdeploy", "fused_single_group_topk_router", "--shapes", shapes, "-o", out,
        env=ksmith_env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    problem = out / "fused_single_group_topk_router.py"
    text = problem.read_text(encoding="utf-8")
    assert "\nnum_tokens = 512\n" in text
    assert "KSMITH_SMALL = {'num_tokens': 2}" in text
    assert provenance_of(problem)["sizes"]["num_tokens"] == 512


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["sglang", "no_such_launcher_anywhere"], "no module-level function 'no_such_launcher_anywhere'"),
        (["lmdeploy", "_unsqueeze_to_3d"], "launches no @triton.jit kernel"),
        (["lmdeploy", "silu_and_mul"], "no input recipe"),
        (["sglang", "normal_decode_set_metadata", "--source", "/nonexistent/sglang"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, expected, upstream, ksmith_cmd, ksmith_env, tmp_path):
    proc = run_ksmith(ksmith_cmd, "import", *args, "-o", tmp_path / "out", env=ksmith_env)
    assert expected in error_line(proc)


def test_unknown_shape_names_are_refused(upstream, ksmith_cmd, ksmith_env, tmp_path):
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"batch": 3}), "utf-8")
    proc = run_ksmith(
        ksmith_cmd, "import", "sglang", "normal_decode_set_metadata", "--shapes", shapes, "-o", tmp_path,
        env=ksmith_env,
    )  # fmt: skip
    assert "unknown sizes ['batch']" in error_line(proc)


@pytest.mark.slow
def test_imported_seeds_compile_for_an_h100_without_a_gpu(upstream, ksmith_cmd, ksmith_env, tmp_path):
    """Triton's own compiler, sm_90, full sizes: what the interpreter accepts must also lower for the GPU."""
    problems = []
    for project, launcher in [
        ("sglang", "normal_decode_set_metadata"),
        ("sglang", "merge_state_triton"),
        ("lmdeploy", "fused_single_group_topk_router"),
    ]:
        proc = run_ksmith(ksmith_cmd, "import", project, launcher, "-o", tmp_path, env=ksmith_env)
        assert proc.returncode == 0, proc.stderr
        problems.append(tmp_path / f"{launcher}.py")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).with_name("aot_compile.py")
    proc = subprocess.run(
        [sys.executable, str(script), *map(str, problems)], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("OK ") == 3, proc.stdout

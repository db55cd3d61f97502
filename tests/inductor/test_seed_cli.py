"""``ksmith seed --from inductor`` through the CLI: the seeder runs in a child process."""

from __future__ import annotations

import os
import subprocess

import pytest


def seed_cli(ksmith_cmd, problem, out) -> subprocess.CompletedProcess:
    """``ksmith seed PROBLEM --from inductor -o OUT --device cpu``."""
    return subprocess.run(
        [*ksmith_cmd, "seed", str(problem), "--from", "inductor", "-o", str(out), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_seed_from_inductor_writes_a_checked_seed(ksmith_cmd, tmp_path):
    out = tmp_path / "gelu.py"
    proc = seed_cli(ksmith_cmd, "gelu_tanh", out)
    assert proc.returncode == 0, proc.stderr
    assert "class ModelNew" in out.read_text() and "XBLOCK=" in out.read_text()
    assert "check: ok" in proc.stderr


def test_a_library_matmul_is_seeded_with_ksmiths_gemm(ksmith_cmd, tmp_path):
    out = tmp_path / "matmul.py"
    proc = seed_cli(ksmith_cmd, "matmul", out)
    assert proc.returncode == 0, proc.stderr
    assert "_gemm_0_kernel[grid](" in out.read_text() and "check: ok" in proc.stderr


def test_a_model_with_no_seed_is_refused_in_one_line(ksmith_cmd, tmp_path, data_dir):
    proc = seed_cli(ksmith_cmd, data_dir / "masked_attention.py", tmp_path / "x.py")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ksmith: error: ")
    assert (
        "with an attention mask or bias" in lines[0] and "no seed from inductor for this problem" in lines[0]
    )
    assert not (tmp_path / "x.py").exists()


def test_a_library_convolution_is_seeded_with_ksmiths_conv(ksmith_cmd, tmp_path):
    out = tmp_path / "conv.py"
    proc = seed_cli(ksmith_cmd, "conv2d_bias_relu", out)
    assert proc.returncode == 0, proc.stderr
    assert "_conv_0_kernel[grid](" in out.read_text() and "check: ok" in proc.stderr


def test_a_gpu_seed_that_runs_out_of_memory_beside_others_is_retried_alone(monkeypatch):
    """On a GPU the seeding child takes a place in the memory gate; an out-of-memory it meets while an
    evaluation holds the GPU too is retried with the GPU to itself, one met alone is final."""
    import threading

    from ksmith_core.model import Proposal
    from ksmith_inductor import plugin
    from ksmith_inductor.seeding import InductorSeedError
    from ksmith_triton import admission
    from ksmith_triton.locks import physical_gpu

    gate = admission.gate_for("cuda", physical_gpu(0))
    calls = []

    def fake_seed(problem, device, size, templates):
        assert templates == "inductor"  # Inductor's own GEMM templates unless --gemm-templates says otherwise
        calls.append(gate.snapshot())
        if len(calls) == 1:
            raise InductorSeedError("tracing Model.forward failed (OutOfMemoryError: CUDA out of memory.)")
        return Proposal(
            source="class ModelNew: pass\n", edit="e", edit_kind="inductor-seed", proposer="inductor"
        )

    monkeypatch.setattr(plugin, "_seed", fake_seed)
    holding, release = threading.Event(), threading.Event()

    def evaluation():  # another evaluation on the same GPU while the seed runs
        with gate.admitted(0):
            holding.set()
            release.wait(10)

    other = threading.Thread(target=evaluation)
    other.start()
    holding.wait(10)
    threading.Timer(0.5, release.set).start()  # the evaluation ends; the retry alone can then start
    proposal = plugin.seed_from_inductor(object(), {"device": "cuda", "small": False})
    other.join()
    assert proposal.source.startswith("class ModelNew")
    assert len(calls) == 2
    assert calls[0]["running"] == 2  # the first try ran beside the evaluation
    assert calls[1]["running"] == 1  # the retry had the GPU to itself

    def always_out_of_memory(problem, device, size, templates):
        raise InductorSeedError("tracing Model.forward failed (OutOfMemoryError: CUDA out of memory.)")

    monkeypatch.setattr(plugin, "_seed", always_out_of_memory)
    with pytest.raises(InductorSeedError, match="out of memory"):  # met alone: the out-of-memory stands
        plugin.seed_from_inductor(object(), {"device": "cuda", "small": False})


def test_the_seeding_process_compiles_without_a_pool_of_compile_workers(monkeypatch, tmp_path):
    from ksmith_inductor import plugin

    seen, commands = {}, []

    def fake_run(cmd, **kwargs):
        seen.update(kwargs["env"])
        commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="class ModelNew: pass\n", stderr="")

    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.setattr(plugin.subprocess, "run", fake_run)
    problem = type("P", (), {"path": tmp_path / "p.py", "name": "p"})()
    assert plugin._seed(problem, "cuda", "full", "inductor").proposer == "inductor"
    assert seen["TORCHINDUCTOR_COMPILE_THREADS"] == "1" and seen["PATH"] == os.environ["PATH"]
    # --gemm-templates reaches the seeding process (its last argument)
    options = {
        "device": "cpu",
        "small": True,
        "method_options": plugin.options_from_cli({"gemm_templates": "ksmith"}),
    }
    plugin.seed_from_inductor(problem, options)
    assert commands[-1][-3:] == ["cpu", "small", "ksmith"]

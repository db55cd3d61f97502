"""ksmith bench: per-problem rows, KernelBench-style summary, resume."""

from __future__ import annotations

import json
import math

import pytest
from core.toy import PROBLEM, SEED

from ksmith_bench.bench import Bench, collect_problems, summarise
from ksmith_core.run import RunConfig


def make_suite(directory, speeds):
    directory.mkdir(parents=True)
    for name, speed in speeds.items():
        (directory / f"{name}.py").write_text(PROBLEM)
        if speed is not None:
            (directory / f"{name}.seed.py").write_text(SEED.replace("SPEED = 1.0", f"SPEED = {speed}"))
    return directory


def test_summary_follows_kernelbench_fast_p():
    rows = [
        {"problem": "a", "status": "ok", "speedup": 2.0, "speedup_vs_compile": 1.5},
        {"problem": "b", "status": "ok", "speedup": 0.5, "speedup_vs_compile": 0.25},
        {"problem": "c", "status": "incorrect", "speedup": None, "speedup_vs_compile": None},
        {"problem": "d", "status": "ok", "speedup": 1.0, "speedup_vs_compile": 0.5},
    ]
    s = summarise(rows)
    assert s["correct_rate"] == 0.75
    assert s["fast_0_eager"] == 0.75 and s["fast_1_eager"] == 0.25  # 1.0x is not faster than eager
    assert s["fast_1_compile"] == 0.25
    assert s["geomean_speedup_eager"] == pytest.approx(1.0)
    assert s["mean_speedup_compile"] == pytest.approx(0.75)
    assert s["slower_than_compile"] == ["b", "d"]


def test_summary_groups_by_bound_and_bounds_what_any_kernel_could_show():
    # b: torch.compile at 0.5 of the roofline (room for 2x); a: at 0.9; c: compute-bound.
    rows = [
        {
            "problem": "a",
            "status": "ok",
            "speedup": 1.0,
            "speedup_vs_compile": 1.0,
            "roofline_fraction": 0.9,
            "roofline_bound": "memory",
        },
        {
            "problem": "b",
            "status": "ok",
            "speedup": 1.0,
            "speedup_vs_compile": 0.8,
            "roofline_fraction": 0.4,
            "roofline_bound": "memory",
        },
        {
            "problem": "c",
            "status": "ok",
            "speedup": 0.5,
            "speedup_vs_compile": 0.5,
            "roofline_fraction": 0.3,
            "roofline_bound": "compute",
        },
        {
            "problem": "d",
            "status": "incorrect",
            "speedup": None,
            "speedup_vs_compile": None,
            "roofline_fraction": None,
            "roofline_bound": "memory",
        },
    ]
    s = summarise(rows)
    memory = s["by_bound"]["memory"]
    assert memory["problems"] == ["a", "b"]  # incorrect rows do not count
    assert memory["geomean_speedup_compile"] == pytest.approx(math.sqrt(0.8))
    assert memory["headroom_geomean_vs_compile"] == pytest.approx(math.sqrt((1 / 0.9) * 2.0))
    assert s["by_bound"]["compute"]["headroom_geomean_vs_compile"] == pytest.approx(1 / 0.6)
    assert s["headroom_geomean_vs_compile"] == pytest.approx(((1 / 0.9) * 2.0 * (1 / 0.6)) ** (1 / 3))
    # Rows without a measured roofline (CPU, interpreter) give no grouping rather than a made-up one.
    assert (
        summarise([{"problem": "x", "status": "ok", "speedup": 1.0, "speedup_vs_compile": None}])["by_bound"]
        == {}
    )


def test_roofline_bound_names_the_binding_floor():
    from ksmith_triton.roofline import roofline_bound

    assert roofline_bound(1e9, 1e9, 3e12, 1e15) == "memory"
    assert roofline_bound(1e6, 1e13, 3e12, 1e15) == "compute"
    assert roofline_bound(0, 0, 3e12, 1e15) is None


def test_bench_evaluates_every_problem_and_resumes(toy_plugin, tmp_path):
    suite = make_suite(tmp_path / "suite", {"fast": 2.0, "slow": 0.5, "unseeded": None})
    paths = collect_problems([suite])
    assert [p.name for p in paths] == ["fast.py", "slow.py", "unseeded.py"]
    bench = Bench(tmp_path / "out", RunConfig(), evolve=False)
    result = bench.run(paths)
    by_name = {r["problem"]: r for r in result["rows"]}
    assert by_name["fast"]["speedup"] == 2.0 and by_name["slow"]["status"] == "ok"
    assert by_name["unseeded"]["status"] == "no_candidate"
    assert result["summary"]["geomean_speedup_eager"] == pytest.approx(1.0)
    assert by_name["fast"]["roofline_bound"] == "memory"
    assert by_name["fast"]["compile_roofline_fraction"] == pytest.approx(0.5)
    assert result["summary"]["by_bound"]["memory"]["headroom_geomean_vs_compile"] == pytest.approx(2.0)
    assert len(toy_plugin.evaluated) == 2

    again = Bench(tmp_path / "out", RunConfig(), evolve=False).run(paths)
    assert len(toy_plugin.evaluated) == 2  # nothing re-evaluated
    assert again["rows"] == result["rows"]
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["summary"]["problems"] == 3


def test_a_harvested_folder_is_benched_largest_share_of_the_model_first(toy_plugin, tmp_path):
    """Evolutions run one problem at a time: with harvest's time shares, the bench starts where the model's time
    is, the unmeasured last, in name order among equals; a folder whose summary is unreadable keeps name order."""
    suite = make_suite(tmp_path / "harvested", {"a_norm": 1.0, "b_down": 1.0, "c_qkv": 1.0, "d_rope": 1.0})
    shares = {"a_norm.py": 0.02, "b_down.py": 0.17, "c_qkv.py": 0.26, "d_rope.py": None}
    (suite / "harvest.json").write_text(
        json.dumps({"problems": [{"file": f, "time_share": t} for f, t in shares.items()]})
    )
    assert [p.name for p in collect_problems([suite])] == ["c_qkv.py", "b_down.py", "a_norm.py", "d_rope.py"]
    rows = Bench(tmp_path / "out", RunConfig(), evolve=False).run(collect_problems([suite]))["rows"]
    assert [r["problem"] for r in rows] == ["c_qkv", "b_down", "a_norm", "d_rope"]

    (suite / "harvest.json").write_text("{not json")
    assert [p.name for p in collect_problems([suite])] == ["a_norm.py", "b_down.py", "c_qkv.py", "d_rope.py"]


def test_a_row_says_when_its_verdict_was_judged_again_alone_after_running_out_of_memory(tmp_path):
    from ksmith_bench.bench import _row
    from ksmith_core.loading import load_problem
    from ksmith_core.model import Candidate, Status, Verdict

    (tmp_path / "toy.py").write_text(PROBLEM)
    problem, candidate = load_problem(tmp_path / "toy.py"), Candidate.from_source(SEED)
    retried = Verdict(
        status=Status.OK, details={"oom_retried_alone": True, "oom_first_reason": "OUT_OF_MEMORY: x"}
    )
    assert _row(problem, candidate, retried, "eval", {})["oom_retried_alone"] is True
    assert _row(problem, candidate, Verdict(status=Status.OK), "eval", {})["oom_retried_alone"] is False
    assert _row(problem, None, None, "eval", {})["oom_retried_alone"] is False


def test_bench_evolve_records_start_and_end(toy_plugin, tmp_path):
    suite = make_suite(tmp_path / "suite", {"one": 1.0})
    config = RunConfig(proposer="toy", select="greedy", budget=4, proposals_per_step=1)
    result = Bench(tmp_path / "out", config, evolve=True).run(collect_problems([suite]))
    row = result["rows"][0]
    assert row["mode"] == "evolve" and row["evaluations"] == 4
    assert row["seed_speedup"] == 1.0
    assert math.isclose(row["speedup"], 1.75)


def test_a_bench_row_reports_the_best_that_held_its_revalidation_and_names_those_set_aside(
    toy_plugin, tmp_path
):
    toy_plugin.flaky_from = 1.75  # 1.75 passes its evaluation and fails the re-validation
    suite = make_suite(tmp_path / "suite", {"one": 1.0})
    config = RunConfig(proposer="toy", select="greedy", budget=4, proposals_per_step=1)
    row = Bench(tmp_path / "out", config, evolve=True).run(collect_problems([suite]))["rows"][0]
    assert row["status"] == "ok" and math.isclose(row["speedup"], 1.5), row
    assert [math.isclose(s["speedup"], 1.75) for s in row["failed_revalidation"]] == [True]
    assert not any(r.startswith("NOT_REVALIDATED") for r in row["reasons"])


def test_a_bench_row_whose_every_accepted_candidate_failed_revalidation_is_not_counted_correct(
    toy_plugin, tmp_path
):
    toy_plugin.flaky_from = 1.0  # the seed passes its evaluation and fails the re-validation
    suite = make_suite(tmp_path / "suite", {"one": 1.0})
    config = RunConfig(proposer="toy", select="greedy", budget=1, proposals_per_step=1)
    result = Bench(tmp_path / "out", config, evolve=True).run(collect_problems([suite]))
    (row,) = result["rows"]
    assert row["status"] == "incorrect" and row["speedup"] is None, row
    assert any(r.startswith("FAILED_REVALIDATION") for r in row["reasons"])
    assert result["summary"]["correct"] == 0


def test_bench_evolve_resumes_a_run_stopped_before_its_seed_was_judged(toy_plugin, tmp_path):
    from ksmith_bench.bench import candidate_for
    from ksmith_core.engine import Engine
    from ksmith_core.loading import load_candidate, load_problem

    suite = make_suite(tmp_path / "suite", {"one": 1.0})
    config = RunConfig(proposer="toy", select="greedy", budget=4, proposals_per_step=1)
    paths = collect_problems([suite])
    problem = load_problem(paths[0])
    start = load_candidate(candidate_for(problem, None))
    # What a bench killed at its deadline leaves: the run's store, created, and no candidate in it.
    Engine.start(problem, start, config, tmp_path / "out" / "runs" / problem.name).close()
    row = Bench(tmp_path / "out", config, evolve=True).run(paths)["rows"][0]
    assert row["status"] == "ok" and row["evaluations"] == 4, row
    assert row["seed_speedup"] == 1.0


def test_the_reserve_goes_where_the_room_is_and_is_spent_once(toy_plugin, tmp_path):
    from ksmith_bench.bench import room

    suite = make_suite(tmp_path / "suite", {"far": 0.5, "near": 2.0})
    config = RunConfig(proposer="toy", select="greedy", budget=4, proposals_per_step=1)
    result = Bench(tmp_path / "out", config, evolve=True, reserve=6).run(collect_problems([suite]))
    rows = {r["problem"]: r for r in result["rows"]}
    # The toy roofline is 4x eager: 'far' ends its first run further from it, so it gets the rounds.
    far, near = rows["far"], rows["near"]
    assert far["reserve_evaluations"] == 6 and [r["given"] for r in far["reserve_rounds"]] == [4, 2]
    assert far["evaluations"] == 10 and far["speedup"] > 1.25  # better than after its first 4
    assert "reserve_evaluations" not in near and near["evaluations"] == 4
    assert result["summary"]["reserve_evaluations"] == {"far": 6}
    assert room(near) == pytest.approx(4 / near["speedup"])

    evaluated = len(toy_plugin.evaluated)
    again = Bench(tmp_path / "out", config, evolve=True, reserve=6).run(collect_problems([suite]))
    assert len(toy_plugin.evaluated) == evaluated  # resumed: the reserve was spent already
    assert {r["problem"]: r["evaluations"] for r in again["rows"]} == {"far": 10, "near": 4}


def test_room_is_the_gap_to_the_roofline_or_else_to_torch_compile():
    from ksmith_bench.bench import room

    row = {"mode": "evolve", "status": "ok", "stop_reason": "budget", "roofline_fraction": 0.5}
    assert room(row) == 2.0
    assert room({**row, "stop_reason": "near_roofline"}) is None  # nothing left to gain
    assert room({**row, "stop_reason": "patience"}) is None
    on_cpu = {**row, "interpreted": True, "speedup_vs_compile": 0.8}
    assert room(on_cpu) == pytest.approx(1.25)  # interpreted: no roofline, the gap to torch.compile
    assert room({**on_cpu, "speedup_vs_compile": 1.2}) is None


def test_bench_table_prints_a_row_per_problem_and_lets_later_files_replace_rows(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_table.py"
    spec = importlib.util.spec_from_file_location("bench_table", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def row(problem, vs_compile, bound="memory"):
        return {
            "problem": problem,
            "status": "ok",
            "speedup": 1.5,
            "speedup_vs_compile": vs_compile,
            "roofline_fraction": 0.5 * vs_compile,
            "roofline_bound": bound,
            "compile_roofline_fraction": 0.5,
            "evaluations": 16,
        }

    first, later = tmp_path / "all.jsonl", tmp_path / "longer.jsonl"
    first.write_text(
        "".join(json.dumps(r) + "\n" for r in [row("a", 0.8), row("b", 1.25), row("c", 0.5, "compute")])
    )
    later.write_text(json.dumps(row("a", 1.25)) + "\n")
    assert module.main([str(first), str(later), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["by_bound"]["memory"]["geomean_speedup_compile"] == pytest.approx(1.25)  # a's later row
    assert summary["by_bound"]["memory"]["headroom_geomean_vs_compile"] == pytest.approx(2.0)
    assert module.main([str(first)]) == 0
    table = capsys.readouterr().out
    assert sum(line.startswith("| ") for line in table.splitlines()) == 4  # header + three problems
    assert "memory-bound (2 problems)" in table and "slower than torch.compile: a, c" in table


def test_bench_table_on_the_terminal_names_each_bound_and_its_headroom(capsys):
    from ksmith_bench.plugin import print_bench

    rows = [
        {
            "problem": "a",
            "status": "ok",
            "speedup": 1.2,
            "speedup_vs_compile": 0.9,
            "roofline_fraction": 0.45,
            "roofline_bound": "memory",
        },
        {
            "problem": "c",
            "status": "ok",
            "speedup": 0.5,
            "speedup_vs_compile": 0.5,
            "roofline_fraction": 0.3,
            "roofline_bound": "compute",
        },
    ]
    print_bench({"rows": rows, "summary": summarise(rows)})
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines at the terminal's width
    assert "memory-bound (1): geomean 0.900x vs compile; kernels at the roofline would reach 2.00x" in out
    assert "compute-bound (1)" in out and "slower than torch.compile: a, c" in out


def test_seed_from_seeds_problems_without_a_kernel_keeps_the_seeds_and_reuses_them(toy_plugin, tmp_path):
    from ksmith_core import SeedMethod, hookimpl
    from ksmith_core.errors import ProposerError
    from ksmith_core.model import EvalOptions, Proposal
    from ksmith_core.plugins import get_plugin_manager

    asked = []

    def seed(problem, options):
        asked.append(problem.name)
        if problem.name == "unseedable":
            raise ProposerError("this method cannot write a kernel for unseedable")
        return Proposal(source=SEED.replace("SPEED = 1.0", "SPEED = 1.5"), edit="seeded", proposer="toy-seed")

    class Seeder:
        @hookimpl
        def ksmith_register_seed_methods(self, register):
            register(SeedMethod("toy-seed", seed))

    pm = get_plugin_manager()
    pm.register(Seeder(), name="toy-seeder")
    try:
        suite = make_suite(tmp_path / "suite", {"shipped": 2.0, "bare": None, "unseedable": None})
        config = RunConfig(eval=EvalOptions(device="cpu"))
        paths = collect_problems([suite])
        out = tmp_path / "out"
        rows = {r["problem"]: r for r in Bench(out, config, False, seed_from="toy-seed").run(paths)["rows"]}
        assert rows["shipped"]["speedup"] == 2.0  # its own seed: never re-seeded
        assert rows["bare"]["status"] == "ok" and rows["bare"]["speedup"] == 1.5
        assert rows["unseedable"]["status"] == "no_seed"
        assert "cannot write a kernel for unseedable" in rows["unseedable"]["reasons"][0]
        assert (out / "seeds" / "bare.seed.py").is_file() and sorted(asked) == ["bare", "unseedable"]

        asked.clear()
        again = Bench(out, config, False, seed_from="toy-seed").run(paths)
        assert asked == ["unseedable"]  # the stored seed was reused; the failed one is tried again
        assert again["summary"]["not_evaluated"] == {"no_seed": 1}

        asked.clear()  # the method's options changed (another --gemm-templates): the stored seed is not theirs
        Bench(out, config, False, seed_from="toy-seed", seed_options={"gemm_templates": "ksmith"}).run(paths)
        assert sorted(asked) == ["bare", "unseedable"]
    finally:
        pm.unregister(name="toy-seeder")


def test_kernelbench_evolve_subset_takes_the_correct_seeds_furthest_behind_compile_from_each_level():
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "kernelbench_levels.py"
    spec = importlib.util.spec_from_file_location("kernelbench_levels", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def row(level, name, status="ok", vs_compile=0.5):
        return {"path": f"/kb/level{level}/{name}.py", "problem": name, "status": status,
                "speedup_vs_compile": vs_compile}  # fmt: skip

    rows = {
        f"level{r['path'].split('level')[1][0]}/{r['problem']}": r
        for r in (
            row(1, "1_Matmul", vs_compile=0.8),
            row(1, "2_Relu", vs_compile=0.3),
            row(1, "3_conv_standard_2D", vs_compile=0.01),  # a convolution: left out
            row(1, "4_Softmax", status="incorrect", vs_compile=None),
            row(1, "5_Sum", vs_compile=0.9),
            row(2, "1_Gemm_Relu", vs_compile=0.27),
        )
    }
    assert module.choose_subset(rows, 3) == ["level1/2_Relu", "level2/1_Gemm_Relu", "level1/1_Matmul"]
    assert module.choose_subset(rows, 10) == [
        "level1/2_Relu", "level2/1_Gemm_Relu", "level1/1_Matmul", "level1/5_Sum"
    ]  # fmt: skip


def test_kernelbench_evolve_copies_the_subset_and_its_seeds_and_benches_them_in_order(tmp_path, monkeypatch):
    import argparse
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "kernelbench_levels.py"
    spec = importlib.util.spec_from_file_location("kernelbench_levels", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    kb, source, out = tmp_path / "kb", tmp_path / "run", tmp_path / "evolve"
    (source / "seeds").mkdir(parents=True)
    rows = []
    for level, name, vs in ((1, "1_Matmul", 0.8), (1, "2_Relu", 0.3), (2, "1_Gemm", 0.27)):
        (kb / f"level{level}").mkdir(parents=True, exist_ok=True)
        (kb / f"level{level}" / f"{name}.py").write_text(f"# {name}\n")
        (source / "seeds" / f"{name}.seed.py").write_text(f"# seed of {name}\n")
        rows.append({"path": f"/x/level{level}/{name}.py", "problem": name, "status": "ok",
                     "speedup_vs_compile": vs})  # fmt: skip
    (source / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ran = []
    monkeypatch.setattr(module, "bench_until", lambda cmd, out_dir, deadline: ran.append(cmd))
    args = argparse.Namespace(kernelbench=kb, source=source, out=out, count=2, budget=16, parallel=8,
                              device="cuda", deadline_s=10.0, problems=None)  # fmt: skip
    assert module.evolve(args) == 0
    (cmd,) = ran
    files = [a for a in cmd if a.endswith(".py")]
    assert files == [
        str(out / "problems" / "level1" / "2_Relu.py"),
        str(out / "problems" / "level2" / "1_Gemm.py"),
    ]
    assert (out / "seeds" / "2_Relu.seed.py").read_text() == "# seed of 2_Relu\n"
    assert not (out / "seeds" / "1_Matmul.seed.py").exists()
    assert json.loads((out / "subset.json").read_text())["problems"] == ["level1/2_Relu", "level2/1_Gemm"]
    assert cmd[cmd.index("--budget") + 1] == "16" and "--evolve" in cmd
    # Named problems instead of a subset: no run to choose from, seeds made afresh by the bench.
    named = tmp_path / "named"
    args = argparse.Namespace(kernelbench=kb, source=None, out=named, count=2, budget=16, parallel=8,
                              device="cuda", deadline_s=10.0, problems=["level1/1_Matmul"])  # fmt: skip
    assert module.evolve(args) == 0
    assert [a for a in ran[-1] if a.endswith(".py")] == [str(named / "problems" / "level1" / "1_Matmul.py")]
    assert json.loads((named / "subset.json").read_text())["rule"] == "named with --problems"
    assert not list((named / "seeds").iterdir())
    neither = argparse.Namespace(**{**vars(args), "out": tmp_path / "neither", "problems": None})
    assert module.evolve(neither) == 2

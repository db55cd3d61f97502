"""The proposer as the engine calls it: proposals, determinism, the bandit, duplicates and fix mode."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from ksmith_core.capabilities import Proposer
from ksmith_core.loading import load_problem
from ksmith_core.model import Candidate, Proposal, Scored, Selection, Status, Verdict, source_id
from ksmith_core.registry import lookup, registry
from ksmith_core.run import Run, RunConfig
from ksmith_core.store import RunStore
from ksmith_mutate import plugin
from ksmith_mutate.bandit import EditBandit, reward_for
from ksmith_mutate.edits import EDIT_KINDS, possible_edits

from .conftest import KERNELS, seed_source


def ok(speedup: float | None) -> Verdict:
    return Verdict(status=Status.OK, correct=True, speedup=speedup)


BROKEN = Verdict(status=Status.COMPILE_ERROR, feedback="out of resources: shared memory")


@pytest.fixture
def make_run(tmp_path):
    counter = iter(range(1000))

    def make(name: str = "softplus", **config) -> Run:
        problem = load_problem(KERNELS / f"{name}.py")
        store = RunStore.create(tmp_path / f"run{next(counter)}", problem.source, {}, {})
        return Run(problem, RunConfig(**{"proposer": "mutate", **config}), store)

    return make


def add_seed(run: Run, name: str, verdict: Verdict) -> Scored:
    seed = Candidate.from_source(seed_source(name))
    return run.add(seed, verdict)[0]


def add_child(run: Run, parent: Scored, proposal: Proposal, verdict: Verdict) -> Scored:
    assert proposal.parent_ids == (parent.candidate.id,)
    return run.add(Candidate.from_proposal(proposal), verdict)[0]


def test_registered_as_the_default_proposer(make_run):
    assert lookup(Proposer, "mutate") is plugin.MUTATE
    assert registry().default(Proposer) is plugin.MUTATE
    run = make_run()
    seed = add_seed(run, "softplus", ok(1.0))
    proposals = plugin.MUTATE.propose(run, Selection(parents=(seed,)))
    assert len(proposals) == run.config.proposals_per_step == 2


def test_proposals_are_single_edits_of_the_parent(make_run):
    run = make_run(proposals_per_step=4)
    seed = add_seed(run, "matmul_bias_relu", ok(1.0))
    proposals = plugin.propose(run, Selection(parents=(seed,)))
    assert len(proposals) == 4
    all_edits = {e.source: e for e in possible_edits(seed.candidate.source)}
    for proposal in proposals:
        assert proposal.proposer == "mutate" and proposal.parent_ids == (seed.candidate.id,)
        edit = all_edits[proposal.source]
        assert (proposal.edit, proposal.edit_kind) == (edit.description, edit.kind)
        assert proposal.meta["mode"] == "improve"
    assert len({p.edit_kind for p in proposals}) == 4  # untried kinds first, spread within a step


def run_steps(make_run, seed_number: int, steps: int = 5) -> list[tuple[str, str]]:
    """A small synthetic evolution: every child is accepted, num_warps edits gain, others lose a little."""
    run = make_run("matmul_bias_relu", seed=seed_number)
    parent = add_seed(run, "matmul_bias_relu", ok(1.0))
    history = []
    for _ in range(steps):
        origin = parent
        proposals = plugin.propose(run, Selection(parents=(origin,)))
        for proposal in proposals:
            gain = 1.1 if proposal.edit_kind == "num_warps" else 0.97
            child = add_child(run, origin, proposal, ok(origin.verdict.speedup * gain))
            history.append((proposal.edit, source_id(proposal.source)))
            if child.verdict.score > parent.verdict.score:
                parent = child
    return history


def test_same_seed_same_proposals(make_run):
    first = run_steps(make_run, seed_number=7)
    assert first == run_steps(make_run, seed_number=7)
    assert len({sid for _, sid in first}) == len(first)
    others = [run_steps(make_run, seed_number=s) for s in (1, 2, 3)]
    assert any(other != first for other in others)


def test_bandit_prefers_the_kind_that_gained(make_run):
    run = make_run("softplus", proposals_per_step=1)
    seed = add_seed(run, "softplus", ok(2.0))
    edits = possible_edits(seed.candidate.source)
    kinds = sorted({e.kind for e in edits})
    # Every kind tried once: num_warps gained 20 %, the rest slowed down or broke.
    for kind in kinds:
        for edit in [e for e in edits if e.kind == kind][:1]:
            verdict = ok(2.4) if kind == "num_warps" else (BROKEN if kind == "math" else ok(1.9))
            proposal = Proposal(edit.source, (seed.candidate.id,), edit.description, edit.kind, "mutate")
            add_child(run, seed, proposal, verdict)
    bandit = EditBandit.from_population(run.population, run.by_id, "mutate")
    assert bandit.mean("num_warps") == pytest.approx(0.9)
    assert bandit.mean("math") == 0.0
    assert bandit.choose(kinds, run.rng) == "num_warps"
    proposals = plugin.propose(run, Selection(parents=(seed,)))
    assert [p.edit_kind for p in proposals] == ["num_warps"]
    assert run.state("mutate")["bandit"]["num_warps"] == {"pulls": 1, "mean_reward": 0.9}


def test_bandit_ignores_other_proposers_and_children_of_broken_parents(make_run):
    run = make_run("softplus")
    seed = add_seed(run, "softplus", BROKEN)
    edits = possible_edits(seed.candidate.source)
    add_child(
        run, seed, Proposal(edits[0].source, (seed.candidate.id,), "x", edits[0].kind, "mutate"), ok(3.0)
    )
    foreign = Proposal(edits[1].source + "\n# llm\n", (seed.candidate.id,), "y", "rewrite", "llm")
    run.add(Candidate.from_proposal(foreign), ok(3.0))
    assert EditBandit.from_population(run.population, run.by_id, "mutate").pulls == {}


def test_rewards():
    assert reward_for(ok(1.25), ok(1.0)) == pytest.approx(1.0)
    assert reward_for(ok(1.0), ok(1.0)) == pytest.approx(0.5)
    assert reward_for(ok(0.5), ok(1.0)) == 0.0
    assert reward_for(BROKEN, ok(1.0)) == 0.0
    assert reward_for(ok(1.0), BROKEN) is None
    assert reward_for(ok(None), ok(None)) == 0.5  # no timings: only "did it break" is learned


def test_never_proposes_an_evaluated_source(make_run):
    run = make_run("softmax", proposals_per_step=3)
    seed = add_seed(run, "softmax", ok(1.0))
    edits = possible_edits(seed.candidate.source)
    keep = edits[-1]
    for i, edit in enumerate(edits[:-1]):
        # Same id (trailing whitespace is ignored), or a near duplicate (a comment) the engine would skip.
        variant = edit.source + "\n\n" if i % 2 else "# evaluated before\n" + edit.source
        run.add(Candidate.from_source(variant), ok(1.0))
    proposals = plugin.propose(run, Selection(parents=(seed,)))
    assert [p.source for p in proposals] == [keep.source]
    run.add(Candidate.from_source(keep.source), ok(1.0))
    assert plugin.propose(run, Selection(parents=(seed,))) == []


def test_fix_mode_branches_from_the_best_working_ancestor_and_tries_a_safer_edit(make_run):
    run = make_run("matmul_bias_relu", proposals_per_step=4)
    seed = add_seed(run, "matmul_bias_relu", ok(1.0))
    edits = {e.description: e for e in possible_edits(seed.candidate.source)}
    faster = edits["num_warps 4 -> 8 in _matmul_bias_relu_kernel launch"]
    good = add_child(
        run,
        seed,
        Proposal(faster.source, (seed.candidate.id,), faster.description, faster.kind, "mutate"),
        ok(1.5),
    )
    bigger = [
        e for e in possible_edits(good.candidate.source) if e.description.startswith("BLOCK_K 16 -> 32")
    ][0]
    broken = add_child(
        run,
        good,
        Proposal(bigger.source, (good.candidate.id,), bigger.description, bigger.kind, "mutate"),
        BROKEN,
    )
    assert plugin.best_working_ancestor(run.by_id, broken) is good
    proposals = plugin.propose(run, Selection(parents=(broken,), mode="fix"))
    assert len(proposals) == 4
    from_ancestor = [p for p in proposals if p.parent_ids == (good.candidate.id,)]
    repairs = [p for p in proposals if p.parent_ids == (broken.candidate.id,)]
    assert len(from_ancestor) == len(repairs) == 2
    assert all(p.meta["instead_of"] == broken.candidate.id and p.meta["mode"] == "fix" for p in from_ancestor)
    safer = {e.source for e in possible_edits(broken.candidate.source) if e.safer}
    assert all(p.source in safer for p in repairs)
    assert bigger.source not in {p.source for p in proposals}


def test_fix_mode_without_a_working_ancestor_only_makes_safer_edits(make_run):
    run = make_run("matmul_bias_relu", proposals_per_step=3)
    seed = add_seed(run, "matmul_bias_relu", BROKEN)
    proposals = plugin.propose(run, Selection(parents=(seed,), mode="fix"))
    safer = {e.source: e for e in possible_edits(seed.candidate.source) if e.safer}
    assert len(proposals) == 3
    assert all(p.source in safer and p.parent_ids == (seed.candidate.id,) for p in proposals)


def test_a_parent_that_is_not_python_yields_nothing(make_run):
    run = make_run("softplus")
    junk = run.add(Candidate.from_source("def broken(:\n"), BROKEN)[0]
    assert plugin.propose(run, Selection(parents=(junk,), mode="fix")) == []
    assert plugin.propose(run, replace(Selection(parents=(junk,)), mode="improve")) == []


def test_momentum_keeps_going_the_way_that_paid(make_run):
    run = make_run("matmul_bias_relu")
    seed = add_seed(run, "matmul_bias_relu", ok(1.0))
    edits = possible_edits(seed.candidate.source)
    up = [e for e in edits if e.description.startswith("BLOCK_M 32 -> 64")][0]
    proposal = Proposal(
        up.source, (seed.candidate.id,), up.description, up.kind, "mutate", {"detail": up.detail}
    )
    child = add_child(run, seed, proposal, ok(1.3))
    assert plugin._momentum(run.by_id, child) == ("dot_tile", "up")
    assert plugin._momentum(run.by_id, seed) is None
    others_tried = Counter({kind: 1 for kind in EDIT_KINDS if kind != "dot_tile"})
    child_edits = possible_edits(child.candidate.source)
    directions = []
    for trial in range(40):
        run.rng.seed(trial)
        plan = plugin._Plan(child, False, "improve", momentum=plugin._momentum(run.by_id, child))
        fresh_lists = {child.candidate.id: list(child_edits)}  # _pick_edit consumes the list it is given
        edit = plugin._pick_edit(plan, fresh_lists, set(run.by_id), EditBandit(), others_tried, run.rng)
        assert edit.kind == "dot_tile"
        directions.append(edit.detail["direction"])
    # Three tile edits grow, one shrinks (BLOCK_N 32 -> 16; BLOCK_M 64 -> 32 is the seed): 12 to 1 for "up".
    assert directions.count("up") >= 32
    slower = add_child(
        run, seed, Proposal(edits[-1].source, (seed.candidate.id,), "", "dot_tile", "mutate"), ok(0.9)
    )
    assert plugin._momentum(run.by_id, slower) is None


def test_dot_precision_is_skipped_for_half_precision_problems(make_run):
    half = "import torch\n\ndef get_inputs():\n    return [torch.randn(4, 4, dtype=torch.float16)]\n"
    assert plugin.kinds_without_effect(half) == {"dot_precision"}
    mixed = half + "\n\ndef reference(x):\n    return x.float()\n"
    assert plugin.kinds_without_effect(mixed) == frozenset()
    assert plugin.kinds_without_effect((KERNELS / "matmul_bias_relu.py").read_text()) == frozenset()
    # The operands' size decides which tiles fit in shared memory: two bytes for half problems, four otherwise,
    # eight where the problem names fp64.
    assert plugin.problem_limits(half).element_bytes == 2
    assert plugin.problem_limits(mixed).element_bytes == 4
    assert plugin.problem_limits(half.replace("float16", "float64")).element_bytes == 8
    assert plugin.problem_limits(mixed.replace("x.float()", "x.double()")).element_bytes == 8
    assert (
        plugin.problem_limits(
            "import torch\n\ndef get_inputs():\n    return [torch.rand(8, 8)]\n"
        ).element_bytes
        == 4
    )
    run = make_run("matmul_bias_relu", proposals_per_step=12)
    run.problem = replace(run.problem, source=half)
    seed = add_seed(run, "matmul_bias_relu", ok(1.0))
    kinds = {p.edit_kind for p in plugin.propose(run, Selection(parents=(seed,)))}
    assert "dot_precision" not in kinds and "dot_tile" in kinds


def test_a_compute_bound_parent_far_from_its_roofline_tries_a_faster_dot_then_a_bigger_gemm_config(make_run):
    run = make_run("matmul_bias_relu")
    far = replace(ok(0.4), roofline_bound="compute", roofline_fraction=0.35)
    seed = add_seed(run, "matmul_bias_relu", far)
    edits = possible_edits(seed.candidate.source)
    # An fp32 GEMM multiplying in "ieee" runs on the CUDA cores: a faster precision is tried first.
    for trial in range(10):
        run.rng.seed(trial)
        plan = plugin._Plan(seed, False, "improve")
        edit = plugin._pick_edit(
            plan, {seed.candidate.id: list(edits)}, set(run.by_id), EditBandit(), Counter(), run.rng
        )
        assert edit.kind == "dot_precision" and edit.detail["new"] in ("tf32", "tf32x3"), edit.description
    # Already on TF32 (the fastest), the precision has nothing faster to offer: the tile comes first.
    on_tf32 = [e for e in edits if e.kind == "dot_precision" and e.detail["new"] == "tf32"][0]
    tf32 = add_child(
        run, seed, Proposal(on_tf32.source, (seed.candidate.id,), "", "dot_precision", "mutate"), far
    )
    tf32_edits = possible_edits(tf32.candidate.source)
    run.rng.seed(0)
    edit = plugin._pick_edit(
        plugin._Plan(tf32, False, "improve"),
        {tf32.candidate.id: list(tf32_edits)},
        set(run.by_id),
        EditBandit(),
        Counter(),
        run.rng,
    )
    assert edit.kind == "gemm_config", edit.description
    area = 32 * 32  # the seed's accumulator tile
    configs = [tuple(e.detail["config"]) for e in edits if e.kind == "gemm_config"]
    largest = list(max(configs, key=lambda c: c[0] * c[1] * min(c[2], 64)))[:3]
    grown = 0
    for trial in range(30):
        run.rng.seed(trial)
        plan = plugin._Plan(seed, False, "improve")
        edit = plugin._pick_edit(
            plan,
            {seed.candidate.id: list(edits)},
            set(run.by_id),
            EditBandit(),
            Counter({"dot_precision": 1}),
            run.rng,
        )
        assert edit.kind == "gemm_config"  # untried, and the structure is what is wrong
        m, n = edit.detail["config"][:2]
        grown += m * n > area
        # A GEMM kind's first try is its largest tile (here the largest that fits in shared memory).
        assert edit.detail["config"][:3] == largest, edit.description
    assert grown == 30
    # Once the structural kinds were tried, only edits that change the tiling compete while it stays far.
    tried = Counter({"dot_precision": 1, "gemm_config": 1, "tma_loads": 1, "persistent": 1})
    chosen = set()
    for trial in range(30):
        run.rng.seed(trial)
        plan = plugin._Plan(seed, False, "improve")
        edit = plugin._pick_edit(
            plan, {seed.candidate.id: list(edits)}, set(run.by_id), EditBandit(), tried, run.rng
        )
        chosen.add(edit.kind)
    assert chosen <= {"dot_precision", "gemm_config", "tma_loads", "persistent", "dot_tile"}
    assert "dot_tile" in chosen
    # Near its roofline (or memory-bound), the config jump is one untried kind among the others.
    near = add_seed(
        run, "matmul_bias_relu", replace(ok(0.9), roofline_bound="compute", roofline_fraction=0.85)
    )
    kinds = set()
    for trial in range(30):
        run.rng.seed(trial)
        plan = plugin._Plan(near, False, "improve")
        kinds.add(
            plugin._pick_edit(
                plan, {near.candidate.id: list(edits)}, set(), EditBandit(), Counter(), run.rng
            ).kind
        )
    assert len(kinds) > 3


def test_the_first_persistent_try_of_a_far_bmm_is_the_large_tile_in_batch_order(make_run):
    """The suite's bmm: a small tile's persistent form that lost once left the kind with a poor record, and
    16 evaluations did not come back to the large tile that pays (docs/benchmarks.md §5c2, run 3). The
    kind's first try is now its largest tile, TMA and persistent in batch order."""
    from ksmith_mutate.persistent import BATCH_GRID_HELPER

    suite = Path(plugin.__file__).parents[1] / "ksmith_problems" / "problems" / "matmul"
    source = (suite / "bmm.seed.py").read_text(encoding="utf-8")
    run = make_run("matmul_bias_relu")
    far = replace(ok(0.4), roofline_bound="compute", roofline_fraction=0.4)
    seed = run.add(Candidate.from_source(source), far)[0]
    edits = [e for e in possible_edits(source) if e.kind != "dot_precision"]  # fp16: nothing to gain there
    tried = Counter({"gemm_config": 1, "tma_loads": 1})
    for trial in range(12):
        run.rng.seed(trial)
        edit = plugin._pick_edit(
            plugin._Plan(seed, False, "improve"),
            {seed.candidate.id: list(edits)},
            set(run.by_id),
            EditBandit(),
            tried,
            run.rng,
        )
        assert edit.kind == "persistent" and "at 128x256x64" in edit.description, edit.description
        assert BATCH_GRID_HELPER in edit.source
    # Once the kind has a record, its edits are drawn by weight again: the smaller tiles come up too.
    drawn = set()
    for trial in range(40):
        run.rng.seed(trial)
        edit = plugin._pick_edit(
            plugin._Plan(seed, False, "improve"),
            {seed.candidate.id: [e for e in edits if e.kind == "persistent"]},
            set(run.by_id),
            EditBandit(),
            tried + Counter({"persistent": 1}),
            run.rng,
        )
        drawn.add(edit.description)
    assert any("at 128x256x64" not in d for d in drawn)


def test_a_memory_bound_parent_far_from_its_roofline_tries_the_reversed_pass_first(make_run):
    run = make_run("l1norm_looped")
    far = add_seed(run, "l1norm_looped", replace(ok(1.0), roofline_bound="memory", roofline_fraction=0.5))
    near = add_seed(run, "l1norm_looped", replace(ok(1.0), roofline_bound="memory", roofline_fraction=0.9))
    edits = possible_edits(far.candidate.source)
    assert "loop_reverse" in {e.kind for e in edits}

    def kinds(parent, tried):
        chosen = set()
        for trial in range(20):
            run.rng.seed(trial)
            edit = plugin._pick_edit(
                plugin._Plan(parent, False, "improve"),
                {parent.candidate.id: list(edits)},
                set(),
                EditBandit(),
                tried,
                run.rng,
            )
            chosen.add(edit.kind)
        return chosen

    # The row read once when it fits a block comes first, then the reversed pass (MEMORY_STRUCTURAL_FIRST).
    assert kinds(far, Counter()) == {"whole_row"}
    assert kinds(far, Counter({"whole_row": 1})) == {"loop_reverse"}
    # Once tried, it is one kind among the others; near the roofline it never came first.
    assert len(kinds(far, Counter({"whole_row": 1, "loop_reverse": 1}))) > 3
    assert len(kinds(near, Counter())) > 3


def test_a_memory_bound_parent_whose_rows_share_an_operand_renumbers_its_programs_first(make_run):
    run = make_run("rows_affine")
    far = add_seed(run, "rows_affine", replace(ok(1.0), roofline_bound="memory", roofline_fraction=0.4))
    edits = possible_edits(far.candidate.source)
    chosen = set()
    for trial in range(20):
        run.rng.seed(trial)
        plan = plugin._Plan(far, False, "improve")
        edit = plugin._pick_edit(
            plan, {far.candidate.id: list(edits)}, set(), EditBandit(), Counter(), run.rng
        )
        chosen.add(edit.kind)
    assert chosen == {"broadcast_reuse"}


def test_a_direction_that_only_lost_gives_the_other_direction_its_turn(make_run):
    from ksmith_mutate.bandit import LOSING_DIRECTION_WEIGHT

    run = make_run("softmax")
    parent = add_seed(run, "softmax", ok(1.0))
    warps = [e for e in possible_edits(parent.candidate.source) if e.kind == "num_warps"]
    assert {e.detail["direction"] for e in warps} == {"up", "down"}
    bandit = EditBandit()
    bandit.record("num_warps", 0.0, "up")  # 8 -> 16 ran at half the speed
    assert bandit.direction_weight("num_warps", "up") == LOSING_DIRECTION_WEIGHT
    assert bandit.direction_weight("num_warps", "down") == 1.0  # never tried
    chosen = Counter()
    for trial in range(60):
        run.rng.seed(trial)
        plan = plugin._Plan(parent, False, "improve")
        edit = plugin._pick_edit(plan, {parent.candidate.id: list(warps)}, set(), bandit, Counter(), run.rng)
        chosen[edit.detail["direction"]] += 1
    assert chosen["down"] > 3 * chosen["up"] > 0
    # A direction that gained keeps its full weight.
    bandit.record("num_warps", 0.9, "down")
    assert bandit.direction_weight("num_warps", "down") == 1.0

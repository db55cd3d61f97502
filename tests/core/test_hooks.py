"""Every hook has a test of its own here (test_hook_<name>), and docs/hooks.md is what the code says."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import click
import pytest

from ksmith_core import (
    Backend,
    EvalJob,
    Executor,
    Exporter,
    Platform,
    ProblemSuite,
    Proposer,
    ReportSection,
    SeedMethod,
    Selector,
    hookdoc,
    hookimpl,
    hookspecs,
)
from ksmith_core.engine import MAX_BARREN_STEPS, Engine, evaluate
from ksmith_core.errors import PluginError
from ksmith_core.exporting import export_from_run
from ksmith_core.loading import load_candidate, load_problem, resolve_problem
from ksmith_core.model import Artifact, EvalOptions, Selection
from ksmith_core.plugins import get_plugin_manager
from ksmith_core.registry import lookup, registry
from ksmith_core.run import RunConfig

DOCS = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"
HOOKS = sorted(
    name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("ksmith_")
)


def test_hooks_md_is_generated_from_the_code():
    assert DOCS.read_text() == hookdoc.render(), (
        "docs/hooks.md differs from the hook specifications: run `python -m ksmith_core.hookdoc > docs/hooks.md`"
    )


def test_every_hook_has_a_test():
    defined = set(re.findall(r"^def (test_hook_\w+)\(", Path(__file__).read_text(), re.M))
    missing = [name for name in HOOKS if f"test_hook_{name}" not in defined]
    assert not missing, f"hooks without a test_hook_<name> test: {missing}"


class Registered:
    def __init__(self, **hooks):
        self.__dict__.update(hooks)


@pytest.fixture
def register_plugin():
    pm = get_plugin_manager()
    names = []

    def register(plugin, name):
        pm.register(plugin, name=name)
        names.append(name)
        return plugin

    yield register
    for name in names:
        pm.unregister(name=name)


def toy_engine(toy_problem, tmp_path, **config):
    problem_path, seed_path = toy_problem
    cfg = RunConfig(proposer="toy", select=config.pop("select", "greedy"), **config)
    seed = load_candidate(seed_path)
    return Engine.start(load_problem(problem_path), seed, cfg, tmp_path / "run"), seed


def test_hook_ksmith_register_proposers(toy_plugin):
    assert lookup(Proposer, "toy").description == "test proposer: bumps SPEED"
    assert registry().default(Proposer).name == "mutate"  # the built-in default


def test_hook_ksmith_register_backends(toy_plugin):
    assert lookup(Backend, "toy").name == "toy"
    assert "triton" in registry().names(Backend)


def test_hook_ksmith_register_problem_suites(register_plugin, toy_problem):
    directory = toy_problem[0].parent

    class Suite:
        @hookimpl
        def ksmith_register_problem_suites(self, register):
            register(ProblemSuite("test-suite", directory))

    register_plugin(Suite(), "suite")
    assert lookup(ProblemSuite, "test-suite").directory == directory
    assert resolve_problem("toy").path == toy_problem[0].resolve()


def test_hook_ksmith_register_selectors(toy_plugin, register_plugin, toy_problem, tmp_path):
    calls = []

    def always_seed(run):
        calls.append(run.evaluations)
        return Selection(parents=(run.by_id[run.seed_id],), island=3)

    class AlwaysSeed:
        @hookimpl
        def ksmith_register_selectors(self, register):
            register(Selector("always-seed", always_seed, "the seed, every time"))

    register_plugin(AlwaysSeed(), "always-seed")
    assert registry().default(Selector).name == "mapelites"  # a selector without default=True is not it
    engine, seed = toy_engine(toy_problem, tmp_path, budget=5, select="always-seed", proposals_per_step=1)
    result = engine.evolve(seed)
    population = engine.run.population
    engine.close()
    # The toy proposer makes the same child from the same parent every time: one new candidate, then only
    # duplicates, which are never evaluated twice, until the run gives up as exhausted.
    assert [s.candidate.parent_ids for s in population] == [(), (seed.id,)]
    assert population[1].candidate.island == 3
    assert result.stop_reason == "exhausted"
    assert calls == [1] + [2] * MAX_BARREN_STEPS  # once before every step, never for another selector's run


def test_proposers_are_called_by_name_only(toy_plugin, toy_problem, tmp_path):
    engine, seed = toy_engine(toy_problem, tmp_path, budget=5, proposals_per_step=2)
    engine.evolve(seed)
    stored = [c for _, c, _ in engine.run.store.evaluations()]
    engine.close()
    assert toy_plugin.calls["propose"] == 2  # 4 evaluations after the seed, 2 per step
    assert [c.proposer for c in stored] == ["seed", "toy", "toy", "toy", "toy"]
    assert stored[1].edit.startswith("SPEED -> ")


def test_backends_are_called_by_the_problems_backend_name(toy_plugin, toy_problem):
    problem = load_problem(toy_problem[0])
    verdict = evaluate(problem, load_candidate(toy_problem[1]), EvalOptions())
    assert verdict.accepted and verdict.speedup == 1.0
    assert verdict.feedback.startswith("status: ok")  # filled by the core from the typed fields
    other = problem.__class__(**{**problem.__dict__, "backend": "cobol"})
    with pytest.raises(PluginError, match=r"unknown backend 'cobol' \(registered: .*toy.*triton"):
        evaluate(other, load_candidate(toy_problem[1]), EvalOptions())


def test_hook_ksmith_register_executors(toy_plugin, register_plugin, toy_problem, tmp_path):
    batches = []

    def run_in_order(jobs, parallel, options):
        batches.append((len(jobs), parallel))
        return [evaluate(job.problem, job.candidate, job.options) for job in jobs]

    class Serial:
        @hookimpl
        def ksmith_register_executors(self, register):
            register(Executor("serial", run_in_order, "one after another"))

    register_plugin(Serial(), "serial")
    engine, seed = toy_engine(toy_problem, tmp_path, budget=5, executor="serial", parallel=3)
    engine.evolve(seed)
    engine.close()
    assert batches == [(1, 1), (2, 2), (2, 2), (1, 1)]  # the seed, a batch per step, the re-validation
    assert registry().default(Executor).name == "local"
    job = EvalJob(load_problem(toy_problem[0]), load_candidate(toy_problem[1]), EvalOptions())
    assert [v.speedup for v in lookup(Executor, "local").run([job, job], 2, {})] == [1.0, 1.0]


def test_hook_ksmith_register_exporters(toy_plugin, register_plugin, toy_problem, tmp_path):
    def write_text(run, candidate, options):
        out = Path(options["output"])
        out.write_text(candidate.source)
        return Artifact(
            target="text", paths=(out,), summary=f"{options['problem'].name} from {run.path.name}"
        )

    class Text:
        @hookimpl
        def ksmith_register_exporters(self, register):
            register(Exporter("text", write_text))

    register_plugin(Text(), "text-exporter")
    engine, seed = toy_engine(toy_problem, tmp_path, budget=3)
    result = engine.evolve(seed)
    engine.close()
    artifact = export_from_run(str(tmp_path / "run"), "text", tmp_path / "best.txt")
    assert artifact.summary == "toy from run"
    assert (tmp_path / "best.txt").read_text() == result.best.candidate.source
    # The message names every registered exporter: the installed plugins' (library, dataset, ...) and this one.
    with pytest.raises(
        PluginError, match=r"unknown exporter 'nope' \(registered: ([a-z]+, )*text(, [a-z]+)*\)"
    ):
        export_from_run(str(tmp_path / "run"), "nope", tmp_path / "x")


def test_hook_ksmith_register_platforms(register_plugin, monkeypatch):
    from ksmith_core.platform import PlatformSignals, detect_platform, platform_facts

    class Board:
        @hookimpl
        def ksmith_register_platforms(self, register):
            register(
                Platform(
                    "test-board",
                    lambda signals: 1 if signals.triton_backend == "board" else None,
                    lambda signals: {"warp_size": 64, "num_warps": [1, 2, 4]},
                    aliases=("board",),
                )
            )

    register_plugin(Board(), "board")
    monkeypatch.delenv("KSMITH_PLATFORM", raising=False)
    board = lookup(Platform, "test-board")
    signals = PlatformSignals(triton_backend="board")
    assert board.detect(signals) == 1
    assert detect_platform(signals) is board
    facts = platform_facts(signals=signals)
    assert facts.platform == "test-board" and facts.warp_size == 64 and facts.max_num_warps == 4
    monkeypatch.setenv("KSMITH_PLATFORM", "board")  # by alias, with no signal at all
    assert detect_platform(PlatformSignals()) is board


def test_hook_ksmith_register_seed_methods(toy_plugin, register_plugin, toy_problem, tmp_path):
    from ksmith_core.cli import build
    from ksmith_core.model import Proposal

    from .toy import SEED

    asked = []

    def seed(problem, options):
        asked.append((problem.name, options["device"], options["method_options"]))
        return Proposal(source=SEED, edit="first kernel", edit_kind="seed", proposer="toy-seed")

    class Seeder:
        @hookimpl
        def ksmith_register_seed_methods(self, register):
            register(SeedMethod("toy-seed", seed))

    register_plugin(Seeder(), "seeder")
    cli = build()
    problem = str(toy_problem[0])
    out = tmp_path / "seed.py"
    cli.main(
        ["seed", problem, "--from", "toy-seed", "-o", str(out), "--device", "cpu"], standalone_mode=False
    )
    assert out.read_text() == SEED and asked == [("toy", "cpu", {})]

    runs = tmp_path / "runs"
    cli.main(
        [
            "evolve",
            problem,
            "--seed-from",
            "toy-seed",
            "--proposer",
            "toy",
            "--budget",
            "3",
            "--device",
            "cpu",
            "--run-dir",
            str(runs),
        ],
        standalone_mode=False,
    )
    engine = Engine.resume(runs)
    assert engine.run.population[0].candidate.source == SEED
    assert engine.run.population[0].candidate.proposer == "toy-seed"
    engine.close()

    with pytest.raises(PluginError, match=r"unknown seed method 'nope' \(registered: .*toy-seed"):
        cli.main(
            ["seed", problem, "--from", "nope", "-o", str(out), "--device", "cpu"], standalone_mode=False
        )


def test_hook_ksmith_register_commands(ksmith_cmd, tmp_path):
    import os
    import subprocess

    (tmp_path / "hello_command.py").write_text(
        "import click\nfrom ksmith_core import hookimpl\n\n"
        "@hookimpl\ndef ksmith_register_commands(cli):\n"
        "    @cli.command()\n    @click.argument('name')\n"
        "    def hello(name):\n        click.echo(f'hello {name}')\n"
    )
    env = {**os.environ, "KSMITH_PLUGIN_MODULES": "hello_command", "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [*ksmith_cmd, "hello", "kernels"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout == "hello kernels\n", proc.stderr
    listed = subprocess.run([*ksmith_cmd, "plugins", "--json"], capture_output=True, text=True, env=env)
    import json

    plugin = {p["name"]: p for p in json.loads(listed.stdout)}["hello_command"]
    assert plugin["registered"]["commands"] == ["hello"]
    builtin = {p["name"]: p for p in json.loads(listed.stdout)}
    assert builtin["bench"]["registered"]["commands"] == ["bench"]
    assert builtin["report"]["registered"]["commands"] == ["report"]


def test_hook_ksmith_archive(toy_plugin, register_plugin, toy_problem, tmp_path):
    seen = []

    class Recorder:
        @hookimpl
        def ksmith_archive(self, run, candidate, verdict):
            seen.append((candidate.id, run.replaying))
            run.state("recorder")["count"] = run.state("recorder").get("count", 0) + 1
            return [{"kind": "recorder", "id": candidate.id, "replaying": run.replaying}]

    register_plugin(Recorder(), "recorder")
    engine, seed = toy_engine(toy_problem, tmp_path, budget=3)
    engine.evolve(seed)
    events = engine.run.store.events("recorder")
    engine.close()
    assert [e["id"] for e in events] == [cid for cid, _ in seen]
    assert all(e["replaying"] is False for e in events)

    seen.clear()
    resumed = Engine.resume(tmp_path / "run")
    assert [replaying for _, replaying in seen] == [True, True, True]
    assert resumed.run.state("recorder")["count"] == 3
    assert len(resumed.run.store.events("recorder")) == 3  # nothing stored while replaying
    resumed.close()


def test_hook_ksmith_run_start(toy_plugin, toy_problem, tmp_path):
    engine, seed = toy_engine(toy_problem, tmp_path, budget=2)
    engine.evolve(seed)
    engine.close()
    assert toy_plugin.calls["ksmith_run_start"] == 1


def test_hook_ksmith_new_best(toy_plugin, toy_problem, tmp_path):
    engine, seed = toy_engine(toy_problem, tmp_path, budget=4, proposals_per_step=1)
    engine.evolve(seed)
    events = engine.run.store.events("new_best")
    engine.close()
    assert toy_plugin.new_bests == [1.0, 1.25, 1.5, 1.75]
    assert [e["speedup"] for e in events] == toy_plugin.new_bests


def test_hook_ksmith_run_end(toy_plugin, toy_problem, tmp_path):
    engine, seed = toy_engine(toy_problem, tmp_path, budget=2)
    engine.evolve(seed)
    engine.close()
    assert toy_plugin.ended == ["budget"]


def test_hook_ksmith_report_sections(toy_plugin, register_plugin, toy_problem, tmp_path):
    from ksmith_report.report import write_report

    class Notes:
        @hookimpl
        def ksmith_report_sections(self, store):
            evaluations = len(list(store.evaluations()))
            return [ReportSection("Test notes", f"<p>{evaluations} evaluations seen</p>", order=1)]

    register_plugin(Notes(), "notes")
    engine, seed = toy_engine(toy_problem, tmp_path, budget=3)
    engine.evolve(seed)
    engine.close()
    page = write_report(tmp_path / "run").read_text()
    assert "<h2>Test notes</h2>\n<p>3 evaluations seen</p>" in page
    assert page.index("Test notes") < page.index("Archive map")  # ordered by ``order``: 1 before 40


# ---------------------------------------------------------------------------------------------------------------
# The registry's rules
# ---------------------------------------------------------------------------------------------------------------


def test_two_plugins_registering_one_name_is_one_clear_line(register_plugin, toy_plugin):
    class Again:
        @hookimpl
        def ksmith_register_proposers(self, register):
            register(Proposer("toy", lambda run, selection: []))

    register_plugin(Again(), "again")
    with pytest.raises(PluginError, match=r"proposer 'toy' is registered by two plugins, 'toy' and 'again'"):
        lookup(Proposer, "toy")
    assert registry().conflicts() == ["proposer 'toy': toy, again"]
    assert lookup(Proposer, "mutate").name == "mutate"  # other names are unaffected


def test_a_bad_registration_is_reported_not_fatal(register_plugin):
    from ksmith_core.plugins import plugin_infos

    class Broken:
        @hookimpl
        def ksmith_register_proposers(self, register):
            register("old-style", "a name and a description, as plugins used to")
            register(Proposer("no-callable", None))  # type: ignore[arg-type]
            register(Selector("wrong-kind", lambda run: None))

        @hookimpl
        def ksmith_register_exporters(self, register):
            raise RuntimeError("broken on purpose")

    register_plugin(Broken(), "broken")
    info = {i.name: i for i in plugin_infos()}["broken"]
    assert "registered 'old-style' by name: register a Proposer(...) object" in info.error
    assert "'propose' is not callable" in info.error
    assert "expected a Proposer" in info.error
    assert "ksmith_register_exporters raised RuntimeError: broken on purpose" in info.error
    assert lookup(Proposer, "mutate").name == "mutate"


def test_capability_options_reach_the_chosen_proposer_only(
    toy_plugin, register_plugin, toy_problem, tmp_path
):
    from ksmith_core.cli import build

    def propose(run, selection):
        return []

    class Tuned:
        @hookimpl
        def ksmith_register_proposers(self, register):
            register(
                Proposer(
                    "tuned",
                    propose,
                    cli_options=(click.Option(["--tuned-depth"], type=int, default=None),),
                    options_from_cli=lambda values: {"depth": values.get("tuned_depth")},
                )
            )

    register_plugin(Tuned(), "tuned")
    import ksmith_core.cli as cli_module

    cli_module._built = False  # rebuild with the throwaway plugin's option
    cli = build()
    runs = tmp_path / "runs"
    args = ["evolve", str(toy_problem[0]), "--budget", "1", "--device", "cpu", "--tuned-depth", "3"]
    cli.main([*args, "--proposer", "tuned", "--run-dir", str(runs)], standalone_mode=False)
    engine = Engine.resume(runs)
    assert engine.run.config.proposer_options == {"depth": 3}
    engine.close()

"""The HTML run report: built from a real run store, self-contained, and rendered by a real browser."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from run_builders import broken_verdict, ok_verdict

from ksmith_core.model import Status
from ksmith_report.report import write_report


def _finished_run(make_run, source):
    """A small run: a seed, an improving line with failures around it, two islands, a re-validated best."""
    sr = make_run("report-run", islands=2, budget=12)
    seed = sr.seed(source(block=1024, warps=4, stages=2), ok_verdict(1.0, eval_seconds=3.0))
    sr.run.store.set_meta("seed_id", seed.id)
    step1 = sr.child(
        seed, source(block=2048, warps=4, stages=2), ok_verdict(1.25), edit="BLOCK_SIZE 1024 -> 2048"
    )
    sr.child(seed, source(block=64), broken_verdict(Status.COMPILE_ERROR, "CompilationError: <bad> arange"))
    step2 = sr.child(step1, source(block=2048, warps=8, stages=2), ok_verdict(1.6), edit="num_warps 4 -> 8")
    sr.child(
        step2, source(block=2048, warps=8, stages=5), broken_verdict(Status.INCORRECT, "max abs error 0.3")
    )
    sr.child(seed, source(block=512, warps=2), ok_verdict(0.8), island=1, edit="BLOCK_SIZE 1024 -> 512")
    sr.child(seed, source(block=512, hints=True), broken_verdict(Status.TIMEOUT, "180 s"), island=1)
    best = sr.child(step2, source(block=2048, warps=8, stages=3), ok_verdict(1.9), edit="num_stages 2 -> 3")
    sr.run.store.record_event("revalidation", ok_verdict(1.85).to_dict(), best.id)
    sr.run.store.record_event("run_end", {"reason": "budget", "evaluations": sr.run.evaluations})
    return sr, seed, best


def test_report_holds_every_piece(make_run, source, tmp_path):
    sr, seed, best = _finished_run(make_run, source)
    out = write_report(sr.run.store.path, tmp_path / "out" / "report.html")
    assert out == tmp_path / "out" / "report.html"
    page = out.read_text(encoding="utf-8")

    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<svg") >= 5  # two curves, two island maps and a legend, failures
    assert "Interpreted timings" in page and "interpreted CPU timings" in page
    assert "1.900x vs eager PyTorch" in page and "Re-validated with fresh seeds: ok" in page
    # Lineage of the best: seed -> step1 -> step2 -> best, each edit with its gain.
    lineage = page[page.index("Lineage of the best") : page.index("Archive map")]
    for edit, gain in [
        ("BLOCK_SIZE 1024 -&gt; 2048", "+25.0%"),
        ("num_warps 4 -&gt; 8", "+28.0%"),
        ("num_stages 2 -&gt; 3", "+18.7%"),
    ]:
        assert edit in lineage and gain in lineage
    assert lineage.index(seed.id) < lineage.index(best.id)
    assert "BLOCK_SIZE 1024 -&gt; 512" not in lineage  # not an ancestor of the best
    assert "island 0" in page and "island 1" in page
    for status in ("compile_error", "incorrect", "timeout"):
        assert status in page
    assert "3 of 8 evaluations failed" in page
    # Escaped, never interpreted as markup; the diff shows the edits from the seed.
    assert "&lt;bad&gt;" in page and "<bad>" not in page
    assert "offsets &lt; n" in page
    assert (
        '<span class="add">+        _relu_kernel[grid](x, out, n, BLOCK_SIZE=2048, num_warps=8, num_stages=3)</span>'
        in page
    )
    assert (
        '<span class="del">-        _relu_kernel[grid](x, out, n, BLOCK_SIZE=1024, num_warps=4, num_stages=2)</span>'
        in page
    )
    # Self-contained: nothing to fetch.
    for outside in ("http://", "https://", "<script", "<link", "src="):
        assert outside not in page


def test_report_names_a_best_set_aside_after_failing_revalidation_and_shows_the_one_that_held(
    make_run, source, tmp_path
):
    sr, seed, best = _finished_run(make_run, source)
    flaky = sr.child(best, source(block=4096, warps=8, stages=3), ok_verdict(2.4), edit="BLOCK_SIZE -> 4096")
    sr.run.store.record_event(
        "revalidation", broken_verdict(Status.INCORRECT, "max abs error 0.2").to_dict(), flaky.id
    )
    page = write_report(sr.run.store.path, tmp_path / "report.html").read_text(encoding="utf-8")
    assert f"<b>Best: {best.id}</b>" in page and "1.900x vs eager PyTorch" in page
    assert "Re-validated with fresh seeds: ok" in page  # the re-validation of the best, not the last one
    assert f"Set aside: {flaky.id} passed its evaluation at 2.400x vs eager" in page
    assert "failed re-validation (incorrect)" in page


def test_report_of_a_run_where_nothing_worked(make_run, source):
    sr = make_run("nothing-worked", islands=2)
    seed = sr.seed(source(), broken_verdict(Status.RUNTIME_ERROR, "IndexError: out of bounds"))
    sr.child(seed, source(block=64), broken_verdict())
    out = write_report(sr.run.store.path)
    assert out == sr.run.store.path / "report.html"
    page = out.read_text(encoding="utf-8")
    assert "No candidate was accepted" in page
    assert "IndexError: out of bounds" in page
    assert "No archive records" in page
    assert "2 of 2 evaluations failed" in page


def test_tiny_interpreted_speedups_get_a_readable_scale(make_run, source):
    sr = make_run("interpreted", islands=1)
    seed = sr.seed(source(), ok_verdict(0.0012))
    sr.child(seed, source(block=2048), ok_verdict(0.0015))
    page = write_report(sr.run.store.path).read_text(encoding="utf-8")
    assert "eager 1.0x is far above this scale" in page
    assert ">1.5e-3<" in page and "0.0015x vs eager PyTorch" in page  # tiny values stay readable
    assert "No candidate beat eager PyTorch" in page


def test_report_of_a_run_without_evaluations(make_run):
    sr = make_run("empty")
    page = write_report(sr.run.store.path).read_text(encoding="utf-8")
    assert "No evaluations yet" in page and "No candidate was accepted" in page


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium installed (apt-get install chromium)")
def test_report_renders_in_headless_chromium(make_run, source, tmp_path):
    sr, _, _ = _finished_run(make_run, source)
    report = write_report(sr.run.store.path)
    png = tmp_path / "report.png"
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={png}",
        "--window-size=1200,2000",
        report.resolve().as_uri(),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 40_000  # a blank page of this size compresses to a few kilobytes
    Path(sr.run.store.path / "report.png").write_bytes(data)  # kept beside the run for a human to look at


def test_report_says_why_the_run_stopped_and_where_to_look(make_run, source):
    sr = make_run("barren", islands=1)
    seed = sr.seed(source(), ok_verdict(1.0))
    sr.run.store.set_meta("seed_id", seed.id)
    sr.child(seed, source(block=2048), ok_verdict(0.8))
    # What the engine does at the end of each step: the proposer's and its own drops, one transaction.
    sr.run.note_dropped("no_edit_block", "from abc: it holds no SEARCH/REPLACE block <none>")
    sr.run.note_dropped("no_edit_block", "from abc: it holds no SEARCH/REPLACE block either")
    sr.run.note_dropped("duplicate", "def was proposed earlier in the run")
    sr.run.store.record_dropped([{**d, "by": "proposer", "proposer": "llm"} for d in sr.run.take_dropped()])
    sr.run.store.record_event(
        "run_end", {"reason": "exhausted", "detail": "no new candidate in 8 steps in a row", "evaluations": 2}
    )
    page = write_report(sr.run.store.path).read_text(encoding="utf-8")
    assert (
        "stopped: exhausted (no new candidate in 8 steps in a row) -- 3 dropped: 2 no edit block, 1 duplicate"
        in page
    )
    assert "Where to look." in page
    assert "no candidate beat the seed (1 evaluated after it: all were slower)" in page
    assert "3 generations never reached evaluation" in page
    dropped = page[page.index("Dropped before evaluation") : page.index("Best kernel")]
    assert "<td>no edit block</td><td>no_edit_block</td><td>2</td>" in dropped
    assert "from abc: it holds no SEARCH/REPLACE block either" in dropped  # the latest detail
    assert "&lt;none&gt;" not in dropped and "<none>" not in page  # only the latest, escaped


def test_a_run_that_found_a_faster_kernel_has_nothing_dropped_to_explain(make_run, source):
    sr, _, _ = _finished_run(make_run, source)
    page = write_report(sr.run.store.path).read_text(encoding="utf-8")
    assert "Every generation reached evaluation: nothing was dropped." in page
    assert "Where to look." not in page
    assert "stopped: budget" in page

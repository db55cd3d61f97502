"""The codemod of ``ksmith patch`` on candidates written here, against the real SGLang module (in process)."""

from __future__ import annotations

import pytest

from ksmith_upstream.extract import extract
from ksmith_upstream.importer import render_seed
from ksmith_upstream.patching import codemod
from ksmith_upstream.recipes import recipe_for
from ksmith_upstream.source import UpstreamError

LAUNCHER = "normal_decode_set_metadata"


@pytest.fixture(scope="module")
def setup(upstream):
    ex = extract(upstream["sglang"], LAUNCHER)
    recipe = recipe_for("sglang", LAUNCHER)
    return ex, recipe, render_seed(ex, recipe)


def test_new_helpers_and_imports_come_along(setup):
    ex, recipe, seed = setup
    old = "tl.cdiv(seq_len + SEQ_LEN_DELTA, PAGE_SIZE)"
    assert old in seed
    candidate = seed.replace(old, "_pages_of(seq_len + SEQ_LEN_DELTA, PAGE_SIZE)").replace(
        "num_stages=3,", "num_stages=max(1, math.floor(2.5)),"
    )
    helper = "@triton.jit\ndef _pages_of(n, size: tl.constexpr):\n    return (n + size - 1) // size\n\n\n"
    candidate = candidate.replace(
        "@triton.jit\ndef _fused_decode_metadata_kernel(",
        helper + "@triton.jit\ndef _fused_decode_metadata_kernel(",
    )
    candidate = candidate.replace("import torch\n", "import math\nimport torch\n", 1)

    mod = codemod(ex, recipe, candidate, recipe.sizes)
    code = mod.new_module
    compile(code, "metadata.py", "exec")
    assert "\ndef _pages_of(n, size: tl.constexpr):" in code  # a new name keeps its name
    assert "_pages_of(seq_len + SEQ_LEN_DELTA, PAGE_SIZE)" in code
    assert "\nimport math\n" in code
    assert "num_stages=max(1, math.floor(2.5))" in code
    assert mod.changed == ["_fused_decode_metadata_kernel", "_pages_of", LAUNCHER]
    # The original kernel and launcher body are still there, unchanged, as the fallback.
    original = ex.file.read_text(encoding="utf-8")
    assert original.count("tl.cdiv(seq_len + SEQ_LEN_DELTA, PAGE_SIZE)") == code.count(old)


def test_a_changed_signature_is_refused(setup):
    ex, recipe, seed = setup
    candidate = seed.replace("    zero_tail: bool = False,\n):", "    zero_tail: bool = True,\n):", 1)
    assert candidate != seed
    with pytest.raises(UpstreamError, match="changed its signature"):
        codemod(ex, recipe, candidate, recipe.sizes)


def test_a_changed_harness_is_refused(setup):
    ex, recipe, seed = setup
    candidate = seed.replace(
        "        super().__init__()\n", "        super().__init__()\n        self.extra = 1\n"
    )
    with pytest.raises(UpstreamError, match="changed the problem harness"):
        codemod(ex, recipe, candidate, recipe.sizes)


def test_the_unchanged_seed_is_refused(setup):
    ex, recipe, seed = setup
    with pytest.raises(UpstreamError, match="unchanged; there is nothing to patch"):
        codemod(ex, recipe, seed, recipe.sizes)


def test_rebase_carries_only_what_evolution_changed(setup, tmp_path):
    """Upstream later edits a helper the candidate left alone: the rebased patch keeps upstream's new helper."""
    from ksmith_upstream.source import PROJECTS, resolve_source

    ex, recipe, seed = setup
    module = tmp_path / "sglang" / "kernels" / "ops" / "attention" / "metadata.py"
    module.parent.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("", encoding="utf-8")
    old_helper = "    page_ids = token_ids // PAGE_SIZE\n"
    text = ex.file.read_text(encoding="utf-8")
    assert old_helper in text
    module.write_text(
        text.replace(old_helper, "    page_ids = token_ids // PAGE_SIZE  # upstream later\n"), "utf-8"
    )
    newer = extract(resolve_source(PROJECTS["sglang"], tmp_path), LAUNCHER)

    candidate = seed.replace("num_stages=3,", "num_stages=2,")
    mod = codemod(newer, recipe, candidate, recipe.sizes, baseline=seed)
    assert mod.changed == [LAUNCHER]
    assert "_resolve_metadata_page_ids_evolved" not in mod.new_module
    assert "# upstream later" in mod.new_module
    # Without the baseline the old helper would be mistaken for an evolved one and carried back in.
    naive = codemod(newer, recipe, candidate, recipe.sizes)
    assert "_resolve_metadata_page_ids" in naive.changed


def test_dead_code_in_the_candidate_is_not_carried(setup):
    ex, recipe, seed = setup
    dead = "\n\n@triton.jit\ndef _unused_kernel(x):\n    pass\n\n\nUNUSED_TABLE = {1: 2}\n"
    candidate = seed.replace("num_stages=3,", "num_stages=2,") + dead
    mod = codemod(ex, recipe, candidate, recipe.sizes)
    assert mod.changed == [LAUNCHER]
    assert "_unused_kernel" not in mod.new_module and "UNUSED_TABLE" not in mod.new_module
    with pytest.raises(UpstreamError, match="unchanged; there is nothing to patch"):
        codemod(ex, recipe, seed + dead, recipe.sizes)

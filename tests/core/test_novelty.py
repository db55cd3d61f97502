"""Near-duplicate fingerprints: layout and local names do not count, constants and structure do."""

from __future__ import annotations

from ksmith_core.novelty import fingerprint, is_near_duplicate

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, scale, BLOCK_SIZE: tl.constexpr):
    """Multiply by a scalar."""
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * scale, mask=mask)


def launch(x, out, scale):
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, scale, BLOCK_SIZE=1024, num_warps=4)
'''


def test_comments_docstrings_and_layout_do_not_count():
    relaid = (
        KERNEL.replace('    """Multiply by a scalar."""\n', "")
        .replace(
            "    pid = tl.program_id(0)\n",
            "    # which block this program handles\n    pid = tl.program_id( 0 )\n\n",
        )
        .replace("x * scale", "(x * scale)")
        .replace("    ", "  ")
    )
    assert relaid != KERNEL
    assert fingerprint(relaid) == fingerprint(KERNEL)


def test_renamed_locals_do_not_count():
    renamed = KERNEL.replace("offsets", "idx").replace("mask", "in_bounds").replace("pid", "block_id")
    renamed = renamed.replace("in_bounds=in_bounds", "mask=in_bounds")  # the keyword is tl.load's, kept
    assert fingerprint(renamed) == fingerprint(KERNEL)


def test_tunable_constants_count():
    assert fingerprint(KERNEL.replace("num_warps=4", "num_warps=8")) != fingerprint(KERNEL)
    assert fingerprint(KERNEL.replace("BLOCK_SIZE=1024", "BLOCK_SIZE=2048")) != fingerprint(KERNEL)
    hinted = KERNEL.replace(
        "mask=mask)\n    tl.store", 'mask=mask, eviction_policy="evict_first")\n    tl.store'
    )
    assert fingerprint(hinted) != fingerprint(KERNEL)
    assert fingerprint(hinted.replace("evict_first", "evict_last")) != fingerprint(hinted)


def test_parameters_globals_and_operations_count():
    assert fingerprint(KERNEL.replace("BLOCK_SIZE", "BLOCK")) != fingerprint(KERNEL)  # a constexpr parameter
    assert fingerprint(KERNEL.replace("x * scale", "x + scale")) != fingerprint(KERNEL)
    assert fingerprint(KERNEL.replace("tl.program_id(0)", "tl.program_id(1)")) != fingerprint(KERNEL)
    assert fingerprint(KERNEL.replace("_scale_kernel", "_other_kernel")) != fingerprint(KERNEL)


def test_swapping_the_roles_of_locals_counts_only_when_behaviour_changes():
    base = "def f(x, y):\n    a = x\n    b = y\n    return a - b\n"
    alpha = "def f(x, y):\n    b = x\n    a = y\n    return b - a\n"
    flipped = "def f(x, y):\n    a = x\n    b = y\n    return b - a\n"
    assert fingerprint(alpha) == fingerprint(base)
    assert fingerprint(flipped) != fingerprint(base)


def test_closures_keep_their_names():
    outer_a = "def f(x):\n    a = x\n    return lambda: a\n"
    outer_b = "def f(x):\n    b = x\n    return lambda: b\n"
    assert fingerprint(outer_a) != fingerprint(outer_b)  # not renamed: left exactly as written


def test_unparsable_sources_still_ignore_comments_and_layout():
    broken = "def f(:\n    return 1  # oops\n"
    assert fingerprint(broken) == fingerprint("def f(:\n        return 1\n")
    assert fingerprint(broken) != fingerprint("def f(:\n    return 2\n")


def test_is_near_duplicate():
    known = {fingerprint(KERNEL)}
    assert is_near_duplicate(KERNEL.replace("offsets", "offs"), known)
    assert not is_near_duplicate(KERNEL.replace("num_warps=4", "num_warps=2"), known)
    assert not is_near_duplicate(KERNEL, set())

"""Why a library entry's ``triton_op`` fails ``opcheck`` at static shapes (issue 13; GPU, docs/benchmarks.md §11h).

The decode step's down + residual entry (K 8192) stays an opaque custom op because ``opcheck``'s
``test_aot_dispatch_static`` finds its outputs under AOTAutograd's trace different from eager's, even when the
entry is the harvested seed, a kernel with no atomics. This loads one exported entry and prints: the check's
full message, whether two eager calls agree bit for bit, and how far the traced call is from the eager one and
from the reference.

    python benchmarks/inline_check_probe.py LIBRARY_ENTRY_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def main() -> int:
    from ksmith_compile import library as lib

    directory = Path(sys.argv[1])
    entry = lib.load_entry(directory)
    print("inline_reason:", entry.inline_reason or "(inlined)")
    op = lib._register_inline_op(entry, f"probe_{directory.name}")
    args = lib._check_inputs(entry)
    for attempt in range(2):  # twice: a verdict that changes between attempts is nondeterminism
        report = torch.library.opcheck(op, tuple(args), test_utils=lib._STATIC_CHECKS, raise_exception=False)
        for name, value in report.items():
            print(f"attempt {attempt} {name}: {'SUCCESS' if value == 'SUCCESS' else str(value)[:1500]}")
    with torch.no_grad():
        first, second = op(*args), op(*args)
        print(
            "two eager calls equal:",
            torch.equal(first, second),
            "max diff",
            (first - second).abs().max().item(),
        )
        inlined, fallbacks = entry.inlined, entry.fallbacks
        traced = torch.compile(lambda *a: op(*a), backend="aot_eager", fullgraph=True)(*args)
        print(
            "traced: kernel traced",
            entry.inlined - inlined,
            "times, reference",
            entry.fallbacks - fallbacks,
            "times (fallbacks count eager calls only)",
        )
        print("aot_eager vs eager: max diff", (traced.float() - first.float()).abs().max().item())
        inputs, state = lib._split(entry, args)
        want = torch.func.functional_call(entry.reference, state, tuple(inputs))
        print("eager vs reference: max diff", (first.float() - want.float()).abs().max().item())
        print("aot_eager vs reference: max diff", (traced.float() - want.float()).abs().max().item())
        print("accepts(args):", entry.accepts(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
